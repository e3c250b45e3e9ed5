"""Exact binning of image aspect ratios for the bucket fit (:mod:`dataorder.diffusion.fit.images`).

One pass over the images cuts the aspect-ratio axis into bins that no candidate bucket, and no
threshold the fit may choose, ever splits: :func:`bin_images` gives each bin its count and the
fixed-point sums the crop loss needs (per label, so the video fit bins every clip once and reads
the bins of any range of frame counts as a sum), and :func:`gap_bounds` reads back the exact
ratios either side of a chosen boundary, from which the thresholds are made.

NOTE [ exact bins ]
    Image aspect ratios are binned in one pass, without sorting the images. The top 24 bits of
    the float64 ``W / H`` (sign, exponent, 12 mantissa bits) name a *cell* ``(e_c, e_{c+1}]``,
    4,096 per octave. A correctly rounded quotient lands on the wrong side of a cell edge only
    if it equals the edge, and that case is settled exactly (``W <= H * e`` is exact in float64:
    ``e`` has 13 significant bits and ``H < 2**31``). *Split points* cut cells further: each
    candidate's own ratio, twice (so images of exactly that ratio form their own bin), and the
    log-midpoint ``sqrt(s_a * s_b)`` of every pair of candidates, so that the nearest-bucket
    rule of any subset of the candidates is one of the solutions searched. They are decided in
    exact integers (``W * q >= H * p``; ``W**2 * h_a * h_b > H**2 * w_a * w_b`` redone in Python
    integers for the rare images within ``1e-12`` of an irrational midpoint). Per bin, the sums
    of ``r`` and ``1 / r`` are accumulated as integers (fixed point relative to the cell edge),
    which float64 adds exactly in any order, so the fit depends only on the multiset of sizes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "CHUNK",
    "EPS",
    "Bins",
    "LabelledBins",
    "Split",
    "bin_images",
    "candidate_splits",
    "extreme_ratio",
    "gap_bounds",
    "ratio_range",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

_SHIFT = 40  # keep 12 mantissa bits: cells 2**-12 (0.024 %) wide in relative terms
_LOW = (1 << _SHIFT) - 1
#: Relative distance under which the fit's float comparisons of aspect ratios are redone in exact
#: integers (or, where only a range is needed, widened by it so that rounding can only keep more).
EPS = 1e-12
#: Images per pass of the fit's vectorised loops: their temporaries stay in cache.
CHUNK = 1 << 16


# -- binning ------------------------------------------------------------------------------------


@dataclass
class Split:
    """A cut of the aspect axis: above it iff ``r >= v`` (kind 0) or ``r > v`` (kind 1).

    ``v**2 = n2 / d2`` (reduced), so a log-midpoint ``sqrt(s_a * s_b)`` is exact too.
    """

    n2: int
    d2: int
    kind: int
    p: int = 0  # v = p / q when v is rational, else q = 0
    q: int = 0
    cell: int = 0
    on_edge: bool = False  # kind 1 exactly at a cell's top edge: that edge is the cut already
    bound: int = 0  # uncompacted bin boundary index, set once the layout is known

    def value(self) -> float:
        return self.p / self.q if self.q else math.sqrt(self.n2 / self.d2)

    def above_edge(self, cell: int) -> int:
        """Sign of ``v - e_cell``, exactly."""
        a, b = _edge(cell).as_integer_ratio()
        lhs, rhs = self.n2 * b * b, self.d2 * a * a
        return (lhs > rhs) - (lhs < rhs)


def _edge(cell: int) -> float:
    return float(np.array(cell << _SHIFT, dtype=np.int64).view(np.float64))


def _cell_of(value: float) -> int:
    return int(np.array(value, dtype=np.float64).view(np.int64)) >> _SHIFT


def _locate(s: Split) -> None:
    """Set ``s.cell``, the cell ``(e_c, e_{c+1}]`` that holds ``v``, and ``s.on_edge``."""
    v = s.value()
    c = _cell_of(v)
    if abs(v - _edge(c)) <= 1e-9 * v or abs(_edge(c + 1) - v) <= 1e-9 * v:
        while s.above_edge(c) <= 0:
            c -= 1
        while s.above_edge(c + 1) > 0:
            c += 1
    s.cell = c
    s.on_edge = s.kind == 1 and s.above_edge(c + 1) == 0


def _order(a: Split, b: Split) -> int:
    lhs, rhs = a.n2 * b.d2, b.n2 * a.d2
    return (lhs > rhs) - (lhs < rhs) or a.kind - b.kind


def candidate_splits(
    cands: list[tuple[int, int]],
) -> tuple[list[Split], dict[tuple[int, ...], int]]:
    """Candidate ratios (both kinds) and pairwise log-midpoints, deduplicated, by value: the cuts
    :func:`bin_images` makes (NOTE [ exact bins ]).

    The keys: ``(0, i, kind)`` for candidate ``i``'s ratio, ``(1, i, j, kind)`` for the
    log-midpoint of candidates ``i < j``; values index the returned list.
    """
    found: dict[tuple[int, int, int], Split] = {}
    keys: dict[tuple[int, ...], tuple[int, int, int]] = {}

    def add(key: tuple[int, ...], s: Split) -> None:
        k = (s.n2, s.d2, s.kind)
        found.setdefault(k, s)
        keys[key] = k

    reduced = [(w // math.gcd(w, h), h // math.gcd(w, h)) for w, h in cands]
    for i, (a, b) in enumerate(reduced):
        for kind in (0, 1):
            add((0, i, kind), Split(a * a, b * b, kind, p=a, q=b))
    for i, (wa, ha) in enumerate(reduced):
        for j in range(i + 1, len(reduced)):
            wb, hb = reduced[j]
            g = math.gcd(wa * wb, ha * hb)
            n2, d2 = wa * wb // g, ha * hb // g
            rn, rd = math.isqrt(n2), math.isqrt(d2)
            if rn * rn == n2 and rd * rd == d2:
                for kind in (0, 1):
                    add((1, i, j, kind), Split(n2, d2, kind, p=rn, q=rd))
            else:  # irrational: no image lies on it, one cut serves both kinds
                s = Split(n2, d2, 1)
                add((1, i, j, 0), s)
                add((1, i, j, 1), s)
    ordered = sorted(found.values(), key=functools.cmp_to_key(_order))
    index = {(s.n2, s.d2, s.kind): i for i, s in enumerate(ordered)}
    for s in ordered:
        _locate(s)
    return ordered, {key: index[k] for key, k in keys.items()}


def ratio_range(w: IntArray, h: IntArray) -> tuple[float, float]:
    """Least and greatest float ``W / H`` of 1-D int64 arrays, in cache-sized chunks."""
    lo, hi = math.inf, 0.0
    buf = np.empty(min(w.size, CHUNK))
    for s in range(0, w.size, CHUNK):
        xv = buf[: min(w.size, s + CHUNK) - s]
        np.divide(w[s : s + CHUNK], h[s : s + CHUNK], out=xv)
        lo, hi = min(lo, float(xv.min())), max(hi, float(xv.max()))
    return lo, hi


@dataclass
class Bins:
    """Non-empty bins in ascending aspect ratio, and where each split falls among them.

    Attributes:
        counts: ``(S,)`` images per bin.
        sum_r: ``(S,)`` sum of ``W / H`` over the bin's images (exact, see NOTE [ exact bins ]).
        sum_inv: ``(S,)`` sum of ``H / W``.
        split_pos: ``(num_splits,)`` the boundary index (in ``[0, S]``) of each split.
        sub: Uncompacted bin of every image binned (int32 or int64), for :func:`gap_bounds`.
        keep: ``(S,)`` uncompacted index of each non-empty bin.
        total: Number of uncompacted bins.
    """

    counts: IntArray
    sum_r: FloatArray
    sum_inv: FloatArray
    split_pos: IntArray
    sub: npt.NDArray[np.integer[Any]]
    keep: IntArray
    total: int


@dataclass
class LabelledBins:
    """The bins of images that carry a label each (a clip's frame count, say), kept per label so
    that the bins of any range of labels are a sum of rows (:meth:`select`).

    Counts and the fixed-point sums of NOTE [ exact bins ] are integers held in float64 below
    ``2**53`` for all images together, so summing rows is exact in any order.

    Attributes:
        counts: ``(L, U)`` images per label and bin, over the ``U`` bins some image falls in.
        sum_a: ``(L, U)`` fixed-point sums of the offsets of ``W / H`` within their cell.
        sum_b: ``(L, U)`` fixed-point sums of the offsets of ``H / W``.
        keep: ``(U,)`` uncompacted index of each of those bins.
        edge: ``(U,)`` the lower edge of each one's cell.
        bound: ``(num_splits,)`` each split's boundary among the ``U`` bins, in ``[0, U]``.
        sub: ``(N,)`` uncompacted bin of every image.
        labels: ``(N,)`` label of every image (None: all 0).
        total: Number of uncompacted bins.
        shift: The fixed point of ``sum_a``: ``r = e + spacing(e) * 2**shift * a``.
        kb: The fixed point of ``sum_b``: ``1 / r = (1 - b / 2**kb) / e``.
    """

    counts: IntArray
    sum_a: FloatArray
    sum_b: FloatArray
    keep: IntArray
    edge: FloatArray
    bound: IntArray
    sub: npt.NDArray[np.integer[Any]]
    labels: IntArray | None
    total: int
    shift: int
    kb: int

    def select(self, lo: int, hi: int) -> Bins:
        """The bins of the images whose label is in ``[lo, hi)``."""
        counts = self.counts[lo:hi].sum(axis=0)
        nonzero = counts > 0
        cols = np.flatnonzero(nonzero)
        nk = counts[cols].astype(np.float64)
        eb = self.edge[cols]
        sum_r = nk * eb + np.spacing(eb) * 2.0**self.shift * self.sum_a[lo:hi, cols].sum(axis=0)
        sum_inv = (nk - self.sum_b[lo:hi, cols].sum(axis=0) * 2.0**-self.kb) / eb
        compact = np.concatenate(([0], np.cumsum(nonzero))).astype(np.int64)
        if self.labels is None or (lo <= 0 and hi >= self.counts.shape[0]):
            sub = self.sub
        else:
            sub = self.sub[(self.labels >= lo) & (self.labels < hi)]
        return Bins(
            counts[cols], sum_r, sum_inv, compact[self.bound], sub, self.keep[cols], self.total
        )


def bin_images(
    w: IntArray,
    h: IntArray,
    splits: list[Split],
    x_lo: float,
    x_hi: float,
    labels: IntArray | None = None,
    num_labels: int = 1,
) -> LabelledBins:
    """One chunked pass: every image's bin, and per label and bin the count and fixed-point sums.

    Args:
        w: Image widths, 1-D int64.
        h: Image heights, the same shape.
        splits: The cuts of :func:`candidate_splits` (their ``bound`` is set here).
        x_lo: The least ``W / H`` as a float (:func:`ratio_range`).
        x_hi: The greatest.
        labels: Optional label of every image, ints in ``[0, num_labels)``.
        num_labels: ``L``.

    Returns:
        The :class:`LabelledBins`; ``select(0, num_labels)`` are the bins of all the images.
    """
    n_img = w.size
    cmin, cmax = _cell_of(x_lo) - 1, _cell_of(x_hi)  # one spare cell below: edge images
    ncells = cmax - cmin + 1
    inside = [i for i, s in enumerate(splits) if cmin <= s.cell <= cmax and not s.on_edge]
    in_cell = np.array([splits[i].cell - cmin for i in inside], dtype=np.int64)
    nsplit = np.bincount(in_cell, minlength=ncells).astype(np.int64)
    first = np.concatenate(([0], np.cumsum(nsplit)[:-1])).astype(np.int64)
    base = np.arange(ncells, dtype=np.int64) + first
    total = ncells + len(inside)
    for j, i in enumerate(inside):
        c = splits[i].cell - cmin
        splits[i].bound = int(base[c] + (j - first[c]) + 1)
    for s in splits:
        if s.on_edge:  # the cut is the bottom edge of the next cell
            c = s.cell - cmin + 1
            s.bound = 0 if c <= 0 else total if c >= ncells else int(base[c])
        elif s.cell < cmin:
            s.bound = 0
        elif s.cell > cmax:
            s.bound = total
    cut = _CellSplits(splits, inside, first, nsplit)
    has_split = nsplit > 0
    edges = (np.arange(cmin, cmax + 1, dtype=np.int64) << _SHIFT).view(np.float64)

    # Fixed point (NOTE [ exact bins ]): a float r in cell c is e_c + ulp_c * low exactly, and
    # 1 / r = (1 - B / 2**kb) / e_c with B = floor((1 - e_c / r) * 2**kb); the integer sums of
    # low >> shift and of B stay below 2**53, so float64 adds them exactly in any order.
    shift = max(0, n_img.bit_length() - 13)
    kb = min(52, 64 - n_img.bit_length())
    full = float((1 << _SHIFT) >> shift)
    width = num_labels * total
    counts = np.zeros(width, dtype=np.int64)
    sum_a = np.zeros(width)
    sum_b = np.zeros(width)
    sub_all: npt.NDArray[np.integer[Any]] = np.empty(
        n_img, dtype=np.int32 if total < 2**31 else np.int64
    )
    for start in range(0, n_img, CHUNK):
        wc, hc = w[start : start + CHUNK], h[start : start + CHUNK]
        x = wc / hc
        bits = x.view(np.int64)
        rel = (bits >> _SHIFT) - cmin
        low = bits & _LOW
        on = np.flatnonzero(low == 0)
        down = on[wc[on] <= hc[on] * x[on]]  # on or below the cell's edge: the cell below
        rel[down] -= 1
        sub = base[rel]
        idx = np.flatnonzero(has_split[rel])
        if idx.size:
            sub[idx] += cut.below(wc[idx], hc[idx], x[idx], rel[idx])
        sub_all[start : start + CHUNK] = sub
        a = (low >> shift).astype(np.float64)
        a[down] = full
        b = np.floor((1.0 - edges[rel] / x) * 2.0**kb)
        key = sub if labels is None else labels[start : start + CHUNK] * total + sub
        counts += np.bincount(key, minlength=width)
        sum_a += np.bincount(key, weights=a, minlength=width)
        sum_b += np.bincount(key, weights=b, minlength=width)

    per_label = counts.reshape(num_labels, total)
    used = per_label.any(axis=0)
    keep = np.flatnonzero(used)
    bin_cell = np.repeat(np.arange(ncells), 1 + nsplit)
    compact = np.concatenate(([0], np.cumsum(used))).astype(np.int64)
    return LabelledBins(
        counts=per_label[:, keep],
        sum_a=sum_a.reshape(num_labels, total)[:, keep],
        sum_b=sum_b.reshape(num_labels, total)[:, keep],
        keep=keep,
        edge=edges[bin_cell[keep]],
        bound=np.array([compact[s.bound] for s in splits], dtype=np.int64),
        sub=sub_all,
        labels=labels,
        total=total,
        shift=shift,
        kb=kb,
    )


class _CellSplits:
    """The splits inside cells, as arrays: how many of its own cell's splits an image is above."""

    def __init__(
        self, splits: list[Split], inside: list[int], first: IntArray, nsplit: IntArray
    ) -> None:
        self.splits = [splits[i] for i in inside]
        self.first, self.nsplit = first, nsplit
        self.p = np.array([s.p for s in self.splits], dtype=np.int64)
        self.q = np.array([s.q for s in self.splits], dtype=np.int64)
        self.strict = np.array([s.kind == 1 for s in self.splits], dtype=bool)
        self.irrational = self.q == 0
        self.value = np.array([s.value() for s in self.splits])

    def below(self, w: IntArray, h: IntArray, x: FloatArray, rel: IntArray) -> IntArray:
        f, ns = self.first[rel], self.nsplit[rel]
        k = np.zeros(w.size, dtype=np.int64)
        for j in range(int(ns.max())):
            act = np.flatnonzero(ns > j)
            s = f[act] + j
            lhs, rhs = w[act] * self.q[s], h[act] * self.p[s]
            above = np.where(self.strict[s], lhs > rhs, lhs >= rhs)
            irr = np.flatnonzero(self.irrational[s])
            if irr.size:
                xv, vv = x[act[irr]], self.value[s[irr]]
                guess = xv > vv
                for u in np.flatnonzero(np.abs(xv - vv) <= EPS * xv).tolist():
                    cut = self.splits[int(s[irr[u]])]
                    ww, hh = int(w[act[irr[u]]]), int(h[act[irr[u]]])
                    guess[u] = ww * ww * cut.d2 > hh * hh * cut.n2
                above[irr] = guess
            k[act] += above
        return k


# -- the gaps between bins ----------------------------------------------------------------------


def extreme_ratio(w: IntArray, h: IntArray, largest: bool) -> Fraction:
    """The exact largest (or smallest) ``W / H`` among images of equal float ratio."""
    i = 0
    while True:
        lhs, rhs = w * h[i], h * w[i]
        beyond = np.flatnonzero(lhs > rhs if largest else lhs < rhs)
        if beyond.size == 0:
            return Fraction(int(w[i]), int(h[i]))
        i = int(beyond[0])


def gap_bounds(
    bins: Bins, w: IntArray, h: IntArray, positions: list[int]
) -> list[tuple[Fraction, Fraction]]:
    """For each boundary position, the largest ratio below it and the smallest above it.

    ``w`` and ``h`` are the images ``bins`` were made of (``bins.sub`` is their bins). Only the
    images of the bins next to a boundary are looked at (a radix sort of small ids).
    """
    wanted = sorted(
        {int(bins.keep[t - 1]) for t in positions} | {int(bins.keep[t]) for t in positions}
    )
    lut: npt.NDArray[np.integer[Any]] = np.full(
        bins.total, -1, dtype=np.int16 if len(wanted) < 2**15 else np.int32
    )
    lut[wanted] = np.arange(len(wanted))
    loc = lut[bins.sub]
    sel = np.flatnonzero(loc >= 0)
    order = sel[np.argsort(loc[sel], kind="stable")]
    grp = loc[order]
    starts = np.flatnonzero(np.concatenate(([True], np.diff(grp) != 0)))
    ws, hs = w[order], h[order]
    xs = ws / hs
    top = np.maximum.reduceat(xs, starts)
    bottom = np.minimum.reduceat(xs, starts)
    ends = [*starts[1:].tolist(), order.size]
    low_of, high_of = {}, {}
    for gi, b in enumerate(wanted):
        a, e = int(starts[gi]), ends[gi]
        at = np.flatnonzero(xs[a:e] == top[gi]) + a
        low_of[b] = extreme_ratio(ws[at], hs[at], largest=True)
        at = np.flatnonzero(xs[a:e] == bottom[gi]) + a
        high_of[b] = extreme_ratio(ws[at], hs[at], largest=False)
    return [(low_of[int(bins.keep[t - 1])], high_of[int(bins.keep[t])]) for t in positions]
