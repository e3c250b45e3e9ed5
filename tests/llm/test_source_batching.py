"""A sampler is a source times a batching: a new combination is one composition.

The blend of map-style sources (``Blend`` over ``SampleDraws``) has only ever been read in fixed
blocks (``BlendedSampler``). Composed here with the batching packed rows use
(``DealtByCost``), with no other code, it reads the same global blocks, each dealt to the
ranks, and resumes from its state like every sampler.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from dataorder.core.assembly import Layout, Schema, recorded
from dataorder.core.dealing import DealtByCost
from dataorder.core.keys import derive_key
from dataorder.llm import BlendedSampler
from dataorder.llm.blend_order import BLEND_STREAM, BlendOrder
from dataorder.llm.mixture import Mixture, MixtureSchedule
from dataorder.llm.sampler import MicroBatchSampler
from dataorder.llm.sources import Blend, EpochEnd, SampleDraws

SIZES, WEIGHTS, TOTAL = [13, 7, 30], [0.5, 0.2, 0.3], 36


class DealtBlend(MicroBatchSampler[list[int]]):
    """A blend of map-style sources whose global blocks are dealt to the ranks by cost."""

    schema = Schema(
        kind="test_dealt_blend",
        fields=(recorded("seed"),),
        layout=Layout("data_parallel_rank", "data_parallel_size", ("micro_batch_size",)),
    )

    def __init__(
        self, micro_batch_size: int, data_parallel_rank: int, data_parallel_size: int, *, seed: int
    ) -> None:
        super().__init__(micro_batch_size, data_parallel_rank, data_parallel_size, None, None, None)
        end, batches = EpochEnd.of_run(
            12, what="an int", micro_batch_size=self._mbs, data_parallel_size=self._dp
        )
        self.seed = seed
        key = derive_key(seed, epoch=0, stream=BLEND_STREAM, purpose="apportionment")
        mixture = Mixture(MixtureSchedule.for_sources(WEIGHTS, len(SIZES)), key)
        order = BlendOrder(SIZES, mixture, batches, TOTAL, seed)
        self._compose(Blend(order, SampleDraws(order)), DealtByCost[Any](None), end)
        self._start(0)


def _steps(samplers: list[Any], epoch: int) -> list[Counter[int]]:
    """Each step's items over all ranks, as a multiset."""
    per_rank = [s.epoch_plan(epoch).batches(s.data_parallel_rank, 0, len(s)) for s in samplers]
    return [Counter(x for rank in step for x in rank) for step in zip(*per_rank, strict=True)]


@pytest.mark.parametrize(("mbs", "dp"), [(1, 1), (2, 2), (1, 3), (3, 2)])
def test_a_blend_dealt_by_cost_reads_the_blends_global_blocks(mbs: int, dp: int) -> None:
    dealt = [DealtBlend(mbs, r, dp, seed=4) for r in range(dp)]
    fixed = [
        BlendedSampler(SIZES, WEIGHTS, mbs, r, dp, 12, seed=4, total_samples=TOTAL)
        for r in range(dp)
    ]
    for epoch in (0, 1):
        assert _steps(dealt, epoch) == _steps(fixed, epoch)
    assert all(len(batch) == mbs for s in dealt for batch in s)


def test_a_blend_dealt_by_cost_resumes_from_its_state() -> None:
    s = DealtBlend(2, 1, 2, seed=4)
    it = iter(s)
    first = [next(it) for _ in range(3)]
    state = s.state_dict()
    rest = list(it)
    resumed = DealtBlend.from_state(state, rank=1)
    assert list(resumed) == rest
    assert first[0] == DealtBlend(2, 1, 2, seed=4).batch_at(0)
    with pytest.raises(ValueError, match="seed"):
        DealtBlend(2, 1, 2, seed=5).load_state_dict(state)
