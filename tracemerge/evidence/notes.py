"""The evidence notes a file's read leaves: marks ``(start, end)`` per (tag, origin, thread).

Which event names are evidence, and under which tags, a :class:`~tracemerge.evidence.anchors.Watch` says
(:mod:`tracemerge.evidence.anchors` describes the kinds); :class:`EvidenceNotes` keeps what sources note
of them, in the file's own timestamps, capped per tag and thread; device activity past a bound
spilled to ``folder`` (:mod:`tracemerge.evidence.column_file`), when there is one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tracemerge.core.model import OriginKey, ThreadKey
from tracemerge.evidence.anchors import DEVICE, MAX_MARKS, MAX_PHASE_MARKS, PHASE, STEP
from tracemerge.evidence.span_union import SpanUnion

# Device activity is a SpanUnion per (tag, origin, thread), any other evidence a list of marks.
MarkKey = tuple[str, OriginKey, ThreadKey]
Marks = dict[MarkKey, list[tuple[int, int]] | SpanUnion]


class EvidenceNotes:
    """Clock anchors, phase marks and device activity noted while one file is read."""

    def __init__(self, watch: Callable[[str], tuple[str, ...]] | None = None, folder: Path | None = None) -> None:
        self.watch = watch
        self.folder = folder  # where device activity past a bound is spilled (None: kept in memory)
        self.tags: dict[str, tuple[str, ...]] = {}  # per event name, what ``watch`` says of it
        self.marks: Marks = {}
        self.marks_over: Counter[str] = Counter()  # per kind of evidence, marks beyond the cap

    def tag(self, name: str) -> tuple[str, ...]:
        """The evidence tags of events named ``name`` (see :mod:`tracemerge.evidence.anchors`)."""
        try:
            return self.tags[name]
        except KeyError:
            found = self.tags[name] = self.watch(name) if self.watch is not None else ()
            return found

    def note(self, name: str, origin: OriginKey, thread: ThreadKey, start: int, dur: int) -> None:
        """Keep a slice as evidence when its name is watched."""
        for tag in self.tag(name):
            self.mark(tag, origin, thread, start, start + dur)

    def mark(self, tag: str, origin: OriginKey, thread: ThreadKey, start: int, end: int) -> None:
        """Clock evidence: an instant range under ``tag``, in the file's own timestamps."""
        found = self.marks.get((tag, origin, thread))
        if found is None:
            # device activity: a union of spans, merged as they come
            found = self.marks[(tag, origin, thread)] = SpanUnion(folder=self.folder) if tag.startswith(DEVICE) else []
        if isinstance(found, SpanUnion):
            found.add(start, end)
            return
        limit = MAX_PHASE_MARKS if tag.startswith((PHASE, STEP)) else MAX_MARKS
        if len(found) < limit:
            found.append((start, end))
        else:
            self.marks_over[tag.partition(" ")[0]] += 1

    def mark_device(self, tag: str, origin: OriginKey, thread: ThreadKey, starts: np.ndarray, ends: np.ndarray) -> None:
        """Device activity of a batch of one thread's rows (``tag``: compute or comm), merged in
        numpy into the thread's union."""
        if not len(starts):
            return
        _union_at(self.marks, (tag, origin, thread), self.folder).add_columns(starts, ends)

    def absorb(self, marks: Marks, marks_over: Counter[str]) -> None:
        """The notes of a part of the file read apart, after those before. A part's device
        activity is a union already: its spans join this one's whole (the union is the same as
        if they had come one by one, and a 23 MB rank's part holds ten thousand)."""
        for key, found in marks.items():
            tag, origin, thread = key
            if isinstance(found, SpanUnion):
                _union_at(self.marks, key, self.folder).absorb(found)
                continue
            for start, end in found:
                self.mark(tag, origin, thread, start, end)
        self.marks_over.update(marks_over)

    def clear(self) -> None:
        """Forget every mark, and what was counted beyond the caps (the source reads the file
        again: counted twice otherwise)."""
        self.marks.clear()
        self.marks_over.clear()

    def regroup(self, origin_of: Callable[[OriginKey, ThreadKey], OriginKey]) -> None:
        """Re-key the marks by the origins known once the whole file is read."""
        marks: Marks = {}
        for (tag, origin, thread), found in self.marks.items():
            key = (tag, origin_of(origin, thread), thread)
            if isinstance(found, SpanUnion):
                _union_at(marks, key, self.folder).absorb(found)
            else:
                listed = marks.setdefault(key, [])
                assert isinstance(listed, list)  # a tag's marks are all of one kind
                listed.extend(found)
        self.marks = marks


def _union_at(marks: Marks, key: MarkKey, folder: Path | None) -> SpanUnion:
    """The device activity at ``key``, a new union (spilling to ``folder``) if there is none yet."""
    found = marks.get(key)
    if found is None:
        found = marks[key] = SpanUnion(folder=folder)
    assert isinstance(found, SpanUnion)  # a tag's marks are all of one kind: a device tag's a union
    return found
