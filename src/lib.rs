//! # shmenv
//!
//! Vectorized reinforcement-learning environments stepped by worker processes straight
//! into shared memory. The trainer reads each batch as typed, shaped views of that memory:
//! no pickling, no pipes, no copies.
//!
//! ```no_run
//! use shmenv::{AutoReset, Pool};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut pool = Pool::builder("CartPole-v1")
//!     .num_envs(64)
//!     .num_workers(2)
//!     .seed(42)
//!     .autoreset(AutoReset::NextStep)
//!     .build()?;
//! let batch = pool.reset()?;
//! let obs = batch.observations::<f32>()?; // [64, 4], a view into shared memory
//! assert_eq!(obs.shape(), &[64, 4]);
//! let actions = vec![0i64; 64];
//! for _ in 0..100 {
//!     let batch = pool.step(&actions)?;
//!     for ep in batch.episodes() {
//!         println!("env {} finished with return {}", ep.env_id, ep.episode_return);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! The trainer side lives in [`engine`] (re-exported at the top level), the worker side
//! (the [`worker::Env`] trait, the registry, the host loop and the built-in envs) in
//! [`worker`].

pub use shmenv_engine as engine;
pub use shmenv_engine::{
    ActionError, ArrayView, AutoReset, Batch, BuildError, CpuAffinity, DType, Element, EnvSpec, Episode,
    FailurePolicy, Flags, MappingLease, ObsArray, Pool, PoolBuilder, Space, StatsReport, StatsSnapshot,
    StepError, ViewError, WaitStrategy, WorkerActivity, WorkerCommand, WorkerExit,
};
pub use shmenv_worker as worker;
