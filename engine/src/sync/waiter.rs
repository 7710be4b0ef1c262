//! The wait loop every primitive shares: spin, then yield, then sleep in slices, with
//! liveness checks between, by a [`WaitPolicy`] and the pool's current [`WaitMode`].

use super::strategy::{WaitMode, WaitPolicy};
use std::time::{Duration, Instant};

/// Why a wait ended without acquiring.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitOutcome<E> {
    /// The liveness check said to stop, with its reason.
    Aborted(E),
    /// The deadline passed.
    TimedOut,
}

#[cfg_attr(loom, allow(dead_code))]
const CHECK_INTERVAL: Duration = Duration::from_micros(200);

/// Per-process waiting state: the policy, the pool's current [`WaitMode`] and a running
/// average of recent wait times.
#[derive(Clone, Debug)]
pub struct Waiter {
    policy: WaitPolicy,
    /// `WaitMode::Sleep`: skip spinning and yielding (adaptive policies only).
    mode: WaitMode,
    /// Exponential moving average of wait durations in nanoseconds (weight 1/8).
    avg_wait_ns: u64,
}

impl Waiter {
    /// A waiter following `policy`.
    pub fn new(policy: WaitPolicy) -> Self {
        Waiter { policy, mode: WaitMode::Active, avg_wait_ns: 0 }
    }

    /// The mode this waiter follows now.
    pub fn mode(&self) -> WaitMode {
        self.mode
    }

    /// Follows the pool's current mode. Only an adaptive policy ([`WaitStrategy::Auto`](super::WaitStrategy::Auto))
    /// changes with it; the fixed strategies wait as they were told.
    #[inline]
    pub fn follow(&mut self, mode: WaitMode) {
        if self.policy.sleep_early_after.is_some() {
            self.mode = mode;
        }
    }

    /// The wait loop shared by every primitive: spin, then yield, then sleep in slices,
    /// until `ready()`; `check` runs between phases and every few hundred microseconds.
    #[cfg(loom)]
    pub(super) fn wait<E>(
        &mut self,
        _deadline: Option<Instant>,
        mut check: impl FnMut() -> Option<E>,
        mut ready: impl FnMut() -> bool,
        mut sleep: impl FnMut(Duration),
    ) -> Result<(), WaitOutcome<E>> {
        // Under loom, time does not exist: go straight to the sleeping phase, which is the
        // part whose ordering matters (the want/sleepers handshake with the waker).
        loop {
            if ready() {
                return Ok(());
            }
            if let Some(e) = check() {
                return Err(WaitOutcome::Aborted(e));
            }
            sleep(self.policy.block_slice);
        }
    }

    #[cfg(not(loom))]
    pub(super) fn wait<E>(
        &mut self,
        deadline: Option<Instant>,
        mut check: impl FnMut() -> Option<E>,
        mut ready: impl FnMut() -> bool,
        mut sleep: impl FnMut(Duration),
    ) -> Result<(), WaitOutcome<E>> {
        if ready() {
            self.record(Duration::ZERO);
            return Ok(());
        }
        let start = Instant::now();
        let (spin, yield_for) = self.budgets();
        // Phase 1: spin (only when every process can have a core).
        let mut i: u32 = 0;
        while !spin.is_zero() {
            for _ in 0..64 {
                std::hint::spin_loop();
                if ready() {
                    self.record(start.elapsed());
                    return Ok(());
                }
            }
            i += 1;
            if i % 16 == 0 {
                if let Some(e) = check() {
                    return Err(WaitOutcome::Aborted(e));
                }
            }
            if start.elapsed() >= spin {
                break;
            }
        }
        // Phase 2: yield the core to whoever is runnable on it.
        let mut last_check = Instant::now();
        loop {
            if ready() {
                self.record(start.elapsed());
                return Ok(());
            }
            let now = Instant::now();
            if now.duration_since(start) >= spin + yield_for {
                break;
            }
            if now.duration_since(last_check) >= CHECK_INTERVAL {
                last_check = now;
                if let Some(e) = check() {
                    return Err(WaitOutcome::Aborted(e));
                }
                if deadline.is_some_and(|d| now >= d) {
                    return Err(WaitOutcome::TimedOut);
                }
            }
            std::thread::yield_now();
        }
        // Phase 3: sleep on the futex, waking up at least every `block_slice` to check.
        loop {
            if let Some(e) = check() {
                return Err(WaitOutcome::Aborted(e));
            }
            let now = Instant::now();
            let mut slice = self.policy.block_slice;
            if let Some(d) = deadline {
                if now >= d {
                    return Err(WaitOutcome::TimedOut);
                }
                slice = slice.min(d - now);
            }
            sleep(slice);
            if ready() {
                self.record(start.elapsed());
                return Ok(());
            }
        }
    }

    #[cfg_attr(loom, allow(dead_code))]
    pub(super) fn record(&mut self, waited: Duration) {
        let ns = waited.as_nanos().min(u64::MAX as u128) as u64;
        self.avg_wait_ns = self.avg_wait_ns - self.avg_wait_ns / 8 + ns / 8;
    }

    /// Spin and yield budgets for the next wait. An adaptive waiter whose recent waits
    /// were long goes to sleep after a short yield instead: burning the core (or a share
    /// of it) only slows whoever it waits for.
    #[cfg_attr(loom, allow(dead_code))]
    pub(super) fn budgets(&self) -> (Duration, Duration) {
        let p = self.policy;
        if self.mode == WaitMode::Sleep {
            return (Duration::ZERO, Duration::ZERO);
        }
        match p.sleep_early_after {
            Some(limit) if Duration::from_nanos(self.avg_wait_ns) > limit => {
                (Duration::ZERO, Duration::from_micros(20).min(p.yield_for))
            }
            _ => (p.spin, p.yield_for),
        }
    }
}
