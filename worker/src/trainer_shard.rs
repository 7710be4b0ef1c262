//! The envs a trainer steps itself (`PoolBuilder::trainer_shard`), built from a registry
//! or the pool's plugin as a worker builds its shard, and run by the same code as a
//! worker's sync commands.

use crate::host::{run_command, shard_report, BatchScope, NoScope};
use crate::registry::Registry;
use crate::shard::EnvShard;
use shmenv_engine::launch::fork::{Owner, Place};
use shmenv_engine::pool::TrainerShard;
use shmenv_engine::protocol::{Command, Layout, PoolParams, WorkerReport};
use shmenv_engine::region::Region;
use std::sync::Arc;

/// What [`PoolBuilder::trainer_shard`](shmenv_engine::PoolBuilder::trainer_shard) takes to
/// step the first shard of a pool in the trainer: its envs, built from `registry` (or from
/// the pool's plugin), which should be the registry of the worker program.
///
/// ```no_run
/// use shmenv_worker::{trainer_shard, Registry};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// shmenv_worker::serve_if_worker(Registry::with_builtins);
/// // Two cores: the trainer steps envs 0..16, one worker process envs 16..32.
/// let mut pool = shmenv_engine::Pool::builder("CartPole-v1")
///     .num_envs(32)
///     .num_workers(1)
///     .trainer_shard(trainer_shard(Registry::with_builtins()))
///     .build()?;
/// assert_eq!(pool.trainer_envs(), 0..16);
/// pool.reset()?;
/// # Ok(()) }
/// ```
pub fn trainer_shard(
    registry: Registry,
) -> impl Fn(&PoolParams) -> Result<Box<dyn TrainerShard>, WorkerReport> + Send + Sync + 'static {
    trainer_shard_with_scope(registry, NoScope)
}

/// [`trainer_shard`] whose batches run inside `scope`, as a worker's run inside its host's
/// scope: the Python extension's holds the GIL for a batch of hosted Python envs, which
/// the trainer steps while the pool's call has released it.
pub fn trainer_shard_with_scope(
    registry: Registry,
    scope: impl BatchScope + Send + Sync + 'static,
) -> impl Fn(&PoolParams) -> Result<Box<dyn TrainerShard>, WorkerReport> + Send + Sync + 'static {
    let scope: Arc<dyn BatchScope + Send + Sync> = Arc::new(scope);
    move |params: &PoolParams| {
        let mut shard = EnvShard::new(&registry, params, params.trainer_envs()).map_err(shard_report)?;
        shard.stop_forked_copies(Owner::current(), Place::Trainer);
        Ok(Box::new(InTrainer { shard, scope: scope.clone() }) as Box<dyn TrainerShard>)
    }
}

/// A shard stepped on the trainer's thread.
struct InTrainer {
    shard: EnvShard,
    /// What each batch runs inside.
    scope: Arc<dyn BatchScope + Send + Sync>,
}

impl TrainerShard for InTrainer {
    fn spec_json(&self) -> serde_json::Value {
        self.shard.spec().to_json()
    }

    fn resets(&self) -> u64 {
        self.shard.resets()
    }

    unsafe fn run(
        &mut self,
        command: Command,
        actions: &[u8],
        region: &Region,
        layout: &Layout,
        block: usize,
    ) -> Result<(), (usize, String)> {
        let first = self.shard.range().start;
        let Some(block) = layout.blocks.get(block).filter(|_| command != Command::Close) else {
            return Err((first, format!("the pool sent {command:?} to block {block}")));
        };
        let want = self.shard.range().len() * layout.actions.row_bytes;
        if matches!(command, Command::Step | Command::ResetSome) && actions.len() != want {
            return Err((
                first,
                format!("{} bytes of actions for {want} bytes of action rows", actions.len()),
            ));
        }
        // SAFETY: the caller's exclusive access to the shard's rows (this method's contract).
        unsafe { run_command(region, command, actions, &mut self.shard, block, &*self.scope) }
    }
}
