"""Where metric series go when their labels do not say it: ``--metrics-map FILE``.

A TOML file of ``[[process]]`` entries, first match wins::

    [[process]]
    match = {instance = "10.0.0.7:8000"}
    role = "rollout"
    rank = 0
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec

from tracemerge.core.model import as_rank
from tracemerge.core.tomlfile import read_toml


class Placement(msgspec.Struct, frozen=True):
    """A ``--metrics-map`` entry: series whose labels include ``labels`` belong to role/rank."""

    labels: tuple[tuple[str, str], ...]
    role: str | None
    rank: int | None


class MetricsMap(msgspec.Struct, frozen=True):
    placements: tuple[Placement, ...] = ()

    def place(self, labels: Mapping[str, str]) -> Placement | None:
        return next((p for p in self.placements if all(labels.get(k) == v for k, v in p.labels)), None)


NO_MAP = MetricsMap()


def load_metrics_map(path: Path) -> MetricsMap:
    """A metrics map: TOML with ``[[process]]`` entries of ``match = {label = "value"}``, ``role``
    and ``rank``; ValueError naming the file and entry when it is not one."""
    entries = read_toml(path).get("process")
    if type(entries) is not list or not entries:
        example = 'match = {instance = "10.0.0.7:8000"}, role = "rollout"'
        raise ValueError(f"{path}: no [[process]] entries (e.g. {example})")
    placements = []
    for n, entry in enumerate(entries, 1):
        match = entry.get("match") if type(entry) is dict else None
        role, rank = (entry.get("role"), entry.get("rank")) if type(entry) is dict else (None, None)
        if type(match) is not dict or not match or not all(type(v) is str for v in match.values()):
            raise ValueError(f'{path}: [[process]] entry {n}: match must be a table of label = "value"')
        if (role is not None and type(role) is not str) or (rank is not None and as_rank(rank) is None):
            raise ValueError(f"{path}: [[process]] entry {n}: role must be text and rank a number")
        if role is None and rank is None:
            raise ValueError(f"{path}: [[process]] entry {n}: names neither a role nor a rank")
        placements.append(Placement(tuple(sorted(match.items())), role, as_rank(rank)))
    return MetricsMap(tuple(placements))
