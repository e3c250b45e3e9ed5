"""The token budget of video buckets: what one frame count may hold, and the generated set.

The arithmetic half of :class:`~dataorder.diffusion.calculators.video.VideoBucketCalculator`
(its module docstring states the rules): a :class:`TokenBudget` is the validated geometry
(token budget, VAE compression, patch, pixel cap, lattice quantum) and answers, per frame
count, the pixel budget of one frame, the latent frames and the tokens of a bucket;
:func:`generated_buckets` builds the calculator's default set from it (one spatial *tier* per
distinct pixel budget, frame-major ids).

**Tokens.** A clip of ``f`` frames at ``w x h`` becomes ``L(f) = 1 + (f - 1) // tc`` latent
frames in a causal VAE with temporal compression ``tc`` (the first frame is encoded alone, then
``tc`` frames per latent frame; Wan, HunyuanVideo, CogVideoX, LTX-Video), then
``ceil(L / pt) * (h / (sc * ph)) * (w / (sc * pw))`` tokens with spatial compression ``sc`` and
transformer patch ``(pt, ph, pw)``. ``ceil`` is CogVideoX 1.5's padding of an odd latent length
to its temporal patch of 2; with ``pt = 1`` it changes nothing.

**Pixel budget.** ``P(f) = min(max_pixels, (max_tokens // T(f)) * sc**2 * ph * pw)`` with
``T(f) = ceil(L / pt)``, so no bucket has more than ``max_tokens`` tokens and ``max_pixels``
stops short clips from being blown up to huge frames.

Example:
    >>> budget = TokenBudget.from_args(4096, 8, 4, (1, 2, 2), None, None)
    >>> budget.frame(17)  # (pixels per frame, latent frames, temporal tokens)
    (209664, 5, 5)
    >>> budget.bucket(17, 448, 448)["tokens"]
    3920
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, check_optional_int, fail
from dataorder.diffusion.buckets.lattice import AspectRatio, default_resolutions
from dataorder.diffusion.buckets.rules import MAX_PIXELS
from dataorder.diffusion.buckets.video_assign import Tier
from dataorder.diffusion.buckets.video_frames import MAX_VIDEO_SIZE
from dataorder.diffusion.buckets.video_set import FittedVideoSet

__all__ = ["MAX_TOKENS", "TokenBudget", "VideoBucket", "generated_buckets"]

#: Largest ``max_tokens``: a bucket's token count is an int64 (with ``MAX_PIXELS``, the largest
#: frame, 2**40 pixels as for images, these are the calculator's caps).
MAX_TOKENS = 2**62

#: A bucket as the calculator shows it: ``id``, ``frames``, ``resolution`` ``(w, h)``,
#: ``aspect_ratio``, ``pixels``, ``latent_frames``, ``tokens``.
VideoBucket = dict[str, Any]


@dataclass(frozen=True)
class TokenBudget:
    """The validated geometry of a video bucket set; build it with :meth:`from_args`.

    Attributes:
        max_tokens: No bucket has more latent tokens.
        spatial_compression: The VAE's spatial factor ``sc``.
        temporal_compression: The causal VAE's temporal factor ``tc``.
        patch_size: The transformer's patch ``(pt, ph, pw)``.
        max_pixels: Pixel cap per frame, or None.
        quantization: The side quantum of every bucket (resolved: never None).
        quantization_arg: ``quantization`` as given (None: ``lcm(sc * ph, sc * pw)``).
    """

    max_tokens: int
    spatial_compression: int
    temporal_compression: int
    patch_size: tuple[int, int, int]
    max_pixels: int | None
    quantization: int
    quantization_arg: int | None

    @classmethod
    def from_args(
        cls,
        max_tokens: int,
        spatial_compression: int,
        temporal_compression: int,
        patch_size: Sequence[int],
        max_pixels: int | None,
        quantization: int | None,
    ) -> TokenBudget:
        """Check the calculator's arguments of the same names (its errors name them).

        Raises:
            TypeError: For an argument of the wrong type (a bool where an int is meant included).
            ValueError: For a value out of range (see the calculator's arguments).
        """
        tokens = check_int("max_tokens", max_tokens, min_value=1)
        if tokens > MAX_TOKENS:
            fail("max_tokens", f"at most 2**62 = {MAX_TOKENS} (token counts are int64)", max_tokens)
        # a latent cell is at most one frame of MAX_VIDEO_SIZE pixels a side (exact int64 maths)
        sc = check_int(
            "spatial_compression", spatial_compression, min_value=1, max_value=MAX_VIDEO_SIZE
        )
        tc = check_int(
            "temporal_compression", temporal_compression, min_value=1, max_value=MAX_VIDEO_SIZE
        )
        what = "a (pt, ph, pw) triple of positive ints"
        if isinstance(patch_size, str | bytes) or not isinstance(patch_size, Sequence):
            fail("patch_size", what, patch_size, TypeError)
        if len(patch_size) != 3:
            fail("patch_size", what, patch_size)
        pt, ph, pw = (
            check_int(f"patch_size[{i}]", p, min_value=1) for i, p in enumerate(patch_size)
        )
        natural = math.lcm(sc * ph, sc * pw)
        side = math.isqrt(MAX_PIXELS)  # one bucket of side**2 pixels fits the largest frame
        if natural > side:
            fail(
                "spatial_compression",
                f"small enough that a latent cell's side lcm(sc * ph, sc * pw) is at most {side} "
                f"(it is {natural} with patch_size={(pt, ph, pw)})",
                spatial_compression,
            )
        quantization_arg = check_optional_int("quantization", quantization, min_value=1)
        q = natural if quantization_arg is None else quantization_arg
        if q % natural:
            fail("quantization", f"a multiple of lcm(sc * ph, sc * pw) = {natural}", quantization)
        if q > side:
            fail("quantization", f"at most {side} (one {side}x{side} bucket: 2**40 pixels)", q)
        pixels = check_optional_int("max_pixels", max_pixels, min_value=1)
        if pixels is not None and pixels > MAX_PIXELS:
            fail("max_pixels", f"at most 2**40 = {MAX_PIXELS} or None", max_pixels)
        return cls(tokens, sc, tc, (pt, ph, pw), pixels, q, quantization_arg)

    def frame(self, f: int) -> tuple[int, int, int]:
        """``(P(f), latent frames, temporal tokens)`` of frame count ``f``: its per-frame pixel
        budget (module docstring), checked to hold one lattice cell."""
        sc, q = self.spatial_compression, self.quantization
        pt, ph, pw = self.patch_size
        cell = sc * sc * ph * pw  # pixels per spatial token
        latent = 1 + (f - 1) // self.temporal_compression
        temporal = -(-latent // pt)
        budget = (self.max_tokens // temporal) * cell
        capped = False
        if self.max_pixels is not None and self.max_pixels <= budget:
            budget, capped = self.max_pixels, True
        if budget > MAX_PIXELS:  # only without max_pixels (which is at most MAX_PIXELS)
            most = temporal * (MAX_PIXELS // cell + 1) - 1
            fail(
                "max_tokens",
                f"at most {most} for frames={f} when max_pixels is None (frames of at most "
                "2**40 pixels; set max_pixels to cap them)",
                self.max_tokens,
            )
        if budget < q * q:
            if capped:
                fail("max_pixels", f"at least {q * q} (one {q}x{q} cell)", self.max_pixels)
            need = temporal * (q * q // cell)
            fail(
                "max_tokens", f"at least {need} for frames={f} (one {q}x{q} cell)", self.max_tokens
            )
        return budget, latent, temporal

    def bucket(self, f: int, w: int, h: int) -> VideoBucket:
        """The bucket dict of shape ``(f, w, h)``, with ``id`` -1."""
        _, ph, pw = self.patch_size
        sc = self.spatial_compression
        _, latent, temporal = self.frame(f)
        return {
            "id": -1,
            "frames": f,
            "resolution": (w, h),
            "aspect_ratio": w / h,
            "pixels": w * h,
            "latent_frames": latent,
            "tokens": temporal * (w // (sc * pw)) * (h // (sc * ph)),
        }

    def check_set(self, bucket_set: FittedVideoSet, legal: tuple[int, ...]) -> None:
        """Refuse a fitted set with a frame count not in ``legal`` or a bucket off the lattice or
        over its frame count's pixel budget (the error names the field of ``bucket_set``)."""
        q = self.quantization
        for b, band in enumerate(bucket_set.bands):
            for k, c in enumerate(band.classes):
                where = f"bucket_set.bands[{b}].classes[{k}]"
                w, h = c.resolution
                for f in c.frames:
                    if f not in legal:
                        fail(
                            f"{where}.frames",
                            f"legal frame counts of this calculator {list(legal)}",
                            list(c.frames),
                        )
                    budget, _, _ = self.frame(f)
                    if w % q or h % q or w * h > budget:
                        fail(
                            f"{where}.resolution",
                            f"a (w, h) with both sides multiples of quantization={q} "
                            f"and w * h <= {budget} (the pixel budget of {f} frames)",
                            (w, h),
                        )


def generated_buckets(
    budget: TokenBudget,
    legal: tuple[int, ...],
    ratios: tuple[AspectRatio, ...],
    max_upscale: Fraction | None,
) -> tuple[list[Tier], npt.NDArray[np.intp], npt.NDArray[np.int64], list[VideoBucket]]:
    """The generated bucket set: ``(tiers, frame_tier, frame_base, buckets)``.

    Frame counts with the same pixel budget share one spatial tier (the image calculator's
    default set for that budget on the lattice); ids are frame-major, each frame count's
    buckets in its tier's order. ``frame_tier`` (shape ``(F,)``) is the tier of each legal
    frame count and ``frame_base`` its first bucket id.
    """
    tiers: list[Tier] = []
    buckets: list[VideoBucket] = []
    frame_tier: list[int] = []
    frame_base: list[int] = []
    tier_of_budget: dict[int, int] = {}
    for f in legal:
        pixels, _, _ = budget.frame(f)
        if pixels not in tier_of_budget:
            tier_of_budget[pixels] = len(tiers)
            res = default_resolutions(ratios, pixels, budget.quantization)
            tiers.append(Tier(pixels, res, max_upscale))
        frame_tier.append(tier_of_budget[pixels])
    for j, f in enumerate(legal):
        frame_base.append(len(buckets))
        for w, h in tiers[frame_tier[j]].res:
            bucket = budget.bucket(f, w, h)
            bucket["id"] = len(buckets)
            buckets.append(bucket)
    return (
        tiers,
        np.array(frame_tier, dtype=np.intp),
        np.array(frame_base, dtype=np.int64),
        buckets,
    )
