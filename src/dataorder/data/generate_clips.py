"""Regenerate the demo clip sizes: ``python src/dataorder/data/generate_clips.py [DIR]``.

Writes ``clip_sizes.csv`` next to this file (or into ``DIR``): :data:`CLIP_COUNT` rows
``width,height,frames,fps`` describing a synthetic video collection. No video exists; the video
bucket calculator and the bucket sampler only need these numbers. The file is fully determined
by the constants below: numpy's PCG64 seeded with :data:`SEED`, and nothing else (no clock, no
network, no global RNG). Running the script again rewrites it byte for byte.

How a clip is drawn (:func:`make_clip_sizes`; :func:`clip_population` draws a seeded population
at the model's frame rate for ``benchmarks/bench_video.py`` and the video fit's tests):

* **Aspect ratio** (:data:`ASPECTS`): 16:9 landscape 50 %, 9:16 phone portrait 20 %, 4:3 8 %,
  3:4 3 %, 1:1 6 %, cinema 2.39:1 4 % and 1.85:1 3 %, and 6 % log-uniform in [0.5, 2.4]
  (crops, screen recordings).
* **Short side** (:data:`SHORT_SIDES`): 360 to 2160 pixels, mostly 720 (30 %) and 1080 (35 %);
  the long side is ``short * ratio`` rounded to an even number, as encoders need.
* **Frame rate** (:data:`FRAME_RATES`): 24, 25, 30000/1001 (NTSC 29.97), 30, 50 and 60 fps.
* **Duration**: log-normal, median 6 s, sigma 1 (so a quarter of the clips are shorter than
  3 s and one in twenty longer than 30 s), clipped to [0.1, 600] s; the frame count is
  ``round(duration * fps)``, at least 1. One clip in a hundred is a single frame (a still).

The ``fps`` column is an exact rational, ``25`` or ``30000/1001`` (``fractions.Fraction`` reads
it).
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import numpy.typing as npt

SEED = 20260616
CLIP_COUNT = 3000
FILE_NAME = "clip_sizes.csv"

#: ``((w, h) or None for log-uniform in [0.5, 2.4], share)``.
ASPECTS: tuple[tuple[tuple[int, int] | None, float], ...] = (
    ((16, 9), 0.50),
    ((9, 16), 0.20),
    ((4, 3), 0.08),
    ((3, 4), 0.03),
    ((1, 1), 0.06),
    ((239, 100), 0.04),
    ((185, 100), 0.03),
    (None, 0.06),
)
#: ``(short side in pixels, share)``.
SHORT_SIDES: tuple[tuple[int, float], ...] = (
    (360, 0.10),
    (480, 0.10),
    (540, 0.05),
    (720, 0.30),
    (1080, 0.35),
    (1440, 0.03),
    (2160, 0.07),
)
#: ``(frames per second, share)``.
FRAME_RATES: tuple[tuple[Fraction, float], ...] = (
    (Fraction(24), 0.25),
    (Fraction(25), 0.15),
    (Fraction(30000, 1001), 0.30),
    (Fraction(30), 0.15),
    (Fraction(50), 0.05),
    (Fraction(60), 0.10),
)
MEDIAN_SECONDS = 6.0
SIGMA = 1.0
STILL_SHARE = 0.01

Ints = npt.NDArray[np.int64]


def _pick(rng: np.random.Generator, shares: list[float], n: int) -> Ints:
    p = np.array(shares, dtype=np.float64)
    return rng.choice(len(shares), size=n, p=p / p.sum()).astype(np.int64)


def make_clip_sizes(rng: np.random.Generator, n: int) -> tuple[Ints, Ints, Ints, Ints]:
    """``n`` synthetic clips (see the module docstring).

    Returns:
        ``(widths, heights, frames, rate_index)``, int64 arrays of shape ``(n,)``;
        ``FRAME_RATES[rate_index[i]][0]`` is clip ``i``'s frame rate.
    """
    kind = _pick(rng, [s for _, s in ASPECTS], n)
    free = np.exp(rng.uniform(np.log(0.5), np.log(2.4), size=n))
    fixed = np.array([1.0 if a is None else a[0] / a[1] for a, _ in ASPECTS])
    is_free = np.array([a is None for a, _ in ASPECTS])[kind]
    ratio = np.where(is_free, free, fixed[kind])
    short = np.array([s for s, _ in SHORT_SIDES], dtype=np.int64)[
        _pick(rng, [p for _, p in SHORT_SIDES], n)
    ]
    long_side = (np.rint(short * np.maximum(ratio, 1 / ratio) / 2) * 2).astype(np.int64)
    widths = np.where(ratio >= 1, long_side, short).astype(np.int64)
    heights = np.where(ratio >= 1, short, long_side).astype(np.int64)
    rate_index = _pick(rng, [p for _, p in FRAME_RATES], n)
    rates = np.array([float(r) for r, _ in FRAME_RATES])[rate_index]
    seconds = np.clip(rng.lognormal(np.log(MEDIAN_SECONDS), SIGMA, size=n), 0.1, 600.0)
    frames = np.maximum(1, np.rint(seconds * rates)).astype(np.int64)
    frames[rng.random(n) < STILL_SHARE] = 1
    return widths, heights, frames, rate_index


def clip_population(
    n: int, seed: int, *, target_fps: int | Fraction | None = 16
) -> tuple[Ints, Ints, Ints]:
    """``n`` synthetic clips drawn as :func:`make_clip_sizes` draws them, from numpy's PCG64
    seeded with ``seed`` and nothing else: widths, heights and frame counts, the frame counts
    as a pipeline that samples at ``target_fps`` keeps them (None: the clips' own).

    The population the video bucket fit is measured on (BENCHMARKS.md, section 8): phone,
    camera and cinema aspect ratios in both orientations, log-normal durations, 24 to 60 fps
    resampled to the model's rate (Wan: 16 fps); its shape was fixed before the fit, which
    never sees it while being built (a held-out population, not one tuned to the fit).

    Example:
        >>> w, h, f = clip_population(5, seed=1)
        >>> w.tolist(), h.tolist(), f.tolist()
        ([1080, 1318, 1280, 1278, 1280], [1920, 720, 720, 1080, 720], [97, 73, 350, 263, 6])
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    widths, heights, frames, rate_index = make_clip_sizes(rng, n)
    if target_fps is None:
        return widths, heights, frames
    # the library's own rule (imported here so writing the CSV needs only numpy)
    from dataorder.diffusion.buckets.video_frames import resample_frame_counts

    rates = np.array([float(r) for r, _ in FRAME_RATES])[rate_index]
    return widths, heights, resample_frame_counts(frames, rates, target_fps)


def write(directory: Path) -> Path:
    """Write ``clip_sizes.csv`` into ``directory`` and return its path."""
    rng = np.random.Generator(np.random.PCG64(SEED))
    widths, heights, frames, rate_index = make_clip_sizes(rng, CLIP_COUNT)
    names = [str(r) for r, _ in FRAME_RATES]
    rows = zip(widths.tolist(), heights.tolist(), frames.tolist(), rate_index.tolist(), strict=True)
    lines = ["width,height,frames,fps", *(f"{w},{h},{f},{names[r]}" for w, h, f, r in rows)]
    path = directory / FILE_NAME
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    print(f"wrote {write(target)}")
