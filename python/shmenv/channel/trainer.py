"""The trainer's end of the call side channel (the worker's is :mod:`shmenv.channel.worker`): ``call``/``get_attr``/``set_attr`` on the
Python envs inside the workers, with pickled arguments and results over a private Unix
socket per worker process. It never touches the step path: steps go through shared memory
only.

There is no rendezvous: the engine makes a ``socketpair`` before it spawns each worker
process, the worker inherits one end (``SHMENV_CALL_FD``) and the trainer takes the other
from the pool (``Pool.take_call_socket``). No name, address or listener exists, so no other
process can connect; only the pool's own worker holds the other end, and nothing is read
from anyone else.

Restarted workers (``max_restarts``): each replacement process comes with a fresh socket,
which must also be sent what its predecessor was sent (the info flag area). The channel
follows the pool's worker pids: a worker is *ready* when the channel holds the socket of
the process the pool runs as that worker and that process has taken every shared fd. A
replacement that dies before (or while) it gets ready is one more death of the pool's:
the channel never raises for it on the step path (:meth:`refresh`), and a call that needs
it hands it to ``revive`` (the pool restarts it through the engine) and tries again.
"""

from __future__ import annotations

import os
import select
import socket
import time
from typing import Any, Callable, Sequence

from shmenv.channel import protocol as ops
from shmenv.channel.protocol import recv_message, send_message
from shmenv.errors import WorkerDiedError, WorkerError

DEATH_GRACE = 1.0
"""Seconds a process whose connection ended may take to be seen dead (a SIGKILLed process
closes its sockets just before it becomes a zombie)."""


class CallChannel:
    """Connections to every worker's call thread. ``timeout`` bounds one answer;
    ``restart_wait`` bounds the wait for a replacement worker to take the shared fds (the
    pool's step timeout, else ``timeout``). The pool sets :attr:`worker_pids` and
    :attr:`take_socket` once it runs."""

    def __init__(
        self, num_workers: int, timeout: float = 60.0, restart_wait: float | None = None, replaces_workers: bool = False
    ):
        self.num_workers = num_workers
        # Whether the pool restarts dead workers (``max_restarts``): then infos that died
        # with a worker are given up (its envs come back restarted); else they raise.
        self.replaces_workers = replaces_workers
        self.timeout = timeout
        self.restart_wait = timeout if restart_wait is None else restart_wait
        self._conns: dict[int, socket.socket] = {}
        self._peers: dict[int, int] = {}  # worker index -> pid of the process at that socket
        self._sent: dict[int, int] = {}  # worker index -> items of ``_shared`` sent on its socket
        self._awaiting: dict[int, int] = {}  # worker index -> answers to those sends not read yet
        # What a replacement worker (``max_restarts``) must be sent again: (op, fd, data),
        # the fd a private duplicate.
        self._shared: list[tuple[str, int, bytes]] = []
        # The pool's current worker pids: a changed pid is a restarted worker.
        self.worker_pids: Callable[[], Sequence[int]] | None = None
        # Takes the trainer's end of worker w's current call socket from the pool: (pid, fd), once.
        self.take_socket: Callable[[int], tuple[int, int] | None] | None = None
        # Whether a worker was left not ready by the last refresh (it is tried again).
        self.pending = False
        # The envs the trainer steps itself (``trainer_shard=True``; a
        # :class:`shmenv.worker.in_trainer.TrainerEnvs`, envs ``0..len(local.envs)``),
        # answered in-process; None when every env is in a worker. The pool sets it.
        self.local: Any = None

    # --- connections ----------------------------------------------------------------

    def _current_pids(self) -> list[int] | None:
        if self.worker_pids is None:
            return None
        try:
            return list(self.worker_pids())
        except Exception:  # noqa: BLE001 - e.g. a closed pool: no restart to follow
            return None

    def _take(self, w: int) -> None:
        """Takes worker ``w``'s newest call socket from the pool, if it has one (the
        socket of a process that replaced the one this channel holds)."""
        taken = None
        if self.take_socket is not None:
            try:
                taken = self.take_socket(w)
            except Exception:  # noqa: BLE001 - e.g. a closed pool: nothing to take
                taken = None
        if taken is None:
            return
        pid, fd = taken
        conn = socket.socket(fileno=fd)
        conn.settimeout(self.timeout)
        self._drop(w)
        self._conns[w], self._peers[w], self._sent[w], self._awaiting[w] = conn, pid, 0, 0

    def _drop(self, w: int) -> None:
        """Forgets worker ``w``'s connection."""
        old = self._conns.pop(w, None)
        if old is not None:
            old.close()
        self._peers.pop(w, None)
        self._sent.pop(w, None)
        self._awaiting.pop(w, None)

    def _connected(self, w: int, pid: int | None) -> bool:
        """Whether worker ``w``'s connection comes from process ``pid`` (None: unknown, any)."""
        return w in self._conns and (pid is None or self._peers.get(w) == pid)

    def _ready(self, w: int, pids: Sequence[int] | None) -> bool:
        pid = None if pids is None else pids[w]
        return self._connected(w, pid) and self._sent.get(w) == len(self._shared) and not self._awaiting.get(w)

    def _sync(self, w: int, deadline: float) -> bool:
        """Makes worker ``w`` ready: takes its current process's socket and sends it the
        shared fds it lacks, reading their answers until ``deadline``. False when that
        process is dead (or died meanwhile): the pool is to restart it. Raises
        :class:`WorkerError` when the process lives but did not take the shared fds by
        ``deadline``, refused one, or its socket was closed after an error."""
        pid = self._last_pid(w)
        # Twice: a restart between taking the socket and reading the pids brings a newer one.
        for _ in range(2):
            if self._connected(w, pid):
                break
            self._take(w)
            pid = self._last_pid(w)
        if not self._connected(w, pid):
            if pid is not None and not _alive(pid):
                return False
            raise WorkerError(
                f"worker {w} (pid {pid}) has no call channel (it was closed after an earlier error), so calls "
                "cannot reach its envs; the pool still steps (look at the worker's output on stderr)"
            )
        try:
            self._send_shared(w)
            self._read_share_answers(w, deadline)
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

    def _send_shared(self, w: int) -> None:
        """Sends worker ``w`` each shared fd it was not sent yet (its answers come later)."""
        conn = self._conns[w]
        for op, fd, data in self._shared[self._sent[w] :]:
            send_message(conn, (op, [], "", [], (), {}))
            socket.send_fds(conn, [data], [fd])
            self._sent[w] += 1
            self._awaiting[w] += 1

    def _read_share_answers(self, w: int, deadline: float) -> None:
        """Reads worker ``w``'s answers to the shared fds sent, until ``deadline``; raises
        :class:`WorkerError` if one is a refusal or they are not all in by then."""
        conn = self._conns[w]
        while self._awaiting[w]:
            if not _readable(conn, deadline - time.monotonic()):
                raise WorkerError(
                    f"worker {w} (pid {self._peers[w]}) is alive but did not take the shared info area in time, "
                    "so calls cannot reach its envs yet; the pool still steps (look at the worker's output on "
                    "stderr)"
                )
            answer = recv_message(conn)
            self._awaiting[w] -= 1
            if answer:
                op = self._shared[self._sent[w] - self._awaiting[w] - 1][0]
                err = WorkerError(f"worker {w} could not take {op}:\n{answer[0][1]}")
                err.env_id, err.worker, err.traceback = None, w, answer[0][1]
                raise err

    def refresh(self, wait: bool = True) -> None:
        """Brings every worker's connection up to date after the pool restarted some (taking
        each replacement's socket and sending it the shared fds). Never raises: a
        replacement that died (or, without ``wait``, has not taken them yet) stays pending,
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
        without ``revive`` a dead worker raises :class:`WorkerDiedError`. Op :data:`~shmenv.channel.protocol.INFOS`
        never revives: a dead worker's kept infos died with it; under a restart policy it
        answers none (its envs come back restarted), else it raises
        :class:`WorkerDiedError`, as the batch that lost them must."""
        values = list(values) if values is not None else [None] * len(env_ids)
        own = len(self.local.envs) if self.local is not None else 0
        by_worker: dict[int, list[int]] = {}
        for k, e in enumerate(env_ids):
            w = -1 if e < own else next(w for w, (a, b) in enumerate(shards) if a <= e < b)
            by_worker.setdefault(w, []).append(k)
        messages = {}
        for w, ks in by_worker.items():
            start = 0 if w < 0 else shards[w][0]
            messages[w] = (op, [env_ids[k] - start for k in ks], name, [values[k] for k in ks], args, kwargs or {})
        # The trainer's own envs answer first, in-process (a worker's failure then still raises).
        local, host = messages.pop(-1, None), self.local
        answers = {} if local is None or host is None else {-1: host.answer(*local)}
        answers.update(self._answers(messages, op, revive) if messages else {})
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
            if op == ops.INFOS and not self.replaces_workers:
                w = gone[0]
                raise _died(
                    w,
                    self._last_pid(w),
                    "this batch's infos of its envs died with it; the pool has no "
                    "restart policy, so it is closed; build a new one (with max_restarts=n dead workers "
                    "are replaced)",
                )
            if op == ops.INFOS:
                answers.update({w: [(True, {})] * len(messages[w][1]) for w in gone})
                return answers
            if revive is None:
                w = gone[0]
                raise _died(
                    w,
                    self._last_pid(w),
                    "the pool has no restart policy, so it is closed; build a new "
                    "one (with max_restarts=n dead workers are replaced)",
                )
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
        """Closes the connections, and the envs the trainer stepped itself (their
        ``close()``, as a worker closes its envs when the pool closes)."""
        if self.local is not None:
            self.local.close_envs()
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        self._peers.clear()
        self._sent.clear()
        self._awaiting.clear()
        for _, fd, _ in self._shared:
            os.close(fd)
        self._shared.clear()


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


def _readable(conn: socket.socket, wait: float) -> bool:
    """Whether ``conn`` has something to read (or was closed) within ``wait`` seconds."""
    poller = select.poll()
    poller.register(conn, select.POLLIN)
    return bool(poller.poll(max(0, int(wait * 1000))))
