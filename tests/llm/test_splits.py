"""Held-out splits: Megatron's ``--split`` as document ranges, and :func:`held_out` samplers
(NOTE [ Held-out samplers ])."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

from dataorder.llm.blend import BlendedSampler
from dataorder.llm.packing import PackedSampler
from dataorder.llm.splits import held_out, split_documents


def _has_megatron_core() -> bool:
    try:
        return importlib.util.find_spec("megatron.core") is not None
    except (ImportError, ValueError):  # no parent package "megatron"
        return False


HAS_MCORE = _has_megatron_core()
CASES = [
    ("969,30,1", 1000),
    ("969,30,1", 7),
    ("99,1,0", 12345),
    ("1", 10),
    ("98/2", 333),
    ("1,1,1", 100),
    ("0.8,0.1,0.1", 0),
]


@pytest.mark.parametrize(("split", "n"), CASES)
def test_split_documents_cuts_contiguous_ranges_covering_every_document(split: str, n: int) -> None:
    ranges = split_documents(split, n)
    assert [r.start for r in ranges] == [0, ranges[0].stop, ranges[1].stop]
    assert ranges[2].stop == n


def test_split_documents_known_values() -> None:
    assert split_documents("969,30,1", 1000) == (range(969), range(969, 999), range(999, 1000))
    assert split_documents([1, 1], 5) == (range(2), range(2, 5), range(5, 5))  # round(2.5) = 2
    assert split_documents("1", 4) == (range(4), range(4, 4), range(4, 4))


@pytest.mark.skipif(not HAS_MCORE, reason="megatron-core is not installed")
@pytest.mark.parametrize(("split", "n"), CASES)
def test_split_documents_equals_megatron_cores_builder(split: str, n: int) -> None:
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )

    matrix = convert_split_vector_to_split_matrix(
        parse_and_normalize_split(split.replace("/", ","))
    )
    theirs = [
        None if m is None else range(round(m[0] * float(n)), round(m[1] * float(n))) for m in matrix
    ]
    ours = split_documents(split, n)
    for mine, their in zip(ours, theirs, strict=True):
        assert (len(mine) == 0 and their is None) or mine == their


@pytest.mark.parametrize(
    ("split", "message"),
    [
        ("a,b", "split must be up to three non-negative numbers"),
        ("1,2,3,4", "split must be up to three non-negative numbers"),
        ("0,0,0", "split must be weights with a positive, finite sum"),
        ("1..2", "split must be up to three non-negative numbers"),
    ],
)
def test_bad_splits_are_named(split: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_documents(split, 10)
    with pytest.raises(TypeError, match=r"split\[0\] must be a non-negative number"):
        split_documents([-1.0], 10)
    with pytest.raises(TypeError, match="split must be a string"):
        split_documents(3, 10)  # type: ignore[arg-type]


LENGTHS = np.random.default_rng(0).integers(1, 30, 400)


def _spans(sampler: Any, steps: int) -> list[tuple[int, int, int]]:
    return [span for k in range(steps) for row in sampler.batch_at(k) for span in row]


def test_a_held_out_packed_sampler_reads_its_range_once_and_leaves_the_train_alone() -> None:
    train_docs, valid_docs, _ = split_documents("90,10,0", len(LENGTHS))
    trains = [
        PackedSampler(LENGTHS[train_docs.start : train_docs.stop], 16, 2, r, 2, seed=4, chunk=4)
        for r in range(2)
    ]
    first = next(iter(trains[0]))
    state = trains[0].state_dict()
    valid_lengths = LENGTHS[valid_docs.start : valid_docs.stop]
    valids = [held_out(t, valid_lengths, consumed_samples=0) for t in trains]
    again = [held_out(t, valid_lengths) for t in trains]
    steps = len(valids[0])
    read = [span for v in valids for span in _spans(v, steps)]
    assert [_spans(v, steps) for v in valids] == [_spans(v, steps) for v in again]  # determinism
    tokens = {(d, t) for d, a, b in read for t in range(a, b)}
    assert len(tokens) == sum(b - a for _, a, b in read)  # no token twice
    assert valids[0].tokens_dropped + len(tokens) == int(valid_lengths.sum())
    assert trains[0].state_dict() == state  # the train's cursor did not move
    assert trains[0].batch_at(0) == first
    with pytest.raises(ValueError, match="lengths"):
        trains[0].load_state_dict(valids[0].state_dict())
    resumed = held_out(trains[1], valid_lengths, consumed_samples=4)
    assert next(iter(resumed)) == valids[1].batch_at(1)


def test_a_held_out_mixture_keeps_the_weights_and_the_blend_too() -> None:
    a, b = LENGTHS[:300], LENGTHS[300:]
    train = PackedSampler(
        None, 16, 2, 0, 2, 8, seed=1, chunk=4, mixture=([a[:270], b[:90]], [0.25, 0.75])
    )
    valid = held_out(train, [a[270:], b[90:]])
    assert valid.mixture == train.mixture
    assert valid.consumed_per_source(40).tolist() == [10, 30]
    blend = BlendedSampler([90, 30], [0.5, 0.5], 2, 1, 2, 8, seed=3)
    valid_blend = held_out(blend, [10, 6], consumed_samples=8)
    assert valid_blend.consumed_samples == 8
    assert valid_blend.schedule == blend.schedule
    assert blend.consumed_samples == 0
    with pytest.raises(TypeError, match="train must be a PackedSampler or a BlendedSampler"):
        held_out(object(), [1])  # type: ignore[type-var]
    with pytest.raises(TypeError, match="data must be one lengths per source"):
        held_out(train, a[270:])
