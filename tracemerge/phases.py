"""RL phases: which span names are which phase of a step, and where each step's time went.

Phase rules turn event names into phases (``generate``, ``old_log_prob``, ``update_actor``, …)
and step markers. Every preset's rules are applied while the files are read (as marks, see
:mod:`tracemerge.anchors`); the preset whose phases occur most is then chosen, unless one is
named with ``--phases``. A rules file is TOML::

    [[phase]]
    match = "^rollout_"        # a regular expression searched in the event name
    name = "generate"          # the phase; omitted: the event name itself
    role = "rollout"           # optional: only in this role's processes

    [[step]]
    match = "^train_step"      # spans that delimit steps

Steps per process come from its step markers (``ProfilerStep#N`` in any torch trace, or the
preset's); a process without any takes the job's steps (the union of the others' step N); a run
without any step marker counts a step from each start of the phase a process runs first.
Within a step, time belongs to the innermost phase running (a phase nested in another takes
its time from it) and the rest is ``idle``: per process and step, phase times plus idle time
equal the step's time, to the nanosecond.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tracemerge.anchors import PHASE, STEP, phase_tag, step_tag
from tracemerge.model import Event, Identity, Kind, ThreadInfo
from tracemerge.tomlfile import read_toml

IDLE = "idle"
MSTX = "mstx"  # Ascend MSTX ranges: phases named after the range (noted by the Ascend readers)
TORCH_STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    phase: str | None  # None: the event's own name
    role: str | None = None


@dataclass(frozen=True)
class Preset:
    name: str
    phases: tuple[Rule, ...]
    steps: tuple[Rule, ...] = ()


def _exact(names: dict[str, str], role: str | None = None) -> tuple[Rule, ...]:
    return tuple(Rule(re.compile(f"^{re.escape(name)}$"), phase, role) for name, phase in names.items())


VERL = Preset(
    "verl",
    _exact(
        {
            # trainer timers (ray_trainer.py marked_timer names)
            "gen": "generate",
            "reward": "reward",
            "old_log_prob": "old_log_prob",
            "ref": "ref",
            "values": "values",
            "adv": "adv",
            "update_critic": "update_critic",
            "update_actor": "update_actor",
            "update_weights": "update_weights",
            "testing": "testing",
            "save_checkpoint": "save_checkpoint",
            # worker profiler annotations
            "rollout_generate": "generate",
            "actor_compute_log_prob": "old_log_prob",
            "ref_compute_log_prob": "ref",
            "compute_values": "values",
            "critic_update": "update_critic",
            "actor_update": "update_actor",
            "compute_rm_score": "reward",
        }
    ),
    _exact({"step": "", "train_batch": ""}),
)
_ENGINE_WEIGHTS = (Rule(re.compile(r"_engine\.update_weights_from_(distributed|disk)$"), "update_weights"),)
AREAL = Preset(
    "areal",
    _exact(
        {
            "train.rollout": "generate",
            "train.compute_values": "values",
            "train.ref_logp": "ref",
            "train.teacher_logp": "teacher",
            "train.recompute_logp": "old_log_prob",
            "train.compute_advantage": "adv",
            "train.ppo_update": "update_actor",
            "train.critic_ppo_update": "update_critic",
            "train.update_weights": "update_weights",
            "train.save": "save_checkpoint",
            "train.checkpoint": "save_checkpoint",
            "train.eval": "eval",
            "ppo_actor.compute_logp": "old_log_prob",
            "ppo_actor.compute_advantages": "adv",
            "ppo_actor.ppo_update": "update_actor",
            "ppo_critic.compute_values": "values",
            "ppo_critic.ppo_update": "update_critic",
            "rollout_controller.rollout_batch": "generate",
            "workflow_executor.rollout_batch": "generate",
        }
    )
    + _ENGINE_WEIGHTS,
)
SKYRL = Preset(
    "skyrl",
    _exact(
        {
            "generate": "generate",
            "fwd_logprobs_values_reward": "fwd_logprobs_values_reward",
            "train_critic_and_policy": "train_critic_and_policy",
            "sync_weights": "sync_weights",
            "eval": "eval",
        }
    ),
    _exact({"step": ""}),
)
PRESETS = {p.name: p for p in (VERL, AREAL, SKYRL)}
AUTO = "auto"


@dataclass(frozen=True)
class PhaseOptions:
    """Phase rules noted while reading (every preset: the best is chosen), and ``--steps``."""

    presets: tuple[Preset, ...] = tuple(PRESETS.values())
    steps: frozenset[int] | None = None


AUTO_PHASES = PhaseOptions()


def load_rules(path: Path) -> Preset:
    """A user rules file (see the module docstring); raises ValueError naming the file and rule."""
    content = read_toml(path)
    rules: dict[str, list[Rule]] = {"phase": [], "step": []}
    for kind in rules:
        entries = content.get(kind, [])
        if type(entries) is not list:
            raise ValueError(f"{path}: [[{kind}]] must be a list of tables")
        for n, entry in enumerate(entries, 1):
            if type(entry) is not dict or type(entry.get("match")) is not str:
                raise ValueError(f'{path}: {kind} rule {n} needs match = "regex"')
            try:
                pattern = re.compile(entry["match"])
            except re.error as exc:
                raise ValueError(f"{path}: {kind} rule {n}: bad regex ({exc})") from None
            name, role = entry.get("name"), entry.get("role")
            if (name is not None and type(name) is not str) or (role is not None and type(role) is not str):
                raise ValueError(f"{path}: {kind} rule {n}: name and role must be strings")
            rules[kind].append(Rule(pattern, name if kind == "phase" else "", role))
    if not rules["phase"]:
        raise ValueError(f"{path}: no [[phase]] rule")
    return Preset(path.stem, tuple(rules["phase"]), tuple(rules["step"]))


def resolve(choice: str) -> tuple[Preset, ...]:
    """``--phases``: a preset name, ``auto`` (every preset, the best chosen later) or a rules file."""
    if choice == AUTO:
        return tuple(PRESETS.values())
    if choice in PRESETS:
        return (PRESETS[choice],)
    path = Path(choice)
    if path.suffix == ".toml" or path.exists():
        return (load_rules(path),)
    raise ValueError(f"--phases: {choice!r} is neither a preset ({', '.join([AUTO, *PRESETS])}) nor a rules file")


class PhaseRules:
    """Event name -> the phase and step tags every preset gives it (applied while reading).

    Role filters are applied later, when the marks are known to belong to a process."""

    def __init__(self, presets: Iterable[Preset]) -> None:
        self.presets = tuple(presets)

    def __call__(self, name: str) -> tuple[str, ...]:
        tags = []
        found = TORCH_STEP.match(name)
        if found:
            tags.append(step_tag("torch", found.group(1)))
        for preset in self.presets:
            for rule in preset.phases:
                if rule.pattern.search(name):
                    tags.append(phase_tag(preset.name, (rule.phase or name) + _role_suffix(rule.role)))
                    break
            for rule in preset.steps:
                if rule.pattern.search(name):
                    tags.append(step_tag(preset.name, _role_suffix(rule.role)))
                    break
        return tuple(tags)


def _role_suffix(role: str | None) -> str:
    return f"\t{role}" if role else ""


# -- deriving the steps and phases -------------------------------------------------------------


class HasMarks(Protocol):
    path: Path
    marks: dict[Identity, dict[str, list[tuple[int, int]]]]


@dataclass
class Occurrence:
    phase: str
    start: int
    end: int
    step: int | None = None  # the step its start falls in


@dataclass
class Step:
    step: int
    start: int
    end: int
    phases: Counter[str] = field(default_factory=Counter)  # ns per phase (innermost wins)
    idle: int = 0

    @property
    def dur(self) -> int:
        return self.end - self.start


@dataclass
class ProcessPhases:
    preset: str
    occurrences: list[Occurrence] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    idle: list[tuple[int, int, int]] = field(default_factory=list)  # (step, start, end)


@dataclass
class PipelineSlice:
    phase: str
    step: int
    start: int
    end: int
    slowest_rank: int | None
    spread_ns: int
    ranks: int


@dataclass
class StepScalars:
    """A file of step-keyed values (tracker scalars): step -> name -> value."""

    path: Path
    values: dict[int, dict[str, float]]
    dropped: Counter[str] = field(default_factory=Counter)


@dataclass
class PhaseModel:
    preset: str  # the presets used, as the processes chose them ("" when no phase was found)
    processes: dict[Identity, ProcessPhases]
    steps: list[tuple[int, int, int]]  # job steps: (step, start, end)
    roles: dict[str, list[PipelineSlice]]
    left_out: Counter[str] = field(default_factory=Counter)  # --steps
    found_steps: list[int] = field(default_factory=list)  # every step, kept by --steps or not
    scalars: dict[int, dict[str, float]] = field(default_factory=dict)  # of the job steps, by step

    @property
    def empty(self) -> bool:
        return not self.processes


UNPLACED_SCALARS = "tracker scalars of steps the merged trace has no step for"
REPEATED_SCALARS = "tracker scalar given again for one step (the first kept)"


def attach_scalars(model: PhaseModel, files: Iterable[StepScalars], dropped: Counter[str]) -> None:
    """Give each job step the tracker scalars logged for it; count the rest in ``dropped``."""
    steps = {n for n, _, _ in model.steps}
    for found in files:
        for step, values in sorted(found.values.items()):
            if step not in steps:
                dropped[UNPLACED_SCALARS] += len(values)
                continue
            kept = model.scalars.setdefault(step, {})
            for name, value in values.items():
                if name in kept:
                    dropped[REPEATED_SCALARS] += 1
                else:
                    kept[name] = value


def derive(
    scans: Iterable[HasMarks],
    offsets: dict[Path, int],
    presets: tuple[Preset, ...],
    steps_kept: frozenset[int] | None = None,
    keep: Callable[[Identity], bool] | None = None,
) -> PhaseModel:
    """Phases and steps of every process ``keep`` keeps, on the aligned timeline (file time +
    its offset)."""
    phase_marks: dict[Identity, dict[str, list[tuple[str, int, int]]]] = defaultdict(lambda: defaultdict(list))
    step_marks: dict[Identity, dict[str, list[tuple[str, int, int]]]] = defaultdict(lambda: defaultdict(list))
    for s in scans:
        shift = offsets.get(s.path, 0)
        for ident, tags in s.marks.items():
            if keep is not None and not keep(ident):
                continue
            for tag, found in tags.items():
                kind, _, rest = tag.partition(" ")
                if kind not in (PHASE, STEP):
                    continue
                preset, _, what = rest.partition("\t")
                what, _, role = what.partition("\t")
                if role and role != ident.role:
                    continue
                target = phase_marks if kind == PHASE else step_marks
                target[ident][preset].extend((what, a + shift, b + shift) for a, b in found)
    model = PhaseModel("", {}, [], {})
    for ident, by_preset in phase_marks.items():
        preset = _choose(by_preset, presets)
        found = sorted(by_preset.get(preset, ()), key=lambda o: (o[1], -o[2], o[0]))
        if found:
            occurrences = [Occurrence(name, a, b) for name, a, b in found]
            model.processes[ident] = ProcessPhases(preset, occurrences)
    model.preset = ", ".join(sorted({p.preset for p in model.processes.values()}))
    own_steps = {ident: _own_steps(step_marks.get(ident, {}), p.preset) for ident, p in model.processes.items()}
    job = _job_steps([steps for steps in own_steps.values() if steps])
    found: set[int] = set()
    for ident, proc in model.processes.items():
        windows = own_steps[ident] or job or _cycle_steps(proc.occurrences)
        found.update(n for n, _, _ in windows)
        if steps_kept is not None:
            kept = [w for w in windows if w[0] in steps_kept]
            left = [o for o in proc.occurrences if not any(a <= o.start < b for _, a, b in kept)]
            model.left_out["phase slices of steps outside --steps"] += len(left)
            proc.occurrences = [o for o in proc.occurrences if o not in left]
            windows = kept
        _account(proc, windows)
    job = _job_steps([[(st.step, st.start, st.end) for st in p.steps] for p in model.processes.values()])
    model.steps = job
    model.roles = _pipeline(model.processes)
    model.found_steps = sorted(found)
    if steps_kept is not None and not model.steps:
        model.processes.clear()  # nothing of the run is kept
    return model


def _choose(by_preset: dict[str, list], presets: tuple[Preset, ...]) -> str:
    """A process's preset: the one whose phases occur most in it (the first named wins ties);
    its MSTX ranges failing that."""
    counts = Counter({preset: len(found) for preset, found in by_preset.items()})
    ranked = [p.name for p in presets if counts[p.name]]
    if ranked:
        return max(ranked, key=lambda name: (counts[name], -ranked.index(name)))
    return MSTX if counts[MSTX] else ""


def _own_steps(by_preset: dict[str, list[tuple[str, int, int]]], preset: str) -> list[tuple[int, int, int]]:
    """A process's steps from its markers: torch's numbered ProfilerStep#N first, else the preset's."""
    torch = sorted((int(n), a, b) for n, a, b in by_preset.get("torch", ()))
    if torch:
        return torch
    found = sorted((a, b) for _, a, b in by_preset.get(preset, ()))
    return [(n, a, b) for n, (a, b) in enumerate(_outermost(found))]


def _outermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and a < out[-1][1]:
            continue  # nested in (or overlapping) the previous step marker
        out.append((a, b))
    return out


def _job_steps(per_process: list[list[tuple[int, int, int]]]) -> list[tuple[int, int, int]]:
    spans: dict[int, tuple[int, int]] = {}
    for steps in per_process:
        for n, a, b in steps:
            lo, hi = spans.get(n, (a, b))
            spans[n] = (min(lo, a), max(hi, b))
    return [(n, a, b) for n, (a, b) in sorted(spans.items())]


def _cycle_steps(occurrences: list[Occurrence]) -> list[tuple[int, int, int]]:
    """No step marker anywhere: a step starts at each start of the phase the process runs first."""
    first = occurrences[0].phase
    starts = [o.start for o in occurrences if o.phase == first]
    end = max(o.end for o in occurrences)
    return [(n, a, starts[n + 1] if n + 1 < len(starts) else end) for n, a in enumerate(starts)]


def _account(proc: ProcessPhases, windows: list[tuple[int, int, int]]) -> None:
    """Split each step window between the innermost running phase and idle time.

    A sweep over the window's boundaries with a heap of the running phases, innermost (latest
    started, then shortest) on top: O(n log n) in the phases, however many steps there are.
    """
    occurrences = sorted(proc.occurrences, key=lambda o: (o.start, -o.end))
    starts = [o.start for o in occurrences]
    longest = max((o.end - o.start for o in occurrences), default=0)
    by_start = sorted(windows, key=lambda w: w[1])
    window_starts = [a for _, a, _ in by_start]
    for o in occurrences:
        k = bisect.bisect_right(window_starts, o.start) - 1
        o.step = by_start[k][0] if k >= 0 and o.start < by_start[k][2] else None
    for n, a, b in windows:
        step = Step(n, a, b)
        lo_index = bisect.bisect_left(starts, a - longest)
        inside = [o for o in occurrences[lo_index : bisect.bisect_left(starts, b)] if o.end > a]
        points = sorted({a, b, *(max(o.start, a) for o in inside), *(min(o.end, b) for o in inside)})
        running: list[tuple[int, int, int]] = []  # (-start, end, index): the innermost first
        next_in = 0
        for lo, hi in itertools.pairwise(points):
            while next_in < len(inside) and max(inside[next_in].start, a) <= lo:
                o = inside[next_in]
                heapq.heappush(running, (-o.start, o.end, next_in))
                next_in += 1
            while running and running[0][1] <= lo:  # ended before this piece: gone
                heapq.heappop(running)
            if running:
                step.phases[inside[running[0][2]].phase] += hi - lo
            else:
                step.idle += hi - lo
                if proc.idle and proc.idle[-1][0] == n and proc.idle[-1][2] == lo:
                    proc.idle[-1] = (n, proc.idle[-1][1], hi)
                else:
                    proc.idle.append((n, lo, hi))
        proc.steps.append(step)


def _pipeline(processes: dict[Identity, ProcessPhases]) -> dict[str, list[PipelineSlice]]:
    """Per role, per step and phase: first start to last end across the role's ranks."""
    groups: dict[tuple[str, int, str], dict[Identity, list[Occurrence]]] = defaultdict(lambda: defaultdict(list))
    for ident, proc in processes.items():
        for o in proc.occurrences:
            if o.step is not None:
                groups[(ident.role, o.step, o.phase)][ident].append(o)
    roles: dict[str, list[PipelineSlice]] = defaultdict(list)
    for (role, step, phase), by_rank in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        starts = [o.start for found in by_rank.values() for o in found]
        ends = [o.end for found in by_rank.values() for o in found]
        durations = {ident: sum(o.end - o.start for o in found) for ident, found in by_rank.items()}
        slowest = max(durations, key=lambda i: (durations[i], -(i.rank or 0)))
        roles[role].append(
            PipelineSlice(
                phase,
                step,
                min(starts),
                max(ends),
                slowest.rank,
                max(durations.values()) - min(durations.values()),
                len(by_rank),
            )
        )
    return dict(roles)


# -- the summary ------------------------------------------------------------------------------


def summary(model: PhaseModel, labels: dict[Identity, str] | None = None) -> dict:
    """Per role and phase: total time, share of step time, mean/p50/p90/max across ranks (of the
    per-rank totals), the slowest rank, and the idle fraction; the per-rank, per-step accounting."""
    out: dict = {"preset": model.preset, "steps": [s for s, _, _ in model.steps], "roles": {}, "processes": []}
    by_role: dict[str, dict[Identity, ProcessPhases]] = defaultdict(dict)
    for ident, proc in model.processes.items():
        by_role[ident.role][ident] = proc
        out["processes"].append(
            {
                "process": (labels or {}).get(ident, ident.label),
                "role": ident.role,
                "rank": ident.rank,
                "preset": proc.preset,
                "steps": [
                    {"step": st.step, "dur_ns": st.dur, "idle_ns": st.idle, "phases_ns": dict(st.phases)}
                    for st in proc.steps
                ],
            }
        )
    for role, procs in sorted(by_role.items()):
        step_total = sum(st.dur for p in procs.values() for st in p.steps)
        idle_total = sum(st.idle for p in procs.values() for st in p.steps)
        names = sorted({ph for p in procs.values() for st in p.steps for ph in st.phases})
        phases = {}
        for name in names:
            per_rank = {ident: sum(st.phases.get(name, 0) for st in p.steps) for ident, p in procs.items()}
            values = sorted(per_rank.values())
            slowest = max(per_rank, key=lambda i: (per_rank[i], -(i.rank or 0)))
            phases[name] = {
                "total_ns": sum(values),
                "share": sum(values) / step_total if step_total else 0.0,
                "mean_ns": round(statistics.fmean(values)),
                "p50_ns": _quantile(values, 0.5),
                "p90_ns": _quantile(values, 0.9),
                "max_ns": values[-1],
                "slowest_rank": slowest.rank,
            }
        out["roles"][role] = {
            "ranks": len(procs),
            "step_ns": step_total,
            "idle_ns": idle_total,
            "idle_fraction": idle_total / step_total if step_total else 0.0,
            "phases": phases,
        }
    return out


def _quantile(values: list[int], q: float) -> int:
    """Nearest-rank quantile of sorted ``values``."""
    rank = max(1, -(-len(values) * q // 1))
    return values[int(rank) - 1]


def format_summary(numbers: dict) -> str:
    """The terminal table of :func:`summary`."""
    from tracemerge.report import format_duration, format_table

    if not numbers["roles"]:
        return "phases: none found (name a preset or a rules file with --phases)"
    rows = [("role", "phase", "total", "share", "mean", "p50", "p90", "max", "slowest rank")]
    for role, r in numbers["roles"].items():
        for name, p in sorted(r["phases"].items(), key=lambda kv: -kv[1]["total_ns"]):
            rows.append(
                (
                    role or "-",
                    name,
                    format_duration(p["total_ns"]),
                    f"{100 * p['share']:.1f}%",
                    format_duration(p["mean_ns"]),
                    format_duration(p["p50_ns"]),
                    format_duration(p["p90_ns"]),
                    format_duration(p["max_ns"]),
                    "-" if p["slowest_rank"] is None else str(p["slowest_rank"]),
                )
            )
        rows.append(
            (
                role or "-",
                IDLE,
                format_duration(r["idle_ns"]),
                f"{100 * r['idle_fraction']:.1f}%",
                "",
                "",
                "",
                "",
                "",
            )
        )
    steps = numbers["steps"]
    head = f"phases ({numbers['preset']}), {len(steps)} step(s); per rank: totals over its steps"
    return head + "\n" + format_table(rows, left=frozenset({0, 1}))


# -- the derived tracks -----------------------------------------------------------------------

PIPELINE = Identity("", None, "Pipeline")  # the top-level group: job steps and per-role phases
PHASES_THREAD: tuple = ("phases",)
STEPS_THREAD: tuple = ("steps",)
SCALARS_THREAD: tuple = ("scalars",)
# Categories of what tracemerge derives (never an input's): "tracemerge*".
PHASE_CAT, STEP_CAT = "tracemerge.phase", "tracemerge.step"


def role_thread(role: str) -> tuple:
    return ("role", role)


def track_infos(model: PhaseModel, role_order: Callable[[str], tuple]) -> dict[Identity, dict[tuple, ThreadInfo]]:
    """The derived tracks: ``Phases`` first in each process, ``Steps`` then one per role in Pipeline."""
    out: dict[Identity, dict[tuple, ThreadInfo]] = {
        ident: {PHASES_THREAD: ThreadInfo("Phases", (-1,))} for ident in model.processes
    }
    if model.processes:
        out[PIPELINE] = {STEPS_THREAD: ThreadInfo("Steps", (-1, (), ""))}
        for role in model.roles:
            out[PIPELINE][role_thread(role)] = ThreadInfo(role or "(no role)", (0, role_order(role), role))
    return out


def scalar_series(model: PhaseModel) -> dict[Identity, dict[tuple, str]]:
    """The derived counter tracks: one per tracker scalar, in the Pipeline group."""
    names = sorted({name for values in model.scalars.values() for name in values})
    return {PIPELINE: {(SCALARS_THREAD, name): "" for name in names}} if names else {}


def events(model: PhaseModel) -> Iterator[Event]:
    """Every derived slice, on the aligned timeline; ``origin`` is the process's identity."""
    for ident, proc in model.processes.items():
        for o in proc.occurrences:
            args = {"step": o.step} if o.step is not None else None
            yield Event(Kind.SLICE, o.start, PHASES_THREAD, o.phase, PHASE_CAT, o.end - o.start, args, ident)
        for step, a, b in proc.idle:
            yield Event(Kind.SLICE, a, PHASES_THREAD, IDLE, PHASE_CAT, b - a, {"step": step}, ident)
    if not model.processes:
        return
    for step, a, b in model.steps:
        scalars = model.scalars.get(step, {})
        args = {"step": step, **scalars}
        yield Event(Kind.SLICE, a, STEPS_THREAD, f"step {step}", STEP_CAT, b - a, args, PIPELINE)
        for name, value in scalars.items():
            yield Event(Kind.COUNTER, a, SCALARS_THREAD, name, STEP_CAT, value=value, origin=PIPELINE)
    for role, slices in model.roles.items():
        for p in slices:
            args = {"step": p.step, "slowest_rank": p.slowest_rank, "spread_ns": p.spread_ns, "ranks": p.ranks}
            yield Event(Kind.SLICE, p.start, role_thread(role), p.phase, PHASE_CAT, p.end - p.start, args, PIPELINE)
