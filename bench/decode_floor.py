"""The floor: decoding every event of the given Kineto files with msgspec, and nothing else.

    python bench/decode_floor.py FILE...

What no merger written in Python can beat: typed decoding into the structs tracemerge's reader
uses (args left as raw JSON), the whole file at once.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import msgspec

from tracemerge.sources.chrome.schema import TraceEvent


class Trace(msgspec.Struct):
    traceEvents: list[TraceEvent]


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
