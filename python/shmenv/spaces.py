"""The engine's env spec (canonical JSON) as Gymnasium spaces and numpy dtypes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

DTYPES = {
    "f32": np.float32,
    "f64": np.float64,
    "u8": np.uint8,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
}


def _bound(v: Any) -> float:
    if isinstance(v, str):
        return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[v]
    return float(v)


def _bounds(b: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A Box bound of the spec (one value for every element: a number or a list of one;
    or one value per element) as a float64 array of ``shape``."""
    values = np.array([_bound(v) for v in (b if isinstance(b, list) else [b])], dtype=np.float64)
    return np.full(shape, values[0]) if values.size == 1 else values.reshape(shape)


def space_from_json(s: dict) -> spaces.Space:
    """One space of the spec."""
    kind = s["type"]
    if kind == "Box":
        dtype = DTYPES[s["dtype"]]
        shape = tuple(s["shape"])
        low, high = _bounds(s["low"], shape), _bounds(s["high"], shape)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            low = np.clip(np.nan_to_num(low, neginf=info.min), info.min, info.max)
            high = np.clip(np.nan_to_num(high, posinf=info.max), info.min, info.max)
        return spaces.Box(low=low.astype(dtype), high=high.astype(dtype), shape=shape, dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(s["n"]), start=int(s.get("start", 0)))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.array(s["nvec"], dtype=np.int64))
    if kind == "MultiBinary":
        return spaces.MultiBinary(int(s["n"]))
    raise ValueError(f"unknown space type {kind!r} in the env spec")


def dtype_of(s: dict) -> np.dtype:
    """The dtype the engine stores a value of space `s` in (actions and observations)."""
    kind = s["type"]
    if kind == "Box":
        return np.dtype(DTYPES[s["dtype"]])
    if kind in ("Discrete", "MultiDiscrete"):
        return np.dtype(np.int64)
    return np.dtype(np.int8)


def observation_space(spec: dict) -> tuple[spaces.Space, list[str]]:
    """The single-env observation space (a Dict when the env has several arrays, or when
    its observation space is a one-key Dict: spec ``single_key_dict``) and the array names
    in spec order."""
    obs = spec["observations"]
    names = [o["name"] for o in obs]
    if len(obs) == 1 and not spec.get("single_key_dict", False):
        return space_from_json(obs[0]["space"]), names
    return spaces.Dict({o["name"]: space_from_json(o["space"]) for o in obs}), names
