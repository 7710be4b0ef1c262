//! `PoolBuilder`: what a pool is asked to be, checked when it is built; `FailurePolicy`.

use crate::error::BuildError;
use crate::launch::{CpuAffinity, WorkerCommand};
use crate::protocol::AutoReset;
use crate::sync::WaitStrategy;
use std::path::PathBuf;
use std::time::Duration;

use super::shard_choice::TrainerShardMode;
use super::trainer_shard::{ShardMaker, TrainerShard};
use super::Pool;
use crate::protocol::{PoolParams, WorkerReport};
use std::sync::Arc;

/// Configures and starts a [`Pool`]. Made by [`Pool::builder`].
#[derive(Clone, Debug)]
pub struct PoolBuilder {
    pub(super) env_id: String,
    pub(super) config: serde_json::Value,
    pub(super) num_envs: usize,
    pub(super) num_workers: Option<usize>,
    pub(super) seed: Option<u64>,
    pub(super) autoreset: AutoReset,
    pub(super) max_episode_steps: Option<u32>,
    pub(super) worker_command: Option<WorkerCommand>,
    pub(super) wait: WaitStrategy,
    pub(super) affinity: CpuAffinity,
    pub(super) startup_timeout: Duration,
    pub(super) batch_size: Option<usize>,
    pub(super) ring_depth: usize,
    pub(super) retain_batches: usize,
    pub(super) fair_scheduling: bool,
    pub(super) stats: bool,
    pub(super) trace: bool,
    pub(super) step_timeout: Option<Duration>,
    pub(super) failure_policy: FailurePolicy,
    pub(super) plugin: Option<PathBuf>,
    pub(super) trainer_shard: Option<ShardMaker>,
    pub(super) trainer_shard_mode: TrainerShardMode,
}

impl PoolBuilder {
    /// Default of [`PoolBuilder::autoreset`].
    pub const DEFAULT_AUTORESET: AutoReset = AutoReset::NextStep;
    /// Default of [`PoolBuilder::wait`].
    pub const DEFAULT_WAIT: WaitStrategy = WaitStrategy::Auto;
    /// Default of [`PoolBuilder::cpu_affinity`].
    pub const DEFAULT_AFFINITY: CpuAffinity = CpuAffinity::Auto;
    /// Default of [`PoolBuilder::ring_depth`].
    pub const DEFAULT_RING_DEPTH: usize = 2;
    /// Default of [`PoolBuilder::retain_batches`].
    pub const DEFAULT_RETAIN_BATCHES: usize = 0;
    /// Default of [`PoolBuilder::fair_scheduling`].
    pub const DEFAULT_FAIR_SCHEDULING: bool = true;
    /// Default of [`PoolBuilder::stats`].
    pub const DEFAULT_STATS: bool = true;
    /// Default of [`PoolBuilder::trace`].
    pub const DEFAULT_TRACE: bool = false;
    /// Default of [`PoolBuilder::startup_timeout`].
    pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

    /// A builder with every default: the constants above and the absent settings here are
    /// the one place they are written (each setter's doc names its default; bindings read
    /// the constants, as Python's `_shmenv.pool_defaults()` does).
    pub(super) fn new(env_id: String) -> PoolBuilder {
        PoolBuilder {
            env_id,
            config: serde_json::json!({}),
            num_envs: 1,
            num_workers: None,
            seed: None,
            autoreset: Self::DEFAULT_AUTORESET,
            max_episode_steps: None,
            worker_command: None,
            wait: Self::DEFAULT_WAIT,
            affinity: Self::DEFAULT_AFFINITY,
            batch_size: None,
            ring_depth: Self::DEFAULT_RING_DEPTH,
            retain_batches: Self::DEFAULT_RETAIN_BATCHES,
            fair_scheduling: Self::DEFAULT_FAIR_SCHEDULING,
            stats: Self::DEFAULT_STATS,
            trace: Self::DEFAULT_TRACE,
            step_timeout: None,
            failure_policy: FailurePolicy::Fail,
            trainer_shard: None,
            trainer_shard_mode: TrainerShardMode::Auto,
            startup_timeout: Self::DEFAULT_STARTUP_TIMEOUT,
            plugin: None,
        }
    }

    /// The parameters of a sync pool of `num_envs` envs `env_id` (empty config) on
    /// `num_workers` workers with every other setting at its default: what a memory
    /// estimate made before any pool starts (the CLI's) begins from.
    ///
    /// ```
    /// use shmenv_engine::PoolBuilder;
    /// let params = PoolBuilder::default_params("CartPole-v1", 8, 2);
    /// assert_eq!((params.batch_size, params.ring_depth), (8, PoolBuilder::DEFAULT_RING_DEPTH));
    /// ```
    pub fn default_params(env_id: &str, num_envs: usize, num_workers: usize) -> PoolParams {
        PoolParams {
            env_id: env_id.into(),
            config: serde_json::json!({}),
            num_envs,
            num_workers,
            autoreset: Self::DEFAULT_AUTORESET,
            max_episode_steps: None,
            wait: Self::DEFAULT_WAIT,
            batch_size: num_envs,
            ring_depth: Self::DEFAULT_RING_DEPTH,
            stats: Self::DEFAULT_STATS,
            trace: Self::DEFAULT_TRACE,
            restart: false,
            plugin: None,
            cores: 0,
            trainer_shard: false,
        }
    }
}

/// What a pool does when a worker process dies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The pending call returns [`PoolFailure::WorkerDied`](crate::PoolFailure::WorkerDied) and the pool closes (default).
    #[default]
    Fail,
    /// The dead worker is started again (same program, index and core), its envs are
    /// rebuilt and reseeded, and the call returns normally. Sync mode: the rows of those
    /// envs in the same batch hold the first observation of a new episode, marked
    /// truncated, and [`Batch::restarted_envs`](crate::Batch::restarted_envs) names them. Async mode: each of its envs
    /// comes back once as such a row, in whichever batch it lands (envs with an action in
    /// flight at once, the others in answer to their next `send`, whose action is ignored),
    /// named by `restarted_envs` of that batch; rows the dead worker held in the ring are
    /// refilled, so no batch is lost or duplicated. The other envs never notice. At most
    /// `max_restarts` restarts over the pool's life; the next death fails as under `Fail`.
    /// With a [`PoolBuilder::step_timeout`], workers that do not answer in time are killed
    /// and restarted the same way. The reseeding rule: at the pool's `k`-th restart (1, 2,
    /// ...), env `i` is seeded `seed + i + k * 2^32` (wrapping).
    Restart {
        /// Restarts allowed over the pool's life.
        max_restarts: u32,
    },
}

impl PoolBuilder {
    /// The env's config, a JSON object (`{}` by default). Unknown or ill-typed keys are
    /// refused by the env with a message naming the key.
    pub fn config(mut self, config: serde_json::Value) -> Self {
        self.config = config;
        self
    }

    /// Number of envs (default 1).
    pub fn num_envs(mut self, n: usize) -> Self {
        self.num_envs = n;
        self
    }

    /// Number of worker processes (default: available cores, at most `num_envs`; one fewer
    /// with the trainer's shard; none where `trainer_shard_mode` auto finds a batch cheaper
    /// than a handoff). Each hosts a contiguous shard of envs. 0: the trainer steps every
    /// env itself (sync mode, envs the trainer can build, no restarts and no step timeout,
    /// which need workers; a plugin's envs then run in the trainer too).
    pub fn num_workers(mut self, w: usize) -> Self {
        self.num_workers = Some(w);
        self
    }

    /// Base seed: env `i` is seeded with `seed + i` (wrapping) at the first `reset`, as
    /// Gymnasium's vector envs do. Default: drawn from the clock and pid.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// What envs do when an episode ends (default [`AutoReset::NextStep`]).
    pub fn autoreset(mut self, mode: AutoReset) -> Self {
        self.autoreset = mode;
        self
    }

    /// Truncate episodes after `k` steps (overrides the env's own limit).
    pub fn max_episode_steps(mut self, k: u32) -> Self {
        self.max_episode_steps = Some(k);
        self
    }

    /// The worker program to exec. Default: this same program when its `main` calls
    /// `shmenv::worker::serve_if_worker` first, else `shmenv-worker` (see
    /// [`crate::launch::program`] for the order). A program of your own hosts your own envs.
    pub fn worker_program(mut self, path: impl Into<PathBuf>) -> Self {
        self.worker_command = Some(WorkerCommand::new(path));
        self
    }

    /// The full command that starts a worker: a program with arguments and environment
    /// of its own (for example a Python interpreter running `-m shmenv.worker`). Replaces
    /// [`PoolBuilder::worker_program`].
    pub fn worker_command(mut self, command: WorkerCommand) -> Self {
        self.worker_command = Some(command);
        self
    }

    /// How the trainer and workers wait for each other (default [`WaitStrategy::Auto`]).
    pub fn wait(mut self, strategy: WaitStrategy) -> Self {
        self.wait = strategy;
        self
    }

    /// Which cores the workers run on (default [`CpuAffinity::Auto`]: a core each when
    /// there are enough).
    pub fn cpu_affinity(mut self, affinity: CpuAffinity) -> Self {
        self.affinity = affinity;
        self
    }

    /// Results per batch. `num_envs` (the default) is sync mode: `reset`/`step` return
    /// every env, row `i` = env `i`. Fewer is async mode: `send` actions to some envs,
    /// `recv` the first `batch_size` results, whichever envs finished first.
    pub fn batch_size(mut self, b: usize) -> Self {
        self.batch_size = Some(b);
        self
    }

    /// Async mode: number of batch blocks in the ring (default 2, at least 2). Workers fill
    /// the next blocks while the trainer reads one; more blocks absorb more jitter.
    pub fn ring_depth(mut self, d: usize) -> Self {
        self.ring_depth = d;
        self
    }

    /// Async mode: how many received batches stay untouched after the call that received
    /// them (default 0). With 0 a batch is given back to the workers at the next call on
    /// the pool, which is all a [`Batch`](crate::Batch) borrow can see. Bindings that hand out views the
    /// borrow checker cannot follow (Python's zero-copy arrays) set 1: a batch then stays
    /// intact until the second `recv` after it begins, so the previous batch is still
    /// valid next to the current one. Needs `ring_depth >= retain_batches + 1` (checked;
    /// `+ 2` lets workers fill a block while the trainer holds its batches).
    pub fn retain_batches(mut self, k: usize) -> Self {
        self.retain_batches = k;
        self
    }

    /// Async mode: whether every env gets its fair share of steps (default on). Envs are
    /// bound to workers; a worker that gets less CPU would otherwise have its envs stepped
    /// less often, since the envs that finish first are the ones sent again. With it, an
    /// action waits in the trainer while its worker is more than 2 steps per env ahead of
    /// the slowest busy worker, so every env's step count stays within a few steps of the
    /// others' (see `docs/architecture.md`). Off, every action goes out as it is sent:
    /// a few percent more throughput for the cheapest envs, and no guarantee.
    pub fn fair_scheduling(mut self, on: bool) -> Self {
        self.fair_scheduling = on;
        self
    }

    /// Whether workers record live stats in the region (default on; see
    /// [`Pool::stats`]). Off saves two clock reads per batch and one per 16 env steps.
    pub fn stats(mut self, on: bool) -> Self {
        self.stats = on;
        self
    }

    /// Records trace spans (trainer calls and waits; each worker's waits, env work and
    /// publishing per batch) for [`Pool::write_trace`] (default off). Workers keep their
    /// last 4096 spans each in the region; the trainer its last 16384.
    pub fn trace(mut self, on: bool) -> Self {
        self.trace = on;
        self
    }

    /// Hang detection: `step`/`reset`/`recv` give up after waiting this long for the
    /// workers, and `recv` also when a worker has been inside one env's code for longer
    /// (its other envs' results would otherwise never come while the other workers fill the
    /// batches), with [`PoolFailure::Timeout`](crate::PoolFailure::Timeout) naming the envs that did not answer; the pool
    /// closes and its workers are stopped (default: wait as long as it takes). Under
    /// [`FailurePolicy::Restart`] those workers are killed and restarted instead.
    pub fn step_timeout(mut self, timeout: Duration) -> Self {
        self.step_timeout = Some(timeout);
        self
    }

    /// What happens when a worker dies (default [`FailurePolicy::Fail`]).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure_policy = policy;
        self
    }

    /// Takes the env from a plugin: a shared library implementing the C ABI of
    /// `worker/include/shmenv_env.h`, which every worker process loads for itself (the env
    /// id must be one the library provides). The path is made absolute here, so every
    /// worker loads the same file; a missing file is refused at `build`. See
    /// `docs/plugins.md`.
    pub fn plugin(mut self, path: impl Into<PathBuf>) -> Self {
        self.plugin = Some(path.into());
        self
    }

    /// Whether the trainer steps a shard of the envs itself (default
    /// [`TrainerShardMode::Auto`]). In sync mode the envs are then split into
    /// `num_workers + 1` shards, and between posting the workers and waiting for them the
    /// trainer steps the first one on its own thread, into the same result rows (default
    /// `num_workers`: one fewer than the cores). With as many workers as cores minus one,
    /// the pool is one runnable process per core instead of a trainer that shares a core
    /// with a worker on every batch: where envs are cheap, most of a small batch's cost
    /// (`docs/benchmarks.md`, "The trainer's own shard").
    ///
    /// `Auto` takes it for sync pools of envs the trainer can build from the worker
    /// program's registry (this program's, declared by `serve_if_worker`, or the one given
    /// to [`trainer_shard`](Self::trainer_shard)), when the worker count is left to the
    /// pool, there are two cores or more, no restarts are asked for and no plugin runs the
    /// envs. There it also measures what a batch costs, on a throwaway set of up to 8 of the
    /// envs built, reset (seeded as the pool seeds them) and stepped in the trainer before
    /// any worker starts ([`HANDOFF_COST`](super::HANDOFF_COST)): a batch cheaper than a
    /// handoff to a worker runs in the trainer alone, with no worker process (not with a
    /// step timeout, which times workers). [`Pool::trainer_shard_choice`] says what it
    /// chose and why. What the shard
    /// trades away: those envs run inside the trainer, so a crash there ends the trainer,
    /// a hang there is the trainer's (the step timeout covers only the wait for the
    /// workers) and a panic closes the pool as a worker's does. Plugins, whose C code can
    /// crash, therefore keep their envs in workers unless this is `On`.
    pub fn trainer_shard_mode(mut self, mode: TrainerShardMode) -> Self {
        self.trainer_shard_mode = mode;
        self
    }

    /// Turns the trainer's shard on ([`trainer_shard_mode`](Self::trainer_shard_mode)
    /// `On`) with `make` building its envs in the trainer; for the envs a worker program
    /// knows, pass `shmenv::worker::trainer_shard(registry)` with the same registry. Not
    /// for Python envs hosted by the package (they run in worker processes only).
    pub fn trainer_shard(
        mut self,
        make: impl Fn(&PoolParams) -> Result<Box<dyn TrainerShard>, WorkerReport> + Send + Sync + 'static,
    ) -> Self {
        self.trainer_shard = Some(ShardMaker(Arc::new(make)));
        self.trainer_shard_mode = TrainerShardMode::On;
        self
    }

    /// How long workers may take to build their envs (default 60 s).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Creates the region, starts the workers and waits until they all serve.
    pub fn build(self) -> Result<Pool, BuildError> {
        if crate::launch::program::is_unserved_worker() {
            return Err(BuildError::NotServingWorkers);
        }
        Pool::start(self)
    }
}
