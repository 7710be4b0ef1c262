"""Where the files native env plugins take as config live, found from the installed Python
packages that ship them: ale-py's ROM folder (the native ALE plugin's ``rom_dir``) and
Gymnasium's MuJoCo model files (the native MuJoCo plugin's ``model``). Each imports its
package only when called."""

from __future__ import annotations

__all__ = ["ale_roms", "gymnasium_model"]


def ale_roms() -> str:
    """The folder of ale-py's ROMs, the ``rom_dir`` config of the native ALE plugin
    (``examples/cpp/ale_atari.cpp``)."""
    import os

    import ale_py.roms

    return os.path.dirname(ale_py.roms.__file__)


def gymnasium_model(xml_file: str) -> str:
    """The path of one of Gymnasium's MuJoCo model files (``half_cheetah.xml``, ...), the
    ``model`` config of the native MuJoCo plugin (``examples/c/mujoco_locomotion.c``)."""
    import os

    import gymnasium.envs.mujoco as gym_mujoco

    return os.path.join(os.path.dirname(gym_mujoco.__file__), "assets", xml_file)
