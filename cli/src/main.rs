//! `shmenv`: list the built-in envs, benchmark and tune pools of them, soak-test worker
//! restarts, and watch the pools of a running process (`top`).
//!
//! This binary is also its own worker program: `main` first hands pool-started
//! invocations (`--shmenv-worker ...`) to the worker host, so the pools it builds run it.

mod args;
mod bench;
mod contend;
mod limits;
mod list;
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
use shmenv::worker::Registry;
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
    List(list::ListArgs),
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
        Cmd::List(args) => list::run(&registry, args),
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
