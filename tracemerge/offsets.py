"""Offsets given by hand: ``--offset ROLE[/RANK]=±DURATION`` and ``--offsets FILE``.

:mod:`tracemerge.clock` places the files these rules name (method ``manual``) before any evidence
is weighed; every other file of the run is placed as usual.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tracemerge.model import Identity
from tracemerge.select import parse_duration
from tracemerge.tomlfile import read_toml


@dataclass(frozen=True)
class ManualOffset:
    """``--offset ROLE[/RANK]=±DURATION``: shift the files of that role (and rank) by ``ns``."""

    role: str
    rank: int | None
    ns: int

    def matches(self, ident: Identity) -> bool:
        return ident.role == self.role and (self.rank is None or ident.rank == self.rank)

    def text(self) -> str:
        who = self.role if self.rank is None else f"{self.role}/{self.rank}"
        return f"{who}={self.ns:+d}ns"


def parse_offset(text: str) -> ManualOffset:
    """``"actor/3=+1.5ms"``, ``"rollout=-200us"`` or, for files without a role, ``"/3=1ms"``
    (a bare number is seconds)."""
    who, sep, amount = text.partition("=")
    role, _, rank = who.strip().partition("/")
    if not sep or not (role or rank) or (rank and not rank.strip().isdigit()):
        raise ValueError(f"not an offset: {text!r} (use ROLE[/RANK]=±DURATION, e.g. actor/3=+1.5ms)")
    return ManualOffset(role, int(rank) if rank else None, parse_duration(amount))


def load_offsets(path: Path) -> tuple[ManualOffset, ...]:
    """An offsets file: TOML with an ``[offsets]`` table of ``"ROLE[/RANK]" = "±DURATION"``."""
    content = read_toml(path)
    table = content.get("offsets")
    if type(table) is not dict:
        raise ValueError(f'{path}: no [offsets] table (e.g. [offsets] "actor/3" = "+1.5ms")')
    rules = []
    for who, amount in table.items():
        try:
            rules.append(parse_offset(f"{who}={amount}"))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    return tuple(rules)


def rule_for(identities: Iterable[Identity], rules: Iterable[ManualOffset]) -> ManualOffset | None:
    """The rule that places a file holding these processes: the most specific (role/rank over
    role), the last one of equals."""
    idents = tuple(identities)
    found = None
    for rule in rules:
        specific = found is None or rule.rank is not None or found.rank is None
        if specific and any(rule.matches(ident) for ident in idents):
            found = rule
    return found
