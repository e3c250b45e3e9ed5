"""Lists of bucket points and of exact ratios, validated: what a fitted rule is built from.

A fitted bucket set is given, not generated, so its buckets (``(w, h)`` points) and thresholds
(``(p, q)`` pairs) come in as data: from a fit, from a saved ``config()`` or by hand. The fitted
rules (:mod:`dataorder.diffusion.buckets.fitted_rule`, :mod:`dataorder.diffusion.buckets.video_set`)
and the fits (:mod:`dataorder.diffusion.fit`) check them here, so a bad entry is named (``name[i]``)
rather than left to numpy's shape errors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dataorder._validate import check_int, fail
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE

__all__ = ["check_pairs", "check_points"]


def check_points(
    name: str, values: object, budget: int | None, q: int | None
) -> list[tuple[int, int]]:
    """``(K, 2)`` int ``(w, h)`` pairs; on the lattice and within budget when those are given.

    A numpy array is checked whole; any other sequence pair by pair, so a bad entry is named
    (``name[i]``) rather than left to numpy's shape errors.

    Raises:
        TypeError: If ``values`` is not an int array or a sequence of int pairs.
        ValueError: If its shape is not ``(K, 2)`` or a point is out of range, off the lattice
            of ``q`` or over ``budget``.
    """
    what = "a (width, height) pair of ints"
    if isinstance(values, np.ndarray):
        if values.size == 0 and values.ndim <= 2:
            return []
        if values.dtype == np.bool_ or not np.issubdtype(values.dtype, np.integer):
            fail(name, "an array of (width, height) int pairs", values, TypeError)
        if values.ndim != 2 or values.shape[1] != 2:
            fail(name, "an array of shape (K, 2)", values)
        pairs = values.tolist()
    else:
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            fail(name, "an array of (width, height) int pairs", values, TypeError)
        pairs = []
        for i, pair in enumerate(values):
            if isinstance(pair, str | bytes) or not isinstance(pair, Sequence | np.ndarray):
                fail(f"{name}[{i}]", what, pair, TypeError)
            if len(pair) != 2:
                fail(f"{name}[{i}]", what, pair)
            pairs.append(
                [check_int(f"{name}[{i}][{j}]", v, min_value=1) for j, v in enumerate(pair)]
            )
    out = []
    for i, (w, h) in enumerate(pairs):
        if not (1 <= w <= MAX_IMAGE_SIDE and 1 <= h <= MAX_IMAGE_SIDE):
            fail(f"{name}[{i}]", f"a (w, h) of ints in [1, {MAX_IMAGE_SIDE}]", (w, h))
        if q is not None and budget is not None and (w % q or h % q or w * h > budget):
            fail(
                f"{name}[{i}]",
                f"a (w, h) with both sides multiples of quantization={q} and "
                f"w * h <= max_pixels={budget}",
                (w, h),
            )
        out.append((w, h))
    return out


def check_pairs(name: str, values: object) -> list[tuple[int, int]]:
    """A sequence of ``(p, q)`` pairs of ints in ``[1, MAX_IMAGE_SIDE]``.

    Raises:
        TypeError: If it is not a sequence of pairs of ints.
        ValueError: If a pair has another length or a term is out of range.
    """
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        fail(name, "a sequence of (p, q) int pairs", values, TypeError)
    out = []
    for i, pair in enumerate(values):
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence | np.ndarray):
            fail(f"{name}[{i}]", "a (p, q) pair of ints", pair, TypeError)
        if len(pair) != 2:
            fail(f"{name}[{i}]", "a (p, q) pair of ints", pair)
        p = check_int(f"{name}[{i}][0]", pair[0], min_value=1, max_value=MAX_IMAGE_SIDE)
        q = check_int(f"{name}[{i}][1]", pair[1], min_value=1, max_value=MAX_IMAGE_SIDE)
        out.append((p, q))
    return out
