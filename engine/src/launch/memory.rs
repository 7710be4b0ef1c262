//! How much memory this process may still use, read before the region's data part is
//! created and pre-faulted (the check itself is `pool::settings::check_region`).
//!
//! The whole region is touched at start-up (so no step pays a page fault), and its pages
//! are shared memory: charged to the trainer's cgroup and not reclaimable. A region larger
//! than the memory the trainer may use would get it OOM-killed without a word, so its size
//! is compared first with the two limits Linux reports: `MemAvailable` in `/proc/meminfo`
//! and, under cgroup v2, `memory.max` minus `memory.current` of the trainer's cgroup and of
//! each of its ancestors.

use std::path::{Path, PathBuf};

/// The tightest cgroup v2 memory limit on this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupLimit {
    /// The cgroup directory whose limit is tightest.
    pub path: PathBuf,
    /// Its `memory.max`, bytes.
    pub max: u64,
    /// Its `memory.current`, bytes.
    pub current: u64,
}

impl CgroupLimit {
    /// Bytes the cgroup may still charge.
    pub fn free(&self) -> u64 {
        self.max.saturating_sub(self.current)
    }
}

/// What the process may still use, as far as Linux says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryRoom {
    /// `MemAvailable` of `/proc/meminfo`, bytes (None if unreadable).
    pub mem_available: Option<u64>,
    /// The tightest cgroup v2 limit (None without one, or without cgroup v2).
    pub cgroup: Option<CgroupLimit>,
}

impl MemoryRoom {
    /// Reads both figures now.
    pub fn read() -> MemoryRoom {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        MemoryRoom {
            mem_available: mem_available(&meminfo),
            cgroup: cgroup_limit(&cgroup, Path::new("/sys/fs/cgroup")),
        }
    }

    /// The fewest bytes either figure leaves (None if neither is known).
    pub fn room(&self) -> Option<u64> {
        let cgroup = self.cgroup.as_ref().map(CgroupLimit::free);
        match (self.mem_available, cgroup) {
            (Some(a), Some(c)) => Some(a.min(c)),
            (a, c) => a.or(c),
        }
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The tightest `memory.max` over the cgroup v2 path of a `/proc/self/cgroup` text and its
/// ancestors, under `root` (the cgroup2 mount).
fn cgroup_limit(proc_cgroup: &str, root: &Path) -> Option<CgroupLimit> {
    let rel = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mut dir = root.join(rel.trim_start_matches('/'));
    let mut tightest: Option<CgroupLimit> = None;
    while dir.starts_with(root) {
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        if let (Some(max), Some(current)) = (read("memory.max"), read("memory.current")) {
            if let (Ok(max), Ok(current)) = (max.trim().parse::<u64>(), current.trim().parse::<u64>()) {
                let limit = CgroupLimit { path: dir.clone(), max, current };
                if tightest.as_ref().is_none_or(|t| limit.free() < t.free()) {
                    tightest = Some(limit);
                }
            }
        }
        if !dir.pop() {
            break;
        }
    }
    tightest
}

/// Bytes as a short figure: "7.45 GiB", "512.0 MiB".
pub(crate) fn human(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    let b = bytes as f64;
    if b >= GIB {
        format!("{:.2} GiB", b / GIB)
    } else {
        format!("{:.1} MiB", b / MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_and_cgroup_files_are_read() {
        let meminfo = "MemTotal:       16000000 kB\nMemAvailable:    2048 kB\n";
        assert_eq!(mem_available(meminfo), Some(2048 * 1024));
        assert_eq!(mem_available("nothing"), None);
        let dir = std::env::temp_dir().join(format!("shmenv-cgroup-{}", std::process::id()));
        let leaf = dir.join("a/b");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(dir.join("a/memory.max"), "1000\n").unwrap();
        std::fs::write(dir.join("a/memory.current"), "400\n").unwrap();
        std::fs::write(leaf.join("memory.max"), "max\n").unwrap();
        std::fs::write(leaf.join("memory.current"), "10\n").unwrap();
        let limit = cgroup_limit("1:cpu:/x\n0::/a/b\n", &dir).unwrap();
        assert_eq!((limit.path, limit.max, limit.current), (dir.join("a"), 1000, 400));
        assert_eq!(cgroup_limit("1:cpu:/x\n", &dir), None);
        std::fs::remove_dir_all(&dir).unwrap();
        let room = MemoryRoom {
            mem_available: Some(700),
            cgroup: Some(CgroupLimit { path: dir, max: 1000, current: 400 }),
        };
        assert_eq!(room.room(), Some(600));
    }
}
