//! A trainer that steps a shard itself (`PoolBuilder::trainer_shard`): the same batches as a
//! pool of worker processes only, in every auto-reset mode and for partial resets; its
//! envs' panics close the pool; the settings and registries it cannot serve are refused;
//! a worker killed beside it is reported and nothing is left behind.

mod common;

use common::{batch_rows, builder, signal, Watchdog};
use serde_json::json;
use shmenv::worker::rng::Pcg64;
use shmenv::worker::{trainer_shard, Registry};
use shmenv::{AutoReset, BuildError, FailurePolicy, Pool, PoolFailure, StepError, TrainerShardMode};
use shmenv_engine::pool::TrainerShard;
use shmenv_engine::protocol::{Command, Layout};
use shmenv_engine::region::Region;
use std::time::Duration;

/// `n` envs of `env`: worker processes only, or `workers` of them and the trainer.
fn pool(env: &str, config: serde_json::Value, n: usize, workers: usize, own: bool, mode: AutoReset) -> Pool {
    // Short episodes: every case ends some (Pendulum-v1's own limit is 200 steps).
    let b = builder(env).config(config).num_envs(n).num_workers(workers).seed(5).autoreset(mode);
    let b = b.max_episode_steps(if env == "Pendulum-v1" { 31 } else { 150 });
    let b = if own { b.trainer_shard(trainer_shard(Registry::with_builtins())) } else { b };
    b.build().unwrap()
}

/// Steps both pools with the same random actions (`Discrete(2)` or a `Box` of floats) and
/// resets, checking every row, for `steps` steps; returns how many episodes ended.
fn lockstep(a: &mut Pool, b: &mut Pool, steps: usize, ctx: &str) -> usize {
    let n = a.num_envs();
    assert_eq!(batch_rows(&a.reset().unwrap()), batch_rows(&b.reset().unwrap()), "{ctx}: reset");
    let mut rng = Pcg64::from_seed(3);
    let discrete = !a.spec().action.dtype().is_float();
    let mut ended = 0;
    for step in 0..steps {
        let (x, y) = if discrete {
            let act: Vec<i64> = (0..n).map(|_| (rng.next_u64() >> 63) as i64).collect();
            (batch_rows(&a.step(&act).unwrap()), batch_rows(&b.step(&act).unwrap()))
        } else {
            let act: Vec<f32> = (0..n).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
            (batch_rows(&a.step(&act).unwrap()), batch_rows(&b.step(&act).unwrap()))
        };
        assert_eq!(x, y, "{ctx}: step {step}");
        let done: Vec<bool> = x.iter().map(|r| r.terminated || r.truncated).collect();
        ended += done.iter().filter(|&&d| d).count();
        if step % 17 == 16 || (a.autoreset() == AutoReset::Disabled && done.iter().any(|&d| d)) {
            // Every other env (and, without auto-reset, every ended one) reset, seeded.
            let mask: Vec<bool> = (0..n).map(|e| e % 2 == step % 2 || done[e]).collect();
            let seed = Some(step as u64);
            let (x, y) =
                (batch_rows(&a.reset_envs(&mask, seed).unwrap()), b.reset_envs(&mask, seed).unwrap());
            assert_eq!(x, batch_rows(&y), "{ctx}: partial reset after step {step}");
        }
    }
    ended
}

#[test]
fn a_trainer_shard_gives_the_batches_of_worker_processes() {
    let _w = Watchdog::new("trainer shard equivalence", Duration::from_secs(180));
    let cases = [
        ("CartPole-v1", json!({})),
        ("Pendulum-v1", json!({})),
        ("Burn-v0", json!({"obs_shape": [2, 3], "obs_dtype": "u8", "episode_len": 9})),
    ];
    for (env, config) in cases {
        for mode in AutoReset::ALL {
            for (n, workers) in [(7, 1), (5, 2), (2, 1)] {
                let ctx = format!("{env} {mode:?}, {n} envs, {workers} workers and the trainer");
                Watchdog::at(&ctx);
                let mut own = pool(env, config.clone(), n, workers, true, mode);
                let mut reference = pool(env, config.clone(), n, workers + 1, false, mode);
                // The trainer's shard is the first of `workers + 1`, as worker 0's would be.
                assert_eq!(own.trainer_envs(), reference.shard(0), "{ctx}");
                for w in 0..workers {
                    assert_eq!(own.shard(w), reference.shard(w + 1), "{ctx}");
                }
                let ended = lockstep(&mut own, &mut reference, 230, &ctx);
                assert!(ended > 0, "{ctx}: no episode ended, auto-reset untested");
            }
        }
    }
}

#[test]
fn the_stats_count_the_trainers_shard() {
    let _w = Watchdog::new("trainer shard stats", Duration::from_secs(60));
    let mut pool = pool("CartPole-v1", json!({}), 9, 2, true, AutoReset::NextStep);
    pool.reset().unwrap();
    // NextStep: an episode that ends at step t is reset at step t + 1 (if there is one).
    let mut own_episodes = 3;
    for step in 0..40 {
        let batch = pool.step(&[1i64; 9]).unwrap();
        if step < 39 {
            own_episodes += batch.episodes().filter(|e| e.env_id < 3).count() as u64;
        }
    }
    let report = pool.stats();
    assert_eq!(pool.trainer_envs(), 0..3);
    assert_eq!(report.shard_steps, 3 * 40);
    assert_eq!(report.shard_resets, own_episodes, "{report:?}");
    assert!(own_episodes > 3, "episodes ended within 40 steps of action 1: {report:?}");
    assert_eq!(report.steps, 9 * 40, "the workers' steps and the trainer's");
    assert_eq!(report.workers.iter().map(|w| w.steps).sum::<u64>(), 6 * 40);
    assert!(report.shard_share > 0.0 && report.shard_share <= report.trainer_call_share, "{report:?}");
}

#[test]
fn the_trace_has_a_span_per_command_of_the_trainers_shard() {
    let _w = Watchdog::new("trainer shard trace", Duration::from_secs(60));
    let own = trainer_shard(Registry::with_builtins());
    let b = builder("Burn-v0").config(json!({"step_us": 20})).num_envs(4).num_workers(1).trace(true);
    let mut pool = b.trainer_shard(own).build().unwrap();
    pool.reset().unwrap();
    for _ in 0..30 {
        pool.step(&[0i64; 4]).unwrap();
    }
    let path = std::env::temp_dir().join(format!("shmenv-shard-trace-{}.json", std::process::id()));
    pool.write_trace(&path).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    let me = std::process::id();
    let spans: Vec<f64> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pid"] == me && e["name"] == "own shard")
        .map(|e| e["dur"].as_f64().unwrap())
        .collect();
    assert_eq!(spans.len(), 31, "one span per command (reset + 30 steps)");
    // Each step burns 20 us in each of the trainer's 2 envs.
    assert!(spans[1..].iter().all(|&d| d >= 40.0), "{spans:?}");
}

#[test]
fn a_panic_in_the_trainers_envs_closes_the_pool_and_names_the_env() {
    let _w = Watchdog::new("trainer shard panic", Duration::from_secs(60));
    // Env 1 (seeded 5 + 1) panics at its third step; envs 0..2 are the trainer's.
    let config = json!({"fault": "panic", "fault_step": 3, "fault_seed": 6});
    let mut pool = pool("Burn-v0", config, 4, 1, true, AutoReset::NextStep);
    assert_eq!(pool.trainer_envs(), 0..2);
    let worker = pool.worker_pids()[0];
    pool.reset().unwrap();
    pool.step(&[0i64; 4]).unwrap();
    pool.step(&[0i64; 4]).unwrap();
    match pool.step(&[0i64; 4]).map(|_| ()) {
        Err(StepError::Failed(PoolFailure::EnvPanicked { env_id: 1, message })) => {
            assert!(message.contains("fault injected at step 3"), "{message}")
        }
        other => panic!("expected env 1's panic, got {other:?}"),
    }
    let err = pool.step(&[0i64; 4]).map(|_| ()).unwrap_err();
    assert!(matches!(err, StepError::Failed(PoolFailure::Closed { .. })), "{err}");
    let exits = pool.close();
    assert_eq!(exits.len(), 1, "one worker process");
    assert!(!common::child_pids().contains(&worker), "the worker was reaped");
}

/// A shard whose own code panics at its first step (a bug in a custom `TrainerShard`).
struct PanicsAtStep(Box<dyn TrainerShard>);

impl TrainerShard for PanicsAtStep {
    fn spec_json(&self) -> serde_json::Value {
        self.0.spec_json()
    }

    fn resets(&self) -> u64 {
        0
    }

    unsafe fn run(
        &mut self,
        command: Command,
        actions: &[u8],
        region: &Region,
        layout: &Layout,
        block: usize,
    ) -> Result<(), (usize, String)> {
        assert!(command != Command::Step, "a bug in the shard");
        // SAFETY: forwarded under the same contract.
        unsafe { self.0.run(command, actions, region, layout, block) }
    }
}

#[test]
fn a_panic_of_the_shard_itself_closes_the_pool() {
    let _w = Watchdog::new("trainer shard bug", Duration::from_secs(60));
    let inner = trainer_shard(Registry::with_builtins());
    let mut pool = builder("CartPole-v1")
        .num_envs(4)
        .num_workers(1)
        .trainer_shard(move |p| Ok(Box::new(PanicsAtStep(inner(p)?)) as Box<dyn TrainerShard>))
        .build()
        .unwrap();
    pool.reset().unwrap();
    match pool.step(&[0i64; 4]).map(|_| ()) {
        Err(StepError::Failed(PoolFailure::EnvPanicked { env_id: 0, message })) => {
            assert!(message.contains("the trainer's shard panicked: a bug in the shard"), "{message}")
        }
        other => panic!("expected the shard's panic, got {other:?}"),
    }
    let err = pool.step(&[0i64; 4]).map(|_| ()).unwrap_err();
    assert!(matches!(err, StepError::Failed(PoolFailure::Closed { .. })), "{err}");
}

#[test]
fn a_worker_killed_beside_the_trainer_shard_is_reported() {
    let _w = Watchdog::new("trainer shard kill", Duration::from_secs(60));
    let mut pool = pool("CartPole-v1", json!({}), 6, 2, true, AutoReset::NextStep);
    pool.reset().unwrap();
    let victim = pool.worker_pids()[1];
    assert!(signal(victim, libc::SIGKILL));
    let err = loop {
        match pool.step(&[1i64; 6]) {
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => break e,
        }
    };
    match err {
        StepError::Failed(PoolFailure::WorkerDied { worker: 1, env_ids, .. }) => assert_eq!(env_ids, 4..6),
        other => panic!("expected worker 1's death, got {other}"),
    }
}

#[test]
fn a_killed_worker_is_restarted_beside_the_trainer_shard() {
    let _w = Watchdog::new("trainer shard restart", Duration::from_secs(60));
    let policy = shmenv::FailurePolicy::Restart { max_restarts: 1 };
    let own = trainer_shard(Registry::with_builtins());
    let b = builder("CartPole-v1").num_envs(6).num_workers(2).seed(7).failure_policy(policy);
    let mut pool = b.trainer_shard(own).build().unwrap();
    let mut reference = builder("CartPole-v1").num_envs(6).num_workers(3).seed(7).build().unwrap();
    pool.reset().unwrap();
    reference.reset().unwrap();
    let mut seen_restart = false;
    for t in 0..20usize {
        let a: Vec<i64> = (0..6).map(|e| ((t * 7 + e * 3) % 2) as i64).collect();
        if t == 8 {
            // Worker 1 hosts envs 4..6 (the trainer 0..2, worker 0 2..4).
            assert!(signal(pool.worker_pids()[1], libc::SIGKILL));
        }
        let batch = match pool.step(&a) {
            Ok(batch) => batch,
            Err(e) => panic!("step {t}: {e}"),
        };
        let got = batch_rows(&batch);
        let restarted = batch.restarted_envs().to_vec();
        if !restarted.is_empty() {
            assert_eq!(restarted, [4, 5], "step {t}");
            seen_restart = true;
            assert!(batch.truncated().get(4) && batch.truncated().get(5));
        }
        let want = batch_rows(&reference.step(&a).unwrap());
        for e in 0..4 {
            assert_eq!(got[e], want[e], "step {t}: env {e} (the trainer's or worker 0's) diverged");
        }
    }
    assert!(seen_restart, "a batch named the restarted envs");
    assert_eq!(pool.restarts(), &[0, 1], "worker 1 was restarted once");
}

#[test]
fn settings_and_registries_a_trainer_shard_cannot_serve_are_refused() {
    let _w = Watchdog::new("trainer shard refusals", Duration::from_secs(60));
    let own = || trainer_shard(Registry::with_builtins());
    let invalid = |b: shmenv::PoolBuilder| match b.build().map(|_| ()).unwrap_err() {
        BuildError::InvalidArgument(m) => m,
        other => panic!("expected InvalidArgument, got {other}"),
    };
    let m = invalid(builder("CartPole-v1").num_envs(8).num_workers(1).batch_size(4).trainer_shard(own()));
    assert!(m.contains("sync mode only") && m.contains("batch_size (4)"), "{m}");
    let m = invalid(builder("CartPole-v1").num_envs(2).num_workers(2).trainer_shard(own()));
    assert!(m.contains("num_envs (2) must be at least num_workers + 1 (3)"), "{m}");
    // An id the trainer's registry does not know: the error a worker gives.
    let err = builder("CartPole-v1")
        .num_envs(2)
        .num_workers(1)
        .trainer_shard(trainer_shard(Registry::new()))
        .build()
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, BuildError::UnknownEnv { ref id, .. } if id == "CartPole-v1"), "{err}");
    // A registry that builds another env under the same id: the specs disagree.
    let mut other = Registry::new();
    let pendulum = Registry::with_builtins().get("Pendulum-v1").unwrap().clone();
    other.register("CartPole-v1", pendulum);
    let err = builder("CartPole-v1")
        .num_envs(2)
        .num_workers(1)
        .trainer_shard(trainer_shard(other))
        .build()
        .map(|_| ());
    match err.unwrap_err() {
        BuildError::TrainerShard(m) => assert!(m.contains("the workers'"), "{m}"),
        other => panic!("expected the trainer's spec mismatch, got {other}"),
    }
}

#[test]
fn auto_takes_the_trainers_shard_only_for_sync_pools_with_the_default_workers() {
    let _w = Watchdog::new("trainer shard auto", Duration::from_secs(120));
    let cores = shmenv_engine::sync::available_cores();
    let auto = |b: shmenv::PoolBuilder| {
        b.trainer_shard(trainer_shard(Registry::with_builtins())).trainer_shard_mode(TrainerShardMode::Auto)
    };
    // The pool chooses the workers: the trainer takes a shard (two cores or more).
    let mut pool = auto(builder("CartPole-v1").num_envs(32)).build().unwrap();
    let choice = pool.trainer_shard_choice();
    assert_eq!(choice.on, cores >= 2, "{choice:?}");
    // CartPole's batch of 32 may cost less than a handoff (release builds): then the
    // trainer steps every env (`tests/trainer_alone.rs`).
    if choice.all {
        assert_eq!((pool.num_workers(), pool.trainer_envs()), (0, 0..32));
    } else if choice.on {
        assert_eq!(pool.num_workers(), (cores.min(32) - 1).max(1));
        assert_eq!(pool.trainer_envs(), 0..32 / (pool.num_workers() + 1));
        assert!(pool.worker_pids().len() == pool.num_workers());
    }
    pool.reset().unwrap();
    pool.step(&[1i64; 32]).unwrap();
    drop(pool);
    // Given workers, async mode or restarts: every env in a worker, and the reason.
    let cases = [
        (auto(builder("CartPole-v1").num_envs(32).num_workers(1)), "worker count"),
        (auto(builder("CartPole-v1").num_envs(32).batch_size(16)), "async"),
        (
            auto(
                builder("CartPole-v1")
                    .num_envs(32)
                    .failure_policy(FailurePolicy::Restart { max_restarts: 1 }),
            ),
            "restarts",
        ),
    ];
    for (b, why) in cases {
        let pool = b.build().unwrap();
        let choice = pool.trainer_shard_choice();
        assert!(!choice.on && choice.reason.contains(why), "{choice:?}");
        assert!(pool.trainer_envs().is_empty());
    }
    // Without a way to build the envs in the trainer (this test program serves no
    // workers), auto is off and on is refused with the fix.
    let pool = builder("CartPole-v1").num_envs(32).build().unwrap();
    assert!(!pool.trainer_shard_choice().on && pool.trainer_envs().is_empty());
    let err =
        builder("CartPole-v1").num_envs(8).trainer_shard_mode(TrainerShardMode::On).build().unwrap_err();
    assert!(err.to_string().contains("serve_if_worker"), "{err}");
}
