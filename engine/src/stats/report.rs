//! What a pool did over an interval, derived from two snapshots of its counters: per
//! worker and for the pool, with the one-word verdict (`Pool::stats`, `shmenv top`,
//! `shmenv bench --profile`).

use crate::sync::WaitMode;
use serde::Serialize;

/// The `q` quantile (0..1) of a log2 histogram, in ns, interpolated inside its bucket;
/// `None` when it is empty.
pub fn quantile(hist: &[u64], q: f64) -> Option<f64> {
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
    /// Per worker.
    pub workers: Vec<WorkerActivity>,
}

/// [`StatsReport::verdict`]: average share of the time workers wait for a CPU from which a
/// pool is contended (measured here: 5-12% on an idle 2-core machine, 36-100% with two
/// busy processes beside the pool).
pub const CONTENDED_RUNQUEUE: f64 = 0.2;
/// [`StatsReport::verdict`]: average worker utilization from which a pool is env-bound.
pub const ENV_BOUND_UTILIZATION: f64 = 0.6;
/// [`StatsReport::verdict`]: share of the time the trainer spends outside pool calls from
/// which a pool (not env-bound) is trainer-bound.
pub const TRAINER_BOUND_OUTSIDE: f64 = 0.5;

impl StatsReport {
    /// Where the time went, in one word: `"contended"` (workers wait for a CPU that other
    /// processes hold), `"env-bound"` (workers busy in env code most of the time),
    /// `"trainer-bound"` (workers mostly wait while the trainer is outside pool calls), or
    /// `"sync-bound"` (none of these: the time goes to handing batches over).
    pub fn verdict(&self) -> &'static str {
        let n = self.workers.len().max(1) as f64;
        let util = self.workers.iter().map(|w| w.utilization).sum::<f64>() / n;
        let outside = 1.0 - self.trainer_call_share;
        if self.workers.iter().map(|w| w.runqueue_share).sum::<f64>() / n >= CONTENDED_RUNQUEUE {
            "contended"
        } else if util >= ENV_BOUND_UTILIZATION {
            "env-bound"
        } else if outside >= TRAINER_BOUND_OUTSIDE {
            "trainer-bound"
        } else {
            "sync-bound"
        }
    }
}
