//! The futex: sleep while a shared word holds a value, and wake whoever sleeps on it.
//!
//! Under loom a futex is a condition variable: the value check and the wait happen under
//! one lock, as the kernel checks and sleeps atomically, so a wake cannot be lost between them.

use super::atomic::AtomicU32;
use std::time::Duration;

#[cfg(loom)]
use super::atomic::Ordering;

#[cfg(loom)]
loom::lazy_static! {
    static ref FUTEX: (loom::sync::Mutex<()>, loom::sync::Condvar) =
        (loom::sync::Mutex::new(()), loom::sync::Condvar::new());
}

#[cfg(loom)]
pub(super) fn futex_wait(word: &AtomicU32, expected: u32, _timeout: Duration) {
    let guard = FUTEX.0.lock().unwrap();
    if word.load(Ordering::Relaxed) == expected {
        drop(FUTEX.1.wait(guard).unwrap());
    }
}

#[cfg(loom)]
pub(super) fn futex_wake(_word: &AtomicU32) {
    let _guard = FUTEX.0.lock().unwrap();
    FUTEX.1.notify_all();
}

/// `FUTEX_WAIT` on a shared (not process-private) word, with a timeout.
#[cfg(not(loom))]
pub(super) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
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
pub(super) fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not access memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}
