//! Env code that forks, the child carrying on: a C plugin calls fork() inside its batched
//! step (`tests/plugins/forks.c`) and both processes return into the host. The copy must be
//! stopped before it touches the pool (no row written, no post taken or made, no command
//! answered): the parent's observations stay 1..8 in order, the copy exits at once with
//! `FORKED_COPY_EXIT`, and the same holds for the trainer's own shard.

mod common;

use common::plugin_library::plugin_library;
use common::{builder, Watchdog};
use serde_json::json;
use shmenv::worker::{trainer_shard, Registry};
use shmenv::{Pool, WorkerExit};
use shmenv_engine::launch::fork::FORKED_COPY_EXIT;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A fresh, empty directory for the plugin's pid files.
fn pid_dir(name: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fork_in_env-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The pids the plugin recorded (the forked copies).
fn copies(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    pids.sort_unstable();
    pids
}

/// Whether `pid` exists and is not a zombie.
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit_once(')').is_some_and(|(_, rest)| rest.split_whitespace().next() != Some("Z"))
        }
        Err(_) => false,
    }
}

/// Waits up to 20 s for `pid` to end; reaps it if it is a child of this process. Returns
/// its exit status when it was ours (`Some`), `None` when it was another's (a worker's).
fn ended(pid: i32) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local; WNOHANG never blocks.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Some(status);
        }
        if r < 0 && !running(pid) {
            return None; // Not our child, and no longer running.
        }
        assert!(Instant::now() < deadline, "forked copy {pid} still running after 20 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills the copies still running (a failed run of the old code), so that none is left.
fn kill_copies(dir: &Path) {
    for pid in copies(dir) {
        if running(pid) {
            // SAFETY: kill(2) has no memory preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Resets `pool`, then steps it 8 times: every env's observation is its step count.
fn steps_count_up(pool: &mut Pool) {
    let n = pool.num_envs();
    let obs = |b: &shmenv::Batch<'_>| b.observations::<i32>().unwrap().as_slice().to_vec();
    assert_eq!(obs(&pool.reset().unwrap()), vec![0; n], "reset");
    for t in 1..=8 {
        Watchdog::at(&format!("step {t}"));
        let batch = pool.step(&vec![0i64; n]).unwrap_or_else(|e| panic!("step {t}: {e}"));
        assert_eq!(obs(&batch), vec![t; n], "step {t}");
    }
}

#[test]
fn a_copy_forked_inside_a_workers_env_is_stopped_before_it_touches_the_pool() {
    let _w = Watchdog::new("fork inside a worker's env", Duration::from_secs(120));
    let dir = pid_dir("workers");
    let lib = plugin_library("tests/plugins/forks.c");
    let config = json!({"fork_at": 2, "pid_dir": dir.to_str().unwrap()});
    let b = builder("ForkInStep-v0").plugin(&lib).config(config).num_envs(4).num_workers(2);
    let mut pool = b.step_timeout(Duration::from_secs(20)).build().unwrap();
    steps_count_up(&mut pool);
    let pids = copies(&dir);
    assert_eq!(pids.len(), 2, "one copy per worker: {pids:?}");
    // Each copy ended before the pool closed (a zombie of its worker until then).
    for &pid in &pids {
        assert_eq!(ended(pid), None, "copy {pid} is the worker's child, not ours");
    }
    assert_eq!(pool.close(), vec![Some(WorkerExit::Code(0)); 2]);
    assert!(pids.iter().all(|&p| !running(p)), "copies left: {pids:?}");
    kill_copies(&dir);
}

#[test]
fn a_copy_of_the_trainer_forked_inside_its_own_shard_is_stopped() {
    let _w = Watchdog::new("fork inside the trainer's shard", Duration::from_secs(120));
    let dir = pid_dir("trainer");
    let lib = plugin_library("tests/plugins/forks.c");
    let config = json!({"fork_at": 2, "pid_dir": dir.to_str().unwrap()});
    let b = builder("ForkInStep-v0").plugin(&lib).config(config).num_envs(4).num_workers(1);
    let b = b.trainer_shard(trainer_shard(Registry::with_builtins()));
    let mut pool = b.step_timeout(Duration::from_secs(20)).build().unwrap();
    assert_eq!(pool.trainer_envs(), 0..2);
    steps_count_up(&mut pool);
    let pids = copies(&dir);
    assert_eq!(pids.len(), 2, "one copy per shard: {pids:?}");
    // The trainer's shard forked this process: its copy exited with FORKED_COPY_EXIT.
    let ours: Vec<i32> = pids.iter().filter_map(|&pid| ended(pid)).collect();
    assert_eq!(ours.len(), 1, "copies of the trainer among {pids:?}");
    for status in ours {
        assert!(libc::WIFEXITED(status), "status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), FORKED_COPY_EXIT);
    }
    assert_eq!(pool.close(), vec![Some(WorkerExit::Code(0))]);
    assert!(pids.iter().all(|&p| !running(p)), "copies left: {pids:?}");
    kill_copies(&dir);
}

#[test]
fn a_timeout_with_no_worker_behind_says_what_did_not_finish() {
    // What a trainer sees when a copy of it (forked during the call) took the workers'
    // posts: every worker finished, so none is named.
    let err =
        shmenv::PoolFailure::Timeout { workers: vec![], env_ids: vec![], waited: Duration::from_secs(3) };
    let text = err.to_string();
    assert!(!text.contains("workers []") && !text.contains("envs []"), "{text}");
    assert!(text.contains("no worker was behind") && text.contains("completion posts"), "{text}");
    assert!(text.contains("copy of the trainer made by fork()") && text.contains("3s"), "{text}");
    let err = shmenv::PoolFailure::Timeout {
        workers: vec![1],
        env_ids: vec![2, 3],
        waited: Duration::from_secs(3),
    };
    assert!(err.to_string().starts_with("workers [1] (envs [2, 3]) did not answer within"), "{err}");
}
