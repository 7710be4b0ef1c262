//! Throughput of the engine against two baselines measured in the same run:
//! - `serial`: the same envs and actions stepped in one process (no parallelism, no IPC);
//! - `pipe`: the SubprocVecEnv design: worker processes, actions and results serialized
//!   through pipes (length-prefixed raw bytes, cheaper than pickle, so this baseline is
//!   generous) and copied into a batch buffer by the trainer.
//!
//! `cargo bench --bench throughput`; filter with e.g. `-- cartpole/1024`. Medians and
//! throughput are criterion's; the ratios quoted in the docs divide medians of one run.

use criterion::{BenchmarkId, Criterion, Throughput};
use serde_json::json;
use shmenv::worker::Registry;
use shmenv::Pool;
use shmenv_engine::protocol::{AutoReset, PoolParams};
use shmenv_worker::{EnvShard, LocalRows};
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const PIPE_WORKER_FLAG: &str = "--pipe-baseline-worker";

fn params(env: &str, config: &serde_json::Value, num_envs: usize) -> PoolParams {
    PoolParams {
        env_id: env.into(),
        config: config.clone(),
        num_envs,
        num_workers: 1,
        autoreset: AutoReset::NextStep,
        max_episode_steps: None,
        wait: shmenv::WaitStrategy::Auto,
        batch_size: num_envs,
        ring_depth: 2,
        stats: false,
        trace: false,
        restart: false,
        plugin: None,
        cores: 0,
        trainer_shard: false,
    }
}

/// A tape of 16 random action batches (Discrete(2)); random, so that no branch predictor
/// learns them, and identical for every contender.
fn tape(num_envs: usize) -> Vec<Vec<i64>> {
    let mut rng = shmenv::worker::rng::Pcg64::from_seed(7);
    (0..16).map(|_| (0..num_envs).map(|_| (rng.next_u64() >> 63) as i64).collect()).collect()
}

/// A sync pool of `workers` processes, and with `trainer_shard` the trainer stepping one
/// more shard itself.
fn bench_pool(
    env: &str,
    config: &serde_json::Value,
    num_envs: usize,
    workers: usize,
    trainer_shard: bool,
) -> impl FnMut(u64) -> Duration {
    let builder = Pool::builder(env).config(config.clone()).num_envs(num_envs).num_workers(workers).seed(0);
    let builder = match trainer_shard {
        true => builder.trainer_shard(shmenv::worker::trainer_shard(Registry::with_builtins())),
        false => builder,
    };
    let mut pool = builder.build().expect("pool builds");
    pool.reset().unwrap();
    let tape = tape(num_envs);
    let mut k = 0;
    move |iters| {
        let start = Instant::now();
        for _ in 0..iters {
            pool.step(&tape[k % 16]).unwrap();
            k += 1;
        }
        start.elapsed()
    }
}

fn bench_serial(env: &str, config: &serde_json::Value, num_envs: usize) -> impl FnMut(u64) -> Duration {
    let registry = Registry::with_builtins();
    let mut shard = EnvShard::new(&registry, &params(env, config, num_envs), 0..num_envs).unwrap();
    let mut rows = LocalRows::new(shard.spec(), num_envs, false);
    shard.reset_all(Some(0), &mut rows.rows()).unwrap();
    let tape = tape(num_envs);
    let mut k = 0;
    move |iters| {
        let start = Instant::now();
        for _ in 0..iters {
            shard.step_all(bytemuck::cast_slice(&tape[k % 16]), &mut rows.rows()).unwrap();
            k += 1;
        }
        start.elapsed()
    }
}

/// The trainer side of the pipe baseline.
struct PipePool {
    workers: Vec<(Child, ChildStdin, ChildStdout)>,
    shards: Vec<std::ops::Range<usize>>,
    batch: Vec<u8>,
}

impl PipePool {
    fn new(env: &str, config: &serde_json::Value, num_envs: usize, workers: usize) -> PipePool {
        let shards: Vec<_> =
            (0..workers).map(|w| shmenv_engine::protocol::shard(w, num_envs, workers)).collect();
        let workers = shards
            .iter()
            .map(|s| {
                let mut child = Command::new(std::env::current_exe().unwrap())
                    .args([
                        PIPE_WORKER_FLAG,
                        env,
                        &config.to_string(),
                        &s.len().to_string(),
                        &s.start.to_string(),
                    ])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap();
                let (i, o) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
                (child, i, o)
            })
            .collect();
        PipePool { workers, shards, batch: Vec::new() }
    }

    fn step(&mut self, actions: &[i64]) {
        for ((_, stdin, _), s) in self.workers.iter_mut().zip(&self.shards) {
            let bytes: &[u8] = bytemuck::cast_slice(&actions[s.clone()]);
            stdin.write_all(&(bytes.len() as u32).to_le_bytes()).unwrap();
            stdin.write_all(bytes).unwrap();
            stdin.flush().unwrap();
        }
        self.batch.clear();
        for (_, _, stdout) in self.workers.iter_mut() {
            let mut len = [0u8; 4];
            stdout.read_exact(&mut len).unwrap();
            let start = self.batch.len();
            self.batch.resize(start + u32::from_le_bytes(len) as usize, 0);
            stdout.read_exact(&mut self.batch[start..]).unwrap();
        }
    }
}

impl Drop for PipePool {
    fn drop(&mut self) {
        for (child, stdin, _) in self.workers.iter_mut() {
            let _ = stdin.write_all(&u32::MAX.to_le_bytes());
            let _ = stdin.flush();
            let _ = child.wait();
        }
    }
}

/// The worker side of the pipe baseline: read actions, step, serialize every result array.
fn pipe_worker(args: &[String]) {
    let [env, config, n, first] = args else { panic!("usage: {PIPE_WORKER_FLAG} ENV CONFIG N FIRST") };
    let config: serde_json::Value = serde_json::from_str(config).unwrap();
    let (n, first): (usize, usize) = (n.parse().unwrap(), first.parse().unwrap());
    let registry = Registry::with_builtins();
    let mut shard = EnvShard::new(&registry, &params(env, &config, first + n), first..first + n).unwrap();
    let mut rows = LocalRows::new(shard.spec(), n, false);
    shard.reset_all(Some(0), &mut rows.rows()).unwrap();
    let (mut stdin, mut stdout) = (std::io::stdin().lock(), std::io::stdout().lock());
    let mut actions = Vec::new();
    let mut out = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if stdin.read_exact(&mut len).is_err() || u32::from_le_bytes(len) == u32::MAX {
            return;
        }
        actions.resize(u32::from_le_bytes(len) as usize, 0);
        stdin.read_exact(&mut actions).unwrap();
        shard.step_all(&actions, &mut rows.rows()).unwrap();
        out.clear();
        out.extend_from_slice(rows.obs_bytes(0));
        out.extend_from_slice(bytemuck::cast_slice(rows.rewards()));
        out.extend_from_slice(rows.terminated());
        out.extend_from_slice(rows.truncated());
        stdout.write_all(&(out.len() as u32).to_le_bytes()).unwrap();
        stdout.write_all(&out).unwrap();
        stdout.flush().unwrap();
    }
}

fn bench_pipe(
    env: &str,
    config: &serde_json::Value,
    num_envs: usize,
    workers: usize,
) -> impl FnMut(u64) -> Duration {
    let mut pipes = PipePool::new(env, config, num_envs, workers);
    let tape = tape(num_envs);
    let mut k = 0;
    move |iters| {
        let start = Instant::now();
        for _ in 0..iters {
            pipes.step(&tape[k % 16]);
            k += 1;
        }
        start.elapsed()
    }
}

/// Async mode: each iteration sends actions to the envs of the last batch and receives the
/// next `batch_size` results.
fn bench_async(
    env: &str,
    config: &serde_json::Value,
    num_envs: usize,
    workers: usize,
    batch: usize,
) -> impl FnMut(u64) -> Duration {
    let mut pool = Pool::builder(env)
        .config(config.clone())
        .num_envs(num_envs)
        .num_workers(workers)
        .batch_size(batch)
        .seed(0)
        .build()
        .expect("pool builds");
    let mut ids: Vec<usize> = pool.reset().unwrap().env_ids().iter().map(|&e| e as usize).collect();
    let tape = tape(num_envs);
    let mut k = 0;
    let mut actions = Vec::with_capacity(batch);
    move |iters| {
        let start = Instant::now();
        for _ in 0..iters {
            actions.clear();
            actions.extend(ids.iter().map(|&e| tape[k % 16][e]));
            pool.send(&actions, &ids).unwrap();
            let b = pool.recv().unwrap();
            ids.clear();
            ids.extend(b.env_ids().iter().map(|&e| e as usize));
            k += 1;
        }
        start.elapsed()
    }
}

/// Sync against async at the same number of envs, per env step.
fn compare_async(
    c: &mut Criterion,
    group: &str,
    env: &str,
    config: serde_json::Value,
    num_envs: usize,
    workers: usize,
    batch: usize,
) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(num_envs as u64));
    let mut f = bench_pool(env, &config, num_envs, workers, false);
    g.bench_function(BenchmarkId::new("sync", format!("{num_envs}envs_{workers}w")), |b| {
        b.iter_custom(&mut f)
    });
    drop(f);
    g.throughput(Throughput::Elements(batch as u64));
    let mut f = bench_async(env, &config, num_envs, workers, batch);
    g.bench_function(BenchmarkId::new("async", format!("{num_envs}envs_{workers}w_batch{batch}")), |b| {
        b.iter_custom(&mut f)
    });
    g.finish();
}

/// One group: shmenv and both baselines on the same env, side by side.
fn compare(
    c: &mut Criterion,
    group: &str,
    env: &str,
    config: serde_json::Value,
    num_envs: usize,
    workers: usize,
    serial: bool,
) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(num_envs as u64));
    let id = |name: &str| BenchmarkId::new(name, format!("{num_envs}envs_{workers}w"));
    let mut f = bench_pool(env, &config, num_envs, workers, false);
    g.bench_function(id("shmenv"), |b| b.iter_custom(&mut f));
    drop(f);
    if serial && workers > 1 {
        // The same parallelism with the trainer as one of the shards' steppers.
        let mut f = bench_pool(env, &config, num_envs, workers - 1, true);
        let name = format!("{num_envs}envs_{}w_and_trainer", workers - 1);
        g.bench_function(BenchmarkId::new("shmenv", name), |b| b.iter_custom(&mut f));
        drop(f);
    }
    if serial {
        let mut f = bench_serial(env, &config, num_envs);
        g.bench_function(BenchmarkId::new("serial", format!("{num_envs}envs")), |b| b.iter_custom(&mut f));
    }
    let mut f = bench_pipe(env, &config, num_envs, workers);
    g.bench_function(id("pipe"), |b| b.iter_custom(&mut f));
    g.finish();
}

fn main() {
    // The pools' workers are this bench program, re-executed.
    shmenv::worker::serve_if_worker(shmenv::worker::Registry::with_builtins);
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(PIPE_WORKER_FLAG) {
        pipe_worker(&args[2..]);
        return;
    }
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    for n in [32, 256, 1024] {
        compare(&mut c, "cartpole", "CartPole-v1", json!({}), n, 2, true);
    }
    compare(&mut c, "burn50us", "Burn-v0", json!({"step_us": 50}), 8, 2, true);
    compare(&mut c, "latency_oversubscribed", "Burn-v0", json!({}), 8, 8, false);
    compare_async(&mut c, "async_cartpole", "CartPole-v1", json!({}), 64, 2, 32);
    compare_async(
        &mut c,
        "async_burn_jitter",
        "Burn-v0",
        json!({"step_us": 50, "step_us_jitter": 45}),
        16,
        2,
        8,
    );
    c.final_summary();
}
