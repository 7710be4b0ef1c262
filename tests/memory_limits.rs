//! Memory limits: env counts the memory cannot hold are refused before any worker starts
//! (in this machine's memory, and in a 2 GiB memory cgroup of their own), the per-env
//! figures of the built-in envs follow their structs, and a worker that the kernel's OOM
//! killer ends, during start-up or while the pool steps, is reported as such (a real OOM
//! kill, in a small memory cgroup).
//!
//! The cgroup tests run a copy of this test binary (the ignored test `child_in_cgroup`)
//! that moves itself into a memory cgroup made for it, under this process's own (cgroup
//! v1 `memory.limit_in_bytes`, or v2 `memory.max`); where that cannot be made (no write
//! access, or a v2 cgroup whose controllers cannot be delegated), they say so and skip.

mod common;

use common::plugin_library::plugin_library;
use common::{builder, child_pids, Watchdog};
use shmenv::worker::envs::{Burn, CartPole, Pendulum};
use shmenv::{BuildError, PoolFailure, WorkerExit};
use shmenv_engine::launch::WorkerCommand;
use shmenv_engine::pool::{most_that_fit, MemoryRoom, PoolEstimate};
use shmenv_engine::protocol::PoolParams;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The most envs a pool may have.
const MAX_ENVS: usize = (1 << 30) - 1;

/// The environment variables that make `child_in_cgroup` run: its cgroup directory, and
/// what to do there.
const CHILD_CGROUP: &str = "SHMENV_MEMTEST_CGROUP";
const CHILD_MODE: &str = "SHMENV_MEMTEST_MODE";

/// The tests count this process's children: one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `MAX_ENVS` CartPole envs: refused by the check before any worker exists (its estimate of
/// the workers' envs is in the error: the check after the handshake has none), unless this
/// machine could hold them.
fn refuse_max_envs(env_id: &str) -> Option<BuildError> {
    let room = MemoryRoom::read().room().expect("/proc/meminfo is readable");
    // At least 55 bytes of region and 100 of worker state per env: about 155 GiB.
    if room > 150 << 30 {
        eprintln!("skipped: this machine has {room} bytes free, enough for {MAX_ENVS} envs");
        return None;
    }
    Some(builder(env_id).num_envs(MAX_ENVS).num_workers(2).build().map(|_| ()).unwrap_err())
}

#[test]
fn the_largest_env_count_is_refused_before_any_worker_starts() {
    let _serial = serial();
    let _w = Watchdog::new("largest env count", Duration::from_secs(120));
    let Some(err) = refuse_max_envs("CartPole-v1") else { return };
    let message = err.to_string();
    let BuildError::NotEnoughMemory { num_envs, region, workers, per_env, fits, .. } = err else {
        panic!("{message}")
    };
    assert_eq!(num_envs, MAX_ENVS);
    assert!(workers > 0 && region > 0 && per_env > 0, "refused after the workers started: {message}");
    assert!(fits < MAX_ENVS, "{message}");
    for part in [
        &format!("for {MAX_ENVS} envs"),
        "MemAvailable is",
        "the workers' envs",
        &format!("At most {fits} envs fit"),
        "use fewer envs",
        "raise the memory limit",
    ] {
        assert!(message.contains(part), "{part:?} missing: {message}");
    }
    assert!(child_pids().is_empty(), "workers left behind");
}

#[test]
fn the_built_in_envs_per_env_figures_follow_their_structs() {
    let _w = Watchdog::new("per-env figures", Duration::from_secs(120));
    // A room of 2 GiB made here, not read from this machine: the figures are checked
    // whatever it has free.
    let room = MemoryRoom { mem_available: Some(2 << 30), cgroup: None };
    let free = room.room().unwrap();
    // Besides the env's own struct, a worker holds at least its boxed slot and bookkeeping
    // (29 bytes); Burn-v0 also holds its observation shape (a few dims).
    for (id, size, extra) in [
        ("CartPole-v1", size_of::<CartPole>(), 0),
        ("Pendulum-v1", size_of::<Pendulum>(), 0),
        ("Burn-v0", size_of::<Burn>(), 32),
    ] {
        // The estimate the pool checks before any worker starts (no spec yet).
        let params = pool_params(id, MAX_ENVS);
        let estimate = |n: u64| PoolEstimate::new(&params, n, None);
        let per_env = estimate(MAX_ENVS as u64).per_env;
        let least = (size + extra + 29) as u64;
        assert!(per_env >= least && per_env <= least + 160, "{id}: {per_env} bytes per env, struct {size}");
        assert_eq!(estimate(MAX_ENVS as u64).workers, MAX_ENVS as u64 * per_env, "{id}");
        // In the room, the count that fits is bounded by the per-env figure alone.
        let fits = most_that_fit(MAX_ENVS as u64, free, |n| estimate(n).total());
        assert!(fits > 0 && fits * per_env < free, "{id}: {fits} envs fit in {free} bytes");
        assert!(estimate(fits).total() <= free && estimate(fits + 1).total() > free, "{id}: {fits}");
    }
}

/// The settings of a pool of `num_envs` envs `env_id` on 2 workers, as the builder makes
/// them by default.
fn pool_params(env_id: &str, num_envs: usize) -> PoolParams {
    shmenv::PoolBuilder::default_params(env_id, num_envs, 2)
}

/// A memory cgroup made for one test under this process's own, removed on drop.
struct TestCgroup {
    dir: PathBuf,
}

impl TestCgroup {
    /// A cgroup limited to `limit` bytes (and no swap), or why none can be made here.
    fn new(name: &str, limit: u64) -> Result<TestCgroup, String> {
        let (parent, v1) = own_memory_cgroup()?;
        let dir = parent.join(format!("shmenv-test-{name}-{}", std::process::id()));
        if !v1 {
            let control = parent.join("cgroup.subtree_control");
            let enabled = std::fs::read_to_string(&control).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "memory") {
                std::fs::write(&control, "+memory").map_err(|e| {
                    format!(
                        "the memory controller is not enabled for the children of {} and cannot be ({e}: under \
                         cgroup v2 a cgroup with processes of its own cannot delegate it)",
                        parent.display()
                    )
                })?;
            }
        }
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cgroup = TestCgroup { dir };
        let write = |file: &str, value: &str| {
            std::fs::write(cgroup.dir.join(file), value)
                .map_err(|e| format!("cannot write {value} to {file}: {e}"))
        };
        if v1 {
            write("memory.limit_in_bytes", &limit.to_string())?;
            // Without swap accounting there is no such file, and no swap to limit.
            let _ = write("memory.memsw.limit_in_bytes", &limit.to_string());
        } else {
            write("memory.max", &limit.to_string())?;
            let _ = write("memory.swap.max", "0");
        }
        Ok(cgroup)
    }

    /// Runs `child_in_cgroup` in `mode` inside the cgroup; its exit and output.
    fn run_child(&self, mode: &str) -> (bool, String) {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_in_cgroup", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_CGROUP, &self.dir)
            .env(CHILD_MODE, mode)
            .output()
            .expect("the test binary runs");
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Its processes are gone once the child is reaped; the kernel may take a moment to
        // let go of the last of them.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("cannot remove {}", self.dir.display());
    }
}

/// This process's memory cgroup directory, and whether it is cgroup v1's.
fn own_memory_cgroup() -> Result<(PathBuf, bool), String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let mount = |fstype: &str, option: Option<&str>| {
        mountinfo.lines().find_map(|l| {
            let (head, tail) = l.split_once(" - ")?;
            let (head, tail): (Vec<&str>, Vec<&str>) = (head.split(' ').collect(), tail.split(' ').collect());
            let fits = tail.first() == Some(&fstype)
                && option.is_none_or(|o| tail.get(2).is_some_and(|opts| opts.split(',').any(|x| x == o)));
            fits.then(|| (head[3].to_string(), PathBuf::from(head[4])))
        })
    };
    let under = |(root, point): (String, PathBuf), path: &str| {
        let rel = path.strip_prefix(root.trim_end_matches('/'))?.trim_start_matches('/').to_string();
        Some(if rel.is_empty() { point } else { point.join(rel) })
    };
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if controllers.split(',').any(|c| c == "memory") {
            let dir = mount("cgroup", Some("memory")).and_then(|m| under(m, path));
            return dir.map(|d| (d, true)).ok_or("the v1 memory cgroup is not mounted here".to_string());
        }
    }
    let path = cgroups.lines().find_map(|l| l.strip_prefix("0::")).ok_or("no memory cgroup")?;
    let dir = mount("cgroup2", None).and_then(|m| under(m, path)).ok_or("cgroup2 is not mounted here")?;
    if !dir.join("memory.current").exists() && !dir.join("cgroup.subtree_control").exists() {
        return Err(format!("{} has no memory controller", dir.display()));
    }
    Ok((dir, false))
}

/// Runs `mode` in a cgroup of `limit` bytes; the child's output, or None (skipped).
fn in_cgroup(name: &str, limit: u64, mode: &str) -> Option<String> {
    let cgroup = match TestCgroup::new(name, limit) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: no memory cgroup can be made for this test: {why}");
            return None;
        }
    };
    let (ok, output) = cgroup.run_child(mode);
    assert!(ok, "the child in {} failed:\n{output}", cgroup.dir.display());
    println!("{output}");
    Some(output)
}

#[test]
fn env_counts_a_2gib_cgroup_cannot_hold_are_refused() {
    let _serial = serial();
    let _w = Watchdog::new("2 GiB cgroup", Duration::from_secs(240));
    let Some(output) = in_cgroup("refuse", 2 << 30, "refuse") else { return };
    assert!(output.contains("child: refused 100000000 and 60000000 envs"), "{output}");
}

#[test]
fn a_worker_the_oom_killer_ends_is_reported_as_such() {
    let _serial = serial();
    let _w = Watchdog::new("OOM kill", Duration::from_secs(240));
    let Some(output) = in_cgroup("oom", 96 << 20, "oom") else { return };
    assert!(output.contains("child: the OOM kill was reported"), "{output}");
}

#[test]
fn a_worker_the_oom_killer_ends_while_the_pool_steps_is_reported_as_such() {
    let _serial = serial();
    let _w = Watchdog::new("OOM kill while stepping", Duration::from_secs(240));
    // Built here: the child in the cgroup only loads it.
    let lib = plugin_library("tests/plugins/grows.c");
    let mode = format!("oom-stepping:{}", lib.display());
    let Some(output) = in_cgroup("oom-stepping", 128 << 20, &mode) else { return };
    assert!(output.contains("child: the OOM kill while stepping was reported"), "{output}");
}

/// The part of the cgroup tests that runs inside the cgroup (started by them, with the
/// cgroup and the mode in its environment).
#[test]
#[ignore = "run by the cgroup tests of this file, inside a cgroup made for it"]
fn child_in_cgroup() {
    let _w = Watchdog::new("child in a cgroup", Duration::from_secs(200));
    let dir = PathBuf::from(std::env::var_os(CHILD_CGROUP).expect("run by the cgroup tests"));
    std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).unwrap();
    match std::env::var(CHILD_MODE).as_deref() {
        Ok("refuse") => child_refuses(&dir),
        Ok("oom") => child_sees_an_oom_kill(),
        Ok(other) if other.starts_with("oom-stepping:") => {
            child_sees_an_oom_kill_while_stepping(Path::new(&other["oom-stepping:".len()..]))
        }
        other => panic!("unknown mode {other:?}"),
    }
}

/// In a 2 GiB cgroup: 100M and 60M CartPole envs are refused at once, naming the cgroup;
/// a pool that fits starts and steps.
fn child_refuses(dir: &Path) {
    let room = MemoryRoom::read();
    let limit = room.cgroup.clone().expect("the cgroup's limit is read");
    assert_eq!((limit.path.as_path(), limit.max), (dir, 2 << 30), "{room:?}");
    for n in [100_000_000, 60_000_000] {
        let started = Instant::now();
        let err = builder("CartPole-v1").num_envs(n).num_workers(2).build().map(|_| ()).unwrap_err();
        let message = err.to_string();
        let BuildError::NotEnoughMemory { num_envs, workers, fits, .. } = err else { panic!("{message}") };
        assert!(num_envs == n && workers > 0 && fits < n, "{message}");
        assert!(message.contains(&format!("cgroup v{} {}", limit.version, dir.display())), "{message}");
        assert!(message.contains("allows 2.00 GiB"), "{message}");
        assert!(child_pids().is_empty(), "a worker was started");
        println!("refused {n} envs in {:?}: {message}", started.elapsed());
    }
    let mut pool = builder("CartPole-v1").num_envs(1000).num_workers(2).build().unwrap();
    pool.reset().unwrap();
    pool.step(&vec![0i64; 1000]).unwrap();
    println!("child: refused 100000000 and 60000000 envs");
}

/// A worker that allocates until the OOM killer ends it (a shell holding a growing string,
/// made the OOM killer's first choice): the pool reports it killed by the OOM killer.
fn child_sees_an_oom_kill() {
    let grow = "echo 1000 > /proc/self/oom_score_adj; x=$(head -c 4000000000 /dev/zero | tr '\\0' x); exit 3";
    let command = WorkerCommand::new("/bin/sh").arg("-c").arg(grow);
    let err = builder("CartPole-v1")
        .worker_command(command)
        .num_envs(1)
        .num_workers(1)
        .startup_timeout(Duration::from_secs(120))
        .build()
        .map(|_| ())
        .unwrap_err();
    let message = err.to_string();
    let BuildError::WorkerDied { exit, oom_kill, .. } = err else { panic!("{message}") };
    assert_eq!(exit, WorkerExit::Signal(libc::SIGKILL), "{message}");
    let kill = oom_kill.unwrap_or_else(|| panic!("no OOM kill seen: {message}"));
    assert!(kill.after > kill.before, "{kill:?}");
    assert!(message.contains("killed by the OOM killer (memory)"), "{message}");
    assert!(!message.contains("built against this shmenv version"), "{message}");
    println!("{message}\nchild: the OOM kill was reported");
}

/// A pool of one `Grow-v0` env (plugin `lib`), which starts at its second step to allocate
/// until the OOM killer ends its worker: that step fails with `WorkerDied`, killed by the
/// OOM killer (memory), naming the counter that rose.
fn child_sees_an_oom_kill_while_stepping(lib: &Path) {
    let mut pool = builder("Grow-v0").plugin(lib).num_envs(1).num_workers(1).build().unwrap();
    pool.reset().unwrap();
    pool.step(&[0i64]).unwrap();
    let pid = pool.worker_pids()[0];
    let err = pool.step(&[0i64]).map(|_| ()).unwrap_err();
    let message = err.to_string();
    let failure = err.into_failure().unwrap_or_else(|e| panic!("refused, not failed: {e}"));
    let PoolFailure::WorkerDied { worker, pid: dead, exit, oom_kill, .. } = failure else {
        panic!("{message}")
    };
    assert_eq!((worker, dead, exit), (0, pid, WorkerExit::Signal(libc::SIGKILL)), "{message}");
    let kill = oom_kill.unwrap_or_else(|| panic!("no OOM kill seen: {message}"));
    assert!(kill.after > kill.before, "{kill:?}");
    assert!(message.contains("was killed by the OOM killer (memory) (killed by signal 9"), "{message}");
    assert!(message.contains(&format!("oom_kill in {}", kill.counter.display())), "{message}");
    assert!(message.contains("raise the memory limit"), "{message}");
    println!("{message}\nchild: the OOM kill while stepping was reported");
}
