"""``compat="nemo"``'s bucket rule: NeMo Automodel 0.7.0's buckets, choices and batch sizes.

:class:`NemoBucketRule` is one of the bucket rules (NOTE [ Bucket rules ] in
:mod:`dataorder.diffusion.buckets.rules`), reproduced exactly from the behaviour spec
(nemo_behaviour.md section 2): its 14 aspect ratios, its rounding (half to even, which makes some
presets asymmetric), its bucket order, its image-to-bucket rule (least ``|bucket_ar - W / H|`` in
floating point, ties to the first bucket) and its unclamped dynamic batch size. Only bad input
differs: a ValueError/TypeError here, not a ZeroDivisionError or a math domain error. NeMo's
sampler order, which a bucket sampler chooses with its own ``compat="nemo"``, is
:mod:`dataorder.diffusion.sampler.nemo_order`; the two are independent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from dataorder._validate import fail
from dataorder.diffusion.buckets.lookup import Lookup

__all__ = [
    "NEMO_ASPECT_RATIOS",
    "NemoBucketRule",
    "nemo_dynamic_batch_size",
]

#: NeMo's 14 nominal (w, h) ratios, in its order.
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


def nemo_dynamic_batch_size(
    resolution: tuple[int, int], base_batch_size: int, base_resolution: tuple[int, int]
) -> int:
    """NeMo's ``max(1, int(base / ((w * h) / (bw * bh))))``: float division, no upper clamp."""
    (w, h), (bw, bh) = resolution, base_resolution
    return max(1, int(base_batch_size / ((w * h) / (bw * bh))))


_NEMO_CHUNK = 1 << 16


def nemo_resolutions(budget: int, q: int) -> list[tuple[int, int]]:
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
        for s in range(0, x.size, _NEMO_CHUNK):
            part = x[s : s + _NEMO_CHUNK]
            out[s : s + _NEMO_CHUNK] = np.abs(self.ar[None, :] - part[:, None]).argmin(axis=1)
        return out


class _NemoAssigner:
    """NeMo's choice of bucket: least ``|bucket_ar - W / H|`` in float64, ties to the first."""

    def __init__(self, resolutions: Sequence[tuple[int, int]]) -> None:
        self._ar = np.array([w / h for w, h in resolutions], dtype=np.float64)
        every = np.arange(len(resolutions), dtype=np.int64)
        self._lookup = Lookup(_NemoTable(self._ar), every)

    def choose(self, w: int, h: int) -> int:
        x = w / h
        return min(range(self._ar.size), key=lambda i: abs(float(self._ar[i]) - x))

    def assign(self, w: npt.NDArray[np.int64], h: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        ids = np.empty(w.shape, dtype=np.int64)
        self._lookup.lookup(w, h, ids)
        return ids


class NemoBucketRule:
    """NeMo Automodel 0.7.0's bucket rule, behind
    :class:`~dataorder.diffusion.calculators.image.BucketRule`.

    Its 14 aspect ratios, its rounding (half to even, which makes some presets asymmetric), its
    bucket order, its image-to-bucket rule (least ``|bucket_ar - W / H|`` in floating point, ties
    to the first bucket) and its unclamped dynamic batch size.
    """

    name: ClassVar[str] = "nemo"

    def __init__(self, aspect_ratios: object = None, no_upscale: bool = False) -> None:
        if aspect_ratios is not None:
            fail(
                "aspect_ratios", "None with compat='nemo' (NeMo's ratios are fixed)", aspect_ratios
            )
        if no_upscale:
            fail("no_upscale", "False with compat='nemo' (NeMo has no such rule)", no_upscale)

    def resolutions(self, budget: int, quantization: int) -> list[tuple[int, int]]:
        return nemo_resolutions(budget, quantization)

    def assigner(self, resolutions: Sequence[tuple[int, int]], quantization: int) -> _NemoAssigner:
        return _NemoAssigner(resolutions)

    def dynamic_batch_size(
        self, w: int, h: int, base: int, bw: int, bh: int, max_batch_size: int | None
    ) -> int:
        size = nemo_dynamic_batch_size((w, h), base, (bw, bh))
        return size if max_batch_size is None else min(size, max_batch_size)

    def config(self) -> dict[str, Any]:
        return {"aspect_ratios": None, "no_upscale": False}
