"""Offsets given by hand: ``--offset ROLE[/RANK]=±DURATION`` and ``--offsets FILE``.

:mod:`tracemerge.clock` places the files these rules name (method ``manual``) before any evidence
is weighed; every other file of the run is placed as usual.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import msgspec

from tracemerge.core.model import Identity
from tracemerge.core.tomlfile import read_toml
from tracemerge.core.units import parse_duration

# Beyond this an offset moves times out of what a trace holds (int64 ns from 1970, to 2262).
MAX_OFFSET_NS = 100 * 365 * 86_400 * 10**9


class ManualOffset(msgspec.Struct, frozen=True):
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
    rank = rank.strip()
    if not sep or not (role or rank) or (rank and not (rank.isascii() and rank.isdigit() and len(rank) < 20)):
        raise ValueError(f"not an offset: {text!r} (use ROLE[/RANK]=±DURATION, e.g. actor/3=+1.5ms)")
    try:
        ns = parse_duration(amount)
    except ValueError as exc:
        raise ValueError(f"--offset {text!r}: {exc}") from None
    if abs(ns) > MAX_OFFSET_NS:
        raise ValueError(f"--offset {text!r}: more than 100 years either way")
    return ManualOffset(role, int(rank) if rank else None, ns)


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


def unmatched(rules: Iterable[ManualOffset], identities: Iterable[Identity]) -> list[ManualOffset]:
    """The rules that name no process of the run (a warning, not an error: an offsets file may
    serve several runs, and what a run holds is known only once it is read)."""
    idents = tuple(identities)
    return [rule for rule in rules if not any(rule.matches(ident) for ident in idents)]
