//! Action checks for the parts of a composite (Dict or Tuple) action: the trainer packs
//! such an action into one byte row per env, so the engine sees bytes; each part is first
//! checked here with the engine's own rules (`shmenv_engine::action::validate`), as a
//! plain action of that space would be.

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shmenv_engine::spec::Space;
use shmenv_engine::{action, with_element};

use crate::views;

/// Checks `actions` (a C-contiguous array of `num_envs` values of the space whose
/// canonical JSON is `space_json`, in its storage dtype) and raises `shmenv.ActionError`
/// naming `what`, the env and the element of the first value outside the space.
#[pyfunction]
pub(crate) fn check_actions(
    py: Python<'_>,
    space_json: &str,
    actions: &Bound<'_, PyUntypedArray>,
    num_envs: usize,
    what: &str,
) -> PyResult<()> {
    let json: serde_json::Value = serde_json::from_str(space_json)
        .map_err(|e| PyValueError::new_err(format!("bad space JSON: {e}")))?;
    let space = Space::from_json(&json).map_err(PyValueError::new_err)?;
    let descr = views::descr(py, space.dtype());
    if !actions.is_c_contiguous() || !actions.dtype().is_equiv_to(&descr) {
        return Err(PyValueError::new_err(format!(
            "internal error: {what}'s actions must be a C-contiguous {} array",
            space.dtype()
        )));
    }
    let len = actions.len() * descr.itemsize();
    let bytes: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: the array is C-contiguous with `len > 0` bytes of data (element count times
        // item size), so its data pointer is non-null and valid for them; the slice lives
        // only during this call, while `actions` holds the array and the GIL is held, so
        // nothing resizes or frees it; any byte is a valid u8.
        unsafe { std::slice::from_raw_parts((*actions.as_array_ptr()).fields.data as *const u8, len) }
    };
    let checked = with_element!(space.dtype(), T => {
        let values: &[T] = bytemuck::try_cast_slice(bytes)
            .map_err(|e| PyValueError::new_err(format!("internal error: {what}'s actions: {e}")))?;
        action::validate(&space, num_envs, values)
    });
    checked.map_err(|e| crate::errors::raise(py, "ActionError", format!("{what}: {e}"), vec![]))
}
