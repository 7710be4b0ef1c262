//! Cross-process counting semaphores on shared atomic words, with futex wake-ups, and the
//! waiting policy that decides how long to spin, yield and then sleep.
//!
//! The numbers behind the defaults come from `cargo bench --bench wakeup` (figures in
//! `docs/architecture.md`, "Waiting policy"): a handoff between processes spinning on cores
//! of their own takes about a microsecond round trip, a futex wake-up of a process asleep
//! on another core tens of microseconds, and spinning with more runnable processes than
//! cores is ruinous (a scheduler quantum, ~10 ms, per handoff). So the policy spins only
//! when every process can have a core, yields next (cheap, and it hands the core to whoever
//! needs it), and sleeps on the futex after about a millisecond, always with a timeout so
//! that liveness checks run.

use std::time::{Duration, Instant};

/// The atomics every primitive here is built on: `std`'s, or `loom`'s when the crate is
/// built with `--cfg loom` to model-check the protocol (see `tests/loom_ring.rs`).
pub mod atomic {
    #[cfg(loom)]
    pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
    #[cfg(not(loom))]
    pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
}
use atomic::{fence, AtomicU32, Ordering};

/// Byte layout of a semaphore in shared memory: `count` then `want` (two `u32` words).
///
/// - `count`: posts not yet acquired. Producers `fetch_add`; the single consumer subtracts.
/// - `want`: 0 while the consumer is awake; while it sleeps, the count it is waiting for.
///   A producer wakes the consumer only when its post reaches `want`, so a trainer waiting
///   for 8 workers is woken once, not 8 times.
pub const SEMAPHORE_BYTES: usize = 8;

/// A counting semaphore with one consumer and any number of producers, possibly in other
/// processes. Both words live in shared memory.
#[derive(Clone, Copy, Debug)]
pub struct Semaphore<'a> {
    count: &'a AtomicU32,
    want: &'a AtomicU32,
}

/// Why a wait ended without acquiring.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitOutcome<E> {
    /// The liveness check said to stop, with its reason.
    Aborted(E),
    /// The deadline passed.
    TimedOut,
}

impl<'a> Semaphore<'a> {
    /// A semaphore over two shared words (see [`SEMAPHORE_BYTES`]).
    pub fn new(count: &'a AtomicU32, want: &'a AtomicU32) -> Self {
        Semaphore { count, want }
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

/// A word that one process advances and others wait to see reach a value: many waiters,
/// one opener. Both words (`value`, `sleepers`) live in shared memory.
#[derive(Clone, Copy, Debug)]
pub struct Gate<'a> {
    value: &'a AtomicU32,
    sleepers: &'a AtomicU32,
}

impl<'a> Gate<'a> {
    /// A gate over two shared words.
    pub fn new(value: &'a AtomicU32, sleepers: &'a AtomicU32) -> Self {
        Gate { value, sleepers }
    }

    /// Sets the value and wakes every sleeper. The Release store publishes what was
    /// written before; the SeqCst fence pairs with the one in `sleep` (a Dekker handshake,
    /// as in [`Semaphore::post_n`]).
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

    /// Waits until the value is `v`, by `waiter`'s policy (see [`Semaphore::acquire`]).
    pub fn wait_for<E>(
        &self,
        v: u32,
        waiter: &mut Waiter,
        check: impl FnMut() -> Option<E>,
    ) -> Result<(), WaitOutcome<E>> {
        waiter.wait(None, check, || self.is(v), |slice| self.sleep(v, slice))
    }
}

#[cfg_attr(loom, allow(dead_code))]
const CHECK_INTERVAL: Duration = Duration::from_micros(200);

/// How a process waits for another (see [`WaitPolicy`] for the phases). In the pool
/// parameters it is its [`WaitStrategy::name`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum WaitStrategy {
    /// Chosen from the machine: spin only if every process has a core, then yield up to
    /// 1 ms, then sleep; and sleep early when recent waits were long. The default.
    #[default]
    Auto,
    /// Spin up to 10 ms before sleeping (lowest latency; only with a core per process).
    Spin,
    /// Yield up to 10 ms before sleeping.
    Yield,
    /// Sleep on the futex at once (lowest CPU use; a wake-up across cores costs ~50 us here).
    Block,
}

impl WaitStrategy {
    /// Name used on the command line and in the region's parameters.
    pub fn name(self) -> &'static str {
        match self {
            WaitStrategy::Auto => "auto",
            WaitStrategy::Spin => "spin",
            WaitStrategy::Yield => "yield",
            WaitStrategy::Block => "block",
        }
    }

    /// Parses a name produced by [`WaitStrategy::name`].
    pub fn from_name(s: &str) -> Option<WaitStrategy> {
        [WaitStrategy::Auto, WaitStrategy::Spin, WaitStrategy::Yield, WaitStrategy::Block]
            .into_iter()
            .find(|w| w.name() == s)
    }

    /// The policy of a pool's processes (`num_workers` workers and the trainer) on the
    /// `cores` the trainer may use ([`PoolParams::cores`](crate::protocol::PoolParams):
    /// every process of the pool counts the same cores; a pinned worker sees only its own).
    pub fn pool_policy(self, num_workers: usize, cores: usize) -> WaitPolicy {
        self.policy(num_workers + 1, cores)
    }

    /// The concrete phase budgets for `processes` runnable processes on `cores` cores.
    pub fn policy(self, processes: usize, cores: usize) -> WaitPolicy {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        let (spin, yield_for, sleep_early_after) = match self {
            // A core each: spinning costs nobody; sleep early only when waits are long.
            WaitStrategy::Auto if processes <= cores => (us(50), ms(1), Some(ms(2))),
            // Shared cores: never spin; yield (a yielding waiter hands its core over at
            // once and sees a post within a context switch), and sleep early only when
            // waits are so long that a futex wake-up (tens of us) is noise next to them.
            WaitStrategy::Auto => (Duration::ZERO, ms(1), Some(ms(2))),
            WaitStrategy::Spin => (ms(10), Duration::ZERO, None),
            WaitStrategy::Yield => (Duration::ZERO, ms(10), None),
            WaitStrategy::Block => (Duration::ZERO, Duration::ZERO, None),
        };
        WaitPolicy { spin, yield_for, block_slice: ms(10), sleep_early_after }
    }
}

impl From<WaitStrategy> for &'static str {
    fn from(w: WaitStrategy) -> &'static str {
        w.name()
    }
}

impl TryFrom<String> for WaitStrategy {
    type Error = String;
    fn try_from(s: String) -> Result<WaitStrategy, String> {
        WaitStrategy::from_name(&s)
            .ok_or_else(|| format!("unknown wait strategy {s:?}, expected auto, spin, yield or block"))
    }
}

/// The cores this process may use (1 when unknown): what [`WaitStrategy::Auto`] and the
/// default number of workers go by.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Concrete waiting budgets: spin for `spin`, then yield until `spin + yield_for`, then
/// sleep on the futex in slices of `block_slice` (each followed by a liveness check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Time to spin on the word before yielding.
    pub spin: Duration,
    /// Time to yield before sleeping.
    pub yield_for: Duration,
    /// Longest single futex sleep.
    pub block_slice: Duration,
    /// Adaptive: while the average recent wait exceeds this, skip spinning and sleep after
    /// a short yield. `None` for the fixed strategies.
    pub sleep_early_after: Option<Duration>,
}

/// How the processes of an [`WaitStrategy::Auto`] pool wait right now: chosen by the
/// trainer's wait tuner (`pool::wait_tuner`), which measures both, and published in the
/// region's `WAIT_MODE` word for the workers to follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitMode {
    /// Spin and yield by the policy's budgets, then sleep: fastest when every process of
    /// the pool gets a core whenever it is runnable.
    #[default]
    Active,
    /// Sleep on the futex at once (workers unpinned): fastest when other processes compete
    /// for the cores, since a yield then hands a whole time slice to a stranger and a
    /// spinning waiter burns the slice its partner needs.
    Sleep,
}

impl WaitMode {
    /// The mode a `WAIT_MODE` word holds (anything but 1 reads as `Active`).
    pub fn from_word(word: u32) -> WaitMode {
        if word == WaitMode::Sleep as u32 {
            WaitMode::Sleep
        } else {
            WaitMode::Active
        }
    }

    /// The other mode.
    pub fn other(self) -> WaitMode {
        match self {
            WaitMode::Active => WaitMode::Sleep,
            WaitMode::Sleep => WaitMode::Active,
        }
    }

    /// `"active"` or `"sleep"`.
    pub fn name(self) -> &'static str {
        match self {
            WaitMode::Active => "active",
            WaitMode::Sleep => "sleep",
        }
    }
}

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

    /// Follows the pool's current mode. Only an adaptive policy ([`WaitStrategy::Auto`])
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
    fn wait<E>(
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
    fn wait<E>(
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
    fn record(&mut self, waited: Duration) {
        let ns = waited.as_nanos().min(u64::MAX as u128) as u64;
        self.avg_wait_ns = self.avg_wait_ns - self.avg_wait_ns / 8 + ns / 8;
    }

    /// Spin and yield budgets for the next wait. An adaptive waiter whose recent waits
    /// were long goes to sleep after a short yield instead: burning the core (or a share
    /// of it) only slows whoever it waits for.
    #[cfg_attr(loom, allow(dead_code))]
    fn budgets(&self) -> (Duration, Duration) {
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

// Under loom a futex is a condition variable: the value check and the wait happen under
// one lock, as the kernel checks and sleeps atomically, so a wake cannot be lost between them.
#[cfg(loom)]
loom::lazy_static! {
    static ref FUTEX: (loom::sync::Mutex<()>, loom::sync::Condvar) =
        (loom::sync::Mutex::new(()), loom::sync::Condvar::new());
}

#[cfg(loom)]
fn futex_wait(word: &AtomicU32, expected: u32, _timeout: Duration) {
    let guard = FUTEX.0.lock().unwrap();
    if word.load(Ordering::Relaxed) == expected {
        drop(FUTEX.1.wait(guard).unwrap());
    }
}

#[cfg(loom)]
fn futex_wake(_word: &AtomicU32) {
    let _guard = FUTEX.0.lock().unwrap();
    FUTEX.1.notify_all();
}

/// `FUTEX_WAIT` on a shared (not process-private) word, with a timeout.
#[cfg(not(loom))]
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; `ts` outlives
    // it; FUTEX_WAIT only reads the word and may return early (EINTR/EAGAIN/ETIMEDOUT),
    // which every caller handles by re-checking the count.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// `FUTEX_WAKE` of every waiter on a shared word.
#[cfg(not(loom))]
fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not access memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
