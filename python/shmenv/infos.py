"""Sub-env infos of hosted Python envs, in Gymnasium's vector format, at no per-step cost
when the envs return none, and cheaply when they return numbers.

Worker side: the Rust host hands :func:`note_info` the info dict of a ``reset`` or
``step`` only when it is non-empty. Numeric scalar values (``int``, ``float``, ``bool``,
numpy numbers of up to 8 bytes) go into **columns** of a shared area: each worker names
up to :data:`SLOTS` (key, dtype) pairs in its own table (first come, first served) and writes
each env's value into the key's cell with a presence byte, one column set for ``step``
infos and one for ``reset`` infos (under same-step autoreset a row carries both). Every
other value (and a number of another type than its key's) is kept in the worker, pickled
on request. Either way the env's flag byte is set.

Trainer side (:class:`InfoArea`): the extension's pool reads the area (``Pool.attach_infos``:
it maps each env to its cell and keeps the workers' key tables). After each batch one
call, ``Pool.take_infos``, looks at the flags of the batch's rows and, only when one is
set, reads and clears their column values into ``info[key]`` arrays with ``info["_key"]``
masks, as ``SyncVectorEnv`` gives them (no pickling, no round trip, one call whatever the
number of rows and keys). Only the rows whose env kept other values are fetched over the
call side channel (pickled, one round trip per worker that has some).

The area is a memfd the trainer creates and sends to each worker over its call socket
(``SCM_RIGHTS``). Env ``e`` of worker ``w`` owns byte/cell ``w * stride + local``; worker
``w`` alone writes its table. When the trainer steps the first shard itself
(``trainer_shard=True``), that shard's envs own part 0 and write it from the trainer's
thread during the step (:class:`InfoWriter`, one per pool), and worker ``w`` owns part
``w + 1``. A worker writes an env's cells and table entries before
the engine's completion post for that env's row, and the trainer reads them after
receiving the row, so the post orders them; the trainer clears an env's flag and presence
bytes only while the env has no action in flight. This module never imports gymnasium
(workers import it).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
from typing import Any, Sequence

import numpy as np

from shmenv import _shmenv
from shmenv.channel import protocol as ops

_FIXED = _shmenv.info_area_layout(1, 1)  # the sizes that do not depend on the pool
SLOTS: int = _FIXED["slots"]
"""Keys each worker can keep in columns; more keys go pickled."""

# A table entry: the key (UTF-8, zero-padded) then its dtype (numpy ``dtype.str``).
_NAME_BYTES: int = _FIXED["name"]
_ENTRY: int = _FIXED["entry"]
_KINDS = ("step", "reset")


class _Area:
    """Offsets and numpy views of the shared area for ``workers`` shards of ``stride`` envs:
    flags, pickled-slot bytes, per-worker key tables, and per slot (for step and reset
    infos) an 8-byte value cell and a presence byte per env. The offsets are the engine's
    (``_shmenv.info_area_layout``), the layout's one definition."""

    def __init__(self, mm: mmap.mmap, workers: int, stride: int):
        # The whole area and where its parts are, also for the trainer's reader (``Pool.attach_infos``).
        self.layout: dict[str, int] = _shmenv.info_area_layout(workers, stride)
        self.mm, self.n = mm, self.layout["cells"]
        self.flags = np.frombuffer(mm, np.uint8, self.n, 0)
        self.pickled = np.frombuffer(mm, np.uint8, self.n, self.layout["pickled"])
        self.counts = np.frombuffer(mm, np.uint8, workers, self.layout["counts"])  # keys named per worker
        self.entries = self.layout["entries"]
        at, step_to_reset = self.layout["presence_at"], self.layout["presence"]
        self.present = [
            [np.frombuffer(mm, np.uint8, self.n, self._slot(k) + at + j * step_to_reset) for j in range(2)]
            for k in range(SLOTS)
        ]
        self.bytes = np.frombuffer(mm, np.uint8)

    @staticmethod
    def size(workers: int, stride: int) -> int:
        """Bytes of the area for ``workers`` shards of ``stride`` envs."""
        return _shmenv.info_area_layout(workers, stride)["size"]

    def _slot(self, slot: int) -> int:
        return self.layout["columns"] + slot * self.layout["slot_bytes"]

    def values(self, slot: int, kind: int, dtype: np.dtype) -> np.ndarray:
        """The value cells of ``slot`` for step (0) or reset (1) infos, as ``dtype``."""
        offset, strides = self._slot(slot) + kind * self.layout["reset_values"], (self.layout["cell"],)
        return np.ndarray((self.n,), dtype=dtype, buffer=self.mm, offset=offset, strides=strides)

    def set_entry(self, worker: int, slot: int, name: bytes, dtype: np.dtype) -> None:
        at = self.entries + (worker * SLOTS + slot) * _ENTRY
        entry = name.ljust(_NAME_BYTES, b"\0") + dtype.str.encode().ljust(_ENTRY - _NAME_BYTES, b"\0")
        self.mm[at : at + _ENTRY] = entry


# --- worker side (and the trainer's own shard) -------------------------------------------

_TYPES: dict[type, np.dtype | None] = {}  # a value's type -> its column dtype (None: not a column)


def _column_dtype(value: Any) -> np.dtype | None:
    kind = type(value)
    if kind not in _TYPES:
        dtype = None
        if kind in (int, float, bool) or isinstance(value, np.number):
            dtype = np.dtype(kind)
            if dtype.kind not in "biuf" or dtype.itemsize > 8:
                dtype = None
        _TYPES[kind] = dtype
    return _TYPES[kind]


class InfoWriter:
    """One host's side of the area: a worker's (:data:`WORKER`), or that of the envs a
    trainer steps itself for one pool (:mod:`shmenv.worker.in_trainer`), which owns the
    area's first part. Keeps the infos it cannot write as columns, for the trainer."""

    def __init__(self) -> None:
        self._slots: dict[int, dict[str, Any]] = {}
        self._area: _Area | None = None
        self._worker = 0
        self._offset = 0
        # (key, dtype) -> slot, value views: a key whose values come in several types has a slot per type
        self._keys: dict[tuple[str, np.dtype], tuple[int, list[np.ndarray]]] = {}

    def _write_columns(self, area: _Area, local: int, kind: int, info: dict[str, Any]) -> dict[str, Any]:
        """Writes ``info``'s numeric scalars into this host's columns of ``area``; returns the rest."""
        pos, rest = self._offset + local, {}
        for key, value in info.items():
            dtype = _column_dtype(value)
            column = None if dtype is None else self._keys.get((key, dtype))
            if column is None and dtype is not None and isinstance(key, str):
                column = self._name_key(area, key, dtype)
            if column is None:
                rest[key] = value
                continue
            slot, views = column
            try:
                views[kind][pos] = value
            except (OverflowError, ValueError):
                rest[key] = value
                continue
            area.present[slot][kind][pos] = 1
        return rest

    def _name_key(self, area: _Area, key: str, dtype: np.dtype) -> tuple[int, list[np.ndarray]] | None:
        """Gives ``key`` this host's next free slot of ``area`` (None when full or the name too long)."""
        slot, name = int(area.counts[self._worker]), key.encode()
        if slot >= SLOTS or len(name) > _NAME_BYTES or b"\0" in name:
            return None
        area.set_entry(self._worker, slot, name, dtype)
        area.counts[self._worker] = slot + 1
        self._keys[key, dtype] = (slot, [area.values(slot, k, dtype) for k in range(2)])
        return self._keys[key, dtype]

    def note_info(self, local: int, kind: str, info: Any) -> None:
        """Keeps env ``local``'s non-empty info of a ``"step"`` (which starts a new slot) or a
        ``"reset"`` (added to the slot: under same-step autoreset it follows the step that
        ended the episode): numbers in columns, the rest kept; flags the env for the trainer."""
        area = self._area
        if area is not None:
            info = self._write_columns(area, local, _KINDS.index(kind), info)
        if kind == "step":
            self._slots.pop(local, None)
        if info:
            self._slots.setdefault(local, {})[kind] = info
            if area is not None:
                area.pickled[self._offset + local] = 1
        if area is not None:
            area.flags[self._offset + local] = 1

    def take(self, local: int) -> dict[str, Any]:
        """Env ``local``'s kept infos (``{"step": ..., "reset": ...}``, either may be
        missing), forgotten once taken."""
        return self._slots.pop(local, {})

    def attach(self, area: _Area, index: int, stride: int) -> None:
        """Writes from now on into part ``index`` of ``area`` (cells from ``index *
        stride``), taking it over: its own keys, no stale values, and the infos kept so
        far flagged (a host gets the area after its envs' first reset)."""
        self._worker, self._offset = index, index * stride
        area.counts[index] = 0
        self._keys.clear()
        for slot in range(SLOTS):
            for kind in range(2):
                area.present[slot][kind][self._offset : self._offset + stride] = 0
        area.pickled[self._offset : self._offset + stride] = 0
        self._area = area
        for local in list(self._slots):
            area.pickled[self._offset + local] = area.flags[self._offset + local] = 1

    def map_flags(self, sock: socket.socket, index: int) -> None:
        """Receives the area's fd (sent with ``"stride,workers,first"`` after the
        ``map_infos`` request) and maps it; worker ``index`` owns part ``first + index``
        (``first`` is 1 when the trainer steps the first shard, whose envs own part 0)."""
        data, fds, _, _ = socket.recv_fds(sock, 64, 1)
        if not fds:
            raise OSError("the map_infos request came without a file descriptor")
        stride, workers, first = (int(v) for v in data.decode().split(","))
        try:
            mm = mmap.mmap(fds[0], os.fstat(fds[0]).st_size)
        finally:
            for fd in fds:
                os.close(fd)
        area = _Area(mm, workers, stride)
        # A copy of this worker that env code forks must not write the trainer's infos.
        from shmenv._shmenv import guard_infos_in_children

        guard_infos_in_children(ctypes.addressof(ctypes.c_char.from_buffer(mm)), len(mm))
        # A restarted worker takes over its predecessor's part.
        self.attach(area, first + index, stride)


WORKER = InfoWriter()
"""This worker process's writer (the Rust host calls its ``note_info``; the call channel's
thread its ``take`` and ``map_flags``)."""


def note_info(local: int, kind: str, info: Any) -> None:
    """:meth:`InfoWriter.note_info` of this worker's envs."""
    WORKER.note_info(local, kind, info)


def take(local: int) -> dict[str, Any]:
    """:meth:`InfoWriter.take` of this worker's envs."""
    return WORKER.take(local)


def map_flags(sock: socket.socket, index: int) -> None:
    """:meth:`InfoWriter.map_flags` of this worker."""
    WORKER.map_flags(sock, index)


# --- trainer side -------------------------------------------------------------------------


class InfoArea:
    """The trainer's end: the shared area, which ``pool`` reads (``Pool.take_infos``), and
    the infos kept in the workers (pickled), added to a batch's when it has some."""

    def __init__(self, pool, shards: Sequence[tuple[int, int]]):
        # The envs the trainer steps itself (``trainer_shard``) own the area's first part.
        lo, hi = pool.trainer_envs
        self.first = 1 if hi > lo else 0
        parts = [(lo, hi), *shards] if self.first else list(shards)
        self.stride = max(1, max(b - a for a, b in parts))
        self.workers = len(parts)
        size = _Area.size(self.workers, self.stride)
        fd = os.memfd_create("shmenv-infos")
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self.fd: int | None = fd
        self._mm, self._area = mm, _Area(mm, self.workers, self.stride)
        self._pool = pool
        pool.attach_infos(self._area.bytes, self._area.layout)
        if self.first:
            pool.trainer_host.infos.attach(self._area, 0, self.stride)

    def data(self) -> bytes:
        """What a worker needs besides the fd (:meth:`InfoWriter.map_flags`)."""
        return f"{self.stride},{self.workers},{self.first}".encode()

    def close_fd(self) -> None:
        """Closes the trainer's fd once every worker has mapped the area."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        """Closes the fd and, once the pool is closed (it holds the area until then), the
        mapping."""
        self.close_fd()
        del self._area  # the mapping cannot close while numpy holds it
        try:
            self._mm.close()
        except BufferError:
            pass  # a view is still held somewhere: the mapping goes with it

    def forget_tables(self) -> None:
        """A worker was restarted: its replacement names its keys anew."""
        self._pool.forget_info_tables()

    def add_kept(self, infos: dict[str, Any], taken, res, calls, shards, same_step: bool) -> None:
        """Adds to ``infos`` what ``Pool.take_infos`` left to the caller (``taken``: the
        batch's numbers, and the rows whose envs kept other values): those rows' kept
        infos, fetched over the call channel, merged with the numbers; keys ``infos`` has
        already (shmenv's) win."""
        extra, pickled = taken
        slots = calls.request(shards, res.env_id[pickled].tolist(), ops.INFOS, "")
        done = np.logical_or(res.terminated, res.truncated)
        merge_slots(extra, np.array(pickled), slots, done, res.elapsed_step, same_step)
        # Under same-step autoreset ``final_info`` is the dict of the ended rows' step
        # infos, merged with the one ``infos`` may have already; otherwise (or when no row
        # ended) it is an env's own key like any other, an array (as ``SyncVectorEnv``).
        final = extra.get("final_info")
        if same_step and isinstance(final, dict):
            del extra["final_info"]
            old = infos.get("final_info")
            infos["final_info"] = {**old, **final} if isinstance(old, dict) else final
        for key, value in extra.items():
            infos.setdefault(key, value)


def merge_slots(
    infos: dict[str, Any],
    rows: np.ndarray,
    slots: Sequence[dict[str, Any]],
    done: np.ndarray,
    elapsed: np.ndarray,
    same_step: bool,
) -> None:
    """Adds the kept (pickled) infos of ``rows`` to ``infos`` as Gymnasium's vector envs
    do: a reset row (``elapsed == 0``) gets its reset's info, another row its step's; under
    same-step autoreset a row that ended an episode gets the step's info in
    ``infos["final_info"]`` and the next episode's reset info in ``infos``."""
    size = len(done)
    for r, slot in zip(rows.tolist(), slots):
        if same_step and done[r]:
            if slot.get("step"):
                if not isinstance(infos.get("final_info"), dict):
                    # An env's own numeric ``final_info`` key of a row that did not end
                    # (``SyncVectorEnv`` fails on that clash): the ended rows' infos win.
                    infos["final_info"] = {}
                add_info(infos["final_info"], slot["step"], r, size)
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
