//! Worker CPU affinity: `Auto` gives each worker a core of its own when there are enough,
//! `None` leaves placement to the scheduler, `Cores` pins as asked.

mod common;

use common::{builder, Watchdog};
use shmenv::{CpuAffinity, WaitStrategy};
use std::time::Duration;

fn allowed(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string()
}

#[test]
fn workers_are_pinned_as_configured() {
    let _w = Watchdog::new("affinity", Duration::from_secs(60));
    let mine = allowed(std::process::id());
    let cores = std::thread::available_parallelism().unwrap().get();

    let pool =
        builder("CartPole-v1").num_envs(4).num_workers(1).cpu_affinity(CpuAffinity::None).build().unwrap();
    assert_eq!(allowed(pool.worker_pids()[0]), mine, "unpinned workers keep the trainer's mask");

    let pool = builder("CartPole-v1")
        .num_envs(4)
        .num_workers(1)
        .cpu_affinity(CpuAffinity::Cores(vec![0]))
        .build()
        .unwrap();
    assert_eq!(allowed(pool.worker_pids()[0]), "0");

    // A fixed wait strategy: with `Auto` the pool pins only onto free cores, and a test
    // machine may be busy (see tests/contention.rs for that rule).
    let pool = builder("CartPole-v1")
        .num_envs(4)
        .num_workers(cores.min(4))
        .wait(WaitStrategy::Block)
        .build()
        .unwrap();
    let masks: Vec<String> = pool.worker_pids().iter().map(|&p| allowed(p)).collect();
    assert!(masks.iter().all(|m| m.parse::<usize>().is_ok()), "Auto pins each worker to one core: {masks:?}");
    let distinct: std::collections::BTreeSet<&String> = masks.iter().collect();
    assert_eq!(distinct.len(), masks.len(), "Auto gives each worker its own core: {masks:?}");

    // More workers than cores: Auto does not pin.
    let pool = builder("CartPole-v1").num_envs(cores + 1).num_workers(cores + 1).build().unwrap();
    assert!(pool.worker_pids().iter().all(|&p| allowed(p) == mine));
}
