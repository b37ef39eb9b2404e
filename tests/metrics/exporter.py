"""A real prometheus_client exporter that moves a gauge and a counter on a known schedule.

Every TICK seconds, tick k (from 1) sets ``demo_queue_depth`` to k and adds 10 to
``demo_tokens_total``. Prints its port on the first line of stdout, then serves until killed.
Run: ``python tests/metrics/exporter.py``.
"""

from __future__ import annotations

import sys
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

TICK = 0.25
TOKENS_PER_TICK = 10


def main() -> None:
    registry = CollectorRegistry()
    depth = Gauge("demo_queue_depth", "Requests waiting", registry=registry)
    tokens = Counter("demo_tokens", "Tokens generated", registry=registry)
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    print(server.server_port, flush=True)
    start = time.monotonic()
    tick = 0
    while True:
        tick += 1
        time.sleep(max(0.0, start + tick * TICK - time.monotonic()))
        depth.set(tick)
        tokens.inc(TOKENS_PER_TICK)


if __name__ == "__main__":
    sys.exit(main())
