//! A pool whose batches cost less than a handoff to a worker: `trainer_shard` auto has the
//! trainer step every env, with no worker process. The choice follows the cost the shard
//! measures at build (a shard reporting a fixed cost stands in for a cheap and a dear env,
//! so the test holds on a busy machine and in debug builds); the pool gives the batches of
//! worker processes, reports a panic in its envs, and leaves no process, fd or
//! shared-memory object behind.

mod common;

use common::{batch_rows, builder, child_pids, dev_shm_entries, open_fds, Watchdog};
use serde_json::json;
use shmenv::worker::{trainer_shard, Registry};
use shmenv::{FailurePolicy, Pool, PoolFailure, StepError, TrainerShardMode, HANDOFF_COST};
use shmenv_engine::pool::TrainerShard;
use shmenv_engine::protocol::{Command, Layout, PoolParams, WorkerReport};
use shmenv_engine::region::Region;
use std::time::Duration;

/// The built-ins' trainer shard, reporting `per_env` for each of its `envs` in a probe's
/// batch.
struct Costed {
    inner: Box<dyn TrainerShard>,
    per_env: Duration,
    envs: u32,
}

impl TrainerShard for Costed {
    fn spec_json(&self) -> serde_json::Value {
        self.inner.spec_json()
    }

    fn resets(&self) -> u64 {
        self.inner.resets()
    }

    fn probe_batch_time(&mut self, _seed: Option<u64>, _enough: Duration) -> Option<Duration> {
        Some(self.per_env * self.envs)
    }

    unsafe fn run(
        &mut self,
        command: Command,
        actions: &[u8],
        region: &Region,
        layout: &Layout,
        block: usize,
    ) -> Result<(), (usize, String)> {
        // SAFETY: the pool's exclusive access to the shard's rows, passed on.
        unsafe { self.inner.run(command, actions, region, layout, block) }
    }
}

/// A pool of `n` envs `env` with `trainer_shard` auto, whose shard says a batch of every
/// env costs `batch`.
fn auto_pool(
    env: &str,
    config: serde_json::Value,
    n: usize,
    batch: Duration,
) -> Result<Pool, shmenv::BuildError> {
    let make = trainer_shard(Registry::with_builtins());
    let per_env = batch / n as u32;
    builder(env)
        .config(config)
        .num_envs(n)
        .seed(5)
        .trainer_shard(move |params: &PoolParams| -> Result<Box<dyn TrainerShard>, WorkerReport> {
            let envs = params.trainer_envs().len() as u32;
            Ok(Box::new(Costed { inner: make(params)?, per_env, envs }))
        })
        .trainer_shard_mode(TrainerShardMode::Auto)
        .build()
}

#[test]
fn a_batch_cheaper_than_a_handoff_runs_in_the_trainer_alone_and_leaves_nothing_behind() {
    let _w = Watchdog::new("trainer alone", Duration::from_secs(120));
    let (fds, shm) = (open_fds(), dev_shm_entries());
    let n = 12;
    let cheap = HANDOFF_COST / 4;
    let mut alone = auto_pool("CartPole-v1", json!({}), n, cheap).unwrap();
    let choice = alone.trainer_shard_choice();
    assert!(choice.on && choice.all && choice.reason.contains("handoff"), "{choice:?}");
    assert_eq!((alone.num_workers(), alone.trainer_envs()), (0, 0..n));
    assert!(alone.worker_pids().is_empty() && child_pids().is_empty(), "{:?}", child_pids());

    // The same batches as worker processes only, episodes ending and resets included.
    let mut reference = builder("CartPole-v1").num_envs(n).num_workers(2).seed(5).build().unwrap();
    assert_eq!(batch_rows(&alone.reset().unwrap()), batch_rows(&reference.reset().unwrap()));
    let mut ended = 0;
    for step in 0..120 {
        let actions: Vec<i64> = (0..n).map(|e| ((e + step) % 3 == 0) as i64).collect();
        let (x, y) =
            (batch_rows(&alone.step(&actions).unwrap()), batch_rows(&reference.step(&actions).unwrap()));
        assert_eq!(x, y, "step {step}");
        ended += x.iter().filter(|r| r.terminated || r.truncated).count();
    }
    assert!(ended > 0, "no episode ended: auto-reset untested");
    let mask: Vec<bool> = (0..n).map(|e| e % 2 == 0).collect();
    let (x, y) = (alone.reset_envs(&mask, Some(9)).unwrap(), reference.reset_envs(&mask, Some(9)).unwrap());
    assert_eq!(batch_rows(&x), batch_rows(&y), "partial reset");
    let report = alone.stats();
    assert_eq!((report.shard_steps, report.steps), (120 * n as u64, 120 * n as u64), "{report:?}");
    assert!(report.workers.is_empty() && report.shard_share > 0.0, "{report:?}");
    drop((alone, reference));

    // A dear batch keeps the workers beside the trainer's shard.
    let dear = auto_pool("CartPole-v1", json!({}), n, HANDOFF_COST * 4).unwrap();
    let choice = dear.trainer_shard_choice();
    assert!(choice.on && !choice.all && dear.num_workers() >= 1, "{choice:?}");
    drop(dear);

    // A panic in the trainer's envs closes the pool and names the env (Burn-v0 panics
    // at the step its config names).
    let config = json!({"fault": "panic", "fault_step": 3});
    let mut burning = auto_pool("Burn-v0", config, 4, cheap).unwrap();
    assert_eq!(burning.num_workers(), 0);
    burning.reset().unwrap();
    let err = (0..10).find_map(|_| burning.step(&[0i64; 4]).err()).expect("Burn-v0 panics at step 3");
    assert!(matches!(err, StepError::Failed(PoolFailure::EnvPanicked { env_id: 0, .. })), "{err}");
    drop(burning);

    // What needs a worker is refused with no worker, naming it and the fix.
    let make = || {
        builder("CartPole-v1")
            .num_envs(4)
            .num_workers(0)
            .trainer_shard(trainer_shard(Registry::with_builtins()))
    };
    let refusals = [
        (make().failure_policy(FailurePolicy::Restart { max_restarts: 1 }), "restarts"),
        (make().step_timeout(Duration::from_secs(5)), "step_timeout"),
        (make().batch_size(2), "async mode"),
        (builder("CartPole-v1").num_envs(4).num_workers(0), "envs the trainer can build"),
    ];
    for (b, what) in refusals {
        let err = b.build().unwrap_err().to_string();
        assert!(err.contains(what) && err.contains("give num_workers 1 or more"), "{what}: {err}");
    }
    // Auto keeps workers where a step timeout was asked for (they are what it times).
    let timed = make().num_workers(2).step_timeout(Duration::from_secs(5));
    assert!(!timed.build().unwrap().trainer_shard_choice().all);

    assert!(child_pids().is_empty(), "{:?}", child_pids());
    assert_eq!(open_fds(), fds, "fds left open");
    assert_eq!(dev_shm_entries(), shm, "/dev/shm entries left");
}

#[test]
fn the_probe_times_a_throwaway_shard_of_real_envs() {
    let _w = Watchdog::new("trainer probe", Duration::from_secs(60));
    let make = trainer_shard(Registry::with_builtins());
    let params = |env: &str, config: serde_json::Value| PoolParams {
        config,
        num_workers: 0,
        trainer_shard: true,
        ..shmenv::PoolBuilder::default_params(env, 4, 0)
    };
    // Burn-v0 spins `step_us` a step: four envs cost at least 4 x 200 us a batch.
    let mut burn = make(&params("Burn-v0", json!({"step_us": 200}))).unwrap();
    let time = burn.probe_batch_time(Some(0), Duration::from_secs(1)).expect("a batch of Burn-v0 is timed");
    assert!(time >= Duration::from_micros(800), "{time:?}");
    // A first batch dearer than `enough` is the answer.
    assert!(burn
        .probe_batch_time(Some(0), Duration::from_micros(100))
        .is_some_and(|t| t >= Duration::from_micros(800)));
    let mut cartpole = make(&params("CartPole-v1", json!({}))).unwrap();
    assert!(cartpole.probe_batch_time(None, Duration::from_secs(1)).is_some_and(|t| t > Duration::ZERO));
    // An env that panics while probed gives no time (the workers will report it).
    let mut panicking = make(&params("Burn-v0", json!({"fault": "panic", "fault_step": 1}))).unwrap();
    assert_eq!(panicking.probe_batch_time(Some(0), Duration::from_secs(1)), None);
}
