"""Evidence noted while each file is read: events that tie clocks together, and RL phases.

Three kinds of events are noted (as marks ``(start, end)`` under a tag), never read twice:

* collectives: an NCCL/HCCL device kernel or a gloo operation ends at one instant on every rank
  that takes part (tag ``"collective <level> <kind>"``, e.g. ``"collective device allreduce"``);
* named sync spans: start at one instant in every process that has them; those asked for with
  ``--sync NAME`` (tag ``"sync <name>"``) and a preset's own (AReaL's weight updates, tag
  ``"sync <preset>\t<name>"``), evidence only in a run whose phases are the preset's
  (:func:`sync_presets`);
* session spans: AReaL perf-tracer spans that name a ``session_id``, and the session records
  that give the same sessions' wall-clock times (tag ``"session <id> <name>"``).

Device activity is noted too, as a union of spans per device thread rather than every event
(:class:`tracemerge.evidence.span_union.SpanUnion`): kernels, copies and sets under ``"device compute"``, a
collective's device work under ``"device comm"`` (:mod:`tracemerge.phases.device_time`).

:mod:`tracemerge.clock` relates the files' clocks from these marks. Phase rules
(:mod:`tracemerge.phases.rules`) add ``"phase <preset>\t<phase>"`` and ``"step <preset>\t<step>"``
marks for :mod:`tracemerge.phases` to derive each RL step's phases from.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

COLLECTIVE, SYNC, SESSION, PHASE, STEP = "collective", "sync", "session", "phase", "step"
# Device activity (kernels, copies, sets on a device stream), noted as unions of spans per thread:
# collectives' device work (NCCL/HCCL) under DEVICE_COMM, all else under DEVICE_COMPUTE.
DEVICE = "device"
DEVICE_COMPUTE, DEVICE_COMM = "device compute", "device comm"
# A file keeps at most this many marks per tag and thread: plenty to align clocks; phases (one mark
# per occurrence) may have many more. Marks beyond are counted, never silently lost.
MAX_MARKS = 20_000
MAX_PHASE_MARKS = 1_000_000

# Collectives that need every rank's part before any rank can finish. A broadcast does not: a
# receiver may finish before another has started, so its end is no common instant.
_KIND = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|barrier|all_?to_?all", re.IGNORECASE)
# Collectives whose end is the end of the communication itself (not of an asynchronous launch).
_LEVELS = (("ncclDevKernel", "device"), ("ncclKernel", "device"), ("hcom_", "hccl"), ("gloo:", "host"))


def collective_tag(name: str) -> str | None:
    """``"collective <level> <kind>"`` for an event that ends a collective on every rank at once."""
    for prefix, level in _LEVELS:
        if name.startswith(prefix):
            found = _KIND.search(name)
            if found is None:
                return None
            return f"{COLLECTIVE} {level} {found.group(0).lower().replace('_', '')}"
    return None


def device_tag(name: str) -> str:
    """The device-activity tag of work named ``name`` on a device stream: a collective's device
    work (an NCCL or HCCL kernel or task, whatever its kind) is communication."""
    return DEVICE_COMM if name.startswith(("ncclDevKernel", "ncclKernel", "hcom_")) else DEVICE_COMPUTE


# Ascend tasks (the device work msprof draws on "Ascend Hardware" streams, TASK rows of a DB) by
# task type: HCCL's own (notifies, writes, copies between devices) are a collective's device work;
# stream synchronisation and profiler markers are no device work (as Kineto's cuda_sync is none).
ASCEND_HCCL_TASKS = frozenset({"Notify Wait", "Notify Record", "Write Value", "SDMA", "RDMA", "Reduce Inline"})
_ASCEND_SYNC_TASK = re.compile(r"^(EVENT_RECORD|EVENT_WAIT|EVENT_RESET|PLACE_HOLDER|PROFILING_(ENABLE|DISABLE))")
# Memory copies outside a collective (host-device DMA, the copy engine, an async memcpy): torch_npu
# counts them in no column but Free (its Computing is the compute tasks' union), and so does the
# breakdown.
_ASCEND_COPY_TASK = re.compile(r"^(PCIE_DMA|SDMA_SQE|MEMCPY)")


def ascend_task_tag(task_type: object, hccl: bool) -> str | None:
    """The device-activity tag of an Ascend task: communication for one of HCCL's, None for a
    synchronisation or profiler-marker task or a memory copy, compute for every other (AI Core,
    AI Vector Core, AI CPU, mixed, DSA)."""
    if hccl:
        return DEVICE_COMM
    if _ASCEND_SYNC_TASK.match(str(task_type)) or _ASCEND_COPY_TASK.match(str(task_type)):
        return None
    return DEVICE_COMPUTE


def session_tag(session_id: object, name: str) -> str:
    return f"{SESSION} {session_id} {name}"


def preset_sync_tag(preset: str, name: str) -> str:
    """A span a preset takes as sync evidence (``phase_rules.Preset.sync``), under its own name."""
    return f"{SYNC} {preset}\t{name}"


def sync_source(tag: str) -> tuple[str | None, str]:
    """(preset, span name) of a sync tag; the preset is None for a ``--sync`` name."""
    preset, tab, name = tag[len(SYNC) + 1 :].partition("\t")
    return (preset, name) if tab else (None, preset)


def sync_presets(processes: Iterable[tuple[Hashable, dict[str, list]]], presets: Sequence[str]) -> frozenset[str]:
    """The presets whose sync spans are evidence in a run: the one preset ``--phases`` names, or,
    of several (``auto``), each that a process's phases take as :mod:`tracemerge.phases` chooses
    (the preset whose phases occur most in it, the first named on a tie). ``processes`` are
    (process, marks) pairs; a process's files may each hold a part of its marks."""
    if len(presets) == 1:
        return frozenset(presets)
    counts: dict[Hashable, Counter[str]] = defaultdict(Counter)
    for process, tags in processes:
        for tag, found in tags.items():
            if tag.startswith(PHASE + " "):
                counts[process][tag[len(PHASE) + 1 :].partition("\t")[0]] += len(found)
    chosen = {preferred_preset(found, presets) for found in counts.values()}
    return frozenset(p for p in chosen if p is not None)


def preferred_preset(counts: Mapping[str, int], names: Sequence[str]) -> str | None:
    """Of the presets ``names``, the one whose phases occur most (``counts``: phase marks per
    preset in one process); the first named on a tie; None when none occurs."""
    ranked = [p for p in names if counts.get(p)]
    return max(ranked, key=lambda p: (counts[p], -ranked.index(p))) if ranked else None


# Ascend MSTX ranges: phases named after the range, noted under this name by the Ascend readers.
MSTX = "mstx"
# Numbered steps: torch's ProfilerStep#N rows, then the step a file's name gives (verl's
# ``step<S>``, a discrete-mode stage's phase noted under the verl preset): both before the
# presets' unnumbered step spans.
TORCH_STEPS, NAMED_STEPS = "torch", "name"
# The phase presets' names, in their order (:data:`tracemerge.phases.rules.PRESETS`): what the
# clock stage takes a preset's sync spans as evidence for when ``--phases`` names none. A
# discrete-mode stage file's phase is noted under verl's.
VERL_PRESET = "verl"
PRESET_NAMES = (VERL_PRESET, "areal", "skyrl")


def phase_tag(preset: str, phase: str) -> str:
    return f"{PHASE} {preset}\t{phase}"


def step_tag(preset: str, step: str) -> str:
    return f"{STEP} {preset}\t{step}"


# The step a framework gives a span in its args (AReaL's perf tracer: ``global_step`` on every
# span; generic span logs: ``step``; an asynchronous rollout's weight ``version``), in that order.
FRAMEWORK_STEPS = "args"
STEP_ARGS = ("global_step", "step", "version")
# Whether JSON text may hold one of them as a key (a cheap test before decoding any args).
STEP_ARGS_KEY = re.compile(rb'"(?:' + b"|".join(k.encode() for k in STEP_ARGS) + rb')"\s*:')


def framework_step(values: tuple[object, ...]) -> int | None:
    """The first of the :data:`STEP_ARGS` values (in their order) that is a whole number >= 0."""
    for value in values:
        if type(value) is int and value >= 0:
            return value
    return None


class Watch:
    """Says which event names are evidence: collectives, the ``--sync`` span names, and what
    ``phase_rules`` (name -> phase, step and a preset's sync tags) recognise."""

    def __init__(
        self, sync_names: Iterable[str] = (), phase_rules: Callable[[str], tuple[str, ...]] | None = None
    ) -> None:
        self.sync_names = frozenset(sync_names)
        self.phase_rules = phase_rules

    def __call__(self, name: str) -> tuple[str, ...]:
        tags: tuple[str, ...] = self.phase_rules(name) if self.phase_rules is not None else ()
        if name in self.sync_names:  # asked for by name: evidence once, whatever a preset says of it
            tags = (*(t for t in tags if not t.startswith(SYNC + " ")), f"{SYNC} {name}")
        found = collective_tag(name)
        return (*tags, found) if found is not None else tags
