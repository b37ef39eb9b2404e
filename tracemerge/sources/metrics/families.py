"""The metric families of one Prometheus (or OpenMetrics) exposition, its bad lines left out.

``prometheus_client``'s parsers give up at the first line they cannot read, losing the family it
was in. :func:`exposition_families` finds such lines, counts each under :data:`UNREADABLE` (the first named
by its line number in the file and the parser's reason) and leaves it out, parsing again only the
block of the page it was in (:class:`_Page`), so that the cost stays linear in the page; after
:data:`_MAX_BAD_LINES` the rest of the page is given up from its next bad line on (the samples
before that line are kept), counted under :data:`REST_LOST`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from contextlib import suppress

from tracemerge.core.stats import Losses, Stat

# Messages parse_snapshot counts that make a lone scrape unreadable (read says so as an error).
UNREADABLE, REST_LOST = "metric text unreadable", ", the rest of the snapshot is lost"
NO_TIME = "metric snapshot without a time"


# Lines of one exposition that are left out, each counted, before the rest of it is given up.
_MAX_BAD_LINES = 20


def exposition_families(text: str, dropped: Losses, first_line: int) -> list:
    """The exposition's metric families. The parser gives up at a bad line, losing the family it
    was in: the line is found, counted and left out, and its block of the page parsed again."""
    page = _Page(text, first_line)
    read: list[list] = []  # the families of each block read so far
    first_bad, bad = "", 0
    while len(read) < len(page.starts):
        families: list = []
        try:
            families.extend(page.parse(page.block_text(len(read))))
        except ValueError as exc:  # what came before the bad line's family is in ``families``
            why = _why(exc)
            if bad == _MAX_BAD_LINES:  # the rest of the page is given up: from its next bad line on
                dropped.add(Stat.METRIC_UNREADABLE, 1, f"{UNREADABLE}{REST_LOST} ({why})")
                read.append(_families_before(page, len(read), _first_bad_line(page, len(read))))
                break
            # Every line the parser gives up on alone goes at once (a block parsed again per bad line,
            # or a bisection over the page per bad line, would cost the page's length each time).
            lone = _lone_bad_lines(page, len(read))[: _MAX_BAD_LINES - bad]
            if lone:
                first_bad = first_bad or f"first at line {page.numbers[lone[0][0]]}: {lone[0][1]}"
                bad += len(lone)
                del read[page.block_of(lone[0][0]) :]
                for at, _ in reversed(lone):
                    page.remove(at)
                continue
            at = _first_bad_line(page, len(read))
            first_bad = first_bad or f"first at line {page.numbers[at]}: {why}"
            bad += 1
            del read[page.block_of(at) :]
            page.remove(at)
        else:
            read.append(families)
    if bad:
        dropped.add(Stat.METRIC_UNREADABLE, bad, f"{UNREADABLE} ({first_bad})")
    return [family for block in read for family in block]


class _Page:
    """An exposition's lines, their numbers in the file, and its blocks: runs of lines that the
    parser reads alone as it reads them in the whole page, so that a bad line costs a parse of its
    block, not of the page."""

    def __init__(self, text: str, first_line: int) -> None:
        # OpenMetrics (what a scrape asking for it gets: exemplars, timestamps in seconds) ends "# EOF".
        self.openmetrics = text.rstrip().endswith("\n# EOF") or text.strip() == "# EOF"
        self.parse = _parser(self.openmetrics)
        self.lines = text.split("\n")
        self.numbers = list(range(first_line, first_line + len(self.lines)))
        # The OpenMetrics parser checks each family against those before it: its page is one block.
        self.starts = [0] if self.openmetrics else _block_starts(self.lines)

    def block_text(self, block: int) -> str:
        end = self.starts[block + 1] if block + 1 < len(self.starts) else len(self.lines)
        return "\n".join(self.lines[self.starts[block] : end])

    def block_of(self, line: int) -> int:
        return bisect.bisect_right(self.starts, line) - 1

    def remove(self, line: int) -> None:
        later = self.block_of(line) + 1
        del self.lines[line], self.numbers[line]
        self.starts[later:] = [start - 1 for start in self.starts[later:]]

    def fails_alone(self, lo: int, hi: int) -> str | None:
        """Why the parser gives up on the lines ``lo``..``hi`` read on their own (None: it does not)."""
        lines = self.lines[lo:hi]
        text = "\n".join(lines)
        if self.openmetrics and lines[-1].strip() != "# EOF":
            text += "\n# EOF"
        try:
            for _ in self.parse(text + "\n"):
                pass
        except ValueError as exc:
            return _why(exc)
        return None

    def fails(self, block: int, count: int) -> bool:
        """Whether the parser gives up on the lines of ``block`` among the page's first ``count``."""
        return self.fails_alone(self.starts[block], count) is not None


def _parser(openmetrics: bool) -> Callable[[str], Iterator]:
    # Imported here: the parsers pull in an HTTP server, which every other merge would pay for at start.
    if openmetrics:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    else:
        from prometheus_client.parser import text_string_to_metric_families
    return text_string_to_metric_families


def _why(exc: ValueError) -> str:
    return str(exc)[:80] or type(exc).__name__


# Lines of a block that fails read together, a run at a time: a run that reads is passed over
# whole, a run that does not is read a line at a time.
_RUN = 64


def _lone_bad_lines(page: _Page, block: int) -> list[tuple[int, str]]:
    """The lines of ``block`` the parser gives up on read alone, and why, in order: linear in the
    block's length. (The text format's every check is of one line; OpenMetrics' checks of a family
    as a whole are left to :func:`_first_bad_line`.)"""
    lo = page.starts[block]
    hi = page.starts[block + 1] if block + 1 < len(page.starts) else len(page.lines)
    found = []
    for start in range(lo, hi, _RUN):
        end = min(start + _RUN, hi)
        if page.fails_alone(start, end) is None:
            continue
        for n in range(start, end):
            if page.lines[n].strip() or page.openmetrics:
                why = page.fails_alone(n, n + 1)
                if why is not None:
                    found.append((n, why))
    return found


def _families_before(page: _Page, block: int, bad: int) -> list:
    """The families of ``block`` on its lines before the line ``bad``: the samples a page that is
    given up holds before its next bad line (the family that line was in included)."""
    text = "\n".join(page.lines[page.starts[block] : bad])
    families: list = []
    with suppress(ValueError):  # a check of the family as a whole (OpenMetrics): what came before it
        families.extend(page.parse(text + ("\n# EOF\n" if page.openmetrics else "\n")))
    return families


def _first_bad_line(page: _Page, failing: int) -> int:
    """The first line at which the parser gives up: a bisection over prefixes of the page, where
    ``failing`` is the first block the parser gives up on. A prefix that ends in a block before
    it fails only if the prefix of that block does (the blocks before read without fault); one
    that ends after it fails."""

    def fails(count: int) -> bool:
        block = page.block_of(count - 1)
        return block > failing or page.fails(block, count)

    lo, hi = 1, len(page.lines)
    while lo < hi:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo - 1


# A HELP or TYPE line of a metric whose name needs no quotes, as the text parser splits it; a
# TYPE line's type is checked apart.
_NAME = r"([a-zA-Z_:][a-zA-Z0-9_:]*)"


_PLAIN_HEADER = re.compile(rf"#[ \t]+(?:HELP[ \t]+{_NAME}(?:[ \t].*)?|TYPE[ \t]+{_NAME}[ \t]+(\S+))")


def _block_starts(lines: list[str]) -> list[int]:
    """Where blocks start: lines at which the text parser starts afresh, whatever bad lines are
    left out. That is a HELP or TYPE line of another metric than the header before it, both
    headers the parser reads as such and never gives up at (so never left out themselves); after
    any other header, the next one starts no block."""
    from prometheus_client.metrics_core import METRIC_TYPES

    kinds = frozenset((*METRIC_TYPES, "untyped"))
    starts, previous = [0], None
    for n, line in enumerate(lines):
        text = line.strip()
        if not text.startswith("#") or ("HELP" not in text and "TYPE" not in text):
            continue  # a sample, or a comment the parser skips
        name = _sure_header_name(text, kinds)
        if name is not None and previous is not None and name != previous:
            starts.append(n)
        previous = name
    return starts


def _sure_header_name(line: str, kinds: frozenset[str]) -> str | None:
    """The metric a HELP or TYPE line names, when the parser reads it as such and can build the
    family it opens (a type in ``kinds``; a counter named ``_total`` would be left without a name)."""
    found = _PLAIN_HEADER.fullmatch(line)
    if found is None:
        return None
    help_name, type_name, kind = found.groups()
    if help_name is not None:
        return help_name
    if kind not in kinds or (kind == "counter" and type_name == "_total"):
        return None
    return type_name
