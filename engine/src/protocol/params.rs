//! What the trainer and the workers tell each other as JSON: the pool parameters (params
//! area) and a worker's report (report areas).

use crate::sync::WaitStrategy;
use serde::{Deserialize, Serialize};
use std::ops::Range;

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

impl AutoReset {
    /// Every mode, in declaration order.
    pub const ALL: [AutoReset; 3] = [AutoReset::NextStep, AutoReset::SameStep, AutoReset::Disabled];

    /// The mode's name as Gymnasium's `AutoresetMode` values spell it (`"NextStep"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            AutoReset::NextStep => "NextStep",
            AutoReset::SameStep => "SameStep",
            AutoReset::Disabled => "Disabled",
        }
    }
}

/// An auto-reset mode name that is none of [`AutoReset::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown autoreset mode {0:?}: use \"next_step\", \"same_step\" or \"disabled\" (or NextStep, SameStep, Disabled)")]
pub struct UnknownAutoReset(pub String);

impl std::str::FromStr for AutoReset {
    type Err = UnknownAutoReset;

    /// Parses `next_step`, `NextStep`, `nextstep` (case and underscores ignored), ...
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.replace('_', "").to_ascii_lowercase();
        AutoReset::ALL
            .into_iter()
            .find(|m| m.name().to_ascii_lowercase() == key)
            .ok_or_else(|| UnknownAutoReset(s.to_owned()))
    }
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
    /// The cores the trainer may use when it built the pool: what every process's wait
    /// policy counts (a worker pinned to one core would see one). 0: unknown, each process
    /// counts its own.
    #[serde(default)]
    pub cores: usize,
    /// Whether the trainer steps a shard itself ([`crate::PoolBuilder::trainer_shard`]):
    /// the envs are then split into `num_workers + 1` shards, the trainer's first.
    #[serde(default)]
    pub trainer_shard: bool,
}

impl PoolParams {
    /// The cores the pool's wait policies count: [`PoolParams::cores`], or this process's
    /// when unknown.
    pub fn policy_cores(&self) -> usize {
        if self.cores == 0 {
            crate::sync::available_cores()
        } else {
            self.cores
        }
    }

    /// The envs worker `w` hosts: a contiguous shard, sizes differing by at most one
    /// (counting the trainer's shard, when it has one).
    pub fn shard(&self, w: usize) -> Range<usize> {
        let own = usize::from(self.trainer_shard);
        super::shard(w + own, self.num_envs, self.num_workers + own)
    }

    /// The envs the trainer steps itself: the first shard, or none.
    pub fn trainer_envs(&self) -> Range<usize> {
        match self.trainer_shard {
            true => super::shard(0, self.num_envs, self.num_workers + 1),
            false => 0..0,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::AutoReset;

    #[test]
    fn autoreset_names_parse_in_every_spelling_and_unknown_ones_say_what_to_use() {
        for m in AutoReset::ALL {
            assert_eq!(m.name().parse::<AutoReset>(), Ok(m));
        }
        assert_eq!("same_step".parse::<AutoReset>(), Ok(AutoReset::SameStep));
        assert_eq!("DISABLED".parse::<AutoReset>(), Ok(AutoReset::Disabled));
        let err = "sometimes".parse::<AutoReset>().unwrap_err().to_string();
        assert!(err.contains("\"sometimes\"") && err.contains("next_step"), "{err}");
    }
}
