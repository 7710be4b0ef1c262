//! Tracing ([`PoolBuilder::trace`]): the trainer's recent spans and the Chrome trace
//! file that shows them beside the workers'.

#[cfg(doc)]
use super::PoolBuilder;
use super::{Core, Pool};
use crate::protocol;
use crate::stats::StatsSnapshot;

/// Trainer spans kept for [`Pool::write_trace`].
const TRAINER_SPANS: usize = 16384;

impl Pool {
    /// Writes the recorded spans (see [`PoolBuilder::trace`]) as Chrome trace JSON, which
    /// Perfetto (<https://ui.perfetto.dev>) and `chrome://tracing` open: one track for the
    /// trainer (its `step`/`recv`/`send` calls and the waits inside them) and one per worker
    /// process (`wait`, `env`, `publish` per batch), named as `ps` shows them. Times are
    /// microseconds since the pool started, on the machine-wide monotonic clock.
    pub fn write_trace(&self, path: &std::path::Path) -> std::io::Result<()> {
        let Some(trainer) = &self.core.trace else {
            return Err(std::io::Error::other("tracing is off: build the pool with .trace(true)"));
        };
        let t0 = StatsSnapshot::read(&self.core.region, &self.core.params).started_ns;
        let us = |ns: u64| ns.saturating_sub(t0) as f64 / 1e3;
        let me = std::process::id();
        let mut events = vec![serde_json::json!({
            "ph": "M", "name": "process_name", "pid": me, "args": {"name": format!("shmenv trainer ({})", self.core.params.env_id)},
        })];
        for &(name, start, end) in trainer {
            events.push(serde_json::json!({
                "ph": "X", "name": name, "cat": "trainer", "pid": me, "tid": me,
                "ts": us(start), "dur": end.saturating_sub(start) as f64 / 1e3,
            }));
        }
        if let Some(rows) = &self.core.layout.trace {
            for (w, &pid) in self.core.supervisor.pids().iter().enumerate() {
                events.push(serde_json::json!({
                    "ph": "M", "name": "process_name", "pid": pid,
                    "args": {"name": format!("shmenv-worker[{w}] {}", self.core.params.env_id)},
                }));
                for span in crate::stats::TraceRing::new(&self.core.region, rows, w).spans() {
                    let name = match span.kind {
                        protocol::trace::kind::WAIT => "wait",
                        protocol::trace::kind::ENV => "env",
                        protocol::trace::kind::PUBLISH => "publish",
                        _ => continue, // untrusted bytes: skip what we do not know
                    };
                    events.push(serde_json::json!({
                        "ph": "X", "name": name, "cat": "worker", "pid": pid, "tid": pid,
                        "ts": us(span.start_ns), "dur": span.dur_ns as f64 / 1e3,
                    }));
                }
            }
        }
        let doc = serde_json::json!({"traceEvents": events, "displayTimeUnit": "ns"});
        std::fs::write(path, serde_json::to_vec(&doc).map_err(std::io::Error::other)?)
    }
}

impl Core {
    /// Keeps the trainer's last spans when tracing.
    pub(super) fn record_spans(&mut self, spans: &[(&'static str, u64, u64)]) {
        if let Some(trace) = self.trace.as_mut() {
            for &s in spans {
                if trace.len() == TRAINER_SPANS {
                    trace.pop_front();
                }
                trace.push_back(s);
            }
        }
    }
}
