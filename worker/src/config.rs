//! Reading an env's JSON config: unknown keys and ill-typed values are errors that name
//! the key and say what was expected.

use serde_json::{Map, Value};

/// An env's config was refused. The message names the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// A config object being read; every key must be one of `known`.
pub struct Config<'a> {
    map: Map<String, Value>,
    known: &'a [&'a str],
}

impl<'a> Config<'a> {
    /// Checks that `value` is an object whose keys are all in `known`.
    pub fn new(value: &Value, known: &'a [&'a str]) -> Result<Self, ConfigError> {
        let map = match value {
            Value::Object(m) => m.clone(),
            Value::Null => Map::new(),
            other => return Err(ConfigError(format!("config must be a JSON object, got {other}"))),
        };
        if let Some(bad) = map.keys().find(|k| !known.contains(&k.as_str())) {
            let valid = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            return Err(ConfigError(format!("unknown config key {bad:?}; valid keys: {valid}")));
        }
        Ok(Config { map, known })
    }

    fn typed<T>(
        &self,
        key: &str,
        default: T,
        what: &str,
        parse: impl Fn(&Value) -> Option<T>,
    ) -> Result<T, ConfigError> {
        debug_assert!(self.known.contains(&key), "{key} is not declared as a known key");
        match self.map.get(key) {
            None => Ok(default),
            Some(v) => {
                parse(v).ok_or_else(|| ConfigError(format!("config key {key:?} must be {what}, got {v}")))
            }
        }
    }

    /// A non-negative integer.
    pub fn u64(&self, key: &str, default: u64) -> Result<u64, ConfigError> {
        self.typed(key, default, "a non-negative integer", Value::as_u64)
    }

    /// A number.
    pub fn f64(&self, key: &str, default: f64) -> Result<f64, ConfigError> {
        self.typed(key, default, "a number", Value::as_f64)
    }

    /// A boolean.
    pub fn bool(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        self.typed(key, default, "true or false", Value::as_bool)
    }

    /// A string, one of `choices`.
    pub fn choice(
        &self,
        key: &str,
        default: &'static str,
        choices: &[&'static str],
    ) -> Result<&'static str, ConfigError> {
        let what = format!("one of {choices:?}");
        self.typed(key, default, &what, |v| {
            v.as_str().and_then(|s| choices.iter().copied().find(|c| *c == s))
        })
    }

    /// A list of positive integers.
    pub fn dims(&self, key: &str, default: &[usize]) -> Result<Vec<usize>, ConfigError> {
        self.typed(key, default.to_vec(), "a list of positive integers", |v| {
            v.as_array()?.iter().map(|d| d.as_u64().filter(|&d| d > 0).map(|d| d as usize)).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_and_ill_typed_keys_name_the_key() {
        let e = Config::new(&json!({"stepus": 3}), &["step_us"]).err().unwrap();
        assert_eq!(e.0, "unknown config key \"stepus\"; valid keys: step_us");
        let c = Config::new(&json!({"step_us": "fast"}), &["step_us"]).unwrap();
        assert!(c.u64("step_us", 0).unwrap_err().0.contains("\"step_us\" must be a non-negative integer"));
        let c = Config::new(&json!({"shape": [2, 0]}), &["shape"]).unwrap();
        assert!(c.dims("shape", &[1]).is_err());
        assert!(Config::new(&json!([1]), &[]).is_err());
    }
}
