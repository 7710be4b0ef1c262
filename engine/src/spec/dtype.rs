//! Element types of the arrays in shared memory: [`DType`] tags and the Rust types
//! ([`Element`]) that read and write them. Every byte pattern a worker may write is a valid
//! value of these types: `bool` arrays are [`Bool8`] bytes, never Rust `bool`s.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Element type of an array in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// Unsigned byte.
    U8,
    /// Signed byte.
    I8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// Boolean, one byte per element. Rust sees these bytes as [`Bool8`] (never `bool`:
    /// a worker may write any byte); numpy views them as `np.bool_`.
    Bool,
    /// 16-bit float (IEEE 754 half precision, [`half::f16`]).
    F16,
    /// 16-bit unsigned integer.
    U16,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit unsigned integer.
    U64,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 12] = [
        DType::F32,
        DType::F64,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::F16,
        DType::U16,
        DType::U32,
        DType::U64,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::I16 | DType::F16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Whether this is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16)
    }

    /// Whether this is an integer type (`bool` is not).
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            DType::U8
                | DType::I8
                | DType::I16
                | DType::I32
                | DType::I64
                | DType::U16
                | DType::U32
                | DType::U64
        )
    }

    /// The smallest and largest value of an integer type (`None` for floats and bool).
    pub const fn integer_range(self) -> Option<(i128, i128)> {
        Some(match self {
            DType::U8 => (0, u8::MAX as i128),
            DType::I8 => (i8::MIN as i128, i8::MAX as i128),
            DType::I16 => (i16::MIN as i128, i16::MAX as i128),
            DType::I32 => (i32::MIN as i128, i32::MAX as i128),
            DType::I64 => (i64::MIN as i128, i64::MAX as i128),
            DType::U16 => (0, u16::MAX as i128),
            DType::U32 => (0, u32::MAX as i128),
            DType::U64 => (0, u64::MAX as i128),
            DType::F32 | DType::F64 | DType::F16 | DType::Bool => return None,
        })
    }

    /// The short name used in messages and JSON (`"f32"`, `"u8"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can be an element of an array in shared memory.
///
/// Implemented for `f32`, `f64`, `u8`, `i8`, `i16`, `i32`, `i64`, `u16`, `u32`, `u64`,
/// [`half::f16`] and [`Bool8`]; it ties each type to its [`DType`] so that typed views are
/// checked against the spec at run time.
pub trait Element: bytemuck::Pod + PartialEq + fmt::Debug + Send + Sync + 'static {
    /// The dtype tag of this type.
    const DTYPE: DType;
    /// Lossy conversion used to check bounds and finiteness.
    fn to_f64(self) -> f64;
    /// Conversion from f64 (`as` semantics: saturating, truncating toward zero).
    fn from_f64(v: f64) -> Self;
    /// Exact conversion of an integer (floats truncate toward zero), to check integer
    /// ranges without rounding.
    fn to_i128(self) -> i128;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline]
            fn to_f64(self) -> f64 { self as f64 }
            #[inline]
            fn from_f64(v: f64) -> Self { v as $t }
            #[inline]
            fn to_i128(self) -> i128 { self as i128 }
        }
    )*};
}

/// One byte of a `bool` array as it lies in shared memory: any byte value is a valid
/// `Bool8` (0 is false; the action check accepts only 0 and 1), unlike Rust's `bool`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct Bool8(pub u8);

impl Element for Bool8 {
    const DTYPE: DType = DType::Bool;
    #[inline]
    fn to_f64(self) -> f64 {
        f64::from(self.0)
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        Bool8(u8::from(v != 0.0))
    }
    #[inline]
    fn to_i128(self) -> i128 {
        i128::from(self.0)
    }
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    #[inline]
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
    #[inline]
    fn to_i128(self) -> i128 {
        half::f16::to_f64(self) as i128
    }
}
/// The bytes of a slice of elements.
pub fn as_bytes<T: Element>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

element!(
    f32 => F32, f64 => F64, u8 => U8, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u16 => U16, u32 => U32,
    u64 => U64
);

/// Runs `$body` with `$t` bound (as a type alias) to the Rust element type of `$dtype`:
/// the one place that maps a [`DType`] to its [`Element`] type.
///
/// ```
/// use shmenv_engine::{with_element, DType, Element};
/// assert_eq!(with_element!(DType::U16, T => std::mem::size_of::<T>()), 2);
/// assert_eq!(with_element!(DType::Bool, T => T::DTYPE), DType::Bool);
/// ```
#[macro_export]
macro_rules! with_element {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::DType::U8 => {
                type $t = u8;
                $body
            }
            $crate::DType::I8 => {
                type $t = i8;
                $body
            }
            $crate::DType::I16 => {
                type $t = i16;
                $body
            }
            $crate::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DType::Bool => {
                type $t = $crate::spec::Bool8;
                $body
            }
            $crate::DType::F16 => {
                type $t = $crate::spec::F16;
                $body
            }
            $crate::DType::U16 => {
                type $t = u16;
                $body
            }
            $crate::DType::U32 => {
                type $t = u32;
                $body
            }
            $crate::DType::U64 => {
                type $t = u64;
                $body
            }
        }
    };
}

/// The half-precision float type of [`DType::F16`].
pub use half::f16 as F16;
