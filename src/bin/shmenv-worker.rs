//! `shmenv-worker`: a stand-alone worker program hosting every built-in env. Pools start
//! it (when pointed at it, or when their program does not serve workers itself); it is not
//! meant to be run by hand.

fn main() -> std::process::ExitCode {
    shmenv::worker::host::run(&shmenv::worker::Registry::with_builtins())
}
