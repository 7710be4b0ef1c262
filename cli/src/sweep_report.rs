//! What `bench --sweep` reports: the table, the JSON object with every run, and the data
//! of the plot.

use crate::args::TrainerShard;
use crate::bench::BenchArgs;
use crate::plot::PlotData;
use crate::stepping::fmt_rate;
use crate::sweep::{baseline_setting, Setting, Sweep};
use serde_json::{json, Value};

/// One timed run of a setting (or of the serial loop).
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// The round it ran in, from 1.
    pub round: u32,
    /// Env steps taken.
    pub steps: u64,
    /// Seconds spent taking them.
    pub seconds: f64,
}

impl Run {
    /// Env steps per second.
    pub fn rate(&self) -> f64 {
        self.steps as f64 / self.seconds
    }
}

/// Everything a sweep measured.
pub struct Measured {
    /// What was swept.
    pub sweep: Sweep,
    /// The cores this process may use.
    pub cores: usize,
    /// The settings, by value.
    pub settings: Vec<Setting>,
    /// Each setting's runs, a run per round.
    pub runs: Vec<Vec<Run>>,
    /// The serial loop's runs, with `--baseline`.
    pub serial: Option<Vec<Run>>,
    /// The load average before and after the runs.
    pub loads: (f64, f64),
}

/// Median, min and max steps/s of some runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The slowest run's rate.
    pub min: f64,
    /// The fastest run's rate.
    pub max: f64,
}

/// The summary of `runs` (all zero for none).
pub fn summary(runs: &[Run]) -> Summary {
    let mut rates: Vec<f64> = runs.iter().map(Run::rate).collect();
    rates.sort_by(f64::total_cmp);
    let n = rates.len();
    if n == 0 {
        return Summary { median: 0.0, min: 0.0, max: 0.0 };
    }
    let median = if n % 2 == 1 { rates[n / 2] } else { (rates[n / 2 - 1] + rates[n / 2]) / 2.0 };
    Summary { median, min: rates[0], max: rates[n - 1] }
}

impl Measured {
    fn summaries(&self) -> Vec<Summary> {
        self.runs.iter().map(|r| summary(r)).collect()
    }

    fn serial_median(&self) -> Option<f64> {
        self.serial.as_ref().map(|r| summary(r).median)
    }

    /// For a workers sweep, the linear-scaling reference of each setting: the fewest
    /// workers' median times the worker count over that count (the 1-worker median times
    /// the count when 1 is swept).
    fn linear(&self) -> Option<Vec<f64>> {
        if self.sweep != Sweep::Workers {
            return None;
        }
        let first = self.settings.first()?;
        let per_worker = summary(&self.runs[0]).median / first.workers as f64;
        Some(self.settings.iter().map(|s| per_worker * s.workers as f64).collect())
    }

    /// The settings every value shares, in words: "CartPole-v1, 1024 envs, sync".
    fn fixed(&self, args: &BenchArgs) -> String {
        let mut parts = vec![args.envs.env.clone()];
        if self.sweep != Sweep::NumEnvs {
            parts.push(format!("{} envs", args.envs.num_envs));
        }
        match (self.sweep, args.workers) {
            (Sweep::Workers, _) => {}
            (_, Some(w)) => parts.push(format!("{w} workers")),
            (_, None) => parts.push("default workers".into()),
        }
        if args.trainer_shard == TrainerShard::On {
            parts.push("and the trainer's shard".into());
        }
        match (self.sweep, args.batch_size) {
            (Sweep::BatchSize, _) => {}
            (_, Some(b)) => parts.push(format!("async, batches of {b}")),
            (_, None) => parts.push("sync".into()),
        }
        parts.join(", ")
    }
}

/// "medians of 3 interleaved rounds", "1 round".
fn medians_of(rounds: u32) -> String {
    match rounds {
        1 => "1 round".into(),
        r => format!("medians of {r} interleaved rounds"),
    }
}

/// The table on stdout.
pub fn print_table(args: &BenchArgs, m: &Measured) {
    let rounds = args.sweep.rounds;
    println!(
        "{}; --sweep {}: {} of {} s each, {} cores",
        m.fixed(args),
        m.sweep.name(),
        medians_of(rounds),
        args.seconds,
        m.cores
    );
    let (serial, linear) = (m.serial_median(), m.linear());
    let col = m.sweep.column();
    println!(
        "  {col:>9}  {:>14} {:>10} {:>10} {:>10} {:>10}",
        "median steps/s", "min", "max", "vs serial", "vs linear"
    );
    for (i, (s, sum)) in m.settings.iter().zip(m.summaries()).enumerate() {
        let vs_serial = serial.map_or("-".into(), |b| format!("{:.2}x", sum.median / b));
        let vs_linear = linear.as_ref().map_or("-".into(), |l| format!("{:.2}x", sum.median / l[i]));
        let mut notes = Vec::new();
        if m.sweep != Sweep::Workers {
            notes.push(format!("{} workers", s.workers));
        }
        if m.sweep == Sweep::BatchSize || (m.sweep == Sweep::NumEnvs && args.batch_size.is_some()) {
            notes.push(if s.batch_size < s.num_envs { "async".into() } else { "sync".into() });
        }
        if s.trainer_shard && args.trainer_shard != TrainerShard::On {
            notes.push("and the trainer's shard".into());
        }
        if s.oversubscribed {
            let shard = if s.trainer_shard { " and the trainer's shard" } else { "" };
            notes.push(format!("oversubscribed: {} workers{shard} on {} cores", s.workers, m.cores));
        }
        let line = format!(
            "  {:>9}  {:>14} {:>10} {:>10} {vs_serial:>10} {vs_linear:>10}  {}",
            s.value,
            fmt_rate(sum.median),
            fmt_rate(sum.min),
            fmt_rate(sum.max),
            notes.join("; ")
        );
        println!("{}", line.trim_end());
    }
    if let Some(runs) = &m.serial {
        let sum = summary(runs);
        let envs = m.settings[baseline_setting(m.sweep, &m.settings)].num_envs;
        println!(
            "  {:>9}  {:>14} {:>10} {:>10} {:>10} {:>10}  (serial loop: the same {envs} envs and actions, in-process)",
            "serial",
            fmt_rate(sum.median),
            fmt_rate(sum.min),
            fmt_rate(sum.max),
            "1.00x",
            "-"
        );
    }
    println!("  load average {:.2} before, {:.2} after", m.loads.0, m.loads.1);
}

fn runs_json(runs: &[Run]) -> Value {
    runs.iter()
        .map(|r| json!({"round": r.round, "steps": r.steps, "seconds": r.seconds, "steps_per_sec": r.rate()}))
        .collect()
}

/// The `--json` object: the sweep's settings, and each setting's runs and figures.
pub fn json(args: &BenchArgs, config: &Value, m: &Measured) -> Value {
    let (serial, linear) = (m.serial_median(), m.linear());
    let settings: Vec<Value> = m
        .settings
        .iter()
        .zip(m.summaries())
        .enumerate()
        .map(|(i, (s, sum))| {
            json!({
                "value": s.value, "workers": s.workers, "num_envs": s.num_envs, "batch_size": s.batch_size,
                "mode": if s.batch_size < s.num_envs { "async" } else { "sync" },
                "oversubscribed": s.oversubscribed, "trainer_shard": s.trainer_shard, "runs": runs_json(&m.runs[i]),
                "median_steps_per_sec": sum.median, "min_steps_per_sec": sum.min, "max_steps_per_sec": sum.max,
                "ratio_to_serial": serial.map(|b| sum.median / b),
                "linear_steps_per_sec": linear.as_ref().map(|l| l[i]),
                "ratio_to_linear": linear.as_ref().map(|l| sum.median / l[i]),
            })
        })
        .collect();
    let baseline = m.serial.as_ref().map(|runs| {
        let sum = summary(runs);
        json!({"num_envs": m.settings[baseline_setting(m.sweep, &m.settings)].num_envs, "runs": runs_json(runs),
               "median_steps_per_sec": sum.median, "min_steps_per_sec": sum.min, "max_steps_per_sec": sum.max})
    });
    json!({
        "sweep": m.sweep.name(), "env": args.envs.env, "config": config, "num_envs": args.envs.num_envs,
        "workers": args.workers, "batch_size": args.batch_size, "trainer_shard": args.trainer_shard.mode().name(),
        "wait": args.wait.strategy().name(), "affinity": args.affinity.name(), "seed": args.seed,
        "values": m.settings.iter().map(|s| s.value).collect::<Vec<_>>(),
        "rounds": args.sweep.rounds, "seconds": args.seconds, "cores": m.cores, "settings": settings,
        "baseline": baseline, "load_average_before": m.loads.0, "load_average_after": m.loads.1,
    })
}

/// What the plot shows.
pub fn plot_data(args: &BenchArgs, m: &Measured) -> PlotData {
    let sums = m.summaries();
    let x_label = match m.sweep {
        Sweep::Workers => "worker processes",
        Sweep::NumEnvs => "envs in all",
        Sweep::BatchSize => "batch size (results per batch)",
    };
    PlotData {
        title: format!(
            "{}: steps/s by {} ({})",
            m.fixed(args),
            m.sweep.column(),
            medians_of(args.sweep.rounds)
        ),
        x_label: x_label.into(),
        log_x: m.sweep != Sweep::Workers,
        xs: m.settings.iter().map(|s| s.value as f64).collect(),
        medians: sums.iter().map(|s| s.median).collect(),
        mins: sums.iter().map(|s| s.min).collect(),
        maxs: sums.iter().map(|s| s.max).collect(),
        serial: m.serial_median(),
        linear: m.linear(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(steps: u64) -> Run {
        Run { round: 1, steps, seconds: 1.0 }
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(summary(&[run(3), run(1), run(2)]), Summary { median: 2.0, min: 1.0, max: 3.0 });
        assert_eq!(summary(&[run(4), run(1)]), Summary { median: 2.5, min: 1.0, max: 4.0 });
    }
}
