"""The marks a file's scan carries, per process: what its read noted (clock evidence, phase and
step marks, device activity, kept per thread) made into one set per process and tag, on the
file's own clock plus its origin, with what the file's name says of its steps and stages.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from tracemerge.core.model import Identity
from tracemerge.evidence.anchors import FRAMEWORK_STEPS, NAMED_STEPS, VERL_PRESET, phase_tag, step_tag
from tracemerge.evidence.span_union import SpanUnion
from tracemerge.naming.paths import PathFacts

_FRAMEWORK_STEP = step_tag(FRAMEWORK_STEPS, "")


def process_marks(
    marks: dict[tuple[str, Any, Any], Any], identity_of: Callable[[Any], Identity], origin_ns: int
) -> dict[Identity, dict[str, Any]]:
    """Per process and tag, the marks of one thread, in time order: a collective is noted once
    per rank, not once per level that records it. Whole operations follow one another on their
    thread, so the thread whose marks do not overlap and cover the most time is taken (Ascend's
    communication-op row rather than its parallel tasks on a stream, or its launch on the host).
    Device activity (a :class:`SpanUnion` per thread) is the union over the process's threads
    (its device streams); the spans a framework numbers a step of are every thread's, each
    kept (every thread's work of the step is the step's)."""
    best: dict[Identity, dict[str, Any]] = defaultdict(dict)
    scores: dict[tuple[Identity, str], tuple[bool, int]] = {}
    for (tag, origin, _thread), found in sorted(marks.items(), key=lambda kv: repr(kv[0])):
        ident = identity_of(origin)
        if type(found) is SpanUnion:
            mine = best[ident].get(tag)
            if mine is None:
                mine = best[ident][tag] = SpanUnion()
            mine.absorb(found, origin_ns)
            continue
        if tag.startswith(_FRAMEWORK_STEP):
            best[ident][tag] = sorted([*best[ident].get(tag, []), *((a + origin_ns, b + origin_ns) for a, b in found)])
            continue
        found = sorted((a + origin_ns, b + origin_ns) for a, b in found)
        sequential = all(found[n][0] >= found[n - 1][1] for n in range(1, len(found)))
        score = (sequential, sum(end - start for start, end in found))
        if score > scores.get((ident, tag), (False, -1)):
            best[ident][tag] = found
            scores[(ident, tag)] = score
    for tags in best.values():  # each union in one pair of columns (or one run on disk), which later stages share
        for found in tags.values():
            if type(found) is SpanUnion:
                found.settle()
    return dict(best)


def with_named_marks(
    marks: dict[Identity, dict[str, list[tuple[int, int]]]], facts: PathFacts, result: Any, origin_ns: int
) -> dict[Identity, dict[str, list[tuple[int, int]]]]:
    """What the file's name says of its time, as marks over its whole extent for each of its
    processes: the step (verl's ``step<S>``) and the phase a discrete-mode stage file is."""
    if (facts.step is None and facts.phase is None) or result.ts_min is None:
        return marks
    extent = [(result.ts_min + origin_ns, (result.ts_max or result.ts_min) + origin_ns)]
    # A read that only summarizes (Chrome JSON's first pass, a summary) walks no thread: then the
    # processes are those its tracks name.
    for ident in dict.fromkeys([*result.read, *result.threads, *result.counter_series]):
        tags = marks.setdefault(ident, {})
        if facts.step is not None:
            tags[step_tag(NAMED_STEPS, str(facts.step))] = list(extent)
        if facts.phase is not None:
            tags.setdefault(phase_tag(VERL_PRESET, facts.phase), []).extend(extent)
            tags[phase_tag(VERL_PRESET, facts.phase)].sort()
    return marks
