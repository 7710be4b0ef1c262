"""Parts of :class:`shmenv.libs.torchrl.ShmEnv`: GymEnv's test for pixels, and its row
bookkeeping: which envs ended, the reset observations a same-step auto-reset pool returned
with the step, and how they answer TorchRL's reset of those envs without a pool call.

A pool made with ``autoreset_mode="same_step"`` resets an env in the step where its episode
ends: the step's observation row is the reset observation, and the final observation is in
``infos["final_obs"]``. ``ShmEnv`` returns the final observation to TorchRL (its ``"next"``
entry, as a pool without auto-reset gives it) and keeps the reset one, which then answers
TorchRL's reset of that env (``step_and_maybe_reset``, or a ``"_reset"`` mask) instead of a
partial reset of the pool: one pool call per batched step."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["Episodes", "with_final_rows", "fold_resets", "is_pixels", "leaves"]

try:  # TorchRL's own update of a tensordict by a (partial) reset: what maybe_reset applies
    from torchrl.envs.utils import _update_during_reset
except ImportError as error:  # pragma: no cover - a TorchRL without it
    raise ImportError(
        f"shmenv.torchrl needs torchrl.envs.utils._update_during_reset (TorchRL 0.14 has it): {error}"
    ) from error


class Episodes:
    """Which envs ended, per env: ``ended`` in a pool without auto-reset (not reset since),
    ``done_seen`` by TorchRL (the last row it got of the env said done, and it has not reset
    the env since), and ``fresh``: under same-step auto-reset, the envs the pool reset in
    the last step and not stepped since, whose reset observations ``reset_obs`` holds (a
    dict of tensors by key, rows of other envs unspecified)."""

    __slots__ = ("ended", "done_seen", "fresh", "reset_obs")

    def __init__(self) -> None:
        self.ended = np.zeros(0, dtype=bool)
        self.done_seen = self.ended
        self.fresh = self.ended
        self.reset_obs: dict = {}

    def forget(self, n: int, mask: np.ndarray | None) -> None:
        """A reset of every env (``mask`` None) or of the masked ones: no longer done, for
        TorchRL or the pool, and their kept reset observations are spent."""
        if mask is None:
            self.ended = np.zeros(n, dtype=bool)
            self.done_seen = np.zeros(n, dtype=bool)
            self.fresh = np.zeros(n, dtype=bool)
            self.reset_obs = {}
        else:
            self.ended = self.ended & ~mask
            self.done_seen = self.done_seen & ~mask
            self.fresh = self.fresh & ~mask


def step_to_ended_rows(env: Any, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase, Any]:
    """The front half of a same-step wrapper's ``_step_and_maybe_reset``: TorchRL's ``step``
    and ``step_mdp`` on ``env``'s device, and the envs the step ended (a ``[num_envs]``
    bool tensor), or None when none did; or None for all three where TorchRL's own path
    must run (autoreset disabled, post-step_mdp hooks, a ``"_step"`` mask)."""
    if not env._folds or getattr(env, "_post_step_mdp_hooks", None) is not None or "_step" in tensordict.keys():
        return None, None, None  # type: ignore[return-value]
    if tensordict.device != env.device:
        tensordict = tensordict.to(env.device)
    tensordict = env.step(tensordict)
    tensordict_ = env._step_mdp(tensordict)
    done = tensordict_.get("done", None)
    rows = None if done is None or not done.any() else done.reshape(env.batch_size)
    return tensordict, tensordict_, rows


def with_final_rows(obs: Any, finals: Any, rows: np.ndarray) -> Any:
    """A copy of the batch ``obs`` (an array or a dict of them, nested) whose ``rows`` hold
    ``finals`` (the final observations of those rows, one per row, as the pool's
    ``infos["final_obs"]`` gives them) instead of the reset observations."""
    if isinstance(obs, dict):
        return {key: with_final_rows(value, [f[key] for f in finals], rows) for key, value in obs.items()}
    out = np.array(obs)  # a writable copy: the pool's array stays the reset observations
    out[rows] = np.stack([np.asarray(f, dtype=out.dtype) for f in finals])
    return out


def fold_resets(env: Any, tensordict_: TensorDictBase, reset_obs: dict, mask: torch.Tensor) -> TensorDictBase:
    """What ``EnvBase.maybe_reset`` makes of ``tensordict_`` (the step's ``step_mdp``) when
    the envs done there (``mask``, ``[num_envs]``) are reset and ``reset_obs`` (the
    observation tensors by key, every row) is what their reset returned.

    A flat tensordict of tensors (a flat observation) is updated here as TorchRL's
    ``_update_during_reset`` updates it: a partial reset takes the reset rows of the
    observation, clears the done flags there and zeroes the reset rows of the other keys,
    nested tensordicts' leaves included (its ``where(..., pad=0)``); a reset of every env
    takes the observation and the flags and leaves the other keys. Anything else goes
    through ``_update_during_reset`` itself."""
    key = getattr(env, "_obs_key", None)
    if key is None or type(tensordict_) is not TensorDict or list(env.reset_keys) != ["_reset"]:
        return _torchrl_fold(env, tensordict_, reset_obs, mask)
    full = bool(mask.all())
    flags = torch.zeros_like(tensordict_.get("done"))
    updates = {}
    for name, value in tensordict_.items():
        if type(value) is TensorDict:  # e.g. the collector's ("collector", "traj_ids")
            if not full:
                updates[name] = value.apply(lambda leaf: _zero_rows(leaf, mask))
            continue
        if not isinstance(value, torch.Tensor):
            return _torchrl_fold(env, tensordict_, reset_obs, mask)
        if name == key:
            new = reset_obs[key].to(value.device)
            updates[name] = new if full else torch.where(mask.view(-1, *([1] * (value.dim() - 1))), new, value)
        elif name in ("done", "terminated", "truncated"):
            updates[name] = flags if name == "done" else flags.clone()
        elif not full:
            updates[name] = _zero_rows(value, mask)
    for name, value in updates.items():
        tensordict_._set_str(name, value, inplace=False, validated=True, non_blocking=False)
    return tensordict_


def _zero_rows(value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``value`` with the rows in ``mask`` zeroed (a new tensor)."""
    return value.masked_fill(mask.view(-1, *([1] * (value.dim() - 1))), 0)


def _torchrl_fold(env: Any, tensordict_: TensorDictBase, reset_obs: dict, mask: torch.Tensor) -> TensorDictBase:
    """``fold_resets`` by TorchRL's own functions: ``"_reset"`` set from the done flags as
    ``any_done`` sets it, the reset's done flags filled in (False) as ``_complete_done``
    fills them, and ``_update_during_reset``."""
    done = tensordict_.get("done")
    tensordict_.set("_reset", done.clone())
    flags = torch.zeros_like(done)
    reset = env._result(dict(reset_obs))
    for name in ("done", "terminated", "truncated"):
        reset.set(name, flags)
    return _update_during_reset(reset, tensordict_, env.reset_keys)


def is_pixels(space: Any) -> bool:
    """GymEnv's test for an image observation (torchrl.envs.libs.gym._is_from_pixels): a
    Box bounded 0..255 of shape ``[H, W, 3]``."""
    from gymnasium import spaces

    return (
        isinstance(space, spaces.Box)
        and len(space.shape) == 3
        and space.shape[-1] == 3
        and bool((space.low == 0).all())
        and bool((space.high == 255).all())
    )


def leaves(space):
    """The leaf spaces of nested Dicts (a Tuple counts as a leaf)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        for sub in space.spaces.values():
            yield from leaves(sub)
    else:
        yield space
