"""What the bucket fit (:mod:`dataorder.diffusion.fit.images`) chooses from, and what it records.

:func:`lattice_candidates` lists the candidate buckets: for each aspect ratio of the lattice the
presets are built on, its largest point within the pixel budget. The fit keeps the candidates
within the data's aspect range (:func:`prune_candidates`) and thins the rest evenly in log aspect
ratio (:func:`thin_candidates`). :func:`size_digest` (:func:`clip_digest` for clips) identifies
the data a set was fitted to.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dataorder._validate import fail
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE, as_size_arrays
from dataorder.diffusion.buckets.points import check_points
from dataorder.diffusion.buckets.rules import RULES, check_budget
from dataorder.diffusion.fit.bins import CHUNK, EPS, BoolArray, IntArray

__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "DEFAULT_MIN_SHARE",
    "MAX_LATTICE_STEPS",
    "candidate_pool",
    "check_fit_budget",
    "check_share",
    "check_sizes",
    "clip_digest",
    "lattice_candidates",
    "prune_candidates",
    "size_digest",
    "thin_candidates",
]

#: Least share of ``max_pixels`` a generated candidate uses: just under the lowest share in the
#: default 1024p preset (0.879), so every bucket of the presets and of SDXL's table is a candidate.
DEFAULT_MIN_SHARE = 0.875

#: Generated candidates searched at most (the presets' buckets and given ones come on top).
DEFAULT_MAX_CANDIDATES = 64


# -- candidates ---------------------------------------------------------------------------------


def lattice_candidates(
    max_pixels: int,
    quantization: int = 64,
    *,
    min_share: float = DEFAULT_MIN_SHARE,
    extra: npt.ArrayLike | None = None,
) -> IntArray:
    """Candidate buckets: for each aspect ratio of the lattice, its largest point within budget.

    For every coprime ``a : b``, the point ``(k a q, k b q)`` with the largest ``k`` such that
    ``k**2 a b q**2 <= max_pixels``, kept if it uses at least ``min_share`` of the budget. Crop
    loss depends only on the aspect ratio, so a smaller point of the same ratio could never crop
    less. Points of ``extra`` (a preset's buckets) are merged in; where two share a ratio, the
    larger is kept.

    The lattice is listed whole, in ``max_pixels // quantization**2`` steps plus one per point
    ``(a, b)`` with ``min_share * max_pixels <= a b q**2 <= max_pixels``: a fine lattice
    (``quantization=1`` at a megapixel) has millions. Listings of more than
    :data:`MAX_LATTICE_STEPS` steps (about a second) are refused, before any is taken.

    Args:
        max_pixels: The pixel budget.
        quantization: Both sides are multiples of this.
        min_share: Least share of the budget a generated point uses, in ``(0, 1]``.
        extra: Optional ``(K, 2)`` int ``(w, h)`` points of the same lattice.

    Returns:
        int64 array of shape ``(M, 2)``, ``(w, h)`` rows in ascending aspect ratio.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``max_pixels < quantization**2``, ``min_share`` is out of range, a point
            of ``extra`` is off the lattice or over budget, or the lattice is too fine to list.

    Example:
        >>> [tuple(r) for r in lattice_candidates(256 * 256, 64, min_share=0.9).tolist()]
        [(64, 1024), (64, 960), (128, 512), (192, 320), (256, 256), (320, 192), (512, 128), \
(960, 64), (1024, 64)]
    """
    budget, q = check_fit_budget(max_pixels, quantization)
    share = Fraction(check_share("min_share", min_share, low=0.0, high=1.0, open_low=True))
    units = budget // (q * q)
    least = max(1, math.ceil(share * budget / (q * q)))  # a b >= least: at least min_share
    _check_lattice_steps(units, least, budget, q, min_share)
    # Keyed by the reduced ratio as a pair of ints: Fraction keys hash slowly.
    best: dict[tuple[int, int], tuple[int, int]] = {}
    for a in range(1, units + 1):
        for b in range(max(1, -(-least // a)), units // a + 1):
            g = math.gcd(a, b)
            ratio = (a // g, b // g)
            if ratio in best:
                continue
            a1, b1 = ratio
            k = math.isqrt(units // (a1 * b1))
            best[ratio] = (k * a1 * q, k * b1 * q)
    points = list(best.values())
    if extra is not None:
        points += check_points("extra", extra, budget, q)
    return _merge(points)


#: Most steps :func:`lattice_candidates` takes (one per lattice row and one per point listed).
MAX_LATTICE_STEPS = 1 << 18


def _check_lattice_steps(units: int, least: int, budget: int, q: int, min_share: object) -> None:
    """Refuse a lattice listing of more than :data:`MAX_LATTICE_STEPS` steps, before it starts.

    The points ``(a, b)`` with ``least <= a b <= units`` number ``D(units) - D(least - 1)``, with
    ``D(n) = sum_a floor(n / a)``, counted here in one numpy pass once ``units`` itself is small
    enough.
    """
    steps = units
    if units <= MAX_LATTICE_STEPS:
        a = np.arange(1, units + 1, dtype=np.int64)
        lo = np.maximum(1, -(-least // a))
        steps += int(np.maximum(units // a - lo + 1, 0).sum())
    if steps > MAX_LATTICE_STEPS:
        fail(
            "quantization",
            f"coarse enough to list the lattice of max_pixels={budget} in at most "
            f"{MAX_LATTICE_STEPS} steps (max_pixels // quantization**2 = {units}, min_share="
            f"{min_share}: {'over ' if steps == units else ''}{steps} steps); raise quantization "
            "or min_share, or pass candidates=",
            q,
        )


def _merge(points: list[tuple[int, int]]) -> IntArray:
    """One point per aspect ratio (the largest), ascending in aspect ratio."""
    best: dict[tuple[int, int], tuple[int, int]] = {}  # by the reduced ratio (fast to hash)
    for w, h in points:
        g = math.gcd(w, h)
        ratio = (w // g, h // g)
        if ratio not in best or w * h > best[ratio][0] * best[ratio][1]:
            best[ratio] = (w, h)
    order = sorted(best, key=lambda r: Fraction(*r))  # exact: close ratios are not float-sorted
    return np.array([best[r] for r in order], dtype=np.int64).reshape(-1, 2)


@functools.lru_cache(maxsize=16)
def _preset_resolutions(budget: int, q: int) -> tuple[tuple[int, int], ...]:
    """The buckets of every named rule's preset at this budget (default, then NeMo's): what
    ``MultiTierBucketCalculator(q, budget, compat=name).resolutions`` lists, without building
    one (the fit never imports the calculators)."""
    out: list[tuple[int, int]] = []
    for rule in RULES.values():
        out += rule(None, False).resolutions(budget, q)
    return tuple(out)


def candidate_pool(
    budget: int, q: int, *, min_share: float, include_presets: bool, candidates: object
) -> tuple[IntArray, list[tuple[int, int]], set[Fraction]]:
    """The candidates the fit searches before :func:`prune_candidates`: the given points, or the
    generated ones (:func:`lattice_candidates`), with the presets' buckets merged in.

    Args:
        budget: The pixel budget (checked: :func:`check_fit_budget`).
        q: The lattice step (checked).
        min_share: Least share of the budget a generated candidate uses (checked).
        include_presets: Add the buckets of the default and NeMo's presets at this budget.
        candidates: None, or ``(M, 2)`` int ``(w, h)`` points to choose from instead of the
            generated ones.

    Returns:
        ``(pool, given, always)``: the pool, ``(M, 2)`` int64 in ascending aspect ratio (one
        point per ratio); the given points as checked (empty when generated); the aspect ratios
        that thinning keeps (the given points' and the presets').

    Raises:
        TypeError: If ``candidates`` is not an array of int pairs.
        ValueError: If it is empty, or a point is off the lattice or over the budget.
    """
    preset = list(_preset_resolutions(budget, q)) if include_presets else []
    if candidates is None:
        given: list[tuple[int, int]] = []
        pool = lattice_candidates(budget, q, min_share=min_share, extra=preset or None)
    else:
        given = check_points("candidates", candidates, budget, q)
        if not given:
            fail("candidates", "a non-empty (M, 2) array", candidates)
        pool = _merge(given + preset)
    return pool, given, {Fraction(a, b) for a, b in given + preset}


def prune_candidates(
    pool: IntArray, gs: IntArray, x_lo: float, x_hi: float
) -> tuple[IntArray, BoolArray]:
    """Candidates within the data's aspect range and, beyond each end, the nearest one of each
    global batch size; and which of those are the ends' (they must be kept).

    A candidate farther out than the nearest one of its batch size beyond an end is farther from
    every image than that one: swapping them keeps every count (so the waste) and lowers every
    loss. The float range is widened by ``1e-12``, so rounding can only keep more.
    """
    ratio = pool[:, 0] / pool[:, 1]
    lo, hi = x_lo * (1 - EPS), x_hi * (1 + EPS)
    keep = (ratio > lo) & (ratio < hi)
    ends = np.zeros(len(pool), dtype=bool)
    for g in np.unique(gs).tolist():
        below = np.flatnonzero((gs == g) & (ratio <= lo))
        above = np.flatnonzero((gs == g) & (ratio >= hi))
        ends[below[-1:]] = True
        ends[above[:1]] = True
    kept = np.flatnonzero(keep | ends)
    return kept, ends[kept]


def thin_candidates(pool: IntArray, required: BoolArray, limit: int) -> IntArray:
    """Indices of the required candidates and at most ``limit`` others, spread evenly in log
    aspect ratio (each next one the farthest from those already taken; ties to the lowest).

    The distance ``max(r_i / r_j, r_j / r_i)`` is an IEEE division, so the choice is the same on
    every machine.
    """
    others = np.flatnonzero(~required)
    if others.size <= limit:
        return np.arange(len(pool), dtype=np.int64)
    ratio = pool[:, 0] / pool[:, 1]
    r_other = ratio[others]
    dist = np.full(others.size, np.inf)
    for r in ratio[required].tolist():
        np.minimum(dist, np.maximum(r_other / r, r / r_other), out=dist)
    picked = []
    for _ in range(limit):
        j = int(np.argmax(dist))
        picked.append(int(others[j]))
        np.minimum(dist, np.maximum(r_other / r_other[j], r_other[j] / r_other), out=dist)
        dist[j] = -np.inf
    return np.sort(np.concatenate((np.flatnonzero(required), picked))).astype(np.int64)


# -- the digest ---------------------------------------------------------------------------------

_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_SALT = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xD1B54A32D192ED03))


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser, in place: a bijection of 64-bit words that spreads every bit."""
    z ^= z >> np.uint64(30)
    z *= _MIX1
    z ^= z >> np.uint64(27)
    z *= _MIX2
    z ^= z >> np.uint64(31)
    return z


def size_digest(widths: npt.ArrayLike, heights: npt.ArrayLike) -> str:
    """A digest of the multiset of image sizes: equal for the same sizes in any order.

    Two sums modulo ``2**64`` of a mixed 64-bit word per ``(W, H)`` (a multiset hash), as 32 hex
    digits. It identifies the data a bucket set was fitted to; it is not a cryptographic hash.

    Example:
        >>> size_digest([640, 480], [480, 640]) == size_digest([480, 640], [640, 480])
        True
        >>> size_digest([640, 480], [480, 640]) == size_digest([640, 640], [480, 480])
        False
    """
    return _digest(*check_sizes(widths, heights))


def clip_digest(widths: npt.ArrayLike, heights: npt.ArrayLike, frames: npt.ArrayLike) -> str:
    """A digest of the multiset of clip sizes and frame counts, as :func:`size_digest` is of
    image sizes: equal for the same clips in any order.

    Raises:
        TypeError: If an array is not of ints.
        ValueError: If a value is out of range (naming ``widths[i]``, ``heights[i]`` or
            ``frames[i]``) or the shapes differ.

    Example:
        >>> w, h, f = (np.array(v) for v in ([640, 480], [480, 640], [81, 5]))
        >>> clip_digest(w, h, f) == clip_digest(w[::-1], h[::-1], f[::-1])
        True
        >>> clip_digest(w, h, f) == clip_digest(w, h, f[::-1])
        False
    """
    w, h, f = as_size_arrays(widths=widths, heights=heights, frames=frames)
    return _digest(w.ravel(), h.ravel(), f.ravel())


def _digest(w: IntArray, h: IntArray, f: IntArray | None = None) -> str:
    """The two salted sums of :func:`size_digest` over a word per item: its ``(W, H)`` key, or
    with frame counts ``f`` that key mixed with its frame count (:func:`clip_digest`)."""
    sums = [0, 0]
    for s in range(0, w.size, CHUNK):
        key = (w[s : s + CHUNK].astype(np.uint64) << np.uint64(32)) | h[s : s + CHUNK].astype(
            np.uint64
        )
        if f is not None:
            with np.errstate(over="ignore"):  # words wrap modulo 2**64 by design
                key = _mix(_mix(key ^ _SALT[0]) + f[s : s + CHUNK].astype(np.uint64))
        for i, salt in enumerate(_SALT):
            sums[i] = (sums[i] + int(np.add.reduce(_mix(key ^ salt), dtype=np.uint64))) % 2**64
    return f"{sums[0]:016x}{sums[1]:016x}"


# -- validation ---------------------------------------------------------------------------------


def check_sizes(widths: npt.ArrayLike, heights: npt.ArrayLike) -> tuple[IntArray, IntArray]:
    """Image sizes as two flat int64 arrays, each size in ``[1, MAX_IMAGE_SIDE]``.

    Raises:
        TypeError: If an array is not of ints.
        ValueError: If a size is out of range (naming ``widths[i]`` or ``heights[i]``) or the
            shapes differ.
    """
    w, h = as_size_arrays(widths=widths, heights=heights)
    return w.ravel(), h.ravel()


def check_share(name: str, value: object, *, low: float, high: float, open_low: bool) -> float:
    """``value`` as a float in ``[low, high]`` (``(low, high]`` with ``open_low``).

    Raises:
        TypeError: If it is not an int or a float (a bool included).
        ValueError: If it is not finite or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        fail(name, "a float", value, TypeError)
    v = float(value)
    if not (math.isfinite(v) and (v > low if open_low else v >= low) and v <= high):
        if high == math.inf:
            fail(name, f"a finite float >= {low}", value)
        fail(name, f"a float in {'(' if open_low else '['}{low}, {high}]", value)
    return v


def check_fit_budget(max_pixels: int | None, quantization: int) -> tuple[int, int]:
    """``(budget, quantization)`` validated as the calculator validates them
    (:func:`~dataorder.diffusion.buckets.rules.check_budget`; None: 65,536), with bucket sides
    at most ``MAX_IMAGE_SIDE`` as the fit's exact arithmetic needs.

    Raises:
        TypeError: If an argument is not an int (or None for ``max_pixels``).
        ValueError: If it is out of range.
    """
    q, budget = check_budget(quantization, max_pixels)
    if budget // q > MAX_IMAGE_SIDE:  # bucket sides, like image sides, keep W * q in an int64
        fail("max_pixels", f"an int with max_pixels // quantization <= {MAX_IMAGE_SIDE}", budget)
    return budget, q
