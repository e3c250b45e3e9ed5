"""The Megatron samplers' global stream, with every rank simulated.

The contract suite runs on their configurations in tests/test_contract_table.py (the rows
``sample order (...) x fixed blocks``). The properties here check the global stream itself:
concatenating the ranks' micro-batches of each step, in rank order, gives position
``p -> order(p)`` (or padding) for every position of the epoch, whatever the layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dataorder.core.keys import derive_key
from dataorder.core.permutation import Permutation
from dataorder.llm.megatron import (
    BaseMegatronSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
)
from dataorder.llm.orders import shard_bounds


def _order(s: BaseMegatronSampler, epoch: int) -> Callable[[int], int | None]:
    """The specification of each global order, written independently of the samplers."""
    n = s.total_samples
    if isinstance(s, MegatronPretrainingSampler):
        return lambda p: p if p < n else None
    assert isinstance(s, MegatronPretrainingRandomSampler)
    key = derive_key(s.seed, epoch=epoch, stream="megatron", purpose="sample-order")
    pi = Permutation(n, key)
    return lambda p: pi.index(p) if p < n else None


def _global_stream(samplers: list[BaseMegatronSampler]) -> list[int | None]:
    per_rank = [list(s) for s in samplers]
    steps = {len(p) for p in per_rank}
    assert len(steps) == 1
    return [x for step in zip(*per_rank, strict=True) for mb in step for x in mb]


@given(
    n=st.integers(1, 120),
    mbs=st.integers(1, 5),
    dp=st.integers(1, 5),
    units=st.integers(1, 3),
    use_gbs=st.booleans(),
    drop_last=st.booleans(),
    pad=st.booleans(),
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 1000),
    random=st.booleans(),
)
def test_global_stream_is_the_order(
    n: int,
    mbs: int,
    dp: int,
    units: int,
    use_gbs: bool,
    drop_last: bool,
    pad: bool,
    seed: int,
    epoch: int,
    random: bool,
) -> None:
    block = mbs * dp
    gbs = units * block if use_gbs else None
    pad = pad and use_gbs and not drop_last
    unit = gbs if (gbs and (drop_last or pad)) else block
    whole = n // unit if drop_last else -(-n // unit)
    if whole == 0:
        return  # nothing to train: refused, tested in test_megatron.py
    kw: dict[str, Any] = {
        "drop_last": drop_last,
        "global_batch_size": gbs,
        "pad_samples_to_global_batch_size": pad,
    }
    cls = MegatronPretrainingRandomSampler if random else MegatronPretrainingSampler
    if random:
        kw["seed"] = seed
    samplers = [cls(n, mbs, r, dp, **kw) for r in range(dp)]
    for s in samplers:
        s.set_epoch(epoch)
    lens = {len(s) for s in samplers}
    stream = _global_stream(samplers)
    order = _order(samplers[0], epoch)
    assert lens == {whole * unit // block}
    assert stream == [order(p) for p in range(whole * unit)]
    assert samplers[0].samples_dropped == max(0, n - whole * unit)
    assert samplers[0].samples_padded == max(0, whole * unit - n)
    # every rank ran the epoch out: all at its end together, the next epoch next
    assert {(s.epoch, s.progress["consumed"], s.next_start()) for s in samplers} == {
        (epoch, whole * unit, (epoch + 1, 0))
    }


@given(
    n=st.integers(1, 90),
    mbs=st.integers(1, 4),
    dp=st.integers(1, 5),
    units=st.integers(1, 3),
    use_gbs=st.booleans(),
    drop_last=st.booleans(),
    pad=st.booleans(),
    seed=st.integers(0, 10**6),
    epoch=st.integers(0, 50),
)
def test_sharded_ranks_stay_in_their_shard(
    n: int,
    mbs: int,
    dp: int,
    units: int,
    use_gbs: bool,
    drop_last: bool,
    pad: bool,
    seed: int,
    epoch: int,
) -> None:
    block = mbs * dp
    gbs = units * block if use_gbs else None
    pad = pad and use_gbs and not drop_last
    unit = gbs if (gbs and (drop_last or pad)) else block
    if drop_last and n < unit:
        return
    samplers = [
        MegatronPretrainingRandomSampler(
            n,
            mbs,
            r,
            dp,
            drop_last=drop_last,
            global_batch_size=gbs,
            pad_samples_to_global_batch_size=pad,
            seed=seed,
            data_sharding=True,
        )
        for r in range(dp)
    ]
    seen: list[int] = []
    for r, s in enumerate(samplers):
        s.set_epoch(epoch)
        got = [x for mb in s for x in mb]
        reals = [x for x in got if x is not None]
        lo, hi = shard_bounds(n, dp, r)
        assert all(lo <= x < hi for x in reals)
        # the rank's padding comes after all its real samples
        assert got[: len(reals)] == reals
        if not drop_last:
            assert sorted(reals) == list(range(lo, hi))
        seen += reals
    assert len(seen) == len(set(seen)) == n - samplers[0].samples_dropped


@given(
    n=st.integers(1, 150),
    old=st.tuples(st.integers(1, 4), st.integers(1, 6)),
    new=st.tuples(st.integers(1, 4), st.integers(1, 6)),
    units=st.integers(0, 2),
    drop_last=st.booleans(),
    pad=st.booleans(),
    at=st.integers(0, 10**6),
    seed=st.integers(0, 2**63 - 1),
    random=st.booleans(),
)
def test_elastic_resume_keeps_the_global_stream(
    n: int,
    old: tuple[int, int],
    new: tuple[int, int],
    units: int,
    drop_last: bool,
    pad: bool,
    at: int,
    seed: int,
    random: bool,
) -> None:
    """Stop after any count both layouts share, continue with another micro-batch size and DP
    size: the steps before and after, in rank order, are exactly the uninterrupted streams."""
    (mbs, dp), (mbs2, dp2) = old, new
    both = math.lcm(mbs * dp, mbs2 * dp2)
    gbs = units * both or None
    pad = pad and gbs is not None and not drop_last
    unit = gbs if (gbs and (drop_last or pad)) else mbs * dp
    if drop_last and n < max(unit, gbs or mbs2 * dp2, mbs2 * dp2):
        return  # nothing to train on one of the layouts: refused, tested elsewhere
    kw: dict[str, Any] = {
        "drop_last": drop_last,
        "global_batch_size": gbs,
        "pad_samples_to_global_batch_size": pad,
    }
    cls = MegatronPretrainingRandomSampler if random else MegatronPretrainingSampler
    if random:
        kw["seed"] = seed
    first = [cls(n, mbs, r, dp, **kw) for r in range(dp)]
    reference = _global_stream([cls(n, mbs, r, dp, **kw) for r in range(dp)])
    steps = len(first[0])
    stop = (at % steps) * mbs * dp // both * both // (mbs * dp)  # a shared boundary, mid-epoch
    iters = [iter(s) for s in first]
    head = [[next(it) for _ in range(stop)] for it in iters]
    before = [x for k in range(stop) for r in range(dp) for x in head[r][k]]
    second = [cls(n, mbs2, r, dp2, **kw) for r in range(dp2)]
    for s in second:
        s.load_state_dict(first[0].state_dict())
    after = _global_stream(second)
    # Both layouts read the same global stream; only its padded or dropped end can differ.
    continued = _global_stream([cls(n, mbs2, r, dp2, **kw) for r in range(dp2)])
    assert before == reference[: len(before)]
    assert after == continued[len(before) :]
    if gbs is not None and (drop_last or pad):  # whole global batches: the same end everywhere
        assert before + after == reference
