//! `FailurePolicy::Restart`: a killed worker is started again, its envs come back as fresh,
//! truncated episodes named by `restarted_envs`, the other envs' trajectories are exactly
//! those of a pool where nothing died, and the restart budget is enforced. Nothing leaks.

mod common;

use common::{batch_rows, builder, signal, AsyncDriver, Failed, Watchdog};
use serde_json::json;
use shmenv::{FailurePolicy, PoolFailure};
use std::time::{Duration, Instant};

fn kill(pid: u32) {
    assert!(signal(pid, libc::SIGKILL), "worker {pid} is gone");
}

/// Waits until the supervisor has seen the death (the next call must find it idle-dead).
fn wait_dead(pid: u32) {
    for _ in 0..2000 {
        let gone = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')));
        if gone {
            std::thread::sleep(Duration::from_millis(20));
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("pid {pid} did not die");
}

#[test]
fn restarted_workers_rejoin_and_survivors_never_notice() {
    let _w = Watchdog::new("restart", Duration::from_secs(120));
    let policy = FailurePolicy::Restart { max_restarts: 2 };
    let mut pool =
        builder("CartPole-v1").num_envs(6).num_workers(3).seed(7).failure_policy(policy).build().unwrap();
    let mut reference = builder("CartPole-v1").num_envs(6).num_workers(3).seed(7).build().unwrap();
    pool.reset().unwrap();
    reference.reset().unwrap();
    let mut pids: Vec<u32> = pool.worker_pids().to_vec();
    for t in 0..30usize {
        let a: Vec<i64> = (0..6).map(|e| ((t * 7 + e * 3) % 2) as i64).collect();
        if t == 10 {
            let victim = pool.worker_pids()[1];
            kill(victim);
            wait_dead(victim); // dies between calls: the next call finds it
        }
        let batch = pool.step(&a).unwrap();
        let got = batch_rows(&batch);
        if t == 10 {
            assert_eq!(batch.restarted_envs(), &[2, 3]);
            assert!(batch.truncated().get(2) && batch.truncated().get(3));
            assert_eq!((batch.rewards()[2], batch.rewards()[3]), (0.0, 0.0));
        } else {
            assert!(batch.restarted_envs().is_empty(), "step {t}");
        }
        let want = batch_rows(&reference.step(&a).unwrap());
        for e in [0usize, 1, 4, 5] {
            assert_eq!(got[e], want[e], "step {t}: surviving env {e} diverged");
        }
    }
    assert_eq!(pool.restarts(), &[0, 1, 0]);
    pids.extend(pool.worker_pids());
    drop(pool);
    drop(reference);
    for pid in pids {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        assert!(state.is_none(), "worker {pid} left behind: {state:?}");
    }
}

#[test]
fn a_worker_killed_mid_step_is_restarted_within_the_same_call() {
    let _w = Watchdog::new("restart mid-step", Duration::from_secs(120));
    let policy = FailurePolicy::Restart { max_restarts: 2 };
    let mut pool = builder("Burn-v0")
        .config(json!({"step_us": 30_000}))
        .num_envs(4)
        .num_workers(2)
        .seed(3)
        .failure_policy(policy)
        .build()
        .unwrap();
    pool.reset().unwrap();
    pool.step(&[0i64; 4]).unwrap();
    for round in 1..=2u32 {
        let victim = pool.worker_pids()[0];
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            kill(victim);
        });
        let batch = pool.step(&[0i64; 4]).unwrap();
        killer.join().unwrap();
        assert_eq!(batch.restarted_envs(), &[0, 1], "round {round}");
        assert_eq!(batch.truncated().to_vec(), vec![true, true, false, false], "round {round}");
        assert_eq!(&batch.rewards()[..2], &[0.0, 0.0]);
        assert_eq!(batch.elapsed_steps(), &[0, 0, 2 * round, 2 * round]);
        assert_ne!(pool.worker_pids()[0], victim);
        assert_eq!(pool.restarts(), &[round, 0]);
        pool.step(&[0i64; 4]).unwrap();
    }
    // The budget is spent: the next death closes the pool as under Fail.
    kill(pool.worker_pids()[1]);
    let err = loop {
        match pool.step(&[0i64; 4]) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert!(matches!(err.failure(), Some(PoolFailure::WorkerDied { worker: 1, .. })), "{err:?}");
    assert!(matches!(
        pool.step(&[0i64; 4]).map(|_| ()).unwrap_err().failure(),
        Some(PoolFailure::Closed { .. })
    ));
}

fn async_pool(env: &str, config: serde_json::Value, seed: u64, max_restarts: u32) -> shmenv::Pool {
    builder(env)
        .config(config)
        .num_envs(8)
        .num_workers(2)
        .batch_size(3)
        .seed(seed)
        .failure_policy(FailurePolicy::Restart { max_restarts })
        .build()
        .unwrap()
}

fn sync_reference(env: &str, config: serde_json::Value, seed: u64) -> shmenv::Pool {
    builder(env).config(config).num_envs(8).num_workers(1).seed(seed).build().unwrap()
}

#[test]
fn async_mode_restarts_a_worker_that_died_between_calls() {
    let _w = Watchdog::new("async restart idle", Duration::from_secs(120));
    let mut pool = async_pool("CartPole-v1", json!({}), 11, 1);
    let mut driver = AsyncDriver::new(sync_reference("CartPole-v1", json!({}), 11), 200);
    driver.start(&mut pool).unwrap();
    for _ in 0..20 {
        driver.round(&mut pool).unwrap();
    }
    let victim = pool.worker_pids()[1];
    kill(victim);
    wait_dead(victim);
    while !driver.all_restarted(4..8) {
        driver.round(&mut pool).unwrap();
    }
    for _ in 0..40 {
        driver.round(&mut pool).unwrap();
    }
    // Every env of the dead worker came back exactly once as a fresh episode, seeded by the
    // documented rule (first restart: seed + i + 2^32); the others never noticed.
    assert_eq!(driver.restarted, vec![0, 0, 0, 0, 1, 1, 1, 1]);
    assert_eq!(pool.restarts(), &[0, 1]);
    let mut reseeded = sync_reference("CartPole-v1", json!({}), 11 + (1 << 32));
    let fresh = batch_rows(&reseeded.reset().unwrap());
    for (e, row) in &driver.restart_rows {
        assert_eq!(row.obs, fresh[*e].obs, "env {e}: not the documented reseed");
    }
    assert_ne!(pool.worker_pids()[1], victim);
}

#[test]
fn async_mode_restarts_a_worker_killed_while_the_trainer_waits() {
    let _w = Watchdog::new("async restart mid-recv", Duration::from_secs(120));
    let config = json!({"step_us": 20_000});
    let mut pool = async_pool("Burn-v0", config.clone(), 5, 2);
    let mut driver = AsyncDriver::new(sync_reference("Burn-v0", json!({}), 5), 400);
    driver.start(&mut pool).unwrap();
    for round in 1..=2usize {
        driver.round(&mut pool).unwrap();
        let victim = pool.worker_pids()[0];
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            kill(victim);
        });
        while driver.restarted[..4].iter().sum::<usize>() < 4 * round {
            driver.round(&mut pool).unwrap();
        }
        killer.join().unwrap();
        assert_eq!(pool.restarts(), &[round as u32, 0]);
    }
    for _ in 0..10 {
        driver.round(&mut pool).unwrap();
    }
    assert_eq!(driver.restarted, vec![2, 2, 2, 2, 0, 0, 0, 0]);
    // The budget is spent: the next death closes the pool as under Fail.
    kill(pool.worker_pids()[1]);
    let err = loop {
        if let Err(e) = driver.round(&mut pool) {
            break e;
        }
    };
    assert!(matches!(err, PoolFailure::WorkerDied { worker: 1, .. }), "{err:?}");
}

#[test]
fn a_hung_worker_is_killed_and_restarted_under_restart() {
    let _w = Watchdog::new("restart hung", Duration::from_secs(120));
    let mut pool = builder("Burn-v0")
        .config(json!({"fault": "hang", "fault_step": 3, "fault_seed": 103}))
        .num_envs(4)
        .num_workers(2)
        .seed(100)
        .step_timeout(Duration::from_secs(1))
        .failure_policy(FailurePolicy::Restart { max_restarts: 1 })
        .build()
        .unwrap();
    let hung_pid = pool.worker_pids()[1];
    pool.reset().unwrap();
    pool.step(&[0i64; 4]).unwrap();
    pool.step(&[0i64; 4]).unwrap();
    let batch = pool.step(&[0i64; 4]).unwrap(); // env 3 hangs here; its worker is replaced
    assert_eq!(batch.restarted_envs(), &[2, 3]);
    assert_eq!(batch.truncated().to_vec(), vec![false, false, true, true]);
    assert_eq!(pool.restarts(), &[0, 1]);
    assert_ne!(pool.worker_pids()[1], hung_pid);
    assert!(std::fs::read_to_string(format!("/proc/{hung_pid}/stat")).is_err(), "the hung worker was reaped");
    for _ in 0..5 {
        pool.step(&[0i64; 4]).unwrap(); // reseeded: env 3 no longer matches the fault seed
    }
}

/// A started async pool of 4 Burn-v0 envs on 2 workers whose env 3 hangs (`fault`:
/// "hang" in `step`, "hang_observe" while writing its row) at its third step, with a
/// 300 ms step timeout, and its driver.
fn hanging_async_pool(fault: &str, max_restarts: u32) -> (shmenv::Pool, AsyncDriver) {
    let mut pool = builder("Burn-v0")
        .config(json!({"fault": fault, "fault_step": 3, "fault_seed": 103, "step_us": 5000}))
        .num_envs(4)
        .num_workers(2)
        .batch_size(2)
        .seed(100)
        .step_timeout(Duration::from_millis(300))
        .failure_policy(FailurePolicy::Restart { max_restarts })
        .build()
        .unwrap();
    let reference = builder("Burn-v0").num_envs(4).num_workers(1).seed(100).build().unwrap();
    let mut driver = AsyncDriver::new(reference, 400);
    driver.start(&mut pool).unwrap();
    (pool, driver)
}

#[test]
fn async_mode_kills_and_restarts_a_hung_worker() {
    let _w = Watchdog::new("async restart hung", Duration::from_secs(120));
    let (mut pool, mut driver) = hanging_async_pool("hang", 1);
    let hung_pid = pool.worker_pids()[1];
    // Env 3 hangs at its third step. Envs 0 and 1 keep filling the batches, so no wait
    // times out: the trainer sees worker 1 in env code for longer than the step timeout,
    // kills and replaces it, and the others carry on.
    while !driver.all_restarted(2..4) {
        driver.round(&mut pool).unwrap();
    }
    for _ in 0..10 {
        driver.round(&mut pool).unwrap();
    }
    assert_eq!(driver.restarted, vec![0, 0, 1, 1]);
    assert_eq!(pool.restarts(), &[0, 1]);
    assert_ne!(pool.worker_pids()[1], hung_pid);
    assert!(std::fs::read_to_string(format!("/proc/{hung_pid}/stat")).is_err(), "the hung worker was reaped");
}

#[test]
fn async_mode_replaces_a_worker_hung_while_writing_a_claimed_row() {
    let _w = Watchdog::new("async restart hung in observe", Duration::from_secs(120));
    let (mut pool, mut driver) = hanging_async_pool("hang_observe", 1);
    // Env 3 hangs inside `observe`, i.e. while its worker holds a claimed row of a released
    // block: that batch can never complete until the row is refilled.
    while !driver.all_restarted(2..4) {
        driver.round(&mut pool).unwrap();
    }
    for _ in 0..10 {
        driver.round(&mut pool).unwrap();
    }
    assert_eq!(driver.restarted, vec![0, 0, 1, 1]);
    assert_eq!(pool.restarts(), &[0, 1]);
}

#[test]
fn async_mode_recovers_from_a_death_while_another_worker_hangs_mid_write() {
    let _w = Watchdog::new("async restart death + hang", Duration::from_secs(120));
    let (mut pool, mut driver) = hanging_async_pool("hang_observe", 2);
    // Worker 1 hangs in `observe` within ~30 ms; worker 0 is killed at 100 ms, before the
    // hang is overdue: the recovery of worker 0 must not wait forever for worker 1 to
    // settle; it finds it overdue, kills it, and replaces both.
    let victim = pool.worker_pids()[0];
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        kill(victim);
    });
    while !driver.all_restarted(0..4) {
        driver.round(&mut pool).unwrap();
    }
    killer.join().unwrap();
    for _ in 0..10 {
        driver.round(&mut pool).unwrap();
    }
    assert_eq!(driver.restarted, vec![1, 1, 1, 1]);
    assert_eq!(pool.restarts(), &[1, 1]);
}

#[test]
fn several_hung_workers_are_replaced_in_one_call() {
    let _w = Watchdog::new("restart several hung", Duration::from_secs(120));
    // Every env hangs at its third step: both workers at once, in sync and async mode.
    for batch in [4, 2] {
        let mut pool = builder("Burn-v0")
            .config(json!({"fault": "hang", "fault_step": 3}))
            .num_envs(4)
            .num_workers(2)
            .batch_size(batch)
            .seed(1)
            .step_timeout(Duration::from_millis(300))
            .failure_policy(FailurePolicy::Restart { max_restarts: 2 })
            .build()
            .unwrap();
        if batch == 4 {
            pool.reset().unwrap();
            pool.step(&[0i64; 4]).unwrap();
            pool.step(&[0i64; 4]).unwrap();
            let batch = pool.step(&[0i64; 4]).unwrap();
            assert_eq!(batch.restarted_envs(), &[0, 1, 2, 3]);
        } else {
            let reference = builder("Burn-v0").num_envs(4).num_workers(1).seed(1).build().unwrap();
            let mut driver = AsyncDriver::new(reference, 400);
            driver.start(&mut pool).unwrap();
            while !driver.all_restarted(0..4) {
                driver.round(&mut pool).unwrap();
            }
            assert_eq!(driver.restarted, vec![1, 1, 1, 1]);
        }
        assert_eq!(pool.restarts(), &[1, 1], "batch {batch}");
    }
}

#[test]
fn async_mode_replaces_two_workers_killed_at_once() {
    let _w = Watchdog::new("async restart two at once", Duration::from_secs(120));
    let mut pool = builder("Burn-v0")
        .config(json!({"step_us": 500}))
        .num_envs(9)
        .num_workers(3)
        .batch_size(4)
        .seed(9)
        .failure_policy(FailurePolicy::Restart { max_restarts: 2 })
        .build()
        .unwrap();
    let reference = builder("Burn-v0").num_envs(9).num_workers(1).seed(9).build().unwrap();
    let mut driver = AsyncDriver::new(reference, 2000);
    driver.start(&mut pool).unwrap();
    for _ in 0..5 {
        driver.round(&mut pool).unwrap();
    }
    let (a, b) = (pool.worker_pids()[0], pool.worker_pids()[2]);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2));
        kill(a);
        kill(b);
    });
    while !(driver.all_restarted(0..3) && driver.all_restarted(6..9)) {
        driver.round(&mut pool).unwrap();
    }
    killer.join().unwrap();
    for _ in 0..10 {
        driver.round(&mut pool).unwrap();
    }
    assert_eq!(driver.restarted, vec![1, 1, 1, 0, 0, 0, 1, 1, 1]);
    assert_eq!(pool.restarts(), &[1, 0, 1]);
}

/// Async pool of 8 CartPole envs on 2 workers with a 1 s step timeout; `batch` 4 (the
/// stopped worker's 4 envs could fill a batch) or 6 (they cannot: the other worker keeps
/// the batches full).
/// The step timeout of [`stoppable_async_pool`].
const STOP_TIMEOUT: Duration = Duration::from_secs(1);

/// The pool, and how long it took to start: the control for how long a replacement may
/// take on this machine now (a replacement is such a start; the pool waits for it up to
/// the step timeout or twice its own start-up time, whichever is longer).
fn stoppable_async_pool(batch: usize, policy: FailurePolicy) -> (shmenv::Pool, Duration) {
    let started = Instant::now();
    let pool = builder("CartPole-v1")
        .num_envs(8)
        .num_workers(2)
        .batch_size(batch)
        .seed(1)
        .step_timeout(STOP_TIMEOUT)
        .failure_policy(policy)
        .build()
        .unwrap();
    (pool, started.elapsed())
}

/// A stopped worker was noticed (and replaced) `took` after it stopped: within twice the
/// step timeout and three times the pool's own start-up time in this run (the control: a
/// busy machine slows both alike), not much later.
fn assert_noticed_in_time(took: Duration, start_up: Duration, what: &str) {
    let bound = 2 * STOP_TIMEOUT + 3 * start_up;
    assert!(
        took < bound,
        "{what} {took:?} after the stop: more than 2 x the step timeout ({STOP_TIMEOUT:?}) + 3 x this pool's \
         start-up time ({start_up:?}, measured in this run)"
    );
}

/// Sends every received env back and receives, until `until` says stop or `f` fails.
fn recv_loop(
    pool: &mut shmenv::Pool,
    mut until: impl FnMut(&shmenv::Pool) -> bool,
) -> Result<(), PoolFailure> {
    let mut ids: Vec<usize> =
        pool.reset().map_err(Failed::failed)?.env_ids().iter().map(|&e| e as usize).collect();
    while !until(pool) {
        pool.send(&vec![0i64; ids.len()], &ids).map_err(Failed::failed)?;
        ids = pool.recv().map_err(Failed::failed)?.env_ids().iter().map(|&e| e as usize).collect();
    }
    Ok(())
}

#[test]
fn async_mode_replaces_a_stopped_worker() {
    let _w = Watchdog::new("async SIGSTOP restart", Duration::from_secs(120));
    for batch in [4, 6] {
        let (mut pool, start_up) = stoppable_async_pool(batch, FailurePolicy::Restart { max_restarts: 3 });
        let stopped = pool.worker_pids()[0];
        let mut stopped_at = None;
        let started = Instant::now();
        recv_loop(&mut pool, |pool| {
            if stopped_at.is_none() && started.elapsed() > Duration::from_millis(200) {
                signal(stopped, libc::SIGSTOP);
                stopped_at = Some(Instant::now());
            }
            pool.restarts() == [1, 0]
        })
        .unwrap();
        let took = stopped_at.unwrap().elapsed();
        assert_noticed_in_time(took, start_up, &format!("batch {batch}: replaced"));
        assert_ne!(pool.worker_pids()[0], stopped);
        assert!(
            std::fs::read_to_string(format!("/proc/{stopped}/stat")).is_err(),
            "the stopped worker was reaped"
        );
    }
}

#[test]
fn async_mode_reports_a_stopped_worker_as_a_timeout() {
    let _w = Watchdog::new("async SIGSTOP fail", Duration::from_secs(120));
    for batch in [4, 6] {
        let (mut pool, start_up) = stoppable_async_pool(batch, FailurePolicy::Fail);
        let stopped = pool.worker_pids()[1];
        let mut stopped_at = None;
        let started = Instant::now();
        let err = recv_loop(&mut pool, |_| {
            if stopped_at.is_none() && started.elapsed() > Duration::from_millis(200) {
                signal(stopped, libc::SIGSTOP);
                stopped_at = Some(Instant::now());
            }
            false
        })
        .unwrap_err();
        let took = stopped_at.unwrap().elapsed();
        match err {
            PoolFailure::Timeout { workers, env_ids, .. } => {
                // The stopped worker is named. Worker 0 is named too when it holds actions
                // that have not come back: its rows wait committed in the batch worker 1
                // never completes. With batch 6 every batch needs worker 1's envs; with
                // batch 4 it happens when the stop came while a batch was half filled (seen
                // in CI, the other tests of this file loading the machine).
                assert!(workers.contains(&1), "batch {batch}: {workers:?}");
                assert!(workers.iter().all(|&w| w < 2), "batch {batch}: {workers:?}");
                // The envs named are those whose actions were with the workers (an env of
                // worker 1 sent while it was ahead may still wait in the trainer).
                assert!(env_ids.iter().any(|e| (4..8).contains(e)), "batch {batch}: {env_ids:?}");
                assert!(env_ids.iter().all(|&e| workers.contains(&(e / 4))), "batch {batch}: {env_ids:?}");
            }
            other => panic!("batch {batch}: expected a timeout, got {other}"),
        }
        assert_noticed_in_time(took, start_up, &format!("batch {batch}: reported"));
        drop(pool);
        assert!(
            std::fs::read_to_string(format!("/proc/{stopped}/stat")).is_err(),
            "the stopped worker was reaped"
        );
    }
}

#[test]
fn async_mode_notices_a_stopped_worker_while_the_others_keep_the_batches_full() {
    let _w = Watchdog::new("async SIGSTOP, batches full", Duration::from_secs(120));
    // Only env 0 of worker 0 stays in rotation: when worker 0 stops, env 0 is its one
    // action out, and worker 1's four envs could fill batches of 4 without it forever;
    // the fair scheduling holds them back once they are ahead, so the wait times out.
    let (mut pool, start_up) = stoppable_async_pool(4, FailurePolicy::Restart { max_restarts: 1 });
    let stopped = pool.worker_pids()[0];
    let keep = |e: &usize| *e == 0 || *e >= 4;
    let mut ids: Vec<usize> =
        pool.reset().unwrap().env_ids().iter().map(|&e| e as usize).filter(keep).collect();
    let (started, mut stopped_at) = (Instant::now(), None);
    while pool.restarts() != [1, 0] {
        pool.send(&vec![0i64; ids.len()], &ids).unwrap();
        if stopped_at.is_none() && started.elapsed() > Duration::from_millis(200) {
            // Env 0 is in flight now (just sent, or not yet back).
            signal(stopped, libc::SIGSTOP);
            stopped_at = Some(Instant::now());
        }
        let batch = pool.recv().unwrap();
        ids = batch.env_ids().iter().map(|&e| e as usize).filter(keep).collect();
        let given = Duration::from_secs(30) + 10 * start_up;
        assert!(started.elapsed() < given, "the stopped worker was not replaced in {given:?}");
    }
    let took = stopped_at.expect("stopped").elapsed();
    assert_noticed_in_time(took, start_up, "replaced");
    assert!(
        std::fs::read_to_string(format!("/proc/{stopped}/stat")).is_err(),
        "the stopped worker was reaped"
    );
}
