"""How the frameworks name their traces, declared once: roles, and what a file's path says of the
process that wrote it (role, rank, step, stage, parallel coordinates).

Everything here and in :mod:`tracemerge.naming.conventions` (each framework's name patterns) is data
read by two small functions: :func:`path_facts` for one path and :func:`join_frontends` for the
few facts that need the other files of a run (:mod:`tracemerge.naming.apart` the one that files
of no known layout need). Discovery, the Ascend run reader and the process
order all use it; no other module lists role words or name patterns. Each convention names the
framework source it follows; ``tests/test_layouts.py`` holds real file names of each and what
they must become.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path

import msgspec
from msgspec.structs import replace

from tracemerge.naming.conventions import (
    CONVENTIONS,
    ENGINE_FOLDERS,
    ENGINE_ROLE,
    ENGINE_STAGE,
    ENGINES,
    NEEDS_EXPORT,
    STAGE_PHASES,
    STAGE_ROLES,
    VERL_ASCEND_RUN,
    VERL_OLD,
    VERL_RELOCATED,
    VLLM_WORKER_OLD,
    WHOLE_STEP_SCOPES,
    WINDOW_SCOPES,
    Convention,
)
from tracemerge.naming.roles import CONTAINER_DIRS, ROLE_WORDS
from tracemerge.naming.roles import role_sort_key as role_sort_key  # where the process order finds it

# -- what a path says ------------------------------------------------------------------------------

COORDINATES = ("tp", "pp", "dp", "cp", "ep")  # parallel coordinates
COORDINATE_ORDER = (*COORDINATES, "replica", "node", "world")  # the order they are shown in


class PathFacts(msgspec.Struct, frozen=True):
    """What a trace's path says of the process that wrote it (None where it says nothing)."""

    role: str | None = None
    rank: int | None = None  # the global rank
    label: str | None = None  # names the process where no global rank is known (an engine replica's GPU)
    step: int | None = None  # the RL step the file holds (verl counts from 1, as its trackers do)
    stage: str | None = None  # a discrete-mode stage: the file is that phase
    coords: tuple[tuple[str, int], ...] = ()  # (("tp", 0), ("pp", 0), ("dp", 1), ("cp", 0)), world, replica
    convention: str = ""  # the naming convention that matched ("" for the generic reading)
    names_win: bool = False  # what the name says of the process wins over what the file says
    frontend: bool = False  # a replica's CPU frontend: joins the process of the replica's first GPU
    # An engine GPU trace whose name gives no local rank: its label when the file states its
    # (engine-local) rank, with that rank in place of {}.
    file_rank_label: str | None = None
    host: str | None = None  # the host the name gives
    pid: int | None = None  # the OS process id the name gives
    action: int | None = None  # a profiled action's id (a verl nsys report of discrete mode)
    # A file of no known layout, among such files in several folders (other jobs' maybe): its
    # process is told apart by the OS process and host the file states, else by this (its name,
    # or as much of its path as tells it from the others'). None: the rank alone names it.
    apart: str | None = None

    @property
    def stage_role(self) -> str | None:
        """The role that runs this file's stage, when the stage says."""
        return STAGE_ROLES.get(self.phase or "")

    @property
    def phase(self) -> str | None:
        """The phase a discrete-mode stage file is, over its whole extent."""
        if self.stage is None or self.stage in WINDOW_SCOPES:
            return None
        return STAGE_PHASES.get(self.stage, self.stage.replace("-", "_"))

    def coord(self, name: str) -> int | None:
        return dict(self.coords).get(name)


_RANK_WORD = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)
_RANK_SUFFIX = re.compile(r"-r(\d+)(?=[._-]|$)")


def path_facts(path: Path, root: Path) -> PathFacts:
    """What ``path`` (found under the input ``root``) says of its process: a framework's
    convention where one matches, else the generic reading of role folders and rank words."""
    dirs = _dirs_below(path, root)
    name = path.name
    # The folder holding the file speaks for it even when it is the folder given (a replica's,
    # a stage's); the folders above are read only below the input.
    folder = path.parent.name
    engine_folder = read_engine_folder(folder)
    if engine_folder is not None:
        found = _engine_facts(name, engine_folder, None)
        if found is not None:
            return found
    for convention in CONVENTIONS:
        m = convention.file.fullmatch(name)
        if m is None:
            continue
        folder_match = None
        if convention.folder is not None and _folder_speaks(convention, path, bool(dirs)):
            folder_match = convention.folder.fullmatch(folder)
        if convention is VERL_RELOCATED:
            rank = int(m.group("rank")) if m.group("rank") else None
            found = _engine_facts(m.group("engine"), EngineFolder(replica=int(m.group("replica"))), rank)
            if found is not None:
                return replace(found, convention=f"{VERL_RELOCATED.name}, {found.convention}")
            continue
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        if folder_match is not None:
            groups = {**{k: v for k, v in folder_match.groupdict().items() if v is not None}, **groups}
        return _convention_facts(convention, groups, dirs)
    return generic_facts(dirs, name)


def _folder_speaks(convention: Convention, path: Path, below_input: bool) -> bool:
    """Whether the folder holding a file is the one ``convention`` reads (inside the folders it
    must lie in, when the convention says)."""
    folder = path.parent
    if convention.folder_under:
        return folder.name.lower() in ROLE_WORDS or folder.parent.name in convention.folder_under
    return _speaks(folder.name, below_input)


def _speaks(folder: str, below_input: bool) -> bool:
    """Whether the folder holding a file names its stage or role: any folder below the input that
    is no container; the folder given itself only when it reads like a stage or a role."""
    low = folder.lower()
    if not folder or low in CONTAINER_DIRS:
        return False
    return below_input or low in ROLE_WORDS or low in STAGE_PHASES


class EngineFolder(msgspec.Struct, frozen=True):
    """What the folder an engine replica writes into says (conventions.ENGINE_FOLDERS)."""

    role: str = ENGINE_ROLE
    replica: int = 0
    node: int | None = None
    serving: str | None = None  # prefill or decode (disaggregated serving)

    @property
    def coords(self) -> list[tuple[str, int]]:
        return [("replica", self.replica)] + ([("node", self.node)] if self.node is not None else [])

    @property
    def label(self) -> str:
        """The label of the replica's processes before their local rank: node 0 goes unsaid."""
        serving = [self.serving] if self.serving else []
        return " · ".join([f"replica {self.replica}"] + serving + [f"node {self.node}"] * bool(self.node))


def read_engine_folder(folder: str) -> EngineFolder | None:
    """The engine replica a folder name is, if it is one."""
    for pattern in ENGINE_FOLDERS:
        m = pattern.fullmatch(folder)
        if m is not None:
            g = m.groupdict()
            node = int(g["node"]) if g.get("node") is not None else None
            return EngineFolder(g.get("role") or ENGINE_ROLE, int(g["replica"]), node, g.get("serving"))
    return None


def reads_as_role(folder: str) -> bool:
    """Whether a folder name is a role (or an engine replica's folder, which names its role)."""
    return folder.lower() in ROLE_WORDS or read_engine_folder(folder) is not None


def _convention_facts(convention: Convention, groups: dict[str, str], dirs: list[str]) -> PathFacts:
    role, stage = groups.get("role"), groups.get("stage")
    if convention is VERL_OLD and stage is not None:
        if stage.lower() in ROLE_WORDS:
            role, stage = role or stage, None  # a role folder, not a stage folder
        dirs = dirs[:-1]  # the stage folder names no role
    stage_role = STAGE_ROLES.get(STAGE_PHASES.get(stage or "", ""))
    # A framework that names roles in its file names leaves the folders above its save_path to
    # the user: one of them is a role only if it reads like one.
    folder_role = next((d for d in reversed(dirs) if d.lower() in ROLE_WORDS), None)
    if not convention.names_win:
        folder_role = generic_facts(dirs, "").role
    role = role or convention.role or stage_role or folder_role
    coords = tuple((k, int(groups[k])) for k in (*COORDINATES, "world") if k in groups)
    number = {k: int(groups[k]) for k in ("rank", "step", "pid", "action") if k in groups}
    return PathFacts(
        role=role,
        rank=number.get("rank"),
        step=number.get("step"),
        stage=stage,
        coords=coords,
        convention=convention.name,
        names_win=convention.names_win,
        host=groups.get("host"),
        pid=number.get("pid"),
        action=number.get("action"),
    )


def _engine_facts(name: str, folder: EngineFolder, rank: int | None) -> PathFacts | None:
    """An engine file of a replica's ``folder``: the process of one GPU (its global rank when
    known, else replica and local rank), or the replica's frontend."""
    for convention in ENGINES:
        m = convention.file.fullmatch(name)
        if m is None:
            continue
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        coords = folder.coords
        if "local" in groups:
            coords.append(("tp", int(groups["local"])))
        coords += [(k, int(groups[k])) for k in COORDINATES if k in groups]
        label = file_rank_label = None
        if rank is None:
            shown = [f"{k} {v}" for k, v in coords if k in COORDINATES and (k == "tp" or v != 0)]
            label = " · ".join([folder.label, *shown])
            if convention is VLLM_WORKER_OLD:  # the local rank is only in the file
                label, file_rank_label = (
                    f"{folder.label} · {groups['host']}_{groups['pid']}",
                    f"{folder.label} · tp {{}}",
                )
        return PathFacts(
            role=folder.role,
            rank=rank,
            label=label,
            # An engine is profiled while it generates: the capture is the replica's generation.
            stage=ENGINE_STAGE,
            coords=tuple(dict(coords).items()),
            convention=convention.name,
            names_win=True,
            frontend=convention.frontend,
            file_rank_label=file_rank_label,
            host=groups.get("host"),
            pid=int(groups["pid"]) if "pid" in groups else None,
        )
    return None


def join_frontends(facts: dict[Path, PathFacts]) -> dict[Path, PathFacts]:
    """A replica's frontend trace joins the process of the replica's first GPU (its lowest local
    rank) in the same folder; without a GPU trace of its replica it is ``<replica> · frontend``."""
    first_gpu: dict[tuple[Path, str | None, int | None], tuple[int, PathFacts]] = {}
    for path, f in facts.items():
        replica = f.coord("replica")
        if replica is None or f.frontend:
            continue
        local = f.coord("tp")
        if local is None:
            continue  # its local rank is only in the file
        key = _replica_key(path, f)
        if key not in first_gpu or local < first_gpu[key][0]:
            first_gpu[key] = (local, f)
    out = dict(facts)
    for path, f in facts.items():
        if not f.frontend or f.coord("replica") is None:
            continue
        gpu = first_gpu.get(_replica_key(path, f))
        if gpu is None:
            out[path] = replace(f, label=f"{f.label} · frontend")
        else:
            out[path] = replace(f, rank=gpu[1].rank, label=gpu[1].label, coords=gpu[1].coords)
    return out


def _replica_key(path: Path, f: PathFacts) -> tuple[Path, str | None, int | None]:
    """The files of one replica: its engine folder, or (relocated into save_path) its number."""
    if read_engine_folder(path.parent.name) is not None:
        return path.parent, None, None
    return path.parent, f.role, f.coord("replica")


def generic_facts(dirs: Iterable[str], filename: str) -> PathFacts:
    """Role and rank as role folders and rank words tell them, for names of no known convention."""
    dirs = list(dirs)
    return PathFacts(role=_role_from_path(dirs, filename), rank=_rank_from_path(dirs, filename))


def ascend_run_facts(run: Path, root: Path) -> PathFacts:
    """An Ascend run folder (``<host>_<pid>_<ts17>_ascend_pt`` or ``PROF_*``): verl writes it in
    ``<save_path>/[<role or stage>/]`` (RL-Insight's sample: ``mstx_profile/<stage>/``), older verl
    with a ``<step>/`` folder above the role, a rollout engine in its replica's folder. A folder
    names a role only when it reads as one: any other (the job's, say) names nothing."""
    if run.resolve() == root.resolve():
        above = [run.parent.name] if _names_run(run.parent.name) else []
    else:
        above = [root.name, *_dirs_below(run, root)]
    named = VERL_ASCEND_RUN.fullmatch(run.name)
    convention = "verl Ascend" if named else ""
    host, pid = (named.group("host"), int(named.group("pid"))) if named else (None, None)
    engine = read_engine_folder(above[-1]) if above else None
    if engine is not None:  # an engine's run: its rank (profiler_info) is engine-local
        return PathFacts(
            role=engine.role,
            label=f"{engine.label} · {run.name.removesuffix('_ascend_pt')}",
            stage=ENGINE_STAGE,
            coords=tuple(engine.coords),
            convention=f"{convention}, engine replica".lstrip(", "),
            names_win=True,
            file_rank_label=f"{engine.label} · tp {{}}",
            host=host,
            pid=pid,
        )
    role = stage = step = None
    if above and above[-1].lower() in ROLE_WORDS:
        role = above.pop()
    elif above and (above[-1] in STAGE_PHASES or above[-1] in WHOLE_STEP_SCOPES):
        stage = above.pop()
    elif above and not above[-1].isdigit():
        above.pop()  # a folder of the job's naming (or a container): no role
    if above and above[-1].isdigit():
        step = int(above.pop())
    facts = PathFacts(role=role, step=step, stage=stage, convention=convention, host=host, pid=pid)
    return replace(facts, role=role or facts.stage_role)


def _names_run(folder: str) -> bool:
    """Whether the folder holding a run given alone says something of it (a role, stage, replica)."""
    return reads_as_role(folder) or folder in STAGE_PHASES or folder in WHOLE_STEP_SCOPES


# ``{hostname}_{pid}`` then a timestamp: torch's tensorboard_trace_handler files
# (``{worker}.{time_ns}.pt.trace.json``) and torch_npu run directories (``{worker}_{ts}_ascend_pt``).
_WORKER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)[._]\d+(?:\.pt\.trace\.json(?:\.gz)?|_ascend_(?:pt|ms))$")


def host_from_name(name: str) -> str | None:
    """The host a trace file's or run folder's name gives, when it is ``{hostname}_{pid}…`` (and
    no framework's convention reads the name otherwise: slime's ``<target>_rank_<r>.<ms>…``)."""
    found = worker_from_name(name)
    return found[0] if found else None


def worker_from_name(name: str) -> tuple[str, int] | None:
    """The host and pid of a ``{hostname}_{pid}…`` name (as :func:`host_from_name` reads it)."""
    found = _WORKER_NAME.match(name)
    if found is None or any(c.file.fullmatch(name) and "host" not in c.file.groupindex for c in CONVENTIONS):
        return None
    return found.group("host"), int(found.group("pid"))


def needs_export(path: Path) -> str | None:
    """Why a file a framework wrote cannot be read as it is, with the command that makes it readable."""
    for suffix, reason in NEEDS_EXPORT.items():
        if path.name.endswith(suffix):
            # Quoted for a shell: the command is meant to be copied, and a name can hold `;` or `$(...)`.
            stem = path.name[: -len(suffix)]
            return reason.format(export=shlex.quote(f"{stem}.sqlite"), name=shlex.quote(path.name))
    return None


def _dirs_below(path: Path, root: Path) -> list[str]:
    try:
        return list(path.parent.relative_to(root).parts)
    except ValueError:
        return []


def _role_from_path(dirs: list[str], filename: str) -> str | None:
    for part in reversed(dirs):
        if part.lower() in ROLE_WORDS:
            return part
    prefix = filename.split("_", 1)[0]
    if prefix != filename and prefix.lower() in ROLE_WORDS:
        return prefix
    return None


def _rank_from_path(dirs: list[str], filename: str) -> int | None:
    for pattern in (_RANK_WORD, _RANK_SUFFIX):
        m = pattern.search(filename)
        if m:
            return int(m.group(1))
    for part in reversed(dirs):
        m = _RANK_WORD.search(part)
        if m:
            return int(m.group(1))
    return None
