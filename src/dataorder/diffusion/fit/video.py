"""Fit a video bucket set to clips and a job layout: the least loss of content under a waste budget.

Every step of the bucket sampler is one global batch of ``G`` clips of one bucket
``(frames, w, h)``, so a bucket of ``n`` clips drops ``n mod G`` of them (or pads ``(-n) mod G``
slots). A preset's hundreds of buckets spread a fine-tuning set far too thin: on 50,000 clips
and 64 ranks, ``wan2.1-480p`` drops a fifth of them with cost-model batches (BENCHMARKS.md,
section 8). :func:`fit_video_to_data` (and ``VideoBucketCalculator.fit_to_data``) chooses which
frame counts, which spatial buckets per frame count and the thresholds between them, within the
calculator's own rules (token budget, VAE compression, patch, legal frame counts, lattice,
``max_upscale``), so that at most ``max_waste`` of the clips that have a bucket are dropped (or
padded) by whole global batches, at the least loss of content.

NOTE [ video fit ]
    *The set* (:mod:`dataorder.diffusion.buckets.video_set`): bands of clip lengths; in each band,
    aspect classes split by exact aspect thresholds, as an image fit's buckets are; each class
    has one shape and its own frame counts, split by thresholds on the clip's key ``(F, W, H)``
    (NOTE [ thresholds in time ] in :mod:`dataorder.diffusion.fit.video_time`). A clip is
    trimmed, never stretched, and never upscaled beyond ``max_upscale``. The clips the
    calculator's own buckets call too short or too small (ids -1, -2) stay so, and no other clip
    of the data becomes so: the fit only takes clips that have a bucket, a frame count only
    holds clips at least that long, and a class never holds a clip its shape would upscale
    beyond ``max_upscale``.

    *The loss* of a clip is ``crop + trim``: the share of its area cut by cover-resize-and-crop
    (``1 - min(r / s, s / r)``) plus the share of its frames cut by trimming (``(F - f) / F``),
    weighted alike (:data:`TRIM_WEIGHT`). Both are shares of the clip's content (pixels x
    frames); a bucket really keeps ``(1 - crop) * (1 - trim)`` of it, so the sum overstates the
    loss by ``crop * trim`` (0.1 % of the content for a clip cropped 3 % and trimmed 3 %) and
    keeps the objective a sum over clips. The fit minimises the mean loss over the clips that
    have a bucket. Trimming clips longer than the longest frame count to it is part of the trim,
    the same for every set of one frame rule.

    *Why this shape.* A bucket's count can only change by whole groups of clips the rule cannot
    tell apart, and every bucket needs whole global batches. Aspect thresholds move clips of odd
    ratios, of every length, between classes: fine steps, so a class's total can be made whole
    batches. Thresholds in time move the clips of one key: a length holds hundreds of clips of a
    large class, a length and a size tens, so a class's frame counts are cut by ``(F, W, H)``.
    With cost-model batches short clips take much larger global batches than long ones, so each
    band (frame counts of one batch size, NOTE [ video fit bands ] in
    :mod:`dataorder.diffusion.fit.video_bands`) has classes of its own, and a class hands the
    remainder of its total, its shortest clips, to the band below.

    *The search.* Per band: the class structures are the image fit's exact programme over the
    band's clips (least crop, classes of at least ``kappa`` global batches, for a few ``kappa``
    and numbers of falls of the residue); each class's frame counts are the chain programme over
    its keys (the exact least trim for each number of falls, NOTE [ waste telescopes ] in
    :mod:`dataorder.diffusion.fit.programme`; its relaxation when a class's buckets take several
    batch sizes); a structure's choices are merged exactly into a Pareto front of waste against
    loss. The budget is shared between bands through those fronts. Each step is exact; the whole
    is a search over the structures it lists, not a proof that no other set does better.

    *Every clip trained* (``keep_every_clip``, with ``drop_last``): every bucket holds at least
    one global batch, so no bucket is dropped whole every epoch; only a class that cannot fill
    one at any frame count (stills with a batch of a thousand, say) is, and
    :attr:`VideoFitResult.exiled` counts its clips (inside the waste).

Example:
    >>> import numpy as np
    >>> from dataorder.diffusion.calculators.video import VideoBucketCalculator
    >>> rng = np.random.default_rng(0)
    >>> h = rng.choice([720, 1080], 5_000)
    >>> w = np.where(rng.random(5_000) < 0.7, h * 16 // 9, h * 9 // 16)
    >>> f = rng.integers(17, 200, 5_000)
    >>> base = VideoBucketCalculator.from_preset("wan2.1-480p")
    >>> fit = fit_video_to_data(w, h, f, base, global_batch_size=64)
    >>> fit.waste <= 0.01 * 5_000, fit.too_short, fit.too_small
    (True, 0, 0)
    >>> calc = fit.calculator()
    >>> bool((np.bincount(calc.assign(w, h, f), minlength=len(calc)) == fit.counts).all())
    True
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_int, fail
from dataorder.diffusion.buckets.lookup import as_size_arrays
from dataorder.diffusion.buckets.video_set import VIDEO_FIT_VERSION, FittedVideoSet
from dataorder.diffusion.fit.bins import IntArray
from dataorder.diffusion.fit.candidates import DEFAULT_MIN_SHARE, check_share, clip_digest
from dataorder.diffusion.fit.programme import waste_budget
from dataorder.diffusion.fit.video_bands import (
    BandPick,
    BandSpec,
    FitSettings,
    band_layouts,
    band_spans,
    fit_bands,
    picks_loss,
)
from dataorder.diffusion.fit.video_choice import SetChoice, choice_of_picks, preset_choice
from dataorder.diffusion.fit.video_classes import checked_batch

__all__ = [
    "DEFAULT_VIDEO_MAX_CANDIDATES",
    "TRIM_WEIGHT",
    "VideoFitResult",
    "fit_video_to_data",
]

#: Weight of the trim loss against the crop loss (NOTE [ video fit ]): a frame cut is as much
#: content lost as the same share of every frame's area.
TRIM_WEIGHT = 1

#: Generated spatial candidates per pixel budget searched at most, besides the calculator's own
#: buckets (a video set needs fewer shapes per frame count than an image set).
DEFAULT_VIDEO_MAX_CANDIDATES = 16


@runtime_checkable
class VideoCalculator(Protocol):
    """What the fit reads of the calculator whose rules it keeps (a ``VideoBucketCalculator``).

    Checked with ``isinstance`` (every member present), so that an image calculator or None is
    refused by name; the calculator class itself is not imported (calculators import the fit).
    """

    @property
    def legal_frame_counts(self) -> tuple[int, ...]: ...

    @property
    def quantization(self) -> int: ...

    @property
    def max_upscale(self) -> Fraction | None: ...

    @property
    def bucket_set(self) -> Any: ...

    @property
    def resolutions(self) -> IntArray: ...

    @property
    def bucket_frames(self) -> IntArray: ...

    def frame_budget(self, frames: int) -> int: ...

    def shape_info(self, width: int, height: int, frames: int) -> dict[str, Any]: ...

    def assign(
        self, widths: npt.ArrayLike, heights: npt.ArrayLike, frames: npt.ArrayLike
    ) -> IntArray: ...

    def config(self) -> dict[str, Any]: ...


def fit_video_to_data(
    widths: npt.ArrayLike,
    heights: npt.ArrayLike,
    frames: npt.ArrayLike,
    base: VideoCalculator,
    *,
    global_batch_size: int | Callable[[dict[str, Any]], int],
    max_waste: float = 0.01,
    drop_last: bool = True,
    keep_every_clip: bool = True,
    min_share: float = DEFAULT_MIN_SHARE,
    max_candidates: int = DEFAULT_VIDEO_MAX_CANDIDATES,
) -> VideoFitResult:
    """The bucket set of least mean loss whose lock-step waste fits (NOTE [ video fit ]).

    Args:
        widths: Integer array of clip widths (``N`` clips, any shape).
        heights: Integer array of heights, the same shape.
        frames: Integer array of frame counts (resampled to the model's rate if the pipeline
            does that: :func:`~dataorder.diffusion.buckets.video_frames.resample_frame_counts`).
        base: A calculator of generated buckets (a preset, say): its token budget, VAE
            compression, patch, legal frame counts, quantization and ``max_upscale`` are kept,
            and its own set, as it is, is always a candidate (NOTE [ the preset is a
            candidate ] in :mod:`dataorder.diffusion.fit.video_choice`).
        global_batch_size: ``G`` = per-rank batch x data-parallel ranks, or a callable of the
            bucket (a dict as ``base.shape_info`` gives: ``frames``, ``resolution``,
            ``tokens`` ...) that gives each bucket its own, e.g.
            ``base.global_batch_size(ranks, batch)`` for cost-model batches.
        max_waste: Budget for dropped (or padded) clips as a share of those that have a bucket,
            in ``[0, 1)``, compared as ``waste / n <= max_waste`` in floats.
        drop_last: Drop each bucket's remainder (else pad its last global batch).
        keep_every_clip: With ``drop_last``, every bucket holds at least its ``G`` clips where
            a class can fill one (NOTE [ video fit ]).
        min_share: Least share of a pixel budget a generated candidate uses.
        max_candidates: Generated candidates per pixel budget searched at most.

    Returns:
        A :class:`VideoFitResult`; ``result.calculator()`` is the calculator over the set.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If an argument is out of range, no clip has a bucket, or no bucket set the
            fit searches meets ``max_waste``: the message then gives the least waste it found.
    """
    w, h, f = as_size_arrays(widths=widths, heights=heights, frames=frames)
    w, h, f = w.ravel(), h.ravel(), f.ravel()
    if not isinstance(base, VideoCalculator):
        fail("base", "a VideoBucketCalculator", base, TypeError)
    if base.bucket_set is not None:
        fail("base", "a calculator of generated buckets (not a fitted one)", base, TypeError)
    share = check_share("max_waste", max_waste, low=0.0, high=1.0, open_low=False)
    if share >= 1.0:
        fail("max_waste", "a float in [0.0, 1.0)", max_waste)
    drop = check_bool("drop_last", drop_last)
    keep_all = check_bool("keep_every_clip", keep_every_clip) and drop
    min_share = check_share("min_share", min_share, low=0.0, high=1.0, open_low=True)
    limit = check_int("max_candidates", max_candidates, min_value=0)
    batch = checked_batch(global_batch_size, base.shape_info)

    ids = base.assign(w, h, f)
    ok = ids >= 0
    n = int(ok.sum())
    if n == 0:
        fail("frames", "clips of which at least one has a bucket (none is long or large enough)", f)
    wk, hk, fk = w[ok], h[ok], f[ok]
    legal = tuple(base.legal_frame_counts)
    budgets = sorted({base.frame_budget(g) for g in legal})
    if len(budgets) > 1:
        fail(
            "base",
            "a calculator whose frame counts share one pixel budget per frame (set max_pixels "
            f"at most {budgets[0]}, as every preset does); its budgets are {budgets}",
            base,
        )
    w_max = waste_budget(share, n)
    fine = 2.0 ** (52 - n.bit_length())  # crop, and trim, of all n clips below 2**52
    own = [(int(a), int(b)) for a, b in base.resolutions[base.bucket_frames == legal[0]].tolist()]
    # bands: runs of frame counts whose buckets take one global batch size (on the calculator's
    # own buckets, the most common); one band for a fixed batch
    typical = [_most_common([batch(g, a, b) for a, b in own]) for g in legal]
    spans = band_spans(fk, legal, typical)
    args = FitSettings(
        budgets[0],
        base.quantization,
        own,
        batch,
        base.max_upscale,
        min_share,
        limit,
        drop,
        keep_all,
        fine,
        w_max,
        n,
        dict(zip(legal, typical, strict=True)),
    )
    found: tuple[list[BandPick], int] | None = None
    key = (fk, wk, hk)
    shared: dict[Any, Any] = {}
    for layout in band_layouts(spans, fk, legal, typical):
        spec = BandSpec.of(layout, legal, key, typical, shared)
        tried = fit_bands(spec, args)
        if tried is not None and (found is None or _rank(tried, w_max) < _rank(found, w_max)):
            found = tried
    # the calculator's own buckets are always a candidate (NOTE [ the preset is a candidate ])
    chosen = [] if found is None else [choice_of_picks(found[0])]
    own_set = preset_choice(
        (wk, hk, fk), ids[ok], base.resolutions, base.bucket_frames, batch, drop, fine
    )
    if own_set is not None:
        chosen.append(own_set)
    best = min(chosen, key=lambda c: _rank(c, w_max), default=None)
    if best is None or best.waste > w_max:
        least = n if best is None else best.waste
        what = "dropped" if drop else "padded"
        if least >= n:  # not a budget problem: too few clips for the global batches
            fail(
                "global_batch_size",
                f"small enough for the clips: every bucket set this fit searches {what} at "
                f"least {least} for n={n} clips that have a bucket",
                global_batch_size,
            )
        fail(
            "max_waste",
            f">= {least / n:.6g}, the least waste of the bucket sets this fit searches "
            f"({least} of n={n} clips that have a bucket {what})",
            max_waste,
        )
    summary = {
        "version": VIDEO_FIT_VERSION,
        "num_clips": n,
        "clip_digest": clip_digest(wk, hk, fk),
        "global_batch_size": None if callable(global_batch_size) else int(global_batch_size),
        "max_waste": share,
        "drop_last": drop,
        "keep_every_clip": keep_all,
        "min_share": min_share,
        "max_candidates": limit,
    }
    return _result(best, base, summary, fine, int((ids == -1).sum()), int((ids == -2).sum()))


def _rank(candidate: SetChoice | tuple[list[BandPick], int], w_max: int) -> tuple[bool, int, int]:
    """How candidates compare: one that meets the budget before one that does not; among those
    that meet it the least loss, then the least waste; among the others the least waste, then
    the least loss (the least waste found is the one the error reports)."""
    if isinstance(candidate, SetChoice):
        waste, loss = candidate.waste, candidate.loss
    else:
        waste, loss = candidate[1], picks_loss(candidate[0])
    if waste <= w_max:
        return False, loss, waste
    return True, waste, loss


def _most_common(sizes: list[int]) -> int:
    """The most common of ``sizes`` (ties: the least), as ``np.bincount(sizes).argmax()``
    without its array of one slot per value up to the largest."""
    values, counts = np.unique(sizes, return_counts=True)
    return int(values[counts.argmax()])


def _result(
    choice: SetChoice,
    base: VideoCalculator,
    summary: dict[str, Any],
    fine: float,
    short: int,
    small: int,
) -> VideoFitResult:
    """The chosen set as a fitted set and its figures."""
    rule = choice.rule()
    size = len(rule.buckets())
    counts = np.zeros(size, dtype=np.int64)
    sizes = np.zeros(size, dtype=np.int64)
    for (b, j, f), (m, g) in choice.buckets.items():
        i = rule.bucket_id(b, j, f)
        counts[i], sizes[i] = m, g
    if summary["global_batch_size"] is None:  # a callable: the buckets' own, by id
        summary["global_batch_size"] = sizes.tolist()
    rule = FittedVideoSet(choice.bands, choice.starts, summary)
    drop = bool(summary["drop_last"])
    per_bucket = counts % sizes if drop else (-counts) % sizes
    n = int(summary["num_clips"])
    buckets = rule.buckets()
    return VideoFitResult(
        bucket_set=rule,
        base=base,
        frames=np.array([x[0] for x in buckets], dtype=np.int64),
        resolutions=np.array([x[1:] for x in buckets], dtype=np.int64).reshape(-1, 2),
        counts=counts,
        global_batch_sizes=sizes,
        waste_per_bucket=per_bucket,
        waste=int(per_bucket.sum()),
        num_clips=n,
        too_short=short,
        too_small=small,
        max_waste=float(summary["max_waste"]),
        drop_last=drop,
        mean_crop_loss=choice.crop / fine / n,
        mean_trim_loss=choice.trim / fine / n,
        exiled=choice.exiled,
        structures=choice.structures,
        summary=summary,
    )


@dataclass(frozen=True, eq=False)
class VideoFitResult:
    """A fitted video bucket set and what it does to the clips it was fitted on.

    Arrays are per bucket, in the calculator's id order (ascending frame count, then aspect).

    Attributes:
        bucket_set: The set (:class:`~dataorder.diffusion.buckets.video_set.FittedVideoSet`).
        base: The calculator whose rules it keeps.
        frames: ``(K,)`` frame count of each bucket.
        resolutions: ``(K, 2)`` ``(w, h)`` of each bucket.
        counts: ``(K,)`` clips per bucket.
        global_batch_sizes: ``(K,)`` global batch size of each bucket.
        waste_per_bucket: ``(K,)`` clips dropped (or slots padded) by whole global batches.
        waste: Their total.
        num_clips: ``n``, the clips that have a bucket (the budget's denominator).
        too_short: Clips too short for any bucket (id -1), as under ``base``.
        too_small: Clips every bucket would upscale too much (id -2), as under ``base``.
        max_waste: The budget met, as a share of ``n``.
        drop_last: Whether remainders are dropped (else padded).
        mean_crop_loss: Mean crop loss over the ``n`` clips (fixed point, to 1e-9).
        mean_trim_loss: Mean trim loss, the share of frames cut (to 1e-9).
        exiled: Clips of buckets dropped whole (counted in the waste): of classes that cannot
            fill one global batch at any frame count, 0 unless that is unavoidable; or, when the
            set is the calculator's own (NOTE [ the preset is a candidate ] in
            :mod:`dataorder.diffusion.fit.video_choice`), of its buckets of fewer than ``G``.
        structures: Class structures tried for the chosen set, over all bands (0 when the set
            is the calculator's own).
        summary: What the set was fitted to, as ``config()["bucket_set"]["fit"]`` records it:
            ``version``, ``num_clips``, ``clip_digest``, ``global_batch_size`` (an int, or the
            buckets' ``G`` in id order), ``max_waste``, ``drop_last``, ``keep_every_clip``,
            ``min_share``, ``max_candidates``.
    """

    bucket_set: FittedVideoSet
    base: Any
    frames: IntArray
    resolutions: IntArray
    counts: IntArray
    global_batch_sizes: IntArray
    waste_per_bucket: IntArray
    waste: int
    num_clips: int
    too_short: int
    too_small: int
    max_waste: float
    drop_last: bool
    mean_crop_loss: float
    mean_trim_loss: float
    exiled: int
    structures: int
    summary: dict[str, Any]

    @property
    def num_buckets(self) -> int:
        """``K``."""
        return int(self.counts.size)

    @property
    def waste_share(self) -> float:
        """``waste / num_clips``."""
        return self.waste / self.num_clips

    @property
    def mean_loss(self) -> float:
        """The minimised objective: mean crop plus :data:`TRIM_WEIGHT` x mean trim."""
        return self.mean_crop_loss + TRIM_WEIGHT * self.mean_trim_loss

    @functools.cached_property
    def _config(self) -> dict[str, Any]:
        return {**self.base.config(), "bucket_set": self.bucket_set.config()}

    def calculator(self) -> Any:
        """The calculator over the fitted set: ``base``'s settings with ``bucket_set``."""
        return type(self.base).from_config(self._config)
