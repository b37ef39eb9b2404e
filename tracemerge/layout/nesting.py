"""How one thread's entries nest, worked out on columns: their order, their overlap lanes, and the
ties whose order in the file matters.

The walk's order of a thread's entries is (start, longer first, slices before instants, file
order; :func:`tracemerge.store.entries.walk_order`, which the store sorts a thread by too). A
slice nests in the innermost slice still open where it starts (open: ending after that start)
when it ends no later than that one; one that does not is moved to an overlap lane, the first
lane where it nests, a new one when none does (:func:`lanes`). Perfetto sorts a trace's events by
(timestamp, position in the file), so on one track the file order of events at one timestamp is
what decides their nesting: :func:`tied_out_of_order` finds where the order a thread was read in
would get that wrong.
"""

from __future__ import annotations

import heapq

import numpy as np

from tracemerge.store.entries import index_type

SLICE, INSTANT = 0, 1


def parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For slices in the walk's order, the position of the innermost slice open where each starts
    (ending after that start), -1 for none, as a walk would find it; exact up to the first slice
    of each run (see :func:`closed_runs`) that does not nest, not always after it."""
    n = len(starts)
    parent: np.ndarray = np.arange(-1, n - 1, dtype=index_type(n))
    # Where the slice before is still open it is the innermost one; else jump to the slice that
    # one nests in, and so on (each slice's parent found by the same jumps, all at once).
    todo = np.flatnonzero(ends[np.maximum(parent, 0)] <= starts)
    todo = todo[todo > 0]
    while len(todo):
        up = parent[parent[todo]]
        parent[todo] = up
        todo = todo[up >= 0]
        todo = todo[ends[parent[todo]] <= starts[todo]]
    return parent


def overlapping(starts: np.ndarray, ends: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Which slices, in the walk's order, end after the innermost slice open where they start:
    exact for the first one of each run, so a run holds one exactly when it overlaps."""
    has = parent >= 0
    found = np.zeros(len(starts), bool)
    found[has] = ends[has] > ends[parent[has]]
    return found


def closed_runs(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For slices in the walk's order, the number of the run each belongs to: a run starts where
    every slice before has ended, so that no slice of one run bears on another's nesting."""
    reach = np.maximum.accumulate(ends)
    new = np.ones(len(starts), bool)
    new[1:] = starts[1:] >= reach[:-1]
    return np.cumsum(new) - 1


def lanes(starts: np.ndarray, ends: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each slice's lane (0: the thread itself), for slices in the walk's order (``parent``:
    their :func:`parents`)."""
    found = np.zeros(len(starts), np.int32)
    bad = overlapping(starts, ends, parent)
    if not bad.any():
        return found
    runs = closed_runs(starts, ends)
    marked = np.zeros(int(runs[-1]) + 1, bool)
    marked[runs[bad]] = True
    todo = np.flatnonzero(marked[runs])
    # Lanes are made in order and reused; every slice before a run has ended, so each run
    # starts with every lane empty.
    count = 0
    for lo, hi in _spans(todo):
        count = _assign(starts[lo:hi].tolist(), ends[lo:hi].tolist(), found, lo, count)
    return found


def _spans(positions: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive positions as (first, last + 1) spans."""
    if not len(positions):
        return []
    cuts = np.flatnonzero(np.diff(positions) != 1) + 1
    firsts = positions[np.r_[0, cuts]]
    lasts = positions[np.r_[cuts - 1, len(positions) - 1]] + 1
    return list(zip(firsts.tolist(), lasts.tolist(), strict=True))


def _assign(starts: list[int], ends: list[int], found: np.ndarray, offset: int, count: int) -> int:
    """The walk's lanes for consecutive slices (``count`` lanes made so far); returns the count."""
    own: list[int] = []
    stacks = _LaneStacks(count)
    for n, (start, end) in enumerate(zip(starts, ends, strict=True)):
        while own and own[-1] <= start:
            own.pop()
        if not own or own[-1] >= end:
            own.append(end)
            continue
        found[offset + n] = stacks.place(start, end)
    return stacks.count


# Lanes searched one by one up to this many; beyond, a tree of their innermost ends finds the first
# lane a slice nests in, so that slices that each overlap all others (a staircase) cost n log n.
_SCANNED_LANES = 32


class _LaneStacks:
    """The overlap lanes (1 on) of a run, each a stack of the ends of its open slices (innermost
    last); :meth:`place` puts a slice in the first lane where it nests, a new one when none does.
    Slices come in the walk's order, so a slice ended at one start stays ended at every later one."""

    def __init__(self, count: int) -> None:
        self.stacks: list[list[int]] = [[] for _ in range(count)]
        self.tree: list[float] | None = None  # past _SCANNED_LANES: a max-tree of each lane's innermost end
        self.size = 0
        self.heap: list[tuple[int, int]] = []  # (innermost end, lane index) of lanes holding slices

    @property
    def count(self) -> int:
        return len(self.stacks)

    def place(self, start: int, end: int) -> int:
        if self.tree is None:
            for lane, stack in enumerate(self.stacks, 1):
                while stack and stack[-1] <= start:
                    stack.pop()
                if not stack or stack[-1] >= end:
                    stack.append(end)
                    return lane
            self.stacks.append([end])
            if len(self.stacks) > _SCANNED_LANES:
                self._grow()
            return len(self.stacks)
        self._close(start)
        at = self._first_holding(end)
        if at == len(self.stacks):
            self.stacks.append([])
        self.stacks[at].append(end)
        self._set(at, end)
        heapq.heappush(self.heap, (end, at))
        return at + 1

    def _grow(self) -> None:
        """A tree twice as wide as the lanes (empty lanes and those not made yet hold anything)."""
        self.size = size = 1 << max(6, len(self.stacks).bit_length() + 1)
        self.tree = [_ANY] * (2 * size)
        self.heap = []
        for at, stack in enumerate(self.stacks):
            if stack:
                self.tree[size + at] = stack[-1]
                self.heap.append((stack[-1], at))
        for node in range(size - 1, 0, -1):
            self.tree[node] = max(self.tree[2 * node], self.tree[2 * node + 1])
        heapq.heapify(self.heap)

    def _close(self, start: int) -> None:
        """Pops the slices that end by ``start`` off every lane."""
        heap = self.heap
        while heap and heap[0][0] <= start:
            top, at = heapq.heappop(heap)
            stack = self.stacks[at]
            if not stack or stack[-1] != top:
                continue  # an end no longer innermost: its lane changed since
            while stack and stack[-1] <= start:
                stack.pop()
            if stack:
                heapq.heappush(heap, (stack[-1], at))
            self._set(at, stack[-1] if stack else _ANY)

    def _first_holding(self, end: int) -> int:
        """The first lane whose innermost open slice ends no earlier than ``end`` (or is empty)."""
        tree = self.tree
        assert tree is not None
        if tree[1] < end:  # every lane slot taken: wider
            self._grow()
            tree = self.tree
            assert tree is not None
        node = 1
        while node < self.size:
            node = 2 * node if tree[2 * node] >= end else 2 * node + 1
        return node - self.size

    def _set(self, at: int, value: float) -> None:
        tree = self.tree
        assert tree is not None
        if at >= self.size:
            self._grow()
            tree = self.tree
            assert tree is not None
        node = self.size + at
        tree[node] = value
        node //= 2
        while node:
            left, right = tree[2 * node], tree[2 * node + 1]
            top = left if left >= right else right
            if tree[node] == top:
                return  # the nodes above hold what they held
            tree[node] = top
            node //= 2


_ANY = float("inf")  # an empty lane holds any slice


def tied_out_of_order(
    starts: np.ndarray, lanes: np.ndarray | None, positions: np.ndarray, also: np.ndarray | None = None
) -> np.ndarray:
    """For entries in the walk's order, which belong to a tie (entries on one lane that start at
    one time) whose order as read (``positions``) is not the walk's; with ``also``, any tie that
    holds such an entry and another. ``lanes`` None: every entry on the thread itself."""
    n = len(starts)
    found = np.zeros(n, bool)
    if n < 2:
        return found
    by_lane = None
    if lanes is not None and lanes.any():
        by_lane = np.argsort(lanes, kind="stable")
        starts, lanes, positions = starts[by_lane], lanes[by_lane], positions[by_lane]
        also = also[by_lane] if also is not None else None
    same = starts[1:] == starts[:-1]
    if lanes is not None:
        same &= lanes[1:] == lanes[:-1]
    if not same.any():
        return found
    # Only the entries of ties are looked at: their groups numbered in order.
    tied = np.flatnonzero(np.r_[same, False] | np.r_[False, same])
    joined = same[tied[1:] - 1] & (tied[1:] == tied[:-1] + 1)
    group = np.cumsum(np.r_[True, ~joined]) - 1
    kept = positions[tied]
    bad = np.zeros(int(group[-1]) + 1, bool)
    bad[group[1:][joined & (kept[1:] < kept[:-1])]] = True
    if also is not None:
        bad |= np.bincount(group, also[tied].astype(np.int64)) > 0
    hit = tied[bad[group]]
    if by_lane is not None:
        hit = by_lane[hit]
    found[hit] = True
    return found
