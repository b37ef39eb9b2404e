"""What a format is declared as (:class:`SourceFormat`), and shared file helpers."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from tracemerge.core.errors import InputError
from tracemerge.core.model import SourceData
from tracemerge.naming.paths import PathFacts, host_from_name

if TYPE_CHECKING:
    from tracemerge.store.file_layout import FileLayout

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
HEAD_BYTES = 64 * 1024
# Line-based formats (JSONL) are read whole: a compressed one may not grow beyond this.
MAX_WHOLE_FILE = 4 << 30


class SourceFormat(msgspec.Struct, frozen=True):
    """An input format, declared as data: its name, the module that reads it, and what recognises
    its files, which lives in a small module of its own (discovery asks every format of every
    file, and needs none of the readers for that).

    ``claims(path, head)`` looks at the file name and the first (decompressed) bytes and says
    whether the file is this format's; it must be cheap and must not raise. ``module``'s function
    ``function`` (``read(path, layout)``), imported when a file of the format is read, reads the
    file once, handing every event to ``layout`` (a :class:`~tracemerge.store.file_layout.FileLayout`);
    it raises :class:`~tracemerge.core.errors.InputError` for a file it cannot use.
    Formats whose inputs are directory trees can say where role and rank come from (``hints``)
    and which directories hold nothing to merge (``unusable_dir``), so these are reported.
    """

    name: str
    module: str  # the module that reads the format, imported on first use
    claims: Callable[[Path, bytes], bool]
    # (path, the input root it was found under) -> what the path says of its process; default:
    # tracemerge.naming.paths.path_facts
    hints: Callable[[Path, Path], PathFacts] | None = None
    # A directory this format recognises but cannot use (raw data, say) -> the reason; else None.
    unusable_dir: Callable[[Path], str | None] | None = None
    # A file beside this format's traces that is none but is read for what it says of them (a
    # run's rank, its clocks) -> what it gives; listed as used, not as ignored.
    metadata: Callable[[Path], str | None] | None = None
    function: str = "read"  # the reading function in ``module``

    def reader(self) -> Callable[[Path, FileLayout], SourceData]:
        """The function that reads the format (its module imported on first use)."""
        read: Any = getattr(import_module(self.module), self.function)
        return read

    def read(self, path: Path, layout: FileLayout) -> SourceData:
        """Read ``path`` into ``layout`` (see the class)."""
        return self.reader()(path, layout)


def host_of(meta_host: Any, name: str) -> str | None:
    """The host a trace says it comes from: its own field, else the worker name in ``name``."""
    if type(meta_host) is str and meta_host.strip():
        return meta_host.strip()
    return host_from_name(name)


def read_bytes(path: Path) -> bytes:
    """The file's content, gunzipped when it is gzip data (whatever its name)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if data[:2] == GZIP_MAGIC:
        return _gunzip(path, data).removeprefix(UTF8_BOM)
    return data.removeprefix(UTF8_BOM)


def _gunzip(path: Path, data: bytes) -> bytes:
    """Every gzip member of ``data``, at most MAX_WHOLE_FILE bytes of it (a gzip bomb is refused)."""
    out = bytearray()
    while data:
        gz = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            while data:
                out += gz.decompress(data, MAX_WHOLE_FILE + 1 - len(out))
                if len(out) > MAX_WHOLE_FILE:
                    raise InputError(path, f"decompresses to more than {MAX_WHOLE_FILE >> 20} MiB: not read whole")
                data = gz.unconsumed_tail
                if gz.eof:
                    break
        except zlib.error as exc:
            raise InputError(path, f"corrupt gzip data ({exc})") from None
        if not gz.eof:  # cut short: what came before is kept (its cut last line is counted)
            break
        data = gz.unused_data if gz.unused_data[:2] == GZIP_MAGIC else b""
    return bytes(out)


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """Up to ``size`` leading bytes of the (decompressed) content, without a UTF-8 byte-order
    mark; what could be decompressed of a cut gzip stream; empty when unreadable. Raises
    OSError when the file cannot be opened."""
    with path.open("rb") as raw:
        data = raw.read(size)
        if data[:2] == GZIP_MAGIC:
            gz = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = b""
            try:
                while data and len(out) < size:
                    out += gz.decompress(data, size - len(out))
                    data = gz.unconsumed_tail or (b"" if gz.eof else raw.read(size))
            except zlib.error:
                pass  # damaged: what came before is still the file's head
            data = out
    return data.removeprefix(UTF8_BOM)
