//! Attaching read-only to the pools of a running process (`shmenv top`): find its shmenv
//! regions among its fds (`/proc/<pid>/fd`, same user only), map each read-only, and check
//! the header and parameters before reading anything. Every byte is untrusted: a corrupt
//! or foreign region is an error, never a panic.

use super::StatsSnapshot;
use crate::protocol::{self, Header, PoolParams};
use crate::region::Region;
use std::path::PathBuf;

/// Why an observer (`shmenv top`) could not attach read-only to a process's pools.
#[derive(Debug, thiserror::Error)]
pub enum ObserverAttachError {
    /// No such process.
    #[error("no process with pid {pid} (has it exited?)")]
    NoProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// Its fds are not ours to read.
    #[error(
        "cannot read the fds of process {pid}: permission denied (attach to processes of your own user, \
         or run as root)"
    )]
    PermissionDenied {
        /// The pid asked for.
        pid: u32,
    },
    /// It holds no shmenv region.
    #[error(
        "process {pid} ({name}) has no shmenv pool: none of its fds is a memfd:shmenv region; \
         pass the pid of a trainer (or worker) that has a pool open"
    )]
    NoPool {
        /// The pid asked for.
        pid: u32,
        /// Its command name.
        name: String,
    },
    /// A region that looks like shmenv's but cannot be trusted.
    #[error("process {pid}, fd {fd}: {reason}")]
    BadRegion {
        /// The pid.
        pid: u32,
        /// The fd.
        fd: u32,
        /// What is wrong with it.
        reason: String,
    },
}

/// One pool of another process, mapped read-only.
#[derive(Debug)]
pub struct AttachedPool {
    /// The process.
    pub pid: u32,
    /// The fd of the region in that process.
    pub fd: u32,
    /// The validated header.
    pub header: Header,
    /// The pool's parameters (env id, config, sizes).
    pub params: PoolParams,
    region: Region,
}

impl AttachedPool {
    /// The pool's live counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot::read(&self.region, &self.params)
    }

    /// Whether the pool finished starting (its data part is laid out).
    pub fn started(&self) -> bool {
        self.header.total_size != 0
    }
}

/// The shmenv pools of process `pid` (usually one), in fd order.
pub fn attach(pid: u32) -> Result<Vec<AttachedPool>, ObserverAttachError> {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    if !proc_dir.exists() {
        return Err(ObserverAttachError::NoProcess { pid });
    }
    let entries = match std::fs::read_dir(proc_dir.join("fd")) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(ObserverAttachError::PermissionDenied { pid })
        }
        Err(_) => return Err(ObserverAttachError::NoProcess { pid }),
    };
    let mut fds: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("/memfd:shmenv "))
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    if fds.is_empty() {
        let name = std::fs::read_to_string(proc_dir.join("comm")).unwrap_or_default().trim().to_string();
        return Err(ObserverAttachError::NoPool { pid, name });
    }
    fds.into_iter().map(|fd| attach_fd(pid, fd)).collect()
}

fn attach_fd(pid: u32, fd: u32) -> Result<AttachedPool, ObserverAttachError> {
    let bad = |reason: String| ObserverAttachError::BadRegion { pid, fd, reason };
    let path = PathBuf::from(format!("/proc/{pid}/fd/{fd}"));
    let region = Region::open_read_only(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => ObserverAttachError::PermissionDenied { pid },
        _ => bad(format!("cannot map it: {e}")),
    })?;
    if region.len() < std::mem::size_of::<Header>() {
        return Err(bad(format!("{} bytes, too small for a header", region.len())));
    }
    // SAFETY: the mapping is read-only, so no thread of this process writes it; the pool's
    // processes may (a starting pool rewrites its header): the copy is validated below.
    let header: Header = unsafe { region.snapshot_pod(0) };
    header.validate(region.len()).map_err(|e| bad(e.to_string()))?;
    let num_workers = header.num_workers as usize;
    let params_at = protocol::params_offset(num_workers);
    // SAFETY: as for the header; the JSON is parsed and checked against the header.
    let json = unsafe { region.snapshot_bytes(params_at, header.params_len as usize) };
    let params: PoolParams =
        serde_json::from_slice(&json).map_err(|e| bad(format!("unreadable pool parameters: {e}")))?;
    if params.num_workers != num_workers || params.num_envs != header.num_envs as usize {
        return Err(bad("pool parameters disagree with the header".into()));
    }
    Ok(AttachedPool { pid, fd, header, params, region })
}
