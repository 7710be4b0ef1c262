"""The call channel's protocol, written once for both ends: how a message is framed on the
socket (:func:`send_message`, :func:`recv_message`: an 8-byte little-endian length, then
the pickled message) and the operations, the first item of every request the trainer sends
(:mod:`shmenv.channel.trainer`, :mod:`shmenv.vector`, :mod:`shmenv.env_calls`,
:mod:`shmenv.batches`, :mod:`shmenv.infos`) and what the worker dispatches on
(:mod:`shmenv.channel.worker`). The ops travel as these plain strings (pickled with the
request), so ``env_call("get", ...)`` and ``env_call(ops.GET, ...)`` are the same call:
``from shmenv.channel import protocol as ops``.

A request is ``(op, local env indices, name, values, args, kwargs)``; its answer is one
``(ok, value or traceback)`` per env (for :data:`MAP_INFOS`: an empty list, or one refusal).
"""

from __future__ import annotations

import socket
from typing import Any, Final


def send_message(sock: socket.socket, obj: Any) -> None:
    """Sends ``obj`` pickled, after its length."""
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


# Gymnasium's call API on each env object (``get_wrapper_attr`` and friends).
GET: Final = "get"
"""Read an attribute of each env (``get_attr``)."""
CALL: Final = "call"
"""Call a method of each env, or read the attribute when it is not callable (``call``)."""
SET: Final = "set"
"""Set an attribute of each env, one value per env (``set_attr``)."""
IS_WRAPPED: Final = "is_wrapped"
"""Whether each env is wrapped by the given wrapper class (SB3's ``env_is_wrapped``)."""
CHECK_SPACES: Final = "check_spaces"
"""Compare each env's spaces with the pool's, as ``AsyncVectorEnv``'s workers do."""
MISMATCHED: Final = "mismatched"
"""Whether each env's spec differed from its worker's first env's (unpicklable spaces)."""

# The pool's own traffic.
RESET_OPTIONS: Final = "reset_options"
"""Hand each env the options of its next reset."""
UNSEEDED: Final = "unseeded"
"""Make each env's next reset ``seed=None`` (an unseeded pool's first reset)."""
INFOS: Final = "infos"
"""Take each env's kept (pickled) infos of the last batch."""
MAP_INFOS: Final = "map_infos"
"""Map the shared info area, whose fd follows the request (``SCM_RIGHTS``)."""
SIDE_OBS: Final = "side_obs"
"""Each env's side-leaf observation values (:mod:`shmenv.worker.side`)."""
SIDE_ACTIONS: Final = "side_actions"
"""Give each env the side-leaf values of its next action."""

ENV_OBJECT_OPS: Final = frozenset({GET, CALL, SET, IS_WRAPPED, CHECK_SPACES})
"""The ops the worker runs on the env object itself (a failure is reported per env with
its traceback)."""

ALL: Final = frozenset({*ENV_OBJECT_OPS, MISMATCHED, RESET_OPTIONS, UNSEEDED, INFOS, MAP_INFOS, SIDE_OBS, SIDE_ACTIONS})
"""Every op the worker serves."""
