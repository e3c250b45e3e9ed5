"""Fitting video bucket sets to clips and a job layout (:mod:`dataorder.diffusion.fit.video`).

The budget is met whenever the fit finds a set, and the error gives the least waste it reaches
(which then fits); the fitted calculator assigns exactly the counts the fit planned, never
stretches a clip or upscales it beyond ``max_upscale``, and keeps the preset's too short and too
small clips; its vectorised assignment is the one-clip reference; it round-trips through its
config, pickle, a manifest and a sampler state, and the bucket sampler wastes what the fit
promised; bad input gets an error that names it.
"""

from __future__ import annotations

import doctest
import importlib.util
import json
import pickle
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataorder.diffusion.buckets.video_set as VR
import dataorder.diffusion.fit.video as VF
from dataorder.diffusion.buckets.cost import CostModel
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import TOO_SHORT, TOO_SMALL, VideoBucketCalculator
from dataorder.diffusion.fit.candidates import clip_digest
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.diffusion.sampler.stats import bucket_stats
from dataorder.diffusion.scan.manifest import build_manifest, read_manifest, write_manifest
from dataorder.tools.cli import main

IntArray = np.ndarray
DATA = Path(VF.__file__).resolve().parents[2] / "data"


def _generator() -> Any:
    """``dataorder/data/generate_clips.py``, the one definition of the synthetic population."""
    spec = importlib.util.spec_from_file_location("generate_clips", DATA / "generate_clips.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
BASE = VideoBucketCalculator.from_preset("wan2.1-480p")
COST = VideoBucketCalculator.from_preset(
    "wan2.1-480p", cost_model=CostModel.for_transformer(5120, 13824)
)


def scaled(divisor: int) -> settings:
    """The active profile's example count, divided (each example fits a set: seconds)."""
    return settings(max_examples=max(5, settings.default.max_examples // divisor))


def clips(n: int, seed: int) -> tuple[IntArray, IntArray, IntArray]:
    w, h, f = GEN.clip_population(n, seed)
    return w, h, f


@pytest.mark.parametrize(("module", "least"), [(VF, 3), (VR, 5), (GEN, 2)])
def test_doctests(module: object, least: int) -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)  # type: ignore[arg-type]
    assert result.failed == 0
    assert result.attempted >= least


@pytest.fixture(scope="module")
def fitted() -> tuple[VF.VideoFitResult, IntArray, IntArray, IntArray]:
    w, h, f = clips(4000, 11)
    fit = VF.fit_video_to_data(
        w, h, f, COST, global_batch_size=COST.global_batch_size(16, 1), max_waste=0.02
    )
    return fit, w, h, f


# -- the budget ---------------------------------------------------------------------------------

_LEAST = re.compile(r"\((\d+) of n=(\d+) clips that have a bucket (dropped|padded)\)")


@scaled(15)
@given(
    n=st.integers(300, 2500),
    seed=st.integers(0, 2**16),
    ranks=st.sampled_from([2, 8, 16, 32, 64]),
    cost=st.booleans(),
    drop=st.booleans(),
    max_waste=st.sampled_from([0.0, 0.004, 0.01, 0.03, 0.1]),
)
def test_the_budget_is_met_or_the_error_gives_the_least_waste(
    n: int, seed: int, ranks: int, cost: bool, drop: bool, max_waste: float
) -> None:
    w, h, f = clips(n, seed)
    g: Any = COST.global_batch_size(ranks, 1) if cost else ranks
    try:
        fit = VF.fit_video_to_data(
            w, h, f, COST, global_batch_size=g, max_waste=max_waste, drop_last=drop
        )
    except ValueError as exc:
        message = str(exc)
        found = _LEAST.search(message)
        if found is None:  # too few clips for the batches: every set wastes them all
            assert message.startswith("global_batch_size must be small enough for the clips")
            return
        least, total = int(found.group(1)), int(found.group(2))
        assert least / total > max_waste  # the message names a least above the budget ...
        fit = VF.fit_video_to_data(  # ... and that least is reached
            w, h, f, COST, global_batch_size=g, max_waste=least / total, drop_last=drop
        )
        assert fit.waste <= least
        max_waste = least / total
    assert fit.waste / fit.num_clips <= max_waste
    # the calculator makes the counts the fit planned, so it wastes what the fit says
    calc = fit.calculator()
    ids = calc.assign(w, h, f)
    ok = ids >= 0
    assert np.bincount(ids[ok], minlength=len(calc)).tolist() == fit.counts.tolist()
    sizes = [g] * len(calc) if not callable(g) else [g(b) for b in calc.get_all_buckets()]
    assert fit.global_batch_sizes.tolist() == list(sizes)
    per = fit.counts % fit.global_batch_sizes if drop else (-fit.counts) % fit.global_batch_sizes
    assert int(per.sum()) == fit.waste
    assert 0 <= fit.mean_crop_loss < 1
    assert 0 <= fit.mean_trim_loss < 1


def test_too_few_clips_for_one_batch_says_so() -> None:
    w, h, f = clips(40, 3)
    with pytest.raises(ValueError, match=r"global_batch_size must be small enough for the cl"):
        VF.fit_video_to_data(w, h, f, BASE, global_batch_size=512)


NINE = (  # seven 3:1 clips, one a little squarer, one small portrait no landscape shape may take
    [1500] * 7 + [2980, 301],
    [500] * 7 + [1008, 580],
    [81] * 9,
)


@pytest.mark.parametrize("max_waste", [0.5, 0.9, 0.99])
def test_clips_the_preset_buckets_with_little_waste_are_fitted(max_waste: float) -> None:
    """The preset wastes 1 of these 9 clips (8 in one bucket, the portrait alone); every class
    structure of whole batches the search lists has a class no batch fills."""
    calc = VideoBucketCalculator.fit_to_data(
        *NINE, global_batch_size=8, max_waste=max_waste, preset="wan2.1-480p"
    )
    counts = np.bincount(calc.assign(*NINE), minlength=len(calc))
    assert int((counts % 8).sum()) <= 1


def test_the_least_waste_reported_is_at_most_the_presets() -> None:
    with pytest.raises(ValueError, match=r"the least waste .* \(1 of n=9 clips .* dropped\)"):
        VideoBucketCalculator.fit_to_data(
            *NINE, global_batch_size=8, max_waste=0.1, preset="wan2.1-480p"
        )


@pytest.mark.parametrize(("cost", "drop"), [(True, True), (False, False)])
def test_the_programmes_shortcuts_change_no_fit(
    monkeypatch: pytest.MonkeyPatch, cost: bool, drop: bool
) -> None:
    """The least trim read off the bins and the sparse pass in segments are the dynamic
    programme's own answers: the same set with them and without."""
    import dataorder.diffusion.fit.programme as FP

    w, h, f = clips(1500, 7)
    g: Any = COST.global_batch_size(8, 1) if cost else 16

    def fit() -> VF.VideoFitResult:
        return VF.fit_video_to_data(w, h, f, COST, global_batch_size=g, drop_last=drop,
                                    max_waste=0.02)  # fmt: skip

    fast = fit()
    monkeypatch.setattr(FP, "_SHORTCUT", False)
    plain = fit()
    assert fast.bucket_set.config() == plain.bucket_set.config()
    assert fast.counts.tolist() == plain.counts.tolist()
    assert (fast.mean_crop_loss, fast.mean_trim_loss) == (
        plain.mean_crop_loss,
        plain.mean_trim_loss,
    )


# -- what the fitted calculator does ------------------------------------------------------------


def test_the_calculator_keeps_the_presets_too_short_and_too_small(
    fitted: tuple[VF.VideoFitResult, IntArray, IntArray, IntArray],
) -> None:
    fit, w, h, f = fitted
    calc = fit.calculator()
    base_ids, ids = COST.assign(w, h, f), calc.assign(w, h, f)
    assert ((ids < 0) == (base_ids < 0)).all()
    assert (ids[ids < 0] == base_ids[base_ids < 0]).all()
    assert (fit.too_short, fit.too_small) == (
        int((base_ids == TOO_SHORT).sum()),
        int((base_ids == TOO_SMALL).sum()),
    )
    assert fit.too_small > 0  # the population has clips a 480p set would upscale too much
    assert fit.num_clips == int((base_ids >= 0).sum())
    # what bucket_stats measures is what the fit reports
    ok = ids >= 0
    st_ = bucket_stats(w[ok], h[ok], calc, frames=f[ok], num_replicas=16,
                       batch_size=calc.batch_sizes(1))  # fmt: skip
    assert int(st_.overall["dropped"]) == fit.waste
    assert st_.overall["mean_crop_loss"] == pytest.approx(fit.mean_crop_loss, abs=1e-9)
    assert st_.overall["mean_trim_loss"] == pytest.approx(fit.mean_trim_loss, abs=1e-9)
    assert st_.overall["upscaled"] >= 0


def _check_rule(calc: VideoBucketCalculator, w: IntArray, h: IntArray, f: IntArray) -> None:
    """Vectorised == reference; never stretched, never upscaled beyond the limit."""
    ids = calc.assign(w, h, f)
    triples = zip(w.tolist(), h.tolist(), f.tolist(), strict=True)
    ref = [calc.get_bucket_id_for_video(a, b, c) for a, b, c in triples]
    assert ids.tolist() == ref
    u = calc.max_upscale
    base = VideoBucketCalculator.from_config(
        {k: v for k, v in calc.config().items() if k != "bucket_set"}
    )
    base_ids = base.assign(w, h, f)
    for i in np.flatnonzero(ids >= 0).tolist():
        b = calc.get_bucket_by_id(int(ids[i]))
        bw, bh = b["resolution"]
        assert b["frames"] <= f[i]  # trimmed, never stretched
        if u is not None:
            assert Fraction(bw, int(w[i])) <= u
            assert Fraction(bh, int(h[i])) <= u
    # the preset's too short and too small are kept everywhere, seen or unseen
    assert (ids[base_ids < 0] == base_ids[base_ids < 0]).all()


@scaled(10)
@given(
    seed=st.integers(0, 2**16),
    big=st.integers(1, 4000),
    long=st.integers(1, 2000),
)
def test_assignment_is_the_reference_rule_on_any_clip(
    fitted: tuple[VF.VideoFitResult, IntArray, IntArray, IntArray], seed: int, big: int, long: int
) -> None:
    fit = fitted[0]
    rng = np.random.default_rng(seed)
    n = 300
    w = rng.integers(1, big + 1, n)
    h = rng.integers(1, big + 1, n)
    f = rng.integers(1, long + 1, n)
    # near every threshold: exact ratios and lengths of the set's keys
    keys = [k for band in fit.bucket_set.bands for c in band.classes for k in c.starts]
    pick = [keys[i] for i in rng.integers(0, len(keys), 40)]
    w = np.concatenate((w, [k[1] for k in pick], [2**31 - 1, 1]))
    h = np.concatenate((h, [k[2] for k in pick], [2**31 - 1, 1]))
    f = np.concatenate((f, [k[0] for k in pick], [2**31 - 1, 1]))
    _check_rule(fit.calculator(), w.astype(np.int64), h.astype(np.int64), f.astype(np.int64))


def test_a_hand_made_set_with_size_splits_and_bands() -> None:
    cls = VR.VideoClass
    low = VR.VideoBand([cls((624, 624), (1, 9), ((1, 1, 1), (9, 1, 1)))], [])
    high = VR.VideoBand(
        [
            cls((480, 832), (17, 33), ((17, 1, 1), (33, 720, 1280))),
            cls((832, 480), (17, 33, 81), ((20, 1, 1), (33, 1, 1), (81, 1280, 1))),
            cls((960, 400), (81,), ((81, 1, 1),)),
        ],
        [(1, 1), (2, 1)],
    )
    rule = VR.FittedVideoSet([low, high], [(17, 1, 1)])
    calc = VideoBucketCalculator.from_preset("wan2.1-480p", bucket_set=rule)
    assert calc.frame_counts == (1, 9, 17, 33, 81)
    assert len(calc) == 8
    rng = np.random.default_rng(1)
    sizes = np.array([(1280, 720), (720, 1280), (1920, 1080), (1920, 800), (960, 960), (640, 360)])
    w, h = sizes[rng.integers(0, len(sizes), 3000)].T
    f = rng.integers(1, 120, 3000)
    _check_rule(calc, w, h, f)
    one = calc.get_bucket_for_video
    assert one(1280, 720, 18) is not None
    assert one(1280, 720, 18)["frames"] == 9
    assert one(1280, 720, 81)["frames"] == 81
    assert one(1279, 720, 81)["frames"] == 33
    assert one(720, 1280, 33)["frames"] == 33
    assert one(719, 1280, 33)["frames"] == 17


# -- the config, a manifest, a state ------------------------------------------------------------


def test_the_config_rebuilds_the_calculator_without_the_data(
    fitted: tuple[VF.VideoFitResult, IntArray, IntArray, IntArray],
) -> None:
    fit, w, h, f = fitted
    calc = fit.calculator()
    config = json.loads(json.dumps(calc.config()))
    assert config == calc.config()
    recorded = config["bucket_set"]["fit"]
    assert recorded["num_clips"] == fit.num_clips
    assert recorded["clip_digest"] == clip_digest(*(a[COST.assign(w, h, f) >= 0]
                                                      for a in (w, h, f)))  # fmt: skip
    assert recorded["global_batch_size"] == fit.global_batch_sizes.tolist()
    for again in (VideoBucketCalculator.from_config(config), pickle.loads(pickle.dumps(calc))):
        assert again == calc
        assert again.assign(w, h, f).tolist() == calc.assign(w, h, f).tolist()
    assert "fitted" in repr(calc)
    assert "bands" in calc.summary()
    # the image-style fit entry point gives the same calculator
    direct = VideoBucketCalculator.fit_to_data(
        w, h, f, global_batch_size=COST.global_batch_size(16, 1), max_waste=0.02,
        preset="wan2.1-480p", cost_model=COST.cost_model,
    )  # fmt: skip
    assert direct == calc

    class Mine(VideoBucketCalculator):
        pass

    mine = Mine.fit_to_data(
        w, h, f, global_batch_size=COST.global_batch_size(16, 1), max_waste=0.02,
        preset="wan2.1-480p", cost_model=COST.cost_model,
    )  # fmt: skip
    assert type(mine) is Mine  # a subclass builds a subclass
    assert mine.config() == calc.config()


def test_a_manifest_and_a_sampler_state_keep_the_fitted_set(
    fitted: tuple[VF.VideoFitResult, IntArray, IntArray, IntArray], tmp_path: Path
) -> None:
    fit, w, h, f = fitted
    calc = fit.calculator()
    ok = calc.assign(w, h, f) >= 0
    w, h, f = w[ok], h[ok], f[ok]
    manifest = build_manifest([f"{i}.mp4" for i in range(w.size)], w, h, calc, frames=f)
    write_manifest(manifest, tmp_path / "m.tsv")
    back = read_manifest(tmp_path / "m.tsv")
    assert back.calculator_object() == calc
    assert back.bucket_ids.tolist() == calc.assign(w, h, f).tolist()
    kwargs: dict[str, Any] = {"base_batch_size": 1, "drop_last": True, "num_replicas": 16,
                              "dynamic_batch_size": True}  # fmt: skip
    live = SequentialBucketSampler(
        BaseMultiresolutionDataset.from_video_sizes(w, h, f, calc), **kwargs, rank=3
    )
    assert live.samples_dropped == fit.waste  # the sampler's own plan wastes what the fit says
    live.set_epoch(1)
    state = json.loads(json.dumps(live.state_dict()))
    resumed = SequentialBucketSampler(
        BaseMultiresolutionDataset.from_manifest(back), **kwargs, rank=3
    )
    resumed.load_state_dict(state)
    assert resumed.batch_at(5, epoch=1) == live.batch_at(5, epoch=1)
    other = VF.fit_video_to_data(w, h, f, COST, global_batch_size=COST.global_batch_size(16, 1),
                                 max_waste=0.1).calculator()  # fmt: skip
    assert other != calc  # another fit is another bucket set: its state is refused
    refit = BaseMultiresolutionDataset.from_video_sizes(w, h, f, other)
    with pytest.raises(ValueError, match="another configuration: dataset is "):
        SequentialBucketSampler(refit, **kwargs, rank=3).load_state_dict(state)


@pytest.mark.parametrize(("drop", "ranks", "batch"), [(True, 8, 2), (False, 8, 2)])
def test_the_sampler_wastes_what_the_fit_promised(drop: bool, ranks: int, batch: int) -> None:
    """drop_last=True drops n mod (b R) per bucket; drop_last=False shrinks the last batch and
    pads (-n) mod R, which is the fit's padding with G = R."""
    w, h, f = clips(3000, 21)
    ok = BASE.assign(w, h, f) >= 0
    w, h, f = w[ok], h[ok], f[ok]
    g = batch * ranks if drop else ranks
    fit = VF.fit_video_to_data(w, h, f, BASE, global_batch_size=g, drop_last=drop,
                               max_waste=0.01)  # fmt: skip
    sampler = SequentialBucketSampler(
        BaseMultiresolutionDataset.from_video_sizes(w, h, f, fit.calculator()),
        base_batch_size=batch, drop_last=drop, num_replicas=ranks, rank=0,
    )  # fmt: skip
    assert (sampler.samples_dropped if drop else sampler.samples_padded) == fit.waste
    assert fit.waste <= 0.01 * w.size


def test_deterministic_and_independent_of_the_order_of_the_clips() -> None:
    w, h, f = clips(2500, 5)
    g = COST.global_batch_size(8, 1)
    fit = VF.fit_video_to_data(w, h, f, COST, global_batch_size=g, max_waste=0.05)
    first = fit.calculator().config()
    perm = np.random.default_rng(0).permutation(w.size)
    again = VF.fit_video_to_data(w[perm], h[perm], f[perm], COST, global_batch_size=g,
                                 max_waste=0.05)  # fmt: skip
    assert again.calculator().config() == first


# -- stats: the spread of per-step cost ---------------------------------------------------------


def test_the_spread_of_per_step_cost() -> None:
    calc = VideoBucketCalculator(4096, frame_counts=[1, 5], max_pixels=256 * 256,
                                 aspect_ratios=["1:1"])  # fmt: skip
    w, h, f = np.full(13, 256), np.full(13, 256), np.array([1] * 9 + [5] * 4)
    sizes = calc.batch_sizes(1)  # tokens 256 and 512 (2 latent frames): batches 4 and 4
    stats = bucket_stats(w, h, calc, frames=f, num_replicas=2, batch_size=sizes, drop_last=False)
    cost = [float(calc.cost_model.cost(int(t))) for t in calc.tokens]
    # 9 stills: one step of 4 per rank, one of ceil(1 / 2) = 1; 4 clips: one step of 2
    steps = [4 * cost[0], 1 * cost[0], 2 * cost[1]]
    mean = sum(steps) / 3
    assert stats.overall["step_cost_max_over_mean"] == pytest.approx(max(steps) / mean)
    assert stats.overall["step_cost_min_over_mean"] == pytest.approx(min(steps) / mean)


# -- bad input ----------------------------------------------------------------------------------

W, H, F = clips(200, 1)

ERRORS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"widths": W - 2000}, ValueError, r"widths\[\d+\] must be an int in \[1, "),
    ({"frames": F[:-1]}, ValueError, "widths, heights and frames must have the same shape"),
    ({"frames": F * 1.0}, TypeError, "frames must be an array of ints"),
    ({"max_waste": 1.0}, ValueError, r"max_waste must be a float in \[0.0, 1.0\); got "),
    ({"max_waste": -0.1}, ValueError, r"max_waste must be a float in \[0.0, 1.0\]; got "),
    ({"max_waste": True}, TypeError, "max_waste must be a float; got max_waste=True"),
    ({"global_batch_size": 0}, ValueError, "global_batch_size must be a positive int; got glo"),
    ({"global_batch_size": True}, TypeError, "global_batch_size must be a positive int; got glo"),
    ({"global_batch_size": lambda b: 0}, ValueError, r"global_batch_size\(\d+x\d+x\d+f\) must"),
    ({"global_batch_size": lambda b: 1.5}, TypeError, r"global_batch_size\(\d+x\d+x\d+f\) must"),
    # bounded before the fit counts the sizes (np.bincount took 8 TiB at 2**40, overflowed at 2**70)
    ({"global_batch_size": 2**40}, ValueError, r"global_batch_size must be at most 2\*\*31 = "),
    ({"global_batch_size": 2**70}, ValueError, r"global_batch_size must be at most 2\*\*31 = "),
    (
        {"global_batch_size": lambda b: 2**40},
        ValueError,
        r"global_batch_size\(\d+x\d+x\d+f\) must be at m",
    ),
    ({"drop_last": 1}, TypeError, "drop_last must be a bool"),
]


@pytest.mark.parametrize(("change", "exc", "message"), ERRORS)
def test_bad_input_names_the_argument(
    change: dict[str, Any], exc: type[Exception], message: str
) -> None:
    kwargs: dict[str, Any] = {"widths": W, "heights": H, "frames": F, "global_batch_size": 8}
    kwargs.update(change)
    with pytest.raises(exc, match=message):
        VF.fit_video_to_data(base=BASE, **kwargs)


def test_the_largest_global_batch_size_is_refused_for_the_clips_not_for_memory() -> None:
    # the fit counts the bucket batch sizes without a slot per value (np.bincount took 16 GiB)
    with pytest.raises(ValueError, match="global_batch_size must be small enough for the clips"):
        VF.fit_video_to_data(W, H, F, BASE, global_batch_size=2**31)


@pytest.mark.parametrize("base", [None, MultiTierBucketCalculator.from_preset("256p", 256)])
def test_a_base_that_is_no_video_calculator_is_refused_by_name(base: Any) -> None:
    # an AttributeError ('NoneType' object has no attribute 'bucket_set') before
    with pytest.raises(TypeError, match="base must be a VideoBucketCalculator; got base="):
        VF.fit_video_to_data(W, H, F, base, global_batch_size=8)


def test_the_clip_digest_is_pinned_and_checks_its_input() -> None:
    w, h, f = [832, 480, 1280, 832], [480, 832, 720, 480], [81, 17, 33, 5]
    # computed before the digest shared its body with size_digest's: a change would orphan
    # every recorded fit
    assert clip_digest(np.array(w), np.array(h), np.array(f)) == "de359546cd8e05ce1f6e492c9bef5f7f"
    assert clip_digest(w, h, f) == "de359546cd8e05ce1f6e492c9bef5f7f"  # lists: AttributeError
    with pytest.raises(ValueError, match=r"widths, heights and frames must have the same shape"):
        clip_digest(np.array(w), np.array(h), np.array(f[:1]))  # numpy broadcast it silently
    with pytest.raises(ValueError, match=r"frames\[1\] must be an int in \[1, "):
        clip_digest(w, h, [81, 0, 33, 5])
    with pytest.raises(TypeError, match="heights must be an array of ints; got heights="):
        clip_digest(w, [480.0] * 4, f)


def test_bad_settings_name_themselves() -> None:
    fit = VideoBucketCalculator.fit_to_data
    with pytest.raises(ValueError, match=r"preset must be one of 'wan2.1-480p'"):
        fit(W, H, F, global_batch_size=8, preset="wan3")
    with pytest.raises(TypeError, match=r"settings must be keyword arguments of .*\['colour'\]"):
        fit(W, H, F, global_batch_size=8, preset="wan2.1-480p", colour=5)
    with pytest.raises(TypeError, match="max_tokens must be an int when preset is None"):
        fit(W, H, F, global_batch_size=8)
    with pytest.raises(ValueError, match="base must be a calculator whose frame counts share"):
        fit(W, H, F, global_batch_size=8, max_tokens=32760, max_frames=81)  # no max_pixels
    fitted = VF.fit_video_to_data(W, H, F, BASE, global_batch_size=4, max_waste=0.5).calculator()
    with pytest.raises(TypeError, match="base must be a calculator of generated buckets"):
        VF.fit_video_to_data(W, H, F, fitted, global_batch_size=4)


def test_a_set_is_checked_against_its_calculator() -> None:
    cls = VR.VideoClass
    band = VR.VideoBand([cls((832, 480), (18,), ((18, 1, 1),))], [])
    with pytest.raises(ValueError, match=r"bucket_set.bands\[0\].classes\[0\].frames must be"):
        VideoBucketCalculator.from_preset("wan2.1-480p", bucket_set=VR.FittedVideoSet([band], []))
    band = VR.VideoBand([cls((840, 480), (17,), ((17, 1, 1),))], [])
    with pytest.raises(ValueError, match=r"classes\[0\].resolution must be a \(w, h\) with both"):
        VideoBucketCalculator.from_preset("wan2.1-480p", bucket_set=VR.FittedVideoSet([band], []))
    with pytest.raises(TypeError, match="bucket_set must be a FittedVideoSet or None"):
        VideoBucketCalculator.from_preset("wan2.1-480p", bucket_set={"bands": []})


def test_the_rule_refuses_a_bad_set() -> None:
    cls = VR.VideoClass
    good = cls((832, 480), (17, 81), ((17, 1, 1), (81, 1, 1)))
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: VR.VideoBand([cls((832, 480), (81, 17), ((81, 1, 1), (82, 1, 1)))], []),
         ValueError, r"band.classes\[0\].frames must be strictly increasing"),
        (lambda: VR.VideoBand([cls((832, 480), (17,), ((16, 1, 1),))], []), ValueError,
         r"starts\[0\] must be a key \(F, W, H\) with F >= its frame count 17"),
        (lambda: VR.VideoBand([good, good], [(1, 1)]), ValueError,
         "classes must be strictly ascending in aspect ratio"),
        (lambda: VR.VideoBand([cls((480, 832), (17,), ((17, 1, 1),)), good], [(2, 1)]),
         ValueError, r"thresholds\[0\] must be a fraction in \[480/832, 832/480\)"),
        # each named, where list() of the raw value raised "'int' object is not iterable"
        (lambda: VR.VideoBand([good], 5), TypeError, "band.thresholds must be a sequence of "),
        (lambda: VR.VideoBand([good], None), TypeError, "band.thresholds must be a sequence of "),
        (lambda: VR.VideoBand([{**good.config(), "frames": 17}], []), TypeError,
         r"band.classes\[0\].frames must be a sequence of ints; got band.classes\[0\].frames=17"),
        (lambda: VR.VideoBand([{**good.config(), "resolution": 480}], []), TypeError,
         r"band.classes\[0\].resolution\[0\] must be a \(width, height\) pair of ints; got"),
        (lambda: VR.VideoBand([{**good.config(), "starts": [(17, 1, 1), 81]}], []), TypeError,
         r"band.classes\[0\].starts\[1\] must be a key \(F, W, H\) of three ints; got"),
        (lambda: VR.FittedVideoSet([VR.VideoBand([good], [])] * 2, [(17, 1, 1)]), ValueError,
         r"bands\[1\] must be a band whose frame counts all exceed band 0's"),
        (lambda: VR.FittedVideoSet([VR.VideoBand([good], [])], [(17, 1, 1)]), ValueError,
         "band_starts must be 0 keys"),
        (lambda: VR.FittedVideoSet.from_config({"version": 2, "bands": [], "band_starts": [],
                                                "fit": None}), ValueError,
         r"config\['version'\] must be 1"),
    ]  # fmt: skip
    for make, exc, message in cases:
        with pytest.raises(exc, match=message):
            make()
    # 1-d int arrays are still as good as lists
    arrays = cls(np.array([832, 480]), np.array([17, 81]), ((17, 1, 1), (81, 1, 1)))
    assert VR.VideoBand([arrays], np.zeros((0, 2), dtype=np.int64)).classes == (good,)


# -- the command line ---------------------------------------------------------------------------


def test_plan_fits_a_video_manifest(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    w, h, f = clips(3000, 9)
    ok = BASE.assign(w, h, f) >= 0
    w, h, f = w[ok], h[ok], f[ok]
    path = tmp_path / "clips.tsv"
    write_manifest(build_manifest([f"{i}.mp4" for i in range(w.size)], w, h, BASE, frames=f), path)
    written = tmp_path / "fitted.tsv"
    args = ["plan", str(path), "--video", "--fit", "--num-replicas", "8", "--batch-size", "1",
            "--drop-last", "--dynamic-batch-size", "--plain"]  # fmt: skip
    assert main([*args, "--write-manifest", str(written)]) == 0
    out = capsys.readouterr().out
    assert "bucket sets on this layout" in out
    assert "step cost max/mean" in out
    fit = VF.fit_video_to_data(w, h, f, BASE, global_batch_size=BASE.global_batch_size(8, 1))
    assert f"fitted ({fit.num_buckets} buckets)" in out
    assert f"fitted: {fit.waste} clips dropped ({100 * fit.waste_share:.2f} % <= 1.00 %)" in out
    refit = read_manifest(written)
    assert refit.calculator_object() == fit.calculator()
    sampler = SequentialBucketSampler(
        BaseMultiresolutionDataset.from_manifest(refit), 1, drop_last=True, num_replicas=8,
        rank=0, dynamic_batch_size=True,
    )  # fmt: skip
    assert sampler.samples_dropped == fit.waste
    assert main([*args[:-1], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["fitted"]
    assert data["config"] == refit.calculator
    assert data["samples_dropped"] == fit.waste
    # --video on an image manifest
    image = tmp_path / "images.tsv"
    from dataorder.diffusion.calculators.image import MultiTierBucketCalculator

    write_manifest(build_manifest(["a.jpg"], [640], [480], MultiTierBucketCalculator()), image)
    assert main(["plan", str(image), "--video", "--num-replicas", "1", "--batch-size", "1"]) != 0
    assert "--video plans a video manifest" in capsys.readouterr().err


def test_the_readme_figures_at_50000_clips_and_64_ranks() -> None:
    """The README's headline (BENCHMARKS.md 8.4.1): 50,000 clips of ``clip_population(n, 2)``,
    64 ranks x 1 clip, cost-model batches, ``max_waste=0.01``, ``drop_last``: the fitted set
    (58 buckets) drops 0.90 % where wan2.1-480p drops 19.67 %, at a crop of 3.10 % (2.17 %) and
    a trim of 34.74 % (30.04 %). The figures are the sampler's own partition."""
    w, h, f = clips(50_000, 2)
    g = COST.global_batch_size(64, 1)
    fit = VF.fit_video_to_data(w, h, f, COST, global_batch_size=g, max_waste=0.01)
    figures = []
    for calc in (COST, fit.calculator()):
        ok = calc.assign(w, h, f) >= 0
        o = bucket_stats(w[ok], h[ok], calc, frames=f[ok], num_replicas=64,
                         batch_size=calc.batch_sizes(1)).overall  # fmt: skip
        shares = (o["dropped"] / o["images"], o["mean_crop_loss"], o["mean_trim_loss"])
        figures.append([round(100 * x, 2) for x in shares])
    assert fit.num_buckets == 58
    assert figures == [[19.67, 2.17, 30.04], [0.9, 3.1, 34.74]]
