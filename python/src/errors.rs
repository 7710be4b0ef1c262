//! Engine errors as the Python exceptions of `shmenv.errors`, with the engine's messages
//! and the details as attributes.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use shmenv_engine::{BuildError, PoolFailure, RecvError, ResetError, SendError, StepError};

/// `v` as a Python object (`None` if it cannot be converted, which plain values always can).
fn obj<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> Py<PyAny> {
    v.into_py_any(py).unwrap_or_else(|_| py.None())
}

/// The classes of `shmenv.errors` the extension raises: the one list of their names on the
/// Rust side (`_shmenv.error_class_names()` exports it, and a Python test checks that each
/// is a class of `shmenv.errors`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // each variant is its Python class's name, which ends in Error
pub(crate) enum ErrorClass {
    BuildError,
    UnknownEnvError,
    ConfigError,
    InvalidArgumentError,
    NotEnoughMemoryError,
    ActionError,
    WorkerDiedError,
    WorkerError,
    WorkerTimeoutError,
    ClosedError,
    UsageError,
}

impl ErrorClass {
    /// Every class, in `shmenv.errors`'s order.
    const ALL: [ErrorClass; 11] = [
        ErrorClass::BuildError,
        ErrorClass::UnknownEnvError,
        ErrorClass::ConfigError,
        ErrorClass::InvalidArgumentError,
        ErrorClass::NotEnoughMemoryError,
        ErrorClass::ActionError,
        ErrorClass::WorkerDiedError,
        ErrorClass::WorkerError,
        ErrorClass::WorkerTimeoutError,
        ErrorClass::ClosedError,
        ErrorClass::UsageError,
    ];

    /// The class's name in `shmenv.errors`.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            ErrorClass::BuildError => "BuildError",
            ErrorClass::UnknownEnvError => "UnknownEnvError",
            ErrorClass::ConfigError => "ConfigError",
            ErrorClass::InvalidArgumentError => "InvalidArgumentError",
            ErrorClass::NotEnoughMemoryError => "NotEnoughMemoryError",
            ErrorClass::ActionError => "ActionError",
            ErrorClass::WorkerDiedError => "WorkerDiedError",
            ErrorClass::WorkerError => "WorkerError",
            ErrorClass::WorkerTimeoutError => "WorkerTimeoutError",
            ErrorClass::ClosedError => "ClosedError",
            ErrorClass::UsageError => "UsageError",
        }
    }
}

/// The names of every `shmenv.errors` class the extension can raise ([`ErrorClass`]).
#[pyfunction]
pub(crate) fn error_class_names() -> Vec<&'static str> {
    ErrorClass::ALL.iter().map(|c| c.name()).collect()
}

/// An instance of `shmenv.errors.<class>` carrying `message`, with `attrs` set on it.
pub(crate) fn raise(
    py: Python<'_>,
    class: ErrorClass,
    message: String,
    attrs: Vec<(&str, Py<PyAny>)>,
) -> PyErr {
    let made = || -> PyResult<PyErr> {
        let exc = py.import("shmenv.errors")?.getattr(class.name())?.call1((message,))?;
        for (k, v) in attrs {
            exc.setattr(k, v)?;
        }
        Ok(PyErr::from_value(exc))
    };
    made().unwrap_or_else(|e| e)
}

/// How a worker died, for `WorkerDiedError`'s attributes.
struct Death {
    worker: usize,
    pid: u32,
    /// None when the pool was still starting.
    env_ids: Option<Vec<usize>>,
    exit: shmenv_engine::WorkerExit,
    output: String,
    /// Whether the kernel's OOM killer ended it.
    oom_kill: bool,
}

/// `WorkerDiedError` with its attributes.
fn worker_died(py: Python<'_>, message: String, death: Death) -> PyErr {
    let attrs = vec![
        ("worker", obj(py, death.worker)),
        ("pid", obj(py, death.pid)),
        ("env_ids", obj(py, death.env_ids)),
        ("exit", obj(py, death.exit.to_string())),
        ("output", obj(py, death.output)),
        ("oom_kill", obj(py, death.oom_kill)),
    ];
    raise(py, ErrorClass::WorkerDiedError, message, attrs)
}

/// The Python exception for a pool that could not be built.
pub(crate) fn build_error(py: Python<'_>, err: BuildError) -> PyErr {
    let message = err.to_string();
    match err {
        BuildError::UnknownEnv { id, registered, closest } => raise(
            py,
            ErrorClass::UnknownEnvError,
            message,
            vec![("env_id", obj(py, id)), ("registered", obj(py, registered)), ("closest", obj(py, closest))],
        ),
        // A Python env's constructor failed in a worker: its traceback is the message.
        BuildError::BadConfig { id, message } if id == crate::pyenv::PYTHON_ENV_ID => {
            raise(py, ErrorClass::BuildError, message, vec![])
        }
        BuildError::BadConfig { .. } => raise(py, ErrorClass::ConfigError, message, vec![]),
        BuildError::InvalidArgument(_) => raise(py, ErrorClass::InvalidArgumentError, message, vec![]),
        BuildError::WorkerDied { worker, pid, exit, oom_kill, .. } => {
            let oom_kill = oom_kill.is_some();
            worker_died(
                py,
                message,
                Death { worker, pid, env_ids: None, exit, output: String::new(), oom_kill },
            )
        }
        BuildError::NotEnoughMemory { num_envs, region, workers, fits, room, .. } => raise(
            py,
            ErrorClass::NotEnoughMemoryError,
            message,
            vec![
                ("num_envs", obj(py, num_envs)),
                ("needed", obj(py, region.saturating_add(workers))),
                ("available", obj(py, room.room())),
                ("fits", obj(py, fits)),
            ],
        ),
        // The rest have no more specific class: `BuildError` with the message.
        BuildError::Plugin { .. }
        | BuildError::WorkerProgramNotFound { .. }
        | BuildError::NotServingWorkers
        | BuildError::Spawn { .. }
        | BuildError::Region { .. }
        | BuildError::WorkerFailed { .. }
        | BuildError::SpecMismatch { .. }
        | BuildError::TrainerShard(_)
        | BuildError::StartupTimeout { .. } => raise(py, ErrorClass::BuildError, message, vec![]),
    }
}

/// An engine call's error as the Python exception for it: the pool's failures as
/// `WorkerDiedError`, `WorkerError`, `WorkerTimeoutError`, `ClosedError` (Ctrl-C as the
/// `KeyboardInterrupt` the interrupt check caught), refused actions as `ActionError`, calls
/// that do not fit the pool's state or mode as `UsageError`.
pub(crate) trait CallError: Sized {
    /// The exception; `interrupted` is what the interrupt check caught (usually
    /// `KeyboardInterrupt`), raised as it is.
    fn into_py_err(self, py: Python<'_>, interrupted: Option<PyErr>) -> PyErr;
}

impl CallError for StepError {
    fn into_py_err(self, py: Python<'_>, interrupted: Option<PyErr>) -> PyErr {
        let message = self.to_string();
        match self {
            StepError::Failed(f) => pool_failure(py, f, interrupted),
            StepError::Action(_) => raise(py, ErrorClass::ActionError, message, vec![]),
            StepError::NotReset | StepError::NeedsReset { .. } | StepError::WrongMode(_) => {
                raise(py, ErrorClass::UsageError, message, vec![])
            }
        }
    }
}

impl CallError for ResetError {
    fn into_py_err(self, py: Python<'_>, interrupted: Option<PyErr>) -> PyErr {
        let message = self.to_string();
        match self {
            ResetError::Failed(f) => pool_failure(py, f, interrupted),
            ResetError::BadMask { .. }
            | ResetError::PartialFirstReset
            | ResetError::InFlight { .. }
            | ResetError::WrongMode(_) => raise(py, ErrorClass::UsageError, message, vec![]),
        }
    }
}

impl CallError for SendError {
    fn into_py_err(self, py: Python<'_>, interrupted: Option<PyErr>) -> PyErr {
        let message = self.to_string();
        match self {
            SendError::Failed(f) => pool_failure(py, f, interrupted),
            SendError::Action(_) => raise(py, ErrorClass::ActionError, message, vec![]),
            SendError::NotReset
            | SendError::BadEnvId { .. }
            | SendError::EnvBusy { .. }
            | SendError::NeedsReset { .. }
            | SendError::WrongMode(_) => raise(py, ErrorClass::UsageError, message, vec![]),
        }
    }
}

impl CallError for RecvError {
    fn into_py_err(self, py: Python<'_>, interrupted: Option<PyErr>) -> PyErr {
        let message = self.to_string();
        match self {
            RecvError::Failed(f) => pool_failure(py, f, interrupted),
            RecvError::NotEnoughInFlight { .. } | RecvError::WrongMode(_) => {
                raise(py, ErrorClass::UsageError, message, vec![])
            }
        }
    }
}

/// The Python exception for a failure that closed the pool.
fn pool_failure(py: Python<'_>, failure: PoolFailure, interrupted: Option<PyErr>) -> PyErr {
    let message = failure.to_string();
    let unattributed = || vec![("env_id", py.None()), ("worker", py.None()), ("traceback", py.None())];
    match failure {
        PoolFailure::Interrupted => interrupted.unwrap_or_else(|| {
            pyo3::exceptions::PyKeyboardInterrupt::new_err("interrupted while waiting for the workers")
        }),
        PoolFailure::WorkerDied { worker, pid, env_ids, exit, output, oom_kill } => {
            let (env_ids, oom_kill) = (Some(env_ids.collect()), oom_kill.is_some());
            worker_died(py, message, Death { worker, pid, env_ids, exit, output, oom_kill })
        }
        PoolFailure::EnvPanicked { env_id, message: traceback } => raise(
            py,
            ErrorClass::WorkerError,
            message,
            vec![("env_id", obj(py, env_id)), ("worker", py.None()), ("traceback", obj(py, traceback))],
        ),
        PoolFailure::WorkerFailed { worker, .. } => raise(
            py,
            ErrorClass::WorkerError,
            message,
            vec![("env_id", py.None()), ("worker", obj(py, worker)), ("traceback", py.None())],
        ),
        PoolFailure::Timeout { workers, env_ids, .. } => raise(
            py,
            ErrorClass::WorkerTimeoutError,
            message,
            vec![("workers", obj(py, workers)), ("env_ids", obj(py, env_ids))],
        ),
        PoolFailure::Closed { .. } => raise(py, ErrorClass::ClosedError, message, vec![]),
        PoolFailure::Protocol { .. } => raise(py, ErrorClass::WorkerError, message, unattributed()),
        PoolFailure::ForeignProcess { .. } => raise(py, ErrorClass::UsageError, message, vec![]),
    }
}
