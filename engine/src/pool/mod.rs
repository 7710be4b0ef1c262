//! The trainer's handle: builds the region, starts the workers, and steps them.

use crate::batch::Batch;
use crate::error::{PoolFailure, RecvError, ResetError, SendError, StepError};
use crate::launch::{Supervisor, WorkerExit};
use crate::protocol::{self, AutoReset, Column, Command, Layout, PoolParams};
use crate::region::Region;
use crate::spec::{Element, EnvSpec};
use crate::stats::{PoolStats, StatsReport, StatsSnapshot};
use crate::sync::{WaitMode, Waiter};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

mod async_mode;
mod builder;
mod control;
mod failure;
mod restart;
mod settings;
mod shard_choice;
mod startup;
mod sync_mode;
mod trace;
mod trainer_shard;
mod wait_tuner;

use crate::batch::BatchData;
pub use crate::launch::memory::{
    estimate::{most_that_fit, PoolEstimate},
    human_bytes, CgroupLimit, MemoryRoom,
};
use async_mode::RingState;
pub use builder::{FailurePolicy, PoolBuilder};
use control::{trainer_semaphore, Control};
use failure::Abort;
pub use settings::{default_num_workers, MAX_WORKERS};
pub use shard_choice::{
    others_hold_the_cores, ShardQuestion, TrainerShardChoice, TrainerShardMode, HANDOFF_COST,
    HANDOFF_COST_BUSY,
};
pub use startup::closest_match;
pub use trainer_shard::{batch_cost, declare_program_shard, MakeTrainerShard, TrainerShard};

/// A pool of envs stepped by worker processes through shared memory.
///
/// ```no_run
/// use shmenv_engine::Pool;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut pool = Pool::builder("CartPole-v1").num_envs(8).num_workers(2).seed(7).build()?;
/// let batch = pool.reset()?;
/// assert_eq!(batch.observations::<f32>()?.shape(), &[8, 4]);
/// let actions = vec![1i64; 8];
/// let batch = pool.step(&actions)?;
/// println!("rewards {:?}", batch.rewards());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Pool {
    core: Core,
    mode: Mode,
}

/// Sync or async: what only one of the two modes keeps.
#[derive(Debug)]
enum Mode {
    Sync(SyncState),
    /// Boxed: the ring's state is much larger than sync mode's.
    Async(Box<AsyncState>),
}

/// Sync mode's own state.
#[derive(Debug)]
struct SyncState {
    /// The result block the next command writes.
    next_sync_block: usize,
}

/// Async mode's own state: the trainer's side of the ring and the ring's layout.
#[derive(Debug)]
struct AsyncState {
    ring: RingState,
    layout: protocol::RingLayout,
}

/// What both modes share: the region, the workers and the pool's settings.
#[derive(Debug)]
struct Core {
    // Field order matters for drop: the supervisor (workers) goes before the region.
    supervisor: Supervisor,
    /// The region's memfd, for the workers the supervisor (re)spawns; closed with the pool,
    /// while views may keep the mapping ([`MappingLease`]) longer.
    region_file: Option<std::fs::File>,
    /// Shared with every [`MappingLease`], so views handed out keep the mapping alive.
    region: Arc<Region>,
    /// The data part's layout; its `ring` is moved into [`AsyncState`] (the mode says
    /// which mode this is, nothing else).
    layout: Layout,
    /// Gates workers may sleep on besides their semaphores (async mode: each block's
    /// `ready_for` and the pause gate): `shutdown` wakes them, so they see the close at once.
    close_wakes: Vec<usize>,
    spec: EnvSpec,
    params: PoolParams,
    program: PathBuf,
    seed: u64,
    waiter: Waiter,
    /// `WaitStrategy::Auto`: chooses between waiting actively and sleeping (see
    /// [`wait_tuner`]).
    tuner: Option<wait_tuner::WaitTuner>,
    /// The thread that made the latest call (the stats count its CPU time as the trainer's).
    caller_tid: u32,
    /// `CpuAffinity::Auto`: each worker's core while the pool waits actively (workers
    /// sleeping under contention are unpinned).
    pinned: Vec<Option<usize>>,
    /// The mode the workers' placement is for.
    placed_for: WaitMode,
    /// Workers kept unpinned because other tasks held the cores are not pinned again
    /// before this time (see `Core::cores_look_free`).
    busy_until_ns: u64,
    /// `CpuAffinity::Auto` with the wait tuner: whether other programs keep the cores busy
    /// (see `Core::tune`).
    others: crate::launch::OthersWatch,
    first_reset_done: bool,
    has_reset: bool,
    closed: Option<String>,
    /// Envs whose episode ended (only tracked with `AutoReset::Disabled`).
    ended: Vec<bool>,
    /// Asked while waiting whether to give up (Ctrl-C in a Python trainer).
    interrupt: Option<InterruptCheck>,
    /// Hang detection (see [`PoolBuilder::step_timeout`]).
    step_timeout: Option<Duration>,
    /// Sync commands sent so far (the `COMMAND_SEQ` word).
    command_seq: u32,
    /// What to do when a worker dies.
    failure_policy: FailurePolicy,
    /// Restarts per worker.
    restarts: Vec<u32>,
    /// Envs whose worker was restarted during the last call (their rows are fresh episodes).
    restarted: Vec<usize>,
    /// How long a (re)started worker may take to build its envs.
    startup_timeout: Duration,
    /// How long a replacement may take to start: the step timeout (at least twice the
    /// pool's own start-up time), or the start-up timeout without one.
    restart_timeout: Duration,
    /// With tracing on: the trainer's recent spans (name, start ns, end ns).
    trace: Option<std::collections::VecDeque<(&'static str, u64, u64)>>,
    /// The process that built the pool; in a forked child the pool is inert.
    owner: crate::launch::fork::Owner,
    /// The envs the trainer steps itself ([`PoolBuilder::trainer_shard_mode`]).
    own_shard: Option<trainer_shard::OwnShard>,
    /// Whether the trainer has a shard, and why.
    shard_choice: TrainerShardChoice,
    /// The kernel's OOM-kill counters when the pool started (see [`Core::died`]).
    oom: crate::launch::memory::OomWatch,
}

/// The check installed by [`Pool::set_interrupt_check`].
struct InterruptCheck(Box<dyn FnMut() -> bool + Send + Sync>);

impl std::fmt::Debug for InterruptCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InterruptCheck")
    }
}

/// A handle that keeps a pool's region mapped (see [`Pool::mapping_lease`]). Holding it
/// costs the mapping and its fd, nothing else; the workers are gone once the pool is.
#[derive(Clone, Debug)]
pub struct MappingLease(Arc<Region>);

impl MappingLease {
    /// The mapped addresses, `start..end` (to check that views are zero-copy).
    pub fn address_range(&self) -> Range<usize> {
        self.0.base_addr()..self.0.base_addr() + self.0.len()
    }
}

impl Pool {
    /// Starts configuring a pool of `env_id` envs.
    pub fn builder(env_id: impl Into<String>) -> PoolBuilder {
        PoolBuilder::new(env_id.into())
    }

    /// The env spec the workers reported.
    pub fn spec(&self) -> &EnvSpec {
        &self.core.spec
    }

    /// Number of envs.
    pub fn num_envs(&self) -> usize {
        self.core.params.num_envs
    }

    /// Number of worker processes.
    pub fn num_workers(&self) -> usize {
        self.core.params.num_workers
    }

    /// The envs worker `w` hosts.
    pub fn shard(&self, w: usize) -> Range<usize> {
        self.core.shard(w)
    }

    /// The envs the trainer steps itself ([`PoolBuilder::trainer_shard_mode`]; empty without).
    pub fn trainer_envs(&self) -> Range<usize> {
        self.core.params.trainer_envs()
    }

    /// Whether the trainer steps a shard of the envs, and why
    /// ([`PoolBuilder::trainer_shard_mode`]).
    pub fn trainer_shard_choice(&self) -> TrainerShardChoice {
        self.core.shard_choice
    }

    /// Process ids of the workers.
    pub fn worker_pids(&self) -> &[u32] {
        self.core.supervisor.pids()
    }

    /// Takes the trainer's end of worker `w`'s private call socket (the worker command
    /// asked for one, [`WorkerCommand::call_socket`](crate::WorkerCommand::call_socket)):
    /// that of the worker's current process, once; a restarted worker brings a new one.
    /// `None` when there is none to take (no such worker, none asked for, or taken).
    pub fn take_call_socket(&self, w: usize) -> Option<crate::launch::CallSocket> {
        self.core.supervisor.take_call_socket(w)
    }

    /// The base seed.
    pub fn seed(&self) -> u64 {
        self.core.seed
    }

    /// The auto-reset mode.
    pub fn autoreset(&self) -> AutoReset {
        self.core.params.autoreset
    }

    /// The worker program.
    pub fn worker_program(&self) -> &std::path::Path {
        &self.core.program
    }

    /// Results per batch (`num_envs` in sync mode).
    pub fn batch_size(&self) -> usize {
        self.core.params.batch_size
    }

    /// Whether the pool is in async mode (`batch_size < num_envs`).
    pub fn is_async(&self) -> bool {
        matches!(self.mode, Mode::Async(_))
    }

    /// Resets every env. The first reset seeds env `i` with `seed + i`; later ones
    /// continue each env's random stream, like Gymnasium's `reset()` without a seed.
    ///
    /// In async mode this is `async_reset()` followed by `recv()`: the batch holds the
    /// first `batch_size` envs to finish resetting; `recv()` the rest.
    pub fn reset(&mut self) -> Result<Batch<'_>, ResetError> {
        if !self.core.first_reset_done {
            let seed = self.core.seed;
            return self.reset_with_seed(seed);
        }
        match &mut self.mode {
            Mode::Sync(s) => Ok(self.core.run(s, Command::Reset)?),
            Mode::Async(a) => {
                self.core.check_open()?;
                self.core.start_reset(a, None)?;
                Ok(self.core.recv_batch(a)?)
            }
        }
    }

    /// Resets every env, seeding env `i` with `seed + i` (wrapping). In async mode, like
    /// [`Pool::reset`], returns the first batch.
    pub fn reset_with_seed(&mut self, seed: u64) -> Result<Batch<'_>, ResetError> {
        self.core.check_open()?;
        match &mut self.mode {
            Mode::Sync(s) => {
                // SAFETY: the reset seed word is the trainer's alone (this thread's, inside a `&mut self`
                // call); workers read it only after the command post below (Release) publishes it.
                unsafe { self.core.region.write_pod(protocol::RESET_SEED, &seed) };
                self.core.first_reset_done = true;
                Ok(self.core.run(s, Command::ResetSeeded)?)
            }
            Mode::Async(a) => {
                self.core.start_reset(a, Some(seed))?;
                Ok(self.core.recv_batch(a)?)
            }
        }
    }

    /// Sync mode: resets only the envs `mask` selects (`mask[i]` for env `i`), as
    /// Gymnasium's `reset(options={"reset_mask": mask})` does; with `Some(seed)` env `i` is
    /// seeded with `seed + i`, otherwise it continues its random stream. The other envs are
    /// left as they are: their rows hold their current observation, with reward 0 and both
    /// flags false. (Under [`AutoReset::Disabled`] this is how ended envs are brought back
    /// one by one.) The first reset of a pool must reset every env.
    pub fn reset_envs(&mut self, mask: &[bool], seed: Option<u64>) -> Result<Batch<'_>, ResetError> {
        match &mut self.mode {
            Mode::Sync(s) => self.core.reset_envs(s, mask, seed),
            Mode::Async(_) => self.core.wrong_mode(
                "reset_envs",
                "this pool is async: send() the envs to reset after async_reset(), or use a sync pool",
            ),
        }
    }

    /// Sync mode: steps every env with its action: `actions` holds `num_envs` rows of the
    /// action space's dtype, row-major (`&[i64]` for `Discrete`, `&[f32]` for a `Box` of
    /// f32). Actions are validated before any worker sees them. Row `i` of the batch is
    /// env `i`. (Async pools use [`Pool::send`] and [`Pool::recv`].)
    pub fn step<T: Element>(&mut self, actions: &[T]) -> Result<Batch<'_>, StepError> {
        match &mut self.mode {
            Mode::Sync(s) => self.core.step(s, actions),
            Mode::Async(_) => self.core.wrong_mode(
                "step",
                "this pool is async (batch_size < num_envs): send() actions, then recv() results",
            ),
        }
    }

    /// Async mode: hands `actions` (one row per env, row-major, in the action space's
    /// dtype) to the envs `env_ids`. Each env may have one action in flight; its result
    /// comes back in exactly one later `recv()` batch. Everything is validated before any
    /// worker sees it.
    pub fn send<T: Element>(&mut self, actions: &[T], env_ids: &[usize]) -> Result<(), SendError> {
        match &mut self.mode {
            Mode::Async(a) => self.core.send(a, actions, env_ids),
            Mode::Sync(_) => self.core.wrong_mode(
                "send",
                "this pool is sync (batch_size = num_envs): use step(), or build with .batch_size(b) for b < num_envs",
            ),
        }
    }

    /// Async mode: resets every env (the first time seeding env `i` with `seed + i`, then
    /// continuing each env's stream); `recv()` returns the reset observations. No env may
    /// have an action in flight.
    pub fn async_reset(&mut self) -> Result<(), ResetError> {
        self.core.check_open()?;
        let seed = (!self.core.first_reset_done).then_some(self.core.seed);
        match &mut self.mode {
            Mode::Async(a) => self.core.start_reset(a, seed),
            Mode::Sync(_) => self.core.wrong_mode("async_reset", "this pool is sync: use reset()"),
        }
    }

    /// Async mode: waits for the next batch of `batch_size` results, from the envs that
    /// finished first. The batch's `env_ids()` say which env each row is. The batch stays
    /// valid until the next call on the pool; meanwhile workers fill the next blocks.
    pub fn recv(&mut self) -> Result<Batch<'_>, RecvError> {
        match &mut self.mode {
            Mode::Async(a) => self.core.recv(a),
            Mode::Sync(_) => self.core.wrong_mode("recv", "this pool is sync: use step()"),
        }
    }

    /// Number of envs with an action in flight (async mode; 0 in sync mode).
    pub fn in_flight(&self) -> usize {
        match &self.mode {
            Mode::Async(a) => a.ring.in_flight,
            Mode::Sync(_) => 0,
        }
    }

    /// Installs a check that waits for workers call every few milliseconds while they
    /// sleep; when it returns `true` the wait gives up with [`PoolFailure::Interrupted`] and
    /// the pool closes (its workers are stopped). A Python trainer uses it to honour Ctrl-C
    /// while the GIL is released.
    pub fn set_interrupt_check(&mut self, check: impl FnMut() -> bool + Send + Sync + 'static) {
        self.core.interrupt = Some(InterruptCheck(Box::new(check)));
    }

    /// Keeps the region mapped for as long as the lease lives, even after the pool is
    /// closed or dropped: what views that outlive a borrow (numpy arrays) hold on to.
    pub fn mapping_lease(&self) -> MappingLease {
        MappingLease(self.core.region.clone())
    }

    /// What the pool did since it started: per worker steps, utilization (share of the time
    /// in env code), wait and publish shares, sampled env-step p50/p99; the trainer's wait
    /// share; async ring fill. [`StatsReport::verdict`] says where the time went.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut pool = shmenv_engine::Pool::builder("CartPole-v1").num_envs(64).build()?;
    /// pool.reset()?;
    /// for _ in 0..1000 {
    ///     pool.step(&[0i64; 64])?;
    /// }
    /// let report = pool.stats();
    /// println!("{} steps/s, trainer waits {:.0}% ({})", report.steps_per_sec,
    ///          100.0 * report.trainer_wait_share, report.verdict());
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> StatsReport {
        self.stats_snapshot().since(None)
    }

    /// The raw counters now; `later.since(Some(&earlier))` gives an interval's figures.
    pub fn stats_snapshot(&self) -> StatsSnapshot {
        StatsSnapshot::read(&self.core.region, &self.core.params)
    }

    /// The envs whose worker was restarted during the last call (see
    /// [`Batch::restarted_envs`], which borrows the same list).
    pub fn restarted_envs(&self) -> &[usize] {
        &self.core.restarted
    }

    /// Restarts so far, per worker (see [`FailurePolicy::Restart`]).
    pub fn restarts(&self) -> &[u32] {
        &self.core.restarts
    }

    /// Closes the pool: asks workers to exit, waits up to a second, kills stragglers and
    /// reaps them (dropping the pool does the same). Returns how each worker ended:
    /// `WorkerExit::Code(0)` for a clean exit.
    ///
    /// In a process forked from the one that built the pool, closing (or dropping) it
    /// touches nothing of the parent's pool and returns no exits.
    pub fn close(mut self) -> Vec<Option<WorkerExit>> {
        if !self.core.owner.is_current() {
            return vec![None; self.core.params.num_workers];
        }
        self.core.shutdown();
        // Workers are gone: the memfd goes now, even while views keep the mapping.
        drop(self.core.region_file.take());
        self.core.supervisor.exits()
    }
}

impl Core {
    /// The envs worker `w` hosts.
    fn shard(&self, w: usize) -> Range<usize> {
        self.params.shard(w)
    }
    fn pool_stats(&self) -> PoolStats<'_> {
        PoolStats::new(&self.region, self.params.num_workers)
    }

    /// Ends a pool call that began at `entered` and waited `waited` ns for workers: its
    /// stats, and the wait tuner's measurement (`steps`: it returned a batch of steps).
    /// Returns the time it ended at (its clock read, for the caller's trace span).
    fn end_call(&mut self, entered: u64, waited: u64, batch: bool, steps: bool) -> u64 {
        let now = crate::stats::now_ns();
        let tid = crate::stats::current_tid();
        if tid != self.caller_tid {
            self.caller_tid = tid;
            self.pool_stats().follow_caller(tid);
        }
        self.pool_stats().add_call(now - entered, waited, batch);
        if batch && self.params.num_workers == 0 {
            // The trainer stepped every env: the call's time is its shard's.
            self.pool_stats().add_shard(0, 0, now - entered);
        }
        if batch && self.tuner.is_some() && self.waiter.mode() == WaitMode::Sleep {
            self.pool_stats().add_sleep_batch();
        }
        self.tune(now, now - entered, steps);
        now
    }

    fn check_open(&self) -> Result<(), PoolFailure> {
        if !self.owner.is_current() {
            return Err(self.foreign());
        }
        match &self.closed {
            Some(reason) => Err(PoolFailure::Closed { reason: reason.clone() }),
            None => Ok(()),
        }
    }

    /// The envs of `envs` whose episodes ended under `AutoReset::Disabled` (they need a
    /// reset before they step again).
    fn ended_envs(&self, envs: impl Iterator<Item = usize>) -> Vec<usize> {
        if self.ended.is_empty() {
            return Vec::new(); // Auto-reset on: nothing to look at (no pass over the envs).
        }
        envs.filter(|&e| self.ended.get(e).copied().unwrap_or(false)).collect()
    }

    /// Views of rows `rows` of result block `j`.
    fn batch_view(&self, j: usize, rows: Range<usize>) -> BatchData<'_> {
        let block = &self.layout.blocks[j];
        let columns = Column::ALL.map(|c| {
            let bytes = block.column(c).rows(rows.clone());
            // SAFETY: the rows are complete (the trainer acquired every completion post, an
            // Acquire) and no worker writes them again until the next command (sync) or until
            // the trainer releases the block (async), both of which need `&mut self`, while
            // the views borrow `&self`. Offsets come from our own layout; `Region::slice`
            // checks bounds and alignment.
            unsafe { self.region.slice::<u8>(bytes.start, bytes.len()) }
        });
        BatchData { spec: &self.spec, region: &self.region, block, rows, columns, restarted: &self.restarted }
    }

    fn control(&self) -> Control<'_> {
        Control { region: &self.region, num_workers: self.params.num_workers }
    }

    fn shutdown(&mut self) {
        if !self.owner.is_current() {
            // A forked child's copy: the workers, the region's words and the supervisor
            // thread are the parent's (see `crate::launch::fork`). The supervisor does the same.
            return;
        }
        // Release: a worker that sees Close (in its command loop or while waiting for a
        // block) exits without touching the region again.
        self.region.atomic_u32(protocol::COMMAND_WORD).store(Command::Close as u32, Ordering::Release);
        self.control().post_all();
        for &gate in &self.close_wakes {
            crate::sync::Gate::in_region(&self.region, gate).wake();
        }
        self.supervisor.shutdown();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if !self.core.owner.is_current() {
            // A forked child's copy of the trainer's envs: their resources (a plugin's
            // files, threads) are the parent's; the child leaves them alone.
            std::mem::forget(self.core.own_shard.take());
        }
        self.core.shutdown();
    }
}

/// Restart policy: writes [`recovery::UNWRITTEN`] into every env id of a block the trainer
/// owns (received and not released, or before start-up), so rows nobody writes stand out.
fn mark_unwritten(region: &Region, block: &protocol::ResultBlock) {
    // SAFETY: the trainer owns the block: every row of its batch was received and the block
    // is not yet released (or no worker has the data part yet), so no worker writes it.
    let ids = unsafe { region.slice_mut::<u32>(block.column(Column::EnvIds).offset, block.rows) };
    ids.fill(crate::ring::recovery::UNWRITTEN);
}

/// A pool can move to another thread (workers are tied to its supervisor thread, not to
/// the thread that built it).
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<Pool>();
};
