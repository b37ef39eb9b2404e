"""The parts a file's layout is made of, each on its own: the event store, the evidence notes,
and the layout that puts them together with the read options."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
from expected import union

from tracemerge.core.model import Event, Kind
from tracemerge.evidence.anchors import DEVICE_COMPUTE, MAX_MARKS, collective_tag
from tracemerge.evidence.notes import EvidenceNotes
from tracemerge.metrics_map import MetricsMap
from tracemerge.phases.device_time import merged
from tracemerge.run.executors import ForkedPartReads
from tracemerge.store import column_blocks, event_store
from tracemerge.store.entries import ThreadEntries, entry_block
from tracemerge.store.event_store import EventStore, threads_in_order
from tracemerge.store.file_layout import FileLayout
from tracemerge.store.read_options import ReadOptions

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32"


class _Names:
    """An encoder that only encodes names, counting how often it is asked."""

    args_heads = (b"",) * 16

    def __init__(self) -> None:
        self.asked = 0

    def prefix(self, name: str, cat: str) -> bytes:
        self.asked += 1
        return f"{cat}/{name}".encode()

    def args(self, text: bytes) -> bytes:
        return text


def test_names_are_encoded_once_and_watched_ones_cached_apart() -> None:
    enc = _Names()
    store = EventStore(enc, watched=lambda name: ("watched",) if name == "w" else ())  # type: ignore[arg-type]
    assert [store.prefix(n, "c") for n in ("a", "a", "w", "w")] == [b"c/a", b"c/a", b"c/w", b"c/w"]
    assert enc.asked == 2
    assert store.prefixes == {("a", "c"): b"c/a"}
    assert store.watched_prefixes == {("w", "c"): b"c/w"}


def test_a_saved_store_loads_with_every_event(tmp_path: Path) -> None:
    store = EventStore(_Names(), budget=2, spill_dir=tmp_path, store_path=tmp_path / "x.runs")  # type: ignore[arg-type]
    for n in range(5):
        store.buffer("p", 1).append((n * 10, -3, int(Kind.SLICE), store.ordinal(), store.describe("s", "c", None)))
        store.counter_sample("p", 2, "mem", n, n * 1.5)
    store.check_memory()
    store.save(tmp_path / "x.layout")
    loaded = EventStore.load(tmp_path / "x.layout", _Names())  # type: ignore[arg-type]
    starts, kinds, ordinals = loaded.sorted_starts("p", 1)
    assert set(kinds.tolist()) == {int(Kind.SLICE)}
    assert starts.tolist() == [0, 10, 20, 30, 40]
    assert ordinals.tolist() == [0, 2, 4, 6, 8]
    assert list(loaded.samples[("p", 2, "mem")].ordered(loaded.store)) == [(n, 2 * n + 1, n * 1.5) for n in range(5)]
    assert [key for key, _ in threads_in_order(loaded.entries)] == [("p", 1)]
    loaded.store.close()


def test_a_store_spills_by_its_bodies_bytes_as_well_as_its_events(tmp_path: Path) -> None:
    """Events with long bodies (call stacks, shapes as text) spill before the budget's count of
    events is held: past BODY_BYTES_PER_EVENT bytes of bodies per event of the budget."""
    store = EventStore(_Names(), budget=100, spill_dir=tmp_path)  # type: ignore[arg-type]
    per_event = event_store.BODY_BYTES_PER_EVENT
    thread = store.buffer("p", 1)
    for n in range(60):  # 60 events of the 100, 40 bytes of bodies past the budget's 100 * per_event
        thread.add_block(entry_block([(n, -1, int(Kind.SLICE), store.ordinal(), b"x" * (100 * per_event // 60 + 1))]))
    assert thread.held == 60 and thread.held_bytes > 100 * per_event
    store.check_memory()
    assert thread.held == 0 and thread.held_bytes == 0 and thread.total == 60  # all on disk
    small = store.buffer("p", 2)
    small.add_block(entry_block([(0, -1, int(Kind.SLICE), store.ordinal(), b"y" * per_event)]))
    store.check_memory()
    assert small.held == 1 and small.held_bytes == per_event  # within both: kept
    store.store.close()


def test_small_blocks_are_joined_up_to_a_bound_in_bytes() -> None:
    """Blocks of long bodies are not joined past JOIN_BYTES: the lay-out works on a block whole."""
    thread = ThreadEntries()
    body = b"z" * (column_blocks.JOIN_BYTES // 3 + 1)
    for n in range(7):
        thread.add_block(entry_block([(n, -1, int(Kind.SLICE), n, body)]))
    assert [block.n for block in thread.sealed()] == [2, 2, 2, 1]
    assert thread.held_bytes == 7 * len(body) == sum(block.held_bytes for block in thread.blocks)


def test_notes_cap_marks_and_merge_device_activity() -> None:
    notes = EvidenceNotes(lambda name: (t,) if (t := collective_tag(name)) else ())
    tag = collective_tag(ALLREDUCE)
    assert tag is not None and notes.tag(ALLREDUCE) == (tag,)
    for n in range(MAX_MARKS + 3):
        notes.note(ALLREDUCE, "p", 1, n * 10, 5)
    assert len(notes.marks[(tag, "p", 1)]) == MAX_MARKS
    assert notes.marks_over == {"collective": 3}
    notes.mark_device(DEVICE_COMPUTE, "p", 7, np.array([5, 0, 20]), np.array([8, 6, 30]))
    assert notes.marks[(DEVICE_COMPUTE, "p", 7)] == [(0, 8), (20, 30)]
    notes.regroup(lambda origin, thread: f"{origin}{thread}")
    assert set(notes.marks) == {(tag, "p1", 1), (DEVICE_COMPUTE, "p7", 7)}
    notes.clear()
    assert notes.marks == {}


def test_a_layout_notes_watched_events_and_forgets_them_on_reset() -> None:
    layout = FileLayout(_Names(), watch=lambda name: ("sync x",) if name == "x" else ())  # type: ignore[arg-type]
    layout.add_event(Event(kind=Kind.SLICE, name="x", cat="c", ts=5, dur=2, origin="p", thread=1))
    layout.add_event(Event(kind=Kind.SLICE, name="y", cat="c", ts=9, dur=2, origin="p", thread=1))
    assert layout.notes.marks == {("sync x", "p", 1): [(5, 7)]}
    assert layout.entries[("p", 1)].total == 2
    layout.reset()
    assert layout.notes.marks == {} and layout.entries[("p", 1)].total == 0


def test_read_options_travel_with_the_parts_of_a_file(tmp_path: Path) -> None:
    options = ReadOptions(metrics_map=MetricsMap(), parts=ForkedPartReads(3), keep_zero_counters=True)
    layout = FileLayout(_Names(), spill_dir=tmp_path, options=options)  # type: ignore[arg-type]
    recipe = layout.part_recipe(tmp_path / "trace.json")
    assert recipe is not None
    part = FileLayout.for_part(recipe, 2)
    assert part.options is options
    assert part.ordinal() == 2 << 44


def test_a_part_s_notes_absorbed_give_the_union_and_caps_of_one_read() -> None:
    """Device activity absorbed a part at a time is the union noting each span would give;
    other marks keep their cap per thread across the parts."""
    rng = random.Random(5)
    spans = sorted((a, a + rng.randrange(1, 40)) for a in (rng.randrange(10**6) for _ in range(5000)))
    tag = collective_tag(ALLREDUCE)
    assert tag is not None
    whole, parts = EvidenceNotes(), EvidenceNotes()
    for a, b in spans:
        whole.mark(DEVICE_COMPUTE, "p", 7, a, b)
    for n in range(MAX_MARKS + 5):
        whole.mark(tag, "p", 1, n, n + 1)
    cut = len(spans) // 3
    for piece, marks in ((spans[:cut], range(0, 40)), (spans[cut:], range(40, MAX_MARKS + 5))):
        part = EvidenceNotes()
        for a, b in piece:
            part.mark(DEVICE_COMPUTE, "p", 7, a, b)
        for n in marks:
            part.mark(tag, "p", 1, n, n + 1)
        parts.absorb(part.marks, part.marks_over)
    key = (DEVICE_COMPUTE, "p", 7)
    assert merged(parts.marks[key]) == merged(whole.marks[key]) == union(spans)
    assert parts.marks[(tag, "p", 1)] == whole.marks[(tag, "p", 1)]
    assert parts.marks_over == whole.marks_over == {"collective": 5}


def test_part_run_files_are_named_apart_in_processes_forked_alike(tmp_path: Path) -> None:
    """A pool's workers share the work directory, and a layout made the same way in each can sit
    at the same address: its parts' run files are still named apart."""
    layout = FileLayout(_Names(), spill_dir=tmp_path)  # type: ignore[arg-type]
    here = layout.part_recipe(tmp_path / "trace.json")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if not pid:  # the same object, at the same address, in another process
        try:
            theirs = layout.part_recipe(tmp_path / "trace.json")
            os.write(write_end, theirs["name"].encode() if theirs else b"")
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        theirs = pipe.read().decode()
    os.waitpid(pid, 0)
    assert here is not None and theirs
    assert here["name"] != theirs
    assert here["name"] == f".tracemerge-part-{os.getpid()}-{id(layout):x}"
