"""Video buckets and the cost model: bucket sets, the assignment rule, batch sizes, shipped data.

The vectorised ``assign`` is checked against the one-clip reference (exact integers) on random
calculators and on clips drawn to sit on every decision border; the cost model against a brute
force "largest batch that fits".
"""

from __future__ import annotations

import doctest
import itertools
import json
import math
import re
import subprocess
import sys
import types
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import dataorder.diffusion.buckets.cost as cost_module
import dataorder.diffusion.buckets.video_assign as assign_module
import dataorder.diffusion.buckets.video_budget as budget_module
import dataorder.diffusion.buckets.video_frames as frames_module
import dataorder.diffusion.buckets.video_presets as presets_module
import dataorder.diffusion.calculators.video as video_module
from dataorder.diffusion.buckets.cost import CostModel, exact_rational, image_tokens
from dataorder.diffusion.buckets.lookup import CELL_SHIFT as _SHIFT
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import (
    PRESETS,
    TOO_SHORT,
    TOO_SMALL,
    VideoBucketCalculator,
    causal_frame_counts,
    resample_frame_counts,
    trim_loss,
)

DATA = Path(video_module.__file__).resolve().parents[2] / "data"


@pytest.mark.parametrize(
    ("module", "least"),
    [
        (video_module, 8),
        (budget_module, 2),
        (cost_module, 8),
        (frames_module, 4),
        (presets_module, 1),
    ],
)
def test_doctests(module: object, least: int) -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)  # type: ignore[arg-type]
    assert result.failed == 0
    assert result.attempted >= least


# -- the bucket set -----------------------------------------------------------------------------

#: The default clip of each preset's source: a bucket with exactly max_tokens, as is its transpose.
DEFAULT_CLIPS = {
    "wan2.1-480p": (832, 480, 81, 32760),
    "wan2.1-720p": (1280, 720, 81, 75600),
    "hunyuanvideo-540p": (960, 544, 129, 67320),
    "hunyuanvideo-720p": (1280, 720, 129, 118800),
    "cogvideox-5b": (720, 480, 49, 17550),
    "cogvideox1.5-5b": (1360, 768, 81, 44880),
    "ltx-video": (1216, 704, 121, 13376),
}


def test_every_preset_is_pinned_and_cites_a_source() -> None:
    assert set(PRESETS) == set(DEFAULT_CLIPS)
    for preset in PRESETS.values():
        assert "github.com/" in preset.source or preset.source.startswith("as ")
        assert "tokens" in preset.description


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_holds_its_models_default_clip(name: str) -> None:
    calc = VideoBucketCalculator.from_preset(name)
    w, h, f, tokens = DEFAULT_CLIPS[name]
    assert calc.max_tokens == tokens
    for a, b in ((w, h), (h, w)):
        bucket = calc.get_bucket_by_shape(a, b, f)
        assert bucket is not None
        assert bucket["tokens"] == tokens
        assert calc.get_bucket_for_video(a, b, f) == bucket  # its own shape maps to itself
    assert f == calc.frame_counts[-1]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_bucket_invariants(name: str) -> None:
    calc = VideoBucketCalculator.from_preset(name)
    sc, tc, q = calc.spatial_compression, calc.temporal_compression, calc.quantization
    pt, ph, pw = calc.patch_size
    buckets = calc.get_all_buckets()
    assert [b["id"] for b in buckets] == list(range(len(buckets))) == list(range(len(calc)))
    keys = [(b["frames"], Fraction(*b["resolution"])) for b in buckets]
    assert keys == sorted(keys)  # frame-major, then ascending aspect ratio
    assert len(set(keys)) == len(keys)
    for b in buckets:
        w, h = b["resolution"]
        assert w % q == 0
        assert h % q == 0
        assert (b["frames"] - 1) % tc == 0
        assert b["latent_frames"] == 1 + (b["frames"] - 1) // tc
        assert b["tokens"] == math.ceil(b["latent_frames"] / pt) * (w // (sc * pw)) * (
            h // (sc * ph)
        )
        assert b["tokens"] <= calc.max_tokens
        assert calc.max_pixels is None or w * h <= calc.max_pixels
        assert b["pixels"] == w * h
    for f in calc.frame_counts:  # transpose symmetry within each frame count
        res = [b["resolution"] for b in buckets if b["frames"] == f]
        assert res == [(h, w) for w, h in reversed(res)]
    assert calc.tokens.tolist() == [b["tokens"] for b in buckets]
    assert calc.bucket_frames.tolist() == [b["frames"] for b in buckets]
    assert calc.resolutions.tolist() == [list(b["resolution"]) for b in buckets]


def test_long_clips_get_a_smaller_frame_under_the_token_budget() -> None:
    calc = VideoBucketCalculator.from_preset("wan2.1-480p", max_frames=161)
    biggest: dict[int, int] = {}
    for b in calc.get_all_buckets():
        biggest[b["frames"]] = max(biggest.get(b["frames"], 0), b["pixels"])
    frames = sorted(biggest)
    assert biggest[81] == 832 * 480
    assert biggest[161] < 832 * 480 * 0.55  # 41 latent frames instead of 21
    assert all(biggest[f] >= biggest[g] for f, g in itertools.pairwise(frames))
    assert int(calc.tokens.max()) <= calc.max_tokens
    assert "frames   161" in calc.summary()


def test_causal_frame_counts() -> None:
    assert causal_frame_counts(4, 21) == (1, 5, 9, 13, 17, 21)
    assert causal_frame_counts(4, 81, min_frames=2, step=16) == (17, 33, 49, 65, 81)
    assert causal_frame_counts(8, 121)[-1] == 121
    assert causal_frame_counts(1, 3) == (1, 2, 3)


def test_config_round_trips_through_json() -> None:
    calcs = [VideoBucketCalculator.from_preset(name) for name in PRESETS]
    calcs.append(
        VideoBucketCalculator(
            5000,
            frame_counts=[1, 9, 17],
            aspect_ratios=["4:3", 2.0, (7, 3)],
            max_upscale=1.25,
            quantization=32,
            cost_model=CostModel.for_transformer(1536),
            max_batch_size=12,
        )
    )
    for calc in calcs:
        config = json.loads(json.dumps(calc.config()))
        again = VideoBucketCalculator.from_config(config)
        assert again == calc
        assert hash(again) == hash(calc)
        assert again.get_all_buckets() == calc.get_all_buckets()
        assert again.batch_sizes(2).tolist() == calc.batch_sizes(2).tolist()
    assert calcs[-1].config()["max_upscale"] == "5/4"
    assert calcs[0] != calcs[1]


def test_from_config_refuses_other_configs() -> None:
    config = VideoBucketCalculator.from_preset("ltx-video").config()
    with pytest.raises(ValueError, match=r"missing \['version'\], unknown \[\]"):
        VideoBucketCalculator.from_config({k: v for k, v in config.items() if k != "version"})
    with pytest.raises(
        ValueError, match=r"config\['version'\] must be 1; got config\['version'\]=2"
    ):
        VideoBucketCalculator.from_config({**config, "version": 2})
    with pytest.raises(ValueError, match=r"config\['kind'\] must be 'video'"):
        VideoBucketCalculator.from_config({**config, "kind": "image"})
    with pytest.raises(TypeError, match="config must be a mapping"):
        VideoBucketCalculator.from_config([])  # type: ignore[arg-type]
    image = MultiTierBucketCalculator().config()
    with pytest.raises(ValueError, match="missing"):
        VideoBucketCalculator.from_config(image)


#: (field, value, exception, message): a bad field of a saved config is named as the field
#: whichever check of the constructor refuses it.
CONFIG_FIELD_ERRORS: list[tuple[str, object, type[Exception], str]] = [
    ("max_tokens", "x", TypeError, "config['max_tokens'] must be a positive int; got config['ma"),
    ("max_tokens", 0, ValueError, "config['max_tokens'] must be a positive int; got config['max"),
    ("frame_counts", ["x"], TypeError, "config['frame_counts'][0] must be an int in [1, 21474836"),
    ("frame_counts", [1, 6], ValueError, "config['frame_counts'][1] must be 8k + 1 (temporal_com"),
    ("patch_size", [1, "x", 1], TypeError, "config['patch_size'][1] must be a positive int; got "),
    ("patch_size", "x", TypeError, "config['patch_size'] must be a (pt, ph, pw) triple of posit"),
    ("max_pixels", 10, ValueError, "config['max_pixels'] must be at least 1024 (one 32x32 cell)"),
    ("aspect_ratios", [[1, [2]]], TypeError, "config['aspect_ratios'][0][1] must be a positive "),
    ("max_upscale", "fast", ValueError, "config['max_upscale'] must be an int, a Fraction or a "),
    ("cost_model", "x", TypeError, "config['cost_model'] must be a mapping; got config['cost_mo"),
    ("cost_model", {"token_cost": "x", "attention_cost": "0"}, ValueError,
     "config['cost_model']['token_cost'] must be an int, a Fraction or a 'p/q' string; got "),
    ("max_batch_size", True, TypeError, "config['max_batch_size'] must be a positive int; got c"),
]  # fmt: skip


@pytest.mark.parametrize(("field", "value", "exc", "message"), CONFIG_FIELD_ERRORS)
def test_from_config_names_the_bad_field(
    field: str, value: object, exc: type[Exception], message: str
) -> None:
    config = VideoBucketCalculator.from_preset("ltx-video").config()
    with pytest.raises(exc, match="^" + re.escape(message)):
        VideoBucketCalculator.from_config({**config, field: value})


def test_from_preset_overrides() -> None:
    calc = VideoBucketCalculator.from_preset("wan2.1-480p", frame_counts=[17, 33])
    assert calc.frame_counts == (17, 33)
    assert calc.max_tokens == 32760
    assert VideoBucketCalculator.from_preset("cogvideox-5b").frame_counts == (
        1,
        9,
        17,
        25,
        33,
        41,
        49,
    )
    assert VideoBucketCalculator.from_preset("cogvideox1.5-5b").frame_counts == (
        1,
        17,
        33,
        49,
        65,
        81,
    )


# -- assignment rules ---------------------------------------------------------------------------


def test_time_is_only_trimmed() -> None:
    calc = VideoBucketCalculator(20000, max_frames=49, min_frames=9, max_upscale=None)
    assert calc.frame_counts == (9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49)
    for frames, kept in [(9, 9), (12, 9), (13, 13), (48, 45), (49, 49), (10**6, 49)]:
        bucket = calc.get_bucket_for_video(640, 360, frames)
        assert bucket is not None
        assert bucket["frames"] == kept
    assert calc.get_bucket_id_for_video(640, 360, 8) == TOO_SHORT
    assert calc.get_bucket_for_video(640, 360, 8) is None
    wan = VideoBucketCalculator.from_preset("wan2.1-480p")
    for frames in (1, 4):  # a still, and clips too short for 5 frames, go to f = 1
        bucket = wan.get_bucket_for_video(1920, 1080, frames)
        assert bucket is not None
        assert bucket["frames"] == 1


def test_upscale_limit() -> None:
    calc = VideoBucketCalculator.from_preset("wan2.1-480p")  # u = 3/2
    assert calc.max_upscale == Fraction(3, 2)
    assert calc.get_bucket_id_for_video(320, 180, 81) == TOO_SMALL  # needs 2.6x
    bucket = calc.get_bucket_for_video(640, 360, 81)  # needs 1.3x
    assert bucket is not None
    assert (
        max(Fraction(bucket["resolution"][0], 640), Fraction(bucket["resolution"][1], 360)) <= 1.5
    )
    free = VideoBucketCalculator.from_preset("wan2.1-480p", max_upscale=None)
    assert free.get_bucket_id_for_video(32, 18, 81) >= 0
    strict = VideoBucketCalculator.from_preset("wan2.1-480p", max_upscale=1)
    bucket = strict.get_bucket_for_video(832, 480, 81)
    assert bucket is not None
    assert bucket["resolution"] == (832, 480)
    # One pixel less and nothing fits: every bucket sits near the budget (why u = 1 is no default).
    assert strict.get_bucket_id_for_video(832, 479, 81) == TOO_SMALL
    # The nearest allowed bucket, when the nearest one would upscale too much: a clip wider than
    # its nearest bucket moves to wider ones (height binds), a narrower one to narrower ones.
    for (w, h), nearest, allowed in [
        ((569, 318), (832, 480), (848, 448)),
        ((418, 436), (608, 656), (624, 624)),
        ((300, 584), (448, 880), (448, 848)),
        ((315, 570), (480, 832), (448, 848)),
    ]:
        assert free.get_bucket_for_video(w, h, 81)["resolution"] == nearest  # type: ignore[index]
        assert calc.get_bucket_for_video(w, h, 81)["resolution"] == allowed  # type: ignore[index]
        assert calc.resolutions[calc.assign([w], [h], [81])].tolist() == [list(allowed)]
    # The limit is exact: 556 * 3/2 = 834 >= 832, 555 * 3/2 = 832.5 >= 832, 554 * 3/2 = 831 < 832.
    exact = VideoBucketCalculator(
        21 * 30 * 52, frame_counts=[81], max_pixels=832 * 480, aspect_ratios=[(832, 480)]
    )
    assert exact.get_bucket_id_for_video(555, 320, 81) >= 0
    assert exact.get_bucket_id_for_video(554, 320, 81) == TOO_SMALL
    assert exact.assign([555, 554], [320, 320], [81, 81]).tolist() == [
        exact.get_bucket_id_for_video(555, 320, 81),
        TOO_SMALL,
    ]


def test_exact_tie_goes_to_the_squarer_bucket_then_the_lower_id() -> None:
    calc = VideoBucketCalculator(4096, frame_counts=[1], aspect_ratios=[(4, 3)], max_upscale=None)
    tall, wide = (b["resolution"] for b in calc.get_all_buckets())
    assert tall == (wide[1], wide[0])  # 3:4 then 4:3, equally square
    assert calc.get_bucket_id_for_video(500, 500, 1) == 0
    assert calc.assign([500], [500], [1]).tolist() == [0]
    # 1:1 and 4:1 both fill a 256-token budget exactly (256x256, 512x128); a 2:1 clip is exactly
    # halfway in log aspect ratio, and the squarer bucket wins although the other has the higher
    # id; 1:2 likewise against 128x512, which has the lower id.
    two = VideoBucketCalculator(
        256, frame_counts=[1], aspect_ratios=["1:1", "4:1"], max_upscale=None
    )
    assert [b["resolution"] for b in two.get_all_buckets()] == [(128, 512), (256, 256), (512, 128)]
    for w, h in ((600, 300), (300, 600), (2, 1), (1, 2)):
        assert 4 * w * w * h * h == w * w * 4 * h * h  # W**2 * h1 * h2 == H**2 * w1 * w2
        assert two.get_bucket_id_for_video(w, h, 1) == 1
    assert two.assign([600, 300, 2, 1, 601, 299], [300, 600, 1, 2, 300, 600], [1] * 6).tolist() == [
        1,
        1,
        1,
        1,
        2,
        0,
    ]


# -- the vectorised assign equals the reference --------------------------------------------------

ratios_st = st.lists(
    st.one_of(st.tuples(st.integers(1, 7), st.integers(1, 7)), st.floats(0.2, 5.0)),
    min_size=1,
    max_size=6,
)


@st.composite
def calculators(draw: st.DrawFn) -> VideoBucketCalculator:
    if draw(st.booleans()):
        over: dict[str, object] = {}
        if draw(st.booleans()):
            over["max_upscale"] = draw(st.sampled_from([None, 1, Fraction(5, 4), 2, "7/3", 1.1]))
        if draw(st.booleans()):
            over["max_frames"] = draw(st.sampled_from([161, 257]))
        return VideoBucketCalculator.from_preset(draw(st.sampled_from(sorted(PRESETS))), **over)
    tc = draw(st.sampled_from([1, 2, 4, 8]))
    counts = draw(st.lists(st.integers(0, 40), min_size=1, max_size=8))
    return VideoBucketCalculator(
        draw(st.integers(2000, 200_000)),
        frame_counts=[tc * k + 1 for k in counts],
        spatial_compression=draw(st.sampled_from([4, 8])),
        temporal_compression=tc,
        patch_size=(
            draw(st.sampled_from([1, 2])),
            draw(st.sampled_from([1, 2])),
            draw(st.sampled_from([1, 2])),
        ),
        max_pixels=draw(st.one_of(st.none(), st.integers(4096, 2_000_000))),
        aspect_ratios=draw(st.one_of(st.none(), ratios_st)),
        max_upscale=draw(st.sampled_from([None, 1, Fraction(3, 2), 2.5, "7/3"])),
    )


@st.composite
def clips(draw: st.DrawFn, calc: VideoBucketCalculator) -> tuple[int, int, int]:
    buckets = calc.get_all_buckets()
    kind = draw(st.integers(0, 5))
    if kind == 2 and len(buckets) < 2:
        kind = 0  # no two neighbours to sit between
    if kind == 0:  # anywhere
        w, h = draw(st.integers(1, 5000)), draw(st.integers(1, 5000))
    elif kind == 1:  # a bucket's shape, scaled: exact aspect matches and upscale borders
        bw, bh = draw(st.sampled_from(buckets))["resolution"]
        num, den = draw(st.sampled_from([(1, 1), (2, 3), (3, 2), (1, 2), (5, 4), (4, 5)]))
        w = max(1, bw * num // den + draw(st.integers(-1, 1)))
        h = max(1, bh * num // den + draw(st.integers(-1, 1)))
    elif kind == 2:  # the geometric mean of two neighbours: exact ties
        i = draw(st.integers(0, len(buckets) - 2))
        (w1, h1), (w2, h2) = buckets[i]["resolution"], buckets[i + 1]["resolution"]
        k = draw(st.integers(1, 4))
        w, h = k * math.isqrt(w1 * w2 * h1 * h2) or 1, k * h1 * h2
        assume(w <= 2**31 - 1 and h <= 2**31 - 1)
    elif kind == 3:  # exactly at the upscale limit of a bucket's side
        bw, bh = draw(st.sampled_from(buckets))["resolution"]
        u = calc.max_upscale or Fraction(1)
        w = max(1, math.ceil(bw / u) + draw(st.integers(-1, 1)))
        h = max(1, math.ceil(bh / u) + draw(st.integers(-1, 1)))
    elif kind == 4:  # one side at bucket i's upscale limit, the aspect between i and a neighbour
        i = draw(st.integers(0, len(buckets) - 1))
        bw, bh = buckets[i]["resolution"]
        j = min(len(buckets) - 1, max(0, i + draw(st.integers(-2, 2))))
        nw, nh = buckets[j]["resolution"]
        t = draw(st.integers(0, 8))  # aspect (t nw + (8 - t) bw) / (t nh + (8 - t) bh)
        aw, ah = t * nw + (8 - t) * bw, t * nh + (8 - t) * bh
        u = calc.max_upscale or Fraction(1)
        if draw(st.booleans()):
            h = max(1, math.ceil(bh / u) + draw(st.integers(-2, 2)))
            w = max(1, h * aw // ah + draw(st.integers(-1, 1)))
        else:
            w = max(1, math.ceil(bw / u) + draw(st.integers(-2, 2)))
            h = max(1, w * ah // aw + draw(st.integers(-1, 1)))
    else:  # huge or tiny
        w = draw(st.sampled_from([1, 2, 3, 2**31 - 1, 65535]))
        h = draw(st.sampled_from([1, 2, 7, 2**31 - 1, 65535]))
    f = draw(
        st.one_of(
            st.integers(1, 300),
            st.sampled_from(calc.frame_counts),
            st.integers(2**31 - 10, 2**31 - 1),
        )
    )
    if draw(st.booleans()):
        f = min(2**31 - 1, max(1, f + draw(st.integers(-1, 1))))
    return w, h, f


@given(st.data())
def test_assign_equals_the_reference(data: st.DataObject) -> None:
    calc = data.draw(calculators())
    batch = data.draw(st.lists(clips(calc), min_size=1, max_size=40))
    w, h, f = (np.array(c, dtype=np.int64) for c in zip(*batch, strict=True))
    assert calc.assign(w, h, f).tolist() == [calc.get_bucket_id_for_video(*c) for c in batch]


def _check_bulk(
    calc: VideoBucketCalculator, seed: int, n: int = 30_000, checked: int = 3000
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.integers(1, 3000, n)
    h = rng.integers(1, 3000, n)
    f = rng.integers(1, 300, n)
    got = calc.assign(w, h, f)
    idx = rng.choice(n, checked, replace=False)
    want = [calc.get_bucket_id_for_video(int(w[i]), int(h[i]), int(f[i])) for i in idx]
    assert got[idx].tolist() == want
    return got


def test_assign_equals_the_reference_in_bulk() -> None:
    for seed, calc in enumerate(
        (
            VideoBucketCalculator.from_preset("wan2.1-480p", max_frames=257),
            VideoBucketCalculator.from_preset("ltx-video", max_upscale=1),
            VideoBucketCalculator(
                30000,
                max_frames=97,
                aspect_ratios=[(3, 1), 1.1, (2, 1)],
                quantization=48,
                max_upscale=Fraction(6, 5),
            ),
        )
    ):
        got = _check_bulk(calc, seed)
        assert TOO_SMALL in got.tolist()  # clips down to 1 pixel: the limit is exercised
        shaped = calc.assign(np.full((20, 30), 640), np.full((20, 30), 360), np.full((20, 30), 81))
        assert shaped.shape == (20, 30)
        assert shaped.ravel().tolist() == [calc.get_bucket_id_for_video(640, 360, 81)] * 600


@pytest.mark.parametrize(
    "calc",
    [
        VideoBucketCalculator.from_preset("wan2.1-480p", frame_counts=[81]),
        VideoBucketCalculator.from_preset("ltx-video", frame_counts=[1, 9], max_upscale=1),
        VideoBucketCalculator(9000, frame_counts=[1, 5], max_upscale="7/4", quantization=32),
    ],
)
def test_assign_at_every_upscale_border(calc: VideoBucketCalculator) -> None:
    """Every bucket's limit on one side, at aspect ratios between it and its neighbours: where
    the nearest bucket is not allowed and the answer moves along the aspect order."""
    clips = set()
    u = calc.max_upscale or Fraction(1)
    for f in calc.frame_counts:
        res = [b["resolution"] for b in calc.get_all_buckets() if b["frames"] == f]
        for i, (bw, bh) in enumerate(res):
            for nw, nh in res[max(0, i - 2) : i + 3]:
                for t in range(0, 9, 2):
                    aw, ah = t * nw + (8 - t) * bw, t * nh + (8 - t) * bh
                    for d in (-1, 0, 1):
                        h = max(1, math.ceil(bh / u) + d)
                        clips.add((max(1, h * aw // ah), h, f))
                        w = max(1, math.ceil(bw / u) + d)
                        clips.add((w, max(1, w * ah // aw), f))
    w, h, f = (np.array(c) for c in zip(*sorted(clips), strict=True))
    got = calc.assign(w, h, f).tolist()
    assert got == [calc.get_bucket_id_for_video(*c) for c in sorted(clips)]
    free = VideoBucketCalculator.from_config({**calc.config(), "max_upscale": None})
    moved = [a != b for a, b in zip(got, free.assign(w, h, f).tolist(), strict=True) if a >= 0]
    assert sum(moved) > 10  # the limit changed many answers without dropping the clips


def test_a_tier_that_is_not_a_staircase_is_still_exact() -> None:
    # A coarse lattice where heights rise again along the aspect order: the usable buckets are not
    # one run of positions, so the exact path must answer.
    ratios = [1.997, 0.322, 1.638, 3.207, 2.963, 1.486, 1.168, 1.245]
    calc = VideoBucketCalculator(
        353,
        frame_counts=[1, 5],
        spatial_compression=32,
        patch_size=(1, 1, 1),
        aspect_ratios=ratios,
        max_upscale=1,
    )
    assert calc._assigner._any_general  # the test must not silently become a staircase test
    got = _check_bulk(calc, 1, n=20_000, checked=20_000)
    assert (got >= 0).sum() > 1000
    assert (got == TOO_SMALL).sum() > 1000


def _check_limits(calc: VideoBucketCalculator, clips: list[tuple[int, int, int]]) -> list[int]:
    """assign equals the reference on ``clips``, and no assigned clip is upscaled past the limit
    or stretched in time (exact rationals)."""
    w, h, f = (np.array(c, dtype=np.int64) for c in zip(*clips, strict=True))
    got = calc.assign(w, h, f).tolist()
    assert got == [calc.get_bucket_id_for_video(*c) for c in clips]
    u = calc.max_upscale
    for k, (cw, ch, cf) in zip(got, clips, strict=True):
        if k >= 0:
            b = calc.get_bucket_by_id(k)
            bw, bh = b["resolution"]
            assert b["frames"] <= cf
            assert u is None or (bw <= u * cw and bh <= u * ch), (cw, ch, b)
    return got


def test_a_float_upscale_limit_does_not_wrap_at_large_buckets() -> None:
    """Regression: ``1.01`` is a fraction over 2**52, and ``bw * 2**52`` wrapped in int64
    once a bucket was wider than 2048: 2014x984 went to 2064x992, an upscale of 1.025."""
    c = VideoBucketCalculator(100000, max_frames=5, max_pixels=1920 * 1080, max_upscale=1.01)
    assert c.get_bucket_id_for_video(2014, 984, 5) == TOO_SMALL
    assert c.assign([2014], [984], [5]).tolist() == [TOO_SMALL]
    rng = np.random.default_rng(20)
    n = 20_000  # the reported count: 57 of them disagreed
    clips = list(
        zip(
            rng.integers(1500, 2600, n).tolist(),
            rng.integers(700, 1300, n).tolist(),
            rng.integers(1, 8, n).tolist(),
            strict=True,
        )
    )
    got = _check_limits(c, clips)
    assert got.count(TOO_SMALL) > 1000
    assert sum(k >= 0 for k in got) > 1000


def test_upscale_limits_of_any_size_are_exact() -> None:
    """An int, a float or a Fraction too large for int64 is taken exactly."""
    base = VideoBucketCalculator.from_preset("wan2.1-480p", max_upscale=None)
    clips = [(1, 1, 81), (2, 3, 81), (640, 360, 81), (2**31 - 1, 1, 5), (1, 2**31 - 1, 1)]
    for limit in (10**20, 1e300, Fraction(10**30 + 1, 10**30), 1 + 2**-52):
        calc = VideoBucketCalculator.from_preset("wan2.1-480p", max_upscale=limit)
        assert calc.max_upscale == Fraction(limit)
        got = _check_limits(calc, clips)
        if calc.max_upscale >= 1000:  # nothing here needs more: the same as no limit
            assert got == base.assign(*(np.array(c) for c in zip(*clips, strict=True))).tolist()
        assert VideoBucketCalculator.from_config(calc.config()) == calc
    # A hair above 1 is 1 for integer sides below 10**30 (and below 2**52 for 1 + 2**-52).
    strict = VideoBucketCalculator.from_preset("wan2.1-480p", max_upscale=1)
    rng = np.random.default_rng(7)
    w, h, f = rng.integers(300, 2000, 5000), rng.integers(300, 2000, 5000), np.full(5000, 81)
    for limit in (Fraction(10**30 + 1, 10**30), 1 + 2**-52):
        near_one = VideoBucketCalculator.from_preset("wan2.1-480p", max_upscale=limit)
        assert near_one.assign(w, h, f).tolist() == strict.assign(w, h, f).tolist()
    assert strict.assign([832, 831], [480, 480], [81, 81]).tolist()[0] >= 0


_UPSCALES = st.one_of(
    st.floats(1.0, 4.0),
    st.integers(0, 2**20).map(lambda k: 1.0 + k * 2.0**-52),  # floats a few ulps above 1
    st.sampled_from([1.01, 1.001, 1.0000001, 1e300, 10**20, 10**40]),
    st.integers(1, 10**30),
    st.builds(
        lambda d, e: Fraction(d + e, d),
        st.integers(1, 10**40),
        st.integers(0, 10**40),
    ),
    st.none(),
)


@st.composite
def large_calculators(draw: st.DrawFn) -> VideoBucketCalculator:
    """Custom calculators with per-frame budgets up to 2**40 pixels and any upscale limit."""
    exponent = draw(st.integers(16, 40))
    q = 16 * draw(st.sampled_from([1, 2, 3, 4, 64]))
    max_pixels = max(q * q, draw(st.integers(2 ** (exponent - 1), 2**exponent)))
    ratios = st.lists(
        st.one_of(st.floats(0.01, 100.0), st.sampled_from([10_000.0, 1 / 10_000, (16, 9)])),
        min_size=1,
        max_size=6,
    )
    need = 21 * q * q // 256  # one q x q cell at 81 frames (21 latent frames, 256 px a token)
    return VideoBucketCalculator(
        draw(st.integers(need, 2**50)),
        frame_counts=draw(st.lists(st.sampled_from([1, 5, 9, 17, 81]), min_size=1, max_size=3)),
        max_pixels=max_pixels,
        quantization=q,
        aspect_ratios=draw(st.one_of(st.none(), ratios)),
        max_upscale=draw(_UPSCALES),
    )


@st.composite
def large_clips(draw: st.DrawFn, calc: VideoBucketCalculator) -> tuple[int, int, int]:
    """Clips at the limit of a bucket's side (where a wrapped product answers wrong), or of any
    size up to 2**31 - 1."""
    f = draw(st.sampled_from([*calc.frame_counts, 2**31 - 1]))
    if draw(st.booleans()):
        side = st.integers(0, 31).flatmap(lambda e: st.integers(1, max(1, 2**e - 1)))
        return draw(side), draw(side), f
    bw, bh = draw(st.sampled_from(calc.get_all_buckets()))["resolution"]
    u = calc.max_upscale or Fraction(1)
    w = min(2**31 - 1, max(1, math.ceil(bw / u) + draw(st.integers(-1, 1))))
    h = min(2**31 - 1, max(1, math.ceil(bh / u) + draw(st.integers(-1, 1))))
    if draw(st.booleans()):  # the aspect of another bucket, one side at its limit
        aw, ah = draw(st.sampled_from(calc.get_all_buckets()))["resolution"]
        h = min(2**31 - 1, max(1, w * ah // aw))
    return w, h, f


@given(st.data())
def test_assign_equals_the_reference_at_large_budgets_and_any_upscale(
    data: st.DataObject,
) -> None:
    calc = data.draw(large_calculators())
    batch = data.draw(st.lists(large_clips(calc), min_size=1, max_size=30))
    _check_limits(calc, batch)


def test_table_limits_fall_back_to_exact_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assign_module, "_FIT_TABLE_LIMIT", 0)
    monkeypatch.setattr(assign_module, "_FRAME_TABLE_LIMIT", 0)
    calc = VideoBucketCalculator.from_preset("wan2.1-480p", max_frames=161)
    tables = calc._assigner
    assert tables._fit is None
    assert tables._ftab is None
    assert tables._any_general
    _check_bulk(calc, 5, n=8000, checked=8000)


def test_common_camera_sizes_hit_precomputed_cells() -> None:
    """Camera sizes must be answered by the cell table, not by the exact fallback."""
    calc = VideoBucketCalculator.from_preset("wan2.1-720p")
    sizes = [(1920, 1080), (1280, 720), (3840, 2160), (640, 480), (1440, 1080), (1080, 1080),
             (2560, 1080), (1920, 800), (1998, 1080), (4096, 2160), (720, 480), (720, 576),
             (1080, 1350), (854, 480), (1280, 544)]  # fmt: skip
    for w, h in sizes:
        for a, b in ((w, h), (h, w)):
            tables = calc._assigner
            cell = (int(np.array(a / b).view(np.int64)) >> _SHIFT) - tables._cell_lo
            assert tables._cells[cell] >= 0, (a, b)


# -- validation messages -------------------------------------------------------------------------


_BASE = {"max_tokens": 9000, "max_frames": 9}
_ANY_RATIONAL = "an int, a Fraction or a 'p/q' string or a float"

#: (constructor arguments, exception, message): each check of the constructor, by its message.
CONSTRUCTOR_ERRORS: list[tuple[dict[str, object], type[Exception], str]] = [
    ({**_BASE, "max_tokens": 0}, ValueError, "max_tokens must be a positive int; got max_tokens=0"),
    (
        {**_BASE, "max_tokens": True},
        TypeError,
        "max_tokens must be a positive int; got max_tokens=True",
    ),
    (
        {"max_tokens": 9000},
        TypeError,
        "max_frames must be an int when frame_counts is None; got max_frames=None",
    ),
    (
        {"max_tokens": 9000, "frame_counts": [1, 6]},
        ValueError,
        "frame_counts[1] must be 4k + 1 (temporal_compression=4); got frame_counts[1]=6",
    ),
    (
        {"max_tokens": 9000, "frame_counts": []},
        ValueError,
        "frame_counts must be a non-empty sequence; got frame_counts=[]",
    ),
    (
        {"max_tokens": 9000, "frame_counts": "159"},
        TypeError,
        "frame_counts must be a sequence of ints; got frame_counts='159'",
    ),
    (
        {**_BASE, "frame_counts": [1]},
        ValueError,
        "frame_counts excludes max_frames, min_frames and frame_step; got max_frames=9",
    ),
    (
        {**_BASE, "patch_size": (1, 2)},
        ValueError,
        "patch_size must be a (pt, ph, pw) triple of positive ints; got patch_size=(1, 2)",
    ),
    (
        {**_BASE, "patch_size": 2},
        TypeError,
        "patch_size must be a (pt, ph, pw) triple of positive ints; got patch_size=2",
    ),
    (
        {**_BASE, "patch_size": (1, 0, 2)},
        ValueError,
        "patch_size[1] must be a positive int; got patch_size[1]=0",
    ),
    (
        {**_BASE, "quantization": 24},
        ValueError,
        "quantization must be a multiple of lcm(sc * ph, sc * pw) = 16; got quantization=24",
    ),
    (
        {**_BASE, "max_upscale": Fraction(1, 2)},
        ValueError,
        "max_upscale must be a number >= 1 or None; got max_upscale=Fraction(1, 2)",
    ),
    (
        {**_BASE, "max_upscale": True},
        TypeError,
        f"max_upscale must be {_ANY_RATIONAL}; got max_upscale=True",
    ),
    (
        {**_BASE, "max_upscale": "fast"},
        ValueError,
        f"max_upscale must be {_ANY_RATIONAL}; got max_upscale='fast'",
    ),
    (
        {**_BASE, "max_upscale": math.inf},
        ValueError,
        "max_upscale must be a finite number; got max_upscale=inf",
    ),
    (
        {**_BASE, "max_tokens": 2},
        ValueError,
        "max_tokens must be at least 3 for frames=9 (one 16x16 cell); got max_tokens=2",
    ),
    (
        {**_BASE, "max_tokens": 3, "quantization": 32},
        ValueError,
        "max_tokens must be at least 4 for frames=1 (one 32x32 cell); got max_tokens=3",
    ),
    (
        {**_BASE, "max_pixels": 100},
        ValueError,
        "max_pixels must be at least 256 (one 16x16 cell); got max_pixels=100",
    ),
    (
        {**_BASE, "frame_step": 6},
        ValueError,
        "frame_step must be a multiple of temporal_compression=4; got frame_step=6",
    ),
    (
        {**_BASE, "min_frames": 10},
        ValueError,
        "min_frames must be an int in [1, 9]; got min_frames=10",
    ),
    (
        {**_BASE, "aspect_ratios": []},
        ValueError,
        "aspect_ratios must be a non-empty sequence; got aspect_ratios=[]",
    ),
    (
        {**_BASE, "aspect_ratios": ["wide"]},
        ValueError,
        "aspect_ratios[0] must be a positive finite float or a (w, h) pair of positive ints or a "
        "'W:H' string; got aspect_ratios[0]='wide'",
    ),
    (
        {**_BASE, "cost_model": "flops"},
        TypeError,
        "cost_model must be a CostModel or None; got cost_model='flops'",
    ),
    (
        {**_BASE, "max_batch_size": 0},
        ValueError,
        "max_batch_size must be a positive int; got max_batch_size=0",
    ),
    # The caps: no int64 product of a bucket can wrap.
    (
        {**_BASE, "max_tokens": 2**62 + 1},
        ValueError,
        "max_tokens must be at most 2**62 = 4611686018427387904 (token counts are int64); got",
    ),
    (
        {**_BASE, "max_tokens": 2**32 + 1, "max_frames": 5},
        ValueError,
        "max_tokens must be at most 4294967296 for frames=1 when max_pixels is None (frames of at "
        "most 2**40 pixels; set max_pixels to cap them); got max_tokens=4294967297",
    ),
    (
        {**_BASE, "max_pixels": 2**40 + 1},
        ValueError,
        "max_pixels must be at most 2**40 = 1099511627776 or None; got max_pixels=1099511627777",
    ),
    (
        {**_BASE, "quantization": 2**20 + 16},
        ValueError,
        "quantization must be at most 1048576 (one 1048576x1048576 bucket: 2**40 pixels); got",
    ),
    (
        {**_BASE, "spatial_compression": 2**31 - 1},
        ValueError,
        "spatial_compression must be small enough that a latent cell's side lcm(sc * ph, sc * pw) "
        "is at most 1048576 (it is 4294967294 with patch_size=(1, 2, 2)); got",
    ),
    (
        {**_BASE, "max_batch_size": 2**31 + 1},
        ValueError,
        "max_batch_size must be at most 2**31 = 2147483648 or None; got max_batch_size=2147483649",
    ),
]


@pytest.mark.parametrize(("kwargs", "exc", "message"), CONSTRUCTOR_ERRORS)
def test_constructor_messages(
    kwargs: dict[str, object], exc: type[Exception], message: str
) -> None:
    with pytest.raises(exc) as info:
        VideoBucketCalculator(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_small_budgets_that_are_legal_build() -> None:
    # The edge of each message above: one cell exactly.
    assert len(VideoBucketCalculator(3, frame_counts=[1, 5, 9], aspect_ratios=[1.0])) == 3
    assert (
        len(VideoBucketCalculator(4, frame_counts=[1], quantization=32, aspect_ratios=[1.0])) == 1
    )
    assert len(VideoBucketCalculator(9000, max_frames=9, max_pixels=256, aspect_ratios=[1.0])) == 3


def test_assign_and_reference_messages() -> None:
    calc = VideoBucketCalculator.from_preset("wan2.1-480p")
    with pytest.raises(TypeError, match=r"widths must be an array of ints"):
        calc.assign([1.0], [1], [1])
    with pytest.raises(
        ValueError, match=r"frames\[2\] must be an int in \[1, 2147483647\]; got frames\[2\]=0"
    ):
        calc.assign([5, 5, 5], [5, 5, 5], [1, 2, 0])
    with pytest.raises(ValueError, match="must have the same shape"):
        calc.assign([5, 5], [5], [1])
    with pytest.raises(TypeError, match="frames must be an int in"):
        calc.get_bucket_id_for_video(5, 5, 1.0)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"height must be an int in \[1, 2147483647\]; got height=0"
    ):
        calc.get_bucket_for_video(5, 0, 1)
    with pytest.raises(ValueError, match=r"name must be one of 'wan2\.1-480p', "):
        VideoBucketCalculator.from_preset("sora")
    with pytest.raises(
        ValueError, match=r"bucket_id must be an int in \[0, 692\]; got bucket_id=-1"
    ):
        calc.get_bucket_by_id(-1)
    assert calc.assign([], [], []).shape == (0,)
    assert calc.get_bucket_by_shape(832, 480, 80) is None
    assert calc.get_bucket_by_shape(833, 480, 81) is None


# -- cost model ---------------------------------------------------------------------------------


@settings(max_examples=200)
@given(
    a=st.fractions(0, 100, max_denominator=50),
    c=st.fractions(0, 100, max_denominator=50),
    tokens=st.lists(st.integers(1, 10**6), min_size=1, max_size=20),
    rt=st.integers(1, 10**6),
    rb=st.integers(1, 64),
    cap=st.one_of(st.none(), st.integers(1, 500)),
)
def test_cost_model_batch_is_the_largest_that_fits(
    a: Fraction, c: Fraction, tokens: list[int], rt: int, rb: int, cap: int | None
) -> None:
    assume(a > 0 or c > 0)
    cm = CostModel(a, c)
    got = cm.batch_sizes(tokens, rt, rb, cap)
    budget = rb * cm.cost(rt)
    top = 4 * rb if cap is None else cap
    for t, b in zip(tokens, got.tolist(), strict=True):
        fits = 0  # brute force: count up while the next batch still fits, up to the clamp
        while fits <= top and (fits + 1) * cm.cost(t) <= budget:
            fits += 1
        assert b == min(top, max(1, fits))
        assert b == cm.batch_size(t, rt, rb, cap)
    order = np.argsort(tokens, kind="stable")
    assert np.all(np.diff(got[order]) <= 0)  # more tokens never get a larger batch


def test_cost_model_on_image_buckets_is_the_image_rule() -> None:
    img = MultiTierBucketCalculator.from_preset("1024p")
    res = img.resolutions.tolist()
    tokens = [image_tokens(w, h) for w, h in res]
    assert tokens == [(w // 16) * (h // 16) for w, h in res]
    # Cost in tokens only is the image calculator's pixel-proportional dynamic batch size.
    linear = CostModel().batch_sizes(tokens, image_tokens(512, 512), 32)
    want = [img.get_dynamic_batch_size((w, h), 32, (512, 512)) for w, h in res]
    assert linear.tolist() == want
    # With attention, big buckets get smaller batches and small ones larger, never the reverse.
    flops = CostModel.for_transformer(3072).batch_sizes(tokens, image_tokens(512, 512), 32)
    big = np.array(tokens) > image_tokens(512, 512)
    assert np.all(flops[big] <= linear[big])
    assert np.all(flops[~big] >= linear[~big])
    assert (flops != linear).any()


def test_cost_model_values_config_and_messages() -> None:
    assert CostModel("1/3", "2") == CostModel(Fraction(1, 3), 2)
    assert CostModel("1/3", 2).token_cost == Fraction(1, 3)
    assert CostModel(np.int64(3)).token_cost == 3
    assert repr(CostModel("1/3", 2)) == "CostModel(token_cost='1/3', attention_cost=2)"
    assert CostModel.for_transformer(100) == CostModel(600, 1)
    cm = CostModel("7/3", "1/1000")
    assert CostModel.from_config(json.loads(json.dumps(cm.config()))) == cm
    assert len({CostModel(1, 0), CostModel(), CostModel(2, 0)}) == 2
    assert CostModel().batch_sizes(np.array([], dtype=np.int64), 5, 1).shape == (0,)
    assert CostModel().batch_sizes([[4, 8], [16, 2]], 8, 2).tolist() == [[4, 2], [1, 8]]
    rational = "an int, a Fraction or a 'p/q' string"
    for args, exc, message in [
        ((0.5, 1), TypeError, f"token_cost must be {rational}; got token_cost=0.5"),
        ((True, 1), TypeError, f"token_cost must be {rational}; got token_cost=True"),
        ((1, "x"), ValueError, f"attention_cost must be {rational}; got attention_cost='x'"),
        ((0, 0), ValueError, "attention_cost must be positive when token_cost is 0; got "
         "attention_cost=0"),
        ((1, -1), ValueError, "attention_cost must be a non-negative number; got "
         "attention_cost=-1"),
        (("-1/2", 1), ValueError, "token_cost must be a non-negative number; got "
         "token_cost='-1/2'"),
    ]:  # fmt: skip
        with pytest.raises(exc) as info:
            CostModel(*args)  # type: ignore[arg-type]
        assert str(info.value) == message
    with pytest.raises(ValueError, match=r"tokens\[1\] must be a positive int; got tokens\[1\]=0"):
        CostModel().batch_sizes([5, 0], 5, 1)
    with pytest.raises(TypeError, match="tokens must be an array of ints"):
        CostModel().batch_sizes([5.0], 5, 1)
    with pytest.raises(
        ValueError, match="reference_batch_size must be a positive int; got reference_batch_size=0"
    ):
        CostModel().batch_size(5, 5, 0)
    with pytest.raises(
        ValueError, match="max_batch_size must be a positive int; got max_batch_size=0"
    ):
        CostModel().batch_sizes([5], 5, 1, 0)
    with pytest.raises(ValueError, match="hidden_size must be a positive int; got hidden_size=0"):
        CostModel.for_transformer(0)
    with pytest.raises(
        ValueError, match="config must be a mapping with exactly token_cost and attention_cost"
    ):
        CostModel.from_config({"token_cost": "1"})
    with pytest.raises(ValueError, match="patch_side must be a positive int; got patch_side=0"):
        image_tokens(16, 16, 0)
    assert exact_rational("x", 1.5, allow_float=True) == Fraction(3, 2)


def test_video_batch_sizes() -> None:
    calc = VideoBucketCalculator.from_preset(
        "wan2.1-480p", max_batch_size=64, cost_model=CostModel.for_transformer(5120, 13824)
    )
    bs = calc.batch_sizes(1)
    tokens = calc.tokens
    assert bs[tokens == calc.max_tokens].tolist() == [1] * int((tokens == calc.max_tokens).sum())
    assert int(bs.min()) >= 1
    assert int(bs.max()) <= 64
    linear = VideoBucketCalculator.from_preset("wan2.1-480p", max_batch_size=64).batch_sizes(1)
    assert np.all(bs >= linear)  # with attention, short clips are relatively cheaper
    assert (bs > linear).any()
    # Same model, another reference: 2 samples of a 17-frame clip.
    ref = int(calc.tokens[calc.get_bucket_by_shape(832, 480, 17)["id"]])  # type: ignore[index]
    again = calc.batch_sizes(2, reference_tokens=ref)
    assert again.tolist() == calc.cost_model.batch_sizes(tokens, ref, 2, 64).tolist()
    # Default clamp: 4x the reference.
    assert int(VideoBucketCalculator.from_preset("wan2.1-480p").batch_sizes(3).max()) == 12
    # Past 2**31 a batch size is refused by name, never an OverflowError.
    wan = VideoBucketCalculator.from_preset("wan2.1-480p")
    assert int(wan.batch_sizes(2**31).max()) == 2**33  # the default clamp, 4x: still an int64
    with pytest.raises(
        ValueError,
        match=re.escape(
            "reference_batch_size must be at most 2**31 = 2147483648; got "
            "reference_batch_size=100000000000000000000"
        ),
    ):
        wan.batch_sizes(10**20)
    with pytest.raises(ValueError, match=r"max_batch_size must be at most 2\*\*31"):
        wan.cost_model.batch_sizes(wan.tokens, 100, 1, 2**31 + 1)


def test_large_budgets_up_to_the_caps_build_and_assign() -> None:
    """Every int64 product of a bucket stays exact at the largest legal values:
    a 2**40-pixel frame at the largest quantization, and the largest token budget."""
    top = VideoBucketCalculator(2**62, frame_counts=[1, 5], max_pixels=2**40, quantization=2**20)
    assert top.resolutions.tolist() == [[2**20, 2**20]] * 2
    assert int(top.tokens.max()) <= top.max_tokens
    assert top.assign([2**20, 2**31 - 1], [2**20, 1], [5, 5]).tolist() == [1, -2]
    fine = VideoBucketCalculator(2**36, frame_counts=[1], max_pixels=2**40, aspect_ratios=[10_000])
    assert int(fine.resolutions.max()) > 10**8  # sides past 2**26, far from wrapping
    w, h = [2**31 - 1, 2**31 - 1, 12345], [2**31 - 1, 123, 2**31 - 1]
    assert fine.assign(w, h, [1, 1, 1]).tolist() == [
        fine.get_bucket_id_for_video(a, b, 1) for a, b in zip(w, h, strict=True)
    ]


# -- time: trim loss and resampling -------------------------------------------------------------


@given(
    duration=st.fractions(Fraction(1, 10**6), 10**6, max_denominator=10**6),
    fps=st.fractions(Fraction(1, 1001), 1000, max_denominator=1001),
)
def test_an_estimated_frame_count_is_a_tenth_low_and_exact(
    duration: Fraction, fps: Fraction
) -> None:
    n = frames_module.estimated_frame_count(duration, fps)
    assert n == max(1, math.floor(duration * fps * Fraction(9, 10)))
    assert n <= max(1, duration * fps)  # never above what the headers say
    assert n >= duration * fps * Fraction(9, 10) - 1


def test_estimated_frame_count_edges() -> None:
    assert frames_module.estimated_frame_count(Fraction(81, 30), 30) == 72
    assert frames_module.estimated_frame_count(Fraction(1, 1000), 30) == 1  # a still
    assert Fraction(1, 10) == frames_module.ESTIMATE_MARGIN
    with pytest.raises(ValueError, match="duration must be a positive number; got duration=0"):
        frames_module.estimated_frame_count(0, 30)
    with pytest.raises(TypeError, match="fps must be an int, a Fraction or a 'p/q' string; got"):
        frames_module.estimated_frame_count(1, 29.97)  # type: ignore[arg-type]


def test_trim_loss() -> None:
    assert trim_loss([81, 100, 1], [81, 81, 1]).tolist() == [0.0, 0.19, 0.0]
    with pytest.raises(
        ValueError, match=r"bucket_frames\[1\] must be <= frames\[1\]=5; got bucket_frames\[1\]=9"
    ):
        trim_loss([9, 5], [9, 9])
    with pytest.raises(ValueError, match="must have the same shape"):
        trim_loss([9, 5], [9])


@given(
    frames=st.lists(st.integers(1, 2**31 - 1), min_size=1, max_size=10),
    rate=st.sampled_from([24, Fraction(30000, 1001), 25, 60, Fraction(24000, 1001), 12, 16]),
    target=st.sampled_from([16, 8, 24, Fraction(30000, 1001), Fraction(25, 2)]),
)
def test_resample_frame_counts_is_exact(
    frames: list[int], rate: Fraction | int, target: Fraction | int
) -> None:
    rate, target = Fraction(rate), Fraction(target)
    got = resample_frame_counts(frames, [float(rate)] * len(frames), target)
    want = [
        f
        if rate <= target
        else (f - 1) * target.numerator * rate.denominator // (target.denominator * rate.numerator)
        + 1
        for f in frames
    ]
    assert got.tolist() == want


def test_resample_frame_counts_edges() -> None:
    # (F - 1) * 16 * 1001 / 30000 is an integer at F = 1876: the exact floor, not a float's.
    assert resample_frame_counts([1876, 1875], [30000 / 1001] * 2, 16).tolist() == [1002, 1001]
    assert resample_frame_counts([50, 50, 50], [math.nan, 0.0, 8.0], 16).tolist() == [50, 50, 50]
    with pytest.raises(ValueError, match="target_fps must be a positive number; got target_fps=0"):
        resample_frame_counts([5], [30.0], 0)
    with pytest.raises(ValueError, match="frames and fps must have the same shape"):
        resample_frame_counts([5], [30.0, 30.0], 16)


# -- shipped clip sizes, layers ------------------------------------------------------------------


def test_shipped_clip_sizes_regenerate_byte_for_byte(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(DATA / "generate_clips.py"), str(tmp_path)], check=True, timeout=60
    )
    shipped = (DATA / "clip_sizes.csv").read_bytes()
    assert (tmp_path / "clip_sizes.csv").read_bytes() == shipped
    assert len(shipped) <= 200_000
    lines = shipped.decode("ascii").splitlines()
    assert lines[0] == "width,height,frames,fps"
    rows = [line.split(",") for line in lines[1:]]
    assert len(rows) == 3000
    w, h, f = (np.array([int(r[i]) for r in rows]) for i in range(3))
    fps = {Fraction(r[3]) for r in rows}
    assert fps == {
        Fraction(24),
        Fraction(25),
        Fraction(30000, 1001),
        Fraction(30),
        Fraction(50),
        Fraction(60),
    }
    assert 0.4 < float(np.mean(w > h)) < 0.8  # mostly landscape, a fifth portrait
    assert 0.005 < float(np.mean(f == 1)) < 0.03  # about 1 % stills
    assert 100 < float(np.median(f)) < 250  # median 6 s at ~30 fps
    ids = VideoBucketCalculator.from_preset("wan2.1-480p").assign(w, h, f)
    assert float(np.mean(ids >= 0)) > 0.9


def test_video_modules_import_without_torch() -> None:
    code = (
        "import sys\n"
        "import dataorder.diffusion.buckets.cost, dataorder.diffusion.calculators.video\n"
        "import dataorder.diffusion.scan.videos, dataorder.diffusion.scan.probe\n"
        "import dataorder.diffusion.scan.manifest, dataorder.diffusion.scan.files\n"
        "print(sorted(k for k in sys.modules if k == 'torch' or k.startswith('torch.')))\n"
        "print('av' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["[]", "False"]  # and PyAV is imported only when a scan runs


def test_scanning_without_pyav_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataorder.diffusion.scan.videos as video_scan

    monkeypatch.setitem(sys.modules, "av", None)  # makes "import av" fail, installed or not
    calc = VideoBucketCalculator.from_preset("ltx-video")
    with pytest.raises(
        ImportError, match=r"scan_videos needs PyAV .*pip install 'dataorder\[video\]'"
    ):
        video_scan.scan_videos([], calc)
    with pytest.raises(ImportError, match="read_video_info needs PyAV"):
        video_scan.read_video_info("clip.mp4")
    old = types.SimpleNamespace(__version__="14.0.1")
    monkeypatch.setitem(sys.modules, "av", old)
    with pytest.raises(ImportError, match=r"scan_videos needs PyAV >= 17; got av 14\.0\.1"):
        video_scan.scan_videos([], calc)
    # Everything that does not read files works without it.
    scan = video_scan.build_video_scan(["a.mp4"], [1920], [1080], [100], calc)
    assert scan.bucket_ids.tolist() == calc.assign([1920], [1080], [100]).tolist()
