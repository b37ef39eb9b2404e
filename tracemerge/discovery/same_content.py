"""Inputs with the same bytes as another one (a copied folder, a file and its relocated copy): read once.

Two copies of one trace are one trace: merging both would draw every event twice (each copy on
threads of its own, as files of one process that overlap in time get). Files are told apart by
size first, which costs one ``stat`` each; only files that share their size with another are
read, hashed with BLAKE2b in blocks of 1 MiB. The first of a set of copies in discovery order is
merged; each other one is named in a note and counted under the info statistic
``file_same_content`` (:mod:`tracemerge.core.stats`): nothing of the trace is lost.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from tracemerge.core.errors import shown
from tracemerge.core.stats import Stat
from tracemerge.discovery.discover import Candidate
from tracemerge.report.findings import Findings

BLOCK = 1 << 20  # bytes hashed at a time

# The message a copy is counted under (statistic ``file_same_content``, info).
SAME_CONTENT = "file with the same bytes as another input, read once"


def same_content(paths: Sequence[Path]) -> dict[int, int]:
    """For each path whose bytes are those of an earlier one, its index -> the earlier one's
    index (the first of its copies). A file that cannot be read here is no one's copy: its
    read says what is wrong with it."""
    by_size: dict[int, list[int]] = defaultdict(list)
    for n, path in enumerate(paths):
        try:
            by_size[path.stat().st_size].append(n)
        except OSError:
            continue
    copy_of: dict[int, int] = {}
    for indexes in by_size.values():
        if len(indexes) < 2:
            continue
        first_with: dict[bytes, int] = {}
        for n in indexes:
            digest = _digest(paths[n])
            if digest is None:
                continue
            first = first_with.setdefault(digest, n)
            if first != n:
                copy_of[n] = first
    return copy_of


def _digest(path: Path) -> bytes | None:
    """The BLAKE2b digest of the file's bytes, read a block at a time; None when it cannot be read."""
    h = hashlib.blake2b()
    try:
        with path.open("rb") as f:
            while block := f.read(BLOCK):
                h.update(block)
    except OSError:
        return None
    return h.digest()


def read_once(candidates: list[Candidate]) -> tuple[list[Candidate], Findings]:
    """``candidates`` without the copies of an earlier one; each copy named in a note and
    counted (info) among the statistics."""
    # Every format alike, but a format that reads run folders (Ascend) names each export by its
    # place in the run: a copied run keeps its files' names, so only files of one name are
    # compared (the exports of one run under other names are the reader's to choose between).
    pools: dict[str | None, list[int]] = defaultdict(list)
    for n, c in enumerate(candidates):
        pools[None if c.format.hints is None else c.path.name].append(n)
    copy_of: dict[int, int] = {}
    for pool in pools.values():
        found = same_content([candidates[n].path for n in pool])
        copy_of.update({pool[n]: pool[first] for n, first in found.items()})
    said = Findings()
    for n, first in sorted(copy_of.items()):
        copy, kept = shown(candidates[n].path), shown(candidates[first].path)
        said.notes.append(f"{copy}: the same bytes as {kept}, read once")
        said.lose(Stat.FILE_SAME_CONTENT, 1, f"{SAME_CONTENT}: {copy}")
    return [c for n, c in enumerate(candidates) if n not in copy_of], said
