//! Which program a pool execs as its workers.
//!
//! A pool built without [`crate::PoolBuilder::worker_program`] runs, in this order:
//!
//! 1. the program named by `$SHMENV_WORKER_PROGRAM`, if set;
//! 2. **this same program**, when its `main` hands worker invocations to the worker host
//!    (`shmenv::worker::serve_if_worker`, which calls [`declare_serves_workers`]): the
//!    trainer re-executes itself, and the copy becomes a worker before any trainer code
//!    runs. Nothing to build, install or copy, and custom envs registered in that `main`
//!    are known to the workers;
//! 3. a program named `shmenv-worker` next to the running executable (or one directory up,
//!    for test and example binaries under `target/*/deps` and `target/*/examples`), then
//!    on `$PATH`.
//!
//! Re-executing the trainer is only done when its `main` has declared that it serves
//! workers, so a `main` that does not is never re-run by accident. Every worker also gets
//! [`WORKER_ENV`] in its environment: should a worker program run the trainer code anyway
//! (say `.worker_program(std::env::current_exe()?)` without the entry call), building a
//! pool there fails at once with [`crate::BuildError::NotServingWorkers`] instead of
//! starting workers of its own.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The variable set in every worker's environment, to the trainer's pid.
pub const WORKER_ENV: &str = "SHMENV_WORKER_OF";

/// The variable that names the worker program to use when none is given.
pub(crate) const PROGRAM_ENV: &str = "SHMENV_WORKER_PROGRAM";

/// The name of the stand-alone worker program looked for as a last resort.
pub(crate) const PROGRAM_NAME: &str = "shmenv-worker";

static SERVES_WORKERS: AtomicBool = AtomicBool::new(false);
static HOSTING: AtomicBool = AtomicBool::new(false);

/// Declares that this program's `main` hands worker invocations to the worker host, so a
/// pool may run this same program as its workers. Called by `serve_if_worker` when the
/// process is not a worker.
pub fn declare_serves_workers() {
    SERVES_WORKERS.store(true, Ordering::Relaxed);
}

/// Whether [`declare_serves_workers`] was called in this process.
pub(crate) fn serves_workers() -> bool {
    SERVES_WORKERS.load(Ordering::Relaxed)
}

/// Marks this process as a worker host (called by the worker host on entry): pools that
/// its envs build are their own.
pub fn enter_host() {
    HOSTING.store(true, Ordering::Relaxed);
}

/// Whether this process was started by a pool as a worker (its parent set [`WORKER_ENV`]
/// to its pid) but is not running the worker host: the worker program ran the trainer's
/// code instead.
pub(crate) fn is_unserved_worker() -> bool {
    if HOSTING.load(Ordering::Relaxed) {
        return false;
    }
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    std::env::var(WORKER_ENV).is_ok_and(|v| v == parent.to_string())
}

/// Finds the program to run as workers when the builder names none (see the module docs
/// for the order). Returns the paths tried on failure.
pub(crate) fn default_worker_program() -> Result<PathBuf, Vec<PathBuf>> {
    let mut tried = Vec::new();
    if let Some(p) = std::env::var_os(PROGRAM_ENV) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p);
    }
    // This program itself: through `/proc/self/exe`, which the kernel resolves in the
    // forked child to the very file the trainer runs, even if a rebuild has since replaced
    // or deleted it at its path (workers then still match the trainer's protocol).
    let self_exe = Path::new("/proc/self/exe");
    if serves_workers() && self_exe.is_file() {
        return Ok(self_exe.to_path_buf());
    }
    let exe = std::env::current_exe().ok();
    let mut dir = exe.as_deref().and_then(Path::parent).map(Path::to_path_buf);
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let candidate = d.join(PROGRAM_NAME);
        if candidate.is_file() {
            return Ok(candidate);
        }
        tried.push(candidate);
        dir = d.parent().map(Path::to_path_buf);
    }
    for d in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let candidate = d.join(PROGRAM_NAME);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    tried.push(PathBuf::from(format!("$PATH/{PROGRAM_NAME}")));
    Err(tried)
}
