"""The trainer's end of the call side channel: ``call``/``get_attr``/``set_attr`` on the
Python envs inside the workers, with pickled arguments and results over a Unix socket per
worker. It never touches the step path: steps go through shared memory only.

The socket lives in the abstract namespace (no file, nothing to leak) under a random name,
and a worker must present a random token before it is believed.
"""

from __future__ import annotations

import os
import secrets
import socket
import struct
from typing import Any, Callable, Sequence

from shmenv.errors import WorkerDiedError, WorkerError
from shmenv.worker import recv_message, send_message


class CallChannel:
    def __init__(self, num_workers: int, timeout: float = 60.0):
        self.num_workers = num_workers
        self.timeout = timeout
        self.token = secrets.token_hex(16)
        self.address = f"shmenv-calls-{secrets.token_hex(8)}"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind("\0" + self.address)
        self._listener.listen(num_workers)
        self._conns: dict[int, socket.socket] = {}
        self._peers: dict[int, int] = {}  # worker index -> pid of the process at that connection
        # What a replacement worker (``max_restarts``) must be sent again: (op, fd, data),
        # the fd a private duplicate.
        self._shared: list[tuple[str, int, bytes]] = []
        # The pool's current worker pids (set by the pool): a changed pid is a restarted worker.
        self.worker_pids: Callable[[], Sequence[int]] | None = None

    def worker_env(self) -> list[tuple[str, str]]:
        """Environment variables that tell a worker where to connect."""
        return [("SHMENV_CALL_ADDRESS", self.address), ("SHMENV_CALL_TOKEN", self.token)]

    def _accept_one(self) -> int | None:
        """Accepts one connection (waiting up to ``timeout``) and keeps it as its worker's
        (a newer connection replaces an older one: a worker process connects once); the
        worker index, or None for a stranger. Raises ``socket.timeout``."""
        self._listener.settimeout(self.timeout)
        conn, _ = self._listener.accept()
        conn.settimeout(self.timeout)
        try:
            token, index = recv_message(conn)
        except Exception:  # noqa: BLE001 - a stranger or a broken peer: drop it
            conn.close()
            return None
        if token != self.token or not isinstance(index, int) or not 0 <= index < self.num_workers:
            conn.close()
            return None
        old = self._conns.pop(index, None)
        if old is not None:
            old.close()
        self._conns[index] = conn
        self._peers[index] = _peer_pid(conn)
        return index

    def _connect_all(self) -> None:
        while len(self._conns) < self.num_workers:
            try:
                self._accept_one()
            except socket.timeout:
                missing = sorted(set(range(self.num_workers)) - set(self._conns))
                raise WorkerDiedError(f"workers {missing} never opened their call channel") from None

    def _current_pids(self) -> Sequence[int] | None:
        if self.worker_pids is None:
            return None
        try:
            return list(self.worker_pids())
        except Exception:  # noqa: BLE001 - e.g. a closed pool: no restart to follow
            return None

    def _stale(self, pids: Sequence[int] | None) -> list[int]:
        """Workers whose connection belongs to a process that is no longer the worker."""
        if pids is None:
            return []
        return [w for w in range(self.num_workers) if self._peers.get(w) not in (None, pids[w])]

    def _reconnect(self, w: int, pid: int) -> None:
        """Takes restarted worker ``w``'s new connection (process ``pid``) and sends it what
        its predecessor was sent (the info flag area)."""
        while self._peers.get(w) != pid:
            try:
                self._accept_one()
            except socket.timeout:
                raise WorkerDiedError(
                    f"worker {w} was restarted (pid {pid}) but its replacement never opened its call channel"
                ) from None
        for op, fd, data in self._shared:
            self._share_one(w, op, fd, data)

    def refresh(self) -> None:
        """Takes the connections of restarted workers (the pool reported a restart)."""
        self._connect_all()
        pids = self._current_pids()
        for w in self._stale(pids):
            self._reconnect(w, pids[w])

    def request(
        self,
        shards: Sequence[tuple[int, int]],
        env_ids: Sequence[int],
        op: str,
        name: str,
        values: Sequence[Any] | None = None,
        args: tuple = (),
        kwargs: dict | None = None,
    ) -> list[Any]:
        """Runs `op` on envs `env_ids` (values[k] goes with env_ids[k]); results in order.
        A worker found restarted (its pid changed, or its connection dead and its pid
        changed since) is reached through its replacement's connection, once."""
        self._connect_all()
        by_worker: dict[int, list[int]] = {}
        for k, e in enumerate(env_ids):
            w = next(w for w, (a, b) in enumerate(shards) if a <= e < b)
            by_worker.setdefault(w, []).append(k)
        pids = self._current_pids()
        for w in self._stale(pids):
            if w in by_worker:
                self._reconnect(w, pids[w])
        values = list(values) if values is not None else [None] * len(env_ids)
        messages = {}
        for w, ks in by_worker.items():
            start = shards[w][0]
            messages[w] = (op, [env_ids[k] - start for k in ks], name, [values[k] for k in ks], args, kwargs or {})
        failed: dict[int, Exception] = {}
        for w, message in messages.items():
            try:
                send_message(self._conns[w], message)
            except OSError as e:
                failed[w] = e
        answers: dict[int, Any] = {}
        for w in messages:
            if w in failed:
                continue
            try:
                answers[w] = recv_message(self._conns[w])
            except (EOFError, OSError) as e:
                failed[w] = e
        for w, e in failed.items():
            answers[w] = self._retry(w, messages[w], e)
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

    def _retry(self, w: int, message: tuple, error: Exception) -> Any:
        """Worker ``w``'s connection died during a request: if the pool has replaced the
        worker, the request goes once to the replacement; otherwise the worker is gone."""
        pids = self._current_pids()
        if pids is None or w not in self._stale(pids):
            raise WorkerDiedError(f"worker {w} closed its call channel ({error}); the pool cannot take calls")
        self._reconnect(w, pids[w])
        try:
            send_message(self._conns[w], message)
            return recv_message(self._conns[w])
        except (EOFError, OSError) as e:
            raise WorkerDiedError(f"worker {w} closed its call channel ({e})") from None

    def share_fd(self, op: str, fd: int, data: bytes) -> None:
        """Sends every worker request `op` followed by `fd` with `data` (``SCM_RIGHTS``),
        and waits until each has taken it. A duplicate of `fd` is kept to send restarted
        workers (closed by :meth:`close`)."""
        self._connect_all()
        for w in range(self.num_workers):
            try:
                send_message(self._conns[w], (op, [], "", [], (), {}))
                socket.send_fds(self._conns[w], [data], [fd])
            except OSError as e:
                raise WorkerDiedError(f"worker {w} is gone ({e}); the pool cannot take calls") from None
        for w in range(self.num_workers):
            self._share_answer(w, op)
        self._shared.append((op, os.dup(fd), data))

    def _share_one(self, w: int, op: str, fd: int, data: bytes) -> None:
        try:
            send_message(self._conns[w], (op, [], "", [], (), {}))
            socket.send_fds(self._conns[w], [data], [fd])
        except OSError as e:
            raise WorkerDiedError(f"worker {w} is gone ({e}); the pool cannot take calls") from None
        self._share_answer(w, op)

    def _share_answer(self, w: int, op: str) -> None:
        try:
            answer = recv_message(self._conns[w])
        except (EOFError, OSError) as e:
            raise WorkerDiedError(f"worker {w} closed its call channel ({e})") from None
        if answer:
            err = WorkerError(f"worker {w} could not take {op}:\n{answer[0][1]}")
            err.env_id, err.worker, err.traceback = None, w, answer[0][1]
            raise err

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        self._peers.clear()
        for _, fd, _ in self._shared:
            os.close(fd)
        self._shared.clear()
        self._listener.close()


def _peer_pid(conn: socket.socket) -> int | None:
    """The pid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (AttributeError, OSError):
        return None
    return struct.unpack("3i", creds)[0]
