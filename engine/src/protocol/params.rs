//! What the trainer and the workers tell each other as JSON: the pool parameters (params
//! area) and a worker's report (report areas).

use crate::sync::WaitStrategy;
use serde::{Deserialize, Serialize};

/// What the envs do when an episode ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AutoReset {
    /// As Gymnasium 1.x: the step after the end returns the reset observation, with reward
    /// 0 and both flags false; the action of that step is ignored.
    #[default]
    NextStep,
    /// As SB3: the ending step returns the reset observation; the final observation of the
    /// ended episode is in the batch's `final_obs` arrays.
    SameStep,
    /// No automatic reset; stepping an ended env is an error until `reset`.
    Disabled,
}

/// Parameters the trainer writes into the params area as JSON, read by every worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolParams {
    /// Registered env id.
    pub env_id: String,
    /// Env config (a JSON object).
    pub config: serde_json::Value,
    /// Number of envs.
    pub num_envs: usize,
    /// Number of workers.
    pub num_workers: usize,
    /// Auto-reset mode.
    pub autoreset: AutoReset,
    /// Episode limit overriding the env's own.
    pub max_episode_steps: Option<u32>,
    /// How the workers wait (in the JSON by its name: `"auto"`, `"spin"`, ...).
    pub wait: WaitStrategy,
    /// Results per batch; `num_envs` is sync mode, fewer is async mode.
    pub batch_size: usize,
    /// Blocks in the async ring (at least 2).
    pub ring_depth: usize,
    /// Whether workers record stats (the stats area).
    pub stats: bool,
    /// Whether workers record trace spans (the trace rings).
    #[serde(default)]
    pub trace: bool,
    /// Whether dead workers are restarted (async mode: workers then keep claim records and
    /// stop at the pause gate, so the trainer can find a dead worker's rows).
    #[serde(default)]
    pub restart: bool,
    /// Absolute path of a plugin library (the C ABI of `shmenv_env.h`) that every worker
    /// loads for itself and takes the env from, instead of its registry.
    #[serde(default)]
    pub plugin: Option<String>,
}

/// What a worker writes in its report area.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerReport {
    /// Its envs' spec (canonical JSON of [`crate::spec::EnvSpec`]).
    Spec(serde_json::Value),
    /// The env id is not registered in this worker program.
    UnknownEnv {
        /// The id asked for.
        id: String,
        /// Ids this worker program knows.
        registered: Vec<String>,
    },
    /// The env rejected its config.
    BadConfig {
        /// The env id.
        id: String,
        /// The env's message (names the key).
        message: String,
    },
    /// An env panicked in `reset`/`step`.
    EnvPanicked {
        /// Which env.
        env_id: usize,
        /// The panic message.
        message: String,
    },
    /// Anything else (protocol violation, region mismatch).
    Failed {
        /// What went wrong.
        message: String,
    },
}
