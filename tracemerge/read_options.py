"""What a source is asked to read with besides the file and the store it reads into."""

from __future__ import annotations

from dataclasses import dataclass

from tracemerge.metrics_map import NO_MAP, MetricsMap


@dataclass(frozen=True)
class ReadOptions:
    """One file's read options; sources reach them as ``layout.options``."""

    metrics_map: MetricsMap = NO_MAP  # where metric series go when their labels do not say
    helpers: int = 0  # processes besides this one that may read parts of a large file
    keep_zero_counters: bool = False  # --keep-zero-counters: keep counter series of zeros


DEFAULT_READ = ReadOptions()
