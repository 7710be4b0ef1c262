//! Plugins: envs from shared libraries implementing `worker/include/shmenv_env.h`, compiled
//! here from `examples/` and `tests/plugins/` with the system C/C++ compiler and loaded by
//! every worker process for itself. The C CartPole is CartPole-v1 step for step; a library
//! allowing one env per process runs one env per worker and refuses a second clearly;
//! loading errors and every kind of fault give the engine's typed errors, and faults are
//! recovered under the restart policy.

mod common;

use common::plugin_library::plugin_library;
use common::{batch_rows, builder, Failed, Watchdog};
use serde_json::json;
use shmenv::{AutoReset, BuildError, FailurePolicy, PoolFailure, WorkerExit};
use std::time::Duration;

fn actions(t: usize, n: usize) -> Vec<i64> {
    (0..n).map(|e| ((t * 7 + e * 3 + t / 5) % 2) as i64).collect()
}

#[test]
fn c_cartpole_is_cartpole_v1_step_for_step() {
    let _w = Watchdog::new("C cartpole vs CartPole-v1", Duration::from_secs(120));
    let lib = plugin_library("examples/c/cartpole.c");
    let n = 6;
    // Sync batches go through the library's batched call (`step_batch`), async ones through
    // `step` and `observe` per env; both autoreset modes.
    for (mode, batch_size) in [(AutoReset::NextStep, n), (AutoReset::SameStep, n), (AutoReset::NextStep, 2)] {
        let make =
            |id: &str| builder(id).num_envs(n).num_workers(2).batch_size(batch_size).autoreset(mode).seed(11);
        let mut c = make("CartPoleC-v1").plugin(&lib).build().unwrap();
        let mut rust = make("CartPole-v1").build().unwrap();
        assert_eq!(c.spec(), rust.spec(), "same spaces and time limit");
        let mut episodes = 0;
        if batch_size == n {
            assert_eq!(batch_rows(&c.reset().unwrap()), batch_rows(&rust.reset().unwrap()));
            for t in 0..700 {
                let a = actions(t, n);
                let (got, want) = (c.step(&a).unwrap(), rust.step(&a).unwrap());
                episodes += want.terminated().iter().filter(|&d| d).count();
                assert_eq!(batch_rows(&got), batch_rows(&want), "{mode:?} step {t}");
            }
        } else {
            episodes = async_episodes_alike(&mut c, &mut rust, n);
        }
        assert!(
            episodes > 10,
            "{mode:?}: the comparison covers episode ends and resets ({episodes} episodes)"
        );
    }
}

/// Steps two async pools of `n` envs with the same actions per env until 700 results of
/// each have come back, and checks each env's results are the same in both (batches may
/// group envs differently); returns the episodes that ended.
fn async_episodes_alike(c: &mut shmenv::Pool, rust: &mut shmenv::Pool, n: usize) -> usize {
    use std::collections::HashMap;
    let mut rows: [HashMap<usize, Vec<common::Row>>; 2] = Default::default();
    for (k, pool) in [c, rust].into_iter().enumerate() {
        pool.async_reset().unwrap();
        let mut steps = vec![0usize; n];
        while steps.iter().sum::<usize>() < 700 {
            let batch = pool.recv().unwrap();
            let ids: Vec<usize> = batch.env_ids().iter().map(|&e| e as usize).collect();
            for (&id, row) in ids.iter().zip(batch_rows(&batch)) {
                rows[k].entry(id).or_default().push(row);
            }
            let actions: Vec<i64> = ids.iter().map(|&e| actions(steps[e], n)[e]).collect();
            ids.iter().for_each(|&e| steps[e] += 1);
            pool.send(&actions, &ids).unwrap();
        }
    }
    let [got, want] = rows;
    let mut episodes = 0;
    for (id, want) in &want {
        let got = &got[id];
        let common = got.len().min(want.len());
        assert_eq!(got[..common], want[..common], "env {id}");
        episodes += want.iter().filter(|r| r.terminated).count();
    }
    episodes
}

#[test]
fn cpp_grid_world_writes_u8_images_into_shared_memory() {
    let _w = Watchdog::new("C++ grid world", Duration::from_secs(120));
    let lib = plugin_library("examples/cpp/gridworld.cpp");
    let mut pool = builder("GridWorld-v0").plugin(&lib).num_envs(4).num_workers(2).seed(5).build().unwrap();
    assert_eq!(pool.spec().to_string(), "obs Box(0, 255, [8, 8], u8), action Discrete(4)");
    assert_eq!(pool.spec().max_episode_steps, Some(100));
    let mut goals = 0;
    for t in 0..300 {
        let batch = if t == 0 {
            pool.reset().unwrap()
        } else {
            pool.step(&(0..4).map(|e| ((t * 7 + e * 3 + t / 3) % 4) as i64).collect::<Vec<_>>()).unwrap()
        };
        let images = batch.observations::<u8>().unwrap();
        assert_eq!(images.shape(), &[4, 8, 8]);
        for (e, image) in images.rows().enumerate() {
            let count = |v: u8| image.iter().filter(|&&p| p == v).count();
            // The agent hides the goal only on the step that reaches it.
            let reached = batch.terminated().get(e);
            assert_eq!((count(128), count(255)), (1, usize::from(!reached)), "step {t} env {e}: {image:?}");
            goals += usize::from(reached);
        }
    }
    assert!(goals > 0, "some agent reached its goal");
    let err = builder("GridWorld-v0").plugin(&lib).config(json!({"size": 9})).build().unwrap_err();
    assert!(err.to_string().contains("GridWorld-v0 takes no config keys, got {\"size\":9}"), "{err}");
}

#[test]
fn a_library_allowing_one_env_per_process_runs_one_env_per_worker() {
    let _w = Watchdog::new("one env per process", Duration::from_secs(120));
    let lib = plugin_library("tests/plugins/single.c");
    let mut pool = builder("Single-v0").plugin(&lib).num_envs(4).num_workers(4).build().unwrap();
    let batch = pool.reset().unwrap();
    let pids: Vec<u32> = batch.observations::<i32>().unwrap().as_slice().iter().map(|&p| p as u32).collect();
    let mut workers = pool.worker_pids().to_vec();
    workers.sort_unstable();
    let mut hosts = pids.clone();
    hosts.sort_unstable();
    assert_eq!(hosts, workers, "each env lives in its own worker process");
    assert_eq!(pool.step(&[1i64, 0, 1, 1]).unwrap().rewards(), &[1.0, 0.0, 1.0, 1.0]);
    drop(pool);

    let err = builder("Single-v0").plugin(&lib).num_envs(2).num_workers(1).build().unwrap_err();
    let BuildError::WorkerFailed { worker: 0, message } = &err else {
        panic!("expected WorkerFailed: {err:?}")
    };
    assert!(message.contains("cannot create Single-v0: Single-v0 keeps process-global state"), "{message}");
    assert!(message.contains("num_workers = num_envs; envs_per_worker=1 in Python"), "{message}");
}

#[test]
fn loading_errors_are_reported_before_any_step() {
    let _w = Watchdog::new("plugin loading errors", Duration::from_secs(120));
    let err = builder("X-v0").plugin("/nonexistent/libnope.so").build().unwrap_err();
    assert!(matches!(err, BuildError::Plugin { .. }), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/libnope.so: No such file"), "{err}");

    let no_entry = plugin_library("tests/plugins/no_entry.c");
    let err = builder("X-v0").plugin(&no_entry).num_envs(2).build().unwrap_err();
    assert!(matches!(err, BuildError::WorkerFailed { .. }), "{err:?}");
    assert!(err.to_string().contains("does not export `shmenv_plugin_entry`"), "{err}");

    let bad_abi = plugin_library("tests/plugins/bad_abi.c");
    let err = builder("X-v0").plugin(&bad_abi).build().unwrap_err();
    assert!(
        err.to_string().contains("implements shmenv ABI version 99, this shmenv implements version 1"),
        "{err}"
    );

    let cartpole = plugin_library("examples/c/cartpole.c");
    match builder("CartPole-v1").plugin(&cartpole).build().unwrap_err() {
        BuildError::UnknownEnv { id, registered, closest } => {
            assert_eq!(
                (id.as_str(), registered, closest.as_deref()),
                ("CartPole-v1", vec!["CartPoleC-v1".into()], Some("CartPoleC-v1"))
            );
        }
        other => panic!("expected UnknownEnv, got {other:?}"),
    }

    let faults = plugin_library("tests/plugins/faults.c");
    let err = builder("CreateError-v0").plugin(&faults).build().unwrap_err();
    assert!(err.to_string().contains("the simulator's license file is missing"), "{err}");
}

/// Steps a pool of 4 envs of the faults library (env 1 fails at its 3rd step) until it fails.
fn run_until_failure(id: &str, step_timeout: Option<Duration>) -> PoolFailure {
    run_until_failure_of("tests/plugins/faults.c", id, step_timeout)
}

/// [`run_until_failure`] with the library built from `source`.
fn run_until_failure_of(source: &str, id: &str, step_timeout: Option<Duration>) -> PoolFailure {
    let faults = plugin_library(source);
    let mut b = builder(id).plugin(&faults).num_envs(4).num_workers(2).seed(0);
    if let Some(t) = step_timeout {
        b = b.step_timeout(t);
    }
    let mut pool = b.build().unwrap();
    pool.reset().unwrap();
    for t in 0..3 {
        if let Err(e) = pool.step(&[0i64; 4]) {
            assert_eq!(t, 2, "failed at the 3rd step: {e}");
            return e.failed();
        }
    }
    panic!("{id} did not fail");
}

#[test]
fn each_fault_gives_the_typed_error_of_a_rust_env() {
    let _w = Watchdog::new("plugin faults", Duration::from_secs(120));
    for (id, signal) in [("Segfault-v0", libc::SIGSEGV), ("Abort-v0", libc::SIGABRT)] {
        match run_until_failure(id, None) {
            PoolFailure::WorkerDied { worker: 0, env_ids, exit, output, .. } => {
                assert_eq!((env_ids, exit), (0..2, WorkerExit::Signal(signal)), "{id}");
                assert!(output.contains("faults plugin: failing now"), "{id}: {output}");
            }
            other => panic!("{id}: expected WorkerDied, got {other:?}"),
        }
    }
    match run_until_failure("Exit-v0", None) {
        PoolFailure::WorkerDied { exit, .. } => assert_eq!(exit, WorkerExit::Code(7)),
        other => panic!("expected WorkerDied, got {other:?}"),
    }
    match run_until_failure("Hang-v0", Some(Duration::from_millis(500))) {
        PoolFailure::Timeout { workers, .. } => assert_eq!(workers, vec![0]),
        other => panic!("expected Timeout, got {other:?}"),
    }
    match run_until_failure("StepError-v0", None) {
        PoolFailure::EnvPanicked { env_id, message } => {
            assert_eq!(env_id, 1);
            assert!(message.starts_with("StepError-v0 ("), "{message}");
            assert!(message.ends_with("step failed: the simulator diverged at step 3"), "{message}");
        }
        other => panic!("expected EnvPanicked, got {other:?}"),
    }
}

#[test]
fn faults_inside_the_batched_call_name_their_env() {
    let _w = Watchdog::new("plugin faults, batched", Duration::from_secs(120));
    let lib = "tests/plugins/faults_batched.c";
    match run_until_failure_of(lib, "StepError-v0", None) {
        PoolFailure::EnvPanicked { env_id, message } => {
            assert_eq!(env_id, 1);
            assert!(message.starts_with("StepError-v0 ("), "{message}");
            assert!(message.ends_with("step_batch failed: the simulator diverged at step 3"), "{message}");
        }
        other => panic!("expected EnvPanicked, got {other:?}"),
    }
    match run_until_failure_of(lib, "Segfault-v0", None) {
        PoolFailure::WorkerDied { worker: 0, exit, .. } => {
            assert_eq!(exit, WorkerExit::Signal(libc::SIGSEGV))
        }
        other => panic!("expected WorkerDied, got {other:?}"),
    }
}

#[test]
fn faults_are_recovered_under_the_restart_policy() {
    let _w = Watchdog::new("plugin restarts", Duration::from_secs(120));
    let faults = plugin_library("tests/plugins/faults.c");
    let policy = FailurePolicy::Restart { max_restarts: 1 };
    for (id, timeout) in [("Segfault-v0", None), ("Hang-v0", Some(Duration::from_millis(500)))] {
        let mut b = builder(id).plugin(&faults).num_envs(4).num_workers(2).seed(0).failure_policy(policy);
        if let Some(t) = timeout {
            b = b.step_timeout(t);
        }
        let mut pool = b.build().unwrap();
        pool.reset().unwrap();
        for t in 0..6 {
            let batch = pool.step(&[0i64; 4]).unwrap();
            let restarted: &[usize] = if t == 2 { &[0, 1] } else { &[] };
            assert_eq!(batch.restarted_envs(), restarted, "{id} step {t}");
        }
        assert_eq!(pool.restarts(), &[1, 0], "{id}");
    }
    // Async mode: the replacement refills the dead worker's rows.
    let mut pool = builder("Abort-v0")
        .plugin(&faults)
        .num_envs(4)
        .num_workers(2)
        .batch_size(2)
        .seed(0)
        .failure_policy(policy)
        .build()
        .unwrap();
    let mut restarted = Vec::new();
    let mut batch = pool.reset().unwrap();
    for _ in 0..20 {
        let ids: Vec<usize> = batch.env_ids().iter().map(|&e| e as usize).collect();
        pool.send(&vec![0i64; ids.len()], &ids).unwrap();
        batch = pool.recv().unwrap();
        restarted.extend_from_slice(batch.restarted_envs());
    }
    restarted.sort_unstable();
    assert_eq!(restarted, vec![0, 1]);
    assert_eq!(pool.restarts(), &[1, 0]);
}

#[test]
fn plugin_specs_are_read_whole_and_validated_like_configs() {
    let _w = Watchdog::new("plugin specs", Duration::from_secs(120));
    let specs = plugin_library("tests/plugins/specs.c");
    // A valid spec of ~20 KiB (past the 4 KiB error-text cut) is read whole and steps.
    let mut pool = builder("LongSpec-v0").plugin(&specs).num_envs(2).num_workers(1).build().unwrap();
    assert_eq!(pool.spec().observations[0].space.box_bounds(1999), Some((-2000.5, 1e9)));
    pool.reset().unwrap();
    pool.step(&[0i64, 1]).unwrap();
    drop(pool);
    // Each refusal names what is wrong, the value and the rule (2 envs per worker, so a
    // NaN bound is not mistaken for two envs disagreeing).
    let cases = [
        ("TooLongSpec-v0", &["spec_json returned", "more than the 65536"][..]),
        ("Overflow-v0", &["shape [2305843009213693953] of f64", "1 GiB"]),
        ("NaNBound-v0", &["(low NaN, high 1) is NaN"]),
        ("LowAboveHigh-v0", &["(low 2, high 1) has low above high"]),
        ("U8Range-v0", &["Box [1] of u8", "(low -5, high 1000)", "dtype cannot hold; u8 bounds are 0..=255"]),
        ("UnknownKey-v0", &["unknown key \"max_episode_step\" in the spec; valid keys: observations"]),
        ("EpisodeLimit-v0", &["spec_json sets max_episode_steps 3 but the env's info table says none"]),
    ];
    for (id, expected) in cases {
        let err = builder(id).plugin(&specs).num_envs(4).num_workers(2).build().unwrap_err();
        assert!(matches!(err, BuildError::WorkerFailed { .. }), "{id}: {err:?}");
        let text = err.to_string();
        assert!(text.contains(&format!("cannot create {id}")), "{id}: {text}");
        for needle in expected {
            assert!(text.contains(needle), "{id}: {needle:?} not in {text}");
        }
    }
    // A library that exits while loading or creating is named as the first suspect.
    let exit_in_entry = plugin_library("tests/plugins/exit_in_entry.c");
    for (id, library) in [("ExitInCreate-v0", &specs), ("X-v0", &exit_in_entry)] {
        let b = builder(id).plugin(library).config(json!({"exit": 3})).num_envs(2).num_workers(1);
        let err = b.build().unwrap_err();
        assert!(matches!(err, BuildError::WorkerDied { .. }), "{id}: {err:?}");
        let text = err.to_string();
        assert!(text.contains(&format!("Check that plugin {}", library.display())), "{text}");
        assert!(text.contains("does not exit or crash in shmenv_plugin_entry or create"), "{text}");
    }
}
