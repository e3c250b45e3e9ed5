"""Dealing a global batch of rows to data-parallel ranks so their attention costs are even.

Every rank knows the whole global batch (the rows are a pure function of the position), so each
can compute the same dealing alone: no collective. :func:`deal` gives every rank exactly
``per_rank`` rows of a block of ``per_rank * dp_size``, and makes the costliest rank close to the
lower bound of any dealing of whole rows.

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

Example:
    >>> deal([9, 1, 5, 5, 2, 2], per_rank=3, dp_size=2).tolist()
    [[0, 1, 4], [2, 3, 5]]
"""

from __future__ import annotations

import heapq

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, check_int_array, fail

__all__ = ["MAX_COST", "MAX_SWAPS", "deal", "deal_bounds"]

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
    values = c.tolist()
    owner = [0] * len(values)
    loads = [0] * d
    held = [0] * d
    heap = [(0, r) for r in range(d)]  # (load, rank): least load, then lowest rank
    for i in np.argsort(-c, kind="stable").tolist():
        load, r = heapq.heappop(heap)
        owner[i] = r
        loads[r] = load + values[i]
        held[r] += 1
        if held[r] < k:
            heapq.heappush(heap, (loads[r], r))
    if d > 1 and k > 1:
        _improve(c, np.array(owner, dtype=np.int64), loads, min(k * d, MAX_SWAPS), owner)
    out = np.argsort(np.array(owner, dtype=np.int64), kind="stable").reshape(d, k)
    return out.astype(np.int64)


def _improve(c: IntArray, own: IntArray, loads: list[int], cap: int, owner: list[int]) -> None:
    """Step 2 of the module docstring, updating ``owner`` and ``loads`` in place. Loads are
    Python ints; the candidate arithmetic is in int64 only on row costs (at most 2**62) and on
    load gaps, which are checked to fit first."""
    for _ in range(cap):
        top = max(range(len(loads)), key=lambda r: (loads[r], -r))
        mine = np.flatnonzero(own == top)
        gaps = [loads[top] - v for v in loads]
        if max(gaps) >= 2**62:  # cannot happen at legal sizes that fit memory; stay exact
            return
        gap = np.array(gaps, dtype=np.int64)[own]  # gap to each row's rank
        delta = c[mine][:, None] - c[None, :]  # cost moved off the costliest rank
        useful = (delta > 0) & (delta < gap[None, :])
        if not useful.any():
            return
        # the larger of the two loads after the swap, relative to the costliest load
        after = np.maximum(-delta, delta - gap[None, :])
        after[~useful] = 1
        a, b = np.unravel_index(int(np.argmin(after)), after.shape)
        ia, ib = int(mine[a]), int(b)
        ra, rb = top, owner[ib]
        moved = int(c[ia]) - int(c[ib])
        loads[ra] -= moved
        loads[rb] += moved
        owner[ia], owner[ib] = rb, ra
        own[ia], own[ib] = rb, ra


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
