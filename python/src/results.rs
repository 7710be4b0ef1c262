//! `shmenv._shmenv.Results`: one call's batch as numpy arrays, made by the pool's
//! [`ResultsMaker`], which also notes the batch's rows for the info reader of hosted envs.

use crate::errors::CallError;
use crate::gym_tuple::{self, Columns, InfoForm};
use crate::info_columns::InfoReader;
use crate::recycle::{Recycler, Slot};
use crate::views::{self, Lease};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use shmenv_engine::protocol::{Column, ColumnKind};
use shmenv_engine::Batch;
use std::sync::{Arc, Mutex};

/// The observation arrays of one call: `(obs, final_obs)`, one array per observation
/// array of the spec; `final_obs` only under SameStep auto-reset.
type ObsArrays = (Py<PyTuple>, Option<Py<PyTuple>>);

/// One call's results as numpy arrays; `shmenv.vector` turns them into Gymnasium's and
/// SB3's returns. Every array is the caller's (fresh, writable), except the observations
/// of a pool made with `copy=False`: read-only views of the region.
#[pyclass(module = "shmenv._shmenv", name = "Results", frozen, get_all)]
pub(crate) struct Results {
    /// One array per observation array of the spec, `[rows, ...]`.
    obs: Py<PyTuple>,
    /// Under SameStep auto-reset: the last observations of episodes that ended (rows of
    /// other envs are unspecified); `None` otherwise.
    final_obs: Option<Py<PyTuple>>,
    /// `[rows]` float32.
    rewards: Py<PyAny>,
    /// `[rows]` bool.
    terminated: Py<PyAny>,
    /// `[rows]` bool.
    truncated: Py<PyAny>,
    /// `[rows]` int32: which env each row is (row `i` is env `i` in sync mode).
    env_id: Py<PyAny>,
    /// `[rows]` int32: steps since the reset that produced the row's observation (0 for a
    /// reset row).
    elapsed_step: Py<PyAny>,
    /// `[rows]` float64: the return of an episode that ended at this step, else 0.
    episode_return: Py<PyAny>,
    /// `[rows]` int32: the length of an episode that ended at this step, else 0.
    episode_length: Py<PyAny>,
    /// Whether any episode ended at this step.
    any_done: bool,
    /// Envs whose worker was restarted (`FailurePolicy::Restart`) and that come back in
    /// this batch as fresh episodes.
    restarted_envs: Vec<usize>,
}

#[pymethods]
impl Results {
    /// The infos every pool adds (`shmenv.vector`'s `pool_infos` and `episode_stats_key`):
    /// `env_id` and `elapsed_step` with `pool_infos`, and where an episode ended
    /// `{stats_key: {"r": returns, "l": lengths}, "_" + stats_key: ended rows}` unless
    /// `stats_key` is empty. A new dict.
    fn infos<'py>(
        &self,
        py: Python<'py>,
        pool_infos: &Bound<'py, PyAny>,
        stats_key: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let form = InfoForm { pool_infos: pool_infos.is_truthy()?, stats_key };
        gym_tuple::pool_infos(py, form, self.any_done, &mut (py, self))
    }
}

impl<'py> Columns<'py> for (Python<'py>, &Results) {
    fn column(&mut self, c: Column) -> PyResult<Bound<'py, PyAny>> {
        let r = self.1;
        let array = match c {
            Column::Rewards => &r.rewards,
            Column::Terminated => &r.terminated,
            Column::Truncated => &r.truncated,
            Column::EnvIds => &r.env_id,
            Column::ElapsedSteps => &r.elapsed_step,
            Column::EpisodeReturn => &r.episode_return,
            Column::EpisodeLength => &r.episode_length,
        };
        Ok(array.bind(self.0).clone())
    }
    fn done(&mut self) -> PyResult<Bound<'py, PyAny>> {
        let flags = |a: &Py<PyAny>| -> PyResult<Vec<u8>> {
            let array = a
                .bind(self.0)
                .cast::<PyArray1<bool>>()?
                .try_readonly()
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            Ok(array.as_slice()?.iter().map(|&b| u8::from(b)).collect())
        };
        let done = gym_tuple::done_bytes(&flags(&self.1.terminated)?, &flags(&self.1.truncated)?)?;
        views::owned(self.0, &done, numpy::dtype::<bool>(self.0), &[done.len()])
    }
}

/// What turns a pool's batches into [`Results`]: the pool's lease, its observation views
/// (`copy=False`), and the info reader of hosted envs.
pub(crate) struct ResultsMaker {
    /// The keep-alive object every returned array has as its numpy `base`.
    pub(crate) lease: Py<Lease>,
    /// Whether observations come back as owned copies (otherwise views of the region).
    copy: bool,
    /// Per result block (keyed by the address of its env-id column): the observation views
    /// over it. Blocks never move, so each is wrapped once and returned on every call
    /// that lands in it.
    blocks: Vec<(usize, ObsArrays)>,
    /// What the interrupt check caught (KeyboardInterrupt), raised by the failing call.
    interrupted: Arc<Mutex<Option<PyErr>>>,
    /// Hosted Python envs: the reader of their info area, told each batch's rows.
    pub(crate) infos: Option<InfoReader>,
    /// The owned arrays handed out, refilled once the caller lets go of them.
    recycler: Recycler,
}

impl ResultsMaker {
    pub(crate) fn new(lease: Py<Lease>, copy: bool, interrupted: Arc<Mutex<Option<PyErr>>>) -> ResultsMaker {
        ResultsMaker {
            lease,
            copy,
            blocks: Vec::new(),
            interrupted,
            infos: None,
            recycler: Recycler::default(),
        }
    }

    /// The results of `batch`, or the error the call ended with.
    pub(crate) fn make<E: CallError>(
        &mut self,
        py: Python<'_>,
        result: Result<Batch<'_>, E>,
    ) -> PyResult<Results> {
        let batch = self.checked(py, result)?;
        let (obs, final_obs) = self.observations(py, &batch)?;
        let recycler = &mut self.recycler;
        let mut column = |c: Column| column_array(py, recycler, &batch, c).map(Bound::unbind);
        Ok(Results {
            obs,
            final_obs,
            rewards: column(Column::Rewards)?,
            terminated: column(Column::Terminated)?,
            truncated: column(Column::Truncated)?,
            env_id: column(Column::EnvIds)?,
            elapsed_step: column(Column::ElapsedSteps)?,
            episode_return: column(Column::EpisodeReturn)?,
            episode_length: column(Column::EpisodeLength)?,
            any_done: gym_tuple::any_done(&batch),
            restarted_envs: batch.restarted_envs().to_vec(),
        })
    }

    /// Gymnasium's tuple of `batch` (`shmenv.vector`'s one-call path: a pool with one
    /// observation array and nothing for Python to add), or the error the call ended with.
    pub(crate) fn make_tuple<'py, E: CallError>(
        &mut self,
        py: Python<'py>,
        result: Result<Batch<'_>, E>,
        form: InfoForm<'_>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let batch = self.checked(py, result)?;
        let count = batch.spec().observations.len();
        if count != 1 {
            return Err(PyValueError::new_err(format!(
                "internal error: the one-call step needs one observation array, this pool has {count}"
            )));
        }
        let obs = if self.copy {
            let lease = self.lease.bind(py);
            obs_array(lease, Some(&mut self.recycler), &batch, 0, false)?.expect("observations")
        } else {
            self.observations(py, &batch)?.0.bind(py).get_item(0)?
        };
        gym_tuple::step_tuple(py, obs, &batch, form, &mut self.recycler)
    }

    /// Lets go of the arrays kept for refilling (the pool is closing).
    pub(crate) fn forget_arrays(&mut self) {
        self.recycler.clear();
    }

    /// The batch of a call, or its error as Python's exception; notes the batch's rows for
    /// the info reader.
    fn checked<'b, E: CallError>(
        &mut self,
        py: Python<'_>,
        result: Result<Batch<'b>, E>,
    ) -> PyResult<Batch<'b>> {
        let batch = result.map_err(|e| {
            let caught = self.interrupted.lock().unwrap_or_else(|p| p.into_inner()).take();
            e.into_py_err(py, caught)
        })?;
        if let Some(infos) = &mut self.infos {
            infos.note_batch(&batch);
        }
        Ok(batch)
    }

    /// The observations of `batch`: copies, or the views of its result block.
    fn observations(&mut self, py: Python<'_>, batch: &Batch<'_>) -> PyResult<ObsArrays> {
        let lease = self.lease.bind(py);
        if self.copy {
            let recycler = &mut self.recycler;
            let obs = obs_arrays(lease, Some(&mut *recycler), batch, false)?.expect("observations");
            return Ok((obs, obs_arrays(lease, Some(recycler), batch, true)?));
        }
        let key = batch.env_ids().as_ptr() as usize;
        if let Some((_, (obs, fin))) = self.blocks.iter().find(|(k, _)| *k == key) {
            return Ok((obs.clone_ref(py), fin.as_ref().map(|f| f.clone_ref(py))));
        }
        let obs = obs_arrays(lease, None, batch, false)?.expect("observations");
        let fin = obs_arrays(lease, None, batch, true)?;
        self.blocks.push((key, (obs.clone_ref(py), fin.as_ref().map(|f| f.clone_ref(py)))));
        Ok((obs, fin))
    }
}

/// Column `c` of `batch` as an owned array (`recycler`'s: one memcpy, and an allocation
/// unless an array the caller let go of is refilled). Flags are 0/1 bytes, ids and counts
/// are u32 below 2^31 (env ids checked by the engine), so the bytes are the int32 and bool
/// arrays as they are.
pub(crate) fn column_array<'py>(
    py: Python<'py>,
    recycler: &mut Recycler,
    batch: &Batch<'_>,
    c: Column,
) -> PyResult<Bound<'py, PyAny>> {
    let descr = match c.kind() {
        ColumnKind::F32 => numpy::dtype::<f32>(py),
        ColumnKind::F64 => numpy::dtype::<f64>(py),
        ColumnKind::Flag => numpy::dtype::<bool>(py),
        ColumnKind::Count => numpy::dtype::<i32>(py),
    };
    recycler.owned(py, Slot::Column(c), batch.column_bytes(c), descr, &[batch.len()])
}

/// The observation arrays of `batch` (`final_obs`: its final-observation columns, `None`
/// when the pool has none): owned copies made by `copies`, else read-only views of the
/// region.
fn obs_arrays<'py>(
    lease: &Bound<'py, Lease>,
    mut copies: Option<&mut Recycler>,
    batch: &Batch<'_>,
    final_obs: bool,
) -> PyResult<Option<Py<PyTuple>>> {
    let count = batch.spec().observations.len();
    let mut out = Vec::with_capacity(count);
    for k in 0..count {
        let Some(array) = obs_array(lease, copies.as_deref_mut(), batch, k, final_obs)? else {
            return Ok(None);
        };
        out.push(array);
    }
    Ok(Some(PyTuple::new(lease.py(), out)?.unbind()))
}

/// Observation array `k` of `batch`, as [`obs_arrays`] makes them (`None` when the pool
/// has no such column).
fn obs_array<'py>(
    lease: &Bound<'py, Lease>,
    copies: Option<&mut Recycler>,
    batch: &Batch<'_>,
    k: usize,
    final_obs: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = lease.py();
    let bytes = if final_obs { batch.final_obs_bytes(k) } else { batch.obs_bytes(k) };
    let Some(bytes) = bytes else { return Ok(None) };
    let space = &batch.spec().observations[k].space;
    let shape = [&[batch.len()][..], space.dims()].concat();
    let descr = views::descr(py, space.dtype());
    let slot = if final_obs { Slot::FinalObs(k) } else { Slot::Obs(k) };
    Ok(Some(match copies {
        Some(recycler) => recycler.owned(py, slot, bytes, descr, &shape)?,
        None => views::array(lease, bytes, descr, &shape)?,
    }))
}
