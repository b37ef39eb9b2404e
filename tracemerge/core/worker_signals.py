"""How a worker process of a merge takes signals: shared by the executors' pools and the pools
that read parts of a large file (so that neither imports the other)."""

from __future__ import annotations

import signal


def worker_signals() -> None:
    """A worker process leaves stopping to its parent, which ends it (SIGTERM ends it at once,
    without the handlers it inherited; Ctrl+C on the terminal reaches the parent alone)."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
