//! What a pool did over an interval, derived from two snapshots of its counters: per
//! worker and for the pool, with the one-word verdict (`Pool::stats`, `shmenv top`,
//! `shmenv bench --profile`).

use crate::sync::WaitMode;
use serde::Serialize;

/// The `q` quantile (0..1) of a log2 histogram, in ns, interpolated inside its bucket;
/// `None` when it is empty.
pub(crate) fn quantile(hist: &[u64], q: f64) -> Option<f64> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    let target = q.clamp(0.0, 1.0) * total as f64;
    let mut seen = 0.0;
    for (k, &n) in hist.iter().enumerate() {
        if n == 0 {
            continue;
        }
        if seen + n as f64 >= target {
            let lo = (1u64 << k) as f64;
            let frac = ((target - seen) / n as f64).clamp(0.0, 1.0);
            return Some(lo + frac * lo); // the bucket spans [lo, 2 lo)
        }
        seen += n as f64;
    }
    Some((1u64 << (hist.len() - 1)) as f64)
}

/// A worker's activity over an interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerActivity {
    /// Worker index.
    pub worker: usize,
    /// Its pid.
    pub pid: u32,
    /// Env steps.
    pub steps: u64,
    /// Env resets.
    pub resets: u64,
    /// Env steps per second.
    pub steps_per_sec: f64,
    /// Share of the interval spent in env code (0..1).
    pub utilization: f64,
    /// Share spent waiting for commands or actions.
    pub wait_share: f64,
    /// Share spent publishing results.
    pub publish_share: f64,
    /// Share spent runnable but waiting for a CPU (the kernel's run-queue delay): what
    /// other processes on the machine took from this worker.
    pub runqueue_share: f64,
    /// Median sampled env-step time, microseconds.
    pub step_p50_us: Option<f64>,
    /// 99th percentile sampled env-step time, microseconds.
    pub step_p99_us: Option<f64>,
}

/// A pool's activity over an interval (from [`StatsSnapshot::since`](super::StatsSnapshot::since)).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatsReport {
    /// Length of the interval.
    pub seconds: f64,
    /// Whether workers recorded stats (if not, only the trainer's figures are real).
    pub enabled: bool,
    /// Batches returned to the trainer.
    pub batches: u64,
    /// Env steps of all workers and of the trainer's own shard.
    pub steps: u64,
    /// Env steps per second of all workers and of the trainer's own shard.
    pub steps_per_sec: f64,
    /// Share of the interval the trainer spent waiting for workers.
    pub trainer_wait_share: f64,
    /// Share of the interval the trainer spent inside pool calls.
    pub trainer_call_share: f64,
    /// Async: average ring blocks already full when `recv` was called.
    pub ring_full_blocks: Option<f64>,
    /// Share of the interval the trainer was runnable but waiting for a CPU (on an idle
    /// machine a yielding trainer shows some too: it waits for the worker it yields to).
    pub trainer_runqueue_share: f64,
    /// Share of the CPU time of the cores the trainer's thread may run on (over the
    /// interval) that went to tasks other than the pool's trainer (the thread that calls
    /// the pool) and workers: other processes, the trainer's other threads, the kernel, a
    /// hypervisor's other guests (steal). `None` when `/proc/stat` could not be read, or
    /// the thread that made the pool's latest call has ended.
    pub others_share: Option<f64>,
    /// The wait mode the tuner had chosen at the end of the interval.
    pub wait_mode: WaitMode,
    /// Share of the batches returned while the pool slept at once (`WaitMode::Sleep`).
    pub sleep_share: f64,
    /// The wait tuner's probes in the interval.
    pub wait_probes: u64,
    /// The wait tuner's switches in the interval.
    pub wait_switches: u64,
    /// Env steps of the trainer's own shard (`PoolBuilder::trainer_shard`; 0 without).
    pub shard_steps: u64,
    /// Episodes the trainer's own shard began.
    pub shard_resets: u64,
    /// Share of the interval the trainer spent stepping its own shard (part of its time
    /// inside pool calls).
    pub shard_share: f64,
    /// The cores the pool's processes count (`PoolParams::cores`, else this machine's).
    pub cores: usize,
    /// Per worker.
    pub workers: Vec<WorkerActivity>,
}

/// [`StatsReport::verdict`]: average share of the time workers wait for a CPU from which
/// something holds them up: other tasks ([`CONTENDED_OTHERS`] tells) or the pool's own
/// processes. On its own it cannot tell the two apart here (2 cores, CartPole-v1 64 envs on
/// 2 workers: 21-35% idle, the worker beside the trainer waiting for its core; 16-42% with
/// two busy processes beside the pool, whose workers then mostly sleep).
pub const CONTENDED_RUNQUEUE: f64 = 0.1;
/// [`StatsReport::verdict`]: the same when [`StatsReport::others_share`] is unknown (a
/// pool of an older build seen by `shmenv top`, no `/proc/stat`, a trainer thread that
/// ended): workers waiting this long are taken as contended, as before that share existed.
pub(crate) const UNKNOWN_OTHERS_RUNQUEUE: f64 = 0.2;
/// [`StatsReport::verdict`]: share of the machine's CPU time other tasks took
/// ([`StatsReport::others_share`]) from which workers that wait for a CPU are contended
/// rather than held up by their own pool (measured here, `shmenv bench --profile`: 0.4-0.9%
/// on an idle 2-core machine, 69-78% with two busy processes beside the pool).
pub const CONTENDED_OTHERS: f64 = 0.15;
/// [`StatsReport::verdict`]: average worker utilization from which a pool is env-bound.
pub(crate) const ENV_BOUND_UTILIZATION: f64 = 0.6;
/// [`StatsReport::verdict`]: share of the time the trainer spends outside pool calls from
/// which a pool (not env-bound) is trainer-bound.
pub(crate) const TRAINER_BOUND_OUTSIDE: f64 = 0.5;

/// Where a pool's time went, in one word ([`StatsReport::verdict`]). It prints and
/// serializes as that word (`"env-bound"`), the `verdict` of `shmenv bench --json` and
/// `shmenv top --json`, and of Python's `stats()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Workers wait for a CPU, and the pool has more processes stepping envs than cores:
    /// fewer workers is the remedy, whatever else runs.
    Oversubscribed,
    /// Workers wait for a CPU, and other tasks took a good share of the machine's.
    Contended,
    /// Workers busy in env code most of the time.
    EnvBound,
    /// Workers mostly wait while the trainer is outside pool calls.
    TrainerBound,
    /// None of these: the time goes to handing batches over, a worker waiting for the core
    /// its trainer holds included.
    SyncBound,
}

impl Verdict {
    /// Every verdict.
    pub const ALL: [Verdict; 5] = [
        Verdict::Oversubscribed,
        Verdict::Contended,
        Verdict::EnvBound,
        Verdict::TrainerBound,
        Verdict::SyncBound,
    ];

    /// The word: `"oversubscribed"`, `"contended"`, `"env-bound"`, `"trainer-bound"` or
    /// `"sync-bound"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Oversubscribed => "oversubscribed",
            Verdict::Contended => "contended",
            Verdict::EnvBound => "env-bound",
            Verdict::TrainerBound => "trainer-bound",
            Verdict::SyncBound => "sync-bound",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl StatsReport {
    /// Where the time went, in one word: [`Verdict::Oversubscribed`] (workers wait for a
    /// CPU, and the pool has more processes stepping envs than cores: fewer workers is the
    /// remedy, whatever else runs), [`Verdict::Contended`] (workers wait for a CPU, and
    /// other tasks took a good share of the machine's), [`Verdict::EnvBound`] (workers busy
    /// in env code most of the time), [`Verdict::TrainerBound`] (workers mostly wait while
    /// the trainer is outside pool calls), or [`Verdict::SyncBound`] (none of these: the
    /// time goes to handing batches over, a worker waiting for the core its trainer holds
    /// included).
    pub fn verdict(&self) -> Verdict {
        let n = self.workers.len().max(1) as f64;
        // Without workers the trainer steps every env: its shard's share is the envs'.
        let util = match self.workers.is_empty() {
            true => self.shard_share,
            false => self.workers.iter().map(|w| w.utilization).sum::<f64>() / n,
        };
        let outside = 1.0 - self.trainer_call_share;
        // Without workers the trainer is the process that waits for a CPU.
        let runqueue = match self.workers.is_empty() {
            true => self.trainer_runqueue_share,
            false => self.workers.iter().map(|w| w.runqueue_share).sum::<f64>() / n,
        };
        // Processes that step envs: the workers, and the trainer with a shard of its own.
        let stepping = self.workers.len() + usize::from(self.shard_steps > 0);
        let contended = match self.others_share {
            Some(others) => runqueue >= CONTENDED_RUNQUEUE && others >= CONTENDED_OTHERS,
            // Not known which tasks held the cores: a longer wait for one says other ones.
            None => runqueue >= UNKNOWN_OTHERS_RUNQUEUE,
        };
        if runqueue >= CONTENDED_RUNQUEUE && stepping > self.cores {
            Verdict::Oversubscribed
        } else if contended {
            Verdict::Contended
        } else if util >= ENV_BOUND_UTILIZATION {
            Verdict::EnvBound
        } else if outside >= TRAINER_BOUND_OUTSIDE {
            Verdict::TrainerBound
        } else {
            Verdict::SyncBound
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report of `workers` workers on `cores` cores, each waiting for a CPU `runqueue` of
    /// the time and in env code `utilization`, the trainer inside pool calls all the time.
    fn report(workers: usize, cores: usize, runqueue: f64, utilization: f64, others: f64) -> StatsReport {
        let worker = |w| WorkerActivity {
            worker: w,
            pid: 1,
            steps: 0,
            resets: 0,
            steps_per_sec: 0.0,
            utilization,
            wait_share: 1.0 - utilization,
            publish_share: 0.0,
            runqueue_share: runqueue,
            step_p50_us: None,
            step_p99_us: None,
        };
        StatsReport {
            seconds: 1.0,
            enabled: true,
            batches: 1,
            steps: 0,
            steps_per_sec: 0.0,
            trainer_wait_share: 0.9,
            trainer_call_share: 1.0,
            ring_full_blocks: None,
            trainer_runqueue_share: runqueue,
            others_share: Some(others),
            wait_mode: WaitMode::Active,
            sleep_share: 0.0,
            wait_probes: 0,
            wait_switches: 0,
            shard_steps: 0,
            shard_resets: 0,
            shard_share: 0.0,
            cores,
            workers: (0..workers).map(worker).collect(),
        }
    }

    #[test]
    fn workers_waiting_for_a_cpu_are_oversubscribed_by_their_own_pool_or_contended_by_others() {
        // 8 workers on 2 cores, idle machine: 78% run-queue delay from the pool itself; and
        // the same beside busy processes: fewer workers is the remedy in both.
        assert_eq!(report(8, 2, 0.78, 0.02, 0.01).verdict(), Verdict::Oversubscribed);
        assert_eq!(report(3, 2, 0.25, 0.02, 0.0).verdict(), Verdict::Oversubscribed);
        assert_eq!(report(8, 2, 0.85, 0.02, 0.5).verdict(), Verdict::Oversubscribed);
        // A trainer with a shard of its own steps envs too.
        let mut shard = report(2, 2, 0.3, 0.02, 0.0);
        shard.shard_steps = 100;
        assert_eq!(shard.verdict(), Verdict::Oversubscribed);
        // As many stepping processes as cores, beside busy processes: contended.
        assert_eq!(report(2, 2, 0.5, 0.02, 0.5).verdict(), Verdict::Contended);
        assert_eq!(report(8, 8, 0.15, 0.02, 0.2).verdict(), Verdict::Contended);
        // Two workers on 2 cores, idle: the worker beside the trainer waits for its core.
        // That is the handoff's cost, not contention.
        assert_eq!(report(2, 2, 0.25, 0.02, 0.02).verdict(), Verdict::SyncBound);
        assert_eq!(report(2, 2, 0.25, 0.9, 0.02).verdict(), Verdict::EnvBound);
        // Other tasks unknown: a run-queue share of 20% or more says contended, as before.
        let unknown = |runqueue| StatsReport { others_share: None, ..report(2, 2, runqueue, 0.02, 0.0) };
        assert_eq!(unknown(0.25).verdict(), Verdict::Contended);
        assert_eq!(unknown(0.15).verdict(), Verdict::SyncBound);
        // Below the run-queue threshold the other verdicts decide, whatever the rest.
        assert_eq!(report(8, 2, 0.05, 0.9, 0.5).verdict(), Verdict::EnvBound);
        assert_eq!(report(2, 2, 0.05, 0.02, 0.5).verdict(), Verdict::SyncBound);
    }

    #[test]
    fn verdicts_print_and_serialize_as_their_word() {
        let words = ["oversubscribed", "contended", "env-bound", "trainer-bound", "sync-bound"];
        for (verdict, word) in Verdict::ALL.into_iter().zip(words) {
            assert_eq!(verdict.as_str(), word);
            assert_eq!(verdict.to_string(), word);
            assert_eq!(serde_json::to_value(verdict).unwrap(), serde_json::json!(word));
        }
        assert_eq!(format!("[{:>9}]", Verdict::EnvBound), "[env-bound]");
        assert_eq!(format!("[{:>10}]", Verdict::EnvBound), "[ env-bound]");
    }
}
