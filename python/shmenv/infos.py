"""Sub-env infos of hosted Python envs, in Gymnasium's vector format, at no per-step cost
when the envs return none.

Worker side: the Rust host hands :func:`note_info` the info dict of a ``reset`` or
``step`` only when it is non-empty; it is kept (per env: the last step's info and the
info of a reset that followed it) and the env's byte in a small shared flag area is set
to 1. Trainer side (:class:`InfoFlags`): after each batch, one ``mmap.find`` tells whether
any byte is set; only then are the batch's flagged envs asked for their infos over the
call side channel (pickled), their flags cleared, and the infos merged into the batch's
``infos`` as ``info[key]`` arrays with ``info["_key"]`` masks, as ``SyncVectorEnv`` does.

The flag area is a memfd the trainer creates and sends to each worker over its call
socket (``SCM_RIGHTS``); worker ``w``'s envs own bytes ``w * stride + local``. A worker
writes a flag before the engine's completion post for that env's row, and the trainer
reads it after receiving the row, so the post orders them; an env's flag is cleared only
while the env has no action in flight. This module never imports gymnasium (workers
import it).
"""

from __future__ import annotations

import mmap
import os
import socket
from typing import Any, Sequence

import numpy as np

# --- worker side --------------------------------------------------------------------------

_SLOTS: dict[int, dict[str, Any]] = {}
_FLAGS: mmap.mmap | None = None
_OFFSET = 0


def note_info(local: int, kind: str, info: Any) -> None:
    """Keeps env ``local``'s non-empty info of a ``"step"`` (which starts a new slot) or a
    ``"reset"`` (added to the slot: under same-step autoreset it follows the step that
    ended the episode) and flags the env for the trainer."""
    if kind == "step":
        _SLOTS[local] = {"step": info}
    else:
        _SLOTS.setdefault(local, {})["reset"] = info
    if _FLAGS is not None:
        _FLAGS[_OFFSET + local] = 1


def take(local: int) -> dict[str, Any]:
    """Env ``local``'s kept infos (``{"step": ..., "reset": ...}``, either may be
    missing), forgotten once taken."""
    return _SLOTS.pop(local, {})


def map_flags(sock: socket.socket, index: int) -> None:
    """Receives the flag area's fd (sent with one byte after the ``map_infos`` request)
    and maps it; this worker's envs own the bytes from ``index * stride``."""
    global _FLAGS, _OFFSET
    data, fds, _, _ = socket.recv_fds(sock, 16, 1)
    if not fds:
        raise OSError("the map_infos request came without a file descriptor")
    stride = int(data.decode())
    try:
        _FLAGS = mmap.mmap(fds[0], os.fstat(fds[0]).st_size)
    finally:
        for fd in fds:
            os.close(fd)
    _OFFSET = index * stride
    # A restarted worker gets the area after its envs' first reset: flag the infos kept so far.
    for local in list(_SLOTS):
        _FLAGS[_OFFSET + local] = 1


# --- trainer side -------------------------------------------------------------------------


class InfoFlags:
    """The trainer's end: the flag area and the merge into each batch's infos."""

    def __init__(self, shards: Sequence[tuple[int, int]]):
        self.stride = max(1, max(b - a for a, b in shards))
        size = len(shards) * self.stride
        fd = os.memfd_create("shmenv-infos")
        try:
            os.ftruncate(fd, size)
            self._mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self.fd: int | None = fd
        self._flags = np.frombuffer(self._mm, dtype=np.uint8)
        # The flag byte of each env.
        self._pos = np.array([w * self.stride + e - a for w, (a, b) in enumerate(shards) for e in range(a, b)])

    def close_fd(self) -> None:
        """Closes the trainer's fd once every worker has mapped the area."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        self.close_fd()
        del self._flags  # the mapping cannot close while numpy holds it
        self._mm.close()

    def flagged(self, env_ids: np.ndarray) -> np.ndarray | None:
        """The rows of a batch (of envs ``env_ids``) whose envs returned infos, their flags
        cleared; None (one ``find``) when no env of any worker did."""
        if self._mm.find(b"\x01", 0) < 0:
            return None
        pos = self._pos[env_ids]
        rows = np.flatnonzero(self._flags[pos])
        self._flags[pos[rows]] = 0
        return rows

    @staticmethod
    def merge(
        infos: dict[str, Any],
        rows: np.ndarray,
        slots: Sequence[dict[str, Any]],
        done: np.ndarray,
        elapsed: np.ndarray,
        same_step: bool,
    ) -> None:
        """Adds the kept infos of ``rows`` to ``infos`` as Gymnasium's vector envs do: a
        reset row (``elapsed == 0``) gets its reset's info, another row its step's; under
        same-step autoreset a row that ended an episode gets the step's info in
        ``infos["final_info"]`` and the next episode's reset info in ``infos``."""
        size = len(done)
        for r, slot in zip(rows.tolist(), slots):
            if same_step and done[r]:
                if slot.get("step"):
                    add_info(infos.setdefault("final_info", {}), slot["step"], r, size)
                info = slot.get("reset")
            else:
                info = slot.get("reset") if elapsed[r] == 0 else slot.get("step")
            if info:
                add_info(infos, info, r, size)


def add_info(infos: dict[str, Any], info: dict[str, Any], row: int, size: int) -> dict[str, Any]:
    """``VectorEnv._add_info`` for a batch of ``size`` rows (an async batch is not
    ``num_envs`` rows): each key becomes an array (numbers: of their type; arrays: stacked;
    anything else: objects) with a bool mask under ``"_" + key``; dicts recurse."""
    for key, value in info.items():
        if isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, row, size)
        else:
            array = infos.get(key)
            if array is None:
                if type(value) in (int, float, bool) or isinstance(value, np.number):
                    array = np.zeros(size, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((size, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(size, None, dtype=object)
            array[row] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(size, dtype=np.bool_)
        mask[row] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos
