//! Each worker leads a process group of its own, so that whatever it starts (an env's
//! helper process, a simulator server) can be ended with it: such a process inherits the
//! region's fd and would otherwise keep it, and run on, after the pool is closed.
//!
//! The group is killed just before the worker is reaped, while its pid (the group id) still
//! names a zombie and cannot have been reused. A process that leaves the group on purpose
//! (`setsid`, `setpgid`, a daemon's double fork) is not reached.

use std::process::{Child, ExitStatus};

/// The state of our child `pid`, without reaping it: `Some(true)` exited (a zombie),
/// `Some(false)` running, `None` already reaped.
pub(crate) fn unreaped(pid: u32) -> Option<bool> {
    // SAFETY: siginfo_t is plain data (all-zero is valid); waitid with WNOWAIT only fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: `info` is a valid out-pointer; P_PID names our own child.
    if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } != 0 {
        return None;
    }
    // SAFETY: waitid filled `info` (si_pid stays 0 when the child has not exited); reading
    // si_pid of a SIGCHLD-kind siginfo is valid.
    Some(unsafe { info.si_pid() } != 0)
}

/// SIGKILLs every process in the group that worker `pid` leads (the worker too, if alive).
/// Call only while the worker is unreaped (alive or a zombie).
pub(crate) fn kill_group(pid: u32) {
    // SAFETY: kill has no memory preconditions; a negative pid names the process group,
    // which is ours: the worker created it and has not been reaped.
    unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
}

/// Kills the children still running and everything in their groups, and reaps all;
/// returns how each ended.
pub(crate) fn kill_and_reap(children: &mut [Child]) -> Vec<Option<ExitStatus>> {
    children
        .iter_mut()
        .map(|c| {
            if unreaped(c.id()).is_some() {
                kill_group(c.id());
            }
            c.wait().ok()
        })
        .collect()
}
