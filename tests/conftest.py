from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from tracemerge.pipeline import merge
from tracemerge.report.run_report import RunReport
from tracemerge.sources.json import stream as json_stream
from tracemerge.store import spill

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def unavailable(reason: str, required_by: str, module: bool = False) -> NoReturn:
    """A real component a test needs is missing: the test is skipped with ``reason``, except
    where the environment variable ``required_by`` is set (CI), where it fails."""
    if os.environ.get(required_by):
        pytest.fail(f"required here ({required_by} is set): {reason}")
    pytest.skip(reason, allow_module_level=module)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def assert_spilling_changes_nothing(
    in_memory: RunReport, inputs: list[Path], out: Path, budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inputs``, merged to ``in_memory.output`` with everything held in memory, merged again to
    ``out`` with a memory budget of ``budget`` events, small read batches and runs of three items
    per block: the same bytes, counts, losses and slices moved to overlap lanes."""
    with monkeypatch.context() as patched:
        patched.setattr(json_stream, "BLOCK", 700)
        patched.setattr(spill, "BLOCK_ITEMS", 3)
        spilled = merge(inputs, out, jobs=1, memory_budget=budget)
    assert in_memory.output is not None
    assert in_memory.output.read_bytes() == out.read_bytes(), budget
    assert in_memory.as_dict()["written"] == spilled.as_dict()["written"]
    assert in_memory.as_dict()["dropped"] == spilled.as_dict()["dropped"]
    assert in_memory.moved_to_lanes == spilled.moved_to_lanes
