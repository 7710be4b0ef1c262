//! The shard of envs the trainer steps itself ([`PoolBuilder::trainer_shard`]): in sync
//! mode the trainer posts the workers, steps its own envs into their rows of the result
//! block while the workers step theirs, then waits. With two cores, that is two runnable
//! processes instead of three (a trainer waiting for two workers shares a core with one).
//!
//! The engine does not know envs; the worker crate implements [`TrainerShard`]
//! (`shmenv_worker::trainer_shard`).
//!
//! [`PoolBuilder::trainer_shard`]: super::PoolBuilder::trainer_shard

use super::startup::build_error;
use super::Core;
use crate::error::{BuildError, PoolFailure};
use crate::launch::fork::{Place, ThreadGuard};
use crate::protocol::{Command, Layout, PoolParams, WorkerReport};
use crate::region::Region;
use crate::stats::now_ns;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// The most envs the throwaway shard of [`batch_cost`] builds: enough for a time above the
/// clock's resolution, few enough that envs costly to build cost little.
const PROBE_ENVS: usize = 8;

/// Envs stepped on the trainer's thread, into their rows of the region
/// ([`PoolParams::trainer_envs`]).
pub trait TrainerShard: Send {
    /// The envs' spec (canonical JSON, as a worker reports it): it must equal the workers'.
    fn spec_json(&self) -> serde_json::Value;

    /// Episodes begun so far (commanded and automatic resets), for the stats.
    fn resets(&self) -> u64;

    /// Resets the envs (env `i` seeded `seed + i`, as a pool's first reset does), steps them
    /// a few times with one valid action and returns the least time one step of all of
    /// them took; `None` where it cannot tell (the default). A batch after the first that
    /// takes longer than `enough` may be the answer: the pool needs to know only whether a
    /// batch is cheaper than a handoff. It changes the envs' state: the pool calls it only on a
    /// throwaway shard it builds to measure what a batch costs
    /// ([`HANDOFF_COST`](super::HANDOFF_COST)).
    fn probe_batch_time(&mut self, seed: Option<u64>, enough: Duration) -> Option<Duration> {
        let _ = (seed, enough);
        None
    }

    /// Runs sync command `command` (not `Close`) on every env of the shard with `actions`
    /// (the shard's action rows, from the trainer's own checked copy: never read back
    /// from the region, where a worker could change them), writing their rows of result
    /// block `block` of `layout` in `region`. `Err((env_id, message))`: an env failed (a
    /// panic, caught); the pool closes.
    ///
    /// # Safety
    /// The caller must hold the protocol's exclusive access to the shard's rows of that
    /// block for the call: no other process or thread reads or writes them, and no view of
    /// them is alive. The pool calls it only between its posts to the workers and its wait
    /// for them, inside a call holding `&mut Pool`, with its own region and layout.
    unsafe fn run(
        &mut self,
        command: Command,
        actions: &[u8],
        region: &Region,
        layout: &Layout,
        block: usize,
    ) -> Result<(), (usize, String)>;
}

/// Builds a pool's [`TrainerShard`] from its parameters, or says why not as a worker
/// would ([`WorkerReport`]: unknown env, bad config, ...).
pub type MakeTrainerShard = dyn Fn(&PoolParams) -> Result<Box<dyn TrainerShard>, WorkerReport> + Send + Sync;

/// What [`PoolBuilder::trainer_shard`](super::PoolBuilder::trainer_shard) holds.
#[derive(Clone)]
pub(super) struct ShardMaker(pub(super) Arc<MakeTrainerShard>);

impl ShardMaker {
    /// Builds the trainer's shard for a pool of `params`: a worker's refusals (unknown id,
    /// bad config) as the worker's errors would read, anything else as
    /// [`BuildError::TrainerShard`].
    pub(super) fn build(&self, params: &PoolParams) -> Result<OwnShard, BuildError> {
        let shard = (self.0)(params).map_err(|report| match report {
            WorkerReport::UnknownEnv { .. } | WorkerReport::BadConfig { .. } => build_error(0, report),
            WorkerReport::Failed { message } => BuildError::TrainerShard(message),
            other => BuildError::TrainerShard(format!("{other:?}")),
        })?;
        Ok(OwnShard::new(shard))
    }
}

/// What one batch of `params`' envs costs stepped in the trainer, measured on throwaway
/// shards that `make` builds (the first envs of the pool, seeded as the pool seeds them from
/// `seed`), the time scaled to every env: first one env (stepped twice if its second step
/// shows the batch dear, not in rounds), and unless that puts the batch above ten times
/// [`HANDOFF_COST_BUSY`](super::HANDOFF_COST_BUSY), up to 8 envs. `None` when it cannot tell: the envs fail to build (the workers will say why), panic, or do
/// not measure themselves. What `trainer_shard` auto decides from
/// ([`ShardQuestion::batch_cost`](super::ShardQuestion::batch_cost)).
pub fn batch_cost(make: &MakeTrainerShard, params: &PoolParams, seed: Option<u64>) -> Option<Duration> {
    let dear = super::HANDOFF_COST_BUSY;
    let time_of = |envs: usize, enough: Duration| {
        let probe = PoolParams {
            num_envs: envs,
            num_workers: 0,
            trainer_shard: true,
            stats: false,
            trace: false,
            ..params.clone()
        };
        let time =
            catch_unwind(AssertUnwindSafe(|| make(&probe).ok()?.probe_batch_time(seed, enough))).ok()??;
        Some(time.mul_f64(params.num_envs as f64 / envs as f64))
    };
    // A batch after the first (which warms the caches) fifty times dearer than a handoff
    // is dear.
    let enough = super::HANDOFF_COST * 50;
    // One env first: a batch it shows ten times dearer than a handoff needs no more envs
    // built (one env's batch carries the per-batch work alone, so it reads dearer per env).
    // Its second step (the first warms the caches) answers alone when it already says so,
    // and is over 20 us.
    let first_enough = (dear * 10).div_f64(params.num_envs as f64).max(Duration::from_micros(20));
    let one = time_of(1, first_enough.min(enough))?;
    if one >= dear * 10 || params.num_envs == 1 {
        return Some(one);
    }
    time_of(PROBE_ENVS.min(params.num_envs), enough)
}

/// The shard maker of this program's own registry ([`declare_program_shard`]).
static PROGRAM_SHARD: OnceLock<ShardMaker> = OnceLock::new();

/// Declares how this program builds envs in the trainer: the same registry its workers
/// serve. Called by `shmenv::worker::serve_if_worker` in a trainer, so that a pool whose
/// workers run this program can take a trainer's shard by default
/// ([`TrainerShardMode::Auto`](super::TrainerShardMode::Auto)). The first call counts.
pub fn declare_program_shard(
    make: impl Fn(&PoolParams) -> Result<Box<dyn TrainerShard>, WorkerReport> + Send + Sync + 'static,
) {
    let _ = PROGRAM_SHARD.set(ShardMaker(Arc::new(make)));
}

/// The maker [`declare_program_shard`] declared, if any.
pub(super) fn program_shard() -> Option<ShardMaker> {
    PROGRAM_SHARD.get().cloned()
}

impl std::fmt::Debug for ShardMaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MakeTrainerShard")
    }
}

/// A built [`TrainerShard`], in the pool, with the actions it steps next.
pub(super) struct OwnShard {
    /// The mutex makes the pool `Sync` (envs need only be `Send`); the pool reaches the
    /// shard through `&mut` (`Mutex::get_mut`), never locking.
    shard: Mutex<Box<dyn TrainerShard>>,
    /// The shard's action rows as the trainer checked them (`step`) or set them (the reset
    /// flags of `reset_envs`): its own copy, not the region's.
    actions: Vec<u8>,
    /// Episodes the shard had begun when the stats last counted them.
    resets_seen: u64,
}

impl std::fmt::Debug for OwnShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnShard").field("actions", &self.actions.len()).finish_non_exhaustive()
    }
}

impl OwnShard {
    pub(super) fn new(shard: Box<dyn TrainerShard>) -> OwnShard {
        OwnShard { shard: Mutex::new(shard), actions: Vec::new(), resets_seen: 0 }
    }

    /// The shard, for a call holding the pool mutably.
    fn get(&mut self) -> &mut dyn TrainerShard {
        // A poisoned lock is only a panic's mark; the pool closes on a failure anyway.
        self.shard.get_mut().unwrap_or_else(PoisonError::into_inner).as_mut()
    }

    /// The envs' spec (see [`TrainerShard::spec_json`]).
    pub(super) fn spec_json(&mut self) -> serde_json::Value {
        self.get().spec_json()
    }

    /// Takes the shard's action rows for the next command from the trainer's checked
    /// actions (`bytes`: every env's rows).
    pub(super) fn set_actions(&mut self, bytes: &[u8], rows: Range<usize>, row_bytes: usize) {
        self.actions.clear();
        self.actions.extend_from_slice(&bytes[rows.start * row_bytes..rows.end * row_bytes]);
    }

    /// Sets each of the shard's action rows to `flags[i]` followed by zeros (the reset
    /// flags of a partial reset).
    pub(super) fn set_flags(&mut self, flags: impl Iterator<Item = u8>, row_bytes: usize) {
        self.actions.clear();
        for flag in flags {
            self.actions.push(flag);
            self.actions.resize(self.actions.len() + row_bytes - 1, 0);
        }
    }
}

impl Core {
    /// Sync mode: runs `command` on the trainer's own shard, if it has one, into block `j`
    /// (after the workers were posted: they step theirs meanwhile), and counts it in the
    /// stats. An env's failure, or a panic of the shard itself, closes the pool.
    pub(super) fn run_own_shard(&mut self, command: Command, j: usize) -> Result<(), PoolFailure> {
        let Some(own) = &mut self.own_shard else { return Ok(()) };
        // Two clock reads a batch only when something records them. Without workers the
        // shard's time is the call's, which `end_call` counts (two reads fewer a batch).
        let alone = self.params.num_workers == 0;
        let timed = (self.params.stats && !alone) || self.trace.is_some();
        let started = if timed { now_ns() } else { 0 };
        let envs = self.params.trainer_envs();
        let OwnShard { shard, actions, resets_seen } = own;
        let shard = shard.get_mut().unwrap_or_else(PoisonError::into_inner);
        let (region, layout) = (&*self.region, &self.layout);
        // A child that env code forks meanwhile gets private zero pages for the region, and
        // is stopped when it returns here (it must not wait for the workers' posts).
        let guard = ThreadGuard::new(region.base_addr(), region.len());
        let result = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: sync mode, after this call's posts and before its wait: by the
            // protocol no worker touches the trainer's shard rows (shards are disjoint), no
            // view of block `j` is alive (`&mut self`; Python's views keep only the other
            // block), and the region and layout are the pool's own.
            unsafe { shard.run(command, actions, region, layout, j) }
        }));
        drop(guard);
        self.owner.stop_if_copy(Place::Trainer, None);
        let failure = match result {
            Ok(Ok(())) => None,
            Ok(Err((env_id, message))) => Some(PoolFailure::EnvPanicked { env_id, message }),
            Err(panic) => Some(PoolFailure::EnvPanicked {
                env_id: envs.start,
                message: format!("the trainer's shard panicked: {}", panic_text(&panic)),
            }),
        };
        if let Some(failure) = failure {
            return Err(self.fail(failure));
        }
        let ended = if timed { now_ns() } else { started };
        if self.params.stats {
            let steps = if command == Command::Step { envs.len() } else { 0 };
            let resets = shard.resets();
            let new_resets = resets.saturating_sub(std::mem::replace(resets_seen, resets));
            // Without workers `end_call` counts the call's time as the shard's.
            let env_ns = if alone { 0 } else { ended - started };
            self.pool_stats().add_shard(steps as u64, new_resets, env_ns);
        }
        if timed {
            self.record_spans(&[("own shard", started, ended)]);
        }
        Ok(())
    }
}

/// A caught panic's message.
fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or(panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("?")
}
