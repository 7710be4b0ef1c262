"""The worker's end of the call channel: a daemon thread answers the trainer's
``call``/``get_attr``/``set_attr``/``is_wrapped``, reset options, info requests and side
leaves (:mod:`shmenv.worker.side`) over a private Unix socket (inherited from the trainer)
that never touches the step path. The framing and the ops are
:mod:`shmenv.channel.protocol`'s; the trainer's end is :mod:`shmenv.channel.trainer`."""

from __future__ import annotations

import socket
import traceback
from typing import Any

import shmenv.worker as worker
from shmenv.channel import protocol as ops
from shmenv.channel.protocol import recv_message, send_message


def _attr(env, name: str):
    getter = getattr(env, "get_wrapper_attr", None)
    return getter(name) if getter is not None else getattr(env, name)


def _check_spaces(env, mode: str, observation_space, action_space) -> tuple[str | None, str | None]:
    """Whether the env's spaces are the pool's, as ``AsyncVectorEnv``'s workers check them
    (``"same"``: equal observation spaces; else the same shape and dtype; equal action
    spaces): for each, None when they are, else the env's space as printed."""
    from gymnasium.spaces.utils import is_space_dtype_shape_equiv

    obs, act = _attr(env, "observation_space"), _attr(env, "action_space")
    same_obs = obs == observation_space if mode == "same" else is_space_dtype_shape_equiv(observation_space, obs)
    return (None if same_obs else repr(obs)), (None if act == action_space else repr(act))


def _run_one(op: str, env, name: str, value: Any, args: tuple, kwargs: dict) -> Any:
    if op == ops.GET:
        return _attr(env, name)
    if op == ops.CALL:
        attr = _attr(env, name)
        return attr(*args, **kwargs) if callable(attr) else attr
    if op == ops.SET:
        setter = getattr(env, "set_wrapper_attr", None)
        if setter is not None:
            setter(name, value)
        else:
            setattr(env, name, value)
        return None
    if op == ops.CHECK_SPACES:
        return _check_spaces(env, *value)
    if op == ops.IS_WRAPPED:
        from gymnasium import Wrapper

        e = env
        while isinstance(e, Wrapper):
            if isinstance(e, value):
                return True
            e = e.env
        return False
    raise ValueError(f"unknown call op {op!r}")


def serve_calls(sock: socket.socket, index: int) -> None:
    """Answers the trainer's requests on `sock` (this worker's end of the socket pair the
    trainer made before spawning it; worker `index`) until the trainer closes it."""
    from shmenv import infos
    from shmenv.worker import side

    envs, reset_options = worker._ENVS, worker.RESET_OPTIONS

    try:
        while True:
            try:
                op, local, name, values, args, kwargs = recv_message(sock)
            except EOFError:
                return
            if op == ops.MAP_INFOS:  # the fd follows with the stride (SCM_RIGHTS)
                try:
                    infos.map_flags(sock, index)
                    send_message(sock, [])
                except Exception:  # noqa: BLE001 - reported to the trainer with the traceback
                    send_message(sock, [(False, traceback.format_exc())])
                continue
            results = []
            for k, i in enumerate(local):
                if op == ops.INFOS:
                    results.append((True, infos.take(i)))
                    continue
                if op == ops.RESET_OPTIONS:
                    reset_options[i] = values[k]
                    results.append((True, None))
                    continue
                if op == ops.UNSEEDED:
                    worker.UNSEEDED.add(i)
                    results.append((True, None))
                    continue
                if op == ops.SIDE_OBS:
                    results.append((True, side.obs(i)))
                    continue
                if op == ops.SIDE_ACTIONS:
                    side.give_actions(i, values[k])
                    results.append((True, None))
                    continue
                if op == ops.MISMATCHED:
                    results.append((True, i in worker.MISMATCHED))
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
