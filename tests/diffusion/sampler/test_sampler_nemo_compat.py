"""``compat="nemo"``: NeMo Automodel's exact batches.

The worked examples of the NeMo notes (section 4) run everywhere; the oracle tests compare with
NeMo's own ``SequentialBucketSampler`` and ``BaseMultiresolutionDataset`` over a sweep of
configurations when ``nemo-automodel==0.7.0`` is installed, and skip otherwise.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.testing import run_epoch
from tests.diffusion.sampler.test_dataset import (
    item,
    nemo_dataset,
    nemo_diffusion_module,
    write_cache,
)

S = SequentialBucketSampler


def worked_example() -> BaseMultiresolutionDataset:
    return BaseMultiresolutionDataset.from_bucket_ids(
        [0, 0, 0, 0, 0, 1, 1, 1], resolutions=[(256, 256), (320, 192)]
    )


def ranks(ds: Any, world: int, epoch: int = 0, **kw: Any) -> list[list[list[int]]]:
    out = []
    for r in range(world):
        s = S(ds, num_replicas=world, rank=r, compat="nemo", **kw)
        s.set_epoch(epoch)
        out.append(run_epoch(s))
    return out


NO_SHUFFLE = {"base_batch_size": 2, "shuffle_buckets": False, "shuffle_within_bucket": False}


def test_worked_example_no_shuffle_drop_last() -> None:
    assert ranks(worked_example(), 2, **NO_SHUFFLE) == [[[5, 7], [0, 2]], [[6, 5], [1, 3]]]
    s = S(worked_example(), num_replicas=2, rank=0, compat="nemo", **NO_SHUFFLE)
    # sample 4 is never seen and 5 is read twice
    assert (len(s), s.samples_dropped, s.samples_padded) == (2, 1, 1)


def test_worked_example_no_shuffle_keep_last() -> None:
    got = ranks(worked_example(), 2, drop_last=False, **NO_SHUFFLE)
    assert got == [[[5, 7], [0, 2], [4]], [[6, 5], [1, 3], [0]]]


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [
        (0, [[[7, 5], [4, 0], [2]], [[6, 7], [3, 1], [4]]]),
        (1, [[[5, 6], [2, 4], [1]], [[7, 5], [0, 3], [2]]]),
    ],
)
def test_worked_example_shuffled(epoch: int, expected: list[list[list[int]]]) -> None:
    got = ranks(worked_example(), 2, epoch=epoch, base_batch_size=2, drop_last=False, seed=42)
    assert got == expected


def test_worked_example_dynamic_batch_sizes() -> None:
    """Base 4 @ 512x512: 40 samples at 256x256 give 16, 16, 8; 512x512 gives 4; 1024x1024, 1."""
    ds = BaseMultiresolutionDataset.from_bucket_ids(
        [0] * 40 + [1] * 8 + [2] * 3, resolutions=[(256, 256), (512, 512), (1024, 1024)]
    )
    (got,) = ranks(
        ds, 1, base_batch_size=4, dynamic_batch_size=True, drop_last=False, shuffle_buckets=False
    )
    assert [len(b) for b in got] == [16, 16, 8, 4, 4, 1, 1, 1]


def test_resume_matches_nemos_first_resume_and_stays_exact() -> None:
    ds = BaseMultiresolutionDataset.from_bucket_ids(
        np.arange(50) % 3, resolutions=[(64, 64), (128, 64), (64, 128)]
    )
    kw: dict[str, Any] = {"base_batch_size": 3, "drop_last": False, "compat": "nemo"}
    full = run_epoch(S(ds, num_replicas=2, rank=1, **kw))
    got: list[list[int]] = []
    state = None
    while len(got) < len(full):
        s = S(ds, num_replicas=2, rank=1, **kw)
        if state is not None:
            s.load_state_dict(state)
        got += run_epoch(s, limit=2)
        state = s.state_dict()
    assert got == full


# -- the oracle: NeMo's own classes (optional) -----------------------------------------------------
def _random_cache(root: Path, rng: np.random.Generator) -> Path:
    res = [(256, 256), (320, 192), (192, 320), (384, 160), (512, 512), (128, 128)]
    ratios = {r: r[0] / r[1] for r in res}
    num_buckets = int(rng.integers(1, len(res) + 1))
    chosen = [res[i] for i in rng.permutation(len(res))[:num_buckets]]
    weights = rng.dirichlet(np.ones(num_buckets))
    n = int(rng.integers(1, 70))
    picks = rng.choice(num_buckets, size=n, p=weights)
    items = [item(*chosen[p], ratios[chosen[p]]) for p in picks]
    cut = int(rng.integers(0, n + 1))
    return write_cache(root, [items[:cut], items[cut:]])


def _nemo_batches(sampler_cls: Any, ds: Any, world: int, epoch: int, **kw: Any) -> list[Any]:
    out = []
    for r in range(world):
        s = sampler_cls(ds, num_replicas=world, rank=r, **kw)
        s.set_epoch(epoch)
        out.append([list(b) for b in s])
    return out


@pytest.mark.parametrize("case", range(12))
def test_batches_equal_nemos_sampler(case: int, tmp_path: Path) -> None:
    nemo_sampler = nemo_diffusion_module("sampler").SequentialBucketSampler
    logging.getLogger(nemo_sampler.__module__).setLevel(logging.WARNING)
    rng = np.random.default_rng(1000 + case)
    cache = _random_cache(tmp_path, rng)
    nemo_ds = nemo_dataset(cache)
    ours = BaseMultiresolutionDataset(cache)
    world = int(rng.integers(1, 5))
    bs = int(rng.integers(1, 6))
    seed = int(rng.integers(0, 2**31))
    compared = 0
    for flags in range(16):
        kw: dict[str, Any] = {
            "base_batch_size": bs,
            "base_resolution": (256, 256),
            "drop_last": bool(flags & 1),
            "shuffle_buckets": bool(flags & 2),
            "shuffle_within_bucket": bool(flags & 4),
            "dynamic_batch_size": bool(flags & 8),
            "seed": seed,
        }
        for epoch in (0, 3):
            expected = _nemo_batches(nemo_sampler, nemo_ds, world, epoch, **kw)
            if not expected[0]:  # NeMo's recipe raises "Training dataloader is empty"
                with pytest.raises(ValueError, match="drop_last=True leaves nothing to train"):
                    S(ours, num_replicas=world, rank=0, compat="nemo", **kw)
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # buckets that drop_last removes entirely
                got = [
                    run_epoch(_set(S(ours, num_replicas=world, rank=r, compat="nemo", **kw), epoch))
                    for r in range(world)
                ]
            assert got == expected, (kw, epoch, world)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s = _set(S(ours, num_replicas=world, rank=0, compat="nemo", **kw), epoch)
            n = nemo_sampler(nemo_ds, num_replicas=world, rank=0, **kw)
            assert len(s) == len(n)
            if not kw["shuffle_buckets"]:  # NeMo's get_batch_info is right only without shuffling
                for i in range(len(s)):
                    info = s.get_batch_info(i)
                    info["batch_size"] = info["bucket_batch_size"]  # NeMo's name for it
                    assert {k: info[k] for k in n.get_batch_info(i)} == n.get_batch_info(i)
            compared += 1
    assert compared > 0


def test_first_resume_equals_nemos(tmp_path: Path) -> None:
    nemo_sampler = nemo_diffusion_module("sampler").SequentialBucketSampler
    rng = np.random.default_rng(7)
    cache = _random_cache(tmp_path, rng)
    nemo_ds, ours = nemo_dataset(cache), BaseMultiresolutionDataset(cache)
    kw: dict[str, Any] = {"base_batch_size": 1, "drop_last": False, "seed": 3}
    # k == len too: a state saved after the epoch's last batch resumes into an empty pass in both
    for k in range(len(S(ours, num_replicas=2, rank=1, compat="nemo", **kw)) + 1):
        a = nemo_sampler(nemo_ds, num_replicas=2, rank=1, **kw)
        head = [list(b) for _, b in zip(range(k), a, strict=False)]
        b = nemo_sampler(nemo_ds, num_replicas=2, rank=1, **kw)
        b.load_state_dict(a.state_dict())
        ours_a = S(ours, num_replicas=2, rank=1, compat="nemo", **kw)
        assert run_epoch(ours_a, limit=k) == head
        ours_b = S(ours, num_replicas=2, rank=1, compat="nemo", **kw)
        ours_b.load_state_dict(ours_a.state_dict())
        assert run_epoch(ours_b) == [list(x) for x in b]


def _set(s: SequentialBucketSampler, epoch: int) -> SequentialBucketSampler:
    s.set_epoch(epoch)
    return s
