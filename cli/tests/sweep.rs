//! `shmenv bench --sweep`: every value runs once per round (the serial loop too, with
//! `--baseline`), the JSON carries every run, the table every value, the `--plot` file is
//! an SVG with the series; bad values and plot paths are refused before any run, exit 1.
//! No assertion on throughput: only on what the command decides.

#[path = "../../tests/common/watchdog.rs"]
mod watchdog;

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;
use watchdog::Watchdog;

const SHMENV: &str = env!("CARGO_BIN_EXE_shmenv");

fn shmenv(args: &[&str]) -> Output {
    Command::new(SHMENV).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh directory of this test process under the system's temp directory.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shmenv-sweep-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The values of `doc["settings"][..][key]`.
fn column(doc: &Value, key: &str) -> Vec<Value> {
    doc["settings"].as_array().unwrap().iter().map(|s| s[key].clone()).collect()
}

/// Each run list holds one run per round, rounds 1..=rounds in some order, each with steps.
fn assert_rounds(runs: &Value, rounds: u64) {
    let mut seen: Vec<u64> = runs.as_array().unwrap().iter().map(|r| r["round"].as_u64().unwrap()).collect();
    seen.sort_unstable();
    assert_eq!(seen, (1..=rounds).collect::<Vec<_>>(), "{runs}");
    for r in runs.as_array().unwrap() {
        assert!(r["steps"].as_u64().unwrap() > 0 && r["steps_per_sec"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn a_workers_sweep_reports_every_setting_and_round_and_plots_them() {
    let _w = Watchdog::new("sweep workers", Duration::from_secs(180));
    let dir = temp_dir("workers");
    let svg = dir.join("p.svg");
    let out = shmenv(&[
        "bench",
        "--sweep",
        "workers",
        "--values",
        "2,1",
        "--rounds",
        "2",
        "--seconds",
        "0.2",
        "--num-envs",
        "16",
        "--baseline",
        "--plot",
        svg.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["sweep"], "workers");
    assert_eq!(doc["values"], serde_json::json!([1, 2]), "sorted: {doc}");
    assert_eq!(column(&doc, "workers"), vec![Value::from(1), Value::from(2)]);
    assert_eq!(column(&doc, "num_envs"), vec![Value::from(16), Value::from(16)]);
    for s in doc["settings"].as_array().unwrap() {
        assert_rounds(&s["runs"], 2);
        assert!(s["ratio_to_serial"].as_f64().is_some() && s["ratio_to_linear"].as_f64().is_some(), "{s}");
    }
    // Linear scaling: the 1-worker median times the workers.
    let first = doc["settings"][0]["median_steps_per_sec"].as_f64().unwrap();
    let linear = doc["settings"][1]["linear_steps_per_sec"].as_f64().unwrap();
    assert!((linear - 2.0 * first).abs() <= 1e-6 * linear, "{doc}");
    assert_rounds(&doc["baseline"]["runs"], 2);
    assert_eq!(doc["baseline"]["num_envs"], 16);

    let svg_text = std::fs::read_to_string(&svg).expect("the plot is written");
    let xml = roxmltree::Document::parse(&svg_text).expect("the plot is well-formed XML");
    assert_eq!(xml.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = xml.descendants().filter_map(|n| n.text()).collect();
    for series in
        ["shmenv pool (median)", "serial loop (in-process, median)", "linear scaling", "worker processes"]
    {
        assert!(texts.iter().any(|t| t.contains(series)), "{series} not in the plot's texts: {texts:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_table_lists_each_setting_and_says_which_oversubscribe() {
    let _w = Watchdog::new("sweep table", Duration::from_secs(180));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let over = (cores + 1).to_string();
    // Async (batches of half the envs), one round: 1 worker, and one more than the cores.
    let envs = (2 * (cores + 1)).to_string();
    let batch = (cores + 1).to_string();
    let values = format!("1,{over}");
    let out = shmenv(&[
        "bench",
        "--sweep",
        "workers",
        "--values",
        &values,
        "--rounds",
        "1",
        "--seconds",
        "0.1",
        "--num-envs",
        &envs,
        "--batch-size",
        &batch,
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(&format!("async, batches of {batch}")), "{stdout}");
    let rows: Vec<&str> = stdout.lines().skip(2).filter(|l| !l.contains("load average")).collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert_eq!(rows[0].split_whitespace().next(), Some("1"), "{stdout}");
    assert!(!rows[0].contains("oversubscribed"), "{stdout}");
    assert_eq!(rows[1].split_whitespace().next(), Some(over.as_str()), "{stdout}");
    assert!(rows[1].contains(&format!("oversubscribed: {over} workers on {cores} cores")), "{stdout}");
}

#[test]
fn num_envs_and_batch_size_sweeps_of_any_env() {
    let _w = Watchdog::new("sweep num-envs, batch-size", Duration::from_secs(180));
    // Burn-v0 with a config, the trainer's own shard; the serial loop steps the most envs.
    let out = shmenv(&[
        "bench",
        "--env",
        "Burn-v0",
        "--config",
        r#"{"step_us": 5}"#,
        "--sweep",
        "num-envs",
        "--values",
        "4,8",
        "--workers",
        "1",
        "--trainer-shard",
        "--rounds",
        "1",
        "--seconds",
        "0.1",
        "--baseline",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((doc["env"].as_str(), doc["trainer_shard"].as_str()), (Some("Burn-v0"), Some("on")));
    assert_eq!(column(&doc, "num_envs"), vec![Value::from(4), Value::from(8)]);
    assert_eq!(column(&doc, "ratio_to_linear"), vec![Value::Null, Value::Null], "linear is for workers");
    assert_eq!(doc["baseline"]["num_envs"], 8);
    // Batch sizes default to the divisors num-envs / 16, 8, 4, 2, 1.
    let out = shmenv(&[
        "bench",
        "--sweep",
        "batch-size",
        "--num-envs",
        "8",
        "--rounds",
        "1",
        "--seconds",
        "0.1",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let modes = ["async", "async", "async", "sync"].map(Value::from).to_vec();
    assert_eq!(column(&doc, "batch_size"), [1, 2, 4, 8].map(Value::from).to_vec());
    assert_eq!(column(&doc, "mode"), modes);
    assert_eq!(doc["baseline"], Value::Null);
}

/// Runs a sweep that must be refused before any run; returns its stderr.
fn refused(args: &[&str], says: &[&str]) {
    let out = shmenv(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    // Nothing ran: no table or JSON was printed.
    assert!(out.stdout.is_empty(), "{args:?} printed {}", text(&out.stdout));
    assert!(!stderr.contains("panicked"), "{stderr}");
    for s in says {
        assert!(stderr.contains(s), "{args:?}: {s:?} not in {stderr}");
    }
}

/// `bench` with long runs (a run started would show on stdout) and `extra`.
fn sweep<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    [&["bench", "--seconds", "60", "--rounds", "5"][..], extra].concat()
}

#[test]
fn bad_values_and_plot_paths_are_refused_before_any_run() {
    let _w = Watchdog::new("sweep refused", Duration::from_secs(120));
    refused(&sweep(&["--sweep", "workers", "--values", "0"]), &["--values 0", "at least 1, got 0"]);
    refused(&sweep(&["--sweep", "workers", "--values", "1,two"]), &["\"two\" is not a whole number"]);
    refused(
        &sweep(&["--sweep", "batch-size", "--num-envs", "64", "--values", "16,24"]),
        &[
            "value 24: a batch size of 24 does not divide the 64 envs",
            "divisors of 64 are 1, 2, 4, 8, 16, 32, 64",
        ],
    );
    refused(
        &sweep(&["--sweep", "num-envs", "--batch-size", "8", "--values", "16,12"]),
        &["value 12: a batch size of 8 does not divide the 12 envs"],
    );
    refused(&sweep(&["--sweep", "workers", "--num-envs", "4", "--values", "2,5"]), &["5 workers for 4 envs"]);
    refused(
        &sweep(&["--sweep", "workers", "--workers", "2"]),
        &["--workers 2 is what --sweep workers varies"],
    );
    refused(&sweep(&["--sweep", "workers", "--profile"]), &["--profile is for a single run"]);
    let dir = temp_dir("refused");
    let missing = dir.join("no/such/dir/p.svg");
    refused(
        &sweep(&["--sweep", "workers", "--values", "1", "--plot", missing.to_str().unwrap()]),
        &["--plot", "cannot open it for writing", "nothing was run"],
    );
    let png = dir.join("p.png");
    refused(&sweep(&["--sweep", "workers", "--plot", png.to_str().unwrap()]), &["must end in .svg"]);
    assert!(!png.exists(), "no file is left by a refused plot path");
    let _ = std::fs::remove_dir_all(dir);
    // Sweep options without --sweep are usage errors (clap's exit 2).
    let out = shmenv(&["bench", "--values", "1,2"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--sweep"), "{}", text(&out.stderr));
}
