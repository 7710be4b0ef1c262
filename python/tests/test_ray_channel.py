"""shmenv.ray.channel, the step path of shmenv.ray, over real sockets in this process
(no Ray needed): requests answered in order, ``wait`` as ``ray.wait``, errors carried,
strangers refused before anything of theirs is unpickled, a closed server seen as lost."""

from __future__ import annotations

import pickle
import socket
import threading
import time

import numpy as np
import pytest

from shmenv.errors import WorkerError
from shmenv.ray.channel import HEADER, SMALL_MESSAGE, Channel, ChannelLost, StepServer, wait

pytestmark = pytest.mark.timeout(60)


class Handler:
    """Echoes payloads; ``sleep`` waits first; ``hold`` waits until ``release`` is set (at
    most 30 s); ``fail`` raises; ``send`` is remembered."""

    def __init__(self):
        self.sent: list = []
        self.calls = 0
        self.release = threading.Event()

    def __call__(self, method, payload):
        self.calls += 1
        if method == "sleep":
            time.sleep(payload)
            return payload
        if method == "hold":
            self.release.wait(30)
            return payload
        if method == "fail":
            raise WorkerError(f"env {payload} failed")
        if method == "unpicklable":
            raise RuntimeError(lambda: None)  # noqa: the lambda cannot be pickled
        if method == "send":
            self.sent.append(payload)
            return None
        return payload


@pytest.fixture
def server():
    handler = Handler()
    s = StepServer("127.0.0.1", handler)
    yield s, handler
    s.close()


def test_requests_are_answered_in_order_with_large_values(server):
    s, handler = server
    channel = Channel(s.address)
    big = np.arange(SMALL_MESSAGE, dtype=np.uint8).reshape(-1, 64) * 3  # past one segment
    replies = [channel.request("echo", i) for i in range(5)] + [channel.request("echo", big)]
    assert channel.request("send", "x") is None
    assert replies[3].get() == 3  # read out of order: the earlier answers are kept
    assert [r.get() for r in replies[:3]] == [0, 1, 2]
    np.testing.assert_array_equal(replies[5].get(), big)
    assert replies[4].get() == 4
    assert channel.request("echo", "after").get() == "after"
    assert handler.sent == ["x"]
    channel.close()


def test_errors_come_back_as_the_actor_raised_them(server):
    s, _ = server
    channel = Channel(s.address)
    with pytest.raises(WorkerError, match="env 3 failed"):
        channel.request("fail", 3).get()
    with pytest.raises(RuntimeError, match="RuntimeError: <function"):
        channel.request("unpicklable").get()
    assert channel.request("echo", 1).get() == 1, "the channel goes on after an error"
    channel.close()


def test_wait_returns_the_replies_ready_first():
    handlers = [Handler() for _ in range(2)]
    servers = [StepServer("127.0.0.1", h) for h in handlers]
    try:
        slow, fast = (Channel(s.address) for s in servers)
        # The late reply cannot come before it is released, however slow the machine.
        late, early = slow.request("hold", 0.5), fast.request("sleep", 0.0)
        assert wait([late, early], num_returns=1) == [early], "the reply that was ready first"
        handlers[0].release.set()
        assert set(wait([late, early], num_returns=2)) == {late, early}
        assert (late.get(), early.get()) == (0.5, 0.0)
    finally:
        for h in handlers:
            h.release.set()
        for s in servers:
            s.close()


def test_a_stranger_without_the_token_is_refused_before_unpickling(server):
    s, handler = server
    host, port, _ = s.address
    with socket.create_connection((host, port)) as stranger:
        stranger.sendall(bytes(16))
        message = pickle.dumps(("echo", 1))
        stranger.sendall(HEADER.pack(len(message)) + message)
        stranger.settimeout(10)
        try:
            answer = stranger.recv(1)
        except ConnectionResetError:  # closed with our unread message in its buffer
            answer = b""
        assert answer == b"", "the server closes a connection with a wrong token"
    assert handler.calls == 0
    channel = Channel(s.address)  # the driver still gets in
    assert channel.request("echo", 2).get() == 2
    channel.close()


def test_a_silent_stranger_cannot_keep_the_driver_out(server, monkeypatch):
    import shmenv.ray.channel as ray_channel

    monkeypatch.setattr(ray_channel, "TOKEN_TIMEOUT", 0.3)
    s, _ = server
    host, port, _ = s.address
    with socket.create_connection((host, port)):  # connects, sends nothing
        start = time.monotonic()
        channel = Channel(s.address)
        assert channel.request("echo", 3).get() == 3
        assert time.monotonic() - start < 5
    channel.close()


def test_an_interrupted_wait_leaves_the_connection_in_step(server):
    import signal

    class Interrupted(Exception):
        pass

    def interrupt(*_):
        raise Interrupted

    s, _ = server
    channel = Channel(s.address)
    big = np.arange(3 * SMALL_MESSAGE, dtype=np.uint8)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        slow = channel.request("sleep", 0.4)
        after = channel.request("echo", big)
        signal.setitimer(signal.ITIMER_REAL, 0.1)  # Ctrl-C, as it were, while the driver waits
        with pytest.raises(Interrupted):
            slow.get()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert slow.get() == 0.4, "the answer waited for is still read whole"
    np.testing.assert_array_equal(after.get(), big)
    assert channel.request("echo", "next").get() == "next"
    channel.close()


def test_a_server_that_ends_is_seen_as_lost(server):
    s, _ = server
    channel = Channel(s.address)
    pending = channel.request("sleep", 0.3)
    threading.Timer(0.05, s.close).start()
    with pytest.raises(ChannelLost):
        pending.get()
    assert wait([pending], num_returns=1) == [pending], "a lost reply is ready (its get raises)"
    with pytest.raises(ChannelLost):
        channel.request("echo", 1).get()
