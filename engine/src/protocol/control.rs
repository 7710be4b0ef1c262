//! The control words: typed `#[repr(C)]` blocks, grouped by writer. What the trainer writes
//! and what a worker writes sit on separate 128-byte lines ([`CACHE_LINE`]), so no line is
//! written by two processes (a semaphore's or a gate's sleeper word is written by its
//! waiter only while it goes to sleep). The structs are the one source of every offset:
//! the constants below and [`worker_words`] are `offset_of!` of their fields, and all
//! access still goes through `Region`'s atomics at those offsets.
//!
//! ```text
//! POOL_CONTROL (one page in)
//!   PoolControl.commands         trainer: state, command, seed, sync block, sequence, pause gate
//!   PoolControl.trainer_wake     workers post, the trainer waits
//! WORKER_CONTROL + w * size_of::<WorkerControl>()
//!   WorkerControl.to_worker      trainer: semaphore post, queue head, restarted, restart seed
//!   WorkerControl.from_worker    worker w: status, report length, done sequence, claim record
//! ```

use super::{CACHE_LINE, PAGE};
use bytemuck::{Pod, Zeroable};
use std::mem::{align_of, offset_of, size_of};

// A semaphore's and a gate's words are laid out where those types live; protocol says
// only where each sits in the region.
pub use crate::sync::{GateWords, SemaphoreWords, GATE_SLEEPERS, SEMAPHORE_WANT};

/// Line 0 of the pool control block: written by the trainer only (but the pause gate's
/// sleeper count, which paused workers bump while asleep).
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct CommandLine {
    /// The region state ([`RegionState`]); Release store, Acquire load.
    pub state: u32,
    /// The command ([`Command`]), published by posting each worker's semaphore.
    pub command: u32,
    /// The reset seed (valid with `Command::ResetSeeded` and seeded resets).
    pub reset_seed: u64,
    /// Which of the [`SYNC_BLOCKS`] result blocks the current sync command writes.
    pub sync_block: u32,
    /// Sync commands are numbered (wrapping); each worker stores the number of the last one
    /// it finished in its `done_seq`, so a trainer whose wait timed out can name the
    /// workers that did not answer.
    pub command_seq: u32,
    /// Async mode under the restart policy: the trainer sets it to 1 to hold every worker
    /// before its next claim while it takes stock of a dead worker's rows (see
    /// `recovery`), and back to 0 to let them go on.
    pub ring_pause: GateWords,
    /// The [`crate::sync::WaitMode`] an `Auto` pool's processes follow (0 active, 1 sleep),
    /// set by the trainer's wait tuner; workers read it (Relaxed) before each wait.
    pub wait_mode: u32,
    /// Zero: the rest of the line.
    pub reserved: [u32; 23],
}

/// Line 1 of the pool control block: the trainer's semaphore (workers post, the trainer
/// acquires).
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct TrainerWakeLine {
    /// The semaphore.
    pub semaphore: SemaphoreWords,
    /// Zero: the rest of the line.
    pub reserved: [u32; 30],
}

/// The pool control block, at [`POOL_CONTROL`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct PoolControl {
    /// Written by the trainer.
    pub commands: CommandLine,
    /// Posted by the workers.
    pub trainer_wake: TrainerWakeLine,
}

/// The line of worker `w`'s control block that the trainer writes.
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct ToWorker {
    /// The worker's command semaphore (the trainer posts, the worker acquires).
    pub semaphore: SemaphoreWords,
    /// Async mode: entries the trainer has pushed into the worker's queue (wrapping);
    /// Release store after the entries, Acquire load.
    pub queue_head: u32,
    /// Restart policy, stored before the worker is restarted: non-zero if this process
    /// replaces a dead one.
    pub restarted: u32,
    /// Restart policy: the seed base of the restart; a restarted worker resets env `i`
    /// with `base + i` the first time it touches it.
    pub restart_seed: u64,
    /// Zero: the rest of the line.
    pub reserved: [u32; 26],
}

/// The line of worker `w`'s control block that worker `w` writes.
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct FromWorker {
    /// Its [`WorkerStatus`]; Release store, Acquire load.
    pub status: u32,
    /// Length in bytes of the JSON in its report area.
    pub report_len: u32,
    /// The last sync command (its `command_seq`) it finished, stored after its post.
    pub done_seq: u32,
    /// Async mode under the restart policy: its claim state ([`claim_state`]).
    pub claim_state: u32,
    /// First global row of the current claim.
    pub claim_first: u64,
    /// Rows in the current claim.
    pub claim_len: u32,
    /// Rows of the current claim committed so far.
    pub claim_done: u32,
    /// Queue entries consumed and published (wrapping; compared with `queue_head`).
    pub queue_done: u32,
    /// Zero: the rest of the line.
    pub reserved: [u32; 23],
}

/// Worker `w`'s control block: one line per writer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct WorkerControl {
    /// Written by the trainer.
    pub to_worker: ToWorker,
    /// Written by the worker.
    pub from_worker: FromWorker,
}

const _: () = {
    assert!(size_of::<CommandLine>() == CACHE_LINE && align_of::<CommandLine>() == CACHE_LINE);
    assert!(size_of::<TrainerWakeLine>() == CACHE_LINE && align_of::<TrainerWakeLine>() == CACHE_LINE);
    assert!(size_of::<PoolControl>() == 2 * CACHE_LINE);
    assert!(size_of::<ToWorker>() == CACHE_LINE && align_of::<ToWorker>() == CACHE_LINE);
    assert!(size_of::<FromWorker>() == CACHE_LINE && align_of::<FromWorker>() == CACHE_LINE);
    assert!(size_of::<WorkerControl>() == 2 * CACHE_LINE);
    // Atomic words must be naturally aligned.
    assert!(offset_of!(CommandLine, reset_seed) % 8 == 0);
    assert!(offset_of!(ToWorker, restart_seed) % 8 == 0);
    assert!(offset_of!(FromWorker, claim_first) % 8 == 0);
};

/// Offset of the pool control block.
pub const POOL_CONTROL: usize = PAGE;
/// Offset of the region state word ([`RegionState`]).
pub const STATE_WORD: usize = POOL_CONTROL + offset_of!(PoolControl, commands.state);
/// Offset of the command word ([`Command`]).
pub const COMMAND_WORD: usize = POOL_CONTROL + offset_of!(PoolControl, commands.command);
/// Offset of the reset seed (u64, valid with `Command::ResetSeeded`).
pub const RESET_SEED: usize = POOL_CONTROL + offset_of!(PoolControl, commands.reset_seed);
/// Offset of the sync block word (u32): which of the [`SYNC_BLOCKS`] result blocks the
/// current sync command writes (published with the command).
pub const SYNC_BLOCK: usize = POOL_CONTROL + offset_of!(PoolControl, commands.sync_block);
/// Offset of the command sequence number ([`CommandLine::command_seq`]).
pub const COMMAND_SEQ: usize = POOL_CONTROL + offset_of!(PoolControl, commands.command_seq);
/// Offset of the pause gate ([`CommandLine::ring_pause`]).
pub const RING_PAUSE: usize = POOL_CONTROL + offset_of!(PoolControl, commands.ring_pause);
/// Offset of the wait mode word ([`CommandLine::wait_mode`]).
pub const WAIT_MODE: usize = POOL_CONTROL + offset_of!(PoolControl, commands.wait_mode);
/// Offset of the trainer's semaphore (workers post, the trainer acquires).
pub const TRAINER_SEMAPHORE: usize = POOL_CONTROL + offset_of!(PoolControl, trainer_wake.semaphore);
/// Offset of the first worker control block.
pub(crate) const WORKER_CONTROL: usize = POOL_CONTROL + size_of::<PoolControl>();
/// Sync mode's result blocks: commands alternate between them, so the views of one batch
/// stay intact while the next command runs (what Python's zero-copy arrays rely on).
pub const SYNC_BLOCKS: usize = 2;

/// Offset of worker `w`'s control block (the words in it: [`worker_words`]).
pub(crate) const fn worker_control(w: usize) -> usize {
    WORKER_CONTROL + w * size_of::<WorkerControl>()
}

/// The offsets of worker `w`'s control words in the region, one per field of
/// [`WorkerControl`] ([`worker_words`]): callers name a word, never add offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerWords {
    /// [`ToWorker::semaphore`]: its `count` word, where `Semaphore::in_region` takes it.
    pub semaphore: usize,
    /// The semaphore's `want` word ([`SemaphoreWords::want`]).
    pub semaphore_want: usize,
    /// [`ToWorker::queue_head`].
    pub queue_head: usize,
    /// [`ToWorker::restarted`].
    pub restarted: usize,
    /// [`ToWorker::restart_seed`] (u64).
    pub restart_seed: usize,
    /// [`FromWorker::status`].
    pub status: usize,
    /// [`FromWorker::report_len`].
    pub report_len: usize,
    /// [`FromWorker::done_seq`].
    pub done_seq: usize,
    /// [`FromWorker::claim_state`].
    pub claim_state: usize,
    /// [`FromWorker::claim_first`] (u64).
    pub claim_first: usize,
    /// [`FromWorker::claim_len`].
    pub claim_len: usize,
    /// [`FromWorker::claim_done`].
    pub claim_done: usize,
    /// [`FromWorker::queue_done`].
    pub queue_done: usize,
}

/// Worker `w`'s control words.
pub const fn worker_words(w: usize) -> WorkerWords {
    let at = worker_control(w);
    let semaphore = at + offset_of!(WorkerControl, to_worker.semaphore);
    WorkerWords {
        semaphore,
        semaphore_want: semaphore + SEMAPHORE_WANT,
        queue_head: at + offset_of!(WorkerControl, to_worker.queue_head),
        restarted: at + offset_of!(WorkerControl, to_worker.restarted),
        restart_seed: at + offset_of!(WorkerControl, to_worker.restart_seed),
        status: at + offset_of!(WorkerControl, from_worker.status),
        report_len: at + offset_of!(WorkerControl, from_worker.report_len),
        done_seq: at + offset_of!(WorkerControl, from_worker.done_seq),
        claim_state: at + offset_of!(WorkerControl, from_worker.claim_state),
        claim_first: at + offset_of!(WorkerControl, from_worker.claim_first),
        claim_len: at + offset_of!(WorkerControl, from_worker.claim_len),
        claim_done: at + offset_of!(WorkerControl, from_worker.claim_done),
        queue_done: at + offset_of!(WorkerControl, from_worker.queue_done),
    }
}

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

impl Command {
    /// Decodes a command word; unknown values are `None` (the word is untrusted).
    pub fn from_word(w: u32) -> Option<Self> {
        [Self::Reset, Self::ResetSeeded, Self::Step, Self::Close, Self::ResetSome]
            .into_iter()
            .find(|c| *c as u32 == w)
    }
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

/// Values of a worker's `claim_state` word (async mode under the restart policy).
pub mod claim_state {
    /// Not claiming: every row it claimed is committed.
    pub const IDLE: u32 = 0;
    /// About to claim rows (checking the pause gate).
    pub const CLAIMING: u32 = 1;
    /// Holds the claim in `claim_first`/`claim_len`, `claim_done` rows of it committed.
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

/// Exit codes of a worker program (the worker host returns them, the trainer's errors
/// and tests read them). 0 is a clean close.
pub mod exit_code {
    /// A clean close (or the trainer went away).
    pub const CLOSED: u8 = 0;
    /// Not started by a pool: bad arguments.
    pub const BAD_ARGUMENTS: u8 = 2;
    /// The region is unusable (its header or parameters are wrong).
    pub const BAD_REGION: u8 = 3;
    /// It reported an error to the trainer (its report area says which).
    pub const REPORTED_ERROR: u8 = 4;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every word's line, by writer: no line holds words of two writers.
    #[test]
    fn control_words_do_not_share_cache_lines() {
        let line = |offset: usize| offset / CACHE_LINE;
        let trainer_words =
            [STATE_WORD, COMMAND_WORD, RESET_SEED, SYNC_BLOCK, COMMAND_SEQ, RING_PAUSE, WAIT_MODE];
        assert!(trainer_words.iter().all(|&o| line(o) == line(POOL_CONTROL)));
        assert_ne!(line(TRAINER_SEMAPHORE), line(STATE_WORD));
        for w in 0..3 {
            let words = worker_words(w);
            let trainer = [
                words.semaphore,
                words.semaphore_want,
                words.queue_head,
                words.restarted,
                words.restart_seed,
            ];
            let worker = [
                words.status,
                words.report_len,
                words.done_seq,
                words.claim_state,
                words.claim_first,
                words.claim_len,
                words.claim_done,
                words.queue_done,
            ];
            let (t, k) = (line(trainer[0]), line(worker[0]));
            assert!(trainer.iter().all(|&o| line(o) == t) && worker.iter().all(|&o| line(o) == k));
            assert_ne!(t, k);
            assert!(t > line(TRAINER_SEMAPHORE) && (w == 0 || t > line(worker_words(w - 1).queue_done)));
        }
        assert_eq!(WORKER_CONTROL % CACHE_LINE, 0);
    }
}
