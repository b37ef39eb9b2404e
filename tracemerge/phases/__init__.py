"""Phase derivation, the stage after clock alignment: where each RL step's time went.

Input: the phase, step, collective and device marks each file's read noted (by the phase rules of
:mod:`tracemerge.phases.rules`: which span names are which phase, which delimit steps), and each
file's placement (its offset from :mod:`tracemerge.clock`). Output: a :class:`PhaseModel` (per
process its steps, phases and idle time; per role the phase spans of each step; who held each
step up (:mod:`~tracemerge.phases.holdups`), device time (:mod:`~tracemerge.phases.device_time`),
the busiest kernels (:mod:`~tracemerge.phases.kernels`) and the critical path
(:mod:`~tracemerge.phases.critical_path`)), and the Phases and Pipeline tracks drawn from it.

* :func:`derive` makes the model and :func:`attach_scalars` gives its steps the tracker scalars
  (:mod:`tracemerge.phases.derivation`);
* :func:`resolve`, :func:`load_rules` and :class:`PhaseOptions` choose the rules
  (:mod:`tracemerge.phases.rules`);
* :mod:`tracemerge.phases.tracks` draws the tracks.

The numbers and tables of the model's summary are a later stage's (:mod:`tracemerge.analysis.steps`),
and so is writing the tracks as one more unit of the output (:mod:`tracemerge.run.derived_unit`):
this stage encodes nothing.
"""

from __future__ import annotations

from tracemerge.core.lazy import lazy_names

# Public name -> the module defining it, imported the first time the name is used: the command
# line and the readers import the phase rules alone, and importing deriving and summarising with
# them would cost every start some 20 ms.
_HOME = {
    "PhaseModel": "tracemerge.phases.model",
    "PipelineSlice": "tracemerge.phases.model",
    "ProcessPhases": "tracemerge.phases.model",
    "StepScalars": "tracemerge.phases.model",
    "attach_scalars": "tracemerge.phases.derivation",
    "derive": "tracemerge.phases.derivation",
    "AUTO": "tracemerge.phases.rules",
    "AUTO_PHASES": "tracemerge.phases.rules",
    "PRESETS": "tracemerge.phases.rules",
    "PhaseOptions": "tracemerge.phases.rules",
    "PhaseRules": "tracemerge.phases.rules",
    "Preset": "tracemerge.phases.rules",
    "load_rules": "tracemerge.phases.rules",
    "resolve": "tracemerge.phases.rules",
}

__all__ = sorted(_HOME)


__getattr__ = lazy_names(__name__, globals(), _HOME)
