//! The trace rings (with `PoolParams::trace`): per worker a [`TraceRow`], a head counter
//! then a ring of [`SPANS`] spans of two u64 words each, written with relaxed atomic stores
//! by the worker, the head stored with Release after each span; readers load the head with
//! Acquire.

use bytemuck::{Pod, Zeroable};
use std::mem::{offset_of, size_of};

/// Spans kept per worker (older ones are overwritten).
pub const SPANS: usize = 4096;

/// One span's words.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct SpanWords {
    /// CLOCK_MONOTONIC start, ns.
    pub start_ns: u64,
    /// Duration in ns << 8 | [`kind`].
    pub duration_kind: u64,
}

/// One worker's trace row.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct TraceRow {
    /// Spans recorded so far (the next goes to slot `head % SPANS`).
    pub head: u64,
    /// Zero: the rest of the head's 64 bytes.
    pub reserved: [u64; 7],
    /// The ring.
    pub spans: [SpanWords; SPANS],
}

/// Offset of the head in a row.
pub(crate) const HEAD_AT: usize = offset_of!(TraceRow, head);
/// Offset of the first span in a row.
pub(crate) const SPANS_AT: usize = offset_of!(TraceRow, spans);
/// Bytes of one span.
pub(crate) const SPAN_BYTES: usize = size_of::<SpanWords>();
/// Offset of a span's packed duration and kind word.
pub(crate) const SPAN_DURATION_KIND: usize = offset_of!(SpanWords, duration_kind);
/// Bytes of one worker's row.
pub(crate) const ROW_BYTES: usize = size_of::<TraceRow>();

/// Span kinds.
pub mod kind {
    /// Waiting for a command or actions.
    pub const WAIT: u64 = 1;
    /// Env work (a batch of steps or resets).
    pub const ENV: u64 = 2;
    /// Publishing results.
    pub const PUBLISH: u64 = 3;
}
