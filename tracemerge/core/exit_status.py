"""The exit statuses of every command, and how the command line's process ends: one place,
light enough for the command line's start-up."""

import atexit
import os
import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import NoReturn

EXIT_OK = 0
EXIT_FATAL = 1  # nothing written
EXIT_USAGE = 2  # bad usage (click's own status for it)
EXIT_INCOMPLETE = 3  # written, but files were skipped or events lost (check: import errors or losses)
EXIT_REGRESSION = 4  # a --fail-over gate found a regression (tracemerge.compare.diff)


def leave_after(command: Callable[[], object]) -> NoReturn:
    """Runs ``command`` (the command line) and ends the process with its status: the exit
    handlers run and the standard streams are flushed, then the process ends without the
    interpreter's teardown, which frees every module and object one by one (about 20 ms after
    merging a 23 MB rank, in a run of 1 s). Everything the command writes is closed by then.
    With another thread still running, the usual exit, which waits for it."""
    try:
        command()
        code: object = EXIT_OK
    except SystemExit as done:
        code = done.code
    if code is None:
        code = EXIT_OK
    elif not isinstance(code, int):  # as the interpreter does with a message
        print(code, file=sys.stderr)
        code = EXIT_FATAL
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a closed pipe, say: nothing more to say there
            stream.flush()
    os._exit(code)
