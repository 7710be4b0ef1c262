//! `shmenv top`: a live, read-only view of the pools of a running process.

use crate::args;
use crate::stepping::fmt_rate;
use crate::Error;
use serde_json::json;
use shmenv::{StatsReport, StatsSnapshot};
use shmenv_engine::stats::attach::AttachedPool;
use std::io::IsTerminal;
use std::time::Duration;

/// `shmenv top` arguments.
#[derive(clap::Args)]
pub struct TopArgs {
    /// Pid of the trainer (or of one of its workers).
    #[arg(long)]
    pid: u32,
    /// Print one interval and exit.
    #[arg(long)]
    once: bool,
    /// Print JSON (with --once: one object; otherwise one object per line).
    #[arg(long)]
    json: bool,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0, value_parser = args::report_every, allow_negative_numbers = true)]
    interval: f64,
}

/// Runs `shmenv top`.
pub fn run(args: TopArgs) -> Result<(), Error> {
    let pools = shmenv_engine::stats::attach::attach(args.pid)?;
    let interval = Duration::from_secs_f64(args.interval);
    let mut before: Vec<StatsSnapshot> = pools.iter().map(|p| p.snapshot()).collect();
    let live = !args.once && !args.json && std::io::stdout().is_terminal();
    loop {
        std::thread::sleep(interval);
        if !std::path::Path::new(&format!("/proc/{}", args.pid)).exists() {
            if args.once {
                return Err(format!("process {} exited during the interval", args.pid).into());
            }
            println!("process {} exited", args.pid);
            return Ok(());
        }
        let now: Vec<StatsSnapshot> = pools.iter().map(|p| p.snapshot()).collect();
        let reports: Vec<_> = now.iter().zip(&before).map(|(n, b)| n.since(Some(b))).collect();
        if args.json {
            let out = json!({
                "pid": args.pid,
                "pools": pools.iter().zip(&reports).zip(&now).map(|((p, r), totals)| json!({
                    "fd": p.fd, "env_id": p.params.env_id, "num_envs": p.params.num_envs,
                    "num_workers": p.params.num_workers, "batch_size": p.params.batch_size,
                    "started": p.started(), "interval": r, "verdict": r.verdict(), "totals": totals,
                })).collect::<Vec<_>>(),
            });
            println!("{out}");
        } else {
            if live {
                print!("\x1b[2J\x1b[H");
            }
            for (p, r) in pools.iter().zip(&reports) {
                print_pool(args.pid, p, r);
            }
        }
        if args.once {
            return Ok(());
        }
        before = now;
    }
}

fn print_pool(pid: u32, p: &AttachedPool, r: &StatsReport) {
    let mode = if p.params.batch_size < p.params.num_envs {
        format!("async, batches of {}", p.params.batch_size)
    } else {
        "sync".into()
    };
    println!(
        "pid {pid} fd {}: {} x {} on {} workers ({mode}){}",
        p.fd,
        p.params.env_id,
        p.params.num_envs,
        p.params.num_workers,
        if r.enabled { "" } else { "  [worker stats off]" }
    );
    println!(
        "  {:>10} steps/s  {:>8.0} batches/s  trainer waits {:>5.1}% of its time  [{}]",
        fmt_rate(r.steps_per_sec),
        r.batches as f64 / r.seconds,
        100.0 * r.trainer_wait_share,
        r.verdict()
    );
    println!(
        "  wait mode {} (batches asleep {:.0}%, tuner probes {}, switches {}); trainer waits for a CPU {:.1}% of its time; other tasks' CPU {}",
        r.wait_mode.name(),
        100.0 * r.sleep_share,
        r.wait_probes,
        r.wait_switches,
        100.0 * r.trainer_runqueue_share,
        r.others_share.map_or("unknown".into(), |s| format!("{:.1}%", 100.0 * s))
    );
    if r.shard_steps > 0 {
        let rate = fmt_rate(r.shard_steps as f64 / r.seconds);
        println!("  the trainer's own shard: {rate} steps/s, {:.1}% of its time", 100.0 * r.shard_share);
    }
    println!("  worker     pid   steps/s   util   wait  publish   runq   step p50    step p99");
    for w in &r.workers {
        let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2} us"));
        println!(
            "  {:>6} {:>7} {:>9} {:>5.1}% {:>5.1}% {:>7.1}% {:>5.1}% {:>10} {:>11}",
            w.worker,
            w.pid,
            fmt_rate(w.steps_per_sec),
            100.0 * w.utilization,
            100.0 * w.wait_share,
            100.0 * w.publish_share,
            100.0 * w.runqueue_share,
            us(w.step_p50_us),
            us(w.step_p99_us)
        );
    }
}
