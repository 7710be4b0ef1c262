//! A cross-process counting semaphore on two shared words, with futex wake-ups.

use super::atomic::{fence, AtomicU32, Ordering};
use super::futex::{futex_wait, futex_wake};
use super::waiter::{WaitOutcome, Waiter};
use bytemuck::{Pod, Zeroable};
use std::mem::{offset_of, size_of};
use std::time::{Duration, Instant};

/// A counting semaphore's two words in shared memory, `count` then `want`: posters add to
/// `count`; the one consumer writes `want` while it sleeps.
///
/// - `count`: posts not yet acquired. Producers `fetch_add`; the single consumer subtracts.
/// - `want`: 0 while the consumer is awake; while it sleeps, the count it is waiting for.
///   A producer wakes the consumer only when its post reaches `want`, so a trainer waiting
///   for 8 workers is woken once, not 8 times.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable, PartialEq, Eq)]
pub struct SemaphoreWords {
    /// Posts not yet acquired.
    pub count: u32,
    /// How many posts the sleeping consumer waits for (0: nobody sleeps).
    pub want: u32,
}

/// Offset of a semaphore's `want` word from its `count` word.
pub const SEMAPHORE_WANT: usize = offset_of!(SemaphoreWords, want);

/// Bytes of a semaphore in shared memory ([`SemaphoreWords`]: two `u32` words).
pub const SEMAPHORE_BYTES: usize = size_of::<SemaphoreWords>();

/// A counting semaphore with one consumer and any number of producers, possibly in other
/// processes. Both words live in shared memory.
#[derive(Clone, Copy, Debug)]
pub struct Semaphore<'a> {
    count: &'a AtomicU32,
    want: &'a AtomicU32,
}

impl<'a> Semaphore<'a> {
    /// A semaphore over two shared words (see [`SemaphoreWords`]).
    pub fn new(count: &'a AtomicU32, want: &'a AtomicU32) -> Self {
        Semaphore { count, want }
    }

    /// The semaphore whose words ([`SemaphoreWords`]) start at `offset` in `region` (where
    /// the protocol puts it).
    #[cfg(not(loom))]
    pub fn in_region(region: &'a crate::region::Region, offset: usize) -> Self {
        Semaphore::new(region.atomic_u32(offset), region.atomic_u32(offset + SEMAPHORE_WANT))
    }

    /// Adds one post and wakes the consumer if it sleeps and this post completes its wait.
    #[inline]
    pub fn post(&self) {
        self.post_n(1);
    }

    /// Adds `n` posts at once (see [`Semaphore::post`]).
    #[inline]
    pub fn post_n(&self, n: u32) {
        // The Release increment publishes everything written before it. Then a SeqCst
        // fence, paired with the one in `sleep`, makes this a Dekker handshake: either the
        // sleeper's load sees the new count, or this load sees the sleeper's `want` and wakes
        // it. (Fences, not SeqCst accesses: the C++ model guarantees the store-load order only
        // through fences, and loom checks exactly that.)
        let now = self.count.fetch_add(n, Ordering::Release).wrapping_add(n);
        fence(Ordering::SeqCst);
        let want = self.want.load(Ordering::Relaxed);
        if want != 0 && now >= want {
            futex_wake(self.count);
        }
    }

    /// Wakes the consumer unconditionally (used by a supervisor after a worker died).
    pub fn interrupt(&self) {
        futex_wake(self.count);
    }

    /// Takes `n` posts if they are there. The Acquire pairs with the producers' Release.
    #[inline]
    pub fn try_acquire(&self, n: u32) -> bool {
        let mut c = self.count.load(Ordering::Acquire);
        while c >= n {
            match self.count.compare_exchange(c, c - n, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(actual) => c = actual,
            }
        }
        false
    }

    /// Current count (diagnostics).
    pub fn count(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }

    /// Sleeps on the futex until the count may have reached `n`, a wake-up, or `timeout`.
    fn sleep(&self, n: u32, timeout: Duration) {
        self.want.store(n, Ordering::Relaxed);
        fence(Ordering::SeqCst); // Pairs with the fence in `post_n`.
        let c = self.count.load(Ordering::Relaxed);
        if c < n {
            futex_wait(self.count, c, timeout);
        }
        self.want.store(0, Ordering::Relaxed);
    }

    /// Acquires `n` posts, waiting according to `waiter`'s policy.
    ///
    /// `check` runs between phases and every few hundred microseconds while waiting; if it
    /// returns `Some(reason)` the wait stops with [`WaitOutcome::Aborted`]. Without a
    /// `deadline` the wait is bounded only by `check`.
    pub fn acquire<E>(
        &self,
        n: u32,
        waiter: &mut Waiter,
        deadline: Option<Instant>,
        check: impl FnMut() -> Option<E>,
    ) -> Result<(), WaitOutcome<E>> {
        waiter.wait(deadline, check, || self.try_acquire(n), |slice| self.sleep(n, slice))
    }
}
