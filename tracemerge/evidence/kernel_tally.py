"""The device time and count of each kernel or op, per device stream, noted while a file is read.

The same device work the breakdown's compute and communication marks come from (Kineto's
``kernel``, ``gpu_memcpy`` and ``gpu_memset`` events, nsys's CUPTI kernels, copies and sets, Ascend's
compute and HCCL tasks) is totalled here by name, beside the span unions and apart from them: a
total and a count per name and stream. Each kernel's start and length are kept too, as compact
columns (:class:`KernelTimes`: 20 bytes a kernel), so that once the steps are known its time is
counted in the step it ran in (:mod:`tracemerge.phases.kernels`). Given a folder (the run's work
folder), a stream's columns go there :data:`SPILL_AT` kernels at a time
(:mod:`tracemerge.evidence.column_file`) and are read back a chunk at a time. A file's scan groups
its streams per process (:func:`process_kernels`, :func:`process_kernel_times`).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import numpy as np

from tracemerge.core.model import Identity, OriginKey, ThreadKey
from tracemerge.evidence import column_file
from tracemerge.evidence.column_file import Piece, read_column, write_column

# Per (origin, stream): per name, [total device time (ns), count].
Tally = dict[tuple[OriginKey, ThreadKey], dict[str, list[int]]]
# Per process: per name, (total device time (ns), count).
ProcessKernels = dict[Identity, dict[str, tuple[int, int]]]


class KernelChunk(NamedTuple):
    """Kernels written to disk: their starts, lengths and name codes, the codes read through
    ``remap`` (the codes of the columns that took them in) when there is one."""

    starts: Piece
    durs: Piece
    codes: Piece
    remap: np.ndarray | None = None

    def load(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        codes = read_column(self.codes)
        return read_column(self.starts), read_column(self.durs), codes if self.remap is None else self.remap[codes]

    def renamed(self, remap: np.ndarray) -> KernelChunk:
        return self._replace(remap=remap if self.remap is None else remap[self.remap])


class KernelTimes(msgspec.Struct):
    """Kernels as columns: each one's start and length (ns) and the index of its name in ``names``;
    the first of them on disk (``spilled``, in order), the others in memory."""

    names: list[str]
    starts: Any  # array('q') while noted; an int64 numpy array once joined
    durs: Any
    codes: Any  # array('i') / int32
    spilled: list[KernelChunk] = msgspec.field(default_factory=list)

    @classmethod
    def empty(cls) -> KernelTimes:
        return cls([], array("q"), array("q"), array("i"))

    def __len__(self) -> int:
        return sum(chunk.starts.size for chunk in self.spilled) + len(self.starts)

    def spill(self, folder: Path) -> None:
        """The kernels in memory written to ``folder``, after those there."""
        if not len(self.starts):
            return
        columns = (np.asarray(self.starts, np.int64), np.asarray(self.durs, np.int64), np.asarray(self.codes, np.int32))
        starts, durs, codes = (write_column(folder, c) for c in columns)
        self.spilled.append(KernelChunk(starts, durs, codes))
        self.starts, self.durs, self.codes = array("q"), array("q"), array("i")

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The kernels' starts, lengths and name codes (int64, int64, int32), in order: a chunk
        from disk at a time, then those in memory."""
        for chunk in self.spilled:
            yield chunk.load()
        if len(self.starts):
            yield np.asarray(self.starts, np.int64), np.asarray(self.durs, np.int64), np.asarray(self.codes, np.int32)


class KernelTally:
    """Per device stream, each kernel's or op's total device time and count, and its times
    (spilled to ``folder`` past :data:`SPILL_AT` kernels a stream, when there is one)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        # A stream's kernels held in memory before they spill (checked per kernel: one compare).
        self._spill_at = column_file.SPILL_AT if folder is not None else sys.maxsize
        self.by_stream: Tally = {}
        self.times: dict[tuple[OriginKey, ThreadKey], KernelTimes] = {}
        self._codes: dict[tuple[OriginKey, ThreadKey], dict[str, int]] = {}

    def add(self, origin: OriginKey, thread: ThreadKey, name: str, start: int, dur: int) -> None:
        """One kernel or op of ``dur`` ns from ``start`` on ``thread``."""
        key = (origin, thread)
        names = self.by_stream.get(key)
        if names is None:
            names = self.by_stream[key] = {}
        found = names.get(name)
        if found is None:
            names[name] = [dur, 1]
        else:
            found[0] += dur
            found[1] += 1
        times, codes = self._columns(key)
        code = codes.get(name)
        if code is None:
            code = codes[name] = len(times.names)
            times.names.append(name)
        starts = times.starts
        starts.append(start)
        times.durs.append(dur)
        times.codes.append(code)
        if len(starts) >= self._spill_at:
            self._spill(times)

    def add_rows(
        self, origin: OriginKey, thread: ThreadKey, names: list[str], starts: np.ndarray, durs: np.ndarray
    ) -> None:
        """A batch of one stream's kernels or ops (``names``, ``starts`` and ``durs`` in ns, row by
        row): summed per name in numpy first."""
        if not names:
            return
        key = (origin, thread)
        times, known = self._columns(key)
        codes: dict[str, int] = {}
        index = np.fromiter((codes.setdefault(n, len(codes)) for n in names), np.int64, len(names))
        durs = durs.astype(np.int64, copy=False)
        totals = np.zeros(len(codes), np.int64)
        np.add.at(totals, index, durs)
        counts = np.bincount(index, minlength=len(codes))
        mine = self.by_stream.setdefault(key, {})
        stream_code = np.empty(len(codes), np.int32)
        for i, (name, total, count) in enumerate(zip(codes, totals.tolist(), counts.tolist(), strict=True)):
            found = mine.get(name)
            if found is None:
                mine[name] = [total, count]
            else:
                found[0] += total
                found[1] += count
            code = known.get(name)
            if code is None:
                code = known[name] = len(times.names)
                times.names.append(name)
            stream_code[i] = code
        times.starts.frombytes(starts.astype(np.int64, copy=False).tobytes())
        times.durs.frombytes(durs.tobytes())
        times.codes.frombytes(stream_code[index].tobytes())
        if len(times.starts) >= self._spill_at:
            self._spill(times)

    def _spill(self, times: KernelTimes) -> None:
        if self.folder is not None:  # else nothing reaches the bound (sys.maxsize)
            times.spill(self.folder)

    def _columns(self, key: tuple[OriginKey, ThreadKey]) -> tuple[KernelTimes, dict[str, int]]:
        times = self.times.get(key)
        if times is None:
            times = self.times[key] = KernelTimes.empty()
            self._codes[key] = {}
        return times, self._codes[key]

    def absorb(self, other: Tally, times: dict[tuple[OriginKey, ThreadKey], KernelTimes] | None = None) -> None:
        """The tally (and times) of a part of the file read apart."""
        for key, names in other.items():
            mine = self.by_stream.setdefault(key, {})
            for name, (total, count) in names.items():
                found = mine.get(name)
                if found is None:
                    mine[name] = [total, count]
                else:
                    found[0] += total
                    found[1] += count
        for key, part in (times or {}).items():
            if not len(part):
                continue
            mine_times, codes = self._columns(key)
            remap = np.array([_code(codes, mine_times.names, n) for n in part.names], np.int32)
            if part.spilled and self.folder is not None:  # taken as they are, after the ones here
                mine_times.spill(self.folder)
                mine_times.spilled.extend(chunk.renamed(remap) for chunk in part.spilled)
                parts = [(part.starts, part.durs, part.codes)]
            else:
                parts = [chunk.load() for chunk in part.spilled] + [(part.starts, part.durs, part.codes)]
            for starts, durs, found_codes in parts:
                mine_times.starts.frombytes(np.asarray(starts, np.int64).tobytes())
                mine_times.durs.frombytes(np.asarray(durs, np.int64).tobytes())
                mine_times.codes.frombytes(remap[np.asarray(found_codes, np.int32)].tobytes())
            if len(mine_times.starts) >= self._spill_at:
                self._spill(mine_times)

    def clear(self) -> None:
        """Forget everything (the source reads the file again)."""
        self.by_stream.clear()
        self.times.clear()
        self._codes.clear()

    def regroup(self, origin_of: Callable[[OriginKey, ThreadKey], OriginKey]) -> None:
        """Re-key by the origins known once the whole file is read."""
        found, self.by_stream = self.by_stream, {}
        times, self.times, self._codes = self.times, {}, {}
        for (origin, thread), names in found.items():
            key = (origin_of(origin, thread), thread)
            self.absorb({key: names}, {key: times[(origin, thread)]} if (origin, thread) in times else None)


def _code(codes: dict[str, int], names: list[str], name: str) -> int:
    code = codes.get(name)
    if code is None:
        code = codes[name] = len(names)
        names.append(name)
    return code


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


def process_kernel_times(
    times: dict[tuple[OriginKey, ThreadKey], KernelTimes], identity_of: Callable[[Any], Identity]
) -> dict[Identity, list[KernelTimes]]:
    """Per process, its streams' kernels, as noted (no copy: each stream's columns as they are)."""
    out: dict[Identity, list[KernelTimes]] = {}
    for (origin, _thread), found in times.items():
        if len(found):
            out.setdefault(identity_of(origin), []).append(found)
    return out


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
