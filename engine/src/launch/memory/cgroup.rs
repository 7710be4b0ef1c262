//! Reading the memory cgroups of this process: where they are (from `/proc/self/cgroup`
//! and `/proc/self/mountinfo`), their limits and usage, and their OOM-kill counters.
//!
//! Every parser here takes the text of the file it reads, and the walks take a function
//! that reads a file, so the whole module is tested with fixtures in the kernel's formats.

use std::path::{Path, PathBuf};

/// A cgroup v1 limit at or above this is "no limit": the kernel writes `PAGE_COUNTER_MAX`
/// pages as bytes (9223372036854771712 with 4 KiB pages), and no machine has 2^62 bytes.
pub(super) const V1_UNLIMITED: u64 = 1 << 62;

/// Where this process sits in the two cgroup hierarchies, from `/proc/self/cgroup`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ProcCgroups {
    /// Its cgroup v2 path (the `0::` line).
    pub v2: Option<String>,
    /// Its cgroup v1 path in the hierarchy that has the `memory` controller.
    pub v1_memory: Option<String>,
}

/// Parses `/proc/self/cgroup`: lines `id:controllers:path`.
pub(super) fn parse_proc_cgroup(text: &str) -> ProcCgroups {
    let mut out = ProcCgroups::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            out.v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            out.v1_memory = Some(path.to_string());
        }
    }
    out
}

/// A cgroup file system mount: the cgroup path it shows (`root`) and where (`point`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CgroupMount {
    /// The cgroup directory mounted, as a cgroup path (`/` for the whole hierarchy).
    pub root: String,
    /// The mount point.
    pub point: PathBuf,
}

/// The cgroup mounts of `/proc/self/mountinfo` that matter for memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct CgroupMounts {
    /// The cgroup2 mount.
    pub v2: Option<CgroupMount>,
    /// The cgroup v1 mount with the `memory` controller.
    pub v1_memory: Option<CgroupMount>,
}

/// Parses `/proc/self/mountinfo`: `id parent major:minor root point options [tags] - type
/// source super-options`, with spaces in paths written as `\040`.
pub(super) fn parse_mountinfo(text: &str) -> CgroupMounts {
    let mut out = CgroupMounts::default();
    for line in text.lines() {
        let Some((head, tail)) = line.split_once(" - ") else { continue };
        let head: Vec<&str> = head.split(' ').collect();
        let tail: Vec<&str> = tail.split(' ').collect();
        if head.len() < 5 || tail.len() < 3 {
            continue;
        }
        let mount = || CgroupMount { root: unescape(head[3]), point: PathBuf::from(unescape(head[4])) };
        match tail[0] {
            "cgroup2" if out.v2.is_none() => out.v2 = Some(mount()),
            "cgroup" if out.v1_memory.is_none() && tail[2].split(',').any(|o| o == "memory") => {
                out.v1_memory = Some(mount())
            }
            _ => {}
        }
    }
    out
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| std::str::from_utf8(d).ok());
        match octal.and_then(|d| u8::from_str_radix(d, 8).ok()) {
            Some(b) if bytes[i] == b'\\' => {
                out.push(b);
                i += 4;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directory of cgroup `path` under `mount`, if the mount shows it (the path lies at or
/// below the mount's root).
pub(super) fn cgroup_dir(mount: &CgroupMount, path: &str) -> Option<PathBuf> {
    let root = mount.root.trim_end_matches('/');
    let rel = path.strip_prefix(root)?;
    if !(rel.is_empty() || rel.starts_with('/')) {
        return None;
    }
    let rel = rel.trim_start_matches('/');
    Some(if rel.is_empty() { mount.point.clone() } else { mount.point.join(rel) })
}

/// The first whitespace-separated number of a file, if it is one.
fn number(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// A v2 limit from `memory.max` and `memory.current`: `None` for `max` (no limit) or
/// unreadable text; else `(max, current)`.
pub(super) fn parse_v2_limit(max: &str, current: &str) -> Option<(u64, u64)> {
    Some((number(max)?, number(current)?))
}

/// A v1 limit from `memory.limit_in_bytes` and `memory.usage_in_bytes`: `None` for the
/// "unlimited" value (at least [`V1_UNLIMITED`]) or unreadable text.
pub(super) fn parse_v1_limit(limit: &str, usage: &str) -> Option<(u64, u64)> {
    let limit = number(limit).filter(|&l| l < V1_UNLIMITED)?;
    Some((limit, number(usage)?))
}

/// The tightest limit on `dir` and its ancestors up to `top` (the mount point): the
/// directory, its limit and usage. `files` names the limit and usage files, `parse` reads
/// them, `read` reads a file.
pub(super) fn tightest(
    dir: &Path,
    top: &Path,
    files: (&str, &str),
    parse: fn(&str, &str) -> Option<(u64, u64)>,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Option<(PathBuf, u64, u64)> {
    let mut dir = dir.to_path_buf();
    let mut best: Option<(PathBuf, u64, u64)> = None;
    while dir.starts_with(top) {
        let limit = read(&dir.join(files.0)).zip(read(&dir.join(files.1)));
        if let Some((max, current)) = limit.and_then(|(l, u)| parse(&l, &u)) {
            if best.as_ref().is_none_or(|(_, m, c)| max.saturating_sub(current) < m.saturating_sub(*c)) {
                best = Some((dir.clone(), max, current));
            }
        }
        if dir == top || !dir.pop() {
            break;
        }
    }
    best
}

/// The `oom_kill` count of a v2 `memory.events`, a v1 `memory.oom_control` or a
/// `/proc/vmstat` text (all three are `key value` lines; vmstat's counts every OOM kill on
/// the machine, since 4.13).
pub(super) fn parse_oom_kills(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::super::reader;
    use super::*;

    /// A hybrid (v1 + v2) host, as systemd sets it up, in a v1 memory cgroup of its own.
    const PROC_CGROUP_V1: &str = "12:hugetlb:/\n9:name=systemd:/\n8:pids:/\n\
        4:memory:/process_api/0e16\n3:cpuset:/\n1:cpu,cpuacct:/\n0::/\n";
    const MOUNTINFO_V1: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    /// A pure v2 host, in a systemd service.
    const PROC_CGROUP_V2: &str = "0::/system.slice/trainer.service\n";
    const MOUNTINFO_V2: &str = "\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
    /// memory.events of a cgroup that has seen 2 OOM kills (kernel 6.x).
    const MEMORY_EVENTS: &str = "low 0\nhigh 0\nmax 17\noom 2\noom_kill 2\noom_group_kill 0\n";
    /// memory.oom_control of a v1 cgroup (kernel 4.13+).
    const OOM_CONTROL: &str = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";

    #[test]
    fn proc_cgroup_and_mountinfo_find_the_memory_cgroups() {
        let v1 = parse_proc_cgroup(PROC_CGROUP_V1);
        assert_eq!(v1.v1_memory.as_deref(), Some("/process_api/0e16"));
        assert_eq!(v1.v2.as_deref(), Some("/"));
        let mounts = parse_mountinfo(MOUNTINFO_V1);
        let memory = mounts.v1_memory.clone().unwrap();
        assert_eq!((memory.root.as_str(), memory.point.as_path()), ("/", Path::new("/sys/fs/cgroup/memory")));
        assert_eq!(mounts.v2.unwrap().point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(
            cgroup_dir(&memory, "/process_api/0e16"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/0e16"))
        );
        let v2 = parse_proc_cgroup(PROC_CGROUP_V2);
        assert_eq!((v2.v2.as_deref(), v2.v1_memory), (Some("/system.slice/trainer.service"), None));
        let mounts = parse_mountinfo(MOUNTINFO_V2);
        assert_eq!(mounts.v1_memory, None);
        assert_eq!(
            cgroup_dir(&mounts.v2.unwrap(), "/system.slice/trainer.service"),
            Some(PathBuf::from("/sys/fs/cgroup/system.slice/trainer.service"))
        );
        assert_eq!(parse_proc_cgroup("garbage\n\n1:x\n"), ProcCgroups::default());
        assert_eq!(parse_mountinfo("garbage - x\n"), CgroupMounts::default());
    }

    #[test]
    fn a_mount_of_a_subtree_maps_paths_below_it_and_nothing_else() {
        // A container that sees only its own cgroup, mounted at /sys/fs/cgroup/memory,
        // with a space in a mount point.
        let info = "40 31 0:32 /docker/abc /sys/fs/cgroup/my\\040memory ro - cgroup cgroup rw,memory\n";
        let mount = parse_mountinfo(info).v1_memory.unwrap();
        assert_eq!(mount.point, PathBuf::from("/sys/fs/cgroup/my memory"));
        assert_eq!(cgroup_dir(&mount, "/docker/abc"), Some(mount.point.clone()));
        assert_eq!(cgroup_dir(&mount, "/docker/abc/w"), Some(mount.point.join("w")));
        assert_eq!(cgroup_dir(&mount, "/docker/abcd"), None);
        assert_eq!(cgroup_dir(&mount, "/other"), None);
    }

    #[test]
    fn limit_files_are_read_with_unlimited_as_no_limit() {
        assert_eq!(parse_v2_limit("2147483648\n", "1073741824\n"), Some((1 << 31, 1 << 30)));
        assert_eq!(parse_v2_limit("max\n", "1073741824\n"), None);
        assert_eq!(parse_v1_limit("2147483648\n", "4694016\n"), Some((1 << 31, 4_694_016)));
        assert_eq!(parse_v1_limit("9223372036854771712\n", "4694016\n"), None);
        assert_eq!(parse_v1_limit("", "1"), None);
    }

    #[test]
    fn the_tightest_limit_over_the_ancestors_wins() {
        let read = reader(&[
            ("/cg/memory/a/memory.limit_in_bytes", "2147483648\n"),
            ("/cg/memory/a/memory.usage_in_bytes", "1000\n"),
            ("/cg/memory/a/b/memory.limit_in_bytes", "9223372036854771712\n"),
            ("/cg/memory/a/b/memory.usage_in_bytes", "500\n"),
            ("/cg/memory/memory.limit_in_bytes", "1000\n"),
            ("/cg/memory/memory.usage_in_bytes", "0\n"),
            ("/cg/memory.limit_in_bytes", "1\n"),
            ("/cg/memory.usage_in_bytes", "0\n"),
        ]);
        let files = ("memory.limit_in_bytes", "memory.usage_in_bytes");
        let top = Path::new("/cg/memory");
        // The mount point's own (root) limit counts; nothing above the mount does.
        let got = tightest(Path::new("/cg/memory/a/b"), top, files, parse_v1_limit, &read);
        assert_eq!(got, Some((PathBuf::from("/cg/memory"), 1000, 0)));
        let read = reader(&[
            ("/cg/memory/a/memory.limit_in_bytes", "2147483648\n"),
            ("/cg/memory/a/memory.usage_in_bytes", "1000\n"),
        ]);
        let got = tightest(Path::new("/cg/memory/a/b"), top, files, parse_v1_limit, &read);
        assert_eq!(got, Some((PathBuf::from("/cg/memory/a"), 1 << 31, 1000)));
        assert_eq!(tightest(Path::new("/elsewhere"), top, files, parse_v1_limit, &read), None);
    }

    #[test]
    fn oom_kill_counters_are_read() {
        assert_eq!(parse_oom_kills(MEMORY_EVENTS), Some(2));
        assert_eq!(parse_oom_kills(OOM_CONTROL), Some(3));
        // Kernels before 4.13 have no oom_kill line.
        assert_eq!(parse_oom_kills("oom_kill_disable 0\nunder_oom 0\n"), None);
        assert_eq!(parse_oom_kills("nr_free_pages 5\noom_kill 7\nnuma_hit 1\n"), Some(7));
    }
}
