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
use crate::shard::{EnvShard, ShardError, ShardRows};
use shmenv_engine::launch::fork::{self, Owner, Place};
use shmenv_engine::launch::WORKER_FLAG;
use shmenv_engine::protocol::{
    self, exit_code, Column, Header, HeaderError, Layout, PoolParams, RegionState, ResultBlock, WorkerReport,
    WorkerStatus,
};
use shmenv_engine::region::Region;
use shmenv_engine::stats::WorkerStats;
use shmenv_engine::sync::{Semaphore, WaitMode, WaitOutcome, Waiter};
use std::ops::Range;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

mod async_loop;
mod sync_loop;
pub(crate) use sync_loop::run_command;

/// Whether this process was started by a pool as a worker (its first argument is
/// [`WORKER_FLAG`]). Programs that are also something else (like the `shmenv` CLI) check
/// this first thing in `main`.
pub(crate) fn is_worker_invocation() -> bool {
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
pub(crate) struct NoScope;

impl BatchScope for NoScope {
    fn run(&self, work: &mut dyn FnMut()) {
        work()
    }
}

/// [`run_with_args`] with a [`BatchScope`] around each sync batch.
pub fn run_with_scope(registry: &Registry, args: &[String], scope: &dyn BatchScope) -> u8 {
    shmenv_engine::launch::program::enter_host();
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

/// Why a worker could not use its region.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkerAttachError {
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
    /// This process: a copy of it that env code makes with `fork()` never posts, waits or
    /// answers (its region is blanked in the child and it stops when it returns here).
    owner: Owner,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // The mapping goes with the worker: forks after it must not replace those addresses.
        fork::guard_in_children(fork::SharedMapping::Region, 0, 0);
    }
}

enum Stop {
    Close,
    ParentGone,
    Failed,
}

impl Worker {
    /// Maps the region and checks the header and parameters before anything else.
    fn attach(index: usize, fd: i32, parent: i32) -> Result<Worker, WorkerAttachError> {
        let region = Region::from_inherited_fd(fd)?;
        let worker = attach_checks(region, index, parent)?;
        // Before any env code runs: a child forked from here on does not share the region.
        fork::guard_in_children(fork::SharedMapping::Region, worker.region.base_addr(), worker.region.len());
        Ok(worker)
    }

    fn post_trainer(&self) {
        self.owner.stop_if_copy(Place::Worker(self.index), None);
        Semaphore::in_region(&self.region, protocol::TRAINER_SEMAPHORE).post();
    }

    fn set_status(&self, status: WorkerStatus) {
        let word = self.region.atomic_u32(protocol::worker_words(self.index).status);
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
        // SAFETY: this worker's own report area, written by this thread only; the trainer
        // reads it after the status store below (Release), or by snapshot.
        unsafe {
            self.region.write_bytes(protocol::report_offset(self.params.num_workers, self.index), &json)
        };
        let len = self.region.atomic_u32(protocol::worker_words(self.index).report_len);
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

    /// Waits for the next post on this worker's semaphore, in the wait mode the trainer's
    /// tuner chose last.
    fn next_command(&mut self) -> Result<(), Stop> {
        self.owner.stop_if_copy(Place::Worker(self.index), None);
        let mode = self.region.atomic_u32(protocol::WAIT_MODE).load(Ordering::Relaxed);
        self.waiter.follow(WaitMode::from_word(mode));
        let parent = self.parent;
        let sem = Semaphore::in_region(&self.region, protocol::worker_words(self.index).semaphore);
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
        let range = self.params.shard(self.index);
        let mut shard = match EnvShard::new(registry, &self.params, range) {
            Ok(s) => s,
            Err(e) => return self.fail(shard_report(e)),
        };
        shard.stop_forked_copies(self.owner, Place::Worker(self.index));
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
        self.stats().mark_running();
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
    fn map_data_part(&mut self, spec: &shmenv_engine::EnvSpec) -> Result<Layout, WorkerAttachError> {
        // Forks meanwhile (from an env's own threads) leave the old mapping alone.
        fork::guard_in_children(fork::SharedMapping::Region, 0, 0);
        self.region.remap()?;
        fork::guard_in_children(fork::SharedMapping::Region, self.region.base_addr(), self.region.len());
        // SAFETY: the trainer wrote the header before storing `Ready` (Release), which this
        // worker loaded (Acquire), and does not write it again.
        let header: Header = unsafe { self.region.read_pod(0) };
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

    /// This worker's stats writer.
    fn stats(&self) -> WorkerStats<'_> {
        WorkerStats::new(&self.region, self.params.num_workers, self.index, self.params.stats)
    }
}

/// What a worker reports when its shard cannot be built.
pub(crate) fn shard_report(e: ShardError) -> WorkerReport {
    match e {
        ShardError::Make(MakeError::UnknownEnv { id, registered }) => {
            WorkerReport::UnknownEnv { id, registered }
        }
        ShardError::Make(MakeError::BadConfig { id, source }) => {
            WorkerReport::BadConfig { id, message: source.to_string() }
        }
        other => WorkerReport::Failed { message: other.to_string() },
    }
}

/// Whether the trainer that started this worker is still its parent (if it died, the
/// worker was re-parented; `PR_SET_PDEATHSIG` normally kills it first).
fn parent_alive(parent: i32) -> bool {
    // SAFETY: getppid has no preconditions and cannot fail.
    unsafe { libc::getppid() == parent }
}

/// Validates the header, the worker index and the params of a freshly mapped region.
fn attach_checks(region: Region, index: usize, parent: i32) -> Result<Worker, WorkerAttachError> {
    if region.len() < std::mem::size_of::<Header>() {
        return Err(HeaderError::Corrupt(format!("region of {} bytes", region.len())).into());
    }
    // SAFETY: the trainer wrote the header and the params before it started this process,
    // and rewrites the header only once every worker has reported (after these reads).
    let header: Header = unsafe { region.read_pod(0) };
    header.validate(region.len())?;
    let num_workers = header.num_workers as usize;
    if index >= num_workers {
        return Err(WorkerAttachError::BadIndex { index, num_workers });
    }
    // SAFETY: as for the header: written before this process started, never again.
    let bytes =
        unsafe { region.read_bytes(protocol::params_offset(num_workers), header.params_len as usize) };
    let params: PoolParams =
        serde_json::from_slice(&bytes).map_err(|e| WorkerAttachError::BadParams(e.to_string()))?;
    if params.num_envs != header.num_envs as usize || params.num_workers != num_workers {
        return Err(WorkerAttachError::BadParams("params disagree with the header".into()));
    }
    let waiter = Waiter::new(params.wait.pool_policy(num_workers, params.policy_cores()));
    Ok(Worker { region, index, parent, params, waiter, owner: Owner::current() })
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
            rewards: region.slice_mut(start(block.column(Column::Rewards)), n),
            terminated: region.slice_mut(start(block.column(Column::Terminated)), n),
            truncated: region.slice_mut(start(block.column(Column::Truncated)), n),
            episode_return: region.slice_mut(start(block.column(Column::EpisodeReturn)), n),
            episode_length: region.slice_mut(start(block.column(Column::EpisodeLength)), n),
            elapsed_steps: region.slice_mut(start(block.column(Column::ElapsedSteps)), n),
            env_ids: region.slice_mut(start(block.column(Column::EnvIds)), n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region_with(header: Header, params: &[u8]) -> Region {
        let r = Region::create("test", protocol::bootstrap_size(header.num_workers.max(1) as usize)).unwrap();
        // SAFETY: a fresh region of this test's only.
        unsafe {
            r.write_pod(0, &header);
            r.write_bytes(protocol::params_offset(header.num_workers.max(1) as usize), params);
        }
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
        assert!(matches!(e, WorkerAttachError::BadIndex { index: 1, num_workers: 1 }));
        let bad = b"{\"env_id\": 3}";
        let e = attach_checks(region_with(Header::new(2, 1, bad.len() as u32), bad), 0, 1).err().unwrap();
        assert!(matches!(e, WorkerAttachError::BadParams(_)));
    }
}
