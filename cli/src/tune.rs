//! `shmenv tune`: try worker counts, batch sizes, wait strategies and worker affinity
//! briefly, on the machine as it is loaded now; print a ranked table and the settings of
//! the fastest for each front end (CLI, Rust, Python).

use crate::args::{self, Affinity, Envs};
use crate::memory;
use crate::stepping::{contenders, fmt_rate, load_average, Progress, Tally};
use crate::Error;
use serde_json::{json, Value};
use shmenv::worker::Registry;
use shmenv::{Pool, TrainerShardChoice, TrainerShardMode, WaitStrategy};
use std::time::Duration;

/// `shmenv tune` arguments.
#[derive(clap::Args)]
pub struct TuneArgs {
    #[command(flatten)]
    envs: Envs,
    /// Seconds per trial.
    #[arg(long, default_value_t = 0.3, value_parser = args::trial_seconds, allow_negative_numbers = true)]
    seconds: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// One configuration tried.
#[derive(Clone, serde::Serialize)]
struct Trial {
    workers: usize,
    /// The trainer steps one more shard itself (`--trainer-shard`).
    trainer_shard: bool,
    envs_per_worker: String,
    batch_size: usize,
    wait: &'static str,
    affinity: &'static str,
    steps_per_sec: f64,
}

/// Stage 2 measures this many of the best shapes ...
const FINALISTS: usize = 3;
/// ... with each of these wait strategies (spin only when every process has a core) ...
const FINAL_WAITS: [WaitStrategy; 4] =
    [WaitStrategy::Auto, WaitStrategy::Yield, WaitStrategy::Block, WaitStrategy::Spin];
/// ... and each of these worker placements (but spinning unpinned) ...
const FINAL_AFFINITIES: [Affinity; 2] = [Affinity::Auto, Affinity::None];
/// ... this many times each, and keeps the median.
const REPEATS: usize = 3;
/// The defaults (`auto`, `auto`) are recommended unless another setting of the same shape
/// is faster by more than this share (the noise of a short trial).
const DEFAULTS_WITHIN: f64 = 0.05;

/// Runs `shmenv tune`.
pub fn run(registry: &Registry, args: TuneArgs) -> Result<(), Error> {
    let config = args.envs.config()?;
    let n = args.envs.num_envs;
    let cores = shmenv_engine::sync::available_cores();
    let slice = Duration::from_secs_f64(args.seconds);
    // Before any trial: a pool (one at a time; the sync one of the first trials) and its
    // action tape must fit.
    let params = memory::pool_params(&args.envs, &config, Some(1), None, false, false);
    let spec = memory::builtin_spec(registry, &args.envs, &config);
    let (pool, baseline) = (Some(&params), None);
    memory::Plan {
        command: "tune",
        num_envs: n,
        batch_size: n,
        spec: spec.as_ref(),
        pool,
        pools: 1,
        baseline,
    }
    .check()?;
    let run = |workers: usize, batch: usize, wait: WaitStrategy, affinity: Affinity| -> Result<f64, Error> {
        let builder = args.envs.builder()?.num_workers(workers).batch_size(batch).seed(0);
        trial(builder.wait(wait).cpu_affinity(affinity.setting()).build()?, slice)
    };
    let with_trainer_shard = |workers: usize| -> Result<f64, Error> {
        let builder = args.envs.builder()?.num_workers(workers).seed(0);
        trial(builder.trainer_shard(shmenv::worker::trainer_shard(registry.clone())).build()?, slice)
    };
    let load_before = load_average();
    let workers: Vec<usize> = (1..=2 * cores).filter(|&w| w <= n).collect();
    let mut batches = vec![n, n / 2, n / 4];
    batches.retain(|&b| b >= 1);
    batches.dedup();
    if !args.json {
        eprintln!(
            "tuning {} x {n}: about {} trials of {:.2} s ...",
            args.envs.env,
            workers.len() * batches.len() + FINALISTS * FINAL_WAITS.len() * FINAL_AFFINITIES.len() * REPEATS,
            slice.as_secs_f64()
        );
    }
    // Stage 1: shapes (workers x batch size) with the adaptive wait strategy.
    let mut trials = Vec::new();
    for &w in &workers {
        for &b in &batches {
            let steps_per_sec = run(w, b, WaitStrategy::Auto, Affinity::Auto)?;
            let envs_per_worker = envs_per_worker(n, w);
            trials.push(Trial {
                workers: w,
                trainer_shard: false,
                envs_per_worker,
                batch_size: b,
                wait: "auto",
                affinity: "auto",
                steps_per_sec,
            });
        }
    }
    trials.sort_by(|a, b| b.steps_per_sec.total_cmp(&a.steps_per_sec));
    let finals = final_trials(&trials[..trials.len().min(FINALISTS)], cores, &run)?;
    let ranked = recommended(&finals).ok_or("no configuration could run")?;
    // The defaults, as a pool built with them decides (with no worker where a batch costs
    // less than a handoff): recommended unless a trial beats them by more than 5%.
    let (by_default, defaults) = default_trial(registry, &args.envs, slice)?;
    let defaults_win = defaults.steps_per_sec >= ranked.steps_per_sec * (1.0 - DEFAULTS_WITHIN);
    let best = if defaults_win { &defaults } else { ranked };
    // Not a default (it trades the trainer's safety from its envs for speed): measured apart
    // and shown when it is clearly faster.
    let own_trial = trainer_shard_trial(n, cores, &with_trainer_shard)?;
    let own = own_trial.clone().filter(|t| t.steps_per_sec > best.steps_per_sec * (1.0 + DEFAULTS_WITHIN));
    let loads = (load_before, load_average());
    let plugin = args.envs.plugin.as_deref();
    let rec = Recommendation {
        env: &args.envs.env,
        plugin,
        config: &config,
        num_envs: n,
        best,
        defaults: defaults_win,
    };
    let own_rec = own.as_ref().map(|best| Recommendation { best, defaults: false, ..rec });
    let fronts = |r: &Recommendation<'_>| json!({"cli": r.cli(), "rust": r.rust(), "python": r.python()});
    if args.json {
        println!(
            "{}",
            json!({"env": args.envs.env, "num_envs": n, "shapes": trials, "ranked": finals,
                   "recommended": fronts(&rec), "with_trainer_shard": own_rec.as_ref().map(fronts),
                   "trainer_shard_trial": own_trial,
                   "default_trainer_shard": {"on": by_default.on, "all": by_default.all,
                                             "reason": by_default.reason},
                   "default_pool": {"workers": defaults.workers, "steps_per_sec": defaults.steps_per_sec,
                                    "recommended": defaults_win},
                   "load_average_before": loads.0, "load_average_after": loads.1,
                   "cores": cores})
        );
        return Ok(());
    }
    print_ranking(&args.envs.env, n, cores, trials.len(), &finals);
    print_advice(&Advice {
        rec,
        own_rec,
        by_default,
        defaults: &defaults,
        ranked: ranked.steps_per_sec,
        loads,
        cores,
    });
    Ok(())
}

/// What `tune` advises, for its text output.
struct Advice<'a> {
    rec: Recommendation<'a>,
    own_rec: Option<Recommendation<'a>>,
    by_default: TrainerShardChoice,
    defaults: &'a Trial,
    /// The best trial's steps/s.
    ranked: f64,
    loads: (f64, f64),
    cores: usize,
}

/// The recommendation, the trainer-shard alternative and the defaults' line.
fn print_advice(a: &Advice<'_>) {
    let (rec, best, cores) = (&a.rec, a.rec.best, a.cores);
    println!(
        "measured at a load average of {:.2} to {:.2} on {cores} cores: the ranking holds for a machine \
         this busy (rerun when the load differs; the default wait adapts to it)",
        a.loads.0, a.loads.1
    );
    println!("recommended (the defaults, auto wait and auto affinity, unless another setting beats them by over 5%):");
    println!("  CLI:     {}", rec.cli());
    println!("  Rust:    {}", rec.rust());
    println!("  Python:  {}", rec.python());
    if best.batch_size < rec.num_envs {
        println!("  (async: use send()/recv(); sync step() needs batch_size = num_envs)");
    }
    if let Some(r) = &a.own_rec {
        println!(
            "faster still, {} steps/s ({:.2}x), with the trainer stepping a shard itself; its envs then run in \
             the trainer's process (a crash there is the trainer's):",
            fmt_rate(r.best.steps_per_sec),
            r.best.steps_per_sec / best.steps_per_sec
        );
        if a.by_default.on && !a.by_default.all {
            println!(
                "  (the default, trainer_shard auto, takes it when the worker count is left to the pool)"
            );
        }
        println!("  CLI:     {}", r.cli());
        println!("  Rust:    {}", r.rust());
        println!("  Python:  {}", r.python());
    }
    let workers = a.defaults.workers;
    let on = match (a.by_default.all, a.by_default.on) {
        (true, _) => "every env, no worker process".to_string(),
        (false, true) => format!("on, beside {workers} workers"),
        (false, false) => format!("off, {workers} workers"),
    };
    println!(
        "the defaults (trainer_shard auto): {} steps/s, {:.2}x the best trial; the trainer's shard {on} ({})",
        fmt_rate(a.defaults.steps_per_sec),
        a.defaults.steps_per_sec / a.ranked,
        a.by_default.reason
    );
}

/// The fastest sync pool with a trainer shard (1 to `cores - 1` workers and the trainer,
/// auto wait and affinity), [`REPEATS`] medians; `None` when there are too few envs.
fn trainer_shard_trial(
    n: usize,
    cores: usize,
    run: &impl Fn(usize) -> Result<f64, Error>,
) -> Result<Option<Trial>, Error> {
    let mut best: Option<Trial> = None;
    for w in (1..cores.max(2)).filter(|&w| w < n) {
        let mut rates = (0..REPEATS).map(|_| run(w)).collect::<Result<Vec<_>, _>>()?;
        rates.sort_by(|a, b| a.total_cmp(b));
        let trial = Trial {
            workers: w,
            trainer_shard: true,
            envs_per_worker: envs_per_worker(n, w + 1),
            batch_size: n,
            wait: "auto",
            affinity: "auto",
            steps_per_sec: rates[REPEATS / 2],
        };
        if best.as_ref().is_none_or(|b| trial.steps_per_sec > b.steps_per_sec) {
            best = Some(trial);
        }
    }
    Ok(best)
}

/// Stage 2: each of the best `shapes` with every wait strategy and placement (spin only
/// pinned and when every process can have a core), measured [`REPEATS`] times; medians,
/// fastest first.
fn final_trials(
    shapes: &[Trial],
    cores: usize,
    run: &impl Fn(usize, usize, WaitStrategy, Affinity) -> Result<f64, Error>,
) -> Result<Vec<Trial>, Error> {
    let mut finals = Vec::new();
    for shape in shapes {
        for (wait, affinity) in FINAL_WAITS.into_iter().flat_map(|w| FINAL_AFFINITIES.map(|a| (w, a))) {
            if wait == WaitStrategy::Spin && (shape.workers + 1 > cores || affinity == Affinity::None) {
                continue;
            }
            let mut rates = (0..REPEATS)
                .map(|_| run(shape.workers, shape.batch_size, wait, affinity))
                .collect::<Result<Vec<_>, _>>()?;
            rates.sort_by(|a, b| a.total_cmp(b));
            let median = rates[REPEATS / 2];
            finals.push(Trial {
                wait: wait.name(),
                affinity: affinity.name(),
                steps_per_sec: median,
                ..shape.clone()
            });
        }
    }
    finals.sort_by(|a, b| b.steps_per_sec.total_cmp(&a.steps_per_sec));
    Ok(finals)
}

fn print_ranking(env: &str, n: usize, cores: usize, shapes: usize, finals: &[Trial]) {
    println!(
        "{env} x {n}, {cores} cores: {shapes} shapes tried, the 3 best with each wait strategy (median of 3)"
    );
    println!("  rank  workers  envs/worker  batch   mode   wait  affinity      steps/s");
    for (i, t) in finals.iter().enumerate() {
        let mode = if t.batch_size < n { "async" } else { "sync" };
        println!(
            "  {:>4}  {:>7}  {:>11}  {:>5}  {:>5}  {:>5}  {:>8}  {:>11}",
            i + 1,
            t.workers,
            t.envs_per_worker,
            t.batch_size,
            mode,
            t.wait,
            t.affinity,
            fmt_rate(t.steps_per_sec)
        );
    }
}

/// The fastest of `finals` (sorted, fastest first), or the defaults of the same shape when
/// they are within [`DEFAULTS_WITHIN`] of it.
fn recommended(finals: &[Trial]) -> Option<&Trial> {
    let best = finals.first()?;
    let defaults = finals.iter().find(|t| {
        (t.workers, t.batch_size, t.wait, t.affinity) == (best.workers, best.batch_size, "auto", "auto")
    });
    Some(defaults.filter(|d| d.steps_per_sec >= best.steps_per_sec * (1.0 - DEFAULTS_WITHIN)).unwrap_or(best))
}

fn envs_per_worker(n: usize, w: usize) -> String {
    if n % w == 0 {
        (n / w).to_string()
    } else {
        format!("{}-{}", n / w, n / w + 1)
    }
}

/// The pool of `envs` with every other setting at its default (the trainer's shard from
/// `registry`, `trainer_shard` auto): what it chose, and its trial.
fn default_trial(
    registry: &Registry,
    envs: &Envs,
    slice: Duration,
) -> Result<(TrainerShardChoice, Trial), Error> {
    let pool = envs
        .builder()?
        .seed(0)
        .trainer_shard(shmenv::worker::trainer_shard(registry.clone()))
        .trainer_shard_mode(TrainerShardMode::Auto)
        .build()?;
    let (choice, workers, n) = (pool.trainer_shard_choice(), pool.num_workers(), pool.num_envs());
    let steps_per_sec = trial(pool, slice)?;
    let envs_per_worker = envs_per_worker(n, workers.max(1));
    let trial = Trial {
        workers,
        // The default's own choice, not a setting to give.
        trainer_shard: false,
        envs_per_worker,
        batch_size: n,
        wait: "auto",
        affinity: "auto",
        steps_per_sec,
    };
    Ok((choice, trial))
}

/// Steps `pool` with random actions for `slice` (after a short warm-up); returns steps/s.
fn trial(pool: Pool, slice: Duration) -> Result<f64, Error> {
    let (mut stepper, _) = contenders("tune", pool, 0, None)?;
    let mut warm = Tally::default();
    warm.run(stepper.as_mut(), slice / 5, &mut Progress::new("", true))?;
    let mut tally = Tally::default();
    tally.run(stepper.as_mut(), slice, &mut Progress::new("", true))?;
    Ok(tally.rate())
}

/// The fastest configuration, written for each front end.
struct Recommendation<'a> {
    env: &'a str,
    plugin: Option<&'a std::path::Path>,
    config: &'a Value,
    num_envs: usize,
    best: &'a Trial,
    /// `best` is the pool of the defaults: no worker count or shard setting to give.
    defaults: bool,
}

/// A setting the recommendation gives beyond env id, envs and workers.
enum Setting<'a> {
    Plugin(&'a std::path::Path),
    Config(&'a Value),
    BatchSize(usize),
    Wait(&'static str),
    Unpinned,
    TrainerShard,
}

impl Recommendation<'_> {
    /// The settings that differ from their defaults.
    fn settings(&self) -> Vec<Setting<'_>> {
        let mut out = Vec::new();
        if let Some(path) = self.plugin {
            out.push(Setting::Plugin(path));
        }
        if self.config.as_object().is_some_and(|o| !o.is_empty()) {
            out.push(Setting::Config(self.config));
        }
        if self.best.batch_size < self.num_envs {
            out.push(Setting::BatchSize(self.best.batch_size));
        }
        if self.best.wait != "auto" {
            out.push(Setting::Wait(self.best.wait));
        }
        if self.best.affinity != "auto" {
            out.push(Setting::Unpinned);
        }
        if self.best.trainer_shard {
            out.push(Setting::TrainerShard);
        }
        out
    }

    /// `head`, then each setting as `part` writes it, then `tail`.
    fn render(&self, head: String, part: impl Fn(Setting<'_>) -> String, tail: &str) -> String {
        self.settings().into_iter().fold(head, |s, setting| s + &part(setting)) + tail
    }

    /// `shmenv bench` flags.
    fn cli(&self) -> String {
        let (env, n, w) = (self.env, self.num_envs, self.best.workers);
        let head = match self.defaults {
            true => format!("shmenv bench --env {env} --num-envs {n}"),
            false => format!("shmenv bench --env {env} --num-envs {n} --workers {w}"),
        };
        let part = |s: Setting<'_>| match s {
            Setting::Plugin(p) => format!(" --plugin {}", p.display()),
            Setting::Config(c) => format!(" --config '{c}'"),
            Setting::BatchSize(b) => format!(" --batch-size {b}"),
            Setting::Wait(w) => format!(" --wait {w}"),
            Setting::Unpinned => " --affinity none".into(),
            Setting::TrainerShard => " --trainer-shard".into(),
        };
        self.render(head, part, "")
    }

    /// `Pool::builder` calls.
    fn rust(&self) -> String {
        let (env, n, w) = (self.env, self.num_envs, self.best.workers);
        let head = match self.defaults {
            true => format!("Pool::builder({env:?}).num_envs({n})"),
            false => format!("Pool::builder({env:?}).num_envs({n}).num_workers({w})"),
        };
        let part = |s: Setting<'_>| match s {
            Setting::Plugin(p) => format!(".plugin({:?})", p.display().to_string()),
            Setting::Config(c) => format!(".config(serde_json::json!({c}))"),
            Setting::BatchSize(b) => format!(".batch_size({b})"),
            Setting::Wait(w) => format!(".wait(WaitStrategy::{}{})", w[..1].to_uppercase(), &w[1..]),
            Setting::Unpinned => ".cpu_affinity(CpuAffinity::None)".into(),
            Setting::TrainerShard => {
                ".trainer_shard(shmenv::worker::trainer_shard(Registry::with_builtins()))".into()
            }
        };
        self.render(head, part, "")
    }

    /// `shmenv.make_vec` keywords.
    fn python(&self) -> String {
        let (env, n, w) = (self.env, self.num_envs, self.best.workers);
        let head = match self.defaults {
            true => format!("shmenv.make_vec({env:?}, num_envs={n}"),
            false => format!("shmenv.make_vec({env:?}, num_envs={n}, num_workers={w}"),
        };
        let part = |s: Setting<'_>| match s {
            Setting::Plugin(p) => format!(", plugin={:?}", p.display().to_string()),
            Setting::Config(c) => format!(", config={}", python_literal(c)),
            Setting::BatchSize(b) => format!(", batch_size={b}"),
            Setting::Wait(w) => format!(", wait={w:?}"),
            Setting::Unpinned => ", pin_workers=False".into(),
            Setting::TrainerShard => ", trainer_shard=True".into(),
        };
        self.render(head, part, ")")
    }
}

/// A JSON value as a Python literal (`true` -> `True`, `null` -> `None`).
fn python_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Number(_) | Value::String(_) => v.to_string(),
        Value::Array(a) => format!("[{}]", a.iter().map(python_literal).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => {
            let items: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("{}: {}", Value::from(k.as_str()), python_literal(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recommendation_for_each_front_end() {
        let best = Trial {
            workers: 2,
            trainer_shard: false,
            envs_per_worker: "2".into(),
            batch_size: 2,
            wait: "spin",
            affinity: "none",
            steps_per_sec: 1.0,
        };
        let config = json!({"step_us": 5, "fast": true, "name": null});
        let rec = Recommendation {
            env: "Burn-v0",
            plugin: None,
            config: &config,
            num_envs: 4,
            best: &best,
            defaults: false,
        };
        assert_eq!(
            rec.cli(),
            r#"shmenv bench --env Burn-v0 --num-envs 4 --workers 2 --config '{"fast":true,"name":null,"step_us":5}' --batch-size 2 --wait spin --affinity none"#
        );
        assert_eq!(
            rec.rust(),
            r#"Pool::builder("Burn-v0").num_envs(4).num_workers(2).config(serde_json::json!({"fast":true,"name":null,"step_us":5})).batch_size(2).wait(WaitStrategy::Spin).cpu_affinity(CpuAffinity::None)"#
        );
        assert_eq!(
            rec.python(),
            r#"shmenv.make_vec("Burn-v0", num_envs=4, num_workers=2, config={"fast": True, "name": None, "step_us": 5}, batch_size=2, wait="spin", pin_workers=False)"#
        );
    }

    #[test]
    fn a_trainer_shard_is_written_for_each_front_end() {
        let best = Trial {
            workers: 1,
            trainer_shard: true,
            envs_per_worker: "16".into(),
            batch_size: 32,
            wait: "auto",
            affinity: "auto",
            steps_per_sec: 1.0,
        };
        let config = json!({});
        let rec = Recommendation {
            env: "CartPole-v1",
            plugin: None,
            config: &config,
            num_envs: 32,
            best: &best,
            defaults: false,
        };
        assert_eq!(rec.cli(), "shmenv bench --env CartPole-v1 --num-envs 32 --workers 1 --trainer-shard");
        assert_eq!(
            rec.rust(),
            r#"Pool::builder("CartPole-v1").num_envs(32).num_workers(1).trainer_shard(shmenv::worker::trainer_shard(Registry::with_builtins()))"#
        );
        assert_eq!(
            rec.python(),
            r#"shmenv.make_vec("CartPole-v1", num_envs=32, num_workers=1, trainer_shard=True)"#
        );
    }

    #[test]
    fn the_defaults_are_recommended_unless_clearly_beaten() {
        let t = |wait, affinity, steps_per_sec| Trial {
            workers: 2,
            trainer_shard: false,
            envs_per_worker: "2".into(),
            batch_size: 4,
            wait,
            affinity,
            steps_per_sec,
        };
        let close = [t("block", "none", 100.0), t("auto", "auto", 97.0)];
        assert_eq!(recommended(&close).map(|r| (r.wait, r.affinity)), Some(("auto", "auto")));
        let far = [t("block", "none", 100.0), t("auto", "auto", 80.0)];
        assert_eq!(recommended(&far).map(|r| (r.wait, r.affinity)), Some(("block", "none")));
    }

    #[test]
    fn the_defaults_are_written_without_a_worker_count() {
        let best = Trial {
            workers: 0,
            trainer_shard: false,
            envs_per_worker: "32".into(),
            batch_size: 32,
            wait: "auto",
            affinity: "auto",
            steps_per_sec: 1.0,
        };
        let config = json!({"step_us": 1});
        let rec = Recommendation {
            env: "Burn-v0",
            plugin: None,
            config: &config,
            num_envs: 32,
            best: &best,
            defaults: true,
        };
        assert_eq!(rec.cli(), r#"shmenv bench --env Burn-v0 --num-envs 32 --config '{"step_us":1}'"#);
        assert_eq!(
            rec.rust(),
            r#"Pool::builder("Burn-v0").num_envs(32).config(serde_json::json!({"step_us":1}))"#
        );
        assert_eq!(rec.python(), r#"shmenv.make_vec("Burn-v0", num_envs=32, config={"step_us": 1})"#);
    }
}
