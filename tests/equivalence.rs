//! Vectorized equals unvectorized: for every built-in env, every auto-reset mode and 1, 2
//! and 3 worker processes, the pool's batches equal stepping the same envs in-process with
//! the same seeds and actions. Also: the same seed gives bitwise-identical batches for any
//! number of workers.

mod common;

use common::{batch_rows, builder, Reference, Row, Watchdog};
use serde_json::json;
use shmenv::worker::rng::Pcg64;
use shmenv::{AutoReset, Element, Pool, ResetError, StepError};
use std::time::Duration;

struct Case {
    env: &'static str,
    config: serde_json::Value,
    limit: Option<u32>,
    steps: usize,
}

fn cases() -> Vec<Case> {
    vec![
        Case { env: "CartPole-v1", config: json!({}), limit: None, steps: 80 },
        Case { env: "Pendulum-v1", config: json!({"g": 9.81}), limit: Some(13), steps: 40 },
        Case {
            env: "Burn-v0",
            config: json!({"obs_shape": [2, 3], "obs_dtype": "u8", "episode_len": 9}),
            limit: Some(7),
            steps: 30,
        },
    ]
}

/// Random actions: one typed batch for the pool and the same rows as bytes for the reference.
fn actions<T: Element>(space: &shmenv::Space, n: usize, rng: &mut Pcg64) -> (Vec<T>, Vec<Vec<u8>>) {
    let per = space.num_elements();
    let v: Vec<T> = (0..n * per)
        .map(|_| match space {
            shmenv::Space::Discrete { n, .. } => T::from_f64((rng.next_f64() * *n as f64).floor()),
            _ => T::from_f64(rng.uniform(-3.0, 3.0)),
        })
        .collect();
    let rows = v.chunks(per).map(|c| bytemuck::cast_slice::<T, u8>(c).to_vec()).collect();
    (v, rows)
}

fn step_both<T: Element>(
    pool: &mut Pool,
    reference: &mut Reference,
    rng: &mut Pcg64,
) -> Result<(Vec<Row>, Vec<Row>), StepError> {
    let (typed, rows) = actions::<T>(&pool.spec().action.clone(), pool.num_envs(), rng);
    let batch = pool.step(&typed)?;
    let got = batch_rows(&batch);
    Ok((got, reference.step(&rows)))
}

fn run_case(case: &Case, workers: usize, mode: AutoReset) {
    let n = 5;
    let mut b = builder(case.env)
        .config(case.config.clone())
        .num_envs(n)
        .num_workers(workers)
        .seed(11)
        .autoreset(mode);
    if let Some(k) = case.limit {
        b = b.max_episode_steps(k);
    }
    let mut pool = b.build().unwrap();
    let mut reference = Reference::new(case.env, case.config.clone(), n, mode, case.limit);
    let ctx = format!("{} with {workers} workers, {mode:?}", case.env);
    let batch = pool.reset().unwrap();
    assert_eq!(batch_rows(&batch), reference.reset(Some(11)), "{ctx}: reset");
    let mut rng = Pcg64::from_seed(99);
    let is_float = pool.spec().action.dtype().is_float();
    let mut episodes_ended = 0;
    let mut step = 0;
    while step < case.steps {
        let result = if is_float {
            step_both::<f32>(&mut pool, &mut reference, &mut rng)
        } else {
            step_both::<i64>(&mut pool, &mut reference, &mut rng)
        };
        match result {
            Ok((got, want)) => {
                assert_eq!(got, want, "{ctx}: step {step}");
                let ended: Vec<usize> = got
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.terminated || r.truncated)
                    .map(|(i, _)| i)
                    .collect();
                episodes_ended += ended.len();
                if mode == AutoReset::Disabled && !ended.is_empty() {
                    // Stepping an ended env is refused until reset, and nothing is sent.
                    let zeros = vec![0i64; n];
                    let err =
                        if is_float { pool.step(&vec![0f32; n]).err() } else { pool.step(&zeros).err() };
                    match err {
                        Some(StepError::NeedsReset { env_ids }) => {
                            assert_eq!(env_ids, ended, "{ctx}")
                        }
                        other => panic!("{ctx}: expected NeedsReset, got {other:?}"),
                    }
                    let batch = pool.reset().unwrap();
                    assert_eq!(batch_rows(&batch), reference.reset(None), "{ctx}: reset after end");
                }
            }
            Err(e) => panic!("{ctx}: step {step} failed: {e}"),
        }
        step += 1;
    }
    assert!(episodes_ended > 0, "{ctx}: no episode ended; the case does not exercise auto-reset");
}

#[test]
fn pool_equals_in_process_stepping_for_every_env_mode_and_worker_count() {
    let _w = Watchdog::new("equivalence", Duration::from_secs(240));
    for case in cases() {
        for workers in [1, 2, 3] {
            for mode in [AutoReset::NextStep, AutoReset::SameStep, AutoReset::Disabled] {
                run_case(&case, workers, mode);
            }
        }
    }
}

#[test]
fn same_seed_gives_identical_batches_for_any_worker_count() {
    let _w = Watchdog::new("determinism", Duration::from_secs(120));
    let n = 7;
    let mut runs: Vec<Vec<u8>> = Vec::new();
    for workers in [1, 2, 3, 7] {
        let mut pool = builder("CartPole-v1").num_envs(n).num_workers(workers).seed(2024).build().unwrap();
        let mut trace = Vec::new();
        let b = pool.reset().unwrap();
        trace.extend_from_slice(bytemuck::cast_slice(b.observations::<f32>().unwrap().as_slice()));
        let mut rng = Pcg64::from_seed(5);
        for _ in 0..200 {
            let a: Vec<i64> = (0..n).map(|_| (rng.next_u64() & 1) as i64).collect();
            let b = pool.step(&a).unwrap();
            trace.extend_from_slice(bytemuck::cast_slice(b.observations::<f32>().unwrap().as_slice()));
            trace.extend_from_slice(bytemuck::cast_slice(b.rewards()));
            trace.extend_from_slice(b.terminated().as_bytes());
            trace.extend_from_slice(b.truncated().as_bytes());
        }
        runs.push(trace);
    }
    assert!(runs.windows(2).all(|w| w[0] == w[1]), "batches differ between worker counts");
}

#[test]
fn reset_with_seed_restarts_the_streams_and_views_are_zero_copy() {
    let _w = Watchdog::new("reseed", Duration::from_secs(60));
    let mut pool = builder("Pendulum-v1").num_envs(4).num_workers(2).seed(3).build().unwrap();
    let first = pool.reset().unwrap().observations::<f32>().unwrap().as_slice().to_vec();
    let second = pool.reset().unwrap().observations::<f32>().unwrap().as_slice().to_vec();
    assert_ne!(first, second, "a plain reset continues each env's stream");
    let again = pool.reset_with_seed(3).unwrap().observations::<f32>().unwrap().as_slice().to_vec();
    assert_eq!(first, again, "reseeding with the same seed restarts the streams");
    let range = pool.mapping_lease().address_range();
    let batch = pool.step(&[0.5f32, -0.5, 1.0, 0.0]).unwrap();
    let obs = batch.observations::<f32>().unwrap();
    assert_eq!(obs.shape(), &[4, 3]);
    let addr = obs.as_slice().as_ptr() as usize;
    assert!(
        range.contains(&addr) && range.contains(&(addr + 4 * 3 * 4 - 1)),
        "the observation view is not inside the shared mapping"
    );
    assert!(range.contains(&(batch.rewards().as_ptr() as usize)));
}

#[test]
fn reset_envs_resets_only_the_masked_envs() {
    let _w = Watchdog::new("partial reset", Duration::from_secs(60));
    let n = 5;
    let mut pool = builder("CartPole-v1").num_envs(n).num_workers(2).seed(7).build().unwrap();
    pool.reset().unwrap();
    let before = pool.step(&[1i64; 5]).unwrap().observations::<f32>().unwrap().as_slice().to_vec();
    let mask = [false, true, false, false, true];
    let after = pool.reset_envs(&mask, Some(100)).unwrap();
    let (obs, rewards, elapsed) =
        (after.observations::<f32>().unwrap(), after.rewards().to_vec(), after.elapsed_steps().to_vec());
    let mut fresh = builder("CartPole-v1").num_envs(n).num_workers(1).seed(100).build().unwrap();
    let fresh = fresh.reset().unwrap().observations::<f32>().unwrap().as_slice().to_vec();
    for e in 0..n {
        let row = obs.row(e);
        if mask[e] {
            assert_eq!(row, &fresh[e * 4..e * 4 + 4], "env {e} was reset with seed 100 + {e}");
            assert_eq!(elapsed[e], 0);
        } else {
            assert_eq!(row, &before[e * 4..e * 4 + 4], "env {e} was left alone");
            assert_eq!(elapsed[e], 1);
        }
    }
    assert!(rewards.iter().all(|&r| r == 0.0));
    let err = pool.reset_envs(&[true; 3], None).map(|_| ()).unwrap_err();
    assert!(matches!(err, ResetError::BadMask { len: 3, num_envs: 5 }), "{err}");
}

#[test]
fn with_autoreset_disabled_ended_envs_come_back_through_a_partial_reset() {
    let _w = Watchdog::new("disabled + partial reset", Duration::from_secs(60));
    let n = 3;
    let mut pool = builder("CartPole-v1")
        .num_envs(n)
        .num_workers(1)
        .seed(1)
        .autoreset(AutoReset::Disabled)
        .build()
        .unwrap();
    pool.reset().unwrap();
    let ended = loop {
        let batch = pool.step(&[1i64; 3]).unwrap();
        let ended: Vec<bool> =
            batch.terminated().iter().zip(batch.truncated().iter()).map(|(a, b)| a || b).collect();
        if ended.iter().any(|&e| e) {
            break ended;
        }
    };
    assert!(matches!(pool.step(&[1i64; 3]), Err(StepError::NeedsReset { .. })));
    pool.reset_envs(&ended, None).unwrap();
    pool.step(&[0i64; 3]).unwrap();
}
