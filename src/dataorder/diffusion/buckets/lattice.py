"""The lattice of bucket shapes, and the shape that best serves a nominal aspect ratio.

Bucket sides are multiples of a quantum ``q`` and a bucket's area is within a pixel budget. For a
nominal ratio ``r`` the best lattice point ``(w, h)`` minimises
``|ln(w / h) - ln r| + |ln(w * h / budget)| / 2``: both terms are the log of a side-length ratio,
the first how much a crop to that shape shortens one side, the second how much the budget
shortfall shortens both. Ties go to the larger area. Ratios are taken as ``max(r, 1 / r)`` and
mirrored, so a set is symmetric under swapping ``w`` and ``h`` by construction. The default
bucket rule (:mod:`dataorder.diffusion.calculators.image`) builds its sets here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dataorder._validate import check_int, fail

__all__ = [
    "DEFAULT_ASPECT_RATIOS",
    "AspectRatio",
    "aspect_ratios_arg",
    "best_resolution",
    "canonical_ratio",
    "default_resolutions",
    "ratio_value",
]

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


_MAX_RATIO = 10_000


def canonical_ratio(index: int, value: object) -> AspectRatio:
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
    if not 1 / _MAX_RATIO <= ratio_value(ratio) <= _MAX_RATIO:
        fail(name, f"a ratio between 1/{_MAX_RATIO} and {_MAX_RATIO}", given)
    return ratio


def aspect_ratios_arg(aspect_ratios: object) -> tuple[AspectRatio, ...]:
    """Validate an ``aspect_ratios`` argument (None: :data:`DEFAULT_ASPECT_RATIOS`), each ratio
    by :func:`canonical_ratio`."""
    given = DEFAULT_ASPECT_RATIOS if aspect_ratios is None else aspect_ratios
    if isinstance(given, str | bytes) or not isinstance(given, Sequence):
        fail("aspect_ratios", "a sequence of aspect ratios", aspect_ratios, TypeError)
    if not given:
        fail("aspect_ratios", "a non-empty sequence", aspect_ratios)
    return tuple(canonical_ratio(i, r) for i, r in enumerate(given))


def ratio_value(ratio: AspectRatio) -> float:
    return ratio[0] / ratio[1] if isinstance(ratio, tuple) else ratio


def best_resolution(rho: float, budget: int, q: int) -> tuple[int, int] | None:
    """The lattice point within ``budget`` that best serves nominal ratio ``rho`` (see module);
    None if the budget holds no ``q x q`` cell."""
    if budget < q * q:  # no point at all: the searches below, which end on one, would not end
        return None
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


def default_resolutions(
    ratios: Sequence[AspectRatio], budget: int, q: int
) -> list[tuple[int, int]]:
    by_ar: dict[Fraction, tuple[int, int]] = {}
    rhos = sorted({max(ratio_value(r), 1.0 / ratio_value(r)) for r in ratios})
    for rho in rhos:
        res = best_resolution(rho, budget, q)
        if res is None:
            continue
        for w, h in (res, (res[1], res[0])):
            ar = Fraction(w, h)
            if ar not in by_ar or w * h > by_ar[ar][0] * by_ar[ar][1]:
                by_ar[ar] = (w, h)
    return [by_ar[ar] for ar in sorted(by_ar)]
