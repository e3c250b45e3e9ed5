"""The fitted bucket rule: buckets and exact aspect-ratio thresholds, given rather than generated.

:class:`FittedBucketRule` is the third bucket rule (NOTE [ Bucket rules ] in
:mod:`dataorder.diffusion.buckets.rules`): what a calculator over a fitted set runs, and all that
``MultiTierBucketCalculator.from_config`` needs to rebuild one without the data. Image ``W x H``
goes to the number of thresholds ``(p, q)`` it is *above*, ``W * q > H * p`` in exact integers
(:class:`ThresholdAssigner`). Fitting the set is :mod:`dataorder.diffusion.fit.images`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from dataorder._validate import fail
from dataorder.diffusion.buckets.lookup import Lookup
from dataorder.diffusion.buckets.points import check_pairs, check_points
from dataorder.diffusion.buckets.rules import DefaultBucketRule

__all__ = ["FIT_VERSION", "FittedBucketRule", "ThresholdAssigner"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Bumped whenever the meaning of a fitted configuration changes (thresholds, assignment).
FIT_VERSION = 1

_NEAR = 1e-10  # ThresholdAssigner: images this close to a threshold are placed in exact integers


# -- the assignment -----------------------------------------------------------------------------


class ThresholdAssigner:
    """Bucket ids from exact aspect-ratio thresholds: the fitted rule's assignment.

    Image ``W x H`` is *above* threshold ``(p, q)`` iff ``W * q > H * p``; its bucket is the
    number of thresholds it is above. :meth:`choose` is the reference, in Python integers.
    :meth:`assign` reads the answer of the image's float ``W / H`` cell from a table
    (:class:`~dataorder.diffusion.buckets.lookup.Lookup`) and places any image within ``1e-10`` of a
    threshold by an int64 bisection (``W * q < 2**62``), so the two agree on every image.

    Args:
        thresholds: ``K - 1`` pairs ``(p, q)`` of ints in ``[1, MAX_IMAGE_SIDE]``, strictly
            increasing as fractions.

    Raises:
        TypeError: If a threshold is not a pair of ints.
        ValueError: If a term is out of range or the thresholds do not increase.

    Example:
        >>> a = ThresholdAssigner([(1, 1), (5, 4)])
        >>> a.assign(np.array([3, 4, 5, 1]), np.array([4, 3, 4, 3])).tolist(), a.choose(5, 4)
        ([0, 2, 1, 0], 1)
    """

    def __init__(self, thresholds: Sequence[tuple[int, int]]) -> None:
        pairs = check_pairs("thresholds", thresholds)
        for i in range(1, len(pairs)):
            if pairs[i][0] * pairs[i - 1][1] <= pairs[i - 1][0] * pairs[i][1]:
                fail("thresholds", "strictly increasing as fractions p / q", thresholds)
        self.pairs: tuple[tuple[int, int], ...] = tuple(pairs)
        self._p = np.array([p for p, _ in pairs], dtype=np.int64)
        self._q = np.array([q for _, q in pairs], dtype=np.int64)
        #: The thresholds as floats (what :class:`~dataorder.diffusion.buckets.lookup.Lookup`
        #: reads).
        self.thresholds: FloatArray = self._p / self._q if pairs else np.zeros(0)
        self._padded = np.concatenate(([-np.inf], self.thresholds, [np.inf]))
        every = np.arange(len(pairs) + 1, dtype=np.int64)
        self._lookup = Lookup(self, every)

    def choose(self, w: int, h: int) -> int:
        """The bucket id of one ``w x h`` image, in exact integers."""
        return sum(w * q > h * p for p, q in self.pairs)

    def assign(self, w: IntArray, h: IntArray) -> IntArray:
        """Bucket ids of 1-D int64 arrays of sizes (equal to :meth:`choose` on every image)."""
        ids = np.empty(w.shape, dtype=np.int64)
        self._lookup.lookup(w, h, ids)
        return ids

    def positions(self, w: IntArray, h: IntArray, x: FloatArray) -> IntArray:
        """Bucket ids of images with float ratios ``x``; exact within ``1e-10`` of a threshold."""
        pos = np.searchsorted(self.thresholds, x, side="left").astype(np.int64)
        tol = x * _NEAR
        near = np.flatnonzero((x - self._padded[pos] <= tol) | (self._padded[pos + 1] - x <= tol))
        if near.size:
            pos[near] = self._count_above(w[near], h[near])
        return pos

    def _count_above(self, w: IntArray, h: IntArray) -> IntArray:
        lo = np.zeros(w.size, dtype=np.int64)
        hi = np.full(w.size, self._p.size, dtype=np.int64)
        active = np.flatnonzero(lo < hi)
        while active.size:
            mid = (lo[active] + hi[active]) // 2
            above = w[active] * self._q[mid] > h[active] * self._p[mid]
            lo[active] = np.where(above, mid + 1, lo[active])
            hi[active] = np.where(above, hi[active], mid)
            active = active[lo[active] < hi[active]]
        return lo


# -- the rule -----------------------------------------------------------------------------------


class FittedBucketRule:
    """A bucket set with given thresholds (``compat="fitted"``), behind
    :class:`~dataorder.diffusion.buckets.rules.BucketRule` (NOTE [ Bucket rules ]), fitted by
    :func:`dataorder.diffusion.fit.images.fit_to_data`.

    A calculator over it is ``MultiTierBucketCalculator(quantization, max_pixels, rule=rule)``.
    The buckets are given, not generated; the assignment is :class:`ThresholdAssigner`; dynamic
    batch sizes scale as in the default rule. Threshold ``k`` lies in
    ``[w_k / h_k, w_{k+1} / h_{k+1})``, so an image of exactly a bucket's ratio goes to that
    bucket and any other image to one of the two buckets around its ratio.

    Args:
        resolutions: ``K`` bucket ``(w, h)``, strictly ascending in aspect ratio.
        thresholds: ``K - 1`` exact ``(p, q)``.
        fit: What the set was fitted to (``FitResult.summary``), recorded by :meth:`config`;
            None for a set that was not fitted. It must survive ``json.dumps``.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If the buckets are not ascending, a threshold is outside its bracket, or
            ``fit`` is not JSON-serialisable.

    Example:
        >>> rule = FittedBucketRule([(64, 128), (128, 64)], [(1, 1)])
        >>> rule.assigner(rule.resolutions(64 * 128, 64), 64).choose(100, 100)
        0
    """

    name: ClassVar[str] = "fitted"
    #: The keys of :meth:`config`, which a calculator's config holds too.
    CONFIG_KEYS: ClassVar[tuple[str, ...]] = (
        "aspect_ratios",
        "no_upscale",
        "resolutions",
        "thresholds",
        "fit",
    )

    def __init__(
        self,
        resolutions: npt.ArrayLike,
        thresholds: Sequence[tuple[int, int]],
        fit: Mapping[str, Any] | None = None,
    ) -> None:
        res = check_points("resolutions", resolutions, None, None)
        if not res:
            fail("resolutions", "a non-empty (K, 2) array", resolutions)
        for i in range(1, len(res)):
            if res[i][0] * res[i - 1][1] <= res[i - 1][0] * res[i][1]:
                fail("resolutions", "strictly ascending in aspect ratio w / h", resolutions)
        pairs = check_pairs("thresholds", thresholds)
        if len(pairs) != len(res) - 1:
            fail("thresholds", f"{len(res) - 1} pairs, one between each two buckets", thresholds)
        for k, (p, q) in enumerate(pairs):
            (w1, h1), (w2, h2) = res[k], res[k + 1]
            if not (w1 * q <= h1 * p and p * h2 < q * w2):
                fail(
                    f"thresholds[{k}]",
                    f"a fraction in [{w1}/{h1}, {w2}/{h2}), between buckets {k} and {k + 1}",
                    (p, q),
                )
        if fit is not None and not isinstance(fit, Mapping):
            fail("fit", "a mapping or None", fit, TypeError)
        try:
            recorded = None if fit is None else json.loads(json.dumps(dict(fit)))
        except (TypeError, ValueError):
            fail("fit", "a JSON-serialisable mapping", fit)
        self._res = tuple(res)
        self._assigner = ThresholdAssigner(pairs)
        self._fit: dict[str, Any] | None = recorded
        self._scaling = DefaultBucketRule(None, False)

    @property
    def thresholds(self) -> tuple[tuple[int, int], ...]:
        """The ``K - 1`` thresholds ``(p, q)``."""
        return self._assigner.pairs

    def resolutions(self, budget: int, quantization: int) -> list[tuple[int, int]]:
        """The buckets, after checking that they are on the lattice and within the budget."""
        return check_points("resolutions", self._res, budget, quantization)

    def assigner(
        self, resolutions: Sequence[tuple[int, int]], quantization: int
    ) -> ThresholdAssigner:
        """The assignment (the buckets are this rule's own; ``resolutions`` must be them)."""
        if tuple(resolutions) != self._res:
            fail("resolutions", f"the rule's own buckets {list(self._res)}", resolutions)
        return self._assigner

    def dynamic_batch_size(
        self, w: int, h: int, base: int, bw: int, bh: int, max_batch_size: int | None
    ) -> int:
        """As the default rule: ``floor(base * bw * bh / (w * h))``, clamped."""
        return self._scaling.dynamic_batch_size(w, h, base, bw, bh, max_batch_size)

    def config(self) -> dict[str, Any]:
        """The rule's options: the buckets, the thresholds and what they were fitted to."""
        return {
            "aspect_ratios": None,
            "no_upscale": False,
            "resolutions": [[w, h] for w, h in self._res],
            "thresholds": [[p, q] for p, q in self.thresholds],
            "fit": json.loads(json.dumps(self._fit)),
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> FittedBucketRule:
        """Rebuild the rule from :meth:`config` (what a calculator's ``from_config`` passes on).

        Raises:
            TypeError: If ``config`` is not a mapping.
            ValueError: If the keys are not :data:`CONFIG_KEYS`, the fit's version differs, or
                the buckets or thresholds are invalid.
        """
        if not isinstance(config, Mapping):
            fail("config", "a mapping", config, TypeError)
        if set(config) != set(cls.CONFIG_KEYS):
            fail("config", f"a mapping with exactly the keys {list(cls.CONFIG_KEYS)}", config)
        if config["aspect_ratios"] is not None or config["no_upscale"] is not False:
            raise ValueError(
                "a fitted config must have aspect_ratios=None and no_upscale=False; got "
                f"aspect_ratios={config['aspect_ratios']!r}, no_upscale={config['no_upscale']!r}"
            )
        fit = config["fit"]
        if fit is not None and (not isinstance(fit, Mapping) or fit.get("version") != FIT_VERSION):
            fail("config['fit']", f"None or a mapping with 'version': {FIT_VERSION}", fit)
        return cls(config["resolutions"], config["thresholds"], fit)
