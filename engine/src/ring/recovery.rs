//! Async mode under the restart policy: finding the rows a dead worker left in the ring,
//! so that its replacement can fill them.
//!
//! A worker that dies holding claimed rows leaves batches that can never complete: the
//! claim counter handed those rows out once, and the block's semaphore waits for their
//! commits. To find them the trainer needs to know, for every row not yet received, whether
//! a live worker wrote it, is going to write it, or the dead worker held it. Three things
//! make that decidable (`docs/architecture.md`, "Restarts in async mode"):
//!
//! - Before releasing a block the trainer writes [`UNWRITTEN`] into every row's env id, so a
//!   row nobody wrote is recognizable; a row a worker wrote names an env of its shard.
//! - Each worker keeps a claim record in its control block ([`ClaimRecord`]): the state
//!   (idle, claiming, claimed, paused), the rows it claimed and how many it committed.
//! - Every claim passes the pause gate ([`ClaimRecord::claim`]). The trainer closes the gate
//!   and waits until every live worker is *settled* ([`ClaimView::is_settled`]): it can
//!   write no row of a released block without passing the gate again. Then nothing in the
//!   released blocks changes, and [`plan`] reads them.
//!
//! The plan gives every row the dead workers held (written or not, committed or not) to the
//! replacement workers, which write a fresh episode of one of their pending envs into each,
//! and takes back the posts the dead workers had made for rows they committed: each refilled
//! row is posted once by its new writer, so every batch still completes exactly once.

use crate::protocol::claim_state::{CLAIMED, CLAIMING, IDLE, PAUSED};
use crate::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use crate::sync::{Gate, WaitOutcome, Waiter};
use std::ops::Range;

/// The env id the trainer writes into every row of a block before releasing it (restart
/// policy only): a row still holding it was written by nobody.
pub const UNWRITTEN: u32 = u32::MAX;

/// A worker's claim record: the words of its control block that say which ring rows it may
/// be writing. The worker writes them; the trainer reads them during a recovery.
#[derive(Clone, Copy, Debug)]
pub struct ClaimRecord<'a> {
    /// [`crate::protocol::claim_state`].
    pub state: &'a AtomicU32,
    /// First global row of the claim.
    pub first: &'a AtomicU64,
    /// Rows claimed.
    pub len: &'a AtomicU32,
    /// Rows of the claim committed so far.
    pub done: &'a AtomicU32,
    /// Queue entries consumed whose rows are all committed.
    pub queue_done: &'a AtomicU32,
}

/// A trainer's reading of a [`ClaimRecord`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimView {
    /// The state word.
    pub state: u32,
    /// First global row of the claim.
    pub first: u64,
    /// Rows claimed.
    pub len: u32,
    /// Rows committed.
    pub done: u32,
    /// Queue entries published.
    pub queue_done: u32,
}

impl ClaimRecord<'_> {
    /// Worker: passes the pause gate, then takes `k` rows with `take` (a claim on the
    /// counter, or the row a fill entry names), records them and returns the first row.
    /// While the gate is closed the worker waits, by `waiter`'s policy, in state `PAUSED`.
    pub fn claim<E>(
        &self,
        pause: Gate<'_>,
        k: u32,
        take: impl FnOnce() -> u64,
        waiter: &mut Waiter,
        mut check: impl FnMut() -> Option<E>,
    ) -> Result<u64, WaitOutcome<E>> {
        loop {
            self.state.store(CLAIMING, Ordering::Relaxed);
            // Dekker handshake with the trainer's `Gate::open_to(1)` (a store, then this
            // kind of fence, then its load of the state): either this load sees the gate
            // closed, or the trainer sees `CLAIMING` and waits for the record.
            fence(Ordering::SeqCst);
            if pause.is(0) {
                break;
            }
            self.state.store(PAUSED, Ordering::Release);
            pause.wait_for(0, waiter, &mut check)?;
        }
        let first = take();
        self.first.store(first, Ordering::Relaxed);
        self.len.store(k, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
        // Release: the record (and the claim on the counter) before the state.
        self.state.store(CLAIMED, Ordering::Release);
        Ok(first)
    }

    /// Worker: `rows` rows of the claim are committed (stored after the commit's post).
    pub fn committed(&self, rows: u32) {
        self.done.store(rows, Ordering::Release);
    }

    /// Worker: queue entries up to `tail` are published, and every row of the claim is
    /// committed. The entry count goes first: a trainer that reads `IDLE` also reads it.
    pub fn finish(&self, tail: u32) {
        self.queue_done.store(tail, Ordering::Release);
        self.state.store(IDLE, Ordering::Release);
    }

    /// Trainer: reads the record (the state first, with Acquire, so the rest is at least as
    /// new as the state).
    pub fn read(&self) -> ClaimView {
        let state = self.state.load(Ordering::Acquire);
        ClaimView {
            state,
            first: self.first.load(Ordering::Relaxed),
            len: self.len.load(Ordering::Relaxed),
            done: self.done.load(Ordering::Acquire),
            queue_done: self.queue_done.load(Ordering::Acquire),
        }
    }

    /// Trainer, before starting a replacement worker: an empty record.
    pub fn clear(&self) {
        for w in [self.state, self.len, self.done, self.queue_done] {
            w.store(0, Ordering::Relaxed);
        }
        self.first.store(0, Ordering::Relaxed);
    }
}

/// Worker `w`'s claim record in `region`.
#[cfg(not(loom))]
pub fn claim_record(region: &crate::region::Region, w: usize) -> ClaimRecord<'_> {
    let words = crate::protocol::worker_words(w);
    ClaimRecord {
        state: region.atomic_u32(words.claim_state),
        first: region.atomic_u64(words.claim_first),
        len: region.atomic_u32(words.claim_len),
        done: region.atomic_u32(words.claim_done),
        queue_done: region.atomic_u32(words.queue_done),
    }
}

impl ClaimView {
    /// Whether the worker can write no row before global row `limit` without passing the
    /// pause gate again: idle, paused, or holding only rows at or past `limit` (rows of
    /// blocks not yet released to their batch, which it waits for).
    pub fn is_settled(&self, limit: u64) -> bool {
        match self.state {
            IDLE | PAUSED => true,
            CLAIMED => self.first.saturating_add(u64::from(self.done)) >= limit,
            CLAIMING => false,
            _ => false,
        }
    }

    /// The rows it claimed and has not committed.
    pub(crate) fn uncommitted(&self) -> Range<u64> {
        if self.state == CLAIMED {
            let start = self.first.saturating_add(u64::from(self.done.min(self.len)));
            start..self.first.saturating_add(u64::from(self.len))
        } else {
            0..0
        }
    }
}

/// What the trainer sees of the ring once every live worker is settled.
#[derive(Clone, Debug)]
pub struct RingSnapshot {
    /// Rows per batch.
    pub batch_size: u64,
    /// The next batch the trainer receives.
    pub next_batch: u64,
    /// The first batch whose block is not yet released to it: rows of batches from
    /// `next_batch` to here may have been written, later ones not.
    pub window_end: u64,
    /// The claim counter: rows handed out so far.
    pub claimed: u64,
    /// Envs with an action in flight: a bound on the rows claimed and not received.
    pub in_flight: u64,
    /// Rows live workers hold and have not committed (claims and pending fill rows).
    pub reserved: Vec<Range<u64>>,
}

/// Whose a row of a released block is, from its env id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOwner {
    /// Written (and, once workers are settled, committed) by a live worker.
    Live,
    /// Held by a dead worker: it names one of its envs, or [`UNWRITTEN`].
    Dead,
    /// Names no env: the region is corrupt.
    Corrupt,
}

/// How to mend the ring after workers died.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// Per batch, the posts the dead workers made for it, to take back (`(batch, posts)`).
    pub take_back: Vec<(u64, u32)>,
    /// Every row the dead workers held, ascending: each gets a new row from a replacement
    /// worker, posted once.
    pub fill_rows: Vec<u64>,
}

impl RecoveryPlan {
    /// The fill rows in released blocks (`s` is the snapshot planned from): the trainer
    /// writes [`UNWRITTEN`] into their env ids before handing them out. A dead worker's
    /// write there is void once its post is taken back, and its env id must not outlive
    /// it: the row may go to another dead worker's replacement (several are replaced at
    /// once), and if that one dies before writing it while the named env's worker lives,
    /// the next plan would count the row as that live worker's, committed, with no post.
    /// Rows past the released blocks are not touched: their blocks still hold earlier
    /// batches (the trainer marks them when it releases them).
    pub(crate) fn rows_to_unmark<'a>(&'a self, s: &RingSnapshot) -> impl Iterator<Item = u64> + 'a {
        let end = s.window_end.saturating_mul(s.batch_size);
        self.fill_rows.iter().copied().filter(move |&g| g < end)
    }
}

/// Why [`plan`] found no recovery: the ring is in a state no sequence of worker deaths
/// leaves (a corrupt region).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    /// The claim counter is below the first row not yet received.
    #[error("the claim counter ({claimed}) is behind the rows already received ({received})")]
    ClaimsBehind {
        /// The claim counter.
        claimed: u64,
        /// The rows received.
        received: u64,
    },
    /// More rows are claimed than there are actions in flight.
    #[error(
        "{outstanding} rows are claimed and not received, but only {in_flight} envs have actions in flight"
    )]
    MoreClaimsThanActions {
        /// Rows claimed and not received.
        outstanding: u64,
        /// Envs with an action in flight.
        in_flight: u64,
    },
    /// A row of a released block whose env id names no env.
    #[error("row {row} (batch {batch}) names no env")]
    RowNamesNoEnv {
        /// The global row.
        row: u64,
        /// Its batch.
        batch: u64,
    },
    /// A block's post count that its live and dead rows cannot account for.
    #[error("batch {batch} has {posts} posts for {live} live and {dead} dead rows")]
    PostsMismatch {
        /// The batch.
        batch: u64,
        /// Its block's posts.
        posts: u32,
        /// Its rows live workers wrote.
        live: u32,
        /// Its rows the dead workers held.
        dead: usize,
    },
}

/// Plans the recovery: `owner(g)` classifies row `g` of a released block by its env id,
/// `committed(q)` is the post count of batch `q`'s block. Errors describe an impossible
/// state (corrupt region).
pub fn plan(
    s: &RingSnapshot,
    owner: impl Fn(u64) -> RowOwner,
    committed: impl Fn(u64) -> u32,
) -> Result<RecoveryPlan, RecoveryError> {
    let b = s.batch_size;
    let start = s.next_batch.saturating_mul(b);
    let outstanding = s
        .claimed
        .checked_sub(start)
        .ok_or(RecoveryError::ClaimsBehind { claimed: s.claimed, received: start })?;
    if outstanding > s.in_flight {
        return Err(RecoveryError::MoreClaimsThanActions { outstanding, in_flight: s.in_flight });
    }
    let reserved = |g: u64| s.reserved.iter().any(|r| r.contains(&g));
    let mut plan = RecoveryPlan::default();
    for q in s.next_batch..s.window_end {
        let rows = q * b..((q + 1) * b).min(s.claimed);
        if rows.is_empty() {
            break;
        }
        let (mut live, mut dead) = (0u32, 0usize);
        for g in rows.filter(|&g| !reserved(g)) {
            match owner(g) {
                RowOwner::Live => live += 1,
                RowOwner::Dead => {
                    dead += 1;
                    plan.fill_rows.push(g);
                }
                RowOwner::Corrupt => return Err(RecoveryError::RowNamesNoEnv { row: g, batch: q }),
            }
        }
        let posts = committed(q);
        let dead_posts = posts
            .checked_sub(live)
            .filter(|&p| p as usize <= dead)
            .ok_or(RecoveryError::PostsMismatch { batch: q, posts, live, dead })?;
        if dead_posts > 0 {
            plan.take_back.push((q, dead_posts));
        }
    }
    // Blocks not yet released to their batch: nobody wrote those rows; the ones no live
    // worker holds were the dead workers'.
    plan.fill_rows.extend((s.window_end.saturating_mul(b).max(start)..s.claimed).filter(|&g| !reserved(g)));
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(next_batch: u64, window_end: u64, claimed: u64, reserved: Vec<Range<u64>>) -> RingSnapshot {
        RingSnapshot { batch_size: 4, next_batch, window_end, claimed, in_flight: 16, reserved }
    }

    #[test]
    fn dead_rows_in_released_blocks_are_refilled_and_their_posts_taken_back() {
        // Batch 2 (rows 8..12): rows 8, 9 live and committed; 10 dead and committed; 11 dead,
        // unwritten. Batch 3: row 12 live, 13 dead (unwritten); the counter is at 14.
        let owner = |g: u64| match g {
            8 | 9 | 12 => RowOwner::Live,
            _ => RowOwner::Dead,
        };
        let committed = |q: u64| if q == 2 { 3 } else { 1 };
        let p = plan(&snapshot(2, 4, 14, vec![]), owner, committed).unwrap();
        assert_eq!(p.take_back, vec![(2, 1)]);
        assert_eq!(p.fill_rows, vec![10, 11, 13]);
    }

    #[test]
    fn rows_past_the_released_blocks_belong_to_whoever_holds_them() {
        // Window: batches 2 and 3, all live. Rows 16..20 (batch 4) are past it: 16, 17 are
        // held by a live worker waiting for the block, 18, 19 by nobody alive.
        let p =
            plan(&snapshot(2, 4, 20, vec![Range { start: 16, end: 18 }]), |_| RowOwner::Live, |_| 4).unwrap();
        assert_eq!(p.take_back, vec![]);
        assert_eq!(p.fill_rows, vec![18, 19]);
    }

    #[test]
    fn reserved_rows_in_released_blocks_are_left_to_their_live_writer() {
        // Row 9 is a pending fill of a live (replacement) worker: not committed, not counted.
        let owner = |g: u64| if g == 10 { RowOwner::Dead } else { RowOwner::Live };
        let p = plan(&snapshot(2, 4, 12, vec![Range { start: 9, end: 10 }]), owner, |_| 2).unwrap();
        assert_eq!(p.take_back, vec![]);
        assert_eq!(p.fill_rows, vec![10]);
    }

    #[test]
    fn fill_rows_handed_across_dead_workers_do_not_outlive_their_writer() {
        // Workers A (envs 0, 1) and B (envs 2, 3), batches of 2. Batch 5 (rows 10, 11) was
        // written and committed by B, batch 6 (rows 12, 13) by A; both die. The pool hands
        // the fill rows out in worker order, so A's replacement gets rows 10 and 11, which
        // still name B's envs, and B's gets 12 and 13. A's replacement dies before writing
        // anything; B's lives and has not written its fills yet (reserved).
        let worker_of = |id: u32| id / 2;
        let snap = |reserved| RingSnapshot {
            batch_size: 2,
            next_batch: 5,
            window_end: 7,
            claimed: 14,
            in_flight: 4,
            reserved,
        };
        let mut ids = std::collections::HashMap::from([(10u64, 2u32), (11, 3), (12, 0), (13, 1)]);
        let mut posts = std::collections::HashMap::from([(5u64, 2u32), (6, 2)]);
        let owner = |ids: &std::collections::HashMap<u64, u32>, live: &[bool]| {
            let ids = ids.clone();
            let live = live.to_vec();
            move |g: u64| match ids[&g] {
                UNWRITTEN => RowOwner::Dead,
                id if live[worker_of(id) as usize] => RowOwner::Live,
                _ => RowOwner::Dead,
            }
        };
        let first = snap(vec![]);
        let p = plan(&first, owner(&ids, &[false, false]), |q| posts[&q]).unwrap();
        assert_eq!(p.take_back, vec![(5, 2), (6, 2)]);
        assert_eq!(p.fill_rows, vec![10, 11, 12, 13]);
        for (q, n) in &p.take_back {
            *posts.get_mut(q).unwrap() -= n;
        }
        // Without voiding the dead writers' env ids, rows 10 and 11 would now count as B's
        // (live) rows, committed, in a batch with no posts.
        let second = snap(vec![12..13, 13..14]);
        assert!(plan(&second, owner(&ids, &[false, true]), |q| posts[&q]).is_err());
        let unmark: Vec<u64> = p.rows_to_unmark(&first).collect();
        assert_eq!(unmark, vec![10, 11, 12, 13]);
        for g in unmark {
            ids.insert(g, UNWRITTEN);
        }
        let p = plan(&second, owner(&ids, &[false, true]), |q| posts[&q]).unwrap();
        assert_eq!(p.take_back, vec![]);
        assert_eq!(p.fill_rows, vec![10, 11]);
        // Rows past the released blocks are left alone (their blocks hold earlier batches).
        let p = RecoveryPlan { take_back: vec![], fill_rows: vec![13, 14, 15] };
        assert_eq!(p.rows_to_unmark(&first).collect::<Vec<_>>(), vec![13]);
    }

    #[test]
    fn impossible_states_are_errors() {
        let live = |_| RowOwner::Live;
        let e = plan(&snapshot(2, 4, 7, vec![]), live, |_| 0).unwrap_err();
        assert_eq!(e, RecoveryError::ClaimsBehind { claimed: 7, received: 8 }, "counter behind");
        assert_eq!(e.to_string(), "the claim counter (7) is behind the rows already received (8)");
        let e = plan(&snapshot(2, 4, 8 + 17, vec![]), live, |_| 4).unwrap_err();
        assert_eq!(e, RecoveryError::MoreClaimsThanActions { outstanding: 17, in_flight: 16 });
        assert_eq!(
            e.to_string(),
            "17 rows are claimed and not received, but only 16 envs have actions in flight"
        );
        let e = plan(&snapshot(2, 4, 12, vec![]), live, |_| 3).unwrap_err();
        assert_eq!(e, RecoveryError::PostsMismatch { batch: 2, posts: 3, live: 4, dead: 0 }, "posts missing");
        let e = plan(&snapshot(2, 4, 12, vec![]), |_| RowOwner::Corrupt, |_| 0).unwrap_err();
        assert_eq!(e, RecoveryError::RowNamesNoEnv { row: 8, batch: 2 });
        assert_eq!(e.to_string(), "row 8 (batch 2) names no env");
        let dead = |_| RowOwner::Dead;
        let e = plan(&snapshot(2, 4, 12, vec![]), dead, |_| 5).unwrap_err();
        assert_eq!(
            e,
            RecoveryError::PostsMismatch { batch: 2, posts: 5, live: 0, dead: 4 },
            "more posts than rows"
        );
        assert_eq!(e.to_string(), "batch 2 has 5 posts for 0 live and 4 dead rows");
    }

    #[test]
    fn settled_means_no_write_before_the_limit_without_the_gate() {
        let view = |state, first, len, done| ClaimView { state, first, len, done, queue_done: 0 };
        assert!(view(IDLE, 0, 0, 0).is_settled(100));
        assert!(view(PAUSED, 0, 0, 0).is_settled(100));
        assert!(!view(CLAIMING, 0, 0, 0).is_settled(100));
        assert!(!view(CLAIMED, 96, 8, 2).is_settled(100));
        assert!(view(CLAIMED, 96, 8, 4).is_settled(100));
        assert_eq!(view(CLAIMED, 96, 8, 4).uncommitted(), 100..104);
        assert_eq!(view(IDLE, 96, 8, 4).uncommitted(), 0..0);
    }
}
