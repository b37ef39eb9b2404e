"""Titles of Ascend tracks, and the counter series left out of the trace.

msprof names a counter by its process, its event and its arg key: ``HBM`` / ``HBM 0/Read`` /
``Read(MB/s)``, which a track title reads as ``HBM 0/Read Read(MB/s)``, words twice, and many are
long enough for the UI to cut them in the middle (``NPU Module MEM: T…served(MB)``). A track is
titled here by what tells it apart first (the unit, module or accelerator), each word once, with
its unit in brackets, short enough to be shown whole: ``HBM 0 read (MB/s)``, ``HCCL reserved
(MB)``, ``Acc 12 read bw level``. The text and the DB export of one run give the same titles (the
DB reader yields msprof's event names and arg keys first, see :mod:`ascend_counters`). The README
lists each title beside msprof's full name.

Slice tracks are titled ``{process} · {thread}`` as msprof names them, but a thread named as its
process once (``Python GC``), and Overlap Analysis shorter (``Overlap · Exposed comm`` for its
``Communication(Not Overlapped)``).

LLC hit rates are percentages: the DB stores them so (``hitRate`` 85.1), the text export writes
the fraction under a ``Hit Rate(%)`` key (0.851), made a percentage here from its decimal text.

A series whose every value in a file is 0 (an idle accelerator, a module holding no memory) is
left out, counted per series under the info statistic ``counter_all_zero``, unless the layout
says to keep them (``--keep-zero-counters``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

from tracemerge.core.model import ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.sources.chrome.values import counter_series
from tracemerge.store.file_layout import FileLayout
from tracemerge.store.spill import SortedBuffer

# Arg keys under which the text export writes a fraction that its key calls a percentage.
FRACTION_KEYS = frozenset({"Hit Rate(%)"})
ZERO_SERIES = "counter series zero throughout the file, left out (--keep-zero-counters keeps them)"


class _Rule(msgspec.Struct, frozen=True):
    process: str | None  # only counters of this process (msprof's), else any
    name: re.Pattern[str]
    key: re.Pattern[str]
    title: Callable[[re.Match[str], re.Match[str]], str]


def _rule(process: str | None, name: str, key: str, title: Callable[[re.Match[str], re.Match[str]], str]) -> _Rule:
    return _Rule(process, re.compile(name), re.compile(key), title)


_MEM_OWNER = {"APP": "APP", "Device": "device"}
_MEM_KIND = {"DDR": "DDR", "HBM": "HBM", "Memory": "total"}
_ACC_SERIES = {"bandwidth": "bw", "band_width": "bw", "ost": "OST"}

_RULES = (
    _rule(None, r"AI Core Freq", r"MHz", lambda n, k: "AI Core freq (MHz)"),
    _rule(None, r"HBM (\d+)/(Read|Write)", r"(Read|Write)\(MB/s\)", lambda n, k: f"HBM {n[1]} {n[2].lower()} (MB/s)"),
    _rule(None, r"LLC (\d+) (\w+)/Hit Rate", r"Hit Rate\(%\)", lambda n, k: f"LLC {n[1]} {n[2].lower()} hit rate (%)"),
    _rule(None, r"LLC (\d+) (\w+)/Throughput", r"Throughput\(MB/s\)", lambda n, k: f"LLC {n[1]} {n[2].lower()} (MB/s)"),
    _rule(
        None,
        r"(APP|Device)/(DDR|HBM|Memory)",
        r"KB",
        lambda n, k: f"NPU mem {_MEM_OWNER[n[1]]} {_MEM_KIND[n[2]]} (KB)",
    ),
    _rule(None, r"L2 Buffer Bw Level", r"L2 Buffer Bw Level", lambda n, k: "SoC L2 buffer bw level"),
    _rule(None, r"Mata Bw Level", r"Mata Bw Level", lambda n, k: "SoC Mata bw level"),
    _rule(
        None,
        r"acc_id (\d+)",
        r"(read|write)_(bandwidth|band_width|ost)",
        lambda n, k: f"Acc {n[1]} {k[1]} {_ACC_SERIES[k[2]]} level",
    ),
    _rule(None, r"QoS (.+)", r"value", lambda n, k: f"QoS {n[1]}"),
    _rule(None, r"QoS (.+)", r"die (\d+)", lambda n, k: f"QoS {n[1]} die {k[1]}"),
    _rule("HCCS", r"(Rx|Tx)", r"(Rx|Tx)\(MB/s\)", lambda n, k: f"HCCS {n[1].lower()} (MB/s)"),
    _rule(None, r"DDR/(Read|Write)", r"(Read|Write)\(MB/s\)", lambda n, k: f"DDR {n[1].lower()} (MB/s)"),
    _rule(None, r"PCIe_(cpl|nonpost|post)", r"(Tx|Rx)", lambda n, k: f"PCIe {n[1]} {k[1].lower()} (MB/s)"),
    _rule(None, r"PCIe_nonpost_latency", r"(Tx|Rx)", lambda n, k: f"PCIe latency {k[1].lower()} (µs)"),
    # Tables of the DB export only (CSVs in the text export): the module or component first.
    _rule("NPU Module MEM", r"(.+)", r"Total Reserved\(MB\)", lambda n, k: f"{n[1]} reserved (MB)"),
    _rule("NPU OP MEM", r"(.+)", r"Total (Allocated|Reserved)\(MB\)", lambda n, k: f"{n[1]} op {k[1].lower()} (MB)"),
)


OVERLAP = "Overlap Analysis"
# Overlap Analysis threads (DB: OVERLAP_ANALYSIS types 0-3) by their titles' last part.
_OVERLAP_THREADS = {"Communication(Not Overlapped)": "Exposed comm"}


def slice_title(process: str, thread: str) -> str:
    """The title of msprof's track of slices ``thread`` of ``process``."""
    if thread == process:
        return process
    if process == OVERLAP:
        return f"Overlap · {_OVERLAP_THREADS.get(thread, thread)}"
    return f"{process} · {thread}"


def counter_title(process: str, name: str, key: str) -> str:
    """The title of the track of msprof's counter ``name`` (an event of ``process``) drawing its
    arg ``key``; one msprof does not write is named ``process: name key`` (the process once)."""
    for rule in _RULES:
        if rule.process is not None and rule.process != process:
            continue
        found_name = rule.name.fullmatch(name)
        if found_name is None:
            continue
        found_key = rule.key.fullmatch(key)
        if found_key is not None:
            return rule.title(found_name, found_key)
    series = counter_series(name, key)
    return series if series.startswith(process) else f"{process}: {series}"


def percent(value: Any) -> Any:
    """A fraction as the percentage it is, from its decimal text (0.851 -> 85.1 exactly as
    written, not 85.10000000000001); anything but a number as it is."""
    if type(value) is int:
        return value * 100
    if type(value) is float:
        text = repr(value)
    elif type(value) is str:
        text = value.strip()
    else:
        return value
    try:
        return float(Decimal(text) * 100)
    except (InvalidOperation, ValueError):
        return value


def leave_out_zero_series(layout: FileLayout, dropped: Losses, group_of: Callable[[ThreadKey], str]) -> None:
    """Removes from ``layout`` every counter series whose values are all 0, counting each under
    its group (the msprof process or DB table its thread holds), unless the layout keeps them."""
    if layout.options.keep_zero_counters:
        return
    for key, samples in list(layout.samples.items()):
        if samples.total and all(value == 0 for _, _, value in samples.ordered(layout.store)):
            del layout.samples[key]
            dropped.add(Stat.COUNTER_ALL_ZERO, 1, f"{ZERO_SERIES}: {group_of(key[1])}")


def retitled(
    samples: dict[tuple, SortedBuffer], title_of: Callable[[ThreadKey, str], str]
) -> defaultdict[tuple, SortedBuffer]:
    """``samples`` (a layout's, keyed by origin, thread and series) with each series titled by
    ``title_of(thread, series)``, in the same order; series given one title are joined."""
    out: defaultdict[tuple, SortedBuffer] = defaultdict(SortedBuffer)
    for (origin, thread, series), buf in samples.items():
        key = (origin, thread, title_of(thread, series))
        if key in out:
            out[key].absorb(buf)
        else:
            out[key] = buf
    return out
