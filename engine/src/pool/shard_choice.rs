//! Whether the trainer steps a shard of the envs itself: the setting
//! ([`TrainerShardMode`]), the facts it is decided from ([`ShardQuestion`]) and the
//! decision with its reason ([`TrainerShardChoice`]). One function decides for every
//! front end: the builder, the CLI's tables and Python's `make_vec`.
//!
//! `Auto` (the default) takes the trainer's shard where it measured faster and costs no
//! safety the user asked for: sync mode, envs the trainer can build (from the worker
//! program's registry: built-in or registered Rust envs; in Python also hosted Gymnasium
//! envs), not a plugin's, the worker count left to the pool, at least two cores and no
//! restarts asked for. Measured on 2 cores it never lost to the workers alone, idle or
//! beside busy processes, cheap envs or costly (`docs/benchmarks.md`, "The trainer's own
//! shard"): a trainer that would wait through the batch steps a shard instead. The choice is made once, when the pool is built: envs
//! live in one process for their whole life, so a change of load re-decides how the
//! trainer waits (the wait tuner), not where the envs run.

use super::settings::default_num_workers;
use crate::error::BuildError;

/// Whether the trainer steps a shard of the envs ([`PoolBuilder::trainer_shard_mode`]).
///
/// [`PoolBuilder::trainer_shard_mode`]: super::PoolBuilder::trainer_shard_mode
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TrainerShardMode {
    /// Where it is safe and measured faster (see the module docs); the default.
    #[default]
    Auto,
    /// Always (sync mode; the envs must be ones the trainer can build).
    On,
    /// Never: every env runs in a worker process.
    Off,
}

impl TrainerShardMode {
    /// Every mode, in the order the CLI and docs list them.
    pub const ALL: [TrainerShardMode; 3] =
        [TrainerShardMode::Auto, TrainerShardMode::On, TrainerShardMode::Off];

    /// The mode's name: `auto`, `on` or `off`.
    pub fn name(self) -> &'static str {
        match self {
            TrainerShardMode::Auto => "auto",
            TrainerShardMode::On => "on",
            TrainerShardMode::Off => "off",
        }
    }

    /// The mode named `name` (`auto`, `on`, `off`).
    ///
    /// ```
    /// use shmenv_engine::pool::TrainerShardMode;
    /// assert_eq!(TrainerShardMode::from_name("on"), Some(TrainerShardMode::On));
    /// assert_eq!(TrainerShardMode::from_name("yes"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<TrainerShardMode> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// What the trainer-shard choice is made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardQuestion {
    /// The setting asked for.
    pub mode: TrainerShardMode,
    /// The trainer can build the envs: a registry of the program the workers run (or the
    /// caller's own shard builder) knows them.
    pub buildable: bool,
    /// The envs come from a plugin library (C/C++ code, whose crash would end the trainer).
    pub plugin: bool,
    /// Sync mode: every batch holds every env.
    pub sync: bool,
    /// Dead workers are restarted (a crash in the trainer's shard could not be).
    pub restarts: bool,
    /// The caller gave the worker count (else the pool chooses it).
    pub workers_given: bool,
    /// Envs in all.
    pub num_envs: usize,
    /// Cores this process may use.
    pub cores: usize,
}

/// What was decided, and why ([`crate::Pool::trainer_shard_choice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainerShardChoice {
    /// The trainer steps a shard.
    pub on: bool,
    /// Why, in a few words, for tables and profiles.
    pub reason: &'static str,
}

impl ShardQuestion {
    /// The decision. `On` is checked (sync mode, envs the trainer can build) and refused
    /// with a message naming the fix; `Auto` never refuses, it says why it chose.
    ///
    /// ```
    /// use shmenv_engine::pool::{ShardQuestion, TrainerShardMode};
    /// let q = ShardQuestion {
    ///     mode: TrainerShardMode::Auto, buildable: true, plugin: false, sync: true,
    ///     restarts: false, workers_given: false, num_envs: 32, cores: 2,
    /// };
    /// assert!(q.decide()?.on);
    /// assert!(!ShardQuestion { plugin: true, ..q }.decide()?.on);
    /// # Ok::<(), shmenv_engine::BuildError>(())
    /// ```
    pub fn decide(&self) -> Result<TrainerShardChoice, BuildError> {
        let choice = |on, reason| Ok(TrainerShardChoice { on, reason });
        match self.mode {
            TrainerShardMode::Off => choice(false, "off as asked"),
            TrainerShardMode::On => {
                if !self.buildable {
                    return Err(BuildError::InvalidArgument(
                        "trainer_shard is on, but the trainer has no way to build these envs: pass \
                         .trainer_shard(shmenv::worker::trainer_shard(registry)) or call \
                         shmenv::worker::serve_if_worker(registry) first, or leave trainer_shard auto"
                            .into(),
                    ));
                }
                choice(true, "on as asked")
            }
            TrainerShardMode::Auto => Ok(self.auto()),
        }
    }

    /// `Auto`'s rule, first reason first.
    fn auto(&self) -> TrainerShardChoice {
        let off = |reason| TrainerShardChoice { on: false, reason };
        if !self.sync {
            return off("async mode: the trainer's shard is for sync batches");
        }
        if self.plugin {
            return off("plugin envs keep their crash isolation in worker processes");
        }
        if !self.buildable {
            return off("the trainer cannot build these envs (not in the worker program's registry)");
        }
        if self.restarts {
            return off("restarts asked for: a crash in the trainer could not be restarted");
        }
        if self.workers_given {
            return off("the worker count was given");
        }
        if self.cores < 2 {
            return off("one core: the trainer and a worker share it either way");
        }
        if self.num_envs <= default_num_workers(self.num_envs, self.cores, true) {
            return off("too few envs for a shard each for the workers and the trainer");
        }
        TrainerShardChoice {
            on: true,
            reason: "sync mode, envs the trainer can build: it steps a shard instead of waiting",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto() -> ShardQuestion {
        ShardQuestion {
            mode: TrainerShardMode::Auto,
            buildable: true,
            plugin: false,
            sync: true,
            restarts: false,
            workers_given: false,
            num_envs: 32,
            cores: 2,
        }
    }

    #[test]
    fn auto_takes_the_shard_for_sync_native_envs_with_the_default_workers() {
        assert!(auto().decide().unwrap().on);
        assert!(ShardQuestion { num_envs: 2, ..auto() }.decide().unwrap().on);
        assert!(ShardQuestion { cores: 16, num_envs: 6144, ..auto() }.decide().unwrap().on);
    }

    #[test]
    fn auto_keeps_workers_alone_where_the_shard_costs_safety_or_cannot_help() {
        let cases = [
            (ShardQuestion { sync: false, ..auto() }, "async"),
            (ShardQuestion { plugin: true, ..auto() }, "plugin"),
            (ShardQuestion { buildable: false, ..auto() }, "cannot build"),
            (ShardQuestion { restarts: true, ..auto() }, "restarts"),
            (ShardQuestion { workers_given: true, ..auto() }, "worker count"),
            (ShardQuestion { cores: 1, ..auto() }, "one core"),
            (ShardQuestion { num_envs: 1, ..auto() }, "too few envs"),
        ];
        for (q, why) in cases {
            let c = q.decide().unwrap();
            assert!(!c.on && c.reason.contains(why), "{q:?}: {c:?}");
        }
    }

    #[test]
    fn on_and_off_are_obeyed_and_on_needs_a_way_to_build_the_envs() {
        let on = ShardQuestion { mode: TrainerShardMode::On, workers_given: true, restarts: true, ..auto() };
        assert!(on.decide().unwrap().on);
        let err = ShardQuestion { buildable: false, ..on }.decide().unwrap_err().to_string();
        assert!(err.contains("serve_if_worker"), "{err}");
        assert!(!ShardQuestion { mode: TrainerShardMode::Off, ..auto() }.decide().unwrap().on);
    }

    #[test]
    fn modes_round_trip_through_their_names() {
        for m in TrainerShardMode::ALL {
            assert_eq!(TrainerShardMode::from_name(m.name()), Some(m));
        }
    }
}
