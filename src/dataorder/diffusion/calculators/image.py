"""Resolution buckets under a pixel budget, and which bucket each image goes to.

A *bucket* is one training resolution ``(w, h)``: both sides are multiples of ``quantization`` and
``w * h <= max_pixels``. Each image is resized to cover its bucket and cropped to it (see
:mod:`dataorder.diffusion.buckets.crop`), so the share of the image's area that is cut away, its
*crop loss*, is ``1 - min(r_img / r_bkt, r_bkt / r_img)`` with ``r = w / h``. Buckets are dicts
``{"id", "resolution": (w, h), "aspect_ratio": w / h, "pixels": w * h}``, with ids ``0..K-1`` in
ascending aspect ratio (tallest first).

Which buckets exist and which bucket an image goes to is the calculator's bucket rule, chosen
once at construction: ``compat="default"``, ``"nemo"`` or a rule given with ``rule=``, such as a
set fitted to data (NOTE [ Bucket rules ] in :mod:`dataorder.diffusion.buckets.rules`).
``max_pixels=None`` means 65,536 (256 x 256) for every rule, as in NeMo.

Example:
    >>> from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
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

import json
import logging
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import as_field, check_bool, check_choice, check_int, fail
from dataorder.diffusion.buckets.cost import (
    DEFAULT_MAX_BATCH_FACTOR,
    CostModel,
    cost_model_from_field,
)
from dataorder.diffusion.buckets.crop import CropResult, require_pillow, resize_and_crop
from dataorder.diffusion.buckets.fitted_rule import FittedBucketRule
from dataorder.diffusion.buckets.lattice import DEFAULT_ASPECT_RATIOS, AspectRatio
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE, as_size_arrays
from dataorder.diffusion.buckets.nemo_rule import NEMO_ASPECT_RATIOS, NemoBucketRule
from dataorder.diffusion.buckets.rules import (
    COMPATS,
    DEFAULT_MAX_PIXELS,
    MAX_PIXELS,
    MAX_QUANTIZATION,
    RULES,
    Assigner,
    BucketRule,
    CostModelBatchSizes,
    DefaultBucketRule,
    check_budget,
)
from dataorder.diffusion.fit.images import fitted_calculator

__all__ = [
    "BUCKETS_VERSION",
    "COMPATS",
    "DEFAULT_ASPECT_RATIOS",
    "DEFAULT_MAX_BATCH_FACTOR",
    "DEFAULT_MAX_PIXELS",
    "MAX_IMAGE_SIDE",
    "MAX_PIXELS",
    "MAX_QUANTIZATION",
    "NEMO_ASPECT_RATIOS",
    "PRESETS",
    "AspectRatio",
    "Bucket",
    "BucketRule",
    "DefaultBucketRule",
    "MultiTierBucketCalculator",
]

logger = logging.getLogger(__name__)

#: Bumped whenever bucket generation or assignment changes; it is part of
#: :meth:`MultiTierBucketCalculator.config`, so a manifest written under another rule is refused.
BUCKETS_VERSION = 1

#: Pixel budgets of the named presets (budgets, not sides).
PRESETS: Mapping[str, int] = MappingProxyType({f"{s}p": s * s for s in (256, 512, 768, 1024, 1536)})

Bucket = dict[str, Any]

#: The keys a cost model adds to :meth:`MultiTierBucketCalculator.config` (both or neither).
_COST_KEYS = ("cost_model", "patch_side")


class MultiTierBucketCalculator:
    """Resolution buckets constrained by a pixel budget, and the bucket of every image.

    Construct with a budget, or with :meth:`from_preset`, or fit one to data with
    :meth:`fit_to_data`; rebuild from a saved :meth:`config` with :meth:`from_config`. Buckets
    are planned once at construction, by the bucket rule (NOTE [ Bucket rules ]); the methods
    only look them up.

    Args:
        quantization: Both sides of every bucket are multiples of this (64 for Flux/SDXL
            latents with patching; 8 or 16 for finer lattices), at most
            :data:`MAX_QUANTIZATION`; at most 256 when ``max_pixels`` is None.
        max_pixels: The pixel budget; no bucket has more pixels. None means 65,536. Must be at
            least ``quantization**2`` and at most :data:`MAX_PIXELS`.
        debug_mode: Log the bucket table at INFO level after construction.
        compat: ``"default"`` or ``"nemo"`` (NeMo Automodel 0.7.0's exact buckets and choices).
        aspect_ratios: Nominal aspect ratios of the default mode (floats ``w / h``, ``(w, h)``
            pairs or ``"W:H"`` strings); each also stands for its transpose. None means
            :data:`DEFAULT_ASPECT_RATIOS`. Not allowed with ``compat="nemo"``.
        max_batch_size: Upper clamp of :meth:`get_dynamic_batch_size`. None means
            ``4 * base_batch_size`` in the default mode and no clamp with ``compat="nemo"``.
        no_upscale: Only assign an image to buckets that fit inside it (default mode only).
        rule: A :class:`BucketRule` built beforehand, used instead of the one ``compat`` names
            (e.g. a :class:`~dataorder.diffusion.buckets.fitted_rule.FittedBucketRule`); ``compat``,
            ``aspect_ratios`` and ``no_upscale`` are then the rule's and must be left unset.
            Its ``name`` is the calculator's :attr:`compat`.
        cost_model: Batch sizes from a :class:`~dataorder.diffusion.buckets.cost.CostModel` over
            image tokens (NOTE [ Cost-model batch sizes ]) instead of the rule's; not with
            ``compat="nemo"``. ``CostModel()`` gives the default rule's batch sizes whenever the
            sides are multiples of ``patch_side``.
        patch_side: Pixel side of one token for ``cost_model`` (VAE factor x patch); None means
            16 (SD3, Flux). Only with a ``cost_model``.

    Raises:
        TypeError: If an argument has the wrong type (including a bool where an int is meant).
        ValueError: If a value is out of range, e.g. ``quantization=0`` or
            ``max_pixels < quantization**2``, or options conflict.

    Example:
        >>> calc = MultiTierBucketCalculator(64, 512 * 512, no_upscale=True)
        >>> len(calc), calc.get_bucket_for_image(4000, 3000)["resolution"]
        (15, (576, 448))
        >>> calc.get_bucket_for_image(600, 440)["resolution"]  # 576x448 would upscale 440 -> 448
        (576, 384)
        >>> calc.get_bucket_for_image(520, 390)["resolution"]  # nothing fits: nearest, upscaled
        (576, 448)
        >>> rule = DefaultBucketRule(["1:1", "2:1"], no_upscale=False)
        >>> MultiTierBucketCalculator(64, 512 * 512, rule=rule).resolutions.tolist()
        [[320, 640], [512, 512], [640, 320]]
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
        rule: BucketRule | None = None,
        cost_model: CostModel | None = None,
        patch_side: int | None = None,
    ) -> None:
        q, budget = check_budget(quantization, max_pixels)
        self._debug = check_bool("debug_mode", debug_mode)
        if rule is None:
            compat = check_choice("compat", compat, COMPATS)
        self._max_batch_size = (
            None
            if max_batch_size is None
            else check_int("max_batch_size", max_batch_size, min_value=1)
        )
        no_upscale = check_bool("no_upscale", no_upscale)
        if rule is None:  # NOTE [ Bucket rules ]: chosen once, here
            rule = RULES[compat](aspect_ratios, no_upscale)
        else:
            _check_rule(rule, compat, aspect_ratios, no_upscale)
        self._rule: BucketRule = rule
        self._compat = rule.name
        # a cost model replaces only the rule's batch sizes (NOTE [ Bucket rules ])
        self._cost = _cost_batch_sizes(cost_model, patch_side, rule)
        self._batch_sizes: CostModelBatchSizes | BucketRule = self._cost or rule
        resolutions = self._rule.resolutions(budget, q)
        if not resolutions:  # not reachable for budget >= q**2; kept as a guard, not a check
            raise ValueError(f"no bucket fits max_pixels={budget} at quantization={q}")
        self._q = q
        self._budget = budget
        self._resolutions: tuple[tuple[int, int], ...] = tuple(resolutions)
        self._assigner: Assigner = self._rule.assigner(self._resolutions, q)
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
            quantization: As in the constructor; at most the preset's side (256 for ``'256p'``),
                so that one bucket fits its budget.
            **kwargs: Any other keyword argument of the constructor except ``max_pixels``.

        Raises:
            ValueError: For an unknown preset, or a quantization too coarse for it.
        """
        if not isinstance(preset, str) or preset not in PRESETS:
            names = ", ".join(repr(p) for p in PRESETS)
            # NeMo's wording first: code written for NeMo matches on "Unknown preset"
            raise ValueError(
                f"Unknown preset {preset!r}. Available: {list(PRESETS)} (preset must be one of "
                f"{names}; got preset={preset!r})"
            )
        if "max_pixels" in kwargs:
            raise TypeError("from_preset() sets max_pixels from the preset; do not pass it")
        q = check_int("quantization", quantization, min_value=1, max_value=MAX_QUANTIZATION)
        side = math.isqrt(PRESETS[preset])
        if q > side:  # the constructor would name max_pixels, which the caller did not pass
            fail(
                "quantization",
                f"at most {side} for preset {preset!r} (one quantization x quantization bucket "
                f"within its {PRESETS[preset]} pixels)",
                quantization,
            )
        return cls(quantization, PRESETS[preset], **kwargs)

    @classmethod
    def fit_to_data(
        cls,
        widths: npt.ArrayLike,
        heights: npt.ArrayLike,
        *,
        global_batch_size: int | Callable[[int, int], int],
        max_waste: float = 0.01,
        **kwargs: Any,
    ) -> MultiTierBucketCalculator:
        """A calculator over a bucket set fitted to these image sizes (``compat="fitted"``).

        The least mean crop loss with at most ``max_waste`` of the samples dropped (or padded)
        by whole global batches of ``global_batch_size`` per bucket; its :meth:`config` records
        the fitted set, so :meth:`from_config` rebuilds it without the data. The arguments are
        those of :func:`dataorder.diffusion.fit.images.fitted_calculator` (``max_pixels``,
        ``quantization``, ``drop_last``, ``max_batch_size``, ``cost_model``, ...), which builds
        the fitted set into this class.

        Raises:
            ValueError: If no bucket set meets ``max_waste`` (the message gives the least
                achievable waste), or an argument is out of range.
        """
        return fitted_calculator(
            widths,
            heights,
            calculator=cls,
            global_batch_size=global_batch_size,
            max_waste=max_waste,
            **kwargs,
        )

    def config(self) -> dict[str, Any]:
        """Everything needed to rebuild this calculator, as a JSON-serialisable dict.

        Example:
            >>> MultiTierBucketCalculator(64, compat="nemo").config()
            {'version': 1, 'compat': 'nemo', 'quantization': 64, 'max_pixels': 65536, \
'aspect_ratios': None, 'max_batch_size': None, 'no_upscale': False}
        """
        rule = dict(self._rule.config())
        config = {
            "version": BUCKETS_VERSION,
            "compat": self._compat,
            "quantization": self._q,
            "max_pixels": self._budget,
            "aspect_ratios": rule.pop("aspect_ratios"),
            "max_batch_size": self._max_batch_size,
            "no_upscale": rule.pop("no_upscale"),
            **rule,  # the rule's own keys: a fitted set's buckets and thresholds
        }
        if self._cost is not None:  # only then: configs without a cost model are unchanged
            config.update(self._cost.config())
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> MultiTierBucketCalculator:
        """Rebuild a calculator from :meth:`config` (e.g. a manifest's ``calculator`` field).

        A fitted set is rebuilt from the buckets and thresholds its config records, without the data
        (:meth:`~dataorder.diffusion.buckets.fitted_rule.FittedBucketRule.from_config`).

        Raises:
            TypeError: If ``config`` is not a mapping, or a field has the wrong type.
            ValueError: If keys are missing or unknown, the config was written by another
                bucket algorithm version, or a field is out of range. A field's error names it
                as the constructor's would name the argument, e.g. ``config['resolutions'][0]``.
        """
        if not isinstance(config, Mapping):
            fail("config", "a mapping", config, TypeError)
        try:  # the constructor and the rule check every field; their messages then name them
            return cls._from_config(config)
        except (TypeError, ValueError) as error:
            fields = {k: f"config[{k!r}]" for k in config if isinstance(k, str)}
            raise as_field(error, fields) from None

    @classmethod
    def _from_config(cls, config: Mapping[str, Any]) -> MultiTierBucketCalculator:
        if config.get("compat") == "fitted":  # NOTE [ Bucket rules ]: the one given rule
            options = _options(config, FittedBucketRule.CONFIG_KEYS)
            rule = FittedBucketRule.from_config(
                {k: config[k] for k in FittedBucketRule.CONFIG_KEYS}
            )
            return cls(config["quantization"], config["max_pixels"], rule=rule, **options)
        options = _options(config, ())
        return cls(
            config["quantization"],
            config["max_pixels"],
            compat=config["compat"],
            aspect_ratios=config["aspect_ratios"],
            no_upscale=config["no_upscale"],
            **options,
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
        """The bucket rule's name: ``"default"``, ``"nemo"`` or ``"fitted"``."""
        return self._compat

    @property
    def rule(self) -> BucketRule:
        """The bucket rule (NOTE [ Bucket rules ])."""
        return self._rule

    @property
    def cost_model(self) -> CostModel | None:
        """The cost model of :meth:`get_dynamic_batch_size`, or None for the rule's batch sizes."""
        return None if self._cost is None else self._cost.cost_model

    @property
    def patch_side(self) -> int | None:
        """Pixel side of one token for the cost model (None without one)."""
        return None if self._cost is None else self._cost.patch_side

    @property
    def no_upscale(self) -> bool:
        """Whether images are only assigned to buckets that fit inside them."""
        return bool(self._rule.config()["no_upscale"])

    @property
    def max_batch_size(self) -> int | None:
        """The explicit dynamic-batch clamp, or None for the mode's default."""
        return self._max_batch_size

    @property
    def aspect_ratios(self) -> tuple[AspectRatio, ...]:
        """Nominal ratios of the default mode as validated (empty with other rules)."""
        ratios: tuple[AspectRatio, ...] = getattr(self._rule, "ratios", ())
        return ratios

    @property
    def resolutions(self) -> npt.NDArray[np.int64]:
        """Bucket ``(w, h)`` by id: a new int64 array of shape ``(num_buckets, 2)``."""
        return np.array(self._resolutions, dtype=np.int64).reshape(-1, 2)

    @property
    def num_buckets(self) -> int:
        """Number of buckets."""
        return len(self._resolutions)

    @property
    def buckets(self) -> list[Bucket]:
        """All buckets in id order (NeMo's attribute; the same as :meth:`get_all_buckets`)."""
        return self.get_all_buckets()

    @property
    def buckets_by_resolution(self) -> dict[tuple[int, int], Bucket]:
        """``(w, h) -> bucket`` for every bucket (NeMo's attribute; fresh dicts)."""
        return {b["resolution"]: b for b in self.get_all_buckets()}

    @property
    def debug_mode(self) -> bool:
        """Whether the bucket table was logged at construction (NeMo's attribute)."""
        return self._debug

    def __len__(self) -> int:
        return len(self._resolutions)

    def __repr__(self) -> str:
        return (
            f"MultiTierBucketCalculator(quantization={self._q}, max_pixels={self._budget}, "
            f"compat={self._compat!r}, no_upscale={self.no_upscale}, "
            f"max_batch_size={self._max_batch_size}, num_buckets={len(self)})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MultiTierBucketCalculator):
            return NotImplemented
        return self.config() == other.config()

    def __hash__(self) -> int:
        return hash(json.dumps(self.config(), sort_keys=True))

    @staticmethod
    def _bucket(i: int, resolution: tuple[int, int]) -> Bucket:
        w, h = resolution
        return {"id": i, "resolution": (w, h), "aspect_ratio": w / h, "pixels": w * h}

    def get_all_buckets(self) -> list[Bucket]:
        """All buckets in id order, as fresh dicts (editing them changes nothing here)."""
        return [self._bucket(i, r) for i, r in enumerate(self._resolutions)]

    def get_bucket_by_id(self, bucket_id: int) -> Bucket:
        """The bucket with this id (a copy).

        Raises:
            ValueError: If ``bucket_id`` is not in ``[0, num_buckets - 1]`` (no negative wrap).
        """
        i = check_int("bucket_id", bucket_id, min_value=0, max_value=len(self._resolutions) - 1)
        return self._bucket(i, self._resolutions[i])

    def get_bucket_by_resolution(self, width: int, height: int) -> Bucket | None:
        """The bucket of exactly ``width x height`` (a copy), or None."""
        key = (check_int("width", width, min_value=1), check_int("height", height, min_value=1))
        if key not in self._resolutions:
            return None
        return self.get_bucket_by_id(self._resolutions.index(key))

    def summary(self) -> str:
        """A text table of the buckets (what ``debug_mode`` logs)."""
        lines = [
            f"{len(self)} buckets, max_pixels={self._budget}, quantization={self._q}, "
            f"compat={self._compat!r}"
        ]
        for b in self.get_all_buckets():
            w, h = b["resolution"]
            lines.append(
                f"  {b['id']:3d}  {w:5d}x{h:<5d}  AR={b['aspect_ratio']:.3f}  "
                f"{b['pixels'] / self._budget:6.1%} of budget"
            )
        return "\n".join(lines)

    # -- assignment -------------------------------------------------------------------------

    def get_bucket_for_image(self, image_width: int, image_height: int) -> Bucket:
        """The bucket for one ``image_width x image_height`` image (a copy).

        This is the rule's reference assignment (NOTE [ Bucket rules ]); :meth:`assign` gives
        the same ids for arrays.

        Raises:
            TypeError: If a size is not an int (or is a bool).
            ValueError: If a size is not in ``[1, MAX_IMAGE_SIDE]``.
        """
        w = check_int("image_width", image_width, min_value=1, max_value=MAX_IMAGE_SIDE)
        h = check_int("image_height", image_height, min_value=1, max_value=MAX_IMAGE_SIDE)
        return self.get_bucket_by_id(self._assigner.choose(w, h))

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
        w, h = as_size_arrays(widths=widths, heights=heights)
        return self._assigner.assign(w.ravel(), h.ravel()).reshape(w.shape)

    # -- batch size and crop ----------------------------------------------------------------

    def get_dynamic_batch_size(
        self,
        resolution: Sequence[int],
        base_batch_size: int = 32,
        base_resolution: Sequence[int] = (512, 512),
    ) -> int:
        """Per-rank batch size for a bucket, inversely proportional to its pixel count.

        Default mode: ``floor(base_batch_size * bw * bh / (w * h))`` in exact integers, clamped to
        ``[1, max_batch_size]`` (``max_batch_size`` None means ``4 * base_batch_size``).
        ``compat="nemo"``: NeMo's ``max(1, int(base / ((w*h) / (bw*bh))))`` in floats, clamped above
        only if ``max_batch_size`` was given. With a ``cost_model``: the largest batch whose cost
        fits ``base_batch_size`` samples at ``base_resolution``, in image tokens
        (:meth:`~dataorder.diffusion.buckets.cost.CostModel.batch_size`), clamped as in default
        mode.

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
            >>> flops = MultiTierBucketCalculator(cost_model=CostModel.for_transformer(3072))
            >>> flops.get_dynamic_batch_size((1024, 1024)), flops.get_dynamic_batch_size((64, 64))
            (6, 128)
        """
        w, h = _pair("resolution", resolution)
        bw, bh = _pair("base_resolution", base_resolution)
        base = check_int("base_batch_size", base_batch_size, min_value=1)
        return self._batch_sizes.dynamic_batch_size(w, h, base, bw, bh, self._max_batch_size)

    def resize_and_crop(
        self,
        image: Any,
        target_width: int,
        target_height: int,
        crop_mode: str = "center",
        *,
        seed: int | None = None,
        rng: np.random.Generator | None = None,
    ) -> CropResult:
        """Resize ``image`` to cover the target, then crop it to exactly the target size.

        Delegates to :func:`dataorder.diffusion.buckets.crop.resize_and_crop` (see there for the
        modes).

        Returns:
            ``(image, (x, y))``, the shape NeMo's code really returns (its docs say a 3-tuple), as a
            :class:`~dataorder.diffusion.buckets.crop.CropResult` with ``.x`` and ``.y`` too, in
            every mode. The image is always exactly the target size and offsets are never negative.
            Default mode keeps the input's type; ``compat="nemo"`` returns a PIL image, as NeMo does
            (it passes any input through ``Image.fromarray``).
        """
        if self._compat == "nemo" and crop_mode == "random" and seed is None and rng is None:
            # NeMo draws from Python's global random; code written for it passes no seed
            warnings.warn(
                "resize_and_crop(crop_mode='random') without seed= or rng= under "
                "compat='nemo': the offsets come from an unseeded generator and are not "
                "reproducible (NeMo's are not either); pass seed= or rng= to fix them",
                stacklevel=2,
            )
            rng = np.random.default_rng()
        result = resize_and_crop(image, target_width, target_height, crop_mode, seed=seed, rng=rng)
        if self._compat == "nemo":
            pil = require_pillow("resize_and_crop")
            if not isinstance(result.image, pil.Image):
                return CropResult(pil.fromarray(result.image), result.offset)
        return result


def _pair(name: str, value: object) -> tuple[int, int]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != 2:
        fail(name, "a (width, height) pair of positive ints", value, TypeError)
    return (
        check_int(f"{name}[0]", value[0], min_value=1),
        check_int(f"{name}[1]", value[1], min_value=1),
    )


def _check_rule(rule: object, compat: str, aspect_ratios: object, no_upscale: bool) -> None:
    """A given rule carries its own options: the calculator's would be silently ignored."""
    if not isinstance(rule, BucketRule):
        fail("rule", "a BucketRule or None", rule, TypeError)
    if compat != "default" or aspect_ratios is not None or no_upscale:
        fail("rule", "None when compat, aspect_ratios or no_upscale is set (it has its own)", rule)
    named = RULES.get(rule.name)
    if named is not None and not isinstance(rule, named):  # from_config would rebuild a named one
        fail("rule", f"a {named.__name__} when its name is {rule.name!r}", rule)


def _cost_batch_sizes(
    cost_model: CostModel | None, patch_side: int | None, rule: BucketRule
) -> CostModelBatchSizes | None:
    if cost_model is None:
        if patch_side is not None:
            fail("patch_side", "None without a cost_model", patch_side)
        return None
    sizes = CostModelBatchSizes(cost_model, patch_side)
    if rule.name == NemoBucketRule.name:
        fail("cost_model", "None with compat='nemo' (NeMo's batch rule is fixed)", cost_model)
    return sizes


def _options(config: Mapping[str, Any], rule_keys: Sequence[str]) -> dict[str, Any]:
    """The constructor's options every rule shares, from a config with exactly the keys of
    :meth:`MultiTierBucketCalculator.config` (a rule's own ``rule_keys`` too)."""
    expected = {*MultiTierBucketCalculator(64).config(), *rule_keys}
    if any(key in config for key in _COST_KEYS):  # a cost model's keys come together
        expected.update(_COST_KEYS)
    missing, unknown = expected - set(config), set(config) - expected
    if missing or unknown:
        raise ValueError(
            f"config must have exactly the keys {sorted(expected)}; "
            f"missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    if config["version"] != BUCKETS_VERSION:
        fail("config['version']", f"{BUCKETS_VERSION}", config["version"])
    cost = config.get("cost_model")
    return {
        "max_batch_size": config["max_batch_size"],
        "cost_model": None if cost is None else cost_model_from_field(cost, "config['cost_model']"),
        "patch_side": config.get("patch_side"),
    }
