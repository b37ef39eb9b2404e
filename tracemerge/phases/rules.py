"""Phase rules: which span names are which phase of an RL step, and which delimit steps.

Phase rules turn event names into phases (``generate``, ``old_log_prob``, ``update_actor``, …)
and step markers. Every preset's rules are applied while the files are read (as marks, see
:mod:`tracemerge.evidence.anchors`); :mod:`tracemerge.phases` then chooses, per process, the preset whose
phases occur most, unless one is named with ``--phases``. A rules file is TOML::

    [[phase]]
    match = "^rollout_"        # a regular expression searched in the event name
    name = "generate"          # the phase; omitted: the event name itself
    role = "rollout"           # optional: only in this role's processes

    [[step]]
    match = "^train_step"      # spans that delimit steps
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import msgspec

from tracemerge.core.tomlfile import read_toml
from tracemerge.evidence.anchors import TORCH_STEPS, VERL_PRESET, phase_tag, preset_sync_tag, step_tag

# Spans that are one numbered step each: torch's ``ProfilerStep#N`` rows, and a step annotated
# with its number (``record_function(f"step{n}")``, verl's ``step<S>`` as a span's name).
TORCH_STEP = re.compile(r"^(?:ProfilerStep#|step_?)(\d+)$")


class Rule(msgspec.Struct, frozen=True):
    pattern: re.Pattern[str]
    phase: str | None  # None: the event's own name
    role: str | None = None
    exact: str | None = None  # the one name the pattern matches, when it is written as that name


class Preset(msgspec.Struct, frozen=True):
    name: str
    phases: tuple[Rule, ...]
    steps: tuple[Rule, ...] = ()
    # Spans that start at one instant in every process recording them: clock evidence in a run
    # whose phases are this preset's, as ``--sync NAME`` is (each name paired only with itself).
    sync: tuple[Rule, ...] = ()


def _exact(names: dict[str, str], role: str | None = None) -> tuple[Rule, ...]:
    return tuple(Rule(re.compile(f"^{re.escape(name)}$"), phase, role, name) for name, phase in names.items())


VERL = Preset(
    VERL_PRESET,
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
            "generate_sequences": "generate",
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
# AReaL's weight updates, recorded by every role at each update: ``weight_sync`` and
# ``update_weights`` spans, alone or under a scope prefix (the trainer's ``train.update_weights``),
# and the training engines' ``<engine>_engine.update_weights_from_distributed`` (``_from_disk``) on
# every actor rank. An update starts at one instant in every process (the trainer ranks enter it
# together after the same optimizer step, the inference side is paused for it); it ends when each
# process has its own part of the weights (rank 0 also waits for the inference servers), so the
# start is the evidence, as for --sync. A name is paired only with the same name elsewhere (k-th
# with k-th): the trainer's scope opens before the engine call inside it, not at one instant.
_WEIGHT_UPDATES = (
    Rule(re.compile(r"(^|\.)(weight_sync|update_weights)$"), None),
    Rule(re.compile(r"_engine\.update_weights_from_(distributed|disk)$"), None),
)
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
    sync=_WEIGHT_UPDATES,
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


class PhaseOptions(msgspec.Struct, frozen=True):
    """Phase rules noted while reading (every preset: the best is chosen), and ``--steps``."""

    presets: tuple[Preset, ...] = tuple(PRESETS.values())
    steps: frozenset[int] | None = None
    # The first (warm-up) step counted in means and gates as the others are (--keep-warmup).
    keep_warmup: bool = False


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


def resolve(choice: str | None) -> tuple[Preset, ...]:
    """``--phases``: a preset name, ``auto`` or None (every preset, the best chosen later) or a rules file."""
    if choice is None or choice == AUTO:
        return tuple(PRESETS.values())
    if choice in PRESETS:
        return (PRESETS[choice],)
    path = Path(choice)
    if path.suffix == ".toml" or path.exists():
        return (load_rules(path),)
    raise ValueError(f"--phases: {choice!r} is neither a preset ({', '.join([AUTO, *PRESETS])}) nor a rules file")


class PhaseRules:
    """Event name -> the phase, step and sync tags every preset gives it (applied while reading).

    Role filters are applied later, when the marks are known to belong to a process; so is
    whether a preset's sync spans are evidence (:func:`tracemerge.evidence.anchors.sync_presets`)."""

    def __init__(self, presets: Iterable[Preset]) -> None:
        self.presets = tuple(presets)
        self._first = [(p.name, _FirstMatch(p.phases), _FirstMatch(p.steps)) for p in self.presets]
        self._sync = [(p.name, _FirstMatch(p.sync)) for p in self.presets if p.sync]

    def __call__(self, name: str) -> tuple[str, ...]:
        tags = []
        found = TORCH_STEP.match(name)
        if found:
            tags.append(step_tag(TORCH_STEPS, found.group(1)))
        for preset, phases, steps in self._first:
            rule = phases(name)
            if rule is not None:
                tags.append(phase_tag(preset, (rule.phase or name) + _role_suffix(rule.role)))
            rule = steps(name)
            if rule is not None:
                tags.append(step_tag(preset, _role_suffix(rule.role)))
        for preset, sync in self._sync:
            if sync(name) is not None:
                tags.append(preset_sync_tag(preset, name))
        return tuple(tags)


class _FirstMatch:
    """The first of ``rules`` whose pattern is found in a name: the rules written as one exact
    name are looked up (most names match no rule, and every rule used to be searched)."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules = rules
        self.exact: dict[str, int] = {}
        for n, rule in enumerate(rules):
            if rule.exact is not None:
                self.exact.setdefault(rule.exact, n)
        self.searched = [(n, rule.pattern) for n, rule in enumerate(rules) if rule.exact is None]

    def __call__(self, name: str) -> Rule | None:
        first = self.exact.get(name, len(self.rules))
        for n, pattern in self.searched:
            if n > first:
                break
            if pattern.search(name):
                return self.rules[n]
        return self.rules[first] if first < len(self.rules) else None


def _role_suffix(role: str | None) -> str:
    return f"\t{role}" if role else ""
