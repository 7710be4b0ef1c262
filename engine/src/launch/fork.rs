//! Fork detection: a pool belongs to the process that built it.
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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" fn in_child() {
    // Async-signal-safe: one atomic add, no allocation, no lock.
    GENERATION.fetch_add(1, Ordering::Relaxed);
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
        REGISTER.call_once(|| {
            // SAFETY: registers a child handler that only does an atomic add (allowed
            // between fork and the child's return from fork); no prepare/parent handlers.
            unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        });
        Owner { pid: current_pid(), generation: GENERATION.load(Ordering::Relaxed) }
    }

    /// Whether the calling process is this owner (no fork happened since).
    #[inline]
    pub fn is_current(&self) -> bool {
        GENERATION.load(Ordering::Relaxed) == self.generation
    }

    /// The owner's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// This process's id.
pub fn current_pid() -> u32 {
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
}
