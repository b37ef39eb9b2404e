"""Rows kept as numpy columns, in blocks that spill to a file's run store.

A :class:`Block` holds the columns of a run of rows (their dtypes given by a :data:`Schema`) and,
for entries, the rows' bodies joined into one bytes object; :meth:`Block.spill` moves both to a
:class:`~tracemerge.store.spill.RunStore` as plain bytes, and :meth:`Block.columns` reads them back.
``Columnar`` is the list sources append tuples to: once :data:`SEAL_AT` have gathered, or at a
spill, they are sealed into a block (by the subclass's ``_block``), and small blocks held in
memory are joined so that the walk hands them on in large batches. Rows keep the order they were
appended in.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter

import numpy as np

from tracemerge.store.spill import RunStore

# Tuples gathered on a thread before they are sealed into a block (fewer: at the next spill).
SEAL_AT = 4096
# Blocks held in memory of fewer rows than JOIN_FROM are joined, up to JOIN_TO rows (so that
# the walk hands them on in large batches).
JOIN_FROM, JOIN_TO = 1 << 12, 1 << 16
# ... and of at most this many bytes of bodies (events with long args: a block is worked on whole,
# its bodies copied a few times over).
JOIN_BYTES = 8 << 20

Schema = tuple[tuple[str, type], ...]


class Block:
    """Columns of ``n`` rows (and, for entries, the rows' bodies joined), in memory or spilled."""

    __slots__ = (
        "at",
        "bodies",
        "bodies_at",
        "cols",
        "first",
        "hi",
        "lo",
        "n",
        "prefixes",
        "renumbered",
        "schema",
        "store",
    )

    def __init__(self, schema: Schema, cols: dict[str, np.ndarray], bodies: bytes | None = None) -> None:
        self.schema = schema
        self.cols: dict[str, np.ndarray] | None = cols
        self.n = len(cols[schema[0][0]])
        self.first = int(cols["ordinals"].min()) if self.n else 0  # the ordinal of the row read first
        self.store: RunStore | None = None  # where it spilled
        # Bodies that begin with a placeholder for their name and category (read apart, see
        # tracemerge.sources.json.segments): per placeholder, the index of its prefix.
        self.prefixes: np.ndarray | None = None
        # Flow points read apart: the numbers of their (cat, name) pairs and other ids in the
        # file's PointKeys, by their numbers in the part's.
        self.renumbered: tuple[np.ndarray, np.ndarray] | None = None
        # Entries: the earliest start and the latest end (the time the block spans).
        self.lo = self.hi = 0
        if self.n and "negdurs" in cols:
            self.lo, self.hi = int(cols["starts"].min()), int((cols["starts"] - cols["negdurs"]).max())
        self.bodies = bodies
        self.at: tuple[int, int] | None = None
        self.bodies_at: tuple[int, int] | None = None

    @property
    def held(self) -> int:
        """Rows held in memory."""
        return self.n if self.cols is not None else 0

    @property
    def held_bytes(self) -> int:
        """Bytes of bodies held in memory."""
        return len(self.bodies) if self.cols is not None and self.bodies is not None else 0

    def spill(self, store: RunStore) -> None:
        if self.cols is None:
            return
        self.store = store
        cols = self.cols
        self.at = store.put(b"".join(np.ascontiguousarray(cols[name], dtype).tobytes() for name, dtype in self.schema))
        if self.bodies is not None:
            self.bodies_at = store.put(self.bodies)
        self.cols = self.bodies = None

    def columns(self, store: RunStore) -> dict[str, np.ndarray]:
        if self.cols is not None:
            return self.cols
        assert self.at is not None
        data = (self.store or store).get(*self.at)
        found: dict[str, np.ndarray] = {}
        offset = 0
        for name, dtype in self.schema:
            found[name] = np.frombuffer(data, dtype, self.n, offset)
            offset += self.n * np.dtype(dtype).itemsize
        if self.renumbered is not None:
            pairs, ids = self.renumbered
            found["pairs"] = pairs[found["pairs"]]
            others = found["fid_kinds"] == 1
            if others.any():
                found["fids"] = np.where(others, ids[np.where(others, found["fids"], 0)], found["fids"])
        return found

    def body_bytes(self, store: RunStore) -> bytes:
        if self.bodies is not None:
            return self.bodies
        return (self.store or store).get(*self.bodies_at) if self.bodies_at is not None else b""


def _joined(blocks: list[Block]) -> Block:
    """Blocks held in memory as one."""
    schema = blocks[0].schema
    cols = {name: np.concatenate([block.cols[name] for block in blocks]) for name, _ in schema}  # type: ignore[index]
    bodies = None if blocks[0].bodies is None else b"".join(block.bodies or b"" for block in blocks)
    joined = Block(schema, cols, bodies)
    joined.prefixes = blocks[0].prefixes
    return joined


def concatenated(blocks: list[Block], store: RunStore, names: Iterable[str]) -> dict[str, np.ndarray]:
    """Some columns of ``blocks``, joined in order."""
    parts = [block.columns(store) for block in blocks]
    return {name: np.concatenate([p[name] for p in parts]) if parts else np.empty(0, np.int64) for name in names}


class Columnar(list):
    """Tuples appended by sources, and the blocks sealed from the ones before them."""

    __slots__ = ("blocks", "held_bytes", "held_in_blocks")
    schema: Schema = ()

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[Block] = []
        self.held_in_blocks = 0
        self.held_bytes = 0  # of the bodies of the blocks held in memory (tuples: once sealed)

    @property
    def total(self) -> int:
        return len(self) + sum(block.n for block in self.blocks)

    @property
    def held(self) -> int:
        """Rows held in memory, as tuples or in blocks."""
        return len(self) + self.held_in_blocks

    @property
    def first(self) -> int:
        """The smallest ordinal (that of the row read first)."""
        return min([*(block.first for block in self.blocks if block.n), *map(self._ordinal, self)], default=0)

    _ordinal = staticmethod(itemgetter(3))

    def add_block(self, block: Block) -> None:
        """A block made elsewhere (a source's columns), after what was appended before it."""
        self._seal_tuples()
        self.blocks.append(block)
        self.held_in_blocks += block.held
        self.held_bytes += block.held_bytes

    def spill(self, store: RunStore) -> None:
        self._seal_tuples()
        self._coalesce()
        for block in self.blocks:
            block.spill(store)
        self.held_in_blocks = self.held_bytes = 0

    def discard(self) -> None:
        self.clear()
        self.blocks.clear()
        self.held_in_blocks = self.held_bytes = 0

    def absorb(self, other: Columnar) -> None:
        """Takes ``other``'s rows, after its own (both must use the same store)."""
        self._seal_tuples()
        other._seal_tuples()
        self.blocks.extend(other.blocks)
        self.held_in_blocks += other.held_in_blocks
        self.held_bytes += other.held_bytes

    def sealed(self) -> list[Block]:
        """Every block, the tuples appended last sealed into one (and blocks held in memory one
        after another joined, so that each is handed on in large batches)."""
        self._seal_tuples()
        self._coalesce()
        return self.blocks

    def _coalesce(self) -> None:
        """Joins each run of small blocks held in memory (fewer than JOIN_FROM rows each) into
        blocks of up to JOIN_TO rows and JOIN_BYTES bytes of bodies; larger ones are handed on as
        they are."""
        if sum(block.cols is not None and block.n < JOIN_FROM for block in self.blocks) < 2:
            return
        joined: list[Block] = []
        run: list[Block] = []
        size = size_bytes = 0
        for block in self.blocks:
            small = block.cols is not None and block.n < JOIN_FROM
            fits = size + block.n <= JOIN_TO and size_bytes + block.held_bytes <= JOIN_BYTES
            if small and fits and (not run or block.prefixes is run[0].prefixes):
                run.append(block)
                size += block.n
                size_bytes += block.held_bytes
                continue
            joined.extend([_joined(run)] if len(run) > 1 else run)
            run, size, size_bytes = ([block], block.n, block.held_bytes) if small else ([], 0, 0)
            if not small:
                joined.append(block)
        joined.extend([_joined(run)] if len(run) > 1 else run)
        self.blocks = joined

    def maybe_seal(self) -> None:
        if len(self) >= SEAL_AT:
            self._seal_tuples()

    def _seal_tuples(self) -> None:
        if not self:
            return
        block = self._block(list(self))
        self.clear()
        self.blocks.append(block)
        self.held_in_blocks += block.n
        self.held_bytes += block.held_bytes

    def _block(self, items: list[tuple]) -> Block:
        raise NotImplementedError
