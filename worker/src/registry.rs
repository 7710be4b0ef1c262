//! The env registry: ids compiled into a worker program, each with a constructor that
//! builds the env from its JSON config inside the worker.

use crate::config::ConfigError;
use crate::env::Env;
use crate::envs::{burn::Burn, cartpole::CartPole, pendulum::Pendulum};
use serde_json::Value;
use std::collections::BTreeMap;

/// Builds an env from its config.
pub type EnvFactory = fn(&Value) -> Result<Box<dyn Env>, ConfigError>;

/// One registered env.
#[derive(Clone)]
pub struct EnvEntry {
    /// One line about the env.
    pub description: &'static str,
    /// Its constructor.
    pub factory: EnvFactory,
    /// Time limit applied by the host unless the pool overrides it.
    pub max_episode_steps: Option<u32>,
}

/// Why an env could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    /// The id is not registered.
    #[error("unknown env id {id:?}; registered ids: {}", registered.join(", "))]
    UnknownEnv {
        /// The id asked for.
        id: String,
        /// The registered ids.
        registered: Vec<String>,
    },
    /// The env refused its config.
    #[error("bad config for {id}: {source}")]
    BadConfig {
        /// The env id.
        id: String,
        /// The env's message.
        source: ConfigError,
    },
    /// The env's constructor failed for another reason (a plugin's `create` error).
    #[error("cannot create {id}: {message}")]
    Failed {
        /// The env id.
        id: String,
        /// What went wrong.
        message: String,
    },
}

/// Env ids known to a worker program.
#[derive(Clone, Default)]
pub struct Registry {
    entries: BTreeMap<String, EnvEntry>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// A registry with every built-in env (`CartPole-v1`, `Pendulum-v1`, `Burn-v0`).
    pub fn with_builtins() -> Self {
        let mut r = Registry::new();
        r.register(
            "CartPole-v1",
            EnvEntry {
                description: "Gymnasium's cart-pole balancing task (500-step limit)",
                factory: |c| Ok(Box::new(CartPole::from_config(c)?)),
                max_episode_steps: Some(500),
            },
        );
        r.register(
            "Pendulum-v1",
            EnvEntry {
                description: "Gymnasium's pendulum swing-up, continuous torque (200-step limit)",
                factory: |c| Ok(Box::new(Pendulum::from_config(c)?)),
                max_episode_steps: Some(200),
            },
        );
        r.register(
            "Burn-v0",
            EnvEntry {
                description: "synthetic benchmark env: step_us of CPU work, obs_shape/obs_dtype of output",
                factory: |c| Ok(Box::new(Burn::from_config(c)?)),
                max_episode_steps: None,
            },
        );
        r
    }

    /// Registers `id` (replacing any earlier entry with that id).
    pub fn register(&mut self, id: &str, entry: EnvEntry) -> &mut Self {
        self.entries.insert(id.to_string(), entry);
        self
    }

    /// The registered ids, sorted.
    pub fn ids(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    /// The entry for `id`.
    pub fn get(&self, id: &str) -> Option<&EnvEntry> {
        self.entries.get(id)
    }

    /// Builds env `id` from `config`.
    pub fn make(&self, id: &str, config: &Value) -> Result<Box<dyn Env>, MakeError> {
        let entry = self
            .entries
            .get(id)
            .ok_or_else(|| MakeError::UnknownEnv { id: id.into(), registered: self.ids() })?;
        (entry.factory)(config).map_err(|source| MakeError::BadConfig { id: id.into(), source })
    }
}
