//! A shard of envs stepped into result rows: the per-env bookkeeping (returns, lengths,
//! time limit, auto-reset) shared by the worker host, which points the rows into the
//! region, and by in-process loops (the serial baseline), which point them at local memory.

use crate::env::{ActionIn, Env, ObsOut, Transition};
use crate::plugin::{BatchStep, Plugin, PluginEnv, PluginError};
use crate::registry::{MakeError, Registry};
use shmenv_engine::launch::fork::{Owner, Place};
use shmenv_engine::protocol::{reset_flag, stats, AutoReset, PoolParams};
use shmenv_engine::spec::{EnvSpec, SpecError};
use shmenv_engine::stats::{bucket, now_ns};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

mod local_rows;
pub use local_rows::LocalRows;

/// The result rows of a shard, `[shard_len, ...]` each.
pub struct ShardRows<'a> {
    /// Observation arrays, as bytes.
    pub obs: Vec<&'a mut [u8]>,
    /// Final observations (SameStep only; otherwise empty).
    pub final_obs: Vec<&'a mut [u8]>,
    /// Rewards.
    pub rewards: &'a mut [f32],
    /// Terminated flags.
    pub terminated: &'a mut [u8],
    /// Truncated flags.
    pub truncated: &'a mut [u8],
    /// Return of the episode ending at this step, 0 elsewhere.
    pub episode_return: &'a mut [f64],
    /// Length of the episode ending at this step, 0 elsewhere.
    pub episode_length: &'a mut [u32],
    /// Steps since the reset that produced this row's observation.
    pub elapsed_steps: &'a mut [u32],
    /// The env of each row.
    pub env_ids: &'a mut [u32],
}

/// Envs `range` of a pool, with their episode state.
pub struct EnvShard {
    /// The plugin's batched call over `envs`, when it has one (first: it borrows their
    /// handles, so it is dropped before them; `envs` is never changed after `new`).
    batch: Option<BatchStep>,
    envs: Envs,
    spec: EnvSpec,
    range: Range<usize>,
    autoreset: AutoReset,
    time_limit: Option<u32>,
    obs_row_bytes: Vec<usize>,
    action_row_bytes: usize,
    needs_reset: Vec<bool>,
    running_return: Vec<f64>,
    running_length: Vec<u32>,
    /// Stats: episodes begun (resets, commanded or automatic).
    resets: u64,
    /// Stats: time one env step per sync batch (async: one in `ASYNC_SAMPLE_EVERY`) into `hist`.
    sampling: bool,
    tick: u32,
    hist: [u64; stats::HIST_BUCKETS],
    /// The process stepping the shard into a pool's region, and where: a forked copy is
    /// stopped as soon as an env call returns (`launch::fork`). `None`: nothing shared.
    guard: Option<(Owner, Place)>,
    /// Whether the envs are shmenv's own built-ins, whose code never forks.
    builtin: bool,
}

impl EnvShard {
    /// Builds envs `range` of the pool described by `params`. All envs of the shard must
    /// report the same spec.
    pub fn new(
        registry: &Registry,
        params: &PoolParams,
        range: Range<usize>,
    ) -> Result<EnvShard, ShardError> {
        let source = match params.plugin.as_deref() {
            Some(path) => Source::Plugin(Plugin::load(Path::new(path))?),
            None => Source::Registry(registry),
        };
        let (envs, batch) = source.make_all(&params.env_id, &params.config, range.len())?;
        let spec = envs.first().map(|e| e.spec()).ok_or(ShardError::Empty)?;
        let spec = EnvSpec { max_episode_steps: source.max_episode_steps(&params.env_id), ..spec };
        for (i, e) in envs.iter().enumerate().skip(1) {
            let other = e.spec();
            if other.observations != spec.observations || other.action != spec.action {
                return Err(ShardError::SpecMismatch { env_id: range.start + i });
            }
        }
        spec.validate().map_err(ShardError::BadSpec)?;
        let n = range.len();
        Ok(EnvShard {
            obs_row_bytes: spec.observations.iter().map(|o| o.space.value_bytes()).collect(),
            action_row_bytes: spec.action.value_bytes(),
            time_limit: params.max_episode_steps.or(spec.max_episode_steps),
            spec,
            batch,
            envs,
            range,
            autoreset: params.autoreset,
            needs_reset: vec![false; n],
            running_return: vec![0.0; n],
            running_length: vec![0; n],
            resets: 0,
            sampling: params.stats,
            tick: 0,
            hist: [0; stats::HIST_BUCKETS],
            guard: None,
            builtin: params.plugin.is_none() && Registry::with_builtins().get(&params.env_id).is_some(),
        })
    }

    /// From now on, a copy of `owner` (the process stepping the shard into a pool's region,
    /// at `place`) that env code makes with `fork()` is stopped as soon as the env call
    /// returns, before it writes a row or goes back to the host's loop.
    /// Shmenv's own built-in envs never fork: their shard skips the check after each env
    /// call (the host's checks before every post and wait still stop any copy of it).
    pub(crate) fn stop_forked_copies(&mut self, owner: Owner, place: Place) {
        if !self.builtin {
            self.guard = Some((owner, place));
        }
    }

    /// Stops this process if env code (of env `i`, or of the batched call: `None`) made it
    /// with `fork()` (see [`EnvShard::stop_forked_copies`]).
    #[inline(always)]
    fn stop_if_copy(&self, i: Option<usize>) {
        if let Some((owner, place)) = &self.guard {
            owner.stop_if_copy(*place, i.map(|i| self.range.start + i));
        }
    }

    /// Episodes begun so far (commanded and automatic resets).
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// The sampled env-step time histogram since the host last flushed it into the
    /// region (it adds the counts there and clears them here).
    pub(crate) fn hist_mut(&mut self) -> &mut [u64; stats::HIST_BUCKETS] {
        &mut self.hist
    }

    /// `advance_in`, timed into the histogram when `timed`.
    #[inline(always)]
    fn advance_timed(&mut self, i: usize, work: Work<'_>, timed: bool) -> Advanced {
        if timed {
            let t0 = now_ns();
            let advanced = self.advance_in(i, work);
            self.hist[bucket(now_ns().saturating_sub(t0))] += 1;
            advanced
        } else {
            self.advance_in(i, work)
        }
    }

    /// Which env of this batch to time (one per batch, rotating), if stats are on: two clock
    /// reads per batch, whatever the batch size.
    fn batch_sample(&mut self) -> usize {
        if !self.sampling {
            return usize::MAX;
        }
        self.tick = self.tick.wrapping_add(1);
        self.tick as usize % self.envs.len().max(1)
    }

    /// The envs' spec (with the registry's time limit).
    pub fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// The pool-wide env ids of this shard.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// Bytes of one observation row per array.
    pub fn obs_row_bytes(&self) -> &[usize] {
        &self.obs_row_bytes
    }

    /// Resets every env into its row; with `Some(base)` env `i` is seeded with `base + i`
    /// (wrapping). On a panic inside an env, returns the env id and the message.
    pub fn reset_all(
        &mut self,
        base_seed: Option<u64>,
        rows: &mut ShardRows<'_>,
    ) -> Result<(), (usize, String)> {
        let start = self.range.start;
        let sampled = self.batch_sample();
        self.guarded_loop(|shard, i| {
            let seed = base_seed.map(|b| b.wrapping_add((start + i) as u64));
            let advanced = shard.advance_timed(i, Work::Reset { seed }, i == sampled);
            shard.emit_in(i, advanced, rows, i, false);
        })
    }

    /// Steps every env with its action row from `actions` (`[shard_len, action bytes]`),
    /// writing each env's results into its row.
    pub fn step_all(&mut self, actions: &[u8], rows: &mut ShardRows<'_>) -> Result<(), (usize, String)> {
        if self.batch.is_some() {
            return self.step_batched(actions, rows);
        }
        let ab = self.action_row_bytes;
        let sampled = self.batch_sample();
        self.guarded_loop(|shard, i| {
            let advanced = shard.advance_timed(i, Work::Step(&actions[i * ab..(i + 1) * ab]), i == sampled);
            shard.emit_in(i, advanced, rows, i, false);
        })
    }

    /// [`EnvShard::step_all`] through the plugin's batched call: one call into the library
    /// steps every env and writes its observation, but for the envs whose episode ended on
    /// the previous step under `AutoReset::NextStep`, reset here one by one. With stats on,
    /// the call's time per env stepped is the batch's sample of the histogram.
    fn step_batched(&mut self, actions: &[u8], rows: &mut ShardRows<'_>) -> Result<(), (usize, String)> {
        let Some(batch) = self.batch.as_mut() else { unreachable!("step_all checked the batched call") };
        let mut stepping = 0u64;
        for (active, &reset) in batch.active_mut().iter_mut().zip(&self.needs_reset) {
            *active = u8::from(!reset);
            stepping += u64::from(!reset);
        }
        let t0 = self.sampling.then(now_ns);
        let called = batch
            .call(actions, self.action_row_bytes, &mut rows.obs, &self.obs_row_bytes)
            .map_err(|(i, message)| (self.range.start + i, message));
        self.stop_if_copy(None);
        called?;
        if let Some(t0) = t0.filter(|_| stepping > 0) {
            self.hist[bucket(now_ns().saturating_sub(t0) / stepping)] += 1;
        }
        self.guarded_loop(|shard, i| {
            if shard.needs_reset[i] {
                let advanced = shard.advance_in(i, Work::Step(&[]));
                shard.emit_in(i, advanced, rows, i, false);
            } else if let Some(batch) = &shard.batch {
                let advanced = shard.stepped(i, batch.transition(i));
                shard.emit_in(i, advanced, rows, i, true);
            }
        })
    }

    /// Resets the envs whose first action byte (of `actions`, `[shard_len, action bytes]`)
    /// asks for it ([`reset_flag`]): env `i` seeded with `base_seed + i` for
    /// `RESET_SEEDED`; the others write their current observation with reward 0 and both
    /// flags false. A flag out of range is refused before any env is touched.
    pub(crate) fn reset_some(
        &mut self,
        actions: &[u8],
        base_seed: u64,
        rows: &mut ShardRows<'_>,
    ) -> Result<(), (usize, String)> {
        let ab = self.action_row_bytes;
        let start = self.range.start;
        let flag = |i: usize| actions[i * ab];
        if let Some(i) = (0..self.envs.len()).find(|&i| flag(i) > reset_flag::RESET_SEEDED) {
            return Err((start + i, format!("reset flag {} out of range 0..=2 (protocol error)", flag(i))));
        }
        self.guarded_loop(|shard, i| {
            let advanced = match flag(i) {
                reset_flag::KEEP => Advanced::Kept,
                reset_flag::RESET => shard.advance_in(i, Work::Reset { seed: None }),
                _ => shard
                    .advance_in(i, Work::Reset { seed: Some(base_seed.wrapping_add((start + i) as u64)) }),
            };
            shard.emit_in(i, advanced, rows, i, false);
        })
    }

    /// Runs `f` for every env of the shard under one panic guard (one per batch rather than
    /// per env keeps the per-step path inlinable); a panic names the env it happened in.
    fn guarded_loop(&mut self, mut f: impl FnMut(&mut Self, usize)) -> Result<(), (usize, String)> {
        let mut current = 0;
        let n = self.envs.len();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for i in 0..n {
                current = i;
                f(self, i);
            }
        }));
        result.map_err(|p| (self.range.start + current, panic_message(p)))
    }

    /// Advances env `i` (index within the shard): a reset, a step, or, when the env's
    /// episode ended on the previous step under `AutoReset::NextStep`, the reset that
    /// replaces this step (its action is ignored). Writes nothing; see [`EnvShard::emit`].
    pub(crate) fn advance(&mut self, i: usize, work: Work<'_>) -> Result<Advanced, (usize, String)> {
        let timed = self.sampling && {
            self.tick = self.tick.wrapping_add(1);
            self.tick % stats::ASYNC_SAMPLE_EVERY == 0
        };
        guard(self.range.start + i, || self.advance_timed(i, work, timed))
    }

    #[inline(always)]
    fn advance_in(&mut self, i: usize, work: Work<'_>) -> Advanced {
        let env = &mut self.envs[i];
        let stepped = match work {
            Work::Step(action) if !self.needs_reset[i] => {
                Some(env.step(ActionIn::new(action, &self.spec.action)))
            }
            Work::Step(_) => {
                env.reset(None);
                None
            }
            Work::Reset { seed } => {
                env.reset(seed);
                None
            }
        };
        self.stop_if_copy(Some(i));
        match stepped {
            Some(t) => self.stepped(i, t),
            None => {
                self.begin_episode(i);
                Advanced::Began
            }
        }
    }

    /// Counts env `i`'s step that returned `t` into its episode (and its time limit).
    #[inline(always)]
    fn stepped(&mut self, i: usize, t: Transition) -> Advanced {
        self.running_return[i] += t.reward as f64;
        self.running_length[i] += 1;
        let truncated = t.truncated || self.time_limit.is_some_and(|k| self.running_length[i] >= k);
        Advanced::Stepped { transition: t, truncated }
    }

    /// Writes what [`EnvShard::advance`] did to env `i` into row `r` of `rows`: the
    /// observation (written by the env itself), reward, flags and episode statistics.
    /// Under `AutoReset::SameStep` an ended episode's last observation goes to the
    /// `final_obs` row, then the env is reset and its first observation goes to the `obs` row.
    pub(crate) fn emit(
        &mut self,
        i: usize,
        advanced: Advanced,
        rows: &mut ShardRows<'_>,
        r: usize,
    ) -> Result<(), (usize, String)> {
        guard(self.range.start + i, || self.emit_in(i, advanced, rows, r, false))
    }

    /// [`EnvShard::emit`]; `observed` when a step's observation is already in row `r` (the
    /// batched call wrote it).
    #[inline(always)]
    fn emit_in(&mut self, i: usize, advanced: Advanced, rows: &mut ShardRows<'_>, r: usize, observed: bool) {
        rows.env_ids[r] = (self.range.start + i) as u32;
        let (transition, truncated) = match advanced {
            // No step happened: the current observation, reward 0, no flags. A new episode
            // counts from 0; a kept env (partial reset) goes on counting.
            Advanced::Kept | Advanced::Began => {
                self.observe(i, &mut rows.obs, r);
                rows.rewards[r] = 0.0;
                rows.terminated[r] = 0;
                rows.truncated[r] = 0;
                rows.episode_return[r] = 0.0;
                rows.episode_length[r] = 0;
                rows.elapsed_steps[r] = if advanced == Advanced::Kept { self.running_length[i] } else { 0 };
                return;
            }
            Advanced::Stepped { transition, truncated } => (transition, truncated),
        };
        let done = transition.terminated || truncated;
        rows.rewards[r] = transition.reward;
        rows.terminated[r] = transition.terminated as u8;
        rows.truncated[r] = truncated as u8;
        rows.episode_return[r] = if done { self.running_return[i] } else { 0.0 };
        rows.episode_length[r] = if done { self.running_length[i] } else { 0 };
        rows.elapsed_steps[r] = self.running_length[i];
        match (done, self.autoreset) {
            (true, AutoReset::SameStep) => {
                if observed {
                    for ((obs, last), &b) in
                        rows.obs.iter().zip(rows.final_obs.iter_mut()).zip(&self.obs_row_bytes)
                    {
                        last[r * b..(r + 1) * b].copy_from_slice(&obs[r * b..(r + 1) * b]);
                    }
                } else {
                    self.observe(i, &mut rows.final_obs, r);
                }
                self.envs[i].reset(None);
                self.stop_if_copy(Some(i));
                self.begin_episode(i);
                rows.elapsed_steps[r] = 0;
                self.observe(i, &mut rows.obs, r);
            }
            (true, AutoReset::NextStep) => {
                self.needs_reset[i] = true;
                if !observed {
                    self.observe(i, &mut rows.obs, r);
                }
            }
            _ if observed => {}
            _ => self.observe(i, &mut rows.obs, r),
        }
    }

    #[inline]
    fn observe(&self, i: usize, arrays: &mut [&mut [u8]], r: usize) {
        self.envs[i].observe(&mut ObsOut::new(arrays, &self.obs_row_bytes, r));
        self.stop_if_copy(Some(i));
    }

    fn begin_episode(&mut self, i: usize) {
        self.resets += 1;
        self.needs_reset[i] = false;
        self.running_return[i] = 0.0;
        self.running_length[i] = 0;
    }
}

/// What to do with one env.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Work<'a> {
    /// Reset it (with this seed, or continuing its stream).
    Reset {
        /// The seed, if reseeding.
        seed: Option<u64>,
    },
    /// Step it with this action row.
    Step(&'a [u8]),
}

/// What [`EnvShard::advance`] did, for [`EnvShard::emit`] to write.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Advanced {
    /// A new episode began (reset).
    Began,
    /// Nothing happened to the env (a partial reset left it alone).
    Kept,
    /// The env stepped.
    Stepped {
        /// What the env returned.
        transition: Transition,
        /// Truncated by the env or by the time limit.
        truncated: bool,
    },
}

/// Runs env code, turning a panic into `(env_id, message)`.
fn guard<T>(env_id: usize, f: impl FnOnce() -> T) -> Result<T, (usize, String)> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| (env_id, panic_message(p)))
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// A shard's envs.
type Envs = Vec<Box<dyn Env>>;

/// Where a shard's envs come from: the worker program's registry, or the plugin library
/// the pool names (loaded by this process for itself).
enum Source<'a> {
    Registry(&'a Registry),
    Plugin(Arc<Plugin>),
}

impl Source<'_> {
    /// Makes the shard's `n` envs, and the plugin's batched call over them if it has one.
    fn make_all(
        &self,
        id: &str,
        config: &serde_json::Value,
        n: usize,
    ) -> Result<(Envs, Option<BatchStep>), MakeError> {
        match self {
            Source::Registry(r) => Ok(((0..n).map(|_| r.make(id, config)).collect::<Result<_, _>>()?, None)),
            Source::Plugin(p) => {
                let envs =
                    (0..n).map(|i| Self::plugin_env(p, id, config, i)).collect::<Result<Vec<_>, _>>()?;
                let batch = BatchStep::new(&envs);
                Ok((envs.into_iter().map(|e| Box::new(e) as Box<dyn Env>).collect(), batch))
            }
        }
    }

    /// Makes a plugin's env number `index` of a shard.
    fn plugin_env(
        p: &Arc<Plugin>,
        id: &str,
        config: &serde_json::Value,
        index: usize,
    ) -> Result<PluginEnv, MakeError> {
        p.make_env(id, config).map_err(|e| match e {
            MakeError::Failed { id, message } if index > 0 => MakeError::Failed {
                message: format!(
                    "{message}; this worker had already created {index} env(s) of it: if the library allows \
                         one env per process, give each env its own worker (num_workers = num_envs; \
                         envs_per_worker=1 in Python)"
                ),
                id,
            },
            other => other,
        })
    }

    /// The env's time limit.
    fn max_episode_steps(&self, id: &str) -> Option<u32> {
        match self {
            Source::Registry(r) => r.get(id).and_then(|e| e.max_episode_steps),
            Source::Plugin(p) => p.env(id).and_then(|e| e.max_episode_steps),
        }
    }
}

/// Why a shard could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The registry refused.
    #[error(transparent)]
    Make(#[from] MakeError),
    /// The pool's plugin library could not be loaded.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// A shard needs at least one env.
    #[error("a shard needs at least one env")]
    Empty,
    /// Two envs of the shard report different spaces.
    #[error("env {env_id} reports different spaces than the first env of its shard; an env's spaces must depend only on its id and config")]
    SpecMismatch {
        /// The env.
        env_id: usize,
    },
    /// The spec is malformed.
    #[error("the env's spec is invalid: {0}")]
    BadSpec(#[source] SpecError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::EnvEntry;
    use shmenv_engine::spec::Space;
    use std::sync::atomic::{AtomicI64, Ordering};

    /// An env whose action space changes with every instance: a bug the shard must catch.
    struct Fickle(i64);

    static MADE: AtomicI64 = AtomicI64::new(2);

    impl Env for Fickle {
        fn spec(&self) -> EnvSpec {
            EnvSpec::single(Space::discrete(2), Space::discrete(self.0))
        }
        fn reset(&mut self, _: Option<u64>) {}
        fn step(&mut self, _: ActionIn<'_>) -> Transition {
            Transition::default()
        }
        fn observe(&self, obs: &mut ObsOut<'_, '_>) {
            obs.array::<i64>(0)[0] = 0;
        }
    }

    fn params(n: usize) -> PoolParams {
        PoolParams {
            env_id: "Fickle-v0".into(),
            config: serde_json::json!({}),
            num_envs: n,
            num_workers: 1,
            autoreset: AutoReset::NextStep,
            max_episode_steps: None,
            wait: shmenv_engine::WaitStrategy::Auto,
            batch_size: n,
            ring_depth: 2,
            stats: true,
            trace: false,
            restart: false,
            plugin: None,
            cores: 0,
            trainer_shard: false,
        }
    }

    #[test]
    fn envs_of_a_shard_must_report_the_same_spaces() {
        let mut reg = Registry::new();
        reg.register(
            "Fickle-v0",
            EnvEntry {
                description: "test",
                factory: |_| Ok(Box::new(Fickle(MADE.fetch_add(1, Ordering::Relaxed)))),
                max_episode_steps: None,
            },
        );
        let err = EnvShard::new(&reg, &params(3), 0..3).err().expect("mismatch detected");
        assert!(matches!(err, ShardError::SpecMismatch { env_id: 1 }), "{err}");
        assert!(matches!(EnvShard::new(&reg, &params(1), 0..0), Err(ShardError::Empty)));
    }

    #[test]
    fn a_panicking_env_is_caught_with_its_id() {
        let r = guard(7, || -> () { panic!("boom {}", 1) });
        assert_eq!(r, Err((7, "boom 1".to_string())));
    }
}
