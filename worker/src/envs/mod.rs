//! The built-in envs.

pub mod burn;
pub mod cartpole;
pub mod pendulum;

use crate::registry::{EnvEntry, Registry};

/// Registers `CartPole-v1`, `Pendulum-v1` and `Burn-v0`.
pub fn register_builtins(r: &mut Registry) {
    r.register(
        "CartPole-v1",
        EnvEntry {
            description: "Gymnasium's cart-pole balancing task (500-step limit)",
            factory: |c| Ok(Box::new(cartpole::CartPole::from_config(c)?)),
            max_episode_steps: Some(500),
        },
    );
    r.register(
        "Pendulum-v1",
        EnvEntry {
            description: "Gymnasium's pendulum swing-up, continuous torque (200-step limit)",
            factory: |c| Ok(Box::new(pendulum::Pendulum::from_config(c)?)),
            max_episode_steps: Some(200),
        },
    );
    r.register(
        "Burn-v0",
        EnvEntry {
            description: "synthetic benchmark env: step_us of CPU work, obs_shape/obs_dtype of output",
            factory: |c| Ok(Box::new(burn::Burn::from_config(c)?)),
            max_episode_steps: None,
        },
    );
}
