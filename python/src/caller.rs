//! One caller at a time: [`CallerGuard`], the guard every call of a `ShmVectorEnv` that
//! touches its pool or its call channel holds (`with guard:` in Python), so a second
//! thread's call raises `shmenv.UsageError` at once, naming the thread inside, instead of
//! interleaving its messages with the first one's or waiting on a socket. The pool's own
//! calls (the native one-call path too) check it as well.
//!
//! Entering and leaving are one extension call each, so a `KeyboardInterrupt` can never
//! land between taking the guard and recording who holds it.

use pyo3::prelude::*;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The guard: which thread is inside (`threading.get_ident()`, 0: none) and how deeply
/// (a call that makes another, such as `step` -> `recv`, re-enters).
#[pyclass(module = "shmenv._shmenv", frozen)]
#[derive(Debug, Default)]
pub(crate) struct CallerGuard {
    owner: AtomicU64,
    depth: AtomicU32,
}

/// The calling thread's id as Python's `threading.get_ident()` gives it (`pthread_self`).
fn current_thread() -> u64 {
    // SAFETY: pthread_self has no preconditions and always succeeds.
    unsafe { libc::pthread_self() as u64 }
}

impl CallerGuard {
    /// Refuses the call when another thread is inside: `Err` is the `UsageError`.
    pub(crate) fn check(&self, py: Python<'_>) -> PyResult<()> {
        match self.owner.load(Ordering::Acquire) {
            0 => Ok(()),
            owner if owner == current_thread() => Ok(()),
            owner => Err(busy(py, Some(owner))),
        }
    }
}

#[pymethods]
impl CallerGuard {
    #[new]
    fn new() -> Self {
        CallerGuard::default()
    }

    /// Enters, or raises `UsageError` naming the thread inside.
    fn __enter__(&self, py: Python<'_>) -> PyResult<()> {
        let me = current_thread();
        match self.owner.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {}
            Err(owner) if owner == me => {}
            Err(owner) => return Err(busy(py, Some(owner))),
        }
        // Only the owner changes the depth, while it is inside.
        self.depth.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Leaves (the thread is no longer inside once its outermost call leaves).
    fn __exit__(&self, _kind: Bound<'_, PyAny>, _value: Bound<'_, PyAny>, _traceback: Bound<'_, PyAny>) {
        if self.depth.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.owner.store(0, Ordering::Release);
        }
    }

    /// The thread inside (its `threading.get_ident()`), None when none is.
    #[getter]
    fn owner(&self) -> Option<u64> {
        Some(self.owner.load(Ordering::Acquire)).filter(|&o| o != 0)
    }
}

/// The `UsageError` for a call made while `owner` (a `threading.get_ident()`, None when
/// unknown) is inside one on the same pool.
pub(crate) fn busy(py: Python<'_>, owner: Option<u64>) -> PyErr {
    let who = owner
        .and_then(|id| thread_name(py, id))
        .map_or_else(|| "another thread".to_string(), |name| format!("thread '{name}'"));
    let message = format!(
        "this pool is in a call from {who}: a pool is used from one thread at a time; give each thread its own \
         pool, or guard this one with a lock"
    );
    crate::errors::raise(py, crate::errors::ErrorClass::UsageError, message, vec![])
}

/// The name of the live Python thread whose `ident` is `id`.
fn thread_name(py: Python<'_>, id: u64) -> Option<String> {
    let threads = py.import("threading").ok()?.call_method0("enumerate").ok()?;
    threads.try_iter().ok()?.flatten().find_map(|t| {
        let ident: u64 = t.getattr("ident").ok()?.extract().ok()?;
        (ident == id).then(|| t.getattr("name").ok()?.extract().ok()).flatten()
    })
}
