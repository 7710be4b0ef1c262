"""Checking and converting ``make_vec``'s arguments and ``send``'s env ids: every mistake
is refused with a message naming the argument, the value and the valid range."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector.vector_env import AutoresetMode

from shmenv import _shmenv
from shmenv.errors import InvalidArgumentError, InvalidArgumentTypeError, UsageError


def _count(name: str, value: Any) -> int:
    """A positive count, refused clearly otherwise (negative, float, bool, None ...)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"{name} must be a positive int, got {value!r}")
    if value < 1:
        raise InvalidArgumentError(f"{name} must be at least 1, got {value}")
    return int(value)


def _num_workers(
    num_envs: int, num_workers: int | None, envs_per_worker: int | None, trainer_shard: bool = False
) -> int:
    """The worker count: given, implied by ``envs_per_worker``, or one per core. With a
    trainer shard the trainer counts as one of them (one shard, one core)."""
    own = 1 if trainer_shard else 0
    if envs_per_worker is not None:
        per = _count("envs_per_worker", envs_per_worker)
        implied = max(1, -(-num_envs // per) - own)
        if num_workers is not None and _count("num_workers", num_workers) != implied:
            raise InvalidArgumentError(
                f"num_workers={num_workers} and envs_per_worker={per} disagree: {num_envs} envs at {per} per "
                f"worker need {implied} workers; pass one of the two"
            )
        return implied
    if num_workers is None:
        return _shmenv.default_num_workers(num_envs, trainer_shard)
    return _count("num_workers", num_workers)


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"{name} must be an int, got {value!r}")
    return int(value)


def _optional_int(name: str, value: Any, low: int) -> "int | None":
    """None, or an int in low..2**32 (the engine's range), refused clearly otherwise."""
    if value is None:
        return None
    value = _integer(name, value)
    if not low <= value < 2**32:
        raise InvalidArgumentError(f"{name} must be an int from {low} to {2**32 - 1} (or None), got {value}")
    return value


def _optional_seconds(name: str, value: Any) -> "float | None":
    """None, or a finite number of seconds above 0 (at most a year)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"{name} must be a number of seconds, got {value!r}")
    value = float(value)
    if not 0 < value <= 365 * 86400:
        raise InvalidArgumentError(
            f"{name} must be more than 0 and at most {365 * 86400} seconds (or None: no limit), got {value}"
        )
    return value


def _env_ids(env_ids, num_envs: int) -> np.ndarray:
    """``env_ids`` as the extension takes them: a contiguous int64 or int32 array (which it
    range-checks itself, so ``info["env_id"]`` from ``recv`` passes straight through);
    anything else is converted and checked here."""
    # Which arrays pass as they are is the extension's rule (`one_call.rs`), the one its
    # one-call path applies too.
    if _shmenv.env_ids_as_is(env_ids):
        return env_ids
    ids = np.asarray(env_ids)
    if ids.ndim == 0:
        ids = ids.reshape(1)
    if ids.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"env_ids must be integers (env ids are 0 to {num_envs - 1}), got dtype {ids.dtype}: {ids}"
        )
    # The extension range-checks (one wording); ids past int64 are out of range anyway.
    flat = ids.reshape(-1)
    if flat.dtype.kind == "u":
        flat = np.minimum(flat, np.uint64(np.iinfo(np.int64).max))
    return np.require(flat, np.int64, ["C", "A"])


def _autoreset_mode(mode: str | AutoresetMode) -> AutoresetMode:
    """``mode`` as Gymnasium's enum; names are parsed by the engine (one source)."""
    if isinstance(mode, AutoresetMode):
        return mode
    return AutoresetMode(_shmenv.autoreset_name(str(mode)))


def _reset_options(options: dict | None, num_envs: int, is_async: bool) -> tuple[list[bool] | None, dict]:
    """``reset``'s ``options``: the ``reset_mask`` (sync mode only) and the others, which go
    to the envs' ``reset``."""
    options = dict(options or {})
    if "reset_mask" not in options:
        return None, options
    mask = _reset_mask(options.pop("reset_mask"), num_envs)
    if is_async:
        raise UsageError(
            "reset_mask works in sync mode; an async pool resets envs when they end (autoreset_mode) "
            "or all at once with reset()"
        )
    return mask, options


def _reset_mask(mask, num_envs: int) -> list[bool]:
    """A ``reset_mask`` option: a bool array of shape ``(num_envs,)`` with a True, as a
    list. Checked in ``AsyncVectorEnv``'s order (shape, dtype, a True), with its exception
    types and the start of its messages, then what to pass (a list is taken as an array)."""
    m = np.asarray(mask)
    want = (
        f"pass a numpy bool array with one entry per env (np.zeros({num_envs}, dtype=bool), True for the envs to reset)"
    )
    if m.shape != (num_envs,):
        raise InvalidArgumentError(f"`options['reset_mask']` must have shape `({num_envs},)`, got {m.shape}: {want}")
    if m.dtype != np.bool_:
        raise InvalidArgumentTypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {m.dtype}: {want}")
    if not m.any():
        raise InvalidArgumentError(
            "`options['reset_mask']` must contain a boolean array with at least one True value, got "
            f"reset_mask={m}: a reset must reset at least one env"
        )
    return m.tolist()
