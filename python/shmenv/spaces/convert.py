"""Gymnasium spaces as the engine's spec (canonical JSON) and back, and the numpy dtype
each space is stored in. Workers use :func:`space_to_json`, the trainer the rest."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from shmenv import _shmenv

DTYPES: dict[str, np.dtype[Any]] = dict(_shmenv.dtypes())
"""The engine's dtype names (its ``DType``, from the extension: one table) and their numpy
dtypes: every dtype a Gymnasium ``Box`` takes."""

DTYPE_NAMES = {np.dtype(t).name: name for name, t in DTYPES.items()}

VARIABLE_SIZE = ("Text", "Sequence", "Graph", "OneOf")
"""Gymnasium's spaces whose values have no fixed size: shared-memory rows cannot hold them."""


def _bound(v: Any) -> float:
    if isinstance(v, str):
        return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[v]
    return float(v)


BOUND_CHUNK = 1 << 20
"""Per-element Box bounds are converted this many elements at a time: the whole bound is
never held as float64 (8 bytes an element), only in the Box's dtype."""


def _in_dtype(b: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float64 bounds as values of ``dtype``: integers exact, a bound at or past the type's
    limit (infinite, or a 64-bit limit that float64 rounds up) the limit itself; floats
    rounded to the dtype (a float16 bound past 65504 is infinite, as the engine stores it)."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        out = np.empty(b.shape, dtype=dtype)
        top, bottom = b >= float(info.max), b <= float(info.min)
        out[top], out[bottom] = info.max, info.min
        inside = ~(top | bottom)
        out[inside] = b[inside].astype(dtype)
        return out
    with np.errstate(over="ignore"):
        return b.astype(dtype)


def _python_scalar(x: np.ndarray) -> int | float:
    """A one-element bound as the Python number Gymnasium's ``Box`` takes as a scalar bound
    (an int for bool and integer dtypes, exact even for 64-bit limits)."""
    x = np.asarray(x).reshape(-1)[0]
    return int(x) if x.dtype.kind in "biu" else float(x)


def _scalar_bound(v: Any, dtype: np.dtype) -> int | float:
    """A spec bound (a number, or "inf"/"-inf"/"nan") as a scalar bound of ``dtype``."""
    return _python_scalar(_in_dtype(np.array([_bound(v)], dtype=np.float64), dtype))


def _bound_array(values: list, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A Box bound of the spec (one value for every element, or one per element in
    row-major order) as an array of ``dtype`` and ``shape``, built :data:`BOUND_CHUNK`
    elements at a time (its memory is the result's, plus one chunk)."""
    if len(values) == 1:
        return np.full(shape, _scalar_bound(values[0], dtype), dtype=dtype)
    out = np.empty(len(values), dtype=dtype)
    for start in range(0, len(values), BOUND_CHUNK):
        chunk = np.array([_bound(v) for v in values[start : start + BOUND_CHUNK]], dtype=np.float64)
        out[start : start + len(chunk)] = _in_dtype(chunk, dtype)
    return out.reshape(shape)


def _per_entry(values: list, dtype, shape: tuple) -> np.ndarray:
    """One value for every entry, or one per entry (row-major), as an array of ``shape``."""
    a = np.array(values, dtype=dtype)
    return np.full(shape, a[0], dtype=dtype) if a.size == 1 else a.reshape(shape)


class UniformBox(spaces.Box):
    """A Gymnasium ``Box`` whose elements all share one lower and one upper bound (an
    image's 0..255): ``low``, ``high``, ``bounded_below`` and ``bounded_above`` are
    read-only broadcast views of one value each, so building it (and batching it, see
    :func:`_batch_uniform_box`) costs the same for a 4-element or a 1 GiB observation,
    where a plain ``Box`` holds four arrays of the observation's shape. It compares,
    samples, checks and prints as the plain ``Box`` of the same bounds; it pickles as that
    plain ``Box`` (which then holds full arrays), so that loading a pickled space (an SB3
    model) needs Gymnasium only; ``copy.deepcopy`` keeps it a ``UniformBox``."""

    def __init__(self, low: int | float, high: int | float, shape: tuple[int, ...], dtype: Any, seed: Any = None):
        # Gymnasium checks and casts the scalar bounds (shape ()), then they are broadcast.
        super().__init__(low, high, shape=(), dtype=dtype, seed=seed)
        self._scalars = (_python_scalar(self.low), _python_scalar(self.high))
        self.low_repr, self.high_repr = str(self.low[()]), str(self.high[()])
        self._shape = tuple(int(d) for d in shape)
        for name in ("low", "high", "bounded_below", "bounded_above"):
            setattr(self, name, np.broadcast_to(getattr(self, name), self._shape))
        if 0 in self._shape:  # no elements: Gymnasium prints the empty arrays
            self.low_repr = self.high_repr = None

    def is_bounded(self, manner: str = "both") -> bool:
        """As ``Box.is_bounded`` (``"both"``, ``"below"`` or ``"above"``), from the two
        scalar bounds instead of a pass over every element."""
        if manner not in ("both", "below", "above"):
            raise ValueError(f"manner is not in {{'below', 'above', 'both'}}, actual value: {manner}")
        if 0 in self._shape:
            return super().is_bounded(manner)
        below, above = bool(self.bounded_below.flat[0]), bool(self.bounded_above.flat[0])
        return {"both": below and above, "below": below, "above": above}[manner]

    def __reduce__(self) -> tuple:
        return spaces.Box, (*self._scalars, self._shape, self.dtype), {"_np_random": self._np_random}

    def __deepcopy__(self, memo: dict) -> "UniformBox":
        return UniformBox(*self._scalars, self._shape, self.dtype, seed=copy.deepcopy(self._np_random, memo))


@batch_space.register(UniformBox)
def _batch_uniform_box(space: UniformBox, n: int = 1) -> UniformBox:
    """``gymnasium.vector.utils.batch_space`` of a :class:`UniformBox`: the same bounds over
    ``(n, *shape)``, still two scalars (Gymnasium's own tiles both bounds ``n`` times)."""
    return UniformBox(*space._scalars, (n, *space.shape), space.dtype, seed=copy.deepcopy(space.np_random))


def _box_from_json(s: dict) -> spaces.Box:
    """A Box of the spec in its own dtype: a :class:`UniformBox` when each bound is one
    value, else a plain ``Box`` whose bounds never pass through a whole float64 array."""
    dtype = np.dtype(DTYPES[s["dtype"]])
    shape = tuple(int(d) for d in s["shape"])
    low, high = (b if isinstance(b, list) else [b] for b in (s["low"], s["high"]))
    if len(low) == 1 and len(high) == 1:
        return UniformBox(_scalar_bound(low[0], dtype), _scalar_bound(high[0], dtype), shape, dtype)
    return spaces.Box(low=_bound_array(low, dtype, shape), high=_bound_array(high, dtype, shape), dtype=dtype)


def space_from_json(s: dict) -> spaces.Space:
    """One space of the spec."""
    kind = s["type"]
    if kind == "Box":
        return _box_from_json(s)
    if kind == "Discrete":
        # The engine's JSON always has "start"; without it, Gymnasium's own default (0).
        return spaces.Discrete(int(s["n"]), start=int(s.get("start", 0)))
    if kind == "MultiDiscrete":
        dtype = DTYPES[_given_or_engine(s, "dtype")]
        shape = tuple(_given_or_engine(s, "shape"))
        nvec, start = (_per_entry(_given_or_engine(s, key), dtype, shape) for key in ("nvec", "start"))
        return spaces.MultiDiscrete(nvec, dtype=dtype, start=start)
    if kind == "MultiBinary":
        shape = _given_or_engine(s, "shape")
        return spaces.MultiBinary(int(shape[0]) if len(shape) == 1 else [int(d) for d in shape])
    raise ValueError(f"unknown space type {kind!r} in the env spec")


def _given_or_engine(s: dict, key: str) -> Any:
    """``s[key]``; where the space's JSON leaves the key out (or gives it empty), the value
    the engine fills in (its canonical form of ``s``): the JSON form's defaults are the
    engine's (``Space`` in engine/src/spec/space.rs), never restated here. The engine's
    spec and :func:`space_to_json` write every key, so only hand-written JSON asks."""
    value = s.get(key)
    if value is None or (isinstance(value, list) and not value):
        value = json.loads(_shmenv.canonical_space(json.dumps(s)))[key]
    return value


def dtype_of(s: dict) -> np.dtype:
    """The dtype the engine stores a value of space `s` (its JSON) in."""
    kind = s["type"]
    if kind in ("Box", "MultiDiscrete"):
        return np.dtype(DTYPES[_given_or_engine(s, "dtype")])
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
    so the spec report stays small; else one value per element (row-major). Compared in
    the values' own dtype: no float64 copy of a large bound."""
    flat = np.asarray(values).reshape(-1)
    if flat.size > 0:
        first = flat[0]
        same = np.isnan(flat).all() if flat.dtype.kind == "f" and np.isnan(first) else (flat == first).all()
        if same:
            flat = flat[:1]
    return flat.tolist()


def space_to_json(space: spaces.Space, what: str) -> dict:
    """A fixed-size Gymnasium space (Box, Discrete, MultiDiscrete, MultiBinary) as the
    engine's JSON; ``what`` names it in errors (e.g. "observation 'pos'")."""
    if isinstance(space, spaces.Box):
        name = DTYPE_NAMES.get(np.dtype(space.dtype).name)
        if name is None:
            raise TypeError(f"{what}: Box dtype {space.dtype} is not supported (use one of {sorted(DTYPE_NAMES)})")
        return {
            "type": "Box",
            "dtype": name,
            "shape": list(space.shape),
            "low": [_bound_json(v) for v in _uniform(space.low)],
            "high": [_bound_json(v) for v in _uniform(space.high)],
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
            f"{what}: {space} has no fixed size (a {kind} value varies in length), so it has no engine JSON: a "
            "shared-memory row has a fixed size. make_vec/from_fns carry such spaces over the call side channel "
            "instead (shmenv.spaces.composite.side_leaves)"
        )
    raise TypeError(
        f"{what}: {kind} is not one of the engine's spaces (Box, Discrete, MultiDiscrete, MultiBinary); "
        "make_vec/from_fns carry other spaces over the call side channel (shmenv.spaces.composite.side_leaves)"
    )


def shape_only_json(s: dict) -> dict:
    """A space's JSON with its bounds widened to its dtype's range: what the envs of an
    ``observation_mode="different"`` pool share (the same shape and dtype, as Gymnasium
    requires), so that every worker reports the same spec. The trainer takes each env's
    own space from the env."""
    kind = s["type"]
    if kind == "Box":
        dtype = np.dtype(DTYPES[s["dtype"]])
        if dtype.kind == "f":
            low, high = "-inf", "inf"
        elif dtype.kind == "b":
            low, high = 0, 1
        else:
            low, high = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
        return dict(s, low=[low], high=[high])
    if kind == "Discrete":
        return {"type": "Discrete", "n": 1 << 62, "start": -(1 << 61)}
    if kind == "MultiDiscrete":
        info = np.iinfo(DTYPES[_given_or_engine(s, "dtype")])
        return dict(s, nvec=[int(info.max) // 2], start=[int(info.min) // 2])
    return s


def observation_space(spec: dict) -> tuple[spaces.Space, list[str]]:
    """The single-env observation space (a Dict when the env has several arrays, or when
    its observation space is a one-key Dict: spec ``single_key_dict``) and the array names
    in spec order."""
    obs = spec["observations"]
    names = [o["name"] for o in obs]
    if len(obs) == 1 and not spec.get("single_key_dict", False):
        return space_from_json(obs[0]["space"]), names
    return spaces.Dict({o["name"]: space_from_json(o["space"]) for o in obs}), names
