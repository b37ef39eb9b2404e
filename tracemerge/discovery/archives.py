"""Perfetto archives as inputs: a ``.tar`` or ``.zip`` of traces (what ``trace_processor util
merge`` and the UI's "Download .tar" write) is read as the folder it holds.

The archive is expanded into a temporary folder, safely: only regular files are written, each
under the folder (a member named with an absolute path or ``..``, a link, a device, a second
member of one name is not written, and is named in the report); each member and the whole stop
at a size, and at the free space of the folder's disk. An archive inside the archive stays a
file (Perfetto does not open those either).

A ``perfetto_manifest`` in it (a JSON member whose content is ``{"perfetto_manifest": {...}}``)
is read, not merged: ``files[].machine.name`` (or a one-machine ``machines`` list) is the host of
that file, and ``files[].clocks`` (``sync_to.file`` and ``offset_ns``) places it against another
file of the archive (:class:`~tracemerge.discovery.pins.PinnedFile`). What the manifest says
that cannot be used is named in the report, place and all, and the rest still used.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import suppress
from functools import partial
from pathlib import Path, PurePosixPath
from typing import IO, Any

import msgspec

from tracemerge.core.errors import InputError, shown
from tracemerge.discovery.pins import PinnedFile

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")
MAX_MEMBER = 64 << 30  # bytes: a member larger than this is not written
MAX_TOTAL = 256 << 30  # bytes: members past this total are not written
MAX_MEMBERS = 100_000
MANIFEST_KEY = "perfetto_manifest"
_MANIFEST_HEAD = 256  # the manifest's key is within this many bytes of its start
_MANIFEST_MAX = 4 << 20  # a manifest is a small JSON file
_COPY = 1 << 20


class Unpacked(msgspec.Struct):
    """An archive expanded: its folder, and what its manifest and members said."""

    archive: Path
    folder: Path
    hosts: dict[Path, str] = msgspec.field(default_factory=dict)  # expanded file -> its machine's name
    pins: list[PinnedFile] = msgspec.field(default_factory=list)
    skipped: list[InputError] = msgspec.field(default_factory=list)  # members not written
    unused: list[InputError] = msgspec.field(default_factory=list)  # what the manifest says that is not used
    notes: list[str] = msgspec.field(default_factory=list)


def is_archive(path: Path) -> bool:
    """A tar or zip archive named as one (its content checked: a ``.zip`` that is not one is not)."""
    if not path.name.lower().endswith(ARCHIVE_SUFFIXES) or not path.is_file():
        return False
    try:
        return zipfile.is_zipfile(path) if path.name.lower().endswith(".zip") else tarfile.is_tarfile(path)
    except OSError:
        return False


def unpack(archive: Path, into: Path) -> Unpacked:
    """Expand ``archive`` into a new folder below ``into``; raises InputError when it cannot be
    read at all."""
    folder = Path(tempfile.mkdtemp(prefix=f"{archive.name}.", dir=into))  # two archives may share a name
    found = Unpacked(archive, folder)
    manifests: list[tuple[str, bytes]] = []
    written: set[str] = set()
    total, budget = 0, min(MAX_TOTAL, shutil.disk_usage(folder).free)
    try:
        for count, (name, size, kind, opener) in enumerate(_members(archive)):
            if kind == "dir":  # made as its files need it
                continue
            where = _safe_name(name)
            why = _refused(where, kind, size, count, written, total + size > budget)
            if why:
                found.skipped.append(InputError(archive, why, name))
                continue
            assert where is not None
            with opener() as src:
                data = src.read(_MANIFEST_HEAD)
                if size <= _MANIFEST_MAX and _is_manifest(data):
                    manifests.append((name, data + src.read(_MANIFEST_MAX)))
                    continue
                target = folder.joinpath(*where.parts)
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    total += _write(src, data, target, size)
                except OSError as exc:  # this member alone (a file of the name of a folder, a full disk)
                    with suppress(OSError):
                        target.unlink()
                    found.skipped.append(InputError(archive, f"cannot be written: {exc.strerror or exc}", name))
                    continue
            written.add(where.as_posix())
    except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, ValueError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise InputError(archive, f"cannot read the archive: {exc}") from None
    _use_manifests(found, manifests, written)
    return found


def _members(archive: Path) -> Iterator[tuple[str, int, str, Callable[[], IO[bytes]]]]:
    """(name, size, kind, open) per member, kind ``file``, ``dir``, ``link`` or ``special``."""
    if archive.name.lower().endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                mode = (info.external_attr >> 16) & 0o170000
                kind = "dir" if info.is_dir() else "link" if mode == 0o120000 else "file"
                yield info.filename, info.file_size, kind, partial(z.open, info)
        return
    with tarfile.open(archive) as tar:
        for member in tar:
            kind = (
                "file"
                if member.isreg()
                else "dir"
                if member.isdir()
                else "link"
                if member.issym() or member.islnk()
                else "special"
            )
            yield member.name, member.size, kind, partial(_tar_member, tar, member)


def _tar_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    f = tar.extractfile(member)
    if f is None:
        raise ValueError(f"{member.name}: no data")
    return f


def _safe_name(name: str) -> PurePosixPath | None:
    """A member's name as a relative path inside the folder, or None when it would leave it."""
    path = PurePosixPath(name.replace("\\", "/"))
    parts = [p for p in path.parts if p not in ("", ".")]
    if path.is_absolute() or not parts or ".." in parts or ":" in parts[0]:
        return None
    return PurePosixPath(*parts)


def _refused(where: PurePosixPath | None, kind: str, size: int, count: int, written: set[str], too_much: bool) -> str:
    """Why a member is not written ("" when it is)."""
    if where is None:
        return "a member named outside the archive's folder: not read"
    if kind == "link":
        return "a link: not followed, not read"
    if kind != "file":
        return "not a regular file: not read"
    if count >= MAX_MEMBERS:
        return f"more than {MAX_MEMBERS:,} members: not read"
    if where.as_posix() in written:
        return "a second member of this name: not read"
    if size > MAX_MEMBER:
        return f"larger than {MAX_MEMBER:,} bytes: not read"
    if too_much:
        return "the archive's members would fill the disk (or pass 256 GiB): not read"
    return ""


def _write(src: IO[bytes], head: bytes, target: Path, size: int) -> int:
    """``src`` (whose first bytes, ``head``, were read) into a new file; at most ``size`` bytes
    (what the archive says the member holds)."""
    left = size - len(head)
    with target.open("xb") as out:
        out.write(head)
        while left > 0 and (block := src.read(min(_COPY, left))):
            out.write(block)
            left -= len(block)
    return size - max(left, 0)


def _is_manifest(head: bytes) -> bool:
    text = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    return text.startswith(b"{") and text[1:].lstrip().startswith(b'"' + MANIFEST_KEY.encode() + b'"')


def _use_manifests(found: Unpacked, manifests: list[tuple[str, bytes]], written: set[str]) -> None:
    """The machines and clock relations of the archive's manifest (Perfetto reads one: a second
    is named and not used)."""
    for name, _ in manifests[1:]:
        found.unused.append(InputError(found.archive, "a second perfetto_manifest: not used", name))
    if not manifests:
        return
    name, data = manifests[0]
    try:
        body = json.loads(data)[MANIFEST_KEY]
        files = body.get("files", []) if type(body) is dict else None
        if type(files) is not list:
            raise ValueError("files: not a list")
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
        found.unused.append(InputError(found.archive, f"perfetto_manifest not used: {exc}", name))
        return
    found.notes.append(f"{shown(found.archive)}: read as a folder; its perfetto_manifest ({name}) used")
    for n, entry in enumerate(files):
        try:
            _use_entry(found, entry, written)
        except ValueError as exc:
            found.unused.append(InputError(found.archive, f"not used: {exc}", f"{name}: files[{n}]"))


def _use_entry(found: Unpacked, entry: Any, written: set[str]) -> None:
    """One ``files[]`` entry: its file's machine and clock relation."""
    if type(entry) is not dict or type(entry.get("path")) is not str:
        raise ValueError("no path")
    path = _member_path(found, entry["path"], written)
    host = _machine_name(entry)
    if host:
        found.hosts[path] = host
    clocks = entry.get("clocks")
    if clocks is None:
        return
    if type(clocks) is not dict:
        raise ValueError("clocks: not an object")
    sync_to, offset = clocks.get("sync_to"), clocks.get("offset_ns", 0)
    if type(offset) is not int or isinstance(offset, bool):
        raise ValueError("clocks.offset_ns: not an integer")
    if type(sync_to) is not dict or type(sync_to.get("file")) is not str:
        raise ValueError("clocks: no sync_to.file (a file pinned to the trace's own time is not supported)")
    against = _member_path(found, sync_to["file"], written)
    found.pins.append(PinnedFile(path, against, offset, f"perfetto_manifest in {found.archive.name}"))


def _member_path(found: Unpacked, name: str, written: set[str]) -> Path:
    where = _safe_name(name)
    if where is None or where.as_posix() not in written:
        raise ValueError(f"{name}: no such file in the archive")
    return found.folder.joinpath(*where.parts)


def _machine_name(entry: dict) -> str | None:
    machine, machines = entry.get("machine"), entry.get("machines")
    if machine is None and type(machines) is list and len(machines) == 1:
        machine = machines[0]  # a file of one machine, named through the multi-machine form
    elif machines is not None:
        raise ValueError("machines: a file of several machines (tracemerge reads no Perfetto protobuf input)")
    if machine is None:
        return None
    name = machine.get("name") if type(machine) is dict else None
    if type(name) is not str or not name.strip():
        raise ValueError("machine.name: not a name")
    return name.strip()


def remove(unpacked: Unpacked) -> None:
    with suppress(OSError):
        shutil.rmtree(unpacked.folder)


__all__ = ["ARCHIVE_SUFFIXES", "Unpacked", "is_archive", "remove", "unpack"]
