//! Worker side of shmenv: the [`Env`] trait, the env [`Registry`], the host loop that
//! steps a shard of envs straight into the shared region, and the built-in envs.
//!
//! A program hosts workers by calling [`serve_if_worker`] first thing in `main`, with a
//! registry of the envs it knows ([`Registry::with_builtins`] plus any of its own): pools
//! it builds then run this same program as their workers. A program that is only a
//! worker hands the registry to [`host::run`] instead, and pools are pointed at it with
//! `PoolBuilder::worker_program(path)`.
//!
//! Internal to shmenv, with no stable API: programs use the `shmenv` crate, whose
//! `shmenv::worker` re-exports what they call.

// Every `pub` item is reachable from outside (the rest is `pub(crate)`), so what other
// crates of the workspace may call is exactly the snapshot in tests/public-api/.
#![warn(unreachable_pub)]

mod config;
mod entry;
mod env;
pub mod envs;
pub mod host;
pub mod panic_hook;
pub mod plugin;
mod registry;
pub mod rng;
mod shard;
mod trainer_shard;

pub use config::{Config, ConfigError};
pub use entry::serve_if_worker;
pub use env::{ActionIn, Env, ObsOut, Transition};
pub use plugin::{Plugin, PluginEnv, PluginError};
pub use registry::{EnvEntry, EnvFactory, MakeError, Registry};
pub use shard::{EnvShard, LocalRows};
pub use trainer_shard::{trainer_shard, trainer_shard_with_scope};
