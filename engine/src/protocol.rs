//! The shared-memory protocol: the region's layout, its header, the control words and the
//! messages exchanged at start-up. Both sides (this crate's `Pool` and the worker host in
//! `shmenv-worker`) use only this module to find anything in the region.
//!
//! ```text
//! bootstrap part (sized before workers start; depends only on num_workers)
//!   0      Header (one page, plain data, written by the trainer)
//!   4096   PoolControl: state word, command, trainer semaphore       (2 cache lines)
//!   ...    WorkerControl x num_workers: command semaphore, status     (1 cache line each)
//!   ...    params area: the pool parameters as JSON (trainer -> workers)
//!   ...    report area x num_workers: spec or error as JSON (worker -> trainer)
//! data part (added once all workers reported the same spec; then sealed)
//!   actions        [num_envs, action...]          written by the trainer
//!   obs[k]         [num_envs, shape_k...]         one array per observation name
//!   final_obs[k]   [num_envs, shape_k...]         only with AutoReset::SameStep
//!   rewards f32, terminated u8, truncated u8,
//!   episode_return f64, episode_length u32, elapsed_steps u32    [num_envs] each
//! ```
//! Every array starts on a 128-byte boundary (two cache lines, see `CACHE_LINE`).

use crate::spec::{EnvSpec, Space};
use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// `b"SHMENV\0\x01"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMENV\0\x01");
/// Bumped whenever anything in this module changes meaning.
pub const LAYOUT_VERSION: u32 = 6;
/// Alignment of every shared array and control block: two 64-byte lines, because the
/// adjacent-line prefetcher pulls pairs (as crossbeam's `CachePadded` explains).
pub const CACHE_LINE: usize = 128;
/// Page size the layout rounds to.
pub const PAGE: usize = 4096;
/// Capacity of the params area (pool parameters as JSON).
pub const PARAMS_CAPACITY: usize = 64 * 1024;
/// Capacity of each worker's report area (its spec or its error, as JSON).
pub const REPORT_CAPACITY: usize = 64 * 1024;

/// Offset of the pool control block.
pub const POOL_CONTROL: usize = PAGE;
/// Offset of the region state word ([`RegionState`]).
pub const STATE_WORD: usize = POOL_CONTROL;
/// Offset of the command word ([`Command`]).
pub const COMMAND_WORD: usize = POOL_CONTROL + 4;
/// Offset of the reset seed (u64, valid with `Command::ResetSeeded`).
pub const RESET_SEED: usize = POOL_CONTROL + 8;
/// Offset of the sync block word (u32): which of the [`SYNC_BLOCKS`] result blocks the
/// current sync command writes (published with the command).
pub const SYNC_BLOCK: usize = POOL_CONTROL + 16;
/// Offset of the command sequence number (u32, wrapping): sync commands are numbered, and
/// each worker stores the number of the last one it finished in its `DONE_SEQ` word, so a
/// trainer whose wait timed out can name the workers that did not answer.
pub const COMMAND_SEQ: usize = POOL_CONTROL + 20;
/// Async mode under the restart policy: a gate (value, sleepers) the trainer sets to 1 to
/// hold every worker before its next claim while it takes stock of a dead worker's rows
/// (see `recovery`), and back to 0 to let them go on.
pub const RING_PAUSE: usize = POOL_CONTROL + 24;
/// Sync mode's result blocks: commands alternate between them, so the views of one batch
/// stay intact while the next command runs (what Python's zero-copy arrays rely on).
pub const SYNC_BLOCKS: usize = 2;
/// Offset of the trainer's semaphore (workers post, the trainer acquires).
pub const TRAINER_SEMAPHORE: usize = POOL_CONTROL + CACHE_LINE;
/// Offset of the first worker control block.
pub const WORKER_CONTROL: usize = POOL_CONTROL + 2 * CACHE_LINE;

/// Region states (the state word). Stored with Release, read with Acquire.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionState {
    /// Only the bootstrap part exists; workers report their spec.
    Bootstrapping = 0,
    /// The data part exists and the layout fields of the header are valid.
    Ready = 1,
    /// The pool could not start (workers disagree, a worker failed): workers exit.
    Abandoned = 2,
}

impl RegionState {
    /// Decodes a state word; unknown values are `None` (the word is untrusted).
    pub fn from_word(w: u32) -> Option<Self> {
        [Self::Bootstrapping, Self::Ready, Self::Abandoned].into_iter().find(|s| *s as u32 == w)
    }
}

/// Commands from the trainer to every worker (the command word, published by posting each
/// worker's semaphore).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Reset every env, continuing each env's random stream.
    Reset = 1,
    /// Reset every env with seed `RESET_SEED + env_id` (wrapping).
    ResetSeeded = 2,
    /// Step every env with its action row.
    Step = 3,
    /// Exit cleanly.
    Close = 4,
    /// Reset some envs: the first byte of each env's action row (unused by a reset) is a
    /// [`reset_flag`] saying what to do with that env; envs left alone write their current
    /// observation into the block, with reward 0 and both flags false.
    ResetSome = 5,
}

/// [`Command::ResetSome`]: what the first byte of an env's action row asks for.
pub mod reset_flag {
    /// Leave the env as it is (its current observation is written).
    pub const KEEP: u8 = 0;
    /// Reset it, continuing its random stream.
    pub const RESET: u8 = 1;
    /// Reset it with seed `RESET_SEED + env_id` (wrapping).
    pub const RESET_SEEDED: u8 = 2;
}

impl Command {
    /// Decodes a command word; unknown values are `None` (the word is untrusted).
    pub fn from_word(w: u32) -> Option<Self> {
        [Self::Reset, Self::ResetSeeded, Self::Step, Self::Close, Self::ResetSome]
            .into_iter()
            .find(|c| *c as u32 == w)
    }
}

/// Offsets inside one worker control block (relative to [`worker_control`]).
pub mod worker_block {
    /// The worker's command semaphore (the trainer posts, the worker acquires).
    pub const SEMAPHORE: usize = 0;
    /// The worker's [`super::WorkerStatus`] word.
    pub const STATUS: usize = 8;
    /// Length in bytes of the JSON in the worker's report area.
    pub const REPORT_LEN: usize = 12;
    /// The last sync command (its `COMMAND_SEQ`) this worker finished.
    pub const DONE_SEQ: usize = 16;
    /// Async mode under the restart policy, written by the worker: its claim state
    /// ([`super::claim_state`]), then the claim (first global row u64, rows u32, rows
    /// committed so far u32), then the queue entries whose rows are all committed (u32).
    pub const CLAIM_STATE: usize = 20;
    /// First global row of the current claim (u64).
    pub const CLAIM_FIRST: usize = 24;
    /// Rows in the current claim.
    pub const CLAIM_LEN: usize = 32;
    /// Rows of the current claim committed so far.
    pub const CLAIM_DONE: usize = 36;
    /// Queue entries consumed and published (u32, wrapping; compared with `QUEUE_HEAD`).
    pub const QUEUE_DONE: usize = 40;
    /// Async mode: entries the trainer has pushed into the worker's queue (u32, wrapping).
    pub const QUEUE_HEAD: usize = 64;
    /// Restart policy, written by the trainer before it restarts the worker: non-zero if
    /// this process replaces a dead one (u32).
    pub const RESTARTED: usize = 68;
    /// Restart policy: the seed base of the restart (u64); a restarted worker resets env `i`
    /// with `base + i` the first time it touches it.
    pub const RESTART_SEED: usize = 72;
}

/// Values of a worker's `CLAIM_STATE` word (async mode under the restart policy).
pub mod claim_state {
    /// Not claiming: every row it claimed is committed.
    pub const IDLE: u32 = 0;
    /// About to claim rows (checking the pause gate).
    pub const CLAIMING: u32 = 1;
    /// Holds the claim in `CLAIM_FIRST`/`CLAIM_LEN`, `CLAIM_DONE` rows of it committed.
    pub const CLAIMED: u32 = 2;
    /// Held by the pause gate; claims nothing until it opens.
    pub const PAUSED: u32 = 3;
}

/// Async work queue entries: the env id in the low 30 bits, the kind in the top two.
pub mod queue_entry {
    /// Mask of the env id.
    pub const ENV_MASK: u32 = (1 << 30) - 1;
    /// Step the env with its action row.
    pub const STEP: u32 = 0;
    /// Reset the env, continuing its stream.
    pub const RESET: u32 = 1 << 30;
    /// Reset the env with seed `RESET_SEED + env_id`.
    pub const RESET_SEEDED: u32 = 2 << 30;
    /// Restart policy: reset the env with the worker's restart seed and write its row at the
    /// global row the trainer put in the entry's `fill_rows` slot ([`FILL_CLAIM`]: claim
    /// one as usual).
    pub const FILL: u32 = 3 << 30;
    /// A `fill_rows` value: no row given, claim one.
    pub const FILL_CLAIM: u64 = u64::MAX;
    /// Mask of the kind.
    pub const KIND_MASK: u32 = 3 << 30;
}

/// Offset of worker `w`'s control block.
pub const fn worker_control(w: usize) -> usize {
    WORKER_CONTROL + w * CACHE_LINE
}

/// Worker statuses (the status word in a worker control block).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerStatus {
    /// Not yet reported.
    Starting = 0,
    /// Its report area holds its spec.
    Reported = 1,
    /// Attached to the full region and serving commands.
    Running = 2,
    /// Its report area holds an error; it has stopped serving commands.
    Failed = 3,
}

impl WorkerStatus {
    /// Decodes a status word; unknown values are `None` (the word is untrusted).
    pub fn from_word(w: u32) -> Option<Self> {
        [Self::Starting, Self::Reported, Self::Running, Self::Failed].into_iter().find(|s| *s as u32 == w)
    }
}

/// The region header: plain data, first page of the region. Written by the trainer; a
/// worker validates magic, version, sizes and hash before it touches anything else.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`LAYOUT_VERSION`].
    pub version: u32,
    /// `size_of::<Header>()`, a cheap check that both sides agree on this struct.
    pub header_size: u32,
    /// Bytes of the bootstrap part.
    pub bootstrap_size: u64,
    /// Bytes of the whole region (0 while bootstrapping).
    pub total_size: u64,
    /// [`Layout::hash`] of the data part (0 while bootstrapping).
    pub layout_hash: u64,
    /// Number of envs.
    pub num_envs: u32,
    /// Number of workers.
    pub num_workers: u32,
    /// Bytes of JSON in the params area.
    pub params_len: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

impl Header {
    /// A bootstrap header for `num_envs` envs on `num_workers` workers.
    pub fn new(num_envs: u32, num_workers: u32, params_len: u32) -> Header {
        Header {
            magic: MAGIC,
            version: LAYOUT_VERSION,
            header_size: std::mem::size_of::<Header>() as u32,
            bootstrap_size: bootstrap_size(num_workers as usize) as u64,
            total_size: 0,
            layout_hash: 0,
            num_envs,
            num_workers,
            params_len,
            reserved: 0,
        }
    }

    /// Checks a header read from a region of `region_len` bytes.
    pub fn validate(&self, region_len: usize) -> Result<(), HeaderError> {
        if self.magic != MAGIC {
            return Err(HeaderError::BadMagic { found: self.magic });
        }
        if self.version != LAYOUT_VERSION {
            return Err(HeaderError::VersionMismatch { found: self.version, expected: LAYOUT_VERSION });
        }
        if self.header_size as usize != std::mem::size_of::<Header>() {
            return Err(HeaderError::Corrupt(format!(
                "header size {}, expected {} for layout version {LAYOUT_VERSION}",
                self.header_size,
                std::mem::size_of::<Header>()
            )));
        }
        if self.num_workers == 0 || self.num_envs < self.num_workers {
            return Err(HeaderError::Corrupt(format!(
                "{} envs on {} workers",
                self.num_envs, self.num_workers
            )));
        }
        let expected_bootstrap = bootstrap_size(self.num_workers as usize) as u64;
        if self.bootstrap_size != expected_bootstrap || self.bootstrap_size > region_len as u64 {
            return Err(HeaderError::Corrupt(format!(
                "bootstrap size {} (expected {expected_bootstrap}, region {region_len})",
                self.bootstrap_size
            )));
        }
        if self.params_len as usize > PARAMS_CAPACITY {
            return Err(HeaderError::Corrupt(format!("params length {}", self.params_len)));
        }
        Ok(())
    }
}

/// A header that cannot be trusted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    /// Not a shmenv region.
    #[error("not a shmenv region (magic {found:#018x}): this fd or memfd is not a shmenv pool's region")]
    BadMagic {
        /// What was there instead.
        found: u64,
    },
    /// Written by a different version of shmenv.
    #[error(
        "region layout version {found}, this build of shmenv reads version {expected}: rebuild the \
         worker program (or the shmenv command reading the region) against the trainer's shmenv version"
    )]
    VersionMismatch {
        /// Version in the region.
        found: u32,
        /// Version this build speaks.
        expected: u32,
    },
    /// Sizes or offsets that do not add up.
    #[error("corrupt region header: {0}")]
    Corrupt(String),
    /// The data layout this worker computes differs from the trainer's.
    #[error(
        "layout mismatch (trainer hash {trainer:#x}, worker hash {worker:#x}): trainer and \
         worker were built from different shmenv versions or disagree on the env spec"
    )]
    LayoutMismatch {
        /// Hash in the header.
        trainer: u64,
        /// Hash computed here.
        worker: u64,
    },
}

/// Offset of the params area.
pub fn params_offset(num_workers: usize) -> usize {
    round_up(worker_control(num_workers), PAGE)
}

/// Offset of worker `w`'s report area.
pub fn report_offset(num_workers: usize, w: usize) -> usize {
    params_offset(num_workers) + PARAMS_CAPACITY + w * REPORT_CAPACITY
}

/// Offset of the stats area (after the report areas): the pool's block, then one block
/// per worker (see [`stats`]).
pub fn stats_offset(num_workers: usize) -> usize {
    report_offset(num_workers, num_workers)
}

/// Offset of worker `w`'s stats block.
pub fn worker_stats_offset(num_workers: usize, w: usize) -> usize {
    stats_offset(num_workers) + stats::POOL_BYTES + w * stats::WORKER_BYTES
}

/// Bytes of the bootstrap part.
pub fn bootstrap_size(num_workers: usize) -> usize {
    round_up(worker_stats_offset(num_workers, num_workers), PAGE)
}

/// The stats area: counters that each have a single writer (the trainer for the pool
/// block, worker `w` for its block), updated with relaxed loads and stores, and read by
/// anyone (`Pool::stats`, `shmenv top` from another process). Times are nanoseconds;
/// `*_NS` words are running totals. It lives in the bootstrap part, so a reader needs only
/// the header to find it.
pub mod stats {
    /// Buckets of the env-step time histograms: bucket `k` counts durations in
    /// `[2^k, 2^(k+1))` ns (bucket 0 also counts 0 and 1 ns; the last, everything longer).
    pub const HIST_BUCKETS: usize = 32;
    /// Bytes of the pool block.
    pub const POOL_BYTES: usize = 256;
    /// Bytes of each worker block.
    pub const WORKER_BYTES: usize = 384;
    /// Async mode: a worker times one env step in this many for the histogram (two clock
    /// reads each); sync mode times one env per batch.
    pub const ASYNC_SAMPLE_EVERY: u32 = 64;

    /// Words of the pool block (written by the trainer).
    pub mod pool {
        /// u32: 1 when stats are recorded (`PoolBuilder::stats`).
        pub const ENABLED: usize = 0;
        /// u32: the trainer's pid.
        pub const TRAINER_PID: usize = 4;
        /// u64: CLOCK_MONOTONIC when the pool started.
        pub const STARTED_NS: usize = 8;
        /// u64: batches returned by `reset`/`step`/`recv`.
        pub const BATCHES: usize = 16;
        /// u64: time the trainer spent waiting for workers inside `reset`/`step`/`recv`.
        pub const TRAINER_WAIT_NS: usize = 24;
        /// u64: time the trainer spent inside `reset`/`step`/`send`/`recv` in all.
        pub const TRAINER_CALL_NS: usize = 32;
        /// u64: async: sum over `recv` calls of the ring blocks already full on entry.
        pub const RING_FULL_SUM: usize = 40;
        /// u64: async: `recv` calls counted in `RING_FULL_SUM`.
        pub const RING_SAMPLES: usize = 48;
    }

    /// Words of a worker block (written by that worker).
    pub mod worker {
        /// u64: env steps.
        pub const STEPS: usize = 0;
        /// u64: env resets (commanded and automatic).
        pub const RESETS: usize = 8;
        /// u64: time in env code (`reset`/`step`/`observe` and the episode bookkeeping).
        pub const ENV_NS: usize = 16;
        /// u64: time waiting for commands or actions.
        pub const WAIT_NS: usize = 24;
        /// u64: time publishing results (claiming rows, committing, posting).
        pub const PUBLISH_NS: usize = 32;
        /// u64: async mode: CLOCK_MONOTONIC when the env code now running started, 0 when
        /// none runs (written whether stats are on or not: the trainer's hang detection
        /// reads it).
        pub const BUSY_SINCE: usize = 56;
        /// u64: sampled env-step timings in the histogram.
        pub const SAMPLED: usize = 40;
        /// u32: the worker's pid.
        pub const PID: usize = 48;
        /// `HIST_BUCKETS` u64: the env-step time histogram.
        pub const HIST: usize = 64;
    }
}

/// The envs that worker `w` hosts: a contiguous shard, sizes differing by at most one.
pub fn shard(w: usize, num_envs: usize, num_workers: usize) -> Range<usize> {
    (w * num_envs / num_workers)..((w + 1) * num_envs / num_workers)
}

/// What the envs do when an episode ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AutoReset {
    /// As Gymnasium 1.x: the step after the end returns the reset observation, with reward
    /// 0 and both flags false; the action of that step is ignored.
    #[default]
    NextStep,
    /// As SB3: the ending step returns the reset observation; the final observation of the
    /// ended episode is in the batch's `final_obs` arrays.
    SameStep,
    /// No automatic reset; stepping an ended env is an error until `reset`.
    Disabled,
}

/// Parameters the trainer writes into the params area as JSON, read by every worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolParams {
    /// Registered env id.
    pub env_id: String,
    /// Env config (a JSON object).
    pub config: serde_json::Value,
    /// Number of envs.
    pub num_envs: usize,
    /// Number of workers.
    pub num_workers: usize,
    /// Auto-reset mode.
    pub autoreset: AutoReset,
    /// Episode limit overriding the env's own.
    pub max_episode_steps: Option<u32>,
    /// Wait strategy name for the workers.
    pub wait: String,
    /// Results per batch; `num_envs` is sync mode, fewer is async mode.
    pub batch_size: usize,
    /// Blocks in the async ring (at least 2).
    pub ring_depth: usize,
    /// Whether workers record stats (the stats area).
    pub stats: bool,
    /// Whether workers record trace spans (the trace rings).
    #[serde(default)]
    pub trace: bool,
    /// Whether dead workers are restarted (async mode: workers then keep claim records and
    /// stop at the pause gate, so the trainer can find a dead worker's rows).
    #[serde(default)]
    pub restart: bool,
    /// Absolute path of a plugin library (the C ABI of `shmenv_env.h`) that every worker
    /// loads for itself and takes the env from, instead of its registry.
    #[serde(default)]
    pub plugin: Option<String>,
}

/// The trace rings (with `PoolParams::trace`): per worker a row of [`trace::ROW_BYTES`],
/// a head counter then a ring of [`trace::SPANS`] spans of two u64 words each (start ns;
/// duration ns << 8 | kind), written with relaxed atomic stores by the worker, the head
/// stored with Release after each span; readers load the head with Acquire.
pub mod trace {
    /// Spans kept per worker (older ones are overwritten).
    pub const SPANS: usize = 4096;
    /// Offset of the first span in a row (the head u64 sits at 0).
    pub const SPANS_AT: usize = 64;
    /// Bytes of one worker's row.
    pub const ROW_BYTES: usize = SPANS_AT + SPANS * 16;
    /// Span kinds.
    pub mod kind {
        /// Waiting for a command or actions.
        pub const WAIT: u64 = 1;
        /// Env work (a batch of steps or resets).
        pub const ENV: u64 = 2;
        /// Publishing results.
        pub const PUBLISH: u64 = 3;
    }
}

/// What a worker writes in its report area.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerReport {
    /// Its envs' spec (canonical JSON of [`EnvSpec`]).
    Spec(serde_json::Value),
    /// The env id is not registered in this worker program.
    UnknownEnv {
        /// The id asked for.
        id: String,
        /// Ids this worker program knows.
        registered: Vec<String>,
    },
    /// The env rejected its config.
    BadConfig {
        /// The env id.
        id: String,
        /// The env's message (names the key).
        message: String,
    },
    /// An env panicked in `reset`/`step`.
    EnvPanicked {
        /// Which env.
        env_id: usize,
        /// The panic message.
        message: String,
    },
    /// Anything else (protocol violation, region mismatch).
    Failed {
        /// What went wrong.
        message: String,
    },
}

/// Where one `[num_envs, ...]` array lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArraySlot {
    /// Offset of row 0.
    pub offset: usize,
    /// Bytes of one row.
    pub row_bytes: usize,
}

impl ArraySlot {
    /// Byte range of rows `rows`.
    pub fn rows(&self, rows: Range<usize>) -> Range<usize> {
        self.offset + rows.start * self.row_bytes..self.offset + rows.end * self.row_bytes
    }
}

/// The result arrays of one block of rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultBlock {
    /// Rows in the block.
    pub rows: usize,
    /// Observation arrays, in spec order.
    pub obs: Vec<ArraySlot>,
    /// Final observations (empty unless `AutoReset::SameStep`).
    pub final_obs: Vec<ArraySlot>,
    /// Rewards (f32).
    pub rewards: ArraySlot,
    /// Terminated flags (u8).
    pub terminated: ArraySlot,
    /// Truncated flags (u8).
    pub truncated: ArraySlot,
    /// Return of the episode that ended at this step (f64).
    pub episode_return: ArraySlot,
    /// Length of the episode that ended at this step (u32).
    pub episode_length: ArraySlot,
    /// Steps since the env's last reset (u32).
    pub elapsed_steps: ArraySlot,
    /// The env of each row (u32).
    pub env_ids: ArraySlot,
}

impl ResultBlock {
    fn slots(&self) -> impl Iterator<Item = &ArraySlot> {
        self.obs.iter().chain(self.final_obs.iter()).chain([
            &self.rewards,
            &self.terminated,
            &self.truncated,
            &self.episode_return,
            &self.episode_length,
            &self.elapsed_steps,
            &self.env_ids,
        ])
    }
}

/// Where the async ring's control words live (async mode only).
///
/// Global row `g` (claimed with `fetch_add` on the claim counter) belongs to batch
/// `q = g / batch_size`, which is written into block `q % depth` at row `g % batch_size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingLayout {
    /// Rows per batch.
    pub batch_size: usize,
    /// Number of blocks.
    pub depth: usize,
    /// The claim counter (u64, own cache line).
    pub claim_counter: usize,
    /// Per block: a semaphore (count, want) that workers post once per committed row.
    pub committed: Vec<usize>,
    /// Per block: a gate (value, sleepers): the batch number `q` the block may receive.
    pub ready_for: Vec<usize>,
    /// Per worker queues of env ids to run, `[num_envs]` u32: worker `w` uses the entries
    /// of its shard as a ring of `shard.len()` slots.
    pub queue: ArraySlot,
    /// Beside each queue slot, `[num_envs]` u64: the global row a `FILL` entry writes.
    pub fill_rows: ArraySlot,
}

/// Offsets of every array of the data part. Computed, never read from the region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Number of envs.
    pub num_envs: usize,
    /// Number of workers.
    pub num_workers: usize,
    /// Where the data part starts.
    pub bootstrap_size: usize,
    /// Actions, `[num_envs]` rows, row = env id.
    pub actions: ArraySlot,
    /// Sync mode: [`SYNC_BLOCKS`] blocks of `num_envs` rows, row = env id, used in turn.
    /// Async mode: `depth` blocks of `batch_size` rows, in the order envs finished.
    pub blocks: Vec<ResultBlock>,
    /// Async mode only: the ring's control words and the work queues.
    pub ring: Option<RingLayout>,
    /// With tracing on: one row per worker, its span ring ([`trace`]).
    pub trace: Option<ArraySlot>,
    /// Bytes of the whole region.
    pub total_size: usize,
    /// FNV-1a hash of the version, the spec's canonical JSON and every offset.
    pub hash: u64,
}

impl Layout {
    /// Computes the layout for `params` and the agreed `spec`.
    pub fn compute(spec: &EnvSpec, params: &PoolParams) -> Layout {
        let n = params.num_envs;
        let mut cursor = bootstrap_size(params.num_workers);
        let mut array = |rows: usize, row_bytes: usize| {
            let slot = ArraySlot { offset: cursor, row_bytes };
            cursor = round_up(cursor + row_bytes * rows, CACHE_LINE);
            slot
        };
        let actions = array(n, spec.action.value_bytes());
        let is_async = params.batch_size < n;
        let (rows, count) = if is_async { (params.batch_size, params.ring_depth) } else { (n, SYNC_BLOCKS) };
        let same_step = params.autoreset == AutoReset::SameStep;
        let blocks: Vec<ResultBlock> = (0..count)
            .map(|_| ResultBlock {
                rows,
                obs: spec.observations.iter().map(|o| array(rows, o.space.value_bytes())).collect(),
                final_obs: if same_step {
                    spec.observations.iter().map(|o| array(rows, o.space.value_bytes())).collect()
                } else {
                    Vec::new()
                },
                rewards: array(rows, 4),
                terminated: array(rows, 1),
                truncated: array(rows, 1),
                episode_return: array(rows, 8),
                episode_length: array(rows, 4),
                elapsed_steps: array(rows, 4),
                env_ids: array(rows, 4),
            })
            .collect();
        let ring = is_async.then(|| RingLayout {
            batch_size: params.batch_size,
            depth: params.ring_depth,
            claim_counter: array(1, CACHE_LINE).offset,
            committed: (0..params.ring_depth).map(|_| array(1, CACHE_LINE).offset).collect(),
            ready_for: (0..params.ring_depth).map(|_| array(1, CACHE_LINE).offset).collect(),
            queue: array(n, 4),
            fill_rows: array(n, 8),
        });
        let trace = params.trace.then(|| array(params.num_workers, trace::ROW_BYTES));
        let total_size = round_up(cursor, PAGE);
        let mut layout = Layout {
            num_envs: n,
            num_workers: params.num_workers,
            bootstrap_size: bootstrap_size(params.num_workers),
            actions,
            blocks,
            ring,
            trace,
            total_size,
            hash: 0,
        };
        let mut h = Fnv::new();
        h.write(&LAYOUT_VERSION.to_le_bytes());
        h.write(spec.to_json().to_string().as_bytes());
        for slot in layout.slots() {
            h.write(&(slot.offset as u64).to_le_bytes());
            h.write(&(slot.row_bytes as u64).to_le_bytes());
        }
        if let Some(r) = &layout.ring {
            for &w in [r.batch_size, r.depth, r.claim_counter].iter().chain(&r.committed).chain(&r.ready_for)
            {
                h.write(&(w as u64).to_le_bytes());
            }
        }
        h.write(&(total_size as u64).to_le_bytes());
        layout.hash = h.finish();
        layout
    }

    fn slots(&self) -> impl Iterator<Item = &ArraySlot> {
        [&self.actions]
            .into_iter()
            .chain(self.blocks.iter().flat_map(|b| b.slots()))
            .chain(self.ring.iter().flat_map(|r| [&r.queue, &r.fill_rows]))
            .chain(self.trace.iter())
    }

    /// Every byte range of the data part: arrays (with their row counts) and ring words.
    pub fn byte_ranges(&self) -> Vec<Range<usize>> {
        let mut out = vec![self.actions.rows(0..self.num_envs)];
        for b in &self.blocks {
            out.extend(b.slots().map(|s| s.rows(0..b.rows)));
        }
        if let Some(t) = &self.trace {
            out.push(t.rows(0..self.num_workers));
        }
        if let Some(r) = &self.ring {
            out.push(r.queue.rows(0..self.num_envs));
            out.push(r.fill_rows.rows(0..self.num_envs));
            for &w in [r.claim_counter].iter().chain(&r.committed).chain(&r.ready_for) {
                out.push(w..w + CACHE_LINE);
            }
        }
        out
    }
}

/// Checks that an action space and observation spaces can be laid out (non-zero sizes are
/// not required: a `Box` of shape `[0]` is legal and takes no bytes).
pub fn check_spaces(spec: &EnvSpec) -> Result<(), String> {
    spec.validate()?;
    let too_big = |s: &Space| s.value_bytes() > (1 << 30);
    if too_big(&spec.action) || spec.observations.iter().any(|o| too_big(&o.space)) {
        return Err("an observation or action larger than 1 GiB per env is not supported".into());
    }
    Ok(())
}

/// Rounds `x` up to a multiple of `to` (a power of two).
pub const fn round_up(x: usize, to: usize) -> usize {
    (x + to - 1) & !(to - 1)
}

struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::DType;

    fn params(n: usize, w: usize, autoreset: AutoReset) -> PoolParams {
        PoolParams {
            env_id: "X".into(),
            config: serde_json::json!({}),
            num_envs: n,
            num_workers: w,
            autoreset,
            max_episode_steps: None,
            wait: "auto".into(),
            batch_size: n,
            ring_depth: 2,
            stats: true,
            trace: false,
            restart: false,
            plugin: None,
        }
    }

    #[test]
    fn shards_are_contiguous_balanced_and_cover_all_envs() {
        for n in 1..40 {
            for w in 1..=n.min(9) {
                let mut next = 0;
                for i in 0..w {
                    let s = shard(i, n, w);
                    assert_eq!(s.start, next);
                    assert!(s.len() == n / w || s.len() == n / w + 1);
                    next = s.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn arrays_are_aligned_disjoint_and_inside_the_region() {
        let spec = EnvSpec {
            observations: vec![
                crate::spec::ObsArray {
                    name: "a".into(),
                    space: Space::boxed(DType::U8, &[3, 5], 0.0, 255.0),
                },
                crate::spec::ObsArray { name: "b".into(), space: Space::discrete(4) },
            ],
            action: Space::boxed(DType::F32, &[3], -1.0, 1.0),
            max_episode_steps: None,
            single_key_dict: false,
        };
        let sync = Layout::compute(&spec, &params(7, 3, AutoReset::SameStep));
        let mut async_params = params(7, 3, AutoReset::SameStep);
        async_params.batch_size = 3;
        async_params.ring_depth = 4;
        let ring = Layout::compute(&spec, &async_params);
        for (l, count) in
            [(&sync, 1 + SYNC_BLOCKS * (2 + 2 + 7)), (&ring, 1 + 4 * (2 + 2 + 7) + 2 + 1 + 4 + 4)]
        {
            let mut ranges = l.byte_ranges();
            assert_eq!(ranges.len(), count);
            ranges.sort_by_key(|r| r.start);
            assert!(ranges[0].start >= bootstrap_size(3));
            for pair in ranges.windows(2) {
                assert!(pair[0].end <= pair[1].start, "{pair:?} overlap");
            }
            assert!(ranges.iter().all(|r| r.start % CACHE_LINE == 0 && r.end <= l.total_size));
            assert_eq!(l.total_size % PAGE, 0);
        }
        assert_eq!(sync.blocks[0].obs[0].row_bytes, 15);
        assert_eq!((ring.blocks.len(), ring.blocks[0].rows), (4, 3));
        assert_ne!(sync.hash, ring.hash);
        let l = sync;
        // The hash depends on the spec and the parameters.
        let other = Layout::compute(&spec, &params(7, 3, AutoReset::NextStep));
        assert_ne!(l.hash, other.hash);
    }

    #[test]
    fn header_validation_rejects_bad_magic_version_and_sizes() {
        let h = Header::new(4, 2, 10);
        let len = bootstrap_size(2);
        assert_eq!(h.validate(len), Ok(()));
        let bad = Header { magic: 1, ..h };
        assert!(matches!(bad.validate(len), Err(HeaderError::BadMagic { .. })));
        let bad = Header { version: 99, ..h };
        assert!(matches!(bad.validate(len), Err(HeaderError::VersionMismatch { found: 99, .. })));
        let bad = Header { num_workers: 0, ..h };
        assert!(matches!(bad.validate(len), Err(HeaderError::Corrupt(_))));
        assert!(matches!(h.validate(100), Err(HeaderError::Corrupt(_))));
        let bad = Header { params_len: u32::MAX, ..h };
        assert!(matches!(bad.validate(len), Err(HeaderError::Corrupt(_))));
    }

    #[test]
    fn control_words_do_not_share_cache_lines() {
        assert_eq!(TRAINER_SEMAPHORE - STATE_WORD, CACHE_LINE);
        assert_eq!(worker_control(1) - worker_control(0), CACHE_LINE);
        const { assert!(worker_block::REPORT_LEN + 4 <= CACHE_LINE) };
        const { assert!(std::mem::size_of::<Header>() <= PAGE) };
    }
}
