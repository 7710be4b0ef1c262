//! Owned result arrays handed out again once the caller has let go of them: the default
//! (`copy=True`) results are fresh arrays the caller owns, and an array whose only
//! reference is the extension's own is one nobody can see change. Refilling it saves
//! making the array object and, for large observations, fresh pages to fault in.

use crate::views::{self, Refill};
use numpy::PyArrayDescr;
use pyo3::prelude::*;
use shmenv_engine::protocol::Column;

/// Arrays kept per kind of result array: enough for the common loop, where the caller
/// still holds the last batch's arrays while the next batch is made.
const KEEP: usize = 3;

/// Which result array an array was made for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Slot {
    /// A result column.
    Column(Column),
    /// The rows whose episode ended (terminated or truncated).
    Done,
    /// Observation array `k`.
    Obs(usize),
    /// Final-observation array `k` (SameStep auto-reset).
    FinalObs(usize),
    /// Info array `k` of hosted envs' infos (`info_columns`, which numbers them). Only
    /// the info reader's recycler, which keeps nothing else, holds these: their indices
    /// start at 0.
    Info(usize),
}

impl Slot {
    fn index(self) -> usize {
        match self {
            Slot::Column(c) => c as usize,
            Slot::Done => Column::COUNT,
            Slot::Obs(k) => Column::COUNT + 1 + 2 * k,
            Slot::FinalObs(k) => Column::COUNT + 2 + 2 * k,
            Slot::Info(k) => k,
        }
    }
}

/// The last [`KEEP`] arrays of each [`Slot`] handed out, to refill when the caller no
/// longer holds them.
#[derive(Default)]
pub(crate) struct Recycler {
    kept: Vec<Vec<Py<PyAny>>>,
}

impl Recycler {
    /// An owned array of `descr` elements shaped `shape` holding a copy of `bytes`, as
    /// [`views::owned`] makes: one made earlier for `slot` that only this recycler still
    /// refers to (refilled), or a new one.
    pub(crate) fn owned<'py>(
        &mut self,
        py: Python<'py>,
        slot: Slot,
        bytes: &[u8],
        descr: Bound<'py, PyArrayDescr>,
        shape: &[usize],
    ) -> PyResult<Bound<'py, PyAny>> {
        let i = slot.index();
        if self.kept.len() <= i {
            self.kept.resize_with(i + 1, Vec::new);
        }
        let kept = &mut self.kept[i];
        let mut k = 0;
        while k < kept.len() {
            let array = kept[k].bind(py);
            match views::refill(array, bytes, &descr, shape) {
                Refill::Refilled => return Ok(array.clone()),
                Refill::InUse => k += 1,
                Refill::Unfit => drop(kept.remove(k)),
            }
        }
        let array = views::owned(py, bytes, descr, shape)?;
        if kept.len() == KEEP {
            kept.remove(0);
        }
        kept.push(array.clone().unbind());
        Ok(array)
    }

    /// Lets go of every kept array (the pool is closing).
    pub(crate) fn clear(&mut self) {
        self.kept.clear();
    }
}
