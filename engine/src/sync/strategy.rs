//! How long a process spins, yields and sleeps while it waits for another: the named
//! strategies of the pool parameters, the concrete budgets they make on a machine, and the
//! mode an adaptive pool follows right now.

use std::time::Duration;

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
