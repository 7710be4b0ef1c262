//! The envs a trainer steps itself (`PoolBuilder::trainer_shard`), built from a registry
//! or the pool's plugin as a worker builds its shard, and run by the same code as a
//! worker's sync commands.

use crate::host::{run_command, shard_report, BatchScope, NoScope};
use crate::registry::Registry;
use crate::shard::{EnvShard, LocalRows};
use shmenv_engine::launch::fork::{Owner, Place};
use shmenv_engine::pool::TrainerShard;
use shmenv_engine::protocol::{Command, Layout, PoolParams, WorkerReport};
use shmenv_engine::region::Region;
use shmenv_engine::spec::{Element, Space};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// [`InTrainer::probe_batch_time`] times rounds of `PROBE_ROUND` batches (the clock's own
/// cost spread over them), `PROBE_ROUNDS` at most, for `PROBE_TIME` at most.
const PROBE_ROUND: u32 = 4;
const PROBE_ROUNDS: usize = 8;
const PROBE_TIME: Duration = Duration::from_millis(2);
/// The most bytes of observation rows [`InTrainer::probe_batch_time`] allocates.
const PROBE_ROWS_MAX: usize = 16 << 20;

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
        // No step-time samples: only workers publish them (two clock reads a batch fewer).
        let unsampled = PoolParams { stats: false, ..params.clone() };
        let mut shard = EnvShard::new(&registry, &unsampled, params.trainer_envs()).map_err(shard_report)?;
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

    fn probe_batch_time(&mut self, seed: Option<u64>, enough: Duration) -> Option<Duration> {
        let n = self.shard.range().len();
        // Rows in this process's memory, not yet checked against the room it has: envs
        // whose rows are this large are never cheaper than a handoff anyway.
        if self.shard.obs_row_bytes().iter().sum::<usize>().saturating_mul(n) > PROBE_ROWS_MAX {
            return None;
        }
        let actions = valid_action(&self.shard.spec().action).repeat(n);
        // With final-observation rows, which SameStep writes.
        let mut rows = LocalRows::new(self.shard.spec(), n, true);
        let mut least: Option<Duration> = None;
        let mut failed = false;
        self.scope.run(&mut || {
            if self.shard.reset_all(seed, &mut rows.rows()).is_err() {
                failed = true;
                return;
            }
            // The first batch warms the caches and the rows' pages (a cheap env's first step
            // can take tens of us); a second dearer than `enough` answers at once (envs
            // that take long to step are not stepped for long).
            for warm in [true, false] {
                let t = Instant::now();
                if self.shard.step_all(&actions, &mut rows.rows()).is_err() {
                    failed = true;
                    return;
                }
                if !warm && t.elapsed() > enough {
                    least = Some(t.elapsed());
                    return;
                }
            }
            let started = Instant::now();
            for _ in 0..PROBE_ROUNDS {
                let t = Instant::now();
                for _ in 0..PROBE_ROUND {
                    if self.shard.step_all(&actions, &mut rows.rows()).is_err() {
                        failed = true;
                        return;
                    }
                }
                let batch = t.elapsed() / PROBE_ROUND;
                least = Some(least.map_or(batch, |l| l.min(batch)));
                if started.elapsed() > PROBE_TIME {
                    break;
                }
            }
        });
        least.filter(|_| !failed)
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

/// One valid action row of `space`, as bytes: the lowest value of discrete spaces, and 0
/// (or the bound nearest it) of each `Box` element.
fn valid_action(space: &Space) -> Vec<u8> {
    let n = space.num_elements();
    let value = |j: usize| match space {
        Space::Discrete { start, .. } => *start as f64,
        Space::MultiDiscrete { .. } => space.multi_discrete_range(j).map_or(0.0, |(lo, _)| lo as f64),
        Space::MultiBinary { .. } => 0.0,
        Space::Box { .. } => space.box_bounds(j).map_or(0.0, |(lo, hi)| 0.0f64.clamp(lo, hi)),
    };
    shmenv_engine::with_element!(space.dtype(), T => {
        let row: Vec<T> = (0..n).map(|j| T::from_f64(value(j))).collect();
        shmenv_engine::spec::as_bytes(&row).to_vec()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmenv_engine::spec::DType;

    #[test]
    fn valid_actions_lie_in_their_spaces() {
        let as_i64 = |s: &Space| bytemuck::pod_read_unaligned::<i64>(&valid_action(s));
        assert_eq!(as_i64(&Space::discrete(3)), 0);
        let shifted = Space::Discrete { n: 3, start: -1 };
        assert_eq!(as_i64(&shifted), -1);
        let above = Space::boxed(DType::F32, &[2], 1.5, 4.0);
        let f32s = |b: Vec<u8>| b.chunks(4).map(bytemuck::pod_read_unaligned::<f32>).collect::<Vec<_>>();
        assert_eq!(f32s(valid_action(&above)), [1.5, 1.5]);
        let around = Space::boxed(DType::F64, &[1], -2.0, 2.0);
        assert_eq!(bytemuck::pod_read_unaligned::<f64>(&valid_action(&around)), 0.0);
        assert_eq!(valid_action(&Space::multi_binary(4)), [0; 4]);
    }
}
