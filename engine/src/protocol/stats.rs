//! The stats area: counters that each have a single writer (the trainer for the pool
//! block, worker `w` for its block), updated with relaxed loads and stores, and read by
//! anyone (`Pool::stats`, `shmenv top` from another process). Times are nanoseconds;
//! `*_NS` words are running totals. It lives in the bootstrap part, so a reader needs only
//! the header to find it. [`PoolBlock`] and [`WorkerBlock`] are the one source of the
//! offsets below.

use super::CACHE_LINE;
use bytemuck::{Pod, Zeroable};
use std::mem::{align_of, offset_of, size_of};

/// Buckets of the env-step time histograms: bucket `k` counts durations in
/// `[2^k, 2^(k+1))` ns (bucket 0 also counts 0 and 1 ns; the last, everything longer).
pub const HIST_BUCKETS: usize = 32;
/// Async mode: a worker times one env step in this many for the histogram (two clock
/// reads each); sync mode times one env per batch.
pub const ASYNC_SAMPLE_EVERY: u32 = 64;

/// The pool block (written by the trainer).
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct PoolBlock {
    /// 1 when stats are recorded (`PoolBuilder::stats`).
    pub enabled: u32,
    /// The trainer's pid.
    pub trainer_pid: u32,
    /// CLOCK_MONOTONIC when the pool started.
    pub started_ns: u64,
    /// Batches returned by `reset`/`step`/`recv`.
    pub batches: u64,
    /// Time the trainer spent waiting for workers inside `reset`/`step`/`recv`.
    pub trainer_wait_ns: u64,
    /// Time the trainer spent inside `reset`/`step`/`send`/`recv` in all.
    pub trainer_call_ns: u64,
    /// Async: sum over `recv` calls of the ring blocks already full on entry.
    pub ring_full_sum: u64,
    /// Async: `recv` calls counted in `ring_full_sum`.
    pub ring_samples: u64,
    /// The wait mode the tuner chose (`sync::WaitMode` as a number: 0 active, 1 sleep; a
    /// probe may be running the other).
    pub wait_mode: u64,
    /// Batches returned while the wait mode was `sleep`.
    pub sleep_batches: u64,
    /// Times the wait tuner tried the other mode.
    pub wait_probes: u64,
    /// Times the wait tuner changed the mode.
    pub wait_switches: u64,
    /// The trainer thread's run-queue delay when the pool started, as
    /// [`PoolBlock::trainer_cpu_at_start`].
    pub trainer_runqueue_at_start: u64,
    /// Env steps of the trainer's own shard (`PoolBuilder::trainer_shard`).
    pub shard_steps: u64,
    /// Episodes the trainer's own shard began.
    pub shard_resets: u64,
    /// Time the trainer spent stepping its own shard.
    pub shard_env_ns: u64,
    /// The thread of the trainer that made the pool's latest call (its tid): the trainer's
    /// CPU time and run-queue delay are that thread's.
    pub trainer_tid: u64,
    /// The trainer thread's CPU time (`/proc/PID/task/TID/schedstat`) when the pool
    /// started, less what other threads that called the pool before it had used since
    /// (wrapping): its CPU time less this is the trainer's since the start.
    pub trainer_cpu_at_start: u64,
    /// The busy time (`/proc/stat`, ns) of the CPUs the trainer's thread may run on when
    /// the pool started; 0 when it could not be read.
    pub machine_busy_at_start: u64,
    /// Zero: the rest of the block.
    pub reserved: [u64; 14],
}

/// A worker's block (written by that worker).
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct WorkerBlock {
    /// Env steps.
    pub steps: u64,
    /// Env resets (commanded and automatic).
    pub resets: u64,
    /// Time in env code (`reset`/`step`/`observe` and the episode bookkeeping).
    pub env_ns: u64,
    /// Time waiting for commands or actions.
    pub wait_ns: u64,
    /// Time publishing results (claiming rows, committing, posting).
    pub publish_ns: u64,
    /// Sampled env-step timings in the histogram.
    pub sampled: u64,
    /// The worker's pid.
    pub pid: u32,
    /// Zero.
    pub reserved_pid: u32,
    /// Async mode: CLOCK_MONOTONIC when the env code now running started, 0 when none
    /// runs (written whether stats are on or not: the trainer's hang detection reads it).
    pub busy_since: u64,
    /// The env-step time histogram.
    pub hist: [u64; HIST_BUCKETS],
    /// The worker's run-queue delay (`/proc/PID/schedstat`) when it started serving the
    /// pool (after building its envs).
    pub runqueue_at_start: u64,
    /// The worker's CPU time (`/proc/PID/schedstat`) at the same moment.
    pub cpu_at_start: u64,
    /// Zero: the rest of the block.
    pub reserved: [u64; 6],
}

const _: () = {
    assert!(size_of::<PoolBlock>() == 2 * CACHE_LINE && align_of::<PoolBlock>() == CACHE_LINE);
    assert!(size_of::<WorkerBlock>() == 3 * CACHE_LINE && align_of::<WorkerBlock>() == CACHE_LINE);
};

/// Bytes of the pool block.
pub(crate) const POOL_BYTES: usize = size_of::<PoolBlock>();
/// Bytes of each worker block.
pub(crate) const WORKER_BYTES: usize = size_of::<WorkerBlock>();

/// Offsets of the pool block's words ([`PoolBlock`]).
pub mod pool {
    use super::PoolBlock;
    use std::mem::offset_of;

    /// u32: [`PoolBlock::enabled`].
    pub(crate) const ENABLED: usize = offset_of!(PoolBlock, enabled);
    /// u32: [`PoolBlock::trainer_pid`].
    pub(crate) const TRAINER_PID: usize = offset_of!(PoolBlock, trainer_pid);
    /// u64: [`PoolBlock::started_ns`].
    pub(crate) const STARTED_NS: usize = offset_of!(PoolBlock, started_ns);
    /// u64: [`PoolBlock::batches`].
    pub(crate) const BATCHES: usize = offset_of!(PoolBlock, batches);
    /// u64: [`PoolBlock::trainer_wait_ns`].
    pub(crate) const TRAINER_WAIT_NS: usize = offset_of!(PoolBlock, trainer_wait_ns);
    /// u64: [`PoolBlock::trainer_call_ns`].
    pub(crate) const TRAINER_CALL_NS: usize = offset_of!(PoolBlock, trainer_call_ns);
    /// u64: [`PoolBlock::ring_full_sum`].
    pub(crate) const RING_FULL_SUM: usize = offset_of!(PoolBlock, ring_full_sum);
    /// u64: [`PoolBlock::ring_samples`].
    pub(crate) const RING_SAMPLES: usize = offset_of!(PoolBlock, ring_samples);
    /// u64: [`PoolBlock::wait_mode`].
    pub const WAIT_MODE: usize = offset_of!(PoolBlock, wait_mode);
    /// u64: [`PoolBlock::sleep_batches`].
    pub(crate) const SLEEP_BATCHES: usize = offset_of!(PoolBlock, sleep_batches);
    /// u64: [`PoolBlock::wait_probes`].
    pub(crate) const WAIT_PROBES: usize = offset_of!(PoolBlock, wait_probes);
    /// u64: [`PoolBlock::wait_switches`].
    pub(crate) const WAIT_SWITCHES: usize = offset_of!(PoolBlock, wait_switches);
    /// u64: [`PoolBlock::trainer_runqueue_at_start`].
    pub(crate) const TRAINER_RUNQUEUE_AT_START: usize = offset_of!(PoolBlock, trainer_runqueue_at_start);
    /// u64: [`PoolBlock::shard_steps`].
    pub(crate) const SHARD_STEPS: usize = offset_of!(PoolBlock, shard_steps);
    /// u64: [`PoolBlock::shard_resets`].
    pub(crate) const SHARD_RESETS: usize = offset_of!(PoolBlock, shard_resets);
    /// u64: [`PoolBlock::shard_env_ns`].
    pub(crate) const SHARD_ENV_NS: usize = offset_of!(PoolBlock, shard_env_ns);
    /// u64: [`PoolBlock::trainer_tid`].
    pub(crate) const TRAINER_TID: usize = offset_of!(PoolBlock, trainer_tid);
    /// u64: [`PoolBlock::trainer_cpu_at_start`].
    pub(crate) const TRAINER_CPU_AT_START: usize = offset_of!(PoolBlock, trainer_cpu_at_start);
    /// u64: [`PoolBlock::machine_busy_at_start`].
    pub(crate) const MACHINE_BUSY_AT_START: usize = offset_of!(PoolBlock, machine_busy_at_start);
}

/// Offsets of a worker block's words ([`WorkerBlock`]).
pub mod worker {
    use super::WorkerBlock;
    use std::mem::offset_of;

    /// u64: [`WorkerBlock::steps`].
    pub(crate) const STEPS: usize = offset_of!(WorkerBlock, steps);
    /// u64: [`WorkerBlock::resets`].
    pub(crate) const RESETS: usize = offset_of!(WorkerBlock, resets);
    /// u64: [`WorkerBlock::env_ns`].
    pub(crate) const ENV_NS: usize = offset_of!(WorkerBlock, env_ns);
    /// u64: [`WorkerBlock::wait_ns`].
    pub(crate) const WAIT_NS: usize = offset_of!(WorkerBlock, wait_ns);
    /// u64: [`WorkerBlock::publish_ns`].
    pub(crate) const PUBLISH_NS: usize = offset_of!(WorkerBlock, publish_ns);
    /// u64: [`WorkerBlock::sampled`].
    pub(crate) const SAMPLED: usize = offset_of!(WorkerBlock, sampled);
    /// u32: [`WorkerBlock::pid`].
    pub const PID: usize = offset_of!(WorkerBlock, pid);
    /// u64: [`WorkerBlock::busy_since`].
    pub(crate) const BUSY_SINCE: usize = offset_of!(WorkerBlock, busy_since);
    /// `HIST_BUCKETS` u64: [`WorkerBlock::hist`]; bucket `k` at `HIST + k * HIST_STRIDE`.
    pub(crate) const HIST: usize = offset_of!(WorkerBlock, hist);
    /// u64: [`WorkerBlock::runqueue_at_start`].
    pub(crate) const RUNQUEUE_AT_START: usize = offset_of!(WorkerBlock, runqueue_at_start);
    /// u64: [`WorkerBlock::cpu_at_start`].
    pub(crate) const CPU_AT_START: usize = offset_of!(WorkerBlock, cpu_at_start);
    /// Bytes between two histogram buckets.
    pub(crate) const HIST_STRIDE: usize = size_of::<u64>();
}

const _: () = assert!(offset_of!(WorkerBlock, busy_since) % 8 == 0 && offset_of!(WorkerBlock, hist) % 8 == 0);
