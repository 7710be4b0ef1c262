//! Trainer side of shmenv: the shared-memory region and its protocol, the cross-process
//! semaphores, worker launch and supervision, and the [`Pool`] with its zero-copy
//! [`Batch`] views.
//!
//! Modules follow the data path: [`spec`] (what envs look like) -> [`protocol`] (where
//! everything lives in the region) -> [`region`] (the memfd mapping; the only module that
//! touches raw shared memory) -> [`sync`] (semaphores and waiting) -> [`launch`] (worker
//! processes) -> [`pool`] (the trainer API) -> [`batch`] (views of the results).

pub mod action;
pub mod batch;
pub mod error;
pub mod launch;
pub mod pool;
pub mod protocol;
pub mod region;
pub mod spec;
pub mod sync;

pub use batch::{ArrayView, Batch, Episode, Flags};
pub use error::{ActionError, BuildError, StepError, ViewError};
pub use launch::{CpuAffinity, WorkerExit};
pub use pool::{Pool, PoolBuilder};
pub use protocol::AutoReset;
pub use spec::{DType, Element, EnvSpec, ObsArray, Space};
pub use sync::WaitStrategy;
