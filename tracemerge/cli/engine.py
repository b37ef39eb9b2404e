"""The merge engine as the command line reaches it: loaded when a command runs, not before.

``tracemerge --version``, ``--help`` and a usage error need only the command line's own options;
importing the readers, numpy, protobuf and the writers would triple their start-up time. The
command line (``cli``, ``cli_diff``, ``cli_tools``) therefore reaches everything beyond its own
options through this one table: the engine's entry points, the option parsers, the report's
formatting and ``diff``; each module is imported the first time one of its names is used.
Everything else imports modules directly: library code never goes through this table.
"""

from __future__ import annotations

from tracemerge.core.lazy import lazy_names

# name -> the module that defines it
_HOME = {
    "NO_MAP": "tracemerge.metrics_map",
    "load_metrics_map": "tracemerge.metrics_map",
    "PhaseOptions": "tracemerge.phases.rules",
    "resolve": "tracemerge.phases.rules",
    "progress_bar": "tracemerge.run.progress",
    "format_alignment": "tracemerge.report.run_report",
    "format_found": "tracemerge.report.run_report",
    "format_outcome": "tracemerge.report.run_report",
    "format_runs": "tracemerge.report.run_report",
    "check_choice": "tracemerge.clock.runs",
    "check_pair": "tracemerge.clock.runs",
    "held": "tracemerge.clock.runs",
    "chosen_number": "tracemerge.clock.runs",
    "json_bytes": "tracemerge.report.run_report",
    "Selection": "tracemerge.select",
    "parse_duration": "tracemerge.core.units",
    "parse_ranks": "tracemerge.select",
    "parse_roles": "tracemerge.select",
    "parse_where": "tracemerge.select",
    "parse_window": "tracemerge.select",
    "AlignOptions": "tracemerge.clock",
    "load_offsets": "tracemerge.clock",
    "parse_offset": "tracemerge.clock",
    "ray_executor": "tracemerge.run.executors",
    "usable_cores": "tracemerge.run.executors",
    "write_whole": "tracemerge.run.output",
    "format_summary": "tracemerge.analysis.steps",
    "per_step": "tracemerge.analysis.steps",
    "compare": "tracemerge.compare.diff",
    "format_diff": "tracemerge.compare.diff",
    "format_gate": "tracemerge.compare.diff",
    "parse_threshold": "tracemerge.compare.diff",
    "read_numbers": "tracemerge.compare.diff",
    "regressions": "tracemerge.compare.diff",
    "merge": "tracemerge.pipeline",
    "merge_with": "tracemerge.pipeline",
    "MergeOptions": "tracemerge.pipeline",
    "check_kind": "tracemerge.run.split",
    "check_targets": "tracemerge.scrape",
    "scrape": "tracemerge.scrape",
    "stop_on_signals": "tracemerge.scrape",
    "summarize": "tracemerge.analysis.summarize",
    "summarize_each": "tracemerge.analysis.summarize",
    "RunReport": "tracemerge.report.run_report",
    "checked": "tracemerge.analysis.summary_model",
    "NotASummary": "tracemerge.analysis.summary_model",
    "kept": "tracemerge.analysis.summary_model",
    "summary_numbers": "tracemerge.analysis.summarize",
    "numbers_of": "tracemerge.compare.inputs",
    "NoSummary": "tracemerge.compare.inputs",
    "comparable": "tracemerge.compare.inputs",
    "shown": "tracemerge.core.errors",
    "gate": "tracemerge.compare.diff",
    "NOT_A_SUMMARY": "tracemerge.readback.damage",
    "Unreadable": "tracemerge.readback.damage",
    "stored_summary": "tracemerge.readback.damage",
    "WRITERS": "tracemerge.writers",
    "is_archive": "tracemerge.discovery.archives",
}

__all__ = sorted(_HOME)


__getattr__ = lazy_names(__name__, globals(), _HOME, freeze=True)
