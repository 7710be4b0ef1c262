//! Start-up: the handshake in which every worker reports its spec and the trainer lays
//! the region out.

use crate::error::BuildError;
use crate::launch::Supervisor;
use crate::protocol::{self, Header, Layout, PoolParams, RegionState, WorkerReport, WorkerStatus};
use crate::region::Region;
use crate::ring::{RegionRing, RingWords};
use crate::spec::EnvSpec;
use crate::stats::PoolStats;
use crate::sync::{WaitMode, WaitOutcome, Waiter};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::shard_choice::TrainerShardChoice;
use super::trainer_shard::{OwnShard, ShardMaker};
use super::{
    mark_unwritten, settings, trainer_semaphore, wait_tuner, AsyncState, Control, Core, FailurePolicy,
    MemoryRoom, Mode, Pool, PoolBuilder, RingState, SyncState,
};
use crate::launch::memory::{self, estimate, OomWatch};
use crate::launch::{CpuAffinity, WorkerCommand};
use crate::protocol::AutoReset;
use crate::sync::WaitStrategy;
use std::sync::Arc;

/// A pool whose workers have not yet agreed on a spec. Dropping it (after `abandon`)
/// stops and reaps the workers: `supervisor` is declared first so it goes first.
pub(super) struct Startup {
    pub(super) supervisor: Supervisor,
    pub(super) region: Region,
    pub(super) params: PoolParams,
    pub(super) program: PathBuf,
    pub(super) waiter: Waiter,
    /// What the workers were placed for at spawn: pinned (`Active`), or left unpinned
    /// (`Sleep`) because other tasks held the cores.
    pub(super) placed_for: WaitMode,
    /// The core each worker is pinned to, or will be once the pool waits actively on free
    /// cores (`None`: not pinned); their rows' memory goes to those cores' nodes.
    pub(super) worker_cpus: Vec<Option<usize>>,
    /// Builds the trainer's shard, when it has one; and why it has one or not.
    pub(super) shard_maker: Option<ShardMaker>,
    pub(super) shard_choice: TrainerShardChoice,
    /// The envs the trainer steps itself, built while the workers start.
    pub(super) own_shard: Option<OwnShard>,
    /// The kernel's OOM-kill counters before the workers started: a worker found SIGKILLed
    /// while one has risen was the OOM killer's victim.
    pub(super) oom: OomWatch,
}

impl Pool {
    /// Starts the workers, takes them through the start-up handshake and builds the pool.
    pub(super) fn start(mut b: PoolBuilder) -> Result<Pool, BuildError> {
        // The settings first: the trainer-shard choice may time a throwaway shard, which the
        // start-up timeout (spawning, building envs, attaching) does not cover.
        let cores = crate::sync::available_cores();
        let settled = settings::check(&b, cores)?;
        let started = Instant::now();
        let deadline = started + b.startup_timeout;
        let mut startup = Startup::launch(&mut b, settled, cores, deadline)?;
        // The trainer's own envs are built while the workers build theirs.
        if let Some(make) = &startup.shard_maker {
            match make.build(&startup.params) {
                Ok(own) => startup.own_shard = Some(own),
                Err(e) => {
                    startup.abandon();
                    return Err(e);
                }
            }
        }
        let (spec, layout) = match startup.handshake(deadline, b.startup_timeout) {
            Ok(agreed) => agreed,
            Err(e) => {
                startup.abandon();
                return Err(e);
            }
        };
        let Startup {
            supervisor,
            mut region,
            params,
            program,
            waiter,
            placed_for,
            worker_cpus,
            shard_choice,
            own_shard,
            oom,
            ..
        } = startup;
        // The pool holds the memfd (for workers it respawns) until it closes; the region
        // handed to views keeps only the mapping.
        let region_file = region.take_file();
        // A replacement may take as long as the step timeout, and at least twice what this
        // start took (a restart builds envs too).
        let restart_timeout = match b.step_timeout {
            Some(t) => t.max(started.elapsed() * 2),
            None => b.startup_timeout,
        };
        let trace = params.trace.then(std::collections::VecDeque::new);
        let mut layout = layout;
        let (mode, close_wakes) = match layout.ring.take() {
            Some(r) => {
                let wakes = r.ready_for.iter().copied().chain([protocol::RING_PAUSE]).collect();
                let ring = RingState::new(r.batch_size, b.retain_batches as u64, b.fair_scheduling, &params);
                (Mode::Async(Box::new(AsyncState { ring, layout: r })), wakes)
            }
            None => (Mode::Sync(SyncState { next_sync_block: 0 }), Vec::new()),
        };
        let ended =
            if params.autoreset == AutoReset::Disabled { vec![false; params.num_envs] } else { Vec::new() };
        let num_workers = params.num_workers;
        let pinned = match b.affinity {
            CpuAffinity::Auto => worker_cpus,
            _ => Vec::new(),
        };
        // With no worker the trainer never waits: nothing to tune.
        let tuner = (b.wait == WaitStrategy::Auto && num_workers > 0).then(wait_tuner::WaitTuner::new);
        let core = Core {
            supervisor,
            region_file,
            region: Arc::new(region),
            layout,
            close_wakes,
            spec,
            params,
            program,
            seed: b.seed.unwrap_or_else(default_seed),
            waiter,
            tuner,
            // `PoolStats::start` (below, in this thread) records this thread.
            caller_tid: crate::stats::current_tid(),
            pinned,
            placed_for,
            busy_until_ns: 0,
            others: Default::default(),
            first_reset_done: false,
            has_reset: false,
            closed: None,
            ended,
            interrupt: None,
            step_timeout: b.step_timeout,
            command_seq: 0,
            failure_policy: b.failure_policy,
            restarts: vec![0; num_workers],
            restarted: Vec::new(),
            startup_timeout: b.startup_timeout,
            restart_timeout,
            trace,
            owner: crate::launch::fork::Owner::current(),
            own_shard,
            shard_choice,
            oom,
        };
        Ok(Pool { core, mode })
    }
}

impl Startup {
    /// Creates the region with the header and the params of the `settled` settings, and
    /// spawns the workers (by `deadline`). Takes the builder's env id, config and worker
    /// command.
    fn launch(
        b: &mut PoolBuilder,
        settled: settings::Settled,
        cores: usize,
        deadline: Instant,
    ) -> Result<Startup, BuildError> {
        let settings::Settled { num_workers, batch_size, shard: shard_maker, shard_choice } = settled;
        let command = match b.worker_command.take() {
            Some(c) => c,
            None => crate::launch::program::default_worker_program()
                .map(WorkerCommand::new)
                .map_err(|searched| BuildError::WorkerProgramNotFound { searched })?,
        };
        let program = command.program.clone();
        let params = PoolParams {
            env_id: std::mem::take(&mut b.env_id),
            config: std::mem::take(&mut b.config),
            num_envs: b.num_envs,
            num_workers,
            autoreset: b.autoreset,
            max_episode_steps: b.max_episode_steps,
            wait: b.wait,
            batch_size,
            ring_depth: b.ring_depth,
            stats: b.stats,
            trace: b.trace,
            restart: b.failure_policy != FailurePolicy::Fail,
            plugin: b.plugin.as_deref().map(plugin_path).transpose()?,
            cores,
            trainer_shard: shard_maker.is_some(),
        };
        // Before any worker builds its envs: the least region any spec gives and the envs'
        // state, against what this process may use.
        estimate::check_before_start(&params, &MemoryRoom::read())?;
        let params_json = serde_json::to_vec(&params).expect("params serialize");
        if params_json.len() > protocol::PARAMS_CAPACITY {
            return Err(BuildError::InvalidArgument(format!(
                "config is {} bytes of JSON, more than the {} the region holds",
                params_json.len(),
                protocol::PARAMS_CAPACITY
            )));
        }
        let region_err = |what| move |source| BuildError::Region { what, source };
        let region = Region::create("shmenv", protocol::bootstrap_size(num_workers))
            .map_err(region_err("memfd_create"))?;
        // SAFETY: a region this thread just created: no worker exists yet to read it.
        unsafe {
            region
                .write_pod(0, &Header::new(b.num_envs as u32, num_workers as u32, params_json.len() as u32));
            region.write_bytes(protocol::params_offset(num_workers), &params_json);
        }

        // `CpuAffinity::Auto` with the wait tuner pins only onto free cores: on a machine
        // already running other tasks the workers start unpinned, and the tuner pins them
        // once the pool waits actively and the cores are free (see `Core::tune`).
        // Busy: more tasks runnable than the trainer (this one) and the cores the workers
        // would not need.
        let spare = crate::sync::available_cores().saturating_sub(num_workers).max(1);
        let busy = b.affinity == CpuAffinity::Auto
            && b.wait == WaitStrategy::Auto
            && crate::launch::runnable_tasks().is_some_and(|running| running > spare);
        let placed_for = if busy { WaitMode::Sleep } else { WaitMode::Active };
        let worker_cpus = b.affinity.assign(num_workers);
        let cores = if busy { vec![None; num_workers] } else { worker_cpus.clone() };
        let oom = OomWatch::read();
        let region_fd = region.fd().ok_or_else(|| BuildError::Region {
            what: "hand to the workers",
            source: std::io::Error::other("the region's memfd was taken out of it"),
        })?;
        let supervisor =
            Supervisor::start(&command, &params.env_id, region_fd, cores, deadline).map_err(|source| {
                match source.kind() {
                    std::io::ErrorKind::TimedOut => BuildError::StartupTimeout {
                        workers: (0..num_workers).collect(),
                        waited: b.startup_timeout,
                    },
                    _ => BuildError::Spawn { program: program.clone(), source },
                }
            })?;
        let waiter = Waiter::new(b.wait.pool_policy(num_workers, params.cores));
        Ok(Startup {
            supervisor,
            region,
            params,
            program,
            waiter,
            placed_for,
            worker_cpus,
            shard_maker,
            shard_choice,
            own_shard: None,
            oom,
        })
    }

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
        // A pool without workers (the trainer steps every env) takes its own envs' spec.
        let spec = match (specs.first(), self.own_shard.as_mut().map(|s| s.spec_json())) {
            (Some(theirs), Some(own)) if own != *theirs => {
                return Err(BuildError::TrainerShard(format!(
                    "its envs report {own}, the workers' {theirs}; build them from the registry the \
                     worker program uses"
                )))
            }
            (Some(theirs), _) => theirs.clone(),
            (None, Some(own)) => own,
            (None, None) => return Err(BuildError::TrainerShard("a pool of no worker and no envs".into())),
        };
        let spec = EnvSpec::from_json(&spec).map_err(|message| BuildError::WorkerFailed {
            worker: 0,
            message: format!("bad spec: {message}"),
        })?;
        // Checked before the layout is computed (the estimate is at least its size), so no
        // size in it can overflow.
        estimate::check_region(&self.params, &spec, &MemoryRoom::read())?;
        let layout = Layout::compute(&spec, &self.params);
        let placement = crate::launch::numa::worker_nodes(&self.worker_cpus)
            .map(|nodes| crate::launch::numa::worker_rows(&layout, &self.params, &nodes))
            .unwrap_or_default();
        self.region
            .grow_and_seal(layout.total_size, &placement)
            .map_err(|source| BuildError::Region { what: "grow and seal", source })?;
        // SAFETY: only the trainer writes the header, and only from the thread building the
        // pool (this one); workers and observers only read it.
        let mut header: Header = unsafe { self.region.read_pod(0) };
        header.total_size = layout.total_size as u64;
        header.layout_hash = layout.hash;
        // SAFETY: only this thread writes the header; workers read it again only once the
        // region is published Ready (a Release store after this), observers by snapshot.
        unsafe { self.region.write_pod(0, &header) };
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
                plugin: self.params.plugin.as_ref().map(PathBuf::from),
                oom_kill: memory::oom_kill_of(&self.oom, exit),
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

/// The plugin library's absolute path, as workers will load it (they may run elsewhere in
/// the file system: a different working directory).
fn plugin_path(path: &std::path::Path) -> Result<String, BuildError> {
    let refused = |message: String| BuildError::Plugin { path: path.to_path_buf(), message };
    let absolute = std::fs::canonicalize(path).map_err(|e| {
        refused(format!("{e}; pass the path of the shared library (.so) built from your env"))
    })?;
    if !absolute.is_file() {
        return Err(refused("not a file; pass the path of the shared library (.so)".into()));
    }
    absolute.into_os_string().into_string().map_err(|_| refused("the path is not valid UTF-8".into()))
}

pub(super) fn build_error(worker: usize, report: WorkerReport) -> BuildError {
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

fn default_seed() -> u64 {
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ (std::process::id() as u64).rotate_left(32)
}

/// The registered id closest to `id` by edit distance (case-insensitive), if close enough;
/// of equally close ones, the first (callers list candidates by priority).
pub fn closest_match(id: &str, registered: &[String]) -> Option<String> {
    fn distance(a: &str, b: &str) -> usize {
        let (a, b): (Vec<char>, Vec<char>) =
            (a.to_lowercase().chars().collect(), b.to_lowercase().chars().collect());
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.iter().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                cur.push((prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1));
            }
            prev = cur;
        }
        prev[b.len()]
    }
    registered
        .iter()
        .map(|r| (distance(id, r), r))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, r)| *d <= (r.len() / 2).max(2))
        .map(|(_, r)| r.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_match_finds_typos_and_ignores_strangers() {
        let reg = vec!["CartPole-v1".to_string(), "Pendulum-v1".to_string(), "Burn-v0".to_string()];
        assert_eq!(closest_match("cartpole-v0", &reg).as_deref(), Some("CartPole-v1"));
        assert_eq!(closest_match("Pendulum", &reg).as_deref(), Some("Pendulum-v1"));
        assert_eq!(closest_match("Humanoid-v4", &reg), None);
    }
}
