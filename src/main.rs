//! `shmenv`: list the built-in envs and benchmark them through the engine.
//!
//! This binary is also a worker program: a pool it builds execs this same file with
//! `--shmenv-worker ...`, which `main` hands to the worker host before anything else.

use clap::{Parser, Subcommand};
use serde_json::json;
use shmenv::worker::{EnvShard, LocalRows, Registry};
use shmenv::{CpuAffinity, DType, Element, Pool, Space, WaitStrategy};
use shmenv_engine::protocol::{AutoReset, PoolParams};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "shmenv",
    version,
    about = "Vectorized RL envs stepped by worker processes through shared memory"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the registered envs with their spaces.
    List,
    /// Step an env with random actions through a pool and report steps per second.
    Bench(BenchArgs),
    /// Step continuously while killing random workers (Restart policy); print RSS, fds and
    /// children over time, to check that nothing grows.
    Soak(SoakArgs),
    /// Try worker counts, batch sizes and wait strategies briefly; print a ranked table
    /// and the builder settings of the fastest.
    Tune(TuneArgs),
    /// Live view of the pools of a running process (read-only; same user): per worker
    /// utilization, steps/s, env-step p50/p99, wait share; the trainer's wait share.
    Top(TopArgs),
}

#[derive(clap::Args)]
struct SoakArgs {
    #[command(flatten)]
    envs: Envs,
    /// Number of worker processes.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// How long to run.
    #[arg(long, default_value_t = 1.0)]
    minutes: f64,
    /// Seconds between kills of a random worker (SIGKILL, usually mid-step).
    #[arg(long, default_value_t = 1.0)]
    kill_every: f64,
    /// Seconds between report lines.
    #[arg(long, default_value_t = 10.0)]
    report_every: f64,
    /// Results per batch: fewer than --num-envs soaks async mode (send/recv).
    #[arg(long)]
    batch_size: Option<usize>,
}

#[derive(clap::Args)]
struct TuneArgs {
    #[command(flatten)]
    envs: Envs,
    /// Seconds per trial.
    #[arg(long, default_value_t = 0.3)]
    seconds: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct TopArgs {
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
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
}

/// Which envs to run (shared by `bench` and `tune`).
#[derive(clap::Args)]
struct Envs {
    /// Env id (see `shmenv list`).
    #[arg(long, default_value = "CartPole-v1")]
    env: String,
    /// Env config as a JSON object.
    #[arg(long, default_value = "{}")]
    config: String,
    /// Number of envs.
    #[arg(long, default_value_t = 64)]
    num_envs: usize,
}

#[derive(clap::Args)]
struct BenchArgs {
    #[command(flatten)]
    envs: Envs,
    /// Number of worker processes (default: available cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Results per batch: fewer than --num-envs runs the pool in async mode (send/recv,
    /// each batch holds the envs that finished first). Default: all envs (sync).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Seconds to step (each of pool and baseline).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Also run the same envs and actions in an in-process serial loop and report the ratio.
    #[arg(long)]
    baseline: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Wait strategy: auto, spin, yield or block.
    #[arg(long, default_value = "auto")]
    wait: String,
    /// Base seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Worker CPU affinity: auto (a core per worker when there are enough) or none.
    #[arg(long, default_value = "auto")]
    affinity: String,
    /// After the run, show where the pool's time went (env work, waiting, publishing) and
    /// a one-line verdict: env-bound, trainer-bound or sync-bound.
    #[arg(long)]
    profile: bool,
    /// Live stats in the region: on (default) or off (to measure their cost).
    #[arg(long, default_value = "on")]
    stats: String,
    /// Record trace spans (trainer calls, each worker's waits, env work and publishing) and
    /// write them to this file as Chrome trace JSON (open it in https://ui.perfetto.dev).
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
    /// Run under `FailurePolicy::Restart` with this budget (to measure its cost).
    #[arg(long)]
    max_restarts: Option<u32>,
}

fn main() -> ExitCode {
    let registry = Registry::with_builtins();
    if shmenv::worker::host::is_worker_invocation() {
        return shmenv::worker::host::run(&registry);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::List => list(&registry),
        Cmd::Bench(args) => bench(&registry, args),
        Cmd::Top(args) => top(args),
        Cmd::Tune(args) => tune(args),
        Cmd::Soak(args) => soak(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type Error = Box<dyn std::error::Error>;

fn list(registry: &Registry) -> Result<(), Error> {
    for id in registry.ids() {
        let entry = registry.get(&id).expect("listed id");
        let env = registry.make(&id, &json!({}))?;
        let limit = entry.max_episode_steps.map_or(String::new(), |k| format!(", limit {k} steps"));
        println!("{id:<14} {}{limit}\n{:<14} {}", env.spec(), "", entry.description);
    }
    Ok(())
}

/// Random action batches, pre-drawn so the pool and the baseline get the same ones and
/// drawing them is not timed.
struct ActionTape<T> {
    batches: Vec<Vec<T>>,
}

impl<T: Element> ActionTape<T> {
    fn new(space: &Space, num_envs: usize, seed: u64) -> Self {
        let mut rng = shmenv::worker::rng::Pcg64::from_seed(seed ^ 0x5eed);
        let per_env = space.num_elements();
        let batches = (0..64)
            .map(|_| {
                (0..num_envs * per_env)
                    .map(|i| {
                        let u = rng.next_f64();
                        let v = match space {
                            Space::Discrete { n, start } => (*start + (u * *n as f64) as i64) as f64,
                            Space::MultiDiscrete { nvec } => (u * nvec[i % per_env] as f64).floor(),
                            Space::MultiBinary { .. } => (u * 2.0).floor(),
                            Space::Box { .. } => {
                                let (lo, hi) = space.box_bounds(i % per_env).expect("box");
                                let (lo, hi) = (lo.max(-1.0), hi.min(1.0));
                                if T::DTYPE.is_float() {
                                    lo + u * (hi - lo)
                                } else {
                                    lo.ceil()
                                }
                            }
                        };
                        T::from_f64(v)
                    })
                    .collect()
            })
            .collect();
        ActionTape { batches }
    }
}

struct Progress {
    live: bool,
    label: &'static str,
    last: Instant,
}

impl Progress {
    fn new(label: &'static str, quiet: bool) -> Self {
        Progress { live: !quiet && std::io::stderr().is_terminal(), label, last: Instant::now() }
    }

    fn tick(&mut self, steps: u64, seconds: f64) {
        if self.live && self.last.elapsed() >= Duration::from_millis(250) {
            self.last = Instant::now();
            eprint!(
                "\r{}: {:>12} steps/s after {seconds:.1} s   ",
                self.label,
                fmt_rate(steps as f64 / seconds)
            );
            let _ = std::io::stderr().flush();
        }
    }

    fn done(&self) {
        if self.live {
            eprint!("\r{:70}\r", "");
        }
    }
}

/// Something that steps a batch of envs.
trait Stepper {
    /// Steps batch number `k`; returns the number of env steps taken.
    fn step_batch(&mut self, k: usize) -> Result<u64, Error>;

    /// The pool (none for the serial loop): its live counters for `--profile`, its trace.
    fn pool(&self) -> Option<&Pool> {
        None
    }
}

struct PoolStepper<T> {
    pool: Pool,
    tape: ActionTape<T>,
}

impl<T: Element> Stepper for PoolStepper<T> {
    fn step_batch(&mut self, k: usize) -> Result<u64, Error> {
        self.pool.step(&self.tape.batches[k % self.tape.batches.len()])?;
        Ok(self.pool.num_envs() as u64)
    }

    fn pool(&self) -> Option<&Pool> {
        Some(&self.pool)
    }
}

/// Async mode: send actions to the envs of the last batch, receive the next batch.
struct AsyncStepper<T> {
    pool: Pool,
    tape: ActionTape<T>,
    per_env: usize,
    ids: Vec<usize>,
    actions: Vec<T>,
}

impl<T: Element> Stepper for AsyncStepper<T> {
    fn step_batch(&mut self, k: usize) -> Result<u64, Error> {
        let tape = &self.tape.batches[k % self.tape.batches.len()];
        self.actions.clear();
        for &e in &self.ids {
            self.actions.extend_from_slice(&tape[e * self.per_env..(e + 1) * self.per_env]);
        }
        self.pool.send(&self.actions, &self.ids)?;
        let batch = self.pool.recv()?;
        self.ids.clear();
        self.ids.extend(batch.env_ids().iter().map(|&e| e as usize));
        Ok(self.ids.len() as u64)
    }

    fn pool(&self) -> Option<&Pool> {
        Some(&self.pool)
    }
}

/// The baseline: the same envs and actions stepped in this process, one after another.
struct SerialStepper<T> {
    shard: EnvShard,
    rows: LocalRows,
    tape: ActionTape<T>,
}

impl<T: Element> Stepper for SerialStepper<T> {
    fn step_batch(&mut self, k: usize) -> Result<u64, Error> {
        let actions = shmenv::engine::spec::as_bytes(&self.tape.batches[k % self.tape.batches.len()]);
        self.shard
            .step_all(actions, &mut self.rows.rows())
            .map_err(|(e, m)| format!("env {e} panicked: {m}"))?;
        Ok(self.shard.range().len() as u64)
    }
}

/// Steps and elapsed time of one contender.
#[derive(Default)]
struct Tally {
    steps: u64,
    seconds: f64,
    batches: usize,
}

impl Tally {
    fn rate(&self) -> f64 {
        self.steps as f64 / self.seconds
    }

    /// Steps for `slice`, adding to the tally.
    fn run(&mut self, s: &mut dyn Stepper, slice: Duration, progress: &mut Progress) -> Result<(), Error> {
        let start = Instant::now();
        while start.elapsed() < slice {
            for _ in 0..8 {
                self.steps += s.step_batch(self.batches)?;
                self.batches += 1;
            }
            progress.tick(self.steps, self.seconds + start.elapsed().as_secs_f64());
        }
        self.seconds += start.elapsed().as_secs_f64();
        Ok(())
    }
}

fn bench(registry: &Registry, args: BenchArgs) -> Result<(), Error> {
    let config: serde_json::Value =
        serde_json::from_str(&args.envs.config).map_err(|e| format!("--config is not valid JSON: {e}"))?;
    let wait = WaitStrategy::from_name(&args.wait)
        .ok_or_else(|| format!("unknown --wait {:?}: use auto, spin, yield or block", args.wait))?;
    let affinity = match args.affinity.as_str() {
        "auto" => CpuAffinity::Auto,
        "none" => CpuAffinity::None,
        other => return Err(format!("unknown --affinity {other:?}: use auto or none").into()),
    };
    let stats = match args.stats.as_str() {
        "on" => true,
        "off" => false,
        other => return Err(format!("unknown --stats {other:?}: use on or off").into()),
    };
    if args.profile && !stats {
        return Err("--profile reads the live stats: drop --stats off".into());
    }
    let mut builder = Pool::builder(&args.envs.env)
        .stats(stats)
        .trace(args.trace.is_some())
        .cpu_affinity(affinity)
        .config(config.clone())
        .num_envs(args.envs.num_envs)
        .seed(args.seed)
        .wait(wait)
        .worker_program(std::env::current_exe()?);
    if let Some(w) = args.workers {
        builder = builder.num_workers(w);
    }
    if let Some(b) = args.batch_size {
        builder = builder.batch_size(b);
    }
    if let Some(max_restarts) = args.max_restarts {
        builder = builder.failure_policy(shmenv::FailurePolicy::Restart { max_restarts });
    }
    let pool = builder.build()?;
    let workers = pool.num_workers();
    let batch_size = pool.batch_size();
    let (ours, baseline, profile) = match pool.spec().action.dtype() {
        DType::F32 => bench_typed::<f32>(registry, &args, &config, pool),
        DType::F64 => bench_typed::<f64>(registry, &args, &config, pool),
        DType::U8 => bench_typed::<u8>(registry, &args, &config, pool),
        DType::I8 => bench_typed::<i8>(registry, &args, &config, pool),
        DType::I16 => bench_typed::<i16>(registry, &args, &config, pool),
        DType::I32 => bench_typed::<i32>(registry, &args, &config, pool),
        DType::I64 => bench_typed::<i64>(registry, &args, &config, pool),
    }?;
    let ratio = baseline.as_ref().map(|b| ours.rate() / b.rate());
    if args.json {
        let mut out = json!({
            "env": args.envs.env, "config": config, "num_envs": args.envs.num_envs, "batch_size": batch_size,
            "workers": workers, "wait": wait.name(), "affinity": args.affinity, "seconds": ours.seconds, "steps": ours.steps,
            "steps_per_sec": ours.rate(), "stats": stats,
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
    } else {
        let mode = if batch_size < args.envs.num_envs {
            format!("async, batches of {batch_size}")
        } else {
            "sync".into()
        };
        println!(
            "{} x {} on {workers} workers ({mode}, wait {}), {:.1} s",
            args.envs.env,
            args.envs.num_envs,
            wait.name(),
            ours.seconds
        );
        println!("  shmenv pool:   {:>10} steps/s", fmt_rate(ours.rate()));
        if let (Some(b), Some(r)) = (&baseline, ratio) {
            println!(
                "  serial loop:   {:>10} steps/s (same envs and actions, in-process)",
                fmt_rate(b.rate())
            );
            println!("  ratio:         {r:>10.2}x");
        }
        if let Some(p) = &profile {
            print_profile(p);
        }
    }
    Ok(())
}

/// This process's resident memory in KiB (VmRSS).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn soak(args: SoakArgs) -> Result<(), Error> {
    let config: serde_json::Value =
        serde_json::from_str(&args.envs.config).map_err(|e| format!("--config is not valid JSON: {e}"))?;
    let mut pool = Pool::builder(&args.envs.env)
        .config(config)
        .num_envs(args.envs.num_envs)
        .num_workers(args.workers)
        .seed(0)
        .batch_size(args.batch_size.unwrap_or(args.envs.num_envs))
        .failure_policy(shmenv::FailurePolicy::Restart { max_restarts: u32::MAX })
        .worker_program(std::env::current_exe()?)
        .build()?;
    if pool.spec().action.dtype() != DType::I64 {
        return Err("soak steps envs with integer (Discrete) actions: pick such an env".into());
    }
    let n = pool.num_envs();
    let pids = std::sync::Arc::new(std::sync::Mutex::new(pool.worker_pids().to_vec()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let (pids, stop) = (pids.clone(), stop.clone());
        let every = Duration::from_secs_f64(args.kill_every.max(0.01));
        std::thread::spawn(move || {
            let mut rng = shmenv::worker::rng::Pcg64::from_seed(7);
            let mut kills = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(every);
                let current = pids.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let victim = current[(rng.next_f64() * current.len() as f64) as usize % current.len()];
                // SAFETY: kill has no memory preconditions; the pid is one of our workers.
                if unsafe { libc::kill(victim as i32, libc::SIGKILL) } == 0 {
                    kills += 1;
                }
            }
            kills
        })
    };
    let me = std::process::id();
    let fd_count = || std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let started = Instant::now();
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let every = Duration::from_secs_f64(args.report_every.max(0.1));
    let mut next_report = every;
    let mut steps = 0u64;
    let mut samples: Vec<(u64, usize)> = Vec::new();
    println!(
        "{:>8} {:>14} {:>10} {:>9} {:>10} {:>5} {:>8}",
        "seconds", "env steps", "steps/s", "restarts", "rss KiB", "fds", "workers"
    );
    // Async: every env stays in flight; each round resends the envs of the last batch.
    let mut ids: Vec<usize> = pool.reset()?.env_ids().iter().map(|&e| e as usize).collect();
    let actions: Vec<i64> = (0..n).map(|i| (i % 2) as i64).collect();
    let mut last = (Instant::now(), 0u64);
    while started.elapsed() < total {
        for _ in 0..16 {
            if pool.is_async() {
                pool.send(&actions[..ids.len()], &ids)?;
                ids = pool.recv()?.env_ids().iter().map(|&e| e as usize).collect();
                steps += ids.len() as u64;
            } else {
                pool.step(&actions)?;
                steps += n as u64;
            }
        }
        *pids.lock().unwrap_or_else(|p| p.into_inner()) = pool.worker_pids().to_vec();
        if started.elapsed() >= next_report {
            next_report += every;
            let (rss, fds) = (rss_kib(me), fd_count());
            samples.push((rss, fds));
            let rate = (steps - last.1) as f64 / last.0.elapsed().as_secs_f64();
            last = (Instant::now(), steps);
            println!(
                "{:>8.0} {:>14} {:>10} {:>9} {:>10} {:>5} {:>8}",
                started.elapsed().as_secs_f64(),
                steps,
                fmt_rate(rate),
                pool.restarts().iter().sum::<u32>(),
                rss,
                fds,
                pool.worker_pids().len()
            );
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let kills = killer.join().map_err(|_| "the killer thread panicked")?;
    let restarts: u32 = pool.restarts().iter().sum();
    drop(pool);
    let (first, last) =
        (samples.first().copied().unwrap_or_default(), samples.last().copied().unwrap_or_default());
    let max_rss = samples.iter().map(|s| s.0).max().unwrap_or(0);
    println!(
        "soak done: {:.1} min, {steps} env steps, {kills} kills, {restarts} restarts; RSS {} -> {} KiB (max {max_rss}), fds {} -> {}",
        started.elapsed().as_secs_f64() / 60.0,
        first.0,
        last.0,
        first.1,
        last.1
    );
    Ok(())
}

/// One configuration tried by `tune`.
#[derive(Clone, serde::Serialize)]
struct Trial {
    workers: usize,
    envs_per_worker: String,
    batch_size: usize,
    wait: &'static str,
    steps_per_sec: f64,
}

fn tune(args: TuneArgs) -> Result<(), Error> {
    let config: serde_json::Value =
        serde_json::from_str(&args.envs.config).map_err(|e| format!("--config is not valid JSON: {e}"))?;
    let n = args.envs.num_envs;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let program = std::env::current_exe()?;
    let slice = Duration::from_secs_f64(args.seconds.max(0.05));
    let run = |workers: usize, batch: usize, wait: WaitStrategy| -> Result<f64, Error> {
        let pool = Pool::builder(&args.envs.env)
            .config(config.clone())
            .num_envs(n)
            .num_workers(workers)
            .batch_size(batch)
            .wait(wait)
            .seed(0)
            .worker_program(&program)
            .build()?;
        match pool.spec().action.dtype() {
            DType::F32 => trial::<f32>(pool, slice),
            DType::F64 => trial::<f64>(pool, slice),
            DType::U8 => trial::<u8>(pool, slice),
            DType::I8 => trial::<i8>(pool, slice),
            DType::I16 => trial::<i16>(pool, slice),
            DType::I32 => trial::<i32>(pool, slice),
            DType::I64 => trial::<i64>(pool, slice),
        }
    };
    let mut workers: Vec<usize> = (1..=2 * cores).filter(|&w| w <= n).collect();
    workers.dedup();
    let mut batches = vec![n, n / 2, n / 4];
    batches.retain(|&b| b >= 1);
    batches.dedup();
    let mut trials = Vec::new();
    if !args.json {
        eprintln!(
            "tuning {} x {n}: about {} trials of {:.1} s ...",
            args.envs.env,
            workers.len() * batches.len() + 36,
            slice.as_secs_f64()
        );
    }
    // Stage 1: shapes (workers x batch size) with the adaptive wait strategy.
    for &w in &workers {
        for &b in &batches {
            let rate = run(w, b, WaitStrategy::Auto)?;
            trials.push(Trial {
                workers: w,
                envs_per_worker: envs_per_worker(n, w),
                batch_size: b,
                wait: "auto",
                steps_per_sec: rate,
            });
        }
    }
    // Stage 2: the three best shapes, each with every wait strategy (spin only when every
    // process can have a core), measured three times; medians.
    trials.sort_by(|a, b| b.steps_per_sec.total_cmp(&a.steps_per_sec));
    let mut finals = Vec::new();
    for shape in trials.iter().take(3).cloned().collect::<Vec<_>>() {
        for wait in [WaitStrategy::Auto, WaitStrategy::Yield, WaitStrategy::Block, WaitStrategy::Spin] {
            if wait == WaitStrategy::Spin && shape.workers + 1 > cores {
                continue;
            }
            let mut rates =
                (0..3).map(|_| run(shape.workers, shape.batch_size, wait)).collect::<Result<Vec<_>, _>>()?;
            rates.sort_by(|a, b| a.total_cmp(b));
            finals.push(Trial { wait: wait.name(), steps_per_sec: rates[1], ..shape.clone() });
        }
    }
    finals.sort_by(|a, b| b.steps_per_sec.total_cmp(&a.steps_per_sec));
    let best = finals.first().ok_or("no configuration could run")?;
    let mut builder =
        format!("Pool::builder({:?}).num_envs({n}).num_workers({})", args.envs.env, best.workers);
    if best.batch_size < n {
        builder += &format!(".batch_size({})", best.batch_size);
    }
    let variant = match best.wait {
        "spin" => "Spin",
        "yield" => "Yield",
        "block" => "Block",
        _ => "Auto",
    };
    if variant != "Auto" {
        builder += &format!(".wait(WaitStrategy::{variant})");
    }
    if args.json {
        println!(
            "{}",
            json!({"env": args.envs.env, "num_envs": n, "shapes": trials, "ranked": finals, "recommended": builder})
        );
        return Ok(());
    }
    println!(
        "{} x {n}, {cores} cores: {} shapes tried, the 3 best with each wait strategy (median of 3)",
        args.envs.env,
        trials.len()
    );
    println!("  rank  workers  envs/worker  batch   mode   wait      steps/s");
    for (i, t) in finals.iter().enumerate() {
        let mode = if t.batch_size < n { "async" } else { "sync" };
        println!(
            "  {:>4}  {:>7}  {:>11}  {:>5}  {:>5}  {:>5}  {:>11}",
            i + 1,
            t.workers,
            t.envs_per_worker,
            t.batch_size,
            mode,
            t.wait,
            fmt_rate(t.steps_per_sec)
        );
    }
    println!("recommended: {builder}");
    if best.batch_size < n {
        println!("  (async: use send()/recv(); sync step() needs batch_size = num_envs)");
    }
    Ok(())
}

fn envs_per_worker(n: usize, w: usize) -> String {
    if n % w == 0 {
        (n / w).to_string()
    } else {
        format!("{}-{}", n / w, n / w + 1)
    }
}

/// Steps `pool` with random actions for `slice` (after a short warm-up); returns steps/s.
fn trial<T: Element>(mut pool: Pool, slice: Duration) -> Result<f64, Error> {
    let action = pool.spec().action.clone();
    let n = pool.num_envs();
    let tape = ActionTape::<T>::new(&action, n, 0);
    let mut stepper: Box<dyn Stepper> = if pool.is_async() {
        let ids = pool.reset()?.env_ids().iter().map(|&e| e as usize).collect();
        Box::new(AsyncStepper { pool, tape, per_env: action.num_elements(), ids, actions: Vec::new() })
    } else {
        pool.reset()?;
        Box::new(PoolStepper { pool, tape })
    };
    let mut warm = Tally::default();
    warm.run(stepper.as_mut(), slice / 5, &mut Progress::new("", true))?;
    let mut tally = Tally::default();
    tally.run(stepper.as_mut(), slice, &mut Progress::new("", true))?;
    Ok(tally.rate())
}

fn top(args: TopArgs) -> Result<(), Error> {
    let pools = shmenv::engine::attach::attach(args.pid)?;
    let interval = Duration::from_secs_f64(args.interval.max(0.05));
    let mut before: Vec<shmenv::StatsSnapshot> = pools.iter().map(|p| p.snapshot()).collect();
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
        let now: Vec<shmenv::StatsSnapshot> = pools.iter().map(|p| p.snapshot()).collect();
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
                print_top(args.pid, p, r);
            }
        }
        if args.once {
            return Ok(());
        }
        before = now;
    }
}

fn print_top(pid: u32, p: &shmenv::engine::attach::AttachedPool, r: &shmenv::StatsReport) {
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
    println!("  worker     pid   steps/s   util   wait  publish   step p50    step p99");
    for w in &r.workers {
        let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2} us"));
        println!(
            "  {:>6} {:>7} {:>9} {:>5.1}% {:>5.1}% {:>7.1}% {:>10} {:>11}",
            w.worker,
            w.pid,
            fmt_rate(w.steps_per_sec),
            100.0 * w.utilization,
            100.0 * w.wait_share,
            100.0 * w.publish_share,
            us(w.step_p50_us),
            us(w.step_p99_us)
        );
    }
}

/// The `--profile` breakdown of the pool's rounds.
fn print_profile(p: &shmenv::StatsReport) {
    let n = p.workers.len().max(1) as f64;
    let mean = |f: fn(&shmenv::WorkerActivity) -> f64| p.workers.iter().map(f).sum::<f64>() / n;
    let pct = |x: f64| format!("{:>5.1}%", 100.0 * x);
    let per_worker = |f: fn(&shmenv::WorkerActivity) -> f64| {
        p.workers.iter().map(|w| pct(f(w)).trim().to_string()).collect::<Vec<_>>().join(", ")
    };
    println!("  where the pool's time went ({:.1} s of pool rounds, {} batches):", p.seconds, p.batches);
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
    if let Some(fill) = p.ring_full_blocks {
        println!("    ring blocks full at recv {fill:>6.2}");
    }
    let p50: Vec<String> =
        p.workers.iter().filter_map(|w| w.step_p50_us).map(|v| format!("{v:.2}")).collect();
    let p99: Vec<String> =
        p.workers.iter().filter_map(|w| w.step_p99_us).map(|v| format!("{v:.2}")).collect();
    println!("    env step p50 / p99 (us)  {} / {}", p50.join(", "), p99.join(", "));
    let why = match p.verdict() {
        "env-bound" => "workers spend most of their time in env code: more workers (cores) or a cheaper env step",
        "trainer-bound" => "workers mostly wait while the trainer is busy outside the pool: speed up the trainer, or use async mode",
        _ => "neither the envs nor the trainer fill the time, the handoffs do: more envs per worker, fewer workers, or async mode",
    };
    println!("  verdict: {} ({why})", p.verdict());
}

type BenchResult = (Tally, Option<Tally>, Option<shmenv::StatsReport>);

fn bench_typed<T: Element>(
    registry: &Registry,
    args: &BenchArgs,
    config: &serde_json::Value,
    mut pool: Pool,
) -> Result<BenchResult, Error> {
    let action = pool.spec().action.clone();
    let mut serial = if args.baseline {
        let params = PoolParams {
            env_id: args.envs.env.clone(),
            config: config.clone(),
            num_envs: args.envs.num_envs,
            num_workers: 1,
            autoreset: AutoReset::NextStep,
            max_episode_steps: None,
            wait: "auto".into(),
            batch_size: args.envs.num_envs,
            ring_depth: 2,
            stats: false,
            trace: false,
            restart: false,
        };
        let mut shard = EnvShard::new(registry, &params, 0..params.num_envs)?;
        let mut rows = LocalRows::new(shard.spec(), params.num_envs, false);
        shard
            .reset_all(Some(args.seed), &mut rows.rows())
            .map_err(|(e, m)| format!("env {e} panicked: {m}"))?;
        Some(SerialStepper {
            shard,
            rows,
            tape: ActionTape::<T>::new(&action, args.envs.num_envs, args.seed),
        })
    } else {
        None
    };
    let tape = ActionTape::<T>::new(&action, args.envs.num_envs, args.seed);
    let mut contender: Box<dyn Stepper> = if pool.is_async() {
        let ids = pool.reset()?.env_ids().iter().map(|&e| e as usize).collect();
        Box::new(AsyncStepper { pool, tape, per_env: action.num_elements(), ids, actions: Vec::new() })
    } else {
        pool.reset()?;
        Box::new(PoolStepper { pool, tape })
    };
    // With a baseline, alternate short rounds of each so that machine noise hits both alike.
    let rounds = if serial.is_some() { ((args.seconds / 0.5).round() as u32).max(3) } else { 1 };
    let slice = Duration::from_secs_f64(args.seconds) / rounds;
    let (mut ours, mut theirs) = (Tally::default(), Tally::default());
    let mut progress = Progress::new("shmenv pool", args.json);
    // The profile covers the pool's rounds only (the serial rounds leave it idle).
    let mut profile = shmenv::StatsSnapshot::default();
    for _ in 0..rounds {
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
            theirs.run(s, slice, &mut Progress::new("serial loop", true))?;
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

fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}
