//! `shmenv._shmenv.Pool`: the engine's [`Pool`] for Python. Results come back as numpy
//! arrays over the region (see `views`); the Python layer (`shmenv.vector`) turns them
//! into Gymnasium's and SB3's conventions.

use crate::caller::{busy, CallerGuard};
use crate::errors::{build_error, CallError};
use crate::gym_tuple::InfoForm;
use crate::info_columns::{AreaLayout, InfoReader};
use crate::one_call::OneCallArgs;
use crate::pool_args::PoolArgs;
use crate::results::{Results, ResultsMaker};
use crate::views::Lease;
use numpy::{PyArrayDyn, PyArrayMethods, PyReadwriteArray1, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use shmenv_engine::{with_element, AutoReset, DType, Element, Pool};
use std::os::fd::IntoRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often, at most, a wait for workers re-takes the GIL to run Python's signal
/// handlers (Ctrl-C).
const SIGNAL_CHECK_EVERY: Duration = Duration::from_millis(20);

/// A pool of envs in worker processes; see `shmenv.make_vec` for the Python API.
#[pyclass(module = "shmenv._shmenv", name = "Pool")]
pub(crate) struct PyPool {
    pool: Option<Pool>,
    spec_json: String,
    worker_pids: Vec<u32>,
    /// Makes each call's results (and notes their rows for the info reader).
    results: ResultsMaker,
    /// How the one-call path takes its arguments (`set_converters`).
    one_call: Option<Arc<OneCallArgs>>,
    /// The `ShmVectorEnv`'s one-caller guard: a call while another thread holds it is refused.
    caller_guard: Py<CallerGuard>,
    /// The hosted Python envs the trainer steps itself (`shmenv.worker.in_trainer.TrainerEnvs`),
    /// if it has a shard of them.
    trainer_host: Option<Py<PyAny>>,
    /// The envs the trainer steps itself, `(start, end)` (empty without a trainer's shard).
    trainer_envs: (usize, usize),
}

/// Lets Ctrl-C end a wait: every [`SIGNAL_CHECK_EVERY`] at most, the pool's interrupt check
/// runs Python's signal handlers; an exception they raise lands in the returned slot (the
/// failing call raises it) and ends the wait.
fn install_interrupt_check(pool: &mut Pool) -> Arc<Mutex<Option<PyErr>>> {
    let interrupted = Arc::new(Mutex::new(None));
    let slot = interrupted.clone();
    let mut last = Instant::now();
    pool.set_interrupt_check(move || {
        if last.elapsed() < SIGNAL_CHECK_EVERY {
            return false;
        }
        last = Instant::now();
        Python::attach(|py| match py.check_signals() {
            Ok(()) => false,
            Err(e) => {
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                true
            }
        })
    });
    interrupted
}

#[pymethods]
impl PyPool {
    /// Starts a pool of `num_envs` envs of `env_id` with `args` (a dict of `PoolArgs`'s
    /// fields, from Python's `shmenv.vector`).
    #[new]
    fn new(py: Python<'_>, env_id: &str, num_envs: usize, args: PoolArgs) -> PyResult<Self> {
        let (copy, caller_guard) = (args.copy, args.caller_guard.clone_ref(py));
        let (builder, trainer_host) = args.builder(py, env_id, num_envs)?;
        let mut pool = py.detach(|| builder.build()).map_err(|e| build_error(py, e))?;
        let trainer_envs = (pool.trainer_envs().start, pool.trainer_envs().end);
        let interrupted = install_interrupt_check(&mut pool);
        let lease = Py::new(py, Lease::new(pool.mapping_lease()))?;
        Ok(PyPool {
            spec_json: pool.spec().to_json().to_string(),
            worker_pids: pool.worker_pids().to_vec(),
            pool: Some(pool),
            results: ResultsMaker::new(lease, copy, interrupted),
            one_call: None,
            caller_guard,
            trainer_host,
            trainer_envs,
        })
    }

    /// The envs the trainer steps itself, `(start, end)`; `(0, 0)` when every env is in a
    /// worker.
    #[getter]
    fn trainer_envs(slf: &Bound<'_, Self>) -> PyResult<(usize, usize)> {
        Ok(Self::shared(slf)?.trainer_envs)
    }

    /// The hosted Python envs the trainer steps itself (a `shmenv.worker.in_trainer.TrainerEnvs`,
    /// which answers calls for them), or None.
    #[getter]
    fn trainer_host(slf: &Bound<'_, Self>) -> PyResult<Option<Py<PyAny>>> {
        let this = Self::shared(slf)?;
        Ok(this.trainer_host.as_ref().map(|h| h.clone_ref(slf.py())))
    }

    /// The env spec (observation arrays, action space) as canonical JSON.
    #[getter]
    fn spec_json(slf: &Bound<'_, Self>) -> PyResult<String> {
        Ok(Self::shared(slf)?.spec_json.clone())
    }

    /// The keep-alive object every returned array has as its numpy `base`.
    #[getter]
    fn lease(slf: &Bound<'_, Self>) -> PyResult<Py<Lease>> {
        Ok(Self::shared(slf)?.results.lease.clone_ref(slf.py()))
    }

    /// Process ids of the workers (current ones, restarted workers included; after
    /// `close()` the last ones, to check they are gone).
    #[getter]
    fn worker_pids(slf: &Bound<'_, Self>) -> PyResult<Vec<u32>> {
        let this = Self::shared(slf)?;
        Ok(this.pool.as_ref().map_or_else(|| this.worker_pids.clone(), |p| p.worker_pids().to_vec()))
    }

    /// The trainer's end of worker `w`'s private call socket, as `(pid, fd)`: that of the
    /// worker's current process, once (the caller owns the fd); None when there is none
    /// to take (a closed pool, no call socket asked for, taken already).
    fn take_call_socket(slf: &Bound<'_, Self>, w: usize) -> PyResult<Option<(u32, i32)>> {
        let this = Self::shared(slf)?;
        let socket = this.pool.as_ref().and_then(|p| p.take_call_socket(w));
        Ok(socket.map(|s| (s.pid, s.fd.into_raw_fd())))
    }

    /// What the pool did since it started (`Pool::stats`), as JSON with a `verdict`.
    fn stats_json(slf: &Bound<'_, Self>) -> PyResult<String> {
        let report = Self::shared(slf)?.pool()?.stats();
        let mut v = serde_json::to_value(&report).map_err(|e| PyValueError::new_err(e.to_string()))?;
        v["verdict"] = report.verdict().as_str().into();
        Ok(v.to_string())
    }

    /// The base seed of the first reset (the `seed` given, or the one drawn from the clock).
    #[getter]
    fn seed(slf: &Bound<'_, Self>) -> PyResult<u64> {
        Ok(Self::shared(slf)?.pool()?.seed())
    }

    /// Restarts so far, per worker.
    #[getter]
    fn restarts(slf: &Bound<'_, Self>) -> PyResult<Vec<u32>> {
        Ok(Self::shared(slf)?.pool()?.restarts().to_vec())
    }

    /// The env range `(start, end)` of each worker.
    fn shards(slf: &Bound<'_, Self>) -> PyResult<Vec<(usize, usize)>> {
        let this = Self::shared(slf)?;
        let pool = this.pool()?;
        Ok((0..pool.num_workers()).map(|w| pool.shard(w)).map(|r| (r.start, r.end)).collect())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(slf: &Bound<'_, Self>) -> PyResult<bool> {
        Ok(Self::shared(slf)?.pool.is_none())
    }

    /// Envs with an action in flight (async mode).
    #[getter]
    fn in_flight(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Ok(Self::shared(slf)?.pool()?.in_flight())
    }

    /// Resets every env (seeding env `i` with `seed + i` when `seed` is given, or on the
    /// first reset with the pool's seed), or with `mask` (sync mode, one bool per env) only
    /// the envs it selects. Returns [`Results`] like `step`; in async mode the first batch.
    #[pyo3(signature = (seed=None, mask=None))]
    fn reset(slf: &Bound<'_, Self>, seed: Option<u64>, mask: Option<Vec<bool>>) -> PyResult<Results> {
        let (py, mut this) = (slf.py(), Self::exclusive(slf)?);
        let this = &mut *this;
        let pool = this.pool.as_mut().ok_or_else(closed)?;
        let result = py.detach(|| match (mask, seed) {
            (Some(mask), seed) => pool.reset_envs(&mask, seed),
            (None, Some(s)) => pool.reset_with_seed(s),
            (None, None) => pool.reset(),
        });
        this.results.make(py, result)
    }

    /// Sync mode: steps every env. `actions` is a C-contiguous numpy array of the action
    /// space's dtype holding `num_envs` actions. Returns [`Results`] (row `i` is env `i`).
    fn step(slf: &Bound<'_, Self>, actions: &Bound<'_, PyAny>) -> PyResult<Results> {
        let (py, mut this) = (slf.py(), Self::exclusive(slf)?);
        let this = &mut *this;
        let pool = this.pool.as_mut().ok_or_else(closed)?;
        let dtype = pool.spec().action.dtype();
        let result =
            with_element!(dtype, T => with_actions::<T, _>(dtype, actions, |a| py.detach(|| pool.step(a))))?;
        this.results.make(py, result)
    }

    /// Async mode: hands one action per env in `env_ids` (an int64 array) to those envs.
    fn send(slf: &Bound<'_, Self>, actions: &Bound<'_, PyAny>, env_ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let (py, mut this) = (slf.py(), Self::exclusive(slf)?);
        let this = &mut *this;
        let pool = this.pool.as_mut().ok_or_else(closed)?;
        let ids = env_id_list(env_ids, pool.num_envs())?;
        let dtype = pool.spec().action.dtype();
        with_element!(dtype, T => with_actions::<T, _>(dtype, actions, |a| pool.send(a, &ids)))?
            .map_err(|e| e.into_py_err(py, None))
    }

    /// Async mode: starts a reset of every env; `recv()` returns the results.
    fn async_reset(slf: &Bound<'_, Self>) -> PyResult<()> {
        let (py, mut this) = (slf.py(), Self::exclusive(slf)?);
        let this = &mut *this;
        let pool = this.pool.as_mut().ok_or_else(closed)?;
        pool.async_reset().map_err(|e| e.into_py_err(py, None))
    }

    /// Async mode: waits for the next `batch_size` results; returns them like `step`, with
    /// `env_ids` saying which env each row is.
    fn recv(slf: &Bound<'_, Self>) -> PyResult<Results> {
        let (py, mut this) = (slf.py(), Self::exclusive(slf)?);
        let this = &mut *this;
        let pool = this.pool.as_mut().ok_or_else(closed)?;
        let result = py.detach(|| pool.recv());
        this.results.make(py, result)
    }

    /// Gives the one-call path shmenv's Python converters of actions and env ids (see
    /// [`OneCallArgs`]), for the arguments it cannot take as they are.
    fn set_converters(slf: &Bound<'_, Self>, actions: Py<PyAny>, env_ids: Py<PyAny>) -> PyResult<()> {
        let mut this = Self::exclusive(slf)?;
        let args = OneCallArgs::new(this.pool()?, actions, env_ids);
        this.one_call = Some(Arc::new(args));
        Ok(())
    }

    /// Sync mode, for a pool whose batches need nothing from Python (one observation
    /// array, no hosted envs, no restarts): Gymnasium's `step` in one call. Takes the
    /// actions as `ShmVectorEnv.step` does (converted before anything else, as there) and
    /// returns `(obs, rewards, terminated, truncated, infos)`, the infos as
    /// `Results.infos(pool_infos, stats_key)`.
    fn step_gym<'py>(
        slf: &Bound<'py, Self>,
        actions: &Bound<'py, PyAny>,
        pool_infos: &Bound<'py, PyAny>,
        stats_key: &str,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let args = Self::one_call_args(slf)?;
        let actions = args.actions(actions, args.num_envs)?;
        let form = InfoForm { pool_infos: pool_infos.is_truthy()?, stats_key };
        let (py, mut this) = (slf.py(), Self::exclusive(slf)?);
        let this = &mut *this;
        let pool = this.pool.as_mut().ok_or_else(closed)?;
        let dtype = pool.spec().action.dtype();
        let result =
            with_element!(dtype, T => with_actions::<T, _>(dtype, &actions, |a| py.detach(|| pool.step(a))))?;
        this.results.make_tuple(py, result, form)
    }

    /// Async mode, `step_gym`'s pool: `send` taking the actions and env ids (None: every
    /// env) as `ShmVectorEnv.send` does, in the same order: env ids converted, actions
    /// converted, then the ids' range and the rest checked by the pool.
    #[pyo3(signature = (actions, env_ids = None))]
    fn send_gym(
        slf: &Bound<'_, Self>,
        actions: &Bound<'_, PyAny>,
        env_ids: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let args = Self::one_call_args(slf)?;
        let ids = env_ids.map(|ids| args.env_ids(ids)).transpose()?;
        let count = ids.as_ref().map_or(args.num_envs, PyUntypedArrayMethods::len);
        let actions = args.actions(actions, count)?;
        let (py, mut this) = (slf.py(), Self::exclusive(slf)?);
        let this = &mut *this;
        let pool = this.pool.as_mut().ok_or_else(closed)?;
        let n = pool.num_envs();
        let ids = match ids {
            None => (0..n).collect(),
            Some(ids) => env_id_list(&ids, n)?,
        };
        let dtype = pool.spec().action.dtype();
        with_element!(dtype, T => with_actions::<T, _>(dtype, &actions, |a| pool.send(a, &ids)))?
            .map_err(|e| e.into_py_err(py, None))
    }

    /// Async mode, `step_gym`'s pool: `recv` returning Gymnasium's tuple, as `step_gym`.
    fn recv_gym<'py>(
        slf: &Bound<'py, Self>,
        pool_infos: &Bound<'py, PyAny>,
        stats_key: &str,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let form = InfoForm { pool_infos: pool_infos.is_truthy()?, stats_key };
        let (py, mut this) = (slf.py(), Self::exclusive(slf)?);
        let this = &mut *this;
        let pool = this.pool.as_mut().ok_or_else(closed)?;
        let result = py.detach(|| pool.recv());
        this.results.make_tuple(py, result, form)
    }

    /// Async mode, `step_gym`'s pool: `send_gym` then `recv_gym`, in one call (EnvPool's
    /// `step(action, env_id)`, `ShmVectorEnv.step` in async mode).
    #[pyo3(signature = (actions, env_ids, pool_infos, stats_key))]
    fn send_recv_gym<'py>(
        slf: &Bound<'py, Self>,
        actions: &Bound<'py, PyAny>,
        env_ids: Option<&Bound<'py, PyAny>>,
        pool_infos: &Bound<'py, PyAny>,
        stats_key: &str,
    ) -> PyResult<Bound<'py, PyTuple>> {
        Self::send_gym(slf, actions, env_ids)?;
        Self::recv_gym(slf, pool_infos, stats_key)
    }

    /// Hosted Python envs: reads their infos from now on from the area `bytes` (a byte
    /// array over the trainer's mapping, kept alive by the pool until it closes) laid out
    /// as `layout` (`shmenv.infos._Area.layout`): part `p`'s envs have the cells from `p`
    /// times the largest shard, where the parts are the trainer's shard (when it has one:
    /// its envs write from the trainer's thread) and then each worker's.
    fn attach_infos(
        slf: &Bound<'_, Self>,
        bytes: PyReadwriteArray1<'_, u8>,
        layout: AreaLayout,
    ) -> PyResult<()> {
        let mut this = Self::exclusive(slf)?;
        let pool = this.pool()?;
        let own = Some(pool.trainer_envs()).filter(|r| !r.is_empty());
        let shards: Vec<_> = own.into_iter().chain((0..pool.num_workers()).map(|w| pool.shard(w))).collect();
        let same_step = pool.autoreset() == AutoReset::SameStep;
        this.results.infos = Some(InfoReader::new(bytes, layout, &shards, same_step)?);
        Ok(())
    }

    /// Adds to `infos` the numbers hosted envs noted for the rows of the batch the last
    /// call returned, read (and cleared) from the info area: `infos[key]` and its mask
    /// `infos["_key"]` (keys `infos` has already win), and under SameStep auto-reset
    /// `infos["final_info"]`. When some rows' envs kept other values (pickled), adds nothing
    /// and returns `(numbers, rows)`: the same keys in a dict of their own, and those rows.
    fn take_infos<'py>(
        slf: &Bound<'py, Self>,
        infos: &Bound<'py, PyDict>,
    ) -> PyResult<Option<(Bound<'py, PyDict>, Vec<i64>)>> {
        match &mut Self::exclusive(slf)?.results.infos {
            Some(reader) => reader.take(infos),
            None => Ok(None),
        }
    }

    /// A worker was restarted: its replacement names its info keys anew.
    fn forget_info_tables(slf: &Bound<'_, Self>) -> PyResult<()> {
        if let Some(reader) = &mut Self::exclusive(slf)?.results.infos {
            reader.forget_tables();
        }
        Ok(())
    }

    /// Stops the workers and reaps them; returns how each ended ("exit code 0", ...).
    /// Arrays already returned stay readable. Calling it again does nothing.
    fn close(slf: &Bound<'_, Self>) -> PyResult<Vec<Option<String>>> {
        let (py, mut this) = (slf.py(), Self::exclusive(slf)?);
        this.results.infos = None;
        this.results.forget_arrays();
        Ok(match this.pool.take() {
            Some(pool) => {
                this.worker_pids = pool.worker_pids().to_vec();
                py.detach(|| pool.close()).into_iter().map(|e| e.map(|e| e.to_string())).collect()
            }
            None => Vec::new(),
        })
    }
}

impl PyPool {
    fn pool(&self) -> PyResult<&Pool> {
        self.pool.as_ref().ok_or_else(closed)
    }

    /// How the one-call path takes its arguments (a `UsageError` while another thread is
    /// inside a call).
    fn one_call_args(slf: &Bound<'_, Self>) -> PyResult<Arc<OneCallArgs>> {
        let args = Self::exclusive(slf)?.one_call.clone();
        args.ok_or_else(|| {
            PyValueError::new_err("internal error: the one-call path needs set_converters() first")
        })
    }

    /// The pool for one call, or a `UsageError` while another thread is inside a call.
    fn exclusive<'py>(slf: &Bound<'py, Self>) -> PyResult<PyRefMut<'py, Self>> {
        let this = slf.try_borrow_mut().map_err(|_| busy(slf.py(), None))?;
        this.caller_guard.get().check(slf.py())?;
        Ok(this)
    }

    /// The pool for a read (stats, pids, shards), or a `UsageError` while another thread
    /// is inside a call (rather than PyO3's bare `RuntimeError: Already mutably borrowed`).
    fn shared<'py>(slf: &Bound<'py, Self>) -> PyResult<PyRef<'py, Self>> {
        slf.try_borrow().map_err(|_| busy(slf.py(), None))
    }
}

fn closed() -> PyErr {
    Python::attach(|py| {
        crate::errors::raise(
            py,
            crate::errors::ErrorClass::ClosedError,
            "the pool is closed (close() was called); build a new one".into(),
            vec![],
        )
    })
}

/// Env ids from a C-contiguous numpy array of int64 or int32 (EnvPool's `env_id` dtype,
/// as `recv` returns them), each checked to be in `0..num_envs`.
pub(crate) fn env_id_list(array: &Bound<'_, PyAny>, num_envs: usize) -> PyResult<Vec<usize>> {
    fn convert<T: numpy::Element + Copy + Into<i64>>(
        array: &Bound<'_, PyArrayDyn<T>>,
        num_envs: usize,
    ) -> PyResult<Vec<usize>> {
        let ro = array.try_readonly().map_err(|e| PyValueError::new_err(e.to_string()))?;
        let slice = ro.as_slice().map_err(|_| PyValueError::new_err("env_ids must be C-contiguous"))?;
        // Allocated once (collecting results would grow the vector as it goes).
        let mut ids = Vec::with_capacity(slice.len());
        for &e in slice {
            let e: i64 = e.into();
            let id = usize::try_from(e).ok().filter(|&u| u < num_envs);
            ids.push(
                id.ok_or_else(|| invalid_argument(shmenv_engine::error::env_id_out_of_range(e, num_envs)))?,
            );
        }
        Ok(ids)
    }
    if let Ok(a) = array.cast::<PyArrayDyn<i64>>() {
        convert(a, num_envs)
    } else if let Ok(a) = array.cast::<PyArrayDyn<i32>>() {
        convert(a, num_envs)
    } else {
        Err(PyTypeError::new_err(
            "env_ids must be a numpy int64 or int32 array (shmenv's VectorEnv converts for you)",
        ))
    }
}

/// A `shmenv.InvalidArgumentError` with `message`.
pub(crate) fn invalid_argument(message: String) -> PyErr {
    Python::attach(|py| {
        crate::errors::raise(py, crate::errors::ErrorClass::InvalidArgumentError, message, vec![])
    })
}

/// An action element type as numpy holds it: the same type, but for bools, which come as
/// the bytes of the bool array (a uint8 view), never as Rust `bool`s.
trait FromNumpy: Element {
    /// The numpy element type of the array.
    type Numpy: numpy::Element;
    /// The actions, typed for the engine.
    fn from_numpy(s: &[Self::Numpy]) -> &[Self];
}

macro_rules! from_numpy_as_is {
    ($($t:ty),+) => {$(
        impl FromNumpy for $t {
            type Numpy = $t;
            fn from_numpy(s: &[$t]) -> &[$t] {
                s
            }
        }
    )+};
}
from_numpy_as_is!(f32, f64, u8, i8, i16, i32, i64, u16, u32, u64, shmenv_engine::spec::F16);

impl FromNumpy for shmenv_engine::spec::Bool8 {
    type Numpy = u8;
    fn from_numpy(s: &[u8]) -> &[Self] {
        bytemuck::cast_slice(s)
    }
}

/// Reads `array`, which must be a C-contiguous numpy array of the action space's `dtype`
/// (`T`'s), and calls `f` on its actions.
fn with_actions<T: FromNumpy, R>(
    dtype: DType,
    array: &Bound<'_, PyAny>,
    f: impl FnOnce(&[T]) -> R,
) -> PyResult<R> {
    let typed = array.cast::<PyArrayDyn<T::Numpy>>().map_err(|_| {
        PyTypeError::new_err(format!(
            "actions must be a numpy array of dtype {} (shmenv's VectorEnv converts for you)",
            dtype.name()
        ))
    })?;
    let ro = typed.try_readonly().map_err(|e| PyValueError::new_err(e.to_string()))?;
    let s = ro.as_slice().map_err(|_| PyValueError::new_err("actions must be C-contiguous"))?;
    Ok(f(T::from_numpy(s)))
}
