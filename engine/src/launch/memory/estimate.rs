//! What a pool will need of the memory: the region (its size follows [`Layout::compute`])
//! and the workers' env state (a per-env figure), checked against [`MemoryRoom`] before any
//! worker starts and again, with the spec the workers report, before the region grows.
//!
//! Every figure is computed in saturating `u64` arithmetic, so an absurd env count or row
//! size gives `u64::MAX` (refused), never an overflow.
//!
//! [`Layout::compute`]: crate::protocol::Layout::compute

use super::MemoryRoom;
use crate::error::BuildError;
use crate::protocol::{self, AutoReset, Column, PoolParams, CACHE_LINE, PAGE, SYNC_BLOCKS};
use crate::spec::EnvSpec;

/// Bytes a worker holds per env besides the env's own state: its slot in the shard's list
/// of boxed envs (16 bytes, up to twice over while the list grows), the allocator's header
/// of the env's box (8 to 16) and the episode bookkeeping (13).
pub(crate) const SHARD_BYTES_PER_ENV: u64 = 64;

/// Env state assumed for an env the engine has no figure for (a plugin's, or an id of a
/// worker program of your own), on top of a copy of its observation and action: a
/// conservative figure, below what any real env takes.
pub(crate) const DEFAULT_ENV_BYTES: u64 = 1024;

/// Env state assumed for a Python env hosted by the Python package's workers (a
/// Gymnasium `CartPole-v1` object with its wrappers and NumPy generator takes ~3.8 KiB).
pub(crate) const PYTHON_ENV_BYTES: u64 = 4096;

/// The Python package's env id for Python envs.
const PYTHON_ENV_ID: &str = "python-env";

/// The state of each built-in env (`shmenv::worker::envs`): its struct's size rounded up
/// to the allocator's 16 bytes, plus what it allocates (`Burn-v0`'s shape, a few dims).
/// `tests/memory_limits.rs` checks these against the structs.
pub(crate) const BUILTIN_ENV_BYTES: [(&str, u64); 3] =
    [("CartPole-v1", 80), ("Pendulum-v1", 64), ("Burn-v0", 256)];

/// The bytes a worker is estimated to hold per env of `params` (the spec's observation and
/// action rows, when known, for envs that are not built in: plugins and Python envs keep
/// buffers of them).
pub(crate) fn worker_bytes_per_env(params: &PoolParams, spec: Option<&EnvSpec>) -> u64 {
    let builtin = BUILTIN_ENV_BYTES.iter().find(|(id, _)| *id == params.env_id).map(|(_, b)| *b);
    let state = match (params.plugin.is_some(), builtin) {
        (false, Some(bytes)) => return SHARD_BYTES_PER_ENV + bytes,
        _ if params.env_id == PYTHON_ENV_ID => PYTHON_ENV_BYTES,
        _ => DEFAULT_ENV_BYTES,
    };
    let rows = spec.map_or(0, |s| RowShape::of(s).obs.saturating_add(RowShape::of(s).action));
    SHARD_BYTES_PER_ENV.saturating_add(state).saturating_add(rows)
}

/// The bytes of one env's row in each array of the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowShape {
    /// All observation arrays together.
    pub obs: u64,
    /// How many observation arrays.
    pub obs_arrays: u64,
    /// The action.
    pub action: u64,
}

impl RowShape {
    /// The smallest rows any spec has (one observation array of 1 byte, a 1-byte action):
    /// the region's size before the workers report the spec is at least this one's.
    pub(crate) const LEAST: RowShape = RowShape { obs: 1, obs_arrays: 1, action: 1 };

    /// The rows of `spec`.
    pub(crate) fn of(spec: &EnvSpec) -> RowShape {
        RowShape {
            obs: spec.observations.iter().fold(0u64, |a, o| a.saturating_add(o.space.value_bytes() as u64)),
            obs_arrays: spec.observations.len() as u64,
            action: spec.action.value_bytes() as u64,
        }
    }
}

/// The region's bytes for `num_envs` envs of `params` with rows `rows`: the arrays of
/// [`crate::protocol::Layout::compute`], each padded to a cache line, at least its total
/// size; `u64::MAX` if that does not fit in 64 bits.
pub(crate) fn region_bytes(params: &PoolParams, num_envs: u64, rows: RowShape) -> u64 {
    let line = CACHE_LINE as u64;
    let array = |n: u64, row: u64| n.saturating_mul(row).saturating_add(line);
    let is_async = (params.batch_size as u64) < num_envs;
    let (block_rows, blocks) = if is_async {
        (params.batch_size as u64, params.ring_depth as u64)
    } else {
        (num_envs, SYNC_BLOCKS as u64)
    };
    let obs_copies = if params.autoreset == AutoReset::SameStep { 2 } else { 1 };
    let columns: u64 = Column::ALL.iter().map(|c| c.kind().size() as u64).sum();
    let block = block_rows
        .saturating_mul(rows.obs.saturating_mul(obs_copies).saturating_add(columns))
        .saturating_add(
            rows.obs_arrays.saturating_mul(obs_copies).saturating_add(Column::COUNT as u64) * line,
        );
    let mut total = (protocol::bootstrap_size(params.num_workers) as u64)
        .saturating_add(array(num_envs, rows.action))
        .saturating_add(block.saturating_mul(blocks));
    if is_async {
        let words = (1 + 2 * params.ring_depth as u64) * 2 * line;
        total =
            total.saturating_add(words).saturating_add(array(num_envs, 4)).saturating_add(array(num_envs, 8));
    }
    if params.trace {
        total = total.saturating_add(array(params.num_workers as u64, protocol::trace::ROW_BYTES as u64));
    }
    total.saturating_add(PAGE as u64)
}

/// What a pool will need of the memory, as [`crate::PoolBuilder::build`] estimates it
/// before any worker starts: for callers that keep per-env memory of their own beside the
/// pool (the `shmenv` CLI's action tapes) and check both together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolEstimate {
    /// The shared-memory region, bytes.
    pub region: u64,
    /// The workers' env state, bytes.
    pub workers: u64,
    /// The workers' bytes per env in `workers`.
    pub per_env: u64,
}

impl PoolEstimate {
    /// For a pool of `params` with `num_envs` envs (its batch no larger; the other
    /// settings as in `params`) whose envs have `spec`; without one, the least region any
    /// spec gives and the state of envs whose rows are not known, as `build` checks it.
    pub fn new(params: &PoolParams, num_envs: u64, spec: Option<&EnvSpec>) -> PoolEstimate {
        let rows = spec.map_or(RowShape::LEAST, RowShape::of);
        let per_env = worker_bytes_per_env(params, spec);
        PoolEstimate {
            region: region_bytes(&at_most(params, num_envs), num_envs, rows),
            workers: num_envs.saturating_mul(per_env),
            per_env,
        }
    }

    /// Both parts together, bytes.
    pub fn total(&self) -> u64 {
        self.region.saturating_add(self.workers)
    }
}

/// What a pool of `params` needs, before any worker starts: the least region any spec
/// gives and the workers' env state. Refused when it is more than the room left.
pub(crate) fn check_before_start(params: &PoolParams, room: &MemoryRoom) -> Result<(), BuildError> {
    let per_env = worker_bytes_per_env(params, None);
    let need = |n: u64| PoolEstimate::new(params, n, None).total();
    check(params, room, per_env, need, |n| PoolEstimate::new(params, n, None).region)
}

/// What the region of `params` with `spec` needs, once the workers have built their envs
/// (their state is held already, and counted in the room): refused when it is more than
/// the room left. Called before the layout is computed, so its sizes cannot overflow.
pub(crate) fn check_region(params: &PoolParams, spec: &EnvSpec, room: &MemoryRoom) -> Result<(), BuildError> {
    let rows = RowShape::of(spec);
    let region = |n: u64| region_bytes(&at_most(params, n), n, rows);
    check(params, room, 0, region, region)
}

/// The most envs, from 0 to `num_envs`, whose need fits in `free` bytes: `need(n)` is the
/// bytes `n` envs need, and must not shrink as `n` grows. `num_envs` when it fits, else the
/// largest count that does, by bisection (0 when not even none fits). For the pool's checks
/// and for callers that keep memory of their own per env beside the pool (the `shmenv`
/// CLI adds its action tapes to a [`PoolEstimate`]).
pub fn most_that_fit(num_envs: u64, free: u64, need: impl Fn(u64) -> u64) -> u64 {
    if need(num_envs) <= free {
        return num_envs;
    }
    let (mut lo, mut hi) = (0u64, num_envs);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if need(mid) <= free {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Refuses `need(num_envs)` bytes above the room, naming the most envs that fit.
fn check(
    params: &PoolParams,
    room: &MemoryRoom,
    per_env: u64,
    need: impl Fn(u64) -> u64,
    region: impl Fn(u64) -> u64,
) -> Result<(), BuildError> {
    let Some(free) = room.room() else { return Ok(()) };
    let n = params.num_envs as u64;
    let fits = most_that_fit(n, free, need);
    if fits == n {
        return Ok(());
    }
    Err(BuildError::NotEnoughMemory {
        num_envs: params.num_envs,
        region: region(n),
        workers: n.saturating_mul(per_env),
        per_env,
        room: room.clone(),
        fits: fits as usize,
    })
}

/// `params` for a pool of `n` envs (its batch no larger than `n`).
fn at_most(params: &PoolParams, n: u64) -> PoolParams {
    let n = n as usize;
    PoolParams {
        num_envs: n,
        batch_size: if params.batch_size < params.num_envs { params.batch_size.min(n) } else { n },
        env_id: String::new(),
        config: serde_json::Value::Null,
        ..params.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::memory::CgroupLimit;
    use crate::protocol::Layout;
    use crate::spec::{DType, Space};

    fn params(env_id: &str, num_envs: usize) -> PoolParams {
        crate::PoolBuilder::default_params(env_id, num_envs, 2)
    }

    fn room(bytes: u64) -> MemoryRoom {
        MemoryRoom {
            mem_available: Some(64 << 30),
            cgroup: Some(CgroupLimit {
                path: "/sys/fs/cgroup/memory/j".into(),
                version: 1,
                max: bytes,
                current: 0,
            }),
        }
    }

    fn cartpole() -> EnvSpec {
        EnvSpec::single(Space::boxed(DType::F32, &[4], -1.0, 1.0), Space::discrete(2))
    }

    #[test]
    fn the_region_estimate_bounds_the_layout_from_above() {
        let spec = EnvSpec::single(Space::boxed(DType::U8, &[3, 5], 0.0, 255.0), Space::discrete(3));
        for (n, batch, depth, autoreset, trace) in [
            (1, 1, 2, AutoReset::NextStep, false),
            (1000, 1000, 2, AutoReset::SameStep, true),
            (1000, 64, 5, AutoReset::NextStep, false),
            (77, 10, 64, AutoReset::SameStep, true),
        ] {
            let p = PoolParams { batch_size: batch, ring_depth: depth, autoreset, trace, ..params("x", n) };
            let exact = Layout::compute(&spec, &p).total_size as u64;
            let estimate = region_bytes(&p, n as u64, RowShape::of(&spec));
            let arrays = 1 + 2 * (depth as u64 + 1) * 10;
            assert!(
                estimate >= exact && estimate <= exact + arrays * 128 + 4096,
                "{n} {batch}: {estimate} {exact}"
            );
            assert!(region_bytes(&p, n as u64, RowShape::LEAST) <= estimate, "{n} {batch}");
        }
    }

    #[test]
    fn absurd_counts_and_rows_saturate_instead_of_overflowing() {
        let huge = RowShape { obs: 1 << 30, obs_arrays: 1, action: 1 << 30 };
        let p = PoolParams { ring_depth: 64, batch_size: (1 << 30) - 2, ..params("x", (1 << 30) - 1) };
        assert_eq!(region_bytes(&p, (1 << 30) - 1, huge), u64::MAX);
        assert_eq!(region_bytes(&p, u64::MAX, RowShape::LEAST), u64::MAX);
        let endless = MemoryRoom { mem_available: None, ..room(u64::MAX - 1) };
        let err = check_before_start(&params("CartPole-v1", (1 << 30) - 1), &endless);
        assert!(err.is_ok(), "{err:?}");
        let err = check_before_start(&params("CartPole-v1", (1 << 30) - 1), &room(1 << 30)).unwrap_err();
        assert!(matches!(err, BuildError::NotEnoughMemory { fits, .. } if fits < 1 << 23), "{err}");
    }

    #[test]
    fn too_many_envs_are_refused_with_the_count_that_fits() {
        let p = params("CartPole-v1", 100_000_000);
        let err = check_before_start(&p, &room(2 << 30)).unwrap_err();
        let BuildError::NotEnoughMemory { num_envs, region, workers, per_env, fits, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!((*num_envs, *per_env), (100_000_000, SHARD_BYTES_PER_ENV + 80));
        assert_eq!(*workers, 100_000_000 * per_env);
        assert!(*region >= 100_000_000 * 55, "{region}");
        // The count that fits fits, and one more does not.
        let fits = *fits;
        assert!(fits > 1_000_000, "{fits}");
        assert!(check_before_start(&params("CartPole-v1", fits), &room(2 << 30)).is_ok());
        assert!(check_before_start(&params("CartPole-v1", fits + 1), &room(2 << 30)).is_err());
        let message = err.to_string();
        for part in [
            "for 100000000 envs",
            "cgroup v1 /sys/fs/cgroup/memory/j allows 2.00 GiB (memory.limit_in_bytes)",
            &format!("At most {fits} envs fit"),
            "use fewer envs",
            "raise the memory limit",
        ] {
            assert!(message.contains(part), "{part:?} missing: {message}");
        }
        // No room figure at all: nothing to check against.
        assert!(check_before_start(&p, &MemoryRoom::default()).is_ok());
    }

    #[test]
    fn unknown_envs_and_plugins_get_the_default_and_their_rows() {
        let spec = cartpole();
        let builtin = params("CartPole-v1", 10);
        assert_eq!(worker_bytes_per_env(&builtin, Some(&spec)), SHARD_BYTES_PER_ENV + 80);
        let plugin = PoolParams { plugin: Some("/x.so".into()), ..builtin.clone() };
        assert_eq!(worker_bytes_per_env(&plugin, None), SHARD_BYTES_PER_ENV + DEFAULT_ENV_BYTES);
        assert_eq!(worker_bytes_per_env(&plugin, Some(&spec)), SHARD_BYTES_PER_ENV + DEFAULT_ENV_BYTES + 24);
        let python = params(PYTHON_ENV_ID, 10);
        assert_eq!(worker_bytes_per_env(&python, None), SHARD_BYTES_PER_ENV + PYTHON_ENV_BYTES);
    }

    #[test]
    fn the_most_that_fit_is_the_largest_count_whose_need_fits() {
        let need = |n: u64| 100u64.saturating_add(n.saturating_mul(7));
        assert_eq!(most_that_fit(1000, 1000, need), (1000 - 100) / 7);
        assert!(need(128) <= 1000 && need(129) > 1000);
        // A count that fits is itself; with nothing left, none fits.
        assert_eq!(most_that_fit(50, 1000, need), 50);
        assert_eq!(most_that_fit(1000, 99, need), 0);
        assert_eq!(most_that_fit(0, 0, |_| 0), 0);
        // Saturating needs of absurd counts: bisection over the whole range.
        assert_eq!(most_that_fit(u64::MAX, u64::MAX - 1, need), (u64::MAX - 1 - 100) / 7);
    }

    #[test]
    fn the_region_check_counts_the_spec() {
        let p = params("CartPole-v1", 10_000_000);
        let spec = cartpole();
        let need = region_bytes(&p, 10_000_000, RowShape::of(&spec));
        assert!(check_region(&p, &spec, &room(need)).is_ok());
        let err = check_region(&p, &spec, &room(need - 1)).unwrap_err();
        let BuildError::NotEnoughMemory { workers: 0, fits, region, .. } = err else { panic!("{err}") };
        assert!(fits < 10_000_000 && fits > 9_000_000 && region == need, "{fits}");
    }
}
