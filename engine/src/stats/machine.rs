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
pub(crate) fn ns_per_tick() -> u64 {
    // SAFETY: sysconf reads a configuration value; it has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1_000_000_000 / if hz > 0 { hz as u64 } else { 100 }
}

/// `cpus` in the order workers should be pinned to them: one hardware thread of every core
/// before any core's second (SMT sibling), and within that the CPUs of memory node 0, then
/// node 1, and so on, each core in (package, core id) order. Read from
/// `/sys/devices/system/cpu/cpuN/topology` and `/sys/devices/system/node/nodeK/cpulist`;
/// where the kernel does not say, `cpus` as given (CPU-number order). CPU numbers alone say
/// nothing reliable about cores: many virtual machines number a core's two threads side by
/// side, so pinning worker `w` to the `w`-th CPU put two workers on one core while others
/// idled.
pub(crate) fn topology_order(cpus: &[usize]) -> Vec<usize> {
    topology_order_in(std::path::Path::new("/sys/devices/system"), cpus)
}

/// [`topology_order`] with the sysfs tree at `sys` (a test's own tree).
fn topology_order_in(sys: &std::path::Path, cpus: &[usize]) -> Vec<usize> {
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).ok();
    let nodes = node_cpus_in(sys);
    let mut keyed = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let topology = sys.join(format!("cpu/cpu{cpu}/topology"));
        let number = |name: &str| read(topology.join(name))?.trim().parse::<i64>().ok();
        let (Some(package), Some(core)) = (number("physical_package_id"), number("core_id")) else {
            return cpus.to_vec(); // The kernel does not say: CPU-number order.
        };
        let node = nodes.iter().position(|list| list.contains(&cpu)).unwrap_or(0);
        keyed.push((node, package, core, cpu));
    }
    // A CPU's thread rank: how many CPUs of `cpus` on the same core come before it.
    let mut ranked: Vec<(usize, usize, i64, i64, usize)> = keyed
        .iter()
        .map(|&(node, package, core, cpu)| {
            let rank = keyed.iter().filter(|k| (k.1, k.2) == (package, core) && k.3 < cpu).count();
            (rank, node, package, core, cpu)
        })
        .collect();
    ranked.sort_unstable();
    ranked.into_iter().map(|(.., cpu)| cpu).collect()
}

/// The CPUs of each memory node, node 0 first (`/sys/devices/system/node/nodeK/cpulist`);
/// empty where the kernel does not say.
pub(crate) fn node_cpus() -> Vec<Vec<usize>> {
    node_cpus_in(std::path::Path::new("/sys/devices/system"))
}

/// [`node_cpus`] with the sysfs tree at `sys`.
fn node_cpus_in(sys: &std::path::Path) -> Vec<Vec<usize>> {
    (0..1024)
        .map_while(|k| std::fs::read_to_string(sys.join(format!("node/node{k}/cpulist"))).ok())
        .map(|list| parse_cpu_list(&list).unwrap_or_default())
        .collect()
}

/// A sysfs CPU list (`0-3,8,10-11`); `None` when it is not one.
fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (from, to) = part.split_once('-').unwrap_or((part, part));
        let (from, to): (usize, usize) = (from.parse().ok()?, to.parse().ok()?);
        out.extend(from..=to.min(from + 65_536));
    }
    Some(out)
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

    /// A sysfs tree of `(cpu, package, core)` with the CPUs of each node.
    fn fake_sysfs(name: &str, cpus: &[(usize, i64, i64)], nodes: &[&str]) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("shmenv-topology-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for &(cpu, package, core) in cpus {
            let dir = root.join(format!("cpu/cpu{cpu}/topology"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("physical_package_id"), format!("{package}\n")).unwrap();
            std::fs::write(dir.join("core_id"), format!("{core}\n")).unwrap();
        }
        for (k, list) in nodes.iter().enumerate() {
            let dir = root.join(format!("node/node{k}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cpulist"), format!("{list}\n")).unwrap();
        }
        root
    }

    #[test]
    fn siblings_numbered_side_by_side_come_after_every_core() {
        // 4 cores of 2 threads, a core's threads numbered side by side (0-1, 2-3, ...).
        let cpus: Vec<(usize, i64, i64)> = (0..8).map(|c| (c, 0, c as i64 / 2)).collect();
        let root = fake_sysfs("adjacent", &cpus, &["0-7"]);
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(topology_order_in(&root, &all), vec![0, 2, 4, 6, 1, 3, 5, 7]);
        // Only the CPUs asked for: a core with one of them is a core of one thread.
        assert_eq!(topology_order_in(&root, &[1, 2, 3, 5]), vec![1, 2, 5, 3]);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn cores_of_node_0_come_first_when_nodes_interleave() {
        // 2 sockets of 2 cores, one thread each, CPUs interleaved between the nodes.
        let cpus = [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)];
        let root = fake_sysfs("nodes", &cpus, &["0,2", "1,3"]);
        assert_eq!(topology_order_in(&root, &[0, 1, 2, 3]), vec![0, 2, 1, 3]);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn without_topology_the_order_is_the_cpu_numbers() {
        let root = fake_sysfs("none", &[(0, 0, 0)], &[]);
        assert_eq!(topology_order_in(&root, &[0, 1, 2]), vec![0, 1, 2], "cpu1 has no topology");
        std::fs::remove_dir_all(root).unwrap();
        assert_eq!(parse_cpu_list("0-2,5,7-8\n"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list("0-x"), None);
        // This machine's own order holds every CPU once.
        let mine = topology_order(&affinity(crate::stats::current_tid()).unwrap());
        let mut sorted = mine.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), mine.len());
    }
}
