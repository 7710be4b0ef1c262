"""The trainer's end of the call side channel: ``call``/``get_attr``/``set_attr`` on the
Python envs inside the workers, with pickled arguments and results over a Unix socket per
worker. It never touches the step path: steps go through shared memory only.

The socket lives in the abstract namespace (no file, nothing to leak) under a random name,
and a worker must present a random token before it is believed.

Restarted workers (``max_restarts``): each worker process connects once, so a replacement
brings a new connection, which must also be sent what its predecessor was sent (the info
flag area). The channel follows the pool's worker pids: a worker is *ready* when its
connection comes from the process the pool runs as that worker and has been sent every
shared fd. A replacement that dies before (or while) it gets ready is one more death of
the pool's: the channel never raises for it on the step path (:meth:`refresh`), and a call
that needs it hands it to ``revive`` (the pool restarts it through the engine) and tries
again.
"""

from __future__ import annotations

import os
import secrets
import socket
import struct
import time
from typing import Any, Callable, Sequence

from shmenv.errors import WorkerDiedError, WorkerError
from shmenv.worker.call_server import recv_message, send_message

POLL = 0.05
"""Seconds between looks at a worker that has not connected yet (is it still alive?)."""

DEATH_GRACE = 1.0
"""Seconds a process whose connection ended may take to be seen dead (a SIGKILLed process
closes its sockets just before it becomes a zombie)."""


class CallChannel:
    """Connections to every worker's call thread. ``timeout`` bounds one answer and a
    worker's first connection; ``restart_wait`` bounds the wait for a replacement worker
    that is alive but has not connected yet (the pool's step timeout, else ``timeout``)."""

    def __init__(self, num_workers: int, timeout: float = 60.0, restart_wait: float | None = None):
        self.num_workers = num_workers
        self.timeout = timeout
        self.restart_wait = timeout if restart_wait is None else restart_wait
        self.token = secrets.token_hex(16)
        self.address = f"shmenv-calls-{secrets.token_hex(8)}"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind("\0" + self.address)
        # Room for the connections of replacements that died before they were accepted.
        self._listener.listen(max(64, num_workers))
        self._conns: dict[int, socket.socket] = {}
        self._peers: dict[int, int | None] = {}  # worker index -> pid of the process at that connection
        self._sent: dict[int, int] = {}  # worker index -> items of ``_shared`` sent on its connection
        # What a replacement worker (``max_restarts``) must be sent again: (op, fd, data),
        # the fd a private duplicate.
        self._shared: list[tuple[str, int, bytes]] = []
        # The pool's current worker pids (set by the pool): a changed pid is a restarted worker.
        self.worker_pids: Callable[[], Sequence[int]] | None = None
        # Whether a worker was left not ready by the last refresh (it is tried again).
        self.pending = False

    def worker_env(self) -> list[tuple[str, str]]:
        """Environment variables that tell a worker where to connect."""
        return [("SHMENV_CALL_ADDRESS", self.address), ("SHMENV_CALL_TOKEN", self.token)]

    # --- connections ----------------------------------------------------------------

    def _current_pids(self) -> list[int] | None:
        if self.worker_pids is None:
            return None
        try:
            return list(self.worker_pids())
        except Exception:  # noqa: BLE001 - e.g. a closed pool: no restart to follow
            return None

    def _accept_one(self, wait: float) -> None:
        """Accepts one connection if one comes within ``wait`` seconds and keeps it as its
        worker's, unless that worker's current process is connected already (the newcomer
        is then a dead predecessor's). Strangers are dropped."""
        self._listener.settimeout(wait if wait > 0 else 0.0)
        try:
            conn, _ = self._listener.accept()
        except (socket.timeout, BlockingIOError):
            return
        conn.settimeout(self.timeout)
        try:
            token, index = recv_message(conn)
        except Exception:  # noqa: BLE001 - a stranger or a peer that died: drop it
            conn.close()
            return
        if token != self.token or not isinstance(index, int) or not 0 <= index < self.num_workers:
            conn.close()
            return
        peer, pids = _peer_pid(conn), self._current_pids()
        current = None if pids is None else pids[index]
        if index in self._conns and self._peers.get(index) == current and peer != current:
            conn.close()
            return
        self._drop(index)
        self._conns[index], self._peers[index], self._sent[index] = conn, peer, 0

    def _drop(self, w: int) -> None:
        """Forgets worker ``w``'s connection."""
        old = self._conns.pop(w, None)
        if old is not None:
            old.close()
        self._peers.pop(w, None)
        self._sent.pop(w, None)

    def _connected(self, w: int, pid: int | None) -> bool:
        """Whether worker ``w``'s connection comes from process ``pid`` (None: unknown, any)."""
        return w in self._conns and (pid is None or self._peers.get(w) == pid)

    def _ready(self, w: int, pids: Sequence[int] | None) -> bool:
        pid = None if pids is None else pids[w]
        return self._connected(w, pid) and self._sent.get(w) == len(self._shared)

    def _sync(self, w: int, deadline: float) -> bool:
        """Makes worker ``w`` ready: waits for its current process's connection and sends it
        the shared fds it lacks. False when that process is dead (or died meanwhile): the
        pool is to restart it. Raises :class:`WorkerError` when the process lives but did
        not connect by ``deadline``, or refused a shared fd."""
        while True:
            pids = self._current_pids()
            pid = None if pids is None else pids[w]
            if self._connected(w, pid):
                break
            if pid is not None and not _alive(pid):
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerError(
                    f"worker {w} (pid {pid}) is alive but did not open its call channel in time, so calls cannot "
                    "reach its envs; the pool still steps (look at the worker's output on stderr)"
                )
            self._accept_one(min(POLL, remaining))
        try:
            for op, fd, data in self._shared[self._sent[w] :]:
                self._share_one(w, op, fd, data)
                self._sent[w] += 1
        except (EOFError, OSError):
            peer = self._peers.get(w)
            self._drop(w)
            if not _dies(peer):
                raise WorkerError(
                    f"worker {w} (pid {peer}) closed its call channel while being sent the shared info area, "
                    "though its process lives; calls cannot reach its envs"
                ) from None
            return False
        return True

    def refresh(self, wait: bool = True) -> None:
        """Brings every worker's connection up to date after the pool restarted some (taking
        each replacement's connection and sending it the shared fds). Never raises: a
        replacement that died (or, without ``wait``, has not connected yet) stays pending,
        for the next refresh or the next call."""
        deadline = time.monotonic() + (self.restart_wait if wait else 0.0)
        pids = self._current_pids()
        pending = False
        for w in range(self.num_workers):
            if self._ready(w, pids):
                continue
            try:
                pending |= not self._sync(w, deadline)
            except (WorkerError, OSError):
                pending = True
        self.pending = pending

    def share_fd(self, op: str, fd: int, data: bytes) -> None:
        """Sends every worker request `op` followed by `fd` with `data` (``SCM_RIGHTS``),
        and waits until each has taken it. A duplicate of `fd` is kept to send restarted
        workers (closed by :meth:`close`); a worker that is dead gets it once replaced."""
        self._shared.append((op, os.dup(fd), data))
        deadline = time.monotonic() + self.timeout
        for w in range(self.num_workers):
            if not self._sync(w, deadline):
                self.pending = True

    def _share_one(self, w: int, op: str, fd: int, data: bytes) -> None:
        send_message(self._conns[w], (op, [], "", [], (), {}))
        socket.send_fds(self._conns[w], [data], [fd])
        answer = recv_message(self._conns[w])
        if answer:
            err = WorkerError(f"worker {w} could not take {op}:\n{answer[0][1]}")
            err.env_id, err.worker, err.traceback = None, w, answer[0][1]
            raise err

    # --- requests -------------------------------------------------------------------

    def request(
        self,
        shards: Sequence[tuple[int, int]],
        env_ids: Sequence[int],
        op: str,
        name: str,
        values: Sequence[Any] | None = None,
        args: tuple = (),
        kwargs: dict | None = None,
        revive: Callable[[list[int]], None] | None = None,
    ) -> list[Any]:
        """Runs `op` on envs `env_ids` (values[k] goes with env_ids[k]); results in order.

        A worker found dead (before or during the request) is handed to ``revive(workers)``,
        which has the pool restart it (or raises), and the request goes to the replacement;
        without ``revive`` a dead worker raises :class:`WorkerDiedError`. Op ``"infos"``
        never revives: a dead worker's kept infos died with it (it answers none)."""
        by_worker: dict[int, list[int]] = {}
        for k, e in enumerate(env_ids):
            w = next(w for w, (a, b) in enumerate(shards) if a <= e < b)
            by_worker.setdefault(w, []).append(k)
        values = list(values) if values is not None else [None] * len(env_ids)
        messages = {}
        for w, ks in by_worker.items():
            start = shards[w][0]
            messages[w] = (op, [env_ids[k] - start for k in ks], name, [values[k] for k in ks], args, kwargs or {})
        answers = self._answers(messages, op, revive)
        results: list[Any] = [None] * len(env_ids)
        failures = []
        for w, ks in by_worker.items():
            for k, (ok, value) in zip(ks, answers[w]):
                if ok:
                    results[k] = value
                else:
                    failures.append((env_ids[k], value))
        if failures:
            env_id, tb = failures[0]
            err = WorkerError(f"{op}({name!r}) failed in env {env_id}:\n{tb}")
            err.env_id, err.worker, err.traceback = env_id, None, tb
            raise err
        return results

    def _answers(self, messages: dict[int, tuple], op: str, revive) -> dict[int, Any]:
        """Each worker's answer to its message, asking ``revive`` to replace dead workers
        until every one has answered (bounded by ``max(timeout, restart_wait)``)."""
        answers: dict[int, Any] = {}
        deadline = time.monotonic() + max(self.timeout, self.restart_wait)
        todo = dict(messages)
        while True:
            gone = self._exchange(todo, answers, deadline)
            if not gone:
                return answers
            if op == "infos":
                answers.update({w: [(True, {})] * len(messages[w][1]) for w in gone})
                return answers
            if revive is None:
                w = gone[0]
                raise _died(w, self._last_pid(w), "the pool has no restart policy, so it is closed; build a new "
                            "one (with max_restarts=n dead workers are replaced)")
            if time.monotonic() >= deadline:
                raise WorkerError(
                    f"calls could not reach workers {gone}: each of their replacements died before it answered, "
                    f"for {max(self.timeout, self.restart_wait):.0f} s; the pool still steps, call again later"
                )
            revive(gone)
            todo = {w: messages[w] for w in gone}

    def _exchange(self, messages: dict[int, tuple], answers: dict[int, Any], deadline: float) -> list[int]:
        """Sends each worker its message and collects the answers into ``answers``; returns
        the workers whose process is dead (they did not answer)."""
        gone: list[int] = []
        sent: list[int] = []
        pids = self._current_pids()
        for w, message in messages.items():
            if not (self._ready(w, pids) or self._sync(w, deadline)):
                gone.append(w)
                continue
            try:
                send_message(self._conns[w], message)
                sent.append(w)
            except OSError:
                self._lost(w, gone)
        for w in sent:
            try:
                answers[w] = recv_message(self._conns[w])
            except (EOFError, OSError):
                self._lost(w, gone)
        return sorted(gone)

    def _lost(self, w: int, gone: list[int]) -> None:
        """Worker ``w``'s connection ended mid-request: a dead process joins ``gone``; a
        live one raises :class:`WorkerError` (its call thread is broken, or it was too slow)."""
        peer = self._peers.get(w)
        self._drop(w)
        if _dies(peer):
            gone.append(w)
            return
        raise WorkerError(
            f"worker {w} (pid {peer}) did not answer a call (within {self.timeout:.0f} s, or its call channel "
            "closed) though its process lives; the pool still steps"
        )

    def _last_pid(self, w: int) -> int | None:
        pids = self._current_pids()
        return None if pids is None else pids[w]

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        self._peers.clear()
        self._sent.clear()
        for _, fd, _ in self._shared:
            os.close(fd)
        self._shared.clear()
        self._listener.close()


def _died(w: int, pid: int | None, what_next: str) -> WorkerDiedError:
    err = WorkerDiedError(f"worker {w} (pid {pid}) died, so calls cannot reach its envs: {what_next}")
    err.worker, err.pid, err.env_ids, err.exit, err.output = w, pid, None, "died", ""
    return err


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != b"Z"


def _dies(pid: int | None, grace: float = DEATH_GRACE) -> bool:
    """Whether process ``pid``, whose connection just ended, is dead or dies within
    ``grace`` seconds (unknown pids count as dead)."""
    if pid is None:
        return True
    deadline = time.monotonic() + grace
    while _alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def _peer_pid(conn: socket.socket) -> int | None:
    """The pid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (AttributeError, OSError):
        return None
    return struct.unpack("3i", creds)[0]
