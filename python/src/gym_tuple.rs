//! Gymnasium's step tuple `(obs, rewards, terminated, truncated, infos)` made by the
//! extension: the infos every pool adds to a batch (env ids and elapsed steps, the
//! episode statistics of ended episodes) for both paths of `shmenv.vector`, and the whole
//! tuple in one call for pools whose batches need nothing from Python
//! (`Pool.step_gym`/`recv_gym`).

use crate::recycle::{Recycler, Slot};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use shmenv_engine::protocol::Column;
use shmenv_engine::Batch;

/// What `ShmVectorEnv` adds to each batch's infos (its `pool_infos` and
/// `episode_stats_key`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct InfoForm<'a> {
    /// `infos["env_id"]` and `infos["elapsed_step"]` on every batch.
    pub(crate) pool_infos: bool,
    /// The key of `{"r": returns, "l": lengths}` (and its `_key` mask, the ended rows) on
    /// batches where an episode ended; empty for none.
    pub(crate) stats_key: &'a str,
}

/// A batch's columns as numpy arrays, asked for one at a time.
pub(crate) trait Columns<'py> {
    /// Column `c` as an owned array.
    fn column(&mut self, c: Column) -> PyResult<Bound<'py, PyAny>>;
    /// The bool array of the rows whose episode ended (terminated or truncated).
    fn done(&mut self) -> PyResult<Bound<'py, PyAny>>;
}

/// The infos `form` asks of a batch, in a new dict: the one source of these keys and
/// of when they are there.
pub(crate) fn pool_infos<'py>(
    py: Python<'py>,
    form: InfoForm<'_>,
    any_done: bool,
    columns: &mut impl Columns<'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let infos = PyDict::new(py);
    if form.pool_infos {
        infos.set_item(intern!(py, "env_id"), columns.column(Column::EnvIds)?)?;
        infos.set_item(intern!(py, "elapsed_step"), columns.column(Column::ElapsedSteps)?)?;
    }
    if any_done && !form.stats_key.is_empty() {
        // Workers write 0 where no episode ended, as RecordEpisodeStatistics does.
        let stats = PyDict::new(py);
        stats.set_item(intern!(py, "r"), columns.column(Column::EpisodeReturn)?)?;
        stats.set_item(intern!(py, "l"), columns.column(Column::EpisodeLength)?)?;
        infos.set_item(form.stats_key, stats)?;
        infos.set_item(format!("_{}", form.stats_key), columns.done()?)?;
    }
    Ok(infos)
}

/// Whether an episode ended in `batch` (a row terminated or truncated).
pub(crate) fn any_done(batch: &Batch<'_>) -> bool {
    batch.terminated().any() || batch.truncated().any()
}

/// Each row's "episode ended" flag (0 or 1) from its terminated and truncated bytes (any
/// non-zero byte is set): the bytes of a bool array.
pub(crate) fn done_bytes(terminated: &[u8], truncated: &[u8]) -> PyResult<Vec<u8>> {
    if terminated.len() != truncated.len() {
        return Err(PyValueError::new_err(format!(
            "internal error: {} terminated flags for {} truncated ones",
            terminated.len(),
            truncated.len()
        )));
    }
    Ok(terminated.iter().zip(truncated).map(|(&t, &u)| u8::from(t != 0 || u != 0)).collect())
}

/// The columns of a batch being made into a tuple: each copied out when asked for, into
/// an array of `recycler`'s.
pub(crate) struct BatchColumns<'a, 'py> {
    py: Python<'py>,
    batch: &'a Batch<'a>,
    recycler: &'a mut Recycler,
}

impl<'py> Columns<'py> for BatchColumns<'_, 'py> {
    fn column(&mut self, c: Column) -> PyResult<Bound<'py, PyAny>> {
        crate::results::column_array(self.py, self.recycler, self.batch, c)
    }
    fn done(&mut self) -> PyResult<Bound<'py, PyAny>> {
        let done = done_bytes(self.batch.terminated().as_bytes(), self.batch.truncated().as_bytes())?;
        self.recycler.owned(self.py, Slot::Done, &done, numpy::dtype::<bool>(self.py), &[done.len()])
    }
}

/// Gymnasium's tuple of `batch`: its one observation array `obs`, rewards, flags and the
/// infos `form` asks for.
pub(crate) fn step_tuple<'py>(
    py: Python<'py>,
    obs: Bound<'py, PyAny>,
    batch: &Batch<'_>,
    form: InfoForm<'_>,
    recycler: &mut Recycler,
) -> PyResult<Bound<'py, PyTuple>> {
    let mut columns = BatchColumns { py, batch, recycler };
    let infos = pool_infos(py, form, any_done(batch), &mut columns)?;
    PyTuple::new(
        py,
        [
            obs,
            columns.column(Column::Rewards)?,
            columns.column(Column::Terminated)?,
            columns.column(Column::Truncated)?,
            infos.into_any(),
        ],
    )
}
