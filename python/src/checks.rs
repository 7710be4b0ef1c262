//! Action checks for the parts of a composite (Dict or Tuple) action: the trainer packs
//! such an action into one byte row per env, so the engine sees bytes; each part is first
//! checked here with the engine's own rules (`shmenv_engine::action::validate`), as a
//! plain action of that space would be. Also the pool's config, parsed with a clear
//! `ConfigError` for the NaN and infinities Python's `json` writes but JSON does not have.

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
    let space = Space::from_json(&json).map_err(|e| PyValueError::new_err(e.to_string()))?;
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
    checked.map_err(|e| {
        crate::errors::raise(py, crate::errors::ErrorClass::ActionError, format!("{what}: {e}"), vec![])
    })
}

/// The pool's config (`config_json`, as `json.dumps` wrote it) parsed, or a
/// `shmenv.ConfigError` naming the first NaN or infinity in it: Python writes them as
/// `NaN`/`Infinity`, which JSON (and the engine's parser) does not have. Other parse
/// errors are `ValueError`s (the Python layer only ever passes JSON it wrote).
pub(crate) fn parse_config(py: Python<'_>, env_id: &str, config_json: &str) -> PyResult<serde_json::Value> {
    serde_json::from_str(config_json).map_err(|e| match non_finite(py, config_json) {
        Some((path, value)) => {
            // A Python env's config is `{"kind": ..., "kwargs": {...}}`: its keywords are the user's config.
            let path = match path.strip_prefix("['kwargs']") {
                Some(rest) if env_id == crate::pyenv::PYTHON_ENV_ID => rest.to_string(),
                _ => path,
            };
            let todo = if env_id == crate::pyenv::PYTHON_ENV_ID {
                "pass a finite number (or a string the env converts), or build the env with a factory \
                 (make_vec(lambda: MyEnv(x=float('nan')), n)), which is pickled, not sent as JSON"
            } else {
                "pass a finite number in the range the env documents (shmenv.builtin_env_ids() lists the native envs)"
            };
            crate::errors::raise(
                py,
                crate::errors::ErrorClass::ConfigError,
                format!(
                    "config{path} is {value}: the config goes to the workers as JSON, and JSON has no NaN or \
                     Infinity; {todo}"
                ),
                vec![],
            )
        }
        None => PyValueError::new_err(format!("config is not valid JSON: {e}")),
    })
}

/// The path (`['a'][0]`) and value (`nan`, `inf`, `-inf`) of the first non-finite number
/// in `config_json`, read with Python's `json` module (which takes `NaN` and `Infinity`);
/// `None` when there is none, or the text is not even Python's JSON.
fn non_finite(py: Python<'_>, config_json: &str) -> Option<(String, String)> {
    fn walk(value: &Bound<'_, PyAny>, path: &mut String) -> PyResult<Option<String>> {
        let child = |key: String, item: &Bound<'_, PyAny>, path: &mut String| -> PyResult<Option<String>> {
            let len = path.len();
            path.push_str(&format!("[{key}]"));
            let found = walk(item, path)?;
            if found.is_none() {
                path.truncate(len);
            }
            Ok(found)
        };
        if let Ok(dict) = value.cast::<pyo3::types::PyDict>() {
            for (k, v) in dict.iter() {
                if let Some(found) = child(k.repr()?.to_string(), &v, path)? {
                    return Ok(Some(found));
                }
            }
        } else if let Ok(list) = value.cast::<pyo3::types::PyList>() {
            for (i, v) in list.iter().enumerate() {
                if let Some(found) = child(i.to_string(), &v, path)? {
                    return Ok(Some(found));
                }
            }
        } else if let Ok(f) = value.cast::<pyo3::types::PyFloat>() {
            if !f.value().is_finite() {
                return Ok(Some(f.repr()?.to_string()));
            }
        }
        Ok(None)
    }
    let parsed = py.import("json").and_then(|json| json.call_method1("loads", (config_json,))).ok()?;
    let mut path = String::new();
    walk(&parsed, &mut path).ok().flatten().map(|value| (path, value))
}
