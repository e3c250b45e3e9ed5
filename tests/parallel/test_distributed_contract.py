"""DistributedSampler's global stream, with every rank simulated.

The contract suite runs on its configurations in tests/test_contract_table.py (the rows
``index order (...) x fixed blocks``: shuffled and sequential orders, padded and dropped tails,
torch compatibility, datasets that divide the number of replicas and ones that do not, datasets
smaller than the number of replicas, elastic resumes onto every ``num_replicas`` that divides the
saved position). The properties here check the global stream itself: interleaving the ranks'
indices step by step gives ``position -> order(position mod N)`` for every position of the epoch,
whatever the layout.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataorder.parallel.distributed import DistributedSampler, epoch_order
from dataorder.testing import SamplerCase, check_contract


@given(
    n=st.integers(0, 200),
    world=st.integers(1, 12),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 20),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    compat=st.sampled_from(["default", "torch"]),
)
def test_global_stream_property(
    n: int, world: int, seed: int, epoch: int, shuffle: bool, drop_last: bool, compat: str
) -> None:
    """Interleaved ranks = the pure order function over the layout's positions; lock-step sizes."""
    samplers = [
        DistributedSampler(range(n), world, r, shuffle, seed, drop_last, compat=compat)  # type: ignore[arg-type]
        for r in range(world)
    ]
    for s in samplers:
        s.set_epoch(epoch)
    per_rank = [list(s) for s in samplers]
    lengths = {len(x) for x in per_rank}
    assert lengths == {samplers[0].num_samples}
    stream = [x for step in zip(*per_rank, strict=True) for x in step]
    assert len(stream) == samplers[0].total_size
    if n:
        order = epoch_order(n, seed=seed, epoch=epoch, shuffle=shuffle, compat=compat)  # type: ignore[arg-type]
        assert stream == order(np.arange(len(stream), dtype=np.int64)).tolist()
    real = stream[:n]
    assert len(set(real)) == len(real)
    assert len(real) + samplers[0].samples_dropped == n
    assert len(stream) - len(real) == samplers[0].samples_padded
    assert sum(s.num_padding for s in samplers) == samplers[0].samples_padded


@given(
    n=st.integers(1, 150),
    world=st.integers(1, 8),
    new_world=st.integers(1, 8),
    steps=st.integers(0, 40),
    seed=st.integers(0, 1000),
    drop_last=st.booleans(),
)
def test_elastic_resume_property(
    n: int, world: int, new_world: int, steps: int, seed: int, drop_last: bool
) -> None:
    """Save after ``steps`` indices per rank; on a new world that divides the position, every
    sample is read once (plus declared padding); on one that does not, the load is refused."""
    old = [
        DistributedSampler(range(n), world, r, seed=seed, drop_last=drop_last) for r in range(world)
    ]
    steps = min(steps, old[0].num_samples)
    seen = [x for s in old for x in itertools.islice(s, steps)]
    state = old[0].state_dict()
    new = [
        DistributedSampler(range(n), new_world, r, seed=seed, drop_last=drop_last)
        for r in range(new_world)
    ]
    consumed = steps * world
    if consumed % new_world and consumed < min(n, new[0].total_size):
        with pytest.raises(ValueError, match=r"cannot resume epoch 0 on this layout .*: consumed="):
            new[0].load_state_dict(state)
        return
    for s in new:
        s.load_state_dict(state)
    assert len({s.remaining for s in new}) == 1
    # the rest of the saved epoch (an empty pass if the state was saved at its end); running it
    # out leaves every cursor at the epoch's end, with the next epoch next
    rest = [x for s in new for x in s]
    assert {(s.epoch, s.next_start()) for s in new} == {(state["epoch"], (state["epoch"] + 1, 0))}
    counts = np.bincount(np.array(seen + rest, dtype=np.int64), minlength=n)
    repeats = int((counts[counts > 1] - 1).sum())
    assert repeats <= old[0].samples_padded + new[0].samples_padded
    assert int((counts == 0).sum()) <= old[0].samples_dropped + new[0].samples_dropped


def test_the_recipes_read_a_per_index_sampler_through_its_rule() -> None:
    """A DistributedSampler case left at ``batched=True`` is read through the sampler's own rule
    (per index) by the direct checks and by the loop recipes alike: the recipes once handed it to
    the loader as a batch sampler."""

    def make(rank: int, world: int) -> DistributedSampler:
        return DistributedSampler(range(23), world, rank, seed=3)

    case = SamplerCase(name="rule", make=make, dataset_size=23, dp_size=4)
    check_contract(case, resume_points=5, recipes=("dataloader", "stateful-0"))
