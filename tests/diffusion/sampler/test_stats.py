"""bucket_stats: crop loss, pixel budget, lock-step waste (via plan_epoch), table and PNG."""

from __future__ import annotations

import doctest
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dataorder.diffusion.sampler.stats as stats_module
from dataorder.core.partition import plan_epoch
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.sampler.stats import (
    bucket_stats,
    crop_loss,
    format_bucket_table,
    plot_bucket_stats,
    rich_bucket_table,
)
from dataorder.diffusion.scan.images import build_manifest

NEMO = MultiTierBucketCalculator(compat="nemo")  # 192x320, 192x256, 256x256, 256x192, 320x192


def test_docstring_examples() -> None:
    result = doctest.testmod(stats_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 3
    assert result.failed == 0


def test_crop_loss_formula() -> None:
    loss = crop_loss([1920, 1024, 1000, 300], [1080, 1024, 3000, 100], [1024] * 4, [1024] * 4)
    assert loss.tolist() == pytest.approx([1 - 1080 / 1920, 0.0, 2 / 3, 2 / 3])
    # symmetric in which of the two is wider, and broadcasts
    assert crop_loss([4], [3], [3], [4]).tolist() == pytest.approx([1 - 9 / 16])
    assert crop_loss(np.array([[2, 1]]), 1, 1, 1).shape == (1, 2)


def test_hand_computed_example() -> None:
    # 5 squares, 2 wide 320x100 images, 1 tall 100x400 image.
    w = [256] * 5 + [320, 320, 100]
    h = [256] * 5 + [100, 100, 400]
    st_ = bucket_stats(w, h, NEMO, num_replicas=2, batch_size=2, drop_last=True)
    assert st_.counts.tolist() == [1, 0, 5, 0, 2]
    wide_loss = 1 - (320 / 192) / (320 / 100)  # 320x100 in 320x192
    tall_loss = 1 - (100 / 400) / (192 / 320)  # 100x400 in 192x320
    assert st_.mean_crop_loss[2] == 0
    assert st_.mean_crop_loss[4] == pytest.approx(wide_loss)
    assert st_.mean_crop_loss[0] == pytest.approx(tall_loss)
    assert math.isnan(st_.mean_crop_loss[1])
    assert st_.over_10.tolist() == [1, 0, 0, 0, 2]
    assert st_.upscaled.tolist() == [1, 0, 0, 0, 2]  # 100 px sides grow to 192
    # global batch 2 x 2 = 4: 5 squares give 1 step and drop 1; 2 wide and 1 tall drop all
    assert st_.batches.tolist() == [0, 0, 1, 0, 0]
    assert st_.dropped.tolist() == [1, 0, 1, 0, 2]
    assert st_.padded.tolist() == [0] * 5
    o = st_.overall
    assert o["images"] == 8
    assert o["mean_crop_loss"] == pytest.approx((2 * wide_loss + tall_loss) / 8)
    assert o["share_over_10"] == pytest.approx(3 / 8)
    assert o["dropped"] == 4
    assert o["empty_buckets"] == 2
    assert o["buckets_below_one_global_batch"] == 2
    ratios = np.array([61440, 49152, 65536, 49152, 61440]) / 65536
    assert st_.budget_ratio.tolist() == pytest.approx(ratios.tolist())
    assert o["budget_mean_abs_dev"] == pytest.approx(
        (5 * 0 + 2 * (1 - ratios[4]) + (1 - ratios[0])) / 8
    )
    assert o["budget_max_over"] == 0.0

    shrink = bucket_stats(w, h, NEMO, num_replicas=2, batch_size=2, drop_last=False)
    # last smaller batch of ceil(t / R) per rank: 5 -> 4 + (1 + 1 pad); 2 -> 1 each; 1 -> 1 + pad
    assert shrink.batches.tolist() == [1, 0, 2, 0, 1]
    assert shrink.padded.tolist() == [1, 0, 1, 0, 0]
    assert shrink.dropped.tolist() == [0] * 5


@given(
    counts=st.lists(st.integers(0, 300), min_size=5, max_size=5),
    replicas=st.integers(1, 16),
    batch=st.integers(1, 8),
    drop_last=st.booleans(),
)
def test_waste_is_plan_epoch_per_bucket(
    counts: list[int], replicas: int, batch: int, drop_last: bool
) -> None:
    res = NEMO.resolutions
    w = np.repeat(res[:, 0], counts)
    h = np.repeat(res[:, 1], counts)
    stats = bucket_stats(w, h, NEMO, num_replicas=replicas, batch_size=batch, drop_last=drop_last)
    assert stats.counts.tolist() == counts
    for j, n in enumerate(counts):
        tail = "drop" if drop_last else "shrink"
        lay = plan_epoch(n, per_rank=batch, dp_size=replicas, tail=tail)
        assert stats.batches[j] == lay.num_batches
        assert stats.dropped[j] == lay.dropped
        assert stats.padded[j] == lay.padded
        if drop_last:
            assert stats.dropped[j] == n % (batch * replicas)
        else:
            assert stats.padded[j] < replicas
    if sum(counts):  # every image has exactly its bucket's shape
        assert stats.overall["mean_crop_loss"] == 0.0
    else:
        assert math.isnan(stats.overall["mean_crop_loss"])


def test_per_bucket_batch_sizes_and_manifest_input() -> None:
    calc = MultiTierBucketCalculator.from_preset("512p")
    rng = np.random.default_rng(3)
    h = rng.integers(100, 2000, 500)
    w = np.maximum(1, (h * np.exp(rng.uniform(-1.2, 1.2, 500))).astype(np.int64))
    sizes = [
        calc.get_dynamic_batch_size(b["resolution"], 8, (256, 256)) for b in calc.get_all_buckets()
    ]
    from_arrays = bucket_stats(w, h, calc, num_replicas=4, batch_size=sizes)
    manifest = build_manifest([f"{i}.jpg" for i in range(500)], w, h, calc)
    from_manifest = bucket_stats(manifest, num_replicas=4, batch_size=np.array(sizes))
    assert from_arrays.batch_sizes.tolist() == sizes
    for name in ("counts", "batches", "dropped", "over_10", "upscaled"):
        assert np.array_equal(getattr(from_arrays, name), getattr(from_manifest, name))
    assert from_arrays.overall == pytest.approx(from_manifest.overall, nan_ok=True)
    assert from_arrays.overall["budget_max_over"] == 0.0
    # the default set keeps every image within a few % of its bucket's shape
    assert from_arrays.overall["p95_crop_loss"] < 0.12


def test_argument_errors() -> None:
    manifest = build_manifest(["a"], [10], [10], NEMO)
    cases = [
        (lambda: bucket_stats([1], [1], NEMO, num_replicas=0), ValueError,
         "num_replicas must be an int in [1, 2147483648]; got num_replicas=0"),
        (lambda: bucket_stats([1], [1], NEMO, num_replicas=2**62), ValueError,
         "num_replicas must be an int in [1, 2147483648]; got num_replicas=4611686018427387904"),
        (lambda: bucket_stats([1], [1], NEMO, batch_size=0), ValueError,
         "batch_size must be an int in [1, 2147483648]; got batch_size=0"),
        (lambda: bucket_stats([1], [1], NEMO, batch_size=10**30), ValueError,
         f"batch_size must be an int in [1, 2147483648]; got batch_size={10**30}"),
        (lambda: bucket_stats([1], [1], NEMO, batch_size=[1, 2]), ValueError,
         "batch_size must be an int or a sequence of 5 ints (one per bucket); "
         "got batch_size=[1, 2]"),
        (lambda: bucket_stats([1], [1], NEMO, batch_size=[1, 1, 0, 1, 1]), ValueError,
         "batch_size[2] must be an int in [1, 2147483648]; got batch_size[2]=0"),
        (lambda: bucket_stats([1], [1], NEMO, drop_last=1), TypeError,
         "drop_last must be a bool; got drop_last=1"),
        (lambda: bucket_stats([1], [1]), TypeError, "pass heights and a MultiTierBucketCalculator"),
        (lambda: bucket_stats([1], None, NEMO), TypeError, "pass heights"),
        (lambda: bucket_stats([1.0], [1], NEMO), TypeError, "widths must be a 1-D array of ints"),
        (lambda: bucket_stats([0], [1], NEMO), ValueError, "widths[0] must be an int in"),
        (lambda: bucket_stats(manifest, calculator=NEMO), TypeError,
         "with a Manifest, pass neither heights nor calculator"),
        (lambda: bucket_stats(0), TypeError,  # type: ignore[arg-type]
         "source must be a Manifest or an array of widths; got source=0"),
        (lambda: bucket_stats([1], [1], NEMO, frames=[1]), TypeError,
         "frames must be None with an image calculator; got frames=[1]"),
        (lambda: format_bucket_table(0), TypeError,  # type: ignore[arg-type]
         "stats must be a BucketStats (from bucket_stats); got stats=0"),
    ]  # fmt: skip
    for call, exc, message in cases:
        with pytest.raises(exc, match=re.escape(message)):
            call()


def test_markdown_table() -> None:
    stats = bucket_stats([256, 320, 300], [256, 100, 100], NEMO, num_replicas=2, batch_size=1)
    text = format_bucket_table(stats)
    lines = text.splitlines()
    assert lines[0].startswith("| id | resolution | AR | images | mean crop % | p95 crop % |")
    assert lines[1].startswith("| --- | --- | ---: |")
    assert lines[2 + 2] == "| 2 | 256x256 | 1.000 | 1 | 0.0 | 0.0 | 0 | 0 | 1.000 | 1 | 0 | 1 | 0 |"
    assert lines[2 + 1].startswith("| 1 | 192x256 | 0.750 | 0 | - | - |")
    assert len([x for x in lines if x.startswith("| ")]) == 2 + len(NEMO)
    assert "3 images in 5 buckets (3 empty)" in text
    assert "with 2 replicas: 1 steps, 1 samples dropped (33.33 %)" in text


def test_rich_table() -> None:
    pytest.importorskip("rich")
    from rich.console import Console

    stats = bucket_stats([256], [256], NEMO)
    console = Console(width=200, record=True)
    console.print(rich_bucket_table(stats))
    out = console.export_text()
    assert "256x256" in out
    assert "1 images in 5 buckets" in out


def test_png_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    calc = MultiTierBucketCalculator.from_preset("1024p")
    rng = np.random.default_rng(0)
    h = rng.integers(500, 3000, 2000)
    w = np.maximum(1, (h * np.exp(rng.uniform(-1, 1, 2000))).astype(np.int64))
    before = set(sys.modules)
    stats = bucket_stats(w, h, calc, num_replicas=8, batch_size=4, drop_last=False)
    out = tmp_path / "buckets.png"
    plot_bucket_stats(stats, out, dpi=50)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5000
    assert "matplotlib.pyplot" not in set(sys.modules) - before  # no global pyplot state


def test_plot_arguments_are_checked_before_anything_is_drawn(tmp_path: Path) -> None:
    stats = bucket_stats([256], [256], NEMO)
    cases = [
        (lambda: plot_bucket_stats(0, tmp_path / "x.png"), TypeError,  # type: ignore[arg-type]
         "stats must be a BucketStats (from bucket_stats); got stats=0"),
        (lambda: plot_bucket_stats(stats, 0), TypeError,  # type: ignore[arg-type]
         "path must be a path (a str or os.PathLike); got path=0"),
        (lambda: plot_bucket_stats(stats, tmp_path / "x.png", dpi=2**62), ValueError,
         f"dpi must be an int in [1, 2400]; got dpi={2**62}"),
        (lambda: plot_bucket_stats(stats, tmp_path / "x.png", dpi=0), ValueError,
         "dpi must be an int in [1, 2400]; got dpi=0"),
        (lambda: rich_bucket_table(None), TypeError,  # type: ignore[arg-type]
         "stats must be a BucketStats (from bucket_stats); got stats=None"),
    ]  # fmt: skip
    for call, exc, message in cases:
        with pytest.raises(exc, match=re.escape(message)):
            call()
    assert not (tmp_path / "x.png").exists()


def test_missing_optional_dependencies_name_their_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stats = bucket_stats([256], [256], NEMO)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'dataorder[plots]'")):
        plot_bucket_stats(stats, tmp_path / "x.png")
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "rich.table", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'dataorder[cli]'")):
        rich_bucket_table(stats)
    assert "| 2 | 256x256 |" in format_bucket_table(stats)  # markdown needs neither


def test_longest_run_is_the_samplers() -> None:
    import warnings

    from dataorder import BaseMultiresolutionDataset, SequentialBucketSampler

    rng = np.random.default_rng(5)
    w, h = rng.integers(200, 1500, 3000), rng.integers(200, 1500, 3000)
    calc = MultiTierBucketCalculator.from_preset("512p")
    ds = BaseMultiresolutionDataset.from_sizes(w, h, calc)
    for order in ("sequential", "interleaved"):
        st = bucket_stats(
            w, h, calc, num_replicas=4, batch_size=3, bucket_order=order, interleave_unit=8, seed=7
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = SequentialBucketSampler(
                ds, base_batch_size=3, num_replicas=4, rank=0, seed=7, bucket_order=order,
                interleave_unit=8 if order == "interleaved" else None,
            )  # fmt: skip
        assert st.overall["longest_run"] == s.longest_shape_run(0)
        assert st.overall["batches"] == len(s)
    with pytest.raises(ValueError, match="bucket_order must be one of 'sequential', "):
        bucket_stats(w, h, calc, bucket_order="random")
