"""Names a module offers from other modules, each imported the first time one of its names is
used (PEP 562): a module that start-up imports can name the heavy ones without loading them.

The cyclic collector is off while such a name's modules are imported: imports make objects by the
hundred thousand and no garbage cycles, and the collector would otherwise run some 60 times over
them as the engine is loaded. The command line's table (``freeze=True``) also moves what is alive
then (the modules, mostly) out of the collector's reach for good (``gc.freeze``), which spares the
later full passes over them (14 ms of a merge's start-up on a 23 MB rank) and lets processes forked
later (part readers, packers) share those pages with no collector writing to them. A library's
tables never freeze: what is alive in a caller's process is the caller's."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable
from typing import Any

from tracemerge.core.gc_pause import no_cyclic_gc


def lazy_names(
    module: str, namespace: dict[str, Any], homes: dict[str, str], *, freeze: bool = False
) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``module`` (whose globals are ``namespace``): each name of ``homes``
    taken from the module it maps to, then kept as a plain attribute; with ``freeze``, what is alive
    once it is imported is frozen (only the command line's process may ask for that)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        with no_cyclic_gc():  # (see the module)
            found = importlib.import_module(home)
            if freeze:
                gc.freeze()
        value = namespace[name] = getattr(found, name)
        return value

    return __getattr__
