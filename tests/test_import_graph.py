"""The import graph follows the stages: a module imports only modules of its own stage or of an
earlier one, so that each stage can be read, tested and loaded without the ones after it.

The order (:data:`STAGES`) is the order of imports, which is not quite the order data flows in:
discovery runs first but asks the formats (``sources``) whether they claim a file, and the store
and the evidence notes are what sources read into, so both come before them; the run report's
record (``report``) is filled by every stage; ``analysis`` (the step summary and ``summarize()``)
reads a run through ``run``. Imports are read with ``ast``: at module level, inside functions and
under ``TYPE_CHECKING`` alike, and a module named whole in a string (a lazy table such as
``cli.engine``'s, a format's reading module) counts as imported by the module naming it.

What importing a source loads is checked too, in a fresh interpreter: the store and the notes
it reads into, never a later stage; and recognising files loads no format's reader.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

from tracemerge.sources import FORMATS, SourceFormat

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tracemerge"

# The stages in import order: each entry is a stage's name and the top-level modules and packages
# of tracemerge in it. A module may import its own stage's modules and earlier stages' only.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("core",)),
    ("naming", ("naming", "metrics_map")),
    ("report", ("report",)),  # the run report's record and the statistics page: core's and naming's only
    ("store/evidence", ("evidence", "store")),
    ("sources", ("sources",)),
    ("discovery", ("discovery",)),
    ("clock", ("clock",)),
    ("select", ("select",)),  # the clock places every file, whatever is selected
    ("phases", ("phases",)),
    ("plan", ("plan",)),
    ("layout", ("layout",)),
    ("writers", ("writers",)),
    ("run", ("run",)),
    ("analysis", ("analysis",)),
    ("pipeline", ("pipeline",)),
    ("compare/readback/viewer/scrape", ("compare", "readback", "viewer", "scrape")),
    ("cli", ("cli", "__main__")),
)
# What no module under tracemerge.sources may load when imported: it reads into the store and the
# notes, with its read options, and knows nothing of what is done with them after (nor of the run
# report: what a read loses goes in core's Losses).
LATER_THAN_SOURCES = (
    "clock",
    "phases",
    "plan",
    "analysis",
    "layout",
    "writers",
    "run",
    "report",
    "compare",
    "readback",
    "viewer",
    "cli",
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _stage(module: str) -> int | None:
    """The index in STAGES of ``module``'s stage (None: the package's own ``__init__``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    for n, (_, members) in enumerate(STAGES):
        if parts[1] in members:
            return n
    raise AssertionError(f"{module} is in no stage: add {parts[1]!r} to STAGES in {__file__}")


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The tracemerge modules an import statement of ``module`` loads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        if MODULES[module].name != "__init__.py":
            parts = parts[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    # ``from package import module`` is an import of the module; of any other name, the package's.
    found = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    return [name for name in dict.fromkeys(found) if name in MODULES]


LAZY = "names as a module to import"


def _named_module(node: ast.AST) -> str | None:
    """The module a string names whole (a lazy table's entry, a format's reading module), if any;
    not the word "tracemerge" alone (a producer's name)."""
    if isinstance(node, ast.Constant) and type(node.value) is str and "." in node.value:
        return node.value if node.value in MODULES else None
    return None


def _edges() -> dict[str, dict[str, tuple[int, str]]]:
    """module -> {imported module: (line, how)}, every import of the package's own modules, and
    every module named whole in a string (imported when first used: ``how`` is LAZY)."""
    graph: dict[str, dict[str, tuple[int, str]]] = {m: {} for m in MODULES}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node):
                    graph[module].setdefault(target, (node.lineno, "imports"))
            elif (named := _named_module(node)) is not None:
                graph[module].setdefault(named, (node.lineno, LAZY))
        graph[module].pop(module, None)
    return graph


GRAPH = _edges()


def _where(module: str, target: str) -> str:
    line, how = GRAPH[module][target]
    return f"{MODULES[module].relative_to(ROOT)}:{line}: {module} {how} {target}"


def _imports_of(prefix: str, banned: tuple[str, ...]) -> list[str]:
    """Every import by a module under ``prefix`` of a module under one of ``banned``."""
    return [
        _where(module, target)
        for module in GRAPH
        if module == prefix or module.startswith(prefix + ".")
        for target in GRAPH[module]
        if any(target == b or target.startswith(b + ".") for b in banned)
    ]


def test_every_module_imports_only_its_own_and_earlier_stages() -> None:
    backward = []
    for module, targets in GRAPH.items():
        mine = _stage(module)
        for target in targets:
            theirs = _stage(target)
            if mine is not None and theirs is not None and theirs > mine:
                stage, later = STAGES[mine][0], STAGES[theirs][0]
                backward.append(f"{_where(module, target)} (stage {stage} imports the later stage {later})")
    assert not backward, "imports against the stage order:\n" + "\n".join(backward)


def test_the_clock_imports_neither_phases_nor_the_selection() -> None:
    found = _imports_of("tracemerge.clock", ("tracemerge.phases", "tracemerge.select"))
    assert not found, "the clock stage imports a later stage:\n" + "\n".join(found)


def test_the_phases_never_encode() -> None:
    found = _imports_of("tracemerge.phases", ("tracemerge.layout", "tracemerge.writers"))
    assert not found, "the phases stage imports the lay-out or a writer:\n" + "\n".join(found)


def test_only_the_command_line_imports_the_command_line() -> None:
    found = [
        _where(module, target)
        for module, targets in GRAPH.items()
        if not (module.startswith("tracemerge.cli") or module == "tracemerge.__main__")
        for target in targets
        if target == "tracemerge.cli" or target.startswith("tracemerge.cli.")
    ]
    assert not found, "library code goes through the command line:\n" + "\n".join(found)


def test_no_import_circles() -> None:
    """Imports inside functions count; a module named in a string does not (it is imported when
    first used, by whoever uses it: a format's reader may take its name from what recognises it)."""
    imported = {m: {t: how for t, how in targets.items() if how[1] != LAZY} for m, targets in GRAPH.items()}
    circles = _circles(imported)
    shown = [", ".join(circle) for circle in circles]
    assert not circles, "modules that import one another in a circle:\n" + "\n".join(shown)


def _circles(graph: dict[str, dict[str, tuple[int, str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                on_stack.add(target)
                work.append((target, iter(graph[target])))
            elif target in on_stack:
                low[node] = min(low[node], index[target])
    return found


# Run in a fresh interpreter: imports each module named on the command line in turn and prints,
# as JSON, what each import added to sys.modules.
_LOADER = """
import importlib, json, sys
added = {}
for name in sys.argv[1:]:
    before = set(sys.modules)
    importlib.import_module(name)
    added[name] = sorted(set(sys.modules) - before)
print(json.dumps(added))
"""


def _loaded(names: list[str]) -> dict[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _LOADER, *names], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    return json.loads(done.stdout)


def _path(start: str, goal: str) -> list[str]:
    """A chain of module-level imports from ``start`` to ``goal`` (what loaded it), if one is seen."""
    came_from: dict[str, str | None] = {start: None}
    todo = deque([start])
    while todo:
        node = todo.popleft()
        if node == goal:
            chain = [node]
            while (back := came_from[chain[-1]]) is not None:
                chain.append(back)
            return chain[::-1]
        for target in [t for imported in GRAPH.get(node, {}) for t in (*_packages_of(imported), imported)]:
            if target not in came_from:
                came_from[target] = node
                todo.append(target)
    return [start, "…", goal]


def _packages_of(module: str) -> list[str]:
    """The packages importing ``module`` imports first (``a`` and ``a.b`` of ``a.b.c``)."""
    parts = module.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts))]


def test_importing_a_source_loads_no_later_stage() -> None:
    sources = [m for m in MODULES if m.startswith("tracemerge.sources")]
    banned = tuple(f"tracemerge.{stage}" for stage in LATER_THAN_SOURCES)
    wrong = []
    for name, added in _loaded(sources).items():
        for module in added:
            if any(module == b or module.startswith(b + ".") for b in banned):
                wrong.append(f"importing {name} loads {module}: {' -> '.join(_path(name, module))}")
    assert not wrong, "a source loads a later stage:\n" + "\n".join(wrong)


def test_recognising_files_loads_no_reader() -> None:
    """Discovery asks every format of every file: what answers is small, and a format's reading
    module is imported only when a file of the format is read."""
    readers = {fmt.module for fmt in FORMATS}
    added = _loaded(["tracemerge.discovery.discover"])["tracemerge.discovery.discover"]
    assert not readers & set(added), sorted(readers & set(added))
    assert "numpy" not in added


@pytest.mark.parametrize("fmt", FORMATS, ids=[f.name for f in FORMATS])
def test_each_format_names_its_reading_function(fmt: SourceFormat) -> None:
    assert callable(fmt.reader()), f"{fmt.name}: {fmt.module} has no function {fmt.function}"
