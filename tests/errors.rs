//! Every bad input gives its typed error with a message that says what to do; nothing
//! panics, nothing hangs, and a refused action batch leaves the pool usable.

mod common;

use common::{builder, Failed, Watchdog, WORKER};
use serde_json::json;
use shmenv::{ActionError, BuildError, Pool, PoolFailure, StepError, ViewError};
use shmenv_engine::protocol::exit_code;
use std::os::unix::process::CommandExt;
use std::time::Duration;

#[test]
fn unknown_env_lists_registered_ids_and_the_closest() {
    let _w = Watchdog::new("unknown env", Duration::from_secs(60));
    let err = builder("cartpole-v0").num_envs(2).num_workers(2).build().unwrap_err();
    match &err {
        BuildError::UnknownEnv { id, registered, closest } => {
            assert_eq!(id, "cartpole-v0");
            assert_eq!(registered, &["Burn-v0", "CartPole-v1", "Pendulum-v1"]);
            assert_eq!(closest.as_deref(), Some("CartPole-v1"));
        }
        other => panic!("expected UnknownEnv, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("did you mean \"CartPole-v1\"")
            && msg.contains("registered ids: Burn-v0, CartPole-v1, Pendulum-v1"),
        "{msg}"
    );
    // A `main` returning `Result<(), shmenv::Report>` prints `Error: {:?}`: the message.
    let report = shmenv::Report::from(err);
    assert_eq!(format!("{report:?}"), msg);
    assert!(matches!(report.error().downcast_ref(), Some(BuildError::UnknownEnv { .. })));
}

#[test]
fn bad_config_names_the_key() {
    let _w = Watchdog::new("bad config", Duration::from_secs(60));
    let err = builder("Burn-v0").config(json!({"step_usec": 5})).build().unwrap_err();
    assert!(matches!(err, BuildError::BadConfig { .. }), "{err:?}");
    assert!(err.to_string().contains("unknown config key \"step_usec\"; valid keys: step_us"), "{err}");
    let err = builder("Burn-v0").config(json!({"obs_dtype": "f16"})).build().unwrap_err();
    assert!(err.to_string().contains("\"obs_dtype\" must be one of [\"f32\", \"u8\"], got \"f16\""), "{err}");
    let err = builder("Burn-v0").config(json!([1, 2])).build().unwrap_err();
    assert!(matches!(err, BuildError::InvalidArgument(_)), "{err:?}");
}

#[test]
fn bad_pool_settings_are_refused_before_any_process_starts() {
    let _w = Watchdog::new("settings", Duration::from_secs(60));
    assert!(matches!(builder("CartPole-v1").num_envs(0).build(), Err(BuildError::InvalidArgument(_))));
    let err = builder("CartPole-v1").num_envs(2).num_workers(3).build().unwrap_err();
    assert!(err.to_string().contains("num_workers must be between 1 and num_envs (2), got 3"), "{err}");
    let err = Pool::builder("CartPole-v1").worker_program("/nonexistent/shmenv-worker").build().unwrap_err();
    assert!(matches!(err, BuildError::Spawn { .. }), "{err:?}");
    // A program that is not a shmenv worker: it exits and the pool says so.
    let err = Pool::builder("CartPole-v1").worker_program("/bin/true").build().unwrap_err();
    match err {
        BuildError::WorkerDied { exit, .. } => assert_eq!(exit, shmenv::WorkerExit::Code(0)),
        other => panic!("expected WorkerDied, got {other:?}"),
    }
}

#[test]
fn bad_actions_name_the_env_and_leave_the_pool_usable() {
    let _w = Watchdog::new("bad actions", Duration::from_secs(60));
    let mut pool = builder("CartPole-v1").num_envs(4).num_workers(2).seed(1).build().unwrap();
    assert!(matches!(pool.step(&[0i64; 4]), Err(StepError::NotReset)));
    pool.reset().unwrap();
    let e = pool.step(&[0i64, 1, 2, 0]).unwrap_err();
    assert!(matches!(e, StepError::Action(ActionError::OutOfRange { env_id: 2, element: 0, .. })), "{e:?}");
    assert_eq!(e.to_string(), "action for env 2 (element 0) is 2, expected an integer in 0..2 (Discrete(2))");
    let e = pool.step(&[0i64; 3]).unwrap_err();
    assert!(matches!(e, StepError::Action(ActionError::WrongLength { expected: 4, found: 3, .. })), "{e:?}");
    let e = pool.step(&[0f32; 4]).unwrap_err();
    assert!(e.to_string().contains("pass a &[i64] slice"), "{e}");
    let e = pool.step(&[-1i64, 0, 0, 0]).unwrap_err();
    assert!(matches!(e, StepError::Action(ActionError::OutOfRange { env_id: 0, .. })));
    // Nothing reached the workers: the pool steps on.
    let b = pool.step(&[1i64; 4]).unwrap();
    assert_eq!(b.rewards(), &[1.0; 4]);
    assert!(matches!(b.obs::<f32>("pixels"), Err(ViewError::UnknownName { .. })));
    assert!(matches!(b.obs::<u8>("obs"), Err(ViewError::WrongDtype { .. })));
    assert!(matches!(b.final_obs::<f32>("obs"), Err(ViewError::NoFinalObs)));

    let mut pool = builder("Pendulum-v1").num_envs(3).num_workers(3).build().unwrap();
    pool.reset().unwrap();
    let e = pool.step(&[0.0f32, f32::NAN, 1.0]).unwrap_err();
    assert!(
        e.to_string().starts_with("action for env 1 (element 0) is NaN, expected a finite number"),
        "{e}"
    );
    let e = pool.step(&[0.0f32, 1.0, f32::INFINITY]).unwrap_err();
    assert!(matches!(e, StepError::Action(ActionError::OutOfRange { env_id: 2, .. })));
    pool.step(&[0.0f32, 1.0, 2.0]).unwrap();
}

#[test]
fn a_panicking_env_is_reported_with_its_id() {
    let _w = Watchdog::new("env panic", Duration::from_secs(60));
    let config = json!({"fault": "panic", "fault_step": 3, "fault_seed": 102});
    let mut pool = builder("Burn-v0").config(config).num_envs(4).num_workers(2).seed(100).build().unwrap();
    pool.reset().unwrap();
    pool.step(&[0i64; 4]).unwrap();
    pool.step(&[0i64; 4]).unwrap();
    match pool.step(&[0i64; 4]).map(|_| ()).map_err(Failed::failed) {
        Err(PoolFailure::EnvPanicked { env_id, message }) => {
            assert_eq!(env_id, 2);
            assert!(message.contains("fault injected at step 3"), "{message}");
        }
        other => panic!("expected EnvPanicked, got {other:?}"),
    }
    assert!(matches!(
        pool.step(&[0i64; 4]).map(|_| ()).unwrap_err().failure(),
        Some(PoolFailure::Closed { .. })
    ));
}

/// Spawns the real worker program on a hand-made region whose header is wrong.
fn worker_on_bad_region(mutate: impl FnOnce(&mut shmenv_engine::protocol::Header)) -> std::process::Output {
    use shmenv_engine::protocol::{bootstrap_size, Header};
    use shmenv_engine::region::Region;
    let region = Region::create("test", bootstrap_size(1)).unwrap();
    let mut header = Header::new(1, 1, 0);
    mutate(&mut header);
    // SAFETY: a region this test just created; the worker starts after this write.
    unsafe { region.write_pod(0, &header) };
    let fd = region.fd().expect("a new region holds its memfd");
    let mut cmd = std::process::Command::new(WORKER);
    cmd.args(["--shmenv-worker", "0", &fd.to_string(), &std::process::id().to_string()]);
    // SAFETY: only fcntl (async-signal-safe) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::fcntl(fd, libc::F_SETFD, 0);
            Ok(())
        });
    }
    cmd.output().unwrap()
}

#[test]
fn a_worker_refuses_a_region_with_a_wrong_header() {
    let _w = Watchdog::new("header mismatch", Duration::from_secs(60));
    let out = worker_on_bad_region(|h| h.version += 1);
    assert_eq!(out.status.code(), Some(exit_code::BAD_REGION.into()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "region layout version {}, this build of shmenv reads version {}",
        shmenv_engine::protocol::LAYOUT_VERSION + 1,
        shmenv_engine::protocol::LAYOUT_VERSION
    );
    assert!(stderr.contains(&expected), "{stderr}");
    let out = worker_on_bad_region(|h| h.magic = 0);
    assert_eq!(out.status.code(), Some(exit_code::BAD_REGION.into()));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a shmenv region"));
    let out = worker_on_bad_region(|h| h.bootstrap_size = 1 << 40);
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupt region header"));
    // Started by hand: a usage message, not a crash.
    let out = std::process::Command::new(WORKER).output().unwrap();
    assert_eq!(out.status.code(), Some(exit_code::BAD_ARGUMENTS.into()));
    assert!(String::from_utf8_lossy(&out.stderr).contains("it is started by a shmenv Pool"));
}
