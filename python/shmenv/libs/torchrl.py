"""``shmenv.torchrl``: a TorchRL environment (``EnvBase``) over a shmenv pool.

>>> from shmenv.libs.torchrl import ShmEnv
>>> env = ShmEnv("CartPole-v1", 16, num_workers=2, seed=0)     # batch_size [16]
>>> td = env.rollout(100)                                       # td.shape == (16, 100)
>>> env.close()

The envs step in shmenv's worker processes (exec'd programs, not ``multiprocessing``), so a
``torchrl.collectors.Collector`` over a ``ShmEnv`` collects from every core without TorchRL
spawning anything and without an ``if __name__ == "__main__":`` guard. TorchRL's
multi-process collectors (``MultiSyncCollector``, ``MultiAsyncCollector``) take functions
that build a ``ShmEnv`` or ``ShmEnv`` instances: an instance pickles by its construction
arguments (closing its own pool, as ``ParallelEnv`` does when pickled), and in a forked
process rebuilds its pool from them at its first reset or step, so each collector process
builds its own pool under spawn and under fork.

Specs are those ``GymWrapper(gymnasium.vector.SyncVectorEnv([...]))`` gives for the same
env: ``"observation"`` (or the keys of a Dict observation), ``"reward"`` of shape
``[num_envs, 1]``, ``"done"``/``"terminated"``/``"truncated"`` of shape ``[num_envs, 1]``,
and an action spec that is ``OneHot`` for a ``Discrete`` action space by default and
``Categorical`` with ``categorical_action_encoding=True``, as GymWrapper's switch does.

TorchRL resets ended envs itself (``"_reset"`` masks). The pool runs with
``autoreset_mode="same_step"``: it resets an env in the step where its episode ends, the
step returns the final observation, and the reset observation is kept to answer TorchRL's
reset of that env (``step_and_maybe_reset``, or ``reset`` with a ``"_reset"`` mask) without
a pool call, so a collector makes one pool call per batched step. A pool made with
``autoreset_mode="disabled"`` turns each ``"_reset"`` into a partial reset of the pool.
``set_seed(s)`` resets the pool with seed ``s`` (env ``i`` seeded ``s + i``), as GymWrapper
does; ``reset(seed=[s0, s1, ...])`` seeds each env (e.g. ``SerialEnv``'s seed chain). An env
TorchRL last saw done and steps again without a ``"_reset"`` starts from a reset. A
``"_step"`` mask may hold back done envs: their rows keep their last values.

An RGB-image observation (a uint8 ``Box`` 0..255 of shape ``[H, W, 3]``, e.g. Atari frames)
is keyed ``"pixels"``, as ``GymEnv`` keys it.

Tensors are made with ``torch.from_numpy`` over the arrays the pool returns: with the
pool's default ``copy=True`` they are fresh arrays owned by the caller, so no second copy is
made. A pool made with ``copy=False`` returns observation views of the shared memory that
the next steps overwrite; TorchRL keeps observations (rollouts, collector batches), so they
are then copied once into tensors here.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import cloudpickle
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data.tensor_specs import (
    Bounded,
    Categorical,
    Composite,
    OneHot,
    Unbounded,
)
from torchrl.envs.common import EnvBase

import shmenv
from shmenv.libs.torchrl_parts import Episodes, fold_resets, is_pixels, leaves, step_to_ended_rows, with_final_rows
from shmenv.prechecks import check_open

__all__ = ["ShmEnv"]

# TorchRL's own mapping from Gymnasium spaces to specs (GymWrapper's), so that a ShmEnv's
# specs are GymWrapper's by construction.
try:
    from torchrl.envs.libs.gym import _gym_to_torchrl_spec_transform as _space_to_spec
except ImportError as error:  # pragma: no cover - a TorchRL without GymWrapper's converter
    raise ImportError(
        f"shmenv.torchrl needs torchrl.envs.libs.gym._gym_to_torchrl_spec_transform (TorchRL 0.14 has it): {error}"
    ) from error


#: The pool modes ShmEnv drives: same-step auto-reset (its own pools: one pool call per
#: step) and no auto-reset (TorchRL's resets become the pool's partial resets).
_MODES = ("same_step", "disabled")


def _mode_name(mode: Any) -> str | None:
    """``"same_step"``, ``"disabled"`` or ``"next_step"`` for an ``AutoresetMode`` or its
    name; None for anything else."""
    from gymnasium.vector import AutoresetMode

    if isinstance(mode, AutoresetMode):
        return mode.name.lower()
    if isinstance(mode, str) and mode.lower() in ("same_step", "disabled", "next_step"):
        return mode.lower()
    return None


class ShmEnv(EnvBase):
    """A TorchRL env over a shmenv pool of ``num_envs`` envs stepped in worker processes.

    ``ShmEnv(env, num_envs, **make_vec_options)`` builds the pool with
    ``shmenv.make_vec(env, num_envs, autoreset_mode="same_step", **make_vec_options)``
    (``num_workers``, ``seed``, ``config``, ``copy``, ...; ``env`` is anything ``make_vec``
    takes; ``autoreset_mode="disabled"`` is accepted too). ``ShmEnv(pool=envs)`` or
    ``ShmEnv.from_pool(envs)`` wraps an existing sync pool made with either mode.
    ``close()`` closes the pool in both cases; garbage collection closes only a pool the
    ShmEnv built. A ShmEnv that built its pool
    and was closed (a ``Collector`` closes its env after ``total_frames``) builds a new pool
    at its next ``reset``, as TorchRL's ``ParallelEnv`` starts again. Such a ShmEnv also
    pickles by its arguments (and closes its pool, as a pickled ``ParallelEnv`` does), so
    TorchRL's multi-process collectors can take it: each collector process builds its own
    pool. A ShmEnv wrapping your pool cannot be pickled (``TypeError``).

    Args:
        env: what ``shmenv.make_vec`` builds envs from (an id, an ``EnvSpec``, an entry
            point, a factory).
        num_envs: the number of envs; the env's ``batch_size`` is ``[num_envs]``.

    Keyword Args:
        pool: an existing ``shmenv.ShmVectorEnv`` (instead of ``env``/``num_envs``).
        categorical_action_encoding: ``Discrete`` spaces become ``Categorical`` specs
            (integer actions) instead of ``OneHot`` (the default, as in ``GymWrapper``).
        device: the device of the specs and of the tensors returned (default: None, CPU
            tensors, as ``GymWrapper``).
        allow_done_after_reset: passed to ``EnvBase``.
        **make_vec_options: every other keyword of ``shmenv.make_vec``.
    """

    def __init__(
        self,
        env: Any = None,
        num_envs: int | None = None,
        *,
        pool: Any = None,
        categorical_action_encoding: bool = False,
        device: Any = None,
        allow_done_after_reset: bool = False,
        **make_vec_options: Any,
    ):
        if pool is None:
            if env is None or num_envs is None:
                raise TypeError("ShmEnv needs env and num_envs (or pool=an existing shmenv pool)")
            mode = make_vec_options.pop("autoreset_mode", "same_step")
            if _mode_name(mode) not in _MODES:
                raise ValueError(
                    f"ShmEnv runs its pool with autoreset_mode='same_step' (the default: ended envs are "
                    f"reset in the step, and TorchRL's '_reset' of them is answered without a pool call) or "
                    f"'disabled' (each '_reset' is a partial reset of the pool); got autoreset_mode={mode!r}"
                )
            batch_size = make_vec_options.get("batch_size")
            if batch_size is not None and batch_size != num_envs:
                raise ValueError(
                    "ShmEnv needs a sync pool (partial resets are sync only): leave batch_size "
                    f"unset or equal to num_envs ({num_envs}), got batch_size={batch_size}"
                )
            self._build = (env, num_envs, dict(make_vec_options, autoreset_mode=_mode_name(mode)))
            pool = shmenv.make_vec(env, num_envs, **self._build[2])
            self._owns_pool = True
        else:
            if env is not None or num_envs is not None or make_vec_options:
                raise TypeError("pass either pool=... or env, num_envs and make_vec options, not both")
            self._check_pool(pool)
            self._owns_pool = False
        self._pool = pool
        self._pid = os.getpid()
        try:
            super().__init__(
                device=device,
                batch_size=torch.Size([pool.num_envs]),
                allow_done_after_reset=allow_done_after_reset,
            )
            self._categorical_action_encoding = categorical_action_encoding
            self._wrapper_options = dict(
                categorical_action_encoding=categorical_action_encoding,
                device=device,
                allow_done_after_reset=allow_done_after_reset,
            )
            self._copy_obs = not getattr(pool, "copy", True)
            self._make_specs()
            # Updated each step: a plain object, as EnvBase's __setattr__ is costly per step.
            self._folds = _mode_name(pool.autoreset_mode) == "same_step"
            self._ep = Episodes()
            self._forget_episodes(None)
        except BaseException:
            if self._owns_pool:
                pool.close()
            raise
        self.is_closed = False

    @classmethod
    def from_pool(cls, pool: Any, **kwargs: Any) -> "ShmEnv":
        """Wraps an existing sync ``shmenv.ShmVectorEnv`` made with
        ``autoreset_mode="same_step"`` or ``"disabled"`` (``kwargs``:
        ``categorical_action_encoding``, ``device``, ``allow_done_after_reset``)."""
        return cls(pool=pool, **kwargs)

    @staticmethod
    def _check_pool(pool: Any) -> None:
        if not isinstance(pool, shmenv.ShmVectorEnv):
            raise TypeError(f"pool must be a shmenv.ShmVectorEnv (shmenv.make_vec), got {type(pool).__name__}")
        check_open(pool.closed)
        if pool.is_async:
            raise ValueError(
                "ShmEnv needs a sync pool (partial resets are sync only): make it without batch_size "
                "or with batch_size=num_envs"
            )
        if _mode_name(pool.autoreset_mode) not in _MODES:
            raise ValueError(
                "ShmEnv needs a pool made with autoreset_mode='same_step' or 'disabled' (TorchRL resets "
                "ended envs itself, so their resets must not wait for their next step); this one has "
                f"{pool.autoreset_mode}"
            )

    # ---------------------------------------------------------------- specs

    def _make_specs(self) -> None:
        from gymnasium import spaces

        pool = self._pool
        batch = self.batch_size
        cat = self._categorical_action_encoding
        single_obs = pool.single_observation_space
        if isinstance(single_obs, spaces.Tuple) or (
            isinstance(single_obs, spaces.Dict) and any(isinstance(s, spaces.Tuple) for s in leaves(single_obs))
        ):
            raise shmenv.errors.InvalidArgumentError(
                f"ShmEnv maps Box, Discrete, MultiDiscrete, MultiBinary and Dict observations (as TorchRL's "
                f"Composite), not Tuple ones: got {single_obs}; wrap the env so it returns a Dict"
            )
        if isinstance(pool.single_action_space, (spaces.Tuple, spaces.Dict)):
            raise shmenv.errors.InvalidArgumentError(
                f"ShmEnv takes one action array per env (Box, Discrete, MultiDiscrete, MultiBinary), not "
                f"{pool.single_action_space}; flatten the action (gymnasium.wrappers.FlattenAction) or use "
                "GymWrapper over the pool"
            )

        # As GymWrapper._make_specs does for a batched env: the batched spaces are converted.
        # shmenv's uniform Box bounds are read-only broadcast views; TorchRL's converter
        # wraps them with torch.as_tensor (torch warns) and then builds its own bound tensors.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            observation_spec = _space_to_spec(
                pool.observation_space, device=self.device, categorical_action_encoding=cat
            )
            action_spec = _space_to_spec(pool.action_space, device=self.device, categorical_action_encoding=cat)
        if not isinstance(observation_spec, Composite):
            # GymEnv's key: "pixels" for an RGB image (a uint8 Box 0..255 of shape [H, W, 3]).
            self._obs_key = "pixels" if is_pixels(single_obs) else "observation"
            observation_spec = Composite({self._obs_key: observation_spec}, shape=batch)
        else:
            self._obs_key = None
            if observation_spec.shape[: len(batch)] != batch:
                observation_spec.shape = batch
        self.done_spec = Composite(
            {
                key: Categorical(2, dtype=torch.bool, device=self.device, shape=(*batch, 1))
                for key in ("done", "terminated", "truncated")
            },
            shape=batch,
        )
        self.action_spec = action_spec
        self.reward_spec = Unbounded(shape=(*batch, 1), device=self.device)
        self.observation_spec = observation_spec

        # Actions to numpy: a one-hot action is its argmax, as the spec's to_numpy gives.
        if type(action_spec) is OneHot:
            self._action_kind = "onehot"
        elif isinstance(action_spec, (Bounded, Unbounded, Categorical)):
            self._action_kind = "plain"  # Box, Categorical, MultiCategorical, Binary
        else:
            self._action_kind = "spec"  # MultiOneHot, stacked specs: the spec converts

    # ------------------------------------------------------------- results

    def _obs_tensor(self, array: np.ndarray, spec) -> torch.Tensor:
        if isinstance(spec, (Bounded, Unbounded)) and array.dtype != object:
            if self._copy_obs:
                array = np.array(array)  # a view of the shared memory: TorchRL keeps it
            tensor = torch.from_numpy(array)
            if tensor.dtype != spec.dtype:
                tensor = tensor.to(spec.dtype)
            if tensor.shape != spec.shape:
                tensor = tensor.reshape(spec.shape)
            return tensor
        return spec.encode(np.array(array) if self._copy_obs else array, ignore_device=True)

    def _read_obs(self, obs: Any) -> dict:
        if self._obs_key is not None:
            return {self._obs_key: self._obs_tensor(obs, self.observation_spec[self._obs_key])}
        return _read_dict(self, obs, self.observation_spec, top=True)

    def _result(self, source: dict) -> TensorDictBase:
        if self._obs_key is not None:
            # Flat, of tensors made here with the specs' shapes and dtypes: no checks needed
            # (GymLikeEnv takes the same shortcut once its first result validated).
            out = TensorDict._new_unsafe(source, batch_size=self.batch_size)
        else:
            out = TensorDict(source, batch_size=self.batch_size)
        if self.device is not None:
            out = out.to(self.device)
        return out

    # --------------------------------------------------------------- EnvBase

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._pid != os.getpid():
            self._after_fork(reset=True)
        stepping = None
        partial = tensordict.get("_step", None)
        if partial is not None:
            stepping = partial.reshape(self.batch_size).cpu().numpy()
            if stepping.all():
                stepping = None
        if stepping is not None or np.count_nonzero(self._ep.done_seen):  # count_nonzero: 5x any()
            self._reset_stale(stepping)
        obs, rewards, terminated, truncated, infos = self._pool.step(self._actions(tensordict))
        n = self.batch_size[0]
        reward = torch.from_numpy(rewards)
        if reward.dtype != torch.float32:
            reward = reward.to(torch.float32)
        done = terminated | truncated
        self._ep.ended = done.copy()  # the tensor below goes to TorchRL, which may write into it
        source = self._observe(obs, infos)
        source["reward"] = reward.view(n, 1)
        source["terminated"] = torch.from_numpy(terminated).view(n, 1)
        source["truncated"] = torch.from_numpy(truncated).view(n, 1)
        source["done"] = torch.from_numpy(done).view(n, 1)
        if stepping is None:
            self._ep.done_seen = self._ep.ended
            return self._result(source)
        self._ep.done_seen = np.where(stepping, self._ep.ended, self._ep.done_seen)
        return self._keep_unstepped(self._result(source), tensordict, stepping)

    def _actions(self, tensordict: TensorDictBase) -> Any:
        """The step's actions as the pool takes them: a one-hot action is its argmax, as
        the spec's ``to_numpy`` gives."""
        action = tensordict.get(self.action_key)
        kind = self._action_kind
        if kind == "onehot":
            if action.dtype == torch.bool:
                action = action.view(torch.uint8)  # argmax takes no bool; GymEnv's spec does
            return action.argmax(-1).cpu().numpy()
        if kind == "plain":
            return action.detach().cpu().numpy()
        return self.action_spec.to_numpy(action, safe=False)

    def _observe(self, obs: Any, infos: dict) -> dict:
        """The step's observation tensors. Under same-step auto-reset the rows of ended
        envs hold their reset observations: those are kept (to answer TorchRL's reset of
        the envs) and the step returns the final observations in their place."""
        if not self._folds:
            return self._read_obs(obs)
        self._ep.fresh = self._ep.ended
        if not np.count_nonzero(self._ep.ended):
            return self._read_obs(obs)
        rows = np.flatnonzero(self._ep.ended)
        self._ep.reset_obs = self._read_obs(obs)
        return self._read_obs(with_final_rows(obs, infos["final_obs"][rows], rows))

    def _step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """TorchRL's ``step``, ``step_mdp`` and ``maybe_reset``, the last one answered from
        the reset observations the step brought (same-step auto-reset): the same
        tensordicts, one pool call. Other cases take TorchRL's own path."""
        stepped, tensordict_, rows = step_to_ended_rows(self, tensordict)
        if stepped is None:
            return super()._step_and_maybe_reset(tensordict)
        tensordict = stepped
        if rows is None:
            return tensordict, tensordict_
        mask = rows.cpu().numpy()
        if (mask & ~self._ep.fresh).any():  # not the step's own ends: TorchRL's reset
            return tensordict, self.maybe_reset(tensordict_)
        tensordict_ = fold_resets(self, tensordict_, self._ep.reset_obs, rows)
        self._forget_episodes(mask)
        return tensordict, tensordict_

    def _reset_stale(self, stepping: np.ndarray | None) -> None:
        """Before a step: resets the envs TorchRL last saw done and now steps (a rollout or
        a collector left them done; ``SerialEnv`` carries on there too), unless the pool
        reset them in their last step (same-step auto-reset), and without auto-reset the
        envs a ``"_step"`` mask leaves out whose episode ended in the pool (the pool steps
        every env, and an ended env cannot be stepped without a reset)."""
        if stepping is not None:
            held = ~stepping & ~self._ep.done_seen
            if held.any():
                raise shmenv.errors.UsageError(
                    f"a '_step' mask leaves out envs {np.flatnonzero(held).tolist()} that are not done: ShmEnv's "
                    "pool steps every env at once, so it can hold back only envs whose episode ended (as "
                    "rollout(break_when_any_done=False) leaves them out). Step those envs too, or reset the "
                    "ones you want to restart with a '_reset' mask"
                )
        if self._folds:
            stale = self._ep.done_seen & ~self._ep.fresh
            if stepping is not None:
                stale &= stepping
        elif stepping is None:
            stale = self._ep.done_seen
        else:
            stale = (self._ep.done_seen & stepping) | (self._ep.ended & ~stepping)
        if not stale.any():
            return
        self._pool.reset(options={"reset_mask": np.array(stale, dtype=bool)})
        self._ep.ended = self._ep.ended & ~stale
        if stepping is None:
            self._ep.done_seen = self._ep.done_seen & ~stale
        else:
            self._ep.done_seen = self._ep.done_seen & ~(stale & stepping)

    def _keep_unstepped(self, out: TensorDictBase, tensordict: TensorDictBase, stepping: np.ndarray) -> TensorDictBase:
        """The rows a ``"_step"`` mask left out keep their last values, as ``SerialEnv``
        gives them: the input's entries (observation, done flags), zero for the others."""
        held = torch.from_numpy(~stepping)
        for key in list(out.keys(True, True)):
            value = out.get(key)
            mask = held.view(-1, *([1] * (value.dim() - 1)))
            prev = tensordict.get(key, None)
            if prev is None:
                out.set(key, value.masked_fill(mask, 0))
            else:
                out.set(key, torch.where(mask, prev.to(value.device, value.dtype), value))
        return out

    def _forget_episodes(self, mask: np.ndarray | None) -> None:
        """Notes a reset of every env (``mask`` None) or of the masked ones: they are no
        longer done, for TorchRL or the pool, and their kept reset observations are spent."""
        self._ep.forget(self.batch_size[0], mask)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        seed = kwargs.pop("seed", None)
        options = kwargs.pop("options", None)
        if kwargs:
            raise TypeError(f"ShmEnv.reset got unexpected keywords {sorted(kwargs)}")
        mask = None
        if self.is_closed:
            self._reopen()
        elif self._pid != os.getpid():
            self._after_fork(reset=False)
        elif tensordict is not None:
            reset = tensordict.get("_reset", None)
            if reset is not None:
                mask = reset.reshape(self.batch_size).cpu().numpy()
                if mask.all():
                    mask = None
                elif not mask.any():
                    # Nothing to reset: TorchRL keeps every row of its own tensordict.
                    return self._result(self.observation_spec.zero().to_dict())
        if mask is not None:
            mask = np.ascontiguousarray(mask, dtype=bool)
        if seed is None and not options and np.count_nonzero(self._ep.fresh):
            return self._reset_kept(mask)
        if mask is not None:
            options = dict(options or {}, reset_mask=mask)
        obs, _ = self._pool.reset(seed=seed, options=options)
        self._forget_episodes(mask)
        return self._result(self._read_obs(obs))

    def _reset_kept(self, mask: np.ndarray | None) -> TensorDictBase:
        """A reset (of the envs in ``mask``, or all) where some of them were reset by the
        pool in the last step (same-step auto-reset): those rows are their kept reset
        observations, as a reset of them would return; the others asked for get a partial
        reset of the pool, whose rows for the kept envs are those same observations (the
        envs have not stepped since)."""
        wanted = np.ones(self.batch_size[0], dtype=bool) if mask is None else mask
        rest = wanted & ~self._ep.fresh
        if rest.any():
            obs, _ = self._pool.reset(options={"reset_mask": rest})
            source = self._read_obs(obs)
        else:
            source = dict(self._ep.reset_obs)
        self._forget_episodes(mask)
        return self._result(source)

    def _reopen(self) -> None:
        # A Collector closes its env once total_frames are collected. As TorchRL's
        # ParallelEnv and SerialEnv start again when used after close(), a ShmEnv that built
        # its pool builds a new one (same arguments, so the same seeds) at the next reset.
        if not self.__dict__.get("_owns_pool"):
            raise shmenv.errors.ClosedError(
                "this ShmEnv was closed, and with it the pool it wraps; wrap a new pool "
                "(a ShmEnv built from an env id restarts by itself)"
            )
        env, num_envs, options = self._build
        self._pool = shmenv.make_vec(env, num_envs, **options)
        self._pid = os.getpid()
        self._forget_episodes(None)  # the old pool's ends and kept reset observations
        self.is_closed = False

    def _after_fork(self, reset: bool) -> None:
        """In a forked process (TorchRL's multi-process collectors under the ``fork`` start
        method hand their env instances over that way): the pool's workers belong to the
        parent, so a ShmEnv that built its pool builds its own here, from its construction
        arguments, as unpickling does. The parent's pool is left alone (inert here)."""
        if not self.__dict__.get("_owns_pool"):
            raise shmenv.errors.UsageError(
                f"this ShmEnv wraps a pool of process {self._pid} and this is process {os.getpid()}, a fork of "
                "it: the pool's workers serve only their own process. Pass a ShmEnv built from an env "
                "(ShmEnv(env, num_envs, ...)), which builds its own pool in a forked or spawned process, or a "
                "function that builds one"
            )
        env, num_envs, options = self._build
        self._pool = shmenv.make_vec(env, num_envs, **options)
        self._pid = os.getpid()
        self._forget_episodes(None)
        if reset:
            self._pool.reset()

    def _set_seed(self, seed: int | None) -> None:
        # As GymWrapper over a Gymnasium vector env: a reset with the seed, env i seeded
        # seed + i.
        self.reset(seed=seed)

    # ----------------------------------------------------------------- misc

    @property
    def pool(self):
        """The ``shmenv.ShmVectorEnv`` stepping the envs."""
        return self._pool

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Closes the pool: its worker processes are stopped and reaped."""
        self.is_closed = True
        pool = self.__dict__.get("_pool")
        if pool is not None:
            pool.close()

    def __del__(self) -> None:
        # A ShmEnv garbage-collected closes the pool it built (the pool's own finalizer
        # would too); a pool passed in stays the caller's until close() is called.
        if self.__dict__.get("_owns_pool") and not self.__dict__.get("is_closed", True):
            try:
                self.close()
            except Exception:
                pass

    def __reduce__(self) -> tuple:
        # Pickled by its construction arguments, so that a ShmEnv handed to TorchRL's
        # multi-process collectors (or anything else that pickles it) builds its own pool
        # where it is unpickled. As ParallelEnv does when pickled, this one closes its pool
        # (its workers stop); it builds a new one at its next reset if used again.
        if not self.__dict__.get("_owns_pool"):
            raise TypeError(
                "a ShmEnv wrapping an existing pool (ShmEnv.from_pool / pool=) cannot be pickled: the pool's "
                "workers belong to this process. Pass TorchRL a function that builds the ShmEnv, or a ShmEnv "
                "built from an env (ShmEnv(env, num_envs, ...)), which pickles by its arguments"
            )
        if not self.__dict__.get("is_closed", True):
            self.close()
        # cloudpickle, as make_vec sends factories: a lambda or a PettingZoo parallel_env
        # (a local function) travels by value.
        build = cloudpickle.dumps((*self._build, dict(self._wrapper_options, device=self.device)))
        return (_rebuild, (build,))

    def __enter__(self) -> "ShmEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        pool = self.__dict__.get("_pool")
        env_id = getattr(pool, "env_id", None)
        return (
            f"{type(self).__name__}(env={env_id!r}, num_envs={self.batch_size[0] if self.batch_size else None}, "
            f"num_workers={getattr(pool, 'num_workers', None)}, device={self.device})"
        )


def _rebuild(build: bytes) -> ShmEnv:
    """A pickled ShmEnv, built anew (its own workers) where it is unpickled."""
    env, num_envs, options, wrapper_options = cloudpickle.loads(build)
    return ShmEnv(env, num_envs, **wrapper_options, **options)


def _read_dict(env: ShmEnv, obs: dict, spec: Composite, top: bool = False) -> dict:
    if top and "state" in obs and "observation" not in obs:
        # GymWrapper renames a Dict observation's "state" to "observation".
        obs = dict(obs)
        obs["observation"] = obs.pop("state")
    out = {}
    for key, value in obs.items():
        sub = spec[key]
        if isinstance(value, dict):
            out[key] = _read_dict(env, value, sub)
        else:
            out[key] = env._obs_tensor(value, sub)
    return out
