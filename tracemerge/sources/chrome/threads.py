"""Readable names and an order for the threads of a Chrome trace, for
:class:`~tracemerge.sources.chrome.events.ChromeEvents`.

:class:`ThreadNames` is mixed into the reader: once the whole file is read (metadata events may
come anywhere), :meth:`~ThreadNames.threads` names every thread that holds events, from the
process and thread names and labels the file gave and the pids found to be devices, and gives
each a sort key: CPU threads first (the main thread first in its process), then devices'
streams, then the profiler's own tracks, then process-scoped counters.
"""

from __future__ import annotations

import re
from typing import Any

from tracemerge.core.model import ThreadInfo, ThreadKey
from tracemerge.sources.chrome.values import id_order

_DEVICE_LABEL = re.compile(r"^([A-Za-z]+) (\d+)$")
_SPECIAL_PIDS = {"Spans": "Profiler spans", "Traces": "Profiler iterations", "": "Profiler"}


class ThreadNames:
    """Thread naming (the reader's state, as ``ChromeEvents`` keeps it)."""

    process_labels: dict[Any, str]
    thread_names: dict[tuple, str]
    device_pids: set[Any]
    threads_seen: set[ThreadKey]
    counter_threads: set[ThreadKey]

    def device_label(self, pid: Any) -> str | None:
        """``"GPU 0"`` for a device pid, else None."""
        label = self.process_labels.get(pid, "")
        m = _DEVICE_LABEL.match(label)
        if m and m.group(1) != "CPU":
            return label
        if pid in self.device_pids:
            return f"GPU {pid}"
        return None

    def _cpu_pids(self) -> set[int]:
        keys = self.threads_seen | self.counter_threads
        return {pid for pid, _ in keys if type(pid) is int and pid >= 0 and self.device_label(pid) is None}

    def own_pid(self) -> int | None:
        """The OS process the trace is of: its one CPU pid (None when it holds none or several)."""
        pids = self._cpu_pids()
        return next(iter(pids)) if len(pids) == 1 else None

    def threads(self) -> dict[ThreadKey, ThreadInfo]:
        """Readable names and an in-process order for every thread that holds events."""
        keys = self.threads_seen | self.counter_threads
        cpu_pids = self._cpu_pids()
        return {key: self._thread_info(key[0], key[1], len(cpu_pids) > 1) for key in keys}

    def _thread_info(self, pid: Any, tid: Any, several_cpu_pids: bool) -> ThreadInfo:
        given = self.thread_names.get((pid, tid), "").strip()
        if tid is None:  # process-scoped counters
            label = self.device_label(pid)
            if label is None and pid in _SPECIAL_PIDS:
                label = _SPECIAL_PIDS[pid]
            elif label is None and type(pid) is str:
                label = pid
            return ThreadInfo(label or "", (3, str(pid)))
        if pid in _SPECIAL_PIDS:
            return ThreadInfo(_SPECIAL_PIDS[pid], (2, str(pid), str(tid)))
        if type(pid) is int and pid < 0:
            suffix = f" {tid}" if tid not in (0, "", None) else ""
            return ThreadInfo(f"Profiler overhead{suffix}", (2, str(pid), str(tid)))
        label = self.device_label(pid)
        if label is not None:
            if given.startswith("stream"):
                name = f"{label} {given}"
            else:
                name = f"{label} stream {tid}" + (f" ({given})" if given else "")
            return ThreadInfo(name, (1, str(pid).zfill(8), id_order(tid)))
        if type(pid) is not int:
            return ThreadInfo(f"{pid} {tid}".strip(), (2, str(pid), str(tid)))
        if type(tid) is int and tid < 0 and given:
            name = given
        elif given.startswith("thread "):
            name = f"CPU {given}"
        elif given:
            name = f"CPU thread {tid} ({given})"
        else:
            name = f"CPU thread {tid}"
        if several_cpu_pids:
            name += f" · pid {pid}"
        main_first = 0 if tid == pid else 1
        return ThreadInfo(name, (0, pid, main_first, id_order(tid)))
