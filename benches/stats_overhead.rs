//! The cost of the live stats: two pools of CartPole-v1 (1024 envs, 2 workers), one with
//! stats on and one with stats off, stepped in alternating rounds so machine noise hits
//! both alike; prints each one's median steps/s and the ratio.
//!
//! `cargo bench --bench stats_overhead`. Arguments:
//! `[rounds] [seconds per round] [num_envs]`, default `20 0.25 1024`.

use shmenv::Pool;
use std::time::{Duration, Instant};

fn round(pool: &mut Pool, actions: &[i64], slice: Duration) -> f64 {
    let start = Instant::now();
    let mut steps = 0usize;
    while start.elapsed() < slice {
        for _ in 0..16 {
            pool.step(actions).expect("step");
            steps += actions.len();
        }
    }
    steps as f64 / start.elapsed().as_secs_f64()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // The pools' workers are this bench program, re-executed.
    shmenv::worker::serve_if_worker(shmenv::worker::Registry::with_builtins);
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let rounds: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(20);
    let secs: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(0.25);
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let build = |stats: bool| {
        let mut pool = Pool::builder("CartPole-v1")
            .num_envs(n)
            .num_workers(2)
            .seed(0)
            .stats(stats)
            .build()
            .expect("pool");
        pool.reset().unwrap();
        pool
    };
    let (mut on, mut off) = (build(true), build(false));
    let actions: Vec<i64> = (0..n).map(|i| (i % 2) as i64).collect();
    let slice = Duration::from_secs_f64(secs);
    round(&mut on, &actions, slice);
    round(&mut off, &actions, slice);
    let (mut r_on, mut r_off, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let a = round(&mut on, &actions, slice);
        let b = round(&mut off, &actions, slice);
        r_on.push(a);
        r_off.push(b);
        ratios.push(a / b);
    }
    let (m_on, m_off, m_ratio) = (median(&mut r_on), median(&mut r_off), median(&mut ratios));
    println!("CartPole-v1, {n} envs, 2 workers, {rounds} alternating rounds of {secs} s");
    println!("  stats on:  {:.2}M steps/s (median)", m_on / 1e6);
    println!("  stats off: {:.2}M steps/s (median)", m_off / 1e6);
    println!(
        "  on / off:  {m_ratio:.3} (median of per-round ratios): overhead {:.1}%",
        100.0 * (1.0 - m_ratio)
    );
}
