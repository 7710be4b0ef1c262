//! `shmenv top` attaches read-only to a pool running in another process and reports it;
//! attaching to a process without a pool, or to a dead pid, is a clear error.

#[path = "../../tests/common/watchdog.rs"]
mod watchdog;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use watchdog::Watchdog;

const SHMENV: &str = env!("CARGO_BIN_EXE_shmenv");

/// Kills the child when dropped, so a failing test leaves nothing running.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn top(pid: u32) -> std::process::Output {
    Command::new(SHMENV)
        .args(["top", "--pid", &pid.to_string(), "--once", "--json", "--interval", "0.3"])
        .output()
        .unwrap()
}

#[test]
fn top_reports_a_pool_running_in_another_process() {
    let _w = Watchdog::new("top attaches", Duration::from_secs(90));
    let bench = Command::new(SHMENV)
        .args(["bench", "--env", "Burn-v0", "--config", r#"{"step_us":100}"#, "--num-envs", "4"])
        .args(["--workers", "2", "--seconds", "60", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let bench = Guard(bench);
    let pid = bench.0.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    let report = loop {
        let out = top(pid);
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if v["pools"][0]["interval"]["steps"].as_u64().unwrap_or(0) > 0 {
                break v;
            }
        }
        assert!(Instant::now() < deadline, "top never saw the pool step: {out:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(report["pid"].as_u64(), Some(pid as u64));
    let pool = &report["pools"][0];
    assert_eq!(pool["env_id"], "Burn-v0");
    assert_eq!((pool["num_envs"].as_u64(), pool["num_workers"].as_u64()), (Some(4), Some(2)));
    let interval = &pool["interval"];
    assert!(interval["steps_per_sec"].as_f64().unwrap() > 0.0);
    let workers = interval["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2);
    for w in workers {
        let pid = w["pid"].as_u64().unwrap();
        // The worker pid belongs to a live worker process named for ps.
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(cmdline.starts_with(&format!("shmenv-worker[{}] Burn-v0", w["worker"])), "{cmdline:?}");
        let util = w["utilization"].as_f64().unwrap();
        assert!(util > 0.0 && util <= 1.01, "{w}");
        assert!(w["step_p50_us"].as_f64().unwrap() > 50.0, "a 100 us step: {w}");
    }
    assert!(pool["totals"]["workers"][0]["steps"].as_u64().unwrap() > 0);
    // The text view works too.
    let out = Command::new(SHMENV).args(["top", "--pid", &pid.to_string(), "--once"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Burn-v0 x 4 on 2 workers") && text.contains("step p50"), "{text}");
}

#[test]
fn top_on_a_process_without_a_pool_or_a_dead_pid_is_a_clear_error() {
    let _w = Watchdog::new("top errors", Duration::from_secs(60));
    let sleeper = Guard(Command::new("sleep").arg("30").spawn().unwrap());
    let out = top(sleeper.0.id());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no shmenv pool"), "{err}");
    assert!(err.contains("(sleep)"), "{err}");

    let mut done = Command::new("true").spawn().unwrap();
    let dead = done.id();
    done.wait().unwrap();
    let out = top(dead);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("no process with pid {dead}")), "{err}");
}

#[test]
fn tune_ranks_configurations_and_recommends_one() {
    let _w = Watchdog::new("tune", Duration::from_secs(120));
    let out = Command::new(SHMENV)
        .args(["tune", "--env", "Burn-v0", "--num-envs", "4", "--seconds", "0.05", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ranked = v["ranked"].as_array().unwrap();
    assert!(!ranked.is_empty());
    let rates: Vec<f64> = ranked.iter().map(|t| t["steps_per_sec"].as_f64().unwrap()).collect();
    assert!(rates.windows(2).all(|w| w[0] >= w[1]) && rates[0] > 0.0, "{rates:?}");
    // Burn-v0 trivial x 4: a trainer shard is tried; shown only when clearly faster.
    assert!(v["trainer_shard_trial"]["trainer_shard"].as_bool().unwrap(), "{v}");
    let rec = &v["recommended"];
    // The defaults (a pool built with them, timed like a trial) are recommended unless a
    // trial beats them by more than 5%: then no worker count is written.
    let default_rate = v["default_pool"]["steps_per_sec"].as_f64().unwrap();
    assert!(default_rate > 0.0 && v["default_pool"]["workers"].is_u64(), "{v}");
    if v["default_pool"]["recommended"].as_bool().unwrap() {
        // Within 5% of the ranked recommendation, itself within 5% of the fastest trial.
        assert!(default_rate >= rates[0] * 0.95 * 0.95, "{v}");
        assert_eq!(rec["cli"], "shmenv bench --env Burn-v0 --num-envs 4", "{v}");
        assert_eq!(rec["python"], "shmenv.make_vec(\"Burn-v0\", num_envs=4)", "{v}");
        return;
    }
    let best = &ranked[0];
    let rust = rec["rust"].as_str().unwrap();
    assert!(rust.starts_with("Pool::builder(\"Burn-v0\").num_envs(4)"), "{rust}");
    assert!(rust.contains(&format!(".num_workers({})", best["workers"])), "{rust}");
    let cli = rec["cli"].as_str().unwrap();
    assert!(
        cli.starts_with(&format!("shmenv bench --env Burn-v0 --num-envs 4 --workers {}", best["workers"])),
        "{cli}"
    );
    let python = rec["python"].as_str().unwrap();
    assert!(
        python.starts_with(&format!(
            "shmenv.make_vec(\"Burn-v0\", num_envs=4, num_workers={}",
            best["workers"]
        )),
        "{python}"
    );
    if let Some(own) = v["with_trainer_shard"]["cli"].as_str() {
        assert!(own.ends_with("--trainer-shard"), "{own}");
    }
}
