"""What recognises a Chrome trace-event JSON file, without the reader (:mod:`tracemerge.sources.chrome.format`)."""

from __future__ import annotations

import re
from pathlib import Path

from tracemerge.sources.base import HEAD_BYTES, SourceFormat
from tracemerge.sources.json.head import HEAD_LIMIT
from tracemerge.sources.json.stream import Damage, text_blocks

NAME = "chrome-json"
_EVENT_HINT = re.compile(rb'"ph"\s*:\s*"')


def claims(path: Path, head: bytes) -> bool:
    text = head.lstrip()
    if text.startswith(b"{"):
        named = path.name.endswith((".json", ".json.gz"))
        if b'"traceEvents"' in head or (b'"schemaVersion"' in head and named):
            return True
        # A head of keys alone (a large pg_config first, minified): the array may come after it.
        return named and len(head) >= HEAD_BYTES and holds_trace_events(path)
    if text.startswith(b"["):
        return _EVENT_HINT.search(head) is not None
    return False


def holds_trace_events(path: Path, limit: int = HEAD_LIMIT) -> bool:
    """Whether the (decompressed) text holds the key ``"traceEvents"`` within its first ``limit``
    bytes: a minified trace may hold more than the head in the keys before its array (a large
    ``pg_config``). Read in blocks, never raises."""
    key = b'"traceEvents"'
    carried, seen = b"", 0
    try:
        for block in text_blocks(path):
            if key in carried + block[: len(key)] or key in block:
                return True
            seen += len(block)
            if seen >= limit:
                return False
            carried = block[-len(key) :]
    except (OSError, Damage):
        return False
    return False


CHROME_JSON = SourceFormat(NAME, "tracemerge.sources.chrome.format", claims)
