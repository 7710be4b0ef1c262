//! A private channel between the trainer and one worker process, for what does not go
//! through the region (Python's `call`/`get_attr`/`set_attr`, reset options, infos).
//!
//! There is no rendezvous: before each worker is spawned the supervisor makes a
//! `socketpair(AF_UNIX, SOCK_STREAM)`; the worker inherits one end at exec (its fd number
//! in the environment variable [`CALL_SOCKET_ENV`]) and the trainer keeps the other
//! ([`Pool::take_call_socket`](crate::Pool::take_call_socket)). The pair has no name, no
//! address and no listener, so no other process (of this user or another) can connect to
//! it; only the worker (and what it forks) holds the other end. Each replacement worker
//! gets a fresh pair.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The environment variable that tells a worker the fd number of its end of the call
/// socket (set only when the command asks for one, [`WorkerCommand::call_socket`]).
///
/// [`WorkerCommand::call_socket`]: crate::WorkerCommand::call_socket
pub const CALL_SOCKET_ENV: &str = "SHMENV_CALL_FD";

/// The trainer's end of one worker process's call socket.
#[derive(Debug)]
pub struct CallSocket {
    /// The worker process at the other end.
    pub pid: u32,
    /// The trainer's end: a connected `AF_UNIX` stream socket, close-on-exec.
    pub fd: OwnedFd,
}

/// A connected pair of Unix stream sockets, both close-on-exec: (the trainer's end, the
/// worker's end). The child clears close-on-exec on its copy of the worker's end between
/// fork and exec.
pub(super) fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two fds socketpair writes; the arguments are valid.
    let rc = unsafe {
        libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr())
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created by socketpair and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn the_pair_is_connected_and_close_on_exec() {
        let (trainer, worker) = socket_pair().unwrap();
        for fd in [&trainer, &worker] {
            // SAFETY: F_GETFD on an fd we own.
            let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert_eq!(
                flags & libc::FD_CLOEXEC,
                libc::FD_CLOEXEC,
                "fd {} is inherited at exec",
                fd.as_raw_fd()
            );
        }
        let (mut a, mut b) = (UnixStream::from(trainer), UnixStream::from(worker));
        a.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        b.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
    }
}
