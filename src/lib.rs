//! # shmenv
//!
//! Vectorized reinforcement-learning environments stepped by worker processes straight
//! into shared memory. The trainer reads each batch as typed, shaped views of that memory:
//! no pickling, no pipes, no copies. Linux only (memfd, pidfd, futex).
//!
//! ```no_run
//! use shmenv::worker::Registry;
//! use shmenv::{AutoReset, Pool};
//!
//! fn main() -> Result<(), shmenv::Report> {
//!     // The workers are this same program, started again by the pool.
//!     shmenv::worker::serve_if_worker(Registry::with_builtins);
//!     let mut pool = Pool::builder("CartPole-v1")
//!         .num_envs(64)
//!         .num_workers(2)
//!         .seed(42)
//!         .autoreset(AutoReset::NextStep)
//!         .build()?;
//!     let batch = pool.reset()?;
//!     let obs = batch.observations::<f32>()?; // [64, 4], a view into shared memory
//!     assert_eq!(obs.shape(), &[64, 4]);
//!     let actions = vec![0i64; 64];
//!     for _ in 0..100 {
//!         let batch = pool.step(&actions)?;
//!         for ep in batch.episodes() {
//!             println!("env {} finished with return {}", ep.env_id, ep.episode_return);
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Everything a program calls is here: the [`Pool`] and its [`PoolBuilder`], the zero-copy
//! [`Batch`] views, the spaces and [`EnvSpec`], the settings ([`AutoReset`],
//! [`WaitStrategy`], [`CpuAffinity`], [`FailurePolicy`]), the errors (each operation's own,
//! and [`Report`] for `main`) and the live [`StatsReport`]. Start with [`Pool::builder`].
//! The worker side is [`worker`]: the [`worker::Env`] trait to implement an env, the
//! [`worker::Registry`] of env ids, [`worker::serve_if_worker`] (the first line of a `main`
//! that is its own worker program, as above), C/C++ plugins and the built-in envs.
//!
//! ## Which program the workers run
//!
//! Each worker is a process executing a program that knows the envs. With
//! [`worker::serve_if_worker`] first in `main`, that program is the trainer's own
//! executable: nothing to build, install or copy, and envs registered there are known to
//! the workers. The call is explicit, not code that runs before `main` by itself, because a
//! worker must never run the trainer's `main` and a constructor inside a library is not
//! reliably linked into the program. The order a pool looks in: the program named by
//! [`PoolBuilder::worker_program`], else the one named by `$SHMENV_WORKER_PROGRAM`, else
//! this same program when its `main` calls [`worker::serve_if_worker`], else a program
//! named `shmenv-worker` next to the executable, then on `$PATH`.

pub use shmenv_engine::error::OomKill;
pub use shmenv_engine::pool::{TrainerShardChoice, TrainerShardMode, HANDOFF_COST};
pub use shmenv_engine::spec::{Bool8, BoundProblem, SpecError, F16};
pub use shmenv_engine::{
    ActionError, ArrayView, AutoReset, Batch, BuildError, CpuAffinity, DType, Element, EnvSpec, Episode,
    FailurePolicy, Flags, MappingLease, ObsArray, Pool, PoolBuilder, PoolFailure, RecvError, Report,
    ResetError, SendError, Space, StatsReport, StatsSnapshot, StepError, Verdict, ViewError, WaitMode,
    WaitStrategy, WorkerActivity, WorkerCommand, WorkerExit, WrongMode,
};

pub mod worker {
    //! The worker side: implementing an env ([`Env`]), the [`Registry`] of env ids a
    //! worker program knows, [`serve_if_worker`] to make a program its own worker, C/C++
    //! [`plugin`]s and the built-in [`envs`].

    pub use shmenv_worker::{
        serve_if_worker, trainer_shard, ActionIn, Config, ConfigError, Env, EnvEntry, EnvFactory, MakeError,
        ObsOut, Plugin, PluginEnv, PluginError, Registry, Transition,
    };

    /// A program that is only a worker: `fn main() -> ExitCode { host::run(&registry) }`,
    /// and pools pointed at it with [`crate::PoolBuilder::worker_program`].
    pub mod host {
        pub use shmenv_worker::host::run;
    }

    /// C/C++ envs loaded from a shared library (the ABI of `worker/include/shmenv_env.h`).
    pub mod plugin {
        pub use shmenv_worker::plugin::{Plugin, PluginEnv, PluginEnvInfo, PluginError, ABI_VERSION};
    }

    /// The random number generator the built-in envs use (NumPy's PCG64), for envs of
    /// your own that should draw the same way.
    pub mod rng {
        pub use shmenv_worker::rng::Pcg64;
    }

    /// The built-in envs, to construct or wrap directly.
    pub mod envs {
        pub use shmenv_worker::envs::{burn::Burn, cartpole::CartPole, pendulum::Pendulum};
    }
}
