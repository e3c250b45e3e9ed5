"""Resolution buckets under a pixel budget, and which bucket each image goes to.

A *bucket* is one training resolution ``(w, h)``: both sides are multiples of ``quantization``
and ``w * h <= max_pixels``. Each image is resized to cover its bucket and cropped to it (see
:mod:`dataorder.crop`), so the share of the image's area that is cut away, its *crop loss*, is
``1 - min(r_img / r_bkt, r_bkt / r_img)`` with ``r = w / h``. Buckets are dicts
``{"id", "resolution": (w, h), "aspect_ratio": w / h, "pixels": w * h}``, with ids ``0..K-1`` in
ascending aspect ratio (tallest first).

Two behaviours, chosen with ``compat``:

``compat="default"`` (the better rule, documented here)
    * **Bucket set.** For every nominal aspect ratio ``r`` (:data:`DEFAULT_ASPECT_RATIOS`, or your
      own ``aspect_ratios``), the bucket is the lattice point ``(w, h)`` within the budget that
      minimises ``|ln(w / h) - ln r| + |ln(w * h / max_pixels)| / 2``. Both terms are the log of a
      side-length ratio: the first is how much a crop to that shape shortens one side, the second
      how much the budget shortfall shortens both sides. Ties go to the larger area. Ratios are
      computed for ``max(r, 1/r)`` and mirrored, so the set is symmetric under swapping ``w`` and
      ``h`` by construction and bucket ``K - 1 - i`` is bucket ``i`` transposed. One bucket per
      aspect ratio is kept (the larger, if two nominal ratios land on the same shape).
    * **Assignment.** Nearest bucket in log aspect ratio, which is exactly the bucket with the
      least crop loss. An image exactly halfway (``W**2 * h1 * h2 == H**2 * w1 * w2``) goes to the
      bucket closer to square, then to the lower id. Decisions are exact integer comparisons.
    * **No upscaling** (``no_upscale=True``). Only buckets that fit inside the image
      (``w <= W`` and ``h <= H``) are candidates, so the image is only ever downscaled. An image
      smaller than every bucket on some side (no bucket fits) falls back to the nearest aspect
      ratio over all buckets and will be upscaled: a single-budget set has no smaller tier to
      offer, and dropping it is the caller's decision (:mod:`dataorder.bucket_stats` counts these
      as ``upscaled``).
    * **Dynamic batch size** ``floor(base * base_pixels / pixels)`` in exact integers, at least 1
      and at most ``max_batch_size`` (default: ``4 * base_batch_size``), so a tiny bucket cannot
      ask for a 2,048-sample batch.

``compat="nemo"``
    NeMo Automodel 0.7.0's ``MultiTierBucketCalculator`` exactly: its 14 aspect ratios, its
    rounding (half to even, which makes some presets asymmetric), its bucket order, its
    image-to-bucket rule (least ``|bucket_ar - W / H|`` in floating point, ties to the first
    bucket) and its unclamped dynamic batch size. Only argument validation differs: bad input is
    a ValueError/TypeError here, not a ZeroDivisionError or a math domain error.

``max_pixels=None`` means 65,536 (256 x 256) in both modes, as in NeMo.

Measured by ``benchmarks/bench_buckets.py`` on aspect ratios drawn log-uniformly from 1/3 to 3:
the default ``'1024p'`` preset has 31 buckets, 2.1 % mean and 4.9 % p95 crop loss and no image
losing more than 10 %, where NeMo's has 10 buckets, 9.8 %, 34.9 % and 31 %. The 768p and 1536p
presets do as well; with ``quantization=16`` every preset is under 2.2 % mean and 5 % p95. At
``quantization=64`` the 256p and 512p budgets are too small for the 64-pixel lattice to offer
fine aspect ratios near the budget (7.1 % and 4.4 % mean): even every lattice point within 75 %
of the 512p budget would give 3.5 %. Buckets use 88 % to 100 % of the budget at 1024p/q=64
(mean shortfall 5 %, NeMo's 3.4 %): a little budget is traded for much better shapes.

Example:
    >>> from dataorder.buckets import MultiTierBucketCalculator
    >>> calc = MultiTierBucketCalculator.from_preset("1024p")
    >>> calc.get_bucket_for_image(1920, 1080)["resolution"]
    (1344, 768)
    >>> calc.assign([1920, 1080], [1080, 1920]).tolist()  # bucket 30 - i is bucket i transposed
    [22, 8]
    >>> nemo = MultiTierBucketCalculator(64, compat="nemo")
    >>> [b["resolution"] for b in nemo.get_all_buckets()]
    [(192, 320), (192, 256), (256, 256), (256, 192), (320, 192)]
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_choice, check_int, fail

__all__ = [
    "BUCKETS_VERSION",
    "COMPATS",
    "DEFAULT_ASPECT_RATIOS",
    "DEFAULT_MAX_BATCH_FACTOR",
    "DEFAULT_MAX_PIXELS",
    "MAX_IMAGE_SIDE",
    "NEMO_ASPECT_RATIOS",
    "PRESETS",
    "AspectRatio",
    "Bucket",
    "MultiTierBucketCalculator",
]

logger = logging.getLogger(__name__)

#: Bumped whenever bucket generation or assignment changes; it is part of
#: :meth:`MultiTierBucketCalculator.config`, so a manifest written under another rule is refused.
BUCKETS_VERSION = 1

COMPATS: tuple[str, ...] = ("default", "nemo")

#: Pixel budgets of the named presets (budgets, not sides).
PRESETS: Mapping[str, int] = MappingProxyType(
    {
        "256p": 256 * 256,
        "512p": 512 * 512,
        "768p": 768 * 768,
        "1024p": 1024 * 1024,
        "1536p": 1536 * 1536,
    }
)

#: NeMo's budget when ``max_pixels`` is None, kept in both modes.
DEFAULT_MAX_PIXELS = 256 * 256

#: Default upper clamp of a dynamic batch size, as a multiple of ``base_batch_size``.
DEFAULT_MAX_BATCH_FACTOR = 4

#: Image sides are ints in ``[1, MAX_IMAGE_SIDE]``; this keeps every float conversion exact.
MAX_IMAGE_SIDE = 2**31 - 1

#: NeMo's 14 nominal (w, h) ratios, in its order; used only with ``compat="nemo"``.
NEMO_ASPECT_RATIOS: tuple[tuple[int, int], ...] = (
    (1, 2),
    (9, 16),
    (2, 3),
    (3, 4),
    (4, 5),
    (1, 1),
    (5, 4),
    (4, 3),
    (3, 2),
    (16, 10),
    (5, 3),
    (16, 9),
    (2, 1),
    (21, 9),
)

#: A nominal aspect ratio: a positive float ``w / h``, or a ``(w, h)`` pair of positive ints.
AspectRatio = float | tuple[int, int]

# A log-even grid of 25 ratios from 1/3 to 3 (steps of 3**(1/12), about 9.6 %), plus the common
# photo and video formats exactly, so a 4:3 or 16:9 image is not cropped when the lattice allows
# its exact shape. Each entry stands for itself and its transpose: at most 39 buckets.
DEFAULT_ASPECT_RATIOS: tuple[AspectRatio, ...] = (
    *(3.0 ** (k / 12) for k in range(13)),
    (5, 4),
    (4, 3),
    (3, 2),
    (5, 3),
    (16, 9),
    (2, 1),
    (7, 3),
)

Bucket = dict[str, Any]

# Relative distance under which a float comparison of an image's aspect ratio with a threshold is
# re-done in exact integers. Float errors here are a few ulps (1e-16); this is far above them.
_NEAR = 1e-10
_CHUNK = 1 << 16
_SHIFT = 40  # keep 12 mantissa bits: cells 0.024 % wide
_MAX_RATIO = 10_000


def _canonical_ratio(index: int, value: object) -> AspectRatio:
    """Validate one nominal ratio; return it as a float or a ``(w, h)`` tuple."""
    name = f"aspect_ratios[{index}]"
    what = "a positive finite float or a (w, h) pair of positive ints"
    given = value
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
            value = (int(parts[0]), int(parts[1]))
        else:
            fail(name, what + " or a 'W:H' string", value)
    if isinstance(value, bool):
        fail(name, what, value, TypeError)
    ratio: AspectRatio
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != 2:
            fail(name, what, value)
        ratio = (
            check_int(f"{name}[0]", value[0], min_value=1),
            check_int(f"{name}[1]", value[1], min_value=1),
        )
    elif isinstance(value, int | float | np.integer | np.floating):
        ratio = float(value)
        if not (math.isfinite(ratio) and ratio > 0):
            fail(name, what, value)
    else:
        fail(name, what, value, TypeError)
    # Also keeps the bucket search finite: 1 / r and r * h stay ordinary floats.
    if not 1 / _MAX_RATIO <= _ratio_value(ratio) <= _MAX_RATIO:
        fail(name, f"a ratio between 1/{_MAX_RATIO} and {_MAX_RATIO}", given)
    return ratio


def _ratio_value(ratio: AspectRatio) -> float:
    return ratio[0] / ratio[1] if isinstance(ratio, tuple) else ratio


def _best_resolution(rho: float, budget: int, q: int) -> tuple[int, int] | None:
    """The lattice point within ``budget`` that best serves nominal ratio ``rho`` (see module)."""
    log_rho = math.log(rho)
    best: tuple[int, int] | None = None
    best_key: tuple[float, int] = (math.inf, 0)

    def consider(w: int, h: int) -> None:
        nonlocal best, best_key
        if w < q or h < q or w * h > budget:
            return
        cost = abs(math.log(w / h) - log_rho) + 0.5 * abs(math.log(w * h / budget))
        # Costs within 1e-12 are a tie (float noise); the larger area wins, then the squarer.
        if cost < best_key[0] - 1e-12:
            better = True
        elif cost <= best_key[0] + 1e-12 and best is not None:
            area, best_area = w * h, best[0] * best[1]
            better = area > best_area or (
                area == best_area
                and Fraction(max(w, h), min(w, h)) < Fraction(max(best), min(best))
            )
        else:
            better = False
        if better:
            best, best_key = (w, h), (cost, w * h)

    def row(h: int) -> None:
        # For a fixed h the cost falls until w reaches rho * h (or the budget), then rises, so
        # only the lattice widths either side of that point can win.
        w_cap = budget // h // q * q
        w_lo = min(int(rho * h) // q * q, w_cap)
        consider(w_lo, h)
        consider(w_lo + q, h)

    # rho >= 1 and budget >= q**2, so the first row searched (h = q at the latest) has a valid
    # point and best is finite from then on: both loops end.
    h_star = math.sqrt(budget / rho)
    h = int(h_star) // q * q
    # Below h_star every candidate costs at least ln(budget / (rho h^2)) / 2; above it at least
    # ln(rho h^2 / budget). Both grow away from h_star, so the search stops once they beat best.
    down = h
    while down >= q and 0.5 * math.log(budget / (rho * down * down)) <= best_key[0] + 1e-12:
        row(down)
        down -= q
    up = h + q
    while math.log(rho * up * up / budget) <= best_key[0] + 1e-12:
        row(up)
        up += q
    return best


def _default_resolutions(
    ratios: Sequence[AspectRatio], budget: int, q: int
) -> list[tuple[int, int]]:
    by_ar: dict[Fraction, tuple[int, int]] = {}
    rhos = sorted({max(_ratio_value(r), 1.0 / _ratio_value(r)) for r in ratios})
    for rho in rhos:
        res = _best_resolution(rho, budget, q)
        if res is None:
            continue
        for w, h in (res, (res[1], res[0])):
            ar = Fraction(w, h)
            if ar not in by_ar or w * h > by_ar[ar][0] * by_ar[ar][1]:
                by_ar[ar] = (w, h)
    return [by_ar[ar] for ar in sorted(by_ar)]


def _nemo_resolutions(budget: int, q: int) -> list[tuple[int, int]]:
    """NeMo 0.7.0's bucket generation, step by step (nemo_behaviour.md section 2)."""
    seen: dict[tuple[int, int], None] = {}
    for aw, ah in NEMO_ASPECT_RATIOS:
        r = aw / ah
        # Python's round() (half to even) on float quotients, as NeMo does.
        h = round(int(math.sqrt(budget / r)) / q) * q
        w = round(int(h * r) / q) * q
        while w * h > budget:
            if w >= h:
                w -= q
            else:
                h -= q
        if w < q or h < q:
            continue
        seen.setdefault((w, h), None)
    return sorted(seen, key=lambda wh: wh[0] / wh[1])


def _as_size_array(name: str, values: object) -> npt.NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.size == 0:  # [] comes in as float64; an empty array has no wrong values
        return np.zeros(arr.shape, dtype=np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        fail(name, "an array of ints", values, TypeError)
    out = arr.astype(np.int64, copy=False)
    if out.size:
        lo, hi = int(out.min()), int(out.max())
        if lo < 1 or hi > MAX_IMAGE_SIDE:
            bad = int(np.flatnonzero((out.ravel() < 1) | (out.ravel() > MAX_IMAGE_SIDE))[0])
            fail(
                f"{name}[{bad}]",
                f"an int in [1, {MAX_IMAGE_SIDE}]",
                int(out.ravel()[bad]),
            )
    return out


class _LogTable:
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


class _NemoTable:
    """NeMo's rule: least ``|bucket_ar - W / H|`` in float64, ties to the first bucket."""

    def __init__(self, ar: npt.NDArray[np.float64]) -> None:
        self.ar = ar
        distinct = np.unique(ar)
        self.thresholds = (distinct[:-1] + distinct[1:]) / 2

    def positions(
        self, w: npt.NDArray[np.int64], h: npt.NDArray[np.int64], x: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.int64]:
        out = np.empty(x.shape, dtype=np.int64)
        for s in range(0, x.size, _CHUNK):
            part = x[s : s + _CHUNK]
            out[s : s + _CHUNK] = np.abs(self.ar[None, :] - part[:, None]).argmin(axis=1)
        return out


class _Lookup:
    """A precomputed answer for every float ``W / H``, by its leading bits.

    A positive float's bit pattern, read as an integer, is monotone in its value, so its top
    ``64 - _SHIFT`` bits cut the positive reals into cells of relative width ``2**-12``. A cell
    that no decision threshold comes near (within ``_NEAR``, relative, beyond either edge) has one
    answer for every float in it and for the exact ratio it approximates; it is stored. The few
    images in the other cells go through the rule's own ``positions`` (and, near a threshold,
    exact integers). This is what makes :meth:`MultiTierBucketCalculator.assign` one pass of
    cheap array operations over chunks that stay in cache.
    """

    def __init__(self, rule: _LogTable | _NemoTable, ids: npt.NDArray[np.int64]) -> None:
        self.rule = rule
        self.ids = ids
        t = rule.thresholds
        if t.size == 0:
            self.lo, self.cells = 0, ids[:1].copy()
            return
        lo = int(np.array(t[0] / 4).view(np.int64)) >> _SHIFT
        hi = int(np.array(t[-1] * 4).view(np.int64)) >> _SHIFT
        edges = ((np.arange(lo, hi + 2, dtype=np.int64)) << _SHIFT).view(np.float64).copy()
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
            np.right_shift(xv.view(np.int64), _SHIFT, out=cv)
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


class MultiTierBucketCalculator:
    """Resolution buckets constrained by a pixel budget, and the bucket of every image.

    Construct with a budget, or with :meth:`from_preset`; rebuild from a saved
    :meth:`config` with :meth:`from_config`. Buckets are planned once at construction; the
    methods only look them up. See the module docstring for the default and ``"nemo"`` rules.

    Args:
        quantization: Both sides of every bucket are multiples of this (64 for Flux/SDXL
            latents with patching; 8 or 16 for finer lattices).
        max_pixels: The pixel budget; no bucket has more pixels. None means 65,536. Must be at
            least ``quantization**2``.
        debug_mode: Log the bucket table at INFO level after construction.
        compat: ``"default"`` or ``"nemo"`` (NeMo Automodel 0.7.0's exact buckets and choices).
        aspect_ratios: Nominal aspect ratios of the default mode (floats ``w / h``, ``(w, h)``
            pairs or ``"W:H"`` strings); each also stands for its transpose. None means
            :data:`DEFAULT_ASPECT_RATIOS`. Not allowed with ``compat="nemo"``.
        max_batch_size: Upper clamp of :meth:`get_dynamic_batch_size`. None means
            ``4 * base_batch_size`` in the default mode and no clamp with ``compat="nemo"``.
        no_upscale: Only assign an image to buckets that fit inside it (default mode only).

    Raises:
        TypeError: If an argument has the wrong type (including a bool where an int is meant).
        ValueError: If a value is out of range, e.g. ``quantization=0`` or
            ``max_pixels < quantization**2``.

    Example:
        >>> calc = MultiTierBucketCalculator(64, 512 * 512, no_upscale=True)
        >>> len(calc), calc.get_bucket_for_image(4000, 3000)["resolution"]
        (15, (576, 448))
        >>> calc.get_bucket_for_image(600, 440)["resolution"]  # 576x448 would upscale 440 -> 448
        (576, 384)
        >>> calc.get_bucket_for_image(520, 390)["resolution"]  # nothing fits: nearest, upscaled
        (576, 448)
    """

    #: The named pixel budgets accepted by :meth:`from_preset`.
    RESOLUTION_PRESETS: Mapping[str, int] = PRESETS
    #: NeMo's nominal ratios (used with ``compat="nemo"``).
    ASPECT_RATIOS: tuple[tuple[int, int], ...] = NEMO_ASPECT_RATIOS

    def __init__(
        self,
        quantization: int = 64,
        max_pixels: int | None = None,
        debug_mode: bool = False,
        *,
        compat: str = "default",
        aspect_ratios: Sequence[AspectRatio | str] | None = None,
        max_batch_size: int | None = None,
        no_upscale: bool = False,
    ) -> None:
        q = check_int("quantization", quantization, min_value=1)
        if max_pixels is None:
            budget = DEFAULT_MAX_PIXELS
        else:
            budget = check_int("max_pixels", max_pixels, min_value=1)
        if budget < q * q:
            fail("max_pixels", f"an int >= quantization**2 = {q * q}", max_pixels)
        self._debug = check_bool("debug_mode", debug_mode)
        self._compat = check_choice("compat", compat, COMPATS)
        self._no_upscale = check_bool("no_upscale", no_upscale)
        self._max_batch_size = (
            None
            if max_batch_size is None
            else check_int("max_batch_size", max_batch_size, min_value=1)
        )
        if self._compat == "nemo":
            if aspect_ratios is not None:
                fail(
                    "aspect_ratios",
                    "None with compat='nemo' (NeMo's ratios are fixed)",
                    aspect_ratios,
                )
            if self._no_upscale:
                fail("no_upscale", "False with compat='nemo' (NeMo has no such rule)", no_upscale)
            self._ratios: tuple[AspectRatio, ...] = ()
            resolutions = _nemo_resolutions(budget, q)
        else:
            given = DEFAULT_ASPECT_RATIOS if aspect_ratios is None else aspect_ratios
            if isinstance(given, str | bytes) or not isinstance(given, Sequence):
                fail("aspect_ratios", "a sequence of aspect ratios", aspect_ratios, TypeError)
            if not given:
                fail("aspect_ratios", "a non-empty sequence", aspect_ratios)
            self._ratios = tuple(_canonical_ratio(i, r) for i, r in enumerate(given))
            resolutions = _default_resolutions(self._ratios, budget, q)
        if not resolutions:  # not reachable for budget >= q**2; kept as a guard, not a check
            raise ValueError(f"no bucket fits max_pixels={budget} at quantization={q}")
        self._q = q
        self._budget = budget
        self._res = resolutions
        self._buckets: list[Bucket] = [
            {"id": i, "resolution": (w, h), "aspect_ratio": w / h, "pixels": w * h}
            for i, (w, h) in enumerate(resolutions)
        ]
        self._by_res = {b["resolution"]: b for b in self._buckets}
        self._w = np.array([w for w, _ in resolutions], dtype=np.int64)
        self._h = np.array([h for _, h in resolutions], dtype=np.int64)
        self._ar = self._w / self._h
        every = np.arange(len(resolutions), dtype=np.int64)
        rule = _NemoTable(self._ar) if self._compat == "nemo" else _LogTable(every, resolutions)
        self._lookup = _Lookup(rule, every)
        self._fit_lookups: dict[int, _Lookup | None] = {}
        self._unique_w = np.unique(self._w)
        self._unique_h = np.unique(self._h)
        self._staircase = self._staircase_tables()
        if self._debug:
            logger.info(self.summary())

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_preset(
        cls, preset: str, quantization: int = 64, **kwargs: Any
    ) -> MultiTierBucketCalculator:
        """Build a calculator whose budget is a named preset.

        Args:
            preset: One of ``'256p'``, ``'512p'``, ``'768p'``, ``'1024p'``, ``'1536p'`` (budgets of
                256², 512², ... pixels).
            quantization: As in the constructor.
            **kwargs: Any other keyword argument of the constructor except ``max_pixels``.

        Raises:
            ValueError: For an unknown preset.
        """
        preset = check_choice("preset", preset, tuple(PRESETS))
        if "max_pixels" in kwargs:
            raise TypeError("from_preset() sets max_pixels from the preset; do not pass it")
        return cls(quantization, PRESETS[preset], **kwargs)

    def config(self) -> dict[str, Any]:
        """Everything needed to rebuild this calculator, as a JSON-serialisable dict.

        Example:
            >>> MultiTierBucketCalculator(64, compat="nemo").config()
            {'version': 1, 'compat': 'nemo', 'quantization': 64, 'max_pixels': 65536, \
'aspect_ratios': None, 'max_batch_size': None, 'no_upscale': False}
        """
        ratios = None
        if self._compat == "default":
            ratios = [list(r) if isinstance(r, tuple) else r for r in self._ratios]
        return {
            "version": BUCKETS_VERSION,
            "compat": self._compat,
            "quantization": self._q,
            "max_pixels": self._budget,
            "aspect_ratios": ratios,
            "max_batch_size": self._max_batch_size,
            "no_upscale": self._no_upscale,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> MultiTierBucketCalculator:
        """Rebuild a calculator from :meth:`config` (e.g. a manifest's ``calculator`` field).

        Raises:
            ValueError: If keys are missing or unknown, or the config was written by another
                bucket algorithm version.
        """
        if not isinstance(config, Mapping):
            fail("config", "a mapping", config, TypeError)
        expected = set(cls(64).config())
        missing, unknown = expected - set(config), set(config) - expected
        if missing or unknown:
            raise ValueError(
                f"config must have exactly the keys {sorted(expected)}; "
                f"missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        if config["version"] != BUCKETS_VERSION:
            fail("config['version']", f"{BUCKETS_VERSION}", config["version"])
        return cls(
            config["quantization"],
            config["max_pixels"],
            compat=config["compat"],
            aspect_ratios=config["aspect_ratios"],
            max_batch_size=config["max_batch_size"],
            no_upscale=config["no_upscale"],
        )

    # -- the bucket set ---------------------------------------------------------------------

    @property
    def quantization(self) -> int:
        """Side quantum of every bucket."""
        return self._q

    @property
    def max_pixels(self) -> int:
        """The pixel budget (65,536 when constructed with None)."""
        return self._budget

    @property
    def compat(self) -> str:
        """``"default"`` or ``"nemo"``."""
        return self._compat

    @property
    def no_upscale(self) -> bool:
        """Whether images are only assigned to buckets that fit inside them."""
        return self._no_upscale

    @property
    def max_batch_size(self) -> int | None:
        """The explicit dynamic-batch clamp, or None for the mode's default."""
        return self._max_batch_size

    @property
    def aspect_ratios(self) -> tuple[AspectRatio, ...]:
        """Nominal ratios of the default mode as validated (empty with ``compat="nemo"``)."""
        return self._ratios

    @property
    def resolutions(self) -> npt.NDArray[np.int64]:
        """Bucket ``(w, h)`` by id: a new int64 array of shape ``(num_buckets, 2)``."""
        return np.stack([self._w, self._h], axis=1)

    @property
    def num_buckets(self) -> int:
        """Number of buckets."""
        return len(self._buckets)

    def __len__(self) -> int:
        return len(self._buckets)

    def __repr__(self) -> str:
        return (
            f"MultiTierBucketCalculator(quantization={self._q}, max_pixels={self._budget}, "
            f"compat={self._compat!r}, no_upscale={self._no_upscale}, "
            f"max_batch_size={self._max_batch_size}, num_buckets={len(self)})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MultiTierBucketCalculator):
            return NotImplemented
        return self.config() == other.config()

    def __hash__(self) -> int:
        return hash(json.dumps(self.config(), sort_keys=True))

    def get_all_buckets(self) -> list[Bucket]:
        """All buckets in id order, as fresh dicts (editing them changes nothing here)."""
        return [dict(b) for b in self._buckets]

    def get_bucket_by_id(self, bucket_id: int) -> Bucket:
        """The bucket with this id (a copy).

        Raises:
            ValueError: If ``bucket_id`` is not in ``[0, num_buckets - 1]`` (no negative wrap).
        """
        i = check_int("bucket_id", bucket_id, min_value=0, max_value=len(self._buckets) - 1)
        return dict(self._buckets[i])

    def get_bucket_by_resolution(self, width: int, height: int) -> Bucket | None:
        """The bucket of exactly ``width x height`` (a copy), or None."""
        key = (check_int("width", width, min_value=1), check_int("height", height, min_value=1))
        found = self._by_res.get(key)
        return None if found is None else dict(found)

    def summary(self) -> str:
        """A text table of the buckets (what ``debug_mode`` logs)."""
        lines = [
            f"{len(self)} buckets, max_pixels={self._budget}, quantization={self._q}, "
            f"compat={self._compat!r}"
        ]
        for b in self._buckets:
            w, h = b["resolution"]
            lines.append(
                f"  {b['id']:3d}  {w:5d}x{h:<5d}  AR={b['aspect_ratio']:.3f}  "
                f"{b['pixels'] / self._budget:6.1%} of budget"
            )
        return "\n".join(lines)

    # -- assignment -------------------------------------------------------------------------

    def get_bucket_for_image(self, image_width: int, image_height: int) -> Bucket:
        """The bucket for one ``image_width x image_height`` image (a copy).

        This is the reference rule (see the module docstring); :meth:`assign` gives the same
        ids for arrays.

        Raises:
            TypeError: If a size is not an int (or is a bool).
            ValueError: If a size is not in ``[1, MAX_IMAGE_SIDE]``.
        """
        w = check_int("image_width", image_width, min_value=1, max_value=MAX_IMAGE_SIDE)
        h = check_int("image_height", image_height, min_value=1, max_value=MAX_IMAGE_SIDE)
        if self._compat == "nemo":
            x = w / h
            k = min(
                range(len(self._buckets)), key=lambda i: abs(self._buckets[i]["aspect_ratio"] - x)
            )
            return dict(self._buckets[k])
        candidates = list(range(len(self._res)))
        if self._no_upscale:
            fitting = [k for k in candidates if self._res[k][0] <= w and self._res[k][1] <= h]
            candidates = fitting or candidates
        # Distance exp(|ln(W/H) - ln(bw/bh)|) = num/den >= 1 and squareness sq_num/sq_den >= 1,
        # compared as exact fractions by cross-multiplying; a strict < keeps the lower id on ties.
        best, best_d, best_sq = -1, (1, 0), (1, 0)
        for k in candidates:
            bw, bh = self._res[k]
            a, b = w * bh, h * bw
            d = (a, b) if a >= b else (b, a)
            sq = (bw, bh) if bw >= bh else (bh, bw)
            lhs, rhs = d[0] * best_d[1], best_d[0] * d[1]
            if lhs < rhs or (lhs == rhs and sq[0] * best_sq[1] < best_sq[0] * sq[1]):
                best, best_d, best_sq = k, d, sq
        return dict(self._buckets[best])

    def assign(self, widths: npt.ArrayLike, heights: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Bucket ids for arrays of image sizes; the same ids as :meth:`get_bucket_for_image`.

        Vectorised: a ``searchsorted`` of ``W / H`` over the geometric means of neighbouring
        bucket aspect ratios, with an exact integer re-check of values within 1e-10 of a
        threshold. ``compat="nemo"`` uses a chunked ``argmin`` of NeMo's float distances.

        Args:
            widths: Integer array of image widths, any shape.
            heights: Integer array of image heights, the same shape.

        Returns:
            int64 array of bucket ids, the shape of ``widths``.

        Raises:
            TypeError: If an array is not of an integer dtype.
            ValueError: If the shapes differ or a size is not in ``[1, MAX_IMAGE_SIDE]``.

        Example:
            >>> calc = MultiTierBucketCalculator(64, compat="nemo")
            >>> calc.assign([7, 1920, 1000], [8, 1080, 3000]).tolist()  # 7x8: a tie, first wins
            [1, 4, 0]
        """
        w = _as_size_array("widths", widths)
        h = _as_size_array("heights", heights)
        if w.shape != h.shape:
            raise ValueError(
                f"widths and heights must have the same shape; got {w.shape} and {h.shape}"
            )
        shape = w.shape
        w, h = w.ravel(), h.ravel()
        ids = np.empty(w.shape, dtype=np.int64)
        self._lookup.lookup(w, h, ids)
        if self._no_upscale:
            self._refit(w, h, ids)
        return ids.reshape(shape)

    def _refit(
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
            if self._staircase is None:
                bad_parts.append(over + s)
                continue
            # Staircase: the fitting buckets are the ids in [lo, hi), and the nearest of a run of
            # buckets ordered by aspect ratio is the overall nearest clamped into the run.
            count_w, first_h = self._staircase
            q = self._q
            hi = count_w.take(np.minimum(wc[over] // q, count_w.size - 1))
            lo = first_h.take(np.minimum(hc[over] // q, first_h.size - 1))
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

    def _staircase_tables(
        self,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """Lookup tables of the no-upscale run, or None if the set is not a staircase.

        Indexed by ``t = side // q``: how many bucket widths are ``<= t * q`` (the run's end) and
        the first id whose height is ``<= t * q`` (its start).
        """
        if not (np.all(np.diff(self._w) >= 0) and np.all(np.diff(self._h) <= 0)):
            return None
        steps = np.arange(max(self._w.max(), self._h.max()) // self._q + 1, dtype=np.int64)
        count_w = np.searchsorted(self._w, steps * self._q, side="right").astype(np.int64)
        fit_h = np.searchsorted(self._h[::-1], steps * self._q, side="right").astype(np.int64)
        return count_w, len(self._h) - fit_h

    def _fit_lookup(self, iw: int, ih: int) -> _Lookup | None:
        if iw == 0 or ih == 0:
            return None
        fit = np.flatnonzero(
            (self._w <= self._unique_w[iw - 1]) & (self._h <= self._unique_h[ih - 1])
        ).astype(np.int64)
        return _Lookup(_LogTable(fit, self._res), fit) if fit.size else None

    # -- batch size and crop ----------------------------------------------------------------

    def get_dynamic_batch_size(
        self,
        resolution: Sequence[int],
        base_batch_size: int = 32,
        base_resolution: Sequence[int] = (512, 512),
    ) -> int:
        """Per-rank batch size for a bucket, inversely proportional to its pixel count.

        Default mode: ``floor(base_batch_size * bw * bh / (w * h))`` in exact integers, clamped
        to ``[1, max_batch_size]`` (``max_batch_size`` None means ``4 * base_batch_size``).
        ``compat="nemo"``: NeMo's ``max(1, int(base / ((w*h) / (bw*bh))))`` in floats, clamped
        above only if ``max_batch_size`` was given.

        Args:
            resolution: The bucket's ``(width, height)``.
            base_batch_size: Batch size at ``base_resolution``.
            base_resolution: Reference ``(width, height)``.

        Example:
            >>> calc = MultiTierBucketCalculator()
            >>> calc.get_dynamic_batch_size((1024, 1024)), calc.get_dynamic_batch_size((64, 64))
            (8, 128)
            >>> MultiTierBucketCalculator(compat="nemo").get_dynamic_batch_size((64, 64))
            2048
        """
        w, h = _pair("resolution", resolution)
        bw, bh = _pair("base_resolution", base_resolution)
        base = check_int("base_batch_size", base_batch_size, min_value=1)
        if self._compat == "nemo":
            size = max(1, int(base / ((w * h) / (bw * bh))))
            cap = self._max_batch_size
        else:
            size = max(1, base * bw * bh // (w * h))
            cap = self._max_batch_size or DEFAULT_MAX_BATCH_FACTOR * base
        return size if cap is None else min(size, cap)

    def resize_and_crop(
        self,
        image: Any,
        target_width: int,
        target_height: int,
        crop_mode: str = "center",
        *,
        seed: int | None = None,
        rng: np.random.Generator | None = None,
    ) -> tuple[Any, int, int] | tuple[Any, tuple[int, int]]:
        """Resize ``image`` to cover the target, then crop it to exactly the target size.

        Delegates to :func:`dataorder.crop.resize_and_crop` (see there for the modes).

        Returns:
            Default mode: ``(resized_image, crop_offset_x, crop_offset_y)`` as NeMo documents,
            with the image of the input's type. ``compat="nemo"``: ``(pil_image, (x, y))``, the
            shape NeMo's code really returns, so existing callers unpack it unchanged; the pixels
            follow our rule (always exactly the target size, offsets never negative).
        """
        from dataorder.crop import resize_and_crop

        out, x, y = resize_and_crop(
            image, target_width, target_height, crop_mode, seed=seed, rng=rng
        )
        if self._compat == "nemo":
            from PIL import Image

            if not isinstance(out, Image.Image):
                out = Image.fromarray(out)
            return out, (x, y)
        return out, x, y


def _pair(name: str, value: object) -> tuple[int, int]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != 2:
        fail(name, "a (width, height) pair of positive ints", value, TypeError)
    return (
        check_int(f"{name}[0]", value[0], min_value=1),
        check_int(f"{name}[1]", value[1], min_value=1),
    )
