"""The layout's walk against a plain model of it, on random threads.

The layout works a thread out on columns (order, lanes, ties) and writes its ENDs first, its
BEGINs in the order they were read, and only the ties that order gets wrong in the walk's order;
trace_processor sorts by (timestamp, position in the file). Read back the way trace_processor
reads it (tests/readback.py), every slice must come out where a plain walk over the sorted
events puts it: same track (the thread or its n-th overlap lane), same depth, exact times, and
every flow on the slices a plain binding finds. The same trace spilled, in tiny batches or read
in tiny blocks must give the same bytes.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_spilling_changes_nothing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from readback import read_pftrace

from tracemerge.layout import nesting, thread_walk
from tracemerge.pipeline import merge
from tracemerge.store import column_blocks, entries
from tracemerge.store.spill import RunStore

T0 = 1_700_000_000_000_000  # µs, so that the output has a wall clock


def _nested(rng: random.Random, lo: int, hi: int, depth: int, out: list[tuple[int, int]]) -> None:
    """Slices [start, end] nested inside [lo, hi]: touching, equal and zero-length ones included."""
    t = lo
    while t < hi and len(out) < 300:
        start = t + rng.choice((0, 0, 1, 3))
        end = min(hi, start + rng.choice((0, 1, 2, 5, 20, 60)))
        if start > hi:
            break
        out.append((start, end))
        if depth and end - start > 2 and rng.random() < 0.6:
            _nested(rng, start, end, depth - 1, out)
        t = end + rng.choice((0, 0, 1, 4))


def _trace(seed: int) -> tuple[dict, list[tuple[int, int, int]]]:
    """A random trace, and its flows as (id, index of the s event, index of the f event)."""
    rng = random.Random(seed)
    cpu: list[tuple[int, int]] = []
    if rng.random() < 0.4:  # slices open across the whole thread (a Python stack's outermost frames)
        cpu += [(0, 2050), (1, 2040)][: rng.choice((1, 2))]
    _nested(rng, 0, 2000, 4, cpu)
    if rng.random() < 0.5:  # slices that cross: overlap lanes
        cpu += [(s, s + rng.randrange(40)) for s in (rng.randrange(0, 2000) for _ in range(rng.choice((3, 12))))]
    kernels: list[tuple[int, int]] = []
    _nested(rng, 0, 2200, 1, kernels)
    events: list[dict] = []
    for n, (start, end) in enumerate(cpu):
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": f"c{n}", "pid": 1, "tid": 1, "ts": start, "dur": end - start}
        )
    for n, (start, end) in enumerate(kernels):
        events.append(
            {"ph": "X", "cat": "kernel", "name": f"k{n}", "pid": 0, "tid": 7, "ts": start, "dur": end - start}
        )
    for n in range(rng.choice((0, 5))):  # instants, some where slices start or end
        at = rng.choice([s for s, _ in cpu] + [e for _, e in cpu] + [rng.randrange(2000)])
        events.append({"ph": "i", "s": "t", "name": f"i{n}", "pid": 1, "tid": 1, "ts": at})
    flows = []
    for fid in range(1, rng.choice((1, 30))):
        src, dst = rng.randrange(len(cpu)), rng.randrange(len(kernels))
        flows.append((fid, src, len(cpu) + dst))
        s_ts = rng.choice((cpu[src][0], (cpu[src][0] + cpu[src][1]) // 2))
        events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": fid, "pid": 1, "tid": 1, "ts": s_ts})
        events.append(
            {"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": fid, "pid": 0, "tid": 7, "ts": kernels[dst][0]}
        )
    # The reader sorts; the order in the file decides ties only, so the file is shuffled (the
    # ordinals below are the events' places in it), or in half the traces written in time order
    # with ties shuffled (as a profiler writes them: then the layout works in runs apart in time).
    rng.shuffle(events)
    if rng.random() < 0.5:
        events.sort(key=lambda e: e["ts"])
    for e in events:
        e["ts"] += T0
    return {"traceEvents": events}, flows


def _walk(events: list[dict]) -> dict[str, tuple[int, int]]:
    """Where a plain walk puts each slice and instant of one thread: (lane, depth), by name."""
    placed: dict[str, tuple[int, int]] = {}
    order = sorted(
        range(len(events)),
        key=lambda n: (events[n]["ts"], -events[n].get("dur", 0), events[n]["ph"] != "X", n),
    )
    stacks: list[list[int]] = [[]]
    for n in order:
        e = events[n]
        start, end = e["ts"], e["ts"] + e.get("dur", 0)
        own = stacks[0]
        while own and own[-1] <= start:
            own.pop()
        if e["ph"] == "i":
            placed[e["name"]] = (0, len(own))
            continue
        lane = 0
        if own and own[-1] < end:
            lane = next(
                (k for k in range(1, len(stacks)) if _fits(stacks[k], start, end)),
                len(stacks),
            )
            if lane == len(stacks):
                stacks.append([])
        placed[e["name"]] = (lane, len(stacks[lane]))
        stacks[lane].append(end)
    return placed


def _fits(stack: list[int], start: int, end: int) -> bool:
    while stack and stack[-1] <= start:
        stack.pop()
    return not stack or stack[-1] >= end


def _binding(events: list[dict], point: dict) -> str | None:
    """The slice a plain walk binds a flow point to: the innermost open at its time."""
    slices = sorted((e for e in events if e["ph"] == "X"), key=lambda e: (e["ts"], -e["dur"]))
    stack: list[dict] = []
    for e in slices:
        if e["ts"] > point["ts"]:
            break
        while stack and stack[-1]["ts"] + stack[-1]["dur"] < e["ts"]:
            stack.pop()
        stack.append(e)
    while stack and stack[-1]["ts"] + stack[-1]["dur"] < point["ts"]:
        stack.pop()
    return stack[-1]["name"] if stack else None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_every_slice_lands_where_a_plain_walk_puts_it(tmp_path: Path, monkeypatch, seed: int) -> None:
    run = tmp_path / str(seed)
    run.mkdir(exist_ok=True)  # hypothesis may run a seed again
    trace, flows = _trace(seed)
    events = trace["traceEvents"]
    (run / "rank0.pt.trace.json").write_text(json.dumps(trace))
    monkeypatch.setattr(column_blocks, "SEAL_AT", 3)
    monkeypatch.setattr(column_blocks, "JOIN_TO", 4)
    monkeypatch.setattr(column_blocks, "JOIN_FROM", 3)
    monkeypatch.setattr(thread_walk, "BATCH", 5)
    # Worked out whole, and in runs of a couple of entries where the thread cuts apart in time;
    # each read back as trace_processor reads it, then spilled at budgets that hold a few events,
    # in tiny blocks and batches: the same bytes.
    for chunk in (1 << 18, 2):
        monkeypatch.setattr(entries, "CHUNK", chunk)
        out = run / f"out-{chunk}.pftrace"
        report = merge([run], out, jobs=1)
        _assert_walked(read_pftrace(out), report, events, flows)
        for budget in (5, 64):
            spilled = run / f"spilled{budget}-{chunk}.pftrace"
            assert_spilling_changes_nothing(report, [run], spilled, budget, monkeypatch)


def _assert_walked(rb, report, events: list[dict], flows: list[tuple[int, int, int]]) -> None:
    """The read-back slices, instants and flows where a plain walk and binding put them."""
    lanes_of = {track: _lane(name) for track, (_, name) in rb.threads.items()}
    got = {s.name: (lanes_of[s.track], s.depth) for s in [*rb.slices, *rb.instants]}
    want: dict[str, tuple[int, int]] = {}
    for thread in ((1, 1), (0, 7)):
        want.update(_walk([e for e in events if e["ph"] in "Xi" and (e["pid"], e["tid"]) == thread]))
    assert got == want
    times = {s.name: (s.ts, s.dur) for s in rb.slices} | {s.name: (s.ts, 0) for s in rb.instants}
    assert times == {e["name"]: (e["ts"] * 1000, e.get("dur", 0) * 1000) for e in events if e["ph"] in "Xi"}
    assert report.moved_to_lanes == sum(lane > 0 for lane, _ in want.values())
    # Flows: each from the slice its s binds to, to the one its f binds to.
    by_id: dict[int, dict[str, str | None]] = {}
    for e in events:
        if e["ph"] in "sf":
            thread = [x for x in events if x["ph"] == "X" and (x["pid"], x["tid"]) == (e["pid"], e["tid"])]
            by_id.setdefault(e["id"], {})[e["ph"]] = _binding(thread, e)
    # A flow whose end is stamped before its start is drawn from the earlier slice.
    start_of = {e["name"]: e["ts"] for e in events if e["ph"] == "X"}
    want_links = Counter(
        (a, b) if start_of[b] >= start_of[a] else (b, a)
        for a, b in ((ends["s"], ends["f"]) for ends in by_id.values())
        if a and b
    )
    ends_of: dict[int, dict[str, str]] = {}
    for s in rb.slices:
        for fid in s.flow_ids:
            ends_of.setdefault(fid, {})["s"] = s.name
        for fid in s.terminating_flow_ids:
            ends_of.setdefault(fid, {})["f"] = s.name
    assert Counter((ends["s"], ends["f"]) for ends in ends_of.values()) == want_links
    assert len(flows) == len(by_id)


def _lane(name: str) -> int:
    return int(name.rsplit("(overlap ", 1)[1].rstrip(")")) if "(overlap " in name else 0


def test_lanes_and_parents_match_the_walk_on_random_columns() -> None:
    """nesting.lanes (parents by jumps, overlapping runs, the loop only where a run overlaps)
    against the walk's loop over every slice."""
    rng = np.random.default_rng(7)
    for _ in range(3000):
        n = int(rng.integers(1, 40))
        starts = np.sort(rng.integers(0, 60, n))
        ends = starts + rng.choice([0, 1, 2, 5, 30], n)
        order = np.lexsort((-(ends - starts), starts))
        starts, ends = starts[order], ends[order]
        found = nesting.lanes(starts, ends, nesting.parents(starts, ends))
        stacks: list[list[int]] = [[]]
        want = []
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            lane = next((k for k in range(len(stacks)) if _fits(stacks[k], start, end)), len(stacks))
            if lane == len(stacks):
                stacks.append([])
            # The walk takes the thread itself first, then lanes; a slice that fits the thread
            # goes there even when a lane would take it too.
            stacks[lane].append(end)
            want.append(lane)
        assert found.tolist() == want, (starts.tolist(), ends.tolist())


def test_ties_read_out_of_order_are_found() -> None:
    """Entries on one lane that start together must be written in the walk's order: a tie whose
    order as read differs is found (all of it), and with ``also`` any tie holding a marked one."""
    starts = np.array([0, 0, 0, 5, 5, 9])
    lanes = np.array([0, 0, 0, 0, 1, 0])
    positions = np.array([0, 2, 1, 3, 4, 5])  # the second tie at 0 was read third
    assert nesting.tied_out_of_order(starts, lanes, positions).tolist() == [True, True, True, False, False, False]
    marked = np.array([False, False, False, True, False, False])
    assert nesting.tied_out_of_order(starts, lanes, np.arange(6), marked).tolist() == [False] * 6  # 5s: two lanes
    lanes[4] = 0
    assert nesting.tied_out_of_order(starts, lanes, np.arange(6), marked).tolist() == [False] * 3 + [True] * 2 + [False]


def test_distinct_is_the_sorted_set_of_the_values() -> None:
    rng = np.random.default_rng(7)
    for n in [0, 1, 2, 3, 10, 1000]:
        for dtype in (np.int32, np.int64, np.int8):
            values = rng.integers(-5, 6, n).astype(dtype)
            found = entries.distinct(values)
            assert found.tolist() == sorted(set(values.tolist()))
            assert found.dtype == dtype


def test_placeholders_give_way_to_the_names_they_stand_for() -> None:
    """A part's bodies, each opening with a placeholder, get the prefix the placeholder numbers
    (through the part's own numbering), the bytes after it untouched, bytes past the bodies
    left out."""
    rng = random.Random(11)
    names = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6))) for _ in range(40)]
    numbering = np.array(rng.sample(range(40), 40), np.int64)  # the part's placeholder -> the file's name
    table = entries.byte_table(names)
    for count in [0, 1, 7, 3000]:
        picks = [rng.randrange(40) for _ in range(count)]
        rests = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 30))) for _ in range(count)]
        bodies = b"".join(b"\xff" + p.to_bytes(3, "little") + r for p, r in zip(picks, rests, strict=True))
        lengths = np.array([entries.PLACEHOLDER + len(r) for r in rests], np.int64)
        joined, sizes = entries.with_prefixes(bodies + b"past", lengths, numbering, table)
        expected = [names[int(numbering[p])] + r for p, r in zip(picks, rests, strict=True)]
        assert joined == b"".join(expected)
        assert sizes.tolist() == [len(e) for e in expected]


def test_byte_ranges_are_gathered_a_bounded_slice_at_a_time(monkeypatch) -> None:
    """Ranges past GATHER_AT_ONCE bytes are gathered a slice of rows at a time (a row longer than
    the slice alone): the same bytes as joining each range, whatever the slice."""
    rng = random.Random(5)
    data = bytes(rng.randrange(256) for _ in range(2_000))
    for at_once in (1, 2, 7, 64, 1 << 20):
        monkeypatch.setattr(entries, "GATHER_AT_ONCE", at_once)
        for _ in range(60):
            lengths = np.array([rng.choice([0, 1, 3, 40, 300]) for _ in range(rng.randrange(40))], np.int64)
            begins = np.array([rng.randrange(len(data) - n + 1) for n in lengths.tolist()], np.int64)
            expected = b"".join(data[b : b + n] for b, n in zip(begins.tolist(), lengths.tolist(), strict=True))
            assert entries.gathered(data, begins, lengths) == expected
            assert entries.gathered(np.frombuffer(data, np.uint8), begins, lengths) == expected


def test_a_run_s_blocks_are_read_one_at_a_time(monkeypatch, tmp_path: Path) -> None:
    """pieces() reads a block's columns and bodies when it is reached, not the run's all at once,
    and only the blocks whose time meets the run's."""
    store = RunStore(tmp_path)
    thread = entries.ThreadEntries()
    for k in range(3):
        rows = [(10 * (3 * k + i), -5, 0, 3 * k + i, b"body%d" % (3 * k + i)) for i in range(3)]
        thread.add_block(entries.entry_block(rows))
        thread.spill(store)  # on disk: each block read back when asked for
    loaded: list[int] = []
    original = column_blocks.Block.columns

    def counting(block: column_blocks.Block, found_store: RunStore) -> dict:
        loaded.append(block.n)
        return original(block, found_store)

    monkeypatch.setattr(column_blocks.Block, "columns", counting)
    pieces = thread.pieces(store, (10, 80), bodies=True)  # the entries starting at 10 to 70
    assert loaded == []
    (_, bodies, _), rows = next(pieces)
    assert loaded == [3] and rows.tolist() == [1, 2] and bodies == b"body0body1body2"
    assert [None if rows is None else rows.tolist() for _, rows in pieces] == [None, [0, 1]]
    assert loaded == [3, 3, 3]
    # Blocks whose time the range does not meet are not read.
    loaded.clear()
    assert [rows.tolist() for _, rows in thread.pieces(store, (35, 55))] == [[1, 2]] and loaded == [3]
    store.close()


def _touching_steps(path: Path, spine: bool = False) -> None:
    """Steps that follow one another with no gap (every sixth leaves one), each holding a launch
    tied to a kernel; a zero-length slice or an instant where the next step starts, written
    before it; and flow points at those times, bound to the slice open there or to the next.
    With ``spine``, two slices open across it all, as a Python stack's outermost frames, and
    flows from where no step is open (bound to the inner one)."""
    cpu, gpu = (1, 1), (1, 7)
    events: list[dict] = []
    if spine:
        events += [
            {"ph": "X", "name": n, "cat": "python_function", "ts": T0 + a, "dur": d, "pid": 1, "tid": 1}
            for n, a, d in (("<module>", -5, 2500), ("main", -4, 2450))
        ]
        for k in range(5, 24, 6):  # in the gap after every sixth step, to the next kernel
            py = {"name": "py", "cat": "py", "pid": 1, "id": f"py-{k}"}
            events.append({**py, "ph": "s", "ts": T0 + 100 * k + 95, "tid": 1})
            events.append({**py, "ph": "f", "ts": T0 + 100 * k + 140, "tid": 7, "bp": "e"})

    def add(ph: str, name: str, at: int, thread: tuple[int, int], **extra: object) -> None:
        events.append({"ph": ph, "name": name, "cat": "x", "ts": T0 + at, "pid": thread[0], "tid": thread[1], **extra})

    for k in range(24):
        at = 100 * k
        add("X", f"step {k}", at, cpu, dur=100 if k % 6 != 5 else 90)  # every sixth leaves a gap
        add("X", f"launch {k}", at + 10, cpu, dur=20)
        add("X", f"kernel {k}", at + 40, gpu, dur=30)
        add("s", "ac2g", at + 15, cpu, id=k, cat="ac2g")
        add("f", "ac2g", at + 40, gpu, id=k, cat="ac2g", bp="e")
        if k % 4 == 1:  # a zero-length slice where the next step starts, written before it
            add("X", f"zero {k}", at + 100, cpu, dur=0)
        if k % 4 == 2:  # an instant there
            add("i", f"mark {k}", at + 100, cpu, s="t")
        # Points where the next step starts: one bound to the slice open there, one to the next slice.
        add("s", "fwd", at + 100, cpu, id=f"at-{k}", cat="fwd")
        add("f", "fwd", at + 100, gpu, id=f"at-{k}", cat="fwd")
        add("s", "late", at + 45, gpu, id=f"late-{k}", cat="late")
        add("f", "late", at + 95, cpu, id=f"late-{k}", cat="late")
    path.write_text(json.dumps({"traceEvents": events}))


@pytest.mark.parametrize("spine", [False, True])
def test_steps_that_touch_are_worked_out_in_runs_as_they_are_whole(tmp_path: Path, monkeypatch, spine: bool) -> None:
    """Runs cut where one step ends just as the next starts read back as the thread worked out
    whole: the same slices at the same depths and lanes, the same instants, flows between the
    same slices; with slices open across the whole thread too."""
    _touching_steps(tmp_path / "rank0.pt.trace.json", spine)
    found: list[list[tuple[int, int, int]]] = []
    chunks = entries.ThreadEntries.chunks

    def counted(self: entries.ThreadEntries, store: RunStore) -> list[tuple[int, int, int]]:
        found.append(chunks(self, store))
        return found[-1]

    monkeypatch.setattr(entries.ThreadEntries, "chunks", counted)
    read = []
    for chunk in (1 << 18, 2):
        monkeypatch.setattr(entries, "CHUNK", chunk)
        found.clear()
        out = tmp_path / f"out-{chunk}.pftrace"
        merge([tmp_path], out, jobs=1)
        rb = read_pftrace(out)
        names = {s.name: s for s in rb.slices}
        links = Counter(
            (a.name, b.name) for a in rb.slices for b in rb.slices if set(a.flow_ids) & set(b.terminating_flow_ids)
        )
        read.append(
            (
                sorted((rb.threads[s.track][1], s.name, s.ts, s.dur, s.depth) for s in rb.slices),
                sorted((rb.threads[s.track][1], s.name, s.ts, s.depth) for s in rb.instants),
                links,
            )
        )
        assert names["zero 1"].depth == 1 + 2 * spine and names["launch 0"].depth == 1 + 2 * spine
    # The cpu thread cut at every step, those that touch the one before included (the reader
    # puts a zero-length slice or an instant at the step's start after it, into its run), and
    # within steps too, the step left open across the cut (its launch nests in it).
    cpu_runs = max(found, key=len)
    starts = {first for _, _, first in cpu_runs}
    assert {(T0 + 100 * k) * 1000 for k in range(1, 24)} <= starts and len(cpu_runs) > 24
    assert read[0] == read[1]
    # Every flow but the two of the last step bound to a next slice, which has none.
    assert sum(read[0][2].values()) == 24 * 3 - 2 + 3 * spine  # (the last py flow's kernel: none)
    if spine:
        assert read[0][2][("main", "kernel 6")] == 1  # from the gap after step 5
    assert read[0][2][("kernel 3", "step 4")] == 1 and read[0][2][("step 5", "kernel 5")] == 1  # at 500: step 5


def test_touching_steps_in_runs_write_the_same_chrome_json_events(tmp_path: Path, monkeypatch) -> None:
    """Into Chrome JSON, the touching steps worked out in runs give the events of the thread
    worked out whole (in another order: each run's after the last's)."""
    folder = tmp_path / "in"
    folder.mkdir()
    _touching_steps(folder / "rank0.pt.trace.json")
    found = []
    for chunk in (1 << 18, 2):
        monkeypatch.setattr(entries, "CHUNK", chunk)
        out = tmp_path / f"out-{chunk}.json"
        merge([folder], out, jobs=1)
        events = json.loads(out.read_text())["traceEvents"]
        found.append(Counter(json.dumps(e, sort_keys=True) for e in events))
    assert found[0] == found[1]
    phases = Counter(json.loads(text)["ph"] for text in found[0].elements())
    # Steps, launches and kernels; the zero-length slices as B and E; the flows but two.
    assert (phases["X"], phases["B"], phases["E"], phases["s"], phases["f"]) == (72, 6, 6, 70, 70)
