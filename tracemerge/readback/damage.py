"""Whether a trace file is whole, before `check` or `summary` reads it.

trace_processor loads what it can of a file and says nothing of the rest: an empty file, or a
``.pftrace`` cut mid-packet, gives a clean load of less than was written. So the file's framing is
walked first, cheaply (packet headers only, the payloads skipped; a ``.gz`` is decompressed as
it is walked): a Perfetto trace is a run of ``Trace.packet`` fields (tag 0x0a, a varint length,
that many bytes) to the very end; a JSON trace object ends with its ``}``. The answer is the exit
status to give and a one-line reason, or None for a whole file.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

from tracemerge.analysis.steps import per_step
from tracemerge.core.errors import TracemergeError, shown
from tracemerge.core.exit_status import EXIT_FATAL, EXIT_INCOMPLETE
from tracemerge.readback.stored_summary import read_summary
from tracemerge.sources.base import GZIP_MAGIC

PACKET_TAG = 0x0A  # Trace.packet: field 1, length-delimited
_CHUNK = 1 << 20
_WHITESPACE = b" \t\r\n"


# What a damaged or foreign trace makes the summary's reading raise (protobuf's DecodeError: by name).
NOT_A_SUMMARY = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, MemoryError, EOFError)


class Unreadable(TracemergeError):
    """The file is no whole trace: ``status`` is the exit status to give (1 no trace, 3 damaged)."""

    def __init__(self, path: Path, status: int, reason: str) -> None:
        super().__init__(f"{shown(path)}: {reason}")
        self.status = status


def check_whole(path: Path) -> None:
    """Raises :class:`Unreadable` unless ``path`` is a whole trace (see :func:`trace_problem`)."""
    try:
        problem = trace_problem(path)
    except OSError as exc:
        problem = EXIT_FATAL, f"cannot read: {exc.strerror or exc}"
    if problem is not None:
        raise Unreadable(path, *problem)


def stored_summary(path: Path) -> dict | None:
    """The phase summary a whole trace tracemerge wrote keeps (None when it keeps none); raises
    :class:`Unreadable` for a damaged or foreign file, or a summary of no shape tracemerge writes."""
    check_whole(path)
    try:
        found = read_summary(path)
        if isinstance(found, dict):
            per_step(found)  # raises if its steps are of no shape tracemerge writes
    except (*NOT_A_SUMMARY, zlib.error) as exc:
        raise Unreadable(path, EXIT_FATAL, f"not a trace tracemerge wrote, or damaged ({type(exc).__name__})") from None
    except Exception as exc:
        if type(exc).__name__ != "DecodeError":  # protobuf's, from its C or Python implementation
            raise
        raise Unreadable(path, EXIT_INCOMPLETE, "damaged: a packet is not a Perfetto packet") from None
    if found is not None and not isinstance(found, dict):  # a note of no shape tracemerge writes
        raise Unreadable(path, EXIT_FATAL, f"not a trace tracemerge wrote, or damaged ({type(found).__name__} summary)")
    return found


def trace_problem(path: Path) -> tuple[int, str] | None:
    """(exit status, why) when ``path`` is not a whole trace: EXIT_FATAL when it is no trace at all
    (empty, or neither protobuf packets nor JSON), EXIT_INCOMPLETE when it is one, damaged or cut."""
    with path.open("rb") as raw:
        gz = raw.read(2) == GZIP_MAGIC
    try:
        with gzip.open(path, "rb") if gz else path.open("rb") as f:
            head = f.read(_CHUNK)
            text = head.removeprefix(b"\xef\xbb\xbf").lstrip(_WHITESPACE)
            if not text:
                return EXIT_FATAL, "empty file: not a trace" if not head else "nothing but white space: not a trace"
            if head[0] == PACKET_TAG:
                found = _packets(f, head, None if gz else path.stat().st_size)
                if found is None or text[:1] not in (b"{", b"["):
                    return found
                f.seek(0)  # a JSON text after a blank line, rather
                head = f.read(_CHUNK)
            if text[:1] in (b"{", b"["):
                if not gz:  # only its end matters
                    f.seek(max(len(head), path.stat().st_size - 4096))
                return _json_end(f, head, text[:1])
            return EXIT_FATAL, "not a trace: neither Perfetto protobuf packets nor JSON"
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        return EXIT_INCOMPLETE, f"damaged: its gzip stream is cut or corrupt ({exc})"


def _packets(f: io.BufferedIOBase, head: bytes, size: int | None) -> tuple[int, str] | None:
    """Walks the packet headers; ``size`` (of a plain file) lets payloads be skipped by seeking."""
    buf, pos = head, 0  # buf holds the file from byte pos on
    at = 0  # file offset of buf[0]
    while True:
        if len(buf) - pos < 11:  # a tag and a varint of up to 10 bytes
            buf, at, pos = buf[pos:] + f.read(_CHUNK), at + pos, 0
            if pos == len(buf):
                return None  # the end, between packets: whole
        if buf[pos] != PACKET_TAG:
            return EXIT_INCOMPLETE, f"damaged at byte {at + pos:,}: not a packet there (0x{buf[pos]:02x})"
        length, shift, n = 0, 0, pos + 1
        while n < len(buf) and buf[n] & 0x80 and shift < 63:
            length |= (buf[n] & 0x7F) << shift
            shift, n = shift + 7, n + 1
        if n >= len(buf) or buf[n] & 0x80:
            return EXIT_INCOMPLETE, f"cut at byte {at + pos:,}: a packet header runs past the end"
        length |= buf[n] << shift
        start = at + n + 1  # file offset of the payload
        if size is not None and start + length > size:
            return EXIT_INCOMPLETE, f"cut at byte {size:,}: the packet at byte {at + pos:,} needs {length:,} bytes more"
        left = length - (len(buf) - n - 1)
        if left <= 0:
            pos = n + 1 + length
            continue
        if size is not None:
            f.seek(start + length)
        else:
            while left > 0:
                chunk = f.read(min(left, _CHUNK))
                if not chunk:
                    return EXIT_INCOMPLETE, f"cut: the packet at byte {at + pos:,} runs past the end"
                left -= len(chunk)
        buf, at, pos = b"", start + length, 0


def _json_end(f: io.BufferedIOBase, head: bytes, opening: bytes) -> tuple[int, str] | None:
    """A JSON object trace ends with ``}`` (white space after it aside); an event array may end
    without its ``]`` (the trace-event format allows it), so only objects are judged."""
    tail = head
    while chunk := f.read(_CHUNK):
        tail = (tail + chunk)[-4096:]
    last = tail.rstrip(_WHITESPACE + b"\x00")[-1:]
    if opening == b"{" and last != b"}":
        return EXIT_INCOMPLETE, "cut: the JSON object ends before its closing }"
    return None
