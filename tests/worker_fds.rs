//! The fds a worker program holds once it serves: the region's memfd, which the trainer
//! hands it open across exec, is close-on-exec again in the worker, so no program an env
//! starts (`os.system`, a plugin's fork and exec, `std::process::Command`) inherits a
//! writable fd of the shared region that outlives the pool.

mod common;

use common::{builder, Watchdog};
use std::time::Duration;

/// `O_CLOEXEC` as the `flags:` line of `/proc/<pid>/fdinfo/<fd>` shows it (octal).
const FDINFO_CLOEXEC: u32 = 0o2000000;

/// The memfds process `pid` holds: (fd, its link, its `fdinfo` flags).
fn memfds(pid: u32) -> Vec<(String, String, u32)> {
    let dir = format!("/proc/{pid}/fd");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {dir}: {e}"));
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let fd = entry.file_name().to_string_lossy().into_owned();
        let Ok(link) = std::fs::read_link(entry.path()) else { continue };
        let link = link.to_string_lossy().into_owned();
        if !link.starts_with("/memfd:") {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
            .unwrap_or_else(|| panic!("no flags in fdinfo of {pid}/{fd}: {info}"));
        out.push((fd, link, flags));
    }
    out
}

#[test]
fn the_region_memfd_is_close_on_exec_in_the_workers() {
    let _w = Watchdog::new("worker fds", Duration::from_secs(120));
    let mut pool = builder("CartPole-v1").num_envs(4).num_workers(2).build().unwrap();
    pool.reset().unwrap();
    for &pid in pool.worker_pids() {
        let fds = memfds(pid);
        assert!(!fds.is_empty(), "worker {pid} holds no memfd: it has no region");
        for (fd, link, flags) in fds {
            assert_eq!(
                flags & FDINFO_CLOEXEC,
                FDINFO_CLOEXEC,
                "worker {pid}'s fd {fd} ({link}) is inherited by the programs it starts (flags {flags:o})"
            );
        }
    }
    pool.close();
}
