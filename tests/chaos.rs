//! Chaos: 50 rounds of SIGKILLs at random moments (between steps, mid-step, mid-batch in
//! async mode), under the `Fail` policy: every round must end with `WorkerDied` naming the
//! killed worker, its pid and signal; nothing may hang; no process or fd may be left.
//!
//! One test function, because counting this process's children and fds is only meaningful
//! when no other test runs beside it.

mod common;

use common::{builder, child_pids, open_fds, Watchdog};
use serde_json::json;
use shmenv::worker::rng::Pcg64;
use shmenv::{StepError, WorkerExit};
use std::time::{Duration, Instant};

#[test]
fn random_kills_are_always_reported_and_nothing_leaks() {
    let _w = Watchdog::new("chaos", Duration::from_secs(240));
    // Warm-up: lazily opened fds (stderr clones, /proc handles) before the baseline.
    drop(builder("CartPole-v1").num_envs(2).num_workers(1).build().unwrap());
    let fds = open_fds();
    let mut rng = Pcg64::from_seed(2026);
    let mut below = |n: u64| (rng.next_f64() * n as f64) as u64;
    let mut worst = Duration::ZERO;
    for round in 0..50 {
        let workers = 1 + below(3) as usize;
        let envs = workers * (1 + below(3) as usize);
        let batch = if below(2) == 0 { envs } else { (envs / 2).max(1) };
        let step_us = [0, 50, 500][below(3) as usize];
        let mut pool = builder("Burn-v0")
            .config(json!({ "step_us": step_us }))
            .num_envs(envs)
            .num_workers(workers)
            .batch_size(batch)
            .seed(round)
            .build()
            .unwrap();
        let actions = vec![0i64; envs];
        let victim = below(workers as u64) as usize;
        let pid = pool.worker_pids()[victim];
        let steps_before = below(20);
        let delay = Duration::from_micros(below(3000));
        let ctx = format!("round {round}: {envs} envs, {workers} workers, batch {batch}, {step_us} us, kill worker {victim} after {steps_before} steps + {delay:?}");
        let mut kill_at = None;
        let result = (|| -> Result<(), StepError> {
            // Async: every env stays in flight; each round trip resends the envs of the
            // last batch.
            let mut ids: Vec<usize> = pool.reset()?.env_ids().iter().map(|&e| e as usize).collect();
            let mut k = 0;
            loop {
                if k == steps_before {
                    // The kill lands while the pool is (most likely) inside a step.
                    let killer = std::thread::spawn(move || {
                        std::thread::sleep(delay);
                        // SAFETY: kill has no memory preconditions.
                        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                        Instant::now()
                    });
                    kill_at = Some(killer);
                }
                if pool.is_async() {
                    pool.send(&actions[..ids.len()], &ids)?;
                    ids = pool.recv()?.env_ids().iter().map(|&e| e as usize).collect();
                } else {
                    pool.step(&actions)?;
                }
                k += 1;
            }
        })();
        let noticed = Instant::now();
        let Some(killer) = kill_at else { panic!("{ctx}: failed before the kill: {result:?}") };
        let killed = killer.join().unwrap();
        worst = worst.max(noticed.saturating_duration_since(killed));
        match result {
            Err(StepError::WorkerDied { worker, pid: p, exit, .. }) => {
                assert_eq!((worker, p, exit), (victim, pid, WorkerExit::Signal(libc::SIGKILL)), "{ctx}");
            }
            other => panic!("{ctx}: expected WorkerDied, got {other:?}"),
        }
        assert!(matches!(pool.step(&actions).unwrap_err(), StepError::Closed { .. }), "{ctx}");
        drop(pool);
        assert!(child_pids().is_empty(), "{ctx}: child processes left behind");
    }
    assert_eq!(open_fds(), fds, "fds leaked");
    eprintln!("50 random kills reported; longest kill-to-error time {worst:?}");
}
