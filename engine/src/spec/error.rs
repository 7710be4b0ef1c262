//! Why a spec or a space is refused: [`SpecError`].

use super::dtype::DType;
use super::space::MAX_VALUE_BYTES;

/// Why an env's spec or one of its spaces is refused: its canonical JSON form does not
/// parse, or a space is malformed (a worker's report, a plugin's `spec_json`, a hosted
/// Python env, an env built from a config). Each message names the value and what a
/// valid one is.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The spec has no observation array.
    #[error("an env must have at least one observation array")]
    NoObservations,
    /// An observation array's name is empty or is an earlier array's.
    #[error("observation array names must be unique and non-empty: {name:?}")]
    ObservationName {
        /// The name.
        name: String,
    },
    /// An observation array's space is malformed.
    #[error("observation {name:?}: {source}")]
    Observation {
        /// The array's name.
        name: String,
        /// What is wrong with its space.
        source: Box<SpecError>,
    },
    /// The action space is malformed.
    #[error("action space: {source}")]
    Action {
        /// What is wrong with it.
        source: Box<SpecError>,
    },
    /// A part of the JSON form that must be an object is not one.
    #[error("{what} must be a JSON object, got {got}")]
    NotAnObject {
        /// The part: "the spec", "an observation array", "a Box space".
        what: &'static str,
        /// What it was.
        got: serde_json::Value,
    },
    /// A key the JSON form does not have (misspelt or misplaced).
    #[error("unknown key {key:?} in {what}; valid keys: {}", valid.join(", "))]
    UnknownKey {
        /// The object it is in.
        what: &'static str,
        /// The key.
        key: String,
        /// The keys that object may have.
        valid: &'static [&'static str],
    },
    /// A field of the JSON form holds a value of the wrong type.
    #[error("{field} must be {expected}")]
    FieldType {
        /// The field ("observation name", "max_episode_steps", ...).
        field: &'static str,
        /// What it must be ("a string", "a u32", ...).
        expected: &'static str,
    },
    /// A Box's `dtype` or `shape` does not parse.
    #[error("Box {field}: {source}")]
    BoxField {
        /// "dtype" or "shape".
        field: &'static str,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A Box's `low` or `high` is neither a number nor a list.
    #[error("Box {key} must be a number or a list of numbers, got {got}")]
    BoundsType {
        /// "low" or "high".
        key: &'static str,
        /// What it was.
        got: serde_json::Value,
    },
    /// One bound of a Box is neither a number nor one of the strings for non-finite values.
    #[error("bad Box bound {got} (a number, \"inf\", \"-inf\" or \"nan\")")]
    Bound {
        /// What it was.
        got: serde_json::Value,
    },
    /// A space other than a Box does not parse (an unknown type, a missing or unknown
    /// field, a value of the wrong type).
    #[error("bad space {space}: {source}")]
    Space {
        /// The space's JSON.
        space: serde_json::Value,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// One value of the space takes more than [`MAX_VALUE_BYTES`] (or its size overflows).
    #[error(
        "shape {shape:?} of {dtype} is {elements:e} elements, more than the {MAX_VALUE_BYTES} bytes (1 GiB) \
         one observation array or action of one env may take; use a smaller shape",
        elements = shape.iter().map(|&d| d as f64).product::<f64>()
    )]
    TooBig {
        /// The shape.
        shape: Vec<usize>,
        /// The element type.
        dtype: DType,
    },
    /// A `Discrete` with no values.
    #[error("Discrete n must be > 0, got {n}")]
    DiscreteEmpty {
        /// Its `n`.
        n: i64,
    },
    /// A `Discrete` whose largest value is past `i64::MAX`.
    #[error("Discrete start + n must fit an i64, got start {start} and n {n}")]
    DiscreteOverflow {
        /// Its `start`.
        start: i64,
        /// Its `n`.
        n: i64,
    },
    /// A `MultiBinary` whose shape does not hold `n` entries.
    #[error("MultiBinary shape {shape:?} must hold n = {n} entries")]
    MultiBinaryShape {
        /// Its `n`.
        n: usize,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// Per-element values (a Box's bounds, a `MultiDiscrete`'s `nvec` or `start`) that are
    /// neither one value nor one per element.
    #[error("{space} {what} has {found} values; expected 1 or {expected} (the product of shape {shape:?})")]
    ValueCount {
        /// "Box" or "MultiDiscrete".
        space: &'static str,
        /// "low", "high", "nvec" or "start".
        what: &'static str,
        /// How many it has.
        found: usize,
        /// Elements of the shape.
        expected: usize,
        /// The shape.
        shape: Vec<usize>,
    },
    /// A Box element's bounds are not a range its dtype can hold.
    #[error(
        "Box {shape:?} of {dtype}: element{} bounds (low {low}, high {high}) {}",
        element.map(|j| format!("[{j}]")).unwrap_or_default(),
        problem.describe(*dtype)
    )]
    BoxBounds {
        /// The Box's shape.
        shape: Vec<usize>,
        /// Its element type.
        dtype: DType,
        /// The element (`None`: the bounds are one value for every element).
        element: Option<usize>,
        /// Its lower bound.
        low: f64,
        /// Its upper bound.
        high: f64,
        /// What is wrong with them.
        problem: BoundProblem,
    },
    /// A `MultiDiscrete` of a non-integer dtype.
    #[error("MultiDiscrete dtype must be an integer type, got {dtype}")]
    MultiDiscreteDtype {
        /// The dtype.
        dtype: DType,
    },
    /// A `MultiDiscrete` entry with no values.
    #[error("MultiDiscrete nvec entries must be > 0, got {nvec:?}")]
    MultiDiscreteEmpty {
        /// Its `nvec`.
        nvec: Vec<i64>,
    },
    /// A `MultiDiscrete` entry taking values its dtype cannot hold.
    #[error("MultiDiscrete entry {entry} takes {low}..{high}, outside its dtype {dtype} ({min}..={max})")]
    MultiDiscreteRange {
        /// The entry (row-major).
        entry: usize,
        /// Its smallest value.
        low: i64,
        /// One past its largest value.
        high: i64,
        /// The dtype.
        dtype: DType,
        /// The dtype's smallest value.
        min: i128,
        /// The dtype's largest value.
        max: i128,
    },
}

/// What is wrong with a Box element's bounds ([`SpecError::BoxBounds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundProblem {
    /// A bound is NaN.
    Nan,
    /// `low > high`.
    LowAboveHigh,
    /// `low` is `inf` or `high` is `-inf`: no value fits.
    Empty,
    /// A bound is outside what the dtype holds.
    NotHeld,
}

impl BoundProblem {
    /// The end of [`SpecError::BoxBounds`]'s message, for a Box of `dtype`.
    fn describe(self, dtype: DType) -> String {
        match self {
            BoundProblem::Nan => "is NaN; a bound is a number, or -inf/inf for none".into(),
            BoundProblem::LowAboveHigh => "has low above high; low must be <= high".into(),
            BoundProblem::Empty => {
                "is empty (low inf or high -inf); use -inf for no lower bound, inf for no upper bound".into()
            }
            BoundProblem::NotHeld => {
                let range = match dtype.integer_range() {
                    _ if dtype == DType::Bool => "0 or 1".to_string(),
                    Some((min, max)) => format!("{min}..={max}, or -inf/inf"),
                    None if dtype == DType::F16 => "-65504..=65504, or -inf/inf".into(),
                    None => format!("{}..={}, or -inf/inf", f32::MIN, f32::MAX),
                };
                format!("has a bound its dtype cannot hold; {dtype} bounds are {range}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::space::checked_value_bytes;
    use super::super::{EnvSpec, ObsArray, Space};
    use super::*;
    use serde_json::json;

    /// The message of refusing `space` (its JSON form).
    fn space_error(space: serde_json::Value) -> String {
        Space::from_json(&space).unwrap_err().to_string()
    }

    #[test]
    fn space_refusals_read_as_they_always_have() {
        let boxed = |dtype: &str, low, high| json!({"type": "Box", "dtype": dtype, "shape": [3], "low": low, "high": high});
        assert_eq!(
            space_error(boxed("f32", json!([0, "nan", 0]), json!(1))),
            "Box [3] of f32: element[1] bounds (low NaN, high 1) is NaN; a bound is a number, or -inf/inf for none"
        );
        assert_eq!(
            space_error(boxed("u8", json!(-5), json!(1000))),
            "Box [3] of u8: element bounds (low -5, high 1000) has a bound its dtype cannot hold; u8 bounds are \
             0..=255, or -inf/inf"
        );
        assert_eq!(
            space_error(boxed("f64", json!([0, 1]), json!(1))),
            "Box low has 2 values; expected 1 or 3 (the product of shape [3])"
        );
        assert_eq!(
            space_error(boxed("f64", json!(["x"]), json!(1))),
            "bad Box bound \"x\" (a number, \"inf\", \"-inf\" or \"nan\")"
        );
        assert_eq!(
            space_error(json!({"type": "Box", "dtype": "f32", "shape": [1], "low": 0, "high": 1, "hi": 2})),
            "unknown key \"hi\" in a Box space; valid keys: type, dtype, shape, low, high"
        );
        assert_eq!(
            space_error(json!({"type": "MultiDiscrete", "nvec": [300], "dtype": "i8"})),
            "MultiDiscrete entry 0 takes 0..300, outside its dtype i8 (-128..=127)"
        );
        assert_eq!(
            space_error(json!({"type": "MultiBinary", "n": 5, "shape": [2, 3]})),
            "MultiBinary shape [2, 3] must hold n = 5 entries"
        );
        assert_eq!(
            space_error(json!({"type": "Discrete", "n": 0, "start": 0})),
            "Discrete n must be > 0, got 0"
        );
        assert_eq!(
            space_error(json!({"type": "Discrete", "n": 2})),
            "bad space {\"n\":2,\"type\":\"Discrete\"}: missing field `start`"
        );
        assert_eq!(
            checked_value_bytes(&[1 << 32, 1 << 32], DType::U8).unwrap_err().to_string(),
            "shape [4294967296, 4294967296] of u8 is 1.8446744073709552e19 elements, more than the 1073741824 \
             bytes (1 GiB) one observation array or action of one env may take; use a smaller shape"
        );
    }

    #[test]
    fn spec_refusals_name_the_array_and_keep_the_space_error_as_their_source() {
        let mut spec = EnvSpec::single(Space::Discrete { n: 0, start: 0 }, Space::discrete(2));
        let e = spec.validate().unwrap_err();
        assert_eq!(e.to_string(), "observation \"obs\": Discrete n must be > 0, got 0");
        let source = std::error::Error::source(&e).expect("the space's error is the source");
        assert_eq!(source.to_string(), "Discrete n must be > 0, got 0");
        spec.observations[0].space = Space::discrete(2);
        spec.action = Space::MultiBinary { n: 5, shape: vec![2, 3] };
        assert_eq!(
            spec.validate().unwrap_err().to_string(),
            "action space: MultiBinary shape [2, 3] must hold n = 5 entries"
        );
        spec.action = Space::discrete(2);
        spec.observations.push(ObsArray { name: "obs".into(), space: Space::discrete(2), info: false });
        assert_eq!(
            spec.validate().unwrap_err().to_string(),
            "observation array names must be unique and non-empty: \"obs\""
        );
        spec.observations.clear();
        assert!(matches!(spec.validate(), Err(SpecError::NoObservations)));
        assert_eq!(
            spec.validate().unwrap_err().to_string(),
            "an env must have at least one observation array"
        );
        let e = EnvSpec::from_json(&json!({"observations": 3, "action": {"type": "Discrete", "n": 2}}));
        assert_eq!(e.unwrap_err().to_string(), "spec.observations must be a list");
        let e = EnvSpec::from_json(&json!([1]));
        assert_eq!(e.unwrap_err().to_string(), "the spec must be a JSON object, got [1]");
    }
}
