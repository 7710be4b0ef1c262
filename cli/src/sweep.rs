//! `shmenv bench --sweep workers|num-envs|batch-size`: one setting stepped through several
//! values in interleaved rounds, reported as the median steps/s of each value.
//!
//! Round 1 runs every value once (each run a fresh pool, `--seconds` long), then round 2
//! does the same, and so on, starting one value later each round; with `--baseline` the
//! in-process serial loop takes one run in each round too. A slow minute of a noisy
//! machine then hits every value alike, and the table gives each value's median, min and
//! max over the rounds. Every value is checked (range, divisibility, memory) before the
//! first run, and so is the `--plot` file.

use crate::args::TrainerShard;
use crate::bench::{self, BenchArgs};
use crate::plot;
use crate::stepping::{contenders, load_average, warn_if_loaded, Baseline, Progress, Stepper, Tally};
use crate::sweep_report::{self, Measured, Run};
use crate::trace_file::TraceFile;
use crate::Error;
use shmenv::worker::Registry;
use shmenv_engine::pool::{default_num_workers, MAX_WORKERS};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// What `--sweep` varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Sweep {
    /// Worker processes (the envs stay --num-envs in all).
    Workers,
    /// Envs in all (as --num-envs), the workers staying --workers (default: the cores).
    NumEnvs,
    /// Results per batch (async mode below --num-envs); each a divisor of --num-envs.
    BatchSize,
}

impl Sweep {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Sweep::Workers => "workers",
            Sweep::NumEnvs => "num-envs",
            Sweep::BatchSize => "batch-size",
        }
    }

    /// The head of the table's first column, and the plot's x axis.
    pub fn column(self) -> &'static str {
        match self {
            Sweep::Workers => "workers",
            Sweep::NumEnvs => "envs",
            Sweep::BatchSize => "batch",
        }
    }
}

/// The arguments of `bench --sweep` (flattened into `bench`'s).
#[derive(Clone, clap::Args)]
pub struct SweepArgs {
    /// Step each value of this setting (--values) in interleaved rounds (--rounds, each run
    /// --seconds long, a fresh pool) and print each value's median steps/s; the other
    /// settings stay as given. num-envs counts the envs in all, as --num-envs does.
    #[arg(long, value_enum)]
    pub sweep: Option<Sweep>,
    /// The values of --sweep, comma-separated (e.g. 1,2,4,8). Default: workers 1, 2, 4 ...
    /// below the cores and the core count; num-envs the workers times 1, 4, 16, 64, 256 and
    /// 1024; batch-size --num-envs divided by 16, 8, 4, 2 and 1 (those that divide it).
    #[arg(long, requires = "sweep")]
    pub values: Option<String>,
    /// Rounds of --sweep: each runs every value once; the table gives the medians.
    #[arg(long, requires = "sweep", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// With --sweep: also write the medians (and min-max), the serial loop (--baseline) and,
    /// for workers, the linear-scaling line as an SVG plot to this file (.svg), which is
    /// opened for writing before the runs.
    #[arg(long, requires = "sweep")]
    pub plot: Option<PathBuf>,
    /// With --sweep: also write the --json object to this file (the table still goes to
    /// stdout); opened for writing before the runs.
    #[arg(long, requires = "sweep")]
    pub json_file: Option<PathBuf>,
}

/// A sweep that cannot run as asked: what is wrong, the value, what is valid.
#[derive(Debug)]
pub struct SweepError(String);

impl fmt::Display for SweepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SweepError {}

fn refuse<T>(message: String) -> Result<T, SweepError> {
    Err(SweepError(message))
}

/// One value of the sweep and the bench arguments that run it.
pub struct Setting {
    /// The swept value.
    pub value: usize,
    /// `bench`'s arguments with the value in place.
    pub args: BenchArgs,
    /// Worker processes.
    pub workers: usize,
    /// Envs in all.
    pub num_envs: usize,
    /// Results per batch.
    pub batch_size: usize,
    /// The trainer steps a shard of the envs (`--trainer-shard`, as the pool decides it).
    pub trainer_shard: bool,
    /// More processes step envs (the workers, and the trainer with its shard) than
    /// this process has cores.
    pub oversubscribed: bool,
}

/// Runs `shmenv bench --sweep`.
pub fn run(registry: &Registry, args: &BenchArgs, config: &serde_json::Value) -> Result<(), Error> {
    let sweep = args.sweep.sweep.ok_or("bench::run calls sweep::run with --sweep only")?;
    check_flags(args, sweep)?;
    let cores = shmenv_engine::sync::available_cores();
    let values = match &args.sweep.values {
        Some(list) => parse_values(list, sweep)?,
        None => default_values(args, sweep, cores),
    };
    let mut settings =
        values.iter().map(|&v| setting(args, sweep, v, cores)).collect::<Result<Vec<_>, _>>()?;
    // Before any run: the output files, then every value's memory (one pool at a time).
    let mut plot_file = match &args.sweep.plot {
        Some(path) => Some((plot::check_path(path)?, path)),
        None => None,
    };
    let mut json_file = match &args.sweep.json_file {
        Some(path) => Some((TraceFile::check_for("--json-file", path)?, path)),
        None => None,
    };
    for s in &settings {
        bench::check_memory(registry, &s.args, config, 1)?;
    }
    warn_if_loaded("at the start");
    let load_before = load_average();
    let (runs, serial) = measure(registry, args, config, sweep, &mut settings)?;
    warn_if_loaded("at the end");
    let measured = Measured { sweep, cores, settings, runs, serial, loads: (load_before, load_average()) };
    let doc = sweep_report::json(args, config, &measured);
    if args.json {
        println!("{doc}");
    } else {
        sweep_report::print_table(args, &measured);
    }
    if let Some((file, path)) = json_file.as_mut() {
        std::fs::write(&path, format!("{doc}\n"))
            .map_err(|e| format!("cannot write the JSON to {}: {e}", path.display()))?;
        file.written();
    }
    if let Some((file, path)) = plot_file.as_mut() {
        plot::write_svg(path, &sweep_report::plot_data(args, &measured))?;
        file.written();
        if !args.json {
            eprintln!("plot written to {}", path.display());
        }
    }
    Ok(())
}

/// Options that a sweep cannot combine with.
fn check_flags(args: &BenchArgs, sweep: Sweep) -> Result<(), SweepError> {
    let other = [
        (args.contend.is_some(), "--contend"),
        (args.trainer_threads.is_some(), "--trainer-threads"),
        (args.profile, "--profile"),
        (args.trace.is_some(), "--trace"),
    ];
    if let Some((_, flag)) = other.iter().find(|(given, _)| *given) {
        return refuse(format!(
            "--sweep runs many pools one after another: {flag} is for a single run; run it without --sweep"
        ));
    }
    let swept = match sweep {
        Sweep::Workers => args.workers.map(|w| ("--workers", w)),
        Sweep::BatchSize => args.batch_size.map(|b| ("--batch-size", b)),
        Sweep::NumEnvs => None,
    };
    match swept {
        Some((flag, v)) => refuse(format!(
            "{flag} {v} is what --sweep {} varies: give its values with --values instead (e.g. --values 1,2,4)",
            sweep.name()
        )),
        None => Ok(()),
    }
}

/// `--values`: comma-separated whole numbers of at least 1, each once; sorted.
pub fn parse_values(list: &str, sweep: Sweep) -> Result<Vec<usize>, SweepError> {
    let mut values = Vec::new();
    for part in list.split(',').map(str::trim) {
        match part.parse::<usize>() {
            Ok(0) => {
                return refuse(format!(
                "--values {list}: a {} value must be at least 1, got 0; give comma-separated counts such as \
                     1,2,4,8",
                sweep.name()
            ))
            }
            Ok(v) if values.contains(&v) => {
                return refuse(format!("--values {list}: {v} is given twice; give each value once"))
            }
            Ok(v) => values.push(v),
            Err(_) => {
                return refuse(format!(
                "--values {list:?}: {part:?} is not a whole number; give comma-separated counts of at least \
                     1, such as 1,2,4,8"
            ))
            }
        }
    }
    values.sort_unstable();
    Ok(values)
}

/// The values swept when `--values` is not given (see [`SweepArgs::values`]).
fn default_values(args: &BenchArgs, sweep: Sweep, cores: usize) -> Vec<usize> {
    let n = args.envs.num_envs;
    let mut values: Vec<usize> = match sweep {
        Sweep::Workers => {
            let own = args.trainer_shard == TrainerShard::On;
            let most = n.saturating_sub(usize::from(own)).clamp(1, MAX_WORKERS);
            let mut v: Vec<usize> = std::iter::successors(Some(1usize), |w| w.checked_mul(2))
                .take_while(|&w| w < cores)
                .collect();
            v.push(cores);
            v.into_iter().map(|w| w.min(most)).collect()
        }
        Sweep::NumEnvs => {
            let workers = args
                .workers
                .unwrap_or_else(|| default_num_workers(usize::MAX, cores, args.shard_on()))
                .max(1);
            let batch = args.batch_size.unwrap_or(1);
            [1, 4, 16, 64, 256, 1024].iter().map(|k| k * workers).filter(|v| v % batch == 0).collect()
        }
        Sweep::BatchSize => {
            [16, 8, 4, 2, 1].iter().filter(|&&k| n % k == 0 && k <= n).map(|k| n / k).collect()
        }
    };
    values.sort_unstable();
    values.dedup();
    values
}

/// The setting of `value`, checked as the pool will check it (before any run).
fn setting(args: &BenchArgs, sweep: Sweep, value: usize, cores: usize) -> Result<Setting, SweepError> {
    let mut a = args.clone();
    match sweep {
        Sweep::Workers => a.workers = Some(value),
        Sweep::NumEnvs => a.envs.num_envs = value,
        Sweep::BatchSize => a.batch_size = Some(value),
    }
    let n = a.envs.num_envs;
    let shard = a.shard_on();
    let workers = a.workers.unwrap_or_else(|| default_num_workers(n, cores, shard));
    let batch_size = a.batch_size.unwrap_or(n);
    let what = format!("--sweep {} value {value}", sweep.name());
    if workers > n.min(MAX_WORKERS) {
        return refuse(format!(
            "{what}: {workers} workers for {n} envs, but every worker needs one env or more (and a pool has at \
             most {MAX_WORKERS} workers): use workers from 1 to {}, or more envs (--num-envs)",
            n.min(MAX_WORKERS)
        ));
    }
    if shard && batch_size < n {
        return refuse(format!(
            "{what}: --trainer-shard runs in sync mode only, but the batch size ({batch_size}) is less than the \
             envs ({n}): drop --batch-size (or --trainer-shard)"
        ));
    }
    if shard && n <= workers {
        return refuse(format!(
            "{what}: with --trainer-shard the {n} envs are split into {workers} workers + the trainer, so there \
             must be at least {} envs: use fewer workers or more envs",
            workers + 1
        ));
    }
    if batch_size > n || n % batch_size != 0 {
        return refuse(format!(
            "{what}: a batch size of {batch_size} does not divide the {n} envs; in a sweep each batch size must \
             divide the env count (so each setting keeps whole batches in flight): divisors of {n} are {}",
            divisors(n)
        ));
    }
    let oversubscribed = workers + usize::from(shard) > cores;
    Ok(Setting { value, args: a, workers, num_envs: n, batch_size, trainer_shard: shard, oversubscribed })
}

/// The divisors of `n`, the first dozen and the largest ones, in words.
fn divisors(n: usize) -> String {
    let mut low = Vec::new();
    let mut high = Vec::new();
    let mut d = 1usize;
    while d.saturating_mul(d) <= n {
        if n % d == 0 {
            low.push(d);
            if d != n / d {
                high.push(n / d);
            }
        }
        d += 1;
    }
    low.extend(high.into_iter().rev());
    let shown: Vec<String> = low.iter().map(usize::to_string).collect();
    match shown.len() {
        0..=14 => shown.join(", "),
        len => format!("{}, ... {}", shown[..10].join(", "), shown[len - 3..].join(", ")),
    }
}

/// The setting whose envs the serial loop steps: the largest env count of a num-envs sweep
/// (the values are sorted), any other sweep's (all have --num-envs).
pub fn baseline_setting(sweep: Sweep, settings: &[Setting]) -> usize {
    match sweep {
        Sweep::NumEnvs => settings.len() - 1,
        _ => 0,
    }
}

/// Each setting's runs, and the serial loop's (with `--baseline`).
type AllRuns = (Vec<Vec<Run>>, Option<Vec<Run>>);

/// Every round: each setting once (a fresh pool each), the serial loop once; returns each
/// setting's runs and the serial loop's.
fn measure(
    registry: &Registry,
    args: &BenchArgs,
    config: &serde_json::Value,
    sweep: Sweep,
    settings: &mut [Setting],
) -> Result<AllRuns, Error> {
    let base = baseline_setting(sweep, settings);
    let mut baseline = match args.baseline {
        true => Some(Baseline { registry, params: bench::serial_params(&settings[base].args, config)? }),
        false => None,
    };
    let mut serial: Option<Box<dyn Stepper>> = None;
    let mut runs: Vec<Vec<Run>> = settings.iter().map(|_| Vec::new()).collect();
    let mut serial_runs = Vec::new();
    let contestants = settings.len() + usize::from(args.baseline);
    let rounds = args.sweep.rounds;
    for round in 0..rounds {
        let label = |what: String| format!("round {}/{rounds}, {what}", round + 1);
        // The order turns by one each round (round 1: the settings in order, then the loop).
        for k in 0..contestants {
            let i = (k + round as usize) % contestants;
            let Some(s) = settings.get(i) else {
                let stepper = serial.as_mut().ok_or("the serial loop is made in round 1")?;
                serial_runs.push(timed(stepper.as_mut(), round, args, label("serial loop".into()))?);
                continue;
            };
            let what = format!("--sweep {} value {}", sweep.name(), s.value);
            let pool = bench::pool_builder(registry, &s.args, s.args.wait, s.args.affinity)?
                .build()
                .map_err(|e| format!("{what}: {e}"))?;
            // What the pool chose (auto may step every env in the trainer), for the table.
            let (workers, shard) = (pool.num_workers(), pool.trainer_shard_choice().on);
            if let Some(s) = settings.get_mut(i) {
                (s.workers, s.trainer_shard) = (workers, shard);
            }
            let s = &settings[i];
            let with = if i == base { baseline.take() } else { None };
            let (mut stepper, made) = contenders("bench", pool, args.seed, with)?;
            serial = serial.or(made);
            let name = format!("{} {}", s.value, sweep.column());
            runs[i].push(timed(stepper.as_mut(), round, args, label(name))?);
        }
    }
    Ok((runs, args.baseline.then_some(serial_runs)))
}

/// One run: an untimed batch (the pool's first after its reset), then `--seconds` of steps.
fn timed(stepper: &mut dyn Stepper, round: u32, args: &BenchArgs, label: String) -> Result<Run, Error> {
    stepper.step_batch(0)?;
    let mut tally = Tally { batches: 1, ..Tally::default() };
    let mut progress = Progress::new(label, args.json);
    tally.run(stepper, Duration::from_secs_f64(args.seconds), &mut progress)?;
    progress.done();
    Ok(Run { round: round + 1, steps: tally.steps, seconds: tally.seconds })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_whole_numbers_of_at_least_one_each_once() {
        assert_eq!(parse_values("8, 1,2", Sweep::Workers).unwrap(), vec![1, 2, 8]);
        for (bad, says) in [
            ("0", "must be at least 1, got 0"),
            ("1,x", "\"x\" is not a whole number"),
            ("1,,2", "\"\" is not a whole number"),
            ("2,2", "2 is given twice"),
            ("-1", "\"-1\" is not a whole number"),
        ] {
            let e = parse_values(bad, Sweep::NumEnvs).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn divisors_are_listed_in_order() {
        assert_eq!(divisors(12), "1, 2, 3, 4, 6, 12");
        assert_eq!(divisors(7), "1, 7");
        assert_eq!(divisors(720720).split(", ").next(), Some("1"));
        assert!(divisors(720720).ends_with("240240, 360360, 720720"), "{}", divisors(720720));
    }
}
