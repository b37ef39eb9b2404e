"""Output formats, all fed by the same laid-out event stream (:mod:`tracemerge.merge`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tracemerge.merge import Encoder
from tracemerge.plan import MergePlan, ThreadTrack, UnitPlan
from tracemerge.writers import chrome_json, perfetto


@dataclass(frozen=True)
class Writer:
    """An output format: a per-file encoder plus the header and footer around the encoded files."""

    name: str
    unit_encoder: Callable[[UnitPlan, BinaryIO], Encoder]
    write_header: Callable[[BinaryIO, MergePlan, list[ThreadTrack]], None]
    write_footer: Callable[[BinaryIO, MergePlan], None]
    gzip: bool = False


PERFETTO = Writer("perfetto", perfetto.UnitEncoder, perfetto.write_header, perfetto.write_footer)
CHROME_JSON = Writer("json", chrome_json.UnitEncoder, chrome_json.write_header, chrome_json.write_footer)
CHROME_JSON_GZ = Writer(
    "json.gz", chrome_json.UnitEncoder, chrome_json.write_header, chrome_json.write_footer, gzip=True
)
WRITERS = {w.name: w for w in (PERFETTO, CHROME_JSON, CHROME_JSON_GZ)}


def writer_for(output: Path, format: str | None = None) -> Writer:
    """The writer named by ``format``, else the one the output's extension implies (.pftrace default)."""
    if format:
        try:
            return WRITERS[format]
        except KeyError:
            raise ValueError(f"unknown output format {format!r} (choose from {', '.join(WRITERS)})") from None
    name = output.name.lower()
    if name.endswith(".json.gz"):
        return CHROME_JSON_GZ
    if name.endswith(".json"):
        return CHROME_JSON
    return PERFETTO
