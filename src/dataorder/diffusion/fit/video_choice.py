"""The sets the video bucket fit (:mod:`dataorder.diffusion.fit.video`) chooses between: the
search's picks and the calculator's own buckets, each as a fitted set with its counts, waste and
loss.

NOTE [ the preset is a candidate ]
    The search (:mod:`dataorder.diffusion.fit.video_bands`) lists class structures of whole
    global batches; a set of few, odd clips can fall outside all of them (nine clips, one a
    portrait that no landscape shape may upscale: every structure of classes of one batch
    needs a class the portrait cannot join). Whatever the search finds, the calculator's own
    buckets are always a candidate too, as they are: :func:`preset_choice` writes the
    preset's assignment of the clips as a fitted set of one band, one class per spatial bucket
    that holds clips (in ascending aspect ratio, with every frame count its clips use, each
    from its own length on), the thresholds between classes placed between the clips
    either side. It makes exactly the preset's counts, so it wastes and loses what the preset
    does, and the fit never reports a set worse than the preset's: when the preset meets
    ``max_waste`` the fit's loss is at most the preset's, and when nothing meets it the least
    waste the error gives is at most the preset's.

    ``keep_every_clip`` constrains the sets the search makes; the preset's own set is taken as
    it is (its buckets of fewer than ``G`` clips are dropped whole, counted in
    :attr:`SetChoice.exiled`). A set of one band cannot always say what the preset does: the
    preset sends a clip that its nearest bucket would upscale beyond ``max_upscale`` to a
    farther one, and when that puts two clips in classes against their aspect order (or two
    clips of one ratio in two classes) no aspect thresholds make those counts; the preset is
    then no candidate (:func:`preset_choice` returns None).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dataorder.diffusion.buckets.video_set import FittedVideoSet, VideoBand, VideoClass
from dataorder.diffusion.fit.bins import IntArray, extreme_ratio
from dataorder.diffusion.fit.programme import threshold_between
from dataorder.diffusion.fit.video_bands import BandPick

__all__ = ["SetChoice", "choice_of_picks", "preset_choice"]


@dataclass
class SetChoice:
    """A candidate set and what it does to the clips it was fitted on.

    Attributes:
        bands: The set's bands.
        starts: Their ``B - 1`` start keys.
        buckets: ``{(band, class, frames): (clips, global batch size)}`` of every bucket.
        crop: Fixed-point crop of the clips (``fine`` per clip's whole loss).
        trim: Fixed-point trim.
        exiled: Clips of buckets dropped whole (counted in the waste).
        structures: Class structures the search tried for it (0 for the preset's own set).
        drop: Whether remainders are dropped (else padded).
    """

    bands: list[VideoBand]
    starts: list[tuple[int, int, int]]
    buckets: dict[tuple[int, int, int], tuple[int, int]]
    crop: int
    trim: int
    exiled: int
    structures: int
    drop: bool

    @property
    def waste(self) -> int:
        """Clips dropped (or slots padded) by whole global batches per bucket."""
        if self.drop:
            return sum(n % g for n, g in self.buckets.values())
        return sum((-n) % g for n, g in self.buckets.values())

    @property
    def loss(self) -> int:
        """Fixed-point crop plus trim, the minimised objective."""
        return self.crop + self.trim

    def rule(self) -> FittedVideoSet:
        """The set as a fitted set (without what it was fitted to)."""
        return FittedVideoSet(self.bands, self.starts)


def choice_of_picks(picks: list[BandPick]) -> SetChoice:
    """The set the search picked, band by band (:func:`~dataorder.diffusion.fit.video_bands.
    fit_bands`)."""
    made: list[VideoBand] = []
    starts: list[tuple[int, int, int]] = []
    buckets: dict[tuple[int, int, int], tuple[int, int]] = {}
    crop = trim = exiled = 0
    for b, p in enumerate(picks):
        classes = []
        for j, (k, o) in enumerate(zip(p.classes, p.options, strict=True)):
            groups = k.time.groups(o.chain)
            keys = [t for _, t, _, _ in groups]
            if k.first is not None:  # its shortest clips go to the band below
                keys[0] = max(k.first, (groups[0][0], 1, 1))
            classes.append(
                VideoClass(
                    p.band.space.cands[k.cand], tuple(f for f, _, _, _ in groups), tuple(keys)
                )
            )
            n_k, _ = k.time.prog.bucket_waste(o.chain)
            for (f, _, _, _), (cand, _), m in zip(groups, o.chain, n_k.tolist(), strict=True):
                buckets[(b, j, f)] = (m, int(k.time.prog.gs[cand]))
            crop += k.crop
            trim += k.time.trim(o.chain)
            exiled += 0 if k.whole else int(n_k.sum())
        made.append(VideoBand(classes, p.prog.thresholds(p.band.w, p.band.h, p.chain)))
        if p.band.start is not None and made[:-1]:
            starts.append(p.band.start)
    structures = sum(len(p.band.structures) for p in picks)
    drop = picks[0].band.args.drop
    return SetChoice(made, starts, buckets, crop, trim, exiled, structures, drop)


def _thresholds(
    w: IntArray, h: IntArray, cls: IntArray, order: list[tuple[int, int]]
) -> list[tuple[int, int]] | None:
    """Aspect thresholds between the classes ``order`` (ascending aspect) that give each clip
    its class ``cls``, or None where none can (each class's clips must lie between its
    neighbours' shapes, exactly)."""
    ratio = w / h
    top = np.full(len(order), -np.inf)
    bottom = np.full(len(order), np.inf)
    np.maximum.at(top, cls, ratio)
    np.minimum.at(bottom, cls, ratio)
    ends = np.flatnonzero((ratio == top[cls]) | (ratio == bottom[cls]))  # the few at the ends
    highest, lowest = [], []
    for k in range(len(order)):
        at = ends[cls[ends] == k]
        hi_at, lo_at = at[ratio[at] == top[k]], at[ratio[at] == bottom[k]]
        highest.append(extreme_ratio(w[hi_at], h[hi_at], largest=True))
        lowest.append(extreme_ratio(w[lo_at], h[lo_at], largest=False))
    thresholds: list[tuple[int, int]] = []
    for k in range(len(order) - 1):
        s_lo, s_hi = Fraction(*order[k]), Fraction(*order[k + 1])
        lo, hi = max(s_lo, highest[k]), min(s_hi, lowest[k + 1])
        if lo >= hi:  # max_upscale sent a clip past a nearer bucket (NOTE above)
            return None
        thresholds.append(threshold_between(lo, hi, math.sqrt(s_lo * s_hi)))
    return thresholds


def preset_choice(
    clips: tuple[IntArray, IntArray, IntArray],
    ids: IntArray,
    shapes: IntArray,
    frames: IntArray,
    batch: Callable[[int, int, int], int],
    drop: bool,
    fine: float,
) -> SetChoice | None:
    """The calculator's own buckets as a set of one band (NOTE [ the preset is a candidate ]),
    or None where aspect thresholds cannot make its counts.

    Args:
        clips: ``(widths, heights, frames)`` of the clips that have a bucket.
        ids: Their bucket ids under the calculator.
        shapes: ``(K, 2)`` the calculator's ``(w, h)`` by id.
        frames: ``(K,)`` its frame counts by id.
        batch: ``(frames, w, h) -> G``.
        drop: Drop remainders (else pad).
        fine: The fixed point of losses.
    """
    w, h, f = clips
    used, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    res = [(int(a), int(b)) for a, b in shapes[used].tolist()]
    order = sorted(set(res), key=lambda s: Fraction(*s))
    rank = {s: k for k, s in enumerate(order)}
    of_used = np.array([rank[s] for s in res], dtype=np.int64)
    cls = of_used[inverse]
    thresholds = _thresholds(w, h, cls, order)
    if thresholds is None:
        return None
    # every frame count a class's clips use, each from its own length on
    fr = [int(x) for x in frames[used].tolist()]
    classes = []
    buckets: dict[tuple[int, int, int], tuple[int, int]] = {}
    exiled = 0
    for bw, bh in order:
        mine = sorted(fr[i] for i in range(used.size) if res[i] == (bw, bh))
        classes.append(VideoClass((bw, bh), tuple(mine), tuple((g, 1, 1) for g in mine)))
    for i in range(used.size):
        k, g = rank[res[i]], batch(fr[i], *res[i])
        n = int(counts[i])
        buckets[(0, k, fr[i])] = (n, g)
        exiled += n if drop and n < g else 0
    bw_clip, bh_clip = shapes[ids, 0], shapes[ids, 1]
    x, y = w * bh_clip.astype(np.float64), h * bw_clip.astype(np.float64)
    crop = int(np.rint((1.0 - np.minimum(x, y) / np.maximum(x, y)) * fine).sum())
    kept = frames[ids].astype(np.float64)
    trim = round(w.size * fine) - int((kept * np.rint(fine / f)).sum())
    band = VideoBand(classes, thresholds)
    return SetChoice([band], [], buckets, crop, trim, exiled, 0, drop)
