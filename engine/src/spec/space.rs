//! Gymnasium-style spaces: what one observation array or the action looks like, its
//! JSON form, and how it is stored. Every space maps to one element type ([`DType`]) and
//! one shape, so every observation array and the action array are plain
//! `[num_envs, ...shape]` arrays of one dtype in shared memory.

use serde::{Deserialize, Serialize};
use std::fmt;

use super::dtype::DType;
use super::error::{BoundProblem, SpecError};

/// A Gymnasium-style space.
///
/// Storage in shared memory: `Box` uses its own dtype and shape; `Discrete` is one `i64`;
/// `MultiDiscrete` is one element of its integer dtype per entry; `MultiBinary` is one
/// `i8` (0 or 1) per entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum Space {
    /// A box of numbers with per-element bounds (`low`/`high` hold one value for every
    /// element, or a single value that applies to all).
    Box {
        /// Element type.
        dtype: DType,
        /// Shape, outermost first; `[]` is a scalar.
        shape: Vec<usize>,
        /// Lower bounds (may be `-inf`).
        low: Vec<f64>,
        /// Upper bounds (may be `inf`).
        high: Vec<f64>,
    },
    /// An integer in `start .. start + n`.
    Discrete {
        /// Number of values.
        n: i64,
        /// Smallest value.
        start: i64,
    },
    /// An array of integers, entry `j` in `start[j] .. start[j] + nvec[j]` (Gymnasium's
    /// `MultiDiscrete`, of any shape and integer dtype).
    MultiDiscrete {
        /// Number of values of each entry (row-major), or one value for every entry.
        nvec: Vec<i64>,
        /// Smallest value of each entry, or one value for every entry (JSON: default 0).
        #[serde(default)]
        start: Vec<i64>,
        /// Shape (JSON: default `[len(nvec)]`).
        #[serde(default)]
        shape: Vec<usize>,
        /// Integer element type (JSON: default `i64`).
        #[serde(default = "default_multi_discrete_dtype")]
        dtype: DType,
    },
    /// An array of `n` flags, each 0 or 1.
    MultiBinary {
        /// Number of flags.
        n: usize,
        /// Shape, whose product is `n` (JSON: default `[n]`).
        #[serde(default)]
        shape: Vec<usize>,
    },
}

/// Entries above which a `MultiDiscrete`'s uniform `nvec` or `start` is spelled as one value.
const COMPACT_ABOVE: usize = 64;

/// The most bytes one value of a space (one env's observation array or action) may take:
/// 1 GiB.
pub const MAX_VALUE_BYTES: usize = 1 << 30;

/// Bytes of one value of `shape` in `dtype`, computed with checked arithmetic (shapes come
/// from configs, plugins and hosted envs): an error naming the shape and the limit when
/// the product overflows or passes [`MAX_VALUE_BYTES`].
///
/// ```
/// use shmenv_engine::spec::space::{checked_value_bytes, MAX_VALUE_BYTES};
/// use shmenv_engine::spec::DType;
/// assert_eq!(checked_value_bytes(&[84, 84, 4], DType::U8).unwrap(), 28_224);
/// assert!(checked_value_bytes(&[1 << 32, 1 << 32], DType::U8).unwrap_err().to_string().contains("1 GiB"));
/// assert!(checked_value_bytes(&[MAX_VALUE_BYTES / 4 + 1], DType::F32).is_err());
/// ```
pub fn checked_value_bytes(shape: &[usize], dtype: DType) -> Result<usize, SpecError> {
    let elements = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    elements
        .and_then(|n| n.checked_mul(dtype.size()))
        .filter(|&b| b <= MAX_VALUE_BYTES)
        .ok_or_else(|| SpecError::TooBig { shape: shape.to_vec(), dtype })
}

/// Whether `v` is a bound values of `dtype` can have: infinite (unbounded) for numeric
/// types, else within the type's range (0 or 1 for `bool`).
fn representable(dtype: DType, v: f64) -> bool {
    match dtype.integer_range() {
        _ if dtype == DType::Bool => v == 0.0 || v == 1.0,
        _ if v.is_infinite() => true,
        Some((min, max)) => v >= min as f64 && v <= max as f64,
        None if dtype == DType::F16 => v.abs() <= 65504.0,
        None if dtype == DType::F32 => v.abs() <= f64::from(f32::MAX),
        None => true,
    }
}

fn default_multi_discrete_dtype() -> DType {
    DType::I64
}

/// Entry `j` of `values`, which holds one value for every entry or one per entry.
fn entry(values: &[i64], j: usize) -> i64 {
    if values.len() == 1 {
        values[0]
    } else {
        values[j]
    }
}

/// Refuses keys of JSON object `v` (a spec, an observation array, a space) other than
/// `keys`: a misspelt or misplaced key must not be ignored silently.
pub(crate) fn known_keys(
    v: &serde_json::Value,
    what: &'static str,
    keys: &'static [&'static str],
) -> Result<(), SpecError> {
    let Some(object) = v.as_object() else { return Err(SpecError::NotAnObject { what, got: v.clone() }) };
    match object.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(k) => Err(SpecError::UnknownKey { what, key: k.clone(), valid: keys }),
        None => Ok(()),
    }
}

/// JSON renders non-finite floats as `null`; these helpers keep bounds exact.
fn encode_bound(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::json!(v)
    } else if v > 0.0 {
        serde_json::json!("inf")
    } else if v < 0.0 {
        serde_json::json!("-inf")
    } else {
        serde_json::json!("nan")
    }
}

/// The inverse of [`encode_bound`].
fn decode_bound(x: &serde_json::Value) -> Result<f64, SpecError> {
    match x.as_str() {
        Some("inf") => Ok(f64::INFINITY),
        Some("-inf") => Ok(f64::NEG_INFINITY),
        Some("nan") => Ok(f64::NAN),
        _ => x.as_f64().ok_or_else(|| SpecError::Bound { got: x.clone() }),
    }
}

/// A Box's bounds as JSON: a list of one value when every element has the same bound
/// (bit for bit), so that image spaces stay small; else one value per element.
fn encode_bounds(b: &[f64]) -> Vec<serde_json::Value> {
    match b.first() {
        Some(first) if b.iter().all(|x| x.to_bits() == first.to_bits()) => vec![encode_bound(*first)],
        _ => b.iter().map(|&v| encode_bound(v)).collect(),
    }
}

impl Space {
    /// A `Box` space with the same bounds for every element.
    pub fn boxed(dtype: DType, shape: &[usize], low: f64, high: f64) -> Space {
        Space::Box { dtype, shape: shape.to_vec(), low: vec![low], high: vec![high] }
    }

    /// A `Discrete(n)` space starting at 0.
    pub fn discrete(n: i64) -> Space {
        Space::Discrete { n, start: 0 }
    }

    /// A 1-D `MultiDiscrete(nvec)` space of `i64` entries starting at 0.
    pub fn multi_discrete(nvec: &[i64]) -> Space {
        Space::MultiDiscrete {
            nvec: nvec.to_vec(),
            start: vec![0],
            shape: vec![nvec.len()],
            dtype: DType::I64,
        }
        .normalized()
    }

    /// A 1-D `MultiBinary(n)` space.
    pub fn multi_binary(n: usize) -> Space {
        Space::MultiBinary { n, shape: vec![n] }
    }

    /// Element type of the space's storage.
    pub fn dtype(&self) -> DType {
        match self {
            Space::Box { dtype, .. } | Space::MultiDiscrete { dtype, .. } => *dtype,
            Space::Discrete { .. } => DType::I64,
            Space::MultiBinary { .. } => DType::I8,
        }
    }

    /// Shape of one value of the space, as a new vector ([`dims`](Self::dims) borrows it).
    pub fn shape(&self) -> Vec<usize> {
        self.dims().to_vec()
    }

    /// Shape of one value of the space, outermost first (`[]`: a scalar).
    pub fn dims(&self) -> &[usize] {
        match self {
            Space::Box { shape, .. }
            | Space::MultiDiscrete { shape, .. }
            | Space::MultiBinary { shape, .. } => shape,
            Space::Discrete { .. } => &[],
        }
    }

    /// The values entry `j` of a `MultiDiscrete` takes, `start .. start + n` (`None` for
    /// other spaces).
    pub fn multi_discrete_range(&self, j: usize) -> Option<(i64, i64)> {
        match self {
            Space::MultiDiscrete { nvec, start, .. } => {
                let lo = entry(start, j);
                Some((lo, lo.saturating_add(entry(nvec, j))))
            }
            _ => None,
        }
    }

    /// Fills in what the JSON form may leave out (a `MultiDiscrete`'s shape and start, a
    /// `MultiBinary`'s shape) and settles how per-entry values are spelled (one per entry
    /// up to [`COMPACT_ABOVE`] entries; above, one value when they are all equal), so that
    /// equal spaces have equal canonical JSON.
    fn normalized(mut self) -> Space {
        match &mut self {
            Space::MultiDiscrete { nvec, start, shape, .. } => {
                if shape.is_empty() {
                    *shape = vec![nvec.len()];
                }
                if start.is_empty() {
                    *start = vec![0];
                }
                // Saturating: the shape is not validated yet.
                let count = shape.iter().fold(1usize, |n, &d| n.saturating_mul(d));
                for values in [nvec, start] {
                    if count <= COMPACT_ABOVE && values.len() == 1 {
                        *values = vec![values[0]; count];
                    } else if count > COMPACT_ABOVE && values.iter().all(|v| *v == values[0]) {
                        values.truncate(1);
                    }
                }
            }
            Space::MultiBinary { n, shape } if shape.is_empty() => *shape = vec![*n],
            _ => {}
        }
        self
    }

    /// Number of elements in one value of the space.
    pub fn num_elements(&self) -> usize {
        self.dims().iter().product()
    }

    /// Bytes of one value of the space.
    pub fn value_bytes(&self) -> usize {
        self.num_elements() * self.dtype().size()
    }

    /// Checks that the space is well-formed: its size (checked arithmetic, at most
    /// [`MAX_VALUE_BYTES`]), bounds (numbers the dtype can hold, `low <= high`, no NaN),
    /// positive counts.
    pub fn validate(&self) -> Result<(), SpecError> {
        checked_value_bytes(self.dims(), self.dtype())?;
        match self {
            Space::Box { .. } => self.validate_box(),
            Space::Discrete { n, .. } if *n <= 0 => Err(SpecError::DiscreteEmpty { n: *n }),
            Space::Discrete { n, start } if start.checked_add(*n).is_none() => {
                Err(SpecError::DiscreteOverflow { start: *start, n: *n })
            }
            Space::MultiDiscrete { .. } => self.validate_multi_discrete(),
            Space::MultiBinary { n, shape } if shape.iter().product::<usize>() != *n => {
                Err(SpecError::MultiBinaryShape { n: *n, shape: shape.clone() })
            }
            _ => Ok(()),
        }
    }

    fn validate_box(&self) -> Result<(), SpecError> {
        let Space::Box { shape, low, high, dtype } = self else { return Ok(()) };
        let n = self.num_elements();
        for (what, b) in [("low", low), ("high", high)] {
            if b.len() != 1 && b.len() != n {
                let (found, shape) = (b.len(), shape.clone());
                return Err(SpecError::ValueCount { space: "Box", what, found, expected: n, shape });
            }
        }
        // Uniform bounds are one check, whatever the shape.
        for j in 0..low.len().max(high.len()) {
            let (lo, hi) = self.box_bounds(j).unwrap_or_default();
            let problem = if lo.is_nan() || hi.is_nan() {
                BoundProblem::Nan
            } else if lo > hi {
                BoundProblem::LowAboveHigh
            } else if lo == f64::INFINITY || hi == f64::NEG_INFINITY {
                BoundProblem::Empty
            } else if !representable(*dtype, lo) || !representable(*dtype, hi) {
                BoundProblem::NotHeld
            } else {
                continue;
            };
            return Err(SpecError::BoxBounds {
                shape: shape.clone(),
                dtype: *dtype,
                element: (low.len().max(high.len()) > 1).then_some(j),
                low: lo,
                high: hi,
                problem,
            });
        }
        Ok(())
    }

    fn validate_multi_discrete(&self) -> Result<(), SpecError> {
        let Space::MultiDiscrete { nvec, start, shape, dtype } = self else { return Ok(()) };
        let count: usize = shape.iter().product();
        let dtype = *dtype;
        let Some((min, max)) = dtype.integer_range() else {
            return Err(SpecError::MultiDiscreteDtype { dtype });
        };
        for (what, values) in [("nvec", nvec), ("start", start)] {
            if values.len() != 1 && values.len() != count {
                let (found, shape) = (values.len(), shape.clone());
                return Err(SpecError::ValueCount {
                    space: "MultiDiscrete",
                    what,
                    found,
                    expected: count,
                    shape,
                });
            }
        }
        for j in 0..count {
            let (low, high) = self.multi_discrete_range(j).unwrap_or((0, 0));
            if entry(nvec, j) <= 0 {
                return Err(SpecError::MultiDiscreteEmpty { nvec: nvec.clone() });
            }
            if i128::from(low) < min || i128::from(high) - 1 > max {
                return Err(SpecError::MultiDiscreteRange { entry: j, low, high, dtype, min, max });
            }
        }
        Ok(())
    }

    /// Bounds of element `j` of a `Box` (or `None` for other spaces).
    pub fn box_bounds(&self, j: usize) -> Option<(f64, f64)> {
        match self {
            Space::Box { low, high, .. } => {
                let pick = |b: &Vec<f64>| if b.len() == 1 { b[0] } else { b[j] };
                Some((pick(low), pick(high)))
            }
            _ => None,
        }
    }

    /// Canonical JSON form (non-finite bounds spelled as strings; a Box's uniform bounds
    /// as a list of one value, so two spaces that mean the same have the same JSON).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Space::Box { dtype, shape, low, high } => serde_json::json!({
                "type": "Box", "dtype": dtype, "shape": shape,
                "low": encode_bounds(low),
                "high": encode_bounds(high),
            }),
            other => serde_json::to_value(other).expect("plain space serializes"),
        }
    }

    /// Parses the canonical JSON form.
    pub fn from_json(v: &serde_json::Value) -> Result<Space, SpecError> {
        let space = if v.get("type").and_then(|t| t.as_str()) == Some("Box") {
            known_keys(v, "a Box space", &["type", "dtype", "shape", "low", "high"])?;
            let field = |field| move |source| SpecError::BoxField { field, source };
            let dtype: DType = serde_json::from_value(v["dtype"].clone()).map_err(field("dtype"))?;
            let shape: Vec<usize> = serde_json::from_value(v["shape"].clone()).map_err(field("shape"))?;
            // A bound is one value for every element (a number, or a list of one) or a list
            // with a value per element.
            let bounds = |key: &'static str| -> Result<Vec<f64>, SpecError> {
                match &v[key] {
                    serde_json::Value::Array(list) => list.iter().map(decode_bound).collect(),
                    x @ (serde_json::Value::Number(_) | serde_json::Value::String(_)) => {
                        Ok(vec![decode_bound(x)?])
                    }
                    x => Err(SpecError::BoundsType { key, got: x.clone() }),
                }
            };
            Space::Box { dtype, shape, low: bounds("low")?, high: bounds("high")? }
        } else {
            serde_json::from_value::<Space>(v.clone())
                .map_err(|source| SpecError::Space { space: v.clone(), source })?
                .normalized()
        };
        space.validate()?;
        Ok(space)
    }
}

/// Per-element bounds longer than this print only their first and last four values.
const ELIDE_ABOVE: usize = 16;

impl fmt::Display for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Space::Box { dtype, shape, low, high } => {
                // Bounds as the dtype holds them: an f32 bound of -4.8 prints as -4.8, not as
                // the f64 it widens to (-4.800000190734863).
                let one =
                    |x: f64| if *dtype == DType::F32 { format!("{}", x as f32) } else { format!("{x}") };
                // Long per-element bounds print their ends (a spec may hold thousands).
                let show = |b: &Vec<f64>| {
                    let list = |xs: &[f64]| xs.iter().map(|&x| one(x)).collect::<Vec<_>>().join(", ");
                    if b.len() == 1 || b.iter().all(|x| x.to_bits() == b[0].to_bits()) {
                        one(b[0])
                    } else if b.len() > ELIDE_ABOVE {
                        format!(
                            "[{}, ... {} more ..., {}]",
                            list(&b[..4]),
                            b.len() - 8,
                            list(&b[b.len() - 4..])
                        )
                    } else {
                        format!("[{}]", list(b))
                    }
                };
                write!(f, "Box({}, {}, {shape:?}, {dtype})", show(low), show(high))
            }
            Space::Discrete { n, start: 0 } => write!(f, "Discrete({n})"),
            Space::Discrete { n, start } => write!(f, "Discrete({n}, start={start})"),
            Space::MultiDiscrete { nvec, start, shape, dtype } => {
                write!(f, "MultiDiscrete({nvec:?}")?;
                if start.iter().any(|&s| s != 0) {
                    write!(f, ", start={start:?}")?;
                }
                if shape.as_slice() != [nvec.len()] {
                    write!(f, ", shape={shape:?}")?;
                }
                if *dtype != DType::I64 {
                    write!(f, ", {dtype}")?;
                }
                write!(f, ")")
            }
            Space::MultiBinary { n, shape } if shape.len() == 1 => write!(f, "MultiBinary({n})"),
            Space::MultiBinary { shape, .. } => write!(f, "MultiBinary({shape:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_bounds_travel_as_one_value_and_scalars_are_accepted() {
        let full = Space::Box {
            dtype: DType::U8,
            shape: vec![96, 96, 3],
            low: vec![0.0; 27648],
            high: vec![255.0; 27648],
        };
        let json = full.to_json();
        assert_eq!(json["low"], serde_json::json!([0.0]));
        assert_eq!(json["high"], serde_json::json!([255.0]));
        let back = Space::from_json(&json).unwrap();
        assert_eq!(back.to_json(), json);
        assert_eq!(back.box_bounds(27647), Some((0.0, 255.0)));
        let scalar =
            serde_json::json!({"type": "Box", "dtype": "f32", "shape": [2, 2], "low": "-inf", "high": 1.5});
        let space = Space::from_json(&scalar).unwrap();
        assert_eq!(space.box_bounds(3), Some((f64::NEG_INFINITY, 1.5)));
        assert_eq!(space.to_json()["low"], serde_json::json!(["-inf"]));
        let bad =
            serde_json::json!({"type": "Box", "dtype": "f32", "shape": [2], "low": {"x": 1}, "high": 1});
        assert!(Space::from_json(&bad).unwrap_err().to_string().contains("must be a number or a list"));
    }

    #[test]
    fn box_bounds_print_as_their_dtype_holds_them() {
        let f32_box = Space::Box {
            dtype: DType::F32,
            shape: vec![2],
            low: vec![f64::from(-4.8f32), f64::NEG_INFINITY],
            high: vec![f64::from(4.8f32), f64::INFINITY],
        };
        assert_eq!(f32_box.to_string(), "Box([-4.8, -inf], [4.8, inf], [2], f32)");
        assert_eq!(
            Space::boxed(DType::F32, &[1], f64::from(0.1f32), 2.0).to_string(),
            "Box(0.1, 2, [1], f32)"
        );
        assert_eq!(Space::boxed(DType::F64, &[1], 0.1, 2.0).to_string(), "Box(0.1, 2, [1], f64)");
        let long = Space::Box {
            dtype: DType::F64,
            shape: vec![20],
            low: (0..20).map(f64::from).collect(),
            high: vec![99.0],
        };
        assert_eq!(long.to_string(), "Box([0, 1, 2, 3, ... 12 more ..., 16, 17, 18, 19], 99, [20], f64)");
    }

    #[test]
    fn multi_spaces_take_any_shape_start_and_dtype_and_have_one_canonical_json() {
        let short = serde_json::json!({"type": "MultiDiscrete", "nvec": [3, 4]});
        assert_eq!(Space::from_json(&short).unwrap(), Space::multi_discrete(&[3, 4]));
        let image =
            serde_json::json!({"type": "MultiDiscrete", "nvec": [5], "shape": [10, 10], "dtype": "u8"});
        let space = Space::from_json(&image).unwrap();
        assert_eq!(space.shape(), vec![10, 10]);
        assert_eq!(space.dtype(), DType::U8);
        assert_eq!(space.multi_discrete_range(99), Some((0, 5)));
        assert_eq!(space.to_json()["nvec"], serde_json::json!([5]), "100 equal entries stay one value");
        let per_entry =
            serde_json::json!({"type": "MultiDiscrete", "nvec": [2], "start": [-1], "shape": [2, 2]});
        let small = Space::from_json(&per_entry).unwrap();
        assert_eq!(small.to_json()["nvec"], serde_json::json!([2, 2, 2, 2]), "few entries: one value each");
        assert_eq!(Space::from_json(&small.to_json()).unwrap(), small);
        assert_eq!(small.to_string(), "MultiDiscrete([2, 2, 2, 2], start=[-1, -1, -1, -1], shape=[2, 2])");
        let too_wide =
            serde_json::json!({"type": "MultiDiscrete", "nvec": [300], "shape": [1], "dtype": "i8"});
        let e = Space::from_json(&too_wide).unwrap_err().to_string();
        assert!(e.contains("outside its dtype i8"), "{e}");
        let not_int = serde_json::json!({"type": "MultiDiscrete", "nvec": [3], "dtype": "f32"});
        assert!(Space::from_json(&not_int).unwrap_err().to_string().contains("integer type"));
        let grid = serde_json::json!({"type": "MultiBinary", "n": 6, "shape": [2, 3]});
        assert_eq!(Space::from_json(&grid).unwrap().shape(), vec![2, 3]);
        let bad = serde_json::json!({"type": "MultiBinary", "n": 5, "shape": [2, 3]});
        assert!(Space::from_json(&bad).unwrap_err().to_string().contains("must hold n = 5"));
        let flags = serde_json::json!({"type": "Box", "dtype": "bool", "shape": [2], "low": 0, "high": 1});
        assert_eq!(Space::from_json(&flags).unwrap().value_bytes(), 2);
    }

    #[test]
    fn bounds_and_keys_are_validated_and_refusals_say_which() {
        let bad = |v: serde_json::Value| Space::from_json(&v).unwrap_err().to_string();
        let box_of = |dtype: &str, low: serde_json::Value, high: serde_json::Value| serde_json::json!({"type": "Box", "dtype": dtype, "shape": [3], "low": low, "high": high});
        let e = bad(box_of("f32", serde_json::json!([0, "nan", 0]), serde_json::json!(1)));
        assert!(e.contains("element[1] bounds (low NaN, high 1) is NaN"), "{e}");
        assert!(bad(box_of("f64", serde_json::json!(2), serde_json::json!(1))).contains("low above high"));
        assert!(bad(box_of("f64", serde_json::json!("inf"), serde_json::json!("inf"))).contains("is empty"));
        let e = bad(box_of("u8", serde_json::json!(-5), serde_json::json!(1000)));
        assert!(e.contains("u8 bounds are 0..=255"), "{e}");
        assert!(bad(box_of("bool", serde_json::json!(0), serde_json::json!(2)))
            .contains("bool bounds are 0 or 1"));
        assert!(
            bad(box_of("f32", serde_json::json!(-1e39), serde_json::json!(0))).contains("dtype cannot hold")
        );
        // Unbounded integer boxes and the i64 extremes (which round to 2^63 as f64) are fine.
        Space::from_json(&box_of("i64", serde_json::json!("-inf"), serde_json::json!("inf"))).unwrap();
        Space::from_json(&box_of("i64", serde_json::json!(i64::MIN), serde_json::json!(i64::MAX))).unwrap();
        let e = bad(
            serde_json::json!({"type": "Box", "dtype": "f32", "shape": [1], "low": 0, "high": 1, "hi": 2}),
        );
        assert!(
            e.contains("unknown key \"hi\" in a Box space; valid keys: type, dtype, shape, low, high"),
            "{e}"
        );
        let e = bad(serde_json::json!({"type": "Discrete", "n": 3, "strat": 1}));
        assert!(e.contains("unknown field `strat`"), "{e}");
    }

    #[test]
    fn storage_of_each_space() {
        assert_eq!(Space::discrete(2).dtype(), DType::I64);
        assert_eq!(Space::discrete(2).shape(), Vec::<usize>::new());
        assert_eq!(Space::multi_binary(5).value_bytes(), 5);
        assert_eq!(Space::boxed(DType::F64, &[2, 3], 0.0, 1.0).value_bytes(), 48);
        assert!(Space::Discrete { n: 0, start: 0 }.validate().is_err());
    }
}
