"""The trainer's end of the call side channel: ``call``/``get_attr``/``set_attr`` on the
Python envs inside the workers, with pickled arguments and results over a Unix socket per
worker. It never touches the step path: steps go through shared memory only.

The socket lives in the abstract namespace (no file, nothing to leak) under a random name,
and a worker must present a random token before it is believed.
"""

from __future__ import annotations

import secrets
import socket
from typing import Any, Sequence

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

    def worker_env(self) -> list[tuple[str, str]]:
        """Environment variables that tell a worker where to connect."""
        return [("SHMENV_CALL_ADDRESS", self.address), ("SHMENV_CALL_TOKEN", self.token)]

    def _connect_all(self) -> None:
        self._listener.settimeout(self.timeout)
        while len(self._conns) < self.num_workers:
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                missing = sorted(set(range(self.num_workers)) - set(self._conns))
                raise WorkerDiedError(f"workers {missing} never opened their call channel") from None
            conn.settimeout(self.timeout)
            try:
                token, index = recv_message(conn)
            except Exception:  # noqa: BLE001 - a stranger or a broken peer: drop it
                conn.close()
                continue
            if token != self.token or not isinstance(index, int) or not 0 <= index < self.num_workers:
                conn.close()
                continue
            self._conns[index] = conn

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
        """Runs `op` on envs `env_ids` (values[k] goes with env_ids[k]); results in order."""
        self._connect_all()
        by_worker: dict[int, list[int]] = {}
        for k, e in enumerate(env_ids):
            w = next(w for w, (a, b) in enumerate(shards) if a <= e < b)
            by_worker.setdefault(w, []).append(k)
        values = list(values) if values is not None else [None] * len(env_ids)
        for w, ks in by_worker.items():
            start = shards[w][0]
            message = (op, [env_ids[k] - start for k in ks], name, [values[k] for k in ks], args, kwargs or {})
            try:
                send_message(self._conns[w], message)
            except OSError as e:
                raise WorkerDiedError(f"worker {w} is gone ({e}); the pool cannot take calls") from None
        results: list[Any] = [None] * len(env_ids)
        failures = []
        for w, ks in by_worker.items():
            try:
                answers = recv_message(self._conns[w])
            except (EOFError, OSError) as e:
                raise WorkerDiedError(f"worker {w} closed its call channel ({e})") from None
            for k, (ok, value) in zip(ks, answers):
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

    def share_fd(self, op: str, fd: int, data: bytes) -> None:
        """Sends every worker request `op` followed by `fd` with `data` (``SCM_RIGHTS``),
        and waits until each has taken it."""
        self._connect_all()
        for w in range(self.num_workers):
            try:
                send_message(self._conns[w], (op, [], "", [], (), {}))
                socket.send_fds(self._conns[w], [data], [fd])
            except OSError as e:
                raise WorkerDiedError(f"worker {w} is gone ({e}); the pool cannot take calls") from None
        for w in range(self.num_workers):
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
        self._listener.close()
