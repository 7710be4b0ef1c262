//! What a handoff between two processes costs with each way of waiting: the figures
//! behind the engine's waiting policy (`docs/waiting.md`, "Waiting policy").
//!
//! Two processes (this one and a forked child) play ping-pong over two of the engine's
//! semaphores (`shmenv_engine::sync::Semaphore`) in a shared mapping: one post and one
//! acquire each way per round trip. Each row waits with one fixed strategy, either with
//! the two processes pinned to different cores or both on the same core (more runnable
//! processes than cores: the case where spinning is ruinous). Each row prints the median
//! round trip of 5 runs of ~0.3 s and the spread of those runs.
//!
//! The second table is a sync pool's handoff with no env and no engine around it: a
//! trainer posts a command semaphore of each of `n` workers, each worker acquires its own,
//! posts a shared one, and the trainer acquires `n` posts of it. Its rows with more
//! processes than cores give the floor an oversubscribed pool cannot go below with one
//! context switch per process and batch: the "one core" row divided by the processes is
//! what one switch between processes costs here.
//!
//! `cargo bench --bench wakeup`. Runs on the first two cores this process may use; needs two
//! for the "own cores" and "2 cores" rows.

use shmenv::WaitStrategy;
use shmenv_engine::sync::atomic::AtomicU32;
use shmenv_engine::sync::{Semaphore, WaitOutcome, Waiter};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The shared words, a cache line each: ping (count, want), pong (count, want), stop; for
/// the rounds, the done semaphore (line 3) and each worker's command semaphore (lines 4..).
struct Shared {
    base: *mut u8,
}

const LINE: usize = 128;

impl Shared {
    fn new() -> Shared {
        // SAFETY: an anonymous shared mapping of one page with no address hint; the result
        // is checked. It stays mapped in both processes for their lifetime (never unmapped).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
        Shared { base: base.cast() }
    }

    fn word(&self, line: usize, index: usize) -> &AtomicU32 {
        assert!(line * LINE + (index + 1) * 4 <= 4096);
        // SAFETY: the offset is in the page (checked above) and 4-aligned; the page is
        // zero-filled, mapped for the life of the process and only accessed atomically.
        unsafe { &*self.base.add(line * LINE + index * 4).cast::<AtomicU32>() }
    }

    fn ping(&self) -> Semaphore<'_> {
        Semaphore::new(self.word(0, 0), self.word(0, 1))
    }

    fn pong(&self) -> Semaphore<'_> {
        Semaphore::new(self.word(1, 0), self.word(1, 1))
    }

    fn stop(&self) -> &AtomicU32 {
        self.word(2, 0)
    }

    fn done(&self) -> Semaphore<'_> {
        Semaphore::new(self.word(3, 0), self.word(3, 1))
    }

    fn command(&self, worker: usize) -> Semaphore<'_> {
        Semaphore::new(self.word(4 + worker, 0), self.word(4 + worker, 1))
    }
}

/// The most workers a round may have: one command line each after the first four lines.
const MAX_WORKERS: usize = 4096 / LINE - 4;

fn pin_to(core: usize) {
    set_cpus(&[core]);
}

/// Lets this process run on `cpus` only (panics if the kernel refuses: a row would
/// silently measure something else).
fn set_cpus(cpus: &[usize]) {
    // SAFETY: cpu_set_t is plain bits (all-zero is the empty set); CPU_SET writes bit `c`
    // (< CPU_SETSIZE, checked) and sched_setaffinity reads the set for this thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            assert!(c < libc::CPU_SETSIZE as usize);
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "sched_setaffinity({cpus:?}): {}", std::io::Error::last_os_error());
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: as in `set_cpus`; sched_getaffinity fills the set of the size passed, and
    // CPU_ISSET reads bits below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

fn acquire(sem: Semaphore<'_>, waiter: &mut Waiter) {
    match sem.acquire(1, waiter, None, || None::<()>) {
        Ok(()) => {}
        Err(WaitOutcome::Aborted(())) | Err(WaitOutcome::TimedOut) => unreachable!("no deadline, no check"),
    }
}

/// One run: round trips for about `slice`; returns the mean round trip.
fn run(strategy: WaitStrategy, cores: (usize, usize), slice: Duration) -> Duration {
    let shared = Shared::new();
    let policy = strategy.policy(2, if cores.0 == cores.1 { 1 } else { 2 });
    // SAFETY: this bench has no other threads when it forks (main only), so the child may
    // run ordinary Rust code; it leaves with _exit and never returns into main.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        pin_to(cores.1);
        let mut waiter = Waiter::new(policy);
        loop {
            acquire(shared.ping(), &mut waiter);
            if shared.stop().load(Ordering::Acquire) != 0 {
                // SAFETY: _exit ends the child without running the parent's atexit state.
                unsafe { libc::_exit(0) };
            }
            shared.pong().post();
        }
    }
    pin_to(cores.0);
    let mut waiter = Waiter::new(policy);
    let (start, mut trips) = (Instant::now(), 0u32);
    while start.elapsed() < slice || trips == 0 {
        shared.ping().post();
        acquire(shared.pong(), &mut waiter);
        trips += 1;
    }
    let elapsed = start.elapsed();
    shared.stop().store(1, Ordering::Release);
    shared.ping().post();
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out-pointer.
    unsafe { libc::waitpid(child, &mut status, 0) };
    elapsed / trips
}

/// Where a round's processes run, on the two cores the rounds are given: all on the
/// first, or the workers spread over both (worker `w` on the `w % 2`-th) with the trainer
/// on either, or everyone on either.
#[derive(Clone, Copy)]
enum Placement {
    OneCore,
    Spread,
    Unpinned,
}

/// One run of rounds: the trainer posts each of `workers` workers' command semaphore and
/// acquires as many posts of the done semaphore; returns the mean round. With `chains`
/// `k`, the trainer posts only workers `0..k` and worker `w` posts worker `w + k` before
/// it posts back (one wake-up that goes through the workers, `k` at a time; spread over
/// two cores with `k` 2, each chain stays on one core).
fn run_rounds(
    strategy: WaitStrategy,
    (workers, chains): (usize, Option<usize>),
    placement: Placement,
    pair: [usize; 2],
    slice: Duration,
) -> Duration {
    assert!((1..=MAX_WORKERS).contains(&workers));
    let shared = Shared::new();
    set_cpus(&pair);
    let policy = strategy.policy(workers + 1, if let Placement::OneCore = placement { 1 } else { 2 });
    let mut children = Vec::with_capacity(workers);
    for worker in 0..workers {
        // SAFETY: as in `run`: no other threads when forking; the child leaves with _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
        if child == 0 {
            // SAFETY: prctl with PR_SET_PDEATHSIG and a signal number: this child is killed
            // if the bench ends early (a failed round), instead of sleeping on forever.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            match placement {
                Placement::OneCore => pin_to(pair[0]),
                Placement::Spread => pin_to(pair[worker % 2]),
                Placement::Unpinned => {}
            }
            let mut waiter = Waiter::new(policy);
            loop {
                acquire(shared.command(worker), &mut waiter);
                if let Some(next) = chains.map(|k| worker + k).filter(|&next| next < workers) {
                    shared.command(next).post();
                }
                if shared.stop().load(Ordering::Acquire) != 0 {
                    // SAFETY: _exit ends the child without running the parent's atexit state.
                    unsafe { libc::_exit(0) };
                }
                shared.done().post();
            }
        }
        children.push(child);
    }
    if let Placement::OneCore = placement {
        pin_to(pair[0]);
    }
    let mut waiter = Waiter::new(policy);
    let (start, mut rounds) = (Instant::now(), 0u32);
    let heads = chains.unwrap_or(workers).min(workers);
    while start.elapsed() < slice || rounds == 0 {
        (0..heads).for_each(|w| shared.command(w).post());
        let deadline = Instant::now() + Duration::from_secs(10);
        if shared.done().acquire(workers as u32, &mut waiter, Some(deadline), || None::<()>).is_err() {
            panic!("a round took over 10 s: a worker is gone or stopped");
        }
        rounds += 1;
    }
    let elapsed = start.elapsed();
    shared.stop().store(1, Ordering::Release);
    (0..heads).for_each(|w| shared.command(w).post());
    for child in children {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid out-pointer.
        unsafe { libc::waitpid(child, &mut status, 0) };
    }
    elapsed / rounds
}

fn median_and_spread(mut runs: Vec<Duration>) -> (Duration, Duration, Duration) {
    runs.sort();
    (runs[runs.len() / 2], runs[0], runs[runs.len() - 1])
}

fn show(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn main() {
    let allowed = allowed_cpus();
    let (a, b) = (allowed[0], allowed.get(1).copied());
    println!("round trip between two processes (post + acquire each way), median of 5 runs [spread]");
    let mut rows: Vec<(&str, WaitStrategy, (usize, usize))> = Vec::new();
    if let Some(b) = b {
        rows.push(("own cores, spin", WaitStrategy::Spin, (a, b)));
        rows.push(("own cores, yield", WaitStrategy::Yield, (a, b)));
        rows.push(("own cores, futex (block)", WaitStrategy::Block, (a, b)));
    }
    rows.push(("same core, yield", WaitStrategy::Yield, (a, a)));
    rows.push(("same core, futex (block)", WaitStrategy::Block, (a, a)));
    rows.push(("same core, spin", WaitStrategy::Spin, (a, a)));
    for (label, strategy, pins) in rows {
        let runs = (0..5).map(|_| run(strategy, pins, Duration::from_millis(300))).collect();
        let (median, low, high) = median_and_spread(runs);
        println!("  {label:<26} {:>10}   [{} - {}]", show(median), show(low), show(high));
    }
    rounds([a, b.unwrap_or(a)], b.is_some());
    set_cpus(&allowed);
}

/// The second table: a sync round of a trainer and 8 workers (9 processes), and of 1, on
/// the two cores `pair` (the rows that need two only when `two` says they differ).
fn rounds(pair: [usize; 2], two: bool) {
    println!(
        "a round: the trainer posts each worker, each worker posts back once, median of 5 runs [spread]"
    );
    use Placement::{OneCore, Spread, Unpinned};
    use WaitStrategy::{Block, Yield};
    let mut rows: Vec<(&str, WaitStrategy, usize, Option<usize>, Placement)> = vec![
        ("1 worker, one core, yield", Yield, 1, None, OneCore),
        ("8 workers, one core, yield", Yield, 8, None, OneCore),
    ];
    if two {
        rows.extend([
            ("8 workers, 2 cores, yield", Yield, 8, None, Unpinned),
            ("8 workers, spread, yield", Yield, 8, None, Spread),
            ("8 workers, 2 cores, futex", Block, 8, None, Unpinned),
            ("8 workers, a chain, futex", Block, 8, Some(1), Unpinned),
            ("8 workers, spread, 2 chains, futex", Block, 8, Some(2), Spread),
            ("8 workers, spread, 2 chains, yield", Yield, 8, Some(2), Spread),
        ]);
    }
    for (label, strategy, workers, chains, placement) in rows {
        let slice = Duration::from_millis(300);
        let runs = (0..5).map(|_| run_rounds(strategy, (workers, chains), placement, pair, slice)).collect();
        let (median, low, high) = median_and_spread(runs);
        let per_switch = match placement {
            OneCore => format!("   {} a process", show(median / (workers as u32 + 1))),
            _ => String::new(),
        };
        println!("  {label:<34} {:>10}   [{} - {}]{per_switch}", show(median), show(low), show(high));
    }
}
