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
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    """A character that is not printable as its escape: ``\\n``, ``\\x1b``, ``\\u2028``."""
    text = repr(char)[1:-1]
    # repr leaves some unprintable characters as they are (format characters, such as U+200E)
    return text if text != char else f"\\u{ord(char):04x}"


def terminal_text(text: str) -> str:
    """Text printed to a terminal, line by line: the lines the tool made kept, every other
    control character (an escape that clears the screen or colours a line) written as its escape.
    Text from data is escaped where it enters a line too (:func:`shown`): this is the last guard."""
    if text.isprintable():
        return text
    return "\n".join(shown(line) for line in text.split("\n"))


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


class Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP: stop now (workers stopped, temporary files removed, the old
    output kept). Not a KeyboardInterrupt, which the command-line framework would swallow.

    The handler that raises it records the signal in :attr:`pending` first: Python code called
    back from C (SQLite's progress handler) has the exception swallowed there, and the caller
    raises it again from this record (:func:`raise_if_stopped`)."""

    pending: int | None = None

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @classmethod
    def on_signal(cls, signum: int, _frame: object = None) -> None:
        """A signal handler: records the signal and raises."""
        cls.pending = signum
        raise cls(signum)


def raise_if_stopped() -> None:
    """Raises :class:`Stopped` if a stop was asked for while its exception could not travel."""
    if Stopped.pending is not None:
        raise Stopped(Stopped.pending)
