//! A worker's ring of trace spans in the region ([`protocol::trace`]): the writer, and the
//! reader that `Pool::write_trace` uses.

use crate::protocol::{self, trace};
use crate::region::Region;
use serde::Serialize;
use std::sync::atomic::Ordering;

/// A worker's writer for its trace ring (see [`protocol::trace`]).
#[derive(Clone, Copy, Debug)]
pub struct TraceRing<'a> {
    region: &'a Region,
    base: usize,
}

/// One recorded span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Span {
    /// CLOCK_MONOTONIC start, ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub dur_ns: u64,
    /// [`protocol::trace::kind`].
    pub kind: u64,
}

impl<'a> TraceRing<'a> {
    /// Worker `w`'s ring in the trace rows `rows` of the layout.
    pub fn new(region: &'a Region, rows: &protocol::ArraySlot, w: usize) -> Self {
        TraceRing { region, base: rows.rows(w..w + 1).start }
    }

    /// Offset of the `i`-th span recorded (its slot in the ring).
    #[inline]
    fn span_at(&self, i: usize) -> usize {
        self.base + trace::SPANS_AT + (i % trace::SPANS) * trace::SPAN_BYTES
    }

    /// Records a span (overwriting the oldest when the ring is full).
    #[inline]
    pub fn record(&self, kind: u64, start_ns: u64, end_ns: u64) {
        let head = self.region.atomic_u64(self.base + trace::HEAD_AT);
        let h = head.load(Ordering::Relaxed);
        let at = self.span_at(h as usize);
        self.region.atomic_u64(at).store(start_ns, Ordering::Relaxed);
        let dur = end_ns.saturating_sub(start_ns).min(u64::MAX >> 8);
        self.region
            .atomic_u64(at + trace::SPAN_DURATION_KIND)
            .store(dur << 8 | (kind & 0xff), Ordering::Relaxed);
        // Release: a reader that sees the new head sees the span's words.
        head.store(h.wrapping_add(1), Ordering::Release);
    }

    /// The spans in the ring, oldest first (a span being overwritten meanwhile may be
    /// mixed up with its successor; a trace is a picture, not an audit).
    pub fn spans(&self) -> Vec<Span> {
        let h = self.region.atomic_u64(self.base + trace::HEAD_AT).load(Ordering::Acquire);
        let n = (h as usize).min(trace::SPANS);
        (h as usize - n..h as usize)
            .map(|i| {
                let at = self.span_at(i);
                let start_ns = self.region.atomic_u64(at).load(Ordering::Relaxed);
                let word = self.region.atomic_u64(at + trace::SPAN_DURATION_KIND).load(Ordering::Relaxed);
                Span { start_ns, dur_ns: word >> 8, kind: word & 0xff }
            })
            .collect()
    }
}
