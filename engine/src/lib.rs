//! Trainer side of shmenv: the shared-memory region and its protocol, the cross-process
//! semaphores, worker launch and supervision, and the [`Pool`] with its zero-copy
//! [`Batch`] views.
//!
//! Modules follow the data path: [`spec`] (what envs look like) -> [`protocol`] (where
//! everything lives in the region) -> [`region`] (the memfd mapping; the only module that
//! touches raw shared memory) -> [`sync`] (semaphores and waiting) -> [`launch`] (worker
//! processes) -> [`pool`] (the trainer API) -> [`batch`] (views of the results);
//! [`program`] says which program workers run; [`ring`] holds the async ring's claim/commit/release protocol, [`recovery`] how a dead
//! worker's rows are found in it; [`stats`] the live
//! counters in the region's stats area.

// Under `--cfg loom` only the protocol code is built, with loom's atomics, for the model
// check in `tests/loom_ring.rs`; everything touching real memory and processes is left out.
#[cfg(not(loom))]
pub mod action;
#[cfg(not(loom))]
pub mod attach;
#[cfg(not(loom))]
pub mod batch;
pub mod dtype;
#[cfg(not(loom))]
pub mod error;
#[cfg(not(loom))]
pub mod fork;
#[cfg(not(loom))]
pub mod launch;
#[cfg(not(loom))]
mod memory;
#[cfg(not(loom))]
pub mod pool;
#[cfg(not(loom))]
mod process_group;
#[cfg(not(loom))]
pub mod program;
pub mod protocol;
pub mod recovery;
#[cfg(not(loom))]
pub mod region;
pub mod ring;
pub mod space;
pub mod spec;
#[cfg(not(loom))]
pub mod stats;
pub mod sync;

#[cfg(not(loom))]
pub use batch::{ArrayView, Batch, Episode, Flags};
#[cfg(not(loom))]
pub use error::{ActionError, BuildError, StepError, ViewError};
#[cfg(not(loom))]
pub use launch::{CpuAffinity, WorkerCommand, WorkerExit};
#[cfg(not(loom))]
pub use pool::{FailurePolicy, MappingLease, Pool, PoolBuilder};
pub use protocol::AutoReset;
pub use spec::{DType, Element, EnvSpec, ObsArray, Space};
#[cfg(not(loom))]
pub use stats::{StatsReport, StatsSnapshot, WorkerActivity};
pub use sync::{WaitMode, WaitStrategy};
