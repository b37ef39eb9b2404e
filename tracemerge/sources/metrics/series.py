"""Metric series (Prometheus samples) as counter tracks and phase slices, shared by the metric sources.

A series is a metric name, its labels and its ``(time ns, value)`` samples. Where it goes:

* its process: a ``--metrics-map`` entry whose labels it matches; else the labels ``role`` and
  ``rank`` (``replica`` or ``dp_rank`` when there is no ``rank``); engine metrics
  (vLLM, SGLang) without a role belong to ``rollout``, SkyRL's to ``trainer``; a role without a
  rank is told apart by its ``instance`` (or Ray's ``WorkerId``/``ReplicaId``); a series naming
  none of these goes to the ``Metrics`` process;
* its title: a known series gets what tells it apart first, then a readable name with the unit
  (``GPU 0 utilization (%) 10.0.0.7``, ``engine 0 requests waiting``), its full name
  (``ray_node_gpus_utilization{GpuIndex="0",ip="10.0.0.7"}``) as the track's description; labels
  that placed it (role, rank, the instance of a ranked engine) are not repeated;
* monotonic counters (``_total``, or TYPE counter) are drawn as their rate per second over each
  interval between samples, starting where the interval starts; a value lower than the one before
  is a counter reset (the rate counts from zero, as Prometheus's ``rate()`` does);
* ``skyrl_training_phase{phase=...}`` (1.0 while that phase runs) becomes slices named after the
  phase on a ``training phase`` track, not a number.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec

from tracemerge.core.model import UNIX_EPOCH, Event, Kind, SourceData, ThreadInfo, as_rank
from tracemerge.core.stats import Losses, Stat
from tracemerge.store.file_layout import FileLayout

METRICS_PROCESS = "Metrics"
VALUES_THREAD = ("metrics",)
PHASE_THREAD = ("metrics", "training phase")
THREADS = {VALUES_THREAD: ThreadInfo(""), PHASE_THREAD: ThreadInfo("training phase", (-1,))}
METRIC_CAT = "metrics"
COUNTER, GAUGE = "counter", "gauge"
# Without a TYPE line, names with these endings are cumulative counters (Prometheus's conventions).
CUMULATIVE_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def untyped_kind(name: str) -> str:
    """The kind of a metric whose type is not known, from its name's ending."""
    return COUNTER if name.endswith(CUMULATIVE_SUFFIXES) else GAUGE


_RANK_LABELS = ("rank", "replica", "dp_rank")
_TAG_LABELS = ("instance", "WorkerId", "ReplicaId")
# Labels whose value tells a series apart, shown first with this word (``GPU 0``, ``engine 1``).
_LABEL_WORDS = {"GpuIndex": "GPU", "gpu": "GPU", "engine": "engine", "dp_rank": "dp", "tp_rank": "tp"}
# Labels that say where a series comes from or are the same for every series of a run.
_UNSHOWN_LABELS = frozenset({"__name__", "job", "SessionName", "model_name", "GpuDeviceName", "Version"})
_ENGINE_PREFIXES = ("vllm:", "sglang:")
_PHASE_GAUGE = "skyrl_training_phase"

# Known series (name with Ray's ``ray_`` prefix taken off, engine prefixes as the engines write
# them): a readable title with the unit.
KNOWN_TITLES = {
    "vllm:num_requests_running": "requests running",
    "vllm:num_requests_waiting": "requests waiting",
    "vllm:num_requests_swapped": "requests swapped",
    "vllm:gpu_cache_usage_perc": "KV cache usage (fraction)",
    "vllm:kv_cache_usage_perc": "KV cache usage (fraction)",
    "vllm:num_preemptions": "preemptions (/s)",
    "vllm:prompt_tokens": "prompt tokens (/s)",
    "vllm:generation_tokens": "generated tokens (/s)",
    "vllm:request_success": "requests finished (/s)",
    "sglang:num_running_reqs": "running requests",
    "sglang:num_queue_reqs": "queued requests",
    "sglang:token_usage": "KV token usage (fraction)",
    "sglang:gen_throughput": "generation throughput (tokens/s)",
    "sglang:cache_hit_rate": "prefix cache hit rate (fraction)",
    "node_gpus_utilization": "GPU utilization (%)",
    "node_gram_used": "GPU memory used (MB)",
    "node_cpu_utilization": "CPU utilization (%)",
    "skyrl_gen_buffer_qsize": "generation buffer depth (groups)",
    "skyrl_gen_buffer_maxsize": "generation buffer cap (groups)",
    "skyrl_mini_batch_size": "mini-batch size (groups)",
}


def known_name(metric: str) -> str:
    """The metric name as its writer registers it: Ray's ``ray_`` prefix off, ``vllm_`` as ``vllm:``."""
    name = metric.removeprefix("ray_")
    for engine in ("vllm", "sglang"):
        if name.startswith(engine + "_"):
            return f"{engine}:{name[len(engine) + 1 :]}"
    return name


def _base(metric: str) -> str:
    return known_name(metric).removesuffix("_total")


class Series(msgspec.Struct, frozen=True):
    metric: str
    labels: tuple[tuple[str, str], ...]
    kind: str  # "counter" (cumulative: drawn as a rate) or "gauge"


class MetricWriter:
    """Hands series to a file's layout; counts what cannot be drawn in ``dropped``."""

    def __init__(self, layout: FileLayout, dropped: Losses) -> None:
        self.layout = layout
        self.dropped = dropped
        self.descriptions: dict[str, str] = {}  # short title -> the series's full name

    def source_data(self, path: Path, fmt: str) -> SourceData:
        """What a metric file says of itself once its series are drawn: Unix-epoch times, the
        metric threads, what was dropped and the full names of the short titles."""
        return SourceData(
            path=path,
            format=fmt,
            clock=UNIX_EPOCH,
            threads=dict(THREADS),
            dropped=self.dropped,
            series_descriptions=self.descriptions,
        )

    def place(self, metric: str, labels: Mapping[str, str]) -> tuple[tuple, frozenset[str]]:
        """The series's origin (role, rank, tag) and the labels that said it (not repeated in its title)."""
        placed = self.layout.options.metrics_map.place(labels)
        if placed is not None:
            said = frozenset(k for k, _ in placed.labels)
            return (placed.role, placed.rank, "" if placed.rank is not None else METRIC_CAT), said
        role = labels.get("role") or None
        used = {"role"} if role else set()
        rank = None
        for key in _RANK_LABELS:
            rank = as_rank(labels.get(key))
            if rank is not None:
                used.add(key)
                break
        if role is None:
            name = known_name(metric)
            role = "rollout" if name.startswith(_ENGINE_PREFIXES) else "trainer" if name.startswith("skyrl_") else None
        if role is None and rank is None:
            return (None, None, METRICS_PROCESS), frozenset(used)
        if rank is not None:  # a rank's process is one engine: its instance would only lengthen titles
            return (role, rank, ""), frozenset({*used, *_TAG_LABELS})
        tag_label = next((k for k in _TAG_LABELS if labels.get(k)), None)
        if tag_label is None:
            return (role, None, METRIC_CAT), frozenset(used)
        return (role, None, labels[tag_label]), frozenset({*used, tag_label})

    def title(self, series: Series, rate: bool, placing: frozenset[str]) -> str:
        """A known series: what tells it apart first (``GPU 0``, ``engine 1``), then its readable
        name with the unit, each word once and short enough for the UI not to cut it; its full
        name goes to the track's description. Another series: its metric name and labels."""
        shown = [(k, v) for k, v in series.labels if k not in _UNSHOWN_LABELS and k not in placing]
        labels = "{" + ",".join(f'{k}="{v}"' for k, v in shown) + "}" if shown else ""
        full = f"{series.metric}{labels} (/s)" if rate else f"{series.metric}{labels}"
        known = KNOWN_TITLES.get(_base(series.metric))
        if not known:
            return full
        lead = [f"{_LABEL_WORDS[k]} {v}" for k, v in shown if k in _LABEL_WORDS]
        rest = [v for k, v in shown if k not in _LABEL_WORDS]
        first, _, after = known.partition(" ")
        if lead and lead[0].startswith(first + " ") and after:
            known = after  # GPU 0 + GPU utilization (%): GPU 0 utilization (%)
        title = " ".join([*lead, known, *rest])
        self.descriptions[title] = full
        return title

    def add(self, series: Series, samples: Iterable[tuple[int, float]], closing: bool = True) -> None:
        """Every sample of one series, in time order. ``closing`` False says the last sample of a
        counter is another file's (read for the rate over the last interval), counted there."""
        points = self._finite(samples)
        if not points:
            self.dropped.add(Stat.METRIC_SERIES_EMPTY, 1, "metric series without samples")
            return
        labels = dict(series.labels)
        origin, placing = self.place(series.metric, labels)
        if _base(series.metric) == _PHASE_GAUGE and "phase" in labels:
            self._phase_slices(labels["phase"], origin, points)
            return
        rate = series.kind == COUNTER
        name = self.title(series, rate, placing)
        add = self.layout.counter_sample
        if not rate:
            for ts, value in points:
                add(origin, VALUES_THREAD, name, ts, value)
            return
        drawn = 0
        for (t0, v0), (t1, v1) in itertools.pairwise(points):
            if t1 > t0:
                increase = v1 - v0 if v1 >= v0 else v1
                add(origin, VALUES_THREAD, name, t0, increase * 1e9 / (t1 - t0))
                drawn += 1
        if not drawn:
            own = len(points) if closing else len(points) - 1
            self.dropped.add(
                Stat.METRIC_COUNTER_SINGLE_SAMPLE,
                own,
                "metric counter without two samples in time (no interval for a rate)",
            )
            return
        # A rate is drawn where its interval starts: the series' last sample starts none, nor
        # does one at the time of the sample after it.
        if closing:
            self.dropped.add(
                Stat.METRIC_COUNTER_INTERVAL_END,
                1,
                "metric counter sample closing its series (the last rate is drawn up to it)",
            )
        if len(points) - 1 > drawn:
            self.dropped.add(
                Stat.METRIC_COUNTER_INTERVAL_END,
                len(points) - 1 - drawn,
                "metric counter sample at the time of the next one (no interval)",
            )

    def _finite(self, samples: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
        points = []
        for ts, value in samples:
            if math.isfinite(value):
                points.append((ts, value))
            elif math.isnan(value):  # a gap: a staleness marker, or a value never set
                self.dropped.add(Stat.METRIC_SAMPLE_NAN, 1, "metric sample NaN (a gap or staleness marker)")
            else:
                self.dropped.add(Stat.METRIC_VALUE_INFINITE, 1, "metric sample infinite")
        points.sort(key=lambda p: p[0])
        return points

    def _phase_slices(self, phase: str, origin: tuple, points: list[tuple[int, float]]) -> None:
        """Each run of samples at 1 is the phase running: a slice from the first such sample to the
        first sample after it that is not 1 (or the run's last sample)."""
        start = None
        for ts, value in points:
            if value == 1 and start is None:
                start = ts
            elif value != 1 and start is not None:
                self._slice(phase, origin, start, ts)
                start = None
        if start is not None:
            self._slice(phase, origin, start, points[-1][0])

    def _slice(self, phase: str, origin: tuple, start: int, end: int) -> None:
        ev = Event(Kind.SLICE, start, PHASE_THREAD, phase, METRIC_CAT, end - start, None, origin)
        self.layout.add_event(ev, note=False)
