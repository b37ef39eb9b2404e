"""What a file's job makes of its events: a :data:`Pass`, decided once per job where the merge is
wired and read by :func:`~tracemerge.run.filework.process_file`.

Every file is read once (:func:`first_pass`): a one-pass format (Perfetto) encodes it into its
chunk on tracks of the file's own; Chrome JSON lays it out and keeps the laid-out events for a
second pass; a summary, or Chrome JSON with a selection of processes (applied while reading),
reads it for its summary alone. Once the plan is made, a file whose chunk the plan cannot take
as it is gets one more pass (:func:`encode_again`).
"""

from __future__ import annotations

import msgspec

from tracemerge.plan.encoded import Encoded
from tracemerge.plan.types import FileScan, UnitPlan
from tracemerge.select import Selection
from tracemerge.writers import Writer


class SummaryOnly(msgspec.Struct, frozen=True):
    """Read the file for its summary alone: nothing is encoded."""


class EncodeChunk(msgspec.Struct, frozen=True):
    """Read the file and encode its events into the job's chunk with ``writer``: on tracks of the
    file's own (``unit`` None: a one-pass format, whose chunk the plan renames where it must), or
    on the tracks the plan's ``unit`` names (Chrome JSON read again)."""

    writer: str
    unit: UnitPlan | None = None


class KeepLayout(msgspec.Struct, frozen=True):
    """Chrome JSON's first read: the file's events laid out (their bodies as ``writer`` encodes
    them) and kept beside the chunk for :class:`EncodeKept`; nothing is written yet."""

    writer: str


class EncodeKept(msgspec.Struct, frozen=True):
    """Chrome JSON's second pass: the events :class:`KeepLayout` kept, encoded with ``writer`` on
    the plan's ``unit``; ``first`` is that read's summary, ``laid_out`` what its lay-out gave.
    The input is not read again."""

    writer: str
    unit: UnitPlan
    first: FileScan
    laid_out: Encoded


Pass = SummaryOnly | EncodeChunk | KeepLayout | EncodeKept
SUMMARY_ONLY = SummaryOnly()


def first_pass(writer: Writer | None, selection: Selection) -> Pass:
    """The read every file gets: encoded as it is read by a one-pass format; laid out and kept for
    a second pass by the others, unless a selection of processes is asked (it is applied while
    reading: the file is then read again); for its summary alone when nothing is written."""
    if writer is None:
        return SUMMARY_ONLY
    if writer.one_pass:
        return EncodeChunk(writer.name)
    return SUMMARY_ONLY if selection.by_process else KeepLayout(writer.name)


def encode_again(first: Pass, writer: Writer, unit: UnitPlan, scan: FileScan, encoded: Encoded) -> Pass:
    """The pass of a file encoded again once the plan is made (``first``: its first read's pass,
    ``scan`` and ``encoded`` what that read gave): a one-pass format reads it again on tracks of
    its own; the others encode what the first read kept, else read it again onto the plan's tracks."""
    if writer.one_pass:
        return EncodeChunk(writer.name)
    if isinstance(first, KeepLayout):
        return EncodeKept(writer.name, unit, scan, encoded)
    return EncodeChunk(writer.name, unit)


def read_again(step: Pass) -> Pass:
    """``step`` where what an earlier read kept is gone (it stayed on a node that failed): the
    file is read again onto the same tracks."""
    if isinstance(step, EncodeKept):
        return EncodeChunk(step.writer, step.unit)
    return step


def writes_chunk_first(step: Pass) -> bool:
    """Whether ``step``, a file's first read, wrote its chunk on tracks of the file's own (a
    one-pass format): the chunk the output takes unless the plan asks for another."""
    return isinstance(step, EncodeChunk) and step.unit is None
