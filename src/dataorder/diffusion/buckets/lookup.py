"""Vectorised bucket assignment: one pass of cheap array operations per chunk of images.

The default bucket rule (nearest bucket in log aspect ratio, exact integer tie-breaks; see
:mod:`dataorder.diffusion.calculators.image`) is a ``searchsorted`` of ``W / H`` over thresholds
between neighbouring buckets. :class:`Lookup` precomputes its answer for every float ``W / H`` cell
so an assignment is a table read; :class:`NearestLogAspect` adds the no-upscale restriction. Every
decision near a threshold is redone in exact integers, so the vectorised answers equal the one-image
reference bit for bit (property-tested).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dataorder._validate import fail

__all__ = [
    "CELL_SHIFT",
    "MAX_IMAGE_SIDE",
    "LogTable",
    "Lookup",
    "NearestLogAspect",
    "Rule",
    "as_size_array",
    "as_size_arrays",
]

#: Image sides are ints in ``[1, MAX_IMAGE_SIDE]``; this keeps every float conversion exact.
MAX_IMAGE_SIDE = 2**31 - 1

# Relative distance under which a float comparison of an image's aspect ratio with a threshold is
# re-done in exact integers. Float errors here are a few ulps (1e-16); this is far above them.
_NEAR = 1e-10
_CHUNK = 1 << 16
_STAIR_TABLE_LIMIT = 1 << 20  # entries of each no-upscale staircase table at most

#: Low bits of a float64 ``W / H`` dropped to name its *cell*: a positive float's bit pattern, read
#: as an int64, is monotone in its value, so its top ``64 - CELL_SHIFT`` bits (12 mantissa bits)
#: cut the positive reals into cells of relative width ``2**-12`` (0.024 %). :class:`Lookup` keeps
#: one answer per cell; the video assignment (:mod:`dataorder.diffusion.buckets.video_assign`)
#: reads the same cells.
CELL_SHIFT = 40


class Rule(Protocol):
    """What :class:`Lookup` needs of a rule: thresholds in ``W / H`` and exact positions."""

    thresholds: npt.NDArray[np.float64]

    def positions(
        self, w: npt.NDArray[np.int64], h: npt.NDArray[np.int64], x: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.int64]:
        """Index in ``ids`` of each image's bucket (exact near a threshold)."""
        ...


def as_size_arrays(**arrays: object) -> list[npt.NDArray[np.int64]]:
    """Each keyword's values through :func:`as_size_array` (named by the keyword), all of one
    shape, else a ValueError naming them and their shapes.

    >>> [a.tolist() for a in as_size_arrays(widths=[640, 480], heights=[480, 640])]
    [[640, 480], [480, 640]]
    """
    out = [as_size_array(name, values) for name, values in arrays.items()]
    if len({a.shape for a in out}) > 1:
        names, shapes = list(arrays), [str(a.shape) for a in out]
        raise ValueError(
            f"{', '.join(names[:-1])} and {names[-1]} must have the same shape; got "
            f"{', '.join(shapes[:-1])} and {shapes[-1]}"
        )
    return out


def as_size_array(name: str, values: object) -> npt.NDArray[np.int64]:
    """``values`` as an int64 array of sizes in ``[1, MAX_IMAGE_SIDE]``, or raise naming
    ``name[i]`` and the value as given.

    Ranges are checked in the input's own dtype before the cast, so a ``uint64`` of ``2**63`` is
    reported as itself, not as the negative int64 it would wrap to. Python ints beyond int64
    (numpy holds them as objects) are checked one by one.
    """
    try:
        arr = np.asarray(values)
    except ValueError:  # ragged nesting: numpy's message would name no argument
        fail(name, "an array of ints", values, TypeError)
    if arr.size == 0:  # [] comes in as float64; an empty array has no wrong values
        return np.zeros(arr.shape, dtype=np.int64)
    flat = arr.ravel()
    if arr.dtype == object and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) for v in flat.tolist()
    ):
        ints = [int(v) for v in flat.tolist()]
        bad = next((i for i, v in enumerate(ints) if not 1 <= v <= MAX_IMAGE_SIDE), None)
        if bad is not None:
            fail(f"{name}[{bad}]", f"an int in [1, {MAX_IMAGE_SIDE}]", ints[bad])
        return np.array(ints, dtype=np.int64).reshape(arr.shape)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        fail(name, "an array of ints", values, TypeError)
    lo, hi = int(arr.min()), int(arr.max())  # in the input's dtype: exact, nothing wraps
    if lo < 1 or hi > MAX_IMAGE_SIDE:
        bad = int(np.flatnonzero((flat < 1) | (flat > MAX_IMAGE_SIDE))[0])
        fail(f"{name}[{bad}]", f"an int in [1, {MAX_IMAGE_SIDE}]", int(flat[bad]))
    return arr.astype(np.int64, copy=False)


class LogTable:
    """Nearest-in-log-aspect-ratio lookup over a subset of buckets ordered by aspect ratio.

    The reference is :meth:`exact_position`: the image lies beyond the threshold between
    neighbours ``(w1, h1)`` and ``(w2, h2)`` iff ``W**2 * h1 * h2 > H**2 * w1 * w2`` (the
    geometric mean of their aspect ratios), with exact ties to the squarer bucket, then the lower
    id. :meth:`positions` does the same with a float ``searchsorted`` and redoes in integers any
    image within ``_NEAR`` of a threshold.
    """

    def __init__(self, ids: npt.NDArray[np.int64], res: Sequence[tuple[int, int]]) -> None:
        self.ids = ids
        self.res = [res[int(i)] for i in ids]
        pairs = list(zip(self.res[:-1], self.res[1:], strict=True))
        self.thresholds = np.array(
            [math.sqrt((w1 * w2) / (h1 * h2)) for (w1, h1), (w2, h2) in pairs], dtype=np.float64
        )
        self.padded = np.concatenate(([-np.inf], self.thresholds, [np.inf]))
        self.tie_high = [
            Fraction(max(w2, h2), min(w2, h2)) < Fraction(max(w1, h1), min(w1, h1))
            for (w1, h1), (w2, h2) in pairs
        ]

    def exact_position(self, w: int, h: int) -> int:
        """Position of a ``w x h`` image in this table, in exact integers."""

        def beyond(j: int) -> bool:
            (w1, h1), (w2, h2) = self.res[j], self.res[j + 1]
            lhs, rhs = w * w * h1 * h2, h * h * w1 * w2
            return lhs > rhs or (lhs == rhs and self.tie_high[j])

        lo, hi = 0, len(self.res) - 1  # beyond(j) is monotone in j: bisect over it
        while lo < hi:
            mid = (lo + hi) // 2
            if beyond(mid):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def positions(
        self, w: npt.NDArray[np.int64], h: npt.NDArray[np.int64], x: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.int64]:
        pos = np.searchsorted(self.thresholds, x, side="left")
        tol = x * _NEAR
        near = (x - self.padded[pos] <= tol) | (self.padded[pos + 1] - x <= tol)
        for i in np.flatnonzero(near):
            pos[i] = self.exact_position(int(w[i]), int(h[i]))
        return pos


class Lookup:
    """A precomputed answer for every float ``W / H``, by its leading bits.

    A positive float's bit pattern, read as an integer, is monotone in its value, so its top
    ``64 - CELL_SHIFT`` bits cut the positive reals into cells of relative width ``2**-12``. A cell
    that no decision threshold comes near (within ``_NEAR``, relative, beyond either edge) has one
    answer for every float in it and for the exact ratio it approximates; it is stored. The few
    images in the other cells go through the rule's own ``positions`` (and, near a threshold,
    exact integers). This is what makes :meth:`MultiTierBucketCalculator.assign` one pass of
    cheap array operations over chunks that stay in cache.
    """

    def __init__(self, rule: Rule, ids: npt.NDArray[np.int64]) -> None:
        self.rule = rule
        self.ids = ids
        t = rule.thresholds
        if t.size == 0:
            self.lo, self.cells = 0, ids[:1].copy()
            return
        lo = int(np.array(t[0] / 4).view(np.int64)) >> CELL_SHIFT
        hi = int(np.array(t[-1] * 4).view(np.int64)) >> CELL_SHIFT
        edges = ((np.arange(lo, hi + 2, dtype=np.int64)) << CELL_SHIFT).view(np.float64).copy()
        edges[0], edges[-1] = 0.0, np.inf  # the end cells also take everything beyond them
        first = np.searchsorted(t, edges[:-1] * (1 - _NEAR), side="left")
        last = np.searchsorted(t, edges[1:] * (1 + _NEAR), side="right")
        safe = first == last
        mid = np.where(np.isfinite(edges[1:]), (edges[:-1] + edges[1:]) / 2, edges[:-1] * 2)
        ones = np.ones(mid.shape, dtype=np.int64)  # positions() ignores w, h away from thresholds
        answer = ids[rule.positions(ones, ones, mid)]
        dtype = np.int8 if ids.max() < 127 else np.int32
        self.lo = lo
        self.cells = np.where(safe, answer, -1).astype(dtype)

    def lookup(
        self, w: npt.NDArray[np.int64], h: npt.NDArray[np.int64], out: npt.NDArray[np.int64]
    ) -> None:
        """Write the ids of images ``w x h`` (1-D, equal length) into ``out``."""
        n = w.size
        size = min(n, _CHUNK)
        xb = np.empty(size, dtype=np.float64)
        cb = np.empty(size, dtype=np.int64)
        ob = np.empty(size, dtype=self.cells.dtype)
        top = self.cells.size - 1
        pending: list[npt.NDArray[np.intp]] = []
        for s in range(0, n, _CHUNK):
            e = min(n, s + _CHUNK)
            xv, cv, ov = xb[: e - s], cb[: e - s], ob[: e - s]
            np.divide(w[s:e], h[s:e], out=xv)
            np.right_shift(xv.view(np.int64), CELL_SHIFT, out=cv)
            np.subtract(cv, self.lo, out=cv)
            np.clip(cv, 0, top, out=cv)
            np.take(self.cells, cv, out=ov)
            out[s:e] = ov
            if ov.min() < 0:
                pending.append(np.flatnonzero(ov < 0) + s)
        if pending:
            rows = np.concatenate(pending)
            wr, hr = w[rows], h[rows]
            out[rows] = self.ids[self.rule.positions(wr, hr, wr / hr)]


class NearestLogAspect:
    """The default rule's assignment over a bucket set: nearest in log aspect ratio, optionally
    only among buckets that fit inside the image (``no_upscale``).

    Args:
        resolutions: ``(w, h)`` of each bucket, by id, in ascending aspect ratio.
        quantization: The lattice step of the bucket sides.
        no_upscale: Only consider buckets that fit inside the image.
    """

    def __init__(
        self, resolutions: Sequence[tuple[int, int]], quantization: int, no_upscale: bool
    ) -> None:
        self._res = list(resolutions)
        self._q = quantization
        self._no_upscale = no_upscale
        self._w = np.array([w for w, _ in self._res], dtype=np.int64)
        self._h = np.array([h for _, h in self._res], dtype=np.int64)
        every = np.arange(len(self._res), dtype=np.int64)
        self.lookup = Lookup(LogTable(every, self._res), every)
        self._fit_lookups: dict[int, Lookup | None] = {}
        self._unique_w = np.unique(self._w)
        self._unique_h = np.unique(self._h)
        # widths never fall and heights never rise along the ids (every default set)
        self._staircase = bool(np.all(np.diff(self._w) >= 0) and np.all(np.diff(self._h) <= 0))
        self._stairs = self._staircase_tables() if no_upscale and self._staircase else None

    def choose(self, w: int, h: int) -> int:
        """The bucket id of one ``w x h`` image: the reference rule, in exact integers.

        Distance ``exp(|ln(W/H) - ln(bw/bh)|) = num/den >= 1`` and squareness
        ``sq_num/sq_den >= 1`` are compared as exact fractions by cross-multiplying; a strict
        ``<`` keeps the lower id on ties.
        """
        candidates = list(range(len(self._res)))
        if self._no_upscale:
            fitting = [k for k in candidates if self._res[k][0] <= w and self._res[k][1] <= h]
            candidates = fitting or candidates
        best, best_d, best_sq = -1, (1, 0), (1, 0)
        for k in candidates:
            bw, bh = self._res[k]
            a, b = w * bh, h * bw
            d = (a, b) if a >= b else (b, a)
            sq = (bw, bh) if bw >= bh else (bh, bw)
            lhs, rhs = d[0] * best_d[1], best_d[0] * d[1]
            if lhs < rhs or (lhs == rhs and sq[0] * best_sq[1] < best_sq[0] * sq[1]):
                best, best_d, best_sq = k, d, sq
        return best

    def assign(self, w: npt.NDArray[np.int64], h: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Bucket ids of 1-D arrays of image sizes (the same as :meth:`choose`, vectorised)."""
        ids = np.empty(w.shape, dtype=np.int64)
        self.lookup.lookup(w, h, ids)
        if self._no_upscale:
            self.refit(w, h, ids)
        return ids

    def refit(
        self, w: npt.NDArray[np.int64], h: npt.NDArray[np.int64], ids: npt.NDArray[np.int64]
    ) -> None:
        """Re-assign, in place, images whose nearest bucket does not fit inside them.

        If the overall nearest bucket fits, it is also the nearest among the fitting ones (with
        the same tie rule), so only the others are looked at. When widths never fall and heights
        never rise along the ids (a staircase, as every default preset is), the fitting buckets
        are one run of ids, found by two table lookups. Otherwise which buckets fit depends only
        on how many distinct bucket widths are ``<= W`` and heights ``<= H``, so images are
        grouped by that pair and each group uses one cached lookup.
        """
        bad_parts = []
        for s in range(0, w.size, _CHUNK):
            k, wc, hc = ids[s : s + _CHUNK], w[s : s + _CHUNK], h[s : s + _CHUNK]
            over = np.flatnonzero((self._w.take(k) > wc) | (self._h.take(k) > hc))
            if over.size == 0:
                continue
            if not self._staircase:
                bad_parts.append(over + s)
                continue
            # Staircase: the fitting buckets are the ids in [lo, hi), and the nearest of a run of
            # buckets ordered by aspect ratio is the overall nearest clamped into the run.
            if self._stairs is not None:
                count_w, first_h = self._stairs
                q = self._q
                hi = count_w.take(np.minimum(wc[over] // q, count_w.size - 1))
                lo = first_h.take(np.minimum(hc[over] // q, first_h.size - 1))
            else:  # the same counts, searched: the tables would be too large
                hi = np.searchsorted(self._w, wc[over], side="right")
                lo = self._h.size - np.searchsorted(self._h[::-1], hc[over], side="right")
            fits = lo < hi
            rows = over[fits] + s
            ids[rows] = np.clip(ids[rows], lo[fits], hi[fits] - 1)
        if not bad_parts:
            return
        bad = np.concatenate(bad_parts)
        stride = len(self._unique_h) + 1
        iw = np.searchsorted(self._unique_w, w[bad], side="right")
        ih = np.searchsorted(self._unique_h, h[bad], side="right")
        key = iw * stride + ih
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        starts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_key)) + 1, [order.size]))
        for a, b in itertools.pairwise(starts):
            group = int(sorted_key[a])
            if group not in self._fit_lookups:
                self._fit_lookups[group] = self._fit_lookup(*divmod(group, stride))
            lookup = self._fit_lookups[group]
            if lookup is None:
                continue  # nothing fits: keep the overall nearest (the documented fallback)
            rows = bad[order[a:b]]
            found = np.empty(rows.size, dtype=np.int64)
            lookup.lookup(w[rows], h[rows], found)
            ids[rows] = found

    def _staircase_tables(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """Lookup tables of a staircase's no-upscale run, or None if they would be too large.

        Indexed by ``t = side // q``: how many bucket widths are ``<= t * q`` (the run's end) and
        the first id whose height is ``<= t * q`` (its start). A fine lattice with a wide bucket
        (``quantization=1``, a 10,000:1 ratio at 2**40 pixels: 10**8 steps) would need GBs.
        """
        size = int(max(self._w.max(), self._h.max())) // self._q + 1
        if size > _STAIR_TABLE_LIMIT:
            return None
        steps = np.arange(size, dtype=np.int64)
        count_w = np.searchsorted(self._w, steps * self._q, side="right").astype(np.int64)
        fit_h = np.searchsorted(self._h[::-1], steps * self._q, side="right").astype(np.int64)
        return count_w, len(self._h) - fit_h

    def _fit_lookup(self, iw: int, ih: int) -> Lookup | None:
        if iw == 0 or ih == 0:
            return None
        fit = np.flatnonzero(
            (self._w <= self._unique_w[iw - 1]) & (self._h <= self._unique_h[ih - 1])
        ).astype(np.int64)
        return Lookup(LogTable(fit, self._res), fit) if fit.size else None
