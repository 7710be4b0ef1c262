//! `shmenv bench --contend N` / `--trainer-threads T`: every wait strategy and affinity,
//! idle and under load, in interleaved rounds of one run.
//!
//! The load is what a training machine adds: `N` busy processes beside the pool (children
//! of this process that spin, stopped with SIGSTOP during the idle rounds and resumed for
//! the loaded ones), and/or a trainer that does multi-threaded work between batches (`T`
//! threads multiplying matrices, as a small policy update would). Each setting is a pool of
//! its own, built once; every round steps each of them (and the serial loop) for a slice,
//! idle and then loaded, in an order that turns by one each round, so that the machine's
//! noise hits all of them alike. The table gives each one's median round. The default
//! (adaptive) setting carries its choice from one slice to the next, so each slice starts
//! with it finding out that the load changed: the alternation is harder on it than a
//! training run, whose load changes less often than every second.

use crate::args::{Affinity, Wait};
use crate::limits::{self, ThreadError};
use crate::stepping::{contenders, fmt_rate, load_average, Baseline, Progress, Stepper, Tally};
use crate::Error;
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// The settings compared: the default first.
pub const SETTINGS: [(Wait, Affinity); 6] = [
    (Wait::Auto, Affinity::Auto),
    (Wait::Auto, Affinity::None),
    (Wait::Yield, Affinity::Auto),
    (Wait::Yield, Affinity::None),
    (Wait::Block, Affinity::Auto),
    (Wait::Block, Affinity::None),
];

/// The load of the loaded rounds.
pub struct Load {
    busy: Vec<Child>,
    trainer: Option<Arc<TrainerLoad>>,
}

impl Load {
    /// Starts `busy` spinning processes (stopped until [`Load::set`]) and, with
    /// `trainer_threads`, the threads of the trainer's work.
    pub fn start(busy: usize, trainer_threads: Option<usize>) -> Result<Load, Error> {
        let exe = std::env::current_exe()?;
        let parent = std::process::id().to_string();
        let mut load = Load {
            busy: Vec::new(),
            trainer: trainer_threads.map(TrainerLoad::new).transpose()?.map(Arc::new),
        };
        for _ in 0..busy {
            let child = Command::new(&exe)
                .args(["busy", "--parent", &parent])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start a busy process ({}): {e}", exe.display()))?;
            load.busy.push(child);
        }
        load.set(false);
        Ok(load)
    }

    /// Runs (`true`) or stops the busy processes.
    pub fn set(&self, on: bool) {
        let signal = if on { libc::SIGCONT } else { libc::SIGSTOP };
        for child in &self.busy {
            // SAFETY: kill has no memory effects; the pid is our own unreaped child (reaped
            // only in `drop`), so it cannot name another process.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        }
    }

    /// `stepper`, doing the trainer's work after each batch.
    fn wrap<'a>(&self, stepper: &'a mut dyn Stepper) -> Loaded<'a> {
        Loaded { inner: stepper, trainer: self.trainer.clone() }
    }

    /// What the loaded rounds add, in words.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.busy.is_empty() {
            parts.push(format!("{} busy processes", self.busy.len()));
        }
        if let Some(t) = &self.trainer {
            parts.push(format!(
                "a trainer doing {MATMULS} {DIM}x{DIM} f32 matmuls on {} threads per batch",
                t.threads
            ));
        }
        parts.join(" and ")
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for child in &mut self.busy {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `shmenv busy --parent PID`: spins until its parent is gone (a process of `--contend`).
pub fn busy(parent: u32) {
    let mut x = 0u64;
    loop {
        for i in 0..50_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        if std::os::unix::process::parent_id() != parent {
            return;
        }
    }
}

/// Matrix side of the trainer's work.
const DIM: usize = 96;
/// Matrix products per batch.
const MATMULS: usize = 4;

/// A trainer's multi-threaded work between batches: `threads` threads (this one and
/// `threads - 1` helpers waiting on a barrier, as a BLAS pool's do) each multiply their
/// share of the rows of [`MATMULS`] `DIM x DIM` matrix products.
struct TrainerLoad {
    threads: usize,
    start: Arc<Barrier>,
    done: Arc<Barrier>,
}

impl TrainerLoad {
    fn new(threads: usize) -> Result<TrainerLoad, ThreadError> {
        let threads = threads.max(1);
        let (start, done) = (Arc::new(Barrier::new(threads)), Arc::new(Barrier::new(threads)));
        for t in 1..threads {
            let (start, done) = (start.clone(), done.clone());
            let what = format!("trainer-load helper thread {t} of {}", threads - 1);
            limits::spawn_thread("shmenv-trainer-load", &what, move || loop {
                start.wait();
                matmul_rows(t, threads);
                done.wait();
            })?;
        }
        Ok(TrainerLoad { threads, start, done })
    }

    fn work(&self) {
        self.start.wait();
        matmul_rows(0, self.threads);
        self.done.wait();
    }
}

/// Thread `t` of `n`'s rows of the products.
fn matmul_rows(t: usize, n: usize) {
    let a: Vec<f32> = (0..DIM * DIM).map(|i| (i % 7) as f32 * 0.25).collect();
    let mut c = vec![0f32; DIM * DIM];
    for _ in 0..MATMULS {
        for i in (t..DIM).step_by(n) {
            for k in 0..DIM {
                let aik = a[i * DIM + k];
                for j in 0..DIM {
                    c[i * DIM + j] += aik * a[k * DIM + j];
                }
            }
        }
    }
    std::hint::black_box(&c);
}

struct Loaded<'a> {
    inner: &'a mut dyn Stepper,
    trainer: Option<Arc<TrainerLoad>>,
}

impl Stepper for Loaded<'_> {
    fn step_batch(&mut self, k: usize) -> Result<u64, Error> {
        let steps = self.inner.step_batch(k)?;
        if let Some(t) = &self.trainer {
            t.work();
        }
        Ok(steps)
    }
}

/// One contestant: its name and its rounds' rates, idle and loaded.
struct Contestant {
    wait: Option<Wait>,
    affinity: Option<Affinity>,
    stepper: Box<dyn Stepper>,
    rates: [Vec<f64>; 2],
}

/// Runs the matrix: `build(wait, affinity)` builds each setting's pool, `baseline` the
/// in-process loop; prints the table (or JSON). `seconds` per contestant and condition.
pub fn run(
    mut build: impl FnMut(Wait, Affinity) -> Result<shmenv::Pool, Error>,
    seed: u64,
    mut baseline: Option<Baseline<'_>>,
    load: &Load,
    seconds: f64,
    json: bool,
) -> Result<(), Error> {
    let mut all = Vec::new();
    let mut serial = None;
    for (wait, affinity) in SETTINGS {
        let (stepper, s) = contenders("bench", build(wait, affinity)?, seed, baseline.take())?;
        serial = serial.or(s);
        all.push(Contestant {
            wait: Some(wait),
            affinity: Some(affinity),
            stepper,
            rates: Default::default(),
        });
    }
    if let Some(stepper) = serial {
        all.push(Contestant { wait: None, affinity: None, stepper, rates: Default::default() });
    }
    let rounds = 7;
    let slice = Duration::from_secs_f64(seconds / rounds as f64);
    let load_before = load_average();
    for round in 0..rounds {
        for (condition, on) in [false, true].into_iter().enumerate() {
            load.set(on);
            // The order turns by one each round: what ran just before a contestant
            // matters on a contended machine (the scheduler remembers who ran).
            let len = all.len();
            all.rotate_left(round % len.max(1));
            for c in &mut all {
                if !json {
                    progress_line(round, rounds, on);
                }
                let mut loaded =
                    if on { load.wrap(c.stepper.as_mut()) } else { Load::idle(c.stepper.as_mut()) };
                loaded.step_batch(0)?; // untimed: the setting's first batch after the others ran
                let mut tally = Tally::default();
                tally.run(&mut loaded, slice, &mut Progress::new("", true))?;
                c.rates[condition].push(tally.rate());
            }
            all.rotate_right(round % len.max(1));
        }
    }
    load.set(false);
    report(&all, load, seconds, rounds, (load_before, load_average()), json);
    Ok(())
}

impl Load {
    fn idle(stepper: &mut dyn Stepper) -> Loaded<'_> {
        Loaded { inner: stepper, trainer: None }
    }
}

fn progress_line(round: usize, rounds: usize, on: bool) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprint!("\rround {}/{rounds}, {}   ", round + 1, if on { "loaded" } else { "idle" });
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report(all: &[Contestant], load: &Load, seconds: f64, rounds: usize, loads: (f64, f64), json: bool) {
    let medians: Vec<[f64; 2]> = all.iter().map(|c| [median(&c.rates[0]), median(&c.rates[1])]).collect();
    let pools = all.iter().filter(|c| c.wait.is_some()).count();
    let best = |k: usize| medians[..pools].iter().map(|m| m[k]).fold(0.0, f64::max);
    let serial = all.iter().position(|c| c.wait.is_none()).map(|i| medians[i]);
    let name = |c: &Contestant| match (c.wait, c.affinity) {
        (Some(w), Some(a)) => (w.strategy().name(), a.name()),
        _ => ("serial", "loop"),
    };
    if json {
        let rows: Vec<_> = all
            .iter()
            .zip(&medians)
            .map(|(c, m)| {
                let (wait, affinity) = name(c);
                json!({"wait": wait, "affinity": affinity, "idle_steps_per_sec": m[0], "loaded_steps_per_sec": m[1],
                       "idle_of_best": c.wait.map(|_| m[0] / best(0)), "loaded_of_best": c.wait.map(|_| m[1] / best(1))})
            })
            .collect();
        let out = json!({"load": load.describe(), "seconds": seconds, "rounds": rounds, "rows": rows,
                         "load_average_before": loads.0, "load_average_after": loads.1});
        println!("{out}");
        return;
    }
    progress_clear();
    println!("loaded: {}; medians of {rounds} interleaved rounds", load.describe());
    println!(
        "  wait   affinity        idle steps/s  of best  vs serial    loaded steps/s  of best  vs serial"
    );
    for (c, m) in all.iter().zip(&medians) {
        let (wait, affinity) = name(c);
        let of_best = |k: usize| c.wait.map_or(String::new(), |_| format!("{:.2}x", m[k] / best(k)));
        let vs = |k: usize| serial.map_or(String::new(), |s| format!("{:.2}x", m[k] / s[k]));
        let label =
            if c.wait == Some(Wait::Auto) && c.affinity == Some(Affinity::Auto) { " (default)" } else { "" };
        println!(
            "  {wait:<6} {:<15} {:>12} {:>8} {:>10} {:>17} {:>8} {:>10}",
            format!("{affinity}{label}"),
            fmt_rate(m[0]),
            of_best(0),
            vs(0),
            fmt_rate(m[1]),
            of_best(1),
            vs(1)
        );
    }
    println!(
        "  load average {:.2} before, {:.2} after (it counts the run's own busy processes)",
        loads.0, loads.1
    );
}

fn progress_clear() {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprint!("\r{:40}\r", "");
    }
}
