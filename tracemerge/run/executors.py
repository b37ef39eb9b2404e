"""Where files are found and processed: in-process, in local worker processes, or on a Ray cluster.

An :class:`Executor` does two things for :func:`~tracemerge.pipeline.merge`: it finds the trace
files under the given paths (:meth:`~Executor.discover`) and runs
:func:`~tracemerge.run.filework.process_file` over a list of jobs (:meth:`~Executor.run`), yielding
the outcomes in the jobs' order with each job's chunk (and kept layout) at the paths the job
names. Nothing else in the pipeline knows which executor runs. The Ray one lives in
:mod:`tracemerge.run.ray_executor`, imported only when asked for.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from tracemerge.core.errors import FatalError
from tracemerge.core.forked import sent_error, sent_result, stop, taken_in
from tracemerge.core.worker_signals import worker_signals
from tracemerge.discovery.discover import Discovery, discover
from tracemerge.run.filework import FileJob, FileOutcome, input_bytes, process_file
from tracemerge.store.read_options import PartReads

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor


class ForkedPartReads(msgspec.Struct, frozen=True):
    """A large file's parts read at once, each in a process forked from the one reading the file
    (they start from its state: the file's layout as the read began) while that one reads its
    own part; picklable, so a worker process can use it.

    A bare fork and a pipe per part: the readers of a pool started 25-30 ms after it was asked
    for them, forked ones 3-10 ms, on a read of a third of a second (a 23 MB rank)."""

    workers: int

    def map(self, read: Callable[..., Any], tasks: list[tuple], here: Callable[[], Any]) -> tuple[Any, list[Any]]:
        readers: list[tuple[int, int | None]] = []  # (pid, pipe) of each reader not yet waited for
        results = []
        try:
            for task in tasks:
                readers.append(_fork_reader(read, task))
            mine = here()
            while readers:
                pid, fd = readers[0]
                assert fd is not None
                readers[0] = (pid, None)  # the pipe is the reading's to close from here
                with os.fdopen(fd, "rb") as pipe:
                    payload = pipe.read()
                _, status = os.waitpid(pid, 0)
                readers.pop(0)
                # Taken in while the others may still read; a failure ends them (see finally).
                results.append(_returned(payload, os.waitstatus_to_exitcode(status)))
        finally:
            for pid, fd in readers:  # the read failed or was stopped: end those left
                _end_reader(pid, fd)
        return mine, results


def _fork_reader(read: Callable[..., Any], task: tuple) -> tuple[int, int]:
    """A child process running ``read(*task)``, which pickles what it returns (or raises) into
    a pipe and exits; returns its pid and the pipe's reading end."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(wfd)
        return pid, rfd
    status = 1
    try:  # the child: it never returns, and leaves the parent's exit handlers alone (os._exit)
        os.close(rfd)
        worker_signals()
        try:
            payload = sent_result(read(*task))
        except Exception as exc:  # raised again in the parent, as a pool would
            payload = sent_error(exc)
        with os.fdopen(wfd, "wb") as out:
            out.write(payload)
        status = 0
    finally:
        os._exit(status)


def _returned(payload: bytes, code: int) -> Any:
    """What a reader returned (its exception raised here), from what it sent and its exit code."""
    return taken_in(payload, code, "a process reading part of a large file")


def _end_reader(pid: int, fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
    stop(pid)


# With jobs=0 (automatic), inputs smaller than this are merged in-process: a pool costs more than it saves.
PARALLEL_MIN_BYTES = 16 << 20


class Executor(Protocol):
    """Finds and processes the files of one merge; used as a context manager around it."""

    def discover(self, inputs: list[Path]) -> Discovery:
        """The trace files under ``inputs``, in the order a local walk of them finds them."""
        ...

    def run(self, jobs: list[FileJob]) -> Iterator[FileOutcome]:
        """``process_file`` of each job, yielded in the jobs' order; each chunk written at ``job.chunk``."""
        ...

    def part_reads(self, workers: int) -> PartReads | None:
        """How a large file's parts are read, ``workers`` at once, where a job runs (None: whole)."""
        ...

    def __enter__(self) -> Executor: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None: ...


class SerialExecutor:
    """Everything in this process, one file after another."""

    def discover(self, inputs: list[Path]) -> Discovery:
        return discover(inputs)

    def run(self, jobs: list[FileJob]) -> Iterator[FileOutcome]:
        return map(process_file, jobs)

    def part_reads(self, workers: int) -> PartReads | None:
        return ForkedPartReads(workers) if workers > 1 else None

    def __enter__(self) -> SerialExecutor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        return None


class ProcessExecutor(SerialExecutor):
    """Files processed in ``workers`` local worker processes (0: one per CPU when the inputs add
    up to PARALLEL_MIN_BYTES or more, else in-process). The pool starts with the first run."""

    def __init__(self, workers: int = 0) -> None:
        self.workers = workers
        self.pool: ProcessPoolExecutor | None = None
        self.started = False

    def run(self, jobs: list[FileJob]) -> Iterator[FileOutcome]:
        if not self.started:
            self.started = True
            count = min(self.workers if self.workers > 0 else _auto_workers(jobs), len(jobs), usable_cores())
            if count > 1:
                from concurrent.futures import ProcessPoolExecutor  # only when there is a pool to start

                _load_readers(jobs)
                self.pool = ProcessPoolExecutor(count, initializer=worker_signals)
        if self.pool is None:
            return map(process_file, jobs)
        return _largest_first(self.pool, jobs)

    def __enter__(self) -> ProcessExecutor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        pool, self.pool, self.started = self.pool, None, False
        if pool is None:
            return
        if exc_type is None:
            pool.shutdown()
            return
        # The merge failed or was stopped: end the workers now rather than let them finish files
        # nobody will use (the pool's own shutdown would wait for them), then let the pool see
        # them gone (its thread must not outlive it: at exit it would write to a closed pipe).
        processes = list((getattr(pool, "_processes", None) or {}).values())  # no public way to stop them
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(5)
        pool.shutdown(wait=True, cancel_futures=True)


def local_executor(jobs: int) -> Executor:
    """``--jobs``: 1 in-process, N worker processes, 0 automatic."""
    return SerialExecutor() if jobs == 1 else ProcessExecutor(jobs)


def _largest_first(pool: ProcessPoolExecutor, jobs: list[FileJob]) -> Iterator[FileOutcome]:
    """``process_file`` of each job in ``pool``, yielded in the jobs' order but started largest
    input first: a large file started last would keep one worker busy while the others idle."""
    futures: dict[int, Future[FileOutcome]] = {}
    for n in sorted(range(len(jobs)), key=lambda n: -input_bytes(jobs[n])):
        futures[n] = pool.submit(process_file, jobs[n])
    for n in range(len(jobs)):
        yield futures.pop(n).result()


def _load_readers(jobs: list[FileJob]) -> None:
    """The reading modules of the jobs' formats, imported here once before the pool forks its
    workers from this process, rather than in each of them (a format's reader is imported when
    it is first used: see :mod:`tracemerge.sources`)."""
    for fmt in {job.candidate.format.name: job.candidate.format for job in jobs}.values():
        fmt.reader()


def _auto_workers(jobs: list[FileJob]) -> int:
    total = sum(map(input_bytes, jobs))
    return usable_cores() if total >= PARALLEL_MIN_BYTES else 1


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity, where the system says): more workers
    than these only add memory."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


LOCAL_RAY = "local"


def ray_executor(address: str = LOCAL_RAY) -> Executor:
    """``--ray [ADDRESS]``: the cluster at ``address``, or a Ray instance started here (``local``)."""
    try:
        from tracemerge.run.ray_executor import RayExecutor
    except ImportError as exc:
        raise FatalError(f'--ray needs Ray ({exc}): pip install "tracemerge[ray]"') from None
    return RayExecutor(None if address == LOCAL_RAY else address)
