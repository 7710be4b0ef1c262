//! The `shmenv` binary as users run it: numeric arguments out of range are refused with
//! a message naming the argument, the value and the valid range; `list` prints bounds as
//! their dtype holds them; the CLI is its own worker program, and its workers die with it.

#[path = "../../tests/common/plugin_library.rs"]
mod plugin_library;
#[path = "../../tests/common/watchdog.rs"]
mod watchdog;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use watchdog::{alive, grandchildren, Watchdog};

const SHMENV: &str = env!("CARGO_BIN_EXE_shmenv");

fn shmenv(args: &[&str]) -> Output {
    Command::new(SHMENV).args(args).output().unwrap()
}

/// Runs a command line that must be refused; returns its stderr.
fn refused(args: &[&str]) -> String {
    let out = shmenv(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?} must be refused (exit 2): {stderr}");
    assert!(out.stdout.is_empty(), "{args:?} printed {}", String::from_utf8_lossy(&out.stdout));
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// Runs a command line the pool refuses at build (exit 1); returns its stderr.
fn refused_at_build(args: &[&str]) -> String {
    let out = shmenv(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{args:?} must fail (exit 1): {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn numbers_out_of_range_are_refused_by_name_value_and_range() {
    let _w = Watchdog::new("cli numbers", Duration::from_secs(60));
    for value in ["0", "-1", "nan", "inf", "1e300"] {
        let err = refused(&["bench", "--seconds", value]);
        assert!(err.contains(&format!("invalid value '{value}' for '--seconds <SECONDS>'")), "{err}");
        assert!(err.contains("must be a number of seconds from 0.01 to 86400"), "{err}");
    }
    let cases: [(&[&str], &str, &str); 8] = [
        (&["soak", "--minutes", "0"], "--minutes <MINUTES>", "minutes from 0.01 to 10080"),
        (&["soak", "--kill-every", "-3"], "--kill-every <KILL_EVERY>", "seconds from 0.01 to 3600"),
        (&["soak", "--report-every", "nan"], "--report-every <REPORT_EVERY>", "seconds from 0.05 to 3600"),
        (&["tune", "--seconds", "1e300"], "--seconds <SECONDS>", "seconds from 0.05 to 60"),
        (&["top", "--pid", "1", "--interval", "0"], "--interval <INTERVAL>", "seconds from 0.05 to 3600"),
        (&["bench", "--num-envs", "0"], "--num-envs <NUM_ENVS>", "must be at least 1, got 0"),
        (
            &["bench", "--workers", "-1"],
            "--workers <WORKERS>",
            "must be a whole number (0: the trainer steps every env)",
        ),
        (
            &["bench", "--batch-size", "x"],
            "--batch-size <BATCH_SIZE>",
            "whole number of at least 1, got \"x\"",
        ),
    ];
    for (args, arg, range) in cases {
        let err = refused(args);
        assert!(err.contains(arg) && err.contains(range), "{args:?}: {err}");
    }
    let err = refused(&["bench", "--wait", "fast"]);
    assert!(err.contains("[possible values: auto, spin, yield, block]"), "{err}");
}

#[test]
fn list_prints_f32_bounds_as_f32() {
    let _w = Watchdog::new("cli list", Duration::from_secs(60));
    let out = shmenv(&["list"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("CartPole-v1    obs Box([-4.8, -inf, -0.41887903, -inf], [4.8, inf,"),
        "{stdout}"
    );
    assert!(!stdout.contains("4.800000190734863"), "{stdout}");
}

#[test]
fn a_short_bench_runs_its_own_workers() {
    let _w = Watchdog::new("cli bench", Duration::from_secs(120));
    let out = shmenv(&[
        "bench",
        "--env",
        "CartPole-v1",
        "--num-envs",
        "4",
        "--workers",
        "2",
        "--seconds",
        "0.2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["workers"], 2);
    assert!(v["steps"].as_u64().unwrap() > 0, "{v}");
}

#[test]
fn bench_takes_the_trainers_shard_by_default_for_built_in_sync_pools() {
    let _w = Watchdog::new("cli trainer shard", Duration::from_secs(120));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run = |extra: &[&str]| {
        let mut args = vec!["bench", "--num-envs", "32", "--seconds", "0.1", "--json"];
        args.extend_from_slice(extra);
        let out = shmenv(&args);
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v["trainer_shard"].as_bool().unwrap(), v["trainer_shard_reason"].as_str().unwrap().to_string(), v)
    };
    // No flag: the CLI serves its own workers, so the trainer can build the built-in envs.
    let (on, reason, v) = run(&[]);
    // A batch that costs less than a handoff (CartPole's, in release builds) runs in the
    // trainer alone, on one core too.
    if v["trainer_shard_all"].as_bool().unwrap() {
        assert!(on && reason.contains("handoff") && v["workers"] == 0, "{v}");
    } else {
        assert_eq!(on, cores >= 2, "{v}");
        if on {
            assert_eq!(v["workers"].as_u64().unwrap() as usize, (cores.min(32) - 1).max(1), "{v}");
            assert!(reason.contains("sync mode"), "{reason}");
        }
    }
    for (extra, why) in [
        (&["--workers", "2"][..], "worker count"),
        (&["--batch-size", "16"][..], "async"),
        (&["--trainer-shard", "off"][..], "off as asked"),
    ] {
        let (on, reason, v) = run(extra);
        assert!(!on && reason.contains(why), "{extra:?}: {v}");
    }
    // A bare --trainer-shard is `on`, with the workers given too.
    let (on, reason, _) = run(&["--workers", "1", "--trainer-shard"]);
    assert!(on && reason == "on as asked", "{reason}");
    // --workers 0: the trainer steps every env; not with the shard off.
    let (on, reason, v) = run(&["--workers", "0"]);
    assert!(on && v["trainer_shard_all"] == true && v["workers"] == 0, "{reason}: {v}");
    let err = refused_at_build(&["bench", "--workers", "0", "--trainer-shard", "off", "--seconds", "0.1"]);
    assert!(err.contains("needs trainer_shard on or auto"), "{err}");
}

#[test]
fn workers_die_with_their_trainer() {
    let _w = Watchdog::new("workers die with the trainer", Duration::from_secs(60));
    // A trainer process (the CLI) with 2 workers, killed while stepping.
    let mut trainer = Command::new(SHMENV)
        .args(["bench", "--env", "Burn-v0", "--num-envs", "2", "--workers", "2", "--seconds", "60", "--json"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let workers = loop {
        let w = grandchildren(trainer.id());
        if w.len() == 2 {
            break w;
        }
        assert!(Instant::now() < deadline, "the trainer did not start its workers");
        std::thread::sleep(Duration::from_millis(20));
    };
    trainer.kill().unwrap();
    trainer.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while workers.iter().any(|&p| alive(p)) {
        assert!(Instant::now() < deadline, "workers outlived their trainer");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn workers_restart_after_the_binary_is_deleted() {
    let _w = Watchdog::new("restart after delete", Duration::from_secs(60));
    // A rebuild replaces the binary under a running trainer: replacement workers must
    // still start, and run the trainer's own version (through /proc/self/exe).
    let copy = std::env::temp_dir().join(format!("shmenv-cli-test-{}", std::process::id()));
    std::fs::copy(SHMENV, &copy).unwrap();
    let trainer = Command::new(&copy)
        .args(["soak", "--num-envs", "4", "--workers", "2", "--minutes", "0.05", "--kill-every", "0.4"])
        .args(["--report-every", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    std::fs::remove_file(&copy).unwrap();
    let out = trainer.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let done = stdout.lines().find(|l| l.starts_with("soak done:")).expect("a summary line");
    let restarts: u32 = done.split(" restarts").next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(restarts >= 3, "{done}");
}

/// Pool settings the pool refuses, through the CLI: a typed error naming the value and the
/// range, exit code 1, no panic, no process left, at once.
#[test]
fn pool_settings_out_of_range_are_refused_by_the_pool() {
    let _w = Watchdog::new("cli pool settings", Duration::from_secs(120));
    let room_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().find(|l| l.starts_with("MemAvailable:")).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<u64>().ok()))
        .map_or(64, |kib| kib >> 20);
    let envs = (room_gib + 2).to_string();
    let cases: [(&[&str], &[&str]); 2] = [
        (
            &["bench", "--workers", "5000", "--num-envs", "5000", "--seconds", "1"],
            &["num_workers must be between 1 and 1024", "got 5000"],
        ),
        (
            &[
                "bench",
                "--env",
                "Burn-v0",
                "--num-envs",
                &envs,
                "--workers",
                "1",
                "--seconds",
                "1",
                "--config",
            ],
            &["would need", "MemAvailable is", "raise the memory limit"],
        ),
    ];
    for (args, words) in cases {
        let mut args = args.to_vec();
        if args.last() == Some(&"--config") {
            args.push(r#"{"obs_shape": [512, 1024, 1024], "obs_dtype": "u8"}"#);
        }
        let out = shmenv(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        for w in words {
            assert!(stderr.contains(w), "{args:?}: {w:?} missing: {stderr}");
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn list_and_bench_take_a_plugin_library() {
    let _w = Watchdog::new("cli plugin", Duration::from_secs(60));
    let lib = plugin_library::plugin_library("examples/c/cartpole.c");
    let lib = lib.to_str().unwrap();
    let out = shmenv(&["list", "--plugin", lib]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("CartPoleC-v1   obs Box([-4.8, -inf, -0.41887903, -inf], [4.8, inf, 0.41887903, inf], [4], f32), action Discrete(2), limit 500 steps"),
        "{stdout}"
    );
    let args = ["bench", "--plugin", lib, "--env", "CartPoleC-v1", "--num-envs", "8", "--workers", "2"];
    let out = shmenv(&[&args[..], &["--seconds", "0.2", "--baseline", "--json"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        report["steps"].as_u64().unwrap() > 0 && report["baseline_steps"].as_u64().unwrap() > 0,
        "{report}"
    );
    let out = shmenv(&["bench", "--plugin", "/nonexistent/lib.so", "--env", "CartPoleC-v1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("plugin library /nonexistent/lib.so: No such file"), "{stderr}");
}

/// Sizes and bounds from configs and plugin specs are checked (no wrapped products): each
/// refusal names the shape or bound and the rule, and `list` shows every env of a plugin,
/// with why those that cannot be created cannot.
#[test]
fn shapes_and_bounds_from_configs_and_plugins_are_refused_by_name() {
    let _w = Watchdog::new("cli specs", Duration::from_secs(120));
    let config = r#"{"obs_shape": [4294967296, 4294967296], "obs_dtype": "u8"}"#;
    let out = shmenv(&["bench", "--env", "Burn-v0", "--num-envs", "1", "--seconds", "1", "--config", config]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("config key \"obs_shape\": shape [4294967296, 4294967296] of u8"), "{stderr}");
    assert!(stderr.contains("(1 GiB)") && !stderr.contains("panicked"), "{stderr}");

    let lib = plugin_library::plugin_library("tests/plugins/specs.c");
    let lib = lib.to_str().unwrap();
    let out =
        shmenv(&["bench", "--plugin", lib, "--env", "U8Range-v0", "--num-envs", "2", "--seconds", "0.1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("(low -5, high 1000) has a bound its dtype cannot hold; u8 bounds are 0..=255"),
        "{stderr}"
    );

    let out = shmenv(&["list", "--plugin", lib]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.contains("LongSpec-v0    obs Box([-1.5, -2.5, -3.5, -4.5, ... 1992 more ..."), "{stdout}");
    assert!(stdout.contains("NaNBound-v0    cannot be created with config {}"), "{stdout}");
    assert!(stderr.contains("of the plugin's 9 envs cannot be created"), "{stderr}");
}

#[test]
fn bench_contend_reports_every_setting_idle_and_loaded_and_leaves_no_busy_process() {
    let _w = Watchdog::new("cli contend", Duration::from_secs(120));
    let child = Command::new(SHMENV)
        .args(["bench", "--num-envs", "64", "--workers", "2", "--seconds", "0.2", "--baseline", "--json"])
        .args(["--contend", "1", "--trainer-threads", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The busy process shows up among the benchmark's children while it runs.
    let start = Instant::now();
    let mut busy = Vec::new();
    while busy.is_empty() && start.elapsed() < Duration::from_secs(20) {
        let is_busy = |p: &u32| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.windows(13).any(|w| w == b"busy\0--parent"))
        };
        busy = grandchildren(child.id()).into_iter().filter(is_busy).collect();
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 7, "6 settings and the serial loop: {doc}");
    for row in rows {
        assert!(row["idle_steps_per_sec"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["loaded_steps_per_sec"].as_f64().unwrap() > 0.0, "{row}");
    }
    assert_eq!((rows[0]["wait"].as_str(), rows[0]["affinity"].as_str()), (Some("auto"), Some("auto")));
    assert!(doc["load"].as_str().unwrap().contains("1 busy processes"), "{doc}");
    assert!(!busy.is_empty(), "the busy process was seen while the benchmark ran");
    assert!(busy.iter().all(|&p| !alive(p)), "no busy process is left: {busy:?}");
}
