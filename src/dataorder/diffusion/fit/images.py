"""Fit a bucket set to a dataset: the least crop loss under a lock-step waste budget.

Every step of the bucket sampler is one *global* batch of ``G`` samples (per-rank batch x
data-parallel ranks) from one bucket, so a bucket of ``n`` images drops ``n mod G`` of them
(``drop_last``) or pads ``(-n) mod G`` slots: tails ``"drop"`` and ``"pad"`` of
:func:`~dataorder.core.partition.plan_segments`. Many fine buckets crop little but waste a lot.
:func:`fit_to_data` chooses, from the lattice the presets are built on (the same pixel budget and
quantization), the buckets *and* the aspect-ratio thresholds between them that minimise the mean
crop loss ``1 - min(r / s, s / r)`` (``r = W / H`` of the image, ``s`` of its bucket) subject to
``waste / N <= max_waste``. ``MultiTierBucketCalculator.fit_to_data`` (and
:func:`fitted_calculator`) wraps the result in a calculator whose ``config()`` records the fitted
set, so a manifest or a state rebuilds it without fitting again. The fit never imports the
calculators (NOTE [ diffusion layers ] in :mod:`dataorder.diffusion`): the calculator class it
builds comes in as an argument, ``calculator=``, which ``MultiTierBucketCalculator.fit_to_data``
passes itself.

An image's bucket is a pure function of its size: bucket ``k`` holds the images above threshold
``k - 1`` and not above threshold ``k``, where *above* ``(p, q)`` means ``W * q > H * p`` in
exact integers (:class:`ThresholdAssigner`). A threshold may sit away from the log-aspect
midpoint of its two buckets (that is how bucket sizes become multiples of ``G``), but always
between their aspect ratios, so an image goes to one of the two buckets that bracket its ratio.

Example:
    >>> import numpy as np
    >>> from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
    >>> rng = np.random.default_rng(0)
    >>> h = rng.integers(500, 3000, 20_000)
    >>> w = np.rint(h * np.exp(rng.uniform(-1, 1, h.size))).astype(np.int64)
    >>> fit = fit_to_data(
    ...     w, h, global_batch_size=512, max_pixels=1024**2, calculator=MultiTierBucketCalculator)
    >>> fit.num_buckets, fit.waste, round(fit.mean_crop_loss, 4)
    (33, 32, 0.0203)
    >>> calc = fit.calculator()
    >>> calc.compat, bool((calc.assign(w, h) == fit.assign(w, h)).all())
    ('fitted', True)
    >>> MultiTierBucketCalculator.from_config(calc.config()) == calc
    True
    >>> fit_to_data(w, h, global_batch_size=512, max_pixels=1024**2, max_waste=0.001)
    Traceback (most recent call last):
     ...
    ValueError: max_waste must be >= 0.0016, the least waste of any bucket set (32 of N=20000 \
images dropped: N mod G with G=512, one bucket); got max_waste=0.001

Where the pieces are: this module is the way in (:func:`fit_to_data`, :class:`FitResult`);
:mod:`dataorder.diffusion.buckets.fitted_rule` is the fitted rule a calculator runs
(:class:`FittedBucketRule`, :class:`ThresholdAssigner`, re-exported here);
:mod:`dataorder.diffusion.fit.candidates` lists the candidate buckets and checks the input;
:mod:`dataorder.diffusion.fit.bins` bins the images' aspect ratios exactly (NOTE [ exact bins ]);
:mod:`dataorder.diffusion.fit.programme` chooses the buckets and the thresholds (NOTE [ waste
telescopes ], NOTE [ dynamic G ]).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_int, fail
from dataorder.core.partition import MAX_BATCH_SIZE, plan_segments
from dataorder.diffusion.buckets.cost import CostModel
from dataorder.diffusion.buckets.fitted_rule import FIT_VERSION, FittedBucketRule, ThresholdAssigner
from dataorder.diffusion.buckets.lookup import as_size_arrays
from dataorder.diffusion.buckets.rules import BucketRule
from dataorder.diffusion.fit.bins import IntArray, ratio_range
from dataorder.diffusion.fit.candidates import (
    DEFAULT_MAX_CANDIDATES,
    DEFAULT_MIN_SHARE,
    candidate_pool,
    check_fit_budget,
    check_share,
    check_sizes,
    lattice_candidates,
    prune_candidates,
    size_digest,
    thin_candidates,
)
from dataorder.diffusion.fit.programme import (
    candidate_batch_sizes,
    check_global_batch_size,
    check_least_waste,
    choose_buckets,
    waste_budget,
)

__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "DEFAULT_MIN_SHARE",
    "FIT_VERSION",
    "MAX_WASTE",
    "CalculatorClass",
    "FitResult",
    "FittedBucketRule",
    "ThresholdAssigner",
    "fit_to_data",
    "fitted_calculator",
    "fitted_from_config",
    "lattice_candidates",
    "size_digest",
]

#: Largest ``max_waste``: 2**31, the largest global batch size, as a share of ``N``. Padding
#: wastes less than ``G`` per bucket and there are at most ``N`` buckets, so no larger share binds.
MAX_WASTE = float(MAX_BATCH_SIZE)

C_co = TypeVar("C_co", covariant=True)
C = TypeVar("C")


class CalculatorClass(Protocol[C_co]):
    """What the fit needs of the calculator class it builds a fitted set into: its constructor
    over a rule, and ``from_config``. ``MultiTierBucketCalculator`` is one, and passes itself
    from its ``fit_to_data``; the fit never imports it (NOTE [ diffusion layers ] in
    :mod:`dataorder.diffusion`)."""

    def __call__(
        self,
        quantization: int = ...,
        max_pixels: int | None = ...,
        debug_mode: bool = ...,
        *,
        rule: BucketRule | None = ...,
        max_batch_size: int | None = ...,
        cost_model: CostModel | None = ...,
        patch_side: int | None = ...,
    ) -> C_co:
        """A calculator over ``rule`` with this budget, lattice and batch-size options."""
        ...

    def from_config(self, config: Mapping[str, Any]) -> C_co:
        """A calculator rebuilt from its ``config()``."""
        ...


# -- the fit ------------------------------------------------------------------------------------


def fit_to_data(
    widths: npt.ArrayLike,
    heights: npt.ArrayLike,
    *,
    global_batch_size: int | Callable[[int, int], int],
    max_waste: float = 0.01,
    max_pixels: int | None = None,
    quantization: int = 64,
    drop_last: bool = True,
    keep_every_image: bool = True,
    min_share: float = DEFAULT_MIN_SHARE,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    include_presets: bool = True,
    candidates: npt.ArrayLike | None = None,
    calculator: CalculatorClass[Any] | None = None,
) -> FitResult:
    """The bucket set and thresholds of least mean crop loss whose lock-step waste fits.

    Minimises the mean over all ``N`` images of ``1 - min(r / s, s / r)`` subject to
    ``sum_k waste(n_k) <= max_waste * N``, with ``waste(n) = n mod G`` (``drop_last``) or
    ``(-n) mod G``, over every chain of candidates in ascending aspect ratio and every choice of
    thresholds on the bin boundaries (NOTE [ exact bins ]) such that each image goes to one of
    the two chosen buckets that bracket its ratio. The nearest-bucket assignment of any subset
    of the candidates is such a choice, so the fit is never worse than any of them that meets
    the budget: the presets in particular, whose buckets are always candidates. Ties: the least
    crop (in fixed point, ``2**-(52 - N.bit_length())`` per image), then the least waste. Exact
    for one ``G``; with a ``G`` per bucket see NOTE [ dynamic G ].

    ``drop_last=False`` here pads each bucket to whole global batches (tail ``"pad"``). The
    bucket sampler's ``drop_last=False`` shrinks the last batch instead and pads ``(-n) mod R``
    per bucket (``R`` ranks): fit that with ``global_batch_size=R, drop_last=False``.

    Args:
        widths: Integer array of image widths (``N`` images, any shape).
        heights: Integer array of image heights, the same shape.
        global_batch_size: ``G`` = per-rank batch x data-parallel ranks, at most ``2**31``, or
            a callable ``(w, h) -> G`` that gives each candidate bucket its own.
        max_waste: Budget for dropped (or padded) samples as a share of ``N`` (padding can
            exceed ``N`` when ``G > N``), compared as ``waste / N <= max_waste`` in floats; in
            ``[0, 2**31]`` (:data:`MAX_WASTE`: padding is below ``G`` per bucket, so no larger
            share could bind).
        max_pixels: Pixel budget of every bucket; None means 65,536, as in the calculator.
        quantization: Both sides of every bucket are multiples of this.
        drop_last: Drop remainders (else pad each bucket's last global batch).
        keep_every_image: With ``drop_last``, only allow buckets of at least ``G`` images. A
            smaller bucket is dropped whole every epoch, so its images would never be trained
            while counting as perfectly cropped: without this rule the fit spends its waste
            budget on exiling the hardest images. No effect when padding. (If no bucket can
            fill a global batch, the fit is one bucket and ``method`` says so.)
        min_share: Least share of ``max_pixels`` a generated candidate uses
            (:func:`lattice_candidates`).
        max_candidates: Generated candidates searched at most, spread evenly in log aspect
            ratio over the data's range. The presets' buckets and ``candidates`` are always
            searched on top. Time and memory grow with the square of the candidates.
        include_presets: Add the buckets of ``MultiTierBucketCalculator(quantization,
            max_pixels)`` and of its ``compat="nemo"`` twin to the candidates.
        candidates: ``(M, 2)`` int ``(w, h)`` lattice points to choose from instead of the
            generated ones.
        calculator: The calculator class :meth:`FitResult.calculator` builds the fitted set
            into (``MultiTierBucketCalculator``, which its ``fit_to_data`` passes); None for a
            result without a calculator (the fit itself never needs one).

    Returns:
        A :class:`FitResult`.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If an argument is out of range, or no bucket set meets ``max_waste``: the
            message then gives the least waste any bucket set achieves.
    """
    w, h = check_sizes(widths, heights)
    n_img = int(w.size)
    if n_img == 0:
        fail("widths", "a non-empty array", widths)
    fixed_g = None if callable(global_batch_size) else global_batch_size
    if fixed_g is not None:
        fixed_g = check_global_batch_size("global_batch_size", fixed_g)
    # Padding wastes less than G <= 2**31 per bucket, and there are at most N buckets: a share
    # above MAX_WASTE never binds, and the range keeps the waste budget's arithmetic exact.
    share = check_share("max_waste", max_waste, low=0.0, high=MAX_WASTE, open_low=False)
    budget, q = check_fit_budget(max_pixels, quantization)
    drop = check_bool("drop_last", drop_last)
    keep_all = check_bool("keep_every_image", keep_every_image)
    with_presets = check_bool("include_presets", include_presets)
    limit = check_int("max_candidates", max_candidates, min_value=2)
    min_share = check_share("min_share", min_share, low=0.0, high=1.0, open_low=True)
    w_max = waste_budget(share, n_img)
    if fixed_g is not None:
        check_least_waste(n_img, fixed_g, drop, w_max, max_waste)

    pool, given, always = candidate_pool(
        budget, q, min_share=min_share, include_presets=with_presets, candidates=candidates
    )
    x_lo, x_hi = ratio_range(w, h)
    gs_pool = candidate_batch_sizes(global_batch_size, [(int(a), int(b)) for a, b in pool.tolist()])
    kept, at_ends = prune_candidates(pool, gs_pool, x_lo, x_hi)
    required = at_ends | np.array([Fraction(int(a), int(b)) in always for a, b in pool[kept]])
    kept = kept[thin_candidates(pool[kept], required, limit)]
    cands = [(int(a), int(b)) for a, b in pool[kept].tolist()]
    chosen = choose_buckets(
        w, h, cands, gs_pool[kept], drop, w_max, max_waste, x_lo, x_hi, keep_all
    )

    res = np.array([cands[c] for c in chosen.buckets], dtype=np.int64).reshape(-1, 2)
    gs = gs_pool[kept][chosen.buckets]
    plan = plan_segments(chosen.counts, per_rank=gs, dp_size=1, tail="drop" if drop else "pad")
    covered = plan.total_positions()
    waste = np.abs(chosen.counts - covered)
    summary: dict[str, Any] = {
        "version": FIT_VERSION,
        "num_images": n_img,
        "size_digest": size_digest(w, h),
        "global_batch_size": fixed_g if fixed_g is not None else gs.tolist(),
        "max_waste": share,
        "drop_last": drop,
        "keep_every_image": keep_all,
        "min_share": min_share,
        "max_candidates": limit,
        "include_presets": with_presets,
        "candidates": None if candidates is None else [list(p) for p in given],
    }
    return FitResult(
        resolutions=res,
        thresholds=chosen.thresholds,
        counts=chosen.counts,
        global_batch_sizes=gs,
        waste_per_bucket=waste,
        waste=int(waste.sum()),
        num_images=n_img,
        max_waste=share,
        drop_last=drop,
        mean_crop_loss=chosen.mean_crop_loss,
        max_pixels=budget,
        quantization=q,
        num_candidates=len(cands),
        num_bins=chosen.num_bins,
        method=chosen.method,
        exact=chosen.exact,
        summary=summary,
        objective=chosen.objective,
        calculator_class=calculator,
    )


def fitted_calculator(
    widths: npt.ArrayLike,
    heights: npt.ArrayLike,
    *,
    calculator: CalculatorClass[C],
    global_batch_size: int | Callable[[int, int], int],
    max_waste: float = 0.01,
    max_pixels: int | None = None,
    quantization: int = 64,
    drop_last: bool = True,
    keep_every_image: bool = True,
    min_share: float = DEFAULT_MIN_SHARE,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    include_presets: bool = True,
    candidates: npt.ArrayLike | None = None,
    max_batch_size: int | None = None,
    debug_mode: bool = False,
    cost_model: CostModel | None = None,
    patch_side: int | None = None,
) -> C:
    """:func:`fit_to_data`, as a calculator over the fitted set (``compat="fitted"``): what
    ``MultiTierBucketCalculator.fit_to_data`` returns (it passes itself as ``calculator``).

    The arguments are those of :func:`fit_to_data`, and four of the calculator's:

    Args:
        widths: Image widths.
        heights: Image heights.
        calculator: The calculator class to build (``MultiTierBucketCalculator``).
        global_batch_size: ``G``, or a callable ``(w, h) -> G``.
        max_waste: Budget for dropped (or padded) samples, as a share of ``N``.
        max_pixels: The pixel budget (None: 65,536).
        quantization: The lattice step.
        drop_last: Drop remainders (else pad whole global batches).
        keep_every_image: With ``drop_last``, every bucket fills a global batch.
        min_share: Least share of the budget a generated candidate uses.
        max_candidates: Generated candidates searched at most.
        include_presets: Search the presets' buckets too.
        candidates: Lattice points to choose from instead of the generated ones.
        max_batch_size: The calculator's dynamic-batch clamp (None: ``4 * base``).
        debug_mode: Log the bucket table at INFO level.
        cost_model: Batch sizes from a cost model over image tokens (None: from pixels).
        patch_side: Pixel side of one token for ``cost_model`` (None: 16).

    Raises:
        TypeError: For an argument of the wrong type.
        ValueError: As :func:`fit_to_data`, e.g. when no bucket set meets ``max_waste``.
    """
    fit = fit_to_data(
        widths,
        heights,
        global_batch_size=global_batch_size,
        max_waste=max_waste,
        max_pixels=max_pixels,
        quantization=quantization,
        drop_last=drop_last,
        keep_every_image=keep_every_image,
        min_share=min_share,
        max_candidates=max_candidates,
        include_presets=include_presets,
        candidates=candidates,
        calculator=calculator,
    )
    built: C = fit.calculator(
        max_batch_size=max_batch_size,
        debug_mode=debug_mode,
        cost_model=cost_model,
        patch_side=patch_side,
    )
    return built


# -- the result ---------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FitResult:
    """A fitted bucket set and what it does to the data it was fitted on.

    Attributes:
        resolutions: ``(K, 2)`` int64 ``(w, h)`` of the buckets, ascending aspect ratio.
        thresholds: ``K - 1`` exact ``(p, q)``; bucket ``k`` holds the images above threshold
            ``k - 1`` and not above threshold ``k`` (:class:`ThresholdAssigner`).
        counts: ``(K,)`` images per bucket.
        global_batch_sizes: ``(K,)`` global batch size ``G`` of each bucket.
        waste_per_bucket: ``(K,)`` images dropped (``drop_last``) or slots padded by whole
            global batches, as :func:`~dataorder.core.partition.plan_segments` cuts them.
        waste: Their total.
        num_images: ``N``.
        max_waste: The budget the fit met, as a share of ``N``.
        drop_last: Whether remainders are dropped (else padded).
        mean_crop_loss: Mean crop loss over all ``N`` images, the minimised objective (summed
            per bin in fixed point; it matches the per-image mean to 1e-9).
        max_pixels: The pixel budget.
        quantization: The lattice step of the bucket sides.
        num_candidates: Candidate buckets searched.
        num_bins: Non-empty bins the thresholds were chosen from.
        method: ``"nearest"`` if the nearest-bucket rule over all candidates (the least crop
            there is) already met the budget; ``"dp"`` for the exact programme; ``"lagrangian"``
            with per-bucket batch sizes (NOTE [ dynamic G ]); ``"nothing trainable"`` if with
            ``keep_every_image`` no bucket can fill a global batch (one bucket, all dropped).
        exact: Whether the result is the proven optimum (False only for ``"lagrangian"``).
        summary: What the set was fitted to, as the calculator's ``config()["fit"]`` records it:
            ``version``, ``num_images``, ``size_digest`` (:func:`size_digest`),
            ``global_batch_size`` (an int, or the list of the buckets' ``G`` when a callable
            gave them), ``max_waste``, ``drop_last``, ``keep_every_image``, ``min_share``,
            ``max_candidates``, ``include_presets``, ``candidates`` (None or the given list).
        calculator_class: What :meth:`calculator` builds (``fit_to_data(..., calculator=)``), or
            None.
    """

    resolutions: IntArray
    thresholds: tuple[tuple[int, int], ...]
    counts: IntArray
    global_batch_sizes: IntArray
    waste_per_bucket: IntArray
    waste: int
    num_images: int
    max_waste: float
    drop_last: bool
    mean_crop_loss: float
    max_pixels: int
    quantization: int
    num_candidates: int
    num_bins: int
    method: str
    exact: bool
    summary: dict[str, Any]
    objective: int = field(repr=False)  # the minimised fixed-point crop, for exact comparisons
    calculator_class: CalculatorClass[Any] | None = field(default=None, repr=False)

    @property
    def waste_share(self) -> float:
        """``waste / num_images``."""
        return self.waste / self.num_images

    @property
    def num_buckets(self) -> int:
        """``K``."""
        return int(self.resolutions.shape[0])

    @functools.cached_property
    def rule(self) -> FittedBucketRule:
        """The fitted set as a bucket rule."""
        return FittedBucketRule(self.resolutions, self.thresholds, self.summary)

    def assign(self, widths: npt.ArrayLike, heights: npt.ArrayLike) -> IntArray:
        """Bucket index of each image (the shape of ``widths``)."""
        w, h = as_size_arrays(widths=widths, heights=heights)
        res = [(int(a), int(b)) for a, b in self.resolutions.tolist()]
        assigner = self.rule.assigner(res, self.quantization)
        return assigner.assign(w.ravel(), h.ravel()).reshape(w.shape)

    def calculator(
        self,
        *,
        max_batch_size: int | None = None,
        debug_mode: bool = False,
        cost_model: CostModel | None = None,
        patch_side: int | None = None,
    ) -> Any:
        """The calculator over the fitted set, of :attr:`calculator_class`
        (:class:`~dataorder.diffusion.calculators.image.MultiTierBucketCalculator`):
        ``MultiTierBucketCalculator(quantization, max_pixels, rule=self.rule, ...)``
        (``compat="fitted"``); its ``config()`` rebuilds it through ``from_config``.

        Args:
            max_batch_size: Upper clamp of its dynamic batch size (None: ``4 * base``).
            debug_mode: Log its bucket table at INFO level.
            cost_model: Its batch sizes from a cost model instead of pixels (see the calculator).
            patch_side: Pixel side of one token for ``cost_model`` (None: 16).

        Raises:
            TypeError: If the fit was given no calculator class (``fit_to_data(...,
                calculator=MultiTierBucketCalculator)`` gives one).
        """
        if self.calculator_class is None:
            fail(
                "calculator",
                "a calculator class given to fit_to_data to build one from the fit "
                "(fit_to_data(..., calculator=MultiTierBucketCalculator), or "
                "MultiTierBucketCalculator.fit_to_data)",
                None,
                TypeError,
            )
        return self.calculator_class(
            self.quantization,
            self.max_pixels,
            debug_mode,
            rule=self.rule,
            max_batch_size=max_batch_size,
            cost_model=cost_model,
            patch_side=patch_side,
        )


def fitted_from_config(config: Mapping[str, Any], calculator: CalculatorClass[C]) -> C:
    """Rebuild a fitted calculator from its ``config()`` (``compat="fitted"``), without fitting:
    ``calculator.from_config`` (``MultiTierBucketCalculator.from_config``), for fitted
    configurations only.

    Raises:
        TypeError: If ``config`` is not a mapping.
        ValueError: If it is not a fitted configuration, keys are missing or unknown, a version
            differs, or the buckets or thresholds are invalid.
    """
    if not isinstance(config, Mapping):
        fail("config", "a mapping", config, TypeError)
    if config.get("compat") != FittedBucketRule.name:
        fail("config['compat']", repr(FittedBucketRule.name), config.get("compat"))
    return calculator.from_config(config)
