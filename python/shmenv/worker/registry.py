"""The trainer's Gymnasium registrations, replayed in a Python worker before it runs an env
factory (:func:`shmenv.resolve.registrations` made them): a factory that ``gym.make``\\ s an
id the script registered (``gym.register``, ``import ale_py``) finds it here too, as it
would in a forked ``SubprocVecEnv`` worker. Workers are fresh interpreters, so what cannot
be replayed is named in the error of the factory that needs it."""

from __future__ import annotations

import base64
import json
import pickle
import warnings
import zlib
from typing import Any, Callable

_REPLAYED: dict[str, str] | None = None


def replay(payload: str | None) -> dict[str, str]:
    """Registers the trainer's ids this process lacks (once per worker); returns the ids
    that could not be replayed, with the reason."""
    global _REPLAYED
    if _REPLAYED is not None:
        return _REPLAYED
    failed: dict[str, str] = {}
    if payload:
        import gymnasium as gym
        from gymnasium.envs.registration import EnvSpec

        data = json.loads(zlib.decompress(base64.b64decode(payload)))
        failed.update(data["failed"])
        specs: list[Any] = []
        for text in data["json"]:
            specs.append(EnvSpec.from_json(text))
        for blob in data["pickled"]:
            try:
                specs.append(pickle.loads(base64.b64decode(blob)))
            except Exception as e:  # noqa: BLE001 - named if a factory needs it
                failed["(a pickled registration)"] = f"{type(e).__name__}: {e}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding environment ...": the trainer's spec wins
            for spec in specs:
                known = gym.registry.get(spec.id)
                if known is None or known != spec:
                    gym.registry[spec.id] = spec
    _REPLAYED = failed
    return failed


def unknown_ids_explained(fn: Callable[[], Any], failed: dict[str, str], replayed: bool) -> Any:
    """``fn()``; an id Gymnasium does not know here raises an error saying why: the worker
    is a fresh interpreter, which ids could not be replayed, and what to do."""
    from gymnasium.error import UnregisteredEnv

    try:
        return fn()
    except UnregisteredEnv as e:
        if failed:
            why = "; ".join(f"{k} ({v})" for k, v in list(failed.items())[:5])
            known = f" These ids registered in the trainer could not be replayed here: {why}."
        elif replayed:
            known = " Every id the trainer had registered when the pool was made was replayed here."
        else:
            known = " The trainer's registrations did not fit in the pool's config and were not replayed."
        raise RuntimeError(
            f"the env factory asked Gymnasium for an id this worker does not know: {e} shmenv's workers are "
            "fresh Python processes, not forks of your script: they know Gymnasium's own ids and the ids your "
            f"script had registered before making the pool.{known} Register the id before making the pool with "
            "an entry point that imports or pickles ('package.module:Class', or a class), or import the "
            "package that registers it inside the factory (lambda: (__import__('ale_py'), gym.make(id))[1])"
        ) from e
