//! Result rows in ordinary memory, for stepping a shard in-process.

use super::ShardRows;
use shmenv_engine::spec::EnvSpec;

/// Result rows in ordinary memory, for in-process stepping (the serial baseline, tests).
pub struct LocalRows {
    obs: Vec<Vec<u64>>,
    final_obs: Vec<Vec<u64>>,
    rewards: Vec<f32>,
    terminated: Vec<u8>,
    truncated: Vec<u8>,
    episode_return: Vec<f64>,
    episode_length: Vec<u32>,
    elapsed_steps: Vec<u32>,
    env_ids: Vec<u32>,
    obs_bytes: Vec<usize>,
}

impl LocalRows {
    /// Rows for `n` envs of `spec`.
    pub fn new(spec: &EnvSpec, n: usize, same_step: bool) -> LocalRows {
        // u64 backing keeps every array 8-byte aligned for any dtype.
        let obs_bytes: Vec<usize> = spec.observations.iter().map(|o| o.space.value_bytes() * n).collect();
        let alloc = |b: &usize| vec![0u64; b.div_ceil(8)];
        LocalRows {
            obs: obs_bytes.iter().map(alloc).collect(),
            final_obs: if same_step { obs_bytes.iter().map(alloc).collect() } else { Vec::new() },
            rewards: vec![0.0; n],
            terminated: vec![0; n],
            truncated: vec![0; n],
            episode_return: vec![0.0; n],
            episode_length: vec![0; n],
            elapsed_steps: vec![0; n],
            env_ids: vec![0; n],
            obs_bytes,
        }
    }

    /// Borrowed rows for [`EnvShard`](super::EnvShard).
    pub fn rows(&mut self) -> ShardRows<'_> {
        let bytes = &self.obs_bytes;
        ShardRows {
            obs: self
                .obs
                .iter_mut()
                .zip(bytes)
                .map(|(v, &b)| &mut bytemuck::cast_slice_mut(v)[..b])
                .collect(),
            final_obs: self
                .final_obs
                .iter_mut()
                .zip(bytes)
                .map(|(v, &b)| &mut bytemuck::cast_slice_mut(v)[..b])
                .collect(),
            rewards: &mut self.rewards,
            terminated: &mut self.terminated,
            truncated: &mut self.truncated,
            episode_return: &mut self.episode_return,
            episode_length: &mut self.episode_length,
            elapsed_steps: &mut self.elapsed_steps,
            env_ids: &mut self.env_ids,
        }
    }

    /// Observation array `k` as bytes.
    pub fn obs_bytes(&self, k: usize) -> &[u8] {
        &bytemuck::cast_slice(&self.obs[k])[..self.obs_bytes[k]]
    }

    /// Rewards.
    pub fn rewards(&self) -> &[f32] {
        &self.rewards
    }

    /// Terminated flags.
    pub fn terminated(&self) -> &[u8] {
        &self.terminated
    }

    /// Truncated flags.
    pub fn truncated(&self) -> &[u8] {
        &self.truncated
    }
}
