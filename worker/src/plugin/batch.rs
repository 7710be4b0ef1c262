//! The optional batched call of a plugin (`step_batch`): a shard's envs stepped and
//! observed in one call into the library per batch, instead of a `step` and an `observe`
//! per env.

use super::{message_of, with_row_pointers, EnvHandle, Plugin, PluginEnv, RawTransition, StepBatchFn};
use crate::env::Transition;
use std::sync::Arc;

/// A shard's envs of one plugin, stepped by its `step_batch`.
///
/// It borrows the envs' handles: its owner keeps their [`PluginEnv`]s alive and in place
/// for as long as it lives (the shard owns both, never replaces an env, and drops this
/// first).
pub(crate) struct BatchStep {
    step_batch: StepBatchFn,
    handles: Vec<EnvHandle>,
    /// 1 for the envs the next call steps.
    active: Vec<u8>,
    out: Vec<RawTransition>,
    plugin: Arc<Plugin>,
    id: String,
}

impl BatchStep {
    /// The batched call over `envs` (a shard's, in order), if their library provides one.
    pub(crate) fn new(envs: &[PluginEnv]) -> Option<BatchStep> {
        let first = envs.first()?;
        let step_batch = first.plugin.functions.step_batch?;
        Some(BatchStep {
            step_batch,
            handles: envs.iter().map(|e| e.handle()).collect(),
            active: vec![0; envs.len()],
            out: (0..envs.len()).map(|_| RawTransition::default()).collect(),
            plugin: first.plugin.clone(),
            id: first.id.clone(),
        })
    }

    /// Which envs the next [`BatchStep::call`] steps (1) or leaves alone (0), by shard index.
    pub(crate) fn active_mut(&mut self) -> &mut [u8] {
        &mut self.active
    }

    /// What env `i` returned from the last call that stepped it.
    #[inline]
    pub(crate) fn transition(&self, i: usize) -> Transition {
        let out = &self.out[i];
        Transition { reward: out.reward, terminated: out.terminated != 0, truncated: out.truncated != 0 }
    }

    /// Steps the active envs with their rows of `actions` (`action_bytes` each) and has the
    /// library write their observations into their rows of `obs` (array `k`'s rows are
    /// `obs_row_bytes[k]` bytes each). On an error, returns the shard index of the env it
    /// concerns and the message.
    ///
    /// # Panics
    /// When `actions` or an array of `obs` is shorter than the shard's rows (the library
    /// is handed raw pointers: the bounds are checked here).
    pub(crate) fn call(
        &mut self,
        actions: &[u8],
        action_bytes: usize,
        obs: &mut [&mut [u8]],
        obs_row_bytes: &[usize],
    ) -> Result<(), (usize, String)> {
        let n = self.handles.len();
        assert!(actions.len() >= n * action_bytes, "{} action bytes for {n} envs", actions.len());
        assert_eq!(obs.len(), obs_row_bytes.len(), "one row size per observation array");
        for (array, &bytes) in obs.iter().zip(obs_row_bytes) {
            assert!(array.len() >= n * bytes, "{} observation bytes for {n} envs", array.len());
        }
        let mut failed = 0u32;
        let arrays = obs.len();
        // SAFETY: every handle is live and used by this call alone (the owner keeps the
        // envs, and holds `&mut self`); `EnvHandle` is `repr(transparent)` over the handle,
        // so `handles` is the array of `shmenv_env *` the ABI expects. `active` and `out`
        // have an entry per env; `actions` holds `n` rows of `action_bytes` and each array
        // of `obs` `n` rows of its row size (asserted above), exclusively borrowed for the
        // call, which is all the ABI lets the library touch; `failed` is a valid place.
        let error = with_row_pointers(arrays, obs.iter_mut().map(|a| &mut **a), |rows| unsafe {
            (self.step_batch)(
                self.handles.as_ptr().cast(),
                n as u32,
                self.active.as_ptr(),
                actions.as_ptr().cast(),
                action_bytes as u32,
                self.out.as_mut_ptr(),
                rows,
                &mut failed,
            )
        });
        if error.is_null() {
            return Ok(());
        }
        // SAFETY: a non-NULL result is the library's NUL-terminated message (ABI).
        let message = unsafe { message_of(error) }.unwrap_or_default();
        let i = failed as usize;
        let (i, note) =
            if i < n { (i, String::new()) } else { (0, format!(" (it named env index {i} of {n})")) };
        Err((i, format!("{} ({}): step_batch failed: {message}{note}", self.id, self.plugin.path.display())))
    }
}
