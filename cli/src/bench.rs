//! `shmenv bench`: step an env with random actions through a pool, optionally against the
//! same envs in an in-process serial loop.

use crate::args::{self, Affinity, Envs, OnOff, TrainerShard, Wait};
use crate::contend;
use crate::memory;
use crate::stepping::{
    contenders, fmt_rate, load_average, warn_if_loaded, Baseline, Progress, Stepper, Tally,
};
use crate::sweep;
use crate::trace_file::TraceFile;
use crate::Error;
use serde_json::json;
use shmenv::worker::Registry;
use shmenv::{Pool, StatsReport, Verdict, WorkerActivity};
use shmenv_engine::pool::ShardQuestion;
use shmenv_engine::protocol::PoolParams;
use std::time::Duration;

/// `shmenv bench` arguments.
#[derive(Clone, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub(crate) envs: Envs,
    /// Number of worker processes (default: available cores; one fewer with the trainer's shard;
    /// none where a batch costs less than a handoff). 0: the trainer steps every env itself.
    #[arg(long, value_parser = args::workers, allow_negative_numbers = true)]
    pub(crate) workers: Option<usize>,
    /// Whether the trainer steps a shard of the envs itself (sync mode): the envs are then
    /// split into workers + 1 shards, the trainer's first, one process fewer per core.
    /// auto (default): for built-in envs when --workers, --plugin, --max-restarts and
    /// --batch-size are not given; on (also a bare --trainer-shard): always; off: never.
    /// Trades the trainer's safety from its envs' crashes for speed.
    #[arg(long, value_enum, default_value_t = TrainerShard::Auto, num_args = 0..=1, default_missing_value = "on")]
    pub(crate) trainer_shard: TrainerShard,
    /// Results per batch: fewer than --num-envs runs the pool in async mode (send/recv,
    /// each batch holds the envs that finished first). Default: all envs (sync).
    #[arg(long, value_parser = args::count, allow_negative_numbers = true)]
    pub(crate) batch_size: Option<usize>,
    /// Seconds to step (each of pool and baseline).
    #[arg(long, default_value_t = 3.0, value_parser = args::bench_seconds, allow_negative_numbers = true)]
    pub(crate) seconds: f64,
    /// Also run the same envs and actions in an in-process serial loop and report the ratio.
    #[arg(long)]
    pub(crate) baseline: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// How the trainer and workers wait for each other.
    #[arg(long, value_enum, default_value_t = Wait::Auto)]
    pub(crate) wait: Wait,
    /// Base seed.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Worker CPU affinity: auto (a core per worker when there are enough) or none.
    #[arg(long, value_enum, default_value_t = Affinity::Auto)]
    pub(crate) affinity: Affinity,
    /// After the run, show where the pool's time went (env work, waiting, publishing) and
    /// a one-line verdict: env-bound, trainer-bound, sync-bound, contended or oversubscribed.
    #[arg(long)]
    pub(crate) profile: bool,
    /// Live stats in the region: on (default) or off (to measure their cost).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub(crate) stats: OnOff,
    /// Record trace spans (trainer calls, each worker's waits, env work and publishing) and
    /// write them to this file as Chrome trace JSON (open it in https://ui.perfetto.dev).
    /// The file is opened for writing before the run: a path that cannot be written is
    /// refused at once.
    #[arg(long)]
    pub(crate) trace: Option<std::path::PathBuf>,
    /// Run under `FailurePolicy::Restart` with this budget (to measure its cost).
    #[arg(long)]
    pub(crate) max_restarts: Option<u32>,
    /// Async mode: fair scheduling (every env gets its share of steps) on (default) or
    /// off (to measure its cost).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub(crate) fair: OnOff,
    /// Compare every --wait and --affinity, idle and with N busy processes beside the pool,
    /// in interleaved rounds (--seconds each, per setting and condition); with --baseline,
    /// against the serial loop under the same load.
    #[arg(long, value_parser = clap::value_parser!(u16).range(0..=256))]
    pub(crate) contend: Option<u16>,
    /// With --contend (or alone, as --contend 0): the loaded rounds' trainer also does
    /// multi-threaded work between batches (matrix products on this many threads).
    #[arg(long, value_parser = args::count, allow_negative_numbers = true)]
    pub(crate) trainer_threads: Option<usize>,
    #[command(flatten)]
    pub(crate) sweep: sweep::SweepArgs,
}

/// Runs `shmenv bench`.
pub fn run(registry: &Registry, args: BenchArgs) -> Result<(), Error> {
    let config = args.envs.config()?;
    let stats = args.stats == OnOff::On;
    if args.profile && !stats {
        return Err("--profile reads the live stats: drop --stats off".into());
    }
    if args.sweep.sweep.is_some() {
        return sweep::run(registry, &args, &config);
    }
    if args.contend.is_some() || args.trainer_threads.is_some() {
        return run_contended(registry, &args, &config);
    }
    // Before the run: a path that cannot be written is refused now, not after it.
    let mut trace = args.trace.as_deref().map(TraceFile::check).transpose()?;
    check_memory(registry, &args, &config, 1)?;
    warn_if_loaded("at the start");
    let pool = pool_builder(registry, &args, args.wait, args.affinity)?.build()?;
    let (workers, batch_size, shard) = (pool.num_workers(), pool.batch_size(), pool.trainer_shard_choice());
    let baseline = if args.baseline {
        Some(Baseline { registry, params: serial_params(&args, &config)? })
    } else {
        None
    };
    let (contender, serial) = contenders("bench", pool, args.seed, baseline)?;
    let (ours, baseline, profile) = race(&args, contender, serial)?;
    if let Some(t) = trace.as_mut() {
        t.written();
    }
    warn_if_loaded("at the end");
    let ratio = baseline.as_ref().map(|b| ours.rate() / b.rate());
    let wait = args.wait.strategy().name();
    if args.json {
        let mut out = json!({
            "env": args.envs.env, "config": config, "num_envs": args.envs.num_envs, "batch_size": batch_size,
            "workers": workers, "wait": wait, "affinity": args.affinity.name(), "seconds": ours.seconds,
            "steps": ours.steps, "steps_per_sec": ours.rate(), "stats": stats,
            "trainer_shard": shard.on, "trainer_shard_all": shard.all, "trainer_shard_reason": shard.reason,
        });
        if let Some(p) = &profile {
            out["profile"] = json!(p);
            out["verdict"] = json!(p.verdict());
        }
        if let (Some(b), Some(r)) = (&baseline, ratio) {
            out["baseline_steps"] = json!(b.steps);
            out["baseline_steps_per_sec"] = json!(b.rate());
            out["ratio"] = json!(r);
        }
        println!("{out}");
        return Ok(());
    }
    let n = args.envs.num_envs;
    let mode = if batch_size < n { format!("async, batches of {batch_size}") } else { "sync".into() };
    let on = match (shard.all, shard.on) {
        (true, _) => "the trainer alone (no worker process)".to_string(),
        (false, true) => format!("{workers} workers and the trainer"),
        (false, false) => format!("{workers} workers"),
    };
    println!("{} x {n} on {on} ({mode}, wait {wait}), {:.1} s", args.envs.env, ours.seconds);
    println!("  shmenv pool:   {:>10} steps/s", fmt_rate(ours.rate()));
    if let (Some(b), Some(r)) = (&baseline, ratio) {
        println!("  serial loop:   {:>10} steps/s (same envs and actions, in-process)", fmt_rate(b.rate()));
        println!("  ratio:         {r:>10.2}x");
        println!("  {}", ratio_hint(r, shard.all));
    }
    if let Some(p) = &profile {
        let on = if shard.on { "on" } else { "off" };
        println!("  trainer's shard:   {on} ({})", shard.reason);
        print_profile(p);
    }
    Ok(())
}

impl BenchArgs {
    /// Whether the pool of these arguments gets the trainer's shard, decided as the engine
    /// decides it at build (false where the engine would refuse `on`: it says why then).
    pub(crate) fn shard_on(&self) -> bool {
        let n = self.envs.num_envs;
        ShardQuestion {
            mode: self.trainer_shard.mode(),
            buildable: true,
            plugin: self.envs.plugin.is_some(),
            sync: self.batch_size.is_none_or(|b| b == n),
            restarts: self.max_restarts.is_some(),
            // No worker given: the trainer steps every env, unless the shard is off.
            workers_given: self.workers.is_some_and(|w| w > 0),
            num_envs: n,
            cores: shmenv_engine::sync::available_cores(),
            batch_cost: None,
            busy: false,
            step_timeout: false,
        }
        .decide()
        .is_ok_and(|c| c.on)
    }
}

/// The pool of `args`, waiting by `wait` with workers placed by `affinity`.
pub(crate) fn pool_builder(
    registry: &Registry,
    args: &BenchArgs,
    wait: Wait,
    affinity: Affinity,
) -> Result<shmenv::PoolBuilder, Error> {
    let mut builder = args
        .envs
        .builder()?
        .stats(args.stats == OnOff::On)
        .trace(args.trace.is_some())
        .cpu_affinity(affinity.setting())
        .seed(args.seed)
        .fair_scheduling(args.fair == OnOff::On)
        .wait(wait.strategy());
    if let Some(w) = args.workers {
        builder = builder.num_workers(w);
    }
    if let Some(b) = args.batch_size {
        builder = builder.batch_size(b);
    }
    if args.trainer_shard != TrainerShard::Off {
        builder = builder.trainer_shard(shmenv::worker::trainer_shard(registry.clone()));
    }
    builder = builder.trainer_shard_mode(args.trainer_shard.mode());
    if let Some(max_restarts) = args.max_restarts {
        builder = builder.failure_policy(shmenv::FailurePolicy::Restart { max_restarts });
    }
    Ok(builder)
}

/// `--contend` / `--trainer-threads`: every setting, idle and loaded (see [`contend`]).
fn run_contended(registry: &Registry, args: &BenchArgs, config: &serde_json::Value) -> Result<(), Error> {
    if args.profile || args.trace.is_some() {
        return Err("--contend compares settings side by side: run --profile or --trace without it".into());
    }
    // Every setting's pool is held at once.
    check_memory(registry, args, config, contend::SETTINGS.len() as u64)?;
    warn_if_loaded("at the start");
    let load = contend::Load::start(args.contend.unwrap_or(0).into(), args.trainer_threads)?;
    let baseline =
        if args.baseline { Some(Baseline { registry, params: serial_params(args, config)? }) } else { None };
    if !args.json {
        let mode = match args.batch_size {
            Some(b) if b < args.envs.num_envs => format!("async, batches of {b}"),
            _ => "sync".into(),
        };
        println!("{} x {} ({mode}), every wait strategy and affinity", args.envs.env, args.envs.num_envs);
    }
    let build = |wait, affinity| Ok(pool_builder(registry, args, wait, affinity)?.build()?);
    contend::run(build, args.seed, baseline, &load, args.seconds, args.json)
}

/// Refuses a run whose `pools` pools (the engine's estimate), action tapes and baseline
/// would need more memory than this process may use, before any pool is built.
pub(crate) fn check_memory(
    registry: &Registry,
    args: &BenchArgs,
    config: &serde_json::Value,
    pools: u64,
) -> Result<(), Box<memory::NotEnoughMemory>> {
    let params = memory::pool_params(
        &args.envs,
        config,
        args.workers,
        args.batch_size,
        args.trace.is_some(),
        args.shard_on(),
    );
    let spec = memory::builtin_spec(registry, &args.envs, config);
    memory::Plan {
        command: "bench",
        num_envs: args.envs.num_envs,
        batch_size: params.batch_size,
        spec: spec.as_ref(),
        pool: Some(&params),
        pools,
        baseline: args.baseline.then_some(&params),
    }
    .check()
}

/// What to expect of the ratio, and what to check when it is low.
fn ratio_hint(ratio: f64, alone: bool) -> String {
    let (load, cores) = (load_average(), shmenv_engine::sync::available_cores());
    if alone {
        "no worker process: the trainer steps every env, as the serial loop does, plus the pool's bookkeeping \
         (expect 0.75-0.95x)"
            .into()
    } else if ratio < 0.9 && load > 0.7 * cores as f64 {
        format!(
            "load average {load:.2} on {cores} cores: other processes hold the cores, which slows a pool (a handoff \
             per batch) more than a serial loop; --profile shows it, --contend 2 compares settings"
        )
    } else {
        format!(
            "expect 1.2-1.4x for CartPole-v1 x 1024 on 2 workers of an idle 2-core machine (load average now \
             {load:.2} on {cores} cores); if it is far below 1.0, run with --profile"
        )
    }
}

/// The baseline's envs: all of them in one shard, as the pool would make them (from the
/// same plugin library, loaded into this process, when the pool takes its env from one).
pub(crate) fn serial_params(args: &BenchArgs, config: &serde_json::Value) -> Result<PoolParams, Error> {
    let plugin = match &args.envs.plugin {
        Some(path) => Some(
            std::fs::canonicalize(path)
                .map_err(|e| format!("plugin library {}: {e}", path.display()))?
                .to_string_lossy()
                .into_owned(),
        ),
        None => None,
    };
    Ok(PoolParams {
        num_workers: 1,
        stats: false,
        plugin,
        cores: 0,
        ..memory::pool_params(&args.envs, config, Some(1), None, false, false)
    })
}

type RaceResult = (Tally, Option<Tally>, Option<StatsReport>);

/// Times the pool (and the baseline, in alternating short rounds, so that machine noise
/// hits both alike); writes the trace; returns the tallies and the `--profile` report.
fn race(
    args: &BenchArgs,
    mut contender: Box<dyn Stepper>,
    mut serial: Option<Box<dyn Stepper>>,
) -> Result<RaceResult, Error> {
    let rounds = if serial.is_some() { ((args.seconds / 0.5).round() as u32).max(3) } else { 1 };
    let slice = Duration::from_secs_f64(args.seconds) / rounds;
    let (mut ours, mut theirs) = (Tally::default(), Tally::default());
    // What runs now, on a terminal: "round 2/6, shmenv pool: 1.23M steps/s after 1.0 s".
    let label = |round: u32, what: &str| match rounds {
        1 => what.to_string(),
        _ => format!("round {}/{rounds}, {what}", round + 1),
    };
    let mut progress = Progress::new("", true);
    // The profile covers the pool's rounds only (the serial rounds leave it idle).
    let mut profile = shmenv::StatsSnapshot::default();
    for round in 0..rounds {
        progress = Progress::new(label(round, "shmenv pool"), args.json);
        // One untimed batch first: a worker books the time it waited for a command when the
        // command arrives, so the idle time of the serial round lands in that batch.
        let before = if args.profile {
            contender.step_batch(ours.batches)?;
            contender.pool().map(Pool::stats_snapshot)
        } else {
            None
        };
        ours.run(contender.as_mut(), slice, &mut progress)?;
        if let (Some(before), Some(pool)) = (before, contender.pool()) {
            profile.add(&pool.stats_snapshot().delta(&before));
        }
        if let Some(s) = serial.as_mut() {
            progress = Progress::new(label(round, "serial loop"), args.json);
            theirs.run(s.as_mut(), slice, &mut progress)?;
        }
    }
    progress.done();
    if let (Some(path), Some(pool)) = (&args.trace, contender.pool()) {
        pool.write_trace(path).map_err(|e| format!("cannot write the trace to {}: {e}", path.display()))?;
        if !args.json {
            eprintln!("trace written to {} (open it in https://ui.perfetto.dev)", path.display());
        }
    }
    let profile = args.profile.then(|| profile.since(None));
    Ok((ours, serial.map(|_| theirs), profile))
}

/// The `--profile` breakdown of the pool's rounds.
fn print_profile(p: &StatsReport) {
    let n = p.workers.len().max(1) as f64;
    let mean = |f: fn(&WorkerActivity) -> f64| p.workers.iter().map(f).sum::<f64>() / n;
    let pct = |x: f64| format!("{:>5.1}%", 100.0 * x);
    let per_worker = |f: fn(&WorkerActivity) -> f64| {
        p.workers.iter().map(|w| pct(f(w)).trim().to_string()).collect::<Vec<_>>().join(", ")
    };
    println!("  where the pool's time went ({:.1} s of pool rounds, {} batches):", p.seconds, p.batches);
    if p.workers.is_empty() {
        println!("    no worker process: the trainer steps every env (batches too cheap to hand off)");
        println!("    trainer in its envs      {}   (of the trainer's time)", pct(p.shard_share));
        println!("    waiting for a CPU        {}   (run-queue delay)", pct(p.trainer_runqueue_share));
        println!("  verdict: {} (the trainer steps the envs itself: a cheaper env step, or more envs per batch, which would then be handed to workers)", p.verdict());
        return;
    }
    println!(
        "    workers in env code      {}   (per worker: {})",
        pct(mean(|w| w.utilization)),
        per_worker(|w| w.utilization)
    );
    println!("    workers waiting          {}", pct(mean(|w| w.wait_share)));
    println!(
        "    workers publishing       {}   (transfer: claiming rows, committing, posting)",
        pct(mean(|w| w.publish_share))
    );
    println!(
        "    trainer waiting          {}   (of the trainer's time; inside pool calls: {})",
        pct(p.trainer_wait_share),
        pct(p.trainer_call_share)
    );
    if p.shard_steps > 0 {
        println!("    trainer in its own shard {}   (of the trainer's time)", pct(p.shard_share));
    }
    if let Some(fill) = p.ring_full_blocks {
        println!("    ring blocks full at recv {fill:>6.2}");
    }
    println!(
        "    waiting for a CPU        {}   (run-queue delay; per worker: {}; trainer: {})",
        pct(mean(|w| w.runqueue_share)),
        per_worker(|w| w.runqueue_share),
        pct(p.trainer_runqueue_share).trim()
    );
    if let Some(others) = p.others_share {
        println!(
            "    other tasks' CPU         {}   (of the machine's CPU time: other processes, the kernel, steal)",
            pct(others)
        );
    }
    println!(
        "    wait mode                {:>6}   (batches asleep: {}; tuner probes {}, switches {})",
        p.wait_mode.name(),
        pct(p.sleep_share).trim(),
        p.wait_probes,
        p.wait_switches
    );
    let us = |f: fn(&WorkerActivity) -> Option<f64>| {
        p.workers.iter().filter_map(f).map(|v| format!("{v:.2}")).collect::<Vec<_>>().join(", ")
    };
    println!("    env step p50 / p99 (us)  {} / {}", us(|w| w.step_p50_us), us(|w| w.step_p99_us));
    let why = match p.verdict() {
        Verdict::Contended => "other processes hold the cores the pool needs: the default wait (auto) sleeps then; with a fixed --wait, try --wait block --affinity none, or free cores",
        Verdict::Oversubscribed => "the processes stepping envs (workers, and the trainer with --trainer-shard) outnumber the cores, and every batch waits until each of them has had a core: use at most as many workers as cores (or one fewer with --trainer-shard), with more envs each",
        Verdict::EnvBound => "workers spend most of their time in env code: more workers (cores) or a cheaper env step",
        Verdict::TrainerBound => "workers mostly wait while the trainer is busy outside the pool: speed up the trainer, or use async mode",
        Verdict::SyncBound => "neither the envs nor the trainer fill the time, the handoffs do: more envs per worker, fewer workers, or async mode",
    };
    println!("  verdict: {} ({why})", p.verdict());
}
