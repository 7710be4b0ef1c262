//! `Burn-v0`: a synthetic benchmark env. Each step burns `step_us` microseconds of this
//! thread's CPU time (not wall time, so a descheduled worker does not get its work for
//! free) and writes an observation of `obs_shape` in `obs_dtype`, so the CPU-bound and the
//! bandwidth-bound regimes can both be measured. Episodes terminate after `episode_len`.

use crate::config::{Config, ConfigError};
use crate::env::{ActionIn, Env, ObsOut, Transition};
use crate::rng::Pcg64;
use shmenv_engine::spec::space::checked_value_bytes;
use shmenv_engine::spec::{DType, EnvSpec, Space};
use std::time::Duration;

/// The burn env.
#[derive(Debug)]
pub struct Burn {
    step_cost: Duration,
    jitter: Duration,
    rng: Pcg64,
    obs_shape: Vec<usize>,
    dtype: DType,
    episode_len: u64,
    t: u64,
    offset: u64,
    sink: u64,
    fault: Option<Fault>,
    seed: u64,
    steps_since_seed: u64,
}

/// The values of the `fault` key.
const FAULTS: [&str; 9] =
    ["none", "panic", "abort", "exit", "hang", "hang_observe", "oom", "oom_in_panic", "spawn_helper"];

/// The most `step_us` (and `step_us_jitter`) may be: a minute of CPU per step. A larger
/// value is refused: a step that long is no benchmark, and a step that never ends (e.g.
/// `u64::MAX` us) would leave a run waiting forever for its first batch.
pub const MAX_STEP_US: u64 = 60_000_000;

/// Bytes no machine can allocate (64 TiB): the allocation fails at once, without first
/// eating the machine's memory.
const ABSURD: usize = 1 << 46;

/// Shows as a message that cannot be allocated.
struct Unallocatable;

impl std::fmt::Display for Unallocatable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = String::new();
        text.reserve_exact(ABSURD);
        f.write_str(&text)
    }
}

#[derive(Debug, Clone, Copy)]
struct Fault {
    kind: &'static str,
    step: u64,
    seed: Option<u64>,
}

impl Burn {
    /// Builds from config keys `step_us` (default 0, at most [`MAX_STEP_US`]; with
    /// `step_us_jitter` (default 0, at most `step_us`) each step costs uniformly within
    /// `step_us` +- the jitter), `obs_shape` (default `[4]`),
    /// `obs_dtype` (`"f32"` or `"u8"`, default `"f32"`), `episode_len` (default 200), and
    /// for fault injection `fault` (`"panic"`, `"abort"`, `"exit"`, `"hang"`,
    /// `"hang_observe"`: hang while writing the observation of that step, `"oom"`: an
    /// allocation no machine can serve, `"oom_in_panic"`: a panic whose message cannot be
    /// allocated, `"spawn_helper"`: start a `sleep 1000` child process and go on) at step
    /// `fault_step` of an episode, in every env or only the one seeded `fault_seed`.
    pub fn from_config(config: &serde_json::Value) -> Result<Self, ConfigError> {
        let c = Config::new(
            config,
            &[
                "step_us",
                "step_us_jitter",
                "obs_shape",
                "obs_dtype",
                "episode_len",
                "fault",
                "fault_step",
                "fault_seed",
            ],
        )?;
        let fault = match c.choice("fault", "none", &FAULTS)? {
            "none" => None,
            kind => Some(Fault {
                kind,
                step: c.u64("fault_step", 1)?,
                seed: config.get("fault_seed").map(|_| c.u64("fault_seed", 0)).transpose()?,
            }),
        };
        let episode_len = c.u64("episode_len", 200)?;
        let step_us = c.u64("step_us", 0)?;
        if step_us > MAX_STEP_US {
            return Err(ConfigError(format!(
                "config key \"step_us\" is {step_us}, expected 0 to {MAX_STEP_US} (microseconds of CPU work per \
                 step: at most a minute)"
            )));
        }
        let jitter_us = c.u64("step_us_jitter", 0)?;
        if jitter_us > step_us {
            return Err(ConfigError(format!(
                "config key \"step_us_jitter\" ({jitter_us}) must not exceed \"step_us\" ({step_us})"
            )));
        }
        if episode_len == 0 {
            return Err(ConfigError("config key \"episode_len\" must be at least 1".into()));
        }
        let obs_shape = c.dims("obs_shape", &[4])?;
        let dtype = match c.choice("obs_dtype", "f32", &["f32", "u8"])? {
            "u8" => DType::U8,
            _ => DType::F32,
        };
        checked_value_bytes(&obs_shape, dtype)
            .map_err(|e| ConfigError(format!("config key \"obs_shape\": {e}")))?;
        Ok(Burn {
            step_cost: Duration::from_micros(step_us),
            jitter: Duration::from_micros(jitter_us),
            rng: Pcg64::from_seed(0),
            obs_shape,
            dtype,
            episode_len,
            t: 0,
            offset: 0,
            sink: 0,
            fault,
            seed: 0,
            steps_since_seed: 0,
        })
    }

    fn burn(&mut self) {
        // Uniform in step_us +- jitter, drawn from the env's own stream (deterministic).
        let cost = if self.jitter.is_zero() {
            self.step_cost
        } else {
            let j = self.jitter.as_nanos() as f64;
            let delta = self.rng.uniform(-j, j);
            Duration::from_nanos((self.step_cost.as_nanos() as f64 + delta).max(0.0) as u64)
        };
        if cost.is_zero() {
            return;
        }
        let start = thread_cpu_time();
        let mut x = self.sink | 1;
        loop {
            for _ in 0..64 {
                // xorshift: cheap work the optimizer cannot remove (the result is kept).
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            if thread_cpu_time().saturating_sub(start) >= cost {
                break;
            }
        }
        self.sink = x;
    }

    /// Whether fault `f` fires at this step of this env.
    fn hits(&self, f: Fault) -> bool {
        self.steps_since_seed == f.step && f.seed.is_none_or(|s| s == self.seed)
    }
}

fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_THREAD_CPUTIME_ID is always supported.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Env for Burn {
    fn spec(&self) -> EnvSpec {
        let high = if self.dtype == DType::U8 { 255.0 } else { f64::INFINITY };
        let low = if self.dtype == DType::U8 { 0.0 } else { f64::NEG_INFINITY };
        EnvSpec::single(Space::boxed(self.dtype, &self.obs_shape, low, high), Space::discrete(2))
    }

    fn reset(&mut self, seed: Option<u64>) {
        if let Some(s) = seed {
            self.offset = s;
            self.seed = s;
            self.rng = Pcg64::from_seed(s);
        }
        self.t = 0;
    }

    fn step(&mut self, action: ActionIn<'_>) -> Transition {
        self.burn();
        self.steps_since_seed += 1;
        if let Some(f) = self.fault.filter(|f| f.kind != "hang_observe") {
            if self.hits(f) {
                if f.kind != "panic" {
                    // What a crashing env typically prints last; the trainer's error shows it.
                    eprintln!("Burn-v0: fault {} injected at step {} (seed {})", f.kind, f.step, self.seed);
                }
                match f.kind {
                    "panic" => panic!("Burn-v0 fault injected at step {} (seed {})", f.step, self.seed),
                    "abort" => std::process::abort(),
                    "oom" => {
                        let mut v: Vec<u8> = Vec::new();
                        v.reserve_exact(ABSURD);
                        self.sink ^= v.capacity() as u64;
                    }
                    "oom_in_panic" => panic!("Burn-v0 fault: {Unallocatable}"),
                    "spawn_helper" => {
                        // A helper process the env leaves running (as a simulator server
                        // would): closing the pool must end it too.
                        let _ = std::process::Command::new("sleep").arg("1000").spawn();
                    }
                    // A hung env (a deadlock, an infinite loop): never returns.
                    "hang" => loop {
                        std::thread::sleep(std::time::Duration::from_secs(3600));
                    },
                    _ => std::process::exit(17),
                }
            }
        }
        self.t += 1 + action.discrete() as u64;
        Transition { reward: 1.0, terminated: self.t >= self.episode_len, truncated: false }
    }

    fn observe(&self, obs: &mut ObsOut<'_, '_>) {
        if let Some(f) = self.fault.filter(|f| f.kind == "hang_observe" && self.hits(*f)) {
            eprintln!("Burn-v0: fault {} injected at step {} (seed {})", f.kind, f.step, self.seed);
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        let base = self.t.wrapping_add(self.offset);
        match self.dtype {
            DType::U8 => {
                for (j, o) in obs.array::<u8>(0).iter_mut().enumerate() {
                    *o = (base as u8).wrapping_add(j as u8);
                }
            }
            _ => {
                for (j, o) in obs.array::<f32>(0).iter_mut().enumerate() {
                    *o = (base % 1024) as f32 + j as f32;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_step_us_beyond_a_minute_is_refused_with_the_value_and_range() {
        for step_us in [MAX_STEP_US + 1, u64::MAX] {
            let e = Burn::from_config(&json!({ "step_us": step_us })).unwrap_err();
            let expected = format!("config key \"step_us\" is {step_us}, expected 0 to 60000000");
            assert!(e.0.starts_with(&expected), "{e}");
        }
        assert!(Burn::from_config(&json!({ "step_us": MAX_STEP_US, "step_us_jitter": MAX_STEP_US })).is_ok());
    }
}
