//! The `Env` trait: what a worker steps. An env advances its own state in `reset`/`step`,
//! then writes its observation straight into a row of the shared region in `observe`
//! (through [`ObsOut`]); actions are read from the region through [`ActionIn`]. Nothing is
//! copied or serialized in between. Splitting "advance" from "observe" lets the host pick
//! the row after the step finished: in async mode the row is the next free one of the batch
//! being filled, so batches hold the envs that finished first.

use shmenv_engine::spec::{Element, EnvSpec, Space};

/// An environment hosted by a worker process.
///
/// `observe` must write every element of every observation array (rows are reused; an
/// element not written keeps an older value). Episode bookkeeping (returns, lengths, time
/// limits, auto-reset) is done by the host.
///
/// ```
/// use shmenv_worker::{ActionIn, Env, ObsOut, Transition};
/// use shmenv_engine::{DType, EnvSpec, Space};
///
/// /// Counts up; the action is added to the counter.
/// struct Counter { n: f32 }
///
/// impl Env for Counter {
///     fn spec(&self) -> EnvSpec {
///         EnvSpec::single(Space::boxed(DType::F32, &[1], 0.0, 1e9), Space::discrete(3))
///     }
///     fn reset(&mut self, _seed: Option<u64>) {
///         self.n = 0.0;
///     }
///     fn step(&mut self, action: ActionIn<'_>) -> Transition {
///         self.n += action.discrete() as f32;
///         Transition { reward: 1.0, terminated: self.n > 10.0, truncated: false }
///     }
///     fn observe(&self, obs: &mut ObsOut<'_, '_>) {
///         obs.array::<f32>(0)[0] = self.n;
///     }
/// }
/// ```
pub trait Env: Send {
    /// The env's spaces. Must depend only on the env's id and config, and must not
    /// change over the env's life.
    fn spec(&self) -> EnvSpec;

    /// Starts an episode. `seed` is `Some` when the trainer reseeds (env `i` gets
    /// `base + i`), `None` to continue the env's stream.
    fn reset(&mut self, seed: Option<u64>);

    /// Applies one (already validated) action.
    fn step(&mut self, action: ActionIn<'_>) -> Transition;

    /// Writes the current observation into `obs` (the env's row in shared memory).
    fn observe(&self, obs: &mut ObsOut<'_, '_>);
}

/// What one step returned besides the observation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Transition {
    /// The reward.
    pub reward: f32,
    /// The episode reached a terminal state.
    pub terminated: bool,
    /// The episode was cut short by the env itself (time limits are added by the host).
    pub truncated: bool,
}

/// The observation rows of one env: one `&mut [T]` per observation array, straight in
/// shared memory.
pub struct ObsOut<'a, 'b> {
    arrays: &'a mut [&'b mut [u8]],
    row_bytes: &'a [usize],
    row: usize,
}

impl<'a, 'b> ObsOut<'a, 'b> {
    /// The rows of env `row` in `arrays` (each array `[rows, row_bytes[k]]`).
    #[inline]
    pub fn new(arrays: &'a mut [&'b mut [u8]], row_bytes: &'a [usize], row: usize) -> Self {
        ObsOut { arrays, row_bytes, row }
    }

    /// Observation array `k` (its index in [`EnvSpec::observations`]) as `&mut [T]`.
    ///
    /// # Panics
    /// If `k` is out of range or `T` is not the array's dtype: a bug in the env, which the
    /// host catches and reports as `EnvPanicked`.
    #[inline]
    pub fn array<T: Element>(&mut self, k: usize) -> &mut [T] {
        let rb = self.row_bytes[k];
        let bytes = &mut self.arrays[k][self.row * rb..(self.row + 1) * rb];
        bytemuck::try_cast_slice_mut(bytes).unwrap_or_else(|e| {
            panic!("observation array {k} is not a [{}] row ({e:?}): check the env's spec", T::DTYPE)
        })
    }

    /// This env's row of every observation array, as bytes, in spec order (for envs that
    /// write raw rows, such as plugins: each row is aligned for its array's dtype).
    #[inline]
    pub fn rows_mut(&mut self) -> impl Iterator<Item = &mut [u8]> + use<'_, 'a, 'b> {
        let row = self.row;
        self.arrays.iter_mut().zip(self.row_bytes).map(move |(a, &rb)| &mut a[row * rb..(row + 1) * rb])
    }

    /// Number of observation arrays.
    pub fn len(&self) -> usize {
        self.arrays.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.arrays.is_empty()
    }
}

/// One env's action row, validated by the trainer against the action space.
#[derive(Clone, Copy, Debug)]
pub struct ActionIn<'a> {
    bytes: &'a [u8],
    space: &'a Space,
}

impl<'a> ActionIn<'a> {
    /// An action row of `space`.
    pub fn new(bytes: &'a [u8], space: &'a Space) -> Self {
        ActionIn { bytes, space }
    }

    /// The action as a slice of its dtype (`i64` for Discrete/MultiDiscrete, `i8` for
    /// MultiBinary, the Box's dtype for Box).
    ///
    /// # Panics
    /// If `T` is not the action space's dtype (a bug in the env).
    #[inline]
    pub fn as_slice<T: Element>(&self) -> &'a [T] {
        assert_eq!(
            T::DTYPE,
            self.space.dtype(),
            "the action space {} stores {}",
            self.space,
            self.space.dtype()
        );
        bytemuck::cast_slice(self.bytes)
    }

    /// The action's bytes, as the trainer wrote them (the row of the action array).
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The value of a `Discrete` action.
    #[inline]
    pub fn discrete(&self) -> i64 {
        self.as_slice::<i64>()[0]
    }

    /// The action space.
    pub fn space(&self) -> &'a Space {
        self.space
    }
}
