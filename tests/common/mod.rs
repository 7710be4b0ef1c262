//! Helpers shared by the integration tests: a watchdog, the worker program, and an
//! independent in-process reference that steps envs the way the pool must.
#![allow(dead_code)]

use shmenv::worker::{ActionIn, Env, ObsOut, Registry};
use shmenv::{AutoReset, Pool, PoolBuilder, PoolFailure, RecvError, ResetError, SendError, StepError};

pub mod plugin_library;
pub mod watchdog;
pub use watchdog::Watchdog;

pub const WORKER: &str = env!("CARGO_BIN_EXE_shmenv-worker");

/// Sends signal `sig` to process `pid` (a worker of ours); whether it was sent (a process
/// that already ended is not an error for the tests that race with restarts).
pub fn signal(pid: u32, sig: i32) -> bool {
    // SAFETY: kill(2) has no memory preconditions; it only sends a signal.
    unsafe { libc::kill(pid as libc::pid_t, sig) == 0 }
}

/// A builder pointed at this build's worker program.
pub fn builder(env_id: &str) -> PoolBuilder {
    Pool::builder(env_id).worker_program(WORKER)
}

/// One env stepped in-process with the episode rules the pool documents, written
/// independently of the worker's shard code.
pub struct Reference {
    envs: Vec<Box<dyn Env>>,
    mode: AutoReset,
    limit: Option<u32>,
    row_bytes: Vec<usize>,
    action_space: shmenv::Space,
    pending_reset: Vec<bool>,
    len: Vec<u32>,
    ret: Vec<f64>,
}

/// One reference row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub obs: Vec<Vec<u8>>,
    pub final_obs: Option<Vec<Vec<u8>>>,
    pub reward: f32,
    pub terminated: bool,
    pub truncated: bool,
    pub episode: Option<(f64, u32)>,
    pub elapsed: u32,
}

impl Reference {
    pub fn new(
        env_id: &str,
        config: serde_json::Value,
        n: usize,
        mode: AutoReset,
        limit: Option<u32>,
    ) -> Reference {
        let reg = Registry::with_builtins();
        let envs: Vec<Box<dyn Env>> = (0..n).map(|_| reg.make(env_id, &config).unwrap()).collect();
        let spec = envs[0].spec();
        Reference {
            row_bytes: spec.observations.iter().map(|o| o.space.value_bytes()).collect(),
            action_space: spec.action.clone(),
            limit: limit.or(reg.get(env_id).unwrap().max_episode_steps),
            envs,
            mode,
            pending_reset: vec![false; n],
            len: vec![0; n],
            ret: vec![0.0; n],
        }
    }

    /// Runs `f` on env `i` with fresh observation rows; returns them as bytes.
    fn with_obs<T>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut dyn Env, &mut ObsOut<'_, '_>) -> T,
    ) -> (T, Vec<Vec<u8>>) {
        let rb = self.row_bytes.clone();
        let mut bufs: Vec<Vec<u64>> = rb.iter().map(|b| vec![0u64; b.div_ceil(8).max(1)]).collect();
        let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|b| bytemuck::cast_slice_mut(b)).collect();
        let out = f(self.envs[i].as_mut(), &mut ObsOut::new(&mut slices, &rb, 0));
        drop(slices);
        let bytes =
            bufs.iter().zip(&rb).map(|(b, &n)| bytemuck::cast_slice::<u64, u8>(b)[..n].to_vec()).collect();
        (out, bytes)
    }

    /// Starts a new episode of env `i`; the row a reset produces.
    fn begin(&mut self, i: usize, seed: Option<u64>) -> Row {
        let ((), obs) = self.with_obs(i, |env, o| {
            env.reset(seed);
            env.observe(o)
        });
        self.pending_reset[i] = false;
        self.len[i] = 0;
        self.ret[i] = 0.0;
        Row {
            obs,
            final_obs: None,
            reward: 0.0,
            terminated: false,
            truncated: false,
            episode: None,
            elapsed: 0,
        }
    }

    /// Resets every env; `Some(seed)` seeds env i with seed + i, `None` continues streams.
    pub fn reset(&mut self, seed: Option<u64>) -> Vec<Row> {
        (0..self.envs.len()).map(|i| self.begin(i, seed.map(|s| s.wrapping_add(i as u64)))).collect()
    }

    /// `actions`: one action row (as bytes) per env.
    pub fn step(&mut self, actions: &[Vec<u8>]) -> Vec<Row> {
        (0..self.envs.len())
            .map(|i| {
                if self.pending_reset[i] {
                    return self.begin(i, None);
                }
                let space = self.action_space.clone();
                let (t, obs) = self.with_obs(i, |env, o| {
                    let t = env.step(ActionIn::new(&actions[i], &space));
                    env.observe(o);
                    t
                });
                self.len[i] += 1;
                self.ret[i] += t.reward as f64;
                let truncated = t.truncated || self.limit.is_some_and(|k| self.len[i] >= k);
                let done = t.terminated || truncated;
                let row = Row {
                    obs,
                    final_obs: None,
                    reward: t.reward,
                    terminated: t.terminated,
                    truncated,
                    episode: done.then_some((self.ret[i], self.len[i])),
                    elapsed: self.len[i],
                };
                match (done, self.mode) {
                    (true, AutoReset::NextStep) => {
                        self.pending_reset[i] = true;
                        row
                    }
                    (true, AutoReset::SameStep) => {
                        let reset = self.begin(i, None);
                        Row { final_obs: Some(row.obs), obs: reset.obs, elapsed: 0, ..row }
                    }
                    _ => row,
                }
            })
            .collect()
    }
}

/// The rows of a pool batch, in the reference's form.
pub fn batch_rows(batch: &shmenv::Batch<'_>) -> Vec<Row> {
    let spec = batch.spec();
    let same_step =
        !matches!(batch.final_obs::<u8>(&spec.observations[0].name), Err(shmenv::ViewError::NoFinalObs));
    let obs_bytes = |name: &str, final_obs: bool| -> Vec<u8> {
        shmenv_engine::with_element!(spec.observations[spec.obs_index(name).unwrap()].space.dtype(), T => {
            let v = if final_obs { batch.final_obs::<T>(name) } else { batch.obs::<T>(name) }.unwrap();
            bytemuck::cast_slice::<T, u8>(v.as_slice()).to_vec()
        })
    };
    let arrays: Vec<Vec<u8>> = spec.observations.iter().map(|o| obs_bytes(&o.name, false)).collect();
    let finals: Vec<Vec<u8>> =
        if same_step { spec.observations.iter().map(|o| obs_bytes(&o.name, true)).collect() } else { vec![] };
    let row_bytes: Vec<usize> = spec.observations.iter().map(|o| o.space.value_bytes()).collect();
    (0..batch.len())
        .map(|i| {
            let done = batch.terminated().get(i) || batch.truncated().get(i);
            let cut = |a: &Vec<Vec<u8>>| {
                a.iter().zip(&row_bytes).map(|(v, &b)| v[i * b..(i + 1) * b].to_vec()).collect()
            };
            Row {
                obs: cut(&arrays),
                final_obs: (same_step && done).then(|| cut(&finals)),
                reward: batch.rewards()[i],
                terminated: batch.terminated().get(i),
                truncated: batch.truncated().get(i),
                episode: done.then(|| (batch.episode_returns()[i], batch.episode_lengths()[i])),
                elapsed: batch.elapsed_steps()[i],
            }
        })
        .collect()
}

/// Children of this process still alive or unreaped, from /proc.
pub fn child_pids() -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // Field 4 (after the parenthesised command) is the parent pid.
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                let ppid: u32 = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
                if ppid == me {
                    out.push(pid);
                }
            }
        }
    }
    out
}

/// Number of open fds of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Entries in /dev/shm.
pub fn dev_shm_entries() -> Vec<String> {
    // POSIX named semaphores (`sem.*`) are left out: shmenv has none (its semaphores are
    // futex words in the memfd region), and other programs on a shared machine (Python
    // multiprocessing, Boost.Interprocess users) create and leak them during a test.
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| !name.starts_with("sem."))
                .collect()
        })
        .unwrap_or_default()
}

/// Drives an async pool with a deterministic action per env and result (`action(e, k)`,
/// `k` = results of env `e` received so far), checking each env's `k`-th row against the
/// `k`-th row of a sync reference pool stepped in lockstep with the same actions, until the
/// env is restarted (listed in `restarted_envs`): from then on it runs a new episode. Rows
/// past the reference's length are not checked.
pub struct AsyncDriver {
    /// `reference[k][e]`.
    reference: Vec<Vec<Row>>,
    /// Results received per env.
    pub received: Vec<usize>,
    /// Times each env was listed in `restarted_envs`.
    pub restarted: Vec<usize>,
    /// Rows of restarted envs: (env, row) as received.
    pub restart_rows: Vec<(usize, Row)>,
    ids: Vec<usize>,
}

impl AsyncDriver {
    /// The action of env `e` after its `k`-th result.
    pub fn action(e: usize, k: usize) -> i64 {
        ((e * 7 + k * 3) / 2 % 2) as i64
    }

    /// Steps `reference` (a sync pool, not yet reset) `steps` times.
    pub fn new(mut reference: Pool, steps: usize) -> AsyncDriver {
        let n = reference.num_envs();
        let mut rows = vec![batch_rows(&reference.reset().unwrap())];
        for k in 0..steps {
            let a: Vec<i64> = (0..n).map(|e| Self::action(e, k)).collect();
            rows.push(batch_rows(&reference.step(&a).unwrap()));
        }
        AsyncDriver {
            reference: rows,
            received: vec![0; n],
            restarted: vec![0; n],
            restart_rows: Vec::new(),
            ids: Vec::new(),
        }
    }

    /// `reset()` (async_reset + recv), checked.
    pub fn start(&mut self, pool: &mut Pool) -> Result<(), PoolFailure> {
        let batch = pool.reset().map_err(Failed::failed)?;
        self.check(&batch);
        Ok(())
    }

    /// Sends the last batch's envs their next actions and receives the next batch, checked.
    pub fn round(&mut self, pool: &mut Pool) -> Result<(), PoolFailure> {
        let actions: Vec<i64> = self.ids.iter().map(|&e| Self::action(e, self.received[e] - 1)).collect();
        pool.send(&actions, &self.ids).map_err(Failed::failed)?;
        let batch = pool.recv().map_err(Failed::failed)?;
        self.check(&batch);
        Ok(())
    }

    /// Whether every env of `envs` was restarted at least once.
    pub fn all_restarted(&self, envs: std::ops::Range<usize>) -> bool {
        envs.into_iter().all(|e| self.restarted[e] > 0)
    }

    fn check(&mut self, batch: &shmenv::Batch<'_>) {
        let rows = batch_rows(batch);
        self.ids = batch.env_ids().iter().map(|&e| e as usize).collect();
        for (r, &e) in self.ids.iter().enumerate() {
            if batch.restarted_envs().contains(&e) {
                assert!(
                    rows[r].truncated && rows[r].reward == 0.0 && rows[r].elapsed == 0,
                    "env {e}: {:?}",
                    rows[r]
                );
                self.restarted[e] += 1;
                self.restart_rows.push((e, rows[r].clone()));
            } else if self.restarted[e] == 0 && self.received[e] < self.reference.len() {
                let k = self.received[e];
                assert_eq!(rows[r], self.reference[k][e], "env {e}, result {k} diverged from the reference");
            }
            self.received[e] += 1;
        }
    }
}

/// Forks; the child runs `f` on its copy of `pool` and exits 0 if it returned true (1 if it
/// returned false or panicked). Returns the child's exit status as `waitpid` reports it.
pub fn fork_and(pool: &mut Option<Pool>, f: impl FnOnce(Pool) -> bool) -> i32 {
    // SAFETY: the child only runs `f` (the pool's own calls, which allocate through glibc's
    // fork-safe malloc and take no lock the parent's threads may hold) and then `_exit`s
    // without running the parent's destructors or atexit handlers.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let copy = pool.take().expect("a pool");
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(copy))).unwrap_or(false);
        // SAFETY: ends the child at once, as a forked child of a threaded process must.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    status
}

/// The failure that closed the pool, from any call's error; a refusal (the test's own
/// misuse of the pool) panics with its message.
pub trait Failed {
    /// See [`Failed`].
    fn failed(self) -> PoolFailure;
}

macro_rules! failed_for {
    ($($t:ty),+) => {$(
        impl Failed for $t {
            fn failed(self) -> PoolFailure {
                self.into_failure().unwrap_or_else(|refused| panic!("the call was refused: {refused}"))
            }
        }
    )+};
}
failed_for!(StepError, ResetError, SendError, RecvError);
