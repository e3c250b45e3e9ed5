"""The sampler contract over DistributedSampler, plus property tests with every rank simulated.

The table covers shuffled and sequential orders, padded and dropped tails, torch compatibility,
datasets that divide the number of replicas and ones that do not, datasets smaller than the number
of replicas, and elastic resumes onto every ``num_replicas`` that divides the saved position. The
properties check the global stream itself: interleaving the ranks' indices step by step gives
``position -> order(position mod N)`` for every position of the epoch, whatever the layout.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataorder.parallel.distributed import DistributedSampler, epoch_order
from dataorder.testing import (
    RECIPES,
    WORKER_RECIPES,
    SamplerCase,
    check_contract,
    check_loop_recipes,
)


def _make(n: int, **kw: Any) -> Callable[[int, int], DistributedSampler]:
    return lambda rank, world: DistributedSampler(range(n), world, rank, **kw)


# (name, factory, N, world, elastic worlds, processes). An elastic world must divide the consumed
# count the contract saves at: (num_samples // 2) x world.
CASES: list[
    tuple[str, Callable[[int, int], DistributedSampler], int, int, tuple[int, ...], bool]
] = [
    ("shuffle-pad", _make(23, seed=3), 23, 4, (1, 2, 3, 6, 12), False),
    ("shuffle-drop", _make(23, seed=4, drop_last=True), 23, 4, (1, 2, 8), False),
    ("sequential-pad", _make(23, shuffle=False), 23, 3, (2, 4, 6), False),
    ("sequential-drop", _make(23, shuffle=False, drop_last=True), 23, 3, (1, 9), False),
    ("divisible", _make(24, seed=5), 24, 4, (2, 3, 6), False),
    ("divisible-drop", _make(24, seed=6, drop_last=True), 24, 6, (3, 4, 12), False),
    ("smaller-than-world", _make(3, seed=7), 3, 8, (1, 5), False),
    ("smaller-than-world-drop", _make(3, seed=8, drop_last=True), 3, 8, (2,), False),
    ("one-rank", _make(9, seed=9), 9, 1, (2, 4), False),
    ("empty", _make(0, seed=1), 0, 2, (3,), False),
    ("torch-shuffle-pad", _make(23, seed=3, compat="torch"), 23, 4, (1, 2, 3, 6, 12), True),
    ("torch-drop", _make(10, seed=2, drop_last=True, compat="torch"), 10, 3, (1, 3), False),
    ("torch-sequential", _make(11, shuffle=False, compat="torch"), 11, 2, (3, 6), False),
    ("torch-smaller-than-world", _make(5, seed=1, compat="torch"), 5, 7, (1,), False),
]


# The loop-recipe matrix (dataorder.testing.recipes) resumes at every batch of a 3-epoch run
# under each training-loop recipe: it runs on the cases with short epochs, at least one per
# mode; the direct checks run on every case.
RECIPE_CASES = {"torch-shuffle-pad", "sequential-drop", "shuffle-pad"}
# the recipes with worker processes cost seconds each: they run on one case
WORKER_CASE = "shuffle-pad"


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


def _sampler_case(
    name: str, make: Callable[[int, int], DistributedSampler], n: int, world: int, elastic: Any
) -> SamplerCase:
    return SamplerCase(
        name=name,
        make=make,
        dataset_size=n,
        dp_size=world,
        elastic_dp_sizes=elastic,
        batched=False,
    )


@pytest.mark.parametrize(
    ("name", "make", "n", "world", "elastic", "processes"), CASES, ids=[c[0] for c in CASES]
)
def test_contract(
    name: str,
    make: Callable[[int, int], DistributedSampler],
    n: int,
    world: int,
    elastic: tuple[int, ...],
    processes: bool,
) -> None:
    check_contract(
        _sampler_case(name, make, n, world, elastic),
        resume_points=30,
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
    name: str, make: Callable[[int, int], DistributedSampler], n: int, world: int
) -> None:
    """The loop recipes test_contract leaves out by default: the worker recipes (seconds each)
    and the other cases of the matrix."""
    ran = check_loop_recipes(_sampler_case(name, make, n, world, ()), _slow_recipes(name))
    assert ran == list(_slow_recipes(name)), ran  # the test extra installs every framework


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
    case = SamplerCase(name="rule", make=_make(23, seed=3), dataset_size=23, dp_size=4)
    check_contract(case, resume_points=5, recipes=("dataloader", "stateful-0"))
