//! Real processes, killed: a dead worker makes `step` fail with its name, envs and signal
//! instead of hanging; dropping a pool leaves no process, no fd and nothing in /dev/shm.
//! (Workers dying with their trainer is checked with the CLI as the trainer, in
//! `cli/tests/cli.rs`.)
//!
//! One test function runs the scenarios in order, because counting this process's
//! children and fds is only meaningful when no other test runs beside it.

mod common;

use common::watchdog::alive;
use common::{builder, child_pids, dev_shm_entries, open_fds, signal, Failed, Watchdog};
use serde_json::json;
use shmenv::{PoolFailure, WorkerExit};
use std::time::{Duration, Instant};

fn kill(pid: u32, sig: i32) {
    assert!(signal(pid, sig), "process {pid} is gone");
}

fn sigkill_between_steps() {
    let mut pool = builder("CartPole-v1").num_envs(6).num_workers(3).seed(0).build().unwrap();
    pool.reset().unwrap();
    pool.step(&[0i64; 6]).unwrap();
    let victim = pool.worker_pids()[1];
    kill(victim, libc::SIGKILL);
    let err = pool.step(&[0i64; 6]).unwrap_err().failed();
    match &err {
        PoolFailure::WorkerDied { worker, pid, env_ids, exit, .. } => {
            assert_eq!((*worker, *pid, env_ids.clone()), (1, victim, 2..4));
            assert_eq!(*exit, WorkerExit::Signal(libc::SIGKILL));
        }
        other => panic!("expected WorkerDied, got {other:?}"),
    }
    assert!(err.to_string().contains("killed by signal 9"), "{err}");
    assert!(matches!(
        pool.step(&[0i64; 6]).map(|_| ()).unwrap_err().failure(),
        Some(PoolFailure::Closed { .. })
    ));
}

fn sigkill_mid_step() {
    // Each step burns 20 ms of CPU, so the kill lands while workers are stepping.
    let mut pool =
        builder("Burn-v0").config(json!({"step_us": 20000})).num_envs(2).num_workers(2).build().unwrap();
    pool.reset().unwrap();
    let victim = pool.worker_pids()[0];
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(5));
        kill(victim, libc::SIGKILL);
    });
    let mut result = Ok(());
    for _ in 0..50 {
        if let Err(e) = pool.step(&[0i64; 2]) {
            result = Err(e.failed());
            break;
        }
    }
    killer.join().unwrap();
    assert!(matches!(result, Err(PoolFailure::WorkerDied { worker: 0, .. })), "{result:?}");
}

fn sigkill_in_async_mode() {
    let mut pool = builder("Burn-v0")
        .config(json!({"step_us": 2000}))
        .num_envs(4)
        .num_workers(2)
        .batch_size(2)
        .build()
        .unwrap();
    let ids: Vec<usize> = pool.reset().unwrap().env_ids().iter().map(|&e| e as usize).collect();
    kill(pool.worker_pids()[1], libc::SIGKILL);
    let mut result = pool.send(&[0i64, 0], &ids).map_err(Failed::failed);
    for _ in 0..20 {
        if result.is_err() {
            break;
        }
        result = pool
            .recv()
            .map(|b| b.env_ids().iter().map(|&e| e as usize).collect::<Vec<_>>())
            .map_err(Failed::failed)
            .and_then(|ids| pool.send(&vec![0i64; ids.len()], &ids).map_err(Failed::failed));
    }
    assert!(matches!(result, Err(PoolFailure::WorkerDied { worker: 1, .. })), "{result:?}");
}

/// An interrupt check (what Ctrl-C sets in a Python trainer) ends a long wait with
/// `Interrupted`, closes the pool and stops its workers, in sync and async mode.
fn interrupt_check_ends_a_wait() {
    for batch_size in [4, 2] {
        let mut pool = builder("Burn-v0")
            .config(json!({"step_us": 200_000}))
            .num_envs(4)
            .num_workers(2)
            .batch_size(batch_size)
            .build()
            .unwrap();
        let pids = pool.worker_pids().to_vec();
        pool.reset().unwrap();
        let start = Instant::now();
        pool.set_interrupt_check(move || start.elapsed() > Duration::from_millis(50));
        let err = if batch_size == 4 {
            pool.step(&[0i64; 4]).unwrap_err().failed()
        } else {
            pool.recv().unwrap(); // the other half of the reset
            pool.send(&[0i64; 4], &[0, 1, 2, 3]).unwrap();
            pool.recv().unwrap_err().failed()
        };
        assert!(matches!(err, PoolFailure::Interrupted), "{err:?}");
        // The workers were stopped with the pool (killed, at the latest, after the grace).
        assert!(pids.iter().all(|&p| !alive(p)), "workers left behind: {pids:?}");
        assert!(matches!(
            pool.step(&[0i64; 4]).map(|_| ()).unwrap_err().failure(),
            Some(PoolFailure::Closed { .. })
        ));
    }
}

/// Hang detection: an env that never returns makes the step time out, naming its worker
/// and envs; the pool closes and its workers are stopped (the hung one killed).
fn hung_env_times_out() {
    for batch_size in [4, 2] {
        let mut pool = builder("Burn-v0")
            .config(json!({"fault": "hang", "fault_step": 3, "fault_seed": 103}))
            .num_envs(4)
            .num_workers(2)
            .seed(100)
            .batch_size(batch_size)
            .step_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let pids = pool.worker_pids().to_vec();
        let err = if batch_size == 4 {
            pool.reset().unwrap();
            pool.step(&[0i64; 4]).unwrap();
            pool.step(&[0i64; 4]).unwrap();
            pool.step(&[0i64; 4]).unwrap_err().failed()
        } else {
            pool.reset().unwrap();
            pool.recv().unwrap();
            let mut outcome = Ok(());
            for _ in 0..4 {
                if let Err(e) = pool.send(&[0i64; 4], &[0, 1, 2, 3]).map_err(Failed::failed).and_then(|()| {
                    pool.recv().map_err(Failed::failed)?;
                    pool.recv().map(|_| ()).map_err(Failed::failed)
                }) {
                    outcome = Err(e);
                    break;
                }
            }
            outcome.unwrap_err()
        };
        match &err {
            PoolFailure::Timeout { workers, env_ids, waited } => {
                assert!(workers.contains(&1) && !workers.contains(&0), "{err}");
                assert!(env_ids.contains(&3), "{err}");
                assert_eq!(*waited, Duration::from_secs(1));
            }
            other => panic!("expected Timeout, got {other:?}"),
        }
        assert!(err.to_string().contains("step timeout"), "{err}");
        assert!(pids.iter().all(|&p| !alive(p)), "workers left behind: {pids:?}");
        assert!(matches!(
            pool.step(&[0i64; 4]).map(|_| ()).unwrap_err().failure(),
            Some(PoolFailure::Closed { .. })
        ));
    }
}

fn worker_exit_and_abort_are_reported() {
    for (fault, expected) in [("exit", WorkerExit::Code(17)), ("abort", WorkerExit::Signal(libc::SIGABRT))] {
        let config = json!({"fault": fault, "fault_step": 2, "fault_seed": 1});
        let mut pool = builder("Burn-v0").config(config).num_envs(2).num_workers(2).seed(0).build().unwrap();
        pool.reset().unwrap();
        pool.step(&[0i64; 2]).unwrap();
        match pool.step(&[0i64; 2]).map(|_| ()).map_err(Failed::failed) {
            Err(err @ PoolFailure::WorkerDied { worker: 1, .. }) => {
                let PoolFailure::WorkerDied { exit, output, .. } = &err else { unreachable!() };
                assert_eq!(*exit, expected, "{fault}");
                // The worker's last words travel with the error.
                let said = format!("Burn-v0: fault {fault} injected at step 2 (seed 1)");
                assert!(output.contains(&said), "{fault}: {output:?}");
                assert!(err.to_string().contains(&said), "{err}");
            }
            other => panic!("{fault}: expected WorkerDied of worker 1, got {other:?}"),
        }
    }
}

/// A thousand pools built, stepped and then closed or dropped: afterwards the caller's
/// fd and child counts are what they were (checked at the end of the scenario list).
fn thousand_pools_leave_nothing_behind() {
    let started = Instant::now();
    for i in 0..1000u64 {
        let mut pool = builder("CartPole-v1").num_envs(2).num_workers(1).seed(i).build().unwrap();
        pool.reset().unwrap();
        pool.step(&[1i64; 2]).unwrap();
        if i % 2 == 0 {
            assert_eq!(pool.close(), vec![Some(WorkerExit::Code(0))]);
        } else {
            drop(pool);
        }
        assert!(child_pids().is_empty(), "pool {i} left a child behind");
    }
    eprintln!("1000 pools built, stepped and closed or dropped in {:.1?}", started.elapsed());
}

fn many_pools_leave_nothing_behind() {
    for i in 0..50 {
        let mut pool = builder("CartPole-v1").num_envs(4).num_workers(2).seed(i).build().unwrap();
        pool.reset().unwrap();
        pool.step(&[1i64; 4]).unwrap();
        assert_eq!(pool.close(), vec![Some(WorkerExit::Code(0)); 2], "workers must exit cleanly on close");
    }
}

/// An env that starts a helper process (which inherits the region's fd): closing or
/// dropping the pool ends the helper too, and so does a worker's death.
fn helper_processes_end_with_their_pool() {
    for close in [true, false] {
        let mut pool = builder("Burn-v0")
            .config(serde_json::json!({ "fault": "spawn_helper", "fault_step": 1 }))
            .num_envs(2)
            .num_workers(1)
            .build()
            .unwrap();
        pool.reset().unwrap();
        pool.step(&[0i64; 2]).unwrap();
        let helpers = common::watchdog::grandchildren(pool.worker_pids()[0]);
        assert_eq!(helpers.len(), 2, "one helper per env");
        if close {
            pool.close();
        } else {
            drop(pool);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while helpers.iter().any(|&p| common::watchdog::alive(p)) {
            assert!(Instant::now() < deadline, "helpers {helpers:?} outlived the pool");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn killed_workers_are_reported_and_nothing_leaks() {
    let _w = Watchdog::new("lifecycle", Duration::from_secs(300));
    // Warm up lazily-opened fds (stderr clones, /proc handles) before taking the baseline.
    many_pools_leave_nothing_behind();
    let fds = open_fds();
    let shm = dev_shm_entries();
    assert!(child_pids().is_empty());

    sigkill_between_steps();
    sigkill_mid_step();
    sigkill_in_async_mode();
    worker_exit_and_abort_are_reported();
    interrupt_check_ends_a_wait();
    hung_env_times_out();
    thousand_pools_leave_nothing_behind();
    helper_processes_end_with_their_pool();
    many_pools_leave_nothing_behind();

    assert_eq!(child_pids(), Vec::<u32>::new(), "child processes left behind");
    assert_eq!(open_fds(), fds, "fds leaked");
    assert_eq!(dev_shm_entries(), shm, "/dev/shm changed");
}
