from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

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
