//! The worker host: the entry point of every worker program. It attaches to the region
//! inherited from the trainer, validates the header, builds its shard of envs, reports
//! their spec, then serves commands until told to close or the trainer dies.
//!
//! Most programs enter it through [`crate::serve_if_worker`], the first line of a `main`
//! that is both the trainer and its own workers. A program that is only a worker is a few
//! lines:
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     let registry = shmenv_worker::Registry::with_builtins();
//!     // registry.register("MyEnv-v0", ...);
//!     shmenv_worker::host::run(&registry)
//! }
//! ```

use crate::registry::{MakeError, Registry};
use crate::shard::{Advanced, EnvShard, ShardError, ShardRows, Work};
use shmenv_engine::launch::WORKER_FLAG;
use shmenv_engine::protocol::{
    self, exit_code, trace, worker_block, Command, Header, HeaderError, Layout, PoolParams, RegionState,
    ResultBlock, RingLayout, WorkerReport, WorkerStatus,
};
use shmenv_engine::recovery;
use shmenv_engine::region::Region;
use shmenv_engine::ring::{RegionRing, RingWords};
use shmenv_engine::stats::{now_ns, TraceRing, WorkerStats};
use shmenv_engine::sync::{WaitOutcome, Waiter};
use std::ops::Range;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

/// Async mode: how long a worker may hold finished envs back to claim rows for several at
/// once. A claim and a commit are contended atomics (~100-200 ns each across cores here);
/// 5 us of delay is small next to a batch round trip (nanoseconds).
const COALESCE_NS: u64 = 5_000;

/// Whether this process was started by a pool as a worker (its first argument is
/// [`WORKER_FLAG`]). Programs that are also something else (like the `shmenv` CLI) check
/// this first thing in `main`.
pub fn is_worker_invocation() -> bool {
    std::env::args_os().nth(1).is_some_and(|a| a == WORKER_FLAG)
}

/// Runs the worker host with the envs of `registry`. Returns the process exit code:
/// 0 after a clean close, else one of [`exit_code`]: `BAD_ARGUMENTS` (not started by a
/// pool), `BAD_REGION` (its header is wrong), `REPORTED_ERROR` (after reporting an error
/// to the trainer).
pub fn run(registry: &Registry) -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    ExitCode::from(run_with_args(registry, &args))
}

/// [`run`] for hosts that are not a Rust `main` (such as the Python worker module): `args`
/// is the whole command line, program name first, as `argv`. Returns the exit code.
pub fn run_with_args(registry: &Registry, args: &[String]) -> u8 {
    crate::panic_hook::install();
    run_with_scope(registry, args, &NoScope)
}

/// Wraps each sync batch of env work (a worker's `step`/`reset` of all its envs). The
/// Python worker holds the GIL for a batch instead of taking it once per env.
pub trait BatchScope {
    /// Runs `work` inside the scope.
    fn run(&self, work: &mut dyn FnMut());
}

/// The scope that does nothing around the work.
pub struct NoScope;

impl BatchScope for NoScope {
    fn run(&self, work: &mut dyn FnMut()) {
        work()
    }
}

/// [`run_with_args`] with a [`BatchScope`] around each sync batch.
pub fn run_with_scope(registry: &Registry, args: &[String], scope: &dyn BatchScope) -> u8 {
    shmenv_engine::program::enter_host();
    let parsed = match args {
        [_, flag, index, fd, parent] if flag == WORKER_FLAG => {
            index.parse::<usize>().ok().zip(fd.parse::<i32>().ok()).zip(parent.parse::<i32>().ok())
        }
        _ => None,
    };
    let Some(((index, fd), parent)) = parsed else {
        eprintln!(
            "{}: this is a shmenv worker program; it is started by a shmenv Pool \
             (Pool::builder(..).worker_program(..)), not by hand",
            args.first().map_or("shmenv-worker", |s| s.as_str())
        );
        return exit_code::BAD_ARGUMENTS;
    };
    match Worker::attach(index, fd, parent) {
        Ok(worker) => worker.serve(registry, scope),
        Err(e) => {
            eprintln!("shmenv worker {index}: {e}");
            exit_code::BAD_REGION
        }
    }
}

/// Names this process for `top`, `ps -o comm` and `perf` (the kernel keeps 15 bytes).
fn set_thread_name(name: &str) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from `buf`,
    // which lives for the call.
    unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// Async mode: what a worker has done since it last wrote its stats.
#[derive(Default)]
struct AsyncTally {
    steps: u64,
    resets_seen: u64,
    wait_ns: u64,
}

/// Why a worker could not use its region.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The fd is not a usable region.
    #[error("cannot map the region fd: {0}")]
    Map(#[from] std::io::Error),
    /// The header is wrong.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// This worker's index is not in the pool.
    #[error("worker index {index} out of range for {num_workers} workers")]
    BadIndex {
        /// The index passed.
        index: usize,
        /// Workers in the region.
        num_workers: usize,
    },
    /// The params area does not hold valid parameters.
    #[error("corrupt pool parameters: {0}")]
    BadParams(String),
}

struct Worker {
    region: Region,
    index: usize,
    parent: i32,
    params: PoolParams,
    waiter: Waiter,
}

enum Stop {
    Close,
    ParentGone,
    Failed,
}

impl Worker {
    /// Maps the region and checks the header and parameters before anything else.
    fn attach(index: usize, fd: i32, parent: i32) -> Result<Worker, AttachError> {
        let region = Region::from_inherited_fd(fd)?;
        attach_checks(region, index, parent)
    }

    fn post_trainer(&self) {
        self.region.semaphore(protocol::TRAINER_SEMAPHORE).post();
    }

    fn set_status(&self, status: WorkerStatus) {
        let word = self.region.atomic_u32(protocol::worker_control(self.index) + worker_block::STATUS);
        word.store(status as u32, Ordering::Release);
    }

    /// Writes a report, sets the status and wakes the trainer.
    fn report(&self, report: &WorkerReport, status: WorkerStatus) {
        let mut json = serde_json::to_vec(report).expect("report serializes");
        if json.len() > protocol::REPORT_CAPACITY {
            let message = match report {
                WorkerReport::Spec(spec) => {
                    shmenv_engine::spec::too_big_message(spec, json.len(), protocol::REPORT_CAPACITY)
                }
                _ => format!("report of {} bytes does not fit the region", json.len()),
            };
            json = serde_json::to_vec(&WorkerReport::Failed { message }).expect("report serializes");
        }
        self.region.write_bytes(protocol::report_offset(self.params.num_workers, self.index), &json);
        let len = self.region.atomic_u32(protocol::worker_control(self.index) + worker_block::REPORT_LEN);
        len.store(json.len() as u32, Ordering::Release);
        self.set_status(status);
        self.post_trainer();
    }

    /// Reports an error, then waits for the trainer to close or abandon the pool.
    fn fail(mut self, report: WorkerReport) -> u8 {
        self.report(&report, WorkerStatus::Failed);
        let _ = self.next_command();
        exit_code::REPORTED_ERROR
    }

    /// Waits for the next post on this worker's semaphore.
    fn next_command(&mut self) -> Result<(), Stop> {
        let parent = self.parent;
        let sem = self.region.semaphore(protocol::worker_control(self.index) + worker_block::SEMAPHORE);
        let check = || (!parent_alive(parent)).then_some(Stop::ParentGone);
        match sem.acquire(1, &mut self.waiter, None, check) {
            Ok(()) => Ok(()),
            Err(WaitOutcome::Aborted(stop)) => Err(stop),
            Err(WaitOutcome::TimedOut) => Err(Stop::ParentGone),
        }
    }

    fn serve(mut self, registry: &Registry, scope: &dyn BatchScope) -> u8 {
        self.stats().set_pid(std::process::id());
        set_thread_name(&format!("shmenv-w[{}]", self.index));
        let range = protocol::shard(self.index, self.params.num_envs, self.params.num_workers);
        let mut shard = match EnvShard::new(registry, &self.params, range) {
            Ok(s) => s,
            Err(e) => {
                let report = match e {
                    ShardError::Make(MakeError::UnknownEnv { id, registered }) => {
                        WorkerReport::UnknownEnv { id, registered }
                    }
                    ShardError::Make(MakeError::BadConfig { id, source }) => {
                        WorkerReport::BadConfig { id, message: source.to_string() }
                    }
                    other => WorkerReport::Failed { message: other.to_string() },
                };
                return self.fail(report);
            }
        };
        self.report(&WorkerReport::Spec(shard.spec().to_json()), WorkerStatus::Reported);
        if self.next_command().is_err() {
            return exit_code::CLOSED;
        }
        let state = self.region.atomic_u32(protocol::STATE_WORD).load(Ordering::Acquire);
        if RegionState::from_word(state) != Some(RegionState::Ready) {
            return exit_code::CLOSED; // Abandoned: the trainer refused the pool.
        }
        let layout = match self.map_data_part(shard.spec()) {
            Ok(l) => l,
            Err(e) => return self.fail(WorkerReport::Failed { message: e.to_string() }),
        };
        self.set_status(WorkerStatus::Running);
        self.post_trainer();
        let stop = match &layout.ring {
            Some(ring) => self.async_loop(&mut shard, &layout, ring),
            None => self.command_loop(&mut shard, &layout, scope),
        };
        match stop {
            Stop::Close | Stop::ParentGone => exit_code::CLOSED,
            Stop::Failed => exit_code::REPORTED_ERROR,
        }
    }

    /// Re-maps the grown region and checks that its layout is the one this worker computes.
    fn map_data_part(&mut self, spec: &shmenv_engine::EnvSpec) -> Result<Layout, AttachError> {
        self.region.remap()?;
        let header: Header = self.region.read_pod(0);
        header.validate(self.region.len())?;
        let layout = Layout::compute(spec, &self.params);
        if header.layout_hash != layout.hash
            || header.total_size != layout.total_size as u64
            || self.region.len() != layout.total_size
        {
            return Err(
                HeaderError::LayoutMismatch { trainer: header.layout_hash, worker: layout.hash }.into()
            );
        }
        Ok(layout)
    }

    fn command_loop(&mut self, shard: &mut EnvShard, layout: &Layout, scope: &dyn BatchScope) -> Stop {
        let range = shard.range();
        let mut resets_seen = shard.resets();
        loop {
            let waited_from = now_ns();
            if let Err(stop) = self.next_command() {
                return stop;
            }
            let started = now_ns();
            let word = self.region.atomic_u32(protocol::COMMAND_WORD).load(Ordering::Relaxed);
            // The block index is untrusted: check it against our own layout.
            let j = self.region.atomic_u32(protocol::SYNC_BLOCK).load(Ordering::Relaxed) as usize;
            let Some(block) = layout.blocks.get(j) else {
                let message = format!("sync block {j} out of range ({} blocks)", layout.blocks.len());
                self.report(&WorkerReport::Failed { message }, WorkerStatus::Failed);
                return Stop::Failed;
            };
            let result = match Command::from_word(word) {
                Some(Command::Close) => return Stop::Close,
                Some(Command::Step) => {
                    let actions = layout.actions.rows(range.clone());
                    // SAFETY: by the protocol, between the trainer's post and this worker's
                    // completion post the trainer does not write the action rows; the borrow
                    // ends before `post_trainer` below.
                    let actions = unsafe { self.region.slice::<u8>(actions.start, actions.len()) };
                    // SAFETY: in the same window nobody else reads or writes this shard's
                    // result rows (the trainer waits; shards are disjoint).
                    let mut rows = unsafe { block_rows(&self.region, block, range.clone()) };
                    let mut result = Ok(());
                    scope.run(&mut || result = shard.step_all(actions, &mut rows));
                    result
                }
                Some(Command::ResetSome) => {
                    let actions = layout.actions.rows(range.clone());
                    // SAFETY: as for `Step`: the trainer does not write the action rows
                    // before this worker's completion post.
                    let actions = unsafe { self.region.slice::<u8>(actions.start, actions.len()) };
                    let seed = self.region.read_pod::<u64>(protocol::RESET_SEED);
                    // SAFETY: as for `Step`.
                    let mut rows = unsafe { block_rows(&self.region, block, range.clone()) };
                    let mut result = Ok(());
                    scope.run(&mut || result = shard.reset_some(actions, seed, &mut rows));
                    result
                }
                Some(c @ (Command::Reset | Command::ResetSeeded)) => {
                    let seed = (c == Command::ResetSeeded)
                        .then(|| self.region.read_pod::<u64>(protocol::RESET_SEED));
                    // SAFETY: as above.
                    let mut rows = unsafe { block_rows(&self.region, block, range.clone()) };
                    let mut result = Ok(());
                    scope.run(&mut || result = shard.reset_all(seed, &mut rows));
                    result
                }
                None => {
                    self.report(
                        &WorkerReport::Failed { message: format!("unknown command word {word}") },
                        WorkerStatus::Failed,
                    );
                    return Stop::Failed;
                }
            };
            match result {
                Ok(()) => {
                    let seq = self.region.atomic_u32(protocol::COMMAND_SEQ).load(Ordering::Relaxed);
                    // Counted before the post, so a trainer that has the batch sees them.
                    let worked = now_ns();
                    let stats = self.stats();
                    let steps = if Command::from_word(word) == Some(Command::Step) { range.len() } else { 0 };
                    stats.add_steps(steps as u64, shard.resets() - resets_seen);
                    resets_seen = shard.resets();
                    stats.flush_hist(shard.hist_mut());
                    self.post_trainer();
                    // After the post (Release): a trainer that sees this sequence number
                    // knows the post is in (the Restart policy counts on it).
                    let done = protocol::worker_control(self.index) + worker_block::DONE_SEQ;
                    self.region.atomic_u32(done).store(seq, Ordering::Release);
                    let posted = now_ns();
                    stats.add_times(worked - started, started - waited_from, posted - worked);
                    if let Some(rows) = &layout.trace {
                        let ring = TraceRing::new(&self.region, rows, self.index);
                        ring.record(trace::kind::WAIT, waited_from, started);
                        ring.record(trace::kind::ENV, started, worked);
                        ring.record(trace::kind::PUBLISH, worked, posted);
                    }
                }
                Err((env_id, message)) => {
                    self.report(&WorkerReport::EnvPanicked { env_id, message }, WorkerStatus::Failed);
                    let _ = self.next_command();
                    return Stop::Failed;
                }
            }
        }
    }

    /// This worker's stats writer.
    fn stats(&self) -> WorkerStats<'_> {
        WorkerStats::new(&self.region, self.params.num_workers, self.index, self.params.stats)
    }
}

impl Worker {
    /// Async mode: take env ids from this worker's queue; advance each env; claim the next
    /// rows of the ring (for a few envs at once when they are cheap); let each env write its
    /// observation into its row; commit.
    fn async_loop(&mut self, shard: &mut EnvShard, layout: &Layout, ring: &RingLayout) -> Stop {
        use protocol::queue_entry::{ENV_MASK, FILL, FILL_CLAIM, KIND_MASK, RESET, RESET_SEEDED, STEP};
        let range = shard.range();
        let cap = range.len() as u32;
        let control = protocol::worker_control(self.index);
        // A replacement for a dead worker (restart policy) resets each env with the restart
        // seed the first time it touches it, whatever the entry says (a step's action was
        // meant for the dead worker's env); `FILL` entries do so too.
        let restarted =
            self.region.atomic_u32(control + worker_block::RESTARTED).load(Ordering::Relaxed) != 0;
        let restart_seed: u64 = self.region.read_pod(control + worker_block::RESTART_SEED);
        let mut fresh = vec![restarted; range.len()];
        let mut tail: u32 = 0;
        let mut head: u32 = 0;
        let mut done: Vec<(usize, Advanced)> = Vec::with_capacity(range.len());
        // When the current chunk of env work began (CLOCK_MONOTONIC ns): the clock is read at
        // a chunk's start and end and after its 1st, 2nd, 4th... env, never once per env
        // (two clock reads cost as much as a CartPole step).
        let mut chunk_from: Option<u64> = None;
        let mut tally = AsyncTally { resets_seen: shard.resets(), ..AsyncTally::default() };
        loop {
            if tail == head {
                // Queue drained: wait for the trainer's next post.
                let waited_from = now_ns();
                let next = self.next_command();
                tally.wait_ns += now_ns() - waited_from;
                if let Err(stop) = next {
                    return stop;
                }
                let word = self.region.atomic_u32(protocol::COMMAND_WORD).load(Ordering::Relaxed);
                if Command::from_word(word) == Some(Command::Close) {
                    return Stop::Close;
                }
                // Acquire: pairs with the trainer's Release store of the head after the entries.
                head = self.region.atomic_u32(control + worker_block::QUEUE_HEAD).load(Ordering::Acquire);
                if head.wrapping_sub(tail) > cap {
                    return self.fail_async(
                        ring,
                        format!("queue head {head} is more than {cap} entries past tail {tail}"),
                    );
                }
                continue; // (A post may find the queue already drained: harmless.)
            }
            let slot = range.start + (tail % cap) as usize;
            let entry: u32 = self.region.read_pod(ring.queue.offset + slot * 4);
            tail = tail.wrapping_add(1);
            let env = (entry & ENV_MASK) as usize;
            if !range.contains(&env) {
                return self.fail_async(
                    ring,
                    format!("queue entry {entry:#x} names env {env}, outside this worker's envs {range:?}"),
                );
            }
            let local = env - range.start;
            // Env code runs from the chunk's first env until the chunk is published.
            let chunk_start = *chunk_from.get_or_insert_with(|| {
                let now = now_ns();
                self.busy_since(now);
                now
            });
            let kind = entry & KIND_MASK;
            // Untouched by this (replacement) process: reset whatever the entry says.
            let first_touch = restarted && std::mem::take(&mut fresh[local]);
            tally.steps += u64::from(kind == STEP && !first_touch);
            let restart_reset = Work::Reset { seed: Some(restart_seed.wrapping_add(env as u64)) };
            let mut fill_row = None;
            let advanced = match kind {
                STEP | RESET if first_touch => shard.advance(local, restart_reset),
                STEP => {
                    let row = layout.actions.rows(env..env + 1);
                    // SAFETY: the trainer wrote this env's action row before pushing the entry
                    // (published by the head store and the post) and does not write it again
                    // until the env's result is received; the borrow ends in this statement.
                    let action = unsafe { self.region.slice::<u8>(row.start, row.len()) };
                    shard.advance(local, Work::Step(action))
                }
                RESET => shard.advance(local, Work::Reset { seed: None }),
                RESET_SEEDED => {
                    let base: u64 = self.region.read_pod(protocol::RESET_SEED);
                    shard.advance(local, Work::Reset { seed: Some(base.wrapping_add(env as u64)) })
                }
                FILL if self.params.restart => {
                    // The row was written by the trainer with the entry; checked when used.
                    let row: u64 = self.region.read_pod(ring.fill_rows.offset + slot * 8);
                    fill_row = (row != FILL_CLAIM).then_some(row);
                    shard.advance(local, restart_reset)
                }
                _ => return self.fail_async(ring, format!("queue entry {entry:#x} has an unknown kind")),
            };
            match advanced {
                Ok(a) => done.push((local, a)),
                Err((env_id, message)) => return self.panicked_async(ring, env_id, message),
            }
            // Publish now if the queue is drained, or if holding results back any longer
            // would delay them noticeably; otherwise keep advancing and claim rows for
            // several envs with one atomic (cheap envs then cost one claim and one commit
            // per chunk, not per env; slow envs are published one by one).
            // The clock is read after the 1st, 2nd, 4th, 8th... env of a chunk: a slow env is
            // published right after it finishes, cheap ones cost few clock reads.
            let late = done.len().is_power_of_two() && now_ns().saturating_sub(chunk_start) >= COALESCE_NS;
            if tail == head || late || done.len() >= ring.batch_size || fill_row.is_some() {
                let publish_from = now_ns();
                self.busy_since(0);
                chunk_from = None;
                let stats = self.stats();
                stats.add_steps(std::mem::take(&mut tally.steps), shard.resets() - tally.resets_seen);
                tally.resets_seen = shard.resets();
                stats.flush_hist(shard.hist_mut());
                if let Err(stop) = self.publish(shard, layout, ring, &mut done, fill_row, tail) {
                    return stop;
                }
                let (stats, published) = (self.stats(), now_ns());
                if let Some(rows) = &layout.trace {
                    let trace = TraceRing::new(&self.region, rows, self.index);
                    trace.record(trace::kind::ENV, chunk_start, publish_from);
                    trace.record(trace::kind::PUBLISH, publish_from, published);
                }
                stats.add_times(
                    publish_from.saturating_sub(chunk_start),
                    std::mem::take(&mut tally.wait_ns),
                    published - publish_from,
                );
            }
        }
    }

    /// Publishes the advanced envs `done` (in order): the last one into `fill_row` when the
    /// trainer named one (a fill entry), the others into rows claimed from the counter.
    /// `tail` counts the queue entries consumed so far, all published once this returns.
    fn publish(
        &mut self,
        shard: &mut EnvShard,
        layout: &Layout,
        ring: &RingLayout,
        done: &mut Vec<(usize, Advanced)>,
        fill_row: Option<u64>,
        tail: u32,
    ) -> Result<(), Stop> {
        let Some(row) = fill_row else {
            return self.publish_rows(shard, layout, ring, done, None, tail);
        };
        let fill = done.pop().expect("the fill entry's env was advanced");
        self.publish_rows(shard, layout, ring, done, None, tail.wrapping_sub(1))?;
        let claimed =
            RegionRing { region: &self.region, layout: ring }.claim_counter().load(Ordering::Relaxed);
        if row >= claimed {
            let message = format!("fill entry names row {row}, past the {claimed} rows claimed so far");
            return Err(self.fail_async(ring, message));
        }
        self.publish_rows(shard, layout, ring, &mut vec![fill], Some(row), tail)
    }

    /// Takes rows for `done` (claims them, or the fill row), lets each env write its row,
    /// and commits the rows block by block. Under the restart policy the claim passes the
    /// pause gate and is recorded (see `shmenv_engine::recovery`).
    fn publish_rows(
        &mut self,
        shard: &mut EnvShard,
        layout: &Layout,
        ring: &RingLayout,
        done: &mut Vec<(usize, Advanced)>,
        fill_row: Option<u64>,
        tail: u32,
    ) -> Result<(), Stop> {
        if done.is_empty() {
            return Ok(());
        }
        let region = &self.region;
        let words = RegionRing { region, layout: ring };
        let (parent, command) = (self.parent, region.atomic_u32(protocol::COMMAND_WORD));
        // Stop waiting if the trainer died or is closing the pool (it will never release the
        // block or open the pause gate).
        let check = || {
            if !parent_alive(parent) {
                Some(Stop::ParentGone)
            } else {
                (Command::from_word(command.load(Ordering::Acquire)) == Some(Command::Close))
                    .then_some(Stop::Close)
            }
        };
        let stop = |e: WaitOutcome<Stop>| match e {
            WaitOutcome::Aborted(stop) => stop,
            WaitOutcome::TimedOut => Stop::ParentGone,
        };
        let k = done.len();
        let record = self.params.restart.then(|| recovery::claim_record(region, self.index));
        let busy = region.atomic_u64(self.busy_word());
        let first = match record {
            Some(record) => {
                let take = || fill_row.unwrap_or_else(|| words.claim(k));
                let pause = region.gate(protocol::RING_PAUSE);
                record.claim(pause, k as u32, take, &mut self.waiter, check).map_err(stop)?
            }
            None => words.claim(k),
        };
        let mut items = done.drain(..);
        let mut panicked = None;
        let mut committed = 0;
        'runs: for run in words.runs(first, items.len()) {
            words.wait_writable(run, &mut self.waiter, check).map_err(stop)?;
            let rows = run.first_row..run.first_row + run.rows;
            // SAFETY: these rows of the run's block were claimed by this worker alone (the
            // counter hands out each row once; a fill row is given to one worker by the
            // trainer, which took it back from a dead one) and the gate says the trainer
            // released the block's previous batch; nobody reads them until they are committed.
            let mut view = unsafe { block_rows(region, &layout.blocks[run.block], rows) };
            busy.store(now_ns(), Ordering::Relaxed);
            for (r, (local, advanced)) in items.by_ref().take(run.rows).enumerate() {
                if let Err(p) = shard.emit(local, advanced, &mut view, r) {
                    panicked = Some(p);
                    break 'runs;
                }
            }
            busy.store(0, Ordering::Relaxed);
            words.commit(run);
            committed += run.rows as u32;
            if let Some(record) = record {
                record.committed(committed);
            }
        }
        drop(items);
        if let Some(record) = record {
            record.finish(tail);
        }
        match panicked {
            Some((env_id, message)) => Err(self.panicked_async(ring, env_id, message)),
            None => Ok(()),
        }
    }

    /// The word that says since when this worker runs env code (async hang detection).
    fn busy_word(&self) -> usize {
        protocol::worker_stats_offset(self.params.num_workers, self.index)
            + protocol::stats::worker::BUSY_SINCE
    }

    /// Marks env code running since `ns` (0: none).
    fn busy_since(&self, ns: u64) {
        self.region.atomic_u64(self.busy_word()).store(ns, Ordering::Relaxed);
    }

    fn fail_async(&mut self, ring: &RingLayout, message: String) -> Stop {
        self.report(&WorkerReport::Failed { message }, WorkerStatus::Failed);
        self.wake_ring(ring);
        Stop::Failed
    }

    fn panicked_async(&mut self, ring: &RingLayout, env_id: usize, message: String) -> Stop {
        self.report(&WorkerReport::EnvPanicked { env_id, message }, WorkerStatus::Failed);
        self.wake_ring(ring);
        let _ = self.next_command();
        Stop::Failed
    }

    /// Wakes a trainer sleeping on any block, so it sees this worker's failure at once.
    fn wake_ring(&self, ring: &RingLayout) {
        RegionRing { region: &self.region, layout: ring }.interrupt_all();
    }
}

/// Whether the trainer that started this worker is still its parent (if it died, the
/// worker was re-parented; `PR_SET_PDEATHSIG` normally kills it first).
fn parent_alive(parent: i32) -> bool {
    // SAFETY: getppid has no preconditions and cannot fail.
    unsafe { libc::getppid() == parent }
}

/// Validates the header, the worker index and the params of a freshly mapped region.
fn attach_checks(region: Region, index: usize, parent: i32) -> Result<Worker, AttachError> {
    if region.len() < std::mem::size_of::<Header>() {
        return Err(HeaderError::Corrupt(format!("region of {} bytes", region.len())).into());
    }
    let header: Header = region.read_pod(0);
    header.validate(region.len())?;
    let num_workers = header.num_workers as usize;
    if index >= num_workers {
        return Err(AttachError::BadIndex { index, num_workers });
    }
    let bytes = region.read_bytes(protocol::params_offset(num_workers), header.params_len as usize);
    let params: PoolParams =
        serde_json::from_slice(&bytes).map_err(|e| AttachError::BadParams(e.to_string()))?;
    if params.num_envs != header.num_envs as usize || params.num_workers != num_workers {
        return Err(AttachError::BadParams("params disagree with the header".into()));
    }
    let waiter = Waiter::new(params.wait.pool_policy(num_workers));
    Ok(Worker { region, index, parent, params, waiter })
}

/// Rows `rows` of result block `block`, as slices in the region.
///
/// # Safety
/// The caller must hold the protocol's exclusive access to those rows (sync: between
/// receiving a command and posting its completion; async: a claimed row of a released
/// block, until committed) for as long as the slices live.
unsafe fn block_rows<'a>(region: &'a Region, block: &ResultBlock, rows: Range<usize>) -> ShardRows<'a> {
    let n = rows.len();
    let bytes = |slot: &protocol::ArraySlot| {
        let r = slot.rows(rows.clone());
        // SAFETY: exclusive access by the caller's promise; distinct slots are disjoint
        // (checked by the layout's unit tests), so no two of these slices overlap.
        unsafe { region.slice_mut::<u8>(r.start, r.len()) }
    };
    let start = |slot: &protocol::ArraySlot| slot.rows(rows.clone()).start;
    // SAFETY: as above; each typed slice covers exactly its slot's rows.
    unsafe {
        ShardRows {
            obs: block.obs.iter().map(bytes).collect(),
            final_obs: block.final_obs.iter().map(bytes).collect(),
            rewards: region.slice_mut(start(&block.rewards), n),
            terminated: region.slice_mut(start(&block.terminated), n),
            truncated: region.slice_mut(start(&block.truncated), n),
            episode_return: region.slice_mut(start(&block.episode_return), n),
            episode_length: region.slice_mut(start(&block.episode_length), n),
            elapsed_steps: region.slice_mut(start(&block.elapsed_steps), n),
            env_ids: region.slice_mut(start(&block.env_ids), n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region_with(header: Header, params: &[u8]) -> Region {
        let r = Region::create("test", protocol::bootstrap_size(header.num_workers.max(1) as usize)).unwrap();
        r.write_pod(0, &header);
        r.write_bytes(protocol::params_offset(header.num_workers.max(1) as usize), params);
        r
    }

    #[test]
    fn attach_refuses_version_mismatch_and_corrupt_params() {
        let params = br#"{"env_id":"CartPole-v1","config":{},"num_envs":2,"num_workers":1,"autoreset":"NextStep","max_episode_steps":null,"wait":"auto","batch_size":2,"ring_depth":2,"stats":true}"#;
        let good = Header::new(2, 1, params.len() as u32);
        assert!(attach_checks(region_with(good, params), 0, 1).is_ok());
        let old = Header { version: 0, ..good };
        let e = attach_checks(region_with(old, params), 0, 1).err().unwrap();
        assert!(e.to_string().contains("layout version 0"), "{e}");
        let e = attach_checks(region_with(good, params), 1, 1).err().unwrap();
        assert!(matches!(e, AttachError::BadIndex { index: 1, num_workers: 1 }));
        let bad = b"{\"env_id\": 3}";
        let e = attach_checks(region_with(Header::new(2, 1, bad.len() as u32), bad), 0, 1).err().unwrap();
        assert!(matches!(e, AttachError::BadParams(_)));
    }
}
