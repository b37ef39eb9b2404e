"""Files of no known layout that may be of several jobs, told apart without naming a process after
a folder (:func:`tell_apart`); :func:`tracemerge.plan.types.resolve_identity` names them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from msgspec.structs import replace

from tracemerge.naming.paths import PathFacts


def tell_apart(facts: dict[Path, PathFacts]) -> dict[Path, PathFacts]:
    """Files of no known layout and no role, found in several folders, may be of several jobs:
    two rank-0 traces there are one process only when they say they are (the same OS process on
    the same host). Each gets ``apart``, what names its process when the file says nothing of its
    own: its name, or its path's last parts where names repeat (never a folder alone)."""
    generic = [path for path, f in facts.items() if _of_no_layout(f)]
    if len({path.parent for path in generic}) < 2:
        return facts
    tails = _distinct_tails(generic)
    return {path: replace(f, apart=tails[path]) if path in tails else f for path, f in facts.items()}


def _of_no_layout(f: PathFacts) -> bool:
    return not f.convention and f.role is None and f.label is None and not f.names_win


def _distinct_tails(paths: list[Path]) -> dict[Path, str]:
    """Each path's shortest tail (its name, then with the folders above it) no other path shares."""
    out: dict[Path, str] = {}
    left, n = list(paths), 1
    while left:
        tails = {path: Path(*path.parts[-n:]) for path in paths}
        count = Counter(tails.values())
        for path in left:
            if count[tails[path]] == 1 or n >= len(path.parts):
                out[path] = tails[path].as_posix()
        left, n = [path for path in left if path not in out], n + 1
    return out
