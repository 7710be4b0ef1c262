//! `shmenv`: list the built-in envs, benchmark and tune pools of them, soak-test worker
//! restarts, and watch the pools of a running process (`top`).
//!
//! This binary is also its own worker program: `main` first hands pool-started
//! invocations (`--shmenv-worker ...`) to the worker host, so the pools it builds run it.

mod args;
mod bench;
mod contend;
mod limits;
mod memory;
mod plot;
mod soak;
mod stepping;
mod sweep;
mod sweep_report;
mod top;
mod trace_file;
mod tune;

use clap::{Parser, Subcommand};
use serde_json::json;
use shmenv::worker::{Plugin, Registry};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The error of a command, printed as `error: <message>`.
pub type Error = Box<dyn std::error::Error>;

#[derive(Parser)]
#[command(
    name = "shmenv",
    version,
    about = "Vectorized RL envs stepped by worker processes through shared memory"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the registered envs with their spaces (or those of a plugin library).
    List(ListArgs),
    /// Step an env with random actions through a pool and report steps per second.
    Bench(bench::BenchArgs),
    /// Step continuously while killing random workers (Restart policy); print RSS, fds and
    /// children over time, to check that nothing grows.
    Soak(soak::SoakArgs),
    /// Try worker counts, batch sizes and wait strategies briefly; print a ranked table
    /// and the settings of the fastest for the CLI, Rust and Python.
    Tune(tune::TuneArgs),
    /// Live view of the pools of a running process (read-only; same user): per worker
    /// utilization, steps/s, env-step p50/p99, wait share; the trainer's wait share.
    Top(top::TopArgs),
    /// Spin until the given parent exits (the busy processes of `bench --contend`).
    #[command(hide = true)]
    Busy {
        /// The pid whose exit ends the spinning.
        #[arg(long)]
        parent: u32,
    },
}

fn main() -> ExitCode {
    shmenv::worker::serve_if_worker(Registry::with_builtins);
    limits::install_panic_hook();
    let registry = Registry::with_builtins();
    let result = match Cli::parse().command {
        Cmd::List(args) => match args.plugin {
            Some(path) => list_plugin(&path),
            None => list(&registry),
        },
        Cmd::Bench(args) => bench::run(&registry, args),
        Cmd::Top(args) => top::run(args),
        Cmd::Tune(args) => tune::run(&registry, args),
        Cmd::Soak(args) => soak::run(&registry, args),
        Cmd::Busy { parent } => {
            contend::busy(parent);
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", limits::message(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// `shmenv list` arguments.
#[derive(clap::Args)]
struct ListArgs {
    /// List the envs of this plugin library (a shared library implementing shmenv_env.h)
    /// instead of the built-in ones; the library is loaded into this process.
    #[arg(long)]
    plugin: Option<PathBuf>,
}

fn list_plugin(path: &Path) -> Result<(), Error> {
    let plugin = Plugin::load(path)?;
    println!("plugin {} (shmenv ABI version {})", path.display(), shmenv::worker::plugin::ABI_VERSION);
    // Every env is listed; one that cannot be created shows why, and the command fails.
    let mut failed = 0;
    for info in plugin.envs() {
        let spec = match plugin.make(&info.id, &json!({})) {
            Ok(env) => env.spec().to_string(),
            Err(e) => {
                failed += 1;
                format!("cannot be created with config {{}}: {e}")
            }
        };
        let limit = info.max_episode_steps.map_or(String::new(), |k| format!(", limit {k} steps"));
        println!("{:<14} {spec}{limit}\n{:<14} {}", info.id, "", info.description);
    }
    match failed {
        0 => Ok(()),
        n => Err(format!(
            "{n} of the plugin's {} envs cannot be created with config {{}} (above)",
            plugin.envs().len()
        )
        .into()),
    }
}

fn list(registry: &Registry) -> Result<(), Error> {
    for id in registry.ids() {
        let entry = registry.get(&id).expect("listed id");
        let env = registry.make(&id, &json!({}))?;
        let limit = entry.max_episode_steps.map_or(String::new(), |k| format!(", limit {k} steps"));
        println!("{id:<14} {}{limit}\n{:<14} {}", env.spec(), "", entry.description);
    }
    Ok(())
}
