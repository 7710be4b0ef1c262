//! Running out of processes or threads: the CLI's own threads are started through
//! [`spawn_thread`], which returns a typed error instead of panicking; errors that come
//! back from the pool (a worker or its supervisor thread that could not be started) get a
//! hint naming the limit; and a panic hook turns a thread start that fails anywhere else in
//! this process (in a library) into the same clear error, exit code 1, no backtrace.
//!
//! On Linux a new thread and a new process both count against `RLIMIT_NPROC` (`ulimit -u`),
//! per user: when it is reached, `clone` fails with `EAGAIN` ("Resource temporarily
//! unavailable"). A pids cgroup limit or the kernel's `threads-max` fail the same way.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::panic::PanicHookInfo;
use std::thread::JoinHandle;

/// What to do when a process or thread cannot be started for want of room.
fn advice() -> String {
    let limit = match nproc_limit() {
        Some(n) => format!("ulimit -u is {n} here"),
        None => "ulimit -u is unlimited here, so a pids cgroup or the kernel's threads-max limit is the likely one"
            .into(),
    };
    format!(
        "the limit on processes and threads was reached ({limit}; it counts every process and thread of this user, \
         and each pool worker is a process): raise it with `ulimit -u`, end other processes of this user, or use \
         fewer --workers (or --trainer-threads)"
    )
}

/// The soft `RLIMIT_NPROC` of this process (`None`: unlimited or unknown).
pub fn nproc_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid out-pointer for getrlimit, which writes only into it.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// A thread of the CLI could not be started.
#[derive(Debug)]
pub struct ThreadError {
    /// Which thread (e.g. "the soak's killer thread").
    what: String,
    /// The OS error.
    source: io::Error,
}

impl fmt::Display for ThreadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot start {}: {}", self.what, self.source)?;
        if is_out_of_tasks(&self.source) {
            write!(f, "; {}", advice())?;
        }
        Ok(())
    }
}

impl StdError for ThreadError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.source)
    }
}

/// Starts a thread named `name` running `f`; `what` says which thread in the error.
pub fn spawn_thread<F, T>(name: &str, what: &str, f: F) -> Result<JoinHandle<T>, ThreadError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|source| ThreadError { what: what.into(), source })
}

/// An OS error of `clone`/`fork` meaning no process or thread may be added.
fn is_out_of_tasks(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EAGAIN)
}

/// The message of a command's error, with the advice on the process limit added when a
/// process or thread could not be started for want of room (`EAGAIN` anywhere in its
/// chain of causes, typed or, from errors that keep only the text, as `(os error 11)`).
pub fn message(e: &(dyn StdError + 'static)) -> String {
    let text = e.to_string();
    if e.is::<ThreadError>() {
        return text;
    }
    let eagain = format!("(os error {})", libc::EAGAIN);
    let (mut cause, mut out_of_tasks) = (Some(e), false);
    while let Some(c) = cause {
        out_of_tasks |=
            c.downcast_ref::<io::Error>().is_some_and(is_out_of_tasks) || c.to_string().contains(&eagain);
        cause = c.source();
    }
    let starting = text.contains("start") || text.contains("spawn");
    match out_of_tasks && starting {
        true => format!("{text}; {}", advice()),
        false => text,
    }
}

/// Installs a panic hook that ends the process with `error: cannot start a thread (in F):
/// ...` and exit code 1 when a thread start fails with a panic (`std::thread::spawn`
/// inside a library), naming the function that asked for the thread; other panics go to
/// the hook installed before.
pub fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied());
        match message {
            Some(m) if m.starts_with("failed to spawn thread") => {
                eprintln!("error: cannot start a thread (in {}): {m}; {}", spawner(), advice());
                std::process::exit(1);
            }
            _ => previous(info),
        }
    }));
}

/// The function that called `std::thread::spawn` (the first frame of the backtrace after
/// std's spawn that is not std's), or "an unknown function" without symbols.
fn spawner() -> String {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    let frames: Vec<&str> = trace
        .lines()
        .filter_map(|l| l.trim_start().split_once(": "))
        .filter(|(index, _)| index.chars().all(|c| c.is_ascii_digit()))
        .map(|(_, name)| name.trim())
        .collect();
    let library = |f: &&str| ["std::", "core::", "alloc::", "<", "__rust"].iter().any(|p| f.starts_with(p));
    frames
        .iter()
        .skip_while(|f| !f.starts_with("std::thread"))
        .find(|f| !library(f))
        .map_or_else(|| "an unknown function".into(), |f| f.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eagain_from_a_start_gets_the_advice_and_other_errors_do_not() {
        let spawn = io::Error::from_raw_os_error(libc::EAGAIN);
        let text = message(&io::Error::other(format!("cannot start worker program x: {spawn}")));
        assert!(text.contains("the limit on processes and threads was reached"), "{text}");
        let other = message(&io::Error::other("no such env"));
        assert_eq!(other, "no such env");
        let thread = ThreadError { what: "the test's thread".into(), source: spawn };
        assert!(thread.to_string().starts_with("cannot start the test's thread: Resource temporarily"));
        assert!(thread.to_string().contains("ulimit -u"), "{thread}");
    }
}
