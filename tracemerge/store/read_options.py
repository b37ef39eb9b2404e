"""What a source is asked to read with besides the file and the store it reads into."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from tracemerge.metrics_map import NO_MAP, MetricsMap


class PartReads(Protocol):
    """Where the parts of a large file are read at once: the executor's to say (how many, and in
    which processes); a source only cuts the file and hands over the reads."""

    @property
    def workers(self) -> int:
        """How many parts at once, the one reading the file's own included."""
        ...

    def map(self, read: Callable[..., Any], tasks: list[tuple], here: Callable[[], Any]) -> tuple[Any, list[Any]]:
        """``read(*task)`` of every task, at once, and ``here()`` in this process meanwhile;
        what ``here`` returned and the tasks' results in their order."""
        ...


class ReadOptions(msgspec.Struct, frozen=True):
    """One file's read options; sources reach them as ``layout.options``."""

    metrics_map: MetricsMap = NO_MAP  # where metric series go when their labels do not say
    parts: PartReads | None = None  # how a large file's parts are read at once (None: it is read whole)
    keep_zero_counters: bool = False  # --keep-zero-counters: keep counter series of zeros


DEFAULT_READ = ReadOptions()
