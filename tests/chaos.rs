//! Chaos: 50 rounds of SIGKILLs at random moments (between steps, mid-step, mid-batch in
//! async mode), under the `Fail` policy: every round must end with `WorkerDied` naming the
//! killed worker, its pid and signal; then 50 rounds under `Restart` in sync mode and 50
//! in async mode: the pool keeps stepping, every env of the killed worker comes back as a
//! fresh episode, and every surviving env's stream is exactly a reference pool's. Then kill
//! storms (replacements killed mid-handshake), forked children that exit, close or step
//! their copy of a pool, and SIGSTOPped workers in async mode (replaced or reported within
//! twice the step timeout). Nothing may hang; no process or fd may be left.
//!
//! One test function, because counting this process's children and fds is only meaningful
//! when no other test runs beside it.

mod common;

use common::{builder, child_pids, open_fds, signal, AsyncDriver, Failed, Watchdog};
use serde_json::json;
use shmenv::worker::rng::Pcg64;
use shmenv::{FailurePolicy, PoolFailure, WorkerExit};
use std::io::Write;
use std::time::{Duration, Instant};

#[test]
fn random_kills_are_always_reported_and_nothing_leaks() {
    let _w = Watchdog::new("chaos", Duration::from_secs(240));
    // Panic messages to the real stderr as well: a panic that turns into an abort (a second
    // panic while unwinding) would otherwise take the harness's captured copy with it.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = writeln!(std::io::stderr(), "chaos: {info}");
        default_hook(info);
    }));
    // Warm-up: lazily opened fds (stderr clones, /proc handles) before the baseline.
    Watchdog::at("warm-up");
    drop(builder("CartPole-v1").num_envs(2).num_workers(1).build().unwrap());
    let fds = open_fds();
    // Another seed for longer local runs: SHMENV_CHAOS_SEED=n cargo test --test chaos.
    let seed = std::env::var("SHMENV_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(2026);
    let mut rng = Pcg64::from_seed(seed);
    let mut below = |n: u64| (rng.next_f64() * n as f64) as u64;
    kills_under_fail(&mut below);
    kills_under_restart_sync(&mut below);
    kills_under_restart_async(&mut below);
    replacements_killed_mid_handshake(&mut below);
    forked_children_exit_close_and_step(&mut below);
    stopped_workers_in_async_mode(&mut below);
    assert_eq!(open_fds(), fds, "fds leaked");
}

/// 50 kills under the `Fail` policy, in pools of random shapes (sync and async): every one
/// ends with `WorkerDied` naming the killed worker, its pid and signal.
fn kills_under_fail(below: &mut impl FnMut(u64) -> u64) {
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
        Watchdog::at(&ctx);
        let mut kill_at = None;
        let result = (|| -> Result<(), PoolFailure> {
            // Async: every env stays in flight; each round trip resends the envs of the
            // last batch.
            let mut ids: Vec<usize> =
                pool.reset().map_err(Failed::failed)?.env_ids().iter().map(|&e| e as usize).collect();
            let mut k = 0;
            loop {
                if k == steps_before {
                    // The kill lands while the pool is (most likely) inside a step.
                    let killer = std::thread::spawn(move || {
                        std::thread::sleep(delay);
                        signal(pid, libc::SIGKILL);
                        Instant::now()
                    });
                    kill_at = Some(killer);
                }
                if pool.is_async() {
                    pool.send(&actions[..ids.len()], &ids).map_err(Failed::failed)?;
                    ids =
                        pool.recv().map_err(Failed::failed)?.env_ids().iter().map(|&e| e as usize).collect();
                } else {
                    pool.step(&actions).map_err(Failed::failed)?;
                }
                k += 1;
            }
        })();
        let noticed = Instant::now();
        let Some(killer) = kill_at else { panic!("{ctx}: failed before the kill: {result:?}") };
        let killed = killer.join().unwrap();
        worst = worst.max(noticed.saturating_duration_since(killed));
        match result {
            Err(PoolFailure::WorkerDied { worker, pid: p, exit, .. }) => {
                assert_eq!((worker, p, exit), (victim, pid, WorkerExit::Signal(libc::SIGKILL)), "{ctx}");
            }
            other => panic!("{ctx}: expected WorkerDied, got {other:?}"),
        }
        assert!(
            matches!(pool.step(&actions).unwrap_err().failure(), Some(PoolFailure::Closed { .. })),
            "{ctx}"
        );
        drop(pool);
        assert!(child_pids().is_empty(), "{ctx}: child processes left behind");
    }
    eprintln!("50 random kills reported; longest kill-to-error time {worst:?}");
}

/// Under Restart (sync mode): the pool keeps going; the envs of the killed worker come back
/// as fresh episodes, every other env's stream is the one of a pool where nothing died (a
/// reference pool stepped alongside).
fn kills_under_restart_sync(below: &mut impl FnMut(u64) -> u64) {
    for round in 0..50u64 {
        let workers = 2 + below(2) as usize;
        let envs = workers * (1 + below(2) as usize);
        let step_us = [0, 100, 2000][below(3) as usize];
        let make = |policy| {
            builder("Burn-v0")
                .config(json!({ "step_us": step_us }))
                .num_envs(envs)
                .num_workers(workers)
                .seed(1000 + round)
                .failure_policy(policy)
                .build()
                .unwrap()
        };
        let mut pool = make(FailurePolicy::Restart { max_restarts: 1 });
        let mut reference = make(FailurePolicy::Fail);
        let victim = below(workers as u64) as usize;
        let (pid, victims) = (pool.worker_pids()[victim], pool.shard(victim));
        let kill_before = below(10) as usize;
        let delay = Duration::from_micros(below(3000));
        let ctx = format!("restart round {round}: {envs} envs, {workers} workers, {step_us} us, kill worker {victim} at step {kill_before} + {delay:?}");
        Watchdog::at(&ctx);
        pool.reset().unwrap();
        reference.reset().unwrap();
        let mut restarted = Vec::new();
        for t in 0..15 {
            let killer = (t == kill_before).then(|| {
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    signal(pid, libc::SIGKILL);
                })
            });
            let actions = vec![(t % 2) as i64; envs];
            let batch = pool.step(&actions).unwrap_or_else(|e| panic!("{ctx}: step {t} failed: {e}"));
            restarted.extend_from_slice(batch.restarted_envs());
            let got = common::batch_rows(&batch);
            let want = common::batch_rows(&reference.step(&actions).unwrap());
            for e in (0..envs).filter(|e| !victims.contains(e)) {
                assert_eq!(got[e], want[e], "{ctx}: step {t}, surviving env {e} diverged");
            }
            if let Some(k) = killer {
                k.join().unwrap();
            }
        }
        // The kill may land after the last step; then the next call would restart it.
        if restarted.is_empty() {
            pool.step(&vec![0i64; envs]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        }
        assert_eq!(pool.restarts()[victim], 1, "{ctx}");
        drop(pool);
        drop(reference);
        assert!(child_pids().is_empty(), "{ctx}: child processes left behind");
    }
    eprintln!("50 random kills under Restart (sync): every pool kept stepping, survivors untouched");
}

/// Under Restart in async mode: the same, with the kill landing anywhere in the ring's life
/// (mid-step, mid-claim, mid-write, between calls). Every env of the killed worker comes
/// back once as a fresh episode; every other env's stream is the reference's.
fn kills_under_restart_async(below: &mut impl FnMut(u64) -> u64) {
    for round in 0..50u64 {
        let workers = 2 + below(2) as usize;
        let envs = workers * (1 + below(3) as usize);
        let batch = 1 + below(envs as u64 - 1) as usize;
        let depth = 2 + below(2) as usize;
        let step_us = [0, 100, 2000][below(3) as usize];
        let seed = 5000 + round;
        let config = json!({ "step_us": step_us });
        let mut pool = builder("Burn-v0")
            .config(config.clone())
            .num_envs(envs)
            .num_workers(workers)
            .batch_size(batch)
            .ring_depth(depth)
            .seed(seed)
            .failure_policy(FailurePolicy::Restart { max_restarts: 1 })
            .build()
            .unwrap();
        let reference = builder("Burn-v0").num_envs(envs).num_workers(1).seed(seed).build().unwrap();
        let mut driver = AsyncDriver::new(reference, 400);
        let victim = below(workers as u64) as usize;
        let (pid, victims) = (pool.worker_pids()[victim], pool.shard(victim));
        let kill_before = below(10) as usize;
        let delay = Duration::from_micros(below(3000));
        let ctx = format!("async restart round {round}: {envs} envs, {workers} workers, batch {batch}, depth {depth}, {step_us} us, kill worker {victim} after {kill_before} rounds + {delay:?}");
        Watchdog::at(&ctx);
        driver.start(&mut pool).unwrap_or_else(|e| panic!("{ctx}: reset failed: {e}"));
        let mut killer = None;
        let mut t = 0;
        let started = Instant::now();
        while !driver.all_restarted(victims.clone()) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{ctx}: the killed worker's envs never came back"
            );
            if t == kill_before {
                killer = Some(std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    signal(pid, libc::SIGKILL);
                }));
            }
            driver.round(&mut pool).unwrap_or_else(|e| panic!("{ctx}: round {t} failed: {e}"));
            t += 1;
        }
        killer.expect("killed").join().unwrap();
        for _ in 0..10 {
            driver.round(&mut pool).unwrap_or_else(|e| panic!("{ctx}: after the restart: {e}"));
        }
        for e in 0..envs {
            assert_eq!(driver.restarted[e], usize::from(victims.contains(&e)), "{ctx}: env {e}");
        }
        assert_eq!(pool.restarts()[victim], 1, "{ctx}");
        drop(pool);
        assert!(child_pids().is_empty(), "{ctx}: child processes left behind");
    }
    eprintln!("50 random kills under Restart (async): every pool kept going, survivors untouched");
}

/// Kills every 1-4 ms, so that many land on replacements in the middle of their start-up
/// handshake: the pool (budget left) keeps every call succeeding, in both modes.
fn replacements_killed_mid_handshake(below: &mut impl FnMut(u64) -> u64) {
    for round in 0..10u64 {
        let batch_mode = round % 2 == 0;
        // Async storms alternate 3 and 2 workers (rounds 1, 5, 9 and 3, 7): with several
        // workers replaced in one recovery, fill rows go across workers (a storm with 3
        // failed about a third of the time while their stale env ids outlived them).
        let workers = if batch_mode { 2 + below(2) as usize } else { 3 - (round as usize / 2) % 2 };
        let envs = workers * 2;
        let batch = if batch_mode { envs } else { envs / 2 };
        let mut pool = builder("CartPole-v1")
            .num_envs(envs)
            .num_workers(workers)
            .batch_size(batch)
            .seed(9000 + round)
            .failure_policy(FailurePolicy::Restart { max_restarts: 100_000 })
            .build()
            .unwrap();
        let every = Duration::from_millis(1 + below(4));
        let ctx = format!(
            "storm round {round}: {envs} envs, {workers} workers, batch {batch}, a kill every {every:?}"
        );
        Watchdog::at(&ctx);
        // The storm has an end of its own: a call that is still replacing workers when it
        // ends then finishes (under load, a kill every millisecond can outpace every
        // replacement's start-up for as long as it lasts).
        let storm_end = Instant::now() + Duration::from_millis(400);
        let killer = std::thread::spawn(move || {
            let mut kills = 0usize;
            while Instant::now() < storm_end {
                std::thread::sleep(every);
                let pids = child_pids();
                if let Some(&pid) = pids.get(kills % pids.len().max(1)) {
                    signal(pid, libc::SIGKILL);
                    kills += 1;
                }
            }
            kills
        });
        let actions = vec![1i64; envs];
        let mut ids: Vec<usize> = pool
            .reset()
            .unwrap_or_else(|e| panic!("{ctx}: {e}"))
            .env_ids()
            .iter()
            .map(|&e| e as usize)
            .collect();
        let mut slowest = Duration::ZERO;
        // Through the storm, and one round after it.
        let mut after_storm = false;
        while !after_storm {
            after_storm = Instant::now() >= storm_end;
            let call = Instant::now();
            if pool.is_async() {
                pool.send(&actions[..ids.len()], &ids).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                ids = pool
                    .recv()
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"))
                    .env_ids()
                    .iter()
                    .map(|&e| e as usize)
                    .collect();
            } else {
                pool.step(&actions).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            }
            slowest = slowest.max(call.elapsed());
        }
        eprintln!("{ctx}: slowest call {slowest:?}");
        let kills = killer.join().unwrap();
        let restarts: u32 = pool.restarts().iter().sum();
        assert!(restarts as usize <= kills, "{ctx}: {restarts} restarts for {kills} kills");
        drop(pool);
        assert!(child_pids().is_empty(), "{ctx}: child processes left behind");
    }
    eprintln!("10 kill storms (replacements killed mid-handshake): every call succeeded");
}

/// Forked children of a trainer that exit, close or step their copy of the pool: the
/// parent's pool never notices.
fn forked_children_exit_close_and_step(below: &mut impl FnMut(u64) -> u64) {
    for round in 0..10u64 {
        let envs = 4;
        let batch = if below(2) == 0 { 4 } else { 2 };
        let mut pool = Some(
            builder("CartPole-v1")
                .num_envs(envs)
                .num_workers(2)
                .batch_size(batch)
                .seed(round)
                .build()
                .unwrap(),
        );
        pool.as_mut().unwrap().reset().unwrap();
        let what = below(3);
        Watchdog::at(&format!("fork round {round} ({what}, batch {batch}): forking"));
        let status = common::fork_and(&mut pool, move |mut copy| match what {
            0 => true, // exits: the copy is dropped with the child's memory
            1 => copy.close().iter().all(Option::is_none),
            _ => {
                matches!(
                    copy.step(&[1i64; 4]).map(|_| ()).unwrap_err().failure(),
                    Some(PoolFailure::ForeignProcess { .. })
                ) && matches!(
                    copy.recv().map(|_| ()).map(|_| ()).unwrap_err().failure(),
                    Some(PoolFailure::ForeignProcess { .. })
                )
            }
        });
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "fork round {round} ({what}): status {status:#x}"
        );
        let p = pool.as_mut().unwrap();
        let ctx = format!("fork round {round} ({what}, batch {batch})");
        Watchdog::at(&ctx);
        let ids = |b: shmenv::Batch<'_>| -> Vec<usize> { b.env_ids().iter().map(|&e| e as usize).collect() };
        // Async: the rest of the reset, then rounds of the last batch's envs.
        let mut last =
            if p.is_async() { ids(p.recv().unwrap_or_else(|e| panic!("{ctx}: {e}"))) } else { Vec::new() };
        for _ in 0..10 {
            if p.is_async() {
                p.send(&[1i64; 2], &last).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                last = ids(p.recv().unwrap_or_else(|e| panic!("{ctx}: {e}")));
            } else {
                p.step(&[1i64; 4]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            }
        }
        let exits = pool.take().unwrap().close();
        assert!(exits.iter().all(|e| *e == Some(WorkerExit::Code(0))), "fork round {round}: {exits:?}");
        assert!(child_pids().is_empty(), "fork round {round}: child processes left behind");
    }
    eprintln!("10 forked children exited, closed or stepped their copy: the parent's pools never noticed");
}

/// SIGSTOP of a random worker of a random async pool with a 300 ms step timeout, at a
/// random moment: under `Restart` it is replaced, under `Fail` the call reports a timeout
/// naming it, within twice the timeout either way.
fn stopped_workers_in_async_mode(below: &mut impl FnMut(u64) -> u64) {
    let timeout = Duration::from_millis(300);
    for round in 0..8u64 {
        let restart = round % 2 == 0;
        let workers = 2 + below(2) as usize;
        let envs = workers * (1 + below(3) as usize);
        let batch = 1 + below(envs as u64 - 1) as usize;
        let policy = if restart { FailurePolicy::Restart { max_restarts: 1 } } else { FailurePolicy::Fail };
        let building = Instant::now();
        let mut pool = builder("CartPole-v1")
            .num_envs(envs)
            .num_workers(workers)
            .batch_size(batch)
            .seed(round)
            .step_timeout(timeout)
            .failure_policy(policy)
            .build()
            .unwrap();
        // The control for how long a replacement's start may take on this machine now.
        let start_up = building.elapsed();
        let victim = below(workers as u64) as usize;
        let pid = pool.worker_pids()[victim];
        let ctx =
            format!("stop round {round}: {envs} envs, {workers} workers, batch {batch}, worker {victim}");
        Watchdog::at(&ctx);
        let stop_after = Duration::from_millis(below(100));
        let mut ids: Vec<usize> = pool.reset().unwrap().env_ids().iter().map(|&e| e as usize).collect();
        let (started, mut stopped_at) = (Instant::now(), None);
        let outcome = loop {
            if stopped_at.is_none() && started.elapsed() >= stop_after {
                signal(pid, libc::SIGSTOP);
                stopped_at = Some(Instant::now());
            }
            if restart && pool.restarts()[victim] == 1 {
                break Ok(());
            }
            let step = pool.send(&vec![0i64; ids.len()], &ids).map_err(Failed::failed).and_then(|()| {
                let batch = pool.recv().map_err(Failed::failed)?;
                Ok(batch.env_ids().iter().map(|&e| e as usize).collect::<Vec<usize>>())
            });
            match step {
                Ok(next) => ids = next,
                Err(e) => break Err(e),
            }
            let given = Duration::from_secs(20) + 10 * start_up;
            assert!(started.elapsed() < given, "{ctx}: the stopped worker went unnoticed for {given:?}");
        };
        let took = stopped_at.expect("stopped").elapsed();
        match outcome {
            Ok(()) => assert!(restart, "{ctx}"),
            Err(PoolFailure::Timeout { workers: hung, .. }) => {
                assert!(!restart && hung.contains(&victim), "{ctx}: {hung:?}")
            }
            Err(e) => panic!("{ctx}: {e}"),
        }
        // Noticed within twice the timeout; a replacement's start comes on top (the pool
        // waits for it up to twice its own start-up time: a debug build on a loaded machine
        // can take seconds), measured by this round's own start.
        assert!(
            took < 2 * timeout + 3 * start_up,
            "{ctx}: noticed after {took:?}, more than 2 x the step timeout ({timeout:?}) + 3 x this pool's \
             start-up time ({start_up:?}, measured in this round)"
        );
        drop(pool);
        assert!(child_pids().is_empty(), "{ctx}: child processes left behind");
    }
    eprintln!("8 stopped workers in async mode: each replaced or reported within twice the step timeout");
}
