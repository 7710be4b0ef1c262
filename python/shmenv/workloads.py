"""Real-workload envs, as ``python -m shmenv.bench --workload`` runs them
(:mod:`shmenv.bench.workloads` says what every engine runs):

- :func:`make_atari`: ``ALE/<game>-v5`` with EnvPool's ``Pong-v5`` preprocessing as
  Gymnasium wrappers (``frameskip=1``, ``repeat_action_probability=0.0``,
  ``AtariPreprocessing(frame_skip=4, noop_max=30, screen_size=84, grayscale_obs=True)``,
  ``FrameStackObservation(4)``), an entry point shmenv hosts
  (``shmenv.workloads:make_atari``);
- :func:`make_gymnasium`: a registered Gymnasium env (MuJoCo, classic control);
- :func:`ale_roms` and :func:`gymnasium_model`: the ROM folder and model files the native
  ALE and MuJoCo plugins take as config.
"""

from __future__ import annotations

from typing import Any

#: EnvPool's Atari defaults that the other engines are given explicitly.
ATARI_FRAME_SKIP = 4
ATARI_NOOP_MAX = 30
ATARI_SCREEN = 84
ATARI_STACK = 4
ATARI_MAX_FRAMES = 108_000


def make_atari(game: str = "Pong") -> Any:
    """``ALE/<game>-v5`` with EnvPool's preprocessing, as Gymnasium wrappers (a factory
    shmenv's workers call by name, and the single-env and Gymnasium baselines use)."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(
        f"ALE/{game}-v5",
        frameskip=1,
        repeat_action_probability=0.0,
        max_num_frames_per_episode=ATARI_MAX_FRAMES,
    )
    env = gym.wrappers.AtariPreprocessing(
        env,
        frame_skip=ATARI_FRAME_SKIP,
        noop_max=ATARI_NOOP_MAX,
        screen_size=ATARI_SCREEN,
        grayscale_obs=True,
    )
    return gym.wrappers.FrameStackObservation(env, ATARI_STACK)


def make_gymnasium(env_id: str = "HalfCheetah-v5") -> Any:
    """A registered Gymnasium env (MuJoCo and classic workloads)."""
    import gymnasium as gym

    return gym.make(env_id)


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
