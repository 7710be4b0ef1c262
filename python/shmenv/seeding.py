"""Gymnasium's ``reset(seed=...)`` on a pool whose reset commands seed env ``i`` with
``base + i``: any per-env seed list becomes a few such commands, one per distinct
``seed_i - i``, so a consecutive list (or one int) is one command and ``[1, 0]`` two."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from shmenv.errors import InvalidArgumentError

SEED_RANGE = 2**64

ResetCommand = tuple["list[bool] | None", "int | None"]
"""One reset command: the envs it resets (None: every env) and its base seed (None: no
seed, each env continues its random stream)."""


def per_env_seeds(seed: Any, num_envs: int) -> list[int | None]:
    """``seed`` as Gymnasium's vector envs read it: None (no env seeded), an int (env ``i``
    gets ``seed + i``) or a list of ``num_envs`` ints or Nones."""
    if seed is None:
        return [None] * num_envs
    if _is_int(seed):
        base = seed_value(int(seed), "seed")
        return [(base + i) % SEED_RANGE for i in range(num_envs)]  # wrapping, as the engine does
    if isinstance(seed, (str, bytes)) or not isinstance(seed, (Sequence, np.ndarray)):
        raise InvalidArgumentError(
            f"seed must be None, an int or a list of {num_envs} ints (or Nones), one per env; got {seed!r}"
        )
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise InvalidArgumentError(
            f"If seeds are passed as a list the length must match num_envs={num_envs} but got length={len(seeds)}."
        )
    out: list[int | None] = []
    for i, s in enumerate(seeds):
        if s is not None and not _is_int(s):
            raise InvalidArgumentError(f"seed[{i}] must be an int in 0..2**64 or None, got {s!r}")
        out.append(None if s is None else seed_value(int(s), f"seed[{i}]"))
    return out


def reset_commands(seeds: list[int | None], mask: list[bool] | None, first: bool) -> list[ResetCommand]:
    """The reset commands that reset the envs ``mask`` selects (all when None), env ``i``
    with ``seeds[i]``, in order. Envs whose ``seed - i`` agree share a command; the
    unseeded envs go first. ``first`` (the pool's first reset, which must reset every env):
    the first command resets every env, and the later ones reset again the envs they seed
    (only their last reset counts, as it reseeds them)."""
    n = len(seeds)
    selected = [i for i in range(n) if mask is None or mask[i]]
    groups: dict[int | None, list[int]] = {}
    for i in selected:
        seed = seeds[i]
        groups.setdefault(None if seed is None else (seed - i) % SEED_RANGE, []).append(i)
    order = sorted(groups, key=lambda base: (base is not None, groups[base][0]))
    commands: list[ResetCommand] = []
    for k, base in enumerate(order):
        envs = set(groups[base])
        if (k == 0 and first) or (mask is None and len(envs) == n):
            commands.append((None, base))
        else:
            commands.append(([i in envs for i in range(n)], base))
    return commands


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def seed_value(seed: int, what: str) -> int:
    """A seed in 0..2**64. Env ``i`` of a pool seeded ``s`` gets ``(s + i) % 2**64``: near the
    top of the range the seeds wrap around to 0, 1, ... (distinct as long as there are fewer
    than 2**64 envs)."""
    if not 0 <= seed < SEED_RANGE:
        raise InvalidArgumentError(f"{what} must be an int in 0..2**64 (0 to {SEED_RANGE - 1}), got {seed}")
    return seed
