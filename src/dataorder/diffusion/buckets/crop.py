"""Resize an image to cover a bucket, then crop it to exactly the bucket's size.

The image is scaled, keeping its aspect ratio, until it covers the target: the side that binds
becomes exactly the target side, and the other is rounded to the nearest pixel but never below
its target side (NeMo truncates instead, so a 49x98 image bound for 256x256 comes out 255x510 and
is cropped at x=-1 with a black column; here it is 256x512). The crop then keeps a target-sized
window of the resized image; only one axis has slack. Crop modes:

* ``"center"``: the middle window (offsets ``(slack_x // 2, slack_y // 2)``).
* ``"random"``: offsets drawn uniformly from ``[0, slack]`` on each axis (x first, then y) by a
  numpy Generator you pass (``rng=``) or build from ``seed=``; never Python's global ``random``.
  For a per-sample crop that every run reproduces, derive the seed from the sample:
  ``seed=derive_key(seed, epoch=e, stream="crops", purpose="crop", extra=(index,))``.
* ``"smart"``: the window with the most detail. Detail is gradient energy, the sum of absolute
  differences between neighbouring pixels of the grayscale resized image; the window along the
  free axis with the largest total wins, ties going to the window nearest the centre. An image
  whose subject is textured against a plain background is cropped toward the subject. It is
  deterministic and needs no seed.

Pillow does the resampling (LANCZOS, as NeMo); it is imported only when a function here is
called, and its absence raises an ImportError naming the ``dataorder[images]`` extra.

Example:
    >>> import numpy as np
    >>> from dataorder.diffusion.buckets.crop import cover_size, resize_and_crop
    >>> cover_size(49, 98, 256, 256)
    (256, 512)
    >>> img = np.zeros((98, 49, 3), dtype=np.uint8)
    >>> out, (x, y) = resize_and_crop(img, 256, 256)  # NeMo's shape: (image, (x, y))
    >>> out.shape, (x, y)
    ((256, 256, 3), (0, 128))
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_choice, check_int, fail
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE

__all__ = ["CROP_MODES", "CropResult", "cover_size", "require_pillow", "resize_and_crop"]

CROP_MODES: tuple[str, ...] = ("center", "random", "smart")


class CropResult(NamedTuple):
    """What :func:`resize_and_crop` returns: ``(image, (x, y))``, as NeMo's code does.

    Attributes:
        image: The result, of the input's type, exactly the target size.
        offset: ``(x, y)``, the top-left corner of the crop in the resized image (never
            negative).
    """

    image: Any
    offset: tuple[int, int]

    @property
    def x(self) -> int:
        """The crop's left edge in the resized image."""
        return self.offset[0]

    @property
    def y(self) -> int:
        """The crop's top edge in the resized image."""
        return self.offset[1]


def require_pillow(feature: str) -> ModuleType:
    """Import ``PIL.Image`` or raise an ImportError that names the extra to install."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError(
            f"{feature} needs Pillow; install it with: pip install 'dataorder[images]'"
        ) from exc
    return Image


def cover_size(
    image_width: int, image_height: int, target_width: int, target_height: int
) -> tuple[int, int]:
    """Size that ``image`` is resized to so that it covers the target, in exact integers.

    The binding side equals its target side; the other is ``round(side * scale)`` (halves up)
    and at least its target side. So the result always covers the target, and the crop that
    follows never reaches outside the image.

    Example:
        >>> cover_size(1920, 1080, 1024, 1024), cover_size(1000, 3000, 320, 192)
        ((1820, 1024), (320, 960))
    """
    iw = check_int("image_width", image_width, min_value=1)
    ih = check_int("image_height", image_height, min_value=1)
    tw = check_int("target_width", target_width, min_value=1, max_value=MAX_IMAGE_SIDE)
    th = check_int("target_height", target_height, min_value=1, max_value=MAX_IMAGE_SIDE)
    if tw * ih >= th * iw:  # the image is relatively taller: its width binds
        return tw, max(th, (2 * ih * tw + iw) // (2 * iw))
    return max(tw, (2 * iw * th + ih) // (2 * ih)), th


def _generator(seed: object, rng: object) -> np.random.Generator | None:
    if seed is not None and rng is not None:
        raise ValueError(f"pass seed or rng, not both; got seed={seed!r}, rng={rng!r}")
    if rng is not None:
        if not isinstance(rng, np.random.Generator):
            fail("rng", "a numpy.random.Generator", rng, TypeError)
        return rng
    if seed is not None:
        return np.random.default_rng(check_int("seed", seed, min_value=0))
    return None


def _smart_offset(gray: npt.NDArray[np.int16], window: int, axis: int) -> int:
    """Offset along ``axis`` (1: x, 0: y) of the ``window``-long span with the most detail."""
    energy = np.zeros(gray.shape[axis], dtype=np.int64)
    along = np.abs(np.diff(gray, axis=axis)).sum(axis=1 - axis, dtype=np.int64)
    across = np.abs(np.diff(gray, axis=1 - axis)).sum(axis=1 - axis, dtype=np.int64)
    # A difference between pixel i and i + 1 along the free axis belongs to both of them.
    energy[:-1] += along
    energy[1:] += along
    energy += across
    sums = np.concatenate(([0], np.cumsum(energy)))
    totals = sums[window:] - sums[: sums.size - window]
    slack = totals.size - 1
    best = np.flatnonzero(totals == totals.max())
    return int(min(best, key=lambda o: (abs(2 * int(o) - slack), int(o))))


def resize_and_crop(
    image: Any,
    target_width: int,
    target_height: int,
    crop_mode: str = "center",
    *,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
) -> CropResult:
    """Resize ``image`` to cover ``target_width x target_height``, then crop to exactly that.

    Args:
        image: A Pillow image, or a uint8 numpy array of shape ``(H, W)`` or ``(H, W, C)`` with
            ``C`` in 1, 3, 4.
        target_width: Width of the result.
        target_height: Height of the result.
        crop_mode: ``"center"``, ``"random"`` or ``"smart"`` (see the module docstring).
        seed: Seed of the Generator for ``"random"`` (a non-negative int, e.g. from
            :func:`dataorder.core.keys.derive_key`). Ignored by the deterministic modes.
        rng: A numpy Generator for ``"random"``, instead of ``seed``.

    Returns:
        A :class:`CropResult` ``(cropped, (x, y))``: the result, of the input's type and exactly
        the target size, and the top-left corner of the crop in the resized image (never
        negative). The shape of NeMo's return value, whatever the mode.

    Raises:
        ImportError: If Pillow is not installed.
        TypeError: For an image that is neither, a non-uint8 array, or a bad ``rng``.
        ValueError: For an unknown ``crop_mode``, a bad size, or ``"random"`` without a seed.

    Example:
        >>> from PIL import Image
        >>> img = Image.new("RGB", (1920, 1080))
        >>> out, (x, y) = resize_and_crop(img, 1344, 768, "random", seed=7)
        >>> out.size, 0 <= x <= 1365 - 1344, y
        ((1344, 768), True, 0)
    """
    Image = require_pillow("resize_and_crop")
    tw = check_int("target_width", target_width, min_value=1, max_value=MAX_IMAGE_SIDE)
    th = check_int("target_height", target_height, min_value=1, max_value=MAX_IMAGE_SIDE)
    mode = check_choice("crop_mode", crop_mode, CROP_MODES)
    gen = _generator(seed, rng)

    as_array = isinstance(image, np.ndarray)
    pil = _as_pil(image, Image)
    width, height = pil.size

    nw, nh = cover_size(width, height, tw, th)
    resized = pil if (nw, nh) == (width, height) else pil.resize((nw, nh), Image.LANCZOS)
    slack_x, slack_y = nw - tw, nh - th
    x, y = _offset(mode, gen, resized, slack_x, slack_y, tw, th)
    cropped = resized.crop((x, y, x + tw, y + th))
    if not as_array:
        return CropResult(cropped, (x, y))
    out = np.asarray(cropped)
    if image.ndim == 3 and image.shape[2] == 1:
        out = out[:, :, None]
    return CropResult(out, (x, y))


def _as_pil(image: Any, Image: Any) -> Any:
    """``image`` as a Pillow image of a positive size (a uint8 array converted, its shape
    checked)."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            fail("image.dtype", "uint8", image.dtype, TypeError)
        plain = image.ndim == 2
        if not (plain or (image.ndim == 3 and image.shape[2] in (1, 3, 4))):
            fail("image.shape", "(H, W) or (H, W, C) with C in 1, 3, 4", image.shape)
        pixels = image[:, :, 0] if image.ndim == 3 and image.shape[2] == 1 else image
        pil = Image.fromarray(np.ascontiguousarray(pixels))
    elif isinstance(image, Image.Image):
        pil = image
    else:
        fail("image", "a PIL.Image.Image or a numpy array", type(image).__name__, TypeError)
    check_int("image_width", pil.size[0], min_value=1)
    check_int("image_height", pil.size[1], min_value=1)
    return pil


def _offset(
    mode: str,
    gen: np.random.Generator | None,
    resized: Any,
    slack_x: int,
    slack_y: int,
    tw: int,
    th: int,
) -> tuple[int, int]:
    """The top-left corner of the crop of ``mode`` in the resized image."""
    if mode == "center":
        x, y = slack_x // 2, slack_y // 2
    elif mode == "random":
        if gen is None:
            raise ValueError(
                "crop_mode='random' needs seed= (a non-negative int) or rng= (a numpy "
                "Generator); got seed=None, rng=None"
            )
        x = int(gen.integers(0, slack_x, endpoint=True))
        y = int(gen.integers(0, slack_y, endpoint=True))
    else:
        x, y = slack_x // 2, slack_y // 2
        if slack_x or slack_y:
            gray = np.asarray(resized.convert("L"), dtype=np.int16)
            if slack_x:
                x = _smart_offset(gray, tw, axis=1)
            else:
                y = _smart_offset(gray, th, axis=0)
    return x, y
