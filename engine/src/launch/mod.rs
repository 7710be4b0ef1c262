//! Worker launch and supervision.
//!
//! Workers are started by exec'ing a worker program (never a bare fork; the trainer's own
//! executable only when its `main` serves workers first, see [`program`][program]), from
//! a supervisor thread that lives exactly as long as the pool.
//! That thread matters: `PR_SET_PDEATHSIG` fires when the *thread* that forked the child
//! exits, so forking from whatever thread built the pool would kill the workers when that
//! thread ends. The supervisor also watches every worker through a pidfd, records how it
//! ended, and on shutdown gives workers a bounded grace period before killing and reaping
//! them, so dropping a pool never hangs and never leaves a zombie.
//!
//! [`program`][program] says which program that is; [`CpuAffinity`] pins workers to
//! cores; `memory` reads how much memory this process may still use (the pool checks its
//! region against it before creating it); `watch` is the supervisor's loop;
//! `process_group` ends whatever a worker started along with it; [`fork`][fork] makes a
//! pool inert in a forked child of its trainer.
//!
//! [program]: crate::launch::program
//! [fork]: crate::launch::fork

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod affinity;
mod call_socket;
pub mod fork;
pub(crate) mod memory;
pub(crate) mod numa;
pub(crate) mod process_group;
pub mod program;
mod watch;

pub use affinity::CpuAffinity;
pub(crate) use affinity::{place, runnable_tasks, OthersWatch};
pub use call_socket::{CallSocket, CALL_SOCKET_ENV};
use watch::supervise;

/// The first argument that tells a worker program it was started by a pool.
pub const WORKER_FLAG: &str = "--shmenv-worker";

/// How long workers get to exit by themselves after `Close` before they are killed.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How a worker process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerExit {
    /// It called `exit` with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl WorkerExit {
    pub(crate) fn from_status(s: ExitStatus) -> WorkerExit {
        match (s.code(), s.signal()) {
            (Some(c), _) => WorkerExit::Code(c),
            (None, Some(sig)) => WorkerExit::Signal(sig),
            (None, None) => WorkerExit::Code(-1),
        }
    }
}

impl std::fmt::Display for WorkerExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            WorkerExit::Code(c) => write!(f, "exited with code {c}"),
            WorkerExit::Signal(sig) => {
                // SAFETY: strsignal returns a pointer to a static or thread-local string
                // (or NULL); we copy it out before any other call.
                let name = unsafe {
                    let p = libc::strsignal(sig);
                    if p.is_null() {
                        String::from("unknown signal")
                    } else {
                        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
                    }
                };
                write!(f, "killed by signal {sig} ({name})")
            }
        }
    }
}

/// State shared between the pool and its supervisor thread.
#[derive(Debug)]
struct Shared {
    /// Set once any worker has exited (Release; the pool reads it with Acquire).
    any_exited: AtomicBool,
    /// How each worker ended, once it has.
    exits: Mutex<Vec<Option<WorkerExit>>>,
    /// The last bytes each worker wrote to its stdout and stderr (see [`OUTPUT_TAIL`]).
    tails: Mutex<Vec<Vec<u8>>>,
    /// Respawn requests for the supervisor thread: worker index and where to answer.
    respawns: Mutex<Vec<(usize, mpsc::Sender<io::Result<u32>>)>>,
    /// The trainer's end of each worker process's call socket, until taken
    /// ([`WorkerCommand::call_socket`]); a respawn replaces it.
    call_sockets: Mutex<Vec<Option<CallSocket>>>,
}

impl Shared {
    /// Keeps worker `w`'s new call socket (dropping an untaken one of its predecessor).
    fn keep_call_socket(&self, w: usize, pid: u32, fd: Option<OwnedFd>) {
        let mut sockets = self.call_sockets.lock().unwrap_or_else(|p| p.into_inner());
        sockets[w] = fd.map(|fd| CallSocket { pid, fd });
    }
}

/// A worker process just spawned: the child, the read end of its output pipe, and the
/// trainer's end of its call socket (when the command asks for one).
struct Spawned {
    child: Child,
    output: OwnedFd,
    call_socket: Option<OwnedFd>,
}

/// What the supervisor thread needs to start a worker (again).
struct Spawner {
    command: WorkerCommand,
    label: String,
    region_fd: RawFd,
    cpus: Vec<Option<usize>>,
}

/// Bytes of each worker's output kept for error reports (the last lines of a crash).
pub(crate) const OUTPUT_TAIL: usize = 4096;

/// How to start a worker process: a program, the arguments that go before the worker's
/// own (`--shmenv-worker <index> <fd> <parent pid>`), and environment variables to set.
///
/// ```
/// use shmenv_engine::launch::WorkerCommand;
/// // A Python worker: `python3 -m shmenv.worker --shmenv-worker ...`.
/// let cmd = WorkerCommand::new("python3").arg("-m").arg("shmenv.worker").env("PYTHONPATH", "/src");
/// assert_eq!(cmd.args.len(), 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The program to exec.
    pub program: PathBuf,
    /// Arguments before the worker's own.
    pub args: Vec<OsString>,
    /// Environment variables set for the worker (on top of the trainer's environment).
    pub env: Vec<(OsString, OsString)>,
    /// Whether each worker process gets a private call socket ([`WorkerCommand::call_socket`]).
    pub call_socket: bool,
}

impl WorkerCommand {
    /// Runs `program` with no extra arguments or environment.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        WorkerCommand { program: program.into(), args: Vec::new(), env: Vec::new(), call_socket: false }
    }

    /// Appends an argument that goes before the worker's own.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets an environment variable for the worker.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Gives each worker process one end of a fresh, unnamed Unix socket pair, inherited at
    /// exec (its fd number in [`CALL_SOCKET_ENV`]); the trainer takes the other end with
    /// [`Pool::take_call_socket`](crate::Pool::take_call_socket). A replacement worker gets
    /// a fresh pair. No other process can connect to it (see [`CallSocket`]).
    ///
    /// ```
    /// use shmenv_engine::launch::WorkerCommand;
    /// let cmd = WorkerCommand::new("python3").arg("-m").arg("shmenv.worker").call_socket();
    /// assert!(cmd.call_socket);
    /// ```
    pub fn call_socket(mut self) -> Self {
        self.call_socket = true;
        self
    }
}

/// The supervisor of one pool's workers.
#[derive(Debug)]
pub(crate) struct Supervisor {
    shared: Arc<Shared>,
    pids: Vec<u32>,
    stop: OwnedFd,
    /// Wakes the supervisor thread for a respawn request.
    poke: OwnedFd,
    thread: Option<JoinHandle<()>>,
    /// The process that started the workers (after a fork, the child's copy is inert).
    owner: fork::Owner,
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd with valid flags; returns a new fd or -1.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `efd` is a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(efd) })
}

fn signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a valid u64 to an eventfd we own.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

fn drain(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reading 8 bytes into a valid u64 from a non-blocking eventfd.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

impl Supervisor {
    /// Starts `num_workers` copies of `program`, each handed `region_fd`, from a new
    /// supervisor thread. Returns once every worker was spawned (or one spawn failed, or
    /// `deadline` passed before all were: an error of kind `TimedOut`, the workers started
    /// so far killed and reaped).
    /// `label` (the env id) names the workers for `ps`: a native worker program's `argv[0]`
    /// becomes `shmenv-worker[<index>] <label>`.
    pub(crate) fn start(
        command: &WorkerCommand,
        label: &str,
        region_fd: RawFd,
        cpus: Vec<Option<usize>>,
        deadline: Instant,
    ) -> io::Result<Supervisor> {
        let num_workers = cpus.len();
        let stop = eventfd()?;
        let poke = eventfd()?;
        let (stop_fd, poke_fd) = (stop.as_raw_fd(), poke.as_raw_fd());
        let shared = Arc::new(Shared {
            any_exited: AtomicBool::new(false),
            exits: Mutex::new(vec![None; num_workers]),
            tails: Mutex::new(vec![Vec::new(); num_workers]),
            respawns: Mutex::new(Vec::new()),
            call_sockets: Mutex::new((0..num_workers).map(|_| None).collect()),
        });
        let (tx, rx) = mpsc::channel();
        let spawner = Spawner { command: command.clone(), label: label.to_string(), region_fd, cpus };
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new().name("shmenv-supervisor".into()).spawn(move || {
            let mut children = Vec::with_capacity(num_workers);
            let mut outputs = Vec::with_capacity(num_workers);
            for w in 0..num_workers {
                if Instant::now() >= deadline {
                    process_group::kill_and_reap(&mut children);
                    let message =
                        format!("only {w} of {num_workers} workers were spawned before the deadline");
                    let _ = tx.send(Err(io::Error::new(io::ErrorKind::TimedOut, message)));
                    return;
                }
                match spawner.spawn(w) {
                    Ok(spawned) => {
                        thread_shared.keep_call_socket(w, spawned.child.id(), spawned.call_socket);
                        children.push(spawned.child);
                        outputs.push(Some(spawned.output));
                    }
                    Err(e) => {
                        process_group::kill_and_reap(&mut children);
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
            let _ = tx.send(Ok(children.iter().map(|c| c.id()).collect::<Vec<_>>()));
            supervise(children, outputs, &thread_shared, stop_fd, poke_fd, &spawner);
        })?;
        match rx.recv() {
            Ok(Ok(pids)) => Ok(Supervisor {
                shared,
                pids,
                stop,
                poke,
                thread: Some(thread),
                owner: fork::Owner::current(),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(io::Error::other("the supervisor thread ended before spawning the workers"))
            }
        }
    }

    /// Process ids of the workers, by worker index.
    pub(crate) fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Whether any worker has exited. Cheap: one atomic load.
    #[inline]
    pub(crate) fn any_exited(&self) -> bool {
        // Acquire pairs with the supervisor's Release store after recording the exit.
        self.shared.any_exited.load(Ordering::Acquire)
    }

    /// The first worker (by index) that has exited, if any (cheap while none has).
    pub(crate) fn exited_worker(&self) -> Option<(usize, WorkerExit)> {
        if self.any_exited() {
            self.first_exit()
        } else {
            None
        }
    }

    /// The first worker (by index) that has exited, with how it ended.
    pub(crate) fn first_exit(&self) -> Option<(usize, WorkerExit)> {
        let exits = self.shared.exits.lock().unwrap_or_else(|p| p.into_inner());
        exits.iter().enumerate().find_map(|(w, e)| e.map(|e| (w, e)))
    }

    /// The last lines worker `w` wrote to its stdout or stderr (at most [`OUTPUT_TAIL`]
    /// bytes, starting at a line). Everything a worker writes is also copied to the
    /// trainer's stderr as it comes.
    pub(crate) fn output_tail(&self, w: usize) -> String {
        let tails = self.shared.tails.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = tails.get(w).map_or(&[][..], |t| &t[..]);
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end();
        if bytes.len() >= OUTPUT_TAIL {
            // Drop the partial first line.
            text.split_once('\n').map_or(text, |(_, rest)| rest).to_string()
        } else {
            text.to_string()
        }
    }

    /// Starts worker `w` again after it exited (the failure policy `Restart`): same
    /// command, index and core; its output tail is kept. Returns the new pid.
    pub(crate) fn respawn(&mut self, w: usize) -> io::Result<u32> {
        let (tx, rx) = mpsc::channel();
        self.shared.respawns.lock().unwrap_or_else(|p| p.into_inner()).push((w, tx));
        signal(&self.poke);
        let pid = rx.recv().map_err(|_| io::Error::other("the supervisor thread is gone"))??;
        self.pids[w] = pid;
        Ok(pid)
    }

    /// Takes the trainer's end of worker `w`'s call socket, if the command asked for one
    /// and it was not taken yet: the socket of the worker's current process (a respawn
    /// replaces it), with that process's pid.
    pub(crate) fn take_call_socket(&self, w: usize) -> Option<CallSocket> {
        let mut sockets = self.shared.call_sockets.lock().unwrap_or_else(|p| p.into_inner());
        sockets.get_mut(w).and_then(Option::take)
    }

    /// How each worker ended (`None`: still running).
    pub(crate) fn exits(&self) -> Vec<Option<WorkerExit>> {
        self.shared.exits.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Asks the supervisor to finish: workers that have not exited within
    /// [`SHUTDOWN_GRACE`] are killed; all are reaped. Blocks until done (bounded).
    ///
    /// In a forked child (see [`fork`]) it does nothing: the thread and the workers
    /// are the parent's, and the stop eventfd is shared with it.
    pub(crate) fn shutdown(&mut self) {
        if !self.owner.is_current() {
            // The thread does not exist here: neither join nor detach its handle.
            std::mem::forget(self.thread.take());
            return;
        }
        signal(&self.stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Spawner {
    fn spawn(&self, w: usize) -> io::Result<Spawned> {
        spawn_worker(&self.command, &self.label, self.region_fd, w, self.cpus.get(w).copied().flatten())
    }
}

fn spawn_worker(
    command: &WorkerCommand,
    label: &str,
    region_fd: RawFd,
    index: usize,
    cpu: Option<usize>,
) -> io::Result<Spawned> {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let (read_end, write_end) = output_pipe()?;
    let call_pair = if command.call_socket { Some(call_socket::socket_pair()?) } else { None };
    let call_fd = call_pair.as_ref().map(|(_, theirs)| theirs.as_raw_fd());
    let cpu_set = cpu.map(|c| {
        // SAFETY: cpu_set_t is plain bits (all-zero is the empty set); CPU_SET only writes
        // bit `c` of it and `c` comes from the allowed set or the caller (checked below).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
            set
        }
    });
    let mut cmd = Command::new(&command.program);
    // A process group of its own: ended with everything it started (`process_group`).
    cmd.process_group(0);
    if command.args.is_empty() {
        // A native worker program: name it for `ps`. (An interpreter, such as Python, may
        // need its real argv[0] to find itself, so it keeps it.)
        cmd.arg0(format!("shmenv-worker[{index}] {label}"));
    }
    // No backtraces in workers (unless the command asks for them): with RUST_BACKTRACE set,
    // std's allocation-error handler takes the backtrace lock, which a panic in progress
    // may hold, and an env out of memory would hang instead of dying.
    cmd.env("RUST_BACKTRACE", "0")
        .args(&command.args)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .arg(WORKER_FLAG)
        .arg(index.to_string())
        .arg(region_fd.to_string())
        .arg(parent.to_string())
        .env(program::WORKER_ENV, parent.to_string())
        .stdin(Stdio::null())
        // Worker prints (stdout and stderr) go through a pipe the supervisor reads: it
        // copies them to the trainer's stderr (never its stdout) and keeps the last lines
        // for error reports.
        .stdout(Stdio::from(write_end.try_clone()?))
        .stderr(Stdio::from(write_end));
    if let Some(fd) = call_fd {
        cmd.env(CALL_SOCKET_ENV, fd.to_string());
    }
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (prctl, getppid, sched_setaffinity, fcntl, _exit) on
    // plain integers and a cpu set prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            // Pin (best effort: a refused mask leaves the worker unpinned).
            if let Some(set) = &cpu_set {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set);
            }
            // Keep the region fd open across exec in the child only (the fd table is the
            // child's own copy; the trainer's fd stays close-on-exec).
            if libc::fcntl(region_fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The same for the worker's end of its call socket.
            if let Some(fd) = call_fd {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    // The caller names the program (`BuildError::Spawn`).
    let child = cmd.spawn()?;
    // The worker's end lives in the worker only: the trainer's copy closes here.
    let call_socket = call_pair.map(|(ours, _theirs)| ours);
    Ok(Spawned { child, output: read_end, call_socket })
}

/// A pipe for a worker's output: (read end, non-blocking; write end), both close-on-exec
/// (the child gets the write end as its stdout and stderr through `Command`).
fn output_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two fds pipe2 writes; the flags are valid.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created by pipe2 and are owned by nobody else.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The child's end must block (a worker writing a long traceback must not fail).
    // SAFETY: F_SETFL on an fd we own, clearing O_NONBLOCK.
    if unsafe { libc::fcntl(write_end.as_raw_fd(), libc::F_SETFL, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((read_end, write_end))
}
