//! Sync mode: every command (the pool control block's command word, published by a post
//! of this worker's semaphore) runs on every env of the shard, into the rows of the sync
//! block the command names; then one post tells the trainer.

use super::{block_rows, BatchScope, Stop, Worker};
use crate::shard::EnvShard;
use shmenv_engine::protocol::{self, trace, Command, Layout, ResultBlock, WorkerReport, WorkerStatus};
use shmenv_engine::region::Region;
use shmenv_engine::stats::{now_ns, TraceRing};
use std::sync::atomic::Ordering;

/// When a command's phases began and ended (CLOCK_MONOTONIC ns).
struct CommandTimes {
    waited_from: u64,
    started: u64,
}

impl Worker {
    /// Serves commands until `Close`, the trainer's death or a failure.
    pub(super) fn command_loop(
        &mut self,
        shard: &mut EnvShard,
        layout: &Layout,
        scope: &dyn BatchScope,
    ) -> Stop {
        let mut resets_seen = shard.resets();
        loop {
            let waited_from = now_ns();
            if let Err(stop) = self.next_command() {
                return stop;
            }
            let started = now_ns();
            let word = self.region.atomic_u32(protocol::COMMAND_WORD).load(Ordering::Relaxed);
            // The block index is untrusted: check it against our own layout.
            let j = self.region.atomic_u32(protocol::SYNC_BLOCK).load(Ordering::Relaxed) as usize;
            let Some(block) = layout.blocks.get(j) else {
                let message = format!("sync block {j} out of range ({} blocks)", layout.blocks.len());
                self.report(&WorkerReport::Failed { message }, WorkerStatus::Failed);
                return Stop::Failed;
            };
            let command = match Command::from_word(word) {
                Some(Command::Close) => return Stop::Close,
                Some(command) => command,
                None => {
                    let message = format!("unknown command word {word}");
                    self.report(&WorkerReport::Failed { message }, WorkerStatus::Failed);
                    return Stop::Failed;
                }
            };
            let rows = layout.actions.rows(shard.range());
            // SAFETY: by the protocol, between the trainer's post and this worker's
            // completion post the trainer does not write the action rows; the borrow ends
            // before `finish_command` posts.
            let actions = unsafe { self.region.slice::<u8>(rows.start, rows.len()) };
            // SAFETY: in the same window nobody else reads or writes this shard's result
            // rows (the trainer waits or steps its own shard; shards are disjoint).
            match unsafe { run_command(&self.region, command, actions, shard, block, scope) } {
                Ok(()) => {
                    let times = CommandTimes { waited_from, started };
                    self.finish_command(command, shard, &mut resets_seen, layout, times);
                }
                Err((env_id, message)) => {
                    self.report(&WorkerReport::EnvPanicked { env_id, message }, WorkerStatus::Failed);
                    let _ = self.next_command();
                    return Stop::Failed;
                }
            }
        }
    }

    /// After a command ran: books the stats and the spans so far, posts the trainer, stores
    /// the command's sequence number, then the times and the publish span.
    #[inline]
    fn finish_command(
        &self,
        command: Command,
        shard: &mut EnvShard,
        resets_seen: &mut u64,
        layout: &Layout,
        times: CommandTimes,
    ) {
        let CommandTimes { waited_from, started } = times;
        let seq = self.region.atomic_u32(protocol::COMMAND_SEQ).load(Ordering::Relaxed);
        // Counted before the post, so a trainer that has the batch sees them.
        let worked = now_ns();
        let stats = self.stats();
        let steps = if command == Command::Step { shard.range().len() } else { 0 };
        stats.add_steps(steps as u64, shard.resets() - *resets_seen);
        *resets_seen = shard.resets();
        stats.flush_hist(shard.hist_mut());
        // The spans known now go in before the post too: a trainer that writes its trace
        // right after the batch has them (only the publish span may still be missing).
        let ring = layout.trace.as_ref().map(|rows| TraceRing::new(&self.region, rows, self.index));
        if let Some(ring) = &ring {
            ring.record(trace::kind::WAIT, waited_from, started);
            ring.record(trace::kind::ENV, started, worked);
        }
        self.post_trainer();
        // After the post (Release): a trainer that sees this sequence number knows the
        // post is in (the Restart policy counts on it).
        let done = protocol::worker_words(self.index).done_seq;
        self.region.atomic_u32(done).store(seq, Ordering::Release);
        let posted = now_ns();
        stats.add_times(worked - started, started - waited_from, posted - worked);
        if let Some(ring) = &ring {
            ring.record(trace::kind::PUBLISH, worked, posted);
        }
    }
}

/// Runs `command` (not `Close`) on every env of the shard with `actions` (its action
/// rows), writing its rows of block `block`: a worker's part of a sync command, and the
/// trainer's for its own shard.
///
/// # Safety
/// The caller holds the protocol's exclusive access to the shard's rows of `block` for the
/// call (between the trainer's post and the shard's completion: the worker's post, the
/// trainer's return from its own shard).
#[inline]
pub(crate) unsafe fn run_command(
    region: &Region,
    command: Command,
    actions: &[u8],
    shard: &mut EnvShard,
    block: &ResultBlock,
    scope: &dyn BatchScope,
) -> Result<(), (usize, String)> {
    // SAFETY: the caller's exclusive access; shards are disjoint.
    let mut rows = unsafe { block_rows(region, block, shard.range()) };
    // SAFETY: the trainer writes the seed only before posting a command and not again until
    // every shard finished it (the caller runs inside that command).
    let seed = || unsafe { region.read_pod::<u64>(protocol::RESET_SEED) };
    let mut result = Ok(());
    match command {
        Command::Step => scope.run(&mut || result = shard.step_all(actions, &mut rows)),
        Command::ResetSome => {
            let seed = seed();
            scope.run(&mut || result = shard.reset_some(actions, seed, &mut rows))
        }
        Command::Reset | Command::ResetSeeded => {
            let seed = (command == Command::ResetSeeded).then(seed);
            scope.run(&mut || result = shard.reset_all(seed, &mut rows))
        }
        Command::Close => unreachable!("Close is served by the loop"),
    }
    result
}
