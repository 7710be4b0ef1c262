//! Arguments shared by several commands, and the parsers that refuse out-of-range numbers
//! with a message naming the valid range (clap adds the argument and the value).

use shmenv::{CpuAffinity, Pool, PoolBuilder, TrainerShardMode, WaitStrategy};
use std::path::PathBuf;

/// Which envs to run (shared by `bench`, `tune` and `soak`).
#[derive(Clone, clap::Args)]
pub struct Envs {
    /// Env id (see `shmenv list`).
    #[arg(long, default_value = "CartPole-v1")]
    pub env: String,
    /// Env config as a JSON object.
    #[arg(long, default_value = "{}")]
    pub config: String,
    /// Number of envs.
    #[arg(long, default_value_t = 64, value_parser = count, allow_negative_numbers = true)]
    pub num_envs: usize,
    /// Take the env from this plugin library (a shared library implementing
    /// shmenv_env.h; see `shmenv list --plugin PATH` for its ids).
    #[arg(long)]
    pub plugin: Option<PathBuf>,
}

impl Envs {
    /// The `--config` JSON.
    pub fn config(&self) -> Result<serde_json::Value, String> {
        serde_json::from_str(&self.config).map_err(|e| format!("--config is not valid JSON: {e}"))
    }

    /// A pool builder for these envs: id, config, count and plugin.
    pub fn builder(&self) -> Result<PoolBuilder, String> {
        let builder = Pool::builder(&self.env).config(self.config()?).num_envs(self.num_envs);
        Ok(match &self.plugin {
            Some(path) => builder.plugin(path),
            None => builder,
        })
    }
}

/// How the trainer and workers wait for each other (`--wait`).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Wait {
    /// Spin briefly, then yield, then sleep on a futex.
    Auto,
    /// Spin only (needs a core per process).
    Spin,
    /// Spin with sched_yield.
    Yield,
    /// Sleep on a futex at once.
    Block,
}

impl Wait {
    /// The engine's strategy.
    pub fn strategy(self) -> WaitStrategy {
        match self {
            Wait::Auto => WaitStrategy::Auto,
            Wait::Spin => WaitStrategy::Spin,
            Wait::Yield => WaitStrategy::Yield,
            Wait::Block => WaitStrategy::Block,
        }
    }
}

/// Worker CPU affinity (`--affinity`).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Affinity {
    /// A core per worker when there are enough.
    Auto,
    /// Let the scheduler place workers.
    None,
}

impl Affinity {
    /// The engine's setting.
    pub fn setting(self) -> CpuAffinity {
        match self {
            Affinity::Auto => CpuAffinity::Auto,
            Affinity::None => CpuAffinity::None,
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Affinity::Auto => "auto",
            Affinity::None => "none",
        }
    }
}

/// Whether the trainer steps a shard of the envs itself (`--trainer-shard`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TrainerShard {
    /// Where it is safe and measured faster: sync mode, built-in envs (not a plugin's),
    /// the worker count left to the pool, no restarts.
    Auto,
    /// Always (sync mode).
    On,
    /// Never: every env in a worker process.
    Off,
}

impl TrainerShard {
    /// The engine's setting.
    pub fn mode(self) -> TrainerShardMode {
        match self {
            TrainerShard::Auto => TrainerShardMode::Auto,
            TrainerShard::On => TrainerShardMode::On,
            TrainerShard::Off => TrainerShardMode::Off,
        }
    }
}

/// A switch given as `on` or `off` (`--stats`).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// A count of at least 1 (envs, workers, batch size).
pub fn count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1, got 0".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("must be a whole number of at least 1, got {s:?}")),
    }
}

/// A worker count: 0 (the trainer steps every env itself) or more.
pub fn workers(s: &str) -> Result<usize, String> {
    s.parse::<usize>()
        .map_err(|_| format!("must be a whole number (0: the trainer steps every env), got {s:?}"))
}

/// A finite number in `min..=max` (inclusive), in `unit`.
fn number_in(s: &str, min: f64, max: f64, unit: &str) -> Result<f64, String> {
    let range = format!("must be a number of {unit} from {min} to {max}");
    match s.trim().parse::<f64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{range}, got {v}")),
        Err(_) => Err(format!("{range}, got {s:?}")),
    }
}

/// `bench --seconds`: up to a day.
pub fn bench_seconds(s: &str) -> Result<f64, String> {
    number_in(s, 0.01, 86_400.0, "seconds")
}

/// `tune --seconds`, per trial: up to a minute.
pub fn trial_seconds(s: &str) -> Result<f64, String> {
    number_in(s, 0.05, 60.0, "seconds")
}

/// `soak --minutes`: up to a week.
pub fn soak_minutes(s: &str) -> Result<f64, String> {
    number_in(s, 0.01, 10_080.0, "minutes")
}

/// `soak --kill-every`: up to an hour.
pub fn kill_every(s: &str) -> Result<f64, String> {
    number_in(s, 0.01, 3_600.0, "seconds")
}

/// `soak --report-every` and `top --interval`: up to an hour.
pub fn report_every(s: &str) -> Result<f64, String> {
    number_in(s, 0.05, 3_600.0, "seconds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_out_of_range_are_refused_with_the_range() {
        assert_eq!(bench_seconds("2.5"), Ok(2.5));
        for bad in ["0", "-1", "nan", "inf", "-inf", "1e300", "x"] {
            let e = bench_seconds(bad).unwrap_err();
            assert!(e.starts_with("must be a number of seconds from 0.01 to 86400, got "), "{e}");
        }
        assert_eq!(count("3"), Ok(3));
        assert_eq!(count("0"), Err("must be at least 1, got 0".into()));
        assert!(count("-2").unwrap_err().contains("\"-2\""));
    }
}
