//! The async ring's protocol: claim, commit, receive, release. The atomic words live in
//! the region (`protocol::RingLayout` says where); this module is the only code that
//! decides how they are used, by workers (`claim`, `wait_writable`, `commit`) and by the
//! trainer (`receive`, `release`), so that `tests/loom_ring.rs` can model-check exactly
//! this code with loom's atomics.
//!
//! Global row `g` belongs to batch `q = g / batch_size`, row `g % batch_size` of block
//! `q % depth`. Block `j`'s gate holds the batch it may receive next; its semaphore counts
//! the rows committed to it.
//!
//! Under the restart policy, [`recovery`](crate::ring::recovery) finds the rows a dead
//! worker left in the ring.

pub mod recovery;

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Gate, Semaphore, WaitOutcome, Waiter};

/// A run of consecutive claimed rows inside one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// The batch.
    pub batch: u64,
    /// Its block.
    pub block: usize,
    /// First row within the block.
    pub first_row: usize,
    /// Number of rows.
    pub rows: usize,
}

/// Where a ring's words are; the provided methods are the protocol.
pub trait RingWords {
    /// The claim counter.
    fn claim_counter(&self) -> &AtomicU64;
    /// Block `j`'s semaphore of committed rows.
    fn committed(&self, j: usize) -> Semaphore<'_>;
    /// Block `j`'s gate: the batch it may receive next.
    fn ready_for(&self, j: usize) -> Gate<'_>;
    /// Rows per batch.
    fn batch_size(&self) -> u64;
    /// Number of blocks (at least 2).
    fn depth(&self) -> u64;

    /// The block of batch `q`.
    fn block_of(&self, q: u64) -> usize {
        (q % self.depth()) as usize
    }

    /// Trainer, at start-up: block `j` may receive batch `j`.
    fn open_all(&self) {
        for j in 0..self.depth() as usize {
            self.ready_for(j).open_to(j as u32);
        }
    }

    /// Worker, after failing: wakes a trainer sleeping on any block, so it sees the failure.
    fn interrupt_all(&self) {
        for j in 0..self.depth() as usize {
            self.committed(j).interrupt();
        }
    }

    /// Worker: claims `k` consecutive rows; returns the first global row. Relaxed: the claim
    /// publishes nothing (the gate orders the writes, the commit publishes them).
    fn claim(&self, k: usize) -> u64 {
        self.claim_counter().fetch_add(k as u64, Ordering::Relaxed)
    }

    /// The runs (one per batch spanned, in order) of the `k` rows claimed from `first`.
    fn runs(&self, first: u64, k: usize) -> impl Iterator<Item = Run> {
        let (b, depth, end) = (self.batch_size(), self.depth(), first + k as u64);
        let mut g = first;
        std::iter::from_fn(move || {
            (g < end).then(|| {
                let batch = g / b;
                let rows = ((batch + 1) * b).min(end) - g;
                let run = Run {
                    batch,
                    block: (batch % depth) as usize,
                    first_row: (g % b) as usize,
                    rows: rows as usize,
                };
                g += rows;
                run
            })
        })
    }

    /// Worker: waits until the run's block may receive its batch (the trainer released the
    /// block's previous batch). Acquire: the trainer's reads of that batch happen before
    /// this worker's writes. Commit each run before waiting for the next one's block, so a
    /// batch is never held back by a worker waiting for a later block.
    fn wait_writable<E>(
        &self,
        run: Run,
        waiter: &mut Waiter,
        check: impl FnMut() -> Option<E>,
    ) -> Result<(), WaitOutcome<E>> {
        self.ready_for(run.block).wait_for(run.batch as u32, waiter, check)
    }

    /// Worker: commits a run's rows (Release: publishes them to the trainer's `receive`).
    fn commit(&self, run: Run) {
        self.committed(run.block).post_n(run.rows as u32);
    }

    /// Trainer: waits until every row of batch `q` is committed (Acquire).
    fn receive<E>(
        &self,
        q: u64,
        waiter: &mut Waiter,
        check: impl FnMut() -> Option<E>,
    ) -> Result<(), WaitOutcome<E>> {
        self.receive_until(q, waiter, None, check)
    }

    /// [`RingWords::receive`], giving up at `deadline` (hang detection).
    fn receive_until<E>(
        &self,
        q: u64,
        waiter: &mut Waiter,
        deadline: Option<std::time::Instant>,
        check: impl FnMut() -> Option<E>,
    ) -> Result<(), WaitOutcome<E>> {
        self.committed(self.block_of(q)).acquire(self.batch_size() as u32, waiter, deadline, check)
    }

    /// Trainer: gives batch `q`'s block back for batch `q + depth` (Release: the trainer's
    /// reads happen before workers rewrite the block).
    fn release(&self, q: u64) {
        self.ready_for(self.block_of(q)).open_to((q + self.depth()) as u32);
    }
}

/// A ring whose words are in a region.
#[cfg(not(loom))]
#[derive(Clone, Copy, Debug)]
pub struct RegionRing<'a> {
    /// The region.
    pub region: &'a crate::region::Region,
    /// Where the words are.
    pub layout: &'a crate::protocol::RingLayout,
}

#[cfg(not(loom))]
impl RingWords for RegionRing<'_> {
    fn claim_counter(&self) -> &AtomicU64 {
        self.region.atomic_u64(self.layout.claim_counter)
    }
    fn committed(&self, j: usize) -> Semaphore<'_> {
        Semaphore::in_region(self.region, self.layout.committed[j])
    }
    fn ready_for(&self, j: usize) -> Gate<'_> {
        Gate::in_region(self.region, self.layout.ready_for[j])
    }
    fn batch_size(&self) -> u64 {
        self.layout.batch_size as u64
    }
    fn depth(&self) -> u64 {
        self.layout.depth as u64
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::atomic::AtomicU32;

    struct Words([AtomicU32; 8], AtomicU64);

    impl RingWords for Words {
        fn claim_counter(&self) -> &AtomicU64 {
            &self.1
        }
        fn committed(&self, j: usize) -> Semaphore<'_> {
            Semaphore::new(&self.0[2 * j], &self.0[2 * j + 1])
        }
        fn ready_for(&self, j: usize) -> Gate<'_> {
            Gate::new(&self.0[4 + 2 * j], &self.0[5 + 2 * j])
        }
        fn batch_size(&self) -> u64 {
            3
        }
        fn depth(&self) -> u64 {
            2
        }
    }

    #[test]
    fn runs_split_claims_at_batch_boundaries() {
        let ring = Words(Default::default(), AtomicU64::new(0));
        let runs: Vec<Run> = ring.runs(2, 5).collect();
        assert_eq!(
            runs,
            vec![
                Run { batch: 0, block: 0, first_row: 2, rows: 1 },
                Run { batch: 1, block: 1, first_row: 0, rows: 3 },
                Run { batch: 2, block: 0, first_row: 0, rows: 1 },
            ]
        );
        assert_eq!(ring.runs(6, 0).count(), 0);
    }
}
