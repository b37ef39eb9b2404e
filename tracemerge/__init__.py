"""tracemerge: merge the traces of a distributed training run into one Perfetto trace."""

from tracemerge.errors import FatalError, InputError, TracemergeError
from tracemerge.report import RunReport

__version__ = "0.1.0"


def merge(*args, **kwargs) -> RunReport:  # type: ignore[no-untyped-def]
    """See :func:`tracemerge.pipeline.merge`."""
    from tracemerge.pipeline import merge as _merge

    return _merge(*args, **kwargs)


__all__ = ["FatalError", "InputError", "RunReport", "TracemergeError", "__version__", "merge"]
