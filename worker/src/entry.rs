//! The entry call of a program that is both a trainer and its own workers.

use crate::host;
use crate::registry::Registry;

/// Makes this program its own worker program. Call it as the **first line of `main`**:
///
/// ```no_run
/// use shmenv_worker::Registry;
///
/// fn main() {
///     shmenv_worker::serve_if_worker(Registry::with_builtins);
///     // The trainer: pools built without `.worker_program(..)` now run this program.
/// }
/// ```
///
/// When a pool started this process as one of its workers (its arguments begin with
/// `--shmenv-worker`), this builds the registry, serves the pool until it closes and
/// **exits the process** with the worker host's exit code (see [`host::run`]); the rest of
/// `main` never runs. Otherwise it records that this program serves workers: from then on
/// a pool built without `.worker_program(..)` re-executes this same program as its
/// workers (unless `SHMENV_WORKER_PROGRAM` names another). Envs registered in `registry`
/// are what the workers know, so custom envs need nothing more. The trainer builds the
/// registry too, once, so that such pools can step a shard of their envs in the trainer
/// (`PoolBuilder::trainer_shard_mode`, on by default where it is safe and faster):
///
/// ```no_run
/// # use shmenv_worker::{EnvEntry, Registry};
/// fn registry() -> Registry {
///     let mut r = Registry::with_builtins();
///     // r.register("MyEnv-v0", EnvEntry { .. });
///     r
/// }
///
/// fn main() {
///     shmenv_worker::serve_if_worker(registry);
///     // ...
/// }
/// ```
///
/// Why an explicit call rather than code that runs before `main` by itself: a worker must
/// not run the trainer's `main` (it would load data, parse flags, build pools of its own),
/// and a constructor hidden in a library is not reliably linked into the program. The
/// call costs one line, and a program without it is never re-executed: its pools fall back
/// to a `shmenv-worker` program, and if a worker runs trainer code anyway its pools refuse
/// to build (`BuildError::NotServingWorkers`) instead of starting workers of their own.
pub fn serve_if_worker<R: FnOnce() -> Registry>(registry: R) {
    if host::is_worker_invocation() {
        let args: Vec<String> = std::env::args().collect();
        let code = host::run_with_args(&registry(), &args);
        std::process::exit(i32::from(code));
    }
    shmenv_engine::launch::program::declare_serves_workers();
    shmenv_engine::pool::declare_program_shard(crate::trainer_shard(registry()));
}
