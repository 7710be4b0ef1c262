//! The engine's defaults, exported so that Python never restates them: the pool builder's
//! ([`PoolBuilder`]'s `DEFAULT_*` constants, the one place they are written).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use shmenv_engine::launch::CpuAffinity;
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
