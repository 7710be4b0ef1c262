//! `shmenv-worker`: the default worker program, hosting every built-in env.
//! Pools start it; it is not meant to be run by hand.

fn main() -> std::process::ExitCode {
    shmenv::worker::host::run(&shmenv::worker::Registry::with_builtins())
}
