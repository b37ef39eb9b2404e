"""What a source reads one file into: a :class:`FileLayout`, laid out once the file is read.

A layout is the file's :class:`~tracemerge.store.event_store.EventStore` (its events by track, spilled
past a budget), with the :class:`~tracemerge.evidence.notes.EvidenceNotes` its events leave (clock
anchors, phase marks, device activity) and the :class:`~tracemerge.store.read_options.ReadOptions` the
source reads with (``options``). A large Chrome JSON file may be read in parts, each by a
process and a layout of its own (:mod:`tracemerge.sources.json.segments`): the part protocol
here moves their buffers and notes into the file's layout. Laying the events out is the next
stage's (:func:`tracemerge.layout.emit.finish`): a source sees the store, the notes and its read
options, nothing of the stages after it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tracemerge.core.model import Event, Kind, OriginKey, ThreadKey
from tracemerge.evidence.kernel_tally import KernelTally
from tracemerge.evidence.notes import EvidenceNotes
from tracemerge.store.entries import byte_table
from tracemerge.store.event_store import DEFAULT_BUDGET, BodyEncoder, EventStore
from tracemerge.store.read_options import DEFAULT_READ, ReadOptions


class PlaceholderEncoder:
    """The encoder of a part of a file read apart (:mod:`tracemerge.sources.json.segments`): a
    name and category become a placeholder of PLACEHOLDER bytes numbered in order of first use
    (``table``), the file's own layout puts the writer's encoding in its place once every part
    is read; args are encoded by the writer's class, which keeps no state for them."""

    def __init__(self, kind: type[BodyEncoder]) -> None:
        self.kind = kind
        self.args_heads = kind.args_heads
        self.table: list[tuple[str, str]] = []
        self._numbers: dict[tuple[str, str], bytes] = {}

    def prefix(self, name: str, cat: str) -> bytes:
        found = self._numbers.get((name, cat))
        if found is None:
            if len(self.table) >= 1 << 24:
                raise OverflowError("more names than placeholders")
            found = self._numbers[(name, cat)] = b"\xff" + len(self.table).to_bytes(3, "little")
            self.table.append((name, cat))
        return found

    def args(self, text: bytes) -> bytes:
        return self.kind.args(self, text)


class FileLayout(EventStore):
    """One file's event store, its evidence notes (``notes``) and its read options (``options``);
    the per-kernel columns of its notes and kernel tally spill to ``columns_dir`` past a bound
    (:mod:`tracemerge.evidence.column_file`; None: they stay in memory).

    The encodings of names ``watch`` tags as evidence are cached apart from the others
    (``watched_prefixes``): a source's lookup in ``prefixes`` misses them, and it notes the slices
    (:meth:`note`).
    """

    def __init__(
        self,
        enc: BodyEncoder,
        budget: int = DEFAULT_BUDGET,
        spill_dir: Path | None = None,
        watch: Callable[[str], tuple[str, ...]] | None = None,
        store_path: Path | None = None,
        options: ReadOptions = DEFAULT_READ,
        columns_dir: Path | None = None,
    ) -> None:
        notes = EvidenceNotes(watch, columns_dir)
        super().__init__(enc, budget, spill_dir, store_path, notes.tag)
        self.notes = notes
        self.options = options
        # The notes' members sources reach through the layout, bound once (they are called per event).
        self.tag, self.note, self.mark, self.mark_device = notes.tag, notes.note, notes.mark, notes.mark_device
        # Each kernel's or op's device time, by name (the busiest kernels), beside the marks.
        self.kernels = KernelTally(columns_dir)
        self.tally, self.tally_rows = self.kernels.add, self.kernels.add_rows
        # Read in parts: every part's name and category, numbered in order.
        self.part_names: dict[tuple[str, str], int] = {}

    def add_event(self, ev: Event, note: bool = True) -> None:
        """One :class:`~tracemerge.core.model.Event` (sources that build them: span logs, Ascend DBs);
        ``note`` False keeps it from being taken as evidence whatever its name."""
        kind = ev.kind
        if kind == Kind.COUNTER:
            self.counter_sample(ev.origin, ev.thread, ev.name, ev.ts, ev.value)
        elif kind == Kind.FLOW:
            self.flow_point(ev.origin, ev.thread, ev.ts, ev.flow_phase, ev.flow_id, ev.flow_next)
        else:
            body = self.describe(ev.name, ev.cat, ev.args)
            self.buffer(ev.origin, ev.thread).append((ev.ts, -ev.dur, int(kind), self.ordinal(), body))
            if note and kind == Kind.SLICE and self.tag(ev.name):
                self.note(ev.name, ev.origin, ev.thread, ev.ts, ev.dur)

    def reset(self) -> None:
        """Forget every event and mark handed over so far (the source reads the file again)."""
        super().reset()
        self.notes.clear()
        self.kernels.clear()

    def regroup(self, origin_of: Callable[[OriginKey, ThreadKey], OriginKey]) -> None:
        """Re-key events and marks whose origin is only known once the whole file is read."""
        super().regroup(origin_of)
        self.notes.regroup(origin_of)
        self.kernels.regroup(origin_of)

    # -- a file read in parts (tracemerge.sources.json.segments) -------------------------------

    def part_recipe(self, path: Path) -> dict[str, Any] | None:
        """What a process needs to lay out a part of ``path`` as this layout would (None: parts
        cannot be kept, there is no directory to spill them to)."""
        if self.store.directory is None:
            return None
        return {
            "path": path,
            "kind": type(self.enc),
            "budget": self.budget,
            "directory": self.store.directory,
            # Unique in the work directory, which processes forked alike share (a pool's workers
            # reading large files in parts): the same object can have the same id() in each.
            "name": f".tracemerge-part-{os.getpid()}-{id(self):x}",
            "watch": self.notes.watch,
            "options": self.options,
            "columns": self.notes.folder,
        }

    @classmethod
    def for_part(cls, recipe: dict[str, Any], index: int) -> FileLayout:
        """The layout of part ``index``: placeholders for names, ordinals from ``index << 44`` on
        (each part's after the ones before it), spilled to a run file of its own."""
        store = recipe["directory"] / f"{recipe['name']}.{index}.runs"
        enc = PlaceholderEncoder(recipe["kind"])
        # A part's layout only encodes what it reads: it is handed to the file's, never laid out.
        layout = cls(enc, recipe["budget"], None, recipe["watch"], store, recipe["options"], recipe["columns"])
        layout.count_ordinals_from(index << 44)
        return layout

    def part_state(self) -> dict[str, Any]:
        """What another process needs of this part's layout: every buffer spilled, and indexed."""
        self.check_memory(0)
        self.store.close()
        assert isinstance(self.enc, PlaceholderEncoder)
        return {
            "entries": self.entries,
            "points": dict(self.points),
            "samples": dict(self.samples),
            "marks": self.notes.marks,
            "marks_over": self.notes.marks_over,
            "kernels": self.kernels.by_stream,
            "kernel_times": self.kernels.times,
            "point_keys": self.point_keys,
            "names": self.enc.table,
            "store": self.store,
        }

    def absorb_part(self, index: int, part: dict[str, Any]) -> None:
        """Takes the buffers of the file's next part (see :meth:`part_state`), after those before."""
        numbers = np.array([self.part_names.setdefault(pair, len(self.part_names)) for pair in part["names"]], np.int64)
        for key, entries in part["entries"].items():
            for block in entries.sealed():
                block.prefixes = numbers
            mine = self.entries.get(key)
            if mine is None:
                self.entries[key] = entries
            else:
                mine.absorb(entries)
        store, keys = part["store"], part["point_keys"]
        renumbered = (
            np.array([self.point_keys.pair(cat, name) for cat, name in keys.pair_list] or [0], np.int32),
            np.array([self.point_keys.other_id(fid) for fid in keys.id_list] or [0], np.int64),
        )
        for key, points in part["points"].items():
            for block in points.sealed():
                block.renumbered = renumbered
            self.points[key].absorb(points)
        for key, samples in part["samples"].items():
            self.samples[key].extend(samples.loaded(store))
        self.notes.absorb(part["marks"], part["marks_over"])
        self.kernels.absorb(part["kernels"], part["kernel_times"])
        self.parts_taken = max(self.parts_taken, index + 1)

    def intern_parts(self) -> None:
        """Once every part is in: the names of all, encoded by this layout's writer in order of
        first appearance (as a read of the whole file encodes them); ordinals go on after the
        parts'."""
        # Straight from the encoder, not through the cache of prefixes: these names come once
        # each, and asking whether each is evidence (what caching them checks first) took 10 ms
        # for the 840 names of a 23 MB rank.
        self.part_prefixes = byte_table([self.enc.prefix(name, cat) for name, cat in self.part_names])
        self.count_ordinals_from(self.parts_taken << 44)

    def discard_parts(self, recipe: dict[str, Any], indexes: Iterable[int]) -> None:
        """The run files of the parts ``indexes``, not taken (the file is read whole instead, or
        a read stopped at damage before them)."""
        for index in indexes:
            (recipe["directory"] / f"{recipe['name']}.{index}.runs").unlink(missing_ok=True)


# DEFAULT_BUDGET is named here too for modules that import it from the layout.
__all__ = ["DEFAULT_BUDGET", "FileLayout", "PlaceholderEncoder"]
