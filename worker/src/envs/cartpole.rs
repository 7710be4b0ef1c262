//! `CartPole-v1`: Gymnasium 1.x `CartPoleEnv` (Barto, Sutton & Anderson), same constants,
//! dynamics (explicit Euler), thresholds, rewards and initial-state distribution (NumPy's
//! PCG64 stream for the same seed). The 500-step limit is the registry's time limit.

use crate::config::{Config, ConfigError};
use crate::env::{ActionIn, Env, ObsOut, Transition};
use crate::rng::Pcg64;
use shmenv_engine::spec::{DType, EnvSpec, Space};

const GRAVITY: f64 = 9.8;
const MASSCART: f64 = 1.0;
const MASSPOLE: f64 = 0.1;
const TOTAL_MASS: f64 = MASSPOLE + MASSCART;
const LENGTH: f64 = 0.5;
const POLEMASS_LENGTH: f64 = MASSPOLE * LENGTH;
const FORCE_MAG: f64 = 10.0;
const TAU: f64 = 0.02;
const THETA_THRESHOLD: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
const X_THRESHOLD: f64 = 2.4;

/// The cart-pole env.
#[derive(Debug)]
pub struct CartPole {
    state: [f64; 4],
    rng: Pcg64,
    steps_beyond_terminated: Option<u32>,
    sutton_barto_reward: bool,
}

impl CartPole {
    /// Builds from config: `{"sutton_barto_reward": bool}` (default false), as Gymnasium.
    pub fn from_config(config: &serde_json::Value) -> Result<Self, ConfigError> {
        let c = Config::new(config, &["sutton_barto_reward"])?;
        Ok(CartPole {
            state: [0.0; 4],
            rng: Pcg64::from_seed(0),
            steps_beyond_terminated: None,
            sutton_barto_reward: c.bool("sutton_barto_reward", false)?,
        })
    }
}

impl Env for CartPole {
    fn spec(&self) -> EnvSpec {
        let high =
            [X_THRESHOLD * 2.0, f64::INFINITY, THETA_THRESHOLD * 2.0, f64::INFINITY].map(|h| h as f32 as f64);
        EnvSpec::single(
            Space::Box {
                dtype: DType::F32,
                shape: vec![4],
                low: high.map(|h| -h).to_vec(),
                high: high.to_vec(),
            },
            Space::discrete(2),
        )
    }

    fn reset(&mut self, seed: Option<u64>) {
        if let Some(s) = seed {
            self.rng = Pcg64::from_seed(s);
        }
        for s in &mut self.state {
            *s = self.rng.uniform(-0.05, 0.05);
        }
        self.steps_beyond_terminated = None;
    }

    fn step(&mut self, action: ActionIn<'_>) -> Transition {
        let [x, x_dot, theta, theta_dot] = self.state;
        let force = if action.discrete() == 1 { FORCE_MAG } else { -FORCE_MAG };
        let (sintheta, costheta) = theta.sin_cos();
        let temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
        let thetaacc = (GRAVITY * sintheta - costheta * temp)
            / (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS));
        let xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
        self.state =
            [x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot, theta_dot + TAU * thetaacc];
        let [x, _, theta, _] = self.state;
        // Written as Gymnasium writes it (a NaN state does not terminate there either).
        #[allow(clippy::manual_range_contains)]
        let terminated =
            x < -X_THRESHOLD || x > X_THRESHOLD || theta < -THETA_THRESHOLD || theta > THETA_THRESHOLD;
        let sb = self.sutton_barto_reward;
        let reward = if !terminated {
            if sb {
                0.0
            } else {
                1.0
            }
        } else if self.steps_beyond_terminated.is_none() {
            self.steps_beyond_terminated = Some(0);
            if sb {
                -1.0
            } else {
                1.0
            }
        } else {
            self.steps_beyond_terminated = self.steps_beyond_terminated.map(|k| k + 1);
            if sb {
                -1.0
            } else {
                0.0
            }
        };
        Transition { reward, terminated, truncated: false }
    }

    fn observe(&self, obs: &mut ObsOut<'_, '_>) {
        let o = obs.array::<f32>(0);
        for (dst, &s) in o.iter_mut().zip(&self.state) {
            *dst = s as f32;
        }
    }
}
