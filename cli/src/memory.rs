//! The memory a run of `bench` or `tune` holds in this process besides its pool: the action
//! tapes (64 batches of pre-drawn random actions per pool, and one more for the serial loop
//! of `--baseline`), async mode's scratch rows, and the serial loop's own envs and result
//! rows. Before any pool is built, this is checked together with the engine's estimate of
//! the pool ([`PoolEstimate`], what `PoolBuilder::build` checks) against the memory this
//! process may use ([`MemoryRoom`]: `MemAvailable` and the memory cgroup's limit), so an
//! env count the machine cannot hold is refused at once with [`NotEnoughMemory`], naming
//! the most envs that fit; and again once each pool is built (its spec known, its memory
//! held), before the tapes are drawn.

use crate::args::Envs;
use shmenv::worker::Registry;
use shmenv::PoolBuilder;
use shmenv_engine::pool::{
    default_num_workers, human_bytes, most_that_fit, MemoryRoom, PoolEstimate, MAX_WORKERS,
};
use shmenv_engine::protocol::{queue_entry::ENV_MASK, PoolParams};
use shmenv_engine::spec::EnvSpec;
use std::fmt;

/// Action batches pre-drawn for each pool (and for the serial loop): the batches repeat
/// after this many.
pub const TAPE_BATCHES: u64 = 64;

/// Bytes of the serial loop's result rows per env besides its observations: reward (4),
/// the two flags (2), the episode's return (8), length (4), elapsed steps (4) and env id (4).
const BASELINE_ROW_BYTES: u64 = 26;

/// The spec of a built-in env of `envs` (one made in this process), known before any pool
/// is built; `None` for a plugin's env, or one the registry cannot make (the pool's build
/// says why).
pub fn builtin_spec(registry: &Registry, envs: &Envs, config: &serde_json::Value) -> Option<EnvSpec> {
    match envs.plugin {
        Some(_) => None,
        None => registry.make(&envs.env, config).ok().map(|env| env.spec()),
    }
}

/// The settings of a pool of `envs` (with `workers` worker processes, default as the
/// engine's, and `batch_size` results per batch, default all) as far as the engine's
/// estimate of its memory looks at them.
pub fn pool_params(
    envs: &Envs,
    config: &serde_json::Value,
    workers: Option<usize>,
    batch_size: Option<usize>,
    trace: bool,
    trainer_shard: bool,
) -> PoolParams {
    let (n, cores) = (envs.num_envs, shmenv_engine::sync::available_cores());
    let workers = workers.unwrap_or_else(|| default_num_workers(n, cores, trainer_shard));
    PoolParams {
        config: config.clone(),
        batch_size: batch_size.unwrap_or(n),
        trace,
        plugin: envs.plugin.as_ref().map(|p| p.to_string_lossy().into_owned()),
        cores,
        trainer_shard,
        ..PoolBuilder::default_params(&envs.env, n, workers.clamp(1, MAX_WORKERS))
    }
}

/// What a run holds at once, for the check.
pub struct Plan<'a> {
    /// The command, for the message (`bench`, `tune`).
    pub command: &'static str,
    /// Envs per pool.
    pub num_envs: usize,
    /// Results per batch (`num_envs`: sync).
    pub batch_size: usize,
    /// The envs' spec, when known (the built-in envs' before the pool is built; every
    /// pool's once built); without it the least any spec gives (1-byte actions and rows).
    pub spec: Option<&'a EnvSpec>,
    /// The pool's settings while it is still to be built (its estimate counts); `None`
    /// once it is built (it holds its memory already, and the room left counts it).
    pub pool: Option<&'a PoolParams>,
    /// Pools held at once, each with its tape (`bench --contend` keeps one per setting).
    pub pools: u64,
    /// The serial loop's settings, with `--baseline` (its envs are built in this process).
    pub baseline: Option<&'a PoolParams>,
}

/// What a run needs for some env count, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// The pools still to be built: the engine's estimate, times the pools held at once.
    pub pool: Option<PoolEstimate>,
    /// The action tapes, and async mode's scratch rows.
    pub tapes: u64,
    /// One env's action in each tape.
    pub tape_per_env: u64,
    /// The serial loop's envs and result rows.
    pub baseline: u64,
    /// The serial loop's bytes per env in `baseline`.
    pub baseline_per_env: u64,
}

impl Needs {
    /// Everything together.
    pub fn total(&self) -> u64 {
        self.pool.map_or(0, |p| p.total()).saturating_add(self.tapes).saturating_add(self.baseline)
    }
}

impl Plan<'_> {
    /// What the run needs with `n` envs (saturating, never overflowing).
    pub fn needs(&self, n: u64) -> Needs {
        let action = self.spec.map_or(1, |s| s.action.value_bytes() as u64);
        let obs = self.spec.map_or(1, |s| s.observations.iter().map(|o| o.space.value_bytes() as u64).sum());
        let tape_per_env = TAPE_BATCHES.saturating_mul(action);
        let tapes_held = self.pools.saturating_add(u64::from(self.baseline.is_some()));
        let mut tapes = n.saturating_mul(tape_per_env).saturating_mul(tapes_held);
        if (self.batch_size as u64) < n {
            // Async: the actions of a batch and its env ids, per pool.
            let scratch = (self.batch_size as u64).saturating_mul(action.saturating_add(8));
            tapes = tapes.saturating_add(scratch.saturating_mul(self.pools));
        }
        let pool = self.pool.map(|params| {
            let one = PoolEstimate::new(params, n, self.spec);
            PoolEstimate {
                region: one.region.saturating_mul(self.pools),
                workers: one.workers.saturating_mul(self.pools),
                per_env: one.per_env,
            }
        });
        let baseline_per_env = self.baseline.map_or(0, |params| {
            let envs = PoolEstimate::new(params, 1, self.spec).per_env;
            envs.saturating_add(obs).saturating_add(BASELINE_ROW_BYTES)
        });
        let baseline = n.saturating_mul(baseline_per_env);
        Needs { pool, tapes, tape_per_env, baseline, baseline_per_env }
    }

    /// Refuses the run when it needs more than this process may use now.
    pub fn check(&self) -> Result<(), Box<NotEnoughMemory>> {
        self.check_in(&MemoryRoom::read())
    }

    /// Refuses the run when it needs more than `room` leaves; env counts above the
    /// engine's limit are left to the engine's range check.
    fn check_in(&self, room: &MemoryRoom) -> Result<(), Box<NotEnoughMemory>> {
        let n = self.num_envs as u64;
        let Some(free) = room.room() else { return Ok(()) };
        if n > u64::from(ENV_MASK) {
            return Ok(());
        }
        // The needs grow with the env count: the engine's search for the largest that fits.
        let fits = most_that_fit(n, free, |k| self.needs(k).total());
        if fits == n {
            return Ok(());
        }
        Err(Box::new(NotEnoughMemory {
            command: self.command,
            num_envs: self.num_envs,
            needs: self.needs(n),
            pools: self.pools,
            room: room.clone(),
            fits: fits as usize,
        }))
    }
}

/// A run that would not fit in the memory this process may use, refused before it starts.
#[derive(Debug)]
pub struct NotEnoughMemory {
    /// The command.
    pub command: &'static str,
    /// The envs asked for.
    pub num_envs: usize,
    /// What they would need.
    pub needs: Needs,
    /// Pools held at once.
    pub pools: u64,
    /// What this process may use, and where the figures come from.
    pub room: MemoryRoom,
    /// The most envs that fit.
    pub fits: usize,
}

impl NotEnoughMemory {
    /// The parts of the need, in words.
    fn parts(&self) -> String {
        let Needs { pool, tapes, tape_per_env, baseline, baseline_per_env } = self.needs;
        let mut parts = Vec::new();
        let pools = if self.pools == 1 { "the pool's".to_string() } else { format!("{} pools'", self.pools) };
        let regions = if self.pools == 1 { "region" } else { "regions" };
        if let Some(p) = pool {
            parts.push(format!(
                "{pools} shared-memory {regions} {} and workers' envs {} (an estimated {} bytes per env)",
                human_bytes(p.region),
                human_bytes(p.workers),
                p.per_env
            ));
        }
        parts.push(format!(
            "{}'s action tapes {} ({TAPE_BATCHES} batches of pre-drawn random actions, {tape_per_env} bytes per env \
             per tape)",
            self.command,
            human_bytes(tapes)
        ));
        if baseline > 0 {
            parts.push(format!(
                "the serial loop's envs and rows {} ({baseline_per_env} bytes per env, built in this process for \
                 --baseline)",
                human_bytes(baseline)
            ));
        }
        let parts = parts.join(", ");
        match pool {
            Some(_) => parts,
            None => format!("{parts}, besides {pools} memory (built already, it holds it: the room below is what is left)"),
        }
    }
}

impl fmt::Display for NotEnoughMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.needs.total();
        write!(
            f,
            "{} would need about {} ({total} bytes) for --num-envs {}: {}; more than this process may use: {} \
             available ({}). ",
            self.command,
            human_bytes(total),
            self.num_envs,
            self.parts(),
            human_bytes(self.room.room().unwrap_or(0)),
            self.room.describe()
        )?;
        let baseline = if self.needs.baseline > 0 { " (or drop --baseline)" } else { "" };
        match self.fits {
            0 => write!(f, "Not even one env fits: free memory{baseline}, or raise the memory limit"),
            fits => write!(
                f,
                "At most {fits} envs fit: use --num-envs {fits} or fewer{baseline}, or raise the memory limit"
            ),
        }
    }
}

impl std::error::Error for NotEnoughMemory {}

#[cfg(test)]
mod tests {
    use super::*;
    use shmenv::{DType, Space};
    use shmenv_engine::pool::CgroupLimit;

    fn params(num_envs: usize) -> PoolParams {
        shmenv::PoolBuilder::default_params("CartPole-v1", num_envs, 2)
    }

    fn room(bytes: u64) -> MemoryRoom {
        let cgroup =
            CgroupLimit { path: "/sys/fs/cgroup/memory/j".into(), version: 1, max: bytes, current: 0 };
        MemoryRoom { mem_available: Some(64 << 30), cgroup: Some(cgroup) }
    }

    #[test]
    fn the_tapes_and_the_baseline_count_with_the_pool() {
        let spec = EnvSpec::single(Space::boxed(DType::F32, &[4], -1.0, 1.0), Space::discrete(2));
        let p = params(100_000_000);
        let plan = |baseline| Plan {
            command: "bench",
            num_envs: 100_000_000,
            batch_size: 100_000_000,
            spec: Some(&spec),
            pool: Some(&p),
            pools: 1,
            baseline,
        };
        let needs = plan(None).needs(100_000_000);
        // CartPole's actions are i64: 64 x 8 bytes per env.
        assert_eq!((needs.tape_per_env, needs.tapes, needs.baseline), (512, 51_200_000_000, 0));
        let pool = PoolEstimate::new(&p, 100_000_000, Some(&spec));
        assert_eq!(needs.total(), pool.total() + 51_200_000_000);
        // The baseline: a second tape, and its envs (the engine's figure) and rows.
        let with = plan(Some(&p)).needs(100_000_000);
        assert_eq!(with.tapes, 2 * 51_200_000_000);
        assert_eq!(with.baseline_per_env, pool.per_env + 16 + 26);
        // 23 GiB: the pool alone fits, the run does not; the count that fits fits.
        let err = plan(None).check_in(&room(23 << 30)).unwrap_err();
        assert!(pool.total() < 23 << 30 && err.fits > 1_000_000, "{err}");
        assert!(plan(None).needs(err.fits as u64).total() <= 23 << 30);
        assert!(plan(None).needs(err.fits as u64 + 1).total() > 23 << 30);
        let message = err.to_string();
        for part in [
            "bench would need about",
            "for --num-envs 100000000",
            "bench's action tapes 47.68 GiB (64 batches of pre-drawn random actions, 512 bytes per env per tape)",
            "cgroup v1 /sys/fs/cgroup/memory/j allows 23.00 GiB",
            &format!("At most {} envs fit: use --num-envs {} or fewer, or raise the memory limit", err.fits, err.fits),
        ] {
            assert!(message.contains(part), "{part:?} missing: {message}");
        }
        assert!(plan(Some(&p))
            .check_in(&room(23 << 30))
            .unwrap_err()
            .to_string()
            .contains("drop --baseline"));
        // No figure at all: nothing to check against.
        assert!(plan(None).check_in(&MemoryRoom::default()).is_ok());
    }

    #[test]
    fn absurd_counts_saturate_and_counts_beyond_the_engines_limit_are_left_to_it() {
        let p = params(ENV_MASK as usize);
        let plan = Plan {
            command: "tune",
            num_envs: ENV_MASK as usize,
            batch_size: 7,
            spec: None,
            pool: Some(&p),
            pools: 6,
            baseline: Some(&p),
        };
        let err = plan.check_in(&room(1 << 30)).unwrap_err();
        assert!(err.fits < 10_000_000, "{err}");
        assert_eq!(Plan { pools: u64::MAX, ..plan }.needs(u64::MAX).total(), u64::MAX);
        let beyond = Plan { num_envs: ENV_MASK as usize + 1, ..plan };
        assert!(beyond.check_in(&room(1 << 30)).is_ok());
        let none = Plan { num_envs: 1, ..plan };
        assert!(none.check_in(&room(0)).unwrap_err().to_string().contains("Not even one env fits"));
    }
}
