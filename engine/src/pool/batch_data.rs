//! `BatchData`: the borrowed views of one batch behind `Batch`.

use crate::error::ViewError;
use crate::protocol::{self};
use crate::region::Region;
use crate::spec::{Element, EnvSpec};
use std::ops::Range;

/// Borrowed views of one batch (the fields of [`Batch`]).
#[derive(Debug)]
pub(crate) struct BatchData<'a> {
    pub(crate) spec: &'a EnvSpec,
    pub(super) region: &'a Region,
    pub(super) block: &'a protocol::ResultBlock,
    pub(super) rows: Range<usize>,
    pub(crate) env_ids: &'a [u32],
    pub(crate) rewards: &'a [f32],
    pub(crate) terminated: &'a [u8],
    pub(crate) truncated: &'a [u8],
    pub(crate) episode_return: &'a [f64],
    pub(crate) episode_length: &'a [u32],
    pub(crate) elapsed_steps: &'a [u32],
    pub(crate) restarted: &'a [usize],
}

impl<'a> BatchData<'a> {
    pub(crate) fn obs<T: Element>(
        &self,
        name: &str,
        final_obs: bool,
    ) -> Result<crate::ArrayView<'a, T>, ViewError> {
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
        let mut shape = vec![self.rows.len()];
        shape.extend(space.shape());
        // SAFETY: same argument as in `Pool::batch_view`: the views borrow the pool, and no
        // worker writes result rows between its completion post and the next command.
        let data = unsafe { self.region.slice::<T>(rows.start, rows.len() / T::DTYPE.size()) };
        Ok(crate::ArrayView::new(data, shape))
    }

    /// Observation array `k` (spec order) as bytes; `None` if there is no such array.
    pub(crate) fn obs_bytes(&self, k: usize, final_obs: bool) -> Option<&'a [u8]> {
        let slot = if final_obs { self.block.final_obs.get(k)? } else { self.block.obs.get(k)? };
        let rows = slot.rows(self.rows.clone());
        // SAFETY: as in `obs`.
        Some(unsafe { self.region.slice::<u8>(rows.start, rows.len()) })
    }
}
