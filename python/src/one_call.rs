//! The one-call path's arguments (`Pool.step_gym`, `send_gym`): actions and env ids
//! taken as they are when they already are the engine's arrays, anything else converted
//! by shmenv's Python converters, whose checks and messages are then the general path's.
//! Which arrays are taken as they are is decided here only ([`rows_as_is`],
//! [`env_ids_as_is`]): the general path asks the same functions ([`ActionForm`],
//! `env_ids_as_is`).

use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use shmenv_engine::{DType, Pool};

/// How the one-call path takes a pool's arguments: the action array's form, read at
/// start-up and kept after `close()` (so that, as on the general path, a bad argument is
/// reported before a closed pool), and shmenv's converters for anything else:
/// `actions(actions, count)` (`Assembly.actions`) and `env_ids(env_ids, num_envs)`
/// (`arguments._env_ids`).
pub(crate) struct OneCallArgs {
    action_dtype: DType,
    action_shape: Vec<usize>,
    /// The pool's env count.
    pub(crate) num_envs: usize,
    convert_actions: Py<PyAny>,
    convert_env_ids: Py<PyAny>,
}

impl OneCallArgs {
    pub(crate) fn new(pool: &Pool, convert_actions: Py<PyAny>, convert_env_ids: Py<PyAny>) -> Self {
        let action = &pool.spec().action;
        OneCallArgs {
            action_dtype: action.dtype(),
            action_shape: action.shape(),
            num_envs: pool.num_envs(),
            convert_actions,
            convert_env_ids,
        }
    }

    /// `actions` for `count` envs as the engine takes them: as they are when [`rows_as_is`]
    /// says so (the rule `Assembly.actions` applies too, through [`ActionForm`]); otherwise
    /// converted and checked by `Assembly.actions`. Bool actions always go through it (the
    /// engine takes their bytes).
    pub(crate) fn actions<'py>(
        &self,
        actions: &Bound<'py, PyAny>,
        count: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = actions.py();
        let descr = crate::views::descr(py, self.action_dtype);
        if self.action_dtype != DType::Bool && rows_as_is(actions, &descr, &self.action_shape, count) {
            return Ok(actions.clone());
        }
        self.convert_actions.bind(py).call1((actions, count))
    }

    /// `env_ids` as an array `env_id_list` takes (not yet range-checked): as they are when
    /// [`env_ids_as_is`] says so (the rule `arguments._env_ids` applies too); otherwise
    /// converted and checked by `_env_ids`.
    pub(crate) fn env_ids<'py>(&self, env_ids: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyUntypedArray>> {
        let py = env_ids.py();
        if env_ids_as_is(env_ids) {
            return Ok(env_ids.cast::<PyUntypedArray>()?.clone());
        }
        let converted = self.convert_env_ids.bind(py).call1((env_ids, self.num_envs))?;
        Ok(converted.cast_into::<PyUntypedArray>()?)
    }
}

/// Whether `a` is taken as it is as `count` rows of `shape` in `dtype`: exactly a numpy
/// array (not a subclass), C-contiguous and aligned, of shape `(count, *shape)` and a dtype
/// equivalent to `dtype`. The one fast-path rule for actions, applied by the one-call path
/// and by `Assembly.actions` (through [`ActionForm`]): anything else is converted.
fn rows_as_is(a: &Bound<'_, PyAny>, dtype: &Bound<'_, PyArrayDescr>, shape: &[usize], count: usize) -> bool {
    let Ok(a) = a.cast_exact::<PyUntypedArray>() else { return false };
    let dims = a.shape();
    a.is_c_contiguous()
        && a.is_aligned()
        && dims.first() == Some(&count)
        && dims[1..] == shape[..]
        && a.dtype().is_equiv_to(dtype)
}

/// Whether `env_ids` are taken as they are (then only range-checked): exactly a numpy array
/// (not a subclass), 1-D, C-contiguous and aligned, of int64 or int32. The one fast-path
/// rule for env ids, applied by the one-call path and by `arguments._env_ids`.
#[pyfunction]
pub(crate) fn env_ids_as_is(env_ids: &Bound<'_, PyAny>) -> bool {
    let Ok(a) = env_ids.cast_exact::<PyUntypedArray>() else { return false };
    let (py, dtype) = (env_ids.py(), a.dtype());
    a.ndim() == 1
        && a.is_c_contiguous()
        && a.is_aligned()
        && (dtype.is_equiv_to(&numpy::dtype::<i64>(py)) || dtype.is_equiv_to(&numpy::dtype::<i32>(py)))
}

/// An action space's array form, for Python's `Assembly.actions`: whether a batch of
/// actions is taken as it is, by the one-call path's rule ([`rows_as_is`]).
#[pyclass(frozen, module = "shmenv._shmenv")]
pub(crate) struct ActionForm {
    dtype: Py<PyArrayDescr>,
    shape: Vec<usize>,
}

#[pymethods]
impl ActionForm {
    /// The form of actions of numpy dtype `dtype` and per-env shape `shape`.
    #[new]
    fn new(dtype: Bound<'_, PyArrayDescr>, shape: Vec<usize>) -> Self {
        ActionForm { dtype: dtype.unbind(), shape }
    }

    /// Whether `actions` for `count` envs are taken as they are (else they are converted).
    fn takes(&self, actions: &Bound<'_, PyAny>, count: usize) -> bool {
        rows_as_is(actions, self.dtype.bind(actions.py()), &self.shape, count)
    }
}
