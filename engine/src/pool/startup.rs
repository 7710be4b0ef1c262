//! Start-up: the handshake in which every worker reports its spec and the trainer lays
//! the region out.

use crate::error::BuildError;
use crate::launch::Supervisor;
use crate::protocol::{self, Header, Layout, PoolParams, RegionState, WorkerReport, WorkerStatus};
use crate::region::Region;
use crate::ring::{RegionRing, RingWords};
use crate::spec::EnvSpec;
use crate::stats::PoolStats;
use crate::sync::{WaitOutcome, Waiter};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{closest_match, mark_unwritten, memory, trainer_semaphore, Control, MemoryRoom};

/// A pool whose workers have not yet agreed on a spec. Dropping it (after `abandon`)
/// stops and reaps the workers: `supervisor` is declared first so it goes first.
pub(super) struct Startup {
    pub(super) supervisor: Supervisor,
    pub(super) region: Region,
    pub(super) params: PoolParams,
    pub(super) program: PathBuf,
    pub(super) waiter: Waiter,
}

impl Startup {
    pub(super) fn control(&self) -> Control<'_> {
        Control { region: &self.region, num_workers: self.params.num_workers }
    }

    /// Collects every worker's spec, lays out the data part and hands it over.
    pub(super) fn handshake(
        &mut self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(EnvSpec, Layout), BuildError> {
        self.wait_all(deadline, timeout)?;
        let mut specs = Vec::with_capacity(self.params.num_workers);
        for worker in 0..self.params.num_workers {
            match self.control().report(worker) {
                Some(WorkerReport::Spec(spec)) => specs.push(spec),
                Some(other) => return Err(build_error(worker, other)),
                None => {
                    let message = "its report is unreadable (corrupt region?)".into();
                    return Err(BuildError::WorkerFailed { worker, message });
                }
            }
        }
        if let Some(other) = specs.iter().position(|s| *s != specs[0]) {
            return Err(BuildError::SpecMismatch {
                worker: other,
                first: specs[0].to_string(),
                other: specs[other].to_string(),
            });
        }
        let spec =
            EnvSpec::from_json(&specs[0]).and_then(|s| protocol::check_spaces(&s).map(|()| s)).map_err(
                |message| BuildError::WorkerFailed { worker: 0, message: format!("bad spec: {message}") },
            )?;
        let layout = Layout::compute(&spec, &self.params);
        memory::check_region(layout.total_size, self.params.num_envs, &MemoryRoom::read())?;
        self.region
            .grow_and_seal(layout.total_size)
            .map_err(|source| BuildError::Region { what: "grow and seal", source })?;
        let mut header: Header = self.region.read_pod(0);
        header.total_size = layout.total_size as u64;
        header.layout_hash = layout.hash;
        self.region.write_pod(0, &header);
        if let Some(ring) = &layout.ring {
            if self.params.restart {
                layout.blocks.iter().for_each(|block| mark_unwritten(&self.region, block));
            }
            RegionRing { region: &self.region, layout: ring }.open_all();
        }
        // The stats clock starts before any worker can start waiting for commands.
        PoolStats::new(&self.region, self.params.num_workers).start(self.params.stats);
        // Release: publishes the header and the grown region before workers read them.
        self.region.atomic_u32(protocol::STATE_WORD).store(RegionState::Ready as u32, Ordering::Release);
        self.control().post_all();
        self.wait_all(deadline, timeout)?;
        for worker in 0..self.params.num_workers {
            let status = self.control().status(worker);
            if status != Some(WorkerStatus::Running) {
                let report = self.control().report(worker).unwrap_or(WorkerReport::Failed {
                    message: format!("unexpected status {status:?} after start-up"),
                });
                return Err(build_error(worker, report));
            }
        }
        Ok((spec, layout))
    }

    /// Waits until every worker has posted once (reported, or attached).
    pub(super) fn wait_all(&mut self, deadline: Instant, timeout: Duration) -> Result<(), BuildError> {
        let n = self.params.num_workers;
        let sem = trainer_semaphore(&self.region);
        let sup = &self.supervisor;
        match sem.acquire(n as u32, &mut self.waiter, Some(deadline), || sup.exited_worker()) {
            Ok(()) => Ok(()),
            Err(WaitOutcome::Aborted((worker, exit))) => Err(BuildError::WorkerDied {
                worker,
                pid: self.supervisor.pids()[worker],
                exit,
                program: self.program.clone(),
            }),
            Err(WaitOutcome::TimedOut) => Err(BuildError::StartupTimeout {
                workers: (0..n)
                    .filter(|&w| {
                        !matches!(
                            self.control().status(w),
                            Some(WorkerStatus::Reported | WorkerStatus::Running)
                        )
                    })
                    .collect(),
                waited: timeout,
            }),
        }
    }

    /// Tells every worker that the pool will not start; they exit.
    pub(super) fn abandon(&self) {
        self.region.atomic_u32(protocol::STATE_WORD).store(RegionState::Abandoned as u32, Ordering::Release);
        self.control().post_all();
    }
}

fn build_error(worker: usize, report: WorkerReport) -> BuildError {
    match report {
        WorkerReport::UnknownEnv { id, registered, .. } => {
            let closest = closest_match(&id, &registered);
            BuildError::UnknownEnv { id, registered, closest }
        }
        WorkerReport::BadConfig { id, message } => BuildError::BadConfig { id, message },
        WorkerReport::EnvPanicked { env_id, message } => {
            BuildError::WorkerFailed { worker, message: format!("env {env_id} panicked: {message}") }
        }
        WorkerReport::Failed { message } => BuildError::WorkerFailed { worker, message },
        WorkerReport::Spec(_) => {
            BuildError::WorkerFailed { worker, message: "reported a spec instead of running".into() }
        }
    }
}
