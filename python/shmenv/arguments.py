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


# --- gymnasium.make_vec's keywords --------------------------------------------------------

#: ``vectorization_mode`` values ``gymnasium.make_vec`` takes; here every one runs the envs
#: in shmenv's worker processes (docs/python.md, "From gymnasium.make_vec").
VECTORIZATION_MODES = ("sync", "async", "vector_entry_point")
#: ``vector_kwargs`` of Gymnasium's vector envs that are also shmenv options.
_VECTOR_OPTIONS = ("copy", "observation_mode", "autoreset_mode")
#: ``multiprocessing`` start methods (``AsyncVectorEnv``'s ``context``, SubprocVecEnv's
#: ``start_method``): accepted; shmenv's workers are always fresh programs, as under spawn.
START_METHODS = (None, "fork", "spawn", "forkserver")


class GymExtras:
    """What ``gymnasium.make_vec``'s signature adds to shmenv's options: ``wrappers``
    (applied to each env in its worker, in order) and the env's keyword arguments."""

    def __init__(self, wrappers: list | None = None, env_kwargs: dict | None = None):
        self.wrappers = wrappers
        self.env_kwargs = env_kwargs or {}

    def __bool__(self) -> bool:
        return bool(self.wrappers) or bool(self.env_kwargs)


def start_method(caller: str, value: Any) -> None:
    """Checks a start method (``start_method=``, ``context=``) as ``multiprocessing`` does."""
    if value not in START_METHODS:
        raise InvalidArgumentError(
            f"{caller}: cannot find context for {value!r}: the start method is one of None, 'fork', 'spawn' or "
            "'forkserver' (shmenv's workers are always fresh programs, as under 'spawn', whichever you pass)"
        )


def gym_keywords(caller: str, options: dict, names: tuple[str, ...]) -> tuple[dict, GymExtras]:
    """Splits ``gymnasium.make_vec``'s keywords out of ``options``: ``vectorization_mode``
    (checked, then unused: every mode runs in shmenv's workers), ``vector_kwargs`` (those
    shmenv has become options), ``wrappers``, and every keyword that is not one of
    ``names`` (shmenv's options), which goes to the env's constructor. Returns the options
    left and the extras."""
    options = dict(options)
    mode = options.pop("vectorization_mode", None)
    mode = getattr(mode, "value", mode)
    if mode is not None and mode not in VECTORIZATION_MODES:
        raise InvalidArgumentError(
            f"{caller}: vectorization_mode={mode!r} is not one of Gymnasium's ({', '.join(VECTORIZATION_MODES)} "
            "or None); every mode runs the envs in shmenv's worker processes"
        )
    vector_kwargs = options.pop("vector_kwargs", None) or {}
    if not isinstance(vector_kwargs, dict):
        raise InvalidArgumentTypeError(f"{caller}: vector_kwargs must be a dict or None, got {vector_kwargs!r}")
    for key, value in vector_kwargs.items():
        if key in ("shared_memory", "daemon"):
            continue  # the observations are always in shared memory; workers always end with the trainer
        if key == "context":
            start_method(caller, value)
            continue
        if key == "worker":
            raise InvalidArgumentError(
                f"{caller}: vector_kwargs['worker'] (AsyncVectorEnv's custom worker function) cannot run here: "
                "shmenv's workers are its own program; drop it (wrappers=[...] runs code around each env)"
            )
        if key in options and options[key] != value:
            raise InvalidArgumentError(
                f"{caller}: {key}={options[key]!r} and vector_kwargs[{key!r}]={value!r} disagree: pass one"
            )
        options[key] = value
    wrappers = options.pop("wrappers", None)
    if wrappers is not None:
        if isinstance(wrappers, (str, bytes)) or not hasattr(wrappers, "__iter__"):
            raise InvalidArgumentTypeError(
                f"{caller}: wrappers must be a list of callables taking an env and returning it wrapped, got {wrappers!r}"
            )
        wrappers = list(wrappers)
        for i, w in enumerate(wrappers):
            if not callable(w):
                raise InvalidArgumentTypeError(
                    f"{caller}: wrappers[{i}] is {w!r}, not a callable: pass wrapper classes or functions "
                    "(env -> wrapped env), e.g. wrappers=[gymnasium.wrappers.ClipAction]"
                )
    env_kwargs = {k: options.pop(k) for k in list(options) if k not in names}
    return options, GymExtras(wrappers or None, env_kwargs)
