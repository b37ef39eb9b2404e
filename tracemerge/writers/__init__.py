"""Output formats, all fed by the same laid-out event stream (:mod:`tracemerge.store.file_layout`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import msgspec
from msgspec.structs import replace

from tracemerge.layout.types import ChunkEncoder
from tracemerge.plan.types import MergePlan, ThreadTrack, UnitPlan
from tracemerge.writers import chrome_json, perfetto, perfetto_machines, perfetto_tracks


def _copy_chunk(chunk: BinaryIO, out: BinaryIO, unit: UnitPlan) -> None:
    shutil.copyfileobj(chunk, out, 1 << 20)


class Writer(msgspec.Struct, frozen=True):
    """An output format: a per-file encoder, and what goes around and between the encoded files.

    ``one_pass`` formats encode a file before the plan exists (events refer to content-derived
    track ids and a per-file clock); the others are encoded with the file's :class:`UnitPlan`.
    ``prologue(unit, local_min)`` is written before each file's chunk.
    """

    name: str
    extensions: tuple[str, ...]
    # (sequence id, out, ahead=False): ``ahead`` when a core is idle for the encoder to use;
    # the encoder's ``close()`` ends the chunk, ``end()`` stops what it runs beside (a file given up)
    unit_encoder: Callable[..., ChunkEncoder]
    write_header: Callable[[BinaryIO, MergePlan, list[ThreadTrack]], None]
    write_footer: Callable[[BinaryIO, MergePlan], None]
    prologue: Callable[[UnitPlan, int], bytes]
    one_pass: bool = False
    # (chunk, out, unit): copies a unit's chunk into the output (Perfetto stamps machines on it)
    copy_chunk: Callable[[BinaryIO, BinaryIO, UnitPlan], None] = _copy_chunk
    gzip: bool = False


def _no_prologue(unit: UnitPlan, local_min: int) -> bytes:
    return b""


PERFETTO = Writer(
    "perfetto",
    (".pftrace", ".perfetto-trace", ".pb"),
    perfetto.UnitEncoder,
    perfetto_tracks.write_header,
    perfetto_tracks.write_footer,
    perfetto_tracks.prologue,
    one_pass=True,
    copy_chunk=perfetto_machines.copy_chunk,
)
PERFETTO_GZ = replace(
    PERFETTO, name="perfetto.gz", extensions=(".pftrace.gz", ".perfetto-trace.gz", ".pb.gz"), gzip=True
)
CHROME_JSON = Writer(
    "json", (".json",), chrome_json.UnitEncoder, chrome_json.write_header, chrome_json.write_footer, _no_prologue
)
CHROME_JSON_GZ = replace(CHROME_JSON, name="json.gz", extensions=(".json.gz",), gzip=True)
WRITERS = {w.name: w for w in (PERFETTO, PERFETTO_GZ, CHROME_JSON, CHROME_JSON_GZ)}


def writer_for(output: Path, format: str | None = None) -> Writer:
    """The writer named by ``format``, else the one the output's extension implies (.pftrace default)."""
    if format:
        try:
            return WRITERS[format]
        except KeyError:
            raise ValueError(f"unknown output format {format!r} (choose from {', '.join(WRITERS)})") from None
    name = output.name.lower()
    for writer in sorted(WRITERS.values(), key=lambda w: -max(len(e) for e in w.extensions)):
        if name.endswith(writer.extensions):
            return writer
    return PERFETTO
