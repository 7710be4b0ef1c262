//! The trainer's read of the info area of hosted Python envs (`shmenv.infos`, which lays
//! the area out and says who writes which byte when): a batch's flagged rows and their
//! column values, as finished `infos[key]` arrays and masks, in one call. In numpy the same
//! work took two dozen calls of a few microseconds each per batch, whatever its size.

use crate::views;
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyReadonlyArray1, PyReadwriteArray1, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Where the parts of the area are, in bytes (`shmenv.infos._Area`): the flag bytes of its
/// `n` env cells (workers x stride) at 0, the pickled-slot bytes, the first slot's columns,
/// the bytes of a slot, and the presence bytes of one kind (`n` rounded up to 8).
#[derive(FromPyObject, Clone, Copy)]
struct AreaLayout(usize, usize, usize, usize, usize);

/// One info column of a batch: its values (zero where absent) and its mask.
type Column<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>);

/// What [`InfoReader::take`] returns: the batch rows whose env kept values outside the
/// columns (pickled: the caller fetches them over the call channel), each output column's
/// infos (`None` where no row has one), and under same-step autoreset the step infos of
/// the rows that ended (their `final_info`).
type Taken<'py> = (Vec<i64>, Vec<Option<Column<'py>>>, Option<Vec<Option<Column<'py>>>>);

/// The trainer's reader of one pool's info area.
#[pyclass(frozen)]
pub struct InfoReader {
    layout: AreaLayout,
    /// The area position of each env.
    positions: Vec<usize>,
    /// Env cells per worker.
    stride: usize,
}

#[pymethods]
impl InfoReader {
    /// A reader of an area with `layout` (see [`AreaLayout`]) where env `e` is at
    /// `positions[e]`, `stride` cells per worker.
    #[new]
    fn new(layout: AreaLayout, positions: Vec<usize>, stride: usize) -> PyResult<InfoReader> {
        if stride == 0 || positions.iter().any(|&p| p >= layout.0) {
            return Err(PyValueError::new_err(format!(
                "env positions must be below the area's {} cells, with a stride above 0",
                layout.0
            )));
        }
        Ok(InfoReader { layout, positions, stride })
    }

    /// Reads, and clears, the infos the envs of a batch noted (`None` when none of its rows
    /// is flagged): slot `s` of worker `w` fills output column `columns[w][s]`, of dtype
    /// `dtypes[column]` (at most 8 bytes).
    #[allow(clippy::too_many_arguments)]
    fn take<'py>(
        &self,
        py: Python<'py>,
        area: PyReadwriteArray1<'py, u8>,
        env_ids: PyReadonlyArray1<'py, i32>,
        elapsed: PyReadonlyArray1<'py, i32>,
        terminated: PyReadonlyArray1<'py, bool>,
        truncated: PyReadonlyArray1<'py, bool>,
        same_step: bool,
        columns: Vec<Vec<usize>>,
        dtypes: Vec<Bound<'py, PyArrayDescr>>,
    ) -> PyResult<Option<Taken<'py>>> {
        let AreaLayout(_, pickled_at, first_slot, slot_bytes, _) = self.layout;
        let slots = columns.iter().map(Vec::len).max().unwrap_or(0);
        let mut area = Area::of(area, first_slot + slots * slot_bytes)?;
        let (env_ids, elapsed) = (env_ids.as_slice()?, elapsed.as_slice()?);
        let (terminated, truncated) = (terminated.as_slice()?, truncated.as_slice()?);
        let size = env_ids.len();
        if elapsed.len() != size || terminated.len() != size || truncated.len() != size {
            return Err(PyValueError::new_err("the batch's columns differ in length"));
        }
        let itemsizes: Vec<usize> = dtypes.iter().map(|d| d.itemsize()).collect();
        if itemsizes.iter().any(|&k| k == 0 || k > 8) || columns.iter().flatten().any(|&c| c >= dtypes.len())
        {
            return Err(PyValueError::new_err("info columns hold numbers of 1 to 8 bytes, one dtype each"));
        }
        let fresh = || itemsizes.iter().map(|&k| Filling::new(k, size)).collect::<Vec<_>>();
        let (mut infos, mut finals) = (fresh(), same_step.then(fresh));
        let mut pickled = Vec::new();
        let mut any = false;
        for (row, &e) in env_ids.iter().enumerate() {
            let pos = *usize::try_from(e)
                .ok()
                .and_then(|e| self.positions.get(e))
                .ok_or_else(|| PyValueError::new_err(format!("env id {e} is not an env of this pool")))?;
            if area.take_byte(pos) == 0 {
                continue;
            }
            any = true;
            if area.take_byte(pickled_at + pos) != 0 {
                pickled.push(row as i64);
            }
            let slots = columns.get(pos / self.stride).map_or(&[][..], Vec::as_slice);
            let done = terminated[row] || truncated[row];
            let kind = usize::from(elapsed[row] == 0 || (same_step && done));
            for (slot, &column) in slots.iter().enumerate() {
                let present = [0, 1].map(|k| area.take_byte(self.present(slot, k) + pos) != 0);
                if present[kind] {
                    infos[column].set(row, area.cell(self.cell(slot, kind, pos)));
                }
                if let Some(finals) = finals.as_mut().filter(|_| done && present[0]) {
                    finals[column].set(row, area.cell(self.cell(slot, 0, pos)));
                }
            }
        }
        if !any {
            return Ok(None);
        }
        let finish = |fillings: Vec<Filling>| -> PyResult<Vec<Option<Column<'py>>>> {
            fillings.into_iter().zip(&dtypes).map(|(f, d)| f.into_column(py, d)).collect()
        };
        Ok(Some((pickled, finish(infos)?, finals.map(finish).transpose()?)))
    }
}

impl InfoReader {
    /// The offset of the presence bytes of `slot` for step (0) or reset (1) infos.
    fn present(&self, slot: usize, kind: usize) -> usize {
        let AreaLayout(n, _, columns, slot_bytes, n8) = self.layout;
        columns + slot * slot_bytes + 16 * n + kind * n8
    }

    /// The offset of the value cell of `slot`, `kind`, at area position `pos`.
    fn cell(&self, slot: usize, kind: usize, pos: usize) -> usize {
        let AreaLayout(n, _, columns, slot_bytes, _) = self.layout;
        columns + slot * slot_bytes + kind * 8 * n + 8 * pos
    }
}

/// One output column being filled: its values' bytes and its mask.
struct Filling {
    itemsize: usize,
    values: Vec<u8>,
    mask: Vec<u8>,
    any: bool,
}

impl Filling {
    fn new(itemsize: usize, size: usize) -> Filling {
        Filling { itemsize, values: vec![0; itemsize * size], mask: vec![0; size], any: false }
    }

    /// Row `row` takes the value in the first `itemsize` bytes of `cell` (where the worker
    /// wrote it, in this machine's byte order).
    fn set(&mut self, row: usize, cell: [u8; 8]) {
        let k = self.itemsize;
        self.values[row * k..(row + 1) * k].copy_from_slice(&cell[..k]);
        self.mask[row] = 1;
        self.any = true;
    }

    fn into_column<'py>(
        self,
        py: Python<'py>,
        descr: &Bound<'py, PyArrayDescr>,
    ) -> PyResult<Option<Column<'py>>> {
        if !self.any {
            return Ok(None);
        }
        let size = self.mask.len();
        Ok(Some((
            views::owned(py, &self.values, descr.clone(), &[size])?,
            views::owned(py, &self.mask, numpy::dtype::<bool>(py), &[size])?,
        )))
    }
}

/// The area (a numpy byte array over its mapping, borrowed writable for one call), read
/// and cleared byte by byte at offsets below the length checked when it is borrowed.
struct Area<'py> {
    base: *mut u8,
    len: usize,
    /// Holds the array (alive, mapped, borrowed by this call alone) while `base` is used.
    _array: PyReadwriteArray1<'py, u8>,
}

impl<'py> Area<'py> {
    /// The area, which must span at least `needed` bytes (its layout's parts in use).
    fn of(mut array: PyReadwriteArray1<'py, u8>, needed: usize) -> PyResult<Area<'py>> {
        let len = array.len();
        if !array.is_c_contiguous() || len < needed {
            return Err(PyValueError::new_err(format!(
                "the info area is {len} bytes (contiguous: {}), its layout needs {needed}",
                array.is_c_contiguous()
            )));
        }
        Ok(Area { base: array.as_array_mut().as_mut_ptr(), len, _array: array })
    }

    /// A pointer to `bytes` bytes at `offset`.
    ///
    /// # Panics
    /// Past the area: the caller's offsets come from a layout checked against its length.
    fn at(&mut self, offset: usize, bytes: usize) -> *mut u8 {
        assert!(
            offset.checked_add(bytes).is_some_and(|end| end <= self.len),
            "info area offset {offset} out of bounds"
        );
        // SAFETY: in bounds of the contiguous array (asserted above), which `_array` keeps
        // alive and mapped.
        unsafe { self.base.add(offset) }
    }

    /// Byte `offset`, left 0.
    fn take_byte(&mut self, offset: usize) -> u8 {
        let p = self.at(offset, 1);
        // SAFETY: `p` is in bounds (`at`). The trainer reads and clears only the bytes of
        // rows it received, whose envs have no action in flight: no worker writes them now
        // (the area's protocol, `shmenv.infos`). No reference to shared memory is formed.
        unsafe {
            let value = p.read();
            if value != 0 {
                p.write(0);
            }
            value
        }
    }

    /// The 8-byte cell at `offset`.
    fn cell(&mut self, offset: usize) -> [u8; 8] {
        let p = self.at(offset, 8);
        // SAFETY: as in `take_byte`; read as bytes (no alignment needed).
        unsafe { p.cast::<[u8; 8]>().read_unaligned() }
    }
}
