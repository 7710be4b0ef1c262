"""Composite spaces over the engine's flat arrays: nested Dict and Tuple observations, and
Dict or Tuple actions.

The engine knows fixed-size spaces only (Box, Discrete, MultiDiscrete, MultiBinary), with
several named observation arrays and one action array. So:

- **Observations**: a nested space's leaves (:func:`leaves`, depth first, Dict keys in
  the space's order, Tuple items in order) are the engine's observation arrays, named by
  their path (``"pos/0"``); the worker flattens each observation into them
  (:func:`flatten`) and the trainer rebuilds the same nesting of dicts and tuples from the
  batch's arrays (:func:`unflatten`), as ``SyncVectorEnv`` batches it.
- **Actions**: :class:`ActionPacking` packs a batch of Dict/Tuple actions into one byte
  row per env (each leaf at an 8-byte aligned offset, in its storage dtype), which the
  engine carries as a ``uint8`` Box; the worker unpacks a row into the nested action the
  env takes (leaves as ``np.int64`` or arrays, as ``SyncVectorEnv`` hands them out).
  The trainer checks every leaf with the engine's rules before packing (``ActionError``
  naming the leaf, the env and the element; the pool is unchanged).

Both sides build the same packing from the same space (the trainer gets env 0's spaces
over the call channel), so the leaf order is one function's.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np
from gymnasium import spaces

from shmenv.errors import ActionError
from shmenv.spaces.convert import dtype_of, space_to_json

Path = tuple  # of Dict keys and Tuple indices


def is_composite(space: spaces.Space) -> bool:
    """A Dict or Tuple."""
    return isinstance(space, (spaces.Dict, spaces.Tuple))


def is_nested(space: spaces.Space) -> bool:
    """An observation space that is not one array or a flat Dict of arrays (those map to
    the engine's arrays directly): a Tuple, or a Dict holding a Dict or Tuple."""
    if isinstance(space, spaces.Tuple):
        return True
    return isinstance(space, spaces.Dict) and any(is_composite(s) for s in space.spaces.values())


def leaves(space: spaces.Space, path: Path = ()) -> list[tuple[Path, spaces.Space]]:
    """The fixed-size spaces inside ``space`` with their paths, depth first."""
    if isinstance(space, spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in leaves(sub, (*path, key))]
    if isinstance(space, spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces) for leaf in leaves(sub, (*path, i))]
    return [(path, space)]


def leaf_names(space: spaces.Space) -> list[str]:
    """The engine's array names of a nested space's leaves: their paths joined by "/"
    (leaf ``i`` is ``"#i"`` when two paths would read the same)."""
    names = ["/".join(str(p) for p in path) for path, _ in leaves(space)]
    if len(set(names)) != len(names) or any(not n for n in names):
        names = [f"#{i}" for i in range(len(names))]
    return names


def leaf_json(space: spaces.Space, what: str) -> list[dict]:
    """Each leaf of ``space`` as the engine's JSON (refusing variable-size spaces, naming
    the leaf)."""
    return [space_to_json(leaf, f"{what} {'/'.join(map(str, path)) or 'space'}") for path, leaf in leaves(space)]


def flatten(space: spaces.Space, value: Any) -> list:
    """A value of ``space`` as its leaves' values, in :func:`leaves` order (worker side)."""
    if isinstance(space, spaces.Dict):
        return [v for key, sub in space.spaces.items() for v in flatten(sub, value[key])]
    if isinstance(space, spaces.Tuple):
        return [v for sub, item in zip(space.spaces, value) for v in flatten(sub, item)]
    return [value]


def unflatten(space: spaces.Space, values: Iterator) -> Any:
    """The nested dicts and tuples of ``space`` around the next values of ``values`` (a
    batch's arrays, or one row's values), as ``SyncVectorEnv`` batches them."""
    if isinstance(space, spaces.Dict):
        return {key: unflatten(sub, values) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(unflatten(sub, values) for sub in space.spaces)
    return next(values)


class ActionPacking:
    """Where each leaf of a Dict/Tuple action space lies in the packed byte row."""

    def __init__(self, space: spaces.Space):
        self.space = space
        self.parts = []  # (path, leaf space, its engine JSON text, offset, dtype, shape)
        offset = 0
        for (path, leaf), spec in zip(leaves(space), leaf_json(space, "action")):
            dtype = dtype_of(spec)
            shape = tuple(leaf.shape or ())
            self.parts.append((path, leaf, json.dumps(spec), offset, dtype, shape))
            offset += -(-int(np.prod(shape, dtype=np.int64)) * dtype.itemsize // 8) * 8
        self.row_bytes = offset

    def engine_json(self) -> dict:
        """What the engine sees: a row of bytes."""
        return {"type": "Box", "dtype": "u8", "shape": [self.row_bytes], "low": [0], "high": [255]}

    def pack(self, actions: Any, count: int, convert, check) -> np.ndarray:
        """``count`` rows of bytes from a batch of actions (nested like the space, each
        leaf an array with ``count`` rows): each leaf converted (``convert(value, count,
        leaf, dtype, shape, what)``) and checked (``check(json_text, array, count, what)``)."""
        out = np.zeros((count, self.row_bytes), dtype=np.uint8)
        for path, leaf, space_json, offset, dtype, shape in self.parts:
            what = f"action {'/'.join(map(str, path))}"
            value = actions
            try:
                for p in path:
                    value = value[p]
            except (KeyError, IndexError, TypeError):
                raise ActionError(
                    f"{what} is missing: {count} env(s) of {self.space} need a batch nested like "
                    f"{_skeleton(self.space)} (each leaf an array with {count} rows)"
                ) from None
            array = convert(value, count, leaf, dtype, shape, what)
            check(space_json, array, count, what)
            size = array.itemsize * int(np.prod(shape, dtype=np.int64))
            out[:, offset : offset + size] = array.reshape(count, -1).view(np.uint8)
        return out

    def unpack(self, row: np.ndarray) -> Any:
        """The nested action of one env from its byte row (worker side)."""
        values = []
        for _path, leaf, _json, offset, dtype, shape in self.parts:
            size = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            value = row[offset : offset + size].view(dtype).reshape(shape)
            values.append(value[()] if isinstance(leaf, spaces.Discrete) else value)
        return unflatten(self.space, iter(values))


def _skeleton(space: spaces.Space) -> str:
    """The nesting of ``space`` with its leaves elided, for messages."""
    if isinstance(space, spaces.Dict):
        return "{" + ", ".join(f"{k!r}: {_skeleton(s)}" for k, s in space.spaces.items()) + "}"
    if isinstance(space, spaces.Tuple):
        return "(" + ", ".join(_skeleton(s) for s in space.spaces) + (",)" if len(space.spaces) == 1 else ")")
    return "..."
