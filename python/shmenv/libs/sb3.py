"""``ShmVecEnv``: shmenv as a Stable-Baselines3 ``VecEnv``.

Stable-Baselines3 is imported here, lazily: ``import shmenv`` never needs it. When it is
not installed, ``ShmVecEnv`` still implements the same protocol on a small stand-in base
class, so code (and tests) that drive a VecEnv by hand work without torch.

>>> from shmenv.libs.sb3 import ShmVecEnv
>>> venv = ShmVecEnv("CartPole-v1", num_envs=8, seed=0)
>>> obs = venv.reset()
>>> obs.shape
(8, 4)
>>> venv.close()

SB3 conventions it follows: auto-reset in the same step (the returned observation of a
finished env is the first of its next episode), ``infos[i]["terminal_observation"]`` holds
the last observation of the finished episode, ``infos[i]["TimeLimit.truncated"]`` says
whether it was cut by the time limit, and ``infos[i]["episode"] = {"r", "l", "t"}`` reports
it (what ``VecMonitor`` and SB3's episode logging read).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import numpy as np

from shmenv.arguments import start_method as check_start_method
from shmenv.errors import InvalidArgumentError
from shmenv.resolve import env_fns_target
from shmenv.vector import ShmVectorEnv


class _VecEnvStandIn:
    """The parts of SB3's ``VecEnv`` that ShmVecEnv relies on, for use without SB3."""

    def __init__(self, num_envs: int, observation_space, action_space):
        self.num_envs = num_envs
        self.observation_space = observation_space
        self.action_space = action_space
        self.reset_infos: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self._seeds: list[int | None] = [None for _ in range(num_envs)]
        self._options: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self.render_mode = None
        self.metadata = {"render_modes": []}

    def step(self, actions):
        self.step_async(actions)
        return self.step_wait()

    # SB3's abstract methods that step and render call; each subclass implements them.
    def step_async(self, actions: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__}.step_async: a VecEnv subclass implements it")

    def step_wait(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.step_wait: a VecEnv subclass implements it")

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        raise NotImplementedError(f"{type(self).__name__}.env_method: a VecEnv subclass implements it")

    def get_images(self) -> Sequence[np.ndarray | None]:
        raise NotImplementedError(f"{type(self).__name__}.get_images: this VecEnv does not collect the envs' frames")

    def _reset_seeds(self) -> None:
        self._seeds = [None for _ in range(self.num_envs)]

    def _reset_options(self) -> None:
        self._options = [{} for _ in range(self.num_envs)]

    @property
    def unwrapped(self):
        return self

    def render(self, mode: str | None = None) -> np.ndarray | None:
        """SB3's ``VecEnv.render``: the envs' frames tiled into one image (returned for
        ``"rgb_array"``, shown with OpenCV for ``"human"`` over ``"rgb_array"`` envs); a
        warning and None when ``mode`` is not the envs' render mode."""
        if mode == "human" and self.render_mode != mode:
            if self.render_mode != "rgb_array":
                warnings.warn(
                    f"You tried to render a VecEnv with mode='{mode}' but the render mode defined when "
                    f"initializing the environment must be 'human' or 'rgb_array', not '{self.render_mode}'."
                )
                return None
        elif mode and self.render_mode != mode:
            warnings.warn(
                f"render mode {mode!r} differs from the environment's render mode ({self.render_mode}): render "
                "modes are chosen when the envs are built"
            )
            return None
        mode = mode or self.render_mode
        if mode is None:
            warnings.warn("You tried to call render() but no `render_mode` was passed to the env constructor.")
            return None
        if self.render_mode == "human":
            self.env_method("render")
            return None
        if mode in ("rgb_array", "human"):
            image = tile_images(self.get_images())
            if mode == "rgb_array":
                return image
            import cv2  # as SB3 does: "human" over rgb_array envs shows the tiles with OpenCV

            cv2.imshow("vecenv", image[:, :, ::-1])
            cv2.waitKey(1)
            return None
        self.env_method("render")
        return None


def tile_images(images_nhwc) -> np.ndarray:
    """SB3's ``tile_images``: N images (height, width, channels) in a near-square grid,
    the missing cells black."""
    images = np.asarray(images_nhwc)
    n, height, width, channels = images.shape
    rows = int(np.ceil(np.sqrt(n)))
    cols = int(np.ceil(n / rows))
    padded = np.concatenate([images, np.zeros((rows * cols - n, height, width, channels), images.dtype)])
    grid = padded.reshape(rows, cols, height, width, channels).transpose(0, 2, 1, 3, 4)
    return grid.reshape(rows * height, cols * width, channels)


if TYPE_CHECKING:
    # The type check runs without SB3 (an optional dependency): it checks the VecEnvs below
    # against the stand-in, SB3's VecEnv as far as they use it.
    _Base = _VecEnvStandIn
else:
    try:  # pragma: no cover - depends on the environment
        from stable_baselines3.common.vec_env.base_vec_env import VecEnv as _Base
    except ImportError:
        _Base = _VecEnvStandIn
HAVE_SB3: bool = _Base is not _VecEnvStandIn

__all__ = ["ShmVecEnv", "HAVE_SB3"]


class ShmVecEnv(_Base):
    """A Stable-Baselines3 ``VecEnv`` over shmenv worker processes. ``env`` and the
    keywords are those of :func:`shmenv.make_vec` (a native or Gymnasium id, an EnvSpec,
    an entry point; ``num_workers``, ``seed``, ``config``, ``copy``, ...). With Python envs,
    ``get_attr``/``set_attr``/``env_method``/``env_is_wrapped`` reach the env objects in
    the workers (arguments and results pickled, on a side channel).

    Every array it returns is the caller's (SB3 writes into ``rewards`` and observations in
    place). ``copy=False`` makes observations read-only views of the shared memory, valid
    until the step after next (what SB3's rollout loop needs: ``_last_obs`` is read one
    step later), for algorithms that do not write into them.

    ``env_is_wrapped(Monitor)`` is True: ``infos[i]["episode"]`` is reported at every
    episode end, as SB3's ``Monitor`` does, so ``evaluate_policy`` reads true returns."""

    def __init__(self, env: Any, num_envs: int | None = None, start_method: str | None = None, **kwargs: Any):
        target, num_envs = _target(env, num_envs, start_method, kwargs)
        kwargs.pop("autoreset_mode", None)
        # The episode statistics SB3's infos report (an infos key of the pool's own).
        kwargs["episode_stats_key"] = kwargs.get("episode_stats_key") or "episode_stats"
        with renamed_errors("ShmVecEnv"):
            self.venv = ShmVectorEnv(target, num_envs, autoreset_mode="same_step", **kwargs)
        if self.venv.is_async:
            self.venv.close()
            raise InvalidArgumentError("ShmVecEnv steps every env at once: do not pass batch_size")
        self._actions = None
        self._t0 = np.full(num_envs, time.perf_counter())
        super().__init__(num_envs, self.venv.single_observation_space, self.venv.single_action_space)
        # As SB3's VecEnv: the envs' render mode, and "human" too over "rgb_array" (tiles
        # shown with OpenCV by render()).
        self.render_mode = self.venv.render_mode
        modes = {None: [], "rgb_array": ["human", "rgb_array"]}
        self.metadata = {"render_modes": modes.get(self.render_mode, [self.render_mode])}

    # --- VecEnv API ------------------------------------------------------------------

    def reset(self):
        seed = self._seeds[0] if self._seeds and self._seeds[0] is not None else None
        obs, infos = self.venv.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = info_dicts(infos, self.num_envs, np.zeros(0, bool), [], self.venv.episode_stats_key)
        self._t0[:] = time.perf_counter()
        return obs

    def step_async(self, actions) -> None:
        self._actions = actions

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async(actions)")
        obs, rewards, terminated, truncated, infos = self.venv.step(self._actions)
        self._actions = None
        dones = np.logical_or(terminated, truncated)
        env_infos = info_dicts(infos, self.num_envs, dones, self.reset_infos, self.venv.episode_stats_key)
        if dones.any():
            now = time.perf_counter()
            stats = infos[self.venv.episode_stats_key]
            final = infos.get("final_obs")
            for i in np.flatnonzero(dones):
                info = env_infos[i]
                info["terminal_observation"] = final[i] if final is not None else None
                info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
                info["episode"] = {
                    "r": float(stats["r"][i]),
                    "l": int(stats["l"][i]),
                    "t": round(now - self._t0[i], 6),
                }
                self._t0[i] = now
        return obs, rewards, dones, env_infos

    def close(self) -> None:
        self.venv.close()

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seeds the next ``reset()``: env ``i`` gets ``seed + i``."""
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self._seeds = [seed + i for i in range(self.num_envs)]
        return self._seeds

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return list(self.venv.env_call("get", attr_name, list(self._indices(indices))))

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        idx = list(self._indices(indices))
        if self.venv.python_env:
            self.venv.env_call("set", attr_name, idx, values=[value] * len(idx))
            return
        raise AttributeError(
            f"{self.venv.env_id} is a native shmenv env: its attributes live in worker processes "
            f"and cannot be set (tried {attr_name!r}); pass settings through config=..."
        )

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        idx = list(self._indices(indices))
        if self.venv.python_env:
            return self.venv.env_call("call", method_name, idx, args=method_args, kwargs=method_kwargs)
        raise AttributeError(
            f"{self.venv.env_id} is a native shmenv env: it has no Python methods (tried {method_name!r})"
        )

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        idx = list(self._indices(indices))
        if _is_monitor(wrapper_class):
            return [True for _ in idx]
        if self.venv.python_env:
            return self.venv.env_call("is_wrapped", "", idx, values=[wrapper_class] * len(idx))
        return [False for _ in idx]

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Every env's frame (``render_mode="rgb_array"``), as SB3's ``DummyVecEnv`` gives
        them: rendered in the workers, pickled over the call channel; ``render()`` tiles
        them into one image. Other render modes: a warning and None per env."""
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images."
            )
            return [None for _ in range(self.num_envs)]
        return list(self.venv.render())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # --- internals -------------------------------------------------------------------

    def _indices(self, indices) -> Iterable[int]:
        if indices is None:
            return range(self.num_envs)
        if isinstance(indices, int):
            return [indices]
        return indices

    @property
    def worker_pids(self) -> list[int]:
        return self.venv.worker_pids


def _target(env: Any, num_envs: int | None, start_method: str | None, kwargs: dict) -> tuple[Any, int]:
    """What the pool runs and how many: ``SubprocVecEnv``'s list of env thunks (one env
    each), or :func:`shmenv.make_vec`'s env and ``num_envs`` (default 1)."""
    check_start_method("ShmVecEnv", start_method)
    if isinstance(env, (list, tuple)):
        with renamed_errors("ShmVecEnv"):
            target, n = env_fns_target(env, kwargs)
        if num_envs is not None and num_envs != n:
            raise InvalidArgumentError(
                f"ShmVecEnv got {n} env thunks and num_envs={num_envs}: a list runs one env per thunk, drop num_envs"
            )
        return target, n
    return env, 1 if num_envs is None else num_envs


#: Infos keys of shmenv's own, which SB3's info dicts do not carry as they are.
_OWN_KEYS = ("final_obs", "final_info", "env_id", "elapsed_step")


def info_dicts(infos: dict, num_envs: int, dones: np.ndarray, reset_infos: list, stats_key: str) -> list[dict]:
    """The envs' own infos (Gymnasium's vector dict) as SB3's list of dicts, as
    ``SubprocVecEnv`` gives them: an env whose episode ended gets its last step's info
    (``infos["final_info"]``), and its reset's info goes to ``reset_infos``."""
    out: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    own = (*_OWN_KEYS, stats_key)
    if len(infos) > len([k for k in infos if k in own or k[1:] in own]):
        _spread(infos, out, own)
    if dones.any():
        final: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        if isinstance(infos.get("final_info"), dict):
            _spread(infos["final_info"], final, own)
        for i in np.flatnonzero(dones):
            reset_infos[i], out[i] = out[i], final[i]
    return out


def _spread(infos: dict, out: list[dict], skip: tuple = ()) -> None:
    """Gymnasium's vector infos (arrays with ``_key`` masks) into one dict per env."""
    for key, value in infos.items():
        if key in skip or key.startswith("_"):
            continue
        mask = infos.get("_" + key)
        rows = range(len(out)) if mask is None else np.flatnonzero(mask)
        if isinstance(value, dict):
            nested: list[dict[str, Any]] = [{} for _ in out]
            _spread(value, nested)
            for i in rows:
                out[i][key] = nested[i]
            continue
        for i in rows:
            item = value[i]
            out[i][key] = item.item() if isinstance(item, np.generic) else item


@contextlib.contextmanager
def renamed_errors(name: str) -> Iterator[None]:
    """Errors raised while ``name`` builds its pool speak of ``name``, not of the
    ``make_vec`` it calls (``"make_vec() got an unexpected keyword argument ..."``)."""
    try:
        yield
    except Exception as e:
        if e.args and isinstance(e.args[0], str):
            text = e.args[0]
            for old in ("shmenv.multiagent.make_vec", "shmenv.make_vec", "make_vec"):
                text = (
                    text.replace(old + "()", name + "()").replace(old + ":", name + ":").replace(old + " ", name + " ")
                )
            e.args = (text, *e.args[1:])
        raise


def _is_monitor(wrapper_class) -> bool:
    """Whether `wrapper_class` is SB3's ``Monitor`` (or a subclass): what ShmVecEnv's
    episode infos stand in for."""
    if not HAVE_SB3:
        return False
    from stable_baselines3.common.monitor import Monitor

    return isinstance(wrapper_class, type) and issubclass(wrapper_class, Monitor)
