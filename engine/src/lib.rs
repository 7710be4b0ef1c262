//! Trainer side of shmenv: the shared-memory region and its protocol, the cross-process
//! semaphores, worker launch and supervision, and the [`Pool`] with its zero-copy
//! [`Batch`] views.
//!
//! Internal to shmenv, with no stable API: programs use the `shmenv` crate, which re-exports
//! what they call.

// Every `pub` item is reachable from outside (the rest is `pub(crate)`), so what other
// crates of the workspace may call is exactly the snapshot in tests/public-api/.
#![warn(unreachable_pub)]
// The loom build leaves out the modules that use much of the protocol's crate-private items.
#![cfg_attr(loom, allow(dead_code))]

// Under `--cfg loom` only the protocol code is built, with loom's atomics, for the model
// check in `tests/loom_ring.rs`; everything touching real memory and processes is left out.

/// What an env is: element types, spaces, the env spec.
pub mod spec;

/// Checking actions against the action space while copying them into the region.
#[cfg(not(loom))]
pub mod action;

/// Where everything lives in the region: header, control words, parameters, stats, layout.
pub mod protocol;

/// The memfd mapping: the one module that turns shared bytes into references.
#[cfg(not(loom))]
pub mod region;

/// Semaphores and gates on futex words, and the waiting policy.
pub mod sync;

/// The async ring's claim/commit/receive/release protocol, and restart recovery over it.
pub mod ring;

/// Worker processes and the machine they run on: exec, supervision, which program, core
/// affinity, memory limits, fork detection.
#[cfg(not(loom))]
pub mod launch;

/// The trainer's API: `Pool`, its builder, sync and async modes, restarts.
#[cfg(not(loom))]
pub mod pool;

/// Zero-copy views of a received batch.
#[cfg(not(loom))]
mod batch;

/// Live counters in the region's stats area, trace rings, attaching from another process.
#[cfg(not(loom))]
pub mod stats;

/// The errors of building, stepping, validating actions and viewing results.
#[cfg(not(loom))]
pub mod error;

#[cfg(not(loom))]
pub use batch::{ArrayView, Batch, Episode, Flags};
#[cfg(not(loom))]
pub use error::{
    ActionError, BuildError, PoolFailure, RecvError, Report, ResetError, SendError, StepError, ViewError,
    WrongMode,
};
#[cfg(not(loom))]
pub use launch::{CpuAffinity, WorkerCommand, WorkerExit};
#[cfg(not(loom))]
pub use pool::{FailurePolicy, MappingLease, Pool, PoolBuilder};
pub use protocol::AutoReset;
pub use spec::{DType, Element, EnvSpec, ObsArray, Space};
#[cfg(not(loom))]
pub use stats::{StatsReport, StatsSnapshot, Verdict, WorkerActivity};
pub use sync::{WaitMode, WaitStrategy};
