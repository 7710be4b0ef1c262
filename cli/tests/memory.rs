//! The CLI's own memory: `bench` and `tune` keep 64 batches of pre-drawn actions per pool
//! (and per serial loop) besides the pool, and an env count whose pool and tapes together
//! do not fit in the memory this process may use is refused before any pool is built,
//! naming the bytes, the room and where it comes from, and the most envs that fit.

#[path = "../../tests/common/watchdog.rs"]
mod watchdog;

use shmenv_engine::pool::MemoryRoom;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;
use watchdog::Watchdog;

const SHMENV: &str = env!("CARGO_BIN_EXE_shmenv");

/// Runs the binary with `args`; its exit code, stderr and peak RSS in KiB (from `wait4`).
fn run(args: &[&str]) -> (Option<i32>, String, i64) {
    let mut child =
        Command::new(SHMENV).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct wait4 fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are valid out-pointers; the pid is our own child, not yet
    // reaped (std's `Child` is dropped without a wait below).
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4: {}", std::io::Error::last_os_error());
    drop(child);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, stderr, usage.ru_maxrss)
}

/// Whether this machine has room for `bytes` (then the count is not refused here).
fn has_room_for(bytes: u64) -> bool {
    let room = MemoryRoom::read().room().unwrap_or(u64::MAX);
    if room >= bytes {
        eprintln!("skipped: this process may use {room} bytes, enough for the run");
    }
    room >= bytes
}

/// `args` must be refused by the memory check before any pool exists: exit 1, the message,
/// and a peak RSS far below any pool or tape of that size.
fn refused(args: &[&str], num_envs: &str, command: &str) -> String {
    let (code, stderr, max_rss_kib) = run(args);
    assert_eq!(code, Some(1), "{args:?} must fail with exit code 1: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let fits: u64 = stderr
        .split("At most ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count that fits in: {stderr}"));
    for part in [
        &format!("error: {command} would need about "),
        &format!("for --num-envs {num_envs}: "),
        &format!("{command}'s action tapes "),
        "(64 batches of pre-drawn random actions, 512 bytes per env per tape)",
        "the pool's shared-memory region",
        "more than this process may use: ",
        "MemAvailable is ",
        &format!("At most {fits} envs fit: use --num-envs {fits} or fewer"),
        "raise the memory limit",
    ] {
        assert!(stderr.contains(part), "{part:?} missing: {stderr}");
    }
    assert!(fits < num_envs.parse::<u64>().unwrap(), "{stderr}");
    // Nothing of the size asked for was allocated: no pool, no tape (100M envs' tape alone
    // is 51 GB).
    assert!(max_rss_kib < 512 << 10, "peak RSS {max_rss_kib} KiB: something was allocated; {stderr}");
    stderr
}

#[test]
fn a_hundred_million_cartpole_envs_are_refused_for_the_tape_before_any_pool() {
    let _w = Watchdog::new("cli 100M envs", Duration::from_secs(120));
    // The tape alone is 51.2 GB; the pool about 22 GiB.
    if has_room_for(80 << 30) {
        return;
    }
    let args = ["bench", "--env", "CartPole-v1", "--num-envs", "100000000", "--seconds", "1"];
    let stderr = refused(&args, "100000000", "bench");
    assert!(stderr.contains("bench's action tapes 47.68 GiB"), "{stderr}");
    println!("{stderr}");
    let stderr = refused(&["tune", "--num-envs", "100000000", "--seconds", "0.05"], "100000000", "tune");
    assert!(stderr.contains("tune's action tapes 47.68 GiB"), "{stderr}");
}

#[test]
fn the_largest_env_count_is_refused_before_any_pool() {
    let _w = Watchdog::new("cli largest env count", Duration::from_secs(120));
    if has_room_for(2 << 40) {
        return;
    }
    let args = ["bench", "--num-envs", "1073741823", "--seconds", "1"];
    let stderr = refused(&args, "1073741823", "bench");
    assert!(!stderr.contains("--baseline"), "{stderr}");
    // With the serial loop: its envs and a second tape count too, and the advice names it.
    let stderr = refused(&[&args[..], &["--baseline"]].concat(), "1073741823", "bench");
    for part in
        ["the serial loop's envs and rows ", "built in this process for --baseline", "(or drop --baseline)"]
    {
        assert!(stderr.contains(part), "{part:?} missing: {stderr}");
    }
    // One env more than a pool may have: the engine's range check says so.
    let (code, stderr, _) = run(&["bench", "--num-envs", "1073741824", "--seconds", "1"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("num_envs must be between 1 and 1073741823, got 1073741824"), "{stderr}");
}
