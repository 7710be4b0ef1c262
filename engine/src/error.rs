//! Errors of each pool operation. Every message says what went wrong and what to do.

pub use crate::launch::memory::OomKill;
use crate::launch::WorkerExit;
use crate::spec::DType;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

mod report;
pub use report::Report;

/// Why [`crate::PoolBuilder::build`] failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The plugin library named with `PoolBuilder::plugin` cannot be used (checked in the
    /// trainer before any worker starts; what the workers find when they load it comes back
    /// as [`BuildError::WorkerFailed`]).
    #[error("plugin library {}: {message}", path.display())]
    Plugin {
        /// The path given.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A builder argument is out of range.
    #[error("invalid pool setting: {0}")]
    InvalidArgument(String),
    /// The env id is not registered in the worker program.
    #[error(
        "unknown env id {id:?}{}; registered ids: {}",
        closest.as_ref().map(|c| format!(" (did you mean {c:?}?)")).unwrap_or_default(),
        registered.join(", ")
    )]
    UnknownEnv {
        /// The id asked for.
        id: String,
        /// The ids the worker program knows.
        registered: Vec<String>,
        /// The registered id closest to `id`, if any is close.
        closest: Option<String>,
    },
    /// The env rejected its config.
    #[error("bad config for {id}: {message}")]
    BadConfig {
        /// The env id.
        id: String,
        /// The env's message, naming the key.
        message: String,
    },
    /// No worker program was given, this program's `main` does not serve workers, and no
    /// `shmenv-worker` program was found.
    #[error(
        "no worker program to run: this program's `main` does not call \
         `shmenv::worker::serve_if_worker(..)` (which lets the pool run this same program as \
         its workers), and no `shmenv-worker` program was found (looked at {}). Add \
         `shmenv::worker::serve_if_worker(shmenv::worker::Registry::with_builtins);` as the \
         first line of `main`, or name a worker program with `.worker_program(path)` or \
         SHMENV_WORKER_PROGRAM",
        searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    WorkerProgramNotFound {
        /// Paths tried.
        searched: Vec<PathBuf>,
    },
    /// This process was started by a pool as a worker, but its `main` ran the trainer code
    /// (it did not hand control to the worker host first).
    #[error(
        "this process was started by a shmenv pool as one of its workers, but its `main` \
         ran the trainer code instead of serving the pool: call \
         `shmenv::worker::serve_if_worker(..)` as the first line of `main`, or give the pool \
         a separate worker program"
    )]
    NotServingWorkers,
    /// Starting a worker process failed.
    #[error("cannot start worker program {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Creating or sizing the shared-memory region failed.
    #[error("cannot create the shared-memory region ({what}): {source}")]
    Region {
        /// Which step.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The pool would not fit in the memory this process may use: the region and the
    /// workers' envs, estimated before any worker starts, and the region again with the
    /// spec the workers report, before it is created and pre-faulted (see
    /// `docs/security.md`).
    #[error(
        "the pool would need about {} ({} bytes) for {num_envs} envs: {}, more than this process may use: {} \
         available ({}). At most {fits} envs fit: use fewer envs, smaller observations or a smaller \
         ring_depth, or raise the memory limit",
        crate::launch::memory::human_bytes(region.saturating_add(*workers)),
        region.saturating_add(*workers),
        crate::launch::memory::need_parts(*region, *workers, *per_env),
        crate::launch::memory::human_bytes(room.room().unwrap_or(0)),
        room.describe()
    )]
    NotEnoughMemory {
        /// Envs in the pool.
        num_envs: usize,
        /// Bytes the region needs (before the workers report the spec: the least any
        /// env's spec gives).
        region: u64,
        /// Bytes the workers' envs are estimated to take (0 once they are built: they
        /// already hold them, and the room left counts them).
        workers: u64,
        /// The workers' bytes per env in that estimate.
        per_env: u64,
        /// What this process may still use, and where the figures come from.
        room: crate::launch::memory::MemoryRoom,
        /// The most envs that fit.
        fits: usize,
    },
    /// A worker process ended during start-up.
    #[error(
        "worker {worker} (pid {pid}) {} during start-up; its stderr is above. {}",
        crate::launch::memory::died_how(exit, oom_kill.as_ref()),
        startup_death_hint(program, plugin.as_deref(), exit, oom_kill.as_ref())
    )]
    WorkerDied {
        /// Worker index.
        worker: usize,
        /// Its pid.
        pid: u32,
        /// How it ended.
        exit: WorkerExit,
        /// The program.
        program: PathBuf,
        /// The plugin library the workers load, if any (the first suspect: a library that
        /// exits or crashes while it loads or creates its envs ends the worker).
        plugin: Option<PathBuf>,
        /// When it was SIGKILLed and the kernel's OOM-kill counter rose meanwhile: the
        /// counter (the OOM killer ended it, for want of memory).
        oom_kill: Option<OomKill>,
    },
    /// A worker reported a failure during start-up.
    #[error("worker {worker} failed to start: {message}")]
    WorkerFailed {
        /// Worker index.
        worker: usize,
        /// What it said.
        message: String,
    },
    /// Two workers report different specs for the same env id and config.
    #[error(
        "workers disagree on the env spec: worker 0 reports {first}, worker {worker} reports \
         {other}; an env's spaces must depend only on its id and config"
    )]
    SpecMismatch {
        /// The disagreeing worker.
        worker: usize,
        /// Worker 0's spec.
        first: String,
        /// The other spec.
        other: String,
    },
    /// The envs of the trainer's own shard ([`crate::PoolBuilder::trainer_shard`]) could
    /// not be built, or differ from the workers'.
    #[error("the trainer's shard of envs: {0}")]
    TrainerShard(String),
    /// Workers did not report within the start-up timeout.
    #[error("workers {workers:?} did not start within {waited:?}; is an env constructor stuck?")]
    StartupTimeout {
        /// Workers that had not reported.
        workers: Vec<usize>,
        /// How long the pool waited.
        waited: Duration,
    },
}

/// Why an action batch was refused. Nothing reached any worker.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ActionError {
    /// The slice's element type is not the action space's.
    #[error("actions have dtype {found}, but the action space {space} takes {expected}: pass a &[{expected}] slice")]
    WrongDtype {
        /// What the space takes.
        expected: DType,
        /// What was passed.
        found: DType,
        /// The action space.
        space: String,
    },
    /// The slice has the wrong number of elements.
    #[error(
        "expected {expected} action values ({num_envs} envs x {per_env} per env for {space}), got {found}"
    )]
    WrongLength {
        /// `num_envs * per_env`.
        expected: usize,
        /// What was passed.
        found: usize,
        /// Number of envs.
        num_envs: usize,
        /// Values per env.
        per_env: usize,
        /// The action space.
        space: String,
    },
    /// A value is outside the space.
    #[error("action for env {env_id} (element {element}) is {value}, expected {expected}")]
    OutOfRange {
        /// The env.
        env_id: usize,
        /// Index of the element within that env's action.
        element: usize,
        /// The value passed.
        value: String,
        /// What the space allows.
        expected: String,
    },
}

/// What ends any pool call that works with the workers, and closes the pool (every call's
/// `Failed` case): a worker died, failed or hung, the wait was interrupted, the region broke
/// the protocol, the pool belongs to another process, or an earlier failure closed it.
#[derive(Debug, thiserror::Error)]
pub enum PoolFailure {
    /// A worker process ended; the pool cannot continue.
    #[error(
        "worker {worker} (pid {pid}, envs {}..{}) {}; the pool is closed, build a new one{}{}",
        env_ids.start,
        env_ids.end,
        crate::launch::memory::died_how(exit, oom_kill.as_ref()),
        oom_kill.as_ref().map_or(String::new(), |_| format!(". {}", crate::launch::memory::OOM_ADVICE)),
        last_output(output)
    )]
    WorkerDied {
        /// Worker index.
        worker: usize,
        /// Its pid.
        pid: u32,
        /// The envs it hosted.
        env_ids: Range<usize>,
        /// How it ended.
        exit: WorkerExit,
        /// The last lines it wrote to stdout/stderr (empty if none).
        output: String,
        /// When it was SIGKILLed and the kernel's OOM-kill counter rose since the pool
        /// started: the counter (the OOM killer ended it, for want of memory).
        oom_kill: Option<OomKill>,
    },
    /// An env panicked inside `reset` or `step`.
    #[error("env {env_id} panicked: {message}")]
    EnvPanicked {
        /// The env.
        env_id: usize,
        /// The panic message.
        message: String,
    },
    /// The wait for workers was given up because the pool's interrupt check said so
    /// (Ctrl-C in a Python trainer); the pool is closed and its workers stopped.
    #[error("interrupted while waiting for the workers; the pool is closed, build a new one")]
    Interrupted,
    /// Hang detection: the workers did not answer within the pool's step timeout. The
    /// pool is closed and its workers stopped.
    #[error("{}", timeout_message(workers, env_ids, *waited))]
    Timeout {
        /// The workers that did not finish.
        workers: Vec<usize>,
        /// The envs they host (async: the envs whose results had not come back).
        env_ids: Vec<usize>,
        /// The timeout.
        waited: Duration,
    },
    /// A worker reported an error it could not recover from.
    #[error("worker {worker} (envs {}..{}) failed: {message}", env_ids.start, env_ids.end)]
    WorkerFailed {
        /// Worker index.
        worker: usize,
        /// The envs it hosted.
        env_ids: Range<usize>,
        /// What it said.
        message: String,
    },
    /// A word of the shared region breaks the protocol (no worker can be blamed: a bug, or
    /// another process writing the region, see `docs/security.md`). The pool is closed.
    #[error("protocol error in the shared region: {what}; the pool is closed, build a new one")]
    Protocol {
        /// What was found where.
        what: String,
    },
    /// The pool was built by another process, of which this one is a fork: it belongs to
    /// that process (its workers serve that process's pool); here it is inert.
    #[error(
        "this pool belongs to process {owner} and this is process {current}, a fork of it: a pool cannot be \
         used across fork() (its workers and shared memory serve the parent); build a new pool in this process"
    )]
    ForeignProcess {
        /// The pid of the process that built the pool.
        owner: u32,
        /// This process's pid.
        current: u32,
    },
    /// An earlier failure closed the pool.
    #[error("the pool was closed by an earlier error ({reason}); build a new pool")]
    Closed {
        /// The earlier error.
        reason: String,
    },
}

/// A call made in the mode that does not have it (`step` on an async pool, `recv` on a
/// sync one, ...).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("{call}() is not available: {hint}")]
pub struct WrongMode {
    /// The call made.
    pub call: &'static str,
    /// What to call instead.
    pub hint: &'static str,
}

/// Why [`crate::Pool::step`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The pool failed and is closed.
    #[error(transparent)]
    Failed(#[from] PoolFailure),
    /// The actions were refused before any worker saw them; the pool is unchanged.
    #[error(transparent)]
    Action(#[from] ActionError),
    /// `step` before the first `reset`.
    #[error("step() called before reset(): call reset() first")]
    NotReset,
    /// With `AutoReset::Disabled`, these envs' episodes ended; they must be reset first.
    #[error("{}", needs_reset(env_ids))]
    NeedsReset {
        /// The ended envs.
        env_ids: Vec<usize>,
    },
    /// The pool is async.
    #[error(transparent)]
    WrongMode(#[from] WrongMode),
}

/// Why [`crate::Pool::reset`], [`crate::Pool::reset_with_seed`],
/// [`crate::Pool::reset_envs`] or [`crate::Pool::async_reset`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// The pool failed and is closed.
    #[error(transparent)]
    Failed(#[from] PoolFailure),
    /// `reset_envs` with a mask that does not have one entry per env.
    #[error(
        "the reset mask has {len} entries; it needs one per env ({num_envs}), true for the envs to reset"
    )]
    BadMask {
        /// Entries in the mask.
        len: usize,
        /// Envs in the pool.
        num_envs: usize,
    },
    /// `reset_envs` before the first reset with some envs left out: they have no episode to
    /// keep.
    #[error(
        "the first reset must reset every env: call reset() (or reset_envs with every entry true) first"
    )]
    PartialFirstReset,
    /// An async reset while an env has an action in flight.
    #[error("env {env_id} has an action in flight: recv() its result before async_reset()")]
    InFlight {
        /// The env.
        env_id: usize,
    },
    /// The call is not one of this pool's mode (`reset_envs` on an async pool,
    /// `async_reset` on a sync one).
    #[error(transparent)]
    WrongMode(#[from] WrongMode),
}

/// Why [`crate::Pool::send`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The pool failed and is closed.
    #[error(transparent)]
    Failed(#[from] PoolFailure),
    /// The actions were refused before any worker saw them; the pool is unchanged.
    #[error(transparent)]
    Action(#[from] ActionError),
    /// `send` before the first `async_reset`.
    #[error("send() called before async_reset(): call async_reset() (or reset()) first")]
    NotReset,
    /// An env id out of range.
    #[error("{}", env_id_out_of_range(env_id, *num_envs))]
    BadEnvId {
        /// The id passed.
        env_id: usize,
        /// Number of envs.
        num_envs: usize,
    },
    /// The env already has an action in flight (or was named twice).
    #[error("env {env_id} already has an action in flight (or is named twice): recv() its result before sending it another")]
    EnvBusy {
        /// The env.
        env_id: usize,
    },
    /// With `AutoReset::Disabled`, these envs' episodes ended; they must be reset first.
    #[error("{}", needs_reset(env_ids))]
    NeedsReset {
        /// The ended envs.
        env_ids: Vec<usize>,
    },
    /// The pool is sync.
    #[error(transparent)]
    WrongMode(#[from] WrongMode),
}

/// Why [`crate::Pool::recv`] failed.
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    /// The pool failed and is closed.
    #[error(transparent)]
    Failed(#[from] PoolFailure),
    /// `recv` would wait forever: fewer envs are in flight than a batch holds.
    #[error("recv() needs at least batch_size = {batch_size} envs in flight, but {in_flight} are: send() more actions first")]
    NotEnoughInFlight {
        /// Envs in flight.
        in_flight: usize,
        /// Rows per batch.
        batch_size: usize,
    },
    /// The pool is sync.
    #[error(transparent)]
    WrongMode(#[from] WrongMode),
}

/// The failure that closed the pool, if that is what ended the call.
macro_rules! failure_accessor {
    ($($t:ty),+) => {$(
        impl $t {
            /// The failure that closed the pool, if that is why the call failed (the other
            /// cases leave the pool as it was).
            pub fn failure(&self) -> Option<&PoolFailure> {
                match self {
                    Self::Failed(f) => Some(f),
                    _ => None,
                }
            }

            /// The failure that closed the pool, or this error back when the call was
            /// refused (the pool unchanged).
            pub fn into_failure(self) -> Result<PoolFailure, Self> {
                match self {
                    Self::Failed(f) => Ok(f),
                    refused => Err(refused),
                }
            }
        }
    )+};
}
failure_accessor!(StepError, ResetError, SendError, RecvError);

fn needs_reset(env_ids: &[usize]) -> String {
    format!(
        "envs {} ended their episodes and auto-reset is disabled: call reset() (or reset_envs with these envs in \
         the mask) before stepping them",
        format_envs(env_ids)
    )
}

/// Why a typed view of a batch could not be made.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ViewError {
    /// No observation array has this name.
    #[error("no observation array named {name:?}; the env has {available:?}")]
    UnknownName {
        /// The name asked for.
        name: String,
        /// The names there are.
        available: Vec<String>,
    },
    /// The array holds another dtype.
    #[error("observation {name:?} holds {actual}, not {requested}")]
    WrongDtype {
        /// The array.
        name: String,
        /// What it holds.
        actual: DType,
        /// What was asked for.
        requested: DType,
    },
    /// Final observations exist only with `AutoReset::SameStep`.
    #[error("final observations are only kept with AutoReset::SameStep")]
    NoFinalObs,
}

/// [`PoolFailure::Timeout`]'s message. With no worker behind (`workers` empty), what did
/// not finish is the delivery of the workers' completion posts to the trainer.
fn timeout_message(workers: &[usize], env_ids: &[usize], waited: Duration) -> String {
    let end = "the pool is closed and its workers stopped";
    if workers.is_empty() {
        return format!(
            "the wait for the workers' completion posts timed out after the step timeout of {waited:?}, but no \
             worker was behind (each had finished the command, and no env's results were outstanding at a \
             worker): their posts were taken by another process, most likely a copy of the trainer made by \
             fork() while the pool was stepping (for instance inside env code of the trainer's own shard), or \
             a process writing the shared region (see docs/security.md); {end}. Do not fork while a pool call \
             runs (a child must exec or _exit), and build a new pool"
        );
    }
    format!(
        "workers {workers:?} (envs {}) did not answer within the step timeout of {waited:?}; {end}. If an env \
         can legitimately take that long, raise .step_timeout(..); to find the hang, look at the worker with \
         `shmenv top` or a trace",
        format_envs(env_ids)
    )
}

/// A list of env ids, shortened when long.
fn format_envs(ids: &[usize]) -> String {
    if ids.len() <= 16 {
        format!("{ids:?}")
    } else {
        format!("{:?} and {} more", &ids[..16], ids.len() - 16)
    }
}

/// ": its last output: ..." when a dead worker said something.
fn last_output(output: &str) -> String {
    if output.is_empty() {
        String::new()
    } else {
        format!("; its last output:\n{output}")
    }
}

/// What to check when a worker ends during start-up: its memory when the OOM killer ended
/// it, who sent a SIGKILL otherwise, else the plugin it loads first, if any.
fn startup_death_hint(
    program: &std::path::Path,
    plugin: Option<&std::path::Path>,
    exit: &WorkerExit,
    oom_kill: Option<&OomKill>,
) -> String {
    if oom_kill.is_some() {
        return crate::launch::memory::OOM_ADVICE.to_string();
    }
    if *exit == WorkerExit::Signal(libc::SIGKILL) {
        return "SIGKILL comes from outside the worker: a user, a job scheduler, or the kernel's OOM killer where \
                its cgroup's counters cannot be read (see `dmesg`)"
            .to_string();
    }
    let program = program.display();
    match plugin {
        Some(plugin) => format!(
            "Check that plugin {} does not exit or crash in shmenv_plugin_entry or create (its output is above), \
             and that {program} is a shmenv worker program built against this shmenv version",
            plugin.display()
        ),
        None => format!("Check that {program} is a shmenv worker program built against this shmenv version"),
    }
}

/// The message for env id `env_id` (any integer a caller passed) in a pool of `num_envs`
/// envs: the one wording of the range, for the engine and the Python extension.
pub fn env_id_out_of_range(env_id: impl fmt::Display, num_envs: usize) -> String {
    format!("env id {env_id} is out of range: env ids are 0 to {}", num_envs.saturating_sub(1))
}
