//! The worker's panic hook: a panic's message and location, never a backtrace.
//!
//! Why not std's hook: it holds its backtrace lock while it formats the message and
//! captures the backtrace, and with `RUST_BACKTRACE` set the allocation-error handler
//! takes that lock too, to print a backtrace of its own. An env whose panic message (or the
//! capture) cannot allocate would then wait forever on a lock its own thread holds: a hung
//! worker instead of a dead one. This hook formats the message while holding no lock (if
//! that cannot allocate, the allocation-error handler aborts the process, which the trainer
//! reports as `WorkerDied`) and then writes it. The trainer also starts workers with
//! `RUST_BACKTRACE=0`, so the allocation-error handler never captures a backtrace either.

use std::io::Write;
use std::panic::PanicHookInfo;

/// Installs [`print()`] as the process's panic hook. The worker host does this first thing.
pub fn install() {
    std::panic::set_hook(Box::new(print));
}

/// Writes `shmenv worker (pid P): panicked at FILE:LINE: MESSAGE` to stderr. The message is
/// also reported to the trainer (`EnvPanicked`); this line is for the worker's log.
pub fn print(info: &PanicHookInfo<'_>) {
    let line = format!("shmenv worker (pid {}): {info}\n", std::process::id());
    let _ = std::io::stderr().write_all(line.as_bytes());
}
