//! What Python's `shmenv.vector` passes to start a pool ([`PoolArgs`]), turned into the
//! engine's builder, and the names the extension parses for it (auto-reset modes, the
//! default worker count).

use crate::caller::CallerGuard;
use crate::pool::invalid_argument;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shmenv_engine::launch::CpuAffinity;
use shmenv_engine::pool::{ShardQuestion, TrainerShardMode};
use shmenv_engine::protocol::{AutoReset, PoolParams, UnknownAutoReset};
use shmenv_engine::{Pool, PoolBuilder, WaitStrategy, WorkerCommand};
use std::time::Duration;

/// The auto-reset mode named `name` (any spelling `AutoReset` parses), by its Gymnasium
/// value name (`"NextStep"`, ...): `shmenv.arguments` turns it into `AutoresetMode`, so the
/// names are parsed here only.
#[pyfunction]
pub(crate) fn autoreset_name(name: &str) -> PyResult<&'static str> {
    Ok(parse_autoreset(name)?.name())
}

fn parse_autoreset(name: &str) -> PyResult<AutoReset> {
    name.parse().map_err(|e: UnknownAutoReset| invalid_argument(format!("autoreset_mode: {e}")))
}

/// The worker count a pool of `num_envs` envs gets by default (one per core this process
/// may use, at most one per env; one fewer with a trainer shard), as the engine computes it.
#[pyfunction]
#[pyo3(signature = (num_envs, trainer_shard = false))]
pub(crate) fn default_num_workers(num_envs: usize, trainer_shard: bool) -> usize {
    shmenv_engine::pool::default_num_workers(num_envs, shmenv_engine::sync::available_cores(), trainer_shard)
}

/// Whether a pool gets the trainer's shard, decided by the engine's rule
/// (`ShardQuestion::decide`): `mode` is `auto`, `on` or `off`; `buildable` says the
/// trainer can build the envs (native, from shmenv's own registry or a plugin), `plugin`
/// that a plugin library runs them; `native` (a built-in env's id and JSON config) has
/// the engine measure what a batch costs, as a pool's build does (`auto` then has the
/// trainer step every env where a batch costs less than a handoff; its envs are seeded
/// from `seed` as the pool's are). Returns whether, whether every env, and why.
#[pyfunction]
#[pyo3(signature = (
    mode, *, num_envs, workers_given, buildable, plugin, sync, restarts, step_timeout = false, seed = None,
    native = None
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn trainer_shard_choice(
    py: Python<'_>,
    mode: &str,
    num_envs: usize,
    workers_given: bool,
    buildable: bool,
    plugin: bool,
    sync: bool,
    restarts: bool,
    step_timeout: bool,
    seed: Option<u64>,
    native: Option<(String, String)>,
) -> PyResult<(bool, bool, &'static str)> {
    let mode = TrainerShardMode::from_name(mode).ok_or_else(|| {
        invalid_argument(format!("trainer_shard must be True, False, 'auto', 'on' or 'off', got {mode:?}"))
    })?;
    let cores = shmenv_engine::sync::available_cores();
    let mut question = ShardQuestion {
        mode,
        buildable,
        plugin,
        sync,
        restarts,
        workers_given,
        num_envs,
        cores,
        batch_cost: None,
        busy: false,
        step_timeout,
    };
    if let Some((env_id, config_json)) = native.filter(|_| question.wants_cost()) {
        let config = crate::checks::parse_config(py, &env_id, &config_json)?;
        let params =
            PoolParams { config, trainer_shard: true, ..PoolBuilder::default_params(&env_id, num_envs, 0) };
        let make = shmenv_worker::trainer_shard(shmenv_worker::Registry::with_builtins());
        py.detach(|| question.measure(&make, &params, seed));
    }
    let choice = question.decide().map_err(|e| invalid_argument(e.to_string()))?;
    Ok((choice.on, choice.all, choice.reason))
}

/// A worker command: `program`, its arguments, extra environment.
fn worker_command(
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    call_socket: bool,
) -> WorkerCommand {
    let command = args.into_iter().fold(WorkerCommand::new(program), WorkerCommand::arg);
    let command = env.into_iter().fold(command, |c, (k, v)| c.env(k, v));
    if call_socket {
        command.call_socket()
    } else {
        command
    }
}

/// What Python's `shmenv.vector` passes to start a pool: `shmenv.options.PoolOptions`
/// checked and resolved (the env's JSON config, the worker command, the mode names), as a
/// dict with one item per field. Defaults live in [`Pool::builder`] (`PoolBuilder`'s
/// `DEFAULT_*`), which Python reads (`_shmenv.pool_defaults()`); none here.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct PoolArgs {
    num_workers: Option<usize>,
    batch_size: Option<usize>,
    seed: Option<u64>,
    config_json: String,
    autoreset: String,
    max_episode_steps: Option<u32>,
    worker_program: Option<String>,
    worker_args: Vec<String>,
    worker_env: Vec<(String, String)>,
    call_socket: bool,
    wait: String,
    ring_depth: usize,
    pin_workers: bool,
    step_timeout: Option<f64>,
    max_restarts: Option<u32>,
    pub(crate) copy: bool,
    retain_batches: usize,
    fair_scheduling: bool,
    plugin: Option<String>,
    trainer_shard: bool,
    /// The one-caller guard of the `ShmVectorEnv` this pool serves (its Rust calls check it).
    pub(crate) caller_guard: Py<CallerGuard>,
}

impl PoolArgs {
    /// The engine's builder for these arguments, and for a trainer's shard of hosted
    /// Python envs the host they are built into (`shmenv.worker.in_trainer.TrainerEnvs`);
    /// a bad value is a `ValueError`.
    pub(crate) fn builder(
        self,
        py: Python<'_>,
        env_id: &str,
        num_envs: usize,
    ) -> PyResult<(PoolBuilder, Option<Py<PyAny>>)> {
        let config = crate::checks::parse_config(py, env_id, &self.config_json)?;
        let wait = WaitStrategy::from_name(&self.wait).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown wait strategy {:?}: use auto, spin, yield or block",
                self.wait
            ))
        })?;
        let mut builder = Pool::builder(env_id)
            .num_envs(num_envs)
            .config(config)
            .autoreset(parse_autoreset(&self.autoreset)?)
            .wait(wait)
            .ring_depth(self.ring_depth)
            .retain_batches(self.retain_batches)
            .fair_scheduling(self.fair_scheduling)
            .cpu_affinity(if self.pin_workers { CpuAffinity::Auto } else { CpuAffinity::None });
        if let Some(program) = self.worker_program {
            builder = builder.worker_command(worker_command(
                program,
                self.worker_args,
                self.worker_env,
                self.call_socket,
            ));
        }
        if let Some(w) = self.num_workers {
            builder = builder.num_workers(w);
        }
        if let Some(path) = self.plugin {
            builder = builder.plugin(path);
        }
        if let Some(b) = self.batch_size {
            builder = builder.batch_size(b);
        }
        // Python decided (`trainer_shard_choice`, before it counted the workers): on or off.
        let mut host = None;
        builder = match self.trainer_shard {
            true if env_id == crate::pyenv::PYTHON_ENV_ID => {
                let envs = py.import("shmenv.worker.in_trainer")?.getattr("TrainerEnvs")?.call0()?.unbind();
                host = Some(envs.clone_ref(py));
                builder.trainer_shard(crate::pyenv::trainer_shard(envs))
            }
            true => {
                builder.trainer_shard(shmenv_worker::trainer_shard(shmenv_worker::Registry::with_builtins()))
            }
            false => builder.trainer_shard_mode(TrainerShardMode::Off),
        };
        if let Some(s) = self.seed {
            builder = builder.seed(s);
        }
        if let Some(max_restarts) = self.max_restarts {
            builder = builder.failure_policy(shmenv_engine::FailurePolicy::Restart { max_restarts });
        }
        if let Some(t) = self.step_timeout {
            if !(t > 0.0 && t.is_finite()) {
                return Err(PyValueError::new_err(format!(
                    "step_timeout must be a positive number of seconds, got {t}"
                )));
            }
            builder = builder.step_timeout(Duration::from_secs_f64(t));
        }
        if let Some(k) = self.max_episode_steps {
            builder = builder.max_episode_steps(k);
        }
        Ok((builder, host))
    }
}
