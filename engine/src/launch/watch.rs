//! The supervisor thread's loop: it watches every worker (pidfd, or polling on old
//! kernels), copies their output, reaps them, serves respawn requests, and on shutdown gives
//! them [`SHUTDOWN_GRACE`] before killing the rest.

use super::{drain, Shared, Spawner, WorkerExit, OUTPUT_TAIL, SHUTDOWN_GRACE};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Child;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Reads what worker `w` wrote (without blocking): copies it to our stderr and keeps the
/// tail. Returns false once the pipe is closed (every writer gone).
fn pump_output(fd: &OwnedFd, w: usize, shared: &Shared) -> bool {
    let mut buf = [0u8; 8192];
    loop {
        // SAFETY: reading into a valid buffer of `buf.len()` bytes from an fd we own.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 {
            return false;
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            return e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted;
        }
        let chunk = &buf[..n as usize];
        let _ = std::io::stderr().write_all(chunk);
        let mut tails = shared.tails.lock().unwrap_or_else(|p| p.into_inner());
        let tail = &mut tails[w];
        tail.extend_from_slice(chunk);
        if tail.len() > OUTPUT_TAIL {
            let cut = tail.len() - OUTPUT_TAIL;
            tail.drain(..cut);
        }
    }
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a non-negative return is a fresh fd owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The workers a supervisor watches, by worker index.
struct Watched {
    children: Vec<Child>,
    /// Their output pipes (until closed).
    outputs: Vec<Option<OwnedFd>>,
    /// Their pidfds (kernels before 5.3 have none: the supervisor polls instead).
    pidfds: Vec<Option<OwnedFd>>,
    /// Not yet reaped.
    alive: Vec<bool>,
}

impl Watched {
    /// Serves the respawn requests (the pool's Restart policy); refused while `stopping`.
    fn serve_respawns(&mut self, shared: &Shared, spawner: &Spawner, stopping: bool) {
        let requests = std::mem::take(&mut *shared.respawns.lock().unwrap_or_else(|p| p.into_inner()));
        for (w, answer) in requests {
            let result = if stopping || self.alive.get(w) != Some(&false) {
                Err(io::Error::other(format!("worker {w} cannot be respawned now")))
            } else {
                spawner.spawn(w).map(|spawned| {
                    let pid = spawned.child.id();
                    shared.keep_call_socket(w, pid, spawned.call_socket);
                    self.pidfds[w] = pidfd_open(pid);
                    self.children[w] = spawned.child;
                    self.outputs[w] = Some(spawned.output);
                    self.alive[w] = true;
                    let mut exits = shared.exits.lock().unwrap_or_else(|p| p.into_inner());
                    exits[w] = None;
                    shared.any_exited.store(exits.iter().any(Option::is_some), Ordering::Release);
                    pid
                })
            };
            let _ = answer.send(result);
        }
    }

    /// What to poll: the stop and poke eventfds, the live workers' pidfds, the output pipes.
    fn poll_fds(&self, stop_fd: RawFd, poke_fd: RawFd) -> Vec<libc::pollfd> {
        let mut fds = vec![
            libc::pollfd { fd: stop_fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: poke_fd, events: libc::POLLIN, revents: 0 },
        ];
        for (w, p) in self.pidfds.iter().enumerate() {
            if let (Some(p), true) = (p, self.alive[w]) {
                fds.push(libc::pollfd { fd: p.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            }
        }
        for o in self.outputs.iter().flatten() {
            fds.push(libc::pollfd { fd: o.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        fds
    }

    /// Copies the workers' output, then reaps the workers that exited and records how.
    fn pump_and_reap(&mut self, shared: &Shared) {
        for (w, o) in self.outputs.iter_mut().enumerate() {
            if o.as_ref().is_some_and(|fd| !pump_output(fd, w, shared)) {
                *o = None;
            }
        }
        for (w, child) in self.children.iter_mut().enumerate() {
            if self.alive[w] && super::process_group::unreaped(child.id()) == Some(true) {
                // What it started goes with it, before its pid (the group id) is released.
                super::process_group::kill_group(child.id());
                if let Ok(Some(status)) = child.try_wait() {
                    self.alive[w] = false;
                    // Its last words first, so the error that reports the exit has them.
                    if let Some(fd) = &self.outputs[w] {
                        pump_output(fd, w, shared);
                    }
                    let mut exits = shared.exits.lock().unwrap_or_else(|p| p.into_inner());
                    exits[w] = Some(WorkerExit::from_status(status));
                    shared.any_exited.store(true, Ordering::Release);
                }
            }
        }
    }

    /// Kills and reaps the workers still alive, recording how they ended.
    fn kill_rest(&mut self, shared: &Shared) {
        let ended = super::process_group::kill_and_reap(&mut self.children);
        let mut exits = shared.exits.lock().unwrap_or_else(|p| p.into_inner());
        for (w, e) in ended.into_iter().enumerate() {
            if self.alive[w] {
                exits[w] = e.map(WorkerExit::from_status);
            }
        }
    }
}

/// Without pidfds (kernels before 5.3) the supervisor looks for exits this often.
const POLL_WITHOUT_PIDFDS_MS: i32 = 10;
/// While stopping, the longest poll before the grace deadline is checked again.
const STOPPING_POLL_MS: u128 = 50;

/// The supervisor loop: wait for worker exits or the stop request.
pub(super) fn supervise(
    children: Vec<Child>,
    outputs: Vec<Option<OwnedFd>>,
    shared: &Shared,
    stop_fd: RawFd,
    poke_fd: RawFd,
    spawner: &Spawner,
) {
    let pidfds: Vec<Option<OwnedFd>> = children.iter().map(|c| pidfd_open(c.id())).collect();
    let have_pidfds = pidfds.iter().all(Option::is_some);
    let alive = vec![true; children.len()];
    let mut watched = Watched { children, outputs, pidfds, alive };
    let mut stop_at: Option<Instant> = None;
    loop {
        // Respawn requests (the pool's Restart policy), served while not stopping.
        drain(poke_fd);
        watched.serve_respawns(shared, spawner, stop_at.is_some());
        let mut fds = watched.poll_fds(stop_fd, poke_fd);
        let timeout_ms = match stop_at {
            Some(t) => {
                t.saturating_duration_since(Instant::now()).as_millis().clamp(1, STOPPING_POLL_MS) as i32
            }
            None if have_pidfds => -1,
            None => POLL_WITHOUT_PIDFDS_MS,
        };
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if fds[0].revents & libc::POLLIN != 0 && stop_at.is_none() {
            stop_at = Some(Instant::now() + SHUTDOWN_GRACE);
        }
        watched.pump_and_reap(shared);
        // All gone: done once stopping; until then a respawn request may still come.
        if !watched.alive.contains(&true) && stop_at.is_some() {
            break;
        }
        if stop_at.is_some_and(|t| Instant::now() >= t) {
            watched.kill_rest(shared);
            break;
        }
    }
}
