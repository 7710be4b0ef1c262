//! `Pendulum-v1`: Gymnasium 1.x `PendulumEnv`, same dynamics, costs, clipping and initial
//! state distribution. Gymnasium mixes float32 (the action) into float64 math under
//! NumPy 2 promotion rules; the casts below reproduce that. The 200-step limit is the
//! registry's time limit.

use crate::config::{Config, ConfigError};
use crate::env::{ActionIn, Env, ObsOut, Transition};
use crate::rng::Pcg64;
use shmenv_engine::spec::{DType, EnvSpec, Space};
use std::f64::consts::PI;

const MAX_SPEED: f64 = 8.0;
const MAX_TORQUE: f32 = 2.0;
const DT: f64 = 0.05;
const M: f64 = 1.0;
const L: f64 = 1.0;

/// The inverted pendulum swing-up env.
#[derive(Debug)]
pub struct Pendulum {
    th: f64,
    thdot: f64,
    g: f64,
    rng: Pcg64,
}

fn angle_normalize(x: f64) -> f64 {
    (x + PI).rem_euclid(2.0 * PI) - PI
}

impl Pendulum {
    /// Builds from config: `{"g": number}` (default 10.0), as Gymnasium.
    pub fn from_config(config: &serde_json::Value) -> Result<Self, ConfigError> {
        let c = Config::new(config, &["g"])?;
        Ok(Pendulum { th: 0.0, thdot: 0.0, g: c.f64("g", 10.0)?, rng: Pcg64::from_seed(0) })
    }
}

impl Env for Pendulum {
    fn spec(&self) -> EnvSpec {
        let high = vec![1.0, 1.0, MAX_SPEED];
        EnvSpec::single(
            Space::Box { dtype: DType::F32, shape: vec![3], low: high.iter().map(|h| -h).collect(), high },
            Space::boxed(DType::F32, &[1], -(MAX_TORQUE as f64), MAX_TORQUE as f64),
        )
    }

    fn reset(&mut self, seed: Option<u64>) {
        if let Some(s) = seed {
            self.rng = Pcg64::from_seed(s);
        }
        self.th = self.rng.uniform(-PI, PI);
        self.thdot = self.rng.uniform(-1.0, 1.0);
    }

    fn step(&mut self, action: ActionIn<'_>) -> Transition {
        let u: f32 = action.as_slice::<f32>()[0].clamp(-MAX_TORQUE, MAX_TORQUE);
        let (th, thdot) = (self.th, self.thdot);
        let costs = angle_normalize(th).powi(2) + 0.1 * thdot.powi(2) + (0.001f32 * (u * u)) as f64;
        let newthdot =
            thdot + (3.0 * self.g / (2.0 * L) * th.sin() + (3.0f32 / (M * L * L) as f32 * u) as f64) * DT;
        let newthdot = newthdot.clamp(-MAX_SPEED, MAX_SPEED);
        self.th = th + newthdot * DT;
        self.thdot = newthdot;
        Transition { reward: -costs as f32, terminated: false, truncated: false }
    }

    fn observe(&self, obs: &mut ObsOut<'_, '_>) {
        let o = obs.array::<f32>(0);
        o[0] = self.th.cos() as f32;
        o[1] = self.th.sin() as f32;
        o[2] = self.thdot as f32;
    }
}
