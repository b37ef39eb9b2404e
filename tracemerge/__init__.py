"""tracemerge: merge the traces of a distributed training run into one Perfetto trace.

The library entry point is :func:`tracemerge.pipeline.merge`.
"""

__version__ = "0.1.0"
