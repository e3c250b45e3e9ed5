"""Counted lock-step steps over buckets: the next bucket is a pure function of the counts read,
the position any number of steps ahead is found without walking, every layout continues any
position, and an epoch reads every place once until no bucket can fill a step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataorder.core.lockstep import PHASES, CountedBuckets, CountedEpoch


@st.composite
def arrangements(draw: Any) -> CountedBuckets:
    rows = draw(st.integers(1, 5))
    sizes = draw(st.lists(st.integers(0, 120), min_size=rows, max_size=rows))
    batch = draw(st.lists(st.integers(1, 4), min_size=rows, max_size=rows))
    if draw(st.booleans()):
        phases = draw(st.lists(st.integers(0, PHASES - 1), min_size=rows, max_size=rows))
        unit = draw(st.sampled_from([None, 1, 2, 3, 8]))
        return CountedBuckets(sizes, batch, phases=phases, unit=unit)
    order = draw(st.permutations(range(rows)))
    return CountedBuckets(sizes, batch, order=order)


def _position(draw: Any, cb: CountedBuckets) -> tuple[int, ...]:
    return tuple(
        draw(st.integers(0, n // b)) * b for n, b in zip(cb.sizes, cb.batch_sizes, strict=True)
    )


def _walk(cb: CountedBuckets, counts: tuple[int, ...], dp: int) -> list[tuple[int, ...]]:
    """Every position from ``counts`` to the epoch's end, one step at a time."""
    out, at = [counts], list(counts)
    while (j := cb.next_bucket(tuple(at), dp)) is not None:
        at[j] += dp * cb.batch_sizes[j]
        out.append(tuple(at))
    return out


@settings(max_examples=80, deadline=None)
@given(data=st.data(), cb=arrangements(), dp=st.integers(1, 5))
def test_the_position_steps_ahead_is_the_walk_without_walking(
    data: Any, cb: CountedBuckets, dp: int
) -> None:
    counts = _position(data.draw, cb)
    walk = _walk(cb, counts, dp)
    assert len(walk) - 1 == cb.steps_left(counts, dp)
    for t, expected in enumerate(walk):
        assert cb.advance(counts, dp, t) == expected
    end = walk[-1]
    assert [n - c for n, c in zip(cb.sizes, end, strict=True)] == cb.leftover(counts, dp)
    assert all(n - c < dp * b for n, c, b in zip(cb.sizes, end, cb.batch_sizes, strict=True))
    with pytest.raises(ValueError, match="steps must be an int in"):
        cb.advance(counts, dp, len(walk))


@settings(max_examples=100, deadline=None)
@given(cb=arrangements(), sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data())
def test_a_chain_of_layouts_reads_every_place_once_and_leaves_what_the_last_cannot_fill(
    cb: CountedBuckets, sizes: list[int], data: Any
) -> None:
    counts = (0,) * len(cb.sizes)
    read: list[set[int]] = [set() for _ in cb.sizes]
    for i, dp in enumerate(sizes):
        left = cb.steps_left(counts, dp)
        steps = left if i == len(sizes) - 1 else data.draw(st.integers(0, left))
        for j, first, run in cb.runs(counts, dp, steps):
            places = range(first, first + run * dp * cb.batch_sizes[j])
            assert read[j].isdisjoint(places)
            read[j].update(places)
        counts = cb.advance(counts, dp, steps)
    assert [len(r) for r in read] == list(counts)
    assert all(r == set(range(len(r))) for r in read)  # each bucket's stream from its start
    assert cb.leftover(counts, sizes[-1]) == [n - c for n, c in zip(cb.sizes, counts, strict=True)]


def test_the_interleave_keeps_every_prefix_near_each_buckets_share() -> None:
    rng = np.random.default_rng(0)
    sizes, batch = [400, 250, 90, 31, 7], [1, 2, 4, 8, 16]
    for dp in (1, 2, 3, 5):
        cb = CountedBuckets(sizes, batch, phases=rng.integers(0, PHASES, 5).tolist())
        share = np.array(cb.left((0,) * 5, dp), dtype=float)
        total = share.sum()
        seen, at = np.zeros(5), [0] * 5
        for step in range(int(total)):
            j = cb.next_bucket(tuple(at), dp)
            assert j is not None
            seen[j] += 1
            at[j] += dp * batch[j]
            assert np.all(np.abs(seen - (step + 1) * share / total) <= len(sizes) + 1), step


def test_a_unit_keeps_a_blocks_steps_together_and_sequential_reads_in_order() -> None:
    cb = CountedBuckets([64, 64], [1, 1], phases=[5, 9], unit=8)
    runs = cb.runs((0, 0), 2, cb.steps_left((0, 0), 2))
    assert {steps for _, _, steps in runs} == {4}  # blocks of 8 rank batches: 4 steps of 2
    seq = CountedBuckets([5, 9, 4], [1, 2, 1], order=[2, 0, 1])
    assert seq.runs((0, 0, 0), 2, 99) == [(2, 0, 2), (0, 0, 2), (1, 0, 2)]


def test_an_empty_bucket_is_never_read_and_a_step_reads_one_bucket() -> None:
    cb = CountedBuckets([0, 10], [1, 1], phases=[0, 0])
    assert cb.runs((0, 0), 3, 9) == [(1, 0, 3)]
    assert cb.next_bucket((0, 9), 3) is None
    assert cb.steps_left((0, 9), 3) == 0


class _Places:
    """A grouping whose items are ``(bucket, place)``."""

    def take(self, bucket: int, places: np.ndarray) -> Sequence[list[tuple[int, int]]]:
        return [[(bucket, int(p)) for p in row] for row in places]

    def shape_name(self, bucket: int) -> str:
        return f"shape {bucket}"


def _epoch(cb: CountedBuckets, dp: int) -> CountedEpoch[list[tuple[int, int]]]:
    return CountedEpoch(cb, dp, ("a", "b", "c"), lambda j: lambda p: p, _Places())


def test_the_epoch_plan_numbers_steps_and_follows_its_anchor() -> None:
    cb = CountedBuckets([12, 20, 6], [2, 1, 3], phases=[1, 2, 3])
    two, three = _epoch(cb, 2), _epoch(cb, 3)
    assert two.num_steps == 3 + 10 + 1
    ranks = [two.batches(r, 0, two.num_steps) for r in range(2)]
    for step in zip(*ranks, strict=True):
        assert len({bucket for batch in step for bucket, _ in batch}) == 1  # lock-step
    # a position of the 2-rank path continues on 3 ranks: its steps there, from the anchor
    mid = two.progress_at(5)
    there = three.anchored(mid)
    start = there.step_of(mid)
    assert start == three.num_steps - cb.steps_left(there.anchor, 3)
    assert there.progress_at(start) == mid
    rest = [there.batches(r, start, there.num_steps) for r in range(3)]
    done = {x for r in range(2) for batch in two.batches(r, 0, 5) for x in batch}
    later = {x for rank in rest for batch in rank for x in batch}
    assert done.isdisjoint(later)
    left = cb.leftover(there.anchor, 3)
    assert len(done) + len(later) + sum(left) == sum(cb.sizes)
    assert there.left_over() == left
    assert "shape 1: " in there.describe(mid, 0)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: CountedBuckets([-1], [1], phases=[0]), r"sizes\[0\] must"),
        (lambda: CountedBuckets([4], [0], phases=[0]), r"batch_sizes\[0\] must"),
        (lambda: CountedBuckets([4, 4], [1], phases=[0, 0]), "batch_sizes must be one per"),
        (lambda: CountedBuckets([4], [1]), "phases must be given unless order is"),
        (lambda: CountedBuckets([4], [1], phases=[0], order=[0]), "phases must be given"),
        (lambda: CountedBuckets([4], [1], phases=[PHASES]), r"phases\[0\] must"),
        (lambda: CountedBuckets([4, 4], [1, 1], phases=[0]), "phases must be one per bucket"),
        (lambda: CountedBuckets([4, 4], [1, 1], order=[0, 0]), "order must be a permutation"),
        (lambda: CountedBuckets([4], [1], phases=[0], unit=0), "unit must be"),
        (lambda: CountedBuckets([4], [1], phases=[0], unit=True), "unit must be"),
        (lambda: CountedBuckets([8], [2], order=[0]).check([3], ["x"]), "x must be a multiple"),
        (lambda: CountedBuckets([8], [2], order=[0]).check([10], ["x"]), r"in \[0, 8\]"),
        (lambda: CountedBuckets([8], [2], order=[0]).check([-2], ["x"]), "x must be"),
        (lambda: CountedBuckets([8], [2], order=[0]).check([True], ["x"]), "x must be"),
        (lambda: CountedBuckets([8], [2], order=[0]).check([2**70], ["x"]), "x must be"),
        (lambda: CountedBuckets([8], [2], order=[0]).check([0, 0], ["x"]), "one per bucket"),
    ],
)
def test_bad_input_is_refused_naming_it(make: Any, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        make()
