"""Types of ``shmenv._shmenv``, the package's extension module (Rust, ``python/src``).

Written by hand from ``python/src``; ``tests/test_stub.py`` checks that every name,
method and parameter the built module has is here and that nothing else is.
"""

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, final

import numpy as np
import numpy.typing as npt

#: The command-line flag that makes a program a shmenv worker.
WORKER_FLAG: str

@final
class Pool:
    """A pool of envs in worker processes; see ``shmenv.make_vec`` for the Python API."""

    def __new__(cls, env_id: str, num_envs: int, args: Mapping[str, Any]) -> Pool:
        """Starts ``num_envs`` envs of ``env_id`` with ``args`` (``PoolArgs``'s fields)."""
    @property
    def spec_json(self) -> str:
        """The env spec (observation arrays, action space) as canonical JSON."""
    @property
    def lease(self) -> Lease:
        """The keep-alive object every returned array has as its numpy ``base``."""
    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the workers (after ``close()``, the last ones)."""
    @property
    def seed(self) -> int:
        """The base seed of the first reset."""
    @property
    def restarts(self) -> list[int]:
        """Restarts so far, per worker."""
    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
    @property
    def in_flight(self) -> int:
        """Envs with an action in flight (async mode)."""
    @property
    def trainer_envs(self) -> tuple[int, int]:
        """The envs the trainer steps itself, ``(start, end)``; ``(0, 0)`` when none."""
    @property
    def trainer_host(self) -> Any:
        """The hosted Python envs the trainer steps itself (``TrainerEnvs``), or None."""
    def take_call_socket(self, w: int) -> tuple[int, int] | None:
        """Worker ``w``'s call socket as ``(pid, fd)``, once; None when there is none to take."""
    def stats_json(self) -> str:
        """What the pool did since it started, as JSON with a ``verdict``."""
    def shards(self) -> list[tuple[int, int]]:
        """The env range ``(start, end)`` of each worker."""
    def reset(self, seed: int | None = None, mask: Sequence[bool] | npt.NDArray[np.bool_] | None = None) -> Results:
        """Resets every env, or with ``mask`` the envs it selects (sync mode)."""
    def step(self, actions: npt.NDArray[Any]) -> Results:
        """Sync mode: steps every env with a C-contiguous array of the action dtype."""
    def send(self, actions: npt.NDArray[Any], env_ids: npt.NDArray[np.integer[Any]]) -> None:
        """Async mode: hands one action per env in ``env_ids`` to those envs."""
    def async_reset(self) -> None:
        """Async mode: starts a reset of every env; ``recv()`` returns the results."""
    def recv(self) -> Results:
        """Async mode: waits for the next batch of results."""
    def set_converters(
        self,
        actions: Callable[[Any, int], npt.NDArray[Any]],
        env_ids: Callable[[Any, int], npt.NDArray[np.integer[Any]]],
    ) -> None:
        """Gives the one-call path shmenv's converters of actions and env ids."""
    def step_gym(self, actions: Any, pool_infos: object, stats_key: str) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Sync mode, one call: Gymnasium's ``(obs, rewards, terminated, truncated, infos)``."""
    def send_gym(self, actions: Any, env_ids: Any = None) -> None:
        """Async mode, one call: ``send`` converting the arguments as ``ShmVectorEnv.send`` does."""
    def recv_gym(self, pool_infos: object, stats_key: str) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Async mode, one call: ``recv`` returning Gymnasium's tuple."""
    def send_recv_gym(
        self, actions: Any, env_ids: Any, pool_infos: object, stats_key: str
    ) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Async mode, one call: ``send_gym`` then ``recv_gym``."""
    def attach_infos(self, bytes: npt.NDArray[np.uint8], layout: Mapping[str, int]) -> None:
        """Hosted Python envs: reads their infos from the area ``bytes`` laid out as ``layout``."""
    def take_infos(self, infos: dict[str, Any]) -> tuple[dict[str, Any], list[int]] | None:
        """Adds the last batch's hosted-env infos to ``infos``, or returns ``(numbers, rows)``."""
    def forget_info_tables(self) -> None:
        """A worker was restarted: its replacement names its info keys anew."""
    def close(self) -> list[str | None]:
        """Stops and reaps the workers; returns how each ended. Idempotent."""

@final
class Results:
    """One call's results as numpy arrays (row ``i`` is env ``env_id[i]``)."""

    @property
    def obs(self) -> tuple[npt.NDArray[Any], ...]:
        """One array per observation array of the spec, ``[rows, ...]``."""
    @property
    def final_obs(self) -> tuple[npt.NDArray[Any], ...] | None:
        """Under SameStep auto-reset: the last observations of ended episodes; else None."""
    @property
    def rewards(self) -> npt.NDArray[np.float32]:
        """``[rows]`` float32."""
    @property
    def terminated(self) -> npt.NDArray[np.bool_]:
        """``[rows]`` bool."""
    @property
    def truncated(self) -> npt.NDArray[np.bool_]:
        """``[rows]`` bool."""
    @property
    def env_id(self) -> npt.NDArray[np.int32]:
        """``[rows]`` int32: which env each row is."""
    @property
    def elapsed_step(self) -> npt.NDArray[np.int32]:
        """``[rows]`` int32: steps since the reset that produced the row's observation."""
    @property
    def episode_return(self) -> npt.NDArray[np.float64]:
        """``[rows]`` float64: the return of an episode that ended at this step, else 0."""
    @property
    def episode_length(self) -> npt.NDArray[np.int32]:
        """``[rows]`` int32: the length of an episode that ended at this step, else 0."""
    @property
    def any_done(self) -> bool:
        """Whether any episode ended at this step."""
    @property
    def restarted_envs(self) -> list[int]:
        """Envs whose restarted worker brings them back in this batch as fresh episodes."""
    def infos(self, pool_infos: object, stats_key: str) -> dict[str, Any]:
        """The infos every pool adds (``env_id``, ``elapsed_step``, episode statistics): a new dict."""

@final
class Lease:
    """Keeps a pool's region mapped; the ``base`` of every array over it."""

    def address_range(self) -> tuple[int, int]:
        """The mapped addresses ``(start, end)``."""

@final
class CallerGuard:
    """One caller at a time: ``with guard:`` raises ``UsageError`` while another thread is inside."""

    def __new__(cls) -> CallerGuard:
        """A guard no thread is inside."""
    def __enter__(self) -> None:
        """Enters, or raises ``UsageError`` naming the thread inside."""
    def __exit__(
        self,
        _kind: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        """Leaves (the thread is no longer inside once its outermost call leaves)."""
    @property
    def owner(self) -> int | None:
        """The thread inside (its ``threading.get_ident()``), None when none is."""

@final
class ActionForm:
    """An action space's array form: whether a batch of actions is taken as it is."""

    def __new__(cls, dtype: np.dtype[Any], shape: Sequence[int]) -> ActionForm:
        """The form of actions of numpy dtype ``dtype`` and per-env shape ``shape``."""
    def takes(self, actions: object, count: int) -> bool:
        """Whether ``actions`` for ``count`` envs are taken as they are (else converted)."""

def run_worker(argv: list[str]) -> int:
    """Runs a worker (the body of ``python -m shmenv.worker``); returns the exit code."""

def guard_infos_in_children(address: int, len: int) -> None:
    """Worker side: children forked from now on get zero pages in place of the info area."""

def check_actions(space_json: str, actions: npt.NDArray[Any], num_envs: int, what: str) -> None:
    """Checks a composite action's part with the engine's rules; raises ``ActionError``."""

def autoreset_name(name: str) -> str:
    """The auto-reset mode named ``name``, by its Gymnasium value name (``"NextStep"``, ...)."""

def default_num_workers(num_envs: int, trainer_shard: bool = False) -> int:
    """The worker count a pool of ``num_envs`` envs gets by default."""

def trainer_shard_choice(
    mode: str,
    *,
    num_envs: int,
    workers_given: bool,
    buildable: bool,
    plugin: bool,
    sync: bool,
    restarts: bool,
    step_timeout: bool = False,
    seed: int | None = None,
    native: tuple[str, str] | None = None,
) -> tuple[bool, bool, str]:
    """Whether a pool gets the trainer's shard (the engine's rule), whether that shard is
    every env (no worker process), and why. ``native``: a built-in env's id and JSON
    config, whose batch cost the engine then measures (its envs seeded from ``seed``)."""

def builtin_env_ids() -> list[str]:
    """The ids of the built-in (Rust) envs."""

def python_env_id() -> str:
    """The env id a pool uses for Python envs."""

def shard(w: int, num_envs: int, num_workers: int) -> tuple[int, int]:
    """The envs ``(start, end)`` worker ``w`` hosts: the engine's shard rule."""

def closest_match(name: str, candidates: Sequence[str]) -> str | None:
    """The candidate closest to ``name``, if close enough (the "did you mean" rule)."""

def dtypes() -> list[tuple[str, np.dtype[Any]]]:
    """Every engine dtype as ``(name, numpy dtype)``."""

def info_area_layout(workers: int, stride: int) -> dict[str, int]:
    """The info area's layout for ``workers`` workers of ``stride`` envs each."""

def pool_defaults() -> dict[str, Any]:
    """The engine's pool defaults, by the name of the option that sets each."""

def canonical_space(json: str) -> str:
    """The engine's canonical JSON text of one space; ``ValueError`` if it refuses it."""

def error_class_names() -> list[str]:
    """The names of the ``shmenv.errors`` classes the extension raises."""

def env_ids_as_is(env_ids: object) -> bool:
    """Whether ``env_ids`` are taken as they are (a 1-D contiguous int64/int32 numpy array)."""
