"""What a benchmark says while it runs, on stderr: a status line (what runs now, which pass
and round) when stderr is a terminal, and a warning when the machine's load average
exceeds its cores at the start or the end, since other processes then take CPU time from
every engine and the figures come out lower and noisier than on an idle machine.

Nothing is printed on stdout, so tables and ``--json`` stay clean; redirected to a file or
a pipe, stderr gets the warnings only."""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, TextIO


def cores() -> int:
    """The machine's online CPUs (what the load average is measured against)."""
    return os.cpu_count() or 1


def warn_if_loaded(when: str, stream: TextIO | None = None) -> float:
    """Prints a warning on `stream` (stderr) when the 1-minute load average exceeds the
    cores; `when` says at which moment ("at the start", "at the end"). Returns the load."""
    load = os.getloadavg()[0]
    n = cores()
    if load > n:
        print(
            f"warning: the load average is {load:.2f} {when}, above the {n} cores: other processes compete for "
            "the CPUs, so every engine's figures come out lower and noisier than on an idle machine; compare "
            "ratios taken in one run, or rerun when `uptime` shows less load",
            file=stream or sys.stderr,
            flush=True,
        )
    return load


class Progress:
    """A status line rewritten in place on a terminal: ``[3/24, 41 s] pass 1/3: shmenv-async,
    round 2/3``. Silent when the stream is not a terminal (or `enabled` is False)."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = total
        self.done_count = 0
        self.start = time.monotonic()
        self._width = 0

    def _show(self, text: str) -> None:
        if not self.enabled:
            return
        line = f"[{self.done_count + 1}/{self.total}, {time.monotonic() - self.start:.0f} s] {text}"
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def begin(self, what: str, rounds: int) -> Callable[[int], None]:
        """Shows that `what` is being built and warmed up; returns the function to call after
        each of its `rounds` timed rounds with the number done so far."""
        self._show(f"{what}: starting")

        def round_done(done: int) -> None:
            self._show(f"{what}: round {done}/{rounds} done")

        return round_done

    def end(self, what: str, outcome: str = "") -> None:
        """Counts `what` as finished (run, skipped or not applicable)."""
        if outcome:
            self._show(f"{what}: {outcome}")
        self.done_count = min(self.done_count + 1, self.total)

    def close(self) -> None:
        """Clears the line, so what follows starts on a clean one."""
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
