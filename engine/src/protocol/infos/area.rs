//! The trainer's reads of the info area: the workers' key tables ([`InfoArea::read_tables`])
//! and a batch's flagged rows ([`InfoArea::read_rows`]). Every byte is read (and cleared)
//! through an atomic at an offset of the [`InfoLayout`], checked against the bytes given:
//! whatever a worker wrote, a read returns values or an error, never panics, and touches
//! only the bytes the layout gives the rows it reads.

use super::{column_dtype, InfoAreaError, InfoLayout, CELL_BYTES, ENTRY_BYTES, NAME_BYTES, SLOTS};
use crate::spec::DType;
use std::sync::atomic::{AtomicU8, Ordering};

/// The info area as the trainer sees it: its bytes (which workers write too, so each is
/// read atomically and no plain reference to them is formed) and their layout.
#[derive(Clone, Copy, Debug)]
pub struct InfoArea<'a> {
    bytes: &'a [AtomicU8],
    layout: InfoLayout,
}

/// One row of a batch: its env's cell, and what the row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InfoRow {
    /// The env's cell ([`InfoLayout::position`]).
    pub pos: usize,
    /// Its observation comes from a reset (elapsed step 0).
    pub reset: bool,
    /// Its episode ended at this step.
    pub done: bool,
}

/// Where a value [`InfoArea::read_rows`] found goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InfoTarget {
    /// The batch's infos: a reset row's reset infos, another row's step infos (under
    /// SameStep auto-reset, a row that ended: its reset infos).
    Infos,
    /// SameStep auto-reset only: the step infos of a row that ended (`final_info`).
    Finals,
}

/// The workers' key tables as read: each `(key, dtype)` any worker named is a column,
/// numbered in the order first met (worker by worker, slot by slot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyTables {
    /// Each worker's key count when read (empty: not read yet).
    pub counts: Vec<u8>,
    /// The columns: a key and its dtype, each pair once.
    pub columns: Vec<(String, DType)>,
    /// Per worker, the column of each of its slots.
    pub slot_columns: Vec<Vec<usize>>,
}

impl<'a> InfoArea<'a> {
    /// The area `bytes` laid out as `layout`; `TooSmall` when they are fewer than it spans.
    pub fn new(bytes: &'a [AtomicU8], layout: InfoLayout) -> Result<InfoArea<'a>, InfoAreaError> {
        if bytes.len() < layout.size() {
            return Err(InfoAreaError::TooSmall {
                len: bytes.len(),
                workers: layout.workers(),
                stride: layout.stride(),
                needed: layout.size(),
            });
        }
        Ok(InfoArea { bytes, layout })
    }

    /// Its layout.
    pub fn layout(&self) -> &InfoLayout {
        &self.layout
    }

    /// Byte `offset` (0 for `None` or past the bytes), which a worker may be writing now (a
    /// flag of a row still in flight, a key count). Workers (Python) store a table entry
    /// first and its count after, with plain stores: on x86, whose stores are seen in
    /// order, a count read here (Acquire) comes after its entry; elsewhere an entry read
    /// too early is refused (`BadEntry`), not trusted.
    fn byte(&self, offset: Option<usize>) -> u8 {
        offset.and_then(|o| self.bytes.get(o)).map_or(0, |b| b.load(Ordering::Acquire))
    }

    /// Byte `offset` of a row the trainer received (0 for `None` or past the bytes), left
    /// 0. By the area's protocol no worker writes it now; one that does anyway races
    /// with this read and clear, and the value is lost or kept, never torn.
    fn take(&self, offset: Option<usize>) -> u8 {
        let Some(byte) = offset.and_then(|o| self.bytes.get(o)) else {
            return 0;
        };
        let value = byte.load(Ordering::Relaxed);
        if value != 0 {
            byte.store(0, Ordering::Relaxed);
        }
        value
    }

    /// `N` bytes from `offset`, each read as in [`take`](Self::take) but not cleared
    /// (zeros for `None` or past the bytes).
    fn array<const N: usize>(&self, offset: Option<usize>) -> [u8; N] {
        let part = offset.and_then(|o| self.bytes.get(o..o.checked_add(N)?));
        let mut out = [0; N];
        for (out, byte) in out.iter_mut().zip(part.unwrap_or_default()) {
            *out = byte.load(Ordering::Relaxed);
        }
        out
    }

    /// The flag of cell `pos`: whether its env left infos (0 past the cells).
    pub fn flag(&self, pos: usize) -> u8 {
        self.byte(self.layout.flag(pos))
    }

    /// The key count `worker` wrote (0 past the workers).
    pub fn count(&self, worker: usize) -> u8 {
        self.byte(self.layout.count(worker))
    }

    /// `worker`'s key `slot`: its name and its dtype (`BadEntry`: anything else).
    pub fn entry(&self, worker: usize, slot: usize) -> Result<(String, DType), InfoAreaError> {
        let raw: [u8; ENTRY_BYTES] = self.array(self.layout.entry(worker, slot));
        let (name, dtype) = raw.split_at(NAME_BYTES);
        let text = |b: &[u8]| String::from_utf8(b.iter().copied().take_while(|&c| c != 0).collect()).ok();
        let (name, dtype) = (text(name), text(dtype));
        match (name, dtype.as_deref().and_then(column_dtype)) {
            (Some(name), Some(column)) => Ok((name, column)),
            _ => Err(InfoAreaError::BadEntry { worker, slot, dtype }),
        }
    }

    /// Whether `tables` is what the workers' counts say now (no worker named a key since).
    pub fn tables_current(&self, tables: &KeyTables) -> bool {
        let workers = self.layout.workers();
        tables.counts.len() == workers && (0..workers).all(|w| tables.counts[w] == self.count(w))
    }

    /// Reads the workers' key tables: their counts, then each named entry (up to
    /// [`SLOTS`], whatever the count says). `BadEntry` for the first entry that is not a
    /// key and a column dtype.
    pub fn read_tables(&self) -> Result<KeyTables, InfoAreaError> {
        let counts: Vec<u8> = (0..self.layout.workers()).map(|w| self.count(w)).collect();
        let mut tables = KeyTables::default();
        for (w, &count) in counts.iter().enumerate() {
            let mut slots = Vec::new();
            for slot in 0..usize::from(count).min(SLOTS) {
                let pair = self.entry(w, slot)?;
                let column = tables.columns.iter().position(|p| *p == pair).unwrap_or_else(|| {
                    tables.columns.push(pair);
                    tables.columns.len() - 1
                });
                slots.push(column);
            }
            tables.slot_columns.push(slots);
        }
        tables.counts = counts;
        Ok(tables)
    }

    /// Reads, and clears, the infos of the flagged `rows` (each row's flag, pickled byte
    /// and presence bytes are cleared): for each value a row's env left in a column of
    /// `tables` (the column of its worker's slot), `put(target, column, row, cell)`, the
    /// value in the cell's first bytes in this machine's byte order; `same_step`: the
    /// pool's auto-reset mode is SameStep, where a row that ended takes its reset infos
    /// and its step infos go to [`InfoTarget::Finals`]. Returns the rows whose env kept
    /// values outside the columns (pickled), in order. Rows past the cells, and slots
    /// past the layout's, are left out.
    pub fn read_rows(
        &self,
        tables: &KeyTables,
        rows: &[InfoRow],
        same_step: bool,
        mut put: impl FnMut(InfoTarget, usize, usize, [u8; CELL_BYTES]),
    ) -> Vec<usize> {
        let layout = &self.layout;
        let mut pickled = Vec::new();
        for (row, r) in rows.iter().enumerate() {
            if self.take(layout.flag(r.pos)) == 0 {
                continue;
            }
            if self.take(layout.pickled(r.pos)) != 0 {
                pickled.push(row);
            }
            let reset = r.reset || (same_step && r.done);
            let worker = r.pos.checked_div(layout.stride()).unwrap_or(usize::MAX);
            let slots = tables.slot_columns.get(worker).map_or(&[][..], Vec::as_slice);
            for (slot, &column) in slots.iter().enumerate() {
                let present = [false, true].map(|k| self.take(layout.presence(slot, k, r.pos)) != 0);
                if present[usize::from(reset)] {
                    put(InfoTarget::Infos, column, row, self.array(layout.value(slot, reset, r.pos)));
                }
                if same_step && r.done && present[0] {
                    put(InfoTarget::Finals, column, row, self.array(layout.value(slot, false, r.pos)));
                }
            }
        }
        pickled
    }
}
