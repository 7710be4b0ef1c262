//! The whole machine's CPU time, from `/proc/stat`: beside the pool's own processes'
//! time, it tells whether other tasks held the cores ([`StatsReport::others_share`]).
//!
//! [`StatsReport::others_share`]: super::StatsReport::others_share

/// The busy time of every CPU the kernel counts since boot, in ns: user, nice, system,
/// irq, softirq and steal (a hypervisor running someone else on this machine's CPUs);
/// everything but idle and I/O wait. `None` when `/proc/stat` cannot be read or parsed.
pub fn busy_ns() -> Option<u64> {
    parse_busy_ticks(&std::fs::read_to_string("/proc/stat").ok()?).map(|ticks| ticks * ns_per_tick())
}

/// The CPUs `/proc/stat` counts (its `cpuN` lines), at least 1.
pub fn cpus() -> usize {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let per_cpu =
        |l: &&str| l.strip_prefix("cpu").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()));
    text.lines().filter(per_cpu).count().max(1)
}

/// The busy ticks of `/proc/stat`'s first line (`cpu  user nice system idle iowait irq
/// softirq steal guest guest_nice`; guest time is already in user and nice).
fn parse_busy_ticks(text: &str) -> Option<u64> {
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line.split_ascii_whitespace().map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    (fields.len() >= 4).then(|| field(0) + field(1) + field(2) + field(5) + field(6) + field(7))
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
        let text = "cpu  10 1 5 1000 7 2 3 4 9 9\ncpu0 5 0 2 500 3 1 1 2 4 4\n";
        assert_eq!(parse_busy_ticks(text), Some(10 + 1 + 5 + 2 + 3 + 4));
        // Old kernels have fewer fields.
        assert_eq!(parse_busy_ticks("cpu  10 1 5 1000\n"), Some(16));
        assert_eq!(parse_busy_ticks("cpu0 1 2 3 4\n"), None);
        assert_eq!(parse_busy_ticks("cpu  1 x 3 4\n"), None);
        assert_eq!(parse_busy_ticks(""), None);
    }

    #[test]
    fn this_machine_has_busy_time_and_cpus() {
        assert!(busy_ns().is_some_and(|ns| ns > 0));
        assert!(cpus() >= 1);
    }
}
