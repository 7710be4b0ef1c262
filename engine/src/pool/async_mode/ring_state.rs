//! The trainer's side of the async ring: which envs are in flight, the workers' queues,
//! what the restart policy must remember.

use crate::protocol;
use crate::region::Region;
use std::ops::Range;
use std::sync::atomic::Ordering;

use super::SendOrder;
use crate::pool::Control;

/// The trainer's side of the async ring.
#[derive(Debug)]
pub(in crate::pool) struct RingState {
    pub(in crate::pool) batch_size: usize,
    /// Number of the next batch `recv` returns.
    pub(in crate::pool) next_batch: u64,
    /// Received batches kept from the workers after the call that received them (see
    /// [`PoolBuilder::retain_batches`]).
    pub(in crate::pool) retain: u64,
    /// Fair scheduling: which sent actions go to their workers now.
    pub(in crate::pool) order: SendOrder,
    /// Actions sent whose results were not received yet.
    pub(in crate::pool) in_flight: usize,
    /// Per env: an action (or reset) is in flight.
    pub(in crate::pool) pending: Vec<bool>,
    /// Per env: the worker hosting it.
    pub(in crate::pool) worker_of: Vec<u32>,
    /// Per worker: entries pushed into its queue so far (wrapping).
    pub(in crate::pool) queue_heads: Vec<u32>,
    /// Per worker: its envs (its queue's slots).
    pub(in crate::pool) shards: Vec<Range<usize>>,
    /// Per worker: scratch flag, "pushed to in this call".
    pub(in crate::pool) touched: Vec<bool>,
    /// Batches whose block was given back to the workers (all before this one).
    pub(in crate::pool) released: u64,
    /// Restart policy: envs of restarted workers whose next row is a fresh episode, to be
    /// marked truncated and listed in `restarted_envs` when received.
    pub(in crate::pool) restart_marked: Vec<bool>,
    /// How many `restart_marked` are set.
    pub(in crate::pool) marked: usize,
    /// Restart policy, per worker: fill entries pushed to it (queue index, row).
    pub(in crate::pool) fills: Vec<Vec<(u32, u64)>>,
}

impl RingState {
    /// The state of a fresh ring of batches of `batch_size`, keeping `retain` received
    /// batches, with or without fair scheduling.
    pub(in crate::pool) fn new(
        batch_size: usize,
        retain: u64,
        fair: bool,
        params: &protocol::PoolParams,
    ) -> RingState {
        let shards: Vec<Range<usize>> = (0..params.num_workers).map(|w| params.shard(w)).collect();
        let worker_of: Vec<usize> =
            (0..params.num_envs).map(|e| shards.iter().position(|s| s.contains(&e)).unwrap_or(0)).collect();
        RingState {
            batch_size,
            next_batch: 0,
            retain,
            order: SendOrder::new(worker_of.clone(), shards.iter().map(|s| s.len() as u64).collect(), fair),
            in_flight: 0,
            pending: vec![false; params.num_envs],
            worker_of: worker_of.iter().map(|&w| w as u32).collect(),
            queue_heads: vec![0; params.num_workers],
            shards,
            touched: vec![false; params.num_workers],
            released: 0,
            restart_marked: vec![false; params.num_envs],
            marked: 0,
            fills: vec![Vec::new(); params.num_workers],
        }
    }

    /// Puts `env` on its worker's queue as `kind` (with `fill_row` for a `FILL` entry); the
    /// entry is published by the next [`RingState::publish_queues`].
    pub(in crate::pool) fn enqueue(
        &mut self,
        region: &Region,
        layout: &protocol::RingLayout,
        env: usize,
        kind: u32,
        fill_row: u64,
    ) {
        let w = self.worker_of[env] as usize;
        let shard = &self.shards[w];
        let head = self.queue_heads[w];
        let slot = shard.start + head as usize % shard.len();
        // SAFETY: queue slot `head` of worker `w` is past what it has taken (its head store
        // below, Release, publishes it) and only this thread of the trainer writes queues.
        unsafe { region.write_pod(layout.queue.offset + slot * 4, &(env as u32 | kind)) };
        if kind == protocol::queue_entry::FILL {
            // SAFETY: the fill row of the same slot, published with it.
            unsafe { region.write_pod(layout.fill_rows.offset + slot * 8, &fill_row) };
            if fill_row != protocol::queue_entry::FILL_CLAIM {
                self.fills[w].push((head, fill_row));
            }
        }
        self.queue_heads[w] = head.wrapping_add(1);
        self.touched[w] = true;
    }

    /// Publishes each queue written to since the last call: the head store (Release) and
    /// one post per worker publish the entries and the action rows written before.
    pub(in crate::pool) fn publish_queues(&mut self, region: &Region, num_workers: usize) {
        let control = Control { region, num_workers };
        for w in 0..num_workers {
            if !std::mem::take(&mut self.touched[w]) {
                continue;
            }
            let head_word = protocol::worker_words(w).queue_head;
            region.atomic_u32(head_word).store(self.queue_heads[w], Ordering::Release);
            control.worker_semaphore(w).post();
        }
    }
}
