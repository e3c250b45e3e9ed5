"""Video buckets over (frames, height, width) under a latent-token budget, and each clip's bucket.

The video counterpart of :mod:`dataorder.diffusion.calculators.image`: a bucket is one training
shape ``(frames, w, h)``, and the spatial rule is the image rule
(:mod:`dataorder.diffusion.buckets.lattice`, :mod:`dataorder.diffusion.buckets.lookup`) applied once
per pixel budget.

**Tokens.** A clip of ``f`` frames becomes ``L(f) = 1 + (f - 1) // tc`` latent frames in a
causal VAE with temporal compression ``tc``, then ``ceil(L / pt)`` times the spatial tokens of
its frame (:mod:`dataorder.diffusion.buckets.video_budget` states the formula and implements
it). Every legal frame count satisfies ``(f - 1) % tc == 0``.

**Bucket set.** For each legal frame count ``f`` (an explicit list, or ``step * k + 1`` in
``[min_frames, max_frames]``: :func:`causal_frame_counts`), the per-frame pixel budget ``P(f)``
(:class:`~dataorder.diffusion.buckets.video_budget.TokenBudget`) keeps every bucket within
``max_tokens`` tokens and, with ``max_pixels``, stops short clips from being blown up to huge
frames. The spatial buckets of ``f`` are the image calculator's default set for ``P(f)`` on a
lattice of ``quantization`` (default ``lcm(sc * ph, sc * pw)``): per nominal aspect ratio the
lattice point that best trades aspect error against budget shortfall, mirrored, so each frame
count's set is transpose-symmetric by construction. Frame counts with the same ``P(f)`` share
one spatial set (a *tier*). Ids are frame-major: all buckets of the smallest frame count first,
each frame count's buckets in ascending aspect ratio, so within one frame count bucket ``base +
K - 1 - i`` is bucket ``base + i`` transposed.

**Assignment of a clip (W, H, F)**: trimmed in time to the largest legal frame count ``<= F``
(shorter: :data:`TOO_SHORT`), never upscaled in space beyond ``max_upscale`` (else
:data:`TOO_SMALL`: NOTE [ too small: drop, not upscale ]), then the nearest bucket in log aspect
ratio; :mod:`dataorder.diffusion.buckets.video_assign` states the rule in full.
:meth:`VideoBucketCalculator.get_bucket_id_for_video` is the reference in exact integers,
:meth:`~VideoBucketCalculator.assign` its vectorised equal.

**Batch sizes** come from a :class:`~dataorder.diffusion.buckets.cost.CostModel` (NOTE [ Cost-model
batch sizes ] in :mod:`dataorder.diffusion.buckets.cost`): :meth:`VideoBucketCalculator.batch_sizes`
gives every bucket the largest per-rank batch within the cost of the full-budget bucket.

**Fitted sets.** :meth:`VideoBucketCalculator.fit_to_data` fits the buckets to a dataset and a
job layout within these rules (NOTE [ video fit ] in :mod:`dataorder.diffusion.fit.video`); the
calculator then runs the fitted rule (:mod:`dataorder.diffusion.buckets.video_set`) after the
generated one's too short and too small, and its :meth:`~VideoBucketCalculator.config` records
the set (``bucket_set``).

Example:
    >>> from dataorder.diffusion.calculators.video import VideoBucketCalculator
    >>> calc = VideoBucketCalculator.from_preset("wan2.1-480p")
    >>> calc.max_tokens, calc.frame_counts[:3], calc.frame_counts[-1], len(calc)
    (32760, (1, 5, 9), 81, 693)
    >>> b = calc.get_bucket_for_video(1920, 1080, 250)  # 16:9, 250 frames: trimmed to 81
    >>> b["frames"], b["resolution"], b["tokens"]
    (81, (832, 480), 32760)
    >>> calc.assign([1920, 1080, 1920, 640, 320], [1080, 1920, 1080, 480, 180],
    ...             [250, 250, 3, 50, 81]).tolist()  # 3 frames: a still; 320x180 needs 2.6x
    [685, 667, 25, 416, -2]
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from numbers import Rational
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import as_field, check_int, check_optional_int, fail
from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.diffusion.buckets.cost import CostModel, cost_model_from_field, exact_rational
from dataorder.diffusion.buckets.lattice import AspectRatio, aspect_ratios_arg
from dataorder.diffusion.buckets.lookup import as_size_arrays
from dataorder.diffusion.buckets.rules import MAX_PIXELS
from dataorder.diffusion.buckets.video_assign import TOO_SHORT, TOO_SMALL, VideoAssigner
from dataorder.diffusion.buckets.video_budget import (
    MAX_TOKENS,
    TokenBudget,
    VideoBucket,
    generated_buckets,
)
from dataorder.diffusion.buckets.video_frames import (
    MAX_VIDEO_SIZE,
    causal_frame_counts,
    frame_counts_arg,
    resample_frame_counts,
    trim_loss,
)
from dataorder.diffusion.buckets.video_presets import PRESETS, VideoPreset, preset_settings
from dataorder.diffusion.buckets.video_set import FittedVideoAssigner, FittedVideoSet
from dataorder.diffusion.fit.video import fit_video_to_data

__all__ = [
    "DEFAULT_MAX_UPSCALE",
    "MAX_PIXELS",
    "MAX_TOKENS",
    "MAX_VIDEO_SIZE",
    "PRESETS",
    "TOO_SHORT",
    "TOO_SMALL",
    "VIDEO_BUCKETS_VERSION",
    "VideoBucket",
    "VideoBucketCalculator",
    "VideoPreset",
    "causal_frame_counts",
    "resample_frame_counts",
    "trim_loss",
]

#: Bumped whenever bucket generation or assignment changes; part of
#: :meth:`VideoBucketCalculator.config`, so a manifest written under another rule is refused.
VIDEO_BUCKETS_VERSION = 1

#: Default upscale limit (NOTE [ too small: drop, not upscale ]).
DEFAULT_MAX_UPSCALE = Fraction(3, 2)

#: ``VideoBucketCalculator.config()["kind"]``: tells a video calculator's config from an image one.
CONFIG_KIND = "video"


class VideoBucketCalculator:
    """Video buckets ``(frames, w, h)`` under a latent-token budget, and the bucket of every clip.

    See the module docstring for the rules. Build one directly, from a named setting
    (:meth:`from_preset`), or from a saved :meth:`config` (:meth:`from_config`). Buckets and
    lookup tables are built once at construction; the methods only read them.

    Args:
        max_tokens: The token budget: no bucket has more latent tokens. At most
            :data:`MAX_TOKENS`; without ``max_pixels`` it may not allow frames of more than
            :data:`MAX_PIXELS` (2**40) pixels.
        frame_counts: Legal frame counts, each ``tc * k + 1``. None means
            :func:`causal_frame_counts` of ``max_frames``, ``min_frames`` and ``frame_step``.
        max_frames: With ``frame_counts=None``: the largest frame count (required then).
        min_frames: With ``frame_counts=None``: the smallest (default 1: stills allowed).
        frame_step: With ``frame_counts=None``: the spacing (default ``temporal_compression``).
        spatial_compression: The VAE's spatial factor ``sc``.
        temporal_compression: The causal VAE's temporal factor ``tc``.
        patch_size: The transformer's patch ``(pt, ph, pw)``.
        max_pixels: Pixel cap per frame, at most :data:`MAX_PIXELS`; None means only the token
            budget limits.
        quantization: Side quantum of every bucket; None means ``lcm(sc * ph, sc * pw)``. Must
            be a multiple of that, or a bucket would not be a whole number of patches, and at
            most ``2**20`` (one bucket of ``quantization**2`` pixels within :data:`MAX_PIXELS`).
        aspect_ratios: Nominal ratios, as for the image calculator (floats, ``(w, h)`` pairs or
            ``"W:H"`` strings; each also stands for its transpose). None means
            :data:`~dataorder.diffusion.buckets.lattice.DEFAULT_ASPECT_RATIOS`.
        max_upscale: Largest cover-resize scale a clip may get, ``>= 1``: an int, a Fraction, a
            ``'p/q'`` string or a finite float (taken at its exact value, so 1.01 is a fraction
            over 2**52); any size, compared exactly; None means no limit.
        cost_model: What a sample costs, for :meth:`batch_sizes`; None means
            ``CostModel()`` (cost proportional to tokens).
        max_batch_size: Upper clamp of :meth:`batch_sizes`, at most ``2**31``; None means 4
            times the reference batch size.
        bucket_set: A :class:`~dataorder.diffusion.buckets.video_set.FittedVideoSet` (what
            :meth:`fit_to_data` fits) instead of the generated buckets: its frame counts must be
            legal under the frame rule above and its buckets on the lattice and within each
            frame count's budget; ``aspect_ratios`` then plays no part.

    Raises:
        TypeError: For an argument of the wrong type (a bool where an int is meant included).
        ValueError: For a value out of range, e.g. a frame count that is not ``tc * k + 1`` or a
            ``max_tokens`` too small to give a frame count one lattice cell.

    Example:
        >>> calc = VideoBucketCalculator(4096, max_frames=17, max_pixels=512 * 512,
        ...                              aspect_ratios=["1:1", "16:9"])
        >>> print(calc.summary())  # 17 frames: 5 latent frames, so 4096 // 5 * 256 px per frame
        15 buckets, max_tokens=4096, quantization=16, max_upscale=3/2
          frames     1  ids 0-2  <= 262144 px/frame  tokens 1008-1024
          frames     5  ids 3-5  <= 262144 px/frame  tokens 2016-2048
          frames     9  ids 6-8  <= 262144 px/frame  tokens 3024-3072
          frames    13  ids 9-11  <= 262144 px/frame  tokens 4032-4096
          frames    17  ids 12-14  <= 209664 px/frame  tokens 3920-3990
        >>> [(b["frames"], b["resolution"], b["tokens"]) for b in calc.get_all_buckets()][-3:]
        [(17, (336, 608), 3990), (17, (448, 448), 3920), (17, (608, 336), 3990)]
    """

    def __init__(
        self,
        max_tokens: int,
        *,
        frame_counts: Sequence[int] | None = None,
        max_frames: int | None = None,
        min_frames: int = 1,
        frame_step: int | None = None,
        spatial_compression: int = 8,
        temporal_compression: int = 4,
        patch_size: Sequence[int] = (1, 2, 2),
        max_pixels: int | None = None,
        quantization: int | None = None,
        aspect_ratios: Sequence[AspectRatio | str] | None = None,
        max_upscale: Rational | int | float | str | None = DEFAULT_MAX_UPSCALE,
        cost_model: CostModel | None = None,
        max_batch_size: int | None = None,
        bucket_set: FittedVideoSet | None = None,
    ) -> None:
        self._budget = TokenBudget.from_args(
            max_tokens,
            spatial_compression,
            temporal_compression,
            patch_size,
            max_pixels,
            quantization,
        )
        self._legal = frame_counts_arg(
            frame_counts, max_frames, min_frames, frame_step, self._budget.temporal_compression
        )

        self._ratios = aspect_ratios_arg(aspect_ratios)
        self._default_ratios = aspect_ratios is None

        self._u: Fraction | None = None
        if max_upscale is not None:
            self._u = exact_rational("max_upscale", max_upscale, allow_float=True)
            if self._u < 1:
                fail("max_upscale", "a number >= 1 or None", max_upscale)
        if cost_model is not None and not isinstance(cost_model, CostModel):
            fail("cost_model", "a CostModel or None", cost_model, TypeError)
        self._cost = CostModel() if cost_model is None else cost_model
        self._max_batch_size = check_optional_int("max_batch_size", max_batch_size, min_value=1)
        if self._max_batch_size is not None and self._max_batch_size > MAX_BATCH_SIZE:
            fail("max_batch_size", f"at most 2**31 = {MAX_BATCH_SIZE} or None", max_batch_size)
        if bucket_set is not None and not isinstance(bucket_set, FittedVideoSet):
            fail("bucket_set", "a FittedVideoSet or None", bucket_set, TypeError)
        self._set = bucket_set
        self._build()

    # -- construction -----------------------------------------------------------------------

    def _build(self) -> None:
        self._tiers, self._frame_tier, self._frame_base, buckets = generated_buckets(
            self._budget, self._legal, self._ratios, self._u
        )
        self._assigner = VideoAssigner(
            self._tiers, self._legal, self._frame_tier, self._frame_base, self._u
        )
        self._frames = self._legal
        self._fitted: FittedVideoAssigner | None = None
        if self._set is not None:  # the generated set still says what is too short or small
            self._frames = self._set.frame_counts
            self._budget.check_set(self._set, self._legal)
            buckets = []
            for f, w, h in self._set.buckets():
                bucket = self._budget.bucket(f, w, h)
                bucket["id"] = len(buckets)
                buckets.append(bucket)
            self._fitted = FittedVideoAssigner(self._set, self._u)
        self._buckets = buckets
        self._by_shape = {(b["frames"], *b["resolution"]): b["id"] for b in buckets}

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> VideoBucketCalculator:
        """A calculator of a named setting in :data:`PRESETS`; keyword arguments override it.

        ``frame_counts=`` replaces the preset's frame rule (its ``max_frames``); any other
        constructor argument replaces the preset's value.

        Raises:
            ValueError: For an unknown name.

        Example:
            >>> VideoBucketCalculator.from_preset("wan2.1-480p", max_frames=161).frame_counts[-1]
            161
            >>> print(PRESETS["ltx-video"].description)
            LTX-Video 0.9.x: 1216x704, 121 frames (8k+1) at 30 fps, VAE 8x32x32, patch 1: \
16 x 22 x 38 = 13,376 tokens
        """
        return cls(**preset_settings(name, overrides))

    @classmethod
    def fit_to_data(
        cls,
        widths: npt.ArrayLike,
        heights: npt.ArrayLike,
        frames: npt.ArrayLike,
        *,
        global_batch_size: int | Callable[[VideoBucket], int],
        max_waste: float = 0.01,
        drop_last: bool = True,
        preset: str | None = None,
        **settings: Any,
    ) -> VideoBucketCalculator:
        """A calculator over a bucket set fitted to these clips and this job layout.

        :func:`dataorder.diffusion.fit.video.fit_video_to_data` (NOTE [ video fit ] there):
        the frame counts, the spatial buckets per frame count and the thresholds between them
        of least mean loss of content (crop in space plus trim in time) such that at most
        ``max_waste`` of the clips that have a bucket are dropped (``drop_last``) or padded by
        whole global batches per bucket. The calculator's ``config()`` records the set
        (``bucket_set``), so :meth:`from_config` and a manifest rebuild it without the data.
        Clips the preset's own buckets call too short or too small keep those ids.

        Args:
            widths: Clip widths (any shape).
            heights: Clip heights, the same shape.
            frames: Clip frame counts, the same shape (at the model's rate if the pipeline
                resamples: :func:`resample_frame_counts`).
            global_batch_size: ``G`` = per-rank batch x ranks, or a callable of the bucket
                dict (``frames``, ``resolution``, ``tokens`` ...) giving each bucket its own:
                ``calc.global_batch_size(ranks, batch)`` for cost-model batches.
            max_waste: Budget for dropped (or padded) clips, a share in ``[0, 1)`` of the
                clips that have a bucket.
            drop_last: Drop each bucket's remainder (else pad its last global batch).
            preset: A name of :data:`PRESETS` whose token budget, VAE compression, patch, frame
                rule and ``max_upscale`` the set keeps; None: ``settings`` say them all.
            **settings: Constructor arguments, over the preset's.

        Raises:
            TypeError: For an argument of the wrong type, or an unknown setting.
            ValueError: For a value out of range or an unknown preset, or when no bucket set
                the fit searches meets ``max_waste``: the message gives the least waste it
                found.

        Example:
            >>> rng = np.random.default_rng(0)
            >>> h = rng.choice([720, 1080], 5_000)
            >>> w = np.where(rng.random(5_000) < 0.7, h * 16 // 9, h * 9 // 16)
            >>> f = rng.integers(17, 200, 5_000)
            >>> calc = VideoBucketCalculator.fit_to_data(
            ...     w, h, f, global_batch_size=64, preset="wan2.1-480p")
            >>> VideoBucketCalculator.from_config(calc.config()) == calc
            True
        """
        allowed = set(inspect.signature(cls).parameters) - {"bucket_set"}
        unknown = sorted(set(settings) - allowed)
        if unknown:
            fail(
                "settings",
                "keyword arguments of VideoBucketCalculator (" + ", ".join(sorted(allowed)) + ")",
                unknown,
                TypeError,
            )
        if preset is None and "max_tokens" not in settings:
            fail("max_tokens", "an int when preset is None", None, TypeError)
        base = cls(**(settings if preset is None else preset_settings(preset, settings, "preset")))
        fit = fit_video_to_data(
            widths,
            heights,
            frames,
            base,
            global_batch_size=global_batch_size,
            max_waste=max_waste,
            drop_last=drop_last,
        )
        built: VideoBucketCalculator = fit.calculator()  # of type(base), which is cls
        return built

    def config(self) -> dict[str, Any]:
        """Everything needed to rebuild this calculator, as a JSON-serialisable dict.

        ``kind`` is ``"video"``, which tells it apart from an image calculator's config in a
        manifest. Frame counts are always listed explicitly: the frame rule's legal counts
        (for a fitted set, its groups use some of them). A calculator over a fitted set adds
        ``bucket_set``, the set's :meth:`~dataorder.diffusion.buckets.video_set.FittedVideoSet.
        config` (groups and what they were fitted to), so it is rebuilt without the data.

        Example:
            >>> VideoBucketCalculator(4096, frame_counts=[1, 5], max_upscale="4/3").config()
            {'kind': 'video', 'version': 1, 'max_tokens': 4096, 'frame_counts': [1, 5], \
'spatial_compression': 8, 'temporal_compression': 4, 'patch_size': [1, 2, 2], \
'max_pixels': None, 'quantization': None, 'aspect_ratios': None, 'max_upscale': '4/3', \
'cost_model': {'token_cost': '1', 'attention_cost': '0'}, 'max_batch_size': None}
        """
        ratios = None
        if not self._default_ratios:
            ratios = [list(r) if isinstance(r, tuple) else r for r in self._ratios]
        return {
            "kind": CONFIG_KIND,
            "version": VIDEO_BUCKETS_VERSION,
            "max_tokens": self._budget.max_tokens,
            "frame_counts": list(self._legal),
            "spatial_compression": self._budget.spatial_compression,
            "temporal_compression": self._budget.temporal_compression,
            "patch_size": list(self._budget.patch_size),
            "max_pixels": self._budget.max_pixels,
            "quantization": self._budget.quantization_arg,
            "aspect_ratios": ratios,
            "max_upscale": None if self._u is None else str(self._u),
            "cost_model": self._cost.config(),
            "max_batch_size": self._max_batch_size,
            **({} if self._set is None else {"bucket_set": self._set.config()}),
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> VideoBucketCalculator:
        """Rebuild a calculator from :meth:`config` (e.g. a manifest's ``calculator`` field).

        Raises:
            TypeError: If ``config`` is not a mapping, or a field has the wrong type.
            ValueError: If keys are missing or unknown, ``kind`` is not ``"video"``, the config
                was written by another bucket algorithm version, a field is out of range, or its
                fitted set is invalid. A field's error names it as the constructor's would name
                the argument, e.g. ``config['frame_counts'][1]``.
        """
        if not isinstance(config, Mapping):
            fail("config", "a mapping", config, TypeError)
        expected = set(cls(64, frame_counts=[1], max_pixels=256).config())
        if "bucket_set" in config:  # a fitted set (the key is absent otherwise)
            expected.add("bucket_set")
        missing, unknown = expected - set(config), set(config) - expected
        if missing or unknown:
            raise ValueError(
                f"config must have exactly the keys {sorted(expected)}; "
                f"missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        if config["kind"] != CONFIG_KIND:
            fail("config['kind']", repr(CONFIG_KIND), config["kind"])
        if config["version"] != VIDEO_BUCKETS_VERSION:
            fail("config['version']", f"{VIDEO_BUCKETS_VERSION}", config["version"])
        kwargs = {k: v for k, v in config.items() if k not in ("kind", "version")}
        if isinstance(kwargs["patch_size"], list):
            kwargs["patch_size"] = tuple(kwargs["patch_size"])
        kwargs["cost_model"] = cost_model_from_field(kwargs["cost_model"], "config['cost_model']")
        try:  # the constructor checks every field; its messages then name them as fields
            if "bucket_set" in kwargs:
                kwargs["bucket_set"] = FittedVideoSet.from_config(kwargs["bucket_set"])
            return cls(**kwargs)
        except (TypeError, ValueError) as error:
            raise as_field(error, {k: f"config[{k!r}]" for k in kwargs}) from None

    # -- the bucket set ---------------------------------------------------------------------

    @property
    def max_tokens(self) -> int:
        """The token budget: no bucket has more tokens."""
        return self._budget.max_tokens

    @property
    def frame_counts(self) -> tuple[int, ...]:
        """The frame counts of the buckets, ascending: the legal frame counts, or a fitted
        set's (some of them)."""
        return self._frames

    @property
    def legal_frame_counts(self) -> tuple[int, ...]:
        """The frame rule's frame counts (``config()["frame_counts"]``), ascending."""
        return self._legal

    @property
    def bucket_set(self) -> FittedVideoSet | None:
        """The fitted set the buckets come from, or None for generated buckets."""
        return self._set

    def frame_budget(self, frames: int) -> int:
        """The pixel budget per frame of ``frames``, a legal frame count (module docstring).

        Raises:
            ValueError: If ``frames`` is not a legal frame count.

        Example:
            >>> VideoBucketCalculator(4096, max_frames=17).frame_budget(17)  # 5 latent frames
            209664
        """
        f = check_int("frames", frames, min_value=1, max_value=MAX_VIDEO_SIZE)
        if f not in self._legal:
            fail("frames", f"a legal frame count {list(self._legal)}", frames)
        return self._budget.frame(f)[0]

    def shape_info(self, width: int, height: int, frames: int) -> VideoBucket:
        """What a bucket of this shape would be (``id`` -1): frames, resolution, tokens and the
        rest of :meth:`get_all_buckets`' keys, for any legal frame count and size.

        Example:
            >>> VideoBucketCalculator.from_preset("wan2.1-480p").shape_info(640, 480, 41)["tokens"]
            13200
        """
        w = check_int("width", width, min_value=1, max_value=MAX_VIDEO_SIZE)
        h = check_int("height", height, min_value=1, max_value=MAX_VIDEO_SIZE)
        self.frame_budget(frames)
        return self._budget.bucket(frames, w, h)

    @property
    def spatial_compression(self) -> int:
        """The VAE's spatial factor."""
        return self._budget.spatial_compression

    @property
    def temporal_compression(self) -> int:
        """The causal VAE's temporal factor."""
        return self._budget.temporal_compression

    @property
    def patch_size(self) -> tuple[int, int, int]:
        """The transformer's ``(pt, ph, pw)``."""
        return self._budget.patch_size

    @property
    def max_pixels(self) -> int | None:
        """The per-frame pixel cap (None: only the token budget limits)."""
        return self._budget.max_pixels

    @property
    def quantization(self) -> int:
        """Side quantum of every bucket."""
        return self._budget.quantization

    @property
    def aspect_ratios(self) -> tuple[AspectRatio, ...]:
        """The nominal aspect ratios, as validated."""
        return self._ratios

    @property
    def max_upscale(self) -> Fraction | None:
        """The upscale limit (None: no limit)."""
        return self._u

    @property
    def cost_model(self) -> CostModel:
        """The cost model of :meth:`batch_sizes`."""
        return self._cost

    @property
    def max_batch_size(self) -> int | None:
        """The explicit batch-size clamp, or None for 4 times the reference batch size."""
        return self._max_batch_size

    @property
    def num_buckets(self) -> int:
        """Number of buckets."""
        return len(self._buckets)

    @property
    def resolutions(self) -> npt.NDArray[np.int64]:
        """Bucket ``(w, h)`` by id: a new int64 array of shape ``(num_buckets, 2)``."""
        return np.array([b["resolution"] for b in self._buckets], dtype=np.int64).reshape(-1, 2)

    @property
    def bucket_frames(self) -> npt.NDArray[np.int64]:
        """Frames of every bucket by id: a new int64 array of shape ``(num_buckets,)``."""
        return np.array([b["frames"] for b in self._buckets], dtype=np.int64)

    @property
    def tokens(self) -> npt.NDArray[np.int64]:
        """Tokens of every bucket by id: a new int64 array of shape ``(num_buckets,)``."""
        return np.array([b["tokens"] for b in self._buckets], dtype=np.int64)

    def __len__(self) -> int:
        return len(self._buckets)

    def __repr__(self) -> str:
        return (
            f"VideoBucketCalculator(max_tokens={self.max_tokens}, frames={self._frames[0]}.."
            f"{self._frames[-1]} ({len(self._frames)} counts), quantization={self.quantization}, "
            f"max_upscale={None if self._u is None else str(self._u)}, "
            f"tiers={len(self._tiers)}, num_buckets={len(self)}"
            + ("" if self._set is None else ", fitted")
            + ")"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VideoBucketCalculator):
            return NotImplemented
        return self.config() == other.config()

    def __hash__(self) -> int:
        return hash(json.dumps(self.config(), sort_keys=True))

    def get_all_buckets(self) -> list[VideoBucket]:
        """All buckets in id order as fresh dicts: ``id``, ``frames``, ``resolution`` ``(w, h)``,
        ``aspect_ratio``, ``pixels``, ``latent_frames``, ``tokens``."""
        return [dict(b) for b in self._buckets]

    def get_bucket_by_id(self, bucket_id: int) -> VideoBucket:
        """The bucket with this id (a copy).

        Raises:
            ValueError: If ``bucket_id`` is not in ``[0, num_buckets - 1]`` (no negative wrap).
        """
        i = check_int("bucket_id", bucket_id, min_value=0, max_value=len(self._buckets) - 1)
        return dict(self._buckets[i])

    def get_bucket_by_shape(self, width: int, height: int, frames: int) -> VideoBucket | None:
        """The bucket of exactly ``frames`` frames at ``width x height`` (a copy), or None."""
        w = check_int("width", width, min_value=1)
        h = check_int("height", height, min_value=1)
        f = check_int("frames", frames, min_value=1)
        i = self._by_shape.get((f, w, h))
        return None if i is None else dict(self._buckets[i])

    def global_batch_size(self, num_replicas: int, batch_size: int) -> Callable[[VideoBucket], int]:
        """``bucket -> num_replicas * b``, ``b`` the bucket's cost-model batch at ``batch_size``
        per rank for the full budget: a bucket's global batch as :meth:`batch_sizes` gives it,
        for any bucket dict (``fit_to_data``'s ``global_batch_size=`` for cost-model batches).

        Example:
            >>> calc = VideoBucketCalculator.from_preset("wan2.1-480p")
            >>> g = calc.global_batch_size(64, 1)
            >>> g(calc.shape_info(832, 480, 81)), g(calc.shape_info(832, 480, 17))
            (64, 256)
        """
        r = check_int("num_replicas", num_replicas, min_value=1)
        b = check_int("batch_size", batch_size, min_value=1)
        cost, ref, cap = self._cost, self._budget.max_tokens, self._max_batch_size

        def of(bucket: VideoBucket) -> int:
            return r * cost.batch_size(bucket["tokens"], ref, b, cap)

        return of

    def batch_sizes(
        self, reference_batch_size: int, *, reference_tokens: int | None = None
    ) -> npt.NDArray[np.int64]:
        """Per-rank batch size of every bucket by id, from :attr:`cost_model`.

        Each bucket gets the largest batch whose cost fits ``reference_batch_size`` samples of
        ``reference_tokens`` tokens, clamped to ``[1, max_batch_size]`` (NOTE [ Cost-model batch
        sizes ] in :mod:`dataorder.diffusion.buckets.cost`).

        Args:
            reference_batch_size: Per-rank batch size known to fit the reference.
            reference_tokens: Tokens of the reference sample; None means :attr:`max_tokens`
                (``reference_batch_size`` is what fits at the full budget).

        Returns:
            int64 array of shape ``(num_buckets,)``.

        Example:
            >>> calc = VideoBucketCalculator.from_preset("wan2.1-480p", max_batch_size=64)
            >>> bs = calc.batch_sizes(1)
            >>> [int(bs[calc.get_bucket_for_video(832, 480, f)["id"]]) for f in (1, 17, 81)]
            [21, 4, 1]
        """
        ref = self._budget.max_tokens if reference_tokens is None else reference_tokens
        return self._cost.batch_sizes(self.tokens, ref, reference_batch_size, self._max_batch_size)

    def summary(self) -> str:
        """A text table: per frame count its ids, pixel budget and token range."""
        lines = [
            f"{len(self)} buckets, max_tokens={self.max_tokens}, quantization={self.quantization}, "
            f"max_upscale={None if self._u is None else str(self._u)}"
            + ("" if self._set is None else f", fitted: {self._set!r}")
        ]
        for f in self._frames:
            ids = [b["id"] for b in self._buckets if b["frames"] == f]
            toks = [self._buckets[i]["tokens"] for i in ids]
            lines.append(
                f"  frames {f:5d}  ids {ids[0]}-{ids[-1]}  <= {self._budget.frame(f)[0]} px/frame  "
                f"tokens {min(toks)}-{max(toks)}"
            )
        return "\n".join(lines)

    # -- assignment -------------------------------------------------------------------------

    def get_bucket_id_for_video(self, width: int, height: int, frames: int) -> int:
        """The bucket id of one clip: the reference rule (module docstring), in exact integers.

        Returns:
            A bucket id, :data:`TOO_SHORT` (-1) or :data:`TOO_SMALL` (-2).

        Raises:
            TypeError: If an argument is not an int (or is a bool).
            ValueError: If an argument is not in ``[1, MAX_VIDEO_SIZE]``.
        """
        w = check_int("width", width, min_value=1, max_value=MAX_VIDEO_SIZE)
        h = check_int("height", height, min_value=1, max_value=MAX_VIDEO_SIZE)
        f = check_int("frames", frames, min_value=1, max_value=MAX_VIDEO_SIZE)
        k = self._assigner.choose(w, h, f)
        if k >= 0 and self._set is not None:  # the generated set's too short or small, then the fit
            return self._set.choose(w, h, f, self._u)
        return k

    def get_bucket_for_video(self, width: int, height: int, frames: int) -> VideoBucket | None:
        """The bucket of one clip (a copy), or None if it is too short or too small.

        Example:
            >>> calc = VideoBucketCalculator.from_preset("wan2.1-480p")
            >>> calc.get_bucket_for_video(1080, 1920, 40)["resolution"]
            (480, 832)
            >>> calc.get_bucket_for_video(320, 180, 40) is None  # 480p would upscale it 2.6x
            True
        """
        k = self.get_bucket_id_for_video(width, height, frames)
        return None if k < 0 else dict(self._buckets[k])

    def assign(
        self, widths: npt.ArrayLike, heights: npt.ArrayLike, frames: npt.ArrayLike
    ) -> npt.NDArray[np.int64]:
        """Bucket ids of arrays of clips; equal to :meth:`get_bucket_id_for_video` element-wise.

        Table lookups only, 32,768 clips at a time
        (:mod:`dataorder.diffusion.buckets.video_assign`).

        Args:
            widths: Integer array of widths, any shape.
            heights: Integer array of heights, the same shape.
            frames: Integer array of frame counts, the same shape.

        Returns:
            int64 array of ids (or :data:`TOO_SHORT` / :data:`TOO_SMALL`), the shape of
            ``widths``.

        Raises:
            TypeError: If an array is not of an integer dtype.
            ValueError: If the shapes differ or a value is not in ``[1, MAX_VIDEO_SIZE]``.
        """
        w, h, f = as_size_arrays(widths=widths, heights=heights, frames=frames)
        ids = self._assigner.assign(w.ravel(), h.ravel(), f.ravel())
        if self._fitted is not None:  # the generated set's too short and too small, then the fit
            ok = np.flatnonzero(ids >= 0)
            ids[ok] = self._fitted.assign(w.ravel()[ok], h.ravel()[ok], f.ravel()[ok])
        return ids.reshape(w.shape)
