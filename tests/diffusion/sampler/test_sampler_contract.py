"""The sampler contract over SequentialBucketSampler configurations.

The table covers shuffling on and off, drop_last on and off, dynamic batch sizes, NeMo's
compatibility mode, skewed bucket sizes (buckets of one sample, buckets smaller than one global
batch, one bucket holding most of the data), video buckets (a bucket is a ``(w, h, frames)``
shape, batches sized by a cost model; and a set fitted to the clips, with the loop recipes) and
several data-parallel sizes, with elastic resumes
where the mode allows them (``compat="nemo"`` refuses another ``num_replicas``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from dataorder.diffusion.calculators.video import VideoBucketCalculator
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.testing import (
    RECIPES,
    WORKER_RECIPES,
    SamplerCase,
    check_contract,
    check_loop_recipes,
)


def dataset(sizes: list[int], seed: int) -> BaseMultiresolutionDataset:
    ids = np.repeat(np.arange(len(sizes)), sizes)
    np.random.default_rng(seed).shuffle(ids)
    res = [(64 * (j % 4 + 1), 64 * (j // 4 + 1)) for j in range(len(sizes))]
    return BaseMultiresolutionDataset.from_bucket_ids(ids, res)


SKEWED = dataset([1, 2, 5, 9, 17, 60, 3], seed=1)  # 97 samples, one big bucket, tiny ones
EVEN = dataset([24, 24, 24], seed=2)
MANY = dataset([4, 7, 1, 12, 6, 3, 9, 2, 5, 11], seed=3)  # 60 samples in 10 small buckets
SMALL = dataset([5, 9, 3, 14], seed=4)  # 31 samples: short epochs for the loop recipes


def video_dataset(n: int, seed: int) -> BaseMultiresolutionDataset:
    """Clips of camera shapes and lengths in 18 video buckets (frames 1, 17, ..., 81)."""
    calc = VideoBucketCalculator.from_preset(
        "wan2.1-480p", aspect_ratios=["1:1", "16:9"], frame_step=16
    )
    rng = np.random.default_rng(seed)
    sizes = np.array([(1280, 720), (720, 1280), (960, 960), (1920, 1080), (640, 360)])
    w, h = sizes[rng.integers(0, len(sizes), n)].T
    frames = rng.integers(1, 120, n)
    return BaseMultiresolutionDataset.from_video_sizes(w, h, frames, calc)


VIDEO = video_dataset(150, seed=5)


def fitted_video_dataset(n: int, seed: int) -> BaseMultiresolutionDataset:
    """Camera clips in a bucket set fitted to them for 2 ranks x 1 clip (fit_to_data)."""
    rng = np.random.default_rng(seed)
    sizes = np.array([(1280, 720), (720, 1280), (960, 960), (1920, 1080), (1920, 800)])
    w, h = sizes[rng.integers(0, len(sizes), n)].T
    frames = rng.integers(1, 120, n)
    calc = VideoBucketCalculator.fit_to_data(
        w, h, frames, global_batch_size=2, max_waste=0.05, preset="wan2.1-480p"
    )
    return BaseMultiresolutionDataset.from_video_sizes(w, h, frames, calc)


FITTED_VIDEO = fitted_video_dataset(16, seed=6)  # short epochs: the loop recipes run on it


def make(ds: BaseMultiresolutionDataset, **kw: Any) -> Callable[[int, int], Any]:
    def build(rank: int, world: int) -> SequentialBucketSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # buckets that drop_last removes entirely
            return SequentialBucketSampler(ds, num_replicas=world, rank=rank, **kw)

    return build


# (name, dataset, kwargs, world, elastic worlds, processes)
CASES: list[tuple[str, BaseMultiresolutionDataset, dict[str, Any], int, tuple[int, ...], bool]] = [
    ("small-keep-shuffled", SMALL, {"base_batch_size": 2, "drop_last": False}, 2, (1,), False),
    (
        "small-nemo-keep",
        SMALL,
        {"base_batch_size": 2, "drop_last": False, "compat": "nemo", "seed": 3},
        2,
        (),
        False,
    ),
    ("skewed-keep-shuffled", SKEWED, {"base_batch_size": 2, "drop_last": False}, 4, (2, 1), True),
    ("skewed-drop-shuffled", SKEWED, {"base_batch_size": 2}, 4, (2,), False),
    (
        "skewed-keep-sorted",
        SKEWED,
        {
            "base_batch_size": 3,
            "drop_last": False,
            "shuffle_buckets": False,
            "shuffle_within_bucket": False,
        },
        3,
        (1,),
        False,
    ),
    ("even-drop-one-rank", EVEN, {"base_batch_size": 5, "seed": 9}, 1, (), False),
    (
        "many-keep-dynamic",
        MANY,
        {
            "base_batch_size": 2,
            "drop_last": False,
            "dynamic_batch_size": True,
            "base_resolution": (128, 64),
        },
        8,
        (4, 2),
        False,
    ),
    (
        "many-drop-buckets-only",
        MANY,
        {"base_batch_size": 1, "shuffle_within_bucket": False, "seed": 5},
        4,
        (2,),
        False,
    ),
    (
        "skewed-keep-within-only",
        SKEWED,
        {"base_batch_size": 4, "drop_last": False, "shuffle_buckets": False},
        2,
        (1,),
        False,
    ),
    (
        "nemo-keep",
        SKEWED,
        {"base_batch_size": 2, "drop_last": False, "compat": "nemo"},
        4,
        (),
        False,
    ),
    ("nemo-drop", MANY, {"base_batch_size": 2, "compat": "nemo", "seed": 1}, 2, (), True),
    (
        "small-interleaved-keep",
        SMALL,
        {
            "base_batch_size": 2,
            "drop_last": False,
            "bucket_order": "interleaved",
            "interleave_unit": 2,
        },
        2,
        (1,),
        False,
    ),
    (
        "skewed-interleaved-drop-unit4",
        SKEWED,
        {"base_batch_size": 2, "bucket_order": "interleaved", "interleave_unit": 4},
        2,
        (4, 1),
        True,
    ),
    (
        "many-interleaved-dynamic-fixed",
        MANY,
        {
            "base_batch_size": 2,
            "drop_last": False,
            "dynamic_batch_size": True,
            "base_resolution": (128, 64),
            "bucket_order": "interleaved",
            "interleave_unit": 8,
            "shuffle_buckets": False,
        },
        4,
        (8, 2, 1),
        False,
    ),
    (
        "video-keep-dynamic-interleaved",
        VIDEO,
        {
            "base_batch_size": 2,
            "drop_last": False,
            "dynamic_batch_size": True,
            "bucket_order": "interleaved",
            "interleave_unit": 4,
        },
        4,
        (2, 1),
        False,
    ),
    ("video-drop-sequential", VIDEO, {"base_batch_size": 1, "seed": 3}, 2, (1,), False),
    ("video-fitted-drop", FITTED_VIDEO, {"base_batch_size": 1, "seed": 4}, 2, (1,), False),
    (
        "nemo-keep-dynamic-sorted",
        MANY,
        {
            "base_batch_size": 2,
            "drop_last": False,
            "compat": "nemo",
            "dynamic_batch_size": True,
            "base_resolution": (128, 128),
            "shuffle_buckets": False,
        },
        3,
        (),
        False,
    ),
]


# The loop-recipe matrix (dataorder.testing.recipes) resumes at every batch of a 3-epoch run
# under each training-loop recipe: it runs on the cases with short epochs, at least one per
# mode; the direct checks run on every case.
RECIPE_CASES = {
    "small-keep-shuffled",
    "small-nemo-keep",
    "small-interleaved-keep",
    "video-fitted-drop",
}
# the recipes with worker processes cost seconds each: they run on one case
WORKER_CASE = "small-keep-shuffled"


# By default (CI) the recipes without workers run on WORKER_CASE alone: one case of this family
# in every plain loop (test_contract_blend runs every recipe, workers included, by default); the
# rest of the matrix above is marked slow (test_the_loop_recipes_on_the_other_cases).
DEFAULT_RECIPES = {WORKER_CASE: tuple(r for r in RECIPES if r not in WORKER_RECIPES)}


def _recipes(name: str) -> tuple[str, ...]:
    if name == WORKER_CASE:
        return RECIPES
    if name in RECIPE_CASES:
        return tuple(r for r in RECIPES if r not in WORKER_RECIPES)
    return ()


def _slow_recipes(name: str) -> tuple[str, ...]:
    return tuple(r for r in _recipes(name) if r not in DEFAULT_RECIPES.get(name, ()))


@pytest.mark.parametrize(
    ("name", "ds", "kw", "world", "elastic", "processes"), CASES, ids=[c[0] for c in CASES]
)
def test_contract(
    name: str,
    ds: BaseMultiresolutionDataset,
    kw: dict[str, Any],
    world: int,
    elastic: tuple[int, ...],
    processes: bool,
) -> None:
    case = SamplerCase(
        name=name,
        make=make(ds, **kw),
        dataset_size=len(ds),
        dp_size=world,
        elastic_dp_sizes=elastic,
    )
    check_contract(
        case,
        resume_points=30,
        processes=processes,
        recipes=DEFAULT_RECIPES.get(name, ()),
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "ds", "kw", "world"),
    [c[:4] for c in CASES if _slow_recipes(c[0])],
    ids=[c[0] for c in CASES if _slow_recipes(c[0])],
)
def test_the_loop_recipes_on_the_other_cases(
    name: str, ds: BaseMultiresolutionDataset, kw: dict[str, Any], world: int
) -> None:
    """The loop recipes test_contract leaves out by default: the worker recipes (seconds each)
    and the other cases of the matrix."""
    case = SamplerCase(name=name, make=make(ds, **kw), dataset_size=len(ds), dp_size=world)
    ran = check_loop_recipes(case, _slow_recipes(name))
    assert ran == list(_slow_recipes(name)), ran  # the test extra installs every framework


def test_nemo_mode_is_not_elastic() -> None:
    case = SamplerCase(
        name="nemo",
        make=make(EVEN, base_batch_size=2, compat="nemo"),
        dataset_size=72,
        dp_size=4,
        elastic_dp_sizes=(2,),
    )
    with pytest.raises(ValueError, match="num_replicas is 4 in the state but 2 in this sampler"):
        check_contract(case, resume_points=4)
