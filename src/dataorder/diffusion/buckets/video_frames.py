"""Frame counts of video buckets: the legal counts, what trimming costs, resampled counts.

The time half of the video bucket rules (:mod:`dataorder.diffusion.calculators.video`): a causal VAE
takes ``step * k + 1`` frames (:func:`causal_frame_counts`), a clip is trimmed to the largest legal
count it holds and :func:`trim_loss` measures what that cuts, :func:`resample_frame_counts` gives
the counts a clip keeps when the pipeline samples it at the model's frame rate, and
:func:`estimated_frame_count` the count a clip whose headers hold none is trusted to have.

NOTE [ estimated frame counts ]
    Matroska, WebM and MPEG-TS headers hold no frame count, so a header scan
    (:mod:`dataorder.diffusion.scan.probe`) estimates it from the duration and the frame rate.
    The two ways to be wrong cost differently. A count too low trims a few frames more than
    needed. A count too high puts the clip in a bucket longer than the clip, which the loader
    must then stretch, pad with repeated frames or fail on: the one thing the bucket rule
    promises never to do. And estimates run high: a container's duration covers its longest
    track (an audio track that outlasts the video), a variable-frame-rate clip has fewer frames
    than its nominal rate implies, a truncated file still reports its full length. So an
    estimate is taken conservatively: ``max(1, floor(duration * fps * (1 - 1/10)))``, rounded
    down and less a margin of a tenth (:data:`ESTIMATE_MARGIN`). The margin covers an audio
    tail of up to a tenth of the clip and a nominal rate up to about 11 % above the real
    average; for a clip longer than the longest bucket it changes nothing, and otherwise it
    costs at most a tenth of the frames, about two legal counts at ``4k + 1`` and 81 frames.
    It cannot cover every clip: a variable-rate clip far below its nominal rate (40 frames
    spread over 2 s at a nominal 30 fps: 61 by the headers, 54 kept) or a file cut in half is
    still counted too high, and no header shows it. ``VideoScan.frames_estimated`` marks every
    estimated clip: where the loader cannot pad, count those by demuxing them (one packet per
    frame, nothing decoded) and bucket them on the real count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from numbers import Rational

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.diffusion.buckets.cost import exact_rational
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE, as_size_array

__all__ = [
    "ESTIMATE_MARGIN",
    "MAX_VIDEO_SIZE",
    "causal_frame_counts",
    "estimated_frame_count",
    "frame_counts_arg",
    "resample_frame_counts",
    "trim_loss",
]

#: Widths, heights and frame counts are ints in ``[1, MAX_VIDEO_SIZE]`` (float conversions exact).
MAX_VIDEO_SIZE = MAX_IMAGE_SIDE

#: The share an estimated frame count is lowered by (NOTE [ estimated frame counts ]).
ESTIMATE_MARGIN = Fraction(1, 10)


def estimated_frame_count(duration: Rational | int, fps: Rational | int) -> int:
    """The frames a clip of ``duration`` seconds at ``fps`` is trusted to hold, when its headers
    give no count: ``max(1, floor(duration * fps * (1 - ESTIMATE_MARGIN)))``, exact (NOTE
    [ estimated frame counts ]).

    Args:
        duration: Seconds, positive: an int or a Fraction (the header's exact value).
        fps: Frames per second, positive, likewise.

    Raises:
        TypeError: If an argument is not an exact rational.
        ValueError: If an argument is not positive.

    Example:
        >>> from fractions import Fraction
        >>> estimated_frame_count(Fraction(203, 100), 30)  # 60.9 by the headers
        54
        >>> estimated_frame_count(Fraction(1, 30), 30), estimated_frame_count(5, Fraction(16))
        (1, 72)
    """
    d = exact_rational("duration", duration)
    r = exact_rational("fps", fps)
    if d <= 0:
        fail("duration", "a positive number", duration)
    if r <= 0:
        fail("fps", "a positive number", fps)
    return max(1, math.floor(d * r * (1 - ESTIMATE_MARGIN)))


def causal_frame_counts(
    temporal_compression: int,
    max_frames: int,
    *,
    min_frames: int = 1,
    step: int | None = None,
) -> tuple[int, ...]:
    """Legal frame counts ``step * k + 1`` in ``[min_frames, max_frames]``, ascending.

    Args:
        temporal_compression: The causal VAE's ``tc``; ``step`` must be a multiple of it.
        max_frames: Largest frame count allowed.
        min_frames: Smallest frame count allowed (1: single frames, i.e. images, allowed).
        step: Spacing; None means ``temporal_compression`` (Wan, HunyuanVideo: 4k + 1).
            CogVideoX 1.0 uses 8 (8N + 1) and 1.5 uses 16 (16N + 1), both with ``tc = 4``.

    Raises:
        TypeError: If an argument is not an int.
        ValueError: If an argument is out of range, ``step`` is not a multiple of ``tc``, or no
            frame count lies in the range.

    Example:
        >>> causal_frame_counts(4, 20)
        (1, 5, 9, 13, 17)
        >>> causal_frame_counts(4, 49, min_frames=9, step=8)
        (9, 17, 25, 33, 41, 49)
    """
    tc = check_int("temporal_compression", temporal_compression, min_value=1)
    hi = check_int("max_frames", max_frames, min_value=1, max_value=MAX_VIDEO_SIZE)
    lo = check_int("min_frames", min_frames, min_value=1, max_value=hi)
    st = tc if step is None else check_int("step", step, min_value=1)
    if st % tc:
        fail("step", f"a multiple of temporal_compression={tc}", step)
    first = -(-(lo - 1) // st) * st + 1
    counts = tuple(range(first, hi + 1, st))
    if not counts:
        fail("max_frames", f"at least one frame count {st}k + 1 in [{lo}, {hi}]", max_frames)
    return counts


def frame_counts_arg(
    frame_counts: Sequence[int] | None,
    max_frames: int | None,
    min_frames: int,
    frame_step: int | None,
    tc: int,
) -> tuple[int, ...]:
    """The legal frame counts of the calculator's arguments (explicit, or a causal rule)."""
    if frame_counts is None:
        if max_frames is None:
            fail("max_frames", "an int when frame_counts is None", max_frames, TypeError)
        if frame_step is not None:
            step = check_int("frame_step", frame_step, min_value=1)
            if step % tc:
                fail("frame_step", f"a multiple of temporal_compression={tc}", frame_step)
        return causal_frame_counts(tc, max_frames, min_frames=min_frames, step=frame_step)
    if max_frames is not None or min_frames != 1 or frame_step is not None:
        raise ValueError(
            "frame_counts excludes max_frames, min_frames and frame_step; got "
            f"max_frames={max_frames!r}, min_frames={min_frames!r}, frame_step={frame_step!r}"
        )
    if isinstance(frame_counts, str | bytes) or not isinstance(frame_counts, Sequence):
        fail("frame_counts", "a sequence of ints", frame_counts, TypeError)
    if not frame_counts:
        fail("frame_counts", "a non-empty sequence", frame_counts)
    checked = [
        check_int(f"frame_counts[{i}]", f, min_value=1, max_value=MAX_VIDEO_SIZE)
        for i, f in enumerate(frame_counts)
    ]
    for i, f in enumerate(checked):
        if (f - 1) % tc:
            fail(f"frame_counts[{i}]", f"{tc}k + 1 (temporal_compression={tc})", f)
    return tuple(sorted(set(checked)))


def trim_loss(frames: npt.ArrayLike, bucket_frames: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Share of each clip's frames cut away when it is trimmed to its bucket's frame count.

    ``(F - f) / F`` for a clip of ``F`` frames in a bucket of ``f <= F`` frames: the temporal
    twin of the crop loss in space (:func:`dataorder.diffusion.sampler.stats.crop_loss`).

    Raises:
        TypeError: If an array is not of ints.
        ValueError: If the shapes differ, a value is not positive, or a bucket is longer than
            its clip (clips are never stretched).

    Example:
        >>> trim_loss([81, 100, 1], [81, 81, 1]).tolist()
        [0.0, 0.19, 0.0]
    """
    f = as_size_array("frames", frames)
    b = as_size_array("bucket_frames", bucket_frames)
    if f.shape != b.shape:
        raise ValueError(
            f"frames and bucket_frames must have the same shape; got {f.shape} and {b.shape}"
        )
    if f.size and bool((b > f).any()):
        bad = int(np.flatnonzero((b > f).ravel())[0])
        fail(
            f"bucket_frames[{bad}]", f"<= frames[{bad}]={int(f.ravel()[bad])}", int(b.ravel()[bad])
        )
    out: npt.NDArray[np.float64] = (f - b) / f
    return out


def resample_frame_counts(
    frames: npt.ArrayLike, fps: npt.ArrayLike, target_fps: Rational | int | str
) -> npt.NDArray[np.int64]:
    """Frames a clip keeps when it is sampled at ``target_fps`` (never more than it has).

    A clip of ``F`` frames at ``r`` fps spans ``(F - 1) / r`` seconds from its first frame to its
    last; sampled every ``1 / target_fps`` seconds from the first frame it yields
    ``floor((F - 1) * target_fps / r) + 1`` frames, and ``F`` if ``r <= target_fps`` (frames
    are never invented). Bucket on these counts when the training pipeline resamples to the
    model's rate (Wan: 16 fps, CogVideoX: 8 fps), so a 6 s clip at 30 fps counts 97 frames
    rather than 180. A rate that is
    not positive or not finite (unknown) leaves the count as it is. A rate is read as the fraction
    it stands for (29.97002997 as 30000/1001); the floor is exact.

    Raises:
        TypeError: If ``frames`` is not an int array or ``target_fps`` not a rational.
        ValueError: If the shapes differ or ``target_fps`` is not positive.

    Example:
        >>> resample_frame_counts([180, 48, 1], [30, 24, 30], 16).tolist()
        [96, 32, 1]
        >>> resample_frame_counts([300], [30000 / 1001], "16").tolist()
        [160]
    """
    f = as_size_array("frames", frames)
    r = np.asarray(fps, dtype=np.float64)
    if f.shape != r.shape:
        raise ValueError(f"frames and fps must have the same shape; got {f.shape} and {r.shape}")
    target = exact_rational("target_fps", target_fps)
    if target <= 0:
        fail("target_fps", "a positive number", target_fps)
    out: npt.NDArray[np.int64] = f.copy()
    usable = np.isfinite(r) & (r > target.numerator / target.denominator)
    for rate in np.unique(r[usable]).tolist():  # a dataset has a handful of distinct rates
        ratio = target / _exact_rate(rate)
        if ratio >= 1:
            continue
        rows = np.flatnonzero(usable & (r == rate))
        # floor((F - 1) * ratio) in floats, redone in exact integers where it is near an integer
        approx = (f[rows] - 1) * (ratio.numerator / ratio.denominator)
        out[rows] = np.floor(approx).astype(np.int64) + 1
        near = np.abs(approx - np.rint(approx)) <= 1e-9 * np.maximum(approx, 1.0)
        for i in rows[near].tolist():
            out[i] = (int(f[i]) - 1) * ratio.numerator // ratio.denominator + 1
    return out


def _exact_rate(rate: float) -> Fraction:
    """A frame rate read as a float, as the fraction it stands for (29.97002997 -> 30000/1001).

    The simplest fraction with a denominator up to 100,000 within 1e-9 (relative) of the float,
    else the float's own binary value.
    """
    exact = Fraction(rate)
    simple = exact.limit_denominator(100_000)
    return simple if abs(simple - exact) <= exact * Fraction(1, 10**9) else exact
