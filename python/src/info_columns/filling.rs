//! A batch's info cells on their way from the area into arrays: each output column's
//! values and presence per row ([`Filling`]), kept by the reader from batch to batch, and
//! the merge of a key that came in several dtypes ([`merged`]).

use shmenv_engine::DType;

/// Each output column's cells of a batch, as read from the area.
#[derive(Default)]
pub(super) struct Fillings {
    pub(super) infos: Vec<Filling>,
    /// Under SameStep auto-reset, the step infos of the rows that ended.
    pub(super) finals: Vec<Filling>,
}

/// One output column being filled: each row's cell and whether it has one.
pub(super) struct Filling {
    cells: Vec<[u8; 8]>,
    /// 1 where the row has a value (numpy's bool bytes).
    pub(super) mask: Vec<u8>,
    /// Its lowest row with a value.
    pub(super) first: Option<usize>,
}

impl Filling {
    /// Makes `fillings` `count` empty fillings of `size` rows, reusing their memory.
    pub(super) fn reset_all(fillings: &mut Vec<Filling>, count: usize, size: usize) {
        fillings.resize_with(count, || Filling { cells: Vec::new(), mask: Vec::new(), first: None });
        for f in fillings {
            f.cells.clear();
            f.cells.resize(size, [0; 8]);
            f.mask.clear();
            f.mask.resize(size, 0);
            f.first = None;
        }
    }

    /// Row `row` takes `cell` (the worker wrote the value in its first bytes, in this
    /// machine's byte order).
    pub(super) fn set(&mut self, row: usize, cell: [u8; 8]) {
        self.cells[row] = cell;
        self.mask[row] = 1;
        self.first = Some(self.first.map_or(row, |f| f.min(row)));
    }

    /// The values' bytes as `dtype` elements (0 where absent), into `out`.
    pub(super) fn values_into(&self, dtype: DType, out: &mut Vec<u8>) {
        let k = dtype.size();
        out.clear();
        out.resize(k * self.cells.len(), 0);
        for ((out, cell), &has) in out.chunks_exact_mut(k).zip(&self.cells).zip(&self.mask) {
            if has != 0 {
                out.copy_from_slice(&cell[..k]);
            }
        }
    }
}

/// The values and mask of a key whose rows came in several columns, as `dtype`, into
/// `values` and `mask`: numbers of another type are converted as numpy's assignment does
/// for values in range (floats to integers truncate, integers wrap into narrower ones); a
/// float out of an integer type's range saturates and NaN becomes 0, where numpy's result
/// depends on the platform.
pub(super) fn merged(columns: &[(&Filling, DType)], dtype: DType, values: &mut Vec<u8>, mask: &mut Vec<u8>) {
    let size = columns[0].0.mask.len();
    values.clear();
    values.resize(dtype.size() * size, 0);
    mask.clear();
    mask.resize(size, 0);
    for (filling, from) in columns {
        for (row, cell) in filling.cells.iter().enumerate().filter(|(row, _)| filling.mask[*row] != 0) {
            let at = row * dtype.size();
            values[at..at + dtype.size()]
                .copy_from_slice(&Number::read(*from, cell).write(dtype)[..dtype.size()]);
            mask[row] = 1;
        }
    }
}

/// A value of an info column, wide enough for any of them.
#[derive(Clone, Copy)]
enum Number {
    Int(i128),
    Float(f64),
}

impl Number {
    /// The `dtype` value in the first bytes of `cell`.
    fn read(dtype: DType, cell: &[u8; 8]) -> Number {
        let b = |n: usize| -> [u8; 8] {
            let mut out = [0; 8];
            out[..n].copy_from_slice(&cell[..n]);
            out
        };
        let (b2, b4) = ([cell[0], cell[1]], [cell[0], cell[1], cell[2], cell[3]]);
        match dtype {
            DType::Bool => Number::Int(i128::from(cell[0] != 0)),
            DType::U8 => Number::Int(cell[0].into()),
            DType::I8 => Number::Int((cell[0] as i8).into()),
            DType::U16 => Number::Int(u16::from_ne_bytes(b2).into()),
            DType::I16 => Number::Int(i16::from_ne_bytes(b2).into()),
            DType::U32 => Number::Int(u32::from_ne_bytes(b4).into()),
            DType::I32 => Number::Int(i32::from_ne_bytes(b4).into()),
            DType::U64 => Number::Int(u64::from_ne_bytes(b(8)).into()),
            DType::I64 => Number::Int(i64::from_ne_bytes(b(8)).into()),
            DType::F16 => Number::Float(half::f16::from_ne_bytes(b2).to_f64()),
            DType::F32 => Number::Float(f32::from_ne_bytes(b4).into()),
            DType::F64 => Number::Float(f64::from_ne_bytes(b(8))),
        }
    }

    /// The value as a `dtype` element, in the first bytes of the result.
    fn write(self, dtype: DType) -> [u8; 8] {
        // An integer wraps into a narrower integer type, as numpy's assignment of an
        // in-range array does; a float converts straight into the target type.
        macro_rules! to {
            ($t:ty) => {
                match self {
                    Number::Int(i) => i as $t,
                    Number::Float(f) => f as $t,
                }
                .to_ne_bytes()
            };
        }
        let float = match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        };
        let mut out = [0; 8];
        let mut put = |bytes: &[u8]| out[..bytes.len()].copy_from_slice(bytes);
        match dtype {
            DType::Bool => put(&[u8::from(float != 0.0)]),
            DType::U8 => put(&to!(u8)),
            DType::I8 => put(&to!(i8)),
            DType::U16 => put(&to!(u16)),
            DType::I16 => put(&to!(i16)),
            DType::U32 => put(&to!(u32)),
            DType::I32 => put(&to!(i32)),
            DType::U64 => put(&to!(u64)),
            DType::I64 => put(&to!(i64)),
            DType::F16 => put(&half::f16::from_f64(float).to_ne_bytes()),
            DType::F32 => put(&(float as f32).to_ne_bytes()),
            DType::F64 => put(&float.to_ne_bytes()),
        }
        out
    }
}
