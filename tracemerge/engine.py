"""The merge engine as the command line reaches it: loaded when a command runs, not before.

``tracemerge --version``, ``--help`` and a usage error need only the command line's own options;
importing the readers, numpy, protobuf and the writers would triple their start-up time. The
command line (``cli``, ``cli_diff``, ``cli_tools``) therefore reaches everything beyond its own
options through this one table: the engine's entry points, the option parsers, the report's
formatting and ``diff``; each module is imported the first time one of its names is used.
:mod:`tracemerge.diff` reaches the trace reader behind a stored summary the same way.
Everything else imports modules directly.
"""

from __future__ import annotations

from tracemerge.lazy import lazy_names

# name -> the module that defines it
_HOME = {
    "NO_MAP": "tracemerge.metrics_map",
    "load_metrics_map": "tracemerge.metrics_map",
    "PhaseOptions": "tracemerge.phases.rules",
    "resolve": "tracemerge.phases.rules",
    "progress_bar": "tracemerge.progress",
    "format_alignment": "tracemerge.report",
    "format_found": "tracemerge.report",
    "format_outcome": "tracemerge.report",
    "json_bytes": "tracemerge.report",
    "Selection": "tracemerge.select",
    "parse_duration": "tracemerge.select",
    "parse_ranks": "tracemerge.select",
    "parse_roles": "tracemerge.select",
    "parse_where": "tracemerge.select",
    "parse_window": "tracemerge.select",
    "AlignOptions": "tracemerge.clock",
    "load_offsets": "tracemerge.clock",
    "parse_offset": "tracemerge.clock",
    "ray_executor": "tracemerge.executors",
    "usable_cores": "tracemerge.executors",
    "write_whole": "tracemerge.output",
    "format_summary": "tracemerge.phases.step_summary",
    "per_step": "tracemerge.phases.step_summary",
    "compare": "tracemerge.diff",
    "format_diff": "tracemerge.diff",
    "format_gate": "tracemerge.diff",
    "parse_threshold": "tracemerge.diff",
    "read_numbers": "tracemerge.diff",
    "regressions": "tracemerge.diff",
    "merge": "tracemerge.pipeline",
    "check_kind": "tracemerge.split",
    "check_targets": "tracemerge.scrape",
    "scrape": "tracemerge.scrape",
    "stop_on_signals": "tracemerge.scrape",
    "summarize": "tracemerge.summarize",
    "NOT_A_SUMMARY": "tracemerge.viewer.damage",
    "Unreadable": "tracemerge.viewer.damage",
    "stored_summary": "tracemerge.viewer.damage",
    "WRITERS": "tracemerge.writers",
}

__all__ = sorted(_HOME)


__getattr__ = lazy_names(__name__, globals(), _HOME)
