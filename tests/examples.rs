//! The `custom_env` example (a user's own env with a Dict observation, in its own worker
//! program) runs end to end.

mod common;

use std::time::Duration;

#[test]
fn custom_env_example_runs() {
    let _w = common::Watchdog::new("custom_env example", Duration::from_secs(60));
    // Test binaries live in target/<profile>/deps; cargo builds examples beside them.
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().unwrap().parent().unwrap().join("examples").join("custom_env");
    assert!(example.is_file(), "{} not built (cargo test builds examples)", example.display());
    let out = std::process::Command::new(&example).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("obs {position: Box(0, 4, [2], i32), goal: Box(0, 4, [2], i32)}, action Discrete(4)"),
        "{stdout}"
    );
    assert!(stdout.contains("episodes ended"), "{stdout}");
}
