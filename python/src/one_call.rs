//! The one-call path's arguments (`Pool.step_gym`, `send_gym`): actions and env ids
//! taken as they are when they already are the engine's arrays, anything else converted
//! by shmenv's Python converters, whose checks and messages are then the general path's.

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
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

    /// `actions` for `count` envs as the engine takes them: as they are when they already
    /// are a numpy array (exactly, not a subclass) of the action dtype and shape, C-contiguous
    /// and aligned; otherwise converted and checked by `Assembly.actions`, whose own fast
    /// check is this one (keep the two alike). Bool actions always go through it (the
    /// engine takes their bytes).
    pub(crate) fn actions<'py>(
        &self,
        actions: &Bound<'py, PyAny>,
        count: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = actions.py();
        if self.action_dtype != DType::Bool && actions.is_exact_instance_of::<PyUntypedArray>() {
            let a = actions.cast::<PyUntypedArray>()?;
            let shape = a.shape();
            if a.is_c_contiguous()
                && a.is_aligned()
                && shape.first() == Some(&count)
                && shape[1..] == self.action_shape[..]
                && a.dtype().is_equiv_to(&crate::views::descr(py, self.action_dtype))
            {
                return Ok(actions.clone());
            }
        }
        self.convert_actions.bind(py).call1((actions, count))
    }

    /// `env_ids` as an array `env_id_list` takes (not yet range-checked): as they are when
    /// they already are a 1-D, C-contiguous, aligned numpy array (exactly) of int64 or
    /// int32, as `_env_ids`'s own fast check says (keep the two alike); otherwise
    /// converted and checked by `_env_ids`.
    pub(crate) fn env_ids<'py>(&self, env_ids: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyUntypedArray>> {
        let py = env_ids.py();
        if env_ids.is_exact_instance_of::<PyUntypedArray>() {
            let a = env_ids.cast::<PyUntypedArray>()?;
            let dtype = a.dtype();
            if a.ndim() == 1
                && a.is_c_contiguous()
                && a.is_aligned()
                && (dtype.is_equiv_to(&numpy::dtype::<i64>(py))
                    || dtype.is_equiv_to(&numpy::dtype::<i32>(py)))
            {
                return Ok(a.clone());
            }
        }
        let converted = self.convert_env_ids.bind(py).call1((env_ids, self.num_envs))?;
        Ok(converted.cast_into::<PyUntypedArray>()?)
    }
}
