"""The step path of :mod:`shmenv.ray`: one TCP connection from the driver to each actor.

Ray places the actors, starts and restarts them, and carries everything but the step
path (``describe``, calls into the envs, ``close``). The step path (``reset``, ``step``,
``send``, ``recv``) runs over a connection the actor opens on its node's address and
announces through Ray, with a random token the driver must present first: one socket
write and one read per batch and actor, where a Ray actor call costs several thread
handoffs on each side (``docs/scaling.md`` has both measured).

Messages are pickles framed by their length. The driver sends ``(method, payload)``; the
actor answers every method but ``send`` with ``(ok, value)``, in order, so the driver's
:class:`Reply` objects are indices into a connection's answers. :func:`wait` is
``ray.wait`` for them."""

from __future__ import annotations

import hmac
import pickle
import secrets
import selectors
import socket
import struct
import threading
from typing import Any, Callable, Iterable

HEADER = struct.Struct("<Q")
"""A message's length, before its bytes."""

TOKEN_BYTES = 16

TOKEN_TIMEOUT = 10.0
"""Seconds a new connection has to present the token: a peer that connects and sends
nothing cannot keep the driver out for longer."""

SMALL_MESSAGE = 64 * 1024
"""Messages below this are sent with their header in one write; larger ones in two."""

NO_REPLY = frozenset({"send"})
"""Methods the actor does not answer (their failures come back with the next ``recv``)."""


class ChannelLost(ConnectionError):
    """The connection to an actor ended: the actor process died (or its node did)."""


def _send(sock: socket.socket, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) < SMALL_MESSAGE:
        sock.sendall(HEADER.pack(len(data)) + data)  # one segment
    else:
        sock.sendall(HEADER.pack(len(data)))
        sock.sendall(data)  # not copied into a joined buffer


def _receive_exact(sock: socket.socket, size: int) -> memoryview:
    buffer = memoryview(bytearray(size))
    got = 0
    while got < size:
        n = sock.recv_into(buffer[got:])
        if n == 0:
            raise ChannelLost("the connection closed")
        got += n
    return buffer


class _Messages:
    """Reads the length-framed pickles of one connection. Resumable: the message being
    read is kept across calls, so an exception raised while waiting (Ctrl-C in the
    driver) leaves the connection in step, and the next call goes on from there."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._header = memoryview(bytearray(HEADER.size))
        self._body: memoryview | None = None
        self._got = 0

    def read(self) -> Any:
        while self._body is None:
            self._got += self._receive_into(self._header[self._got :])
            if self._got == HEADER.size:
                (size,) = HEADER.unpack(self._header)
                self._body, self._got = memoryview(bytearray(size)), 0
        while self._got < len(self._body):
            self._got += self._receive_into(self._body[self._got :])
        body, self._body, self._got = self._body, None, 0
        return pickle.loads(body)

    def _receive_into(self, view: memoryview) -> int:
        n = self.sock.recv_into(view)
        if n == 0:
            raise ChannelLost("the connection closed")
        return n


def _error_reply(error: BaseException) -> tuple:
    """``(False, error)``, or the error's text in a ``RuntimeError`` when it cannot be
    pickled (an env's exception may hold anything)."""
    try:
        pickle.dumps(error)
        return False, error
    except Exception:
        return False, RuntimeError(f"{type(error).__name__}: {error}")


class StepServer:
    """The actor's end: listens on ``host`` (the node's address), accepts the driver's
    connection, checks its token and answers its requests with ``handle(method,
    payload)`` in a thread of its own. A new connection (the driver reconnecting)
    replaces the old one."""

    def __init__(self, host: str, handle: Callable[[str, Any], Any]):
        self._handle = handle
        self._token = secrets.token_bytes(TOKEN_BYTES)
        self._listener = socket.create_server((host, 0))
        self._closed = False
        self._connection: socket.socket | None = None
        self._thread = threading.Thread(target=self._serve, name="shmenv-step-server", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int, bytes]:
        """What the driver connects with: host, port and token."""
        host, port = self._listener.getsockname()[:2]
        return host, port, self._token

    def close(self) -> None:
        """Stops serving: the listener and the connection are shut."""
        self._closed = True
        for sock in (self._listener, self._connection):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # not connected
                sock.close()
        self._thread.join(timeout=5.0)

    def _serve(self) -> None:
        while not self._closed:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                connection.settimeout(TOKEN_TIMEOUT)
                token = bytes(_receive_exact(connection, TOKEN_BYTES))
                connection.settimeout(None)
            except (ChannelLost, OSError):
                connection.close()
                continue
            if not hmac.compare_digest(token, self._token):
                connection.close()  # not our driver: nothing of it is unpickled
                continue
            self._connection = connection
            self._answer(connection)

    def _answer(self, connection: socket.socket) -> None:
        messages = _Messages(connection)
        while True:
            try:
                method, payload = messages.read()
            except (ChannelLost, OSError):
                connection.close()
                return
            try:
                reply = (True, self._handle(method, payload))
            except Exception as e:
                reply = _error_reply(e)
            if method in NO_REPLY:
                continue
            try:
                _send(connection, reply)
            except OSError:
                connection.close()
                return


class Reply:
    """The answer to one request on a :class:`Channel`, like a Ray ``ObjectRef``."""

    __slots__ = ("channel", "index")

    def __init__(self, channel: "Channel", index: int):
        self.channel, self.index = channel, index

    @property
    def ready(self) -> bool:
        return self.channel.lost is not None or self.index in self.channel.answers

    def get(self) -> Any:
        """The value, or the actor's exception raised here, or :class:`ChannelLost`."""
        return self.channel.result(self)


class Channel:
    """The driver's end of one actor's connection."""

    def __init__(self, address: tuple[str, int, bytes], timeout: float = 30.0):
        host, port, token = address
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(token)
        self.issued = 0  # requests with a reply
        self.received = 0  # replies read
        self.answers: dict[int, tuple] = {}
        self.lost: ChannelLost | None = None
        self._messages = _Messages(self.sock)  # resumable: a Ctrl-C while waiting keeps it in step

    def request(self, method: str, payload: Any = None) -> Reply | None:
        """Sends ``method(payload)`` to the actor; its :class:`Reply` (None for ``send``).
        A lost connection shows in the reply (or, for ``send``, in the next one). A send
        cut short by an exception (Ctrl-C) leaves the actor with part of a message: the
        channel is then lost, and the exception raised."""
        reply = None if method in NO_REPLY else Reply(self, self.issued)
        self.issued += reply is not None
        if self.lost is None:
            try:
                _send(self.sock, (method, payload))
            except BaseException as e:
                self.lost = ChannelLost(f"sending {method} failed ({e!r}): the connection is out of step")
                if not isinstance(e, OSError):
                    raise
        return reply

    def read_one(self) -> None:
        """Reads the next answer (blocking); a failure marks the channel lost."""
        if self.lost is not None:
            return
        try:
            self.answers[self.received] = self._messages.read()
            self.received += 1
        except (ChannelLost, OSError, pickle.UnpicklingError, EOFError) as e:
            self.lost = e if isinstance(e, ChannelLost) else ChannelLost(str(e))

    def result(self, reply: Reply) -> Any:
        while reply.index not in self.answers and self.lost is None:
            self.read_one()
        if reply.index not in self.answers:
            assert self.lost is not None, "the loop above ends with the answer or with the channel lost"
            raise self.lost
        ok, value = self.answers.pop(reply.index)
        if not ok:
            raise value
        return value

    def drain(self) -> None:
        """Reads and drops every answer still due."""
        while self.received < self.issued and self.lost is None:
            self.read_one()
        self.answers.clear()

    def close(self) -> None:
        self.lost = self.lost or ChannelLost("closed by the driver")
        self.sock.close()


def wait(replies: Iterable[Reply], num_returns: int) -> list[Reply]:
    """The replies that are ready, at least ``num_returns`` of them (or all): blocks on the
    connections with answers due until enough have arrived, as ``ray.wait``."""
    replies = list(replies)
    num_returns = min(num_returns, len(replies))
    with selectors.DefaultSelector() as selector:
        registered: set[Channel] = set()
        while True:
            ready = [r for r in replies if r.ready]
            if len(ready) >= num_returns:
                return ready
            for channel in {r.channel for r in replies if not r.ready} - registered:
                selector.register(channel.sock, selectors.EVENT_READ, channel)
                registered.add(channel)
            for key, _ in selector.select():
                key.data.read_one()
                if key.data.lost is not None:
                    selector.unregister(key.fileobj)
                    registered.discard(key.data)
