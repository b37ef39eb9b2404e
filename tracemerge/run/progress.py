"""A progress bar on stderr for long merges: only on a terminal, never in logs or pipes."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_STEP = re.compile(r"^(\w+) (\d+)/(\d+): ")


class Progress:
    """Called with the pipeline's progress messages (``"read 3/8: path"``); draws a bar per step."""

    def __init__(self, bar: object | None) -> None:
        self.bar = bar
        self.tasks: dict[str, object] = {}

    def __call__(self, message: str) -> None:
        if self.bar is None:
            return
        m = _STEP.match(message)
        if not m:
            return
        verb, done, total = m.group(1), int(m.group(2)), int(m.group(3))
        task = self.tasks.get(verb)
        if task is None:
            task = self.tasks[verb] = self.bar.add_task(f"{verb:6} files", total=total)  # type: ignore[attr-defined]
        self.bar.update(task, completed=done)  # type: ignore[attr-defined]

    def pause(self) -> None:
        """Stop drawing (before printing tables or errors)."""
        if self.bar is not None:
            self.bar.stop()  # type: ignore[attr-defined]
            self.bar = None


@contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Progress]:
    if not enabled or not sys.stderr.isatty():
        yield Progress(None)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    bar = RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    bar.start()
    progress = Progress(bar)
    try:
        yield progress
    finally:
        progress.pause()
