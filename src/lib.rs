//! # shmenv
//!
//! Vectorized reinforcement-learning environments stepped by worker processes straight
//! into shared memory. The trainer reads each batch as typed, shaped views of that memory:
//! no pickling, no pipes, no copies. Linux only (memfd, pidfd, futex).
//!
//! ```no_run
//! use shmenv::worker::Registry;
//! use shmenv::{AutoReset, Pool};
//!
//! fn main() -> Result<(), shmenv::Report> {
//!     // The workers are this same program, started again by the pool.
//!     shmenv::worker::serve_if_worker(Registry::with_builtins);
//!     let mut pool = Pool::builder("CartPole-v1")
//!         .num_envs(64)
//!         .num_workers(2)
//!         .seed(42)
//!         .autoreset(AutoReset::NextStep)
//!         .build()?;
//!     let batch = pool.reset()?;
//!     let obs = batch.observations::<f32>()?; // [64, 4], a view into shared memory
//!     assert_eq!(obs.shape(), &[64, 4]);
//!     let actions = vec![0i64; 64];
//!     for _ in 0..100 {
//!         let batch = pool.step(&actions)?;
//!         for ep in batch.episodes() {
//!             println!("env {} finished with return {}", ep.env_id, ep.episode_return);
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! The trainer side lives in [`engine`] (its main types re-exported at the top level: start
//! with [`Pool::builder`]); the worker side in [`worker`]: the [`worker::Env`] trait to
//! implement an env, the [`worker::Registry`] of env ids, [`worker::serve_if_worker`] (the
//! first line of a `main` that is its own worker program, as above) and the built-in envs.
//!
//! ## Which program the workers run
//!
//! Each worker is a process executing a program that knows the envs. With
//! [`worker::serve_if_worker`] first in `main`, that program is the trainer's own
//! executable: nothing to build, install or copy, and envs registered there are known to
//! the workers. The call is explicit, not code that runs before `main` by itself, because a
//! worker must never run the trainer's `main` and a constructor inside a library is not
//! reliably linked into the program. Without it a pool runs a program named
//! `shmenv-worker` found next to the executable or on `$PATH`, or the one named by
//! [`PoolBuilder::worker_program`] or `SHMENV_WORKER_PROGRAM`
//! (see [`engine::launch::program`] for the order).

#[doc(inline)]
pub use shmenv_engine as engine;
pub use shmenv_engine::{
    ActionError, ArrayView, AutoReset, Batch, BuildError, CpuAffinity, DType, Element, EnvSpec, Episode,
    FailurePolicy, Flags, MappingLease, ObsArray, Pool, PoolBuilder, PoolFailure, RecvError, Report,
    ResetError, SendError, Space, StatsReport, StatsSnapshot, StepError, Verdict, ViewError, WaitMode,
    WaitStrategy, WorkerActivity, WorkerCommand, WorkerExit, WrongMode,
};
#[doc(inline)]
pub use shmenv_worker as worker;
