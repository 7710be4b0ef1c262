//! The CLI's small failures, through the real `shmenv` binary: a `--trace` path that cannot
//! be written is refused before the run; running out of processes or threads
//! (`ulimit -u`) is a clear error with exit code 1, no panic and no backtrace; a Burn-v0
//! step that could not finish is refused by its config check.

#[path = "../../tests/common/watchdog.rs"]
mod watchdog;

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use watchdog::Watchdog;

const SHMENV: &str = env!("CARGO_BIN_EXE_shmenv");

/// Waits for `child` up to `limit` (a bound for a broken build, not a measure), killing it
/// and failing with `what` if it is still running.
fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{what}: still running after {limit:?}; stderr: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_trace_path_that_cannot_be_written_is_refused_before_the_run() {
    let _w = Watchdog::new("cli trace path", Duration::from_secs(120));
    // An hour of benchmark: the old CLI ran it all before it tried the path.
    let bench = ["bench", "--num-envs", "4", "--workers", "1", "--seconds", "3600", "--json", "--trace"];
    let child = Command::new(SHMENV)
        .args(bench)
        .arg("/nonexistent-shmenv-dir/t.json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(child, Duration::from_secs(60), "bench with an unwritable --trace");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "exit status of the refused run; stderr: {stderr}");
    assert!(
        stderr.contains(
            "--trace /nonexistent-shmenv-dir/t.json: cannot open it for writing: No such file or directory (os error 2)"
        ),
        "the message names the path and the OS error: {stderr}"
    );
    assert!(stdout.is_empty(), "no results were printed (nothing ran): {stdout}");

    // A file the check created is removed when the run then fails (here: a bad config).
    let dir = std::env::temp_dir().join(format!("shmenv-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.json");
    let out = Command::new(SHMENV)
        .args(["bench", "--env", "Burn-v0", "--config", r#"{"step_us": "x"}"#, "--seconds", "1", "--trace"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "exit status of the bad config; stderr: {}", text(&out.stderr));
    assert!(!path.exists(), "the empty trace file created by the check is left after the failed run");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_burn_step_that_could_not_finish_is_refused_by_name_value_and_range() {
    let _w = Watchdog::new("cli step_us bound", Duration::from_secs(120));
    let child = Command::new(SHMENV)
        .args(["bench", "--env", "Burn-v0", "--num-envs", "2", "--workers", "1", "--seconds", "1"])
        .args(["--config", r#"{"step_us": 18446744073709551615}"#])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(child, Duration::from_secs(60), "bench with step_us u64::MAX");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit status; stderr: {stderr}");
    let expected =
        "bad config for Burn-v0: config key \"step_us\" is 18446744073709551615, expected 0 to 60000000";
    assert!(stderr.contains(expected), "the refusal names the key, the value and the range: {stderr}");
    assert!(out.stdout.is_empty(), "no results were printed: {}", text(&out.stdout));
}

/// Who the limited runs run as.
#[derive(Clone, Copy)]
struct User {
    uid: u32,
    gid: u32,
    /// A user of its own (`nobody`, when this test runs as root): no other task of it comes
    /// or goes while the test runs, so a limit a few tasks above its count holds exactly.
    dedicated: bool,
}

/// `None` when this test runs as root and there is no `nobody` (root is exempt from
/// RLIMIT_NPROC, so it must run the CLI as another user).
fn limited_user() -> Option<User> {
    // SAFETY: getuid and getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if uid != 0 {
        return Some(User { uid, gid, dedicated: false });
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let fields: Vec<&str> = passwd.lines().find(|l| l.starts_with("nobody:"))?.split(':').collect();
    let id = |i: usize| fields.get(i).and_then(|v| v.parse().ok());
    Some(User { uid: id(2)?, gid: id(3)?, dedicated: true })
}

/// The tasks (threads of every process) whose real uid is `uid`: what RLIMIT_NPROC counts.
fn tasks_of(uid: u32) -> u64 {
    let mut tasks = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            let line = status.lines().find(|l| l.starts_with(name))?;
            line.split_whitespace().nth(1).map(str::to_string)
        };
        if field("Uid:").and_then(|u| u.parse::<u32>().ok()) == Some(uid) {
            tasks += field("Threads:").and_then(|t| t.parse::<u64>().ok()).unwrap_or(1);
        }
    }
    tasks
}

/// Runs the CLI with `args` as `user` under RLIMIT_NPROC `limit`, with RUST_BACKTRACE=1 (a
/// panic would print its backtrace).
fn limited(user: User, limit: u64, args: &[&str]) -> Output {
    let mut command = Command::new(SHMENV);
    command.args(args).current_dir("/").env("RUST_BACKTRACE", "1");
    if user.dedicated {
        command.uid(user.uid).gid(user.gid);
    }
    // SAFETY: the closure calls only setrlimit (async-signal-safe) on a local value, between
    // fork and exec; it lowers the limit, which needs no privilege.
    unsafe {
        command.pre_exec(move || {
            let rlimit = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            match libc::setrlimit(libc::RLIMIT_NPROC, &rlimit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    command.output().unwrap()
}

/// A run refused for want of processes: exit 1, the limit named, no panic, no backtrace.
fn assert_clear_limit_error(out: &Output, args: &[&str], limit: u64) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?} under ulimit -u {limit}: exit status; stderr: {stderr}");
    assert!(stderr.contains("error: "), "{args:?}: an `error:` line: {stderr}");
    assert!(stderr.contains("Resource temporarily unavailable"), "{args:?}: the OS error: {stderr}");
    let named = format!("the limit on processes and threads was reached (ulimit -u is {limit} here");
    assert!(stderr.contains(&named), "{args:?}: the limit named: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("stack backtrace"),
        "{args:?}: no panic: {stderr}"
    );
}

#[test]
fn running_out_of_processes_is_a_clear_error_not_a_panic() {
    let _w = Watchdog::new("cli ulimit -u", Duration::from_secs(240));
    let Some(user) = limited_user() else {
        eprintln!(
            "skipped: root is exempt from RLIMIT_NPROC and there is no user `nobody` to run the CLI as"
        );
        return;
    };
    // No room beyond the CLI itself: its pool's first worker (or supervisor thread) cannot
    // start. (A user that is not dedicated has at least this test running: limit 1.)
    let room = if user.dedicated { tasks_of(user.uid) + 1 } else { 1 };
    let runs: [&[&str]; 2] =
        [&["bench", "--num-envs", "4", "--workers", "2", "--seconds", "0.2"], &["soak", "--minutes", "0.01"]];
    for args in runs {
        let out = limited(user, room, args);
        assert_clear_limit_error(&out, args, room);
        let stderr = text(&out.stderr);
        assert!(stderr.contains("cannot start worker program"), "{args:?}: what could not start: {stderr}");
    }
    if !user.dedicated {
        eprintln!("skipped the killer-thread case: it needs a user of its own (run as root, with `nobody`)");
        return;
    }
    // Room for more and more of soak's processes and threads (the trainer, the pool's
    // supervisor thread, 2 workers, then the killer thread): every run ends cleanly, and one
    // gets as far as the killer thread and no farther.
    let mut killer_refused = false;
    for extra in 1..=8 {
        let limit = tasks_of(user.uid) + extra;
        let args = ["soak", "--num-envs", "4", "--workers", "2", "--minutes", "0.01", "--kill-every", "0.2"];
        let out = limited(user, limit, &args);
        let last = text(&out.stderr).lines().last().unwrap_or("").to_string();
        eprintln!("soak under ulimit -u {limit}: {}: {last}", out.status);
        if out.status.success() {
            break;
        }
        assert_clear_limit_error(&out, &args, limit);
        killer_refused |= text(&out.stderr).contains("cannot start the soak's killer thread");
    }
    assert!(killer_refused, "no limit stopped soak at its killer thread (the tasks it needs changed?)");
}
