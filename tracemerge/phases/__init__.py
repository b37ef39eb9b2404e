"""Phase derivation, the stage after clock alignment: where each RL step's time went.

Input: the phase, step, collective and device marks each file's read noted (by the phase rules of
:mod:`tracemerge.phases.rules`: which span names are which phase, which delimit steps), and each
file's placement (its offset from :mod:`tracemerge.clock`). Output: a :class:`PhaseModel` (per
process its steps, phases and idle time; per role the phase spans of each step; who held each
step up, device time and the critical path), the numbers and tables of its summary, and the
Phases and Pipeline tracks drawn from it.

* :func:`derive` makes the model and :func:`attach_scalars` gives its steps the tracker scalars
  (:mod:`tracemerge.phases.derivation`);
* :func:`resolve`, :func:`load_rules` and :class:`PhaseOptions` choose the rules
  (:mod:`tracemerge.phases.rules`);
* :func:`summary`, :func:`format_summary`, :func:`stored` and :func:`per_step` are its numbers as
  printed and as a merged trace keeps them (:mod:`tracemerge.phases.step_summary`);
* :mod:`tracemerge.phases.tracks` draws the tracks, and :mod:`tracemerge.phases.derived_unit`
  writes them as one more unit of the output (it takes the plan, so it is imported by itself).
"""

from tracemerge.phases.derivation import PhaseModel, PipelineSlice, ProcessPhases, StepScalars, attach_scalars, derive
from tracemerge.phases.rules import AUTO, AUTO_PHASES, PRESETS, PhaseOptions, PhaseRules, Preset, load_rules, resolve
from tracemerge.phases.step_summary import format_summary, per_step, stored, summary

__all__ = [
    "AUTO",
    "AUTO_PHASES",
    "PRESETS",
    "PhaseModel",
    "PhaseOptions",
    "PhaseRules",
    "PipelineSlice",
    "Preset",
    "ProcessPhases",
    "StepScalars",
    "attach_scalars",
    "derive",
    "format_summary",
    "load_rules",
    "per_step",
    "resolve",
    "stored",
    "summary",
]
