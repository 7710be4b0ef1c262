//! Typed, shaped views of a batch, borrowed straight from the region.

use crate::error::ViewError;
use crate::protocol::{Column, ResultBlock};
use crate::region::Region;
use crate::spec::{Element, EnvSpec};
use std::ops::Range;

/// A read-only `[rows, ...shape]` array in shared memory.
#[derive(Clone, Debug)]
pub struct ArrayView<'a, T> {
    data: &'a [T],
    shape: Vec<usize>,
}

impl<'a, T: Element> ArrayView<'a, T> {
    pub(crate) fn new(data: &'a [T], shape: Vec<usize>) -> Self {
        debug_assert_eq!(data.len(), shape.iter().product::<usize>());
        ArrayView { data, shape }
    }

    /// Full shape, batch dimension first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of rows (the batch dimension).
    pub fn len(&self) -> usize {
        self.shape[0]
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.shape[0] == 0
    }

    /// All elements, row-major.
    pub fn as_slice(&self) -> &'a [T] {
        self.data
    }

    /// Row `i` (one env's value), flattened.
    pub fn row(&self, i: usize) -> &'a [T] {
        let w = self.row_len();
        &self.data[i * w..(i + 1) * w]
    }

    /// Elements per row.
    pub fn row_len(&self) -> usize {
        self.shape[1..].iter().product()
    }

    /// Iterates over rows.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = &'a [T]> + 'a {
        let w = self.row_len().max(1);
        let data = self.data;
        let n = self.shape[0];
        (0..n).map(move |i| &data[i * w..(i + 1) * w])
    }
}

/// A read-only array of flags stored as bytes (any non-zero byte reads as `true`, so no
/// byte written by a worker can make an invalid `bool`).
#[derive(Clone, Copy, Debug)]
pub struct Flags<'a>(&'a [u8]);

impl<'a> Flags<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Flags(bytes)
    }

    /// Flag of row `i`.
    pub fn get(&self, i: usize) -> bool {
        self.0[i] != 0
    }

    /// Number of flags.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no flags.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Iterates over the flags.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = bool> + 'a {
        self.0.iter().map(|&b| b != 0)
    }

    /// Whether any flag is set.
    pub fn any(&self) -> bool {
        self.0.iter().any(|&b| b != 0)
    }

    /// The flags as owned bools.
    pub fn to_vec(&self) -> Vec<bool> {
        self.iter().collect()
    }

    /// The raw bytes (0 or non-zero).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

/// One finished episode reported in a batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Episode {
    /// The env.
    pub env_id: usize,
    /// Sum of its rewards.
    pub episode_return: f64,
    /// Its number of steps.
    pub length: u32,
}

/// The result of `reset` or `step`: views over the region, valid until the next call on
/// the pool (the borrow checker enforces it).
#[derive(Debug)]
pub struct Batch<'a> {
    pub(crate) view: BatchData<'a>,
}

impl<'a> Batch<'a> {
    /// Number of rows (envs in this batch).
    pub fn len(&self) -> usize {
        self.view.rows.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.view.rows.is_empty()
    }

    /// The env spec (names, dtypes and shapes of the arrays).
    pub fn spec(&self) -> &'a crate::EnvSpec {
        self.view.spec
    }

    /// The env of each row (in sync mode row `i` is env `i`; in async mode rows are in
    /// the order envs finished).
    pub fn env_ids(&self) -> &'a [u32] {
        self.view.column(Column::EnvIds)
    }

    /// Observation array `name`, shaped `[rows, ...shape]`.
    pub fn obs<T: Element>(&self, name: &str) -> Result<ArrayView<'a, T>, ViewError> {
        self.view.obs(name, false)
    }

    /// The observation array of a single-array env (named `"obs"`), or the first array.
    pub fn observations<T: Element>(&self) -> Result<ArrayView<'a, T>, ViewError> {
        let name = self.view.spec.observations[0].name.clone();
        self.view.obs(&name, false)
    }

    /// With `AutoReset::SameStep`: the last observation of the episode that ended at this
    /// step, for rows where `terminated || truncated` (other rows hold stale data).
    pub fn final_obs<T: Element>(&self, name: &str) -> Result<ArrayView<'a, T>, ViewError> {
        self.view.obs(name, true)
    }

    /// Observation array `k` (in the order of `spec().observations`) as raw bytes: rows of
    /// the space's dtype, row-major, in native byte order. For bindings that wrap the memory
    /// in arrays of their own (numpy); `None` if there is no array `k`.
    pub fn obs_bytes(&self, k: usize) -> Option<&'a [u8]> {
        self.view.obs_bytes(k, false)
    }

    /// [`Batch::final_obs`] as raw bytes, like [`Batch::obs_bytes`]; `None` unless the pool
    /// runs `AutoReset::SameStep`.
    pub fn final_obs_bytes(&self, k: usize) -> Option<&'a [u8]> {
        self.view.obs_bytes(k, true)
    }

    /// Result column `c` as raw bytes: rows of its kind, native byte order. For bindings
    /// that build their arrays by iterating [`Column::ALL`] (numpy).
    pub fn column_bytes(&self, c: Column) -> &'a [u8] {
        self.view.columns[c as usize]
    }

    /// Rewards.
    pub fn rewards(&self) -> &'a [f32] {
        self.view.column(Column::Rewards)
    }

    /// Whether each env's episode terminated at this step.
    pub fn terminated(&self) -> Flags<'a> {
        Flags::new(self.view.column(Column::Terminated))
    }

    /// Whether each env's episode was truncated at this step.
    pub fn truncated(&self) -> Flags<'a> {
        Flags::new(self.view.column(Column::Truncated))
    }

    /// Return of the episode that ended at this step where terminated or truncated, 0 elsewhere.
    pub fn episode_returns(&self) -> &'a [f64] {
        self.view.column(Column::EpisodeReturn)
    }

    /// Length of the episode that ended at this step where terminated or truncated, 0 elsewhere.
    pub fn episode_lengths(&self) -> &'a [u32] {
        self.view.column(Column::EpisodeLength)
    }

    /// Steps since each env's last reset.
    pub fn elapsed_steps(&self) -> &'a [u32] {
        self.view.column(Column::ElapsedSteps)
    }

    /// Under [`crate::FailurePolicy::Restart`]: the envs whose worker died during this
    /// call and was restarted. Their rows hold the first observation of a new episode and
    /// are marked truncated (the old episode was cut short); empty otherwise.
    pub fn restarted_envs(&self) -> &'a [usize] {
        self.view.restarted
    }

    /// The episodes that ended at this step.
    pub fn episodes(&self) -> impl Iterator<Item = Episode> + 'a {
        let (term, trunc, ret, len, ids) = (
            self.terminated().as_bytes(),
            self.truncated().as_bytes(),
            self.episode_returns(),
            self.episode_lengths(),
            self.env_ids(),
        );
        (0..ids.len()).filter(move |&i| term[i] != 0 || trunc[i] != 0).map(move |i| Episode {
            env_id: ids[i] as usize,
            episode_return: ret[i],
            length: len[i],
        })
    }
}

/// Borrowed views of one batch (the fields of [`Batch`]).
#[derive(Debug)]
pub(crate) struct BatchData<'a> {
    pub(crate) spec: &'a EnvSpec,
    pub(crate) region: &'a Region,
    pub(crate) block: &'a ResultBlock,
    pub(crate) rows: Range<usize>,
    /// The result columns' rows as bytes, indexed by [`Column`].
    pub(crate) columns: [&'a [u8]; Column::COUNT],
    pub(crate) restarted: &'a [usize],
}

impl<'a> BatchData<'a> {
    /// Column `c` as elements of its kind (`T` must be its `ColumnKind`'s type;
    /// the rows are aligned to 128 bytes and hold whole elements).
    #[inline]
    pub(crate) fn column<T: bytemuck::Pod>(&self, c: Column) -> &'a [T] {
        debug_assert_eq!(std::mem::size_of::<T>(), c.kind().size(), "{c:?}");
        bytemuck::cast_slice(self.columns[c as usize])
    }

    pub(crate) fn obs<T: Element>(&self, name: &str, final_obs: bool) -> Result<ArrayView<'a, T>, ViewError> {
        let k = self.spec.obs_index(name).ok_or_else(|| ViewError::UnknownName {
            name: name.into(),
            available: self.spec.observations.iter().map(|o| o.name.clone()).collect(),
        })?;
        let slot = if final_obs {
            self.block.final_obs.get(k).ok_or(ViewError::NoFinalObs)?
        } else {
            &self.block.obs[k]
        };
        let space = &self.spec.observations[k].space;
        if space.dtype() != T::DTYPE {
            return Err(ViewError::WrongDtype {
                name: name.into(),
                actual: space.dtype(),
                requested: T::DTYPE,
            });
        }
        let rows = slot.rows(self.rows.clone());
        let shape = [&[self.rows.len()][..], space.dims()].concat();
        // SAFETY: same argument as in `Pool::batch_view`: the views borrow the pool, and no
        // worker writes result rows between its completion post and the next command.
        let data = unsafe { self.region.slice::<T>(rows.start, rows.len() / T::DTYPE.size()) };
        Ok(ArrayView::new(data, shape))
    }

    /// Observation array `k` (spec order) as bytes; `None` if there is no such array.
    pub(crate) fn obs_bytes(&self, k: usize, final_obs: bool) -> Option<&'a [u8]> {
        let slot = if final_obs { self.block.final_obs.get(k)? } else { self.block.obs.get(k)? };
        let rows = slot.rows(self.rows.clone());
        // SAFETY: as in `obs`.
        Some(unsafe { self.region.slice::<u8>(rows.start, rows.len()) })
    }
}
