//! The shard of envs the trainer steps itself ([`PoolBuilder::trainer_shard`]): in sync
//! mode the trainer posts the workers, steps its own envs into their rows of the result
//! block while the workers step theirs, then waits. With two cores, that is two runnable
//! processes instead of three (a trainer waiting for two workers shares a core with one).
//!
//! The engine does not know envs; the worker crate implements [`TrainerShard`]
//! (`shmenv_worker::trainer_shard`).
//!
//! [`PoolBuilder::trainer_shard`]: super::PoolBuilder::trainer_shard

use crate::protocol::{Command, Layout, PoolParams, WorkerReport};
use crate::region::Region;
use std::sync::Arc;

/// Envs stepped on the trainer's thread, into their rows of the region
/// ([`PoolParams::trainer_envs`]).
pub trait TrainerShard: Send {
    /// The envs' spec (canonical JSON, as a worker reports it): it must equal the workers'.
    fn spec_json(&self) -> serde_json::Value;

    /// Runs sync command `command` (not `Close`) on every env of the shard, reading their
    /// action rows and writing their rows of result block `block` of `layout`. The pool
    /// calls it only between its posts to the workers and its wait for them, from a call
    /// holding `&mut Pool`: no worker and no batch view touches these rows then.
    /// `Err((env_id, message))`: an env failed (a panic, caught); the pool closes.
    fn run(
        &mut self,
        command: Command,
        region: &Region,
        layout: &Layout,
        block: usize,
    ) -> Result<(), (usize, String)>;
}

/// Builds a pool's [`TrainerShard`] from its parameters, or says why not as a worker
/// would ([`WorkerReport`]: unknown env, bad config, ...).
pub type MakeTrainerShard = dyn Fn(&PoolParams) -> Result<Box<dyn TrainerShard>, WorkerReport> + Send + Sync;

/// What [`PoolBuilder::trainer_shard`](super::PoolBuilder::trainer_shard) holds.
#[derive(Clone)]
pub(super) struct ShardMaker(pub(super) Arc<MakeTrainerShard>);

impl std::fmt::Debug for ShardMaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MakeTrainerShard")
    }
}

/// A built [`TrainerShard`], in the pool. The mutex makes the pool `Sync` (envs need only
/// be `Send`); the pool reaches the shard through `&mut` (`Mutex::get_mut`), never locking.
pub(super) struct OwnShard(pub(super) std::sync::Mutex<Box<dyn TrainerShard>>);

impl OwnShard {
    pub(super) fn new(shard: Box<dyn TrainerShard>) -> OwnShard {
        OwnShard(std::sync::Mutex::new(shard))
    }

    /// The shard, for a call holding the pool mutably.
    pub(super) fn get(&mut self) -> &mut dyn TrainerShard {
        // A poisoned lock is only a panic's mark; the pool closes on an env's failure anyway.
        self.0.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()).as_mut()
    }
}

impl std::fmt::Debug for OwnShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TrainerShard")
    }
}
