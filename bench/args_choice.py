"""How to write event args: passed through as one JSON annotation, or typed per key.

    python bench/args_choice.py FILE.json

Encodes the args of every complete event of a Kineto file both ways, as the Perfetto writer
would (names interned per sequence, values typed from the JSON), and prints the CPU time per
event and the bytes per event of each. The tracemerge writer uses the first.
"""

from __future__ import annotations

import struct
import sys
import time
from pathlib import Path

import msgspec

from tracemerge.core.units import plain_json
from tracemerge.writers.perfetto import UnitEncoder
from tracemerge.writers.perfetto_wire import delimited_field, varint


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    args: msgspec.Raw = msgspec.Raw(b"")


class Trace(msgspec.Struct):
    traceEvents: list[Event]


def typed(texts: list[bytes]) -> tuple[float, int]:
    """Per key: an interned name and a typed value (int, double, bool, string or JSON)."""
    names: dict[str, bytes] = {}
    size = 0
    start = time.process_time()
    for text in texts:
        for key, value in msgspec.json.decode(text).items():
            name = names.get(key)
            if name is None:
                name = names[key] = b"\x08" + varint(len(names) + 1)
            t = type(value)
            if t is int:
                encoded = b"\x20" + varint(value)
            elif t is float:
                encoded = b"\x29" + struct.pack("<d", value)
            elif t is bool:
                encoded = b"\x10\x01" if value else b"\x10\x00"
            elif t is str:
                encoded = delimited_field(b"\x32", value.encode())
            else:
                encoded = delimited_field(b"\x4a", msgspec.json.encode(value))
            size += len(delimited_field(b"\x22", name + encoded))
    return time.process_time() - start, size


def passed_through(texts: list[bytes]) -> tuple[float, int]:
    """One annotation per event holding the JSON text, as the reader's hot path makes it: the
    batch is checked once for what must be rewritten (null, integers beyond int64), then each
    annotation is a looked-up head and the text."""
    encoder = UnitEncoder(2, None)  # type: ignore[arg-type]
    heads, args = encoder.args_heads, encoder.args
    size = 0
    start = time.process_time()
    plain = plain_json(b"".join(texts))
    for text in texts:
        size += len(heads[len(text)] + text if plain and len(text) < len(heads) else args(text))
    return time.process_time() - start, size


def main() -> None:
    data = Path(sys.argv[1]).read_bytes()
    texts = [bytes(e.args) for e in msgspec.json.decode(data, type=Trace).traceEvents if e.ph == "X" and e.args]
    print(f"{len(texts):,} events with args")
    for name, run in (("passed through", passed_through), ("typed per key", typed)):
        best = min(run(texts) for _ in range(3))
        print(f"{name}: {best[0] / len(texts) * 1e6:.2f} µs/event, {best[1] / len(texts):.1f} bytes/event")


if __name__ == "__main__":
    main()
