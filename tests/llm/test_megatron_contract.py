"""The sampler contract over the Megatron samplers, plus property tests with every rank simulated.

The table covers both samplers and the three random orders, drop and pad tails, with and without
a global batch size, datasets that do not divide the block, and elastic resumes where the order
allows them. The properties check the global stream itself: concatenating the ranks' micro-batches
of each step, in rank order, gives position ``p -> order(p)`` (or padding) for every position of
the epoch, whatever the layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
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
from dataorder.testing import (
    RECIPES,
    WORKER_RECIPES,
    SamplerCase,
    check_contract,
    check_loop_recipes,
)


def _single(n: int, mbs: int, **kw: Any) -> Callable[[int, int], BaseMegatronSampler]:
    return lambda rank, world: MegatronPretrainingSampler(n, mbs, rank, world, **kw)


def _random(n: int, mbs: int, **kw: Any) -> Callable[[int, int], BaseMegatronSampler]:
    return lambda rank, world: MegatronPretrainingRandomSampler(n, mbs, rank, world, **kw)


PAD = {"drop_last": False, "pad_samples_to_global_batch_size": True}

# (name, factory, N, world, elastic worlds, processes)
CASES: list[
    tuple[str, Callable[[int, int], BaseMegatronSampler], int, int, tuple[int, ...], bool]
] = [
    ("single-drop", _single(23, 2), 23, 2, (1,), False),
    ("single-keep", _single(23, 2, drop_last=False), 23, 3, (1,), False),
    ("single-gbs-drop", _single(50, 1, global_batch_size=12), 50, 4, (2, 6, 3), False),
    ("single-gbs-keep", _single(50, 1, drop_last=False, global_batch_size=12), 50, 4, (2,), False),
    ("single-gbs-pad", _single(60, 1, global_batch_size=8, **PAD), 60, 2, (4, 8, 1), False),
    ("random-drop", _random(37, 2, seed=5), 37, 2, (1,), True),
    ("random-keep", _random(37, 3, seed=6, drop_last=False), 37, 2, (1,), False),
    ("random-gbs-drop", _random(100, 1, seed=7, global_batch_size=24), 100, 8, (4, 6), False),
    ("random-gbs-pad", _random(45, 2, seed=8, global_batch_size=12, **PAD), 45, 3, (6, 2), False),
    ("random-one-rank", _random(9, 4, seed=9, drop_last=False), 9, 1, (), False),
    ("sharded-drop", _random(41, 2, seed=1, data_sharding=True), 41, 3, (), False),
    (
        "sharded-gbs-pad",
        _random(30, 1, seed=2, data_sharding=True, global_batch_size=8, **PAD),
        30,
        4,
        (),
        False,
    ),
    (
        "sharded-keep-tiny",
        _random(3, 1, seed=3, data_sharding=True, drop_last=False),
        3,
        4,
        (),
        False,
    ),
    ("nemo", _random(22, 2, seed=4, compat="nemo"), 22, 2, (), True),
    ("nemo-gbs", _random(33, 1, seed=0, compat="nemo", global_batch_size=8), 33, 4, (), False),
    ("nemo-keep-m1", _random(7, 1, seed=11, compat="nemo", drop_last=False), 7, 1, (), False),
]


# The loop-recipe matrix (dataorder.testing.recipes) resumes at every batch of a 3-epoch run
# under each training-loop recipe: it runs on the cases with short epochs, at least one per
# mode; the direct checks run on every case.
RECIPE_CASES = {"random-keep", "random-gbs-pad", "sharded-drop", "single-keep", "nemo"}
# the recipes with worker processes cost seconds each: they run on one case
WORKER_CASE = "random-gbs-pad"


# By default (CI) the recipes without workers run on "random-keep" alone: one case of this family
# in every plain loop (test_contract_blend runs every recipe, workers included, by default); the
# rest of the matrix above is marked slow (test_the_loop_recipes_on_the_other_cases).
DEFAULT_RECIPES = {"random-keep": tuple(r for r in RECIPES if r not in WORKER_RECIPES)}


def _recipes(name: str) -> tuple[str, ...]:
    if name == WORKER_CASE:
        return RECIPES
    if name in RECIPE_CASES:
        return tuple(r for r in RECIPES if r not in WORKER_RECIPES)
    return ()


def _slow_recipes(name: str) -> tuple[str, ...]:
    return tuple(r for r in _recipes(name) if r not in DEFAULT_RECIPES.get(name, ()))


@pytest.mark.parametrize(
    ("name", "make", "n", "world", "elastic", "processes"), CASES, ids=[c[0] for c in CASES]
)
def test_contract(
    name: str,
    make: Callable[[int, int], BaseMegatronSampler],
    n: int,
    world: int,
    elastic: tuple[int, ...],
    processes: bool,
) -> None:
    case = SamplerCase(
        name=name, make=make, dataset_size=n, dp_size=world, elastic_dp_sizes=elastic
    )
    check_contract(
        case,
        resume_points=24,
        processes=processes,
        recipes=DEFAULT_RECIPES.get(name, ()),
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "make", "n", "world"),
    [c[:4] for c in CASES if _slow_recipes(c[0])],
    ids=[c[0] for c in CASES if _slow_recipes(c[0])],
)
def test_the_loop_recipes_on_the_other_cases(
    name: str, make: Callable[[int, int], BaseMegatronSampler], n: int, world: int
) -> None:
    """The loop recipes test_contract leaves out by default: the worker recipes (seconds each)
    and the other cases of the matrix."""
    case = SamplerCase(name=name, make=make, dataset_size=n, dp_size=world)
    ran = check_loop_recipes(case, _slow_recipes(name))
    assert ran == list(_slow_recipes(name)), ran  # the test extra installs every framework


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
