"""The trainer's side of the spaces: how the engine's arrays become observations of the
env's space (one array, a flat dict, or nested dicts and tuples) and how a batch of
actions becomes the engine's action array (checked, converted, packed when composite)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from shmenv import _shmenv
from shmenv.errors import ActionError, ActionTypeError, BuildError
from shmenv.spaces import composite
from shmenv.spaces.convert import dtype_of, observation_space, space_from_json


class Assembly:
    """The single-env spaces of a pool and the conversions between them and the engine's
    arrays. ``env_spaces``: env 0's own ``(observation_space, action_space)`` (hosted
    Python envs, over the call channel), which say whether they nest; None for native envs."""

    def __init__(self, spec: dict, env_spaces: tuple[spaces.Space, spaces.Space] | None):
        # Arrays the spec marks "info" (a native env's lives) go to infos, not observations.
        flags = [bool(o.get("info", False)) for o in spec["observations"]]
        self._obs_index = [i for i, info in enumerate(flags) if not info]
        self._info_index = [i for i, info in enumerate(flags) if info]
        self.info_names = [spec["observations"][i]["name"] for i in self._info_index]
        if self.info_names:
            spec = dict(spec, observations=[spec["observations"][i] for i in self._obs_index])
        self.single_observation_space, self.obs_names = observation_space(spec)
        self.single_action_space = space_from_json(spec["action"])
        self.nested_obs = False
        self.packing: composite.ActionPacking | None = None
        self.side_obs: list[int] = []  # leaf indices of the observation's side leaves
        env_obs, env_action = env_spaces if env_spaces is not None else (None, None)
        if env_obs is not None and composite.is_nested(env_obs):
            if composite.leaf_names(env_obs) != self.obs_names:
                raise BuildError(
                    f"the workers report the observation arrays {self.obs_names}, but env 0's observation space "
                    f"{env_obs} has the leaves {composite.leaf_names(env_obs)}: its space changed after it was built"
                )
            self.single_observation_space, self.nested_obs = env_obs, True
            self.side_obs = composite.side_leaves(env_obs)
        self._obs_leaves = composite.leaves(self.single_observation_space)
        if env_action is not None and (composite.is_composite(env_action) or composite.side_leaves(env_action)):
            packing = composite.ActionPacking(env_action)
            if spec["action"].get("shape") != [packing.row_bytes]:
                raise BuildError(
                    f"the workers report the action space {self.single_action_space}, but env 0's action space "
                    f"{env_action} packs into {packing.row_bytes} bytes: its space changed after it was built"
                )
            self.single_action_space, self.packing = env_action, packing
        self.dict_obs = isinstance(self.single_observation_space, spaces.Dict) and not self.nested_obs
        self.action_dtype = dtype_of(spec["action"])
        self.action_shape = tuple(self.single_action_space.shape or ())
        self._bool_actions = self.action_dtype == np.bool_
        self._action_form = _shmenv.ActionForm(self.action_dtype, self.action_shape)

    @property
    def as_engine_arrays(self) -> bool:
        """Whether a batch's observation is the engine's one array as it is and actions
        need no packing: what the extension's one-call step assumes."""
        single = not (self.info_names or self.side_obs or self.nested_obs or self.dict_obs)
        return single and self.packing is None and len(self.obs_names) == 1

    def observations(self, arrays: tuple, side: list | None = None) -> Any:
        """A batch's observation arrays (one per engine array) as the space nests them;
        ``side``: with side leaves, each row's side values (batched as ``SyncVectorEnv``
        batches them: ``concatenate`` into ``create_empty_array``)."""
        if self.info_names:
            arrays = tuple(arrays[i] for i in self._obs_index)
        if self.side_obs:
            from gymnasium.vector.utils import concatenate, create_empty_array

            assert side is not None, "a batch of an observation with side leaves comes with their values (side=)"
            batched = []
            for k, i in enumerate(self.side_obs):
                leaf = self._obs_leaves[i][1]
                items = [row[k] for row in side]
                batched.append(concatenate(leaf, items, create_empty_array(leaf, len(items))))
            return self._merge_side(arrays, batched)
        if self.nested_obs:
            return composite.unflatten(self.single_observation_space, iter(arrays))
        return dict(zip(self.obs_names, arrays)) if self.dict_obs else arrays[0]

    def _merge_side(self, arrays: tuple, side_values: list) -> Any:
        """The observation from the engine arrays of the fixed-size leaves and the values
        of the side leaves (batches, or one env's values)."""
        fixed = iter(arrays if self.obs_names != [composite.PLACEHOLDER] else ())
        side = iter(side_values)
        is_side = set(self.side_obs)
        values = [next(side) if i in is_side else next(fixed) for i in range(len(self._obs_leaves))]
        return composite.unflatten(self.single_observation_space, iter(values))

    def info_arrays(self, arrays: tuple) -> dict[str, np.ndarray]:
        """The engine arrays the spec marks ``info``, by name (none for most envs)."""
        return {name: arrays[i] for name, i in zip(self.info_names, self._info_index)}

    def final_observation(self, arrays: tuple, row: int, side: list | None = None) -> Any:
        """Row ``row`` of a batch's final-observation arrays, copied, as the space nests it
        (``side``: that row's side values, with side leaves). A ``Discrete`` value is an
        int, as Gymnasium's envs return it (``SyncVectorEnv`` keeps the env's value)."""
        if self.info_names:
            arrays = tuple(arrays[i] for i in self._obs_index)
        copied = tuple(
            int(a[row]) if isinstance(space, spaces.Discrete) else np.array(a[row])
            for a, space in zip(arrays, self._array_spaces())
        )
        if self.side_obs:
            assert side is not None, "a final observation with side leaves comes with their values (side=)"
            return self._merge_side(copied, side)
        if self.nested_obs:
            return composite.unflatten(self.single_observation_space, iter(copied))
        return dict(zip(self.obs_names, copied)) if self.dict_obs else copied[0]

    def _array_spaces(self) -> list[spaces.Space]:
        """The space of each observation array of the engine (the placeholder's: a Box)."""
        if self.nested_obs:
            fixed = [leaf for i, (_, leaf) in enumerate(self._obs_leaves) if i not in set(self.side_obs)]
            return fixed or [spaces.Box(0, 0, (), np.uint8)]
        if self.dict_obs:
            space = self.single_observation_space
            assert isinstance(space, spaces.Dict), "dict_obs is set for a Dict observation space only"
            return list(space.spaces.values())
        return [self.single_observation_space]

    def actions(self, actions: Any, count: int) -> np.ndarray:
        """``count`` envs' actions as the engine's array: converted to the space's dtype
        and shape (integral floats are accepted for integer spaces, as Gymnasium's spaces
        take them); a Dict/Tuple action checked leaf by leaf and packed into byte rows."""
        if self.packing is not None:
            refuse_extra_parts(self.single_action_space, actions)
            return self.packing.pack(actions, count, as_action_array, _check)
        a = actions
        # The common case first (an array of the action dtype, shape and layout already),
        # checked at a fraction of the general path's cost, by the extension's rule
        # (`one_call.rs`), the one its one-call path applies too.
        if not self._action_form.takes(a, count):
            a = as_action_array(
                actions, count, self.single_action_space, self.action_dtype, self.action_shape, "actions"
            )
        # Bool actions go as their bytes: the engine never reads them as Rust bools.
        return a.view(np.uint8) if self._bool_actions else a


def refuse_extra_parts(space: spaces.Space, actions: Any, path: tuple = ()) -> None:
    """Refuses a key that a Dict action space does not have, or an item past a Tuple action
    space's length, anywhere in a batch of composite actions: packing takes the space's
    parts only, so an extra part would be dropped unseen (a misspelt key, a stale layout).
    Missing parts are the packing's to report."""
    what = f"action {'/'.join(map(str, path))} has" if path else "the actions have"
    its = "its space" if path else "the action space"
    if isinstance(space, spaces.Dict) and isinstance(actions, Mapping):
        extra = [k for k in actions if k not in space.spaces]
        if extra:
            raise ActionError(
                f"{what} the key {extra[0]!r}, which {its} {space} does not have: its keys are "
                f"{list(space.spaces)}; pass a dict of exactly those keys"
            )
        for key, sub in space.spaces.items():
            if key in actions:
                refuse_extra_parts(sub, actions[key], (*path, key))
    elif isinstance(space, spaces.Tuple) and not isinstance(actions, (str, bytes, Mapping)):
        try:
            given = len(actions)
        except TypeError:  # not a sequence (a number, a 0-d array): the packing says what is missing
            return
        length = len(space.spaces)
        if given > length:
            raise ActionError(
                f"{what} {given} items, but {its} {space} has {length} (indices 0..{length - 1}): "
                f"item {length} is extra; pass a tuple of {length} batches, one per part"
            )
        for i, sub in enumerate(space.spaces[:given]):
            refuse_extra_parts(sub, actions[i], (*path, i))


def _check(space_json: str, array: np.ndarray, count: int, what: str) -> None:
    """A leaf's actions checked by the engine's rules (``ActionError`` naming ``what``)."""
    _shmenv.check_actions(space_json, array, count, what)


def as_action_array(
    actions: Any, count: int, space: spaces.Space, dtype: np.dtype, shape: tuple, what: str
) -> np.ndarray:
    """``actions`` (a batch of ``count`` values of ``space``) as a C-contiguous array of
    ``dtype`` and shape ``(count, *shape)``, or an ``ActionError`` saying what is wrong."""
    a = np.asarray(actions)
    want = (count, *shape)
    if a.ndim == 0:
        raise ActionTypeError(
            f"{what} must be a batch, one per env: an array of shape {want} for {count} env(s) of {space}; got the "
            f"single value {actions!r}"
        )
    if a.shape != want:
        raise ActionError(f"{what} have shape {a.shape}; {count} env(s) of {space} need an array of shape {want}")
    if a.dtype != dtype:
        if a.dtype.kind not in "biuf":
            raise ActionError(f"{what} must be numbers for {space}, got dtype {a.dtype}")
        if dtype.kind in "iub" and a.dtype.kind != "b":
            # Like Gymnasium's spaces: an integer space takes integral values only, and a
            # value must fit the dtype before the cast (which would wrap it).
            bad = ~np.isfinite(a) | (a != np.round(a)) if a.dtype.kind == "f" else np.zeros(a.shape, dtype=bool)
            low, high = (0, 1) if dtype.kind == "b" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
            with np.errstate(invalid="ignore"):
                bad |= (a < low) | (a > high)
            if np.any(bad):
                expected = "0 or 1 (False or True)" if dtype.kind == "b" else f"integers in [{low}, {high}] ({dtype})"
                raise ActionError(
                    f"{what} must be {expected} for {space}, got {a[bad].flat[0]!r} "
                    f"(at index {tuple(int(i) for i in np.argwhere(bad)[0])})"
                )
        a = a.astype(dtype)
    return np.require(a, requirements=["C", "A"])  # a misaligned array is copied too
