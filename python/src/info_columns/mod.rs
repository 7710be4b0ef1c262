//! The trainer's read of the info area of hosted Python envs (`shmenv.infos`, which lays
//! the area out and says who writes which byte when). The pool keeps one [`InfoReader`]:
//! each call that returns a batch notes its rows ([`InfoReader::note_batch`]), and
//! `Pool.take_infos()` turns the rows' flagged cells into Gymnasium's `infos[key]` arrays
//! and `infos["_key"]` masks in one call, whatever the number of rows or keys. In numpy the
//! same work took two dozen calls of a few microseconds each per batch.

mod filling;

use crate::recycle::{Recycler, Slot};
use crate::views;
use filling::{merged, Filling, Fillings};
use numpy::{PyReadwriteArray1, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use shmenv_engine::{Batch, DType};
use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};

/// Where the parts of the area are, in bytes, and its table sizes (`shmenv.infos._Area`).
#[derive(FromPyObject, Clone, Copy, Debug)]
#[pyo3(from_item_all)]
pub(crate) struct AreaLayout {
    /// Env cells (workers x stride): as many flag bytes, at offset 0.
    cells: usize,
    /// The pickled-slot bytes (one per cell).
    pickled: usize,
    /// The key count of each worker's table (one byte per worker).
    counts: usize,
    /// The key tables: `slots` entries of `entry` bytes per worker.
    entries: usize,
    /// The first slot's columns; slot `s` is `slot_bytes` further per slot.
    columns: usize,
    slot_bytes: usize,
    /// Bytes between a slot's presence bytes of step infos and those of reset infos.
    presence: usize,
    /// Keys a worker can name.
    slots: usize,
    /// Bytes of a table entry, and of the key name that starts it (then the dtype string).
    entry: usize,
    name: usize,
}

impl AreaLayout {
    /// The presence byte of `slot`, kind (0 step, 1 reset), cell `pos`.
    fn present(&self, slot: usize, kind: usize, pos: usize) -> usize {
        self.columns + slot * self.slot_bytes + 16 * self.cells + kind * self.presence + pos
    }

    /// The 8-byte value cell of `slot`, `kind`, cell `pos`.
    fn cell(&self, slot: usize, kind: usize, pos: usize) -> usize {
        self.columns + slot * self.slot_bytes + kind * 8 * self.cells + 8 * pos
    }

    /// Table entry `slot` of worker `w`.
    fn entry_at(&self, w: usize, slot: usize) -> Range<usize> {
        let at = self.entries + (w * self.slots + slot) * self.entry;
        at..at + self.entry
    }

    /// The bytes the layout spans for `workers` workers (`None`: past `usize`). Every offset
    /// the reader computes is below it.
    fn end(&self, workers: usize) -> Option<usize> {
        let product = |a: usize, b: usize, c: usize| a.checked_mul(b)?.checked_mul(c);
        let parts = [
            self.cells,
            self.pickled.checked_add(self.cells)?,
            self.counts.checked_add(workers)?,
            self.entries.checked_add(product(workers, self.slots, self.entry)?)?,
            self.columns.checked_add(product(self.slots, self.slot_bytes, 1)?)?,
            // The last slot's reset presence bytes end it: `present(slots - 1, 1, cells)`.
            product(self.slots.saturating_sub(1), self.slot_bytes, 1)?
                .checked_add(self.columns)?
                .checked_add(product(16, self.cells, 1)?)?
                .checked_add(self.presence)?
                .checked_add(self.cells)?,
        ];
        parts.into_iter().max()
    }
}

/// One row of the batch just returned: its env's area cell, and what the row is.
#[derive(Clone, Copy, Debug)]
struct Row {
    pos: usize,
    /// Its observation comes from a reset (elapsed step 0).
    reset: bool,
    /// Its episode ended at this step.
    done: bool,
}

/// An output column: a `(key, dtype)` pair some worker named.
struct ColumnType {
    key: usize,
    dtype: DType,
}

/// A key of the output, and its mask's name (`"_" + key`).
struct Key {
    name: Py<PyString>,
    mask: Py<PyString>,
}

/// The workers' key tables as last read.
#[derive(Default)]
struct Tables {
    /// Each worker's key count when read (empty: read them again).
    counts: Vec<u8>,
    keys: Vec<Key>,
    columns: Vec<ColumnType>,
    /// Per worker, the output column of each of its slots.
    slot_columns: Vec<Vec<usize>>,
}

/// The trainer's reader of one pool's info area.
pub(crate) struct InfoReader {
    area: SharedBytes,
    layout: AreaLayout,
    /// Env cells per worker.
    stride: usize,
    /// The area cell of each env.
    positions: Vec<usize>,
    same_step: bool,
    tables: Tables,
    rows: Vec<Row>,
    /// The info arrays handed out, refilled once the caller lets go of them.
    recycler: Recycler,
    /// The last batch's step (or reset) infos and final infos, one per output column:
    /// kept to be filled again without allocating, as are `values` and `mask`, a key's
    /// bytes on their way into its arrays.
    fillings: Fillings,
    values: Vec<u8>,
    mask: Vec<u8>,
}

impl InfoReader {
    /// A reader of the area `bytes` laid out as `layout`, for envs in `shards` (one env
    /// range per worker); `same_step`: the pool's auto-reset mode is SameStep.
    pub(crate) fn new(
        bytes: PyReadwriteArray1<'_, u8>,
        layout: AreaLayout,
        shards: &[Range<usize>],
        same_step: bool,
    ) -> PyResult<InfoReader> {
        let stride = shards.iter().map(|r| r.len()).max().unwrap_or(0).max(1);
        let needed = layout.end(shards.len()).unwrap_or(usize::MAX);
        if layout.cells != shards.len() * stride || layout.name > layout.entry || bytes.len() < needed {
            return Err(PyValueError::new_err(format!(
                "the info area ({} bytes, {} cells) does not fit {} workers of {stride} envs: it needs {needed} \
                 bytes and workers x stride cells",
                bytes.len(),
                layout.cells,
                shards.len()
            )));
        }
        let positions =
            shards.iter().enumerate().flat_map(|(w, r)| (0..r.len()).map(move |e| w * stride + e));
        Ok(InfoReader {
            area: SharedBytes::new(bytes)?,
            layout,
            stride,
            positions: positions.collect(),
            same_step,
            tables: Tables::default(),
            rows: Vec::new(),
            recycler: Recycler::default(),
            fillings: Fillings::default(),
            values: Vec::new(),
            mask: Vec::new(),
        })
    }

    /// Notes the rows of the batch a call returns; [`take`](Self::take) reads theirs.
    pub(crate) fn note_batch(&mut self, batch: &Batch<'_>) {
        let (terminated, truncated) = (batch.terminated(), batch.truncated());
        self.rows.clear();
        for (row, (&env, &elapsed)) in batch.env_ids().iter().zip(batch.elapsed_steps()).enumerate() {
            // The engine checked the env ids, and every env is in a worker's shard (the pool
            // refuses to attach an area to a pool with a trainer shard): each has a cell.
            let pos = self.positions[env as usize];
            let done = terminated.get(row) || truncated.get(row);
            self.rows.push(Row { pos, reset: elapsed == 0, done });
        }
    }

    /// A worker was restarted: its replacement names its keys anew.
    pub(crate) fn forget_tables(&mut self) {
        self.tables.counts.clear();
    }

    /// Reads and clears the infos the envs of the last noted batch left in the area, and
    /// adds them to `into` as Gymnasium's vector envs give them: `into[key]` values and
    /// `into["_key"]` masks (keys `into` has already win), and under SameStep auto-reset
    /// the step infos of the rows that ended in `into["final_info"]`.
    ///
    /// Returns `None` when that is all; but when some rows' envs kept other values
    /// (pickled), their column infos are not added: returns them (`{key: values, "_key":
    /// mask, "final_info": ...}`) with those rows, for the caller to fetch the rest over
    /// the call channel and add both.
    pub(crate) fn take<'py>(
        &mut self,
        into: &Bound<'py, PyDict>,
    ) -> PyResult<Option<(Bound<'py, PyDict>, Vec<i64>)>> {
        let py = into.py();
        if !self.rows.iter().any(|r| self.area.byte(r.pos) != 0) {
            return Ok(None);
        }
        self.read_tables(py)?;
        let pickled = self.read_rows();
        // Lent out of `self` while `put` fills arrays from them, then kept for the next batch.
        let fillings = std::mem::take(&mut self.fillings);
        let taken = self.put_all(into, &fillings, pickled);
        self.fillings = fillings;
        taken
    }

    /// `take`'s output from the batch's `fillings` (see there).
    fn put_all<'py>(
        &mut self,
        into: &Bound<'py, PyDict>,
        fillings: &Fillings,
        pickled: Vec<i64>,
    ) -> PyResult<Option<(Bound<'py, PyDict>, Vec<i64>)>> {
        let py = into.py();
        let finals = self.same_step && fillings.finals.iter().any(|c| c.first.is_some());
        if pickled.is_empty() {
            self.put(into, &fillings.infos, Put::Keep)?;
            if finals {
                let out = match into.get_item("final_info")? {
                    Some(old) => old.cast_into::<PyDict>()?.copy()?,
                    None => PyDict::new(py),
                };
                self.put(&out, &fillings.finals, Put::Finals)?;
                into.set_item("final_info", out)?;
            }
            return Ok(None);
        }
        let out = PyDict::new(py);
        self.put(&out, &fillings.infos, Put::Replace)?;
        if finals {
            let final_info = PyDict::new(py);
            self.put(&final_info, &fillings.finals, Put::Finals)?;
            out.set_item("final_info", final_info)?;
        }
        Ok(Some((out, pickled)))
    }

    /// Reads, and clears, the flagged rows' cells into `self.fillings`: each output
    /// column's step or reset infos, under SameStep auto-reset each column's final (step)
    /// infos of the rows that ended. Returns the rows whose env kept values outside the
    /// columns.
    fn read_rows(&mut self) -> Vec<i64> {
        let (layout, size, columns) = (self.layout, self.rows.len(), self.tables.columns.len());
        let Fillings { infos, finals } = &mut self.fillings;
        Filling::reset_all(infos, columns, size);
        Filling::reset_all(finals, if self.same_step { columns } else { 0 }, size);
        let mut finals = self.same_step.then_some(finals);
        let mut pickled = Vec::new();
        for (row, r) in self.rows.iter().enumerate() {
            if self.area.take_byte(r.pos) == 0 {
                continue;
            }
            if self.area.take_byte(layout.pickled + r.pos) != 0 {
                pickled.push(row as i64);
            }
            let kind = usize::from(r.reset || (self.same_step && r.done));
            let slots = self.tables.slot_columns.get(r.pos / self.stride).map_or(&[][..], Vec::as_slice);
            for (slot, &column) in slots.iter().enumerate() {
                let present = [0, 1].map(|k| self.area.take_byte(layout.present(slot, k, r.pos)) != 0);
                if present[kind] {
                    infos[column].set(row, self.area.cell(layout.cell(slot, kind, r.pos)));
                }
                if let Some(finals) = finals.as_mut().filter(|_| r.done && present[0]) {
                    finals[column].set(row, self.area.cell(layout.cell(slot, 0, r.pos)));
                }
            }
        }
        pickled
    }

    /// Reads the workers' key tables again when one of them named a key since: each
    /// `(key, dtype)` any worker named is an output column, and each worker's slots map to
    /// theirs.
    fn read_tables(&mut self, py: Python<'_>) -> PyResult<()> {
        let workers = self.layout.cells / self.stride;
        let count = |w: usize| self.area.byte(self.layout.counts + w);
        if self.tables.counts.len() == workers && (0..workers).all(|w| self.tables.counts[w] == count(w)) {
            return Ok(());
        }
        let counts: Vec<u8> = (0..workers).map(count).collect();
        let mut tables = Tables::default();
        let mut pairs: Vec<(String, DType)> = Vec::new();
        for (w, &count) in counts.iter().enumerate() {
            let mut slots = Vec::new();
            for slot in 0..usize::from(count).min(self.layout.slots) {
                let pair = self.entry(w, slot)?;
                let column = pairs.iter().position(|p| *p == pair).unwrap_or_else(|| {
                    pairs.push(pair);
                    pairs.len() - 1
                });
                slots.push(column);
            }
            tables.slot_columns.push(slots);
        }
        for (name, dtype) in pairs {
            let key =
                tables.keys.iter().position(|k| k.name.bind(py) == name.as_str()).unwrap_or_else(|| {
                    let mask = PyString::new(py, &format!("_{name}")).unbind();
                    tables.keys.push(Key { name: PyString::new(py, &name).unbind(), mask });
                    tables.keys.len() - 1
                });
            tables.columns.push(ColumnType { key, dtype });
        }
        tables.counts = counts;
        self.tables = tables;
        Ok(())
    }

    /// Worker `w`'s key `slot`: its name and dtype (numpy's `dtype.str` of a number).
    fn entry(&self, w: usize, slot: usize) -> PyResult<(String, DType)> {
        let raw = self.area.bytes(self.layout.entry_at(w, slot));
        let (name, dtype) = raw.split_at(self.layout.name);
        let text = |b: &[u8]| String::from_utf8(b.iter().copied().take_while(|&c| c != 0).collect()).ok();
        let (name, dtype_str) = (text(name), text(dtype));
        match (name, dtype_str.as_deref().and_then(column_dtype)) {
            (Some(name), Some(dtype)) => Ok((name, dtype)),
            _ => Err(PyValueError::new_err(format!(
                "worker {w}'s info key {slot} is not a UTF-8 name and a native number dtype of up to 8 bytes \
                 (dtype {dtype_str:?}): the worker wrote its info table wrongly; restart the pool"
            ))),
        }
    }

    /// Sets `out[key]` (values) and `out["_key"]` (mask) for the keys some row has in
    /// `fillings` (one per output column), but not where `out` has the key already and
    /// `how` is [`Put::Keep`]. A key that came in several dtypes takes that of the column
    /// holding its lowest row, as `SyncVectorEnv` types a key by the first env that returns
    /// it. The arrays are the recycler's: refilled ones the caller let go of, or new.
    fn put(&mut self, out: &Bound<'_, PyDict>, fillings: &[Filling], how: Put) -> PyResult<()> {
        let py = out.py();
        let keep = how == Put::Keep;
        for (k, key) in self.tables.keys.iter().enumerate() {
            let columns = || {
                fillings
                    .iter()
                    .zip(&self.tables.columns)
                    .filter(move |(f, c)| c.key == k && f.first.is_some())
                    .map(|(f, c)| (f, c.dtype))
            };
            let Some((first, dtype)) = columns().min_by_key(|(f, _)| f.first) else {
                continue;
            };
            let (values, mask) = (&mut self.values, &mut self.mask);
            if columns().nth(1).is_none() {
                first.values_into(dtype, values);
                mask.clone_from(&first.mask);
            } else {
                merged(&columns().collect::<Vec<_>>(), dtype, values, mask);
            }
            let (name, mask_name, size) = (key.name.bind(py), key.mask.bind(py), [mask.len()]);
            // Each key's arrays have slots of their own: values, then mask, of the step
            // infos and of the final ones.
            let slot = |part: usize| Slot::Info(4 * k + 2 * usize::from(how == Put::Finals) + part);
            if !(keep && out.contains(name)?) {
                let array = self.recycler.owned(py, slot(0), values, views::descr(py, dtype), &size)?;
                out.set_item(name, array)?;
            }
            if !(keep && out.contains(mask_name)?) {
                let array = self.recycler.owned(py, slot(1), mask, numpy::dtype::<bool>(py), &size)?;
                out.set_item(mask_name, array)?;
            }
        }
        Ok(())
    }
}

/// How [`InfoReader::put`] adds a batch's infos to a dict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Put {
    /// Step infos, into a dict whose keys win (the batch's infos).
    Keep,
    /// Step infos, into a dict of their own.
    Replace,
    /// Final infos (SameStep auto-reset), into a dict of their own.
    Finals,
}

/// The dtype of an info column named by numpy's `dtype.str` (`"<i8"`, `"|b1"`): a number
/// of this machine's byte order, of up to 8 bytes.
fn column_dtype(s: &str) -> Option<DType> {
    let native = if cfg!(target_endian = "little") { '<' } else { '>' };
    let mut chars = s.chars();
    let order = chars.next()?;
    let kind = chars.next()?;
    let size: usize = chars.as_str().parse().ok()?;
    if order != native && order != '|' && order != '=' {
        return None;
    }
    DType::ALL.into_iter().find(|d| d.size() == size && dtype_kind(*d) == kind)
}

/// numpy's kind character of `dtype`.
fn dtype_kind(dtype: DType) -> char {
    match dtype {
        DType::Bool => 'b',
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => 'i',
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => 'u',
        DType::F16 | DType::F32 | DType::F64 => 'f',
    }
}

/// The area: a numpy byte array over the trainer's mapping of it, kept alive (and with it
/// the mapping: the array holds a buffer export of the `mmap`, which cannot close or resize
/// while one is held) for as long as the reader lives. Read and cleared byte by byte at
/// offsets checked against its length; no Rust reference into it is ever formed, since
/// the workers write it too.
struct SharedBytes {
    base: *mut u8,
    len: usize,
    _array: Py<PyAny>,
}

// SAFETY: `base` points into memory the owned array keeps mapped; the pool that owns the
// reader is used under the GIL by one thread at a time (`PyPool::exclusive`).
unsafe impl Send for SharedBytes {}
// SAFETY: as above; `&SharedBytes` only reads bytes through raw pointers.
unsafe impl Sync for SharedBytes {}

impl SharedBytes {
    fn new(mut array: PyReadwriteArray1<'_, u8>) -> PyResult<SharedBytes> {
        if !array.is_c_contiguous() {
            return Err(PyValueError::new_err("the info area must be one contiguous byte array"));
        }
        let (base, len) = (array.as_array_mut().as_mut_ptr(), array.len());
        Ok(SharedBytes { base, len, _array: array.as_any().clone().unbind() })
    }

    /// A pointer to `bytes` bytes at `offset`.
    ///
    /// # Panics
    /// Past the area: the offsets come from a layout checked against its length.
    fn at(&self, offset: usize, bytes: usize) -> *mut u8 {
        assert!(
            offset.checked_add(bytes).is_some_and(|end| end <= self.len),
            "info area offset {offset} out of bounds"
        );
        // SAFETY: in bounds of the contiguous array (asserted above), which `_array` keeps
        // alive and mapped.
        unsafe { self.base.add(offset) }
    }

    /// Byte `offset`, which a worker may be writing now (a flag of a row still in flight,
    /// a key count), read atomically. Workers (Python) write with plain stores, entry first
    /// and count after: on x86, whose stores are seen in order, a count read here comes
    /// after its entry; elsewhere an entry read too early is refused, not trusted.
    fn byte(&self, offset: usize) -> u8 {
        let p = self.at(offset, 1);
        // SAFETY: `at` checked the bounds; a byte is always aligned, and the mapping stays
        // valid while `self` lives. Workers write these bytes with plain stores from
        // another process; an atomic load of a byte sees either value, never a torn one.
        unsafe { AtomicU8::from_ptr(p).load(Ordering::Acquire) }
    }

    /// Byte `offset` of a row the trainer received, left 0.
    fn take_byte(&mut self, offset: usize) -> u8 {
        let p = self.at(offset, 1);
        // SAFETY: `at` checked the bounds; a byte needs no alignment. The trainer reads and
        // clears only the bytes of rows it received, whose envs have no action in flight:
        // no worker writes them now (the area's protocol, `shmenv.infos`).
        unsafe {
            let value = p.read();
            if value != 0 {
                p.write(0);
            }
            value
        }
    }

    /// The 8-byte cell at `offset`, of a row the trainer received (no worker writes it now).
    fn cell(&self, offset: usize) -> [u8; 8] {
        // SAFETY: as in `take_byte`; read as bytes (no alignment needed).
        unsafe { self.at(offset, 8).cast::<[u8; 8]>().read_unaligned() }
    }

    /// A copy of the bytes in `range` (a key table entry), each read as in `byte`.
    fn bytes(&self, range: Range<usize>) -> Vec<u8> {
        range.map(|offset| self.byte(offset)).collect()
    }
}
