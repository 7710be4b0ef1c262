//! `shmenv soak`: step continuously while killing random workers under the Restart policy;
//! print RSS, fds and workers over time, to check that nothing grows.

use crate::args::{self, Envs};
use crate::limits::{self, ThreadError};
use crate::stepping::fmt_rate;
use crate::Error;
use shmenv::worker::Registry;
use shmenv::{DType, FailurePolicy};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `shmenv soak` arguments.
#[derive(clap::Args)]
pub struct SoakArgs {
    #[command(flatten)]
    envs: Envs,
    /// Number of worker processes.
    #[arg(long, default_value_t = 2, value_parser = args::count, allow_negative_numbers = true)]
    workers: usize,
    /// How long to run.
    #[arg(long, default_value_t = 1.0, value_parser = args::soak_minutes, allow_negative_numbers = true)]
    minutes: f64,
    /// Seconds between kills of a random worker (SIGKILL, usually mid-step).
    #[arg(long, default_value_t = 1.0, value_parser = args::kill_every, allow_negative_numbers = true)]
    kill_every: f64,
    /// Seconds between report lines.
    #[arg(long, default_value_t = 10.0, value_parser = args::report_every, allow_negative_numbers = true)]
    report_every: f64,
    /// Results per batch: fewer than --num-envs soaks async mode (send/recv).
    #[arg(long, value_parser = args::count, allow_negative_numbers = true)]
    batch_size: Option<usize>,
    /// The trainer steps a shard of the envs itself beside the workers (sync mode).
    #[arg(long)]
    trainer_shard: bool,
}

/// A process's resident memory in KiB (VmRSS).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// A thread that SIGKILLs one of `pids` every `every` until `stop`; returns the kills.
fn killer(
    pids: Arc<Mutex<Vec<u32>>>,
    stop: Arc<AtomicBool>,
    every: Duration,
) -> Result<JoinHandle<u64>, ThreadError> {
    limits::spawn_thread("shmenv-killer", "the soak's killer thread", move || {
        let mut rng = shmenv::worker::rng::Pcg64::from_seed(7);
        let mut kills = 0u64;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(every);
            let current = pids.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let victim = current[(rng.next_f64() * current.len() as f64) as usize % current.len()];
            // SAFETY: kill has no memory preconditions; the pid is one of our workers.
            if unsafe { libc::kill(victim as i32, libc::SIGKILL) } == 0 {
                kills += 1;
            }
        }
        kills
    })
}

/// Runs `shmenv soak`.
pub fn run(registry: &Registry, args: SoakArgs) -> Result<(), Error> {
    let builder = args
        .envs
        .builder()?
        .num_workers(args.workers)
        .seed(0)
        .batch_size(args.batch_size.unwrap_or(args.envs.num_envs))
        .failure_policy(FailurePolicy::Restart { max_restarts: u32::MAX });
    let builder = match args.trainer_shard {
        true => builder.trainer_shard(shmenv::worker::trainer_shard(registry.clone())),
        false => builder,
    };
    let mut pool = builder.build()?;
    if pool.spec().action.dtype() != DType::I64 {
        return Err("soak steps envs with integer (Discrete) actions: pick such an env".into());
    }
    let n = pool.num_envs();
    let pids = Arc::new(Mutex::new(pool.worker_pids().to_vec()));
    let stop = Arc::new(AtomicBool::new(false));
    let killer = killer(pids.clone(), stop.clone(), Duration::from_secs_f64(args.kill_every))?;
    let me = std::process::id();
    let fd_count = || std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let started = Instant::now();
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let every = Duration::from_secs_f64(args.report_every);
    let mut next_report = every;
    let mut steps = 0u64;
    let mut samples: Vec<(u64, usize)> = Vec::new();
    println!(
        "{:>8} {:>14} {:>10} {:>9} {:>10} {:>5} {:>8}",
        "seconds", "env steps", "steps/s", "restarts", "rss KiB", "fds", "workers"
    );
    // Async: every env stays in flight; each round resends the envs of the last batch.
    let mut ids: Vec<usize> = pool.reset()?.env_ids().iter().map(|&e| e as usize).collect();
    let actions: Vec<i64> = (0..n).map(|i| (i % 2) as i64).collect();
    let mut last = (Instant::now(), 0u64);
    while started.elapsed() < total {
        for _ in 0..16 {
            if pool.is_async() {
                pool.send(&actions[..ids.len()], &ids)?;
                ids = pool.recv()?.env_ids().iter().map(|&e| e as usize).collect();
                steps += ids.len() as u64;
            } else {
                pool.step(&actions)?;
                steps += n as u64;
            }
        }
        *pids.lock().unwrap_or_else(|p| p.into_inner()) = pool.worker_pids().to_vec();
        if started.elapsed() >= next_report {
            next_report += every;
            let (rss, fds) = (rss_kib(me), fd_count());
            samples.push((rss, fds));
            let rate = (steps - last.1) as f64 / last.0.elapsed().as_secs_f64();
            last = (Instant::now(), steps);
            let restarts = pool.restarts().iter().sum::<u32>();
            let (secs, workers) = (started.elapsed().as_secs_f64(), pool.worker_pids().len());
            println!(
                "{secs:>8.0} {steps:>14} {:>10} {restarts:>9} {rss:>10} {fds:>5} {workers:>8}",
                fmt_rate(rate)
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let kills = killer.join().map_err(|_| "the killer thread panicked")?;
    let restarts: u32 = pool.restarts().iter().sum();
    drop(pool);
    let (first, last) =
        (samples.first().copied().unwrap_or_default(), samples.last().copied().unwrap_or_default());
    let max_rss = samples.iter().map(|s| s.0).max().unwrap_or(0);
    println!(
        "soak done: {:.1} min, {steps} env steps, {kills} kills, {restarts} restarts; RSS {} -> {} KiB (max {max_rss}), fds {} -> {}",
        started.elapsed().as_secs_f64() / 60.0,
        first.0,
        last.0,
        first.1,
        last.1
    );
    Ok(())
}
