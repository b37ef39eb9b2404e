"""The output file: what it may replace, where it is staged, and how it is assembled from the
files' chunks, whole or not at all.

Each file's events are encoded into a chunk of their own in a work directory beside the output;
:func:`assemble` writes the header, each chunk behind its clock prologue, and the footer into a
temporary file there, and renames it into place only when it is complete.
"""

from __future__ import annotations

import gzip
import os
import secrets
import tempfile
from collections.abc import Callable, Collection, Mapping
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import BinaryIO, cast

from tracemerge.core.errors import FatalError, shown
from tracemerge.plan.encoded import EncodedFile
from tracemerge.plan.lanes import planned_lanes
from tracemerge.plan.types import MergePlan, ThreadTrack, UnitPlan
from tracemerge.plan.unique_ids import unit_renames
from tracemerge.writers import Writer
from tracemerge.writers.perfetto_renames import copy_renamed


def check_output(out_path: Path, named: set[Path], force: bool, taken: Collection[Path] = ()) -> None:
    """Refuse an output that would destroy something: an input (one of ``named``, resolved; unless
    ``force``), another output of the run (one of ``taken``, resolved: the --report), or anything
    that is not a regular file we may write (a device, a FIFO, a symlink, a read-only file)."""
    if os.path.lexists(out_path):  # first: a link is not followed (one naming itself has no end)
        if out_path.is_symlink():
            raise FatalError(f"{shown(out_path)}: is a symbolic link; not replacing it (name the file itself)")
        if not out_path.is_file():
            raise FatalError(f"{shown(out_path)}: is not a regular file; not replacing it")
        if not out_path.stat().st_mode & 0o222:  # its mode, not access(): root may write anything
            raise FatalError(f"{shown(out_path)}: is read-only; not replacing it")
    if out_path.resolve() in taken:
        raise FatalError(f"{shown(out_path)}: is another output of this run (the --report); not writing both to it")
    if force:
        return
    if out_path.resolve() in named:
        raise FatalError(f"{shown(out_path)}: is one of the inputs; not overwriting it (use --force to replace it)")


def check_report(path: Path, out_path: Path, named: set[Path]) -> None:
    """``--report``: refused where the output would be (a symbolic link, a device, a FIFO, a
    read-only file), and when it is the output or one of the inputs (--force or not)."""
    check_output(path, set(), force=True)
    if path.resolve() == out_path.resolve():
        raise FatalError(f"{shown(path)}: is also the output (-o); not writing the report over it")
    if path.resolve() in named:
        raise FatalError(f"{shown(path)}: is one of the inputs; not writing the report over it")


def write_whole(path: Path, data: bytes) -> None:
    """``data`` at ``path``, whole or not at all: written to a new hidden file beside it (created
    here, never followed through a link), then renamed over it; on any failure nothing is left."""
    for _ in range(100):
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary)
        raise


def work_dir(out_path: Path) -> Path:
    out_dir = out_path.parent if str(out_path.parent) else Path(".")
    if not out_dir.is_dir():
        raise FatalError(
            f"{shown(out_path)}: cannot write the output: its folder {shown(out_dir)} does not exist (create it first)"
        )
    try:
        return Path(tempfile.mkdtemp(prefix=".tracemerge-", dir=out_dir))
    except OSError as exc:
        raise FatalError(f"{shown(out_path)}: cannot write in {out_dir} ({exc.strerror or exc})") from None


def assemble(
    plan: MergePlan,
    files: Mapping[Path, EncodedFile],
    writer: Writer,
    out_path: Path,
    work: Path,
    keep: Path | None = None,
) -> None:
    """Writes the output: header, then per unit of the plan (``files``: each encoded, by path) its
    clock prologue and chunk. Chunks are deleted once copied (they are as large as the output),
    but ``keep``, which later parts use again."""
    # A chunk whose tracks the plan named otherwise (their hashes clashed) is copied with the
    # plan's uuids; Chrome JSON's chunks were encoded with the plan's tracks already.
    renames = {u.path: unit_renames(u, files[u.path].encoded, plan.wide) if writer.one_pass else {} for u in plan.units}
    # Lanes opened while encoding carry no names yet: take them beside their planned threads.
    planned = {t.uuid: t for t in plan.threads}
    lanes = [
        beside
        for u in plan.units
        for _, beside in planned_lanes(files[u.path].encoded.lanes, _planned_thread(planned, renames[u.path]))
    ]
    assembled = work / "assembled"
    with ExitStack() as stack:
        raw = stack.enter_context(assembled.open("wb"))
        out: BinaryIO = raw
        if writer.gzip:
            # A GzipFile is written as any binary file; typeshed makes it an io.BufferedIOBase, not a BinaryIO.
            out = stack.enter_context(cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=5, mtime=0)))
        writer.write_header(out, plan, lanes)
        for unit in plan.units:
            out.write(writer.prologue(unit, files[unit.path].scan.local_min or 0))
            chunk = files[unit.path].chunk
            _copy_unit(writer, unit, chunk, out, renames[unit.path])
            if unit.path != keep:
                chunk.unlink()
        writer.write_footer(out, plan)
    os.replace(assembled, out_path)


def _planned_thread(planned: dict[int, ThreadTrack], renames: dict[int, int]) -> Callable[[int], ThreadTrack]:
    """The planned thread a chunk names by a uuid (one ``renames`` gives again, where it clashed)."""
    return lambda uuid: planned[renames.get(uuid, uuid)]


def _copy_unit(writer: Writer, unit: UnitPlan, chunk: Path, out: BinaryIO, renames: dict[int, int]) -> None:
    """A unit's chunk into the output: its track uuids the plan gave again renamed, then (by the
    writer) its packets stamped with their machines. Both rewrite packets, so a chunk that needs
    both is renamed into a file beside it first (renames are rare: two hashes clashed)."""
    if not renames:
        with chunk.open("rb") as f:
            writer.copy_chunk(f, out, unit)
    elif not unit.machines:
        copy_renamed(chunk, out, renames)
    else:
        renamed = chunk.with_name(chunk.name + ".renamed")
        try:
            with renamed.open("wb") as f:
                copy_renamed(chunk, f, renames)
            with renamed.open("rb") as f:
                writer.copy_chunk(f, out, unit)
        finally:
            renamed.unlink(missing_ok=True)
