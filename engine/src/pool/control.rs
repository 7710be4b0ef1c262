//! The control words of a region as the trainer reads them: semaphores, statuses,
//! reports, busy clocks.

use crate::protocol::{self, WorkerReport, WorkerStatus};
use crate::region::Region;
use crate::stats::now_ns;
use crate::sync::Semaphore;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The control words of a region: semaphores, statuses and reports.
pub(super) struct Control<'a> {
    pub(super) region: &'a Region,
    pub(super) num_workers: usize,
}

impl Control<'_> {
    pub(super) fn worker_semaphore(&self, w: usize) -> Semaphore<'_> {
        Semaphore::in_region(self.region, protocol::worker_words(w).semaphore)
    }

    /// Posts every worker's semaphore (a Release publishing everything written before).
    pub(super) fn post_all(&self) {
        for w in 0..self.num_workers {
            self.worker_semaphore(w).post();
        }
    }

    /// Async mode: the workers that have been running env code for longer than `limit`
    /// (their `BUSY_SINCE` words).
    pub(super) fn overdue(&self, limit: Duration) -> Vec<usize> {
        let now = now_ns();
        let limit = limit.as_nanos().min(u64::MAX as u128) as u64;
        (0..self.num_workers)
            .filter(|&w| {
                let word = protocol::worker_busy_since(self.num_workers, w);
                let since = self.region.atomic_u64(word).load(Ordering::Relaxed);
                since != 0 && now.saturating_sub(since) > limit
            })
            .collect()
    }

    /// The first worker whose status is no longer `Running` (it failed and reported why).
    pub(super) fn failed_worker(&self) -> Option<usize> {
        (0..self.num_workers).find(|&w| self.status(w) != Some(WorkerStatus::Running))
    }

    pub(super) fn status(&self, w: usize) -> Option<WorkerStatus> {
        let word = self.region.atomic_u32(protocol::worker_words(w).status);
        WorkerStatus::from_word(word.load(Ordering::Acquire))
    }

    /// Worker `w`'s report; `None` if its length or JSON is invalid (the bytes are untrusted).
    pub(super) fn report(&self, w: usize) -> Option<WorkerReport> {
        let len_word = self.region.atomic_u32(protocol::worker_words(w).report_len);
        let len = len_word.load(Ordering::Acquire) as usize;
        if len > protocol::REPORT_CAPACITY {
            return None;
        }
        // SAFETY: the trainer never writes a worker's report area; the worker may still be
        // writing it (its bytes are untrusted), which a snapshot tolerates.
        let bytes = unsafe { self.region.snapshot_bytes(protocol::report_offset(self.num_workers, w), len) };
        serde_json::from_slice(&bytes).ok()
    }
}

pub(super) fn trainer_semaphore(r: &Region) -> Semaphore<'_> {
    Semaphore::in_region(r, protocol::TRAINER_SEMAPHORE)
}
