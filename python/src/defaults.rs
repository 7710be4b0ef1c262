//! The engine's defaults, exported so that Python never restates them: the pool builder's
//! ([`PoolBuilder`]'s `DEFAULT_*` constants, the one place they are written) and those of
//! the spec's JSON form (the keys a space may leave out, filled in by [`Space`]).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use shmenv_engine::launch::CpuAffinity;
use shmenv_engine::spec::Space;
use shmenv_engine::PoolBuilder;

/// The engine's pool defaults, by the name of the `shmenv.make_vec` option (or
/// `PoolArgs` field) that sets each: `ring_depth`, `retain_batches`, `fair_scheduling`,
/// `wait` (a `WaitStrategy` name), `pin_workers` (whether the default affinity pins),
/// `autoreset_mode` (Gymnasium's `AutoresetMode` value), `startup_timeout` (seconds),
/// `stats`, `trace`.
#[pyfunction]
pub(crate) fn pool_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("ring_depth", PoolBuilder::DEFAULT_RING_DEPTH)?;
    d.set_item("retain_batches", PoolBuilder::DEFAULT_RETAIN_BATCHES)?;
    d.set_item("fair_scheduling", PoolBuilder::DEFAULT_FAIR_SCHEDULING)?;
    d.set_item("wait", PoolBuilder::DEFAULT_WAIT.name())?;
    d.set_item("pin_workers", PoolBuilder::DEFAULT_AFFINITY == CpuAffinity::Auto)?;
    d.set_item("autoreset_mode", PoolBuilder::DEFAULT_AUTORESET.name())?;
    d.set_item("startup_timeout", PoolBuilder::DEFAULT_STARTUP_TIMEOUT.as_secs_f64())?;
    d.set_item("stats", PoolBuilder::DEFAULT_STATS)?;
    d.set_item("trace", PoolBuilder::DEFAULT_TRACE)?;
    Ok(d)
}

/// The engine's canonical JSON text of one space (the JSON text `json`): every key the
/// JSON form may leave out filled in as the engine fills it (a `MultiDiscrete`'s `start`,
/// `shape` and `dtype`, a `MultiBinary`'s `shape`) and per-entry values spelled the
/// canonical way. A space the engine refuses raises `ValueError` with the engine's message.
#[pyfunction]
pub(crate) fn canonical_space(json: &str) -> PyResult<String> {
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| PyValueError::new_err(format!("bad space JSON {json:?}: {e}")))?;
    let space = Space::from_json(&value).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(space.to_json().to_string())
}
