"""The device time and count of each kernel or op, per device stream, noted while a file is read.

The same device work the breakdown's compute and communication marks come from (Kineto's
``kernel``, ``gpu_memcpy`` and ``gpu_memset`` events, nsys's CUPTI kernels, copies and sets, Ascend's
compute and HCCL tasks) is totalled here by name, beside the span unions and apart from them: a
total and a count per name and stream, so memory grows with the distinct names, never with the
events. A file's scan joins its streams per process (:func:`process_kernels`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tracemerge.core.model import Identity, OriginKey, ThreadKey

# Per (origin, stream): per name, [total device time (ns), count].
Tally = dict[tuple[OriginKey, ThreadKey], dict[str, list[int]]]
# Per process: per name, (total device time (ns), count).
ProcessKernels = dict[Identity, dict[str, tuple[int, int]]]


class KernelTally:
    """Per device stream, each kernel's or op's total device time and count."""

    def __init__(self) -> None:
        self.by_stream: Tally = {}

    def add(self, origin: OriginKey, thread: ThreadKey, name: str, dur: int) -> None:
        """One kernel or op of ``dur`` ns on ``thread``."""
        names = self.by_stream.get((origin, thread))
        if names is None:
            names = self.by_stream[(origin, thread)] = {}
        found = names.get(name)
        if found is None:
            names[name] = [dur, 1]
        else:
            found[0] += dur
            found[1] += 1

    def add_rows(self, origin: OriginKey, thread: ThreadKey, names: list[str], durs: np.ndarray) -> None:
        """A batch of one stream's kernels or ops (``names``, ``durs`` in ns, row by row): summed per
        name in numpy first."""
        if not names:
            return
        codes: dict[str, int] = {}
        index = np.fromiter((codes.setdefault(n, len(codes)) for n in names), np.int64, len(names))
        totals = np.zeros(len(codes), np.int64)
        np.add.at(totals, index, durs.astype(np.int64, copy=False))
        counts = np.bincount(index, minlength=len(codes))
        mine = self.by_stream.setdefault((origin, thread), {})
        for name, total, count in zip(codes, totals.tolist(), counts.tolist(), strict=True):
            found = mine.get(name)
            if found is None:
                mine[name] = [total, count]
            else:
                found[0] += total
                found[1] += count

    def absorb(self, other: Tally) -> None:
        """The tally of a part of the file read apart."""
        for key, names in other.items():
            mine = self.by_stream.setdefault(key, {})
            for name, (total, count) in names.items():
                found = mine.get(name)
                if found is None:
                    mine[name] = [total, count]
                else:
                    found[0] += total
                    found[1] += count

    def clear(self) -> None:
        """Forget everything (the source reads the file again)."""
        self.by_stream.clear()

    def regroup(self, origin_of: Callable[[OriginKey, ThreadKey], OriginKey]) -> None:
        """Re-key by the origins known once the whole file is read."""
        found, self.by_stream = self.by_stream, {}
        for (origin, thread), names in found.items():
            self.absorb({(origin_of(origin, thread), thread): names})


def process_kernels(tally: Tally, identity_of: Callable[[Any], Identity]) -> ProcessKernels:
    """Per process, per name: the total and count over its streams."""
    out: dict[Identity, dict[str, list[int]]] = {}
    for (origin, _thread), names in tally.items():
        mine = out.setdefault(identity_of(origin), {})
        for name, (total, count) in names.items():
            found = mine.setdefault(name, [0, 0])
            found[0] += total
            found[1] += count
    return {ident: {n: (t, c) for n, (t, c) in names.items()} for ident, names in out.items()}


def joined(found: Iterable[ProcessKernels], keep: Callable[[Identity], bool] | None = None) -> ProcessKernels:
    """The tallies of many files, per process ``keep`` keeps: a process's files summed."""
    out: dict[Identity, dict[str, list[int]]] = {}
    for kernels in found:
        for ident, names in kernels.items():
            if keep is not None and not keep(ident):
                continue
            mine = out.setdefault(ident, {})
            for name, (total, count) in names.items():
                sums = mine.setdefault(name, [0, 0])
                sums[0] += total
                sums[1] += count
    return {ident: {n: (t, c) for n, (t, c) in names.items()} for ident, names in out.items()}
