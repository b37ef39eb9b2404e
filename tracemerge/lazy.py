"""Names a module offers from other modules, each imported the first time one of its names is
used (PEP 562): a module that start-up imports can name the heavy ones without loading them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(module: str, namespace: dict[str, Any], homes: dict[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``module`` (whose globals are ``namespace``): each name of ``homes``
    taken from the module it maps to, then kept as a plain attribute."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(home), name)
        return value

    return __getattr__
