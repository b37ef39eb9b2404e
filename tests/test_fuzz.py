"""Fuzzing: real fixtures of every format, cut, flipped, retyped, reordered, duplicated and nested,
must merge or be reported in one line, never end in an internal error, and the counts must agree.

The number of examples is bounded so that the default test run stays fast; set
TRACEMERGE_FUZZ_EXAMPLES for a longer campaign.
"""

from __future__ import annotations

import os
import re
import shutil

import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracemerge.errors import FatalError
from tracemerge.pipeline import merge

EXAMPLES = int(os.environ.get("TRACEMERGE_FUZZ_EXAMPLES", "40"))
SAMPLES = {
    "kineto": FIXTURES / "kineto_gpu" / "rank0.pt.trace.json",
    "edge": FIXTURES / "edge_cases" / "rank0.json",
    "perf_tracer": FIXTURES / "rl_run" / "perf_tracer" / "rollout" / "traces-r0.jsonl",
    "sessions": FIXTURES / "clock" / "areal" / "session_tracer" / "rollout" / "sessions-r0.jsonl",
    "spans": FIXTURES / "phases" / "trainer" / "spans.jsonl",
    "ascend_text": next((FIXTURES / "ascend" / "text").rglob("trace_view.json")),
    "prometheus_query": FIXTURES / "metrics_run" / "prometheus" / "query_range.json",
    "prometheus_scrape": sorted((FIXTURES / "metrics_scrapes").rglob("*.prom"))[0],
    "tracker": FIXTURES / "metrics_run" / "trainer" / "metrics.jsonl",
}
NUMBER = re.compile(rb"-?\d+(\.\d+)?")


def _mutate(data: bytes, kind: str, at: float, value: bytes) -> bytes:
    pos = int(at * len(data))
    if kind == "cut":
        return data[:pos]
    if kind == "flip":
        return data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :] if data else data
    if kind == "insert":
        return data[:pos] + value + data[pos:]
    if kind == "duplicate":
        return data[:pos] + data[pos : pos + 200] + data[pos:]
    if kind == "retype":  # a number becomes a string, a null, a list or an object
        numbers = list(NUMBER.finditer(data))
        if not numbers:
            return data
        m = numbers[int(at * len(numbers)) % len(numbers)]
        new = [b'"' + m.group(0) + b'"', b"null", b"[1, 2]", b'{"a": 1}', b"1e400", b"NaN", b"-0"][len(value) % 7]
        return data[: m.start()] + new + data[m.end() :]
    if kind == "reorder":
        lines = data.split(b"\n")
        k = int(at * len(lines))
        return b"\n".join(lines[k:] + lines[:k])
    if kind == "nest":  # an args value nested far beyond reason
        depth = 50 + len(value) * 40
        return data.replace(b'"args": {', b'"args": {"deep": ' + b"[" * depth + b"]" * depth + b", ", 1).replace(
            b'"args":{', b'"args":{"deep":' + b"[" * depth + b"]" * depth + b",", 1
        )
    raise AssertionError(kind)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sample=st.sampled_from(sorted(SAMPLES)),
    kind=st.sampled_from(["cut", "flip", "insert", "duplicate", "retype", "reorder", "nest"]),
    at=st.floats(min_value=0.0, max_value=0.999),
    value=st.binary(max_size=12),
    ext=st.sampled_from([".pftrace", ".json"]),
)
def test_mutated_inputs_merge_or_are_reported_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, sample: str, kind: str, at: float, value: bytes, ext: str
) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    src = SAMPLES[sample]
    run = tmp / "run" / src.parent.name
    run.mkdir(parents=True)
    (run / src.name).write_bytes(_mutate(src.read_bytes(), kind, at, value))
    shutil.copy(FIXTURES / "kineto_gpu" / "rank1.pt.trace.json.gz", tmp / "run")  # a good file beside it
    out = tmp / f"out{ext}"
    try:
        report = merge([tmp / "run"], out)
    except FatalError as exc:  # nothing usable at all: said in one line, nothing written
        assert "\n" not in str(exc)
        assert not out.exists()
        return
    assert out.stat().st_size > 0
    for message in report.skipped:
        assert "\n" not in message
    read, written = report.read, report.written
    assert written.slices <= read.slices and written.instants <= read.instants
    assert written.counters <= read.counters and written.flows <= read.flows
    if report.exit_code == 0:  # exit 0: every event that was read is in the output
        assert (read.slices, read.instants, read.counters, read.flows) == (
            written.slices,
            written.instants,
            written.counters,
            written.flows,
        )
