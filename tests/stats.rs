//! The stats area agrees with what the pool did: exact step and reset counts, non-zero
//! times that add up, quantiles from the sampled histogram, in sync and async mode.

mod common;

use common::{builder, Watchdog};
use serde_json::json;
use shmenv::WaitStrategy;
use shmenv_engine::stats::CONTENDED_RUNQUEUE;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests below that measure CPU time run one at a time: the others' processes would be
/// other tasks on their cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn sync_stats_count_exactly_what_the_pool_did() {
    let _w = Watchdog::new("sync stats", Duration::from_secs(60));
    let (n, steps) = (8usize, 100usize);
    let mut pool = builder("CartPole-v1").num_envs(n).num_workers(2).seed(1).build().unwrap();
    pool.reset().unwrap();
    let mut ended_before_last = 0u64;
    for t in 0..steps {
        let batch = pool.step(&vec![0i64; n]).unwrap();
        if t + 1 < steps {
            // NextStep: an episode that ends at step t is reset at step t + 1.
            ended_before_last += batch.episodes().count() as u64;
        }
    }
    let report = pool.stats();
    let snap = pool.stats_snapshot();
    assert!(report.enabled);
    assert_eq!(report.batches, steps as u64 + 1);
    assert_eq!(report.steps, (n * steps) as u64);
    for (w, worker) in report.workers.iter().enumerate() {
        assert_eq!(worker.steps, (pool.shard(w).len() * steps) as u64);
        assert!(worker.pid == pool.worker_pids()[w]);
        assert!(worker.utilization > 0.0 && worker.utilization <= 1.0, "{worker:?}");
        assert!(worker.wait_share > 0.0 && worker.wait_share <= 1.0, "{worker:?}");
        let total = worker.utilization + worker.wait_share + worker.publish_share;
        assert!(total <= 1.05, "shares add up to more than the time: {worker:?}");
        let (p50, p99) = (worker.step_p50_us.unwrap(), worker.step_p99_us.unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "{worker:?}");
    }
    let resets: u64 = snap.workers.iter().map(|w| w.resets).sum();
    assert_eq!(resets, n as u64 + ended_before_last);
    let sampled: u64 = snap.workers.iter().map(|w| w.sampled).sum();
    // One timed env step per worker per batch.
    assert_eq!(sampled, 2 * (steps as u64 + 1));
    assert_eq!(snap.workers.iter().map(|w| w.hist.iter().sum::<u64>()).sum::<u64>(), sampled);
    assert!(report.trainer_wait_share > 0.0 && report.trainer_wait_share <= report.trainer_call_share);
    assert!(report.trainer_call_share <= 1.0);
    let verdicts = ["contended", "oversubscribed", "env-bound", "trainer-bound", "sync-bound"];
    assert!(verdicts.contains(&report.verdict().as_str()));
    // Intervals: nothing happened between two snapshots taken back to back.
    let later = pool.stats_snapshot();
    let idle = later.since(Some(&snap));
    assert_eq!((idle.steps, idle.batches), (0, 0));
}

#[test]
fn async_stats_count_every_step_received() {
    let _w = Watchdog::new("async stats", Duration::from_secs(60));
    let (n, b) = (8usize, 4usize);
    let mut pool = builder("CartPole-v1").num_envs(n).num_workers(2).batch_size(b).seed(2).build().unwrap();
    pool.async_reset().unwrap();
    pool.recv().unwrap();
    let mut ids: Vec<usize> = pool.recv().unwrap().env_ids().iter().map(|&e| e as usize).collect();
    let rounds = 50;
    for _ in 0..rounds {
        pool.send(&vec![1i64; b], &ids).unwrap();
        ids = pool.recv().unwrap().env_ids().iter().map(|&e| e as usize).collect();
    }
    let report = pool.stats();
    assert_eq!(report.steps, (rounds * b) as u64);
    assert_eq!(report.batches, rounds as u64 + 2);
    let fill = report.ring_full_blocks.expect("async pools sample the ring");
    assert!((0.0..=2.0).contains(&fill), "{fill}");
}

#[test]
fn stats_can_be_turned_off() {
    let _w = Watchdog::new("stats off", Duration::from_secs(60));
    let mut pool =
        builder("Burn-v0").config(json!({})).num_envs(4).num_workers(2).stats(false).build().unwrap();
    pool.reset().unwrap();
    for _ in 0..10 {
        pool.step(&[0i64; 4]).unwrap();
    }
    let report = pool.stats();
    assert!(!report.enabled);
    assert_eq!(report.steps, 0);
    assert_eq!(report.batches, 11); // the trainer's own counters stay on
}

#[test]
fn trace_export_is_chrome_json_with_every_process_named() {
    let _w = Watchdog::new("trace", Duration::from_secs(60));
    let mut pool = builder("Burn-v0")
        .config(json!({"step_us": 20}))
        .num_envs(4)
        .num_workers(2)
        .trace(true)
        .build()
        .unwrap();
    pool.reset().unwrap();
    for _ in 0..50 {
        pool.step(&[0i64; 4]).unwrap();
    }
    let path = std::env::temp_dir().join(format!("shmenv-trace-{}.json", std::process::id()));
    pool.write_trace(&path).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let names: Vec<(u64, String)> = events
        .iter()
        .filter(|e| e["ph"] == "M")
        .map(|e| (e["pid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap().to_string()))
        .collect();
    assert!(names.contains(&(std::process::id() as u64, "shmenv trainer (Burn-v0)".into())), "{names:?}");
    for (w, &pid) in pool.worker_pids().iter().enumerate() {
        assert!(names.contains(&(pid as u64, format!("shmenv-worker[{w}] Burn-v0"))), "{names:?}");
        let env_spans: Vec<&serde_json::Value> =
            events.iter().filter(|e| e["pid"] == pid && e["name"] == "env").collect();
        assert_eq!(env_spans.len(), 51, "one env span per batch (reset + 50 steps)");
        // Each step burns 2 x 20 us in this worker.
        assert!(env_spans.iter().all(|e| e["dur"].as_f64().unwrap() >= 0.0));
        assert!(env_spans[1..].iter().all(|e| e["dur"].as_f64().unwrap() >= 40.0));
    }
    let steps = events.iter().filter(|e| e["name"] == "step" && e["pid"] == std::process::id()).count();
    assert_eq!(steps, 50);
    // Without tracing there is nothing to write, and the error says how to get it.
    let plain = builder("Burn-v0").num_envs(2).num_workers(1).build().unwrap();
    let err = plain.write_trace(&path).unwrap_err();
    assert!(err.to_string().contains(".trace(true)"), "{err}");
}

/// This thread's CPU mask (`sched_getaffinity`), to restore it.
fn thread_mask() -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain bits; the call fills the set of the size passed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
        set
    }
}

fn set_thread_mask(set: &libc::cpu_set_t) {
    // SAFETY: `set` is a valid cpu_set_t of the size passed, for this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    assert_eq!(rc, 0, "sched_setaffinity: {}", std::io::Error::last_os_error());
}

#[test]
fn a_pool_with_more_workers_than_cores_is_oversubscribed_not_contended() {
    let _w = Watchdog::new("oversubscribed", Duration::from_secs(60));
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // This thread on one core: the pool counts 1 core, and its workers inherit the mask,
    // so 2 workers and the trainer take turns on it whatever the machine has.
    let mask = thread_mask();
    // SAFETY: plain bit operations on a valid cpu_set_t.
    let core = (0..libc::CPU_SETSIZE as usize).find(|&c| unsafe { libc::CPU_ISSET(c, &mask) }).unwrap();
    // SAFETY: as above; `core` < CPU_SETSIZE.
    let one = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        set
    };
    set_thread_mask(&one);
    let built = builder("Burn-v0").num_envs(4).num_workers(2).wait(WaitStrategy::Yield).build();
    let report = built.map(|mut pool| {
        pool.reset().unwrap();
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(300) {
            pool.step(&[0i64; 4]).unwrap();
        }
        pool.stats()
    });
    set_thread_mask(&mask);
    let report = report.unwrap();
    assert_eq!(report.cores, 1);
    let n = report.workers.len() as f64;
    assert!(report.workers.iter().map(|w| w.runqueue_share).sum::<f64>() / n >= CONTENDED_RUNQUEUE);
    // Whatever else runs: fewer workers is the remedy.
    assert_eq!(report.verdict(), shmenv::Verdict::Oversubscribed, "{report:#?}");
    // Other tasks are counted on the trainer thread's one core only, where the pool's
    // three processes took nearly all the time (the other tests here take turns with this
    // one; other processes may still come).
    let others = report.others_share.expect("/proc/stat is readable");
    if others >= 0.5 {
        eprintln!("other tasks took {:.0}% of this core: machine busy", 100.0 * others);
    }
}

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): the control the trainer figures are
/// checked against, taken by the same threads in the same run.
fn own_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_THREAD_CPUTIME_ID is always supported.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) }, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// How far the kernel's per-thread CPU figure in `/proc/PID/task/TID/schedstat`, which the
/// pool reads, may lag the thread's clock: it is brought up to date at ticks and context
/// switches, and the pool reads it twice (at the start and when the calling thread changes).
const SCHEDSTAT_LAG: Duration = Duration::from_millis(20);

#[test]
fn the_trainer_figures_are_of_the_thread_that_calls_the_pool() {
    let _w = Watchdog::new("caller thread", Duration::from_secs(60));
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Built here, stepped on another thread that spins while it waits, until that thread
    // has had 150 ms of CPU (however long a busy machine takes to give it): the trainer's
    // CPU time is then about the stepping thread's own, and this one's (asleep in recv)
    // about 0. Each thread measures its own CPU time as the control.
    let pool = builder("CartPole-v1").num_envs(8).num_workers(1).wait(WaitStrategy::Spin).build().unwrap();
    let main_before = own_cpu();
    let before = pool.stats_snapshot();
    let (to_main, from_stepper) = std::sync::mpsc::channel();
    let (to_stepper, from_main) = std::sync::mpsc::channel::<()>();
    let stepper = std::thread::spawn(move || {
        let mut pool = pool;
        let start = own_cpu();
        pool.reset().unwrap();
        while own_cpu() - start < Duration::from_millis(150) {
            pool.step(&[0i64; 8]).unwrap();
        }
        let stepped = own_cpu() - start;
        to_main.send((pool, stepped)).unwrap();
        // Alive until the pool's calls have moved back, so its figures can be handed on.
        from_main.recv().unwrap();
    });
    let (mut pool, stepped) = from_stepper.recv().unwrap();
    let after = pool.stats_snapshot();
    let main_idle = own_cpu() - main_before;
    let cpu = Duration::from_nanos(after.trainer_cpu_ns.unwrap() - before.trainer_cpu_ns.unwrap());
    // The stepping thread's CPU time, plus at most what this thread used before the calls
    // moved over: not this thread's alone.
    assert!(
        cpu + SCHEDSTAT_LAG >= stepped && cpu <= stepped + main_idle + SCHEDSTAT_LAG,
        "the pool's trainer CPU time over the stepping was {cpu:?}; the stepping thread's own clock said \
         {stepped:?} and this (waiting) thread's {main_idle:?} (allowed lag {SCHEDSTAT_LAG:?})"
    );
    // Back on this thread: the figures go on from what the other thread had (the total
    // does not drop to this thread's own CPU time) and grow by this thread's CPU time in
    // the call.
    let call_start = own_cpu();
    pool.step(&[0i64; 8]).unwrap();
    let call = own_cpu() - call_start;
    to_stepper.send(()).unwrap();
    stepper.join().unwrap();
    let (had, last) = (after.trainer_cpu_ns.unwrap(), pool.stats_snapshot().trainer_cpu_ns.unwrap());
    let grew = Duration::from_nanos(last.saturating_sub(had));
    assert!(
        last >= had && grew <= call + SCHEDSTAT_LAG,
        "the trainer CPU time went from {had} ns to {last} ns over one step on this thread, whose own clock \
         said {call:?} (allowed lag {SCHEDSTAT_LAG:?})"
    );
    assert!(pool.stats().others_share.is_some());
}
