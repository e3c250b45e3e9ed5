"""The vectorised assignment of clips to video buckets: flat lookup tables, no per-clip Python.

:class:`~dataorder.diffusion.calculators.video.VideoBucketCalculator` builds its buckets as spatial
*tiers* (one pixel budget each, shared by the frame counts that have it) and hands them to a
:class:`VideoAssigner`, which answers
:meth:`~dataorder.diffusion.calculators.video.VideoBucketCalculator.assign`. Per chunk of 32,768
clips everything is a table lookup: frame count to frame index; ``W / H`` to a position in the
tier's aspect order (the image calculator's float-bit-pattern cells,
:class:`~dataorder.diffusion.buckets.lookup.Lookup`, with an exact integer re-check near a
threshold); ``W`` and ``H`` to the run ``[lo, hi)`` of positions the upscale limit allows. The last
step holds because a tier is a *staircase* (widths never fall and heights never rise along the
aspect order, true of every preset), so the nearest allowed bucket is the overall nearest clamped
into the run. A tier that is not a staircase is re-checked with :meth:`Tier.position`, the exact
reference rule, for the clips its nearest bucket would upscale too much; so are all tiers when the
limit tables would be too large.

**The rule: assignment of a clip (W, H, F)** (:meth:`VideoAssigner.choose` is the reference in
exact integers, :meth:`VideoAssigner.assign` its vectorised equal):

1. *Time: trimmed, never stretched.* ``f`` is the largest legal frame count ``<= F`` (the clip
   keeps ``f`` of its frames). A clip shorter than the smallest legal count gets
   :data:`TOO_SHORT` (-1). A 1-frame clip goes to ``f = 1`` when 1 is legal.
2. *Space: never upscaled beyond* ``max_upscale = u`` (default 3/2; None means no limit, the
   image calculator's behaviour). Candidates are ``f``'s buckets with ``bw <= u * W`` and
   ``bh <= u * H`` (exact rationals): the cover-resize scale ``max(bw / W, bh / H)`` is at most
   ``u``. If none qualifies the clip gets :data:`TOO_SMALL` (-2): NOTE [ too small: drop, not
   upscale ].
3. *Aspect.* Among the candidates, the nearest in log aspect ratio, which is the least crop
   loss; an exact tie goes to the squarer bucket, then the lower id.

NOTE [ too small: drop, not upscale ]
    The image calculator falls back to the nearest bucket, upscaled, when nothing fits. Video
    drops such a clip instead, with its own id: (a) every shorter frame count of the same
    calculator has a budget at least as large, so there is no smaller tier to fall to; (b) a
    clip upscaled 2-3x spends the full token budget on interpolated pixels, and a bucket of
    blurry clips teaches blur; (c) a distinct id keeps the loss visible and countable, and the
    data owner chooses: raise ``max_upscale``, set it to None, or bucket the dropped clips with
    a second calculator of a smaller budget. The default ``u = 3/2`` keeps a 640x360 clip in a
    480p set (scale 1.3) and an 854x480 clip in a 720p set (1.5); ``u = 1`` is no default,
    because every bucket sits near the budget and a 832x479 clip would have nowhere to go.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder.diffusion.buckets.lookup import CELL_SHIFT, LogTable, Lookup, Rule

__all__ = ["TOO_SHORT", "TOO_SMALL", "Tier", "VideoAssigner"]

#: Id of a clip shorter than the smallest legal frame count.
TOO_SHORT = -1
#: Id of a clip that every bucket of its frame count would upscale by more than ``max_upscale``.
TOO_SMALL = -2

_CHUNK = 1 << 15  # clips per pass of assign(): its temporaries stay in L2
_FRAME_TABLE_LIMIT = 1 << 20  # a frame-count lookup table up to this many entries
_FIT_TABLE_LIMIT = 1 << 22  # upscale-limit tables up to this many entries over all tiers


class Tier:
    """The spatial buckets of one pixel budget, with the tables that assign clips to them.

    Args:
        budget: The pixel budget per frame.
        res: The buckets ``(w, h)``, ascending in aspect ratio.
        u: The upscale limit (None: no limit).
        table: Where a clip's ``W / H`` puts it before the upscale limit; None means the nearest
            bucket in log aspect ratio (the generated sets' rule). A fitted set gives its
            thresholds (:class:`~dataorder.diffusion.buckets.video_set.ThresholdTier`).
    """

    def __init__(
        self,
        budget: int,
        res: list[tuple[int, int]],
        u: Fraction | None,
        table: Rule | None = None,
    ) -> None:
        self.budget = budget
        self.res = res
        self.u = u
        self.k = len(res)
        every = np.arange(self.k, dtype=np.int64)
        self.table: Rule = LogTable(every, res) if table is None else table
        self.lookup = Lookup(self.table, every)
        if u is None:
            self.wmin = np.ones(self.k, dtype=np.int64)
            self.hmin = np.ones(self.k, dtype=np.int64)
        else:
            # bw <= u * W  <=>  W >= ceil(bw / u) = ceil(bw * den / num), in Python ints: a
            # float's rational has a 2**52 denominator and a huge limit a huge numerator, so the
            # products wrap in int64. The results are exact and fit: 1 <= ceil(bw / u) <= bw.
            den, num = u.denominator, u.numerator
            self.wmin = np.array([-(-bw * den // num) for bw, _ in res], dtype=np.int64)
            self.hmin = np.array([-(-bh * den // num) for _, bh in res], dtype=np.int64)
        # A staircase (widths never fall, heights never rise along the aspect order): the buckets
        # a clip may use are then one run of positions [lo, hi).
        self.staircase = bool(np.all(np.diff(self.wmin) >= 0) and np.all(np.diff(self.hmin) <= 0))

    def position(self, w: int, h: int) -> int:
        """The reference rule in exact integers: the position of the nearest allowed bucket in
        log aspect ratio (ties: squarer, then lower), or -1 if every bucket upscales too much."""
        u = self.u
        best, best_d, best_sq = -1, (1, 0), (1, 0)
        for k, (bw, bh) in enumerate(self.res):
            if u is not None and (
                bw * u.denominator > u.numerator * w or bh * u.denominator > u.numerator * h
            ):
                continue
            # exp|ln(W/H) - ln(bw/bh)| = d[0]/d[1] >= 1 and squareness sq[0]/sq[1] >= 1, compared
            # as exact fractions by cross-multiplying; a strict < keeps the lower id on ties.
            a, b = w * bh, h * bw
            d = (a, b) if a >= b else (b, a)
            sq = (bw, bh) if bw >= bh else (bh, bw)
            lhs, rhs = d[0] * best_d[1], best_d[0] * d[1]
            if lhs < rhs or (lhs == rhs and sq[0] * best_sq[1] < best_sq[0] * sq[1]):
                best, best_d, best_sq = k, d, sq
        return best


class VideoAssigner:
    """The flat tables of :meth:`VideoBucketCalculator.assign`, and the vectorised rule over them.

    Args:
        tiers: The spatial tiers, in order of first use.
        frames: The least frame count of a clip in each frame index, ascending: the legal frame
            counts of a generated set (a clip takes the largest it holds), a fitted set's
            thresholds in time.
        frame_tier: Shape ``(F,)``, the tier of each frame count.
        frame_base: Shape ``(F,)``, the first bucket id of each frame count.
        max_upscale: The upscale limit (None: no limit).
    """

    def __init__(
        self,
        tiers: list[Tier],
        frames: tuple[int, ...],
        frame_tier: npt.NDArray[np.intp],
        frame_base: npt.NDArray[np.int64],
        max_upscale: Fraction | None,
    ) -> None:
        self._tiers = tiers
        self._frames = frames
        self._frame_tier = frame_tier
        self._frame_base = frame_base
        self._u = max_upscale
        fmax = self._frames[-1]
        self._fmax = fmax
        # frame count -> 1 + index of the largest legal count <= it (0: too short)
        self._ftab: npt.NDArray[np.intp] | None = None
        if fmax <= _FRAME_TABLE_LIMIT:
            self._ftab = np.searchsorted(
                np.array(self._frames), np.arange(fmax + 1), side="right"
            ).astype(np.intp)
        self._frames_arr = np.array(self._frames, dtype=np.int64)
        # per 1 + frame index: its tier and its first bucket id (row 0: the too-short sentinel)
        self._jt = np.concatenate(([0], self._frame_tier)).astype(np.intp)
        self._jb = np.concatenate(([TOO_SHORT], self._frame_base)).astype(np.int64)
        tiers = self._tiers
        self._cell_lo, self._ncells, self._cells = _aspect_cells(tiers)
        # Upscale limit: from W and H, the run [lo, hi) of positions a clip may use, per tier.
        self._fit: tuple[int, npt.NDArray[Any], npt.NDArray[Any]] | None = None
        self._general = np.array([not t.staircase for t in tiers], dtype=bool)
        if self._u is not None:
            self._fit = _limit_tables(tiers, self._general)
        self._any_general = self._u is not None and bool(self._general.any())
        if self._any_general:
            self._wmin = np.concatenate([t.wmin for t in tiers])
            self._hmin = np.concatenate([t.hmin for t in tiers])
            # global bucket id -> offset of its tier's row in _wmin/_hmin
            starts = np.concatenate(([0], np.cumsum([t.k for t in tiers])[:-1])).astype(np.int64)
            self._tier_start = starts

    def assign(
        self,
        w: npt.NDArray[np.int64],
        h: npt.NDArray[np.int64],
        f: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.int64]:
        """Ids of flat arrays of valid sizes (checked by the caller), in chunks of 32,768."""
        out = np.empty(w.size, dtype=np.int64)
        for s in range(0, w.size, _CHUNK):
            e = min(w.size, s + _CHUNK)
            self._assign_chunk(w[s:e], h[s:e], f[s:e], out[s:e])
        return out

    def _assign_chunk(
        self,
        w: npt.NDArray[np.int64],
        h: npt.NDArray[np.int64],
        f: npt.NDArray[np.int64],
        out: npt.NDArray[np.int64],
    ) -> None:
        if self._ftab is not None:
            j = self._ftab.take(np.minimum(f, self._fmax))
        else:
            j = np.searchsorted(self._frames_arr, f, side="right")
        tier = None if len(self._tiers) == 1 else self._jt.take(j)
        x = w / h
        cell = x.view(np.int64) >> CELL_SHIFT
        cell -= self._cell_lo
        np.clip(cell, 0, self._ncells - 1, out=cell)
        if tier is not None:
            cell += tier * self._ncells
        pos = self._cells.take(cell).astype(np.int64)
        if pos.min() < 0:  # cells a threshold comes near: the tier's own exact rule
            unsafe = np.flatnonzero(pos < 0)
            groups = [0] if tier is None else np.unique(tier[unsafe]).tolist()
            for g in groups:
                rows = unsafe if tier is None else unsafe[tier[unsafe] == g]
                pos[rows] = self._tiers[g].table.positions(w[rows], h[rows], x[rows])
        small = None
        if self._fit is not None:
            cap, hi_tab, lo_tab = self._fit
            wi = np.minimum(w, cap)
            hi_ = np.minimum(h, cap)
            if tier is not None:
                wi += tier * (cap + 1)
                hi_ += tier * (cap + 1)
            hi = hi_tab.take(wi)
            lo = lo_tab.take(hi_)
            np.minimum(pos, hi - 1, out=pos)
            np.maximum(pos, lo, out=pos)
            small = lo >= hi
        np.add(self._jb.take(j), pos, out=out)
        if small is not None and small.any():
            out[small] = TOO_SMALL
        if self._any_general:
            self._fix_general(w, h, j, self._jt.take(j) if tier is None else tier, out)
        if j.min() == 0:
            out[j == 0] = TOO_SHORT

    def choose(self, w: int, h: int, f: int) -> int:
        """The bucket id of one clip ``(w, h, f)`` by the reference rule (module docstring), in
        exact integers: a bucket id, :data:`TOO_SHORT` or :data:`TOO_SMALL`."""
        j = -1
        for i, g in enumerate(self._frames):  # the largest legal count <= f: trim, never stretch
            if g <= f:
                j = i
        if j < 0:
            return TOO_SHORT
        pos = self._tiers[int(self._frame_tier[j])].position(w, h)
        if pos < 0:
            return TOO_SMALL
        return int(self._frame_base[j]) + pos

    def _fix_general(
        self,
        w: npt.NDArray[np.int64],
        h: npt.NDArray[np.int64],
        j: npt.NDArray[np.intp],
        tier: npt.NDArray[np.intp],
        out: npt.NDArray[np.int64],
    ) -> None:
        """Exact answers where a non-staircase tier's nearest bucket upscales too much."""
        rows = np.flatnonzero(self._general.take(tier) & (j > 0) & (out >= 0))
        if rows.size == 0:
            return
        k = self._tier_start.take(tier[rows]) + out[rows] - self._jb.take(j[rows])
        over = (self._wmin.take(k) > w[rows]) | (self._hmin.take(k) > h[rows])
        for i in rows[over].tolist():
            t = self._tiers[int(tier[i])]
            best = t.position(int(w[i]), int(h[i]))
            out[i] = TOO_SMALL if best < 0 else int(self._jb[j[i]]) + best


def _aspect_cells(tiers: list[Tier]) -> tuple[int, int, npt.NDArray[Any]]:
    """``(lo, ncells, cells)``: every tier's aspect cells over one common range of cell
    indices from ``lo``, one row of ``ncells`` per tier."""
    # Aspect cells: each tier's Lookup cells, re-indexed over one common range, one row per
    # tier, so a chunk of clips of many tiers is one take(). Outside a tier's own range its
    # end cells answer (as Lookup.lookup clips the cell index).
    ranged = [t.lookup for t in tiers if t.k > 1]
    if ranged:
        lo = min(lk.lo for lk in ranged)
        hi = max(lk.lo + lk.cells.size - 1 for lk in ranged)
    else:
        lo = hi = 0
    cells = np.arange(lo, hi + 1, dtype=np.int64)
    kmax = max(t.k for t in tiers)
    dtype = np.int16 if kmax < 2**15 else np.int32
    rows = []
    for t in tiers:
        if t.k == 1:
            rows.append(np.zeros(cells.size, dtype=dtype))
            continue
        own = np.clip(cells - t.lookup.lo, 0, t.lookup.cells.size - 1)
        rows.append(t.lookup.cells[own].astype(dtype))
    return lo, cells.size, np.concatenate(rows)


def _limit_tables(
    tiers: list[Tier], general: npt.NDArray[np.bool_]
) -> tuple[int, npt.NDArray[Any], npt.NDArray[Any]] | None:
    """``(cap, his, los)``: per tier and per side up to ``cap``, the run of positions the
    upscale limit allows; None when the tables would be too large (then every tier is marked
    ``general``, the exact way)."""
    cap = int(max(max(int(t.wmin.max()), int(t.hmin.max())) for t in tiers))
    if len(tiers) * (cap + 1) > _FIT_TABLE_LIMIT:
        general[:] = True  # huge buckets: every tier goes the exact way
    else:
        v = np.arange(cap + 1, dtype=np.int64)
        dt = np.int16 if max(t.k for t in tiers) < 2**15 else np.int32
        his, los = [], []
        for t in tiers:
            if t.staircase:
                his.append(np.searchsorted(t.wmin, v, side="right").astype(dt))
                los.append((t.k - np.searchsorted(t.hmin[::-1], v, side="right")).astype(dt))
            else:  # the whole tier; _fix_general re-checks the answers exactly
                his.append(np.full(v.shape, t.k, dtype=dt))
                los.append(np.zeros(v.shape, dtype=dt))
        return cap, np.concatenate(his), np.concatenate(los)
    return None
