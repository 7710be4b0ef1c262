//! How much memory this process may still use, and what a pool will take of it, read before
//! any worker starts and again before the region's data part is created and pre-faulted.
//!
//! The whole region is touched at start-up (so no step pays a page fault), and its pages
//! are shared memory: charged to the trainer's cgroup and not reclaimable. The workers'
//! envs take memory of their own as they are built. A pool larger than the memory the
//! trainer may use would get a worker or the trainer OOM-killed, so [`estimate`] compares
//! what it needs with the limits Linux reports: `MemAvailable` in `/proc/meminfo` and the
//! limit minus the usage of the trainer's memory cgroup and of each of its ancestors, under
//! cgroup v2 (`memory.max`, `memory.current`) and cgroup v1 (`memory.limit_in_bytes`,
//! `memory.usage_in_bytes`). The cgroups are found from `/proc/self/cgroup` and
//! `/proc/self/mountinfo`. When a worker is SIGKILLed anyway, [`OomWatch`] tells whether
//! the kernel's OOM killer did it.

mod cgroup;
pub(crate) mod estimate;

use cgroup::{parse_mountinfo, parse_proc_cgroup, CgroupMounts, ProcCgroups};
use std::path::{Path, PathBuf};

/// The tightest memory cgroup limit on this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupLimit {
    /// The cgroup directory whose limit is tightest.
    pub path: PathBuf,
    /// The cgroup version: 2 (`memory.max`, `memory.current`) or 1
    /// (`memory.limit_in_bytes`, `memory.usage_in_bytes`).
    pub version: u8,
    /// Its limit, bytes.
    pub max: u64,
    /// Its usage, bytes.
    pub current: u64,
}

impl CgroupLimit {
    /// Bytes the cgroup may still charge.
    pub fn free(&self) -> u64 {
        self.max.saturating_sub(self.current)
    }

    /// The names of its limit and usage files.
    fn files(&self) -> (&'static str, &'static str) {
        match self.version {
            1 => ("memory.limit_in_bytes", "memory.usage_in_bytes"),
            _ => ("memory.max", "memory.current"),
        }
    }
}

/// What the process may still use, as far as Linux says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryRoom {
    /// `MemAvailable` of `/proc/meminfo`, bytes (None if unreadable).
    pub mem_available: Option<u64>,
    /// The tightest cgroup limit, v1 or v2 (None without one).
    pub cgroup: Option<CgroupLimit>,
}

impl MemoryRoom {
    /// Reads the figures now.
    pub fn read() -> MemoryRoom {
        let text = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        MemoryRoom::from_texts(
            &text("/proc/meminfo"),
            &text("/proc/self/cgroup"),
            &text("/proc/self/mountinfo"),
            &|p: &Path| std::fs::read_to_string(p).ok(),
        )
    }

    /// The figures from the texts of `/proc/meminfo`, `/proc/self/cgroup` and
    /// `/proc/self/mountinfo`, reading the cgroup files with `read`.
    fn from_texts(
        meminfo: &str,
        proc_cgroup: &str,
        mountinfo: &str,
        read: &dyn Fn(&Path) -> Option<String>,
    ) -> MemoryRoom {
        let dirs = CgroupDirs::find(&parse_proc_cgroup(proc_cgroup), &parse_mountinfo(mountinfo));
        let v2 = dirs.v2.as_ref().and_then(|(dir, top)| {
            cgroup::tightest(dir, top, ("memory.max", "memory.current"), cgroup::parse_v2_limit, read)
                .map(|(path, max, current)| CgroupLimit { path, version: 2, max, current })
        });
        let v1 = dirs.v1.as_ref().and_then(|(dir, top)| {
            let files = ("memory.limit_in_bytes", "memory.usage_in_bytes");
            cgroup::tightest(dir, top, files, cgroup::parse_v1_limit, read)
                .map(|(path, max, current)| CgroupLimit { path, version: 1, max, current })
        });
        let cgroup = match (v1, v2) {
            (Some(a), Some(b)) => Some(if a.free() <= b.free() { a } else { b }),
            (a, b) => a.or(b),
        };
        MemoryRoom { mem_available: mem_available(meminfo), cgroup }
    }

    /// The fewest bytes either figure leaves (None if neither is known).
    pub fn room(&self) -> Option<u64> {
        let cgroup = self.cgroup.as_ref().map(CgroupLimit::free);
        match (self.mem_available, cgroup) {
            (Some(a), Some(c)) => Some(a.min(c)),
            (a, c) => a.or(c),
        }
    }

    /// Both figures in words: "MemAvailable is 1.20 GiB; cgroup v1 /sys/fs/cgroup/memory/x
    /// allows 2.00 GiB (memory.limit_in_bytes) with 1.50 GiB in use".
    pub fn describe(&self) -> String {
        let mem_available = match self.mem_available {
            Some(a) => format!("MemAvailable is {}", human_bytes(a)),
            None => "MemAvailable is unknown".to_string(),
        };
        let cgroup = match &self.cgroup {
            Some(c) => format!(
                "cgroup v{} {} allows {} ({}) with {} in use",
                c.version,
                c.path.display(),
                human_bytes(c.max),
                c.files().0,
                human_bytes(c.current)
            ),
            None => "no cgroup v1 or v2 memory limit".to_string(),
        };
        format!("{mem_available}; {cgroup}")
    }
}

/// The directories of this process's memory cgroups, each with its mount point (the top of
/// the walk over ancestors).
struct CgroupDirs {
    v2: Option<(PathBuf, PathBuf)>,
    v1: Option<(PathBuf, PathBuf)>,
}

impl CgroupDirs {
    fn find(procs: &ProcCgroups, mounts: &CgroupMounts) -> CgroupDirs {
        let locate = |path: &Option<String>, mount: &Option<cgroup::CgroupMount>| {
            let (path, mount) = (path.as_deref()?, mount.as_ref()?);
            Some((cgroup::cgroup_dir(mount, path)?, mount.point.clone()))
        };
        CgroupDirs { v2: locate(&procs.v2, &mounts.v2), v1: locate(&procs.v1_memory, &mounts.v1_memory) }
    }

    fn read() -> CgroupDirs {
        let text = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        CgroupDirs::find(
            &parse_proc_cgroup(&text("/proc/self/cgroup")),
            &parse_mountinfo(&text("/proc/self/mountinfo")),
        )
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// One OOM-kill counter and its value when read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OomCounter {
    /// The file: a cgroup's `memory.events` (v2) or `memory.oom_control` (v1), or
    /// `/proc/vmstat` (the whole machine).
    file: PathBuf,
    /// Its `oom_kill` count.
    kills: u64,
}

/// The kernel's OOM-kill counters that cover this process's workers (they start in its
/// cgroups), read when a pool starts; compared with a later reading, they tell whether a
/// worker that was SIGKILLed meanwhile was the OOM killer's victim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct OomWatch {
    counters: Vec<OomCounter>,
}

impl OomWatch {
    /// Reads the counters now: the cgroup ones (v2 `memory.events`, which counts the
    /// subtree; v1 `memory.oom_control`, which counts the cgroup itself), or, without
    /// either, the machine's `/proc/vmstat`.
    pub(crate) fn read() -> OomWatch {
        let dirs = CgroupDirs::read();
        OomWatch::from_files(&dirs, &|p: &Path| std::fs::read_to_string(p).ok())
    }

    fn from_files(dirs: &CgroupDirs, read: &dyn Fn(&Path) -> Option<String>) -> OomWatch {
        let mut files: Vec<PathBuf> = Vec::new();
        files.extend(dirs.v2.as_ref().map(|(dir, _)| dir.join("memory.events")));
        files.extend(dirs.v1.as_ref().map(|(dir, _)| dir.join("memory.oom_control")));
        let mut counters: Vec<OomCounter> = files
            .into_iter()
            .filter_map(|file| Some(OomCounter { kills: cgroup::parse_oom_kills(&read(&file)?)?, file }))
            .collect();
        if counters.is_empty() {
            let file = PathBuf::from("/proc/vmstat");
            let kills = read(&file).as_deref().and_then(cgroup::parse_oom_kills);
            counters.extend(kills.map(|kills| OomCounter { file, kills }));
        }
        OomWatch { counters }
    }

    /// The first counter that rose from `self` to `now`: the file, and both counts.
    pub(crate) fn rose(&self, now: &OomWatch) -> Option<OomKill> {
        self.counters.iter().find_map(|before| {
            let after = now.counters.iter().find(|c| c.file == before.file)?;
            (after.kills > before.kills).then(|| OomKill {
                counter: before.file.clone(),
                before: before.kills,
                after: after.kills,
            })
        })
    }

    /// Whether the OOM killer killed something since `self` was read (reads the counters
    /// again).
    pub(crate) fn kill_since(&self) -> Option<OomKill> {
        self.rose(&OomWatch::read())
    }
}

/// What a pool needs, in parts: "the shared-memory region 1.20 GiB and the workers' envs
/// 3.40 GiB (144 bytes per env)".
pub(crate) fn need_parts(region: u64, workers: u64, per_env: u64) -> String {
    if workers == 0 {
        format!(
            "the shared-memory region {} (the workers' envs, built already, hold their own)",
            human_bytes(region)
        )
    } else {
        format!(
            "the shared-memory region {} (at least, before the env's spec is known) and the workers' envs {} \
             (an estimated {per_env} bytes per env)",
            human_bytes(region),
            human_bytes(workers)
        )
    }
}

/// A kernel OOM kill seen on a counter between a pool's start and a worker's death.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OomKill {
    /// The counter: a cgroup's `memory.events` (v2) or `memory.oom_control` (v1), or
    /// `/proc/vmstat`, whose `oom_kill` count rose.
    pub counter: PathBuf,
    /// Its count when the pool started.
    pub before: u64,
    /// Its count when the worker was found dead.
    pub after: u64,
}

/// The OOM kill `watch` (read when the pool started) has seen since, when a worker ended
/// by `exit`: only a SIGKILL can be the OOM killer's (it reads the counters again).
pub(crate) fn oom_kill_of(watch: &OomWatch, exit: crate::launch::WorkerExit) -> Option<OomKill> {
    (exit == crate::launch::WorkerExit::Signal(libc::SIGKILL)).then(|| watch.kill_since()).flatten()
}

/// What to do about a worker the OOM killer ended, at start-up or while the pool runs.
pub(crate) const OOM_ADVICE: &str = "Its envs took more memory than this process may use (the pool's check \
    estimates their state before the workers start; envs that allocate more, when built or as they step, get \
    past it): use fewer or smaller envs, or raise the memory limit";

/// How a worker ended: its exit, or the OOM killer.
pub(crate) fn died_how(exit: &crate::launch::WorkerExit, oom_kill: Option<&OomKill>) -> String {
    match oom_kill {
        Some(k) => format!(
            "was killed by the OOM killer (memory) ({exit}; oom_kill in {} went from {} to {})",
            k.counter.display(),
            k.before,
            k.after
        ),
        None => exit.to_string(),
    }
}

/// Bytes as a short figure: "7.45 GiB", "512.0 MiB", "12.0 KiB".
pub fn human_bytes(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    let b = bytes as f64;
    if b >= GIB {
        format!("{:.2} GiB", b / GIB)
    } else if b >= MIB / 10.0 {
        format!("{:.1} MiB", b / MIB)
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

/// A `read` function over the files `files` (path, text) and no other, for the tests of
/// this module and of [`cgroup`].
#[cfg(test)]
fn reader(files: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
    let map: std::collections::HashMap<PathBuf, String> =
        files.iter().map(|(p, t)| (PathBuf::from(p), t.to_string())).collect();
    move |p: &Path| map.get(p).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8388608 kB\n";
    const MOUNTINFO: &str = "\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn a_v1_memory_cgroup_limits_the_room() {
        // The reported case: a 2 GiB v1 cgroup on a machine with 8 GiB available.
        let read = reader(&[
            ("/sys/fs/cgroup/memory/jobs/j1/memory.limit_in_bytes", "2147483648\n"),
            ("/sys/fs/cgroup/memory/jobs/j1/memory.usage_in_bytes", "104857600\n"),
            ("/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", "9223372036854771712\n"),
            ("/sys/fs/cgroup/memory/jobs/memory.usage_in_bytes", "104857600\n"),
        ]);
        let room = MemoryRoom::from_texts(MEMINFO, "4:memory:/jobs/j1\n0::/\n", MOUNTINFO, &read);
        let limit = room.cgroup.clone().unwrap();
        assert_eq!((limit.version, limit.max, limit.current), (1, 1 << 31, 100 << 20));
        assert_eq!(limit.path, PathBuf::from("/sys/fs/cgroup/memory/jobs/j1"));
        assert_eq!(room.mem_available, Some(8 << 30));
        assert_eq!(room.room(), Some((2 << 30) - (100 << 20)));
        let text = room.describe();
        assert!(text.contains("cgroup v1 /sys/fs/cgroup/memory/jobs/j1 allows 2.00 GiB"), "{text}");
        assert!(
            text.contains("memory.limit_in_bytes") && text.contains("MemAvailable is 8.00 GiB"),
            "{text}"
        );
    }

    #[test]
    fn a_v2_limit_and_an_unlimited_v1_cgroup() {
        let read = reader(&[
            ("/sys/fs/cgroup/unified/a/memory.max", "1073741824\n"),
            ("/sys/fs/cgroup/unified/a/memory.current", "1048576\n"),
            ("/sys/fs/cgroup/unified/a/b/memory.max", "max\n"),
            ("/sys/fs/cgroup/unified/a/b/memory.current", "10\n"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"),
            ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "5000000\n"),
        ]);
        let room = MemoryRoom::from_texts(MEMINFO, "4:memory:/\n0::/a/b\n", MOUNTINFO, &read);
        let limit = room.cgroup.clone().unwrap();
        assert_eq!((limit.version, limit.path.as_path()), (2, Path::new("/sys/fs/cgroup/unified/a")));
        assert_eq!(room.room(), Some((1 << 30) - (1 << 20)));
        assert!(room.describe().contains("(memory.max)"), "{}", room.describe());
        // No cgroup limit at all: MemAvailable alone.
        let room = MemoryRoom::from_texts(MEMINFO, "4:memory:/\n0::/\n", MOUNTINFO, &reader(&[]));
        assert_eq!((room.cgroup.clone(), room.room()), (None, Some(8 << 30)));
        assert!(room.describe().contains("no cgroup v1 or v2 memory limit"));
        assert_eq!(MemoryRoom::from_texts("", "", "", &reader(&[])), MemoryRoom::default());
        assert_eq!(mem_available("nothing"), None);
    }

    #[test]
    fn a_rising_oom_counter_is_found() {
        let dirs = CgroupDirs::find(&parse_proc_cgroup("4:memory:/j\n0::/k\n"), &parse_mountinfo(MOUNTINFO));
        let events = "/sys/fs/cgroup/unified/k/memory.events";
        let control = "/sys/fs/cgroup/memory/j/memory.oom_control";
        let before = OomWatch::from_files(
            &dirs,
            &reader(&[
                (events, "oom 0\noom_kill 0\n"),
                (control, "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n"),
            ]),
        );
        assert_eq!(before.counters.len(), 2);
        let after = OomWatch::from_files(
            &dirs,
            &reader(&[
                (events, "oom 0\noom_kill 0\n"),
                (control, "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"),
            ]),
        );
        let kill = before.rose(&after).unwrap();
        assert_eq!((kill.counter.as_path(), kill.before, kill.after), (Path::new(control), 4, 5));
        assert_eq!(after.rose(&after), None);
        // Without cgroup counters, the machine's.
        let none = CgroupDirs { v2: None, v1: None };
        let vm = |n: &str| OomWatch::from_files(&none, &reader(&[("/proc/vmstat", n)]));
        assert!(vm("pgfault 1\noom_kill 1\n").rose(&vm("pgfault 9\noom_kill 2\n")).is_some());
        assert_eq!(OomWatch::from_files(&none, &reader(&[])), OomWatch::default());
    }

    #[test]
    fn this_machines_files_are_read_without_panicking() {
        let room = MemoryRoom::read();
        assert!(room.mem_available.is_some(), "/proc/meminfo has MemAvailable on Linux 3.14+");
        assert!(room.room().is_some());
        if let Some(limit) = &room.cgroup {
            assert!(limit.path.exists() && (limit.version == 1 || limit.version == 2), "{limit:?}");
        }
        let watch = OomWatch::read();
        assert_eq!(watch.rose(&watch), None);
        let _ = watch.kill_since();
        println!("{}; OOM counters {:?}", room.describe(), watch.counters);
    }

    #[test]
    fn byte_figures_are_short() {
        assert_eq!(human_bytes(3 << 30), "3.00 GiB");
        assert_eq!(human_bytes(512 << 20), "512.0 MiB");
        assert_eq!(human_bytes(2048), "2.0 KiB");
    }
}
