"""What a forked helper process sends back when it is done, how its parent takes it in, and
how the parent stops it when the work is given up.

A part reader (:class:`~tracemerge.run.executors.ForkedPartReads`) and a packer
(:class:`~tracemerge.writers.packing.ForkedPacker`) both end by pickling their result or the
exception they raised into a pipe, then exit with ``os._exit``; the parent reads the pipe, waits
for the child, and returns the result or raises the exception as a process pool would.
"""

from __future__ import annotations

import os
import pickle
import signal
from contextlib import suppress
from typing import Any

from tracemerge.core.errors import FatalError, TracemergeError


def sent_result(value: Any) -> bytes:
    """What a child sends when it is done: ``value``, pickled."""
    return pickle.dumps((True, value), pickle.HIGHEST_PROTOCOL)


def sent_error(exc: Exception) -> bytes:
    """What a child sends when it failed: ``exc``, raised again in the parent, or its type and
    message when the parent could not build it again (it does not pickle, or its class takes
    other arguments than its pickle gives). A bug (any error but a TracemergeError, which says
    what is wrong with the input) carries the child's traceback as a note, which the parent's
    traceback shows (``TRACEMERGE_DEBUG=1``): its own ends where it raised it again."""
    if not isinstance(exc, TracemergeError):
        import traceback  # only on this path: a merge's start does not load it

        exc.add_note(f"in the helper process {os.getpid()}:\n" + "".join(traceback.format_exception(exc)).rstrip())
    try:
        payload = pickle.dumps((False, exc), pickle.HIGHEST_PROTOCOL)
        pickle.loads(payload)
    except Exception:
        bare = RuntimeError(f"{type(exc).__name__}: {exc}")
        for note in getattr(exc, "__notes__", ()):
            bare.add_note(note)
        payload = pickle.dumps((False, bare), pickle.HIGHEST_PROTOCOL)
    return payload


def taken_in(payload: bytes, exit_code: int, who: str) -> Any:
    """What the child ``who`` returned (its exception raised here), from what it sent and its
    exit code (``os.waitstatus_to_exitcode``): FatalError when it died or exited before it was
    done."""
    if exit_code != 0 or not payload:
        how = f"was killed by signal {-exit_code}" if exit_code < 0 else f"exited with status {exit_code}"
        raise FatalError(f"{who} {how} before it was done")
    try:
        done, value = pickle.loads(payload)
    except Exception as exc:  # cut short as it was written
        raise FatalError(f"{who} sent back what cannot be read ({type(exc).__name__})") from None
    if not done:
        raise value
    return value


def stop(pid: int) -> None:
    """The child ``pid`` killed, if it still runs, and waited for."""
    with suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with suppress(OSError):
        os.waitpid(pid, 0)


__all__ = ["sent_error", "sent_result", "stop", "taken_in"]
