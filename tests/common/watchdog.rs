//! The watchdog and process helpers, shared with the CLI's tests (`cli/tests`), which
//! include this file by path.
#![allow(dead_code)] // each test file uses some of these

use std::io::Write;
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// What the running test said it was doing last ([`Watchdog::at`]), printed when it hangs.
static LAST_STEP: Mutex<String> = Mutex::new(String::new());

/// Aborts the whole test process if the guarded scope runs longer than `limit`: a hung
/// test fails loudly instead of stalling CI.
pub struct Watchdog {
    done: Option<mpsc::Sender<()>>,
}

impl Watchdog {
    pub fn new(name: &'static str, limit: Duration) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                let at = LAST_STEP.lock().map(|s| s.clone()).unwrap_or_default();
                // Written to the real stderr: the harness's capture dies with the abort.
                let _ = writeln!(
                    std::io::stderr(),
                    "watchdog: test {name} still running after {limit:?} (last step: {at}); aborting"
                );
                std::process::abort();
            }
        });
        Watchdog { done: Some(tx) }
    }

    /// Records what the test is doing now, for the message if it hangs.
    pub fn at(step: &str) {
        if let Ok(mut last) = LAST_STEP.lock() {
            step.clone_into(&mut last);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(tx) = self.done.take() {
            let _ = tx.send(());
        }
    }
}

/// The children of `parent` (the workers of a trainer started by a test).
pub fn grandchildren(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            let rest = stat.rsplit_once(')').map(|(_, r)| r.to_string()).unwrap_or_default();
            if rest.split_whitespace().nth(1) == Some(&parent.to_string()) {
                out.push(pid);
            }
        }
    }
    out
}

/// Running (not gone, not a zombie waiting for an init that does not reap).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            !matches!(stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()), Some("Z" | "X"))
        }
        Err(_) => false,
    }
}
