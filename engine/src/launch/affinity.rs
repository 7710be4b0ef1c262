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
