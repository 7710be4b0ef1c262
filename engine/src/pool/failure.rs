//! The errors of a pool call that failed: why a wait was given up ([`Abort`]), what a
//! worker reported or how it died, and the pool closed with the reason recorded.

use super::Core;
use crate::error::{PoolFailure, WrongMode};
use crate::launch::WorkerExit;
use crate::protocol::{self, WorkerReport};

/// Why a wait for workers was given up.
pub(super) enum Abort {
    Died(usize, WorkerExit),
    Failed(usize),
    Interrupted,
    TimedOut { workers: Vec<usize>, env_ids: Vec<usize> },
}

impl Core {
    /// The error for a wait that was given up, recorded as the reason the pool is closed.
    /// An interrupted pool also stops its workers: a command is half done.
    pub(super) fn abort(&mut self, abort: Abort) -> PoolFailure {
        let err = match abort {
            Abort::Died(worker, exit) => self.died(worker, exit),
            Abort::Failed(worker) => self.worker_error(worker),
            Abort::Interrupted => {
                self.shutdown();
                PoolFailure::Interrupted
            }
            Abort::TimedOut { workers, env_ids } => {
                // They did not answer: a polite close would only wait for them.
                workers.iter().for_each(|&w| self.kill_worker(w));
                self.shutdown();
                PoolFailure::Timeout { workers, env_ids, waited: self.step_timeout.unwrap_or_default() }
            }
        };
        self.fail(err)
    }

    /// The error of any call in a process forked from the pool's owner.
    pub(super) fn foreign(&self) -> PoolFailure {
        PoolFailure::ForeignProcess { owner: self.owner.pid(), current: crate::launch::fork::current_pid() }
    }

    /// Records `err` as the reason the pool is closed, and returns it.
    pub(super) fn fail(&mut self, err: PoolFailure) -> PoolFailure {
        self.closed = Some(err.to_string());
        err
    }

    /// The error a failed worker reported.
    pub(super) fn worker_error(&self, worker: usize) -> PoolFailure {
        match self.control().report(worker) {
            Some(WorkerReport::EnvPanicked { env_id, message }) => {
                PoolFailure::EnvPanicked { env_id, message }
            }
            Some(WorkerReport::Failed { message }) => {
                PoolFailure::WorkerFailed { worker, env_ids: self.shard(worker), message }
            }
            other => PoolFailure::WorkerFailed {
                worker,
                env_ids: self.shard(worker),
                message: format!("unexpected worker state (report {other:?})"),
            },
        }
    }

    /// The refusal of a call made in the other mode (after the open check, as every call).
    pub(super) fn wrong_mode<R, E: From<PoolFailure> + From<WrongMode>>(
        &self,
        call: &'static str,
        hint: &'static str,
    ) -> Result<R, E> {
        self.check_open()?;
        Err(WrongMode { call, hint }.into())
    }

    /// The error for a worker that exited: the failure it reported before exiting if
    /// any (a worker that reported a panic may exit before the trainer looks), else
    /// its death (by the OOM killer when it was SIGKILLed and an OOM-kill counter rose).
    pub(super) fn died(&self, worker: usize, exit: WorkerExit) -> PoolFailure {
        let reported = self.control().status(worker) == Some(protocol::WorkerStatus::Failed)
            && matches!(
                self.control().report(worker),
                Some(WorkerReport::EnvPanicked { .. } | WorkerReport::Failed { .. })
            );
        if reported {
            return self.worker_error(worker);
        }
        PoolFailure::WorkerDied {
            worker,
            pid: self.supervisor.pids()[worker],
            env_ids: self.shard(worker),
            exit,
            output: self.supervisor.output_tail(worker),
            oom_kill: crate::launch::memory::oom_kill_of(&self.oom, exit),
        }
    }
}
