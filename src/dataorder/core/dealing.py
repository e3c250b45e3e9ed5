"""The batching "blocks dealt by cost": each global block's items dealt to the ranks so their
costs are even.

Every rank knows the whole global block (its items are a pure function of the position), so
each can compute the same dealing alone: no collective. :func:`deal` gives every rank exactly
``per_rank`` items (rows, below) of a block of ``per_rank * dp_size``, and makes the costliest
rank close to the lower bound of any dealing of whole rows. Any per-item cost works (packed
rows deal by attention cost, the sum of their spans' squared lengths); :class:`DealtByCost` is
the batching (:mod:`dataorder.core.blockplan`) and :class:`DealtBlocks` its epoch plan.

The rule, deterministic from the costs alone:

1. Longest processing time first with a capacity: rows by cost decreasing (ties by index), each
   to the least-loaded rank that still has room (ties by rank).
2. Improvement: while a swap of one row of the costliest rank (ties: the lowest rank) with one
   cheaper row of another rank lowers the larger of the two ranks' loads, make the swap that
   lowers it most (ties: the first found, rows of the costliest rank by block index, then the
   other row by block index). Every swap lowers (the costliest load, the number of ranks at it)
   lexicographically, so the loop ends; it is also capped at :data:`MAX_SWAPS` swaps (NOTE
   [ Dealing cost ]).
3. Each rank's rows in increasing block index.

Bounds (:func:`deal_bounds`): any dealing's costliest rank is at least ``max(mean rank cost,
costliest row)`` (the issue's bound), and at least what the capacity forces: the rank holding
the costliest row holds ``per_rank - 1`` others, and some rank holds two of the ``dp_size + 1``
costliest rows, and so on. With 2 rows per rank the greedy is the optimal pairing (the
costliest with the cheapest), so its figure measures the bound, not the dealing.

NOTE [ Dealing cost ]
    Every rank deals its whole block at every step, so the dealing is paid ``dp_size`` times per
    step. A swap costs a look at every row of the block (``O(per_rank * dp_size)``), and an
    uncapped loop made up to ``per_rank * dp_size`` of them: 2.5 s per step on every rank at
    4096 ranks x 4 rows of packed rows (12 s on uniform costs), to bring the costliest rank
    from 1.0715 to 1.0563 times the lower bound. 64 swaps end at 1.0706 in 0.07 s; at 16 ranks
    x 4 rows (64 rows, the issue's figure) nothing changes, and every layout measured stays
    within 1.10x (1024 x 4: 1.0509, 512 x 16: 1.0015; the benchmark reports the figure).
    Step 1 is a heap of the ranks with room, ``O(block log dp_size)``; a swap is found in
    ``O(block log block)`` time and ``O(block)`` memory (NOTE [ Best swap ]), so a block of
    :data:`~dataorder.llm.packing.sampler.MAX_BLOCK_ROWS` rows deals in about a second, however
    it is split between ranks and rows.

NOTE [ Best swap ]
    Swapping row ``a`` of the costliest rank (load ``T``) with row ``b`` of a rank ``gap`` below
    it moves ``delta = c[a] - c[b]``; it helps when ``0 < delta < gap``, and leaves the larger of
    the two loads at ``T + max(-delta, delta - gap)``. Seen from ``a``'s cost ``p``, row ``b`` is
    the interval ``(x, y) = (c[b], c[b] + gap)`` and the swap lowers the top load by
    ``min(p - x, y - p)``, a tent that peaks at ``(x + y) / 2``. The best partner of ``p`` is the
    highest tent at ``p``: among tents peaking at or before ``p`` the largest ``y``, among those
    peaking at or after it the least ``x``. So one sort of the tents by peak, a running maximum
    and a running minimum, and a binary search per row of the costliest rank find every row's
    best swap; the first such row in block order is ``a``, and one pass over the block finds the
    first ``b`` at that value: the same swap, ties included, as comparing every pair (a
    ``per_rank x block`` matrix, 256 GiB at ``2 x 131072`` rows). A row's ``2 c + gap`` is below
    ``3 * 2**62``: exact in uint64.

Example:
    >>> deal([9, 1, 5, 5, 2, 2], per_rank=3, dp_size=2).tolist()
    [[0, 1, 4], [2, 3, 5]]
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, check_int_array, fail
from dataorder.core.blockplan import BlockSteps
from dataorder.core.partition import EpochBlocks

__all__ = [
    "MAX_COST",
    "MAX_SWAPS",
    "CostedItems",
    "DealtBlocks",
    "DealtByCost",
    "deal",
    "deal_bounds",
]

T = TypeVar("T")

IntArray = npt.NDArray[np.int64]

#: Largest row cost: ``seq_len**2`` at the largest ``seq_len`` (2**31). A rank's load then needs
#: ``per_rank <= 2**31`` rows to stay below 2**93: loads are Python ints, exact at any size.
MAX_COST = 2**62
#: Most improving swaps of one dealing (NOTE [ Dealing cost ]).
MAX_SWAPS = 64


def _check(costs: object, per_rank: object, dp_size: object) -> tuple[IntArray, int, int]:
    k = check_int("per_rank", per_rank, min_value=1)
    d = check_int("dp_size", dp_size, min_value=1)
    c = check_int_array("costs", costs, min_value=0, max_value=MAX_COST)
    if c.shape[0] != k * d:
        fail("costs", f"per_rank * dp_size = {k * d} row costs", f"<{c.shape[0]} costs>")
    return c, k, d


def deal(costs: npt.ArrayLike, per_rank: int, dp_size: int) -> IntArray:
    """Deal a block of ``per_rank * dp_size`` rows to ``dp_size`` ranks, ``per_rank`` each.

    Args:
        costs: One non-negative int cost per row of the block (at most ``2**62``).
        per_rank: Rows per rank, a positive int.
        dp_size: Ranks, a positive int.

    Returns:
        int64 array of shape ``(dp_size, per_rank)``: row ``r`` lists the block indices rank
        ``r`` reads, increasing; every index appears once.

    Raises:
        TypeError: If an argument is not integers.
        ValueError: If a cost is out of range, or ``costs`` has not ``per_rank * dp_size``
            entries.
    """
    c, k, d = _check(costs, per_rank, dp_size)
    if d == 1:
        return np.arange(k, dtype=np.int64).reshape(1, k)
    order = np.argsort(-c, kind="stable")
    if k == 1:  # one row each: the greedy gives the r-th costliest row to rank r
        out = np.empty((d, 1), dtype=np.int64)
        out[:, 0] = order
        return out
    own, loads = _greedy(order.tolist(), c[order].tolist(), k, d)
    _improve(c, own, loads, min(k * d, MAX_SWAPS))
    return np.argsort(own, kind="stable").reshape(d, k).astype(np.int64)


def _greedy(rows: list[int], costs: list[int], k: int, d: int) -> tuple[IntArray, list[int]]:
    """Step 1 of the module docstring: ``rows`` by cost decreasing, ``costs`` theirs. Returns
    each row's rank and each rank's load (Python ints: exact)."""
    owner = [0] * len(rows)
    loads = [0] * d
    held = [0] * d
    # a rank with room is the key load * d + rank: the least is the least load, then the lowest
    # rank (one int compares faster than a (load, rank) tuple; Python ints never wrap)
    heap = list(range(d))
    pop, replace = heapq.heappop, heapq.heapreplace
    for i, v in zip(rows, costs, strict=True):
        key = heap[0]
        r = key % d
        owner[i] = r
        held[r] += 1
        if held[r] < k:
            replace(heap, key + v * d)
        else:  # its last row: every rank takes exactly k, so each leaves the heap once
            loads[r] = key // d + v
            pop(heap)
    return np.array(owner, dtype=np.int64), loads


def _improve(c: IntArray, own: IntArray, loads: list[int], cap: int) -> None:
    """Step 2 of the module docstring, updating ``own`` (each row's rank) in place, in
    ``O(block log block)`` time and ``O(block)`` memory per swap (NOTE [ Best swap ])."""
    low, high = min(loads), max(loads)
    if high - low >= 2**62:  # cannot happen at legal sizes that fit memory; stay exact
        return
    # loads relative to the least: a swap moves cost between the costliest rank and a cheaper
    # one, and leaves both strictly between them, so these stay in [0, 2**62) (exact in int64)
    rel = np.array([v - low for v in loads], dtype=np.int64)
    for _ in range(cap):
        top = int(np.argmax(rel))  # the first maximum: the lowest rank
        a, b = _best_swap(c, own, rel, top)
        if a < 0:
            break
        rb = int(own[b])
        moved = int(c[a]) - int(c[b])
        rel[top] -= moved
        rel[rb] += moved
        own[a], own[b] = rb, top


def _best_swap(c: IntArray, own: IntArray, rel: IntArray, top: int) -> tuple[int, int]:
    """``(a, b)``: the swap of step 2, row ``a`` of the costliest rank ``top`` with row ``b``, or
    ``(-1, -1)`` when no swap lowers the larger load (NOTE [ Best swap ]). ``rel`` is each
    rank's load above the least."""
    mine = np.flatnonzero(own == top)
    gap = rel[top] - rel[own]  # each row's rank below the costliest, in [0, 2**62)
    # tents: row b is useful to a row of cost p when c[b] < p < c[b] + gap[b], and the swap
    # leaves max(c[b] - p, p - c[b] - gap[b]) = -min(p - x, y - p) relative to the top load
    x, y = c, c + gap  # c + gap < 2**63
    mid2 = 2 * c.astype(np.uint64) + gap.astype(np.uint64)  # x + y, below 3 * 2**62
    order = np.argsort(mid2)
    keys = mid2[order]
    y_before = np.maximum.accumulate(y[order])  # the largest y of the tents peaking at or before
    x_after = np.minimum.accumulate(x[order][::-1])[::-1]  # the least x of those at or after
    p = np.sort(c[mine])  # queries in order: the searches then walk the keys once
    p2 = 2 * p.astype(np.uint64)
    i = np.searchsorted(keys, p2, side="right") - 1
    j = np.searchsorted(keys, p2, side="left")
    depth = np.full(p.shape, -1, dtype=np.int64)  # -1: no tent contains p
    left = i >= 0
    depth[left] = y_before[i[left]] - p[left]
    right = j < keys.shape[0]
    depth[right] = np.maximum(depth[right], p[right] - x_after[j[right]])
    best = int(depth.max()) if depth.size else 0
    if best <= 0:
        return -1, -1
    # the first of the costliest rank's rows (in block order) whose cost reaches the best
    reach = p[depth == best]  # increasing
    mine_costs = c[mine]
    at = np.minimum(np.searchsorted(reach, mine_costs), reach.shape[0] - 1)
    a = int(mine[int(np.argmax(reach[at] == mine_costs))])
    # the other row: the first in block order at the best value (one row of all the pairs)
    delta = c[a] - c
    useful = (delta > 0) & (delta < gap)
    after = np.maximum(-delta, delta - gap)
    after[~useful] = 1
    return a, int(np.argmin(after))


def deal_bounds(costs: npt.ArrayLike, per_rank: int, dp_size: int) -> tuple[int, int]:
    """Lower bounds on the costliest rank of any dealing of whole rows, ``per_rank`` each.

    Returns:
        ``(issue, best)``. ``issue = max(ceil(total / dp_size), costliest row)``, the bound the
        packing issue states. ``best >= issue`` adds what the capacity forces: with the costs
        sorted decreasing ``c_1 >= ... >= c_n``, some rank holds ``q = ceil(m / dp_size)`` of
        the ``m`` costliest rows (pigeonhole), so its load is at least ``c_{m-q+1} + ... + c_m``
        plus the ``per_rank - q`` cheapest rows; the maximum over ``m`` (those ``m`` where the
        cheapest rows are not among the ``m``). ``m = 1`` is the costliest row plus the
        ``per_rank - 1`` cheapest; ``m = dp_size + 1`` pairs the ``dp_size``-th and next rows.
    """
    c, k, d = _check(costs, per_rank, dp_size)
    values = sorted(c.tolist(), reverse=True)
    n = len(values)
    prefix = [0]
    for v in values:
        prefix.append(prefix[-1] + v)
    issue = max(-(-prefix[n] // d), values[0])
    best = issue
    for m in range(1, n + 1):
        q = -(-m // d)
        rest = k - q
        if m + rest > n:
            break
        bound = prefix[m] - prefix[m - q] + prefix[n] - prefix[n - rest]
        best = max(best, bound)
    return issue, best


class CostedItems(Protocol[T]):
    """What fills an epoch dealt by cost: the items at positions of the epoch (all real, any
    order, repeats allowed) and their costs. Asked apart because dealing needs the costs of the
    whole block and a rank builds only its own items."""

    def items(self, positions: IntArray) -> list[T]:
        """The items at ``positions``."""
        ...

    def costs(self, positions: IntArray) -> IntArray:
        """The costs of the items at ``positions``, int64, each in ``[0, MAX_COST]``."""
        ...


@dataclass(frozen=True, eq=False)
class DealtBlocks(BlockSteps, Generic[T]):
    """One epoch of global blocks, each dealt to the ranks by cost: an
    :class:`~dataorder.core.cursor.EpochPlan`.

    Attributes:
        blocks: The epoch's blocks (positions ``>= blocks.n`` are padding: ``padding``, cost 0).
        fill: The items and their costs (:class:`CostedItems`).
        padding: The item a padding position holds.
        what: What an item is called in :meth:`describe` (``"rows"``).
    """

    blocks: EpochBlocks
    fill: CostedItems[T]
    padding: T
    what: str = "items"
    unit: ClassVar[str] = "items"

    def describe(self, progress: Any, epoch: int) -> str:
        """Where ``progress`` stands in ``epoch``, in words."""
        total = self.blocks.total_positions
        return f"{progress['consumed']} of {total} {self.what} of epoch {epoch}"

    def batches(self, rank: int, start: int, stop: int) -> list[list[T]]:
        """``rank``'s batches of steps ``start .. stop - 1``: the costs of every block, dealt,
        then the items of the positions dealt to ``rank`` only."""
        lay = self.blocks
        b, steps = lay.block_size, stop - start
        positions = np.arange(start * b, stop * b, dtype=np.int64)
        real = positions < lay.n  # a prefix: padding comes last
        costs = np.zeros(positions.size, dtype=np.int64)
        if real.any():
            costs[real] = self.fill.costs(positions[real])
        mine = np.concatenate(
            [
                positions[k * b + deal(costs[k * b : (k + 1) * b], lay.per_rank, lay.dp_size)[rank]]
                for k in range(steps)
            ]
        )
        items: list[T] = [self.padding] * mine.size
        kept = mine < lay.n
        if kept.any():
            for i, item in zip(
                np.flatnonzero(kept).tolist(), self.fill.items(mine[kept]), strict=True
            ):
                items[i] = item
        per = lay.per_rank
        return [items[k * per : (k + 1) * per] for k in range(steps)]


@dataclass(frozen=True)
class DealtByCost(Generic[T]):
    """The batching "blocks dealt by cost" (:class:`~dataorder.core.blockplan.Batching`).

    Attributes:
        padding: The item a padding position holds.
        what: What an item is called in messages (``"rows"``).
        max_block: Most items in one global block (every rank costs and deals its whole block
            each step), or None; larger blocks are refused rather than left to hang every step.
        max_name: The constant ``max_block`` is, for the refusal.
    """

    padding: T
    what: str = "items"
    max_block: int | None = None
    max_name: str = "max_block"

    def check(self, per_rank: int, dp_size: int) -> None:
        """Refuse a block of more than ``max_block`` items, naming the layout."""
        if self.max_block is not None and per_rank * dp_size > self.max_block:
            fail(
                "micro_batch_size x data_parallel_size",
                f"at most {self.max_name} = {self.max_block} {self.what} (every rank builds and "
                "deals the whole block each step)",
                f"{per_rank} x {dp_size} = {per_rank * dp_size}",
            )

    def plan(self, blocks: EpochBlocks, fill: CostedItems[T]) -> DealtBlocks[T]:
        """The epoch plan of ``blocks`` filled by ``fill``."""
        return DealtBlocks(blocks, fill, self.padding, self.what)
