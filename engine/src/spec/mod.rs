//! What an env is: its element types ([`dtype`][dtype]), its spaces ([`space`][space]),
//! and the spec that names its observation arrays and its action space (here).
//!
//! The spec is reported by the workers at start-up (the trainer never builds an env) and
//! drives the region's layout. Every space maps to one element type ([`DType`]) and one
//! shape, so every observation array and the action array are plain `[num_envs, ...shape]`
//! arrays of one dtype in shared memory.
//!
//! [dtype]: crate::spec::dtype
//! [space]: crate::spec::space

use std::fmt;

pub mod dtype;
mod error;
pub mod space;

pub use dtype::{as_bytes, Bool8, DType, Element, F16};
pub use error::{BoundProblem, SpecError};
use space::known_keys;
pub use space::Space;

/// One named observation array. Single-array envs use the name `"obs"`; a Dict space is
/// laid out flat as several named arrays.
#[derive(Clone, Debug, PartialEq)]
pub struct ObsArray {
    /// Name of the array (the Dict key).
    pub name: String,
    /// Its space.
    pub space: Space,
    /// A per-step value the env reports beside its observation (Atari's lives): to the
    /// engine an ordinary array; Python trainers get it in `infos[name]`, not in the
    /// observation.
    pub info: bool,
}

/// What an environment looks like from outside: observation arrays and action space.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvSpec {
    /// The observation arrays, in layout order.
    pub observations: Vec<ObsArray>,
    /// The action space.
    pub action: Space,
    /// The env's default episode limit (like Gymnasium's `max_episode_steps`), if any.
    pub max_episode_steps: Option<u32>,
    /// The observation is a dict of the named arrays (Gymnasium's `Dict` space) even
    /// though there is only one; with several arrays it always is.
    pub single_key_dict: bool,
}

impl EnvSpec {
    /// A spec with one observation array named `"obs"`.
    pub fn single(observation: Space, action: Space) -> EnvSpec {
        EnvSpec {
            observations: vec![ObsArray { name: "obs".into(), space: observation, info: false }],
            action,
            max_episode_steps: None,
            single_key_dict: false,
        }
    }

    /// Index of the observation array with this name.
    pub fn obs_index(&self, name: &str) -> Option<usize> {
        self.observations.iter().position(|o| o.name == name)
    }

    /// Checks spaces and names.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.observations.is_empty() {
            return Err(SpecError::NoObservations);
        }
        for (i, o) in self.observations.iter().enumerate() {
            if o.name.is_empty() || self.observations[..i].iter().any(|p| p.name == o.name) {
                return Err(SpecError::ObservationName { name: o.name.clone() });
            }
            o.space
                .validate()
                .map_err(|e| SpecError::Observation { name: o.name.clone(), source: Box::new(e) })?;
        }
        self.action.validate().map_err(|e| SpecError::Action { source: Box::new(e) })
    }

    /// Canonical JSON form; two workers agree iff their JSON strings are equal.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "observations": self.observations.iter()
                .map(|o| match o.info {
                    true => serde_json::json!({"name": o.name, "space": o.space.to_json(), "info": true}),
                    false => serde_json::json!({"name": o.name, "space": o.space.to_json()}),
                })
                .collect::<Vec<_>>(),
            "action": self.action.to_json(),
            "max_episode_steps": self.max_episode_steps,
            "single_key_dict": self.single_key_dict,
        })
    }

    /// Parses the canonical JSON form.
    pub fn from_json(v: &serde_json::Value) -> Result<EnvSpec, SpecError> {
        let must = |field, expected| SpecError::FieldType { field, expected };
        known_keys(v, "the spec", &["observations", "action", "max_episode_steps", "single_key_dict"])?;
        let obs = v["observations"].as_array().ok_or(must("spec.observations", "a list"))?;
        let observations = obs
            .iter()
            .map(|o| {
                known_keys(o, "an observation array", &["name", "space", "info"])?;
                Ok(ObsArray {
                    name: o["name"].as_str().ok_or(must("observation name", "a string"))?.to_string(),
                    space: Space::from_json(&o["space"])?,
                    info: match &o["info"] {
                        serde_json::Value::Null => false,
                        x => x.as_bool().ok_or(must("observation info", "a bool"))?,
                    },
                })
            })
            .collect::<Result<Vec<_>, SpecError>>()?;
        let max_episode_steps = match &v["max_episode_steps"] {
            serde_json::Value::Null => None,
            x => Some(
                x.as_u64().and_then(|k| u32::try_from(k).ok()).ok_or(must("max_episode_steps", "a u32"))?,
            ),
        };
        let single_key_dict = match &v["single_key_dict"] {
            serde_json::Value::Null => false,
            x => x.as_bool().ok_or(must("single_key_dict", "a bool"))?,
        };
        let spec = EnvSpec {
            observations,
            action: Space::from_json(&v["action"])?,
            max_episode_steps,
            single_key_dict,
        };
        spec.validate()?;
        Ok(spec)
    }
}

impl fmt::Display for EnvSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [only] = self.observations.as_slice() {
            write!(f, "obs {}", only.space)?;
        } else {
            write!(f, "obs {{")?;
            for (i, o) in self.observations.iter().enumerate() {
                write!(f, "{}{}: {}", if i > 0 { ", " } else { "" }, o.name, o.space)?;
            }
            write!(f, "}}")?;
        }
        write!(f, ", action {}", self.action)
    }
}

/// Why a spec (canonical JSON) of `len` bytes does not fit a worker's report area of
/// `capacity` bytes, naming its largest space:
/// only a Box whose bounds vary from element to element can be that large (uniform bounds
/// travel as one value).
pub fn too_big_message(spec: &serde_json::Value, len: usize, capacity: usize) -> String {
    let mut spaces: Vec<(String, &serde_json::Value)> = vec![("action space".into(), &spec["action"])];
    if let Some(obs) = spec["observations"].as_array() {
        spaces.extend(obs.iter().map(|o| (format!("observation {}", o["name"]), &o["space"])));
    }
    let size = |v: &serde_json::Value| v.to_string().len();
    let (what, space) = spaces.into_iter().max_by_key(|(_, v)| size(v)).expect("the action space is listed");
    format!(
        "the env's spec is {len} bytes of JSON, more than the {} bytes a worker's report holds: its {what} \
         (Box {} of shape {}) has bounds that differ from element to element, {} bytes of them; give it \
         uniform bounds (one low and one high for every element, e.g. Box(0, 255, shape, np.uint8)), \
         or a smaller shape",
        capacity,
        space["dtype"],
        space["shape"],
        size(space),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_json_round_trips_with_infinite_bounds() {
        let spec = EnvSpec::single(
            Space::Box {
                dtype: DType::F32,
                shape: vec![2],
                low: vec![-1.0, f64::NEG_INFINITY],
                high: vec![1.0, f64::INFINITY],
            },
            Space::multi_discrete(&[3, 4]),
        );
        let back = EnvSpec::from_json(&spec.to_json()).unwrap();
        assert_eq!(back, spec);
        assert_eq!(back.to_json().to_string(), spec.to_json().to_string());
        let mut with_info = spec.clone();
        with_info.observations.push(ObsArray { name: "lives".into(), space: Space::discrete(9), info: true });
        assert_eq!(EnvSpec::from_json(&with_info.to_json()).unwrap(), with_info);
        assert!(!spec.to_json().to_string().contains("info"), "an info flag is written only when set");
    }
}
