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
//! shard"): a trainer that would wait through the batch steps a shard instead.
//!
//! Where a whole batch costs less than [`HANDOFF_COST`] (measured at build on a throwaway
//! shard: [`TrainerShard::probe_batch_time`](super::TrainerShard::probe_batch_time)),
//! handing part of it to a worker costs more than stepping it: the trainer then steps
//! every env and the pool has no worker process.
//!
//! The choice is made once, when the pool is built: envs live in one process for their
//! whole life, so a change of load re-decides how the trainer waits (the wait tuner), not
//! where the envs run. A batch too cheap to hand off idle is too cheap under load too
//! (handoffs only get dearer), and the shard measured at least as fast as the workers alone
//! at every load tried.

use super::settings::default_num_workers;
use crate::error::BuildError;
use std::time::Duration;

/// Below this cost of a whole batch stepped in one process, `Auto` has the trainer step
/// every env itself: a handoff to a worker (the post, the worker's wake-up or spin, the
/// result rows moving between cores, the wait) costs about as much as the part of the
/// batch the worker would take. Measured on 2 cores (`docs/benchmarks.md`, "Batches too
/// cheap to hand off"): CartPole costs about 24 ns an env step, and the pool of the
/// trainer's shard and one worker overtook the serial loop between 64 envs (1.5 us a
/// batch) and 128 (3 us).
pub const HANDOFF_COST: Duration = Duration::from_micros(2);

/// [`HANDOFF_COST`] when other programs held the cores as the pool was built: a worker then
/// shares its core, and a handoff waits for it. Measured beside two busy processes on 2
/// cores (`docs/benchmarks.md`, "Batches too cheap to hand off"): the trainer alone against
/// its shard and a worker was 1.53x at 96 CartPole envs (2.3 us a batch) and 0.99x at 128
/// (3 us).
pub const HANDOFF_COST_BUSY: Duration = Duration::from_micros(3);

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
    /// What one batch of every env costs stepped in one process, when it was measured
    /// (the builder measures it where [`ShardQuestion::wants_cost`]).
    pub batch_cost: Option<Duration>,
    /// Other programs held the cores when the pool was built
    /// ([`others_hold_the_cores`]): a handoff costs [`HANDOFF_COST_BUSY`].
    pub busy: bool,
    /// A step timeout was asked for: a pool with no worker would have nothing to time, so
    /// the trainer keeps workers beside its shard however cheap the batch.
    pub step_timeout: bool,
}

/// Whether more tasks are runnable right now than the trainer and the cores it would leave
/// to workers: what [`ShardQuestion::busy`] is built from (the rule by which a pool starts
/// its workers unpinned).
pub fn others_hold_the_cores(cores: usize) -> bool {
    crate::launch::runnable_tasks().is_some_and(|running| running > cores.saturating_sub(1).max(1))
}

/// What was decided, and why ([`crate::Pool::trainer_shard_choice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainerShardChoice {
    /// The trainer steps a shard.
    pub on: bool,
    /// The trainer's shard is every env: the pool has no worker process.
    pub all: bool,
    /// Why, in a few words, for tables and profiles.
    pub reason: &'static str,
}

impl ShardQuestion {
    /// The decision. `On` is checked (sync mode, envs the trainer can build) and refused
    /// with a message naming the fix; `Auto` never refuses, it says why it chose.
    ///
    /// ```
    /// use shmenv_engine::pool::{ShardQuestion, TrainerShardMode};
    /// use std::time::Duration;
    /// let q = ShardQuestion {
    ///     mode: TrainerShardMode::Auto, buildable: true, plugin: false, sync: true,
    ///     restarts: false, workers_given: false, num_envs: 32, cores: 2, batch_cost: None,
    ///     busy: false, step_timeout: false,
    /// };
    /// assert!(q.decide()?.on);
    /// assert!(!ShardQuestion { plugin: true, ..q }.decide()?.on);
    /// let cheap = ShardQuestion { batch_cost: Some(Duration::from_nanos(800)), ..q };
    /// assert!(cheap.decide()?.all);
    /// # Ok::<(), shmenv_engine::BuildError>(())
    /// ```
    pub fn decide(&self) -> Result<TrainerShardChoice, BuildError> {
        let choice = |on, reason| Ok(TrainerShardChoice { on, all: false, reason });
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

    /// Whether the decision would use [`batch_cost`](Self::batch_cost): `Auto`, where the
    /// trainer steps a shard whatever the cost (so measuring it runs no env code in the
    /// trainer that the shard would not), and no step timeout is asked for.
    pub fn wants_cost(&self) -> bool {
        self.mode == TrainerShardMode::Auto && self.shard_refusal().is_none() && !self.step_timeout
    }

    /// Measures [`batch_cost`](Self::batch_cost) and [`busy`](Self::busy) where the decision
    /// would use them ([`wants_cost`](Self::wants_cost)), with envs of `params` that `make`
    /// builds in the trainer, seeded from `seed` ([`super::batch_cost`]). Busy counts
    /// before and after the measure: one count can catch a task that runs for a moment.
    pub fn measure(
        &mut self,
        make: &super::MakeTrainerShard,
        params: &crate::protocol::PoolParams,
        seed: Option<u64>,
    ) {
        if !self.wants_cost() {
            return;
        }
        let busy_before = others_hold_the_cores(self.cores);
        self.batch_cost = super::batch_cost(make, params, seed);
        self.busy = busy_before && others_hold_the_cores(self.cores);
    }

    /// Why `Auto` keeps every env in the workers whatever the envs cost, if it does.
    fn safety_refusal(&self) -> Option<&'static str> {
        if !self.sync {
            return Some("async mode: the trainer's shard is for sync batches");
        }
        if self.plugin {
            return Some("plugin envs keep their crash isolation in worker processes");
        }
        if !self.buildable {
            return Some("the trainer cannot build these envs (not in the worker program's registry)");
        }
        if self.restarts {
            return Some("restarts asked for: a crash in the trainer could not be restarted");
        }
        if self.workers_given {
            return Some("the worker count was given");
        }
        None
    }

    /// Why `Auto` keeps every env in the workers, if it does: a safety refusal, or a
    /// machine or pool where a shard cannot help.
    fn shard_refusal(&self) -> Option<&'static str> {
        if let Some(reason) = self.safety_refusal() {
            return Some(reason);
        }
        if self.cores < 2 {
            return Some("one core: the trainer and a worker share it either way");
        }
        if self.num_envs <= default_num_workers(self.num_envs, self.cores, true) {
            return Some("too few envs for a shard each for the workers and the trainer");
        }
        None
    }

    /// `Auto`'s rule, first reason first.
    fn auto(&self) -> TrainerShardChoice {
        if let Some(reason) = self.shard_refusal() {
            return TrainerShardChoice { on: false, all: false, reason };
        }
        let handoff = if self.busy { HANDOFF_COST_BUSY } else { HANDOFF_COST };
        if !self.step_timeout && self.batch_cost.is_some_and(|c| c < handoff) {
            return TrainerShardChoice {
                on: true,
                all: true,
                reason: "a batch costs less than a handoff to a worker: the trainer steps every env",
            };
        }
        TrainerShardChoice {
            on: true,
            all: false,
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
            batch_cost: None,
            busy: false,
            step_timeout: false,
        }
    }

    #[test]
    fn auto_takes_the_shard_for_sync_native_envs_with_the_default_workers() {
        assert!(auto().decide().unwrap().on);
        assert!(ShardQuestion { num_envs: 2, ..auto() }.decide().unwrap().on);
        assert!(ShardQuestion { cores: 16, num_envs: 6144, ..auto() }.decide().unwrap().on);
        assert!(!auto().decide().unwrap().all, "an unmeasured batch keeps the workers");
    }

    #[test]
    fn auto_steps_every_env_in_the_trainer_where_a_batch_costs_less_than_a_handoff() {
        let cost = |us: f64| ShardQuestion { batch_cost: Some(Duration::from_secs_f64(us * 1e-6)), ..auto() };
        for cheap in [cost(0.1), cost(1.9), ShardQuestion { num_envs: 3, ..cost(1.0) }] {
            let c = cheap.decide().unwrap();
            assert!(c.on && c.all && c.reason.contains("handoff"), "{cheap:?}: {c:?}");
            assert!(cheap.wants_cost());
        }
        // Where the trainer would step no env (one core, too few envs), nothing is measured
        // (the probe would run env code in the trainer) and every env stays in a worker;
        // with a step timeout the workers stay, to be timed.
        for kept in [
            ShardQuestion { cores: 1, ..cost(0.1) },
            ShardQuestion { num_envs: 1, ..cost(0.1) },
            ShardQuestion { step_timeout: true, ..cost(0.1) },
        ] {
            assert!(!kept.wants_cost() && !kept.decide().unwrap().all, "{kept:?}");
        }
        // Dear batches keep the shard and the workers; the safety refusals come first.
        let dear = cost(2.0).decide().unwrap();
        assert!(dear.on && !dear.all, "{dear:?}");
        for unsafe_ in
            [ShardQuestion { plugin: true, ..cost(0.1) }, ShardQuestion { restarts: true, ..cost(0.1) }]
        {
            assert!(!unsafe_.decide().unwrap().on && !unsafe_.wants_cost(), "{unsafe_:?}");
        }
        let on = ShardQuestion { mode: TrainerShardMode::On, ..cost(0.1) };
        assert!(!on.decide().unwrap().all && !on.wants_cost(), "on as asked keeps the workers");
        // Other programs holding the cores make a handoff dearer: a dearer batch runs alone.
        assert!(ShardQuestion { busy: true, ..cost(2.5) }.decide().unwrap().all);
        assert!(!ShardQuestion { busy: true, ..cost(3.0) }.decide().unwrap().all);
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
