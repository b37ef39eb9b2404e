"""The cyclic garbage collector kept off around work that holds millions of small objects and
makes no reference cycles (a file's read, deriving the phases): the collector would scan them
again and again, a third of a file's read and a fifth of ``derive`` at 64 ranks × 1,000 steps.
Cyclic garbage made meanwhile is collected once it runs again."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The collector off inside (a context manager, or a function's decorator), then as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
