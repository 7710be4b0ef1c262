//! numpy arrays over the region: the only place the extension hands shared memory to
//! Python. Each array is read-only, C-contiguous, and holds a [`Lease`] as its numpy
//! `base`, so the mapping outlives every array, even after the pool is closed.

use numpy::npyffi::{self, npy_intp, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shmenv_engine::{DType, MappingLease};

/// Keeps a pool's region mapped; the `base` of every array this module makes.
#[pyclass(module = "shmenv._shmenv", frozen)]
pub(crate) struct Lease {
    lease: MappingLease,
}

impl Lease {
    pub(crate) fn new(lease: MappingLease) -> Self {
        Lease { lease }
    }
}

#[pymethods]
impl Lease {
    /// The mapped addresses `(start, end)`, for tests that check arrays point into them.
    fn address_range(&self) -> (usize, usize) {
        let r = self.lease.address_range();
        (r.start, r.end)
    }
}

/// The numpy dtype of a shmenv dtype.
pub(crate) fn descr(py: Python<'_>, dtype: DType) -> Bound<'_, PyArrayDescr> {
    match dtype {
        DType::F32 => numpy::dtype::<f32>(py),
        DType::F64 => numpy::dtype::<f64>(py),
        DType::U8 => numpy::dtype::<u8>(py),
        DType::I8 => numpy::dtype::<i8>(py),
        DType::I16 => numpy::dtype::<i16>(py),
        DType::I32 => numpy::dtype::<i32>(py),
        DType::I64 => numpy::dtype::<i64>(py),
        DType::Bool => numpy::dtype::<bool>(py),
        DType::F16 => numpy::dtype::<half::f16>(py),
        DType::U16 => numpy::dtype::<u16>(py),
        DType::U32 => numpy::dtype::<u32>(py),
        DType::U64 => numpy::dtype::<u64>(py),
    }
}

/// A read-only array of `descr` elements shaped `shape` over `bytes`, which must lie in
/// the mapping `lease` keeps alive.
pub(crate) fn array<'py>(
    lease: &Bound<'py, Lease>,
    bytes: &[u8],
    descr: Bound<'py, PyArrayDescr>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let py = lease.py();
    let item = descr.itemsize();
    let count: usize = shape.iter().product();
    let range = lease.get().lease.address_range();
    let start = bytes.as_ptr() as usize;
    if count * item != bytes.len()
        || !(range.start <= start && start + bytes.len() <= range.end)
        || start % descr.alignment().max(1) != 0
    {
        return Err(PyValueError::new_err(format!(
            "internal error: {} bytes at {start:#x} cannot be a {shape:?} array of {item}-byte elements \
             inside the mapping {:#x}..{:#x}",
            bytes.len(),
            range.start,
            range.end
        )));
    }
    let flags = npyffi::NPY_ARRAY_C_CONTIGUOUS | npyffi::NPY_ARRAY_ALIGNED; // no WRITEABLE
                                                                            // SAFETY: `bytes` is `count * item` bytes, aligned for the dtype and inside the mapping
                                                                            // (checked above); the mapping lives until the array's base, a `Lease`, is dropped,
                                                                            // which numpy does only after the array (and every view of it) is gone. The array is
                                                                            // read-only, so Python never writes the region.
    let array = unsafe { new_array(py, descr, shape, bytes.as_ptr() as *mut std::ffi::c_void, flags)? };
    let ptr = array.as_ptr();
    let base = lease.clone().into_any().into_ptr();
    // SAFETY: `array` is a fresh ndarray without a base; SetBaseObject steals the `base`
    // reference (even on failure) and makes numpy keep the lease alive with the array.
    if unsafe { PY_ARRAY_API.PyArray_SetBaseObject(py, ptr as *mut npyffi::PyArrayObject, base) } != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(array)
}

/// A new, writable, C-contiguous array of `descr` elements shaped `shape`, holding a copy
/// of `bytes` (which must be exactly that many elements).
pub(crate) fn owned<'py>(
    py: Python<'py>,
    bytes: &[u8],
    descr: Bound<'py, PyArrayDescr>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let count: usize = shape.iter().product();
    if count * descr.itemsize() != bytes.len() {
        return Err(PyValueError::new_err(format!(
            "internal error: {} bytes cannot be a {shape:?} array of {}-byte elements",
            bytes.len(),
            descr.itemsize()
        )));
    }
    // SAFETY: with a null `data` pointer numpy allocates the array's memory itself.
    let array = unsafe { new_array(py, descr, shape, std::ptr::null_mut(), 0)? };
    let ptr = array.as_ptr();
    // SAFETY: the array was just allocated by numpy with `bytes.len()` bytes of C-contiguous
    // data (its element count times the item size, checked above); nothing else refers to
    // it yet, and `bytes` (the region) cannot overlap numpy's fresh allocation.
    unsafe {
        let data = (*(ptr as *mut npyffi::PyArrayObject)).fields.data as *mut u8;
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len());
    }
    Ok(array)
}

/// What [`refill`] did with an array the recycler kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refill {
    /// Refilled: hand it out again.
    Refilled,
    /// Someone else holds a reference to it: leave it alone.
    InUse,
    /// Only the recycler holds it, but it cannot be handed out again (the caller changed
    /// its flags, shape or dtype, or holds a weak reference to it): let it go, as it would
    /// have gone without the recycler.
    Unfit,
}

/// Refills `array`, which only the recycler should hold, with `bytes` when it may be
/// handed out again as a new owned array: the recycler's is its only reference (a view,
/// a buffer export, a tensor sharing its memory, a container would each hold one), no weak
/// reference can reach it, and it still is what [`owned`] made, a writable, aligned,
/// C-contiguous array owning its data, of `descr` elements shaped `shape`.
pub(crate) fn refill(
    array: &Bound<'_, PyAny>,
    bytes: &[u8],
    descr: &Bound<'_, PyArrayDescr>,
    shape: &[usize],
) -> Refill {
    // SAFETY: `array` is a live object (a bound reference) and the GIL is held.
    if unsafe { pyo3::ffi::Py_REFCNT(array.as_ptr()) } != 1 {
        return Refill::InUse;
    }
    let Ok(a) = array.cast::<PyUntypedArray>() else { return Refill::Unfit };
    let need = npyffi::NPY_ARRAY_C_CONTIGUOUS
        | npyffi::NPY_ARRAY_ALIGNED
        | npyffi::NPY_ARRAY_WRITEABLE
        | npyffi::NPY_ARRAY_OWNDATA;
    // SAFETY: `a` is a live ndarray (the cast checked its type) and the GIL is held, so its
    // object struct may be read.
    let (flags, data, weakly_referred, same_descr) = unsafe {
        let object = &*a.as_array_ptr();
        let same_descr = std::ptr::eq(object.fields.descr.cast(), descr.as_ptr());
        (object.fields.flags, object.fields.data, !object.fields.weakreflist.is_null(), same_descr)
    };
    // numpy's built-in dtypes are single objects: the same one is the common case.
    let fits = a.shape() == shape
        && (same_descr || a.dtype().is_equiv_to(descr))
        && shape.iter().product::<usize>() * descr.itemsize() == bytes.len();
    // A weak reference is not counted, but through it the caller could still see the array.
    if flags & need != need || !fits || weakly_referred {
        return Refill::Unfit;
    }
    // SAFETY: the array owns `bytes.len()` bytes of writable, aligned, C-contiguous data at
    // `data` (its flags, shape and dtype, checked above). No strong or weak reference but
    // the recycler's reaches it (checked above; an address the caller kept as a plain
    // integer is no claim on the memory, which without the recycler would be freed), and
    // the GIL is held. `bytes` (the region, or the extension's own memory) cannot overlap
    // numpy's allocation.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data as *mut u8, bytes.len()) };
    Refill::Refilled
}

/// A new C-contiguous ndarray of `descr` elements shaped `shape`: over `data` with `flags`,
/// or, when `data` is null, over memory numpy allocates (writable).
///
/// # Safety
/// A non-null `data` must point to `shape`'s element count of `descr` elements, aligned for
/// the dtype, valid for as long as the array (and its views) live, and writable if
/// `flags` says so.
unsafe fn new_array<'py>(
    py: Python<'py>,
    descr: Bound<'py, PyArrayDescr>,
    shape: &[usize],
    data: *mut std::ffi::c_void,
    flags: std::os::raw::c_int,
) -> PyResult<Bound<'py, PyAny>> {
    let mut dims: Vec<npy_intp> = shape.iter().map(|&d| d as npy_intp).collect();
    // SAFETY: `data` is null or valid as the caller promises; `NewFromDescr` steals the
    // descr reference (`into_dtype_ptr` hands one over) and computes C-order strides from
    // `dims` when `strides` is null; `dims` outlives the call.
    let ptr = unsafe {
        PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
            descr.into_dtype_ptr(),
            dims.len() as std::os::raw::c_int,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            data,
            flags,
            std::ptr::null_mut(),
        )
    };
    if ptr.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `ptr` is a new, owned reference to an array (checked non-null).
    Ok(unsafe { Bound::from_owned_ptr(py, ptr) })
}
