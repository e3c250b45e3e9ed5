"""MultiTierBucketCalculator: validation, the default bucket sets, exact vectorised assignment."""

from __future__ import annotations

import copy
import doctest
import itertools
import json
import logging
import math
import pickle
import re
import subprocess
import sys
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dataorder._validate as validate_module
import dataorder.diffusion.buckets.rules as bucket_rules_module
import dataorder.diffusion.calculators.image as buckets_module
from dataorder._validate import as_field
from dataorder.diffusion.buckets.cost import CostModel, image_tokens
from dataorder.diffusion.buckets.lattice import best_resolution, default_resolutions
from dataorder.diffusion.buckets.nemo_rule import NemoBucketRule
from dataorder.diffusion.buckets.rules import BucketRule, CostModelBatchSizes, DefaultBucketRule
from dataorder.diffusion.calculators.image import (
    DEFAULT_MAX_PIXELS,
    MAX_IMAGE_SIDE,
    PRESETS,
    MultiTierBucketCalculator,
)
from dataorder.diffusion.calculators.video import VideoBucketCalculator

QUANTS = (8, 16, 32, 64)
MODES = (
    {},
    {"no_upscale": True},
    {"compat": "nemo"},
)


def _calc(**kw: object) -> MultiTierBucketCalculator:
    return MultiTierBucketCalculator(**kw)  # type: ignore[arg-type]


def test_module_imports_neither_torch_nor_pillow() -> None:
    code = (
        "import sys, dataorder.diffusion.calculators.image; "
        "assert 'torch' not in sys.modules and 'PIL' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("module", [buckets_module, bucket_rules_module], ids=lambda m: m.__name__)
def test_docstring_examples(module: Any) -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 3
    assert result.failed == 0


# -- validation: each message names the argument and the value, and matches its check ----------

BAD_CONSTRUCTOR = [
    (
        {"quantization": 0},
        ValueError,
        "quantization must be an int in [1, 1048576]; got quantization=0",
    ),
    (
        {"quantization": -64},
        ValueError,
        "quantization must be an int in [1, 1048576]; got quantization=-64",
    ),
    (
        {"quantization": True},
        TypeError,
        "quantization must be an int in [1, 1048576]; got quantization=True",
    ),
    (
        {"quantization": 64.0},
        TypeError,
        "quantization must be an int in [1, 1048576]; got quantization=64.0",
    ),
    *(
        (
            {"max_pixels": v},
            exc,
            f"max_pixels must be an int in [4096, 1099511627776]; got max_pixels={v}",
        )
        for v, exc in (
            (0, ValueError),
            (-5, ValueError),
            (False, TypeError),
            (2**40 + 1, ValueError),
        )
    ),
    (
        {"quantization": 64, "max_pixels": 4095},
        ValueError,
        "max_pixels must be an int in [4096, 1099511627776]; got max_pixels=4095",
    ),
    ({"debug_mode": 1}, TypeError, "debug_mode must be a bool; got debug_mode=1"),
    ({"no_upscale": "yes"}, TypeError, "no_upscale must be a bool; got no_upscale='yes'"),
    (
        {"compat": "NeMo"},
        ValueError,
        "compat must be one of 'default', 'nemo'; got compat='NeMo'",
    ),
    (
        {"max_batch_size": 0},
        ValueError,
        "max_batch_size must be a positive int; got max_batch_size=0",
    ),
    (
        {"max_batch_size": True},
        TypeError,
        "max_batch_size must be a positive int; got max_batch_size=True",
    ),
    ({"aspect_ratios": []}, ValueError, "aspect_ratios must be a non-empty sequence; got "),
    ({"aspect_ratios": "16:9"}, TypeError, "aspect_ratios must be a sequence of aspect ratios"),
    (
        {"aspect_ratios": [0.0]},
        ValueError,
        re.compile(r"aspect_ratios\[0\] must be a positive finite float"),
    ),
    (
        {"aspect_ratios": [1.0, float("nan")]},
        ValueError,
        re.compile(
            r"aspect_ratios\[1\] must be a positive finite float.*got aspect_ratios\[1\]=nan"
        ),
    ),
    (
        {"aspect_ratios": [True]},
        TypeError,
        re.compile(r"aspect_ratios\[0\] must be .*got aspect_ratios\[0\]=True"),
    ),
    (
        {"aspect_ratios": [(16, 0)]},
        ValueError,
        re.compile(
            r"aspect_ratios\[0\]\[1\] must be a positive int; got aspect_ratios\[0\]\[1\]=0"
        ),
    ),
    (
        {"aspect_ratios": [(1, 2, 3)]},
        ValueError,
        re.compile(r"aspect_ratios\[0\] must be .*\(1, 2, 3\)"),
    ),
    (
        {"aspect_ratios": ["16x9"]},
        ValueError,
        re.compile(r"aspect_ratios\[0\] must be .*'W:H'.*'16x9'"),
    ),
    ({"aspect_ratios": [None]}, TypeError, re.compile(r"aspect_ratios\[0\] must be .*None")),
    (
        {"aspect_ratios": [1e-320]},
        ValueError,
        "aspect_ratios[0] must be a ratio between 1/10000 and 10000; got aspect_ratios[0]=1e-320",
    ),
    (
        {"aspect_ratios": ["20001:2"]},
        ValueError,
        "aspect_ratios[0] must be a ratio between 1/10000 and 10000; "
        "got aspect_ratios[0]='20001:2'",
    ),
    (
        {"compat": "nemo", "aspect_ratios": [1.0]},
        ValueError,
        re.compile(r"aspect_ratios must be None with compat='nemo'"),
    ),
    (
        {"compat": "nemo", "no_upscale": True},
        ValueError,
        re.compile(r"no_upscale must be False with compat='nemo'.*got no_upscale=True"),
    ),
]


@pytest.mark.parametrize(("kwargs", "exc", "message"), BAD_CONSTRUCTOR)
def test_constructor_rejects(
    kwargs: dict[str, object], exc: type[Exception], message: str | re.Pattern[str]
) -> None:
    # Plain strings are the whole message's start, matched literally; patterns are regexes.
    with pytest.raises(exc, match=re.escape(message) if isinstance(message, str) else message):
        _calc(**kwargs)


def test_max_pixels_of_exactly_one_quantum_squared_is_accepted() -> None:
    for compat in ("default", "nemo"):
        calc = MultiTierBucketCalculator(64, 4096, compat=compat)
        assert [b["resolution"] for b in calc.get_all_buckets()] == [(64, 64)]


def test_preset_errors() -> None:
    with pytest.raises(
        ValueError, match=r"preset must be one of '256p', .*'1536p'; got preset='2k'"
    ):
        MultiTierBucketCalculator.from_preset("2k")
    with pytest.raises(
        ValueError, match=r"quantization must be an int in \[1, 1048576\]; got quantization=0"
    ):
        MultiTierBucketCalculator.from_preset("512p", 0)
    with pytest.raises(TypeError, match="sets max_pixels from the preset"):
        MultiTierBucketCalculator.from_preset("512p", max_pixels=10)


def test_a_quantization_the_default_budget_cannot_hold_is_refused_not_a_hang() -> None:
    """Regression: with max_pixels None (65,536 pixels) a 257x257 cell does not fit, and
    the bucket search never ended. Now the refusal names both arguments."""
    message = "quantization must be at most 256 when max_pixels is None (the default budget of"
    for compat in ("default", "nemo"):
        with pytest.raises(ValueError, match=re.escape(message)):
            MultiTierBucketCalculator(257, compat=compat)
        assert len(MultiTierBucketCalculator(256, compat=compat)) >= 1
        assert len(MultiTierBucketCalculator(257, 257**2, compat=compat)) >= 1
    with pytest.raises(ValueError, match=re.escape(message)):
        MultiTierBucketCalculator.fit_to_data(
            [100, 200], [100, 100], global_batch_size=1, quantization=257
        )
    preset = "quantization must be at most 256 for preset '256p' (one quantization x quantization"
    with pytest.raises(ValueError, match=re.escape(preset)):
        MultiTierBucketCalculator.from_preset("256p", quantization=257)
    assert len(MultiTierBucketCalculator.from_preset("1536p", quantization=1536)) == 1
    with pytest.raises(ValueError, match="quantization must be at most 1536 for preset '1536p'"):
        MultiTierBucketCalculator.from_preset("1536p", quantization=1537)
    # The search itself ends on a budget with no cell: no bucket, never a loop.
    assert best_resolution(1.0, 65_536, 257) is None
    assert default_resolutions([1.0, 2.0], 65_536, 257) == []


@pytest.mark.parametrize("kw", MODES)
def test_method_argument_errors(kw: dict[str, object]) -> None:
    calc = MultiTierBucketCalculator.from_preset("512p", **kw)  # type: ignore[arg-type]
    k = len(calc)
    cases = [
        (lambda: calc.get_bucket_for_image(0, 10), ValueError,
         rf"image_width must be an int in \[1, {MAX_IMAGE_SIDE}\]; got image_width=0"),
        (lambda: calc.get_bucket_for_image(10, -3), ValueError, "got image_height=-3"),
        (lambda: calc.get_bucket_for_image(2**31, 10), ValueError, "got image_width=2147483648"),
        (lambda: calc.get_bucket_for_image(True, 10), TypeError, "got image_width=True"),
        (lambda: calc.get_bucket_for_image(10.0, 10), TypeError, "got image_width=10.0"),
        (lambda: calc.assign([5, 0], [1, 1]), ValueError,
         rf"widths\[1\] must be an int in \[1, {MAX_IMAGE_SIDE}\]; got widths\[1\]=0"),
        (lambda: calc.assign([5], [-2]), ValueError, r"got heights\[0\]=-2"),
        (lambda: calc.assign([1.5], [1]), TypeError, "widths must be an array of ints"),
        (lambda: calc.assign([True], [1]), TypeError, "widths must be an array of ints"),
        (lambda: calc.assign([1, 2], [1]), ValueError, "same shape"),
        (lambda: calc.get_bucket_by_id(-1), ValueError,
         rf"bucket_id must be an int in \[0, {k - 1}\]; got bucket_id=-1"),
        (lambda: calc.get_bucket_by_id(k), ValueError, f"got bucket_id={k}"),
        (lambda: calc.get_bucket_by_id(True), TypeError, "got bucket_id=True"),
        (lambda: calc.get_bucket_by_resolution(0, 64), ValueError, "got width=0"),
        (lambda: calc.get_dynamic_batch_size((0, 64)), ValueError,
         r"resolution\[0\] must be a positive int; got resolution\[0\]=0"),
        (lambda: calc.get_dynamic_batch_size("64x64"), TypeError,  # type: ignore[arg-type]
         "resolution must be a .width, height. pair"),
        (lambda: calc.get_dynamic_batch_size((64, 64), 0), ValueError,
         "base_batch_size must be a positive int; got base_batch_size=0"),
        (lambda: calc.get_dynamic_batch_size((64, 64), 4, (512,)), TypeError,
         r"base_resolution must be a .width, height. pair.*got base_resolution=\(512,\)"),
    ]  # fmt: skip
    for call, exc, message in cases:
        with pytest.raises(exc, match=message):
            call()


def test_from_config_names_the_bad_field() -> None:
    """A field of a saved config that the constructor refuses is named as
    the field, never left to numpy ("inhomogeneous shape")."""
    fitted = MultiTierBucketCalculator.fit_to_data(
        [100, 200, 300] * 5, [100, 100, 100] * 5, global_batch_size=1, max_waste=0.5
    ).config()
    plain = MultiTierBucketCalculator(64, 512**2, aspect_ratios=["1:1"], cost_model=CostModel())
    cases = [
        (fitted, "resolutions", 0, "x", TypeError,
         "config['resolutions'][0] must be a (width, height) pair of ints; got config['resolu"),
        (fitted, "resolutions", 0, [1], ValueError, "config['resolutions'][0] must be a (width, "),
        (fitted, "resolutions", 0, [64, 1.5], TypeError,
         "config['resolutions'][0][1] must be a positive int; got config['resolutions'][0][1]=1.5"),
        (fitted, "resolutions", None, "x", TypeError, "config['resolutions'] must be an array of"),
        (fitted, "thresholds", 0, "x", TypeError, "config['thresholds'][0] must be a (p, q) pair"),
        (fitted, "quantization", None, "x", TypeError, "config['quantization'] must be an int in"),
        (plain.config(), "aspect_ratios", 0, "wide", ValueError,
         "config['aspect_ratios'][0] must be a positive finite float or a (w, h) pair of posi"),
        (plain.config(), "no_upscale", None, 1, TypeError, "config['no_upscale'] must be a bool"),
        (plain.config(), "max_pixels", None, 100, ValueError,
         "config['max_pixels'] must be an int in [4096, 1099511627776]; got config['max_pixels"),
        (plain.config(), "cost_model", "attention_cost", -1, ValueError,
         "config['cost_model']['attention_cost'] must be a non-negative number; got config['"),
        (plain.config(), "patch_side", None, 0, ValueError, "config['patch_side'] must be a posi"),
    ]  # fmt: skip
    for base, field, index, value, exc, message in cases:
        config = copy.deepcopy(base)
        if index is None:
            config[field] = value
        else:
            config[field][index] = value
        with pytest.raises(exc, match="^" + re.escape(message)):
            MultiTierBucketCalculator.from_config(config)


@pytest.mark.parametrize(
    ("widths", "shown"),
    [
        (np.array([2**63], dtype=np.uint64), "widths[0]=9223372036854775808"),  # not -2**63
        (np.array([7, 2**64 - 1], dtype=np.uint64), "widths[1]=18446744073709551615"),
        (np.array([-1], dtype=np.int8), "widths[0]=-1"),
        (np.array([2**31], dtype=np.uint32), "widths[0]=2147483648"),
        ([5, 2**70], "widths[1]=1180591620717411303424"),  # numpy holds it as an object
        ([5, -(2**70)], "widths[1]=-1180591620717411303424"),
    ],
)
def test_sizes_are_reported_as_given_before_any_cast(widths: object, shown: str) -> None:
    """Regression: a uint64 of 2**63 was cast to int64 first and reported as
    -9223372036854775808. Image and video assign check sizes in the input's own dtype."""
    n = len(widths)  # type: ignore[arg-type]
    image = MultiTierBucketCalculator.from_preset("512p")
    with pytest.raises(
        ValueError, match=re.escape(f"must be an int in [1, 2147483647]; got {shown}")
    ):
        image.assign(widths, [64] * n)
    video = VideoBucketCalculator.from_preset("wan2.1-480p")
    with pytest.raises(
        ValueError, match=re.escape(f"must be an int in [1, 2147483647]; got {shown}")
    ):
        video.assign(widths, [64] * n, [5] * n)
    legal = np.array([64, 2**31 - 1], dtype=np.uint64)  # legal values in any int dtype are fine
    assert (
        image.assign(legal, [64, 64]).tolist() == image.assign([64, 2**31 - 1], [64, 64]).tolist()
    )
    with pytest.raises(TypeError, match=re.escape("widths must be an array of ints; got widths=")):
        image.assign([[1, 2], [3]], [[1, 2], [3]])  # ragged: named, not numpy's shape error


def test_as_field_relabels_template_messages_only() -> None:
    fields = {"max_pixels": "config['max_pixels']", "resolutions": "config['resolutions']"}
    cases = [
        (ValueError("max_pixels must be an int in [1, 2]; got max_pixels=3"),
         "config['max_pixels'] must be an int in [1, 2]; got config['max_pixels']=3"),
        (TypeError("resolutions[0][1] must be an int; got resolutions[0][1]='x'"),
         "config['resolutions'][0][1] must be an int; got config['resolutions'][0][1]='x'"),
        (ValueError("max_pixels must be set"), "config['max_pixels'] must be set"),
        (ValueError("quantization must be 1; got quantization=2"), None),  # not a field given
        (ValueError("config must have exactly the keys"), None),  # not the template
        (KeyError("max_pixels must be x"), None),  # not a check's error
    ]  # fmt: skip
    for error, message in cases:
        got = as_field(error, fields)
        assert type(got) is type(error)
        assert str(got) == (str(error) if message is None else message)
        assert (got is error) == (message is None)
    result = doctest.testmod(validate_module)
    assert (result.attempted, result.failed) == (1, 0)


def test_from_config_is_strict() -> None:
    good = MultiTierBucketCalculator.from_preset("768p", 16, no_upscale=True).config()
    with pytest.raises(ValueError, match=r"missing \['no_upscale'\], unknown \[\]"):
        MultiTierBucketCalculator.from_config({k: v for k, v in good.items() if k != "no_upscale"})
    with pytest.raises(ValueError, match=r"missing \[\], unknown \['extra'\]"):
        MultiTierBucketCalculator.from_config({**good, "extra": 1})
    with pytest.raises(
        ValueError, match=r"config\['version'\] must be 1; got config\['version'\]=2"
    ):
        MultiTierBucketCalculator.from_config({**good, "version": 2})
    with pytest.raises(
        ValueError, match=r"config\['quantization'\] must be an int in \[1, 1048576\]; got config"
    ):
        MultiTierBucketCalculator.from_config({**good, "quantization": 0})
    with pytest.raises(TypeError, match="config must be a mapping"):
        MultiTierBucketCalculator.from_config([("version", 1)])  # type: ignore[arg-type]


# -- the bucket sets ---------------------------------------------------------------------------


@pytest.mark.parametrize("q", QUANTS)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_default_presets_are_symmetric_quantised_and_within_budget(preset: str, q: int) -> None:
    calc = MultiTierBucketCalculator.from_preset(preset, q)
    budget = PRESETS[preset]
    res = [b["resolution"] for b in calc.get_all_buckets()]
    assert 1 <= len(res) <= 40
    assert res == [(h, w) for w, h in reversed(res)]  # bucket K-1-i is bucket i transposed
    assert all(w % q == 0 and h % q == 0 and w * h <= budget for w, h in res)
    ars = [Fraction(w, h) for w, h in res]
    assert ars == sorted(set(ars))  # ids in strictly ascending aspect ratio, one per ratio
    assert res[0] != (1, 1) or len(res) == 1
    assert any(w == h for w, h in res)  # 1:1 is a default ratio; a square always fits
    for i, b in enumerate(calc.get_all_buckets()):
        w, h = b["resolution"]
        assert b == {"id": i, "resolution": (w, h), "aspect_ratio": w / h, "pixels": w * h}


# The smallest share of the budget any default bucket uses. Coarse lattices (q=64 at 256p/512p)
# cannot get closer without giving up aspect ratios; finer ones stay within a few per cent.
MIN_BUDGET_SHARE = {8: 0.93, 16: 0.87, 32: 0.75, 64: 0.62}


@pytest.mark.parametrize("q", QUANTS)
def test_default_presets_stay_close_to_the_budget(q: int) -> None:
    for preset, budget in PRESETS.items():
        res = MultiTierBucketCalculator.from_preset(preset, q).resolutions
        share = res[:, 0] * res[:, 1] / budget
        assert share.max() <= 1.0
        assert share.min() >= MIN_BUDGET_SHARE[q], (preset, share.min())
        if budget >= 768 * 768 and q <= 64:
            assert share.min() >= 0.87


def _log_uniform_crop(calc: MultiTierBucketCalculator) -> tuple[float, float]:
    rng = np.random.default_rng(2026)
    x = np.exp(rng.uniform(-math.log(3), math.log(3), 50_000))
    la = np.log(calc.resolutions[:, 0] / calc.resolutions[:, 1])
    loss = 1 - np.exp(-np.abs(np.log(x)[:, None] - la[None, :]).min(axis=1))
    return float(loss.mean()), float(np.percentile(loss, 95))


@pytest.mark.parametrize(
    ("preset", "q"),
    [("768p", 64), ("1024p", 64), ("1536p", 64)] + [(p, 16) for p in PRESETS],
)
def test_default_presets_meet_the_crop_targets(preset: str, q: int) -> None:
    calc = MultiTierBucketCalculator.from_preset(preset, q)
    mean, p95 = _log_uniform_crop(calc)
    assert len(calc) <= 40
    assert mean <= 0.03
    assert p95 <= 0.07


def test_nemo_1024p_misses_the_crop_targets_by_far() -> None:
    mean, p95 = _log_uniform_crop(MultiTierBucketCalculator.from_preset("1024p", compat="nemo"))
    assert mean > 0.09
    assert p95 > 0.3


def test_golden_default_1024p_buckets() -> None:
    # Pinned: a change here changes every manifest, so it must come with a BUCKETS_VERSION bump.
    half = [
        (576, 1728), (576, 1600), (640, 1600), (640, 1536), (640, 1472), (704, 1472),
        (704, 1408), (704, 1344), (768, 1344), (768, 1280), (768, 1216), (832, 1216),
        (896, 1152), (896, 1088), (960, 1088),
    ]  # fmt: skip
    expected = [*half, (1024, 1024), *[(h, w) for w, h in reversed(half)]]
    calc = MultiTierBucketCalculator.from_preset("1024p")
    assert [b["resolution"] for b in calc.get_all_buckets()] == expected
    assert buckets_module.BUCKETS_VERSION == 1


def test_common_formats_get_exact_buckets_on_a_fine_lattice() -> None:
    calc = MultiTierBucketCalculator.from_preset("1024p", 16)
    for w, h in [(4, 3), (3, 2), (16, 9), (1, 1), (2, 1), (3, 4), (2, 3), (9, 16)]:
        bw, bh = calc.get_bucket_for_image(w * 240, h * 240)["resolution"]
        assert Fraction(bw, bh) == Fraction(w, h) or abs(bw / bh / (w / h) - 1) < 0.012


@given(
    q=st.integers(1, 128),
    scale=st.floats(1.0, 400.0),
    ratios=st.lists(
        st.one_of(
            st.floats(0.1, 10.0),
            st.tuples(st.integers(1, 30), st.integers(1, 30)),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_custom_ratio_sets_are_symmetric_and_within_budget(
    q: int, scale: float, ratios: list[float | tuple[int, int]]
) -> None:
    budget = int(q * q * scale)
    calc = MultiTierBucketCalculator(q, budget, aspect_ratios=ratios)
    res = [tuple(r) for r in calc.resolutions.tolist()]
    assert res == [(h, w) for w, h in reversed(res)]
    assert all(w % q == 0 and h % q == 0 and 0 < w * h <= budget for w, h in res)
    assert len(res) <= 2 * len(ratios) + 1


def test_string_and_pair_ratios_are_the_same_ratio() -> None:
    a = MultiTierBucketCalculator(16, 512 * 512, aspect_ratios=["16:9", "1:1"])
    b = MultiTierBucketCalculator(16, 512 * 512, aspect_ratios=[(9, 16), (1, 1)])
    assert a.get_all_buckets() == b.get_all_buckets()
    assert [tuple(r) for r in a.resolutions.tolist()] == [(384, 672), (512, 512), (672, 384)]


def test_best_resolution_prefers_exact_ratio_near_the_budget() -> None:
    # 16:9 under 1024x1024 at q=16: 1360x768 (AR 1.771, 99.6 % of budget) vs 1365.3 exact.
    assert best_resolution(16 / 9, 1024 * 1024, 16) == (1360, 768)
    assert best_resolution(1.0, 1000, 10) == (30, 30)


def test_none_budget_is_nemo_default_in_both_modes() -> None:
    assert MultiTierBucketCalculator().max_pixels == DEFAULT_MAX_PIXELS == 65_536
    assert MultiTierBucketCalculator(compat="nemo").max_pixels == 65_536


def test_lookups_return_copies() -> None:
    calc = MultiTierBucketCalculator.from_preset("512p")
    first = calc.get_all_buckets()
    first[0]["resolution"] = (1, 1)
    first.clear()
    calc.get_bucket_by_id(0)["pixels"] = -1
    calc.get_bucket_for_image(10, 10)["id"] = 99
    b = calc.get_bucket_by_resolution(512, 512)
    assert b is not None
    b["id"] = 77
    assert calc.get_all_buckets()[0]["resolution"] == (256, 768)
    assert calc.get_bucket_by_id(0)["pixels"] == 256 * 768
    assert calc.get_bucket_by_resolution(512, 512) == calc.get_bucket_by_id(7)
    assert calc.get_bucket_by_resolution(512, 511) is None
    assert calc.resolutions.flags.writeable  # a fresh array each time
    calc.resolutions[0, 0] = 0
    assert calc.resolutions[0, 0] == 256


def test_config_round_trip_through_json() -> None:
    calcs = [
        MultiTierBucketCalculator(),
        MultiTierBucketCalculator(compat="nemo", max_batch_size=64),
        MultiTierBucketCalculator.from_preset("1024p", 16, no_upscale=True, max_batch_size=9),
        MultiTierBucketCalculator(8, 300_000, aspect_ratios=[1.3, (21, 9), "4:5"]),
    ]
    for calc in calcs:
        config = json.loads(json.dumps(calc.config()))
        again = MultiTierBucketCalculator.from_config(config)
        assert again == calc
        assert hash(again) == hash(calc)
        assert again.get_all_buckets() == calc.get_all_buckets()
    assert calcs[0] != calcs[1]
    assert calcs[0] != "not a calculator"


def test_debug_mode_logs_the_table(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="dataorder.diffusion.calculators.image"):
        MultiTierBucketCalculator(64, debug_mode=True, compat="nemo")
    assert "5 buckets, max_pixels=65536" in caplog.text
    assert "320x192" in caplog.text
    assert "MultiTierBucketCalculator(quantization=64" in repr(MultiTierBucketCalculator())


# -- assignment ----------------------------------------------------------------------------


def _reference_default(calc: MultiTierBucketCalculator, w: int, h: int) -> int:
    """The rule of the module docstring, written independently of the implementation."""
    res = calc.resolutions.tolist()
    cands = list(range(len(res)))
    if calc.no_upscale:
        fit = [k for k in cands if res[k][0] <= w and res[k][1] <= h]
        cands = fit or cands

    def key(k: int) -> tuple[Fraction, Fraction, int]:
        bw, bh = res[k]
        dist = Fraction(w * bh, h * bw)
        return (max(dist, 1 / dist), Fraction(max(bw, bh), min(bw, bh)), k)

    return min(cands, key=key)


def _reference_nemo(calc: MultiTierBucketCalculator, w: int, h: int) -> int:
    x = w / h
    return min(range(len(calc)), key=lambda k: abs(calc.get_bucket_by_id(k)["aspect_ratio"] - x))


def _near_threshold_sizes(calc: MultiTierBucketCalculator) -> list[tuple[int, int]]:
    """Images at, or within a hair of, every decision threshold of ``calc``."""
    res = calc.resolutions.tolist()
    sizes: list[tuple[int, int]] = []
    for (w1, h1), (w2, h2) in itertools.pairwise(res):
        if calc.compat == "nemo":
            mid = Fraction(w1, h1) / 2 + Fraction(w2, h2) / 2  # NeMo's linear midpoint
            sizes.append((mid.numerator, mid.denominator))
            t = float(mid)
        else:
            t = math.sqrt(w1 * w2 / (h1 * h2))  # geometric mean: the log-space midpoint
            prod = Fraction(w1 * w2, h1 * h2)
            num, den = math.isqrt(prod.numerator), math.isqrt(prod.denominator)
            if num * num == prod.numerator and den * den == prod.denominator:
                sizes.append((num, den))  # an exact tie
        for bound in (10, 1000, 10**5, 10**8, 2 * 10**9):
            f = Fraction(t).limit_denominator(bound)
            for df in (Fraction(0), Fraction(1, 10**9), Fraction(-1, 10**9)):
                g = (f + df).limit_denominator(bound * 10)
                sizes.append((g.numerator, g.denominator))
    sizes = [(w, h) for w, h in sizes if 0 < w <= MAX_IMAGE_SIDE and 0 < h <= MAX_IMAGE_SIDE]
    return sizes + [(h, w) for w, h in sizes]


def _check_assign(calc: MultiTierBucketCalculator, sizes: list[tuple[int, int]]) -> None:
    w = np.array([s[0] for s in sizes], dtype=np.int64)
    h = np.array([s[1] for s in sizes], dtype=np.int64)
    got = calc.assign(w, h)
    ref = _reference_nemo if calc.compat == "nemo" else _reference_default
    for i, (a, b) in enumerate(sizes):
        one = calc.get_bucket_for_image(a, b)["id"]
        assert got[i] == one == ref(calc, a, b), (a, b, int(got[i]), one)


CALCS = [
    MultiTierBucketCalculator.from_preset("256p"),
    MultiTierBucketCalculator.from_preset("1024p"),
    MultiTierBucketCalculator.from_preset("768p", 16, no_upscale=True),
    MultiTierBucketCalculator.from_preset("256p", no_upscale=True),
    MultiTierBucketCalculator(1, 4096, aspect_ratios=[(1, 1), (4, 1)]),
    MultiTierBucketCalculator(1, 4096, aspect_ratios=[(4, 1)]),  # no square: a 1:1 image ties
    # Not a staircase (a width falls along the ids): no_upscale takes its grouped path.
    MultiTierBucketCalculator(
        16, 200_000, aspect_ratios=[(7, 1), (15, 2), (13, 2)], no_upscale=True
    ),
    MultiTierBucketCalculator(compat="nemo"),
    MultiTierBucketCalculator.from_preset("1536p", compat="nemo"),
    MultiTierBucketCalculator(8, 512 * 512, compat="nemo"),
]


@pytest.mark.parametrize("calc", CALCS, ids=repr)
def test_assign_equals_the_one_image_rule_at_and_near_every_threshold(
    calc: MultiTierBucketCalculator,
) -> None:
    sizes = _near_threshold_sizes(calc)
    assert sizes
    _check_assign(calc, sizes)


@pytest.mark.parametrize("calc", CALCS, ids=repr)
@given(
    sizes=st.lists(
        st.tuples(
            st.one_of(st.integers(1, 5000), st.integers(1, MAX_IMAGE_SIDE)),
            st.one_of(st.integers(1, 5000), st.integers(1, MAX_IMAGE_SIDE)),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_assign_equals_the_one_image_rule(
    calc: MultiTierBucketCalculator, sizes: list[tuple[int, int]]
) -> None:
    _check_assign(calc, sizes)


def test_no_upscale_paths() -> None:
    assert all(c._assigner._staircase for c in CALCS[:4])  # the default presets
    assert all(c._assigner._stairs is not None for c in CALCS[2:4])  # no_upscale: tables
    assert not CALCS[6]._assigner._staircase
    assert [tuple(r) for r in CALCS[6].resolutions.tolist()] == [
        (160, 1200), (160, 1120), (176, 1136), (1136, 176), (1120, 160), (1200, 160),
    ]  # fmt: skip
    # Inside 1130x1135 only ids 1 and 4 fit, not a run: the grouped path must skip id 2, 3.
    assert CALCS[6].get_bucket_for_image(1130, 1135)["resolution"] == (160, 1120)
    assert CALCS[6].assign([1130, 1135], [1135, 1130]).tolist() == [1, 4]


def test_no_upscale_at_the_largest_budget_searches_instead_of_tabulating() -> None:
    """A 10,000:1 bucket on the 1-pixel lattice at 2**40 pixels is 10**8 pixels wide: its
    no-upscale tables took 3 GB and 20 s to build. Past 2**20 entries the run is searched."""
    calc = MultiTierBucketCalculator(1, 2**40, aspect_ratios=[10_000, 1.0], no_upscale=True)
    assert calc._assigner._staircase
    assert calc._assigner._stairs is None  # searched, not tabulated
    side = int(calc.resolutions.max())
    assert side > 10**8
    sizes = [(side, 2**20), (side - 1, 2**20), (2**20, 2**20), (2**20 - 1, 2**20), (1, 1)]
    sizes += [(2**31 - 1, 2**31 - 1), (2**31 - 1, 104_857), (104_857, 2**31 - 1), (5, 2**31 - 1)]
    _check_assign(calc, sizes)
    assert calc.assign([side - 1], [2**20]).tolist() == [1]  # the wide bucket does not fit


def test_exact_ties_follow_the_documented_rule() -> None:
    calc = MultiTierBucketCalculator(1, 4096, aspect_ratios=[(1, 1), (4, 1)])
    assert [tuple(r) for r in calc.resolutions.tolist()] == [(32, 128), (64, 64), (128, 32)]
    # 2:1 is exactly halfway (in log) between 1:1 and 4:1: the squarer bucket wins.
    assert calc.assign([200, 100], [100, 200]).tolist() == [1, 1]
    no_square = MultiTierBucketCalculator(1, 4096, aspect_ratios=[(4, 1)])
    # 1:1 is halfway between 1:4 and 4:1, equally square: the lower id.
    assert no_square.assign([7], [7]).tolist() == [0]
    nemo = MultiTierBucketCalculator(compat="nemo")
    assert nemo.assign([7], [8]).tolist() == [1]  # NeMo: 0.875 is halfway, the first wins


def test_assign_keeps_shape_and_dtype() -> None:
    calc = MultiTierBucketCalculator.from_preset("512p")
    w = np.array([[640, 300], [512, 100]], dtype=np.uint16)
    h = np.array([[480, 900], [512, 100]], dtype=np.int32)
    ids = calc.assign(w, h)
    assert ids.dtype == np.int64
    assert ids.shape == (2, 2)
    assert calc.assign([], []).shape == (0,)
    assert calc.assign(np.int64(640), np.int64(480)).shape == ()


def test_assign_is_vectorised_on_a_large_array() -> None:
    rng = np.random.default_rng(5)
    n = 300_000
    h = rng.integers(64, 6000, n)
    w = np.maximum(1, (h * np.exp(rng.uniform(-1.5, 1.5, n))).astype(np.int64))
    for calc in CALCS[:4] + CALCS[6:8]:
        ids = calc.assign(w, h)
        sample = rng.choice(n, 300, replace=False)
        assert all(ids[i] == calc.get_bucket_for_image(int(w[i]), int(h[i]))["id"] for i in sample)


@given(w=st.integers(1, 20000), h=st.integers(1, 20000))
def test_default_assignment_commutes_with_transposition(w: int, h: int) -> None:
    for calc in (CALCS[0], CALCS[1], CALCS[2], CALCS[4]):
        k = len(calc) - 1
        assert calc.get_bucket_for_image(h, w)["id"] == k - calc.get_bucket_for_image(w, h)["id"]


@given(w=st.integers(1, 8000), h=st.integers(1, 8000))
def test_default_assignment_minimises_crop_loss(w: int, h: int) -> None:
    calc = CALCS[1]
    res = calc.resolutions
    loss = 1 - np.minimum(w * res[:, 1], h * res[:, 0]) / np.maximum(w * res[:, 1], h * res[:, 0])
    chosen = calc.get_bucket_for_image(w, h)["id"]
    assert loss[chosen] <= loss.min() + 1e-12


@given(w=st.integers(1, 3000), h=st.integers(1, 3000))
def test_no_upscale_never_upscales_when_a_bucket_fits(w: int, h: int) -> None:
    for plain, strict in (
        (CALCS[0], CALCS[3]),
        (MultiTierBucketCalculator.from_preset("768p", 16), CALCS[2]),
    ):
        res = strict.resolutions
        fits = (res[:, 0] <= w) & (res[:, 1] <= h)
        b = strict.get_bucket_for_image(w, h)
        bw, bh = b["resolution"]
        if fits.any():
            assert bw <= w
            assert bh <= h
            # ... and it is the least-crop bucket among those that fit
            cand = np.flatnonzero(fits)
            loss = [abs(math.log((w * res[k, 1]) / (h * res[k, 0]))) for k in cand]
            assert abs(math.log((w * bh) / (h * bw))) <= min(loss) + 1e-12
        else:  # documented fallback: the nearest ratio overall (the image will be upscaled)
            assert b == plain.get_bucket_for_image(w, h)


def test_no_upscale_examples() -> None:
    calc = MultiTierBucketCalculator(64, 512 * 512, no_upscale=True)
    plain = MultiTierBucketCalculator(64, 512 * 512)
    assert plain.get_bucket_for_image(600, 440)["resolution"] == (576, 448)
    assert calc.get_bucket_for_image(600, 440)["resolution"] == (576, 384)
    assert calc.get_bucket_for_image(520, 390)["resolution"] == (576, 448)  # nothing fits
    assert calc.get_bucket_for_image(4000, 3000)["resolution"] == (576, 448)


# -- dynamic batch size ----------------------------------------------------------------------


def test_dynamic_batch_size_default_clamps() -> None:
    calc = MultiTierBucketCalculator()
    assert calc.get_dynamic_batch_size((512, 512)) == 32
    assert calc.get_dynamic_batch_size((1024, 1024)) == 8
    assert calc.get_dynamic_batch_size((768, 768)) == 14
    assert calc.get_dynamic_batch_size((4096, 4096)) == 1
    assert calc.get_dynamic_batch_size((64, 64)) == 128  # 2048 clamped to 4 x 32
    assert calc.get_dynamic_batch_size([256, 256], 10, [512, 512]) == 40  # lists (JSON) work
    capped = MultiTierBucketCalculator(max_batch_size=50)
    assert capped.get_dynamic_batch_size((64, 64)) == 50
    assert capped.get_dynamic_batch_size((256, 256)) == 50
    assert capped.get_dynamic_batch_size((512, 512)) == 32


@given(
    w=st.integers(1, 5000),
    h=st.integers(1, 5000),
    base=st.integers(1, 512),
    bw=st.integers(1, 2048),
    bh=st.integers(1, 2048),
)
def test_dynamic_batch_size_default_is_exact_integer_floor(
    w: int, h: int, base: int, bw: int, bh: int
) -> None:
    calc = MultiTierBucketCalculator()
    got = calc.get_dynamic_batch_size((w, h), base, (bw, bh))
    exact = Fraction(base * bw * bh, w * h)
    assert got == min(max(1, math.floor(exact)), 4 * base)


def test_resize_and_crop_method_return_shapes() -> None:
    pytest.importorskip("PIL")
    img = np.zeros((98, 49, 3), dtype=np.uint8)
    out, (x, y) = MultiTierBucketCalculator().resize_and_crop(img, 256, 256)
    assert out.shape == (256, 256, 3)
    assert (x, y) == (0, 128)
    nemo_img, offset = MultiTierBucketCalculator(compat="nemo").resize_and_crop(img, 256, 256)
    assert nemo_img.size == (256, 256)
    assert offset == (0, 128)


# -- a given rule (rule=, NOTE [ Bucket rules ]) -------------------------------------------------

GIVEN_RULES: list[tuple[dict[str, Any], Any]] = [
    ({}, lambda: DefaultBucketRule(None, False)),
    ({"no_upscale": True}, lambda: DefaultBucketRule(None, True)),
    ({"aspect_ratios": [1.3, (21, 9), "4:5"]},
     lambda: DefaultBucketRule([1.3, (21, 9), "4:5"], False)),
    ({"compat": "nemo"}, lambda: NemoBucketRule()),
]  # fmt: skip


@pytest.mark.parametrize(("named", "make_rule"), GIVEN_RULES)
def test_a_given_rule_is_the_calculator_its_compat_names(
    named: dict[str, Any], make_rule: Any
) -> None:
    rule = make_rule()
    by_name = MultiTierBucketCalculator(16, 300_000, max_batch_size=9, **named)
    given = MultiTierBucketCalculator(16, 300_000, max_batch_size=9, rule=rule)
    assert given.rule is rule
    assert given.compat == by_name.compat
    assert json.dumps(given.config()) == json.dumps(by_name.config())  # byte for byte
    assert given == by_name
    assert MultiTierBucketCalculator.from_config(given.config()) == given
    rng = np.random.default_rng(5)
    w, h = rng.integers(1, 5000, 2000), rng.integers(1, 5000, 2000)
    assert given.assign(w, h).tolist() == by_name.assign(w, h).tolist()
    for res in by_name.resolutions.tolist():
        assert given.get_dynamic_batch_size(res, 7) == by_name.get_dynamic_batch_size(res, 7)


class _SquareAssigner:
    def choose(self, w: int, h: int) -> int:
        return 0

    def assign(self, w: np.ndarray, h: np.ndarray) -> np.ndarray:
        return np.zeros(w.shape, dtype=np.int64)


class _SquareRule:
    """A rule of one's own: one square bucket, half the base batch, one key of its own."""

    name: ClassVar[str] = "square"

    def resolutions(self, budget: int, quantization: int) -> list[tuple[int, int]]:
        side = math.isqrt(budget) // quantization * quantization
        return [(side, side)]

    def assigner(self, resolutions: Any, quantization: int) -> _SquareAssigner:
        return _SquareAssigner()

    def dynamic_batch_size(
        self, w: int, h: int, base: int, bw: int, bh: int, max_batch_size: int | None
    ) -> int:
        return max(1, base // 2)

    def config(self) -> dict[str, Any]:
        return {"aspect_ratios": None, "no_upscale": False, "side": "square"}


def test_the_calculator_delegates_to_any_rule() -> None:
    assert isinstance(_SquareRule(), BucketRule)
    calc = MultiTierBucketCalculator(64, 300_000, rule=_SquareRule())
    assert (calc.compat, calc.resolutions.tolist()) == ("square", [[512, 512]])
    assert calc.assign([1920, 10], [1080, 3000]).tolist() == [0, 0]
    assert calc.get_bucket_for_image(3, 5)["resolution"] == (512, 512)
    assert calc.get_dynamic_batch_size((512, 512), 9) == 4
    assert calc.config() == {
        "version": 1, "compat": "square", "quantization": 64, "max_pixels": 300_000,
        "aspect_ratios": None, "max_batch_size": None, "no_upscale": False, "side": "square",
    }  # fmt: skip
    assert (calc.no_upscale, calc.aspect_ratios) == (False, ())
    # from_config rebuilds only the three rules of NOTE [ Bucket rules ], never a look-alike
    with pytest.raises(ValueError, match=r"missing \[\], unknown \['side'\]"):
        MultiTierBucketCalculator.from_config(calc.config())


class _NotDefault(_SquareRule):
    name: ClassVar[str] = "default"

    def config(self) -> dict[str, Any]:
        return {"aspect_ratios": None, "no_upscale": False}


BAD_RULE: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"rule": 5}, TypeError, "rule must be a BucketRule or None; got rule=5"),
    ({"rule": DefaultBucketRule(None, False), "compat": "nemo"}, ValueError,
     "rule must be None when compat, aspect_ratios or no_upscale is set (it has its own); got "),
    ({"rule": DefaultBucketRule(None, False), "compat": "bogus"}, ValueError,
     "rule must be None when compat, aspect_ratios or no_upscale is set"),
    ({"rule": DefaultBucketRule(None, False), "aspect_ratios": [1.0]}, ValueError,
     "rule must be None when compat, aspect_ratios or no_upscale is set"),
    ({"rule": NemoBucketRule(), "no_upscale": True}, ValueError,
     "rule must be None when compat, aspect_ratios or no_upscale is set"),
    ({"rule": _NotDefault()}, ValueError,
     "rule must be a DefaultBucketRule when its name is 'default'; got rule="),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "exc", "message"), BAD_RULE)
def test_a_given_rule_is_checked(
    kwargs: dict[str, Any], exc: type[Exception], message: str
) -> None:
    with pytest.raises(exc, match=re.escape(message)):
        MultiTierBucketCalculator(64, **kwargs)


# -- cost-model batch sizes (cost_model=, NOTE [ Cost-model batch sizes ]) -----------------------


@given(
    w=st.integers(1, 256),
    h=st.integers(1, 256),
    bw=st.integers(1, 128),
    bh=st.integers(1, 128),
    base=st.integers(1, 300),
    cap=st.one_of(st.none(), st.integers(1, 2000)),
    side=st.sampled_from([8, 16, 32]),
)
def test_the_linear_cost_model_is_the_pixel_rule_on_whole_patches(
    w: int, h: int, bw: int, bh: int, base: int, cap: int | None, side: int
) -> None:
    pixels = MultiTierBucketCalculator(max_batch_size=cap)
    costed = MultiTierBucketCalculator(max_batch_size=cap, cost_model=CostModel(), patch_side=side)
    res, ref = (w * side, h * side), (bw * side, bh * side)
    assert costed.get_dynamic_batch_size(res, base, ref) == pixels.get_dynamic_batch_size(
        res, base, ref
    )


@pytest.mark.parametrize("side", [None, 8, 16])
def test_a_transformer_cost_model_sizes_batches_by_tokens(side: int | None) -> None:
    cm = CostModel.for_transformer(3072)
    calc = MultiTierBucketCalculator.from_preset("1024p", cost_model=cm, patch_side=side)
    s = 16 if side is None else side
    assert (calc.cost_model, calc.patch_side) == (cm, s)
    for w, h in calc.resolutions.tolist():
        expected = cm.batch_size(image_tokens(w, h, s), image_tokens(512, 512, s), 32)
        assert calc.get_dynamic_batch_size((w, h), 32, (512, 512)) == expected
    # the attention term makes large buckets dearer than their pixels: smaller batches than
    # the pixel rule's 8 at 1024 x 1024, and the clamp still holds for tiny ones
    assert MultiTierBucketCalculator().get_dynamic_batch_size((1024, 1024)) == 8
    assert calc.get_dynamic_batch_size((1024, 1024)) < 8
    assert calc.get_dynamic_batch_size((64, 64)) == 128


def test_a_cost_model_is_in_the_config_only_when_set() -> None:
    plain = MultiTierBucketCalculator.from_preset("1024p", max_batch_size=64)
    assert (plain.cost_model, plain.patch_side) == (None, None)
    assert list(plain.config()) == [
        "version", "compat", "quantization", "max_pixels", "aspect_ratios", "max_batch_size",
        "no_upscale",
    ]  # fmt: skip
    cm = CostModel(6, "1/1000")
    calc = MultiTierBucketCalculator.from_preset(
        "1024p", max_batch_size=64, cost_model=cm, patch_side=8
    )
    config = json.loads(json.dumps(calc.config()))
    assert config == {
        **plain.config(),
        "cost_model": {"token_cost": "6", "attention_cost": "1/1000"},
        "patch_side": 8,
    }
    assert list(config)[-2:] == ["cost_model", "patch_side"]
    for again in (MultiTierBucketCalculator.from_config(config), pickle.loads(pickle.dumps(calc))):
        assert again == calc
        assert hash(again) == hash(calc)
        assert (again.cost_model, again.patch_side) == (cm, 8)
        assert again.get_dynamic_batch_size((1024, 1024), 5) == calc.get_dynamic_batch_size(
            (1024, 1024), 5
        )
    assert calc != plain
    assert calc != MultiTierBucketCalculator.from_preset("1024p", max_batch_size=64, cost_model=cm)
    assert MultiTierBucketCalculator(cost_model=cm).config()["patch_side"] == 16
    with pytest.raises(ValueError, match=r"missing \['patch_side'\], unknown \[\]"):
        MultiTierBucketCalculator.from_config(
            {k: v for k, v in config.items() if k != "patch_side"}
        )
    with pytest.raises(ValueError, match=r"missing \['cost_model'\], unknown \[\]"):
        MultiTierBucketCalculator.from_config(
            {k: v for k, v in config.items() if k != "cost_model"}
        )
    with pytest.raises(
        ValueError, match=r"config\['cost_model'\] must be a mapping with exactly token_cost and"
    ):
        MultiTierBucketCalculator.from_config({**config, "cost_model": {"token_cost": "1"}})


BAD_COST: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"cost_model": 1}, TypeError, "cost_model must be a CostModel or None; got cost_model=1"),
    ({"cost_model": CostModel(), "compat": "nemo"}, ValueError,
     "cost_model must be None with compat='nemo' (NeMo's batch rule is fixed); got cost_model="),
    ({"cost_model": CostModel(), "rule": NemoBucketRule()}, ValueError,
     "cost_model must be None with compat='nemo'"),
    ({"patch_side": 16}, ValueError,
     "patch_side must be None without a cost_model; got patch_side=16"),
    ({"cost_model": CostModel(), "patch_side": 0}, ValueError,
     "patch_side must be a positive int; got patch_side=0"),
    ({"cost_model": CostModel(), "patch_side": True}, TypeError,
     "patch_side must be a positive int; got patch_side=True"),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "exc", "message"), BAD_COST)
def test_a_cost_model_is_checked(
    kwargs: dict[str, Any], exc: type[Exception], message: str
) -> None:
    with pytest.raises(exc, match=re.escape(message)):
        MultiTierBucketCalculator(64, **kwargs)


def test_the_cost_strategy_checks_its_arguments() -> None:
    with pytest.raises(
        TypeError, match=r"cost_model must be a CostModel or None; got cost_model=1"
    ):
        CostModelBatchSizes(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"patch_side must be a positive int; got patch_side=0"):
        CostModelBatchSizes(CostModel(), 0)


def test_size_arrays_of_one_shape_or_a_named_error() -> None:
    from dataorder.diffusion.buckets.lookup import as_size_arrays

    w, h = as_size_arrays(widths=[640, 480], heights=[480, 640])
    assert (w.tolist(), h.tolist()) == ([640, 480], [480, 640])
    with pytest.raises(ValueError, match=r"^widths and heights must have the same shape; got "
                       r"\(2,\) and \(1,\)$"):  # fmt: skip
        as_size_arrays(widths=[640, 480], heights=[480])
    with pytest.raises(ValueError, match=r"^widths, heights and frames must have the same shape"):
        as_size_arrays(widths=[1], heights=[1], frames=[1, 2])
    with pytest.raises(ValueError, match=r"^frames\[0\] must be"):
        as_size_arrays(widths=[1], heights=[1], frames=[0])
