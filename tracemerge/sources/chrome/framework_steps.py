"""The step a framework gives a span in its args, in a Chrome-event JSON file.

AReaL's perf tracer writes ``global_step`` in every span's args (in JSON lines and in the Chrome
trace it saves), generic span logs a ``step``, an asynchronous rollout its weight ``version``
(:data:`~tracemerge.evidence.anchors.STEP_ARGS`). The phases count a span's step by it
(:mod:`tracemerge.phases.step_counting`) rather than by time windows. Only batches whose text
holds one of those keys are looked at (a search as each batch is decoded), so a Kineto trace, which writes
none, pays one search of its text
(:data:`~tracemerge.evidence.anchors.STEP_ARGS_KEY`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from tracemerge.core.model import OriginKey
from tracemerge.evidence.anchors import FRAMEWORK_STEPS, STEP_ARGS_KEY, framework_step, step_tag
from tracemerge.sources.chrome.values import hashable_id
from tracemerge.store.file_layout import FileLayout


class _StepArgs(msgspec.Struct, gc=False):
    global_step: Any = None
    step: Any = None
    version: Any = None


_ARGS = msgspec.json.Decoder(_StepArgs)


def note_framework_steps(batch: list, origin: OriginKey, layout: FileLayout, to_ns: Any) -> None:
    """Each complete event of ``batch`` whose args name its step, as a step mark on its thread
    (its times read by ``to_ns``; one that cannot be read is counted by the event reader)."""
    for e in batch:
        if getattr(e, "ph", None) != "X":
            continue
        args = getattr(e, "args", None)
        if isinstance(args, dict):
            values = tuple(args.get(k) for k in ("global_step", "step", "version"))
        elif args is not None and len(args) > 2 and STEP_ARGS_KEY.search(bytes(args)):
            try:
                found = _ARGS.decode(args)
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue
            values = (found.global_step, found.step, found.version)
        else:
            continue
        step = framework_step(values)
        if step is None:
            continue
        try:
            start, dur = to_ns(e.ts), to_ns(e.dur)
        except (ValueError, TypeError):
            continue
        if dur < 0:
            continue
        thread = (hashable_id(e.pid), hashable_id(e.tid))
        layout.mark(step_tag(FRAMEWORK_STEPS, str(step)), origin, thread, start, start + dur)
