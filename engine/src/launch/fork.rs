//! Fork detection: a pool belongs to the process that built it, and a copy of a worker or
//! of the trainer that env code made with `fork()` never touches the pool.
//!
//! After `fork()`, the child has a copy of the trainer's memory, including every pool, but
//! not its threads (the supervisor thread), and the shared region and the workers are
//! still the parent's. A pool used or dropped there would drive or close the parent's
//! workers. So each pool records the fork generation it was built in: a process-wide
//! counter that a `pthread_atfork` child handler increments. A pool whose generation is
//! not the current one is inert: every call returns [`crate::PoolFailure::ForeignProcess`],
//! and dropping or closing it touches nothing shared (no command, no post, no kill, no
//! join of a thread that does not exist in this process).
//!
//! A counter rather than `getpid()` on every call: it costs one atomic load per call, and
//! a pid can repeat (a grandchild may get the trainer's old pid in another pid namespace).
//!
//! Env code may fork too (in a worker, or in the trainer's own shard). A child that carries
//! on from there returns into shmenv's loop, in the middle of a command: it would write
//! rows, post and take semaphores, and answer commands meant for its parent. Two defenses:
//!
//! - The same child handler replaces the shared mapping that the process (a worker:
//!   [`guard_in_children`]) or the forking thread (the trainer while it steps its shard:
//!   [`ThreadGuard`]) named with private zero pages, so whatever the copy runs (env code
//!   writing an observation, say) reaches nothing shared.
//! - The loops check the generation after every env call returns and, in a copy, print one
//!   line and `_exit` at once ([`stop_forked_copy`], exit code [`FORKED_COPY_EXIT`]).
//!
//! A child that execs or exits itself never returns into shmenv, and is not affected (a
//! fork then exec, as `subprocess` does, pays one `mmap` call in the child).

use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

/// A shared mapping of a worker process that its forked children must not share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedMapping {
    /// The pool's region.
    Region = 0,
    /// The trainer's info area (Python-hosted envs write their numeric infos there).
    Infos = 1,
}

/// Per [`SharedMapping`], the mapping a child of this process must not share: a pointer
/// to an immutable, leaked `(address, length)`, so the child handler reads both words of
/// one registration, never the address of one and the length of another (null: none).
static PROCESS_MAPPINGS: [AtomicPtr<(usize, usize)>; 2] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 2];

thread_local! {
    /// The mapping a child forked by this thread must not share (the trainer's region while
    /// the thread steps its shard): address, length (0: none).
    static THREAD_MAPPING: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The exit code of a copy of a worker or trainer that env code made with `fork()` and
/// that returned into shmenv's loop ([`stop_forked_copy`]).
pub const FORKED_COPY_EXIT: i32 = 5;

extern "C" fn in_child() {
    // Async-signal-safe: atomic and thread-local loads (const-initialized, no destructor:
    // no lazy registration), an atomic add and `mmap`; no allocation, no lock.
    GENERATION.fetch_add(1, Ordering::Relaxed);
    for slot in &PROCESS_MAPPINGS {
        let mapping = slot.load(Ordering::Acquire);
        if !mapping.is_null() {
            // SAFETY: a non-null pointer is a leaked `Box` that `guard_in_children` stored
            // (Release, paired with the Acquire above) and never frees or changes.
            let (addr, len) = unsafe { *mapping };
            blank(addr, len);
        }
    }
    if let Ok((addr, len)) = THREAD_MAPPING.try_with(Cell::get) {
        blank(addr, len);
    }
}

/// Replaces `len` bytes at `addr` (a shared mapping of the parent) with private zero pages
/// in this child; if that fails, unmaps them (a touch then faults instead of writing).
fn blank(addr: usize, len: usize) {
    if len == 0 {
        return;
    }
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE;
    // SAFETY: `addr..addr + len` is a shared mapping that its owner registered and keeps
    // registered only while it is mapped; in this freshly forked child it is replaced in
    // place (same addresses, private zero pages): every pointer into it stays valid to read
    // and write, and no longer reaches the parent's memory. What the copy's env code holds
    // there now reads zeros (it is stopped when it returns into shmenv). Only syscalls:
    // async-signal-safe.
    unsafe {
        let mapped = libc::mmap(addr as *mut libc::c_void, len, prot, flags, -1, 0);
        if mapped == libc::MAP_FAILED {
            libc::munmap(addr as *mut libc::c_void, len);
        }
    }
}

/// Registers the fork handler (once per process).
fn register() {
    REGISTER.call_once(|| {
        // SAFETY: registers a child handler that only does what `in_child` says (allowed
        // between fork and the child's return from fork); no prepare/parent handlers.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

/// A worker: every child this process forks from now on gets private zero pages in place
/// of `len` bytes at `addr`, the mapping `which` (called again after each remap, with the
/// mapping's new address). `len` 0 stops it. Each call leaks 16 bytes (a worker calls it
/// a few times in its life), so a child handler running meanwhile never reads a freed one.
pub fn guard_in_children(which: SharedMapping, addr: usize, len: usize) {
    register();
    let mapping = if len == 0 { std::ptr::null_mut() } else { Box::into_raw(Box::new((addr, len))) };
    PROCESS_MAPPINGS[which as usize].store(mapping, Ordering::Release);
}

/// While it lives, a child that the calling thread forks gets private zero pages in place
/// of the mapping it names (the trainer's region while it steps its own shard).
#[must_use = "the guard holds only while it lives"]
pub struct ThreadGuard {
    previous: (usize, usize),
}

impl ThreadGuard {
    /// Guards `len` bytes at `addr`, which must stay mapped while the guard lives.
    pub fn new(addr: usize, len: usize) -> ThreadGuard {
        register();
        ThreadGuard { previous: THREAD_MAPPING.with(|m| m.replace((addr, len))) }
    }
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        let previous = self.previous;
        THREAD_MAPPING.with(|m| m.set(previous));
    }
}

/// Where a pool belongs: the process (pid, for messages) and its fork generation.
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    pid: u32,
    generation: u64,
}

impl Owner {
    /// The calling process. Registers the fork handler on first use.
    pub fn current() -> Owner {
        register();
        Owner { pid: current_pid(), generation: GENERATION.load(Ordering::Relaxed) }
    }

    /// Whether the calling process is this owner (no fork happened since).
    #[inline]
    pub(crate) fn is_current(&self) -> bool {
        GENERATION.load(Ordering::Relaxed) == self.generation
    }

    /// The owner's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Stops this process at once when it is a copy of the owner made by `fork()` (see
    /// [`stop_forked_copy`]): `place` and `env` say where (printed only then). One atomic
    /// load otherwise: the loops call it after every env call.
    #[inline(always)]
    pub fn stop_if_copy(&self, place: Place, env: Option<usize>) {
        if !self.is_current() {
            stop_forked_copy(self.pid, place, env);
        }
    }
}

/// Where a forked copy was caught, for its line on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In worker `n`.
    Worker(usize),
    /// In the trainer, stepping its own shard.
    Trainer,
}

/// `place` and `env` as words: "of shmenv worker 0, in env 3".
struct Where(Place, Option<usize>);

impl std::fmt::Display for Where {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Place::Worker(worker) => write!(f, "of shmenv worker {worker}")?,
            Place::Trainer => f.write_str("of the trainer, stepping its own shard")?,
        }
        match self.1 {
            Some(env) => write!(f, ", in env {env}"),
            None => Ok(()),
        }
    }
}

/// Ends this process, a copy of process `owner` that env code made with `fork()` and that
/// returned into shmenv: prints one line on stderr and `_exit`s with [`FORKED_COPY_EXIT`],
/// before it writes the region, posts or waits a semaphore or answers a command (its
/// parent carries on). No allocation, no lock, no destructor, no exit handler.
#[cold]
#[inline(never)]
pub fn stop_forked_copy(owner: u32, place: Place, env: Option<usize>) -> ! {
    use std::io::Write;
    let mut buf = [0u8; 512];
    let mut out = std::io::Cursor::new(&mut buf[..]);
    // A line cut at 512 bytes is still a line worth printing.
    let _ = writeln!(
        out,
        "shmenv: process {} is a copy of process {owner} ({}) made by fork() inside env code; it \
         returned into shmenv, which stopped it (exit code {FORKED_COPY_EXIT}) before it touched the pool. \
         Env code that forks must exec or _exit in the child",
        current_pid(),
        Where(place, env)
    );
    let len = out.position() as usize;
    if let Some(last) = buf[..len].last_mut() {
        *last = b'\n'; // (A cut line ends with one too.)
    }
    // SAFETY: write(2) reads `len` initialized bytes of `buf`; _exit(2) ends the process
    // without running anything of the parent's state (no atexit handler, no destructor).
    unsafe {
        libc::write(2, buf.as_ptr().cast(), len);
        libc::_exit(FORKED_COPY_EXIT)
    }
}

/// This process's id.
pub(crate) fn current_pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_owner_is_current() {
        let owner = Owner::current();
        assert!(owner.is_current());
        assert_eq!(owner.pid(), std::process::id());
    }

    #[test]
    fn a_thread_guard_restores_what_it_replaced() {
        let outer = ThreadGuard::new(4096, 8192);
        {
            let _inner = ThreadGuard::new(1 << 20, 4096);
            assert_eq!(THREAD_MAPPING.with(Cell::get), (1 << 20, 4096));
        }
        assert_eq!(THREAD_MAPPING.with(Cell::get), (4096, 8192));
        drop(outer);
        assert_eq!(THREAD_MAPPING.with(Cell::get), (0, 0));
    }
}
