"""Gymnasium spaces as the engine's spec (canonical JSON) and back, and the numpy dtype
each space is stored in. Workers use :func:`space_to_json`, the trainer the rest."""

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
    "bool": np.bool_,
    "f16": np.float16,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
}
"""The engine's dtype names (``engine/src/spec.rs``'s ``DType``) and their numpy types:
every dtype a Gymnasium ``Box`` takes."""

DTYPE_NAMES = {np.dtype(t).name: name for name, t in DTYPES.items()}

VARIABLE_SIZE = ("Text", "Sequence", "Graph", "OneOf")
"""Gymnasium's spaces whose values have no fixed size: shared-memory rows cannot hold them."""


def _bound(v: Any) -> float:
    if isinstance(v, str):
        return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[v]
    return float(v)


def _bounds(b: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A Box bound of the spec (one value for every element: a number or a list of one;
    or one value per element) as a float64 array of ``shape``."""
    values = np.array([_bound(v) for v in (b if isinstance(b, list) else [b])], dtype=np.float64)
    return np.full(shape, values[0]) if values.size == 1 else values.reshape(shape)


def _per_entry(values: list, dtype, shape: tuple) -> np.ndarray:
    """One value for every entry, or one per entry (row-major), as an array of ``shape``."""
    a = np.array(values, dtype=dtype)
    return np.full(shape, a[0], dtype=dtype) if a.size == 1 else a.reshape(shape)


def _integer_bound(b: np.ndarray, dtype) -> np.ndarray:
    """Float64 bounds as exact integers of ``dtype``: a bound at or past the type's limit
    (infinite, or a 64-bit limit that float64 rounds up) is the limit itself."""
    info = np.iinfo(dtype)
    out = np.empty(b.shape, dtype=dtype)
    top, bottom = b >= float(info.max), b <= float(info.min)
    out[top], out[bottom] = info.max, info.min
    inside = ~(top | bottom)
    out[inside] = b[inside].astype(dtype)
    return out


def space_from_json(s: dict) -> spaces.Space:
    """One space of the spec."""
    kind = s["type"]
    if kind == "Box":
        dtype = DTYPES[s["dtype"]]
        shape = tuple(s["shape"])
        low, high = _bounds(s["low"], shape), _bounds(s["high"], shape)
        if np.issubdtype(dtype, np.integer):
            low, high = _integer_bound(low, dtype), _integer_bound(high, dtype)
        return spaces.Box(low=low.astype(dtype), high=high.astype(dtype), shape=shape, dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(s["n"]), start=int(s.get("start", 0)))
    if kind == "MultiDiscrete":
        dtype = DTYPES[s.get("dtype", "i64")]
        shape = tuple(s.get("shape") or [len(s["nvec"])])
        nvec, start = (_per_entry(s.get(key) or [0], dtype, shape) for key in ("nvec", "start"))
        return spaces.MultiDiscrete(nvec, dtype=dtype, start=start)
    if kind == "MultiBinary":
        shape = s.get("shape") or [s["n"]]
        return spaces.MultiBinary(int(shape[0]) if len(shape) == 1 else [int(d) for d in shape])
    raise ValueError(f"unknown space type {kind!r} in the env spec")


def dtype_of(s: dict) -> np.dtype:
    """The dtype the engine stores a value of space `s` (its JSON) in."""
    kind = s["type"]
    if kind in ("Box", "MultiDiscrete"):
        return np.dtype(DTYPES[s.get("dtype", "i64")])
    if kind == "Discrete":
        return np.dtype(np.int64)
    return np.dtype(np.int8)


def _bound_json(v: float):
    v = float(v)
    if v == math.inf:
        return "inf"
    if v == -math.inf:
        return "-inf"
    return v


def _uniform(values: Any) -> list:
    """One value when every element is the same (images: the whole frame shares 0..255),
    so the spec report stays small; else one value per element (row-major)."""
    flat = np.asarray(values).reshape(-1)
    if flat.size > 0 and np.array_equal(flat, np.full_like(flat, flat[0]), equal_nan=flat.dtype.kind == "f"):
        flat = flat[:1]
    return flat.tolist()


def space_to_json(space: spaces.Space, what: str) -> dict:
    """A fixed-size Gymnasium space (Box, Discrete, MultiDiscrete, MultiBinary) as the
    engine's JSON; ``what`` names it in errors (e.g. "observation 'pos'")."""
    if isinstance(space, spaces.Box):
        name = DTYPE_NAMES.get(np.dtype(space.dtype).name)
        if name is None:
            raise TypeError(f"{what}: Box dtype {space.dtype} is not supported (use one of {sorted(DTYPE_NAMES)})")
        low, high = (np.asarray(b, dtype=np.float64) for b in (space.low, space.high))
        return {
            "type": "Box",
            "dtype": name,
            "shape": list(space.shape),
            "low": [_bound_json(v) for v in _uniform(low)],
            "high": [_bound_json(v) for v in _uniform(high)],
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": [int(v) for v in _uniform(space.nvec)],
            "start": [int(v) for v in _uniform(space.start)],
            "shape": list(space.shape),
            "dtype": DTYPE_NAMES[np.dtype(space.dtype).name],
        }
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": int(np.prod(space.shape)), "shape": list(space.shape)}
    kind = type(space).__name__
    if kind in VARIABLE_SIZE:
        raise TypeError(
            f"{what}: {space} has no fixed size (a {kind} value varies in length), and shmenv's workers write "
            f"fixed-size rows into shared memory, so it is refused; wrap the env so that this space is fixed-size "
            f"(e.g. pad to a maximum length into a Box or MultiDiscrete), or use gymnasium.vector.AsyncVectorEnv "
            f"for this env"
        )
    raise TypeError(
        f"{what}: {kind} spaces are not supported (Box, Discrete, MultiDiscrete, MultiBinary, and Tuple or Dict "
        f"of those, nested)"
    )


def observation_space(spec: dict) -> tuple[spaces.Space, list[str]]:
    """The single-env observation space (a Dict when the env has several arrays, or when
    its observation space is a one-key Dict: spec ``single_key_dict``) and the array names
    in spec order."""
    obs = spec["observations"]
    names = [o["name"] for o in obs]
    if len(obs) == 1 and not spec.get("single_key_dict", False):
        return space_from_json(obs[0]["space"]), names
    return spaces.Dict({o["name"]: space_from_json(o["space"]) for o in obs}), names
