//! Validation of a [`PoolBuilder`]'s settings, before any process or memory exists.

use super::builder::FailurePolicy;
use super::shard_choice::{ShardQuestion, TrainerShardChoice, TrainerShardMode};
use super::trainer_shard::{program_shard, ShardMaker};
use super::PoolBuilder;
use crate::error::BuildError;
use crate::protocol;

/// The most workers one pool may have.
///
/// Each worker is a process of its own, with a 64 KiB report area in the region, a pidfd
/// and an output pipe in the trainer (two fds: 1024 workers already need `ulimit -n` above
/// the common default of 1024), and a place in the supervisor's poll set. Workers beyond
/// the cores add no throughput, only scheduling: measured on 2 cores, starting 2000 workers
/// took 40 to 200 s and drove the load to ~1000. 1024 leaves room for machines with many
/// cores and for envs that mostly wait (on I/O or a simulator), and keeps a mistyped count
/// from taking the machine down.
pub const MAX_WORKERS: usize = 1024;

/// The most envs one pool may have (the async queue entry's env field).
const MAX_ENVS: usize = protocol::queue_entry::ENV_MASK as usize;

/// The number of workers a pool of `num_envs` envs gets when none is given: one per core
/// this process may use, at most one per env; with a trainer shard, which takes a core's
/// share, one fewer (at least one).
pub fn default_num_workers(num_envs: usize, cores: usize, trainer_shard: bool) -> usize {
    (cores.min(num_envs).max(1) - usize::from(trainer_shard)).max(1)
}

/// What [`check`] settled: the counts, and the trainer's shard with why.
pub(super) struct Settled {
    pub(super) num_workers: usize,
    pub(super) batch_size: usize,
    /// Builds the trainer's shard, when it has one.
    pub(super) shard: Option<ShardMaker>,
    pub(super) shard_choice: TrainerShardChoice,
}

/// Whether the trainer steps a shard of `b`'s envs, and what builds it: the builder's own
/// maker, else the program's (when the workers run this program, whose registry
/// `serve_if_worker` declared).
fn settle_shard(
    b: &PoolBuilder,
    cores: usize,
) -> Result<(Option<ShardMaker>, TrainerShardChoice), BuildError> {
    let workers_are_this_program =
        b.worker_command.is_none() && std::env::var_os(crate::launch::program::PROGRAM_ENV).is_none();
    let maker = b.trainer_shard.clone().or_else(|| program_shard().filter(|_| workers_are_this_program));
    // No worker asked for: the trainer steps every env, unless the shard was turned off.
    let alone = b.num_workers == Some(0);
    let mut question = ShardQuestion {
        mode: match b.trainer_shard_mode {
            TrainerShardMode::Auto if alone => TrainerShardMode::On,
            mode => mode,
        },
        buildable: maker.is_some(),
        plugin: b.plugin.is_some(),
        sync: b.batch_size.is_none_or(|s| s == b.num_envs),
        restarts: b.failure_policy != FailurePolicy::Fail,
        workers_given: b.num_workers.is_some(),
        num_envs: b.num_envs,
        cores,
        batch_cost: None,
        busy: false,
        step_timeout: b.step_timeout.is_some(),
    };
    if let Some(maker) = maker.as_ref().filter(|_| question.wants_cost()) {
        question.measure(&*maker.0, &probe_params(b, cores), b.seed);
    }
    if alone {
        refuse_alone(b, &question)?;
    }
    let mut choice = question.decide()?;
    if alone && choice.on {
        choice =
            TrainerShardChoice { on: true, all: true, reason: "num_workers 0: the trainer steps every env" };
    }
    Ok((maker.filter(|_| choice.on), choice))
}

/// `num_workers(0)`'s refusals: what needs a worker (restarts, a step timeout, async mode),
/// and envs the trainer cannot build.
fn refuse_alone(b: &PoolBuilder, question: &ShardQuestion) -> Result<(), BuildError> {
    let need = if question.restarts {
        Some("restarts (failure_policy), which replace dead workers")
    } else if question.step_timeout {
        Some("a step_timeout, which times workers")
    } else if !question.sync {
        Some("async mode (batch_size below num_envs), whose batches hold the workers that finished first")
    } else if !question.buildable && b.trainer_shard_mode != TrainerShardMode::Off {
        Some("envs the trainer can build (this program serves none: call shmenv::worker::serve_if_worker(registry) first, or pass .trainer_shard(shmenv::worker::trainer_shard(registry)))")
    } else {
        None
    };
    match need {
        Some(what) => Err(BuildError::InvalidArgument(format!(
            "num_workers is 0, so the trainer steps every env and no worker exists; that cannot serve {what}: \
             give num_workers 1 or more"
        ))),
        None => Ok(()),
    }
}

/// The parameters of a pool of `b`'s envs all stepped by the trainer: what
/// [`ShardMaker::batch_cost`] measures.
fn probe_params(b: &PoolBuilder, cores: usize) -> protocol::PoolParams {
    protocol::PoolParams {
        env_id: b.env_id.clone(),
        config: b.config.clone(),
        num_envs: b.num_envs,
        num_workers: 0,
        max_episode_steps: b.max_episode_steps,
        wait: b.wait,
        // Every env of the pool alike, whatever happens at an episode's end: NextStep.
        autoreset: protocol::AutoReset::NextStep,
        batch_size: b.num_envs,
        ring_depth: b.ring_depth,
        stats: false,
        trace: false,
        restart: false,
        plugin: None,
        cores,
        trainer_shard: true,
    }
}

/// Checks every setting; returns the number of workers, the batch size and the trainer's
/// shard.
pub(super) fn check(b: &PoolBuilder, cores: usize) -> Result<Settled, BuildError> {
    let invalid = |m: String| Err(BuildError::InvalidArgument(m));
    if b.num_envs == 0 || b.num_envs > MAX_ENVS {
        return invalid(format!("num_envs must be between 1 and {MAX_ENVS}, got {}", b.num_envs));
    }
    let (shard, shard_choice) = settle_shard(b, cores)?;
    let num_workers = match shard_choice.all {
        true => 0,
        false => b.num_workers.unwrap_or(default_num_workers(b.num_envs, cores, shard.is_some())),
    };
    let most = if b.num_envs <= MAX_WORKERS {
        format!("num_envs ({})", b.num_envs)
    } else {
        format!("{MAX_WORKERS} (the most workers per pool)")
    };
    if (num_workers == 0 && !shard_choice.all) || num_workers > b.num_envs.min(MAX_WORKERS) {
        return invalid(format!(
            "num_workers must be between 1 and {most}, got {num_workers}; this machine has {cores} cores, \
             and workers beyond the cores add no speed (0, where the trainer steps every env itself, needs \
             trainer_shard on or auto)"
        ));
    }
    let batch_size = b.batch_size.unwrap_or(b.num_envs);
    if batch_size == 0 || batch_size > b.num_envs {
        return invalid(format!(
            "batch_size must be between 1 and num_envs ({}), got {batch_size}",
            b.num_envs
        ));
    }
    if shard.is_some() && batch_size < b.num_envs {
        return invalid(format!(
            "trainer_shard runs in sync mode only, but batch_size ({batch_size}) is less than num_envs ({}): \
             leave batch_size unset, or drop trainer_shard",
            b.num_envs
        ));
    }
    if shard.is_some() && b.num_envs <= num_workers {
        return invalid(format!(
            "with trainer_shard the envs are split into num_workers + 1 shards, so num_envs ({}) must be at \
             least num_workers + 1 ({}): the trainer and each worker step one env or more; use fewer workers or \
             more envs",
            b.num_envs,
            num_workers + 1
        ));
    }
    if b.ring_depth < 2 || b.ring_depth > 64 {
        return invalid(format!("ring_depth must be between 2 and 64, got {}", b.ring_depth));
    }
    if b.retain_batches >= b.ring_depth {
        return invalid(format!(
            "retain_batches ({}) must be less than ring_depth ({}): the workers need a block to fill; \
             raise ring_depth to at least {}",
            b.retain_batches,
            b.ring_depth,
            b.retain_batches + 1
        ));
    }
    if b.max_episode_steps == Some(0) {
        return invalid("max_episode_steps must be at least 1 (or unset: the env's default), got 0".into());
    }
    if b.step_timeout.is_some_and(|t| t.is_zero()) {
        return invalid(
            "step_timeout must be more than 0 (or unset: wait as long as it takes), got 0".into(),
        );
    }
    if b.startup_timeout.is_zero() {
        return invalid("startup_timeout must be more than 0, got 0".into());
    }
    if !b.config.is_object() {
        return invalid(format!("config must be a JSON object, got {}", b.config));
    }
    Ok(Settled { num_workers, batch_size, shard, shard_choice })
}
