"""``tracemerge scrape``: record live ``/metrics`` pages during a run, for merging with its traces.

At every tick (``every`` seconds) each URL is fetched and its text written to
``DIR/<host_port>/<scrape time in Unix ns>.prom``, with a first line saying when and from where
(``# tracemerge-scrape time_unix_ns=... url=...``): the format
:mod:`tracemerge.sources.metrics.exposition` reads. Each file is written to a new hidden temporary
name and renamed into place, so a reader never sees half a scrape.

Targets are network peers and are not trusted:

- each fetch has ``timeout`` seconds, connecting included, to deliver its whole page (a target
  sending a byte now and then is cut off then), and a page of at most :data:`MAX_PAGE_BYTES`;
- a redirect is followed only to the same scheme, host and port (at most :data:`MAX_REDIRECTS`);
- every target is fetched on its own thread: a slow one misses its own ticks (counted as failed
  scrapes) and never delays the others' or a stop, after which nothing more is written.

A failed fetch is reported once per target and retried at the next tick. A page is written only
when it is Prometheus (or OpenMetrics) text: a compressed body never asked for, an HTML page or
binary data is a failed scrape, with its reason. Credentials in a URL (``http://user:pass@host/``)
are sent as HTTP basic authentication and written nowhere: not in a file's header, not in its
folder's name, not in a message. An output folder that is a symbolic link is refused.
"""

from __future__ import annotations

import base64
import http.client
import re
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Protocol
from urllib.parse import SplitResult, unquote, urljoin, urlsplit

import msgspec
from msgspec import field

from tracemerge.core.errors import TracemergeError, shown
from tracemerge.core.stats import Losses, Stat
from tracemerge.run.output import check_output, write_whole
from tracemerge.sources.metrics.exposition import instance_of, parse_snapshot
from tracemerge.sources.metrics.recognise import SCRAPE_HEADER, SUFFIX

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_PAGE_BYTES = 64 << 20  # an engine's /metrics page is kilobytes; more is not a metrics page
MAX_REDIRECTS = 5
STOP_WAIT = 1.0  # seconds a stop waits for fetches under way to end
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HEADERS = {"Accept": "text/plain;version=0.0.4;q=1, */*;q=0.1", "User-Agent": "tracemerge-scrape"}


class Stop(Protocol):
    """What ends a scrape once set: a :class:`threading.Event`, or a :class:`SignalStop`."""

    def is_set(self) -> bool: ...


class SignalStop:
    """A stop that signal handlers set. Setting it takes no lock, unlike ``threading.Event.set``:
    a handler runs on the main thread between two of its instructions, possibly while that thread
    holds the event's own lock (inside ``Event.wait``), and would then wait for itself forever."""

    def __init__(self) -> None:
        self._set = False

    def set(self, *_signal: object) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


@contextmanager
def stop_on_signals(*signums: int) -> Iterator[SignalStop]:
    """A :class:`SignalStop` that these signals set while in the block; their handlers before it
    are back after it."""
    stop = SignalStop()
    previous = {signum: signal.signal(signum, stop.set) for signum in signums}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class ScrapeResult(msgspec.Struct):
    written: Counter[str] = field(default_factory=Counter)  # scrapes per URL
    failed: Counter[str] = field(default_factory=Counter)


def public(url: str) -> str:
    """``url`` without the credentials it may hold (``http://user:pass@host/`` → ``http://host/``):
    what is written to files and printed."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


def target_dir(url: str) -> str:
    """The directory of a target's scrapes: ``http://10.0.0.7:8000/metrics`` → ``10.0.0.7_8000``."""
    return _UNSAFE.sub("_", instance_of(public(url))).strip("_") or "target"


def check_url(url: str) -> str:
    parts = urlsplit(url) if re.fullmatch(r"https?://[^/\s]+(/\S*)?", url) and url.isprintable() else None
    try:
        if parts is None or not parts.hostname or parts.port == 0:
            raise ValueError
    except ValueError:  # a port that is not a number, or out of range
        raise ValueError(f"not an http(s) URL: {shown(public(url))!r}") from None
    return url


def check_targets(urls: Sequence[str]) -> list[str]:
    """The URLs, each checked; two whose scrapes would share a folder (the same host and port) are
    refused: their files would replace each other's."""
    folders: dict[str, str] = {}
    for url in map(check_url, urls):
        other = folders.setdefault(target_dir(url), url)
        if other == url and urls.count(url) > 1:
            raise ValueError(f"{shown(public(url))} is given twice")
        if other != url:
            both = f"{shown(public(other))} and {shown(public(url))}"
            raise ValueError(f"{both} would be written to one folder ({target_dir(url)})")
    return list(urls)


class _Unwanted(Exception):
    """A fetch that gives no page: the message says why."""


def fetch(url: str, timeout: float, on_connection: Callable[[socket.socket], None] = lambda _s: None) -> bytes:
    """The page at ``url``, whole, with ``timeout`` seconds for each step (connecting, each read;
    the caller bounds the whole fetch: ``on_connection`` hands it each socket to cut off)."""
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = kind(parts.hostname or "", parts.port, timeout=timeout)
        try:
            try:
                connection.connect()
            except OSError as exc:
                raise _Unwanted(f"cannot connect ({_reason(exc)})") from None
            on_connection(connection.sock)
            connection.request(
                "GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=_headers(parts)
            )
            response = connection.getresponse()
            if response.status in _REDIRECTS and response.getheader("Location"):
                new = urljoin(url, response.getheader("Location", ""))
                there = urlsplit(new)
                if (there.scheme, there.hostname, there.port) != (parts.scheme, parts.hostname, parts.port):
                    raise _Unwanted(f"HTTP {response.status}: redirected to another scheme or host, not followed")
                url = new
                continue
            if response.status != 200:
                raise _Unwanted(f"HTTP {response.status} {response.reason}")
            return _body(response)
        finally:
            connection.close()
    raise _Unwanted(f"more than {MAX_REDIRECTS} redirects")


def _headers(parts: SplitResult) -> dict[str, str]:
    """The request's headers: the URL's credentials, if any, as HTTP basic authentication."""
    if parts.username is None:
        return _HEADERS
    token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return {**_HEADERS, "Authorization": "Basic " + base64.b64encode(token).decode()}


def page_problem(page: bytes) -> str | None:
    """Why ``page`` is not a metrics page to write (None: it is one). A gzip body (never asked
    for), binary data or an HTML page would be written as a scrape the merge then cannot read."""
    if page[:2] == b"\x1f\x8b":
        return "a gzip-compressed page (not asked for), not written"
    try:
        text = page.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not text (byte {exc.start} is not UTF-8), not written"
    if "\0" in text:
        return "binary data (a NUL byte), not written"
    if text.lstrip()[:1] == "<":
        return "an HTML or XML page, not metrics text, not written"
    losses = Losses()
    if not parse_snapshot(text, 0, None, losses) and losses.count(Stat.METRIC_UNREADABLE):
        first = next(iter(losses.messages_of(Stat.METRIC_UNREADABLE)), "")
        return f"not Prometheus metrics text ({first}), not written"
    return None


def _body(response: http.client.HTTPResponse) -> bytes:
    chunks, size = [], 0
    while chunk := response.read1(1 << 16):
        size += len(chunk)
        if size > MAX_PAGE_BYTES:
            raise _Unwanted(f"page larger than {MAX_PAGE_BYTES >> 20} MiB")
        chunks.append(chunk)
    page = b"".join(chunks)
    problem = page_problem(page)
    if problem is not None:
        raise _Unwanted(problem)
    return page


def write_scrape(out_dir: Path, url: str, when_ns: int, page: bytes) -> Path:
    """One scrape, whole or not at all; never over a link, a device or a FIFO."""
    folder = out_dir / target_dir(url)
    if folder.is_symlink():
        raise TracemergeError(f"{shown(folder)}: is a symbolic link; not writing scrapes through it")
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{when_ns}{SUFFIX}"
    check_output(final, set(), force=True)
    write_whole(final, f"{SCRAPE_HEADER} time_unix_ns={when_ns} url={public(url)}\n".encode() + page)
    return final


class _Fetch:
    """One fetch of a target, on a thread of its own; settled once, by its thread or its deadline."""

    def __init__(self, url: str, when: int, deadline: float) -> None:
        self.url, self.when, self.deadline = url, when, deadline
        self.sock: socket.socket | None = None  # once connected
        self.settled = False
        self.thread: threading.Thread | None = None

    def cut_off(self) -> None:
        """Ends the fetch (its socket shut down: the thread's read returns at once)."""
        if self.sock is not None:
            with suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)


class _Target:
    """One URL: at most one fetch (and thread) at a time."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.attempts = 0
        self.fetch: _Fetch | None = None

    @property
    def busy(self) -> bool:
        """Whether its last fetch's thread still runs (no new one is started then)."""
        return self.fetch is not None and self.fetch.thread is not None and self.fetch.thread.is_alive()

    @property
    def pending(self) -> bool:
        return self.fetch is not None and not self.fetch.settled


class _Run:
    def __init__(self, out_dir: Path, timeout: float, on_error: Callable[[str], None]) -> None:
        self.out_dir, self.timeout, self.on_error = out_dir, timeout, on_error
        self.result = ScrapeResult()
        self.lock = threading.Lock()  # outcomes are settled under it; once closed, none is
        self.closed = False
        self.fatal: BaseException | None = None

    def start(self, target: _Target, when: int) -> None:
        target.attempts += 1
        job = target.fetch = _Fetch(target.url, when, time.monotonic() + self.timeout)
        job.thread = threading.Thread(target=self._fetch, args=(job,), daemon=True)
        job.thread.start()

    def _fetch(self, job: _Fetch) -> None:
        try:
            outcome: bytes | str = fetch(job.url, self.timeout, lambda sock: setattr(job, "sock", sock))
        except _Unwanted as exc:
            outcome = str(exc)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            outcome = f"cannot fetch ({_reason(exc)})"
        self.settle(job, outcome)

    def settle(self, job: _Fetch, outcome: bytes | str) -> None:
        with self.lock:
            if job.settled or self.closed:
                return
            job.settled = True
            try:
                if isinstance(outcome, bytes):
                    write_scrape(self.out_dir, job.url, job.when, outcome)
                    self.result.written[job.url] += 1
                    return
            except TracemergeError as exc:
                outcome = str(exc)
            except OSError as exc:
                self.fatal = exc
                return
            self.result.failed[job.url] += 1
            if self.result.failed[job.url] == 1:  # said once
                self.on_error(f"{shown(public(job.url))}: {outcome} (retried at every tick)")

    def police(self, targets: list[_Target]) -> None:
        """Settles every fetch past its deadline as failed, and cuts it off."""
        now = time.monotonic()
        for job in (t.fetch for t in targets if t.pending):
            if job is not None and now >= job.deadline:
                self.settle(job, f"no whole page within {self.timeout:g} s")
                job.cut_off()

    def close(self, targets: list[_Target]) -> None:
        with self.lock:
            self.closed = True
        jobs = [t.fetch for t in targets if t.fetch is not None]
        for job in jobs:
            job.cut_off()
        end = time.monotonic() + STOP_WAIT
        for job in jobs:
            if job.thread is not None:
                job.thread.join(max(0.0, end - time.monotonic()))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def scrape(
    urls: Sequence[str],
    out_dir: Path,
    every: float,
    *,
    count: int | None = None,
    stop: Stop | None = None,
    timeout: float | None = None,
    on_error: Callable[[str], None] = lambda _msg: None,
) -> ScrapeResult:
    """Scrape every URL each ``every`` seconds until each has been fetched ``count`` times (a
    fetch still under way at a tick misses it) or ``stop`` is set."""
    if out_dir.is_symlink():  # a link may point anywhere: the folder is named itself
        raise TracemergeError(f"{shown(out_dir)}: is a symbolic link; not writing scrapes through it")
    stop = stop if stop is not None else SignalStop()
    run = _Run(out_dir, timeout if timeout is not None else max(every, 1.0), on_error)
    targets = [_Target(url) for url in urls]
    tick = time.monotonic()
    try:
        while not stop.is_set() and run.fatal is None:
            if time.monotonic() >= tick:
                when = time.time_ns()
                for t in targets:
                    if (count is None or t.attempts < count) and not t.busy:
                        run.start(t, when)
                tick += every
                if tick < time.monotonic():  # behind (a suspended process): the missed ticks are not made up
                    tick = time.monotonic() + every
            run.police(targets)
            if count is not None and all(t.attempts >= count and not t.pending for t in targets):
                break
            # A sleep, not stop.wait: a signal handler on this thread may set the stop (see
            # SignalStop); one set elsewhere is seen within 50 ms.
            time.sleep(max(0.0, min(tick - time.monotonic(), 0.05)))
    finally:
        run.close(targets)
    if run.fatal is not None:
        raise run.fatal
    return run.result
