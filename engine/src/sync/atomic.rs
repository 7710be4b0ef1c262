//! The atomics every primitive of [`crate::sync`] is built on: `std`'s, or `loom`'s when
//! the crate is built with `--cfg loom` to model-check the protocol (see
//! `tests/loom_ring.rs`).

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
