"""The MuJoCo plugin of shmenv (``HalfCheetahC-v5``, ``HopperC-v5``, ``AntC-v5``):
Gymnasium's v5 locomotion envs in C on MuJoCo's C API, stepped by shmenv's workers.
``shmenv.make_vec`` finds it through the entry points of this package (group
``shmenv.plugins``); the library links the installed mujoco package's ``libmujoco.so`` and
loads Gymnasium's model files."""

from __future__ import annotations

import importlib.util
import os

LIBRARY = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "libmujoco_locomotion.so"
)

#: Gymnasium's model file of each id.
MODELS = {
    "HalfCheetahC-v5": "half_cheetah.xml",
    "HopperC-v5": "hopper.xml",
    "AntC-v5": "ant.xml",
}


def model_path(xml_file: str) -> str:
    """The path of one of Gymnasium's MuJoCo model files (without importing Gymnasium)."""
    spec = importlib.util.find_spec("gymnasium")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "shmenv-mujoco loads Gymnasium's model files: pip install gymnasium"
        )
    path = os.path.join(
        next(iter(spec.submodule_search_locations)),
        "envs",
        "mujoco",
        "assets",
        xml_file,
    )
    if not os.path.isfile(path):
        raise ImportError(
            f"the installed Gymnasium has no model file {path}: pip install --upgrade gymnasium"
        )
    return path


def _find_libmujoco() -> None:
    """Makes the installed mujoco's ``libmujoco.so`` loadable when it is not where the
    library's RPATH looks (``$ORIGIN/../mujoco``: the mujoco package beside this one, as in
    one virtualenv): its folder goes first in ``LD_LIBRARY_PATH``, which the worker
    processes read when they start, and it is loaded into this process (for
    ``trainer_shard``), so that the plugin's dependency is found by its name."""
    spec = importlib.util.find_spec("mujoco")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "shmenv-mujoco links the mujoco package's libmujoco.so, which is not installed: pip install mujoco"
        )
    folder = next(iter(spec.submodule_search_locations))
    beside = os.path.join(os.path.dirname(os.path.dirname(LIBRARY)), "mujoco")
    if os.path.realpath(beside) == os.path.realpath(folder):
        return
    import ctypes
    import glob

    libs = sorted(glob.glob(os.path.join(folder, "libmujoco.so*")))
    if not libs:
        raise ImportError(
            f"the installed mujoco has no libmujoco.so in {folder}: pip install --force-reinstall mujoco"
        )
    paths = os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    if folder not in paths:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([folder, *filter(None, paths)])
    ctypes.CDLL(libs[0], mode=ctypes.RTLD_GLOBAL)


def plugin(env_id: str) -> dict:
    """The entry point: the library and its default config (Gymnasium's model) for ``env_id``."""
    _find_libmujoco()
    return {"library": LIBRARY, "config": {"model": model_path(MODELS[env_id])}}
