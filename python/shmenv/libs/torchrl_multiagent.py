"""``MultiAgentShmEnv``: multi-agent envs in shmenv's workers as a TorchRL ``EnvBase`` with
TorchRL's multi-agent layout, the one ``PettingZooWrapper`` builds, over a batch of
``num_envs`` envs:

>>> from shmenv.libs.torchrl_multiagent import MultiAgentShmEnv
>>> env = MultiAgentShmEnv("mpe2.simple_spread_v3", 4, num_workers=2, seed=0)
>>> env.group_map
{'agent': ['agent_0', 'agent_1', 'agent_2']}
>>> td = env.rollout(10)         # td["next", "agent", "reward"].shape == (4, 10, 3, 1)
>>> env.close()

For each group ``g`` (``group_map``: TorchRL's default grouping by name, as
``PettingZooWrapper`` does for parallel envs; or ``MarlGroupMapType``, or a dict):
``(g, "observation")`` ``[num_envs, A, ...]`` (a per-agent ``Dict`` observation's
``"action_mask"`` moves to ``(g, "action_mask")``, as TorchRL moves it), ``(g, "action")``
(categorical by default, one-hot with ``categorical_actions=False``), ``(g, "reward")``,
``(g, "done")``, ``(g, "terminated")``, ``(g, "truncated")`` ``[num_envs, A, 1]``, and with
``use_mask=True`` ``(g, "mask")`` ``[num_envs, A]`` (the agent is in the env). The root
``"done"``/``"terminated"``/``"truncated"`` ``[num_envs, 1]`` end an env's episode: when
every agent is done (``done_on_any=True``: when any is, ``PettingZooWrapper``'s parallel
default). An agent that has left stays done (its flags as it ended), with zero
observations and rewards, as ``PettingZooWrapper`` reports dead agents.

TorchRL resets ended envs itself (``"_reset"`` masks). The pool runs with
``autoreset_mode="same_step"``: it resets an env in the step where its episode ends; that
step returns the ended episode's final observations, rewards, flags and ``active`` mask (as
a pool without autoreset returns them), and the next episode's first observations and
``active`` mask are kept to answer TorchRL's reset of that env, so a ``Collector`` (or
``rollout``) makes one pool call per batched step. In ``step_and_maybe_reset`` (what a
``Collector`` calls) the kept rows are folded into ``step_mdp``'s tensordict here, as
TorchRL's ``maybe_reset`` folds a reset (the reset rows take the kept observations, their
done flags are cleared and their other entries zeroed; a reset of every env leaves the
other entries). A kept observation answers one reset; a
reset with a ``seed`` or ``options``, or of an env the pool did not just reset, is a
(partial) reset of the pool. With ``autoreset_mode="disabled"`` every ``"_reset"`` mask
becomes a partial reset of the pool: the same tensors, one more pool call in each step
where an env's episode ended. ``set_seed(s)`` seeds env ``i`` with ``s + i``.

TorchRL's specs count discrete actions from 0: for a ``Discrete`` or ``MultiDiscrete``
action space with a ``start`` (dmlab2d's ``turn`` is -1..1) the env gets the TorchRL
action plus ``start`` (``PettingZooWrapper`` passes it unchanged).

After ``close()`` (a ``Collector`` closes its env after ``total_frames``) the next reset
builds new workers from the construction arguments; the env pickles by those arguments
(cloudpickled; pickling closes its own workers), and in a forked process it builds its own
workers at its first reset or step: instances work in TorchRL's multi-process collectors
under spawn and fork.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import cloudpickle
import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict, TensorDictBase
from torchrl.data.tensor_specs import Categorical, Composite, OneHot, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.libs.gym import _gym_to_torchrl_spec_transform
from torchrl.envs.utils import MarlGroupMapType

from shmenv.errors import UsageError
from shmenv.libs.torchrl_parts import Episodes, step_to_ended_rows, with_final_rows
from shmenv.multiagent.vector import MultiAgentVectorEnv, make_vec

__all__ = ["MultiAgentShmEnv"]

_FLAGS = ("done", "terminated", "truncated")


def _grouping(group_map: Any) -> Any:
    """TorchRL's group map argument as shmenv.multiagent's (resolved in the workers, where
    the agents are known)."""
    if group_map is None:
        return "by_name"
    if isinstance(group_map, MarlGroupMapType):
        return {MarlGroupMapType.ALL_IN_ONE_GROUP: "all", MarlGroupMapType.ONE_GROUP_PER_AGENT: "one_per_agent"}[
            group_map
        ]
    return group_map


def _mode_name(mode: Any) -> str:
    """``"same_step"``, ``"disabled"`` or ``"next_step"`` for an ``AutoresetMode``, its
    name or its value (``"SameStep"``); anything else as given."""
    from gymnasium.vector import AutoresetMode

    if isinstance(mode, str) and mode in {m.value for m in AutoresetMode}:
        mode = AutoresetMode(mode)
    name = getattr(mode, "name", mode)
    return name.lower() if isinstance(name, str) else repr(mode)


def _bool_spec(shape: tuple, device: Any) -> Categorical:
    return Categorical(2, shape=torch.Size(shape), dtype=torch.bool, device=device)


class MultiAgentShmEnv(EnvBase):
    """A TorchRL env over ``num_envs`` multi-agent envs in shmenv workers; see the module
    docstring. ``env`` and the keywords are :func:`shmenv.multiagent.make_vec`'s
    (``num_workers``, ``seed``, ``config``, ...); ``autoreset_mode`` is ``"same_step"``
    (the default: one pool call per step) or ``"disabled"`` (each ``"_reset"`` a partial
    reset of the pool)."""

    def __init__(
        self,
        env: Any,
        num_envs: int,
        *,
        group_map: Any = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        done_on_any: bool = False,
        device: Any = None,
        **make_vec_options: Any,
    ):
        mode = _mode_name(make_vec_options.pop("autoreset_mode", "same_step"))
        if mode not in ("same_step", "disabled"):
            raise ValueError(
                "MultiAgentShmEnv runs its pool with autoreset_mode='same_step' (the default: ended envs are "
                "reset in the step, and TorchRL's '_reset' of them is answered without a pool call) or 'disabled' "
                f"(each '_reset' is a partial reset of the pool); got autoreset_mode={mode!r}"
            )
        if make_vec_options.get("batch_size") not in (None, num_envs):
            raise ValueError("MultiAgentShmEnv steps every env together: leave batch_size unset")
        self._build = (
            env,
            num_envs,
            dict(make_vec_options, group_map=group_map, done_on_any=done_on_any, autoreset_mode=mode),
        )
        self._wrapper_options = dict(use_mask=use_mask, categorical_actions=categorical_actions)
        self._envs: MultiAgentVectorEnv = self._make_envs()
        try:
            super().__init__(device=device, batch_size=torch.Size([num_envs]), allow_done_after_reset=True)
            self.group_map = {g: list(m) for g, m in self._envs.groups.items()}
            self.use_mask = bool(use_mask)
            self.categorical_actions = bool(categorical_actions)
            self._left = {g: np.zeros((num_envs, len(m)), np.int8) for g, m in self.group_map.items()}
            # Per-step row state in a plain object (EnvBase's __setattr__ is costly per step):
            # the envs TorchRL last saw done, and under same-step autoreset the envs the pool
            # reset in the last step with their kept first observations (reset_obs).
            self._ep = Episodes()
            self._ep.forget(num_envs, None)
            self._folds = mode == "same_step"
            self._make_specs()
        except BaseException:
            self._envs.close()
            raise
        self.is_closed = False

    def _make_envs(self) -> MultiAgentVectorEnv:
        """The vector env, built from the construction arguments (at construction, and
        again after a close, in a forked process or where the env is unpickled)."""
        env, num_envs, options = self._build
        options = dict(options)
        group_map = _grouping(options.pop("group_map"))
        self._pid = os.getpid()
        return make_vec(env, num_envs, group_map=group_map, **options)

    def _rebuild_envs(self, reset: bool) -> None:
        """Builds the vector env again: after ``close()`` (a ``Collector`` closes its env
        once ``total_frames`` are collected; ``PettingZooWrapper`` and ``SerialEnv`` go on
        when used again), or in a forked process (TorchRL's multi-process collectors under
        ``fork`` hand env instances over that way), where the parent's workers cannot
        serve: the parent's vector env is left alone there."""
        self._envs = self._make_envs()
        self.is_closed = False
        for left in self._left.values():
            left[:] = 0
        self._ep.forget(self.batch_size[0], None)
        if reset:
            self._envs.reset()

    # ---------------------------------------------------------------- specs

    def _make_specs(self) -> None:
        n = self.batch_size[0]
        observation, action, reward, done = {}, {}, {}, {}
        self._has_action_mask: dict[str, bool] = {}
        for group, members in self.group_map.items():
            a = len(members)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                obs = _gym_to_torchrl_spec_transform(self._envs.agent_observation_spaces[group], device=self.device)
                act = _gym_to_torchrl_spec_transform(
                    self._envs.agent_action_spaces[group],
                    device=self.device,
                    categorical_action_encoding=self.categorical_actions,
                )
            # Stacked specs (TorchRL's torch.stack of specs; typed as tensors by torch's stubs).
            group_obs: Any = torch.stack([Composite({"observation": obs}) for _ in members], 0)  # type: ignore[arg-type]
            group_act: Any = torch.stack([Composite({"action": act}) for _ in members], 0)  # type: ignore[arg-type]
            inner = group_obs["observation"]
            self._has_action_mask[group] = isinstance(inner, Composite) and "action_mask" in inner.keys()
            if self._has_action_mask[group]:
                del inner["action_mask"]
                mask_shape = (
                    group_act["action"].shape
                    if not self.categorical_actions
                    else (group_act["action"].to_one_hot_spec().shape)
                )
                group_obs["action_mask"] = _bool_spec(mask_shape, self.device)
            if self.use_mask:
                group_obs["mask"] = _bool_spec((a,), self.device)
            observation[group] = group_obs.expand(n, *group_obs.shape)
            action[group] = group_act.expand(n, *group_act.shape)
            reward[group] = Composite(
                {"reward": Unbounded(shape=torch.Size((n, a, 1)), device=self.device, dtype=torch.float32)},
                shape=(n, a),
            )
            flags = {k: _bool_spec((n, a, 1), self.device) for k in ("done", "terminated", "truncated")}
            done[group] = Composite(flags, shape=(n, a))
        # TorchRL's specs count discrete actions from 0; a space with a start is shifted back.
        self._action_start = {}
        for group, space in self._envs.agent_action_spaces.items():
            start = getattr(space, "start", None)
            if start is not None and np.any(start != 0) and not isinstance(space, spaces.Box):
                self._action_start[group] = np.asarray(start)
        root = {k: _bool_spec((n, 1), self.device) for k in ("done", "terminated", "truncated")}
        self.action_spec = Composite(action, shape=(n,))
        self.observation_spec = Composite(observation, shape=(n,))
        self.reward_spec = Composite(reward, shape=(n,))
        self.done_spec = Composite({**root, **done}, shape=(n,))

    # ---------------------------------------------------------------- results

    def _observations(self, obs: dict, active: dict) -> dict:
        """The groups' observation entries (observation, action_mask, mask) as tensors."""
        out: dict[str, Any] = {}
        for group in self.group_map:
            spec: Any = self.observation_spec[group]
            value = obs[group]
            entry: dict[str, Any] = {}
            if self._has_action_mask[group]:
                value = dict(value)
                entry["action_mask"] = torch.as_tensor(np.asarray(value.pop("action_mask")).astype(bool))
            entry["observation"] = spec["observation"].encode(value, ignore_device=True)
            if self.use_mask:
                entry["mask"] = torch.from_numpy(np.asarray(active[group], bool))
            out[group] = entry
        return out

    def _flags(self, group: str, terms: np.ndarray, truncs: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """A group's per-agent flags, TorchRL's way: an agent that has left stays done."""
        left = self._left[group]
        left[(left == 0) & terms] = 1
        left[(left == 0) & truncs] = 2
        return torch.from_numpy(left == 1).unsqueeze(-1), torch.from_numpy(left == 2).unsqueeze(-1)

    def _dicts(self, value: Any) -> dict:
        return value if len(self.group_map) > 1 else {next(iter(self.group_map)): value}

    # ---------------------------------------------------------------- EnvBase

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._pid != os.getpid():
            self._rebuild_envs(reset=True)
        partial = tensordict.get("_step", None)
        if partial is not None and not bool(partial.all()):
            raise UsageError(
                "MultiAgentShmEnv steps every env at once: a '_step' mask with False entries is "
                "refused; reset the envs you do not want with a '_reset' mask"
            )
        ep = self._ep
        if np.count_nonzero(ep.done_seen):  # count_nonzero: cheaper than any() per step
            self._restart_stale()
        actions = {}
        action_spec: Any = self.action_spec
        for group in self.group_map:
            value = tensordict.get((group, "action"))
            spec = action_spec[group, "action"]
            array = value.argmax(-1).cpu().numpy() if type(spec) is OneHot else spec.to_numpy(value, safe=False)
            start = self._action_start.get(group)
            actions[group] = array if start is None else array + start
        one = len(self.group_map) == 1
        obs, rewards, terms, truncs, infos = self._envs.step(actions[next(iter(actions))] if one else actions)
        obs, rewards, terms, truncs = (self._dicts(v) for v in (obs, rewards, terms, truncs))
        active = self._dicts(infos["active"])
        n = self.batch_size[0]
        env_term = np.asarray(infos["env_terminated"], dtype=bool).reshape(n)
        env_trunc = np.asarray(infos["env_truncated"], dtype=bool).reshape(n)
        ended = env_term | env_trunc
        if self._folds:
            ep.fresh = ended
            if np.count_nonzero(ended):
                obs, active = self._final_rows(obs, active, infos, ended)
        source = self._observations(obs, active)
        for group in self.group_map:
            term, trunc = self._flags(group, np.asarray(terms[group]), np.asarray(truncs[group]))
            source[group].update(
                reward=torch.from_numpy(np.asarray(rewards[group], np.float32)).unsqueeze(-1),
                terminated=term,
                truncated=trunc,
                done=term | trunc,
            )
        # Copies: TorchRL may write into the tensors, and ep keeps its own.
        ep.ended = ep.done_seen = ended
        env_term_t = torch.from_numpy(env_term.copy()).view(n, 1)
        env_trunc_t = torch.from_numpy(env_trunc.copy()).view(n, 1)
        source.update(terminated=env_term_t, truncated=env_trunc_t, done=env_term_t | env_trunc_t)
        return self._tensordict(source)

    def _final_rows(self, obs: dict, active: dict, infos: dict, ended: np.ndarray) -> tuple[dict, dict]:
        """Same-step autoreset: the rows of the envs that ended hold their next episode's
        first observations and ``active`` flags. Those are kept (they answer TorchRL's reset
        of the envs) and the step returns the ended episode's final observations and
        ``active`` flags in their place, as a pool without autoreset returns them."""
        self._ep.reset_obs = self._observations(obs, active)
        rows = np.flatnonzero(ended)
        final = infos["final_obs"]
        one = len(self.group_map) == 1
        finals = {g: [final[i] if one else final[i][g] for i in rows] for g in self.group_map}
        return (
            {g: with_final_rows(obs[g], finals[g], rows) for g in self.group_map},
            self._dicts(infos["final_active"]),
        )

    def _step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """TorchRL's ``step``, ``step_mdp`` and ``maybe_reset``, the reset answered from the
        rows the step kept (same-step autoreset) and folded in by :meth:`_fold_kept`: the
        same tensordicts, one pool call, without TorchRL's reset machinery. Other cases
        (autoreset disabled, a ``"_step"`` mask, post-step_mdp hooks) take TorchRL's path."""
        stepped, tensordict_, rows = step_to_ended_rows(self, tensordict)
        if stepped is None:
            return super()._step_and_maybe_reset(tensordict)
        tensordict = stepped
        if rows is None:
            return tensordict, tensordict_
        mask = rows.cpu().numpy()
        if (mask & ~self._ep.fresh).any() or not self._fold_kept(tensordict_, rows):
            return tensordict, self.maybe_reset(tensordict_)
        for left in self._left.values():
            left[mask] = 0
        self._ep.forget(self.batch_size[0], mask)
        return tensordict, tensordict_

    def _fold_kept(self, tensordict_: TensorDictBase, rows: torch.Tensor) -> bool:
        """Updates ``tensordict_`` (``step_mdp``'s) as TorchRL's ``maybe_reset`` does when
        the envs in ``rows`` (``[num_envs]``) are reset and the reset returns the kept rows
        (``_update_during_reset`` with the root ``"_reset"``): for a partial reset the reset
        rows take the kept observations (``mask``, ``action_mask``), the done flags (root and
        groups) are cleared there and every other leaf's reset rows are zeroed (the actions,
        the collector's trajectory ids, ...); a reset of every env takes the observations
        and the cleared flags and leaves the other leaves. Returns False, changing nothing,
        for a tensordict it does not know (not a plain ``TensorDict`` of tensors, or without
        one of the reset's entries): TorchRL's own path then updates it."""
        if type(tensordict_) is not TensorDict:
            return False
        kept: dict[tuple, torch.Tensor] = {}
        for group, entry in self._ep.reset_obs.items():
            for name, value in entry.items():
                if isinstance(value, TensorDictBase):
                    for sub, leaf in value.items(True, True):
                        kept[(group, name, *((sub,) if isinstance(sub, str) else sub))] = leaf
                else:
                    kept[(group, name)] = value
        cleared = {(f,) for f in _FLAGS} | {(g, f) for g in self.group_map for f in _FLAGS}
        full = bool(rows.all())
        updates = []
        for key, value in tensordict_.items(True, True):
            path = (key,) if isinstance(key, str) else key
            if type(value) is not torch.Tensor:
                return False
            where = rows.to(value.device).view(-1, *([1] * (value.dim() - 1)))
            source = kept.pop(path, None)
            if source is not None:
                source = source.to(value.device)
                updates.append((path, source if full else torch.where(where, source, value)))
            elif path in cleared:
                cleared.discard(path)
                updates.append((path, torch.zeros_like(value) if full else value.masked_fill(where, False)))
            elif not full:
                updates.append((path, value.masked_fill(where, 0)))
        if kept or cleared:
            return False
        for path, value in updates:
            # Tensors made here from the tensordict's own (same shapes, dtypes, devices): set
            # unchecked and not in place, as TensorDict.where sets its results.
            tensordict_._set_tuple(path, value, inplace=False, validated=True, non_blocking=False)
        return True

    def _restart_stale(self) -> None:
        """Before a step: the envs TorchRL last saw done and now steps without a
        ``"_reset"`` (an evaluation rollout between collector batches leaves envs done)
        start from a reset, as ``ShmEnv``'s do: the one the pool made in the step where
        their episode ended (same-step autoreset), or else a partial reset of the pool."""
        ep = self._ep
        stale = ep.done_seen & ~ep.fresh
        if stale.any():
            self._envs.reset(options={"reset_mask": np.ascontiguousarray(stale)})
        seen = ep.done_seen.copy()
        for left in self._left.values():
            left[seen] = 0
        ep.forget(self.batch_size[0], seen)

    def _tensordict(self, source: dict) -> TensorDictBase:
        """The result, each group a sub-tensordict of batch ``[num_envs, A]``."""
        n = self.batch_size[0]
        for group, members in self.group_map.items():
            source[group] = TensorDict(source[group], batch_size=(n, len(members)))
        return TensorDict(source, batch_size=self.batch_size, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        seed, options = kwargs.pop("seed", None), kwargs.pop("options", None)
        if kwargs:
            raise TypeError(f"MultiAgentShmEnv.reset got unexpected keywords {sorted(kwargs)}")
        mask = None
        reset = tensordict.get("_reset", None) if tensordict is not None else None
        if self.is_closed or self._pid != os.getpid():
            self._rebuild_envs(reset=False)
        elif reset is not None:
            mask = reset.reshape(self.batch_size).cpu().numpy()
            if mask.all():
                mask = None
            elif not mask.any():
                # No env to reset (only agents are done): TorchRL keeps its own rows.
                return self._zero_reset()
        if mask is not None:
            mask = np.ascontiguousarray(mask, dtype=bool)
        if seed is None and not options and np.count_nonzero(self._ep.fresh):
            source = self._reset_kept(mask)
        else:
            if mask is not None:
                options = dict(options or {}, reset_mask=mask)
            obs, infos = self._envs.reset(seed=seed, options=options)
            source = self._observations(self._dicts(obs), self._dicts(infos["active"]))
        for left in self._left.values():
            left[slice(None) if mask is None else mask] = 0
        self._ep.forget(self.batch_size[0], mask)
        n = self.batch_size[0]
        for group, members in self.group_map.items():
            source[group].update(
                {k: torch.zeros(n, len(members), 1, dtype=torch.bool) for k in ("done", "terminated", "truncated")}
            )
        source.update({k: torch.zeros(n, 1, dtype=torch.bool) for k in ("done", "terminated", "truncated")})
        return self._tensordict(source)

    def _reset_kept(self, mask: np.ndarray | None) -> dict:
        """A reset (of the envs in ``mask``, or all) where some of them were reset by the
        pool in the last step (same-step autoreset): their rows are the kept first
        observations and ``active`` flags, as a reset of them would return. Any other env
        asked for gets a partial reset of the pool, whose rows for the kept envs are those
        same observations (they have not stepped since)."""
        wanted = np.ones(self.batch_size[0], dtype=bool) if mask is None else mask
        rest = wanted & ~self._ep.fresh
        if rest.any():
            obs, infos = self._envs.reset(options={"reset_mask": rest})
            return self._observations(self._dicts(obs), self._dicts(infos["active"]))
        return {group: dict(entry) for group, entry in self._ep.reset_obs.items()}

    def _zero_reset(self) -> TensorDictBase:
        out = self.observation_spec.zero()
        out.update(self.full_done_spec.zero())
        return out

    def _set_seed(self, seed: int | None) -> None:
        self.reset(seed=seed)

    # ---------------------------------------------------------------- misc

    @property
    def envs(self) -> MultiAgentVectorEnv:
        """The :class:`shmenv.multiagent.MultiAgentVectorEnv` stepping the envs."""
        return self._envs

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Stops the worker processes."""
        self.is_closed = True
        envs = self.__dict__.get("_envs")
        if envs is not None:
            envs.close()

    def __del__(self) -> None:
        if not self.__dict__.get("is_closed", True):
            try:
                self.close()
            except Exception:
                pass

    def __reduce__(self) -> tuple:
        # Pickled by its construction arguments (TorchRL's multi-process collectors pickle
        # env instances under spawn), so each process builds its own vector env; as a pickled
        # ParallelEnv or ShmEnv does, this one closes its own (rebuilt if used again).
        if not self.__dict__.get("is_closed", True):
            self.close()
        # cloudpickle, as make_vec sends factories: a lambda or a PettingZoo parallel_env
        # (a local function) travels by value.
        build = cloudpickle.dumps((*self._build, dict(self._wrapper_options, device=self.device)))
        return (_rebuild, (build,))

    def __enter__(self) -> "MultiAgentShmEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        envs = self.__dict__.get("_envs")
        return (
            f"MultiAgentShmEnv(env={getattr(envs, 'env_id', None)!r}, num_envs={self.batch_size[0]}, "
            f"group_map={getattr(self, 'group_map', None)})"
        )


def _rebuild(build: bytes) -> MultiAgentShmEnv:
    """A pickled MultiAgentShmEnv, built anew (its own workers) where it is unpickled."""
    env, num_envs, options, wrapper_options = cloudpickle.loads(build)
    return MultiAgentShmEnv(env, num_envs, **wrapper_options, **options)
