"""``tracemerge scrape``: record live ``/metrics`` pages during a run, for merging with its traces.

Every ``every`` seconds each URL is fetched (all at once, one thread per target) and its text
written to ``DIR/<host_port>/<scrape time in Unix ns>.prom``, with a first line saying when and
from where (``# tracemerge-scrape time_unix_ns=... url=...``): the format
:mod:`tracemerge.sources.prometheus_text` reads. Each file is written to a hidden temporary name
and renamed into place, so a reader never sees half a scrape. A failed fetch is reported once per
target and retried at the next tick.
"""

from __future__ import annotations

import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tracemerge.sources.prometheus_text import SCRAPE_HEADER, SUFFIX, instance_of

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_PAGE_BYTES = 64 << 20  # an engine's /metrics page is kilobytes; more is not a metrics page


@dataclass
class ScrapeResult:
    written: Counter[str] = field(default_factory=Counter)  # scrapes per URL
    failed: Counter[str] = field(default_factory=Counter)


def target_dir(url: str) -> str:
    """The directory of a target's scrapes: ``http://10.0.0.7:8000/metrics`` → ``10.0.0.7_8000``."""
    return _UNSAFE.sub("_", instance_of(url)).strip("_") or "target"


def check_url(url: str) -> str:
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError(f"not an http(s) URL: {url!r}")
    return url


def fetch(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # http(s) only: check_url
        data = response.read(MAX_PAGE_BYTES + 1)
    if len(data) > MAX_PAGE_BYTES:
        raise ValueError(f"page larger than {MAX_PAGE_BYTES >> 20} MiB")
    return data


def write_scrape(out_dir: Path, url: str, when_ns: int, page: bytes) -> Path:
    """One scrape, whole or not at all."""
    folder = out_dir / target_dir(url)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{when_ns}{SUFFIX}"
    temporary = folder / f".{final.name}.tmp"
    temporary.write_bytes(f"{SCRAPE_HEADER} time_unix_ns={when_ns} url={url}\n".encode() + page)
    os.replace(temporary, final)
    return final


def scrape(
    urls: Sequence[str],
    out_dir: Path,
    every: float,
    *,
    count: int | None = None,
    stop: threading.Event | None = None,
    timeout: float | None = None,
    on_error: Callable[[str], None] = lambda _msg: None,
) -> ScrapeResult:
    """Scrape every URL each ``every`` seconds until ``count`` rounds are done or ``stop`` is set."""
    stop = stop or threading.Event()
    result = ScrapeResult()
    timeout = timeout if timeout is not None else max(every, 1.0)
    rounds = 0
    tick = time.monotonic()
    with ThreadPoolExecutor(max_workers=min(len(urls), 32)) as pool:
        while not stop.is_set() and (count is None or rounds < count):
            when = time.time_ns()
            pages = list(pool.map(lambda u: _try_fetch(u, timeout), urls))
            for url, page in zip(urls, pages, strict=True):
                if isinstance(page, bytes):
                    write_scrape(out_dir, url, when, page)
                    result.written[url] += 1
                else:
                    result.failed[url] += 1
                    if result.failed[url] == 1:  # said once
                        on_error(f"{url}: {page} (retried at every tick)")
            rounds += 1
            tick += every
            if count is None or rounds < count:
                stop.wait(max(0.0, tick - time.monotonic()))
    return result


def _try_fetch(url: str, timeout: float) -> bytes | str:
    try:
        return fetch(url, timeout)
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason}"
    except urllib.error.URLError as exc:
        return f"cannot connect ({exc.reason})"
    except (OSError, ValueError) as exc:
        return str(exc) or type(exc).__name__
