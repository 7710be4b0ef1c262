//! `shmenv`: list the built-in envs and benchmark them through the engine.
//!
//! This binary is also a worker program: a pool it builds execs this same file with
//! `--shmenv-worker ...`, which `main` hands to the worker host before anything else.

use clap::{Parser, Subcommand};
use serde_json::json;
use shmenv::worker::{EnvShard, LocalRows, Registry};
use shmenv::{DType, Element, Pool, Space, WaitStrategy};
use shmenv_engine::protocol::{AutoReset, PoolParams};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "shmenv", version, about = "Vectorized RL envs stepped by worker processes through shared memory")]
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
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Env id (see `shmenv list`).
    #[arg(long, default_value = "CartPole-v1")]
    env: String,
    /// Env config as a JSON object.
    #[arg(long, default_value = "{}")]
    config: String,
    /// Number of envs.
    #[arg(long, default_value_t = 64)]
    num_envs: usize,
    /// Number of worker processes (default: available cores).
    #[arg(long)]
    workers: Option<usize>,
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
                                if T::DTYPE.is_float() { lo + u * (hi - lo) } else { lo.ceil() }
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

struct Run {
    steps: u64,
    seconds: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.steps as f64 / self.seconds
    }
}

struct Progress {
    live: bool,
    label: String,
    last: Instant,
}

impl Progress {
    fn new(label: String, quiet: bool) -> Self {
        Progress { live: !quiet && std::io::stderr().is_terminal(), label, last: Instant::now() }
    }

    fn tick(&mut self, steps: u64, start: Instant) {
        if self.live && self.last.elapsed() >= Duration::from_millis(250) {
            self.last = Instant::now();
            let s = start.elapsed().as_secs_f64();
            eprint!("\r{}: {:>12} steps/s after {s:.1} s   ", self.label, fmt_rate(steps as f64 / s));
            let _ = std::io::stderr().flush();
        }
    }

    fn done(&self) {
        if self.live {
            eprint!("\r{:70}\r", "");
        }
    }
}

fn bench(registry: &Registry, args: BenchArgs) -> Result<(), Error> {
    let config: serde_json::Value =
        serde_json::from_str(&args.config).map_err(|e| format!("--config is not valid JSON: {e}"))?;
    let wait = WaitStrategy::from_name(&args.wait).ok_or_else(|| format!("unknown --wait {:?}: use auto, spin, yield or block", args.wait))?;
    let mut builder = Pool::builder(&args.env)
        .config(config.clone())
        .num_envs(args.num_envs)
        .seed(args.seed)
        .wait(wait)
        .worker_program(std::env::current_exe()?);
    if let Some(w) = args.workers {
        builder = builder.num_workers(w);
    }
    let mut pool = builder.build()?;
    let duration = Duration::from_secs_f64(args.seconds);
    let action = pool.spec().action.clone();
    macro_rules! by_dtype {
        ($f:ident($($a:expr),*)) => {
            match action.dtype() {
                DType::F32 => $f::<f32>($($a),*),
                DType::F64 => $f::<f64>($($a),*),
                DType::U8 => $f::<u8>($($a),*),
                DType::I8 => $f::<i8>($($a),*),
                DType::I16 => $f::<i16>($($a),*),
                DType::I32 => $f::<i32>($($a),*),
                DType::I64 => $f::<i64>($($a),*),
            }
        };
    }
    let run = by_dtype!(run_pool(&mut pool, duration, args.json))?;
    let workers = pool.num_workers();
    drop(pool);
    let baseline = if args.baseline {
        let params = PoolParams {
            env_id: args.env.clone(),
            config: config.clone(),
            num_envs: args.num_envs,
            num_workers: 1,
            autoreset: AutoReset::NextStep,
            max_episode_steps: None,
            wait: "auto".into(),
        };
        Some(by_dtype!(run_serial(registry, &params, args.seed, duration, args.json))?)
    } else {
        None
    };
    let ratio = baseline.as_ref().map(|b| run.rate() / b.rate());
    if args.json {
        let mut out = json!({
            "env": args.env, "config": config, "num_envs": args.num_envs, "batch_size": args.num_envs,
            "workers": workers, "wait": wait.name(), "seconds": run.seconds, "steps": run.steps,
            "steps_per_sec": run.rate(),
        });
        if let (Some(b), Some(r)) = (&baseline, ratio) {
            out["baseline_steps"] = json!(b.steps);
            out["baseline_steps_per_sec"] = json!(b.rate());
            out["ratio"] = json!(r);
        }
        println!("{out}");
    } else {
        println!("{} x {} on {workers} workers (wait {}), {:.1} s", args.env, args.num_envs, wait.name(), run.seconds);
        println!("  shmenv pool:   {:>10} steps/s", fmt_rate(run.rate()));
        if let (Some(b), Some(r)) = (&baseline, ratio) {
            println!("  serial loop:   {:>10} steps/s (same envs and actions, in-process)", fmt_rate(b.rate()));
            println!("  ratio:         {r:>10.2}x");
        }
    }
    Ok(())
}

fn run_pool<T: Element>(pool: &mut Pool, duration: Duration, quiet: bool) -> Result<Run, Error> {
    let tape = ActionTape::<T>::new(&pool.spec().action, pool.num_envs(), pool.seed());
    let n = pool.num_envs() as u64;
    pool.reset()?;
    let mut progress = Progress::new("shmenv pool".into(), quiet);
    let start = Instant::now();
    let mut steps = 0u64;
    let mut i = 0;
    while start.elapsed() < duration {
        for _ in 0..8 {
            pool.step(&tape.batches[i % tape.batches.len()])?;
            i += 1;
        }
        steps += 8 * n;
        progress.tick(steps, start);
    }
    progress.done();
    Ok(Run { steps, seconds: start.elapsed().as_secs_f64() })
}

fn run_serial<T: Element>(registry: &Registry, params: &PoolParams, seed: u64, duration: Duration, quiet: bool) -> Result<Run, Error> {
    let mut shard = EnvShard::new(registry, params, 0..params.num_envs)?;
    let tape = ActionTape::<T>::new(&shard.spec().action, params.num_envs, seed);
    let mut rows = LocalRows::new(shard.spec(), params.num_envs, false);
    shard.reset_all(Some(seed), &mut rows.rows()).map_err(|(e, m)| format!("env {e} panicked: {m}"))?;
    let mut progress = Progress::new("serial loop".into(), quiet);
    let start = Instant::now();
    let mut steps = 0u64;
    let mut i = 0;
    while start.elapsed() < duration {
        for _ in 0..8 {
            let actions: &[u8] = bytemuck_bytes(&tape.batches[i % tape.batches.len()]);
            shard.step_all(actions, &mut rows.rows()).map_err(|(e, m)| format!("env {e} panicked: {m}"))?;
            i += 1;
        }
        steps += 8 * params.num_envs as u64;
        progress.tick(steps, start);
    }
    progress.done();
    Ok(Run { steps, seconds: start.elapsed().as_secs_f64() })
}

fn bytemuck_bytes<T: Element>(v: &[T]) -> &[u8] {
    shmenv::engine::spec::as_bytes(v)
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
