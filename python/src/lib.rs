//! `shmenv._shmenv`: the extension module of the `shmenv` Python package. It wraps the
//! engine's [`Pool`](shmenv_engine::Pool) (`pool`), hands results to Python as read-only
//! numpy arrays over the shared region (`views`), maps errors to `shmenv.errors`
//! (`errors`), and runs the worker host inside `python -m shmenv.worker`.

mod caller;
mod checks;
mod defaults;
mod errors;
mod gym_tuple;
mod info_columns;
mod one_call;
mod pool;
mod pool_args;
mod pyenv;
mod recycle;
mod results;
mod views;

use pyo3::prelude::*;
use shmenv_worker::Registry;

/// Runs a worker (the body of `python -m shmenv.worker`): `argv` is the whole command
/// line as `sys.argv`. Hosts the built-in envs and Python envs. The GIL is released while
/// the host waits, so the worker's call thread (`get_attr`, `call`) can serve in between.
/// Returns the exit code.
#[pyfunction]
fn run_worker(py: Python<'_>, argv: Vec<String>) -> u8 {
    let registry = pyenv::registry();
    pyenv::quiet_python_exceptions();
    py.detach(|| shmenv_worker::host::run_with_scope(&registry, &argv, &pyenv::GilScope))
}

/// Worker side: every child this worker process forks from now on gets private zero pages
/// in place of `len` bytes at `address` (the info area's mapping, which the worker keeps
/// for its life), so a copy that env code makes with `fork()` never writes the trainer's
/// infos (the region gets the same from the worker host).
#[pyfunction]
fn guard_infos_in_children(address: usize, len: usize) {
    let which = shmenv_engine::launch::fork::SharedMapping::Infos;
    shmenv_engine::launch::fork::guard_in_children(which, address, len);
}

/// The env id a pool uses for Python envs (the config says which env).
#[pyfunction]
fn python_env_id() -> &'static str {
    pyenv::PYTHON_ENV_ID
}

/// The ids of the built-in (Rust) envs.
#[pyfunction]
fn builtin_env_ids() -> Vec<String> {
    Registry::with_builtins().ids()
}

/// The envs worker `w` of a pool of `num_envs` envs and `num_workers` workers hosts, as
/// `(start, end)`: the engine's shard rule, which Python code must not restate. Used for
/// hosted Python envs only, which never have a trainer shard.
#[pyfunction]
fn shard(w: usize, num_envs: usize, num_workers: usize) -> PyResult<(usize, usize)> {
    if num_workers == 0 || w >= num_workers {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "worker {w} of {num_workers}: a worker index is in 0..num_workers"
        )));
    }
    let r = shmenv_engine::protocol::shard(w, num_envs, num_workers);
    Ok((r.start, r.end))
}

/// The candidate closest to `name` (case-insensitive edit distance), if close enough: the
/// engine's "did you mean" rule, shared by every unknown-id message.
#[pyfunction]
fn closest_match(name: &str, candidates: Vec<String>) -> Option<String> {
    shmenv_engine::pool::closest_match(name, &candidates)
}

/// Every engine dtype as `(name, numpy dtype)`: the dtype table Python uses (spec JSON
/// names such as `"f32"` to numpy), so it is written once, here and in the engine.
#[pyfunction]
fn dtypes(py: Python<'_>) -> Vec<(&'static str, Bound<'_, numpy::PyArrayDescr>)> {
    shmenv_engine::spec::DType::ALL.iter().map(|&d| (d.name(), views::descr(py, d))).collect()
}

#[pymodule]
fn _shmenv(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<pool::PyPool>()?;
    m.add_class::<caller::CallerGuard>()?;
    m.add_class::<results::Results>()?;
    m.add_class::<views::Lease>()?;
    m.add_function(wrap_pyfunction!(run_worker, m)?)?;
    m.add_function(wrap_pyfunction!(guard_infos_in_children, m)?)?;
    m.add_function(wrap_pyfunction!(checks::check_actions, m)?)?;
    m.add_function(wrap_pyfunction!(pool_args::autoreset_name, m)?)?;
    m.add_function(wrap_pyfunction!(pool_args::default_num_workers, m)?)?;
    m.add_function(wrap_pyfunction!(pool_args::trainer_shard_choice, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_env_ids, m)?)?;
    m.add_function(wrap_pyfunction!(python_env_id, m)?)?;
    m.add_function(wrap_pyfunction!(shard, m)?)?;
    m.add_function(wrap_pyfunction!(closest_match, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(info_columns::info_area_layout, m)?)?;
    m.add_function(wrap_pyfunction!(defaults::pool_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(defaults::canonical_space, m)?)?;
    m.add_function(wrap_pyfunction!(errors::error_class_names, m)?)?;
    m.add_function(wrap_pyfunction!(one_call::env_ids_as_is, m)?)?;
    m.add_class::<one_call::ActionForm>()?;
    m.add("WORKER_FLAG", shmenv_engine::launch::WORKER_FLAG)?;
    Ok(())
}
