"""What a fixture holds, counted straight from its files, independently of tracemerge's readers.

Times are parsed with the standard library's json and ``Decimal`` so that the expected values do
not share code (or bugs) with the merger.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path


def exact_ns(value, scale: int = 1000) -> int:
    """A µs value (int, Decimal or numeric string) as integer ns, exactly."""
    return int((Decimal(str(value)) * scale).to_integral_value(rounding=ROUND_HALF_UP))


def union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint spans covering exactly what ``spans`` cover (those that touch joined)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


def load_json(path: Path):
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data, parse_float=Decimal)


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line, parse_float=Decimal) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Expected:
    """Per (role, rank): slices as (name, start ns, dur ns), instants as (name, ts ns), and counts."""

    slices: Counter = field(default_factory=Counter)
    instants: Counter = field(default_factory=Counter)
    counters: int = 0
    flows: int = 0

    def shifted(self, delta: int) -> Expected:
        return Expected(
            Counter({(n, t + delta, d): c for (n, t, d), c in self.slices.items()}),
            Counter({(n, t + delta): c for (n, t), c in self.instants.items()}),
            self.counters,
            self.flows,
        )

    def merge(self, other: Expected) -> None:
        self.slices.update(other.slices)
        self.instants.update(other.instants)
        self.counters += other.counters
        self.flows += other.flows


def chrome_events(events: list[dict], base_ns: int = 0) -> Expected:
    """Expected content of a list of Chrome trace events (µs timestamps, optional base)."""
    out = Expected()
    open_b: dict = defaultdict(list)
    flows: dict = defaultdict(list)
    for _, e in sorted(enumerate(events), key=lambda ie: (exact_ns(ie[1].get("ts", 0)), ie[0])):
        ph = e.get("ph")
        ts = base_ns + exact_ns(e["ts"]) if "ts" in e else None
        if ph == "X":
            out.slices[(e.get("name", ""), ts, exact_ns(e["dur"]))] += 1
        elif ph == "B":
            open_b[(e["pid"], e["tid"])].append((e.get("name", ""), ts))
        elif ph == "E":
            name, start = open_b[(e["pid"], e["tid"])].pop()
            out.slices[(name, start, ts - start)] += 1
        elif ph in ("i", "I", "R"):
            out.instants[(e.get("name", ""), ts)] += 1
        elif ph == "C":
            out.counters += sum(
                1 for v in e.get("args", {}).values() if isinstance(v, (int, Decimal)) and not isinstance(v, bool)
            )
        elif ph in ("s", "t", "f"):
            flows[(e.get("cat"), e.get("name"), e["id"])].append(ph)
    for phases in flows.values():
        if "s" in phases and len(phases) >= 2:
            out.flows += len(phases) - 1
    return out


def kineto_file(path: Path) -> Expected:
    top = load_json(path)
    events = top["traceEvents"] if isinstance(top, dict) else top
    base = top.get("baseTimeNanoseconds", 0) if isinstance(top, dict) else 0
    return chrome_events(events, base)


def jsonl_by_rank(path: Path) -> dict[tuple[str, int], Expected]:
    """Per (role, rank) content of a JSONL file, Chrome lines and generic span lines alike."""
    chrome: dict = defaultdict(list)
    out: dict = defaultdict(Expected)
    for line in load_jsonl(path):
        if "ph" in line:
            args = line.get("args", {})
            if "rank" in args:
                chrome[(args["role"], args["rank"])].append(line)
            continue
        key = (line["role"], line["rank"])
        start = int(line["start_ns"])
        if "end_ns" in line:
            out[key].slices[(line["name"], start, int(line["end_ns"]) - start)] += 1
        else:
            out[key].instants[(line["name"], start)] += 1
    for key, events in chrome.items():
        out[key].merge(chrome_events(events))
    return dict(out)


def session_records(path: Path) -> Expected:
    """An AReaL session-tracer file: one slice per phase span (wall-clock seconds)."""
    out = Expected()
    for record in load_jsonl(path):
        for phase, spans in record["phases"].items():
            for span in spans:
                start = exact_ns(span["start_ts"], 10**9)
                out.slices[(phase, start, exact_ns(span["end_ts"], 10**9) - start)] += 1
    return out


def session_offset(perf: Path, sessions: Path) -> int:
    """Where a perf-tracer file lies on the wall clock, from its sessions: each batch span that
    names a session starts when the session was submitted (the fixture writes them so)."""
    starts = {
        line["args"]["session_id"]: exact_ns(line["ts"])
        for line in load_jsonl(perf)
        if line.get("ph") == "X" and "session_id" in line.get("args", {})
    }
    offsets = {exact_ns(r["submit_ts"], 10**9) - starts[r["session_id"]] for r in load_jsonl(sessions)}
    [offset] = offsets
    return offset


def anchored_start(expected: list[Expected]) -> int:
    """The run start: the earliest slice or instant among sources on the Unix-epoch clock."""
    return min(t for e in expected for t in [*(t for (_, t, _) in e.slices), *(t for (_, t) in e.instants)])


def fixture_expectations(fixtures: Path, name: str) -> dict[str, Expected]:
    """Per process label, what merging ``fixtures/<name>`` must produce, from the input files alone."""
    root = fixtures / name
    if name == "kineto_gpu":
        return {
            "rank 0": kineto_file(root / "rank0.pt.trace.json"),
            "rank 1": kineto_file(root / "rank1.pt.trace.json.gz"),
        }
    if name in ("precision", "edge_cases"):
        return {"rank 0": kineto_file(root / "rank0.json")}
    if name == "rl_run":
        out = {
            "actor · rank 0": kineto_file(root / "actor" / "rank0.pt.trace.json"),
            "actor · rank 1": kineto_file(root / "actor" / "rank1.pt.trace.json.gz"),
        }
        for (role, rank), e in jsonl_by_rank(root / "reward" / "spans.jsonl").items():
            out[f"{role} · rank {rank}"] = e
        for rank in (0, 1):
            # No wall-clock anchor of its own: each rollout file is placed by its session records.
            perf = root / "perf_tracer" / "rollout" / f"traces-r{rank}.jsonl"
            sessions = root / "session_tracer" / "rollout" / f"sessions-r{rank}.jsonl"
            [((role, _), e)] = jsonl_by_rank(perf).items()
            e = e.shifted(session_offset(perf, sessions))
            e.merge(session_records(sessions))
            out[f"{role} · rank {rank}"] = e
        return out
    raise KeyError(name)


FIXTURE_RUNS = ("rl_run", "kineto_gpu", "precision", "edge_cases")
