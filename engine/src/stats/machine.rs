//! The machine's CPU time, from `/proc/stat`: beside the pool's own processes' time, it
//! tells whether other tasks held the cores ([`StatsReport::others_share`]).
//!
//! [`StatsReport::others_share`]: super::StatsReport::others_share

/// Busy time of a set of CPUs (see [`busy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy {
    /// Their busy time since boot, in ns.
    pub ns: u64,
    /// How many CPUs it is of.
    pub cpus: usize,
}

/// The busy time since boot of the CPUs thread `tid` may run on (its affinity: a
/// container's cpuset, a `taskset`), from their `cpuN` lines of `/proc/stat`: user, nice,
/// system, irq, softirq and steal (a hypervisor running someone else on them), everything
/// but idle and I/O wait. Every CPU of `/proc/stat` when the mask cannot be read; `None`
/// when `/proc/stat` cannot be read or parsed.
pub fn busy(tid: u32) -> Option<Busy> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let allowed = affinity(tid);
    let (mut ticks, mut cpus) = (0u64, 0usize);
    for (cpu, busy) in text.lines().filter_map(parse_cpu_line) {
        if allowed.as_ref().is_none_or(|set| set.contains(&cpu)) {
            ticks = ticks.saturating_add(busy);
            cpus += 1;
        }
    }
    (cpus > 0).then(|| Busy { ns: ticks.saturating_mul(ns_per_tick()), cpus })
}

/// A `cpuN` line of `/proc/stat` (`cpuN user nice system idle iowait irq softirq steal
/// guest guest_nice`; guest time is already in user and nice): `N` and its busy ticks.
fn parse_cpu_line(line: &str) -> Option<(usize, u64)> {
    let rest = line.strip_prefix("cpu")?;
    let (cpu, fields) = rest.split_once(' ')?;
    let cpu = cpu.parse().ok()?;
    let fields: Vec<u64> = fields.split_ascii_whitespace().map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    (fields.len() >= 4).then(|| (cpu, field(0) + field(1) + field(2) + field(5) + field(6) + field(7)))
}

/// The CPUs thread `tid` may run on; `None` when the kernel does not say.
fn affinity(tid: u32) -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain bits (all-zero is the empty set); the call fills the set
    // of the size passed, for a thread id (a tid not ours or gone makes it fail).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe {
        libc::sched_getaffinity(tid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
    };
    // SAFETY: CPU_ISSET reads bit `c` < CPU_SETSIZE of a valid set.
    (rc == 0)
        .then(|| (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Nanoseconds per `/proc/stat` tick (`sysconf(_SC_CLK_TCK)`, 100 per second on Linux).
fn ns_per_tick() -> u64 {
    // SAFETY: sysconf reads a configuration value; it has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1_000_000_000 / if hz > 0 { hz as u64 } else { 100 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_ticks_are_every_field_but_idle_iowait_and_guest() {
        assert_eq!(parse_cpu_line("cpu0 10 1 5 1000 7 2 3 4 9 9"), Some((0, 10 + 1 + 5 + 2 + 3 + 4)));
        assert_eq!(parse_cpu_line("cpu12 1 2 3 4"), Some((12, 6)), "old kernels have fewer fields");
        assert_eq!(parse_cpu_line("cpu  10 1 5 1000 7 2 3 4 9 9"), None, "the total line");
        assert_eq!(parse_cpu_line("cpu1 1 x 3 4"), None);
        assert_eq!(parse_cpu_line("intr 1 2 3 4"), None);
    }

    #[test]
    fn the_cpus_of_this_thread_have_busy_time() {
        let tid = crate::stats::current_tid();
        let busy = busy(tid).unwrap();
        assert!(busy.ns > 0);
        assert_eq!(Some(busy.cpus), affinity(tid).map(|set| set.len()));
    }
}
