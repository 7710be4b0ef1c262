//! Which cores the worker processes run on.

/// Which cores the worker processes run on. The trainer is never pinned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CpuAffinity {
    /// When every worker can have a core of its own (`num_workers` <= the cores this
    /// process may use), pin worker `w` to the `w`-th of them in topology order (one thread
    /// of every core before any SMT sibling, node by node); otherwise do not pin.
    /// Measured here (2 cores, 2 workers + trainer): Burn-v0 50 us x 8 envs 1.78x -> 1.90x
    /// of the serial loop, because two workers can no longer end up sharing a core while the
    /// trainer holds the other. With `WaitStrategy::Auto` it pins only onto free cores: a
    /// pool that starts while other tasks are runnable starts unpinned, and its wait tuner
    /// pins the workers once it waits actively and the cores are free (under contention a
    /// pinned worker waits for the core a busy process holds). Use `None` when several
    /// pools share a machine.
    #[default]
    Auto,
    /// Let the scheduler place workers.
    None,
    /// Pin worker `w` to core `cores[w % cores.len()]`.
    Cores(Vec<usize>),
}

impl CpuAffinity {
    /// The core of each of `num_workers` workers (`None`: not pinned).
    pub fn assign(&self, num_workers: usize) -> Vec<Option<usize>> {
        let allowed = allowed_cpus();
        match self {
            CpuAffinity::Auto if !allowed.is_empty() && num_workers <= allowed.len() => {
                let ordered = crate::stats::machine::topology_order(&allowed);
                ordered.into_iter().take(num_workers).map(Some).collect()
            }
            CpuAffinity::Cores(cores) if !cores.is_empty() => {
                (0..num_workers).map(|w| Some(cores[w % cores.len()])).collect()
            }
            _ => vec![None; num_workers],
        }
    }
}

/// Pins process `pid` to `cpu`, or with `None` lets it run on every core this process may
/// use (best effort: a refused call leaves it as it was). How the wait tuner unpins the
/// workers of a pool that sleeps under contention, and pins them again.
pub(crate) fn place(pid: u32, cpu: Option<usize>) {
    let cpus = match cpu {
        Some(c) => vec![c],
        None => allowed_cpus(),
    };
    // SAFETY: cpu_set_t is plain bits (all-zero is the empty set); CPU_SET writes bit `c`
    // only for `c` below CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpus.into_iter().filter(|&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: as above.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; a pid that is not ours (or
    // gone) makes the call fail, which changes nothing.
    unsafe { libc::sched_setaffinity(pid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// The tasks (threads) runnable on the machine right now, as the kernel counts them
/// (`/proc/loadavg`'s fourth field, `running/total`), or `None` when unreadable. How the
/// wait tuner tells whether the cores it would pin workers to are free.
pub(crate) fn runnable_tasks() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().nth(3)?.split('/').next()?.parse().ok()
}

/// Whether programs other than a pool keep the cores busy: the busy time of the CPUs this
/// process may use (`/proc/stat`) less this process's (every thread: the trainer's own
/// thread pools are not others) and the workers', over windows of at least [`WINDOW_NS`]
/// (one sample a window, at a pool call). CPU time, not a count of runnable tasks (see
/// [`runnable_tasks`]): since Linux 6.12 a task that has just gone to sleep can stay
/// counted as runnable for a moment (EEVDF's delayed dequeue), and right after a batch the
/// pool's own processes (a trainer's torch threads, a worker) showed up as other tasks in
/// about half of such counts (CleanRL's PPO, measured).
#[derive(Clone, Debug, Default)]
pub(crate) struct OthersWatch {
    last: Option<CpuSample>,
    /// What the last complete window said.
    busy: Option<bool>,
}

/// A window of [`OthersWatch`]: long enough that the ticks of `/proc/stat` (10 ms, sampled
/// on each CPU) blur the others' share by a few hundredths of a core.
const WINDOW_NS: u64 = 500_000_000;
/// Other programs keep the cores busy when they took more than this share of a core in a
/// window (one busy process beside a 2-worker pool on 2 cores took 0.6-1.0 of one in each
/// 0.5 s window, measured; an idle machine's windows read within a few hundredths of 0).
const BUSY_CORES: f64 = 0.25;

/// CPU time at one instant (see [`OthersWatch`]).
#[derive(Clone, Copy, Debug, PartialEq)]
struct CpuSample {
    at_ns: u64,
    /// Busy time since boot of the CPUs this process may use.
    machine_ns: u64,
    /// CPU time of this process and the workers.
    ours_ns: u64,
}

impl OthersWatch {
    /// Whether programs other than this process and the workers `pids` kept the cores busy
    /// in the last complete window (`None` before the first, or when `/proc` cannot be
    /// read); a call at least [`WINDOW_NS`] after the window's start ends it (a few reads
    /// of `/proc`, none on other calls). A window may last longer (a pause between pool
    /// calls, the trainer's own work in it): what other programs took in it is measured
    /// alike.
    pub(crate) fn look(&mut self, now_ns: u64, pids: &[u32]) -> Option<bool> {
        if self.last.is_none_or(|last| now_ns >= last.at_ns.saturating_add(WINDOW_NS)) {
            let next = sample(now_ns, pids);
            if let Some((last, next)) = self.last.zip(next) {
                self.busy = Some(others_cores(&last, &next) > BUSY_CORES);
            }
            self.last = next;
        }
        self.busy
    }
}

/// The cores that programs other than the pool took on average between `last` and `next`.
fn others_cores(last: &CpuSample, next: &CpuSample) -> f64 {
    let window_ns = next.at_ns.saturating_sub(last.at_ns);
    let machine_ns = next.machine_ns.saturating_sub(last.machine_ns);
    let others_ns = machine_ns.saturating_sub(next.ours_ns.saturating_sub(last.ours_ns));
    if window_ns == 0 {
        0.0
    } else {
        others_ns as f64 / window_ns as f64
    }
}

/// The CPU time of the machine, this process and `pids` at `now_ns`; `None` when `/proc`
/// cannot be read.
fn sample(now_ns: u64, pids: &[u32]) -> Option<CpuSample> {
    let machine = crate::stats::machine::busy(crate::stats::current_tid())?;
    let ours: u64 = std::iter::once("self".to_owned())
        .chain(pids.iter().map(u32::to_string))
        .map(|pid| process_cpu_ticks(&format!("/proc/{pid}/stat")).unwrap_or(0))
        .sum();
    let ours_ns = ours.saturating_mul(crate::stats::machine::ns_per_tick());
    Some(CpuSample { at_ns: now_ns, machine_ns: machine.ns, ours_ns })
}

/// A process's CPU time (every thread, user and system) from its `/proc/<pid>/stat`, in
/// ticks; the fields follow the command name, which may hold spaces and parentheses.
fn process_cpu_ticks(stat: &str) -> Option<u64> {
    parse_cpu_ticks(&std::fs::read_to_string(stat).ok()?)
}

/// See [`process_cpu_ticks`]: `utime` and `stime` are the 14th and 15th fields, the 12th
/// and 13th after the command name.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The cores this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain bits; sched_getaffinity fills it for this process.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET only reads the set.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    const MS: u64 = 1_000_000;

    fn at(at_ms: u64, machine_ms: u64, ours_ms: u64) -> CpuSample {
        CpuSample { at_ns: at_ms * MS, machine_ns: machine_ms * MS, ours_ns: ours_ms * MS }
    }

    /// Processes that spin until killed (killed and reaped on drop).
    struct Spinners(Vec<Child>);

    impl Spinners {
        fn start(n: usize) -> Spinners {
            Spinners(
                (0..n)
                    .map(|_| Command::new("sh").args(["-c", "while :; do :; done"]).spawn().expect("sh"))
                    .collect(),
            )
        }
    }

    impl Drop for Spinners {
        fn drop(&mut self) {
            for child in &mut self.0 {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    #[test]
    fn cpu_ticks_are_utime_plus_stime_after_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 5 0 0 20 0 3 0";
        assert_eq!(parse_cpu_ticks(stat), Some(42));
        assert_eq!(parse_cpu_ticks("4242 (x) S 1 2"), None);
        assert!(process_cpu_ticks("/proc/self/stat").is_some());
    }

    #[test]
    fn the_others_share_is_the_machine_s_busy_time_less_the_pool_s() {
        let last = at(0, 1_000, 500);
        assert_eq!(others_cores(&last, &at(500, 1_800, 900)), 0.8, "400 ms of 500");
        assert_eq!(others_cores(&last, &at(500, 1_800, 1_400)), 0.0, "all of it the pool's");
        assert_eq!(others_cores(&last, &at(0, 1_800, 500)), 0.0, "an empty window says nothing");
    }

    #[test]
    fn a_window_ends_at_the_first_look_a_window_length_after_its_start() {
        // Times are made up and long (the /proc readings are real but microseconds apart:
        // at most a tick of each CPU between them, a few hundredths of a core on 128 CPUs
        // over these 150 s windows).
        let mut watch = OthersWatch::default();
        let (t0, long) = (1_000 * MS, 300 * WINDOW_NS);
        assert_eq!(watch.look(t0, &[]), None, "the first look starts a window");
        assert_eq!(watch.look(t0 + WINDOW_NS - 1, &[]), None, "not a window yet");
        assert_eq!(watch.look(t0 + long, &[]), Some(false), "a window of any length");
        watch.busy = Some(true);
        assert_eq!(watch.look(t0 + long + WINDOW_NS - 1, &[]), Some(true), "the last window's answer");
        assert_eq!(watch.look(t0 + 2 * long, &[]), Some(false));
    }

    #[test]
    fn a_program_spinning_beside_the_pool_keeps_the_cores_busy() {
        let mut watch = OthersWatch::default();
        let now = crate::stats::now_ns;
        assert_eq!(watch.look(now(), &[]), None, "the first look starts a window");
        // One spinner a core: at least a quarter of one each, whatever else runs (and what
        // else runs outside this process only adds to the others' share).
        let _spinners = Spinners::start(crate::sync::available_cores());
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut looks = Vec::new();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            match watch.look(now(), &[]) {
                Some(true) => break,
                seen => looks.push(seen),
            }
            assert!(Instant::now() < deadline, "the spinners were never seen: {looks:?}");
        }
    }

    #[test]
    fn a_worker_spinning_is_counted_as_the_pool_s_own_time() {
        let spinner = Spinners::start(1);
        let pid = spinner.0[0].id();
        let first = sample(crate::stats::now_ns(), &[pid]).expect("/proc readable");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let next = sample(crate::stats::now_ns(), &[pid]).expect("/proc readable");
            if next.ours_ns > first.ours_ns {
                break;
            }
            assert!(Instant::now() < deadline, "the spinning worker's time never showed");
        }
    }
}
