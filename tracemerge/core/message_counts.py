"""Counts per key, and apart from them the first few distinct messages of each key with their
counts: the bookkeeping under :class:`tracemerge.core.stats.Losses`, whose keys are statistics.

Counts add up whatever the messages say; messages are kept per key up to :data:`MESSAGES_KEPT`, so
that a file with a million bad lines costs a count, not a million messages.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

# Messages kept per key: the first ones, each with its count; the rest only counted.
MESSAGES_KEPT = 20

K = TypeVar("K", bound=Hashable)


class MessageCounts(Generic[K]):
    """A count per key, and the first :data:`MESSAGES_KEPT` distinct messages of each key (each
    with its count) in the order they were first recorded. Picklable: it crosses process and Ray
    boundaries."""

    __slots__ = ("counts", "listed", "messages")

    def __init__(self) -> None:
        self.counts: dict[K, int] = {}
        self.messages: dict[tuple[K, str], int] = {}
        self.listed: dict[K, int] = {}  # how many messages each key keeps

    def add(self, key: K, count: int = 1, message: str | None = None) -> None:
        """Counts ``count`` under ``key``, and under ``message`` too while the key keeps messages."""
        if count <= 0:
            return
        self.counts[key] = self.counts.get(key, 0) + count
        if message is not None:
            self._add_message(key, message, count)

    def _add_message(self, key: K, message: str, count: int) -> None:
        pair = (key, message)
        if pair in self.messages:
            self.messages[pair] += count
        elif self.listed.get(key, 0) < MESSAGES_KEPT:
            self.messages[pair] = count
            self.listed[key] = self.listed.get(key, 0) + 1

    def update(self, other: MessageCounts[K]) -> None:
        """Adds ``other``'s counts and its messages (as far as each key keeps messages)."""
        for key, count in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + count
        for (key, message), count in other.messages.items():
            self._add_message(key, message, count)

    def count(self, key: K) -> int:
        return self.counts.get(key, 0)

    def messages_of(self, key: K) -> dict[str, int]:
        """The messages kept for ``key``, each with its count, in the order first recorded."""
        return {message: n for (k, message), n in self.messages.items() if k is key}

    def by_message(self) -> dict[str, int]:
        """Every message kept, with its count, in the order first recorded."""
        out: dict[str, int] = {}
        for (_, message), count in self.messages.items():
            out[message] = out.get(message, 0) + count
        return out

    def __bool__(self) -> bool:
        return bool(self.counts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageCounts) and (self.counts, self.messages) == (other.counts, other.messages)

    def __getstate__(self) -> tuple[dict[K, int], dict[tuple[K, str], int], dict[K, int]]:
        return self.counts, self.messages, self.listed

    def __setstate__(self, state: tuple[dict[K, int], dict[tuple[K, str], int], dict[K, int]]) -> None:
        self.counts, self.messages, self.listed = state
