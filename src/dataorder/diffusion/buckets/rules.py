"""Bucket rules: what decides a calculator's buckets, and dataorder's own (``compat="default"``).

NOTE [ Bucket rules ]
    Which buckets exist, which bucket an image goes to and how a batch size scales with a bucket are
    a :class:`BucketRule`, chosen once when the calculator
    (:class:`~dataorder.diffusion.calculators.image.MultiTierBucketCalculator`) is built; the
    calculator delegates to it and never branches on the mode. There are three, each documented
    where it lives:

    * ``"default"``, :class:`DefaultBucketRule` (below): one bucket per nominal aspect ratio,
      each image to the bucket of least crop loss, in exact integers; batch sizes inversely
      proportional to pixels, clamped to ``4 * base``;
    * ``"nemo"``, :class:`~dataorder.diffusion.buckets.nemo_rule.NemoBucketRule`: NeMo Automodel
      0.7.0's buckets, assignment and batch sizes exactly (only bad input differs: a
      ValueError/TypeError here, not a ZeroDivisionError or a math domain error);
    * ``"fitted"``, :class:`~dataorder.diffusion.buckets.fitted_rule.FittedBucketRule`: buckets and
      exact thresholds fitted to a dataset (``MultiTierBucketCalculator.fit_to_data``).

    The calculator's ``compat=`` names one of the first two; its ``rule=`` takes any rule built
    beforehand. Its ``compat`` is the rule's ``name`` and its ``config()`` records the rule's
    options, so ``from_config`` rebuilds any of the three. A ``cost_model`` replaces only the
    rule's batch sizes (:class:`CostModelBatchSizes`).

The default rule:

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
* **No upscaling** (``no_upscale=True``). Only buckets that fit inside the image (``w <= W`` and
  ``h <= H``) are candidates, so the image is only ever downscaled. An image smaller than every
  bucket on some side (no bucket fits) falls back to the nearest aspect ratio over all buckets and
  will be upscaled: a single-budget set has no smaller tier to offer, and dropping it is the
  caller's decision (:mod:`dataorder.diffusion.sampler.stats` counts these as ``upscaled``).
* **Dynamic batch size** ``floor(base * base_pixels / pixels)`` in exact integers, at least 1
  and at most ``max_batch_size`` (default: ``4 * base_batch_size``), so a tiny bucket cannot
  ask for a 2,048-sample batch.

Measured by ``benchmarks/bench_buckets.py`` on aspect ratios drawn log-uniformly from 1/3 to 3:
the default ``'1024p'`` preset has 31 buckets, 2.1 % mean and 4.9 % p95 crop loss and no image
losing more than 10 %, where NeMo's has 10 buckets, 9.8 %, 34.9 % and 31 %. The 768p and 1536p
presets do as well; with ``quantization=16`` every preset is under 2.2 % mean and 5 % p95. At
``quantization=64`` the 256p and 512p budgets are too small for the 64-pixel lattice to offer
fine aspect ratios near the budget (7.1 % and 4.4 % mean): even every lattice point within 75 %
of the 512p budget would give 3.5 %. Buckets use 88 % to 100 % of the budget at 1024p/q=64
(mean shortfall 5 %, NeMo's 3.4 %): a little budget is traded for much better shapes.

Example:
    >>> rule = DefaultBucketRule(["4:3", 1.0], no_upscale=False)
    >>> res = rule.resolutions(512 * 512, 64)
    >>> res, rule.assigner(res, 64).choose(1920, 1080)
    ([(448, 576), (512, 512), (576, 448)], 2)
    >>> rule.config()
    {'aspect_ratios': [[4, 3], 1.0], 'no_upscale': False}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.diffusion.buckets.cost import DEFAULT_MAX_BATCH_FACTOR, CostModel, image_tokens
from dataorder.diffusion.buckets.lattice import (
    AspectRatio,
    aspect_ratios_arg,
    default_resolutions,
)
from dataorder.diffusion.buckets.lookup import NearestLogAspect
from dataorder.diffusion.buckets.nemo_rule import NemoBucketRule

__all__ = [
    "COMPATS",
    "DEFAULT_MAX_PIXELS",
    "MAX_PIXELS",
    "MAX_QUANTIZATION",
    "RULES",
    "Assigner",
    "BucketRule",
    "CostModelBatchSizes",
    "DefaultBucketRule",
    "check_budget",
]

#: NeMo's budget when ``max_pixels`` is None, kept for every rule.
DEFAULT_MAX_PIXELS = 256 * 256

#: Largest pixel budget (a 1 Tpx image): larger budgets only exhaust memory in the lookup tables.
MAX_PIXELS = 2**40

#: Largest quantization: one bucket of ``quantization**2`` pixels must fit :data:`MAX_PIXELS`.
MAX_QUANTIZATION = 2**20


def check_budget(quantization: object, max_pixels: object) -> tuple[int, int]:
    """The lattice step and the pixel budget every rule builds on, validated: ``(q, budget)``.

    What a calculator's constructor checks first, and what a fit checks without building one.
    ``max_pixels=None`` means :data:`DEFAULT_MAX_PIXELS`.

    Raises:
        TypeError: If ``quantization`` or ``max_pixels`` is not an int (a bool included).
        ValueError: If ``quantization`` is not in ``[1, MAX_QUANTIZATION]``, ``max_pixels`` not
            in ``[quantization**2, MAX_PIXELS]``, or ``quantization`` above 256 when
            ``max_pixels`` is None (no bucket would fit the default budget).

    Example:
        >>> check_budget(64, None), check_budget(16, 512 * 512)
        ((64, 65536), (16, 262144))
    """
    # a bucket holds at least quantization**2 pixels, at most MAX_PIXELS = 2**40
    q = check_int("quantization", quantization, min_value=1, max_value=MAX_QUANTIZATION)
    if max_pixels is None:
        budget = DEFAULT_MAX_PIXELS
        if q * q > budget:  # the default budget holds no bucket: say which arguments
            fail(
                "quantization",
                f"at most 256 when max_pixels is None (the default budget of {budget} "
                "pixels must hold one quantization x quantization bucket; pass max_pixels "
                "for a coarser lattice)",
                quantization,
            )
    else:
        # at least one bucket of quantization**2 pixels
        budget = check_int("max_pixels", max_pixels, min_value=q * q, max_value=MAX_PIXELS)
    return q, budget


class Assigner(Protocol):
    """A bucket rule's assignment over one bucket set."""

    def choose(self, w: int, h: int) -> int:
        """The bucket id of one ``w x h`` image (the reference, in exact arithmetic)."""
        ...

    def assign(self, w: npt.NDArray[np.int64], h: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Bucket ids of 1-D arrays of sizes; equal to :meth:`choose` on every image."""
        ...


@runtime_checkable
class BucketRule(Protocol):
    """A bucket rule (NOTE [ Bucket rules ])."""

    #: The rule's name: what ``MultiTierBucketCalculator.compat`` reports and ``config()`` records.
    name: ClassVar[str]

    def resolutions(self, budget: int, quantization: int) -> list[tuple[int, int]]:
        """The bucket set, ``(w, h)`` by id, in ascending aspect ratio."""
        ...

    def assigner(self, resolutions: Sequence[tuple[int, int]], quantization: int) -> Assigner:
        """The assignment of images to ``resolutions``."""
        ...

    def dynamic_batch_size(
        self, w: int, h: int, base: int, bw: int, bh: int, max_batch_size: int | None
    ) -> int:
        """The per-rank batch size of a ``w x h`` bucket given ``base`` at ``bw x bh``."""
        ...

    def config(self) -> dict[str, Any]:
        """The rule's options: ``aspect_ratios`` and ``no_upscale`` (keys of every calculator
        config), then any keys of its own, which :meth:`MultiTierBucketCalculator.config`
        records after its own keys."""
        ...


class DefaultBucketRule:
    """dataorder's bucket rule (this module's docstring; ``compat="default"``).

    Args:
        aspect_ratios: Nominal aspect ratios (each stands for its transpose too); None means
            :data:`DEFAULT_ASPECT_RATIOS`.
        no_upscale: Only assign an image to buckets that fit inside it.
    """

    name: ClassVar[str] = "default"

    def __init__(self, aspect_ratios: Sequence[AspectRatio | str] | None, no_upscale: bool) -> None:
        self.ratios = aspect_ratios_arg(aspect_ratios)
        self._no_upscale = no_upscale

    def resolutions(self, budget: int, quantization: int) -> list[tuple[int, int]]:
        """One lattice point per nominal aspect ratio, mirrored (the rule above)."""
        return default_resolutions(self.ratios, budget, quantization)

    def assigner(
        self, resolutions: Sequence[tuple[int, int]], quantization: int
    ) -> NearestLogAspect:
        """Nearest bucket in log aspect ratio, in exact integers (optionally never upscaling)."""
        return NearestLogAspect(resolutions, quantization, self._no_upscale)

    def dynamic_batch_size(
        self, w: int, h: int, base: int, bw: int, bh: int, max_batch_size: int | None
    ) -> int:
        """``base`` scaled by the pixel ratio to the base resolution, at least 1, clamped."""
        size = max(1, base * bw * bh // (w * h))
        return min(size, max_batch_size or DEFAULT_MAX_BATCH_FACTOR * base)

    def config(self) -> dict[str, Any]:
        """The rule's options, for ``MultiTierBucketCalculator.config()``."""
        return {
            "aspect_ratios": [list(r) if isinstance(r, tuple) else r for r in self.ratios],
            "no_upscale": self._no_upscale,
        }


class CostModelBatchSizes:
    """Batch sizes from a cost model over image tokens, in place of a rule's.

    The largest per-rank batch whose cost fits ``base`` samples at ``bw x bh``, clamped to
    ``[1, max_batch_size]`` (None: ``4 * base``), in exact arithmetic (NOTE [ Cost-model batch
    sizes ] in :mod:`dataorder.diffusion.buckets.cost`). ``CostModel()`` gives the default rule's
    batch sizes whenever the sides are multiples of ``patch_side``.

    Args:
        cost_model: What a sample of ``t`` tokens costs.
        patch_side: Pixel side of one token (VAE factor x patch); None means 16 (SD3, Flux).

    Example:
        >>> sizes = CostModelBatchSizes(CostModel.for_transformer(3072))
        >>> sizes.dynamic_batch_size(1024, 1024, 32, 512, 512, None), sizes.config()
        (6, {'cost_model': {'token_cost': '18432', 'attention_cost': '1'}, 'patch_side': 16})
    """

    def __init__(self, cost_model: CostModel, patch_side: int | None = None) -> None:
        if not isinstance(cost_model, CostModel):
            fail("cost_model", "a CostModel or None", cost_model, TypeError)
        self.cost_model = cost_model
        self.patch_side = (
            16 if patch_side is None else check_int("patch_side", patch_side, min_value=1)
        )

    def dynamic_batch_size(
        self, w: int, h: int, base: int, bw: int, bh: int, max_batch_size: int | None
    ) -> int:
        """The per-rank batch size of a ``w x h`` bucket given ``base`` at ``bw x bh``."""
        s = self.patch_side
        tokens, base_tokens = image_tokens(w, h, s), image_tokens(bw, bh, s)
        return self.cost_model.batch_size(tokens, base_tokens, base, max_batch_size)

    def config(self) -> dict[str, Any]:
        """The keys it adds to a calculator's config."""
        return {"cost_model": self.cost_model.config(), "patch_side": self.patch_side}


#: The rules ``compat=`` names (NOTE [ Bucket rules ]), each built from ``(aspect_ratios,
#: no_upscale)``; a fitted rule is given with ``rule=`` instead.
RULES: Mapping[str, type[DefaultBucketRule] | type[NemoBucketRule]] = MappingProxyType(
    {DefaultBucketRule.name: DefaultBucketRule, NemoBucketRule.name: NemoBucketRule}
)
COMPATS: tuple[str, ...] = tuple(RULES)
