//! Async mode: the worker takes env ids from its queue, advances each env, claims the next
//! rows of the ring (for a few envs at once when they are cheap), lets each env write its
//! row, and commits (see `shmenv_engine::ring`; under the restart policy the claim is
//! recorded, see `shmenv_engine::ring::recovery`).

use super::{block_rows, parent_alive, Stop, Worker};
use crate::shard::{Advanced, EnvShard, Work};
use shmenv_engine::protocol::{
    self, trace, Command, Layout, RingLayout, WorkerReport, WorkerStatus, WorkerWords,
};
use shmenv_engine::ring::recovery;
use shmenv_engine::ring::{RegionRing, RingWords};
use shmenv_engine::stats::{now_ns, TraceRing};
use shmenv_engine::sync::{Gate, WaitOutcome};
use std::ops::Range;
use std::sync::atomic::Ordering;

/// How long a worker may hold finished envs back to claim rows for several at once. A
/// claim and a commit are contended atomics (~100-200 ns each across cores here); 5 us of
/// delay is small next to a batch round trip (nanoseconds).
const COALESCE_NS: u64 = 5_000;

/// Async mode: what a worker has done since it last wrote its stats.
#[derive(Default)]
struct AsyncTally {
    steps: u64,
    resets_seen: u64,
    wait_ns: u64,
}

/// What the async loop keeps between queue entries.
struct QueueState {
    /// This worker's envs (its queue's slots).
    range: Range<usize>,
    /// Its control words.
    words: WorkerWords,
    /// A replacement for a dead worker (restart policy) resets each env with the restart
    /// seed the first time it touches it, whatever the entry says (a step's action was
    /// meant for the dead worker's env); `FILL` entries do so too.
    restarted: bool,
    restart_seed: u64,
    /// Per env: not yet touched by this (replacement) process.
    fresh: Vec<bool>,
    /// Entries consumed and pushed so far (wrapping).
    tail: u32,
    head: u32,
    /// Envs advanced and not yet published (local index, result).
    done: Vec<(usize, Advanced)>,
    /// When the current chunk of env work began (CLOCK_MONOTONIC ns): the clock is read at
    /// a chunk's start and end and after its 1st, 2nd, 4th... env, never once per env
    /// (two clock reads cost as much as a CartPole step).
    chunk_from: Option<u64>,
    tally: AsyncTally,
}

/// An entry advanced: when its chunk began, and the row a fill entry names.
struct EntryAdvanced {
    chunk_start: u64,
    fill_row: Option<u64>,
}

impl Worker {
    /// Async mode: serves the queue until `Close`, the trainer's death or a failure.
    pub(super) fn async_loop(&mut self, shard: &mut EnvShard, layout: &Layout, ring: &RingLayout) -> Stop {
        let range = shard.range();
        let words = protocol::worker_words(self.index);
        let restarted = self.region.atomic_u32(words.restarted).load(Ordering::Relaxed) != 0;
        let mut q = QueueState {
            // SAFETY: the trainer writes a worker's restart seed only before starting it.
            restart_seed: unsafe { self.region.read_pod(words.restart_seed) },
            fresh: vec![restarted; range.len()],
            restarted,
            words,
            tail: 0,
            head: 0,
            done: Vec::with_capacity(range.len()),
            chunk_from: None,
            tally: AsyncTally { resets_seen: shard.resets(), ..AsyncTally::default() },
            range,
        };
        loop {
            if q.tail == q.head {
                // Queue drained: wait for the trainer's next post.
                if let Err(stop) = self.wait_for_entries(ring, &mut q) {
                    return stop;
                }
                continue; // (A post may find the queue already drained: harmless.)
            }
            let EntryAdvanced { chunk_start, fill_row } = match self.advance_next(shard, layout, ring, &mut q)
            {
                Ok(a) => a,
                Err(stop) => return stop,
            };
            // Publish now if the queue is drained, or if holding results back any longer
            // would delay them noticeably; otherwise keep advancing and claim rows for
            // several envs with one atomic (cheap envs then cost one claim and one commit
            // per chunk, not per env; slow envs are published one by one).
            // The clock is read after the 1st, 2nd, 4th, 8th... env of a chunk: a slow env is
            // published right after it finishes, cheap ones cost few clock reads.
            let late = q.done.len().is_power_of_two() && now_ns().saturating_sub(chunk_start) >= COALESCE_NS;
            if q.tail == q.head || late || q.done.len() >= ring.batch_size || fill_row.is_some() {
                if let Err(stop) = self.publish_chunk(shard, layout, ring, &mut q, chunk_start, fill_row) {
                    return stop;
                }
            }
        }
    }

    /// Waits for the trainer's next post and reads the queue head.
    #[inline]
    fn wait_for_entries(&mut self, ring: &RingLayout, q: &mut QueueState) -> Result<(), Stop> {
        let waited_from = now_ns();
        let next = self.next_command();
        q.tally.wait_ns += now_ns() - waited_from;
        next?;
        let word = self.region.atomic_u32(protocol::COMMAND_WORD).load(Ordering::Relaxed);
        if Command::from_word(word) == Some(Command::Close) {
            return Err(Stop::Close);
        }
        // Acquire: pairs with the trainer's Release store of the head after the entries.
        q.head = self.region.atomic_u32(q.words.queue_head).load(Ordering::Acquire);
        let cap = q.range.len() as u32;
        if q.head.wrapping_sub(q.tail) > cap {
            let (head, tail) = (q.head, q.tail);
            return Err(self
                .fail_async(ring, format!("queue head {head} is more than {cap} entries past tail {tail}")));
        }
        Ok(())
    }

    /// Takes the next queue entry and advances its env (its result joins `q.done`).
    #[inline]
    fn advance_next(
        &mut self,
        shard: &mut EnvShard,
        layout: &Layout,
        ring: &RingLayout,
        q: &mut QueueState,
    ) -> Result<EntryAdvanced, Stop> {
        use protocol::queue_entry::{ENV_MASK, FILL, FILL_CLAIM, KIND_MASK, RESET, RESET_SEEDED, STEP};
        let range = q.range.clone();
        let slot = range.start + (q.tail % range.len() as u32) as usize;
        // SAFETY: the trainer wrote this slot before publishing the queue head (Release,
        // loaded with Acquire before the tail got here) and does not reuse it until the
        // entry's env is received.
        let entry: u32 = unsafe { self.region.read_pod(ring.queue.offset + slot * 4) };
        q.tail = q.tail.wrapping_add(1);
        let env = (entry & ENV_MASK) as usize;
        if !range.contains(&env) {
            let message =
                format!("queue entry {entry:#x} names env {env}, outside this worker's envs {range:?}");
            return Err(self.fail_async(ring, message));
        }
        let local = env - range.start;
        // Env code runs from the chunk's first env until the chunk is published.
        let chunk_start = *q.chunk_from.get_or_insert_with(|| {
            let now = now_ns();
            self.busy_since(now);
            now
        });
        let kind = entry & KIND_MASK;
        // Untouched by this (replacement) process: reset whatever the entry says.
        let first_touch = q.restarted && std::mem::take(&mut q.fresh[local]);
        q.tally.steps += u64::from(kind == STEP && !first_touch);
        let restart_reset = Work::Reset { seed: Some(q.restart_seed.wrapping_add(env as u64)) };
        let mut fill_row = None;
        let advanced = match kind {
            STEP | RESET if first_touch => shard.advance(local, restart_reset),
            STEP => {
                let row = layout.actions.rows(env..env + 1);
                // SAFETY: the trainer wrote this env's action row before pushing the entry
                // (published by the head store and the post) and does not write it again
                // until the env's result is received; the borrow ends in this statement.
                let action = unsafe { self.region.slice::<u8>(row.start, row.len()) };
                shard.advance(local, Work::Step(action))
            }
            RESET => shard.advance(local, Work::Reset { seed: None }),
            RESET_SEEDED => {
                // SAFETY: the trainer writes the seed only with no env in flight, before it
                // pushes the seeded resets (published with the queue head).
                let base: u64 = unsafe { self.region.read_pod(protocol::RESET_SEED) };
                shard.advance(local, Work::Reset { seed: Some(base.wrapping_add(env as u64)) })
            }
            FILL if self.params.restart => {
                // SAFETY: the trainer wrote the row with the entry, which publishes it, and
                // reuses it only as it reuses the entry. Its value is checked when used.
                let row: u64 = unsafe { self.region.read_pod(ring.fill_rows.offset + slot * 8) };
                fill_row = (row != FILL_CLAIM).then_some(row);
                shard.advance(local, restart_reset)
            }
            _ => return Err(self.fail_async(ring, format!("queue entry {entry:#x} has an unknown kind"))),
        };
        match advanced {
            Ok(a) => q.done.push((local, a)),
            Err((env_id, message)) => return Err(self.panicked_async(ring, env_id, message)),
        }
        Ok(EntryAdvanced { chunk_start, fill_row })
    }

    /// Publishes the chunk of envs advanced since `chunk_start`, with the stats and the
    /// trace of its env work and its publishing.
    #[inline]
    fn publish_chunk(
        &mut self,
        shard: &mut EnvShard,
        layout: &Layout,
        ring: &RingLayout,
        q: &mut QueueState,
        chunk_start: u64,
        fill_row: Option<u64>,
    ) -> Result<(), Stop> {
        let publish_from = now_ns();
        self.busy_since(0);
        q.chunk_from = None;
        let stats = self.stats();
        stats.add_steps(std::mem::take(&mut q.tally.steps), shard.resets() - q.tally.resets_seen);
        q.tally.resets_seen = shard.resets();
        stats.flush_hist(shard.hist_mut());
        self.publish(shard, layout, ring, &mut q.done, fill_row, q.tail)?;
        let (stats, published) = (self.stats(), now_ns());
        if let Some(rows) = &layout.trace {
            let trace = TraceRing::new(&self.region, rows, self.index);
            trace.record(trace::kind::ENV, chunk_start, publish_from);
            trace.record(trace::kind::PUBLISH, publish_from, published);
        }
        stats.add_times(
            publish_from.saturating_sub(chunk_start),
            std::mem::take(&mut q.tally.wait_ns),
            published - publish_from,
        );
        Ok(())
    }

    /// Publishes the advanced envs `done` (in order): the last one into `fill_row` when the
    /// trainer named one (a fill entry), the others into rows claimed from the counter.
    /// `tail` counts the queue entries consumed so far, all published once this returns.
    fn publish(
        &mut self,
        shard: &mut EnvShard,
        layout: &Layout,
        ring: &RingLayout,
        done: &mut Vec<(usize, Advanced)>,
        fill_row: Option<u64>,
        tail: u32,
    ) -> Result<(), Stop> {
        let Some(row) = fill_row else {
            return self.publish_rows(shard, layout, ring, done, None, tail);
        };
        let fill = done.pop().expect("the fill entry's env was advanced");
        self.publish_rows(shard, layout, ring, done, None, tail.wrapping_sub(1))?;
        let claimed =
            RegionRing { region: &self.region, layout: ring }.claim_counter().load(Ordering::Relaxed);
        if row >= claimed {
            let message = format!("fill entry names row {row}, past the {claimed} rows claimed so far");
            return Err(self.fail_async(ring, message));
        }
        self.publish_rows(shard, layout, ring, &mut vec![fill], Some(row), tail)
    }

    /// Takes rows for `done` (claims them, or the fill row), lets each env write its row,
    /// and commits the rows block by block. Under the restart policy the claim passes the
    /// pause gate and is recorded (see `shmenv_engine::ring::recovery`).
    fn publish_rows(
        &mut self,
        shard: &mut EnvShard,
        layout: &Layout,
        ring: &RingLayout,
        done: &mut Vec<(usize, Advanced)>,
        fill_row: Option<u64>,
        tail: u32,
    ) -> Result<(), Stop> {
        if done.is_empty() {
            return Ok(());
        }
        let region = &self.region;
        let words = RegionRing { region, layout: ring };
        let (parent, command) = (self.parent, region.atomic_u32(protocol::COMMAND_WORD));
        // Stop waiting if the trainer died or is closing the pool (it will never release the
        // block or open the pause gate).
        let check = || {
            if !parent_alive(parent) {
                Some(Stop::ParentGone)
            } else {
                (Command::from_word(command.load(Ordering::Acquire)) == Some(Command::Close))
                    .then_some(Stop::Close)
            }
        };
        let stop = |e: WaitOutcome<Stop>| match e {
            WaitOutcome::Aborted(stop) => stop,
            WaitOutcome::TimedOut => Stop::ParentGone,
        };
        let k = done.len();
        let record = self.params.restart.then(|| recovery::claim_record(region, self.index));
        let busy = region.atomic_u64(self.busy_word());
        let first = match record {
            Some(record) => {
                let take = || fill_row.unwrap_or_else(|| words.claim(k));
                let pause = Gate::in_region(region, protocol::RING_PAUSE);
                record.claim(pause, k as u32, take, &mut self.waiter, check).map_err(stop)?
            }
            None => words.claim(k),
        };
        let mut items = done.drain(..);
        let mut panicked = None;
        let mut committed = 0;
        'runs: for run in words.runs(first, items.len()) {
            words.wait_writable(run, &mut self.waiter, check).map_err(stop)?;
            let rows = run.first_row..run.first_row + run.rows;
            // SAFETY: these rows of the run's block were claimed by this worker alone (the
            // counter hands out each row once; a fill row is given to one worker by the
            // trainer, which took it back from a dead one) and the gate says the trainer
            // released the block's previous batch; nobody reads them until they are committed.
            let mut view = unsafe { block_rows(region, &layout.blocks[run.block], rows) };
            busy.store(now_ns(), Ordering::Relaxed);
            for (r, (local, advanced)) in items.by_ref().take(run.rows).enumerate() {
                if let Err(p) = shard.emit(local, advanced, &mut view, r) {
                    panicked = Some(p);
                    break 'runs;
                }
            }
            busy.store(0, Ordering::Relaxed);
            words.commit(run);
            committed += run.rows as u32;
            if let Some(record) = record {
                record.committed(committed);
            }
        }
        drop(items);
        if let Some(record) = record {
            record.finish(tail);
        }
        match panicked {
            Some((env_id, message)) => Err(self.panicked_async(ring, env_id, message)),
            None => Ok(()),
        }
    }

    /// The word that says since when this worker runs env code (async hang detection).
    fn busy_word(&self) -> usize {
        protocol::worker_busy_since(self.params.num_workers, self.index)
    }

    /// Marks env code running since `ns` (0: none).
    fn busy_since(&self, ns: u64) {
        self.region.atomic_u64(self.busy_word()).store(ns, Ordering::Relaxed);
    }

    fn fail_async(&mut self, ring: &RingLayout, message: String) -> Stop {
        self.report(&WorkerReport::Failed { message }, WorkerStatus::Failed);
        self.wake_ring(ring);
        Stop::Failed
    }

    fn panicked_async(&mut self, ring: &RingLayout, env_id: usize, message: String) -> Stop {
        self.report(&WorkerReport::EnvPanicked { env_id, message }, WorkerStatus::Failed);
        self.wake_ring(ring);
        let _ = self.next_command();
        Stop::Failed
    }

    /// Wakes a trainer sleeping on any block, so it sees this worker's failure at once.
    fn wake_ring(&self, ring: &RingLayout) {
        RegionRing { region: &self.region, layout: ring }.interrupt_all();
    }
}
