"""Worker process entry point: ``python -m shmenv.worker --shmenv-worker <index> <fd> <pid>``.

Pools start it (by exec, never ``multiprocessing``); it is not meant to be run by hand.
The hot loop is Rust (the extension's host): it reads actions from the shared region,
steps the envs and writes results in place. Python envs are built here, from JSON config
(``make_env``), and their spaces reported as the engine's spec (``spec_json``). A daemon
thread serves ``call``/``get_attr``/``set_attr`` requests from the trainer on a side
channel (a Unix socket) that never touches the step path.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import sys
import threading
import traceback
from typing import Any

# This worker's Python envs, in shard order (local index = position).
_ENVS: list[Any] = []
# Reset options the trainer sent for env `local` (op "reset_options"), taken by its next reset.
RESET_OPTIONS: dict[int, dict] = {}
# The spec JSON and spaces of this worker's first env, which every later one must match.
_FIRST_SPEC: tuple[str, str, str] | None = None
# The global index of this worker's first env, when the config says (factories).
_SHARD_START: int | None = None


def load_entry_point(entry_point: str):
    """``"package.module:attr"`` (attr may be dotted) -> the object."""
    module_name, sep, attr = entry_point.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"entry point {entry_point!r} must look like 'package.module:attr'")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def make_env(config_json: str):
    """Builds one env from the pool's config (called by the host for each env of the shard)."""
    config = json.loads(config_json)
    kind = config.get("kind")
    kwargs = config.get("kwargs") or {}
    if kind == "spec":
        import gymnasium as gym
        from gymnasium.envs.registration import EnvSpec

        spec = EnvSpec.from_json(config["spec"])
        env = gym.make(spec, disable_env_checker=True, **kwargs)
    elif kind == "entry_point":
        env = load_entry_point(config["entry_point"])(**kwargs)
    elif kind == "factory":
        env = _from_factory(config)
    else:
        raise ValueError(f"unknown Python env kind {kind!r} in the pool config")
    _ENVS.append(env)
    return env


def _worker_index() -> int:
    """This worker's index, from its command line (``--shmenv-worker <index> <fd> <pid>``)."""
    try:
        return int(sys.argv[sys.argv.index("--shmenv-worker") + 1])
    except (ValueError, IndexError):
        raise RuntimeError(f"no worker index in the command line {sys.argv!r}") from None


def _env_index(config: dict) -> int:
    """The global index of the env being built: the shard's first env (the engine's
    ``protocol::shard``: ``w * num_envs // num_workers``) plus the envs built so far."""
    global _SHARD_START
    num_envs, num_workers = int(config["num_envs"]), int(config["num_workers"])
    w = _worker_index()
    start, end = w * num_envs // num_workers, (w + 1) * num_envs // num_workers
    _SHARD_START = start
    index = start + len(_ENVS)
    if not start <= index < end:
        raise RuntimeError(f"worker {w} builds envs {start}..{end - 1} but was asked for env {index}")
    return index


def _from_factory(config: dict):
    """Unpickles the env's factory (cloudpickle payload, base64) and calls it: a fresh copy
    per env, as each env of ``AsyncVectorEnv`` gets its own."""
    import base64
    import pickle

    payloads = config["factories"]
    which = config.get("env_factory")
    index = _env_index(config) if "num_envs" in config else None
    k = 0 if which is None else which[index]
    fn = pickle.loads(base64.b64decode(payloads[k]))
    env = fn()
    if not (hasattr(env, "reset") and hasattr(env, "step")):
        raise TypeError(f"the env factory {fn!r} returned {env!r}, not an env (it has no reset/step)")
    return env


def spec_json(env) -> str:
    """The env's spaces as the engine's spec JSON. Every env of a worker must have the
    spaces of its first env (the engine checks workers against each other)."""
    global _FIRST_SPEC
    out = _spec_json(env)
    spaces = (repr(env.observation_space), repr(env.action_space))
    if _FIRST_SPEC is None or len(_ENVS) <= 1:
        _FIRST_SPEC = (out, *spaces)
    elif out != _FIRST_SPEC[0]:
        local = len(_ENVS) - 1
        this, first = (
            (f"env {_SHARD_START + local}", f"env {_SHARD_START}")
            if _SHARD_START is not None
            else (f"this worker's env {local}", "its first env")
        )
        raise ValueError(
            f"the envs of a pool must have the same spaces: {this} has observation space {spaces[0]} and action "
            f"space {spaces[1]}, but {first} (built by the same worker) has observation space {_FIRST_SPEC[1]} "
            f"and action space {_FIRST_SPEC[2]}"
        )
    return out


def _spec_json(env) -> str:
    from gymnasium import spaces

    from shmenv import layout
    from shmenv.spaces import space_to_json

    obs = env.observation_space
    if layout.is_nested(obs):
        jsons = layout.leaf_json(obs, "observation")
        observations = [{"name": n, "space": j} for n, j in zip(layout.leaf_names(obs), jsons)]
    elif isinstance(obs, spaces.Dict):
        observations = [{"name": k, "space": space_to_json(v, f"observation {k!r}")} for k, v in obs.spaces.items()]
    else:
        observations = [{"name": "obs", "space": space_to_json(obs, "observation space")}]
    act = env.action_space
    if layout.is_composite(act):
        action = layout.ActionPacking(act).engine_json()
    else:
        action = space_to_json(act, "action space")
    single_key_dict = isinstance(obs, spaces.Dict) and len(obs.spaces) == 1 and not layout.is_nested(obs)
    return json.dumps(
        {"observations": observations, "action": action, "max_episode_steps": None, "single_key_dict": single_key_dict}
    )


def obs_flattener(env):
    """For a nested Dict/Tuple observation space, the function from an observation to its
    arrays in spec order (the host calls it at every reset and step); else None."""
    import functools

    from shmenv import layout

    space = env.observation_space
    return functools.partial(layout.flatten, space) if layout.is_nested(space) else None


def action_unpacker(env):
    """For a Dict/Tuple action space, the function from the packed byte row the trainer
    wrote to the action the env takes; else None."""
    from shmenv import layout

    space = env.action_space
    return layout.ActionPacking(space).unpack if layout.is_composite(space) else None


# --- the call side channel ------------------------------------------------------------


def send_message(sock: socket.socket, obj: Any) -> None:
    import pickle

    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(len(data).to_bytes(8, "little") + data)


def recv_message(sock: socket.socket) -> Any:
    """The next message, or raises EOFError when the peer closed."""
    import pickle

    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("the peer closed the call channel")
            buf += chunk
        return bytes(buf)

    return pickle.loads(exactly(int.from_bytes(exactly(8), "little")))


def _attr(env, name: str):
    getter = getattr(env, "get_wrapper_attr", None)
    return getter(name) if getter is not None else getattr(env, name)


def _run_one(op: str, env, name: str, value: Any, args: tuple, kwargs: dict) -> Any:
    if op == "get":
        return _attr(env, name)
    if op == "call":
        attr = _attr(env, name)
        return attr(*args, **kwargs) if callable(attr) else attr
    if op == "set":
        setter = getattr(env, "set_wrapper_attr", None)
        if setter is not None:
            setter(name, value)
        else:
            setattr(env, name, value)
        return None
    if op == "is_wrapped":
        from gymnasium import Wrapper

        e = env
        while isinstance(e, Wrapper):
            if isinstance(e, value):
                return True
            e = e.env
        return False
    raise ValueError(f"unknown call op {op!r}")


def _serve_calls(address: str, token: str, index: int) -> None:
    # Run as `python -m shmenv.worker`, this file is `__main__`; the envs were registered
    # in the `shmenv.worker` module the host imported.
    module = importlib.import_module("shmenv.worker")
    envs, reset_options = module._ENVS, module.RESET_OPTIONS
    from shmenv import infos

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect("\0" + address)
        send_message(sock, (token, index))
        while True:
            try:
                op, local, name, values, args, kwargs = recv_message(sock)
            except EOFError:
                return
            if op == "map_infos":  # the fd follows with the stride (SCM_RIGHTS)
                try:
                    infos.map_flags(sock, index)
                    send_message(sock, [])
                except Exception:  # noqa: BLE001 - reported to the trainer with the traceback
                    send_message(sock, [(False, traceback.format_exc())])
                continue
            results = []
            for k, i in enumerate(local):
                if op == "infos":
                    results.append((True, infos.take(i)))
                    continue
                if op == "reset_options":
                    reset_options[i] = values[k]
                    results.append((True, None))
                    continue
                try:
                    results.append((True, _run_one(op, envs[i], name, values[k], args, kwargs)))
                except BaseException:  # noqa: BLE001 - reported to the trainer with the traceback
                    results.append((False, traceback.format_exc()))
            try:
                send_message(sock, results)
            except Exception:  # noqa: BLE001 - e.g. an unpicklable result
                send_message(sock, [(False, traceback.format_exc())] * len(local))
    except OSError:
        return
    finally:
        sock.close()


def main() -> int:
    # Ctrl-C goes to the whole process group: the trainer handles it and closes the pool,
    # which stops its workers; a worker that died of SIGINT first would look like a crash.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from shmenv._shmenv import run_worker

    address = os.environ.pop("SHMENV_CALL_ADDRESS", None)
    token = os.environ.pop("SHMENV_CALL_TOKEN", None)
    if address and token and len(sys.argv) > 2:
        index = int(sys.argv[2])
        threading.Thread(target=_serve_calls, args=(address, token, index), daemon=True, name="shmenv-calls").start()
    code = run_worker(sys.argv)
    close_envs()
    return code


def close_envs() -> None:
    """Calls ``close()`` on every env this worker built, as Gymnasium's vector envs do at
    ``close()``: envs flush files, stop simulators, free native resources. Runs after the
    host loop ended (the pool closed, or the worker failed); the trainer waits for it up to
    its shutdown grace (1 s), then kills the worker. A failing ``close()`` is printed and
    the other envs are still closed."""
    envs = importlib.import_module("shmenv.worker")._ENVS
    while envs:
        env = envs.pop(0)
        try:
            env.close()
        except BaseException:  # noqa: BLE001 - reported on stderr (the trainer's), the others still close
            print(f"shmenv worker: close() of an env failed:\n{traceback.format_exc()}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
