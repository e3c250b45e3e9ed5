"""The fits fed populations the preset already buckets well never report a set worse than it.

A hostile-input family (STYLE: sweeps grown when a defect escapes): clips cut to the preset's
own shapes and frame counts, in whole global batches or nearly, with a few clips of any size
beside them. Whatever the budget, the fit's least waste is at most the preset's, and at the
preset's waste the fit succeeds with a loss no larger than the preset's: for the video fit
(NOTE [ the preset is a candidate ] in :mod:`dataorder.diffusion.fit.video_choice`, whatever
``keep_every_clip``) and the image fit (whose preset buckets are always candidates), compared
like for like: the preset drops its buckets of fewer than ``G`` images whole, so the image fit
may too (``keep_every_image=False``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataorder.diffusion.fit.images as FI
import dataorder.diffusion.fit.video as VF
from dataorder.diffusion.buckets.cost import CostModel
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import VideoBucketCalculator
from dataorder.diffusion.sampler.stats import crop_loss

_LEAST = re.compile(r"\((\d+) of (?:n|N)=(\d+) (?:clips|images)")
_TOO_FEW = "global_batch_size must be small enough for the clips"
VIDEO = VideoBucketCalculator.from_preset(
    "wan2.1-480p", cost_model=CostModel.for_transformer(5120, 13824)
)
IMAGE = MultiTierBucketCalculator(64, 1024**2)
TOLERANCE = 1e-9  # the fits sum their losses in fixed point (to 1e-9 of the mean)


def _least_or_fit(fit: Any, *args: Any, **kwargs: Any) -> tuple[Any, int | None]:
    """The fit, or the least waste its error reports (None: the fit succeeded)."""
    try:
        return fit(*args, **kwargs), None
    except ValueError as exc:
        message = str(exc)
        found = _LEAST.search(message)
        if found is None:
            assert message.startswith(_TOO_FEW), message
            least = re.search(r"at least (\d+) for n=", message)
            assert least is not None, message
            return None, int(least.group(1))
        return None, int(found.group(1))


def _video_population(seed: int, g: int) -> tuple[Any, Any, Any]:
    """Clips of a few of the preset's own shapes (scaled by whole factors: no crop) and frame
    counts (no trim), each bucket whole global batches give or take a few clips, and a few
    clips of any size and length."""
    rng = np.random.default_rng(seed)
    shapes = VIDEO.resolutions[VIDEO.bucket_frames == VIDEO.frame_counts[0]]
    legal = np.array(VIDEO.frame_counts)
    w, h, f = [], [], []
    for _ in range(int(rng.integers(1, 5))):
        bw, bh = shapes[rng.integers(len(shapes))]
        frames = int(rng.choice(legal[legal >= 17]))
        count = g * int(rng.integers(1, 4)) + int(rng.integers(-2, 3))
        scale = rng.integers(1, 4, max(count, 0))
        w += (bw * scale).tolist()
        h += (bh * scale).tolist()
        f += [frames] * max(count, 0)
    extra = int(rng.integers(0, 6))
    w += rng.integers(300, 4000, extra).tolist()
    h += rng.integers(300, 4000, extra).tolist()
    f += rng.integers(1, 200, extra).tolist()
    return np.array(w, dtype=np.int64), np.array(h, dtype=np.int64), np.array(f, dtype=np.int64)


def _video_preset(w: Any, h: Any, f: Any, g: Any, drop: bool) -> tuple[int, float, int]:
    """The preset's waste, mean crop plus trim, and clips that have a bucket."""
    ids = VIDEO.assign(w, h, f)
    ok = ids >= 0
    counts = np.bincount(ids[ok], minlength=len(VIDEO))
    sizes = np.array([g(b) if callable(g) else g for b in VIDEO.get_all_buckets()])
    waste = int((counts % sizes if drop else (-counts) % sizes).sum())
    bw, bh = VIDEO.resolutions[ids[ok]].T
    crop = crop_loss(w[ok], h[ok], bw, bh)
    trim = 1 - VIDEO.bucket_frames[ids[ok]] / f[ok]
    return waste, float(crop.mean() + trim.mean()), int(ok.sum())


@settings(max_examples=max(4, settings.default.max_examples // 15))
@given(
    seed=st.integers(0, 2**32 - 1),
    cost=st.booleans(),
    drop=st.booleans(),
)
def test_the_video_fit_never_reports_worse_than_the_preset(
    seed: int, cost: bool, drop: bool
) -> None:
    g: Any = VIDEO.global_batch_size(8, 1) if cost and drop else 8
    w, h, f = _video_population(seed, 8)
    waste, loss, n = _video_preset(w, h, f, g, drop)
    if n == 0:
        return
    fit, least = _least_or_fit(
        VF.fit_video_to_data, w, h, f, VIDEO, global_batch_size=g, max_waste=0.0, drop_last=drop
    )
    assert (fit.waste if least is None else least) <= waste
    if waste >= n:  # the budget is below 1: the least the fit reports is all it can promise
        return
    fit = VF.fit_video_to_data(
        w, h, f, VIDEO, global_batch_size=g, max_waste=waste / n, drop_last=drop
    )
    assert fit.waste <= waste
    assert fit.mean_loss <= loss + TOLERANCE


def _image_population(seed: int, g: int) -> tuple[Any, Any]:
    """Images of a few of the preset's buckets scaled by whole factors (no crop), each bucket
    whole global batches give or take a few, and a few images of any size."""
    rng = np.random.default_rng(seed)
    shapes = IMAGE.resolutions
    w, h = [], []
    for _ in range(int(rng.integers(1, 6))):
        bw, bh = shapes[rng.integers(len(shapes))]
        count = max(0, g * int(rng.integers(1, 4)) + int(rng.integers(-3, 4)))
        scale = rng.integers(1, 4, count)
        w += (bw * scale).tolist()
        h += (bh * scale).tolist()
    extra = int(rng.integers(1, 8))
    w += rng.integers(100, 4000, extra).tolist()
    h += rng.integers(100, 4000, extra).tolist()
    return np.array(w, dtype=np.int64), np.array(h, dtype=np.int64)


@settings(max_examples=max(10, settings.default.max_examples // 10))
@given(seed=st.integers(0, 2**32 - 1), dynamic=st.booleans(), drop=st.booleans())
def test_the_image_fit_never_reports_worse_than_the_preset(
    seed: int, dynamic: bool, drop: bool
) -> None:
    w, h = _image_population(seed, 16)
    n = int(w.size)

    def of(bw: int, bh: int) -> int:
        return 4 * IMAGE.get_dynamic_batch_size((bw, bh), 4, (1024, 1024))

    g: Any = of if dynamic else 16
    ids = IMAGE.assign(w, h)
    counts = np.bincount(ids, minlength=len(IMAGE.resolutions))
    sizes = np.array([of(*r) if dynamic else 16 for r in IMAGE.resolutions.tolist()])
    waste = int((counts % sizes if drop else (-counts) % sizes).sum())
    bw, bh = IMAGE.resolutions[ids].T
    loss = float(crop_loss(w, h, bw, bh).mean())
    # the preset has buckets of fewer than G images, dropped whole: so may the fit here
    kwargs: dict[str, Any] = {"max_pixels": 1024**2, "drop_last": drop, "keep_every_image": False}
    fit, least = _least_or_fit(FI.fit_to_data, w, h, global_batch_size=g, max_waste=0.0, **kwargs)
    assert (fit.waste if least is None else least) <= waste
    fit = FI.fit_to_data(w, h, global_batch_size=g, max_waste=waste / n, **kwargs)
    assert fit.waste <= waste
    assert fit.mean_crop_loss <= loss + TOLERANCE


@pytest.mark.parametrize("drop", [True, False])
def test_the_presets_own_set_is_what_the_fit_returns_when_it_is_the_best(drop: bool) -> None:
    """Clips in exactly the preset's buckets, each whole global batches: nothing to gain."""
    shapes = [(832, 480), (480, 832)]
    w = np.array([s[0] for s in shapes for _ in range(16)], dtype=np.int64)
    h = np.array([s[1] for s in shapes for _ in range(16)], dtype=np.int64)
    f = np.full(32, 81, dtype=np.int64)
    fit = VF.fit_video_to_data(w, h, f, VIDEO, global_batch_size=8, max_waste=0.0, drop_last=drop)
    assert fit.waste == 0
    assert fit.mean_loss < TOLERANCE
    calc = fit.calculator()
    assert sorted(map(tuple, calc.resolutions.tolist())) == sorted(shapes)
