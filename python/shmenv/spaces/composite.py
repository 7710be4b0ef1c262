"""Composite spaces over the engine's flat arrays: nested Dict and Tuple observations, and
Dict or Tuple actions; and the parts that cannot be rows of shared memory.

The engine knows fixed-size spaces only (Box, Discrete, MultiDiscrete, MultiBinary), with
several named observation arrays and one action array. So:

- **Side leaves**: a leaf that is not one of those (``Text``, ``Sequence``, ``Graph``,
  ``OneOf``, a custom ``Space`` subclass, a Box of a dtype the engine lacks; also inside a
  Dict or Tuple) travels per step over the call side channel, pickled (as
  ``AsyncVectorEnv(shared_memory=False)`` sends it), while the fixed-size leaves of the
  same space stay in the engine's rows (:func:`side_leaves`). An observation space with no
  fixed-size leaf gets one placeholder array (:data:`PLACEHOLDER`); a pool without side
  leaves pays nothing for them.

- **Observations**: a nested space's leaves (:func:`leaves`, depth first, Dict keys in
  the space's order, Tuple items in order) are the engine's observation arrays, named by
  their path (``"pos/0"``); the worker flattens each observation into them
  (:func:`flatten`) and the trainer rebuilds the same nesting of dicts and tuples from the
  batch's arrays (:func:`unflatten`), as ``SyncVectorEnv`` batches it.
- **Actions**: :class:`ActionPacking` packs a batch of Dict/Tuple actions into one byte
  row per env (each leaf at an 8-byte aligned offset, in its storage dtype), which the
  engine carries as a ``uint8`` Box; the worker unpacks a row into the nested action the
  env takes (leaves as ``np.int64``, numpy scalars (a Box of shape ``()``) or arrays, as
  ``SyncVectorEnv`` hands them out).
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
from shmenv.spaces.convert import DTYPE_NAMES, dtype_of, space_to_json

Path = tuple  # of Dict keys and Tuple indices

PLACEHOLDER = "#side"
"""The engine array of an observation space whose every leaf is a side leaf (the engine
needs one array): one byte, always 0, dropped by the trainer."""

_PLACEHOLDER_JSON = {"type": "Box", "dtype": "u8", "shape": [], "low": [0], "high": [0]}


def is_composite(space: spaces.Space) -> bool:
    """A Dict or Tuple."""
    return isinstance(space, (spaces.Dict, spaces.Tuple))


def is_fixed(space: spaces.Space) -> bool:
    """A space whose values are rows of the engine: Box (of a dtype the engine has),
    Discrete, MultiDiscrete, MultiBinary."""
    if isinstance(space, spaces.Box):
        return np.dtype(space.dtype).name in DTYPE_NAMES
    return isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary))


def side_leaves(space: spaces.Space) -> list[int]:
    """The indices (in :func:`leaves` order) of the leaves that travel over the side
    channel: every leaf that is not :func:`is_fixed`."""
    return [i for i, (_, leaf) in enumerate(leaves(space)) if not is_fixed(leaf)]


def is_nested(space: spaces.Space) -> bool:
    """An observation space that is not one array or a flat Dict of arrays (those map to
    the engine's arrays directly): a Tuple, a Dict holding a Dict or Tuple, or a space
    with side leaves."""
    if isinstance(space, spaces.Tuple) or side_leaves(space):
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
    """The engine's array names of a nested space's fixed-size leaves: their paths joined
    by "/" (leaf ``i`` is ``"#i"`` when two paths would read the same); the
    :data:`PLACEHOLDER` when it has none."""
    side = set(side_leaves(space))
    all_names = ["/".join(str(p) for p in path) for path, _ in leaves(space)]
    if len(set(all_names)) != len(all_names) or any(not n for n in all_names):
        all_names = [f"#{i}" for i in range(len(all_names))]
    names = [n for i, n in enumerate(all_names) if i not in side]
    return names or [PLACEHOLDER]


def leaf_json(space: spaces.Space, what: str) -> list[dict]:
    """Each fixed-size leaf of ``space`` as the engine's JSON, naming the leaf in errors
    (the placeholder's when it has none)."""
    out = [
        space_to_json(leaf, f"{what} {'/'.join(map(str, path)) or 'space'}")
        for path, leaf in leaves(space)
        if is_fixed(leaf)
    ]
    return out or [dict(_PLACEHOLDER_JSON)]


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
    """Where each fixed-size leaf of a Dict/Tuple action space (or of an action space with
    side leaves) lies in the packed byte row; its side leaves go over the side channel."""

    def __init__(self, space: spaces.Space):
        self.space = space
        self.parts = []  # (path, leaf space, its engine JSON text, offset, dtype, shape)
        self.side = []  # (leaf index, path, leaf space) of the side leaves
        side = set(side_leaves(space))
        offset = 0
        for i, (path, leaf) in enumerate(leaves(space)):
            if i in side:
                self.side.append((i, path, leaf))
                continue
            spec = space_to_json(leaf, f"action {'/'.join(map(str, path)) or 'space'}")
            dtype = dtype_of(spec)
            shape = tuple(leaf.shape or ())
            self.parts.append((path, leaf, json.dumps(spec), offset, dtype, shape, i))
            offset += -(-int(np.prod(shape, dtype=np.int64)) * dtype.itemsize // 8) * 8
        self.row_bytes = offset or 8  # the engine needs a row: 8 unused bytes when every leaf is a side leaf
        self._batched: dict[int, list] = {}  # batch size -> the side leaves' batched spaces
        self.leaf_count = len(self.parts) + len(self.side)

    def engine_json(self) -> dict:
        """What the engine sees: a row of bytes."""
        return {"type": "Box", "dtype": "u8", "shape": [self.row_bytes], "low": [0], "high": [255]}

    def pack(self, actions: Any, count: int, convert, check) -> np.ndarray:
        """``count`` rows of bytes from a batch of actions (nested like the space, each
        leaf an array with ``count`` rows): each leaf converted (``convert(value, count,
        leaf, dtype, shape, what)``) and checked (``check(json_text, array, count, what)``)."""
        out = np.zeros((count, self.row_bytes), dtype=np.uint8)
        for path, leaf, space_json, offset, dtype, shape, _ in self.parts:
            what = f"action {'/'.join(map(str, path))}"
            array = convert(self._leaf(actions, path, count), count, leaf, dtype, shape, what)
            check(space_json, array, count, what)
            size = array.itemsize * int(np.prod(shape, dtype=np.int64))
            out[:, offset : offset + size] = array.reshape(count, -1).view(np.uint8)
        return out

    def _leaf(self, actions: Any, path: tuple, count: int) -> Any:
        """The batch of the leaf at ``path`` in a batch of actions."""
        value = actions
        try:
            for p in path:
                value = value[p]
        except (KeyError, IndexError, TypeError):
            raise ActionError(
                f"action {'/'.join(map(str, path))} is missing: {count} env(s) of {self.space} need a batch nested "
                f"like {_skeleton(self.space)} (each leaf an array with {count} rows)"
            ) from None
        return value

    def side_values(self, actions: Any, count: int) -> list[list]:
        """Each env's values of the side leaves (one list per env, in leaf order), split
        from the batch as ``SyncVectorEnv`` splits it (``iterate`` over the leaf's batched
        space)."""
        from gymnasium.vector.utils import batch_space, iterate

        batched = self._batched.get(count)
        if batched is None:  # batch_space deep-copies the leaf: once per batch size, not per step
            batched = self._batched[count] = [batch_space(leaf, count) for _, _, leaf in self.side]
        per_env: list[list] = [[] for _ in range(count)]
        for (_, path, _leaf), space in zip(self.side, batched):
            items = list(iterate(space, self._leaf(actions, path, count)))
            if len(items) != count:
                raise ActionError(
                    f"action {'/'.join(map(str, path)) or 'space'} has {len(items)} values; {count} env(s) of "
                    f"{self.space} need one each"
                )
            for e, item in enumerate(items):
                per_env[e].append(item)
        return per_env

    def unpack(self, row: np.ndarray, side: list | None = None) -> Any:
        """The nested action of one env from its byte row and its side leaves' values
        (worker side)."""
        values: list[Any] = [None] * self.leaf_count
        for _path, leaf, _json, offset, dtype, shape, i in self.parts:
            size = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            value = row[offset : offset + size].view(dtype).reshape(shape)
            values[i] = value[()] if isinstance(leaf, spaces.Discrete) or not shape else value
        for (i, _, _), value in zip(self.side, side or ()):
            values[i] = value
        return unflatten(self.space, iter(values))


def _skeleton(space: spaces.Space) -> str:
    """The nesting of ``space`` with its leaves elided, for messages."""
    if isinstance(space, spaces.Dict):
        return "{" + ", ".join(f"{k!r}: {_skeleton(s)}" for k, s in space.spaces.items()) + "}"
    if isinstance(space, spaces.Tuple):
        return "(" + ", ".join(_skeleton(s) for s in space.spaces) + (",)" if len(space.spaces) == 1 else ")")
    return "..."
