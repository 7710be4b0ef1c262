//! Python envs (Gymnasium API) hosted by the worker host: [`PyEnv`] implements the worker's
//! `Env` trait by calling the env's `reset`/`step` and copying its observation into the
//! env's row of the region. It runs in `python -m shmenv.worker`: the env is built there
//! by `shmenv.worker.make_env` from JSON config (a Gymnasium spec, or an entry point with
//! kwargs), never pickled.
//!
//! A Python exception in the env becomes a panic carrying the full traceback, which the
//! host catches and reports as `EnvPanicked { env_id, message }` (the trainer raises it as
//! `shmenv.WorkerError`).

use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use shmenv_engine::spec::{DType, Element, EnvSpec, Space};
use shmenv_worker::{ActionIn, ConfigError, Env, EnvEntry, ObsOut, Registry, Transition};

/// The id under which Python envs are registered in a Python worker; the config says
/// which env (`{"kind": "spec" | "entry_point", ...}`, see `shmenv/worker.py`).
pub(crate) const PYTHON_ENV_ID: &str = "python-env";

/// Keep the end of very long tracebacks: the report area holds 64 KiB.
const MAX_MESSAGE: usize = 16 * 1024;

/// The registry of a Python worker: the built-ins plus [`PYTHON_ENV_ID`].
pub(crate) fn registry() -> Registry {
    let mut r = Registry::with_builtins();
    r.register(
        PYTHON_ENV_ID,
        EnvEntry {
            description: "a Python (Gymnasium API) env built in the worker from its spec or entry point",
            factory: make,
            max_episode_steps: None,
        },
    );
    r
}

/// Holds the GIL for a whole sync batch: the envs' `Python::attach` calls inside are then
/// nearly free, instead of taking and releasing the GIL once per env.
pub(crate) struct GilScope;

impl shmenv_worker::host::BatchScope for GilScope {
    fn run(&self, work: &mut dyn FnMut()) {
        Python::attach(|_py| work())
    }
}

/// `err` with its traceback, as Python prints it.
fn describe(py: Python<'_>, err: &PyErr) -> String {
    let text = py
        .import("traceback")
        .and_then(|tb| tb.call_method1("format_exception", (err.clone_ref(py).into_value(py),)))
        .and_then(|lines| lines.extract::<Vec<String>>())
        .map(|lines| lines.concat())
        .unwrap_or_else(|_| err.to_string());
    if text.len() > MAX_MESSAGE {
        let cut = text.len() - MAX_MESSAGE;
        let cut = (cut..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(cut);
        format!("...(traceback cut)...\n{}", &text[cut..])
    } else {
        text
    }
}

fn make(config: &serde_json::Value) -> Result<Box<dyn Env>, ConfigError> {
    Python::attach(|py| -> Result<Box<dyn Env>, ConfigError> {
        let fail = |e: PyErr| ConfigError(format!("building the Python env failed:\n{}", describe(py, &e)));
        let module = py.import("shmenv.worker").map_err(fail)?;
        let env = module.call_method1("make_env", (config.to_string(),)).map_err(fail)?;
        let spec_json: String =
            module.call_method1("spec_json", (&env,)).map_err(fail)?.extract().map_err(fail)?;
        let value: serde_json::Value =
            serde_json::from_str(&spec_json).map_err(|e| ConfigError(format!("bad spec JSON: {e}")))?;
        let spec = EnvSpec::from_json(&value).map_err(ConfigError)?;
        let names: Vec<String> = spec.observations.iter().map(|o| o.name.clone()).collect();
        // `make_env` appended the env to the worker's list: its index there is its local id.
        let local = module.getattr("_ENVS").and_then(|l| l.len()).map_err(fail)? - 1;
        let note_info = py.import("shmenv.infos").and_then(|m| m.getattr("note_info")).map_err(fail)?;
        Ok(Box::new(PyEnv {
            local,
            note_info: note_info.unbind(),
            step: env.getattr("step").map_err(fail)?.unbind(),
            reset: env.getattr("reset").map_err(fail)?.unbind(),
            as_array: py.import("numpy").and_then(|np| np.getattr("asarray")).map_err(fail)?.unbind(),
            dict_obs: names.len() > 1 || spec.single_key_dict,
            rows: spec.observations.iter().map(|o| vec![0; o.space.value_bytes()]).collect(),
            names,
            spec,
        }))
    })
}

/// A Python env and its last observation.
struct PyEnv {
    /// Its index among this worker's envs (`shmenv.worker._ENVS`).
    local: usize,
    /// `shmenv.infos.note_info`, called only when the env returns a non-empty info dict.
    note_info: Py<PyAny>,
    step: Py<PyAny>,
    reset: Py<PyAny>,
    /// `numpy.asarray`, for observations that are not already arrays of the right dtype.
    as_array: Py<PyAny>,
    spec: EnvSpec,
    names: Vec<String>,
    dict_obs: bool,
    /// The last observation, one row per observation array, copied out of Python while
    /// `reset`/`step` hold the GIL, so `observe` is a plain copy without it.
    rows: Vec<Vec<u8>>,
}

impl PyEnv {
    /// The action as the Python value a Gymnasium env expects.
    fn action<'py>(&self, py: Python<'py>, action: ActionIn<'_>) -> PyResult<Bound<'py, PyAny>> {
        fn array<'py, T: Element + numpy::Element>(
            py: Python<'py>,
            a: &ActionIn<'_>,
            shape: &[usize],
        ) -> PyResult<Bound<'py, PyAny>> {
            PyArray1::from_slice(py, a.as_slice::<T>()).reshape(shape.to_vec()).map(Bound::into_any)
        }
        let space = action.space();
        match space {
            Space::Discrete { .. } => Ok(action.discrete().into_pyobject(py)?.into_any()),
            _ => {
                let shape = space.shape();
                match space.dtype() {
                    DType::F32 => array::<f32>(py, &action, &shape),
                    DType::F64 => array::<f64>(py, &action, &shape),
                    DType::U8 => array::<u8>(py, &action, &shape),
                    DType::I8 => array::<i8>(py, &action, &shape),
                    DType::I16 => array::<i16>(py, &action, &shape),
                    DType::I32 => array::<i32>(py, &action, &shape),
                    DType::I64 => array::<i64>(py, &action, &shape),
                }
            }
        }
    }

    /// Copies observation array `k` (`value`) into `rows[k]`.
    fn store(&mut self, py: Python<'_>, k: usize, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let space = &self.spec.observations[k].space;
        if let Space::Discrete { .. } = space {
            let v = value.extract::<i64>()?;
            self.rows[k].copy_from_slice(&v.to_ne_bytes());
            return Ok(());
        }
        fn copy<T: Element + numpy::Element>(
            env: &mut PyEnv,
            py: Python<'_>,
            k: usize,
            value: &Bound<'_, PyAny>,
        ) -> PyResult<()> {
            let converted;
            let array = match value.cast::<PyArrayDyn<T>>() {
                Ok(a) if a.is_c_contiguous() => a,
                _ => {
                    converted = env.as_array.bind(py).call1((value, numpy::dtype::<T>(py)))?;
                    let a = converted.cast::<PyArrayDyn<T>>()?;
                    if !a.is_c_contiguous() {
                        return Err(pyo3::exceptions::PyValueError::new_err("observation is not contiguous"));
                    }
                    a
                }
            };
            let row: &mut [T] = bytemuck::cast_slice_mut(&mut env.rows[k]);
            if array.len() != row.len() {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "observation {:?} has {} elements, its space {} has {}",
                    env.names[k],
                    array.len(),
                    env.spec.observations[k].space,
                    row.len()
                )));
            }
            // SAFETY: the array is C-contiguous with `row.len()` elements of `T` (checked
            // above); we hold the GIL for the whole copy, so no Python code can resize or
            // write it meanwhile, and no Rust code in this process borrows it mutably (the
            // worker only reads observations). This skips numpy's borrow tracking, a
            // measurable cost per env step.
            row.copy_from_slice(unsafe { array.as_slice() }?);
            Ok(())
        }
        match space.dtype() {
            DType::F32 => copy::<f32>(self, py, k, value),
            DType::F64 => copy::<f64>(self, py, k, value),
            DType::U8 => copy::<u8>(self, py, k, value),
            DType::I8 => copy::<i8>(self, py, k, value),
            DType::I16 => copy::<i16>(self, py, k, value),
            DType::I32 => copy::<i32>(self, py, k, value),
            DType::I64 => copy::<i64>(self, py, k, value),
        }
    }

    /// Hands a non-empty `info` of a `reset` or `step` ("kind") to `shmenv.infos`, which
    /// keeps it for the trainer and flags the env; an empty one costs a length check.
    fn keep_info(&self, py: Python<'_>, kind: &str, info: &Bound<'_, PyAny>) -> PyResult<()> {
        if info.is_truthy()? {
            self.note_info.call1(py, (self.local, kind, info))?;
        }
        Ok(())
    }

    /// Copies the observation `obs` (an array, or a dict of arrays) into `rows`.
    fn store_obs(&mut self, py: Python<'_>, obs: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.dict_obs {
            for k in 0..self.names.len() {
                let value = obs.get_item(&self.names[k])?;
                self.store(py, k, &value)?;
            }
            Ok(())
        } else {
            self.store(py, 0, obs)
        }
    }
}

/// Panics with `err`'s traceback: the host reports it as `EnvPanicked`, and the trainer
/// raises it as `shmenv.WorkerError` (once, with the traceback).
fn raise(py: Python<'_>, what: &str, err: PyErr) -> ! {
    std::panic::panic_any(format!("{PYTHON_EXCEPTION} in {what}:\n{}", describe(py, &err)))
}

/// How the panic payload of a Python exception begins.
const PYTHON_EXCEPTION: &str = "Python exception";

/// Installs a panic hook that prints nothing for [`raise`]'s panics (the trainer reports
/// them; Rust's "thread panicked at pyenv.rs" line and backtrace would only be noise on
/// the worker's stderr) and prints every other panic with the worker's own hook (message
/// and location, no backtrace: see `shmenv_worker::panic_hook`).
pub(crate) fn quiet_python_exceptions() {
    std::panic::set_hook(Box::new(move |info| {
        let ours = info.payload().downcast_ref::<String>().is_some_and(|m| m.starts_with(PYTHON_EXCEPTION));
        if !ours {
            shmenv_worker::panic_hook::print(info);
        }
    }));
}

impl Env for PyEnv {
    fn spec(&self) -> EnvSpec {
        self.spec.clone()
    }

    fn reset(&mut self, seed: Option<u64>) {
        Python::attach(|py| {
            let kwargs = PyDict::new(py);
            let result = (|| -> PyResult<()> {
                kwargs.set_item("seed", seed)?;
                let out = self.reset.call(py, (), Some(&kwargs))?;
                let out = out.bind(py).cast::<PyTuple>()?;
                self.store_obs(py, &out.get_item(0)?)?;
                self.keep_info(py, "reset", &out.get_item(1)?)
            })();
            if let Err(e) = result {
                raise(py, "reset()", e)
            }
        })
    }

    fn step(&mut self, action: ActionIn<'_>) -> Transition {
        Python::attach(|py| {
            let result = (|| -> PyResult<Transition> {
                let a = self.action(py, action)?;
                let out = self.step.bind(py).call1((a,))?;
                let t = out.cast::<PyTuple>()?;
                if t.len() != 5 {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "step() returned {} values; the Gymnasium API returns 5 (obs, reward, terminated, truncated, info)",
                        t.len()
                    )));
                }
                self.store_obs(py, &t.get_item(0)?)?;
                self.keep_info(py, "step", &t.get_item(4)?)?;
                Ok(Transition {
                    reward: t.get_item(1)?.extract::<f64>()? as f32,
                    terminated: t.get_item(2)?.is_truthy()?,
                    truncated: t.get_item(3)?.is_truthy()?,
                })
            })();
            result.unwrap_or_else(|e| raise(py, "step()", e))
        })
    }

    fn observe(&self, out: &mut ObsOut<'_, '_>) {
        for (k, row) in self.rows.iter().enumerate() {
            out.array::<u8>(k).copy_from_slice(row);
        }
    }
}
