//! What `bench` and `tune` time: a pool (sync or async) or the same envs stepped in this
//! process, fed the same pre-drawn random actions.

use crate::{memory, Error};
use shmenv::worker::Registry;
use shmenv::{Element, Pool, Space};
use shmenv_engine::protocol::PoolParams;
use shmenv_worker::{EnvShard, LocalRows};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Random action batches, pre-drawn so the pool and the baseline get the same ones and
/// drawing them is not timed: [`memory::TAPE_BATCHES`] batches, repeating after that
/// (their memory is checked with the pool's before the run, see [`memory`]).
struct ActionTape<T> {
    batches: Vec<Vec<T>>,
}

impl<T: Element> ActionTape<T> {
    fn new(space: &Space, num_envs: usize, seed: u64) -> Self {
        let mut rng = shmenv::worker::rng::Pcg64::from_seed(seed ^ 0x5eed);
        let per_env = space.num_elements();
        let mut value = |i: usize| {
            let u = rng.next_f64();
            let v = match space {
                Space::Discrete { n, start } => (*start + (u * *n as f64) as i64) as f64,
                Space::MultiDiscrete { .. } => {
                    let (lo, hi) = space.multi_discrete_range(i % per_env).expect("multi-discrete");
                    lo as f64 + (u * (hi - lo) as f64).floor()
                }
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
        };
        let batches =
            (0..memory::TAPE_BATCHES).map(|_| (0..num_envs * per_env).map(&mut value).collect()).collect();
        ActionTape { batches }
    }

    fn batch(&self, k: usize) -> &[T] {
        &self.batches[k % self.batches.len()]
    }
}

/// A live steps/s line on stderr (only when it is a terminal).
pub struct Progress {
    live: bool,
    label: String,
    last: Instant,
}

impl Progress {
    /// A progress line labelled `label` (what runs now); none when `quiet`.
    pub fn new(label: impl Into<String>, quiet: bool) -> Self {
        Progress {
            live: !quiet && std::io::stderr().is_terminal(),
            label: label.into(),
            last: Instant::now(),
        }
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

    /// Clears the line.
    pub fn done(&self) {
        if self.live {
            eprint!("\r{:70}\r", "");
        }
    }
}

/// Something that steps a batch of envs.
pub trait Stepper {
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
        self.pool.step(self.tape.batch(k))?;
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
        let tape = self.tape.batch(k);
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
        let actions = shmenv_engine::spec::as_bytes(self.tape.batch(k));
        self.shard
            .step_all(actions, &mut self.rows.rows())
            .map_err(|(e, m)| format!("env {e} panicked: {m}"))?;
        Ok(self.shard.range().len() as u64)
    }
}

/// A pool's stepper and the baseline's, if any.
pub type Steppers = (Box<dyn Stepper>, Option<Box<dyn Stepper>>);

/// The in-process baseline of a run: the registry and the pool's parameters.
pub struct Baseline<'a> {
    /// Where the envs come from.
    pub registry: &'a Registry,
    /// The envs to make (all of them, in one shard).
    pub params: PoolParams,
}

/// The steppers of one run of `command`: `pool` (reset, with actions drawn from `seed`)
/// and, with a baseline, the same envs and actions in this process. Refused (the pool
/// dropped) when the action tapes and the baseline's envs, with the pool's spec, need more
/// memory than is left.
pub fn contenders(
    command: &'static str,
    pool: Pool,
    seed: u64,
    baseline: Option<Baseline<'_>>,
) -> Result<Steppers, Error> {
    memory::Plan {
        command,
        num_envs: pool.num_envs(),
        batch_size: pool.batch_size(),
        spec: Some(pool.spec()),
        pool: None,
        pools: 1,
        baseline: baseline.as_ref().map(|b| &b.params),
    }
    .check()?;
    // The one place that maps the action dtype to its Rust type.
    shmenv_engine::with_element!(pool.spec().action.dtype(), T => contenders_typed::<T>(pool, seed, baseline))
}

fn contenders_typed<T: Element>(
    mut pool: Pool,
    seed: u64,
    baseline: Option<Baseline<'_>>,
) -> Result<Steppers, Error> {
    let action = pool.spec().action.clone();
    let n = pool.num_envs();
    let serial: Option<Box<dyn Stepper>> = match baseline {
        Some(Baseline { registry, params }) => {
            let mut shard = EnvShard::new(registry, &params, 0..n)?;
            let mut rows = LocalRows::new(shard.spec(), n, false);
            shard
                .reset_all(Some(seed), &mut rows.rows())
                .map_err(|(e, m)| format!("env {e} panicked: {m}"))?;
            Some(Box::new(SerialStepper { shard, rows, tape: ActionTape::<T>::new(&action, n, seed) }))
        }
        None => None,
    };
    let tape = ActionTape::<T>::new(&action, n, seed);
    let contender: Box<dyn Stepper> = if pool.is_async() {
        let ids = pool.reset()?.env_ids().iter().map(|&e| e as usize).collect();
        Box::new(AsyncStepper { pool, tape, per_env: action.num_elements(), ids, actions: Vec::new() })
    } else {
        pool.reset()?;
        Box::new(PoolStepper { pool, tape })
    };
    Ok((contender, serial))
}

/// Steps and elapsed time of one contender.
#[derive(Default)]
pub struct Tally {
    /// Env steps taken.
    pub steps: u64,
    /// Seconds spent taking them.
    pub seconds: f64,
    /// Batches stepped.
    pub batches: usize,
}

impl Tally {
    /// Env steps per second.
    pub fn rate(&self) -> f64 {
        self.steps as f64 / self.seconds
    }

    /// Steps for `slice`, adding to the tally.
    pub fn run(
        &mut self,
        s: &mut dyn Stepper,
        slice: Duration,
        progress: &mut Progress,
    ) -> Result<(), Error> {
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

/// A rate as `1.23M`, `45.6k` or `789`.
pub fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}

/// Warns on stderr when the 1-minute load average exceeds the cores; `when` says at which
/// moment ("at the start", "at the end"). Other processes then take CPU time from the pool
/// and the loop alike, and the figures come out lower and noisier than on an idle machine.
pub fn warn_if_loaded(when: &str) {
    let (load, cores) = (load_average(), shmenv_engine::sync::available_cores());
    if load > cores as f64 {
        eprintln!(
            "warning: the load average is {load:.2} {when}, above the {cores} cores: other processes compete \
             for the CPUs, so these figures come out lower and noisier than on an idle machine; rerun when \
             `uptime` shows less load, or see how settings hold up with --contend"
        );
    }
}

/// The machine's 1-minute load average (NaN when unknown).
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|f| f.parse().ok()))
        .unwrap_or(f64::NAN)
}
