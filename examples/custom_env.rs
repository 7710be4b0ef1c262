//! Host your own env in shmenv.
//!
//! Envs run in worker processes, which the pool starts by executing a program that knows
//! them. Here one binary plays both parts: the first line of `main`,
//! `shmenv::worker::serve_if_worker(registry)`, turns a copy started by the pool into a
//! worker hosting the envs of `registry()` (and never returns there); in the trainer it
//! returns at once, and pools then run this same program as their workers. (A separate
//! worker program is the other way: `host::run(&registry())` as its whole `main`, and
//! `.worker_program(path)` on the builder.)
//!
//! Run with `cargo run --release --example custom_env`.

use shmenv::worker::{ActionIn, Config, ConfigError, Env, EnvEntry, ObsOut, Registry, Transition};
use shmenv::{DType, EnvSpec, ObsArray, Pool, Space};
use std::process::ExitCode;

/// Walk on a `size` x `size` grid to the goal. Observations are a Dict of two arrays,
/// `position` and `goal`, each `[2]` of i32; actions are Discrete(4): up, down, left, right.
struct GridWalk {
    size: i32,
    pos: [i32; 2],
    goal: [i32; 2],
    rng: shmenv::worker::rng::Pcg64,
}

impl GridWalk {
    fn from_config(config: &serde_json::Value) -> Result<Self, ConfigError> {
        let c = Config::new(config, &["size"])?;
        let size = c.u64("size", 8)?;
        if !(2..=1000).contains(&size) {
            return Err(ConfigError(format!("config key \"size\" must be in 2..=1000, got {size}")));
        }
        Ok(GridWalk {
            size: size as i32,
            pos: [0; 2],
            goal: [0; 2],
            rng: shmenv::worker::rng::Pcg64::from_seed(0),
        })
    }
}

impl Env for GridWalk {
    fn spec(&self) -> EnvSpec {
        let cell = Space::boxed(DType::I32, &[2], 0.0, (self.size - 1) as f64);
        EnvSpec {
            observations: vec![
                ObsArray { name: "position".into(), space: cell.clone(), info: false },
                ObsArray { name: "goal".into(), space: cell, info: false },
            ],
            action: Space::discrete(4),
            max_episode_steps: None,
            single_key_dict: false,
        }
    }

    fn reset(&mut self, seed: Option<u64>) {
        if let Some(s) = seed {
            self.rng = shmenv::worker::rng::Pcg64::from_seed(s);
        }
        let mut cell = || (self.rng.next_f64() * self.size as f64) as i32;
        self.pos = [cell(), cell()];
        self.goal = [cell(), cell()];
    }

    fn step(&mut self, action: ActionIn<'_>) -> Transition {
        let (axis, delta) = match action.discrete() {
            0 => (1, -1),
            1 => (1, 1),
            2 => (0, -1),
            _ => (0, 1),
        };
        self.pos[axis] = (self.pos[axis] + delta).clamp(0, self.size - 1);
        let arrived = self.pos == self.goal;
        Transition { reward: if arrived { 1.0 } else { -0.01 }, terminated: arrived, truncated: false }
    }

    fn observe(&self, obs: &mut ObsOut<'_, '_>) {
        obs.array::<i32>(0).copy_from_slice(&self.pos);
        obs.array::<i32>(1).copy_from_slice(&self.goal);
    }
}

fn registry() -> Registry {
    let mut r = Registry::with_builtins();
    r.register(
        "GridWalk-v0",
        EnvEntry {
            description: "walk to the goal on a grid (example)",
            factory: |c| Ok(Box::new(GridWalk::from_config(c)?)),
            max_episode_steps: Some(100),
        },
    );
    r
}

fn main() -> ExitCode {
    shmenv::worker::serve_if_worker(registry);
    match train() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn train() -> Result<(), Box<dyn std::error::Error>> {
    let mut pool = Pool::builder("GridWalk-v0")
        .config(serde_json::json!({"size": 5}))
        .num_envs(8)
        .num_workers(2)
        .seed(1)
        .build()?;
    println!("GridWalk-v0: {}", pool.spec());
    pool.reset()?;
    let (mut episodes, mut total) = (0, 0.0);
    for t in 0..400 {
        // A poor policy: cycle through the four moves.
        let actions: Vec<i64> = (0..8).map(|i| ((t + i) % 4) as i64).collect();
        let batch = pool.step(&actions)?;
        let pos = batch.obs::<i32>("position")?;
        assert_eq!(pos.shape(), &[8, 2]);
        for ep in batch.episodes() {
            episodes += 1;
            total += ep.episode_return;
        }
    }
    println!("{episodes} episodes ended, mean return {:.3}", total / episodes.max(1) as f64);
    Ok(())
}
