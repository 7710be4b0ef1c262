//! Python envs (Gymnasium API) hosted by the worker host: [`PyEnv`] implements the worker's
//! `Env` trait by calling the env's `reset`/`step`, keeping a reference to the observation
//! arrays it returned, and copying them straight into the env's row of the region in
//! `observe` (one copy, no intermediate buffer: a 4x84x84 frame stack is copied once). It runs in `python -m shmenv.worker`: the env is built there
//! by `shmenv.worker.make_env` from JSON config (a Gymnasium spec, or an entry point with
//! kwargs), never pickled; or in the trainer, for the first shard of a pool made with
//! `trainer_shard=True` ([`trainer_shard`]: built into the pool's own
//! `shmenv.worker.in_trainer.TrainerEnvs`).
//!
//! A Python exception in the env becomes a panic carrying the full traceback, which the
//! host catches and reports as `EnvPanicked { env_id, message }` (the trainer raises it as
//! `shmenv.WorkerError`).

use crate::views;
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySet, PySetMethods, PyTuple};
use shmenv_engine::pool::TrainerShard;
use shmenv_engine::protocol::{PoolParams, WorkerReport};
use shmenv_engine::spec::{EnvSpec, Space};
use shmenv_worker::{ActionIn, ConfigError, Env, EnvEntry, ObsOut, Registry, Transition};

/// The id under which Python envs are registered in a Python worker; the config says
/// which env (`{"kind": "spec" | "entry_point", ...}`, see `shmenv/worker/__init__.py`).
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

thread_local! {
    /// The host the envs built on this thread go to: a pool's `TrainerEnvs` while
    /// [`trainer_shard`]'s maker builds that pool's shard, else none (`shmenv.worker`'s own
    /// host, in a worker process).
    static TRAINER_HOST: std::cell::RefCell<Option<Py<PyAny>>> = const { std::cell::RefCell::new(None) };
}

/// What `PoolBuilder::trainer_shard` takes to step the first shard of a pool of hosted
/// Python envs in the trainer: built into `host` (a `shmenv.worker.in_trainer.TrainerEnvs`,
/// which answers the pool's calls for them), stepped holding the GIL for each batch
/// ([`GilScope`]; the pool's call released it). A Python exception in one of them closes
/// the pool with the env and its traceback, as in a worker.
pub(crate) fn trainer_shard(
    host: Py<PyAny>,
) -> impl Fn(&PoolParams) -> Result<Box<dyn TrainerShard>, WorkerReport> + Send + Sync + 'static {
    let make = shmenv_worker::trainer_shard_with_scope(registry(), GilScope);
    quiet_python_exceptions_in_trainer();
    move |params: &PoolParams| {
        let previous = Python::attach(|py| TRAINER_HOST.with(|h| h.replace(Some(host.clone_ref(py)))));
        let shard = make(params);
        Python::attach(|_py| TRAINER_HOST.with(|h| *h.borrow_mut() = previous));
        shard
    }
}

/// The host envs built now go to: [`TRAINER_HOST`]'s, or the worker's (`shmenv.worker`).
fn current_host<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    match TRAINER_HOST.with(|h| h.borrow().as_ref().map(|host| host.clone_ref(py))) {
        Some(host) => Ok(host.into_bound(py)),
        None => Ok(py.import("shmenv.worker")?.into_any()),
    }
}

fn make(config: &serde_json::Value) -> Result<Box<dyn Env>, ConfigError> {
    Python::attach(|py| -> Result<Box<dyn Env>, ConfigError> {
        let fail = |e: PyErr| ConfigError(format!("building the Python env failed:\n{}", describe(py, &e)));
        let host = current_host(py).map_err(fail)?;
        let env = host.call_method1("make_env", (config.to_string(),)).map_err(fail)?;
        let spec_json: String =
            host.call_method1("spec_json", (&env,)).map_err(fail)?.extract().map_err(fail)?;
        let value: serde_json::Value =
            serde_json::from_str(&spec_json).map_err(|e| ConfigError(format!("bad spec JSON: {e}")))?;
        let spec = EnvSpec::from_json(&value).map_err(|e| ConfigError(e.to_string()))?;
        let names: Vec<String> = spec.observations.iter().map(|o| o.name.clone()).collect();
        // The env's local index (its position among the host's envs), the host's info
        // writer, pending reset options and unseeded envs, its flattener and unpacker.
        let parts = host.call_method1("pyenv_parts", (&env,)).map_err(fail)?;
        type Parts<'py> = (
            usize,
            Bound<'py, PyAny>,
            Bound<'py, PyDict>,
            Bound<'py, PySet>,
            Bound<'py, PyAny>,
            Bound<'py, PyAny>,
        );
        let (local, note_info, reset_options, unseeded, flatten, unpack): Parts<'_> =
            parts.extract().map_err(fail)?;
        Ok(Box::new(PyEnv {
            local,
            note_info: note_info.unbind(),
            reset_options: reset_options.unbind(),
            unseeded: unseeded.unbind(),
            step: env.getattr("step").map_err(fail)?.unbind(),
            reset: env.getattr("reset").map_err(fail)?.unbind(),
            label: env.str().map_err(fail)?.to_string(),
            as_array: py.import("numpy").and_then(|np| np.getattr("asarray")).map_err(fail)?.unbind(),
            flatten_obs: optional(flatten),
            unpack_action: optional(unpack),
            dict_obs: names.len() > 1 || spec.single_key_dict,
            row_bytes: spec.observations.iter().map(|o| o.space.value_bytes()).collect(),
            shapes: spec.observations.iter().map(|o| o.space.shape()).collect(),
            held: spec.observations.iter().map(|_| Held::Int(0)).collect(),
            names,
            spec,
        }))
    })
}

/// `value` unless it is None.
fn optional(value: Bound<'_, PyAny>) -> Option<Py<PyAny>> {
    (!value.is_none()).then(|| value.unbind())
}

/// A Python env and its last observation.
struct PyEnv {
    /// Its index among its host's envs (`shmenv.worker.EnvHost.envs`: a worker's, or a
    /// trainer shard's).
    local: usize,
    /// The host's `shmenv.infos.InfoWriter.note_info`, called only when the env returns a
    /// non-empty info dict.
    note_info: Py<PyAny>,
    /// The host's `reset_options`: the options of `reset(options=...)` the trainer sent
    /// for an env, taken (removed) by that env's next reset.
    reset_options: Py<PyDict>,
    /// The host's `unseeded`: the envs whose next reset gets `seed=None` whatever the
    /// engine's seed (the first reset of a pool built without a seed, as Gymnasium's
    /// vector envs reset them), each taken (removed) by that reset.
    unseeded: Py<PySet>,
    step: Py<PyAny>,
    reset: Py<PyAny>,
    /// The env as Python prints it (`<TimeLimit<...<CartPoleEnv<CartPole-v1>>>>`), for
    /// messages.
    label: String,
    /// `numpy.asarray` (called with `order="C"`), for observations that are not already
    /// C-contiguous arrays of the right dtype (unlike `ascontiguousarray`, it keeps a
    /// scalar 0-d, the shape of a `Box(shape=())` value).
    as_array: Py<PyAny>,
    /// A nested Dict/Tuple observation space: `shmenv.worker`'s function from an
    /// observation to its arrays in spec order.
    flatten_obs: Option<Py<PyAny>>,
    /// A Dict/Tuple action space: `shmenv.worker`'s function from the packed byte row to
    /// the action the env takes.
    unpack_action: Option<Py<PyAny>>,
    spec: EnvSpec,
    names: Vec<String>,
    dict_obs: bool,
    /// Bytes of each observation array's row.
    row_bytes: Vec<usize>,
    /// Each observation array's shape (one value's): an observation of another shape
    /// (`(3, 1)` for `Box((3,))`) is refused, as `SyncVectorEnv` cannot batch it either.
    shapes: Vec<Vec<usize>>,
    /// The last observation, one entry per observation array: the (checked) array the env
    /// returned, copied into the region by `observe`, which the host calls before the env's
    /// next `reset`/`step` (right after it in sync mode; after a few other envs' steps in
    /// async mode, where it claims rows for several envs at once).
    held: Vec<Held>,
}

/// One observation array of the last observation.
enum Held {
    /// A C-contiguous array of the space's dtype and size.
    Array(Py<PyUntypedArray>),
    /// A `Discrete` observation.
    Int(i64),
}

impl PyEnv {
    /// The action as the Python value a Gymnasium env expects: an int for `Discrete`, a
    /// numpy scalar for a scalar Box, else an array of the space's dtype and shape; a composite action (a Dict or Tuple space,
    /// packed into a byte row by the trainer) unpacked by `shmenv.worker`.
    fn action<'py>(&self, py: Python<'py>, action: ActionIn<'_>) -> PyResult<Bound<'py, PyAny>> {
        let space = action.space();
        if let Space::Discrete { .. } = space {
            return Ok(action.discrete().into_pyobject(py)?.into_any());
        }
        let shape = space.dims();
        let array = views::owned(py, action.bytes(), views::descr(py, space.dtype()), shape)?;
        match &self.unpack_action {
            Some(unpack) => unpack.bind(py).call1((array,)),
            // A scalar space (`Box(shape=())`): the numpy scalar, as `SyncVectorEnv` hands it out.
            None if shape.is_empty() => array.get_item(PyTuple::empty(py)),
            None => Ok(array),
        }
    }

    /// Keeps observation array `k` (`value`) for `observe`, once it is a C-contiguous array
    /// of the space's dtype and shape (converted with `numpy.asarray` when it is not; an
    /// array that already is one is kept as is, not copied). `None`, a value of another
    /// shape, or a `Discrete` observation that is not an int is refused, naming the env.
    fn store(&mut self, py: Python<'_>, k: usize, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let space = &self.spec.observations[k].space;
        if value.is_none() {
            return Err(self.bad_obs(
                k,
                "None".into(),
                "return a value of the space (an array, or an int for Discrete)",
            ));
        }
        if let Space::Discrete { .. } = space {
            let v = value.extract::<i64>().map_err(|_| {
                let got = format!("{} (a {})", short_repr(value), type_name(value));
                self.bad_obs(k, got, "return an int (a Python or numpy integer)")
            })?;
            self.held[k] = Held::Int(v);
            return Ok(());
        }
        let descr = views::descr(py, space.dtype());
        let converted;
        let array = match value.cast::<PyUntypedArray>() {
            Ok(a) if a.is_c_contiguous() && a.dtype().is_equiv_to(&descr) => a,
            _ => {
                converted = self.as_array.bind(py).call1((value, &descr, "C"))?;
                converted.cast::<PyUntypedArray>()?
            }
        };
        if array.shape() != self.shapes[k].as_slice() {
            let got = format!("an array of shape {}", py_shape(array.shape()));
            let todo = format!(
                "return an array of shape {} (reshape it in the env, or declare the space with the shape the env \
                 returns)",
                py_shape(&self.shapes[k])
            );
            return Err(self.bad_obs(k, got, &todo));
        }
        if !array.is_c_contiguous() || array.len() * descr.itemsize() != self.row_bytes[k] {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "observation {:?} of {} has {} elements, its space {} has {}",
                self.names[k],
                self.label,
                array.len(),
                space,
                space.num_elements()
            )));
        }
        self.held[k] = Held::Array(array.clone().unbind());
        Ok(())
    }

    /// The error for observation array `k` when the env returned `got` for it: names the
    /// env, the array, its space and shape, and what to do.
    fn bad_obs(&self, k: usize, got: String, todo: &str) -> PyErr {
        let space = &self.spec.observations[k].space;
        let what = if self.names.len() > 1 || self.dict_obs {
            format!("observation {:?}", self.names[k])
        } else {
            "observation".to_string()
        };
        pyo3::exceptions::PyValueError::new_err(format!(
            "{} returned {got} as its {what}, but its space {space} takes values of shape {}: {todo}",
            self.label,
            py_shape(&self.shapes[k])
        ))
    }

    /// Copies the kept observation array `k` into `row` (exactly its bytes).
    fn copy_held(&self, py: Python<'_>, k: usize, row: &mut [u8]) -> PyResult<()> {
        let array = match &self.held[k] {
            Held::Int(v) => {
                row.copy_from_slice(&v.to_ne_bytes());
                return Ok(());
            }
            Held::Array(array) => array.bind(py),
        };
        // Checked again: Python code may have reshaped or resized the array since `store`.
        let itemsize = array.dtype().itemsize();
        if !array.is_c_contiguous() || array.len() * itemsize != row.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "observation {:?} changed size after the env returned it: {} elements, {} bytes each; its row holds {} bytes",
                self.names[k],
                array.len(),
                itemsize,
                row.len()
            )));
        }
        // SAFETY: the array is C-contiguous with `row.len()` bytes of data (checked just
        // above: its element count times its dtype's item size); we hold the GIL for the whole copy, so no Python code can resize
        // or write it meanwhile; `row` is this env's row of the shared region, which numpy's
        // buffer cannot overlap. Copying bytes never makes an invalid value: bool and f16
        // columns are bytes to Rust.
        unsafe {
            let data = (*array.as_array_ptr()).fields.data as *const u8;
            std::ptr::copy_nonoverlapping(data, row.as_mut_ptr(), row.len());
        }
        Ok(())
    }

    /// Hands a non-empty `info` of a `reset` or `step` ("kind") to `shmenv.infos`, which
    /// keeps it for the trainer and flags the env; an empty one costs a length check.
    fn keep_info(&self, py: Python<'_>, kind: &str, info: &Bound<'_, PyAny>) -> PyResult<()> {
        if info.is_truthy()? {
            self.note_info.call1(py, (self.local, kind, info))?;
        }
        Ok(())
    }

    /// Keeps the observation `obs` (an array, a dict of arrays, or a nested Dict/Tuple
    /// observation flattened by `shmenv.worker` into its arrays in spec order) for `observe`.
    fn store_obs(&mut self, py: Python<'_>, obs: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Some(flatten) = &self.flatten_obs {
            let leaves = flatten.bind(py).call1((obs,))?;
            for k in 0..self.names.len() {
                self.store(py, k, &leaves.get_item(k)?)?;
            }
        } else if self.dict_obs {
            for k in 0..self.names.len() {
                let value = obs.get_item(&self.names[k])?;
                self.store(py, k, &value)?;
            }
        } else {
            self.store(py, 0, obs)?;
        }
        Ok(())
    }
}

/// A shape as Python prints it: `(3,)`, `(3, 1)`, `()`.
fn py_shape(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// The name of `value`'s type (`list`, `NoneType`).
fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map_or_else(|_| "?".into(), |n| n.to_string())
}

/// `repr(value)`, cut to 80 characters for messages.
fn short_repr(value: &Bound<'_, PyAny>) -> String {
    let text = value.repr().map_or_else(|_| "?".into(), |r| r.to_string());
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// What a `reset()` (`n` = 2: obs, info) or `step()` (`n` = 5: obs, reward, terminated,
/// truncated, info) returned, checked: a tuple of `n` values whose last (the info) is a
/// dict, as the Gymnasium API returns them (and `SyncVectorEnv` requires).
fn returned<'py>(out: &Bound<'py, PyAny>, call: &str, n: usize, env: &str) -> PyResult<Bound<'py, PyTuple>> {
    let form = if n == 2 { "(obs, info)" } else { "(obs, reward, terminated, truncated, info)" };
    let bad = |got: String| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "{call} of {env} returned {got}; the Gymnasium API returns a tuple of {n} values {form}, with info a \
             dict (return {{}} when there is no info)"
        ))
    };
    let t = out.cast::<PyTuple>().map_err(|_| bad(format!("a {} ({})", type_name(out), short_repr(out))))?;
    if t.len() != n {
        return Err(bad(if t.len() == 1 { "1 value".into() } else { format!("{} values", t.len()) }));
    }
    let info = t.get_item(n - 1)?;
    if !info.is_instance_of::<PyDict>() {
        return Err(bad(format!("an info of type {} ({})", type_name(&info), short_repr(&info))));
    }
    Ok(t.clone())
}

/// Panics with `err`'s traceback: the host reports it as `EnvPanicked`, and the trainer
/// raises it as `shmenv.WorkerError` (once, with the traceback).
fn raise(py: Python<'_>, what: &str, err: PyErr) -> ! {
    std::panic::panic_any(format!("{PYTHON_EXCEPTION} in {what}:\n{}", describe(py, &err)))
}

/// How the panic payload of a Python exception begins.
const PYTHON_EXCEPTION: &str = "Python exception";

/// In a trainer that steps hosted envs: wraps the process's panic hook (once) so that
/// [`raise`]'s panics print nothing (the pool raises them as `shmenv.WorkerError` with the
/// traceback); every other panic goes to the hook that was installed before.
fn quiet_python_exceptions_in_trainer() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let ours =
                info.payload().downcast_ref::<String>().is_some_and(|m| m.starts_with(PYTHON_EXCEPTION));
            if !ours {
                previous(info);
            }
        }));
    });
}

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
                // As Gymnasium's vector envs call it: `reset(seed=..., options=...)`, both
                // always given (None when there are none).
                let unseeded = self.unseeded.bind(py);
                let seed = if !unseeded.is_empty() && unseeded.discard(self.local)? { None } else { seed };
                kwargs.set_item("seed", seed)?;
                let pending = self.reset_options.bind(py);
                let mut options = None;
                if !pending.is_empty() {
                    options = pending.get_item(self.local)?;
                    if options.is_some() {
                        pending.del_item(self.local)?;
                    }
                }
                kwargs.set_item("options", options)?;
                let out = self.reset.call(py, (), Some(&kwargs))?;
                let out = returned(out.bind(py), "reset()", 2, &self.label)?;
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
                let t = returned(&out, "step()", 5, &self.label)?;
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
        // Nearly free inside a sync batch, whose scope holds the GIL already (`GilScope`).
        Python::attach(|py| {
            for k in 0..self.held.len() {
                if let Err(e) = self.copy_held(py, k, out.array::<u8>(k)) {
                    raise(py, "observe", e)
                }
            }
        })
    }
}
