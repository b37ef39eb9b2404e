"""House rules of the package's source, checked on its syntax trees: no module under tracemerge/
longer than 400 lines, no function longer than 80 (from its ``def`` to its last line), and no
private name (a leading underscore) of one module used by another, whether imported by name or
reached through the module (``module._name``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tracemerge"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80

# The only exceptions: modules and functions being split.
# Exceptions to the limits, each with why (none today; the test below fails on one not needed).
LONG_MODULES: set[str] = set()
LONG_FUNCTIONS: set[tuple[str, str]] = set()


def _sources() -> Iterator[tuple[str, str]]:
    """Each module of the package: its path from the repository's root, and its text."""
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def _module_names() -> set[str]:
    """The dotted names of the package's modules (a package by its own name)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """Every function and method, nested ones too: its qualified name and its length in lines."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _imported_from(package: str, node: ast.ImportFrom) -> str:
    """The module a ``from … import`` names, its relative form resolved against ``package``, the
    package of the module importing."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _private_uses(path: str, tree: ast.AST, modules: set[str]) -> Iterator[tuple[int, str]]:
    """Where the module at ``path`` uses another module's private name: the line, and the name in
    full."""
    parts = Path(path).with_suffix("").parts
    module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    package = module if parts[-1] == "__init__" else ".".join(parts[:-1])
    bound: dict[str, str] = {}  # a local name of a module of the package: that module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _imported_from(package, node)
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
                elif source in modules and _is_private(alias.name):
                    yield node.lineno, f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in bound:
            owner = ".".join([bound[value.id], *reversed(chain)])
            if owner in modules and owner != module:
                yield node.lineno, f"{owner}.{node.attr}"


def test_no_module_is_longer_than_400_lines() -> None:
    long = {}
    for path, text in _sources():
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES and path not in LONG_MODULES:
            long[path] = lines
    assert not long, "modules over 400 lines: " + ", ".join(f"{p} ({n} lines)" for p, n in long.items())


def test_no_function_is_longer_than_80_lines() -> None:
    long = []
    for path, text in _sources():
        for name, lines in _functions(ast.parse(text)):
            if lines > MAX_FUNCTION_LINES and (path, name) not in LONG_FUNCTIONS:
                long.append(f"{path}: {name} ({lines} lines)")
    assert not long, "functions over 80 lines: " + "; ".join(long)


def test_no_private_name_is_used_across_modules() -> None:
    modules = _module_names()
    found = []
    for path, text in _sources():
        found += [f"{path}:{line}: {name}" for line, name in _private_uses(path, ast.parse(text), modules)]
    assert not found, "private names used by another module: " + "; ".join(found)


def test_every_exception_is_still_needed() -> None:
    """An exception is taken out of the lists once its module or function is short enough."""
    texts = dict(_sources())
    needless = [p for p in LONG_MODULES if len(texts.get(p, "").splitlines()) <= MAX_MODULE_LINES]
    for path, name in LONG_FUNCTIONS:
        lengths = dict(_functions(ast.parse(texts.get(path, ""))))
        if lengths.get(name, 0) <= MAX_FUNCTION_LINES:
            needless.append(f"{path}: {name}")
    assert not needless, "no longer too long, take them out of LONG_MODULES / LONG_FUNCTIONS: " + ", ".join(needless)
