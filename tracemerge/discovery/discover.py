"""Find trace files under the given paths, recognise their format, and read role/rank from paths."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import msgspec
from msgspec.structs import replace

from tracemerge.core.errors import FatalError, InputError, shown
from tracemerge.naming.apart import tell_apart
from tracemerge.naming.paths import PathFacts, generic_facts, join_frontends, needs_export, path_facts
from tracemerge.sources import FORMATS, SourceFormat, read_head


class Candidate(msgspec.Struct, frozen=True):
    """A file some format claims, with what its path says about its role and rank."""

    path: Path
    format: SourceFormat
    facts: PathFacts  # what the path says of the process that wrote it (tracemerge.naming.paths)
    explicit: bool  # named on the command line rather than met in a directory

    @property
    def role_hint(self) -> str | None:
        return self.facts.role

    @property
    def rank_hint(self) -> int | None:
        return self.facts.rank


class Discovery(msgspec.Struct, frozen=True):
    candidates: list[Candidate]
    skipped: list[InputError]  # unusable: named, with the reason
    ignored: list[Path]  # met while walking a directory; not a trace
    notes: list[str]  # worth saying, not a problem (a directory reached twice)
    used: list[str] = msgspec.field(default_factory=list)  # metadata beside traces: "<path>: what it gives"


def discover(inputs: list[Path]) -> Discovery:
    candidates: list[Candidate] = []
    skipped: list[InputError] = []
    ignored: list[Path] = []
    notes: list[str] = []
    used: list[str] = []
    seen: set[Path] = set()
    for given in inputs:
        if given.is_dir():
            files, dirs, hidden = _walk(given, skipped, notes)
            notes.extend(_hidden_traces(hidden))
            for directory in dirs:
                for fmt in FORMATS:
                    reason = fmt.unusable_dir(directory) if fmt.unusable_dir else None
                    if reason:
                        skipped.append(InputError(directory, reason))
                        break
            for path in files:
                _consider(path, given, False, candidates, skipped, (ignored, used), seen)
        elif given.is_file():
            _consider(given, given.parent, True, candidates, skipped, (ignored, used), seen)
        else:
            raise FatalError(f"{shown(given)}: no such file or directory")
    joined = join_frontends({c.path: c.facts for c in candidates})
    candidates = [replace(c, facts=joined[c.path]) for c in candidates]
    return Discovery(candidates, skipped, ignored, notes, used)


def told_apart(candidates: list[Candidate]) -> list[Candidate]:
    """The candidates, files of no known layout in several folders told apart
    (:func:`tracemerge.naming.apart.tell_apart`). Ascend runs are read by their run folders (their
    own layout): only other files can be of no layout. Applied to all the files of a run at once,
    copies left out (a copied folder is no second job), on whichever nodes they are."""
    apart = tell_apart({c.path: c.facts for c in candidates if c.format.hints is None})
    return [replace(c, facts=apart[c.path]) if c.path in apart else c for c in candidates]


def _walk(root: Path, skipped: list[InputError], notes: list[str]) -> tuple[list[Path], list[Path], list[Path]]:
    """Files and directories below ``root`` (hidden ones skipped), in a stable order, and the
    hidden files passed over. Symbolic links to directories are followed, each real directory
    once (a link back up is a loop); a directory that cannot be listed is named in ``skipped``,
    one met twice in ``notes``."""
    files: list[Path] = []
    hidden: list[Path] = []
    dirs: list[Path] = [root]
    seen = {os.path.realpath(root): root}

    def unreadable(exc: OSError) -> None:
        skipped.append(InputError(Path(exc.filename or root), f"cannot read directory: {exc.strerror or exc}"))

    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=unreadable):
        kept = []
        for d in sorted(dirnames):
            if d.startswith("."):
                continue
            real = os.path.realpath(os.path.join(dirpath, d))
            if real in seen:
                notes.append(f"{shown(Path(dirpath) / d)}: the same directory as {shown(seen[real])}, read once")
                continue
            seen[real] = Path(dirpath) / d
            kept.append(d)
        dirnames[:] = kept
        dirs.extend(Path(dirpath) / d for d in dirnames)
        for name in sorted(filenames):
            (hidden if name.startswith(".") else files).append(Path(dirpath) / name)
    return files, dirs, hidden


# Hidden files are not read from a directory: they are what tools leave beside a run (a file
# being written under a temporary name, tracemerge's own included; an editor's swap file; a copy
# a sync tool keeps). One that a format would read is named, so that none vanishes unsaid.
def _hidden_traces(hidden: list[Path]) -> list[str]:
    """A note for each hidden file a format claims: not read, and how to read it."""
    notes = []
    for path in hidden:
        try:
            claimed = recognise(path) is not None
        except OSError:
            continue
        if claimed:
            notes.append(f"{shown(path)}: a hidden file, not read (name it on the command line to merge it)")
    return notes


def _consider(
    path: Path,
    root: Path,
    explicit: bool,
    candidates: list[Candidate],
    skipped: list[InputError],
    passed_over: tuple[list[Path], list[str]],
    seen: set[Path],
) -> None:
    """Adds ``path`` to the candidates, or says why not: ``skipped`` (unusable), or in
    ``passed_over``, ignored (not a trace) or used (metadata of traces, with what it gives)."""
    try:
        resolved = path.resolve()
    except (RuntimeError, OSError):  # symbolic links naming each other (a.json -> b.json -> a.json)
        skipped.append(InputError(path, "a loop of symbolic links: not read"))
        return
    if resolved in seen:
        return
    seen.add(resolved)
    try:
        fmt = recognise(path)
    except OSError as exc:
        if stat_kind(path) != "file":
            skipped.append(InputError(path, f"not a regular file ({stat_kind(path)}): not read"))
        else:
            skipped.append(InputError(path, f"cannot read: {exc.strerror or exc}"))
        return
    if fmt is None:
        export, used = needs_export(path), metadata_of(path)
        if used is not None:
            passed_over[1].append(f"{shown(path)}: {used}")
        elif export is not None:
            skipped.append(InputError(path, export))
        elif explicit:
            skipped.append(InputError(path, "not a trace format tracemerge reads"))
        elif path.name.endswith(TRACE_SUFFIXES) and _is_empty(path):
            skipped.append(InputError(path, "empty file"))
        else:
            passed_over[0].append(path)
        return
    facts = fmt.hints(path, root) if fmt.hints else path_facts(path, root)
    candidates.append(Candidate(path, fmt, facts, explicit))


# Names of files that are meant to be traces: never passed over in silence.
TRACE_SUFFIXES = (".json", ".json.gz", ".jsonl", ".db", ".pftrace", ".perfetto-trace")


def stat_kind(path: Path) -> str:
    """ "file", "FIFO", "device", "socket" or "missing": what is at ``path``."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "missing"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def metadata_of(path: Path) -> str | None:
    """What a file beside a format's traces gives them (a run's rank and clocks), if it is one."""
    for fmt in FORMATS:
        said = fmt.metadata(path) if fmt.metadata else None
        if said is not None:
            return said
    return None


def recognise(path: Path) -> SourceFormat | None:
    """The format that claims ``path``; raises OSError when it is not a readable regular file
    (a FIFO is never opened: reading one would wait forever)."""
    if stat_kind(path) != "file":
        raise OSError(f"not a regular file: {path}")
    head = read_head(path)
    if not head:
        return None
    for fmt in FORMATS:
        if fmt.claims(path, head):
            return fmt
    return None


def path_hints(path: Path, root: Path) -> tuple[str | None, int | None]:
    """Role and rank as the generic reading of the path tells them (None where it doesn't)."""
    try:
        dirs = list(path.parent.relative_to(root).parts)
    except ValueError:
        dirs = []
    facts = generic_facts(dirs, path.name)
    return facts.role, facts.rank
