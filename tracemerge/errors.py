"""Errors with one-line messages that name the file and the place."""

from __future__ import annotations

from pathlib import Path


class TracemergeError(Exception):
    """Base class: the message is meant to be printed as is, on one line."""


def shown(path: object) -> str:
    """A file name as printed: control characters (a newline, a terminal escape) written as
    escapes, so that no name can forge or colour a line of the output."""
    text = str(path)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class InputError(TracemergeError):
    """One input file cannot be used; the run goes on without it."""

    def __init__(self, path: Path | str, reason: str, where: str | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.where = where
        place = f"{shown(path)}:{where}" if where else shown(path)
        super().__init__(f"{place}: {reason}")


class NotATrace(InputError):
    """The file is readable but holds no trace this tool knows."""


class FatalError(TracemergeError):
    """The run cannot produce an output; nothing is written."""
