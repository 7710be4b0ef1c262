//! CartPole-v1 and Pendulum-v1 match trajectories recorded from Gymnasium's
//! `SyncVectorEnv` (autoreset NEXT_STEP) with the same seed and actions.
//! The fixtures and the script that records them are in `tests/fixtures/`.

mod common;

use common::{builder, Watchdog};
use serde::Deserialize;
use std::time::Duration;

#[derive(Deserialize)]
struct Fixture {
    env_id: String,
    seed: u64,
    num_envs: usize,
    reset_obs: Vec<Vec<f64>>,
    actions: Vec<serde_json::Value>,
    obs: Vec<Vec<Vec<f64>>>,
    rewards: Vec<Vec<f64>>,
    terminated: Vec<Vec<bool>>,
    truncated: Vec<Vec<bool>>,
}

fn load(name: &str) -> Fixture {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Observations must agree to within `obs_tol` (0 = bit-exact in f32).
fn check_obs(got: &[f32], want: &[Vec<f64>], obs_tol: f32, what: &str) {
    let want: Vec<f32> = want.iter().flatten().map(|&x| x as f32).collect();
    assert_eq!(got.len(), want.len(), "{what}");
    for (j, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= obs_tol * w.abs().max(1.0),
            "{what}: element {j}: shmenv {g}, gymnasium {w}"
        );
    }
}

fn replay(name: &str, workers: usize, obs_tol: f32, reward_tol: f32) {
    let fx = load(name);
    let mut pool =
        builder(&fx.env_id).num_envs(fx.num_envs).num_workers(workers).seed(fx.seed).build().unwrap();
    let batch = pool.reset().unwrap();
    check_obs(batch.observations::<f32>().unwrap().as_slice(), &fx.reset_obs, obs_tol, "reset");
    let mut truncations = 0;
    for (t, actions) in fx.actions.iter().enumerate() {
        let batch = if fx.env_id == "Pendulum-v1" {
            let a: Vec<f32> =
                actions.as_array().unwrap().iter().map(|r| r[0].as_f64().unwrap() as f32).collect();
            pool.step(&a).unwrap()
        } else {
            let a: Vec<i64> = actions.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            pool.step(&a).unwrap()
        };
        let what = format!("{} step {t}", fx.env_id);
        check_obs(batch.observations::<f32>().unwrap().as_slice(), &fx.obs[t], obs_tol, &what);
        for (i, (&g, &w)) in batch.rewards().iter().zip(&fx.rewards[t]).enumerate() {
            assert!(
                (g - w as f32).abs() <= reward_tol * (w as f32).abs().max(1.0),
                "{what}: env {i} reward {g} vs {w}"
            );
        }
        assert_eq!(batch.terminated().to_vec(), fx.terminated[t], "{what}: terminated");
        assert_eq!(batch.truncated().to_vec(), fx.truncated[t], "{what}: truncated");
        truncations += fx.truncated[t].iter().filter(|&&x| x).count();
    }
    assert!(truncations > 0, "the fixture should reach the time limit at least once");
}

#[test]
fn cartpole_matches_gymnasium_bit_for_bit() {
    let _w = Watchdog::new("cartpole fixture", Duration::from_secs(60));
    for workers in [1, 3] {
        replay("cartpole_v1.json", workers, 0.0, 0.0);
    }
}

#[test]
fn pendulum_matches_gymnasium() {
    let _w = Watchdog::new("pendulum fixture", Duration::from_secs(60));
    // Bit-exact on the project machine. NumPy may use SIMD sin/cos that differ from libm
    // in the last bit of an f64 on other CPUs; after
    // the cast to f32 that is at most one f32 ulp.
    replay("pendulum_v1.json", 2, 1e-6, 1e-6);
}
