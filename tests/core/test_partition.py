"""Global-block partition math: equal counts, disjoint slices, global (never per-rank) tails."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataorder.core.partition import plan_epoch, plan_segments


def _rank_batches(lay, rank: int, split: str, start: int = 0) -> list[list[int]]:  # type: ignore[no-untyped-def]
    return [
        row.tolist()
        for arr in lay.rank_positions(rank=rank, split=split, start=start, stop=lay.num_batches)
        for row in arr
    ]


def test_worked_example_contiguous_and_strided() -> None:
    lay = plan_epoch(10, per_rank=2, dp_size=2, tail="pad")
    assert _rank_batches(lay, 0, "contiguous") == [[0, 1], [4, 5], [8, 9]]
    assert _rank_batches(lay, 1, "contiguous") == [[2, 3], [6, 7], [10, 11]]
    assert _rank_batches(lay, 0, "strided") == [[0, 2], [4, 6], [8, 10]]
    assert (lay.padded, lay.dropped) == (2, 0)
    drop = plan_epoch(10, per_rank=2, dp_size=2, tail="drop")
    assert (drop.num_batches, drop.dropped, drop.padded) == (2, 2, 0)
    shrink = plan_epoch(10, per_rank=2, dp_size=2, tail="shrink")
    assert _rank_batches(shrink, 1, "strided") == [[1, 3], [5, 7], [9]]
    assert (shrink.num_batches, shrink.padded) == (3, 0)


def test_unit_drops_and_pads_whole_global_batches() -> None:
    lay = plan_epoch(21, per_rank=2, dp_size=2, tail="drop", unit=8)
    assert (lay.num_batches, lay.dropped) == (4, 5)
    lay = plan_epoch(21, per_rank=2, dp_size=2, tail="pad", unit=8)
    assert (lay.num_batches, lay.padded) == (6, 3)
    with pytest.raises(
        ValueError, match="unit must be a multiple of per_rank x dp_size = 4; got unit=6"
    ):
        plan_epoch(21, per_rank=2, dp_size=2, tail="pad", unit=6)


@given(
    n=st.integers(0, 400),
    per_rank=st.integers(1, 9),
    dp_size=st.integers(1, 9),
    tail=st.sampled_from(["drop", "pad", "shrink"]),
    split=st.sampled_from(["contiguous", "strided"]),
)
def test_partition_properties(n: int, per_rank: int, dp_size: int, tail: str, split: str) -> None:
    lay = plan_epoch(n, per_rank=per_rank, dp_size=dp_size, tail=tail)  # type: ignore[arg-type]
    per = [_rank_batches(lay, r, split) for r in range(dp_size)]
    assert {len(p) for p in per} == {lay.num_batches}
    for step in range(lay.num_batches):
        assert len({len(p[step]) for p in per}) == 1
        assert all(len(p[step]) > 0 for p in per)
    flat = [x for p in per for b in p for x in b]
    assert len(flat) == len(set(flat)) == lay.total_positions
    assert set(flat) == set(range(lay.total_positions))
    assert lay.dropped + min(n, lay.total_positions) == n
    assert lay.padded == sum(1 for x in flat if x >= n)
    if tail == "shrink":
        assert lay.padded < dp_size
    # resume from any block boundary continues the same slices
    for k in range(lay.num_batches + 1):
        assert lay.step_of(lay.batch_start(k) if k < lay.num_batches else lay.total_positions) == k
        assert _rank_batches(lay, dp_size - 1, split, start=k) == per[dp_size - 1][k:]


def test_elastic_boundaries() -> None:
    old = plan_epoch(100, per_rank=1, dp_size=8, tail="drop")
    new = plan_epoch(100, per_rank=1, dp_size=4, tail="drop")
    consumed = old.batch_start(5)  # 40
    assert new.step_of(consumed) == 10
    six = plan_epoch(100, per_rank=1, dp_size=6, tail="drop")
    with pytest.raises(
        ValueError,
        match=r"consumed=40 is not a multiple of the global block "
        r"per_rank x dp_size = 1 x 6 = 6",
    ):
        six.step_of(consumed)
    # the end of the real data is the end of a padded layout
    padded = plan_epoch(10, per_rank=4, dp_size=1, tail="pad")
    assert padded.step_of(10) == padded.num_batches


def test_offsets_are_numpy() -> None:
    lay = plan_epoch(8, per_rank=2, dp_size=2, tail="drop")
    out = lay.batch_positions(1, rank=1, split="strided")
    assert isinstance(out, np.ndarray)
    assert out.tolist() == [5, 7]


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n": -1}, ValueError, r"n must be an int in \[0, 4611686018427387904\]; got n=-1"),
        (
            {"per_rank": 0},
            ValueError,
            r"per_rank must be an int in \[1, 2147483648\]; got per_rank=0",
        ),
        (
            {"dp_size": False},
            TypeError,
            r"dp_size must be an int in \[1, 2147483648\]; got dp_size=False",
        ),
        (
            {"tail": "cut"},
            ValueError,
            "tail must be one of 'drop', 'pad', 'shrink'; got tail='cut'",
        ),
        ({"tail": "shrink", "unit": 8}, ValueError, "unit applies only to tail='drop' or 'pad'"),
    ],
)
def test_bad_input(kwargs: dict[str, object], exc: type[Exception], match: str) -> None:
    args: dict[str, object] = {"n": 10, "per_rank": 2, "dp_size": 2, "tail": "drop", **kwargs}
    n = args.pop("n")
    with pytest.raises(exc, match=match):
        plan_epoch(n, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": np.array(10)}, r"n must be a 1-D sequence of ints; got n=array\(10\)"),
        ({"per_rank": np.array(2)}, r"per_rank must be a 1-D sequence of ints; got per_rank=array"),
    ],
)
def test_zero_d_arrays_are_not_one_element_arrays(kwargs: dict[str, object], match: str) -> None:
    """Regression: a 0-d int array was taken as a 1-element array (check_int_array)."""
    args: dict[str, object] = {"n": [10], "per_rank": [2], "dp_size": 2, "tail": "drop", **kwargs}
    with pytest.raises(TypeError, match=match):
        plan_segments(**args)  # type: ignore[arg-type]
