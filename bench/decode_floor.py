"""The floor: decoding every event of the given Kineto files with msgspec, and nothing else.

    python bench/decode_floor.py FILE...

What no merger written in Python can beat: typed decoding into structs (args left as raw JSON).
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import msgspec


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    cat: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | int | str | None = None
    dur: float | int | str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


class Trace(msgspec.Struct):
    traceEvents: list[Event]


def main() -> None:
    decoder = msgspec.json.Decoder(Trace)
    events = 0
    for name in sys.argv[1:]:
        data = Path(name).read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        events += len(decoder.decode(data).traceEvents)
    print(events)


if __name__ == "__main__":
    main()
