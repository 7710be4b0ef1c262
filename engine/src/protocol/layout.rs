//! The data part's layout: where every array and every ring word lives, computed from the
//! spec and the parameters (never read from the region).

use super::{
    bootstrap_size, round_up, trace, AutoReset, PoolParams, CACHE_LINE, LAYOUT_VERSION, PAGE, SYNC_BLOCKS,
};
use crate::spec::EnvSpec;
use std::ops::Range;

/// The envs that worker `w` hosts: a contiguous shard, sizes differing by at most one.
pub fn shard(w: usize, num_envs: usize, num_workers: usize) -> Range<usize> {
    (w * num_envs / num_workers)..((w + 1) * num_envs / num_workers)
}

/// Where one `[num_envs, ...]` array lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArraySlot {
    /// Offset of row 0.
    pub offset: usize,
    /// Bytes of one row.
    pub row_bytes: usize,
}

impl ArraySlot {
    /// Byte range of rows `rows`.
    pub fn rows(&self, rows: Range<usize>) -> Range<usize> {
        self.offset + rows.start * self.row_bytes..self.offset + rows.end * self.row_bytes
    }
}

/// The result arrays of one block of rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultBlock {
    /// Rows in the block.
    pub rows: usize,
    /// Observation arrays, in spec order.
    pub obs: Vec<ArraySlot>,
    /// Final observations (empty unless `AutoReset::SameStep`).
    pub final_obs: Vec<ArraySlot>,
    /// The result columns, indexed by [`Column`] (see [`ResultBlock::column`]).
    pub columns: [ArraySlot; Column::COUNT],
}

impl ResultBlock {
    /// Where column `c` lives.
    #[inline]
    pub fn column(&self, c: Column) -> &ArraySlot {
        &self.columns[c as usize]
    }

    /// Every array of the block: observations, final observations, result columns.
    pub(crate) fn slots(&self) -> impl Iterator<Item = &ArraySlot> {
        self.obs.iter().chain(self.final_obs.iter()).chain(self.columns.iter())
    }
}

/// What a result column's elements are (all native-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnKind {
    /// f32.
    F32,
    /// f64.
    F64,
    /// A u8 flag, 0 or 1 when written by a well-behaved worker (read as bytes, see `Flags`).
    Flag,
    /// A u32 count or id.
    Count,
}

impl ColumnKind {
    /// Bytes of one element.
    pub const fn size(self) -> usize {
        match self {
            ColumnKind::F32 | ColumnKind::Count => 4,
            ColumnKind::F64 => 8,
            ColumnKind::Flag => 1,
        }
    }
}

/// The per-row scalar result columns, declared once: the layout, the worker's rows, the
/// batch views and the Python results all iterate [`Column::ALL`]. Adding a column is an
/// entry here (with its kind and name) plus its accessor and the shard code that writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Column {
    /// The step's reward.
    Rewards,
    /// Whether the episode terminated at this step.
    Terminated,
    /// Whether the episode was truncated at this step.
    Truncated,
    /// Return of the episode that ended at this step (0 elsewhere).
    EpisodeReturn,
    /// Length of the episode that ended at this step (0 elsewhere).
    EpisodeLength,
    /// Steps since the env's last reset.
    ElapsedSteps,
    /// The env of each row.
    EnvIds,
}

impl Column {
    /// Every column, in layout order.
    pub const ALL: [Column; 7] = [
        Column::Rewards,
        Column::Terminated,
        Column::Truncated,
        Column::EpisodeReturn,
        Column::EpisodeLength,
        Column::ElapsedSteps,
        Column::EnvIds,
    ];
    /// Number of columns.
    pub const COUNT: usize = Column::ALL.len();

    /// Its elements.
    pub const fn kind(self) -> ColumnKind {
        match self {
            Column::Rewards => ColumnKind::F32,
            Column::Terminated | Column::Truncated => ColumnKind::Flag,
            Column::EpisodeReturn => ColumnKind::F64,
            Column::EpisodeLength | Column::ElapsedSteps | Column::EnvIds => ColumnKind::Count,
        }
    }

    /// Its name (as in the docs; the `Batch` accessors are named after it).
    pub const fn name(self) -> &'static str {
        match self {
            Column::Rewards => "rewards",
            Column::Terminated => "terminated",
            Column::Truncated => "truncated",
            Column::EpisodeReturn => "episode_return",
            Column::EpisodeLength => "episode_length",
            Column::ElapsedSteps => "elapsed_steps",
            Column::EnvIds => "env_ids",
        }
    }
}

const _: () = {
    let mut i = 0;
    while i < Column::COUNT {
        assert!(Column::ALL[i] as usize == i, "Column::ALL is in declaration order");
        i += 1;
    }
};

/// Where the async ring's control words live (async mode only).
///
/// Global row `g` (claimed with `fetch_add` on the claim counter) belongs to batch
/// `q = g / batch_size`, which is written into block `q % depth` at row `g % batch_size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingLayout {
    /// Rows per batch.
    pub batch_size: usize,
    /// Number of blocks.
    pub depth: usize,
    /// The claim counter (u64, own cache line).
    pub claim_counter: usize,
    /// Per block: a semaphore (count, want) that workers post once per committed row.
    pub committed: Vec<usize>,
    /// Per block: a gate (value, sleepers): the batch number `q` the block may receive.
    pub ready_for: Vec<usize>,
    /// Per worker queues of env ids to run, `[num_envs]` u32: worker `w` uses the entries
    /// of its shard as a ring of `shard.len()` slots.
    pub queue: ArraySlot,
    /// Beside each queue slot, `[num_envs]` u64: the global row a `FILL` entry writes.
    pub fill_rows: ArraySlot,
}

/// Offsets of every array of the data part. Computed, never read from the region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Number of envs.
    pub num_envs: usize,
    /// Number of workers.
    pub num_workers: usize,
    /// Where the data part starts.
    pub bootstrap_size: usize,
    /// Actions, `[num_envs]` rows, row = env id.
    pub actions: ArraySlot,
    /// Sync mode: [`SYNC_BLOCKS`] blocks of `num_envs` rows, row = env id, used in turn.
    /// Async mode: `depth` blocks of `batch_size` rows, in the order envs finished.
    pub blocks: Vec<ResultBlock>,
    /// Async mode only: the ring's control words and the work queues.
    pub ring: Option<RingLayout>,
    /// With tracing on: one row per worker, its span ring ([`trace`]).
    pub trace: Option<ArraySlot>,
    /// Bytes of the whole region.
    pub total_size: usize,
    /// FNV-1a hash of the version, the spec's canonical JSON and every offset.
    pub hash: u64,
}

impl Layout {
    /// Computes the layout for `params` and the agreed `spec`.
    pub fn compute(spec: &EnvSpec, params: &PoolParams) -> Layout {
        let n = params.num_envs;
        let mut cursor = bootstrap_size(params.num_workers);
        let mut array = |rows: usize, row_bytes: usize| {
            let slot = ArraySlot { offset: cursor, row_bytes };
            cursor = round_up(cursor + row_bytes * rows, CACHE_LINE);
            slot
        };
        let actions = array(n, spec.action.value_bytes());
        let is_async = params.batch_size < n;
        let (rows, count) = if is_async { (params.batch_size, params.ring_depth) } else { (n, SYNC_BLOCKS) };
        let same_step = params.autoreset == AutoReset::SameStep;
        let blocks: Vec<ResultBlock> = (0..count)
            .map(|_| ResultBlock {
                rows,
                obs: spec.observations.iter().map(|o| array(rows, o.space.value_bytes())).collect(),
                final_obs: if same_step {
                    spec.observations.iter().map(|o| array(rows, o.space.value_bytes())).collect()
                } else {
                    Vec::new()
                },
                columns: Column::ALL.map(|c| array(rows, c.kind().size())),
            })
            .collect();
        let ring = is_async.then(|| RingLayout {
            batch_size: params.batch_size,
            depth: params.ring_depth,
            claim_counter: array(1, CACHE_LINE).offset,
            committed: (0..params.ring_depth).map(|_| array(1, CACHE_LINE).offset).collect(),
            ready_for: (0..params.ring_depth).map(|_| array(1, CACHE_LINE).offset).collect(),
            queue: array(n, 4),
            fill_rows: array(n, 8),
        });
        let trace = params.trace.then(|| array(params.num_workers, trace::ROW_BYTES));
        let total_size = round_up(cursor, PAGE);
        let mut layout = Layout {
            num_envs: n,
            num_workers: params.num_workers,
            bootstrap_size: bootstrap_size(params.num_workers),
            actions,
            blocks,
            ring,
            trace,
            total_size,
            hash: 0,
        };
        let mut h = Fnv::new();
        h.write(&LAYOUT_VERSION.to_le_bytes());
        h.write(spec.to_json().to_string().as_bytes());
        for slot in layout.slots() {
            h.write(&(slot.offset as u64).to_le_bytes());
            h.write(&(slot.row_bytes as u64).to_le_bytes());
        }
        if let Some(r) = &layout.ring {
            for &w in [r.batch_size, r.depth, r.claim_counter].iter().chain(&r.committed).chain(&r.ready_for)
            {
                h.write(&(w as u64).to_le_bytes());
            }
        }
        h.write(&(total_size as u64).to_le_bytes());
        layout.hash = h.finish();
        layout
    }

    fn slots(&self) -> impl Iterator<Item = &ArraySlot> {
        [&self.actions]
            .into_iter()
            .chain(self.blocks.iter().flat_map(|b| b.slots()))
            .chain(self.ring.iter().flat_map(|r| [&r.queue, &r.fill_rows]))
            .chain(self.trace.iter())
    }

    /// Every byte range of the data part: arrays (with their row counts) and ring words.
    pub fn byte_ranges(&self) -> Vec<Range<usize>> {
        let mut out = vec![self.actions.rows(0..self.num_envs)];
        for b in &self.blocks {
            out.extend(b.slots().map(|s| s.rows(0..b.rows)));
        }
        if let Some(t) = &self.trace {
            out.push(t.rows(0..self.num_workers));
        }
        if let Some(r) = &self.ring {
            out.push(r.queue.rows(0..self.num_envs));
            out.push(r.fill_rows.rows(0..self.num_envs));
            for &w in [r.claim_counter].iter().chain(&r.committed).chain(&r.ready_for) {
                out.push(w..w + CACHE_LINE);
            }
        }
        out
    }
}

struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{DType, Space};

    fn params(n: usize, w: usize, autoreset: AutoReset) -> PoolParams {
        PoolParams {
            env_id: "X".into(),
            config: serde_json::json!({}),
            num_envs: n,
            num_workers: w,
            autoreset,
            max_episode_steps: None,
            wait: crate::sync::WaitStrategy::Auto,
            batch_size: n,
            ring_depth: 2,
            stats: true,
            trace: false,
            restart: false,
            plugin: None,
            cores: 0,
            trainer_shard: false,
        }
    }

    #[test]
    fn shards_are_contiguous_balanced_and_cover_all_envs() {
        for n in 1..40 {
            for w in 1..=n.min(9) {
                let mut next = 0;
                for i in 0..w {
                    let s = shard(i, n, w);
                    assert_eq!(s.start, next);
                    assert!(s.len() == n / w || s.len() == n / w + 1);
                    next = s.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn arrays_are_aligned_disjoint_and_inside_the_region() {
        let spec = EnvSpec {
            observations: vec![
                crate::spec::ObsArray {
                    name: "a".into(),
                    space: Space::boxed(DType::U8, &[3, 5], 0.0, 255.0),
                    info: false,
                },
                crate::spec::ObsArray { name: "b".into(), space: Space::discrete(4), info: false },
            ],
            action: Space::boxed(DType::F32, &[3], -1.0, 1.0),
            max_episode_steps: None,
            single_key_dict: false,
        };
        let sync = Layout::compute(&spec, &params(7, 3, AutoReset::SameStep));
        let mut async_params = params(7, 3, AutoReset::SameStep);
        async_params.batch_size = 3;
        async_params.ring_depth = 4;
        let ring = Layout::compute(&spec, &async_params);
        for (l, count) in
            [(&sync, 1 + SYNC_BLOCKS * (2 + 2 + 7)), (&ring, 1 + 4 * (2 + 2 + 7) + 2 + 1 + 4 + 4)]
        {
            let mut ranges = l.byte_ranges();
            assert_eq!(ranges.len(), count);
            ranges.sort_by_key(|r| r.start);
            assert!(ranges[0].start >= bootstrap_size(3));
            for pair in ranges.windows(2) {
                assert!(pair[0].end <= pair[1].start, "{pair:?} overlap");
            }
            assert!(ranges.iter().all(|r| r.start % CACHE_LINE == 0 && r.end <= l.total_size));
            assert_eq!(l.total_size % PAGE, 0);
        }
        assert_eq!(sync.blocks[0].obs[0].row_bytes, 15);
        assert_eq!((ring.blocks.len(), ring.blocks[0].rows), (4, 3));
        assert_ne!(sync.hash, ring.hash);
        let l = sync;
        // The hash depends on the spec and the parameters.
        let other = Layout::compute(&spec, &params(7, 3, AutoReset::NextStep));
        assert_ne!(l.hash, other.hash);
    }
}
