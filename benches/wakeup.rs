//! What a handoff between two processes costs with each way of waiting: the figures
//! behind the engine's waiting policy (`docs/architecture.md`, "Waiting policy").
//!
//! Two processes (this one and a forked child) play ping-pong over two of the engine's
//! semaphores (`shmenv::engine::sync::Semaphore`) in a shared mapping: one post and one
//! acquire each way per round trip. Each row waits with one fixed strategy, either with
//! the two processes pinned to different cores or both on the same core (more runnable
//! processes than cores: the case where spinning is ruinous). Each row prints the median
//! round trip of 5 runs of ~0.3 s and the spread of those runs.
//!
//! `cargo bench --bench wakeup`. Needs 2 cores for the "own cores" rows.

use shmenv::engine::sync::atomic::AtomicU32;
use shmenv::engine::sync::{Semaphore, WaitOutcome, Waiter};
use shmenv::WaitStrategy;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The shared words: ping (count, want), pong (count, want), stop; a cache line each.
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
}

fn pin_to(core: usize) {
    // SAFETY: cpu_set_t is plain bits (all-zero is the empty set); CPU_SET writes bit
    // `core` (< CPU_SETSIZE, checked) and sched_setaffinity reads the set for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert!(core < libc::CPU_SETSIZE as usize);
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
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
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!("round trip between two processes (post + acquire each way), median of 5 runs [spread]");
    let mut rows: Vec<(&str, WaitStrategy, (usize, usize))> = Vec::new();
    if cores >= 2 {
        rows.push(("own cores, spin", WaitStrategy::Spin, (0, 1)));
        rows.push(("own cores, yield", WaitStrategy::Yield, (0, 1)));
        rows.push(("own cores, futex (block)", WaitStrategy::Block, (0, 1)));
    }
    rows.push(("same core, yield", WaitStrategy::Yield, (0, 0)));
    rows.push(("same core, futex (block)", WaitStrategy::Block, (0, 0)));
    rows.push(("same core, spin", WaitStrategy::Spin, (0, 0)));
    for (label, strategy, pins) in rows {
        let mut runs: Vec<Duration> =
            (0..5).map(|_| run(strategy, pins, Duration::from_millis(300))).collect();
        runs.sort();
        println!("  {label:<26} {:>10}   [{} - {}]", show(runs[2]), show(runs[0]), show(runs[4]));
    }
}
