//! Hardening: replacements that die during their own restart, restarts bounded by the step
//! timeout, the memory check before the region is created, workers out of memory, the
//! bound on the worker count, and helper processes an env starts.

mod common;

use common::watchdog::{alive, grandchildren};
use common::{builder, child_pids, signal, AsyncDriver, Failed, Watchdog};
use serde_json::json;
use shmenv::{BuildError, FailurePolicy, PoolFailure, WorkerExit};
use shmenv_engine::launch::WorkerCommand;
use shmenv_engine::pool::{MemoryRoom, MAX_WORKERS};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The tests count this process's children: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A thread that SIGKILLs one of this process's children (a worker, often a replacement
/// in the middle of its start) every `every`, until the returned flag is set.
fn serial_killer(every: Duration) -> (Arc<AtomicBool>, std::thread::JoinHandle<usize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut kills = 0;
        while !flag.load(Ordering::Relaxed) {
            std::thread::sleep(every);
            if let Some(&pid) = child_pids().get(kills % 2) {
                signal(pid, libc::SIGKILL);
                kills += 1;
            }
        }
        kills
    });
    (stop, thread)
}

#[test]
fn replacements_killed_during_their_restart_are_replaced_again() {
    let _serial = serial();
    let _w = Watchdog::new("restart storm", Duration::from_secs(180));
    for batch in [8, 4] {
        let mut pool = builder("CartPole-v1")
            .num_envs(8)
            .num_workers(2)
            .batch_size(batch)
            .seed(1)
            .failure_policy(FailurePolicy::Restart { max_restarts: 100_000 })
            .build()
            .unwrap();
        let reference = builder("CartPole-v1").num_envs(8).num_workers(1).seed(1).build().unwrap();
        let mut driver = AsyncDriver::new(reference, 10);
        let (stop, killer) = serial_killer(Duration::from_millis(2));
        let started = Instant::now();
        let mut calls = 0;
        if pool.is_async() {
            driver.start(&mut pool).unwrap();
        } else {
            pool.reset().unwrap();
        }
        while started.elapsed() < Duration::from_millis(1500) {
            let result = if pool.is_async() {
                driver.round(&mut pool)
            } else {
                pool.step(&[1i64; 8]).map(|_| ()).map_err(Failed::failed)
            };
            result.unwrap_or_else(|e| panic!("batch {batch}, call {calls}: {e}"));
            calls += 1;
        }
        stop.store(true, Ordering::Relaxed);
        let kills = killer.join().unwrap();
        for _ in 0..20 {
            let result = if pool.is_async() {
                driver.round(&mut pool)
            } else {
                pool.step(&[0i64; 8]).map(|_| ()).map_err(Failed::failed)
            };
            result.unwrap_or_else(|e| panic!("batch {batch}, after the storm: {e}"));
        }
        let restarts: u32 = pool.restarts().iter().sum();
        eprintln!("batch {batch}: {kills} kills, {restarts} restarts, {calls} calls");
        assert!(restarts >= 3, "batch {batch}: only {restarts} restarts for {kills} kills");
        drop(pool);
        assert!(child_pids().is_empty(), "child processes left behind");
    }
}

#[test]
fn a_restart_budget_spent_by_deaths_during_restarts_ends_the_pool_promptly() {
    let _serial = serial();
    let _w = Watchdog::new("restart budget", Duration::from_secs(120));
    let mut pool = builder("CartPole-v1")
        .num_envs(8)
        .num_workers(2)
        .failure_policy(FailurePolicy::Restart { max_restarts: 5 })
        .build()
        .unwrap();
    pool.reset().unwrap();
    let (stop, killer) = serial_killer(Duration::from_millis(2));
    let err = loop {
        if let Err(e) = pool.step(&[1i64; 8]) {
            break e;
        }
    };
    stop.store(true, Ordering::Relaxed);
    killer.join().unwrap();
    assert!(
        matches!(
            err.failure(),
            Some(PoolFailure::WorkerDied { exit: WorkerExit::Signal(libc::SIGKILL), .. })
        ),
        "{err}"
    );
    assert_eq!(pool.restarts().iter().sum::<u32>(), 5);
    drop(pool);
    assert!(child_pids().is_empty());
}

#[test]
fn restarts_honour_the_step_timeout() {
    let _serial = serial();
    let _w = Watchdog::new("restart timeout", Duration::from_secs(120));
    // A worker command whose second start of each worker never reports (it sleeps).
    let marks = std::env::temp_dir().join(format!("shmenv-restart-marks-{}", std::process::id()));
    std::fs::create_dir_all(&marks).unwrap();
    let script = format!(
        "m={}/w$2; if [ -e $m ]; then exec sleep 1000; fi; : > $m; exec {} \"$@\"",
        marks.display(),
        common::WORKER
    );
    let command = WorkerCommand::new("sh").arg("-c").arg(script).arg("sh");
    let timeout = Duration::from_millis(500);
    let mut pool = shmenv::Pool::builder("CartPole-v1")
        .worker_command(command)
        .num_envs(4)
        .num_workers(2)
        .step_timeout(timeout)
        .failure_policy(FailurePolicy::Restart { max_restarts: 10 })
        .build()
        .unwrap();
    pool.reset().unwrap();
    signal(pool.worker_pids()[0], libc::SIGKILL);
    let started = Instant::now();
    let err = (0..100).find_map(|_| pool.step(&[1i64; 4]).err()).expect("the restart fails");
    let took = started.elapsed();
    let message = err.to_string();
    assert!(matches!(err.failure(), Some(PoolFailure::WorkerFailed { worker: 0, .. })), "{message}");
    assert!(message.contains("did not start again within"), "{message}");
    // It waited the step timeout or twice the pool's start (whichever is longer), as the
    // message says: not the 60 s start-up timeout.
    let waited = waited_for(&message);
    assert!(
        waited < Duration::from_secs(60) && took >= waited,
        "the replacement was given {waited:?} (said the error, after {took:?}); the start-up timeout is 60 s: {message}"
    );
    drop(pool);
    std::fs::remove_dir_all(&marks).unwrap();
    assert!(child_pids().is_empty(), "child processes left behind");
}

/// The wait named in a "did not start again within 1.2s" message.
fn waited_for(message: &str) -> Duration {
    let text = message.split("within ").nth(1).and_then(|t| t.split_whitespace().next()).unwrap_or("");
    let number = |suffix: &str| text.strip_suffix(suffix).and_then(|n| n.parse::<f64>().ok());
    match (number("ms"), number("s")) {
        (Some(ms), _) => Duration::from_secs_f64(ms / 1e3),
        (None, Some(s)) => Duration::from_secs_f64(s),
        _ => panic!("no wait named in {message:?}"),
    }
}

/// This process's peak resident memory (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/self/status");
    line.split_whitespace().nth(1).and_then(|k| k.parse::<u64>().ok()).unwrap() * 1024
}

#[test]
fn a_region_larger_than_the_memory_is_refused_before_it_exists() {
    let _serial = serial();
    let _w = Watchdog::new("memory check", Duration::from_secs(120));
    let room = MemoryRoom::read().room().expect("/proc/meminfo is readable");
    // Rows of 512 MiB (an env may have up to 1 GiB), two result blocks: enough envs to need
    // more than the room.
    let num_envs = (room / (1 << 30) + 2) as usize;
    let peak_before = peak_rss();
    let err = builder("Burn-v0")
        .config(json!({ "obs_shape": [512, 1024, 1024], "obs_dtype": "u8" }))
        .num_envs(num_envs)
        .num_workers(1)
        .build()
        .unwrap_err();
    let peak_after = peak_rss();
    let message = err.to_string();
    assert!(matches!(err, BuildError::NotEnoughMemory { .. }), "{message}");
    for part in
        ["GiB", "MemAvailable is", &format!("for {num_envs} envs"), "fewer envs", "raise the memory limit"]
    {
        assert!(message.contains(part), "{part:?} missing: {message}");
    }
    // Nothing of the region was touched (a region being pre-faulted would raise the peak
    // by up to the memory there is, a GiB per env here).
    let grew = peak_after.saturating_sub(peak_before);
    assert!(grew < 256 << 20, "the peak resident memory grew by {grew} bytes while the pool was refused");
    assert!(child_pids().is_empty(), "workers left behind");
}

#[test]
fn a_worker_out_of_memory_dies_and_never_hangs() {
    let _serial = serial();
    let _w = Watchdog::new("worker oom", Duration::from_secs(120));
    for fault in ["oom", "oom_in_panic"] {
        // The trainer's environment, and a worker command that asks for backtraces itself.
        for backtrace in [None, Some("1"), Some("full")] {
            let mut command = WorkerCommand::new(common::WORKER);
            if let Some(b) = backtrace {
                command = command.env("RUST_BACKTRACE", b);
            }
            let mut pool = shmenv::Pool::builder("Burn-v0")
                .worker_command(command)
                .config(json!({ "fault": fault, "fault_step": 2 }))
                .num_envs(2)
                .num_workers(1)
                .build()
                .unwrap();
            pool.reset().unwrap();
            let err = (0..5).find_map(|_| pool.step(&[0i64; 2]).err()).expect("the fault fires").failed();
            match err {
                PoolFailure::WorkerDied { exit: WorkerExit::Signal(libc::SIGABRT), ref output, .. } => {
                    // (A backtrace, when asked for, pushes that line out of the tail.)
                    let said = output.contains("memory allocation of");
                    assert!(said || backtrace.is_some(), "{fault} {backtrace:?}: {output}");
                }
                PoolFailure::EnvPanicked { .. } => {}
                other => panic!("{fault} {backtrace:?}: {other}"),
            }
            drop(pool);
        }
    }
    assert!(child_pids().is_empty());
}

#[test]
fn the_worker_count_is_bounded() {
    let _serial = serial();
    let _w = Watchdog::new("worker bound", Duration::from_secs(60));
    let err = builder("CartPole-v1").num_envs(5000).num_workers(5000).build().unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, BuildError::InvalidArgument(_)), "{message}");
    assert!(
        message.contains("5000")
            && message.contains(&format!("between 1 and {MAX_WORKERS} (the most workers per pool)")),
        "{message}"
    );
    // Refused by the argument check, before any worker was spawned.
    assert!(child_pids().is_empty());
    // The start-up timeout covers spawning: a deadline that passes while spawning ends the
    // start with StartupTimeout, not later.
    let err = builder("CartPole-v1")
        .num_envs(64)
        .num_workers(64)
        .startup_timeout(Duration::from_millis(1))
        .build()
        .unwrap_err();
    assert!(matches!(err, BuildError::StartupTimeout { .. }), "{err}");
    assert!(child_pids().is_empty(), "workers left behind");
}

#[test]
fn an_env_helper_process_ends_with_the_pool() {
    let _serial = serial();
    let _w = Watchdog::new("helper processes", Duration::from_secs(60));
    for policy in ["close", "drop", "restart"] {
        let mut pool = builder("Burn-v0")
            .config(json!({ "fault": "spawn_helper", "fault_step": 1 }))
            .num_envs(2)
            .num_workers(1)
            .failure_policy(FailurePolicy::Restart { max_restarts: 1 })
            .build()
            .unwrap();
        pool.reset().unwrap();
        pool.step(&[0i64; 2]).unwrap();
        let worker = pool.worker_pids()[0];
        let helpers = grandchildren(worker);
        assert_eq!(helpers.len(), 2, "{policy}: one helper per env");
        match policy {
            "close" => drop(pool.close()),
            "drop" => drop(pool),
            _ => {
                signal(worker, libc::SIGKILL);
                pool.step(&[0i64; 2]).unwrap();
                assert_eq!(pool.restarts(), &[1]);
                wait_gone(&helpers, policy);
                drop(pool);
            }
        }
        wait_gone(&helpers, policy);
    }
    assert!(child_pids().is_empty());
}

/// Waits (bounded) until none of `pids` runs.
fn wait_gone(pids: &[u32], ctx: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| alive(p)) {
        assert!(Instant::now() < deadline, "{ctx}: helper processes {pids:?} still running");
        std::thread::sleep(Duration::from_millis(10));
    }
}
