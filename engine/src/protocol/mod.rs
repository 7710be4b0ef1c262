//! The shared-memory protocol: the region's layout, its header, the control words and the
//! messages exchanged at start-up. Both sides (this crate's `Pool` and the worker host in
//! `shmenv-worker`) use only this module to find anything in the region.
//!
//! ```text
//! bootstrap part (sized before workers start; depends only on num_workers)
//!   0      Header (one page, plain data, written by the trainer)        header
//!   4096   PoolControl: a trainer line, the trainer's semaphore line     control
//!   ...    WorkerControl x num_workers: a trainer line, a worker line   control
//!   ...    params area: the pool parameters as JSON (trainer -> workers) params
//!   ...    report area x num_workers: spec or error as JSON (worker -> trainer)
//!   ...    stats area: the pool block, a block per worker               stats
//! data part (added once all workers reported the same spec; then sealed)   layout
//!   actions        [num_envs, action...]          written by the trainer
//!   result blocks: obs[k], final_obs[k] (AutoReset::SameStep only), then one array per
//!                  result column (`Column::ALL`)                        written by workers
//!   async ring words and queues; trace rows (trace)
//! ```
//! Every array starts on a 128-byte boundary (two cache lines, see `CACHE_LINE`).

/// `b"SHMENV\0\x01"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMENV\0\x01");
/// Bumped whenever anything in this module changes meaning.
pub const LAYOUT_VERSION: u32 = 8;
/// Alignment of every shared array and control block: two 64-byte lines, because the
/// adjacent-line prefetcher pulls pairs (as crossbeam's `CachePadded` explains).
pub(crate) const CACHE_LINE: usize = 128;
/// Page size the layout rounds to.
pub(crate) const PAGE: usize = 4096;
/// Capacity of the params area (pool parameters as JSON).
pub const PARAMS_CAPACITY: usize = 64 * 1024;
/// Capacity of each worker's report area (its spec or its error, as JSON).
pub const REPORT_CAPACITY: usize = 64 * 1024;

mod control;
mod header;
pub mod infos;
mod layout;
mod params;
pub mod stats;
pub mod trace;

pub use control::*;
pub use header::*;
pub use layout::*;
pub use params::*;

/// Rounds `x` up to a multiple of `to` (a power of two).
pub(crate) const fn round_up(x: usize, to: usize) -> usize {
    (x + to - 1) & !(to - 1)
}
