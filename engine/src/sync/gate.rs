//! A gate: a shared word that one process advances and others wait to see reach a value.

use super::atomic::{fence, AtomicU32, Ordering};
use super::futex::{futex_wait, futex_wake};
use super::waiter::{WaitOutcome, Waiter};
use bytemuck::{Pod, Zeroable};
use std::mem::offset_of;
use std::time::Duration;

/// A gate's two words in shared memory: the opener writes `value`; waiters count
/// themselves in `sleepers` while they sleep.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable, PartialEq, Eq)]
pub struct GateWords {
    /// The value waiters wait for.
    pub value: u32,
    /// Waiters asleep on the value.
    pub sleepers: u32,
}

/// Offset of a gate's `sleepers` word from its `value` word.
pub const GATE_SLEEPERS: usize = offset_of!(GateWords, sleepers);

/// A word that one process advances and others wait to see reach a value: many waiters,
/// one opener. Both words (`value`, `sleepers`) live in shared memory.
#[derive(Clone, Copy, Debug)]
pub struct Gate<'a> {
    value: &'a AtomicU32,
    sleepers: &'a AtomicU32,
}

impl<'a> Gate<'a> {
    /// A gate over two shared words (see [`GateWords`]).
    pub fn new(value: &'a AtomicU32, sleepers: &'a AtomicU32) -> Self {
        Gate { value, sleepers }
    }

    /// The gate whose words ([`GateWords`]) start at `offset` in `region` (where the
    /// protocol puts it).
    #[cfg(not(loom))]
    pub fn in_region(region: &'a crate::region::Region, offset: usize) -> Self {
        Gate::new(region.atomic_u32(offset), region.atomic_u32(offset + GATE_SLEEPERS))
    }

    /// Sets the value and wakes every sleeper. The Release store publishes what was
    /// written before; the SeqCst fence pairs with the one in `sleep` (a Dekker handshake,
    /// as in [`Semaphore::post_n`](super::Semaphore::post_n)).
    pub fn open_to(&self, v: u32) {
        self.value.store(v, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            futex_wake(self.value);
        }
    }

    /// Wakes every sleeper without changing the value (they re-run their liveness check).
    pub fn wake(&self) {
        futex_wake(self.value);
    }

    /// Whether the value is `v` (Acquire: pairs with `open_to`).
    #[inline]
    pub fn is(&self, v: u32) -> bool {
        self.value.load(Ordering::Acquire) == v
    }

    fn sleep(&self, v: u32, timeout: Duration) {
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst); // Pairs with the fence in `open_to`.
        let now = self.value.load(Ordering::Relaxed);
        if now != v {
            futex_wait(self.value, now, timeout);
        }
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Waits until the value is `v`, by `waiter`'s policy (see
    /// [`Semaphore::acquire`](super::Semaphore::acquire)).
    pub fn wait_for<E>(
        &self,
        v: u32,
        waiter: &mut Waiter,
        check: impl FnMut() -> Option<E>,
    ) -> Result<(), WaitOutcome<E>> {
        waiter.wait(None, check, || self.is(v), |slice| self.sleep(v, slice))
    }
}
