"""``python -m shmenv.worker --shmenv-worker <index> <fd> <pid>``: a Python worker process.
Runs the extension's host loop over the envs :mod:`shmenv.worker` builds, with the call
channel's thread (:mod:`shmenv.channel.worker`) beside it, then closes the envs."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading

from shmenv.channel.worker import serve_calls
from shmenv.worker import close_envs


def main() -> int:
    # Ctrl-C goes to the whole process group: the trainer handles it and closes the pool,
    # which stops its workers; a worker that died of SIGINT first would look like a crash.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from shmenv._shmenv import run_worker

    # The worker's end of its private call socket, inherited from the trainer (a socketpair).
    call_fd = os.environ.pop("SHMENV_CALL_FD", None)
    if call_fd is not None:
        sock = socket.socket(fileno=int(call_fd))
        sock.set_inheritable(False)  # programs an env runs do not get it
    if call_fd is not None and len(sys.argv) > 2:
        index = int(sys.argv[2])
        threading.Thread(target=serve_calls, args=(sock, index), daemon=True, name="shmenv-calls").start()
    code = run_worker(sys.argv)
    close_envs()
    return code


if __name__ == "__main__":
    sys.exit(main())
