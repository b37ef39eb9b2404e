"""Bounded memory for one file's layout: the file its buffers spill to, and sorted tuple lists.

A :class:`RunStore` is a temporary file that spilled columns and bodies are written to as plain
bytes (:mod:`tracemerge.store.entries`). A :class:`SortedBuffer` is a list of tuples (counter samples)
that spills as a sorted run of marshal blocks; :meth:`SortedBuffer.ordered` then yields every
item in order, merging the runs with what is still in memory, reading one block of each run at a
time.
"""

from __future__ import annotations

import heapq
import io
import itertools
import marshal
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

BLOCK_ITEMS = 4096


class RunStore:
    """The file that holds the runs of one file's buffers (created when first needed): a
    temporary one, or, with ``path``, a named one that outlives the store (a layout kept for a
    second pass, see EventStore.save)."""

    def __init__(self, directory: Path | None = None, path: Path | None = None, size: int = 0) -> None:
        self.directory = directory
        self.path = path
        self._file: io.BufferedRandom | None = None
        self.size = size

    def _open(self) -> None:
        # Kept open across calls and closed by close(): a context manager cannot span them.
        if self.path is not None:
            self._file = self.path.open("r+b" if self.path.exists() else "w+b")
        else:
            self._file = tempfile.TemporaryFile(prefix=".tracemerge-run-", dir=self.directory)  # noqa: SIM115

    def write(self, items: list) -> list[tuple[int, int]]:
        """Writes sorted ``items``; returns the (offset, length) of each block."""
        return [self.put(marshal.dumps(items[n : n + BLOCK_ITEMS])) for n in range(0, len(items), BLOCK_ITEMS)]

    def put(self, data: bytes) -> tuple[int, int]:
        """Writes ``data`` as it is; returns its (offset, length)."""
        if self._file is None:
            self._open()
        assert self._file is not None
        os.pwrite(self._file.fileno(), data, self.size)
        at = (self.size, len(data))
        self.size += len(data)
        return at

    def get(self, offset: int, length: int) -> bytes:
        """The bytes :meth:`put` wrote at ``offset``."""
        if self._file is None:
            self._open()
        assert self._file is not None
        return os.pread(self._file.fileno(), length, offset)

    def read(self, blocks: list[tuple[int, int]]) -> Iterator:
        if self._file is None:
            self._open()
        assert self._file is not None
        fd = self._file.fileno()
        for offset, length in blocks:
            yield from marshal.loads(os.pread(fd, length, offset))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __getstate__(self) -> dict:
        """A named store travels (to another process, or a second pass) as its path and size."""
        assert self.path is not None or self._file is None, "a temporary store cannot leave its process"
        return {"directory": self.directory, "path": self.path, "_file": None, "size": self.size}


class SortedBuffer(list):
    """A list of comparable tuples; sorted runs of it may live in a :class:`RunStore`."""

    __slots__ = ("runs", "spilled")

    def __init__(self) -> None:
        super().__init__()
        # Per run: its blocks, its first and its last item.
        self.runs: list[tuple[list[tuple[int, int]], tuple, tuple]] = []
        self.spilled = 0

    def spill(self, store: RunStore) -> None:
        if not self:
            return
        self.sort()
        self.runs.append((store.write(self), self[0], self[-1]))
        self.spilled += len(self)
        self.clear()

    def discard(self) -> None:
        """Forget every item, in memory and spilled."""
        self.clear()
        self.runs.clear()
        self.spilled = 0

    @property
    def total(self) -> int:
        return self.spilled + len(self)

    def smallest(self) -> tuple | None:
        """The first item in order (the buffer is sorted as a side effect)."""
        self.sort()
        candidates = [first for _, first, _ in self.runs] + self[:1]
        return min(candidates) if candidates else None

    def absorb(self, other: SortedBuffer) -> None:
        """Takes ``other``'s items and runs (both must use the same store)."""
        self.extend(other)
        self.runs.extend(other.runs)
        self.spilled += other.spilled

    def loaded(self, store: RunStore) -> SortedBuffer:
        """The same items, all in memory: itself when none is spilled, else a new buffer."""
        if not self.runs:
            return self
        found = SortedBuffer()
        found.extend(self.ordered(store))
        return found

    def ordered(self, store: RunStore) -> Iterable:
        """Every item, in order.

        Runs that follow one another (a trace written in time order spills that way) are read
        one after the other; only overlapping ones are merged item by item.
        """
        self.sort()
        if not self.runs:
            return self
        sources: list[tuple[Iterable, tuple, tuple]] = [
            (store.read(blocks), first, last) for blocks, first, last in self.runs
        ]
        if self:
            sources.append((self, self[0], self[-1]))
        sources.sort(key=lambda source: source[1])
        if all(a[2] <= b[1] for a, b in itertools.pairwise(sources)):
            return itertools.chain.from_iterable(source[0] for source in sources)
        return heapq.merge(*(source[0] for source in sources))
