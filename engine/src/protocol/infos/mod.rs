//! The info area of hosted Python envs: a memfd the trainer makes and each worker maps,
//! where the workers leave their envs' numeric infos for the trainer (`shmenv.infos` in
//! the Python package writes it in the workers and says who writes which byte when; the
//! extension's `info_columns` reads it in the trainer). This module is the area's one
//! layout ([`InfoLayout`], which Python gets through `_shmenv.info_area_layout`) and the
//! trainer's reads of it ([`InfoArea`]): bounds-checked atomic byte reads of bytes that
//! nothing trusts, since workers write them.
//!
//! ```text
//! n = workers x stride env cells (env e of worker w: cell w * stride + e); n8 = n rounded
//! up to 8; every part starts on 8 bytes
//!   0        flags     n bytes: the env has infos (worker sets, trainer clears)
//!   n8       pickled   n bytes: the env kept values outside the columns (pickled)
//!   2 n8     counts    one byte per worker: the keys it named
//!   entries  tables    SLOTS entries of ENTRY_BYTES per worker: the key (UTF-8, NAME_BYTES,
//!                      zero-padded), then its numpy dtype.str (zero-padded)
//!   columns  SLOTS slots of slot_bytes = 16 n + 2 n8 each:
//!              step values   n cells of CELL_BYTES (the value in the first bytes)
//!              reset values  n cells of CELL_BYTES
//!              presence      n bytes for step infos, from n8 on n bytes for reset infos
//! ```

mod area;

pub use area::{InfoArea, InfoRow, InfoTarget, KeyTables};

use crate::spec::DType;

/// Keys each worker can keep in columns; more keys go pickled.
pub const SLOTS: usize = 16;
/// Bytes of a key table entry.
pub const ENTRY_BYTES: usize = 64;
/// Bytes of the key name that starts a table entry (the dtype string fills the rest).
pub const NAME_BYTES: usize = 48;
/// Bytes of a value cell.
pub const CELL_BYTES: usize = 8;

/// What can be wrong with an info area or what a worker wrote into it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InfoAreaError {
    /// The layout's size does not fit in a `usize`.
    #[error(
        "an info area for {workers} workers of {stride} envs would span more than {max} bytes: \
         give the pool fewer workers or envs",
        max = usize::MAX
    )]
    TooLarge {
        /// Workers asked for.
        workers: usize,
        /// Env cells per worker asked for.
        stride: usize,
    },
    /// The bytes given are fewer than the layout spans.
    #[error(
        "the info area ({len} bytes) does not fit {workers} workers of {stride} envs: it needs {needed} \
         bytes; size it by info_area_layout(workers, stride)"
    )]
    TooSmall {
        /// Bytes given.
        len: usize,
        /// Workers of the layout.
        workers: usize,
        /// Env cells per worker of the layout.
        stride: usize,
        /// Bytes the layout spans.
        needed: usize,
    },
    /// A key table entry is not a name and a dtype a column can have.
    #[error(
        "worker {worker}'s info key {slot} is not a UTF-8 name and a native number dtype of up to 8 bytes \
         (dtype {dtype:?}): the worker wrote its info table wrongly; restart the pool"
    )]
    BadEntry {
        /// The worker whose table it is.
        worker: usize,
        /// The entry.
        slot: usize,
        /// Its dtype string, when UTF-8.
        dtype: Option<String>,
    },
}

/// Where every part of the info area of `workers` workers of `stride` env cells each is,
/// in bytes from its start. Built only by [`InfoLayout::new`], which checks the sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InfoLayout {
    workers: usize,
    stride: usize,
    /// `workers * stride`.
    cells: usize,
    /// `cells` rounded up to 8: the offset of the pickled bytes, and the distance from a
    /// slot's step presence bytes to its reset ones.
    cells8: usize,
    counts: usize,
    entries: usize,
    columns: usize,
    slot_bytes: usize,
    size: usize,
}

impl InfoLayout {
    /// The layout for `workers` workers of `stride` env cells each; `TooLarge` when its
    /// size is past `usize`.
    pub fn new(workers: usize, stride: usize) -> Result<InfoLayout, InfoAreaError> {
        Self::sized(workers, stride).ok_or(InfoAreaError::TooLarge { workers, stride })
    }

    fn sized(workers: usize, stride: usize) -> Option<InfoLayout> {
        let round8 = |x: usize| x.checked_next_multiple_of(8);
        let cells = workers.checked_mul(stride)?;
        let cells8 = round8(cells)?;
        let counts = cells8.checked_mul(2)?;
        let entries = counts.checked_add(round8(workers)?)?;
        let columns = entries.checked_add(workers.checked_mul(SLOTS * ENTRY_BYTES)?)?;
        // Step and reset value cells, then step and reset presence bytes.
        let slot_bytes = cells.checked_mul(2 * CELL_BYTES)?.checked_add(cells8.checked_mul(2)?)?;
        let size = columns.checked_add(slot_bytes.checked_mul(SLOTS)?)?;
        Some(InfoLayout { workers, stride, cells, cells8, counts, entries, columns, slot_bytes, size })
    }

    /// Workers of the layout.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Env cells per worker.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Env cells in all: `workers * stride`.
    pub fn cells(&self) -> usize {
        self.cells
    }

    /// Bytes the area spans.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The cell of env `local` of worker `worker` (`None`: not in the layout).
    pub fn position(&self, worker: usize, local: usize) -> Option<usize> {
        (worker < self.workers && local < self.stride).then(|| worker * self.stride + local)
    }

    /// The flag byte of cell `pos`.
    pub fn flag(&self, pos: usize) -> Option<usize> {
        (pos < self.cells).then_some(pos)
    }

    /// The pickled byte of cell `pos`.
    pub fn pickled(&self, pos: usize) -> Option<usize> {
        (pos < self.cells).then(|| self.cells8 + pos)
    }

    /// The key count byte of `worker`.
    pub fn count(&self, worker: usize) -> Option<usize> {
        (worker < self.workers).then(|| self.counts + worker)
    }

    /// The first byte of `worker`'s table entry `slot` (it spans [`ENTRY_BYTES`]).
    pub fn entry(&self, worker: usize, slot: usize) -> Option<usize> {
        (worker < self.workers && slot < SLOTS).then(|| self.entries + (worker * SLOTS + slot) * ENTRY_BYTES)
    }

    /// The first byte of the value cell (it spans [`CELL_BYTES`]) of `slot` for step
    /// (`reset` false) or reset infos, cell `pos`.
    pub fn value(&self, slot: usize, reset: bool, pos: usize) -> Option<usize> {
        let kind = usize::from(reset) * self.cells;
        (slot < SLOTS && pos < self.cells).then(|| self.slot(slot) + (kind + pos) * CELL_BYTES)
    }

    /// The presence byte of `slot` for step (`reset` false) or reset infos, cell `pos`.
    pub fn presence(&self, slot: usize, reset: bool, pos: usize) -> Option<usize> {
        let kind = usize::from(reset) * self.cells8;
        (slot < SLOTS && pos < self.cells).then(|| self.slot(slot) + 2 * CELL_BYTES * self.cells + kind + pos)
    }

    fn slot(&self, slot: usize) -> usize {
        self.columns + slot * self.slot_bytes
    }

    /// The layout as `(name, bytes)` pairs, what `shmenv.infos` builds its numpy views
    /// from: `size`, the offsets of the parts (`pickled`, `counts`, `entries`, `columns`,
    /// the flags being at 0), a slot's offsets from its start (`reset_values`, `presence_at`)
    /// and from its step presence bytes to its reset ones (`presence`), `slot_bytes` from a
    /// slot to the next, and the sizes `workers`, `stride`, `cells`, `slots`, `entry`,
    /// `name`, `cell`.
    pub fn fields(&self) -> [(&'static str, usize); 16] {
        [
            ("workers", self.workers),
            ("stride", self.stride),
            ("cells", self.cells),
            ("size", self.size),
            ("pickled", self.cells8),
            ("counts", self.counts),
            ("entries", self.entries),
            ("columns", self.columns),
            ("slot_bytes", self.slot_bytes),
            ("reset_values", CELL_BYTES * self.cells),
            ("presence_at", 2 * CELL_BYTES * self.cells),
            ("presence", self.cells8),
            ("slots", SLOTS),
            ("entry", ENTRY_BYTES),
            ("name", NAME_BYTES),
            ("cell", CELL_BYTES),
        ]
    }
}

/// The dtype of an info column named by numpy's `dtype.str` (`"<i8"`, `"|b1"`): a number
/// of this machine's byte order, of up to 8 bytes. `None` for anything else.
pub(crate) fn column_dtype(s: &str) -> Option<DType> {
    let native = if cfg!(target_endian = "little") { '<' } else { '>' };
    let mut chars = s.chars();
    let order = chars.next()?;
    let kind = chars.next()?;
    let size: usize = chars.as_str().parse().ok()?;
    if order != native && order != '|' && order != '=' {
        return None;
    }
    DType::ALL.into_iter().find(|d| d.size() == size && numpy_kind(*d) == kind)
}

/// numpy's kind character of `dtype`.
pub fn numpy_kind(dtype: DType) -> char {
    match dtype {
        DType::Bool => 'b',
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => 'i',
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => 'u',
        DType::F16 | DType::F32 | DType::F64 => 'f',
    }
}

#[cfg(test)]
mod tests;
