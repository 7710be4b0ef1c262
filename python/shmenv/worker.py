"""Worker process entry point: ``python -m shmenv.worker --shmenv-worker <index> <fd> <pid>``.

Pools start it; it is not meant to be run by hand. The hot loop is Rust (the extension):
it reads actions from the shared region, steps the envs and writes results in place.
"""

from __future__ import annotations

import signal
import sys


def main() -> int:
    # Ctrl-C goes to the whole process group: the trainer handles it and closes the pool,
    # which stops its workers; a worker that died of SIGINT first would look like a crash.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from shmenv._shmenv import run_worker

    return run_worker(sys.argv)


if __name__ == "__main__":
    sys.exit(main())
