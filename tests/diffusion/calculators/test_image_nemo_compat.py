"""compat="nemo": NeMo Automodel 0.7.0's bucket lists, image-to-bucket choices and batch sizes.

The first half pins what nemo_behaviour.md section 2 lists; it runs everywhere. The second half
compares with NeMo's own file when ``nemo-automodel==0.7.0`` is installed, and skips otherwise.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataorder.diffusion.calculators.image import NEMO_ASPECT_RATIOS, MultiTierBucketCalculator
from tests.helpers.nemo_oracle import load

NEMO_FILE = "components/datasets/diffusion/multi_tier_bucketing.py"

# nemo_behaviour.md section 2, "Actual bucket lists" (sorted by id).
LISTED: dict[tuple[str | None, int], list[tuple[int, int]]] = {
    (None, 64): [(192, 320), (192, 256), (256, 256), (256, 192), (320, 192)],
    ("256p", 64): [(192, 320), (192, 256), (256, 256), (256, 192), (320, 192)],
    ("512p", 64): [(384, 640), (448, 576), (512, 512), (576, 448), (640, 384), (768, 320)],
    ("768p", 64): [
        (512, 1088), (576, 1024), (640, 896), (640, 832), (768, 768), (832, 704), (832, 640),
        (896, 640), (896, 576), (960, 576), (1024, 576), (1024, 512), (1152, 512),
    ],
    ("1024p", 64): [
        (768, 1344), (832, 1216), (896, 1152), (1024, 1024), (1152, 896), (1216, 832),
        (1280, 768), (1344, 768), (1408, 704), (1472, 640),
    ],
    ("1536p", 64): [
        (1088, 2112), (1152, 2048), (1216, 1856), (1344, 1728), (1408, 1664), (1536, 1536),
        (1664, 1344), (1728, 1344), (1792, 1280), (1920, 1216), (2048, 1152), (2112, 1088),
        (2304, 1024),
    ],
    ("512p", 8): [
        (360, 720), (384, 680), (416, 624), (448, 584), (464, 560), (512, 512), (568, 456),
        (584, 440), (624, 416), (640, 400), (648, 400), (680, 384), (720, 360), (776, 336),
    ],
}  # fmt: skip


def _nemo(preset: str | None, q: int) -> MultiTierBucketCalculator:
    if preset is None:
        return MultiTierBucketCalculator(q, compat="nemo")
    return MultiTierBucketCalculator.from_preset(preset, q, compat="nemo")


@pytest.mark.parametrize(("preset", "q"), list(LISTED))
def test_bucket_lists_match_the_reference(preset: str | None, q: int) -> None:
    buckets = _nemo(preset, q).get_all_buckets()
    assert [b["resolution"] for b in buckets] == LISTED[(preset, q)]
    for i, b in enumerate(buckets):
        w, h = b["resolution"]
        assert b == {"id": i, "resolution": (w, h), "aspect_ratio": w / h, "pixels": w * h}


def test_rounding_oddities_are_reproduced() -> None:
    # Half-to-even rounding at 4096 px: 1:2 gives no bucket, 2:1 and the rest collapse to 64x64.
    assert [b["resolution"] for b in MultiTierBucketCalculator(64, 4096, compat="nemo")
            .get_all_buckets()] == [(64, 64)]  # fmt: skip
    # 512p has 768x320 but not 320x768: NeMo's set is not symmetric.
    res = {b["resolution"] for b in _nemo("512p", 64).get_all_buckets()}
    assert (768, 320) in res
    assert (320, 768) not in res
    # 768p: 1:2 lands on 512x1088, more extreme than 1:2.
    assert _nemo("768p", 64).get_bucket_by_id(0)["aspect_ratio"] < 0.5
    assert len(NEMO_ASPECT_RATIOS) == 14


def test_image_to_bucket_examples() -> None:
    calc = _nemo("256p", 64)
    assert calc.get_bucket_for_image(7, 8)["id"] == 1  # 0.875 is halfway: the first bucket wins
    assert calc.get_bucket_for_image(1920, 1080)["resolution"] == (320, 192)
    assert calc.get_bucket_for_image(1000, 3000)["resolution"] == (192, 320)
    # 3:4 images go to 192x256 (AR 0.75), and 4:3 to 256x192: image size is ignored.
    assert calc.assign([3, 3000], [4, 4000]).tolist() == [1, 1]
    assert calc.assign([4], [3]).tolist() == [3]


def test_dynamic_batch_size_examples() -> None:
    calc = MultiTierBucketCalculator(compat="nemo")
    assert calc.get_dynamic_batch_size((1024, 1024)) == 8
    assert calc.get_dynamic_batch_size((768, 768)) == 14
    assert calc.get_dynamic_batch_size((640, 384)) == 34
    assert calc.get_dynamic_batch_size((256, 256)) == 128
    assert calc.get_dynamic_batch_size((64, 64)) == 2048  # no upper clamp, as NeMo
    assert calc.get_dynamic_batch_size((256, 256), 4, (512, 512)) == 16
    assert (
        MultiTierBucketCalculator(compat="nemo", max_batch_size=100).get_dynamic_batch_size(
            (64, 64)
        )
        == 100
    )


def test_default_budget_and_resize_return_shape() -> None:
    calc = MultiTierBucketCalculator(64, compat="nemo")
    assert calc.max_pixels == 65_536
    pytest.importorskip("PIL")
    out, (x, y) = calc.resize_and_crop(np.zeros((98, 49, 3), dtype=np.uint8), 256, 256)
    assert out.size == (256, 256)
    assert (x, y) == (0, 128)


# -- the oracle: NeMo's own file, when installed ------------------------------------------------

QUANTS = [1, 2, 3, 7, 8, 16, 24, 32, 48, 50, 64, 96, 100, 128]


def _budgets(q: int) -> list[int]:
    rng = np.random.default_rng(q)
    fixed = [q * q, 2 * q * q - 1, 4096, 65_536, 262_144, 589_824, 1_048_576, 2_359_296]
    return sorted(
        {b for b in fixed if b >= q * q} | set(rng.integers(q * q, 6_000_000, 12).tolist())
    )


def _oracle(q: int, budget: int) -> Any:
    return load(NEMO_FILE).MultiTierBucketCalculator(q, budget)


@pytest.mark.parametrize("q", QUANTS)
def test_oracle_bucket_lists_and_choices(q: int) -> None:
    rng = np.random.default_rng(1000 + q)
    for budget in _budgets(q):
        theirs = _oracle(q, budget)
        ours = MultiTierBucketCalculator(q, budget, compat="nemo")
        assert ours.get_all_buckets() == theirs.get_all_buckets(), (q, budget)
        w = np.concatenate([rng.integers(1, 6000, 150), [7, 1, 4000, 1, 99]])
        h = np.concatenate([rng.integers(1, 6000, 150), [8, 4000, 1, 1, 100]])
        expected = [
            theirs.get_bucket_for_image(int(a), int(b))["id"] for a, b in zip(w, h, strict=True)
        ]
        assert ours.assign(w, h).tolist() == expected, (q, budget)
        assert [
            ours.get_bucket_for_image(int(a), int(b))["id"] for a, b in zip(w, h, strict=True)
        ] == expected


@pytest.mark.parametrize("preset", ["256p", "512p", "768p", "1024p", "1536p"])
def test_oracle_presets_and_midpoint_ties(preset: str) -> None:
    mod = load(NEMO_FILE)
    for q in (8, 16, 32, 64):
        theirs = mod.MultiTierBucketCalculator.from_preset(preset, q)
        ours = MultiTierBucketCalculator.from_preset(preset, q, compat="nemo")
        assert ours.get_all_buckets() == theirs.get_all_buckets()
        res = ours.resolutions.tolist()
        sizes = []  # exact linear midpoints between neighbouring buckets: NeMo's ties
        for (w1, h1), (w2, h2) in itertools.pairwise(res):
            sizes.append((w1 * h2 + w2 * h1, 2 * h1 * h2))
        w = np.array([s[0] for s in sizes])
        h = np.array([s[1] for s in sizes])
        expected = [theirs.get_bucket_for_image(int(a), int(b))["id"] for a, b in sizes]
        assert ours.assign(w, h).tolist() == expected


@given(
    q=st.sampled_from(QUANTS),
    scale=st.floats(1.0, 2000.0),
    sizes=st.lists(
        st.tuples(st.integers(1, 10**6), st.integers(1, 10**6)), min_size=1, max_size=20
    ),
)
def test_oracle_property(q: int, scale: float, sizes: list[tuple[int, int]]) -> None:
    budget = int(q * q * scale)
    theirs = _oracle(q, budget)
    ours = MultiTierBucketCalculator(q, budget, compat="nemo")
    assert ours.get_all_buckets() == theirs.get_all_buckets()
    w = np.array([s[0] for s in sizes])
    h = np.array([s[1] for s in sizes])
    assert ours.assign(w, h).tolist() == [theirs.get_bucket_for_image(a, b)["id"] for a, b in sizes]


@given(
    w=st.integers(1, 8192),
    h=st.integers(1, 8192),
    base=st.integers(1, 256),
    bw=st.integers(1, 2048),
    bh=st.integers(1, 2048),
)
def test_oracle_dynamic_batch_size(w: int, h: int, base: int, bw: int, bh: int) -> None:
    theirs = _oracle(64, 65_536)
    ours = MultiTierBucketCalculator(64, compat="nemo")
    assert ours.get_dynamic_batch_size((w, h), base, (bw, bh)) == theirs.get_dynamic_batch_size(
        (w, h), base, (bw, bh)
    )


def test_oracle_resize_is_one_pixel_short_where_ours_is_exact() -> None:
    pytest.importorskip("PIL")
    from PIL import Image

    img = Image.new("RGB", (49, 98), (255, 255, 255))
    theirs, offset = _oracle(64, 65_536).resize_and_crop(img, 256, 256)
    # NeMo resizes to 255x510 and crops from x=-1: a black column on the left.
    assert offset == (-1, 127)
    assert theirs.size == (256, 256)
    assert theirs.getpixel((0, 100)) == (0, 0, 0)
    ours, (x, y) = MultiTierBucketCalculator(compat="nemo").resize_and_crop(img, 256, 256)
    assert (x, y) == (0, 128)
    assert ours.getpixel((0, 100)) == (255, 255, 255)
