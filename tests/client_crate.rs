//! Link and go: a separate cargo crate that depends on shmenv by path runs the README's
//! Rust snippet, extracted verbatim from README.md (so the two cannot drift), with no
//! worker binary to build, copy or point at. Two more binaries of that crate check what a
//! user sees when the entry line is missing: a readable error (`main` returns
//! `shmenv::Report`, whose `Debug` is the error's message), and a worker program that runs
//! trainer code is refused
//! instead of starting workers of its own.
//!
//! Cost: the crate builds in debug into `target/client-crate` (its own target dir, kept
//! between runs): about 40 s on 2 cores the first time, a few seconds afterwards.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const WORKSPACE: &str = env!("CARGO_MANIFEST_DIR");

/// The first ```rust block under "## Use it from Rust" in README.md.
fn readme_rust_snippet() -> String {
    let readme = std::fs::read_to_string(Path::new(WORKSPACE).join("README.md")).unwrap();
    let section =
        readme.split("\n## Use it from Rust\n").nth(1).expect("README has a \"Use it from Rust\" section");
    let section = section.split("\n## ").next().unwrap();
    let start = section.find("\n```rust\n").expect("a ```rust block (not rust,ignore) in that section") + 9;
    let len = section[start..].find("\n```\n").expect("the block ends");
    section[start..start + len + 1].to_string()
}

const NO_ENTRY: &str = r#"fn main() -> Result<(), shmenv::Report> {
    let _pool = shmenv::Pool::builder("CartPole-v1").num_envs(2).num_workers(1).build()?;
    Ok(())
}
"#;

const SELF_WITHOUT_ENTRY: &str = r#"fn main() -> Result<(), shmenv::Report> {
    let _pool = shmenv::Pool::builder("CartPole-v1")
        .num_envs(2)
        .num_workers(1)
        .worker_program(std::env::current_exe()?)
        .build()?;
    println!("built");
    Ok(())
}
"#;

/// Writes the client crate into `dir` (replacing what an earlier run left).
fn write_client(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir.join("src"));
    std::fs::create_dir_all(dir.join("src/bin")).unwrap();
    let manifest = format!(
        "[package]\nname = \"shmenv-client\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nshmenv = {{ path = {WORKSPACE:?} }}\n\n\
         # Not a member of the shmenv workspace it sits under.\n[workspace]\n"
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    // The workspace's lock file: the same versions, and nothing to fetch (--offline).
    std::fs::copy(Path::new(WORKSPACE).join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    std::fs::write(dir.join("src/main.rs"), readme_rust_snippet()).unwrap();
    std::fs::write(dir.join("src/bin/no_entry.rs"), NO_ENTRY).unwrap();
    std::fs::write(dir.join("src/bin/self_without_entry.rs"), SELF_WITHOUT_ENTRY).unwrap();
}

/// Runs `cmd` to completion, killing it if it runs longer than `limit` (the watchdog).
fn run(mut cmd: Command, limit: Duration) -> Output {
    let what = format!("{cmd:?}");
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut pipes = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut o = Vec::new();
        pipes.0.read_to_end(&mut o).unwrap();
        o
    });
    let err = std::thread::spawn(move || {
        let mut e = Vec::new();
        pipes.1.read_to_end(&mut e).unwrap();
        e
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("watchdog: {what} still running after {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_client_crate_runs_the_readme_snippet() {
    let dir = Path::new(WORKSPACE).join("target/client-crate");
    write_client(&dir);
    let target: PathBuf = dir.join("target");
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build
        .args(["build", "--offline", "--bins", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target);
    let started = Instant::now();
    let out = run(build, Duration::from_secs(15 * 60));
    assert!(out.status.success(), "the client crate does not build:\n{}", text(&out.stderr));
    eprintln!("client crate built in {:.1?}", started.elapsed());
    let bin = |name: &str| Command::new(target.join("debug").join(name));

    // The README snippet: a pool of 64 CartPole envs in 2 workers, 1000 steps.
    let out = run(bin("shmenv-client"), Duration::from_secs(120));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "the README snippet failed:\n{stderr}");
    assert!(stdout.lines().count() > 100, "{stdout}");
    assert!(
        stdout.lines().all(|l| l.starts_with("env ") && l.contains(" return ") && l.contains(" steps")),
        "{stdout}"
    );

    // No entry line, no shmenv-worker: the error says what to add, readably (the Report's
    // Debug is the message).
    let out = run(bin("no_entry"), Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.starts_with("Error: no worker program to run: this program's `main` does not call"),
        "{stderr}"
    );
    assert!(
        stderr.contains("shmenv::worker::serve_if_worker(shmenv::worker::Registry::with_builtins);"),
        "{stderr}"
    );

    // Pointed at itself without the entry line: the worker refuses to run trainer code
    // (no pools of its own); its message reaches the trainer's stderr, then the trainer's
    // own error.
    let out = run(bin("self_without_entry"), Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert!(!out.status.success() && out.stdout.is_empty(), "{stderr}");
    assert!(stderr.contains("ran the trainer code instead of serving the pool"), "{stderr}");
    assert!(stderr.contains("Error: worker 0 (pid "), "{stderr}");
    assert_eq!(stderr.matches("started by a shmenv pool as one of its workers").count(), 1, "{stderr}");
}
