"""The 0.2 names renamed in 0.3 still work, say what replaced them, and give the same thing.

``layout`` now means only the data-parallel layout (the sizes a state records), so an epoch's
global blocks are ``EpochBlocks`` / ``sampler.blocks``; the bucket sampler's ``plan()`` read as
a second plan beside ``epoch_plan()`` and is ``bucket_plan()``. CHANGELOG 0.3.0 lists them.
"""

from __future__ import annotations

import pytest

from dataorder.core.partition import EpochBlocks, EpochLayout
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import BucketSampler, SequentialBucketSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.parallel.distributed import (
    DistributedSampler,
    distributed_blocks,
    distributed_layout,
)


def test_the_renamed_functions_and_classes_are_the_new_ones() -> None:
    assert EpochLayout is EpochBlocks
    assert distributed_layout is distributed_blocks
    assert issubclass(SequentialBucketSampler, BucketSampler)


@pytest.mark.parametrize(
    "sampler",
    [
        MegatronPretrainingRandomSampler(100, 2, 1, 4, seed=3),
        DistributedSampler(range(23), 4, 1, seed=3),
    ],
    ids=["megatron", "distributed"],
)
def test_sampler_layout_warns_and_is_blocks(sampler: object) -> None:
    with pytest.warns(DeprecationWarning, match=r"\.layout is deprecated; use \.blocks"):
        old = sampler.layout  # type: ignore[attr-defined]
    assert old == sampler.blocks  # type: ignore[attr-defined]


def test_bucket_plan_warns_and_is_bucket_plan() -> None:
    ds = BaseMultiresolutionDataset.from_sizes([512] * 6 + [768] * 4, [512] * 6 + [512] * 4)
    sampler = SequentialBucketSampler(ds, base_batch_size=2, num_replicas=2, rank=0, seed=1)
    with pytest.warns(DeprecationWarning, match=r"plan\(\) is deprecated; use \.bucket_plan\(\)"):
        old = sampler.plan(0)
    assert old == sampler.bucket_plan(0)
