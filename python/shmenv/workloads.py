"""The workloads of ``python -m shmenv.bench --workload``: what each engine runs, built so
that every engine steps the same env with the same preprocessing.

**atari**: Pong with the preprocessing of EnvPool's ``Pong-v5`` defaults, for every engine:

- EnvPool ``Pong-v5``: frame skip 4 (max-pool of the last two frames), 84x84 grayscale
  (area resize), 4-frame stack, up to 30 no-op starts, ``repeat_action_probability=0``,
  27,000 steps (108,000 frames) per episode, no episodic life, no reward clipping, fire
  reset on (its default).
- Gymnasium and shmenv's hosted env (:func:`make_atari`): ``ALE/Pong-v5`` with
  ``frameskip=1`` and ``repeat_action_probability=0.0`` (EnvPool's), wrapped in
  ``AtariPreprocessing(frame_skip=4, noop_max=30, screen_size=84, grayscale_obs=True)``
  and ``FrameStackObservation(4)``. Difference: ``AtariPreprocessing`` has no fire reset
  (one FIRE step after a reset in EnvPool; noise in a throughput figure).
- ALE's own ``ale_py.vector_env.AtariVectorEnv`` (C++ threads, ``ale-py`` 0.12+): the
  same settings, with ``reward_clipping=False`` (its default clips).

- shmenv's native plugin (``examples/cpp/ale_atari.cpp``, ``--plugin``): ``AtariC-v5``, the
  C++ ALE with EnvPool's preprocessing ported to C++; with the same seed and actions its frames
  equal EnvPool's.

``lives`` reaches the trainer in every engine's infos (shmenv: through info columns), except
the native plugin's (the plugin ABI has no infos).

**mujoco**: ``HalfCheetah-v5`` (Gymnasium, ``mujoco`` from PyPI) hosted in shmenv and in
Gymnasium's vector envs; EnvPool has only ``HalfCheetah-v4`` (on its own MuJoCo build);
a native C env (``examples/c/mujoco_locomotion.c``, ``--plugin``) runs as
``HalfCheetahC-v5`` (``HopperC-v5`` with ``--mujoco-env Hopper``).

**classic**: ``CartPole-v1``: shmenv's native (Rust) env, EnvPool's C++ one, Gymnasium's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

#: EnvPool's Atari defaults that the other engines are given explicitly.
ATARI_FRAME_SKIP = 4
ATARI_NOOP_MAX = 30
ATARI_SCREEN = 84
ATARI_STACK = 4
ATARI_MAX_FRAMES = 108_000

#: Gymnasium's model file of each MuJoCo env name.
MODEL_FILES = {"HalfCheetah": "half_cheetah.xml", "Hopper": "hopper.xml", "Ant": "ant.xml"}


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


@dataclass(frozen=True)
class Workload:
    """One workload: the env every engine runs and the sizes it is measured at."""

    name: str
    #: What the single env and Gymnasium run: a factory and its keyword arguments.
    factory: Callable[..., Any]
    kwargs: dict[str, Any]
    #: The env shmenv's hosted contestants run: a native id, or None for `factory`.
    shmenv_native_id: str | None
    #: EnvPool's env id and extra keyword arguments.
    envpool_id: str
    envpool_kwargs: dict[str, Any] = field(default_factory=dict)
    #: ALE's game name for `AtariVectorEnv` (Atari only).
    ale_game: str | None = None
    #: Emulator frames per env step (frames/s = steps/s x this), Atari only.
    frames_per_step: int | None = None
    #: (num_envs, batch_size or None for sync) measured by default.
    sizes: tuple[tuple[int, int | None], ...] = ()
    #: The id a native plugin provides for this workload (``--plugin``), and its config.
    plugin_id: str | None = None
    plugin_config: Callable[[], dict[str, Any]] | None = None


def workloads(game: str = "Pong", mujoco_env: str = "HalfCheetah") -> dict[str, Workload]:
    """The workloads by name; `game` and `mujoco_env` pick the Atari game and MuJoCo env."""
    return {
        "atari": Workload(
            name="atari",
            factory=make_atari,
            kwargs={"game": game},
            shmenv_native_id=None,
            envpool_id=f"{game}-v5",
            ale_game=game.lower(),
            frames_per_step=ATARI_FRAME_SKIP,
            sizes=((8, None), (16, None), (16, 8)),
            plugin_id="AtariC-v5",
            plugin_config=lambda: {"rom_dir": ale_roms(), "game": game.lower()},
        ),
        "mujoco": Workload(
            name="mujoco",
            factory=make_gymnasium,
            kwargs={"env_id": f"{mujoco_env}-v5"},
            shmenv_native_id=None,
            envpool_id=f"{mujoco_env}-v4",
            sizes=((8, None), (32, None), (32, 16)),
            plugin_id=f"{mujoco_env}C-v5",
            plugin_config=lambda: {"model": gymnasium_model(MODEL_FILES.get(mujoco_env, f"{mujoco_env.lower()}.xml"))},
        ),
        "classic": Workload(
            name="classic",
            factory=make_gymnasium,
            kwargs={"env_id": "CartPole-v1"},
            shmenv_native_id="CartPole-v1",
            envpool_id="CartPole-v1",
            sizes=((32, None), (32, 16)),
        ),
    }


def ale_vector_env(game: str, num_envs: int, batch_size: int | None, threads: int) -> Any:
    """ALE's ``AtariVectorEnv`` with EnvPool's ``Pong-v5`` settings (see the module doc)."""
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv(
        game,
        num_envs,
        batch_size=batch_size or 0,
        num_threads=threads,
        max_num_frames_per_episode=ATARI_MAX_FRAMES,
        repeat_action_probability=0.0,
        img_height=ATARI_SCREEN,
        img_width=ATARI_SCREEN,
        grayscale=True,
        stack_num=ATARI_STACK,
        frameskip=ATARI_FRAME_SKIP,
        maxpool=True,
        noop_max=ATARI_NOOP_MAX,
        episodic_life=False,
        reward_clipping=False,
        use_fire_reset=True,
    )


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
