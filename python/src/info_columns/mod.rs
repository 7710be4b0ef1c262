//! The trainer's read of the info area of hosted Python envs (`shmenv.infos` writes it in
//! the workers and says who writes which byte when; the engine's `protocol::infos` lays it
//! out, here and for Python through [`info_area_layout`], and reads its bytes, bounds-checked,
//! into values this module turns into Python objects). The pool keeps one [`InfoReader`]:
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
use shmenv_engine::protocol::infos::{InfoArea, InfoLayout, InfoRow, InfoTarget, KeyTables};
use shmenv_engine::{Batch, DType};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::AtomicU8;

/// The info area's layout for `workers` workers of `stride` env cells each, as a dict of
/// byte offsets and sizes (`shmenv_engine::protocol::infos::InfoLayout::fields`): the
/// layout's one definition, which `shmenv.infos` builds its numpy views from.
#[pyfunction]
pub(crate) fn info_area_layout(py: Python<'_>, workers: usize, stride: usize) -> PyResult<Bound<'_, PyDict>> {
    let layout = InfoLayout::new(workers, stride).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let dict = PyDict::new(py);
    for (name, value) in layout.fields() {
        dict.set_item(name, value)?;
    }
    Ok(dict)
}

/// The layout `shmenv.infos` says the area has (`info_area_layout`'s dict), checked
/// against the one the pool's shards give.
#[derive(FromPyObject, Clone, Debug)]
pub(crate) struct AreaLayout(BTreeMap<String, usize>);

impl AreaLayout {
    /// Whether it is `layout`, field by field.
    fn is(&self, layout: &InfoLayout) -> bool {
        let fields = layout.fields();
        self.0.len() == fields.len() && fields.iter().all(|(name, value)| self.0.get(*name) == Some(value))
    }
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

/// The workers' key tables as last read, and their Python side.
#[derive(Default)]
struct Tables {
    /// The tables (counts empty: read them again).
    read: KeyTables,
    keys: Vec<Key>,
    /// The key and dtype of each of `read`'s columns.
    columns: Vec<ColumnType>,
}

/// The trainer's reader of one pool's info area.
pub(crate) struct InfoReader {
    area: SharedBytes,
    /// The area cell of each env.
    positions: Vec<usize>,
    same_step: bool,
    tables: Tables,
    rows: Vec<InfoRow>,
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
        let workers = shards.len();
        let expected = InfoLayout::new(workers, stride).map_err(|e| PyValueError::new_err(e.to_string()))?;
        if !layout.is(&expected) || bytes.len() < expected.size() {
            return Err(PyValueError::new_err(format!(
                "the info area ({} bytes, laid out as {:?}) does not fit {workers} workers of {stride} envs: \
                 it needs {} bytes laid out as info_area_layout({workers}, {stride}) gives",
                bytes.len(),
                layout.0,
                expected.size()
            )));
        }
        let position = |w: usize, e: usize| expected.position(w, e).unwrap_or(usize::MAX);
        let positions =
            shards.iter().enumerate().flat_map(|(w, r)| (0..r.len()).map(move |e| position(w, e)));
        Ok(InfoReader {
            area: SharedBytes::new(bytes, expected)?,
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
            // The engine checked the env ids, and every env is in a part of the area (the
            // trainer's shard's or a worker's): each has a cell.
            let pos = self.positions.get(env as usize).copied().unwrap_or(usize::MAX);
            let done = terminated.get(row) || truncated.get(row);
            self.rows.push(InfoRow { pos, reset: elapsed == 0, done });
        }
    }

    /// A worker was restarted: its replacement names its keys anew.
    pub(crate) fn forget_tables(&mut self) {
        self.tables.read.counts.clear();
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
        let area = self.area.area;
        if !self.rows.iter().any(|r| area.flag(r.pos) != 0) {
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
        let (size, columns) = (self.rows.len(), self.tables.columns.len());
        let Fillings { infos, finals } = &mut self.fillings;
        Filling::reset_all(infos, columns, size);
        Filling::reset_all(finals, if self.same_step { columns } else { 0 }, size);
        let pickled =
            self.area.area.read_rows(&self.tables.read, &self.rows, self.same_step, |to, c, row, cell| {
                let filling = match to {
                    InfoTarget::Infos => infos.get_mut(c),
                    InfoTarget::Finals => finals.get_mut(c),
                };
                if let Some(filling) = filling {
                    filling.set(row, cell);
                }
            });
        pickled.into_iter().map(|row| row as i64).collect()
    }

    /// Reads the workers' key tables again when one of them named a key since: each
    /// `(key, dtype)` any worker named is an output column, and each worker's slots map to
    /// theirs.
    fn read_tables(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.area.area.tables_current(&self.tables.read) {
            return Ok(());
        }
        let read = self.area.area.read_tables().map_err(|e| PyValueError::new_err(e.to_string()))?;
        let mut tables = Tables::default();
        for (name, dtype) in &read.columns {
            let key =
                tables.keys.iter().position(|k| k.name.bind(py) == name.as_str()).unwrap_or_else(|| {
                    let mask = PyString::new(py, &format!("_{name}")).unbind();
                    tables.keys.push(Key { name: PyString::new(py, name).unbind(), mask });
                    tables.keys.len() - 1
                });
            tables.columns.push(ColumnType { key, dtype: *dtype });
        }
        tables.read = read;
        self.tables = tables;
        Ok(())
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

/// The area: its bytes, a numpy byte array over the trainer's mapping of it, kept alive
/// (and with it the mapping: the array holds a buffer export of the `mmap`, which cannot
/// close or resize while one is held) for as long as the reader lives. The engine's
/// [`InfoArea`] reads them, each byte atomically at an offset checked against their length:
/// no plain Rust reference into them is ever formed, since the workers write them too.
struct SharedBytes {
    area: InfoArea<'static>,
    _array: Py<PyAny>,
}

impl SharedBytes {
    /// The area over `array`, laid out as `layout` (whose size the caller checked).
    fn new(mut array: PyReadwriteArray1<'_, u8>, layout: InfoLayout) -> PyResult<SharedBytes> {
        if !array.is_c_contiguous() {
            return Err(PyValueError::new_err("the info area must be one contiguous byte array"));
        }
        let (base, len) = (array.as_array_mut().as_mut_ptr(), array.len());
        let bytes: &'static [AtomicU8] = if len == 0 {
            &[]
        } else {
            // SAFETY: `base..base + len` is the contiguous array's memory (checked above;
            // non-null, as the array has elements), which `_array` keeps alive and mapped
            // for as long as `self` lives; the slice never outlives `self` (it is `'static`
            // only to sit beside its owner, and `InfoArea` is not handed out). `AtomicU8`
            // has `u8`'s size and alignment, and this process reads and writes those bytes
            // through these atomics only; the workers write them with plain byte stores
            // from their processes, which an atomic byte load sees whole, never torn.
            unsafe { std::slice::from_raw_parts(base.cast::<AtomicU8>(), len) }
        };
        let area = InfoArea::new(bytes, layout).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(SharedBytes { area, _array: array.as_any().clone().unbind() })
    }
}
