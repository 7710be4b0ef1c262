//! Live statistics in the region's stats area ([`protocol::stats`]): cheap writers for
//! the trainer and the workers, and [`StatsSnapshot`], which reads them (from this process
//! or, through a read-only mapping, from `shmenv top` in another) and derives utilization,
//! step-time quantiles and wait shares; [`TraceRing`](crate::stats::TraceRing), the
//! per-worker trace spans; and [`attach`](crate::stats::attach), reading the stats of
//! another process's pools.
//!
//! Every counter has exactly one writer, so a relaxed load plus a relaxed store updates it
//! (no locked instruction); readers see each word whole, and a snapshot is a set of
//! independent relaxed loads (totals may be a few nanoseconds apart, never torn).

use crate::protocol::{self, stats, PoolParams};
use crate::region::Region;
use crate::sync::WaitMode;

pub mod attach;
pub mod machine;
mod trace_ring;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
mod report;
pub(crate) use report::quantile;
pub use report::{StatsReport, Verdict, WorkerActivity, CONTENDED_OTHERS, CONTENDED_RUNQUEUE};
pub use trace_ring::{Span, TraceRing};

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process on the machine, so
/// worker and trainer times line up (traces, stats start times).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill; CLOCK_MONOTONIC exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What the kernel says of a process's main thread (`/proc/<pid>/schedstat`): time on a
/// CPU and time runnable but waiting for one (run-queue delay), both in ns. Zeros when the
/// file cannot be read (the process is gone, or the kernel lacks schedstats).
pub fn sched_times(pid: u32) -> (u64, u64) {
    read_sched_times(&format!("/proc/{pid}/schedstat")).unwrap_or((0, 0))
}

/// [`sched_times`] of thread `tid` of process `pid`; `None` when it cannot be read (the
/// thread is gone).
pub fn thread_sched_times(pid: u32, tid: u32) -> Option<(u64, u64)> {
    read_sched_times(&format!("/proc/{pid}/task/{tid}/schedstat"))
}

fn read_sched_times(path: &str) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut fields = text.split_ascii_whitespace().map(|f| f.parse::<u64>().unwrap_or(0));
    Some((fields.next().unwrap_or(0), fields.next().unwrap_or(0)))
}

/// The calling thread's id (`gettid`), asked of the kernel once per thread. By the raw
/// system call: glibc has a `gettid` wrapper only from 2.30, and the wheel's program links
/// against 2.28.
pub(crate) fn current_tid() -> u32 {
    thread_local! {
        // SAFETY: the gettid system call takes no arguments, has no preconditions and
        // cannot fail.
        static TID: u32 = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    }
    TID.with(|tid| *tid)
}

/// The histogram bucket of a duration (see [`stats::HIST_BUCKETS`]).
pub fn bucket(ns: u64) -> usize {
    ((63 - ns.max(1).leading_zeros()) as usize).min(stats::HIST_BUCKETS - 1)
}

/// Adds `v` to a counter this process is the only writer of.
#[inline]
fn add(word: &AtomicU64, v: u64) {
    word.store(word.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

/// A worker's writer for its stats block.
#[derive(Clone, Copy, Debug)]
pub struct WorkerStats<'a> {
    region: &'a Region,
    base: usize,
    enabled: bool,
}

impl<'a> WorkerStats<'a> {
    /// Worker `w`'s block; `enabled` false makes every method a no-op.
    pub fn new(region: &'a Region, num_workers: usize, w: usize, enabled: bool) -> Self {
        WorkerStats { region, base: protocol::worker_stats_offset(num_workers, w), enabled }
    }

    fn word(&self, offset: usize) -> &'a AtomicU64 {
        self.region.atomic_u64(self.base + offset)
    }

    /// Whether stats are recorded.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Records the worker's pid.
    pub fn set_pid(&self, pid: u32) {
        self.region.atomic_u32(self.base + stats::worker::PID).store(pid, Ordering::Relaxed);
    }

    /// Marks the start of serving the pool: the kernel counters of this worker count from
    /// here (its start-up, importing and building envs, is not the pool's running).
    pub fn mark_running(&self) {
        let (cpu, runqueue) = sched_times(std::process::id());
        self.word(stats::worker::RUNQUEUE_AT_START).store(runqueue, Ordering::Relaxed);
        self.word(stats::worker::CPU_AT_START).store(cpu, Ordering::Relaxed);
    }

    /// Adds env steps and resets.
    #[inline]
    pub fn add_steps(&self, steps: u64, resets: u64) {
        if self.enabled {
            add(self.word(stats::worker::STEPS), steps);
            add(self.word(stats::worker::RESETS), resets);
        }
    }

    /// Adds time spent in env code, waiting, and publishing.
    #[inline]
    pub fn add_times(&self, env_ns: u64, wait_ns: u64, publish_ns: u64) {
        if self.enabled {
            add(self.word(stats::worker::ENV_NS), env_ns);
            add(self.word(stats::worker::WAIT_NS), wait_ns);
            add(self.word(stats::worker::PUBLISH_NS), publish_ns);
        }
    }

    /// Adds sampled env-step timings (a local histogram, then cleared).
    pub fn flush_hist(&self, hist: &mut [u64; stats::HIST_BUCKETS]) {
        if !self.enabled {
            return;
        }
        let mut sampled = 0;
        for (k, n) in hist.iter_mut().enumerate() {
            if *n != 0 {
                add(self.word(stats::worker::HIST + stats::worker::HIST_STRIDE * k), *n);
                sampled += *n;
                *n = 0;
            }
        }
        add(self.word(stats::worker::SAMPLED), sampled);
    }
}

/// The trainer's writer for the pool block.
#[derive(Clone, Copy, Debug)]
pub struct PoolStats<'a> {
    region: &'a Region,
    base: usize,
}

impl<'a> PoolStats<'a> {
    /// The pool block of a region with `num_workers` workers.
    pub fn new(region: &'a Region, num_workers: usize) -> Self {
        PoolStats { region, base: protocol::stats_offset(num_workers) }
    }

    fn word(&self, offset: usize) -> &'a AtomicU64 {
        self.region.atomic_u64(self.base + offset)
    }

    /// Marks the start: enabled flag, trainer pid and thread, start time, and the
    /// kernel's figures the intervals are counted from.
    pub fn start(&self, enabled: bool) {
        self.region.atomic_u32(self.base + stats::pool::ENABLED).store(enabled as u32, Ordering::Relaxed);
        self.region
            .atomic_u32(self.base + stats::pool::TRAINER_PID)
            .store(std::process::id(), Ordering::Relaxed);
        self.word(stats::pool::STARTED_NS).store(now_ns(), Ordering::Relaxed);
        let tid = current_tid();
        let (cpu, runqueue) = thread_sched_times(std::process::id(), tid).unwrap_or((0, 0));
        self.word(stats::pool::TRAINER_TID).store(tid.into(), Ordering::Relaxed);
        self.word(stats::pool::TRAINER_RUNQUEUE_AT_START).store(runqueue, Ordering::Relaxed);
        self.word(stats::pool::TRAINER_CPU_AT_START).store(cpu, Ordering::Relaxed);
        let machine = machine::busy(tid).map_or(0, |busy| busy.ns);
        self.word(stats::pool::MACHINE_BUSY_AT_START).store(machine, Ordering::Relaxed);
    }

    /// The pool's calls now come from thread `tid`: its CPU time and run-queue delay are
    /// the trainer's from now on, added to what the thread before it had (two reads of
    /// `/proc`, only when the calling thread changes).
    pub fn follow_caller(&self, tid: u32) {
        let pid = std::process::id();
        let before = self.word(stats::pool::TRAINER_TID).load(Ordering::Relaxed) as u32;
        // What the trainer had so far (0 if the thread before is gone), and the new
        // thread's figures now: its figures less the new bases are the trainer's totals.
        let (cpu_base, rq_base) = (stats::pool::TRAINER_CPU_AT_START, stats::pool::TRAINER_RUNQUEUE_AT_START);
        let (cpu_had, rq_had) = thread_sched_times(pid, before).map_or((0, 0), |(cpu, rq)| {
            let load = |offset| self.word(offset).load(Ordering::Relaxed);
            (cpu.wrapping_sub(load(cpu_base)), rq.wrapping_sub(load(rq_base)))
        });
        let (cpu, rq) = thread_sched_times(pid, tid).unwrap_or((0, 0));
        self.word(cpu_base).store(cpu.wrapping_sub(cpu_had), Ordering::Relaxed);
        self.word(rq_base).store(rq.wrapping_sub(rq_had), Ordering::Relaxed);
        self.word(stats::pool::TRAINER_TID).store(tid.into(), Ordering::Relaxed);
    }

    /// Records one call that returned a batch: its total time and the part spent waiting.
    #[inline]
    pub fn add_call(&self, call_ns: u64, wait_ns: u64, batch: bool) {
        add(self.word(stats::pool::TRAINER_CALL_NS), call_ns);
        add(self.word(stats::pool::TRAINER_WAIT_NS), wait_ns);
        if batch {
            add(self.word(stats::pool::BATCHES), 1);
        }
    }

    /// Records a command of the trainer's own shard: its env steps, the episodes it began
    /// and the time it took.
    #[inline]
    pub fn add_shard(&self, steps: u64, resets: u64, env_ns: u64) {
        add(self.word(stats::pool::SHARD_STEPS), steps);
        add(self.word(stats::pool::SHARD_RESETS), resets);
        add(self.word(stats::pool::SHARD_ENV_NS), env_ns);
    }

    /// Counts a batch returned while the pool's processes slept at once.
    #[inline]
    pub fn add_sleep_batch(&self) {
        add(self.word(stats::pool::SLEEP_BATCHES), 1);
    }

    /// Records the wait tuner's mode and counts.
    pub fn set_wait(&self, mode: WaitMode, probes: u64, switches: u64) {
        self.word(stats::pool::WAIT_MODE).store(mode as u64, Ordering::Relaxed);
        self.word(stats::pool::WAIT_PROBES).store(probes, Ordering::Relaxed);
        self.word(stats::pool::WAIT_SWITCHES).store(switches, Ordering::Relaxed);
    }

    /// Async: the ring blocks already full when `recv` was entered.
    #[inline]
    pub fn add_ring_sample(&self, full_blocks: u64) {
        add(self.word(stats::pool::RING_FULL_SUM), full_blocks);
        add(self.word(stats::pool::RING_SAMPLES), 1);
    }
}

/// One worker's counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WorkerCounters {
    /// Worker index.
    pub worker: usize,
    /// Its pid.
    pub pid: u32,
    /// Env steps.
    pub steps: u64,
    /// Env resets.
    pub resets: u64,
    /// Time in env code.
    pub env_ns: u64,
    /// Time waiting for commands or actions.
    pub wait_ns: u64,
    /// Time publishing results.
    pub publish_ns: u64,
    /// Sampled env-step timings.
    pub sampled: u64,
    /// The sampled env-step time histogram (see [`stats::HIST_BUCKETS`]).
    pub hist: Vec<u64>,
    /// Time on a CPU since it started serving the pool, from the kernel ([`sched_times`]).
    pub cpu_ns: u64,
    /// Time runnable but waiting for a CPU since it started serving the pool, from the
    /// kernel ([`sched_times`]).
    pub runqueue_ns: u64,
}

/// All counters of a pool at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StatsSnapshot {
    /// When it was taken (CLOCK_MONOTONIC ns).
    pub taken_ns: u64,
    /// When the pool started.
    pub started_ns: u64,
    /// Whether workers record stats.
    pub enabled: bool,
    /// The trainer's pid.
    pub trainer_pid: u32,
    /// Batches returned.
    pub batches: u64,
    /// Trainer time waiting for workers.
    pub trainer_wait_ns: u64,
    /// Trainer time inside pool calls.
    pub trainer_call_ns: u64,
    /// Async: sum of full ring blocks seen at `recv`.
    pub ring_full_sum: u64,
    /// Async: `recv` calls sampled.
    pub ring_samples: u64,
    /// The wait mode the tuner chose (see [`WaitMode`]).
    pub wait_mode: WaitMode,
    /// Batches returned while the pool slept at once.
    pub sleep_batches: u64,
    /// The wait tuner's probes.
    pub wait_probes: u64,
    /// The wait tuner's switches.
    pub wait_switches: u64,
    /// The trainer's time runnable but waiting for a CPU since the pool started: of the
    /// thread that calls the pool ([`thread_sched_times`], [`PoolStats::follow_caller`]).
    pub trainer_runqueue_ns: u64,
    /// The trainer's time on a CPU since the pool started, as `trainer_runqueue_ns`;
    /// `None` when that thread has ended (until the next call, from a live thread).
    pub trainer_cpu_ns: Option<u64>,
    /// The busy time since the pool started of the CPUs the trainer's thread may run on
    /// ([`machine::busy`]); `None` when unknown.
    pub machine_busy_ns: Option<u64>,
    /// How many CPUs `machine_busy_ns` is of.
    pub machine_cpus: usize,
    /// Env steps of the trainer's own shard.
    pub shard_steps: u64,
    /// Episodes the trainer's own shard began.
    pub shard_resets: u64,
    /// Trainer time stepping its own shard.
    pub shard_env_ns: u64,
    /// The cores the pool's processes count ([`PoolParams::policy_cores`]).
    pub cores: usize,
    /// Per worker.
    pub workers: Vec<WorkerCounters>,
}

impl StatsSnapshot {
    /// Reads the stats area of `region`, the region of a pool with `params` (whose worker
    /// count the caller validated against the region's size, e.g. by `Header::validate`).
    pub fn read(region: &Region, params: &PoolParams) -> StatsSnapshot {
        let num_workers = params.num_workers;
        let load = |offset: usize| region.atomic_u64(offset).load(Ordering::Relaxed);
        let base = protocol::stats_offset(num_workers);
        let workers = (0..num_workers)
            .map(|w| {
                let b = protocol::worker_stats_offset(num_workers, w);
                let pid = region.atomic_u32(b + stats::worker::PID).load(Ordering::Relaxed);
                let (cpu_ns, runqueue_ns) = sched_times(pid);
                let runqueue_ns = runqueue_ns.saturating_sub(load(b + stats::worker::RUNQUEUE_AT_START));
                let cpu_ns = cpu_ns.saturating_sub(load(b + stats::worker::CPU_AT_START));
                WorkerCounters {
                    worker: w,
                    pid,
                    cpu_ns,
                    runqueue_ns,
                    steps: load(b + stats::worker::STEPS),
                    resets: load(b + stats::worker::RESETS),
                    env_ns: load(b + stats::worker::ENV_NS),
                    wait_ns: load(b + stats::worker::WAIT_NS),
                    publish_ns: load(b + stats::worker::PUBLISH_NS),
                    sampled: load(b + stats::worker::SAMPLED),
                    hist: (0..stats::HIST_BUCKETS)
                        .map(|k| load(b + stats::worker::HIST + stats::worker::HIST_STRIDE * k))
                        .collect(),
                }
            })
            .collect();
        let trainer_pid = region.atomic_u32(base + stats::pool::TRAINER_PID).load(Ordering::Relaxed);
        // The thread that calls the pool (0 in a region of a build from before it was
        // recorded: the main thread). Gone (the thread ended, or the process): the trainer's
        // CPU time is unknown and its run-queue delay reads 0.
        let trainer_tid = match load(base + stats::pool::TRAINER_TID) as u32 {
            0 => trainer_pid,
            tid => tid,
        };
        let trainer = thread_sched_times(trainer_pid, trainer_tid).map(|(cpu, rq)| {
            let since = |now: u64, offset| now.wrapping_sub(load(base + offset));
            (since(cpu, stats::pool::TRAINER_CPU_AT_START), since(rq, stats::pool::TRAINER_RUNQUEUE_AT_START))
        });
        let machine_at_start = load(base + stats::pool::MACHINE_BUSY_AT_START);
        let machine = machine::busy(trainer_tid).filter(|_| machine_at_start > 0);
        StatsSnapshot {
            taken_ns: now_ns(),
            started_ns: load(base + stats::pool::STARTED_NS),
            enabled: region.atomic_u32(base + stats::pool::ENABLED).load(Ordering::Relaxed) != 0,
            trainer_pid,
            wait_mode: WaitMode::from_word(load(base + stats::pool::WAIT_MODE) as u32),
            sleep_batches: load(base + stats::pool::SLEEP_BATCHES),
            wait_probes: load(base + stats::pool::WAIT_PROBES),
            wait_switches: load(base + stats::pool::WAIT_SWITCHES),
            trainer_runqueue_ns: trainer.map_or(0, |(_, rq)| rq),
            trainer_cpu_ns: trainer.map(|(cpu, _)| cpu),
            machine_busy_ns: machine.map(|busy| busy.ns.saturating_sub(machine_at_start)),
            machine_cpus: machine.map_or(1, |busy| busy.cpus),
            batches: load(base + stats::pool::BATCHES),
            trainer_wait_ns: load(base + stats::pool::TRAINER_WAIT_NS),
            trainer_call_ns: load(base + stats::pool::TRAINER_CALL_NS),
            ring_full_sum: load(base + stats::pool::RING_FULL_SUM),
            ring_samples: load(base + stats::pool::RING_SAMPLES),
            shard_steps: load(base + stats::pool::SHARD_STEPS),
            shard_resets: load(base + stats::pool::SHARD_RESETS),
            shard_env_ns: load(base + stats::pool::SHARD_ENV_NS),
            cores: params.policy_cores(),
            workers,
        }
    }

    /// The counters that changed between `earlier` and this snapshot, as a snapshot of a
    /// pool that started `taken_ns - earlier.taken_ns` ago: `add` several such deltas to
    /// profile a set of intervals (say, the pool's rounds of a benchmark), then `since(None)`.
    pub fn delta(&self, earlier: &StatsSnapshot) -> StatsSnapshot {
        let d = |a: u64, b: u64| a.wrapping_sub(b);
        StatsSnapshot {
            taken_ns: d(self.taken_ns, earlier.taken_ns),
            started_ns: 0,
            enabled: self.enabled,
            trainer_pid: self.trainer_pid,
            batches: d(self.batches, earlier.batches),
            trainer_wait_ns: d(self.trainer_wait_ns, earlier.trainer_wait_ns),
            trainer_call_ns: d(self.trainer_call_ns, earlier.trainer_call_ns),
            ring_full_sum: d(self.ring_full_sum, earlier.ring_full_sum),
            ring_samples: d(self.ring_samples, earlier.ring_samples),
            wait_mode: self.wait_mode,
            sleep_batches: d(self.sleep_batches, earlier.sleep_batches),
            wait_probes: d(self.wait_probes, earlier.wait_probes),
            wait_switches: d(self.wait_switches, earlier.wait_switches),
            trainer_runqueue_ns: self.trainer_runqueue_ns.saturating_sub(earlier.trainer_runqueue_ns),
            trainer_cpu_ns: self.trainer_cpu_ns.zip(earlier.trainer_cpu_ns).map(|(a, b)| a.saturating_sub(b)),
            machine_busy_ns: self
                .machine_busy_ns
                .zip(earlier.machine_busy_ns)
                .map(|(a, b)| a.saturating_sub(b)),
            machine_cpus: self.machine_cpus,
            shard_steps: d(self.shard_steps, earlier.shard_steps),
            shard_resets: d(self.shard_resets, earlier.shard_resets),
            shard_env_ns: d(self.shard_env_ns, earlier.shard_env_ns),
            cores: self.cores,
            workers: self
                .workers
                .iter()
                .zip(&earlier.workers)
                .map(|(a, b)| WorkerCounters {
                    worker: a.worker,
                    pid: a.pid,
                    steps: d(a.steps, b.steps),
                    resets: d(a.resets, b.resets),
                    env_ns: d(a.env_ns, b.env_ns),
                    wait_ns: d(a.wait_ns, b.wait_ns),
                    publish_ns: d(a.publish_ns, b.publish_ns),
                    sampled: d(a.sampled, b.sampled),
                    hist: a.hist.iter().zip(&b.hist).map(|(x, y)| d(*x, *y)).collect(),
                    cpu_ns: kernel_delta(a, b, |w| w.cpu_ns),
                    runqueue_ns: kernel_delta(a, b, |w| w.runqueue_ns),
                })
                .collect(),
        }
    }

    /// Adds the counters of `other` (a [`StatsSnapshot::delta`]) to this one.
    pub fn add(&mut self, other: &StatsSnapshot) {
        if self.workers.is_empty() {
            *self = other.clone();
            return;
        }
        self.taken_ns += other.taken_ns;
        self.batches += other.batches;
        self.trainer_wait_ns += other.trainer_wait_ns;
        self.trainer_call_ns += other.trainer_call_ns;
        self.ring_full_sum += other.ring_full_sum;
        self.ring_samples += other.ring_samples;
        self.wait_mode = other.wait_mode;
        self.sleep_batches += other.sleep_batches;
        self.wait_probes += other.wait_probes;
        self.wait_switches += other.wait_switches;
        self.trainer_runqueue_ns += other.trainer_runqueue_ns;
        self.trainer_cpu_ns = self.trainer_cpu_ns.zip(other.trainer_cpu_ns).map(|(a, b)| a + b);
        self.machine_busy_ns = self.machine_busy_ns.zip(other.machine_busy_ns).map(|(a, b)| a + b);
        self.shard_steps += other.shard_steps;
        self.shard_resets += other.shard_resets;
        self.shard_env_ns += other.shard_env_ns;
        for (a, b) in self.workers.iter_mut().zip(&other.workers) {
            a.steps += b.steps;
            a.resets += b.resets;
            a.env_ns += b.env_ns;
            a.wait_ns += b.wait_ns;
            a.publish_ns += b.publish_ns;
            a.sampled += b.sampled;
            a.cpu_ns += b.cpu_ns;
            a.runqueue_ns += b.runqueue_ns;
            a.hist.iter_mut().zip(&b.hist).for_each(|(x, y)| *x += y);
        }
    }

    /// What happened between `earlier` and this snapshot, with the derived figures. Pass
    /// `None` for "since the pool started".
    pub fn since(&self, earlier: Option<&StatsSnapshot>) -> StatsReport {
        let zero = StatsSnapshot {
            taken_ns: self.started_ns,
            workers: self
                .workers
                .iter()
                .map(|w| WorkerCounters { hist: vec![0; w.hist.len()], ..Default::default() })
                .collect(),
            machine_busy_ns: Some(0),
            trainer_cpu_ns: Some(0),
            ..Default::default()
        };
        let e = earlier.unwrap_or(&zero);
        let secs = (self.taken_ns.saturating_sub(e.taken_ns)).max(1) as f64 / 1e9;
        let d = |a: u64, b: u64| a.wrapping_sub(b);
        let workers: Vec<WorkerActivity> = self
            .workers
            .iter()
            .zip(&e.workers)
            .map(|(now, then)| {
                let hist: Vec<u64> = now.hist.iter().zip(&then.hist).map(|(a, b)| d(*a, *b)).collect();
                let steps = d(now.steps, then.steps);
                WorkerActivity {
                    worker: now.worker,
                    pid: now.pid,
                    steps,
                    resets: d(now.resets, then.resets),
                    steps_per_sec: steps as f64 / secs,
                    utilization: d(now.env_ns, then.env_ns) as f64 / 1e9 / secs,
                    wait_share: d(now.wait_ns, then.wait_ns) as f64 / 1e9 / secs,
                    publish_share: d(now.publish_ns, then.publish_ns) as f64 / 1e9 / secs,
                    runqueue_share: kernel_delta(now, then, |w| w.runqueue_ns) as f64 / 1e9 / secs,
                    step_p50_us: quantile(&hist, 0.5).map(|ns| ns / 1e3),
                    step_p99_us: quantile(&hist, 0.99).map(|ns| ns / 1e3),
                }
            })
            .collect();
        let shard_steps = d(self.shard_steps, e.shard_steps);
        let steps: u64 = workers.iter().map(|w| w.steps).sum::<u64>() + shard_steps;
        let samples = d(self.ring_samples, e.ring_samples);
        let batches = d(self.batches, e.batches);
        // What the machine's CPUs did beside the pool's trainer (the thread calling it) and
        // its workers.
        let workers_cpu_ns: u64 =
            self.workers.iter().zip(&e.workers).map(|(a, b)| kernel_delta(a, b, |w| w.cpu_ns)).sum();
        let trainer_cpu_ns = self.trainer_cpu_ns.zip(e.trainer_cpu_ns).map(|(a, b)| a.saturating_sub(b));
        let machine_ns =
            self.machine_busy_ns.zip(e.machine_busy_ns).map(|(now, then)| now.saturating_sub(then));
        let others_share = machine_ns.zip(trainer_cpu_ns).map(|(machine, trainer)| {
            let cpu_ns = machine.saturating_sub(trainer + workers_cpu_ns);
            (cpu_ns as f64 / 1e9 / secs / self.machine_cpus.max(1) as f64).min(1.0)
        });
        StatsReport {
            seconds: secs,
            enabled: self.enabled,
            batches,
            steps,
            steps_per_sec: steps as f64 / secs,
            trainer_wait_share: d(self.trainer_wait_ns, e.trainer_wait_ns) as f64 / 1e9 / secs,
            trainer_call_share: d(self.trainer_call_ns, e.trainer_call_ns) as f64 / 1e9 / secs,
            ring_full_blocks: (samples > 0)
                .then(|| d(self.ring_full_sum, e.ring_full_sum) as f64 / samples as f64),
            trainer_runqueue_share: self.trainer_runqueue_ns.saturating_sub(e.trainer_runqueue_ns) as f64
                / 1e9
                / secs,
            others_share,
            wait_mode: self.wait_mode,
            sleep_share: d(self.sleep_batches, e.sleep_batches) as f64 / batches.max(1) as f64,
            wait_probes: d(self.wait_probes, e.wait_probes),
            wait_switches: d(self.wait_switches, e.wait_switches),
            shard_steps,
            shard_resets: d(self.shard_resets, e.shard_resets),
            shard_share: d(self.shard_env_ns, e.shard_env_ns) as f64 / 1e9 / secs,
            cores: self.cores,
            workers,
        }
    }
}

/// A kernel counter of a worker between two snapshots: a replacement worker (another pid)
/// counts from its own start.
fn kernel_delta(now: &WorkerCounters, then: &WorkerCounters, f: fn(&WorkerCounters) -> u64) -> u64 {
    if now.pid == then.pid {
        f(now).saturating_sub(f(then))
    } else {
        f(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_quantiles() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(2), 1);
        assert_eq!(bucket(1023), 9);
        assert_eq!(bucket(1024), 10);
        assert_eq!(bucket(u64::MAX), stats::HIST_BUCKETS - 1);
        let mut hist = vec![0u64; stats::HIST_BUCKETS];
        assert_eq!(quantile(&hist, 0.5), None);
        hist[10] = 99; // 1024..2048 ns
        hist[20] = 1; // ~1 ms
        let p50 = quantile(&hist, 0.5).unwrap();
        assert!((1024.0..2048.0).contains(&p50), "{p50}");
        let p99 = quantile(&hist, 0.99).unwrap();
        assert!(p99 <= 2048.0, "{p99}");
        let p100 = quantile(&hist, 1.0).unwrap();
        assert!(p100 >= (1 << 20) as f64, "{p100}");
    }
}
