//! The trainer's handle: builds the region, starts the workers, and steps them.

use crate::action;
use crate::batch::Batch;
use crate::error::{BuildError, StepError};
use crate::launch::{CpuAffinity, Supervisor, WorkerCommand, WorkerExit};
use crate::protocol::{self, worker_block, AutoReset, Command, Header, Layout, PoolParams, WorkerReport};
use crate::region::Region;
use crate::ring::{RegionRing, RingWords};
use crate::spec::{Element, EnvSpec};
use crate::stats::{now_ns, PoolStats, StatsReport, StatsSnapshot};
use crate::sync::{WaitOutcome, WaitStrategy, Waiter};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod batch_data;
mod builder;
mod control;
mod memory;
mod restart;
mod ring_state;
mod send_order;
mod settings;
mod startup;

pub(crate) use batch_data::BatchData;
pub use builder::{FailurePolicy, PoolBuilder};
use control::{trainer_semaphore, Control};
pub(crate) use memory::human as human_bytes;
pub use memory::{CgroupLimit, MemoryRoom};
use ring_state::RingState;
pub use settings::MAX_WORKERS;
use startup::Startup;

use send_order::SendOrder;

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
    // Field order matters for drop: the supervisor (workers) goes before the region.
    supervisor: Supervisor,
    /// Shared with every [`MappingLease`], so views handed out keep the mapping alive.
    region: Arc<Region>,
    layout: Layout,
    spec: EnvSpec,
    params: PoolParams,
    program: PathBuf,
    seed: u64,
    waiter: Waiter,
    first_reset_done: bool,
    has_reset: bool,
    closed: Option<String>,
    /// Envs whose episode ended (only tracked with `AutoReset::Disabled`).
    ended: Vec<bool>,
    /// Sync mode: the result block the next command writes.
    next_sync_block: usize,
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
    /// Async mode only.
    ring: Option<RingState>,
    /// The process that built the pool; in a forked child the pool is inert.
    owner: crate::fork::Owner,
}

/// Trainer spans kept for [`Pool::write_trace`].
const TRAINER_SPANS: usize = 16384;

/// Why a wait for workers was given up.
enum Abort {
    Died(usize, WorkerExit),
    Failed(usize),
    Interrupted,
    TimedOut {
        workers: Vec<usize>,
        env_ids: Vec<usize>,
    },
    /// Async: these workers have been running env code for longer than the step timeout.
    Overdue(Vec<usize>),
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
    /// The mapped addresses, `start..end`.
    pub fn address_range(&self) -> Range<usize> {
        self.0.base_addr()..self.0.base_addr() + self.0.len()
    }
}

impl Pool {
    /// Starts configuring a pool of `env_id` envs.
    pub fn builder(env_id: impl Into<String>) -> PoolBuilder {
        PoolBuilder {
            env_id: env_id.into(),
            config: serde_json::json!({}),
            num_envs: 1,
            num_workers: None,
            seed: None,
            autoreset: AutoReset::NextStep,
            max_episode_steps: None,
            worker_command: None,
            wait: WaitStrategy::Auto,
            affinity: CpuAffinity::Auto,
            batch_size: None,
            ring_depth: 2,
            retain_batches: 0,
            fair_scheduling: true,
            stats: true,
            trace: false,
            step_timeout: None,
            failure_policy: FailurePolicy::Fail,
            startup_timeout: Duration::from_secs(60),
        }
    }

    fn start(b: PoolBuilder) -> Result<Pool, BuildError> {
        // The start-up timeout covers the whole start: spawning, building envs, attaching.
        let started = Instant::now();
        let deadline = started + b.startup_timeout;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (num_workers, batch_size) = settings::check(&b, cores)?;
        let command = match b.worker_command {
            Some(c) => c,
            None => crate::program::default_worker_program()
                .map(WorkerCommand::new)
                .map_err(|searched| BuildError::WorkerProgramNotFound { searched })?,
        };
        let program = command.program.clone();
        let params = PoolParams {
            env_id: b.env_id,
            config: b.config,
            num_envs: b.num_envs,
            num_workers,
            autoreset: b.autoreset,
            max_episode_steps: b.max_episode_steps,
            wait: b.wait.name().into(),
            batch_size,
            ring_depth: b.ring_depth,
            stats: b.stats,
            trace: b.trace,
            restart: b.failure_policy != FailurePolicy::Fail,
        };
        let params_json = serde_json::to_vec(&params).expect("params serialize");
        if params_json.len() > protocol::PARAMS_CAPACITY {
            return Err(BuildError::InvalidArgument(format!(
                "config is {} bytes of JSON, more than the {} the region holds",
                params_json.len(),
                protocol::PARAMS_CAPACITY
            )));
        }
        let region_err = |what| move |source| BuildError::Region { what, source };
        let region = Region::create("shmenv", protocol::bootstrap_size(num_workers))
            .map_err(region_err("memfd_create"))?;
        region.write_pod(0, &Header::new(b.num_envs as u32, num_workers as u32, params_json.len() as u32));
        region.write_bytes(protocol::params_offset(num_workers), &params_json);

        let supervisor = Supervisor::start(
            &command,
            &params.env_id,
            region.fd(),
            b.affinity.assign(num_workers),
            deadline,
        )
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::TimedOut => {
                BuildError::StartupTimeout { workers: (0..num_workers).collect(), waited: b.startup_timeout }
            }
            _ => BuildError::Spawn { program: program.clone(), source },
        })?;
        let mut startup = Startup {
            supervisor,
            region,
            params,
            program,
            waiter: Waiter::new(b.wait.policy(num_workers + 1, cores)),
        };
        let (spec, layout) = match startup.handshake(deadline, b.startup_timeout) {
            Ok(agreed) => agreed,
            Err(e) => {
                startup.abandon();
                return Err(e);
            }
        };
        let Startup { supervisor, region, params, program, waiter } = startup;
        // A replacement may take as long as the step timeout, and at least twice what this
        // start took (a restart builds envs too).
        let restart_timeout = match b.step_timeout {
            Some(t) => t.max(started.elapsed() * 2),
            None => b.startup_timeout,
        };
        let trace = params.trace.then(std::collections::VecDeque::new);
        let shards: Vec<Range<usize>> = (0..params.num_workers)
            .map(|w| protocol::shard(w, params.num_envs, params.num_workers))
            .collect();
        let worker_of: Vec<usize> =
            (0..params.num_envs).map(|e| shards.iter().position(|s| s.contains(&e)).unwrap_or(0)).collect();
        let ring = layout.ring.as_ref().map(|r| RingState {
            batch_size: r.batch_size,
            next_batch: 0,
            retain: b.retain_batches as u64,
            order: SendOrder::new(
                worker_of.clone(),
                shards.iter().map(|s| s.len() as u64).collect(),
                b.fair_scheduling,
            ),
            in_flight: 0,
            pending: vec![false; params.num_envs],
            worker_of: worker_of.iter().map(|&w| w as u32).collect(),
            queue_heads: vec![0; params.num_workers],
            shards: shards.clone(),
            touched: vec![false; params.num_workers],
            released: 0,
            restart_marked: vec![false; params.num_envs],
            marked: 0,
            fills: vec![Vec::new(); params.num_workers],
        });
        let ended =
            if params.autoreset == AutoReset::Disabled { vec![false; params.num_envs] } else { Vec::new() };
        let num_workers = params.num_workers;
        Ok(Pool {
            supervisor,
            region: Arc::new(region),
            layout,
            spec,
            params,
            program,
            seed: b.seed.unwrap_or_else(default_seed),
            waiter,
            first_reset_done: false,
            has_reset: false,
            closed: None,
            ended,
            next_sync_block: 0,
            interrupt: None,
            step_timeout: b.step_timeout,
            command_seq: 0,
            failure_policy: b.failure_policy,
            restarts: vec![0; num_workers],
            restarted: Vec::new(),
            startup_timeout: b.startup_timeout,
            restart_timeout,
            trace,
            ring,
            owner: crate::fork::Owner::current(),
        })
    }

    /// The env spec the workers reported.
    pub fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// Number of envs.
    pub fn num_envs(&self) -> usize {
        self.params.num_envs
    }

    /// Number of worker processes.
    pub fn num_workers(&self) -> usize {
        self.params.num_workers
    }

    /// The envs worker `w` hosts.
    pub fn shard(&self, w: usize) -> Range<usize> {
        protocol::shard(w, self.params.num_envs, self.params.num_workers)
    }

    /// Process ids of the workers.
    pub fn worker_pids(&self) -> &[u32] {
        self.supervisor.pids()
    }

    /// The base seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The auto-reset mode.
    pub fn autoreset(&self) -> AutoReset {
        self.params.autoreset
    }

    /// The worker program.
    pub fn worker_program(&self) -> &std::path::Path {
        &self.program
    }

    /// Address range of the shared mapping (to check that views are zero-copy).
    pub fn region_range(&self) -> Range<usize> {
        self.region.base_addr()..self.region.base_addr() + self.region.len()
    }

    /// Results per batch (`num_envs` in sync mode).
    pub fn batch_size(&self) -> usize {
        self.params.batch_size
    }

    /// Whether the pool is in async mode (`batch_size < num_envs`).
    pub fn is_async(&self) -> bool {
        self.ring.is_some()
    }

    /// Resets every env. The first reset seeds env `i` with `seed + i`; later ones
    /// continue each env's random stream, like Gymnasium's `reset()` without a seed.
    ///
    /// In async mode this is `async_reset()` followed by `recv()`: the batch holds the
    /// first `batch_size` envs to finish resetting; `recv()` the rest.
    pub fn reset(&mut self) -> Result<Batch<'_>, StepError> {
        if self.first_reset_done {
            if self.ring.is_some() {
                self.async_reset()?;
                return self.recv();
            }
            self.run(Command::Reset)
        } else {
            let seed = self.seed;
            self.reset_with_seed(seed)
        }
    }

    /// Resets every env, seeding env `i` with `seed + i` (wrapping). In async mode, like
    /// [`Pool::reset`], returns the first batch.
    pub fn reset_with_seed(&mut self, seed: u64) -> Result<Batch<'_>, StepError> {
        self.check_open()?;
        if self.ring.is_some() {
            self.start_reset(Some(seed))?;
            return self.recv();
        }
        self.region.write_pod(protocol::RESET_SEED, &seed);
        self.first_reset_done = true;
        self.run(Command::ResetSeeded)
    }

    /// Sync mode: resets only the envs `mask` selects (`mask[i]` for env `i`), as
    /// Gymnasium's `reset(options={"reset_mask": mask})` does; with `Some(seed)` env `i` is
    /// seeded with `seed + i`, otherwise it continues its random stream. The other envs are
    /// left as they are: their rows hold their current observation, with reward 0 and both
    /// flags false. (Under [`AutoReset::Disabled`] this is how ended envs are brought back
    /// one by one.) The first reset of a pool must reset every env.
    pub fn reset_envs(&mut self, mask: &[bool], seed: Option<u64>) -> Result<Batch<'_>, StepError> {
        self.check_open()?;
        let n = self.params.num_envs;
        if self.ring.is_some() {
            return Err(StepError::WrongMode {
                call: "reset_envs",
                hint: "this pool is async: send() the envs to reset after async_reset(), or use a sync pool",
            });
        }
        if mask.len() != n {
            return Err(StepError::BadMask { len: mask.len(), num_envs: n });
        }
        if !self.has_reset && !mask.iter().all(|&m| m) {
            return Err(StepError::PartialFirstReset);
        }
        let flag = match seed {
            Some(s) => {
                self.region.write_pod(protocol::RESET_SEED, &s);
                protocol::reset_flag::RESET_SEEDED
            }
            None => protocol::reset_flag::RESET,
        };
        let row_bytes = self.layout.actions.row_bytes;
        let rows = self.layout.actions.rows(0..n);
        // SAFETY: as in `step`: the action rows are written only by the trainer and read by
        // workers only after the next post; no view borrows them (`&mut self`).
        let actions = unsafe { self.region.slice_mut::<u8>(rows.start, n * row_bytes) };
        for (i, &m) in mask.iter().enumerate() {
            actions[i * row_bytes] = if m { flag } else { protocol::reset_flag::KEEP };
        }
        for (i, &m) in mask.iter().enumerate() {
            if m && !self.ended.is_empty() {
                self.ended[i] = false;
            }
        }
        self.first_reset_done = true;
        self.run(Command::ResetSome)
    }

    /// Sync mode: steps every env with its action: `actions` holds `num_envs` rows of the
    /// action space's dtype, row-major (`&[i64]` for `Discrete`, `&[f32]` for a `Box` of
    /// f32). Actions are validated before any worker sees them. Row `i` of the batch is
    /// env `i`. (Async pools use [`Pool::send`] and [`Pool::recv`].)
    pub fn step<T: Element>(&mut self, actions: &[T]) -> Result<Batch<'_>, StepError> {
        self.check_open()?;
        if self.ring.is_some() {
            return Err(StepError::WrongMode {
                call: "step",
                hint: "this pool is async (batch_size < num_envs): send() actions, then recv() results",
            });
        }
        if !self.has_reset {
            return Err(StepError::NotReset);
        }
        self.check_not_ended(0..self.params.num_envs)?;
        let n = self.params.num_envs;
        action::validate(&self.spec.action, n, actions)?;
        // After validation `actions` is exactly the action rows, in the space's dtype.
        let rows = self.layout.actions.rows(0..n);
        // SAFETY: the action rows are written only by the trainer and read by workers only
        // after the next post (below, after this borrow ends); no batch view borrows them
        // (`&mut self`).
        let dst = unsafe { self.region.slice_mut::<T>(rows.start, actions.len()) };
        dst.copy_from_slice(actions);
        self.run(Command::Step)
    }

    /// Async mode: hands `actions` (one row per env, row-major, in the action space's
    /// dtype) to the envs `env_ids`. Each env may have one action in flight; its result
    /// comes back in exactly one later `recv()` batch. Everything is validated before any
    /// worker sees it.
    pub fn send<T: Element>(&mut self, actions: &[T], env_ids: &[usize]) -> Result<(), StepError> {
        self.check_open()?;
        let entered = now_ns();
        let keep = self.ring.as_ref().map_or(0, |r| if r.retain == 0 { 0 } else { r.retain + 1 });
        self.release_received(keep);
        let n = self.params.num_envs;
        if self.ring.is_none() {
            return Err(StepError::WrongMode {
                call: "send",
                hint: "this pool is sync (batch_size = num_envs): use step(), or build with .batch_size(b) for b < num_envs",
            });
        }
        if !self.has_reset {
            return Err(StepError::NotReset);
        }
        self.recover_idle_deaths()?;
        let ring = self.ring.as_mut().expect("async mode");
        // Mark as we check; on a refusal, unmark what was marked so nothing changes.
        for (k, &e) in env_ids.iter().enumerate() {
            let refusal = if e >= n {
                Some(StepError::BadEnvId { env_id: e, num_envs: n })
            } else if ring.pending[e] {
                Some(StepError::EnvBusy { env_id: e })
            } else {
                None
            };
            if let Some(err) = refusal {
                for &m in &env_ids[..k] {
                    ring.pending[m] = false;
                }
                return Err(err);
            }
            ring.pending[e] = true;
        }
        let unmark = |ring: &mut RingState| env_ids.iter().for_each(|&e| ring.pending[e] = false);
        if !self.ended.is_empty() {
            let ended: Vec<usize> = env_ids.iter().copied().filter(|&e| self.ended[e]).collect();
            if !ended.is_empty() {
                unmark(ring);
                return Err(StepError::NeedsReset { env_ids: ended });
            }
        }
        if let Err(e) = action::validate(&self.spec.action, env_ids.len(), actions) {
            unmark(ring);
            return Err(e.into());
        }
        let per_env = self.spec.action.num_elements();
        for (k, &e) in env_ids.iter().enumerate() {
            let row = self.layout.actions.rows(e..e + 1);
            // SAFETY: env `e` has no action in flight (checked above), so no worker reads
            // its action row until the queue entry pushed below publishes it.
            let dst = unsafe { self.region.slice_mut::<T>(row.start, per_env) };
            dst.copy_from_slice(&actions[k * per_env..(k + 1) * per_env]);
        }
        let ring = self.ring.as_mut().expect("async mode");
        let layout = self.layout.ring.as_ref().expect("async layout");
        ring.in_flight += env_ids.len();
        let mut order = std::mem::take(&mut ring.order);
        order.send(env_ids, |e| ring.enqueue(&self.region, layout, e, protocol::queue_entry::STEP, 0));
        ring.order = order;
        ring.publish_queues(&self.region, self.params.num_workers);
        self.pool_stats().add_call(now_ns() - entered, 0, false);
        self.record_spans(&[("send", entered, now_ns())]);
        Ok(())
    }

    /// Async mode: resets every env (the first time seeding env `i` with `seed + i`, then
    /// continuing each env's stream); `recv()` returns the reset observations. No env may
    /// have an action in flight.
    pub fn async_reset(&mut self) -> Result<(), StepError> {
        self.check_open()?;
        let seed = (!self.first_reset_done).then_some(self.seed);
        self.start_reset(seed)
    }

    fn start_reset(&mut self, seed: Option<u64>) -> Result<(), StepError> {
        self.release_received(self.ring.as_ref().map_or(0, |r| r.retain));
        if self.ring.is_none() {
            return Err(StepError::WrongMode { call: "async_reset", hint: "this pool is sync: use reset()" });
        }
        self.recover_idle_deaths()?;
        let ring = self.ring.as_mut().expect("async mode");
        if let Some(env_id) = ring.pending.iter().position(|&p| p) {
            return Err(StepError::EnvBusy { env_id });
        }
        // Every env starts over: a restarted env's reset row is just a reset row.
        ring.restart_marked.fill(false);
        ring.marked = 0;
        let kind = match seed {
            Some(s) => {
                self.region.write_pod(protocol::RESET_SEED, &s);
                protocol::queue_entry::RESET_SEEDED
            }
            None => protocol::queue_entry::RESET,
        };
        self.push(0..self.params.num_envs, kind);
        self.first_reset_done = true;
        self.has_reset = true;
        self.ended.fill(false);
        Ok(())
    }

    /// Puts envs on their workers' queues (now in flight), then publishes each touched
    /// queue once.
    fn push(&mut self, envs: impl Iterator<Item = usize>, kind: u32) {
        let ring = self.ring.as_mut().expect("async mode");
        let layout = self.layout.ring.as_ref().expect("async layout");
        for e in envs {
            ring.enqueue(&self.region, layout, e, kind, 0);
            ring.order.send_now(e);
            ring.pending[e] = true;
            ring.in_flight += 1;
        }
        ring.publish_queues(&self.region, self.params.num_workers);
    }

    /// Passes the sent actions whose turn has come ([`SendOrder`]) to their workers'
    /// queues and publishes them; with `for_batch`, also enough of the oldest held back
    /// that the workers hold a whole batch (`recv` is about to wait for one).
    fn pass_on(&mut self, for_batch: bool) {
        let ring = self.ring.as_mut().expect("async mode");
        if ring.order.held() == 0 {
            return;
        }
        let layout = self.layout.ring.as_ref().expect("async layout");
        let out = ring.in_flight - ring.order.held();
        let need = if for_batch { ring.batch_size } else { 0 };
        // (Taken out for the call so the closure may use the rest of `ring`.)
        let mut order = std::mem::take(&mut ring.order);
        order.release(out, need, |e| ring.enqueue(&self.region, layout, e, protocol::queue_entry::STEP, 0));
        ring.order = order;
        ring.publish_queues(&self.region, self.params.num_workers);
    }

    /// Async mode, restart policy: restarts workers that died since the last call, before
    /// anything is pushed to them.
    fn recover_idle_deaths(&mut self) -> Result<(), StepError> {
        let restarting = self.ring.is_some() && self.failure_policy != FailurePolicy::Fail;
        if restarting && self.supervisor.exited_worker().is_some() {
            self.recover_async()?;
        }
        Ok(())
    }

    /// Async mode: waits for the next batch of `batch_size` results, from the envs that
    /// finished first. The batch's `env_ids()` say which env each row is. The batch stays
    /// valid until the next call on the pool; meanwhile workers fill the next blocks.
    pub fn recv(&mut self) -> Result<Batch<'_>, StepError> {
        self.check_open()?;
        let entered = now_ns();
        self.release_received(self.ring.as_ref().map_or(0, |r| r.retain));
        let Some(ring) = self.ring.as_ref() else {
            return Err(StepError::WrongMode { call: "recv", hint: "this pool is sync: use step()" });
        };
        if ring.in_flight < ring.batch_size {
            return Err(StepError::NotEnoughInFlight {
                in_flight: ring.in_flight,
                batch_size: ring.batch_size,
            });
        }
        let (q, b) = (ring.next_batch, ring.batch_size);
        self.recover_idle_deaths()?;
        self.pass_on(true);
        let ring_layout = self.layout.ring.as_ref().expect("async layout");
        let j = RegionRing { region: &self.region, layout: ring_layout }.block_of(q);
        let full =
            ring_layout.committed.iter().filter(|&&c| self.region.semaphore(c).count() as usize >= b).count();
        PoolStats::new(&self.region, self.params.num_workers).add_ring_sample(full as u64);
        let restarting = self.failure_policy != FailurePolicy::Fail;
        let waited_from = now_ns();
        loop {
            let words =
                RegionRing { region: &self.region, layout: self.layout.ring.as_ref().expect("async layout") };
            let (sup, control) =
                (&self.supervisor, Control { region: &self.region, num_workers: self.params.num_workers });
            let interrupt = &mut self.interrupt;
            let deadline = self.step_timeout.map(|t| Instant::now() + t);
            // A worker stuck in env code while the others fill the batches never makes a
            // wait time out: look at how long each has been in env code, before waiting (a
            // batch may be complete already) and while waiting.
            // (A worker that holds actions but runs no env code, e.g. a stopped one, is not
            // overtaken for long: the fair scheduling holds the others back until a batch
            // needs it, and then the wait times out.)
            let overdue = || {
                let hung = self.step_timeout.map(|t| control.overdue(t)).unwrap_or_default();
                (!hung.is_empty()).then_some(Abort::Overdue(hung))
            };
            let outcome = match sup.exited_worker().map(|(w, exit)| Abort::Died(w, exit)).or_else(overdue) {
                Some(abort) => Err(WaitOutcome::Aborted(abort)),
                None => words.receive_until(q, &mut self.waiter, deadline, || {
                    if let Some((worker, exit)) = sup.exited_worker() {
                        return Some(Abort::Died(worker, exit));
                    }
                    if let Some(worker) = control.failed_worker() {
                        return Some(Abort::Failed(worker));
                    }
                    if let Some(abort) = overdue() {
                        return Some(abort);
                    }
                    interrupt.as_mut().is_some_and(|f| (f.0)()).then_some(Abort::Interrupted)
                }),
            };
            match outcome {
                Ok(()) => break,
                // Restart policy: replace the dead, or kill and replace the hung, then wait on.
                Err(WaitOutcome::Aborted(Abort::Died(..))) if restarting => self.recover_async()?,
                Err(WaitOutcome::Aborted(Abort::Overdue(hung)))
                    if restarting && self.may_restart(hung.len() as u32) =>
                {
                    self.kill_hung(&hung)?;
                    self.recover_async()?;
                }
                Err(WaitOutcome::Aborted(abort)) => return Err(self.abort(abort)),
                Err(WaitOutcome::TimedOut) => {
                    let grace = self.step_timeout.unwrap_or_default().min(Duration::from_millis(100));
                    let hung = if restarting { self.hung_async(grace) } else { Vec::new() };
                    if hung.is_empty() || !self.may_restart(hung.len() as u32) {
                        // The envs whose actions are with the workers (not those the
                        // fair scheduling holds back in the trainer).
                        let ring = self.ring.as_ref().expect("async mode");
                        let env_ids: Vec<usize> = (0..self.params.num_envs)
                            .filter(|&e| ring.pending[e] && !ring.order.is_held(e))
                            .collect();
                        let mut workers: Vec<usize> =
                            env_ids.iter().map(|&e| ring.worker_of[e] as usize).collect();
                        workers.dedup();
                        return Err(self.abort(Abort::TimedOut { workers, env_ids }));
                    }
                    self.kill_hung(&hung)?;
                    self.recover_async()?;
                }
            }
        }
        let waited = now_ns() - waited_from;
        // A batch can be complete while another worker has failed or died (the healthy
        // workers fill it): its envs would silently never come back, so report it now
        // (under the restart policy the next call replaces it).
        if let Some((worker, exit)) = self.supervisor.exited_worker().filter(|_| !restarting) {
            return Err(self.fail(self.died(worker, exit)));
        }
        if let Some(worker) = self.control().failed_worker() {
            return Err(self.fail(self.worker_error(worker)));
        }
        // The rows' env ids were written by workers: check them before trusting them.
        let block = &self.layout.blocks[j];
        // SAFETY: all `b` rows of block `j` were committed (Acquire above), and workers do
        // not write the block again before the trainer releases it (its gate).
        let ids: &[u32] = unsafe { self.region.slice(block.env_ids.offset, b) };
        let ring = self.ring.as_mut().expect("async mode");
        for (row, &id) in ids.iter().enumerate() {
            match ring.pending.get_mut(id as usize) {
                Some(p @ true) => {
                    *p = false;
                    ring.order.received(id as usize);
                }
                _ => {
                    let what = format!(
                        "row {row} of batch {} names env {id}, which has no action in flight (the pool has envs \
                         0..{})",
                        ring.next_batch, self.params.num_envs
                    );
                    return Err(self.fail(StepError::Protocol { what }));
                }
            }
        }
        ring.in_flight -= b;
        ring.next_batch += 1;
        self.restarted.clear();
        if ring.marked > 0 {
            // SAFETY: as for `ids`; the trainer owns the received block until it releases it,
            // and no view of it exists yet (`&mut self`).
            let truncated = unsafe { self.region.slice_mut::<u8>(block.truncated.offset, b) };
            for (r, &id) in ids.iter().enumerate() {
                if std::mem::take(&mut ring.restart_marked[id as usize]) {
                    ring.marked -= 1;
                    truncated[r] = 1;
                    self.restarted.push(id as usize);
                }
            }
        }
        if !self.ended.is_empty() {
            let view = self.batch_view(j, 0..b);
            let ended: Vec<(usize, bool)> = (0..b)
                .map(|r| (view.env_ids[r] as usize, view.terminated[r] != 0 || view.truncated[r] != 0))
                .collect();
            for (id, e) in ended {
                self.ended[id] = e;
            }
        }
        // The received envs are no longer the oldest out: actions held back for them go now.
        self.pass_on(false);
        self.pool_stats().add_call(now_ns() - entered, waited, true);
        self.record_spans(&[("recv", entered, now_ns()), ("wait", waited_from, waited_from + waited)]);
        Ok(Batch { view: self.batch_view(j, 0..b) })
    }

    /// Installs a check that waits for workers call every few milliseconds while they
    /// sleep; when it returns `true` the wait gives up with [`StepError::Interrupted`] and
    /// the pool closes (its workers are stopped). A Python trainer uses it to honour Ctrl-C
    /// while the GIL is released.
    pub fn set_interrupt_check(&mut self, check: impl FnMut() -> bool + Send + Sync + 'static) {
        self.interrupt = Some(InterruptCheck(Box::new(check)));
    }

    /// Keeps the region mapped for as long as the lease lives, even after the pool is
    /// closed or dropped: what views that outlive a borrow (numpy arrays) hold on to.
    pub fn mapping_lease(&self) -> MappingLease {
        MappingLease(self.region.clone())
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
        StatsSnapshot::read(&self.region, self.params.num_workers)
    }

    /// Writes the recorded spans (see [`PoolBuilder::trace`]) as Chrome trace JSON, which
    /// Perfetto (<https://ui.perfetto.dev>) and `chrome://tracing` open: one track for the
    /// trainer (its `step`/`recv`/`send` calls and the waits inside them) and one per worker
    /// process (`wait`, `env`, `publish` per batch), named as `ps` shows them. Times are
    /// microseconds since the pool started, on the machine-wide monotonic clock.
    pub fn write_trace(&self, path: &std::path::Path) -> std::io::Result<()> {
        let Some(trainer) = &self.trace else {
            return Err(std::io::Error::other("tracing is off: build the pool with .trace(true)"));
        };
        let t0 = StatsSnapshot::read(&self.region, self.params.num_workers).started_ns;
        let us = |ns: u64| ns.saturating_sub(t0) as f64 / 1e3;
        let me = std::process::id();
        let mut events = vec![serde_json::json!({
            "ph": "M", "name": "process_name", "pid": me, "args": {"name": format!("shmenv trainer ({})", self.params.env_id)},
        })];
        for &(name, start, end) in trainer {
            events.push(serde_json::json!({
                "ph": "X", "name": name, "cat": "trainer", "pid": me, "tid": me,
                "ts": us(start), "dur": end.saturating_sub(start) as f64 / 1e3,
            }));
        }
        if let Some(rows) = &self.layout.trace {
            for (w, &pid) in self.supervisor.pids().iter().enumerate() {
                events.push(serde_json::json!({
                    "ph": "M", "name": "process_name", "pid": pid,
                    "args": {"name": format!("shmenv-worker[{w}] {}", self.params.env_id)},
                }));
                for span in crate::stats::TraceRing::new(&self.region, rows, w).spans() {
                    let name = match span.kind {
                        protocol::trace::kind::WAIT => "wait",
                        protocol::trace::kind::ENV => "env",
                        protocol::trace::kind::PUBLISH => "publish",
                        _ => continue, // untrusted bytes: skip what we do not know
                    };
                    events.push(serde_json::json!({
                        "ph": "X", "name": name, "cat": "worker", "pid": pid, "tid": pid,
                        "ts": us(span.start_ns), "dur": span.dur_ns as f64 / 1e3,
                    }));
                }
            }
        }
        let doc = serde_json::json!({"traceEvents": events, "displayTimeUnit": "ns"});
        std::fs::write(path, serde_json::to_vec(&doc).map_err(std::io::Error::other)?)
    }

    /// Keeps the trainer's last spans when tracing.
    fn record_spans(&mut self, spans: &[(&'static str, u64, u64)]) {
        if let Some(trace) = self.trace.as_mut() {
            for &s in spans {
                if trace.len() == TRAINER_SPANS {
                    trace.pop_front();
                }
                trace.push_back(s);
            }
        }
    }

    fn pool_stats(&self) -> PoolStats<'_> {
        PoolStats::new(&self.region, self.params.num_workers)
    }

    /// Number of envs with an action in flight (async mode; 0 in sync mode).
    pub fn in_flight(&self) -> usize {
        self.ring.as_ref().map_or(0, |r| r.in_flight)
    }

    /// Gives the block of the last batch back to the workers.
    /// Async mode: gives the blocks of received batches back to the workers, all but the
    /// last `keep` received.
    fn release_received(&mut self, keep: u64) {
        if let (Some(ring), Some(layout)) = (self.ring.as_mut(), self.layout.ring.as_ref()) {
            let words = RegionRing { region: &self.region, layout };
            while ring.released.saturating_add(keep) < ring.next_batch {
                let q = ring.released;
                if self.params.restart {
                    mark_unwritten(&self.region, &self.layout.blocks[words.block_of(q)]);
                }
                words.release(q);
                ring.released = q + 1;
            }
        }
    }

    fn check_open(&self) -> Result<(), StepError> {
        if !self.owner.is_current() {
            return Err(self.foreign());
        }
        match &self.closed {
            Some(reason) => Err(StepError::Closed { reason: reason.clone() }),
            None => Ok(()),
        }
    }

    fn check_not_ended(&self, envs: Range<usize>) -> Result<(), StepError> {
        let ended: Vec<usize> = envs.filter(|&e| self.ended.get(e).copied().unwrap_or(false)).collect();
        if ended.is_empty() {
            Ok(())
        } else {
            Err(StepError::NeedsReset { env_ids: ended })
        }
    }

    /// The error for a wait that was given up, recorded as the reason the pool is closed.
    /// An interrupted pool also stops its workers: a command is half done.
    fn abort(&mut self, abort: Abort) -> StepError {
        let err = match abort {
            Abort::Died(worker, exit) => self.died(worker, exit),
            Abort::Failed(worker) => self.worker_error(worker),
            Abort::Interrupted => {
                self.shutdown();
                StepError::Interrupted
            }
            Abort::TimedOut { workers, env_ids } => {
                // They did not answer: a polite close would only wait for them.
                workers.iter().for_each(|&w| self.kill_worker(w));
                self.shutdown();
                StepError::Timeout { workers, env_ids, waited: self.step_timeout.unwrap_or_default() }
            }
            Abort::Overdue(workers) => {
                let ring = self.ring.as_ref().expect("async mode");
                let env_ids =
                    workers.iter().flat_map(|&w| ring.shards[w].clone()).filter(|&e| ring.pending[e]);
                let env_ids = env_ids.collect();
                return self.abort(Abort::TimedOut { workers, env_ids });
            }
        };
        self.fail(err)
    }

    /// The error of any call in a process forked from the pool's owner.
    fn foreign(&self) -> StepError {
        StepError::ForeignProcess { owner: self.owner.pid(), current: crate::fork::current_pid() }
    }

    /// Records `err` as the reason the pool is closed, and returns it.
    fn fail(&mut self, err: StepError) -> StepError {
        self.closed = Some(err.to_string());
        err
    }

    /// The error a failed worker reported.
    fn worker_error(&self, worker: usize) -> StepError {
        match self.control().report(worker) {
            Some(WorkerReport::EnvPanicked { env_id, message }) => StepError::EnvPanicked { env_id, message },
            Some(WorkerReport::Failed { message }) => {
                StepError::WorkerFailed { worker, env_ids: self.shard(worker), message }
            }
            other => StepError::WorkerFailed {
                worker,
                env_ids: self.shard(worker),
                message: format!("unexpected worker state (report {other:?})"),
            },
        }
    }

    /// Sync mode: sends `command` to every worker and waits until all are done.
    fn run(&mut self, command: Command) -> Result<Batch<'_>, StepError> {
        self.check_open()?;
        let entered = now_ns();
        self.restarted.clear();
        // Workers that died while idle (after the last command): restart them first; they
        // join this command with a reset of their envs instead.
        let mut skip = if self.supervisor.any_exited() {
            if !self.may_restart(1) {
                let (worker, exit) = self.supervisor.first_exit().expect("a worker exited");
                return Err(self.fail(self.died(worker, exit)));
            }
            self.restart_idle_deaths()?
        } else {
            Vec::new()
        };
        let j = self.next_sync_block;
        self.next_sync_block = (j + 1) % protocol::SYNC_BLOCKS;
        self.command_seq = self.command_seq.wrapping_add(1);
        self.region.atomic_u32(protocol::COMMAND_WORD).store(command as u32, Ordering::Relaxed);
        self.region.atomic_u32(protocol::SYNC_BLOCK).store(j as u32, Ordering::Relaxed);
        self.region.atomic_u32(protocol::COMMAND_SEQ).store(self.command_seq, Ordering::Relaxed);
        // Each post is a Release that publishes the command, seed and actions.
        for v in (0..self.params.num_workers).filter(|v| !skip.contains(v)) {
            self.control().worker_semaphore(v).post();
        }
        let w = (self.params.num_workers - skip.len()) as u32;
        let sem = trainer_semaphore(&self.region);
        let sup = &self.supervisor;
        let interrupt = &mut self.interrupt;
        let waited_from = now_ns();
        let deadline = self.step_timeout.map(|t| Instant::now() + t);
        let outcome = sem.acquire(w, &mut self.waiter, deadline, || {
            if let Some((worker, exit)) = sup.exited_worker() {
                return Some(Abort::Died(worker, exit));
            }
            interrupt.as_mut().is_some_and(|f| (f.0)()).then_some(Abort::Interrupted)
        });
        let waited = now_ns() - waited_from;
        match outcome {
            Ok(()) => {}
            Err(WaitOutcome::Aborted(Abort::Died(worker, exit))) if self.may_restart(1) => {
                for v in self.quiesce(&skip, worker, exit)? {
                    self.restart_worker(v)?;
                    skip.push(v);
                }
            }
            Err(WaitOutcome::Aborted(abort)) => return Err(self.abort(abort)),
            Err(WaitOutcome::TimedOut) => {
                let control = self.control();
                let hung: Vec<usize> = (0..self.params.num_workers)
                    .filter(|&w| {
                        let done = protocol::worker_control(w) + worker_block::DONE_SEQ;
                        !skip.contains(&w)
                            && control.region.atomic_u32(done).load(Ordering::Relaxed) != self.command_seq
                    })
                    .collect();
                if !self.may_restart(hung.len() as u32) {
                    let env_ids = hung.iter().flat_map(|&w| self.shard(w)).collect();
                    return Err(self.abort(Abort::TimedOut { workers: hung, env_ids }));
                }
                // Restart policy: the hung workers are killed and started again like dead ones;
                // every other worker finished the command, so its posts are dropped.
                self.kill_hung(&hung)?;
                self.drop_trainer_posts();
                for &v in &hung {
                    self.restart_worker(v)?;
                }
                skip.extend(hung);
            }
        }
        // A worker that failed still posted; find it.
        if let Some(worker) = self.control().failed_worker() {
            return Err(self.fail(self.worker_error(worker)));
        }
        for worker in skip {
            self.reset_restarted(worker, j)?;
        }
        self.has_reset = true;
        let n = self.params.num_envs;
        if !self.ended.is_empty() {
            if command == Command::ResetSome {
                // `reset_envs` cleared the envs it reset.
            } else if command == Command::Step {
                let view = self.batch_view(j, 0..n);
                let ended: Vec<bool> =
                    view.terminated.iter().zip(view.truncated).map(|(&a, &b)| a != 0 || b != 0).collect();
                self.ended = ended;
            } else {
                self.ended.fill(false);
            }
        }
        self.pool_stats().add_call(now_ns() - entered, waited, true);
        let name = if command == Command::Step { "step" } else { "reset" };
        self.record_spans(&[(name, entered, now_ns()), ("wait", waited_from, waited_from + waited)]);
        Ok(Batch { view: self.batch_view(j, 0..n) })
    }

    /// The envs whose worker was restarted during the last call (see
    /// [`Batch::restarted_envs`], which borrows the same list).
    pub fn restarted_envs(&self) -> &[usize] {
        &self.restarted
    }

    /// Restarts so far, per worker (see [`FailurePolicy::Restart`]).
    pub fn restarts(&self) -> &[u32] {
        &self.restarts
    }

    fn died(&self, worker: usize, exit: WorkerExit) -> StepError {
        StepError::WorkerDied {
            worker,
            pid: self.supervisor.pids()[worker],
            env_ids: self.shard(worker),
            exit,
            output: self.supervisor.output_tail(worker),
        }
    }

    /// Views of rows `rows` of result block `j`.
    fn batch_view(&self, j: usize, rows: Range<usize>) -> BatchData<'_> {
        let block = &self.layout.blocks[j];
        let n = rows.len();
        let at = |slot: &protocol::ArraySlot| slot.rows(rows.clone()).start;
        // SAFETY: the rows are complete (the trainer acquired every completion post, an
        // Acquire) and no worker writes them again until the next command (sync) or until
        // the trainer releases the block (async), both of which need `&mut self`, while the
        // views borrow `&self`. Offsets come from our own layout; `Region::slice` checks
        // bounds and alignment.
        unsafe {
            BatchData {
                spec: &self.spec,
                region: &self.region,
                block,
                rows: rows.clone(),
                env_ids: self.region.slice(at(&block.env_ids), n),
                rewards: self.region.slice(at(&block.rewards), n),
                terminated: self.region.slice(at(&block.terminated), n),
                truncated: self.region.slice(at(&block.truncated), n),
                episode_return: self.region.slice(at(&block.episode_return), n),
                episode_length: self.region.slice(at(&block.episode_length), n),
                elapsed_steps: self.region.slice(at(&block.elapsed_steps), n),
                restarted: &self.restarted,
            }
        }
    }

    fn control(&self) -> Control<'_> {
        Control { region: &self.region, num_workers: self.params.num_workers }
    }

    /// Closes the pool: asks workers to exit, waits up to a second, kills stragglers and
    /// reaps them (dropping the pool does the same). Returns how each worker ended:
    /// `WorkerExit::Code(0)` for a clean exit.
    ///
    /// In a process forked from the one that built the pool, closing (or dropping) it
    /// touches nothing of the parent's pool and returns no exits.
    pub fn close(mut self) -> Vec<Option<WorkerExit>> {
        if !self.owner.is_current() {
            return vec![None; self.params.num_workers];
        }
        self.shutdown();
        self.supervisor.exits()
    }

    fn shutdown(&mut self) {
        if !self.owner.is_current() {
            // A forked child's copy: the workers, the region's words and the supervisor
            // thread are the parent's (see `crate::fork`). The supervisor does the same.
            return;
        }
        // Release: a worker that sees Close (in its command loop or while waiting for a
        // block) exits without touching the region again.
        self.region.atomic_u32(protocol::COMMAND_WORD).store(Command::Close as u32, Ordering::Release);
        self.control().post_all();
        if let Some(layout) = &self.layout.ring {
            RegionRing { region: &self.region, layout }.wake_all();
            self.region.gate(protocol::RING_PAUSE).wake();
        }
        self.supervisor.shutdown();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Restart policy: writes [`recovery::UNWRITTEN`] into every env id of a block the trainer
/// owns (received and not released, or before start-up), so rows nobody writes stand out.
fn mark_unwritten(region: &Region, block: &protocol::ResultBlock) {
    // SAFETY: the trainer owns the block: every row of its batch was received and the block
    // is not yet released (or no worker has the data part yet), so no worker writes it.
    let ids = unsafe { region.slice_mut::<u32>(block.env_ids.offset, block.rows) };
    ids.fill(crate::recovery::UNWRITTEN);
}

fn default_seed() -> u64 {
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ (std::process::id() as u64).rotate_left(32)
}

/// The registered id closest to `id` by edit distance (case-insensitive), if close enough.
pub fn closest_match(id: &str, registered: &[String]) -> Option<String> {
    fn distance(a: &str, b: &str) -> usize {
        let (a, b): (Vec<char>, Vec<char>) =
            (a.to_lowercase().chars().collect(), b.to_lowercase().chars().collect());
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.iter().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                cur.push((prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1));
            }
            prev = cur;
        }
        prev[b.len()]
    }
    registered
        .iter()
        .map(|r| (distance(id, r), r))
        .min()
        .filter(|(d, r)| *d <= (r.len() / 2).max(2))
        .map(|(_, r)| r.clone())
}

/// A pool can move to another thread (workers are tied to its supervisor thread, not to
/// the thread that built it).
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<Pool>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_match_finds_typos_and_ignores_strangers() {
        let reg = vec!["CartPole-v1".to_string(), "Pendulum-v1".to_string(), "Burn-v0".to_string()];
        assert_eq!(closest_match("cartpole-v0", &reg).as_deref(), Some("CartPole-v1"));
        assert_eq!(closest_match("Pendulum", &reg).as_deref(), Some("Pendulum-v1"));
        assert_eq!(closest_match("Humanoid-v4", &reg), None);
    }
}
