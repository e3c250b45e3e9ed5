"""resize_and_crop: exact output size, in-bounds offsets, seeded randomness, a real smart crop."""

from __future__ import annotations

import doctest
import random
import re
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("PIL")
from PIL import Image

import dataorder.diffusion.buckets.crop as crop_module
from dataorder.diffusion.buckets.crop import CROP_MODES, cover_size, resize_and_crop


def test_docstring_examples() -> None:
    result = doctest.testmod(crop_module)
    assert result.attempted > 5
    assert result.failed == 0


@given(
    iw=st.integers(1, 10**5),
    ih=st.integers(1, 10**5),
    tw=st.integers(1, 4096),
    th=st.integers(1, 4096),
)
def test_cover_size_covers_and_keeps_the_aspect_ratio(iw: int, ih: int, tw: int, th: int) -> None:
    nw, nh = cover_size(iw, ih, tw, th)
    assert nw >= tw
    assert nh >= th
    assert nw == tw or nh == th  # the binding side is exact
    if nw == tw:  # the other side is the rounded scaled side (or the target, if larger)
        assert nh == max(th, round(ih * tw / iw)) or abs(nh - ih * tw / iw) <= 0.5
    else:
        assert abs(nw - iw * th / ih) <= 0.5 or nw == tw


def test_nemo_one_pixel_short_case_is_exact_here() -> None:
    assert cover_size(49, 98, 256, 256) == (256, 512)
    out, (x, y) = resize_and_crop(Image.new("RGB", (49, 98), (255, 255, 255)), 256, 256)
    assert out.size == (256, 256)
    assert (x, y) == (0, 128)
    assert np.asarray(out).min() == 255  # no black border


SMALL = st.integers(1, 72)


@given(
    iw=SMALL,
    ih=SMALL,
    tw=SMALL,
    th=SMALL,
    mode=st.sampled_from(CROP_MODES),
    channels=st.sampled_from([None, 1, 3, 4]),
    seed=st.integers(0, 2**64 - 1),
)
def test_result_is_always_exactly_the_target(
    iw: int, ih: int, tw: int, th: int, mode: str, channels: int | None, seed: int
) -> None:
    rng = np.random.default_rng(iw * 100 + ih)
    shape = (ih, iw) if channels is None else (ih, iw, channels)
    arr = rng.integers(0, 256, shape, dtype=np.uint8)
    out, (x, y) = resize_and_crop(arr, tw, th, mode, seed=seed)
    assert out.shape == ((th, tw) if channels is None else (th, tw, channels))
    assert out.dtype == np.uint8
    nw, nh = cover_size(iw, ih, tw, th)
    assert 0 <= x <= nw - tw
    assert 0 <= y <= nh - th
    pil, (px, py) = resize_and_crop(Image.fromarray(arr.squeeze(-1) if channels == 1 else arr), tw,
                                  th, mode, seed=seed)  # fmt: skip
    assert pil.size == (tw, th)
    assert (px, py) == (x, y)


def test_center_crop_is_the_middle_window_of_the_lanczos_resize() -> None:
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, (90, 160, 3), dtype=np.uint8)
    out, (x, y) = resize_and_crop(arr, 64, 64)
    resized = Image.fromarray(arr).resize((114, 64), Image.LANCZOS)
    assert (x, y) == (25, 0)
    assert np.array_equal(out, np.asarray(resized.crop((25, 0, 89, 64))))


def test_input_type_is_kept() -> None:
    img = Image.new("L", (40, 30))
    out, _ = resize_and_crop(img, 20, 20)
    assert isinstance(out, Image.Image)
    assert out.mode == "L"
    rgba = np.zeros((30, 40, 4), dtype=np.uint8)
    assert resize_and_crop(rgba, 20, 20)[0].shape == (20, 20, 4)
    same = Image.new("RGB", (20, 20), (1, 2, 3))
    out, (x, y) = resize_and_crop(same, 20, 20)
    assert (out.size, x, y) == ((20, 20), 0, 0)
    assert out.getpixel((5, 5)) == (1, 2, 3)


def test_random_is_seeded_reproducible_and_leaves_global_rngs_alone() -> None:
    arr = np.zeros((100, 400, 3), dtype=np.uint8)
    random.seed(123)
    np.random.seed(123)  # noqa: NPY002 - the global state must stay untouched
    py_state, np_state = random.getstate(), np.random.get_state()  # noqa: NPY002
    offsets = {resize_and_crop(arr, 50, 50, "random", seed=s).x for s in range(40)}
    assert random.getstate() == py_state
    assert np.array_equal(np.random.get_state()[1], np_state[1])  # noqa: NPY002
    assert len(offsets) > 20  # the 150 px of slack are used
    assert all(0 <= o <= 150 for o in offsets)
    a = resize_and_crop(arr, 50, 50, "random", seed=7).offset
    b = resize_and_crop(arr, 50, 50, "random", seed=7).offset
    assert a == b
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    first = [resize_and_crop(arr, 50, 50, "random", rng=g1).offset for _ in range(5)]
    second = [resize_and_crop(arr, 50, 50, "random", rng=g2).offset for _ in range(5)]
    assert first == second
    assert len(set(first)) > 1  # the generator advances between calls
    # The documented draw: x then y, each integers(0, slack, endpoint=True).
    g = np.random.default_rng(11)
    expect = (int(g.integers(0, 150, endpoint=True)), int(g.integers(0, 0, endpoint=True)))
    assert resize_and_crop(arr, 50, 50, "random", seed=11).offset == expect


def _textured(shape: tuple[int, int], region: tuple[slice, slice]) -> np.ndarray:
    arr = np.full(shape, 128, dtype=np.uint8)
    noise = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    arr[region] = noise[region]
    return arr


@pytest.mark.parametrize(
    ("shape", "region", "expected"),
    [
        ((200, 600), (slice(None), slice(450, None)), (400, 0)),  # detail right
        ((200, 600), (slice(None), slice(0, 120)), (0, 0)),  # detail left
        ((200, 600), (slice(None), slice(250, 330)), (190, 0)),  # detail centred-ish
        ((600, 200), (slice(0, 100), slice(None)), (0, 0)),  # detail top
        ((600, 200), (slice(500, None), slice(None)), (0, 400)),  # detail bottom
    ],
)
def test_smart_crops_toward_the_detail(
    shape: tuple[int, int], region: tuple[slice, slice], expected: tuple[int, int]
) -> None:
    arr = _textured(shape, region)
    out, (x, y) = resize_and_crop(arr, 200, 200, "smart")
    assert out.shape == (200, 200)
    if expected == (190, 0):  # the 80 px of detail lie anywhere inside the chosen window
        assert 130 <= x <= 250
        assert y == 0
    else:
        assert (x, y) == expected
    # the chosen window holds the most gradient energy of all windows
    gray = np.asarray(Image.fromarray(arr), dtype=np.int64)
    energy = np.abs(np.diff(out.astype(np.int64), axis=1)).sum()
    for other in range(0, max(shape) - 200 + 1, 25):
        window = gray[:, other : other + 200] if shape[1] > shape[0] else gray[other : other + 200]
        assert energy >= np.abs(np.diff(window, axis=1)).sum() - 1


def test_smart_on_a_flat_image_is_the_centre_and_ignores_seeds() -> None:
    arr = np.full((100, 300), 7, dtype=np.uint8)
    assert resize_and_crop(arr, 100, 100, "smart").offset == (100, 0)
    assert resize_and_crop(arr, 100, 100, "smart", seed=3).offset == (100, 0)
    assert resize_and_crop(arr, 100, 100, "center", rng=np.random.default_rng(0)).offset == (100, 0)


def test_errors() -> None:
    arr = np.zeros((10, 10, 3), dtype=np.uint8)
    cases = [
        (lambda: resize_and_crop(arr, 5, 5, "smrt"), ValueError,
         "crop_mode must be one of 'center', 'random', 'smart'; got crop_mode='smrt'"),
        (lambda: resize_and_crop(arr, 5, 5, "random"), ValueError,
         "crop_mode='random' needs seed= (a non-negative int) or rng= (a numpy Generator); "
         "got seed=None, rng=None"),
        (lambda: resize_and_crop(arr, 5, 5, "random", seed=1, rng=np.random.default_rng()),
         ValueError, "pass seed or rng, not both"),
        (lambda: resize_and_crop(arr, 5, 5, "random", seed=-1), ValueError,
         "seed must be a non-negative int; got seed=-1"),
        (lambda: resize_and_crop(arr, 5, 5, "random", seed=True), TypeError,
         "seed must be a non-negative int; got seed=True"),
        (lambda: resize_and_crop(arr, 5, 5, "random", rng=random.Random(0)), TypeError,
         "rng must be a numpy.random.Generator; got rng="),
        (lambda: resize_and_crop(arr, 0, 5), ValueError,
         "target_width must be an int in [1, 2147483647]; got target_width=0"),
        (lambda: resize_and_crop(arr, 5, True), TypeError,
         "target_height must be an int in [1, 2147483647]; got target_height=True"),
        (lambda: resize_and_crop(arr.astype(np.float32), 5, 5), TypeError,
         "image.dtype must be uint8; got image.dtype=dtype('float32')"),
        (lambda: resize_and_crop(np.zeros((10, 10, 2), np.uint8), 5, 5), ValueError,
         "image.shape must be (H, W) or (H, W, C) with C in 1, 3, 4; got image.shape=(10, 10, 2)"),
        (lambda: resize_and_crop(np.zeros((0, 10), np.uint8), 5, 5), ValueError,
         "image_height must be a positive int; got image_height=0"),
        (lambda: resize_and_crop([[0]], 5, 5), TypeError,
         "image must be a PIL.Image.Image or a numpy array; got image='list'"),
        (lambda: cover_size(0, 5, 5, 5), ValueError,
         "image_width must be a positive int; got image_width=0"),
    ]  # fmt: skip
    for call, exc, message in cases:
        with pytest.raises(exc, match=re.escape(message)):
            call()


def test_missing_pillow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'dataorder[images]'")):
        resize_and_crop(np.zeros((4, 4), np.uint8), 2, 2)
    # cover_size is plain integer math and works without Pillow
    assert cover_size(4, 4, 2, 2) == (2, 2)
