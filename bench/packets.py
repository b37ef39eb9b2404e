"""Encoding TrackEvent packets: a per-packet Python loop against the vectorised batch encoder.

    python bench/packets.py [--packets 16384] [--repeat 20]

Both produce the same bytes (checked); prints the CPU time per packet of each.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from tracemerge.writers.perfetto_packets import pack_events
from tracemerge.writers.perfetto_wire import varint

HEAD = b"\x50\x02\x68\x02\x40"  # sequence id, flags, timestamp key


def per_packet(times: list[int], events: list[bytes]) -> bytes:
    fixed = len(HEAD) + 1
    parts: list[bytes] = []
    for ts, event in zip(times, events, strict=True):
        stamp, size = varint(ts), varint(len(event))
        key = b"\x0a" + varint(fixed + len(stamp) + len(size) + len(event))  # Trace.packet key + length
        parts += (key, HEAD, stamp, b"\x5a", size, event)
    return b"".join(parts)


def vectorised(times: list[int], events: list[bytes]) -> bytes:
    lengths = np.fromiter(map(len, events), np.int64, len(events))
    return pack_events(HEAD, np.array(times, np.int64), [(lengths, b"".join(events))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=16384)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(1)
    times = sorted(rng.randrange(0, 4_000_000_000) for _ in range(args.packets))
    events = [bytes(rng.randrange(256) for _ in range(rng.randrange(12, 90))) for _ in range(args.packets)]
    assert per_packet(times, events) == vectorised(times, events)
    for encode in (per_packet, vectorised, per_packet, vectorised):
        start = time.process_time()
        for _ in range(args.repeat):
            encode(times, events)
        print(f"{encode.__name__}: {(time.process_time() - start) / args.repeat / args.packets * 1e6:.2f} µs/packet")


if __name__ == "__main__":
    main()
