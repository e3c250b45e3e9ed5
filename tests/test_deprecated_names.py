"""The 0.2 names renamed in 0.3 still work, say what replaced them, and give the same thing.

``layout`` now means only the data-parallel layout (the sizes a state records), so an epoch's
global blocks are ``EpochBlocks`` / ``sampler.blocks``; the bucket sampler's ``plan()`` read as
a second plan beside ``epoch_plan()`` and is ``bucket_plan()``. CHANGELOG 0.3.0 lists them.
"""

from __future__ import annotations

import pytest

import dataorder
import dataorder.core.partition as partition
import dataorder.parallel.distributed as distributed
from dataorder.core.partition import EpochBlocks, plan_segments
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import BucketSampler, SequentialBucketSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.parallel.distributed import DistributedSampler, distributed_blocks


def test_the_renamed_functions_and_classes_warn_and_are_the_new_ones() -> None:
    with pytest.warns(
        DeprecationWarning,
        match=r"dataorder\.EpochLayout is deprecated; use dataorder\.EpochBlocks",
    ):
        assert dataorder.EpochLayout is EpochBlocks
    with pytest.warns(DeprecationWarning, match=r"EpochLayout is deprecated; use EpochBlocks"):
        assert partition.EpochLayout is EpochBlocks
    with pytest.warns(DeprecationWarning, match=r"distributed_layout is deprecated"):
        assert distributed.distributed_layout is distributed_blocks
    segments = plan_segments([7, 5], per_rank=2, dp_size=2, tail="pad")
    with pytest.warns(DeprecationWarning, match=r"SegmentPlan\.layout\(\) is deprecated"):
        assert segments.layout(1) == segments.blocks(1)
    assert issubclass(SequentialBucketSampler, BucketSampler)
    with pytest.raises(AttributeError, match="EpochLayouts"):
        dataorder.EpochLayouts  # noqa: B018


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
