"""``epoch_plan(e, layout=L)`` is what a sampler built on ``L`` yields, for every sampler and mode.

A plan of another layout is how a state from that layout is checked and continued, and a public
way to ask "what would rank r read on L". Each case builds a sampler on one layout, asks it for
the plan of a random other layout, and compares every rank's batches with a sampler built on
that layout; where no sampler can be built on ``L`` the plan must be refused with a ValueError
too (``data_sharding`` once kept the old layout's shards).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataorder import (
    BaseMultiresolutionDataset,
    BlendedSampler,
    DistributedSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    SequentialBucketSampler,
)

Make = Callable[[int, int, int], Any]  # (rank, dp size, micro-batch size) -> sampler


def _megatron(cls: type[Any], **kw: Any) -> Make:
    def make(rank: int, dp: int, mbs: int) -> Any:
        return cls(37, mbs, rank, dp, **kw)

    return make


def _bucket(**kw: Any) -> Make:
    ds = BaseMultiresolutionDataset.from_bucket_ids(
        [0] * 9 + [1] * 7 + [2] * 12, resolutions=[(256, 256), (320, 192), (192, 320)]
    )

    def make(rank: int, dp: int, mbs: int) -> Any:
        return SequentialBucketSampler(
            ds, base_batch_size=mbs, num_replicas=dp, rank=rank, seed=5, drop_last=False, **kw
        )

    return make


FAMILIES: dict[str, Make] = {
    "single": _megatron(MegatronPretrainingSampler, drop_last=False),
    "random": _megatron(MegatronPretrainingRandomSampler, seed=3, drop_last=False),
    "sharded": _megatron(MegatronPretrainingRandomSampler, seed=3, data_sharding=True),
    "nemo": _megatron(MegatronPretrainingRandomSampler, seed=3, compat="nemo"),
    "megatron-sharded": _megatron(
        MegatronPretrainingRandomSampler, compat="megatron", data_sharding=True
    ),
    "megatron-strided": _megatron(MegatronPretrainingRandomSampler, compat="megatron"),
    "blend": lambda rank, dp, mbs: BlendedSampler(
        [20, 13, 9], [3, 2, 1], mbs, rank, dp, 24, seed=2
    ),
    "distributed": lambda rank, dp, mbs: DistributedSampler(range(37), dp, rank, seed=4),
    "distributed-torch": lambda rank, dp, mbs: DistributedSampler(
        range(37), dp, rank, seed=4, compat="torch"
    ),
    "bucket": _bucket(),
    "bucket-nemo": _bucket(compat="nemo"),
    "bucket-interleaved": _bucket(bucket_order="interleaved", interleave_unit=12),
}


def _build(make: Make, rank: int, dp: int, mbs: int) -> Any | None:
    try:
        return make(rank, dp, mbs)
    except ValueError:
        return None


@pytest.mark.parametrize("family", sorted(FAMILIES))
@given(
    st.tuples(st.integers(1, 4), st.integers(1, 3)),
    st.tuples(st.integers(1, 4), st.integers(1, 3)),
    st.integers(0, 3),
)
def test_a_plan_of_another_layout_is_what_that_layout_yields(
    family: str, here: tuple[int, int], there: tuple[int, int], epoch: int
) -> None:
    make = FAMILIES[family]
    sampler = _build(make, 0, *here)
    if sampler is None:
        return  # no sampler on this layout at all: nothing to ask
    dp, mbs = there
    fields = sampler.schema.layout
    layout = {name: getattr(sampler, name) for name in fields.fields}
    layout[fields.size] = dp
    if "micro_batch_size" in fields.others:
        layout["micro_batch_size"] = mbs
    else:
        mbs = here[1]  # the batch size is configuration there, not layout
    reference = [_build(make, r, dp, mbs) for r in range(dp)]
    if any(r is None for r in reference):
        with pytest.raises(ValueError):
            sampler.epoch_plan(epoch, layout=layout)
        return
    plan = sampler.epoch_plan(epoch, layout=layout)
    for r, other in enumerate(reference):
        other.set_epoch(epoch)
        assert plan.num_steps == len(other)
        expected = [list(b) if isinstance(b, list) else b for b in other]
        got = plan.batches(r, 0, plan.num_steps)
        got = [list(b) if isinstance(b, list) else b for b in got]
        assert got == expected, (family, here, there, epoch, r)
