"""The ALE plugin of shmenv (``PongC-v5``, ``AtariC-v5``): the Arcade Learning Environment
in C++ with EnvPool's preprocessing, stepped by shmenv's workers. ``shmenv.make_vec`` and
``shmenv.envpool.make("Pong-v5")`` find it through the entry points of this package
(group ``shmenv.plugins``); the ROMs are the installed ale-py's."""

from __future__ import annotations

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "libale_atari.so")


def ale_version() -> str:
    """The version of the Arcade Learning Environment (ale-py's sdist) the library links."""
    with open(os.path.join(HERE, "ALE_VERSION")) as f:
        return f.read().strip()


def rom_dir() -> str:
    """The folder of the installed ale-py's ROMs (without importing ale-py)."""
    spec = importlib.util.find_spec("ale_py")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "shmenv-ale finds its ROMs in the ale-py package, which is not installed: pip install ale-py"
        )
    roms = os.path.join(next(iter(spec.submodule_search_locations)), "roms")
    if not os.path.isdir(roms):
        raise ImportError(
            f"the installed ale-py has no ROM folder ({roms}): pip install --upgrade ale-py"
        )
    return roms


def plugin(env_id: str) -> dict:
    """The entry point: the library and its default config (the ROM folder) for ``env_id``."""
    return {"library": LIBRARY, "config": {"rom_dir": rom_dir()}}
