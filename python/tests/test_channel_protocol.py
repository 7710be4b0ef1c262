"""The call channel's protocol (:mod:`shmenv.channel.protocol`): the ops are written once,
both ends of the channel name them from that module, and a real pool's workers serve each
by its constant; the framing carries a message whole across a socket."""

from __future__ import annotations

import ast
import pathlib

import gymnasium as gym
import pytest

import shmenv
from shmenv.errors import WorkerError
from shmenv.channel import protocol as ops

PACKAGE = pathlib.Path(shmenv.__file__).parent

# The modules that implement the channel, both ends: none may spell an op as a string.
CHANNEL_MODULES = [
    "channel/trainer.py", "channel/worker.py", "env_calls.py", "batches.py", "restarts.py", "infos.py", "vector.py",
    "worker/__init__.py",
]


def _op_literals(path: pathlib.Path) -> list[str]:
    """Where ``path`` spells an op as a string literal: the op argument of ``request``,
    ``env_call`` or ``share_fd``, or a string compared with ``op``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            position = {"env_call": 0, "_env_call": 0, "share_fd": 0, "request": 2}.get(node.func.attr)
            if position is not None and len(node.args) > position:
                arg = node.args[position]
                if isinstance(arg, ast.Constant) and arg.value in ops.ALL:
                    found.append(f"{path.name}:{node.lineno} {node.func.attr}({arg.value!r})")
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "op":
            for c in ast.walk(node):
                if isinstance(c, ast.Constant) and c.value in ops.ALL:
                    found.append(f"{path.name}:{node.lineno} op == {c.value!r}")
    return found


def test_no_channel_module_spells_an_op_as_a_string():
    found = [hit for name in CHANNEL_MODULES for hit in _op_literals(PACKAGE / name)]
    assert found == [], f"ops written as strings instead of shmenv.channel.protocol: {found}"


def test_ops_are_distinct_plain_strings():
    names = [v for k, v in vars(ops).items() if k.isupper() and isinstance(v, str)]
    assert len(names) == len(set(names)) == len(ops.ALL) == 12
    assert set(names) == ops.ALL and ops.ENV_OBJECT_OPS < ops.ALL


@pytest.mark.timeout(120)
def test_workers_serve_the_ops_by_their_constants():
    with shmenv.make_vec(gym.spec("CartPole-v1"), 2, num_workers=2, seed=0) as envs:
        envs.reset(seed=0)
        # The constants are the strings the public env_call takes.
        assert envs.env_call(ops.GET, "spec", [0, 1]) == envs.env_call("get", "spec", [0, 1])
        envs.env_call(ops.SET, "answer", [0, 1], values=[41, 42])
        assert envs.env_call(ops.CALL, "answer", [0, 1]) == [41, 42]
        assert envs.env_call(ops.IS_WRAPPED, "", [1], values=[gym.Wrapper]) == [True]
        assert envs.env_call(ops.MISMATCHED, "", [0, 1]) == [False, False]
        with pytest.raises(WorkerError, match="unknown call op 'no_such_op'"):
            envs.env_call("no_such_op", "", [0])


@pytest.mark.timeout(60)
def test_the_framing_carries_each_message_whole_and_says_when_the_peer_closed():
    import socket
    import threading

    import numpy as np

    a, b = socket.socketpair()
    big = np.arange(1 << 20, dtype=np.int64)  # 8 MiB: more than the socket buffers hold at once
    messages = [("get", [0, 1], "spec", [], (), {}), [(True, None)], big, []]
    sender = threading.Thread(target=lambda: [ops.send_message(a, m) for m in messages])
    sender.start()
    got = [ops.recv_message(b) for _ in messages]
    sender.join()
    assert got[:2] == messages[:2] and got[3] == []
    np.testing.assert_array_equal(got[2], big)
    a.close()
    with pytest.raises(EOFError, match="the peer closed the call channel"):
        ops.recv_message(b)
    b.close()
