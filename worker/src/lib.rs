//! Worker side of shmenv: the [`Env`] trait, the env [`Registry`], the host loop that
//! steps a shard of envs straight into the shared region, and the built-in envs.
//!
//! To host your own envs, register them and hand the registry to [`host::run`] from the
//! `main` of your own worker program, then point the pool at that program with
//! `Pool::builder(id).worker_program(path)`.

pub mod config;
pub mod env;
pub mod envs;
pub mod host;
pub mod registry;
pub mod rng;
pub mod shard;

pub use config::{Config, ConfigError};
pub use env::{ActionIn, Env, ObsOut, Transition};
pub use registry::{EnvEntry, EnvFactory, MakeError, Registry};
pub use shard::{EnvShard, LocalRows, ShardRows};
