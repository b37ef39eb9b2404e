"""Files found and processed on the nodes of a Ray cluster that hold them (``--ray``).

Every node looks for the given paths itself (a task pinned to it): a relative path is taken from
the node's Ray working directory, and a path a node does not have is simply not its part. A file
that several nodes see at one path with the same size and modification time is on shared storage
and is read once, by one of them, chosen to balance the bytes each node reads; the same path with
a different file behind it on another node is skipped there, said so. Each file's
:func:`~tracemerge.run.filework.process_file` then runs as a task pinned to its node, in a temporary
folder of that node, and only the encoded chunk and the summary travel to the driver, which
writes the chunk where the job names it. Chrome JSON's kept layout stays on the node, and its
second pass runs there.

Failures: a task that fails, or whose node dies, is run again on another node that holds the
same file (shared storage). A file no other node holds is lost: it is reported as skipped with
the node and the reason (exit status 3, or nothing written with ``--strict``); a file lost in the
second pass is left out whole and counted. A node lost while looking for files is reported too.
The output is still written whole or not at all, on the driver, as with local workers.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import ray
from msgspec import field
from msgspec.structs import replace
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tracemerge.core.errors import FatalError, InputError, shown
from tracemerge.discovery.discover import Candidate, Discovery, discover
from tracemerge.run.filework import FileJob, FileOutcome, process_file
from tracemerge.run.passes import read_again

# A file's place in a local walk of the inputs: (input index, per directory level below the
# input (1, name), then (0, file name)); os.walk lists a folder's files before its subfolders.
WalkKey = tuple[int, tuple[tuple[int, str], ...]]


class NodeFiles(msgspec.Struct, frozen=True):
    """What one node found under the inputs it has."""

    candidates: list[Candidate]
    keys: list[WalkKey]
    stats: list[tuple[int, int]]  # per candidate: size and mtime in ns
    skipped: list[tuple[str, str, str | None]]  # InputError's path, reason and place (exceptions do not pickle)
    ignored: list[Path]
    notes: list[str]
    inputs_here: list[int]
    used: list[str] = msgspec.field(default_factory=list)


def find_files(inputs: list[str]) -> NodeFiles:
    """Runs on a node: ``discover`` over the inputs this node has, each file with its walk key."""
    candidates: list[Candidate] = []
    keys: list[WalkKey] = []
    stats: list[tuple[int, int]] = []
    skipped: list[tuple[str, str, str | None]] = []
    ignored: list[Path] = []
    notes: list[str] = []
    used: list[str] = []
    here: list[int] = []
    seen: set[str] = set()  # as one local walk reads a file met under two inputs once
    for index, text in enumerate(inputs):
        given = Path(text)
        if not os.path.lexists(given):
            continue
        here.append(index)
        found = discover([given])
        skipped.extend((str(e.path), e.reason, e.where) for e in found.skipped)
        ignored.extend(found.ignored)
        notes.extend(found.notes)
        used.extend(found.used)
        for cand in found.candidates:
            real = os.path.realpath(cand.path)
            if real in seen:
                continue
            seen.add(real)
            try:
                info = cand.path.stat()
            except OSError:
                continue
            candidates.append(cand)
            keys.append((index, _walk_key(cand.path, given)))
            stats.append((info.st_size, info.st_mtime_ns))
    return NodeFiles(candidates, keys, stats, skipped, ignored, notes, here, used)


def _walk_key(path: Path, given: Path) -> tuple[tuple[int, str], ...]:
    if path == given:
        return ()
    rel = path.relative_to(given)
    return (*((1, part) for part in rel.parts[:-1]), (0, rel.name))


def process_on_node(job: FileJob, folder: str) -> tuple[FileOutcome, bytes | None]:
    """Runs on a node: the job, with its chunk in this node's temporary ``folder``; the chunk's bytes."""
    local = Path(tempfile.gettempdir()) / folder
    local.mkdir(parents=True, exist_ok=True)
    assert job.chunk is not None
    chunk = local / job.chunk.name
    outcome = process_file(replace(job, chunk=chunk, columns_on_disk=False))  # the driver cannot read this folder
    try:
        data = chunk.read_bytes()
    except FileNotFoundError:  # a read for its summary only writes no chunk
        return outcome, None
    chunk.unlink()
    return outcome, data


def remove_folder(folder: str) -> None:
    shutil.rmtree(Path(tempfile.gettempdir()) / folder, ignore_errors=True)


_find_files = ray.remote(find_files)
_process_on_node = ray.remote(process_on_node)
_remove_folder = ray.remote(remove_folder)


class _Node(msgspec.Struct):
    id: str
    label: str
    cpus: float


class _Placed(msgspec.Struct):
    """Where a file is read: its node, and the other nodes that hold the same file."""

    node: str
    others: list[str] = field(default_factory=list)


class RayExecutor:
    """Finds and processes files on the nodes of a Ray cluster (see the module's doc).

    ``address`` is what ``ray.init`` takes: ``"auto"``, ``"HOST:PORT"``, ``"ray://HOST:10001"``,
    or None to start a Ray instance on this machine (or join the one ``RAY_ADDRESS`` names). A
    driver already connected (``ray.is_initialized()``) is used as it is. ``runtime_env`` is
    passed to ``ray.init`` (e.g. ``{"pip": ["tracemerge"]}`` where the nodes lack it).
    """

    def __init__(self, address: str | None = None, runtime_env: dict[str, Any] | None = None) -> None:
        self.address = address
        self.runtime_env = runtime_env
        self.connected_here = False
        self.nodes: dict[str, _Node] = {}
        self.placed: dict[Path, _Placed] = {}
        self.folder = f"tracemerge-{uuid.uuid4().hex[:12]}"
        self.used: set[str] = set()  # nodes that may hold files of this merge in self.folder
        self.depth = 0  # nested ``with`` blocks: the caller's around merge()'s own

    def __enter__(self) -> RayExecutor:
        self._connect()
        self.depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1
        if self.depth > 0:  # a merge inside the caller's own ``with``: the caller's exit closes
            return
        try:
            if self.used:
                cleanups = [self._on(node, _remove_folder, 0).remote(self.folder) for node in self.used]
                ray.wait(cleanups, num_returns=len(cleanups), timeout=30)
                self.used.clear()
        finally:
            if self.connected_here:
                ray.shutdown()
                self.connected_here = False
            self.nodes = {}

    def _connect(self) -> None:
        if self.nodes:
            return
        if not ray.is_initialized():
            options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
            if self.runtime_env is not None:
                options["runtime_env"] = self.runtime_env
            if self.address is None:
                options["include_dashboard"] = False
            try:
                ray.init(address=self.address, **options)
            except Exception as exc:  # ConnectionError, ValueError, RuntimeError: all mean no cluster
                where = self.address or "a local Ray instance"
                raise FatalError(f"--ray {where}: cannot connect ({type(exc).__name__}: {exc})") from None
            self.connected_here = True
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        for n in sorted(nodes, key=lambda n: (n["NodeManagerAddress"], n["NodeID"])):
            label = f"{n['NodeManagerAddress']} ({n['NodeID'][:8]})"
            self.nodes[n["NodeID"]] = _Node(n["NodeID"], label, n["Resources"].get("CPU", 0.0))

    def _on(self, node: str, remote: Any, cpus: float) -> Any:
        strategy = NodeAffinitySchedulingStrategy(node, soft=False)
        # Ray runs a task again by itself when its worker process dies (the node lives on).
        return remote.options(num_cpus=cpus, scheduling_strategy=strategy, max_retries=1)

    def discover(self, inputs: list[Path]) -> Discovery:
        self._connect()  # merge() looks for files before it enters the executor
        texts = [str(p) for p in inputs]
        refs = {node: self._on(node, _find_files, 0).remote(texts) for node in self.nodes}
        found: dict[str, NodeFiles] = {}
        skipped: list[InputError] = []
        for node, ref in refs.items():
            try:
                found[node] = ray.get(ref)
            except ray.exceptions.RayError as exc:
                label = self.nodes[node].label
                skipped.append(InputError(f"node {label}", f"lost while looking for files ({_why(exc)}): not merged"))
        if not found:
            raise FatalError("no node of the Ray cluster could look for files: " + "; ".join(map(str, skipped)))
        missing = [p for n, p in enumerate(texts) if not any(n in f.inputs_here for f in found.values())]
        if missing:
            raise FatalError(f"{shown(missing[0])}: no such file or directory on any node of the Ray cluster")
        return self._combine(found, skipped)

    def _combine(self, found: dict[str, NodeFiles], skipped: list[InputError]) -> Discovery:
        """One discovery from every node's: each file once, in the order a local walk gives."""
        holders: dict[Path, list[tuple[str, tuple[int, int]]]] = {}
        cand_of: dict[Path, tuple[WalkKey, Candidate]] = {}
        ignored: dict[Path, None] = {}
        notes: dict[str, None] = {}
        used: dict[str, None] = {}
        seen_skips: set[str] = set()
        for node, files in found.items():
            for skipped_path, reason, where in files.skipped:
                error = InputError(skipped_path, reason, where)
                if str(error) not in seen_skips:
                    seen_skips.add(str(error))
                    skipped.append(error)
            ignored.update(dict.fromkeys(files.ignored))
            notes.update(dict.fromkeys(files.notes))
            used.update(dict.fromkeys(files.used))
            for cand, key, stat in zip(files.candidates, files.keys, files.stats, strict=True):
                holders.setdefault(cand.path, []).append((node, stat))
                cand_of.setdefault(cand.path, (key, cand))
        load = dict.fromkeys(self.nodes, 0)
        shared: list[tuple[Path, list[str], int]] = []
        for path, held in holders.items():
            first_stat = held[0][1]
            same = [node for node, stat in held if stat == first_stat]
            for node, stat in held:
                if stat != first_stat:
                    skipped.append(
                        InputError(
                            path,
                            f"on node {self.nodes[node].label} a different file than on node "
                            f"{self.nodes[held[0][0]].label} (size or time differs); only the latter is merged "
                            "(give each node's traces a path of their own)",
                        )
                    )
            if len(same) == 1:
                self.placed[path] = _Placed(same[0])
                load[same[0]] += first_stat[0]
            else:
                shared.append((path, same, first_stat[0]))
        # Shared files, largest first, each to the node that holds it and has the least to read.
        order = list(self.nodes)
        for path, same, size in sorted(shared, key=lambda s: (-s[2], cand_of[s[0]][0])):
            node = min(same, key=lambda n: (load[n], order.index(n)))
            load[node] += size
            self.placed[path] = _Placed(node, [n for n in same if n != node])
        candidates = [cand for _, cand in sorted(cand_of.values(), key=lambda kc: kc[0])]
        return Discovery(candidates, skipped, list(ignored), list(notes), list(used))

    def part_reads(self, workers: int) -> None:
        """Files are read whole on the nodes (their cores are the cluster's to share)."""
        return None

    def run(self, jobs: list[FileJob]) -> Iterator[FileOutcome]:
        pending: dict[Any, tuple[int, FileJob]] = {}
        for n, job in enumerate(jobs):
            pending[self._submit(job)] = (n, job)
        done: dict[int, FileOutcome] = {}
        following = 0
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            n, job = pending.pop(ref)
            try:
                outcome, data = ray.get(ref)
            except ray.exceptions.RayError as exc:
                retry = self._another_node(job, exc)
                if isinstance(retry, FileJob):
                    pending[self._submit(retry)] = (n, retry)
                else:
                    done[n] = retry
            else:
                if data is not None and job.chunk is not None:
                    job.chunk.write_bytes(data)
                done[n] = outcome
            while following in done:
                yield done.pop(following)
                following += 1

    def _submit(self, job: FileJob) -> Any:
        node = self.placed[job.candidate.path].node
        self.used.add(node)
        cpus = 1 if self.nodes[node].cpus >= 1 else 0
        return self._on(node, _process_on_node, cpus).remote(job, self.folder)

    def _another_node(self, job: FileJob, exc: BaseException) -> FileJob | FileOutcome:
        """The job again on another node that holds the file, or the file reported lost."""
        path = job.candidate.path
        placed = self.placed[path]
        why = f"on node {self.nodes[placed.node].label}: {_why(exc)}"
        if not placed.others:
            message = f"{shown(path)}: lost {why}; no other node holds this file"
            return FileOutcome(job.candidate, skipped=message, lost=True)
        self.placed[path] = _Placed(placed.others[0], placed.others[1:])
        # The first read's kept layout stayed on the failed node: the file is read again instead.
        return replace(job, pass_=read_again(job.pass_))


def _why(exc: BaseException) -> str:
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause
        if cause is not None:
            text = str(cause).strip().splitlines()
            return f"{type(cause).__name__}: {text[0] if text else ''}"[:200]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}{': ' + text[0][:160] if text else ''}"
