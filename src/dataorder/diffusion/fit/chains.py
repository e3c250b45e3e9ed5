"""The dynamic programme over chains of buckets (:class:`~dataorder.diffusion.fit.programme.
ChainProgramme`): the bin boundaries' residues modulo a global batch size, the forward pass that
gives the least cost of a whole chain for each number of falls (NOTE [ waste telescopes ]) or for
each multiplier of the relaxation (NOTE [ dynamic G ]), both in
:mod:`dataorder.diffusion.fit.programme`, and the backtrack that reads the chain back.

Every cost is an exact integer in float64 and every step a minimum or a sum of two, so the passes
that answer one candidate's best starts (one limit at a time, in segments, or from one dense
table) give the same answers, and only their speed differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dataorder.diffusion.fit.bins import FloatArray, IntArray

__all__ = ["Chain", "Residues", "backtrack", "forward_pass", "residues", "solve_chain"]

#: ``(candidate, end)`` of each bucket of a chain, ascending in aspect ratio.
Chain = list[tuple[int, int]]

_DENSE_LIMITS = 32  # a candidate with more distinct start limits than this ...
_DENSE_CELLS = 1 << 22  # ... takes the dense pass if its table has at most this many cells


@dataclass
class Residues:
    """Bin boundaries seen modulo one global batch size ``g``."""

    g: int
    sigma: IntArray  # (S + 1,) P mod g (drop) or (-P) mod g (pad)
    u: IntArray  # rank of sigma among its distinct values
    order: IntArray  # positions by rank, stable
    n_ranks: int
    limit_rise: IntArray  # latest start of a bucket ending here if sigma does not fall
    limit_fall: IntArray  # ... if it falls


def residues(
    prefix: IntArray, g: int, drop: bool, whole: bool, min_count: int | None = None
) -> Residues:
    sigma = prefix % g if drop else (-prefix) % g
    u = np.unique(sigma, return_inverse=True)[1].astype(np.int64).ravel()
    if min_count is not None:  # every bucket holds at least min_count images
        limit_rise = np.searchsorted(prefix, prefix - min_count, side="right") - 1
        limit_fall = limit_rise
    elif whole:  # every bucket fills a global batch (keep_every_image)
        block = prefix // g
        limit_rise = np.searchsorted(block, block - 1, side="right") - 1
        limit_fall = np.searchsorted(block, block - 2, side="right") - 1
    else:  # non-empty
        limit_rise = limit_fall = np.arange(prefix.size, dtype=np.int64) - 1
    return Residues(
        g, sigma, u, np.argsort(u, kind="stable"), int(u.max()) + 1, limit_rise, limit_fall
    )


def solve_chain(
    cost: FloatArray,
    mods: list[Residues],
    lo_end: IntArray,
    hi_start: IntArray,
    rows: int,
    w_max: int,
    lam: float | None = None,
    first_start: IntArray | None = None,
    last_end: IntArray | None = None,
    segments: bool = True,
) -> Chain | None:
    """Least-cost chain of buckets, or None if there is none (:func:`forward_pass`, then the least
    cost over the falls, fewest falls on a tie, traced back). ``segments``: as
    :func:`forward_pass`."""
    exact = lam is None
    best_end, stored = forward_pass(
        cost, mods, lo_end, hi_start, rows, w_max, lam, first_start, last_end, segments
    )
    d = int(np.argmin(best_end))  # least cost first, then fewest falls (least waste)
    if not np.isfinite(best_end[d]):
        return None
    lam_d = 0.0 if lam is None else float(np.broadcast_to(lam, (rows,))[d])
    return backtrack(cost, mods, hi_start, stored, d, float(best_end[d]), exact, lam_d, first_start)


def forward_pass(
    cost: FloatArray,
    mods: list[Residues],
    lo_end: IntArray,
    hi_start: IntArray,
    rows: int,
    w_max: int,
    lam: float | FloatArray | None,
    first_start: IntArray | None,
    last_end: IntArray | None,
    segments: bool = True,
) -> tuple[FloatArray, list[tuple[int, FloatArray]]]:
    """The programme's forward pass: the least cost of a whole chain for each number of falls
    (``(rows,)``, inf where none), and what :func:`backtrack` needs.

    ``cost[c, t]``: fixed-point crop of bins ``[0, t)`` against candidate ``c`` (exact integers
    in float64). Candidates increase along the chain. Bucket ``c`` covers positions ``[t, t')``
    with ``t' >= lo_end[c]`` and ``t <= hi_start[c]`` (it brackets its images), and
    ``t <= limit_rise[t']`` if the residue does not fall from ``t`` to ``t'``,
    ``t <= limit_fall[t']`` if it falls (the size rule), in ``mods[c]``; and, when given,
    ``t >= first_start[c]`` and ``t' <= last_end[c]``.

    ``lam=None`` (one ``g`` for all): exact. A state is ``(d, t)``, ``d`` falls so far (NOTE
    [ waste telescopes ]), with ``sigma[t] + g * d <= w_max``. Otherwise the cost is crop plus
    ``lam`` per wasted sample, each bucket's waste modulo its own ``g``: the relaxation of NOTE
    [ dynamic G ]; ``lam`` is one multiplier per row (``rows`` of them, each row its own
    programme) or a float for ``rows == 1``.

    For one candidate, the allowed starts of an end ``t'`` are a prefix ``t <= L`` with a
    residue condition, so the best start is a prefix (no fall) or suffix (fall) minimum over
    residue ranks of per-rank minima over the prefix. ``L`` takes at most three values per
    candidate (``hi_start[c]`` and the size rule's limits just above it): a few vectorised
    passes over the positions per candidate. ``segments``: answer a candidate with few limits
    in a fixed number of array passes (:func:`_segment_pass`), else one limit at a time; the
    answers are the same.
    """
    m, width = cost.shape
    end = width - 1
    exact = lam is None
    lam_v = np.zeros((rows, 1)) if lam is None else np.broadcast_to(lam, (rows,))[:, None]
    valid = np.ones((rows, width), dtype=bool)
    best = np.full((rows, width), np.inf)
    if exact:
        r0 = mods[0]
        dmax = np.where(r0.sigma <= w_max, (w_max - r0.sigma) // r0.g, -1)
        valid = np.arange(rows)[:, None] <= dmax[None, :]
        best[0, 0] = 0.0
    else:  # every row is a programme of its own multiplier
        best[:, 0] = 0.0
    stored: list[tuple[int, FloatArray]] = []
    for c in range(m):
        rc = mods[c]
        hi, lo = int(hi_start[c]), max(int(lo_end[c]), 1)
        first = 0 if first_start is None else int(first_start[c])
        last = end if last_end is None else int(last_end[c])
        if first > hi or last < lo:  # the candidate cannot hold its own ratio's bins
            stored.append((lo, np.full((rows, width - lo), np.inf)))
            continue
        lim_r = np.minimum(rc.limit_rise[lo:], hi)
        lim_f = np.minimum(rc.limit_fall[lo:], hi)
        base = best[:, : hi + 1] - cost[c, : hi + 1]
        if not exact:
            base -= lam_v * rc.sigma[None, : hi + 1]
        base[:, :first] = np.inf
        ut = rc.u[lo:]
        f = np.full((rows, width - lo), np.inf)
        lims = np.unique(np.concatenate((lim_r, lim_f)))
        if lims.size > _DENSE_LIMITS and rows * (hi + 1 - first) * rc.n_ranks <= _DENSE_CELLS:
            _dense_pass(f, base, rc, ut, lim_r, lim_f, exact, rows, lam_v, first)
        elif segments and rows * lims.size * rc.n_ranks <= _DENSE_CELLS:
            _segment_pass(f, base, rc, ut, lim_r, lim_f, lims, exact, rows, lam_v)
        else:
            _sparse_pass(f, base, rc, ut, lim_r, lim_f, lims, exact, rows, lam_v)
        f += cost[c, lo:]
        f[:, last + 1 - lo :] = np.inf
        if exact:
            f[~valid[:, lo:]] = np.inf
        else:
            f += lam_v * rc.sigma[None, lo:]
        np.minimum(best[:, lo:], f, out=best[:, lo:])
        stored.append((lo, f))
    return best[:, end].copy(), stored


def _sparse_pass(
    f: FloatArray,
    base: FloatArray,
    rc: Residues,
    ut: IntArray,
    lim_r: IntArray,
    lim_f: IntArray,
    lims: IntArray,
    exact: bool,
    rows: int,
    lam_v: FloatArray,
) -> None:
    """One candidate's best starts, a few limits at a time (:func:`forward_pass`): fold the starts
    up to each limit into per-rank minima, then answer the ends that have that limit."""
    per_rank = np.full((rows, rc.n_ranks), np.inf)
    prev_lim = -1
    # the ends whose limit is each lim, by a stable sort of the limits (ascending ends)
    by_r, by_f = np.argsort(lim_r, kind="stable"), np.argsort(lim_f, kind="stable")
    cut_r = np.searchsorted(lim_r[by_r], lims, side="right")
    cut_f = np.searchsorted(lim_f[by_f], lims, side="right")
    for i, lim in enumerate(lims.tolist()):
        if lim < 0:
            continue
        # Fold positions (prev_lim, lim] into the per-rank minimum of the prefix.
        span = np.arange(prev_lim + 1, lim + 1)
        seg = span[np.argsort(rc.u[span], kind="stable")]
        if seg.size:
            r = rc.u[seg]
            cut = np.flatnonzero(np.concatenate(([True], r[1:] != r[:-1])))
            mins = np.minimum.reduceat(base[:, seg], cut, axis=1)
            np.minimum(per_rank[:, r[cut]], mins, out=mins)
            per_rank[:, r[cut]] = mins
        prev_lim = lim
        cols = by_r[(cut_r[i - 1] if i else 0) : cut_r[i]]
        if cols.size:
            le = np.minimum.accumulate(per_rank, axis=1)
            f[:, cols] = np.minimum(f[:, cols], le[:, ut[cols]])
        cols = by_f[(cut_f[i - 1] if i else 0) : cut_f[i]]
        if cols.size and (rows > 1 or not exact):
            gt = np.full_like(per_rank, np.inf)
            gt[:, :-1] = np.minimum.accumulate(per_rank[:, ::-1], axis=1)[:, ::-1][:, 1:]
            if exact:
                f[1:, cols] = np.minimum(f[1:, cols], gt[:-1, ut[cols]])
            else:
                f[:, cols] = np.minimum(f[:, cols], gt[:, ut[cols]] + lam_v * rc.g)


def _segment_pass(
    f: FloatArray,
    base: FloatArray,
    rc: Residues,
    ut: IntArray,
    lim_r: IntArray,
    lim_f: IntArray,
    lims: IntArray,
    exact: bool,
    rows: int,
    lam_v: FloatArray,
) -> None:
    """:func:`_sparse_pass`'s answers in a fixed number of array passes: the starts cut into
    segments at the limits, one ``(rows, segments, ranks)`` table of per-rank minima, running
    minima over segments (the starts up to each limit) and over ranks (a minimum is exact, so
    the answers are the same, whatever the order)."""
    lims = lims[lims >= 0]
    if lims.size == 0:
        return
    k, ranks = int(lims.size), rc.n_ranks
    top = int(lims[-1])
    cell = np.searchsorted(lims, np.arange(top + 1), side="left") * ranks + rc.u[: top + 1]
    order = np.argsort(cell, kind="stable")
    sorted_cell = cell[order]
    first = np.flatnonzero(np.concatenate(([True], sorted_cell[1:] != sorted_cell[:-1])))
    flat = np.full((rows, k * ranks), np.inf)
    flat[:, sorted_cell[first]] = np.minimum.reduceat(base[:, order], first, axis=1)
    table = flat.reshape(rows, k, ranks)
    np.minimum.accumulate(table, axis=1, out=table)  # the starts up to each limit
    ends = np.flatnonzero(lim_r >= 0)
    if ends.size:
        le = np.minimum.accumulate(table, axis=2)  # ranks <= r: no fall
        at = np.searchsorted(lims, lim_r[ends])
        f[:, ends] = np.minimum(f[:, ends], le[:, at, ut[ends]])
    ends = np.flatnonzero(lim_f >= 0)
    if ends.size and (rows > 1 or not exact):
        gt = np.full_like(table, np.inf)  # ranks > r: a fall
        gt[:, :, :-1] = np.minimum.accumulate(table[:, :, ::-1], axis=2)[:, :, ::-1][:, :, 1:]
        found = gt[:, np.searchsorted(lims, lim_f[ends]), ut[ends]]
        if exact:
            f[1:, ends] = np.minimum(f[1:, ends], found[:-1])
        else:
            f[:, ends] = np.minimum(f[:, ends], found + lam_v * rc.g)


def _dense_pass(
    f: FloatArray,
    base: FloatArray,
    rc: Residues,
    ut: IntArray,
    lim_r: IntArray,
    lim_f: IntArray,
    exact: bool,
    rows: int,
    lam_v: FloatArray,
    first: int,
) -> None:
    """The same answers as :func:`_sparse_pass` from one ``(rows, ranks, starts)`` table of
    running minima, for candidates with many distinct limits (a chain over clip lengths, whose
    buckets may start anywhere): a few array passes instead of one per limit. Starts before
    ``first`` are not allowed, so the table begins there."""
    top = base.shape[1]
    # (rows, ranks, starts): the running minimum over starts runs along contiguous memory
    table = np.full((rows, rc.n_ranks, top - first), np.inf)
    table[:, rc.u[first:top], np.arange(top - first)] = base[:, first:]
    np.minimum.accumulate(table, axis=2, out=table)  # best start <= t of each rank
    ends = np.flatnonzero(lim_r >= first)
    if ends.size:
        seen = table[:, :, lim_r[ends] - first]  # the ranks at each end's limit
        np.minimum.accumulate(seen, axis=1, out=seen)  # ranks <= r: no fall
        f[:, ends] = np.minimum(f[:, ends], seen[:, ut[ends], np.arange(ends.size)])
    ends = np.flatnonzero(lim_f >= first)
    if ends.size and (rows > 1 or not exact):
        seen = table[:, ::-1, lim_f[ends] - first]  # ranks descending
        np.minimum.accumulate(seen, axis=1, out=seen)
        # ranks > r: a fall; rank r sits at n - 1 - r in the descending order, so n - 2 - r
        above = rc.n_ranks - 2 - ut[ends]
        found = np.where(
            above[None, :] >= 0,
            seen[:, np.maximum(above, 0), np.arange(ends.size)],
            np.inf,
        )
        if exact:
            f[1:, ends] = np.minimum(f[1:, ends], found[:-1])
        else:
            f[:, ends] = np.minimum(f[:, ends], found + lam_v * rc.g)


def backtrack(
    cost: FloatArray,
    mods: list[Residues],
    hi_start: IntArray,
    stored: list[tuple[int, FloatArray]],
    d: int,
    value: float,
    exact: bool,
    lam_v: float,
    first_start: IntArray | None = None,
) -> Chain:
    """The chain behind ``value``, found by exact equality of the stored integer costs; ties go
    to the lowest candidate, then the latest start."""
    t_end, limit = cost.shape[1] - 1, len(stored)
    chain: Chain = []
    while True:
        c = next(
            c
            for c in range(limit)
            if stored[c][0] <= t_end and stored[c][1][d, t_end - stored[c][0]] == value
        )
        chain.append((c, t_end))
        rc = mods[c]
        top = int(hi_start[c])
        # rows: the state a start has with no fall here (d), and with a fall (d - 1; in the
        # relaxation the same row d, its own programme, where a fall costs lam * g instead)
        prev = np.full((2, top + 1), np.inf)
        fall_row = d - 1 if exact else d
        if d == 0 or not exact:
            prev[0, 0] = 0.0  # the empty start at position 0
        if fall_row == 0 or not exact:
            prev[1, 0] = 0.0
        for b in range(c):
            lo_b, f_b = stored[b]
            if lo_b <= top:
                np.minimum(prev[0, lo_b:], f_b[d, : top + 1 - lo_b], out=prev[0, lo_b:])
                if fall_row >= 0:
                    seg = f_b[fall_row, : top + 1 - lo_b]
                    np.minimum(prev[1, lo_b:], seg, out=prev[1, lo_b:])
        target = value - cost[c, t_end] - lam_v * rc.sigma[t_end]
        shifted = prev - cost[c, : top + 1] - lam_v * rc.sigma[: top + 1]
        starts = np.arange(top + 1)
        rises = rc.sigma[: top + 1] <= rc.sigma[t_end]
        hit = np.where(
            rises,
            (shifted[0] == target) & (starts <= rc.limit_rise[t_end]),
            (shifted[1] + lam_v * rc.g == target) & (starts <= rc.limit_fall[t_end]),
        )
        if first_start is not None:
            hit &= starts >= first_start[c]
        t = int(np.flatnonzero(hit)[-1])
        if t == 0:
            break
        value, t_end, limit = float(prev[0 if rises[t] else 1, t]), t, c
        d = d if rises[t] else fall_row
    chain.reverse()
    return chain
