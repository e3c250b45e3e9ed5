"""bucket_order="interleaved": lock-step chunks of every bucket spread evenly through the epoch."""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataorder import Apportionment, BaseMultiresolutionDataset, SequentialBucketSampler
from dataorder.diffusion.sampler.plan import (
    longest_shape_run,
    plan_bucket_epoch,
    plan_interleaved_epoch,
)
from dataorder.testing import run_epoch


def _ds(sizes: list[int], seed: int = 0) -> BaseMultiresolutionDataset:
    ids = np.repeat(np.arange(len(sizes)), sizes)
    np.random.default_rng(seed).shuffle(ids)
    return BaseMultiresolutionDataset.from_bucket_ids(
        ids, [(32 * (j + 1), 32 * (len(sizes) - j)) for j in range(len(sizes))]
    )


def _steps(plan: Any) -> dict[int, list[tuple[int, int]]]:
    """Per bucket, its global batches as ``(first stream position, per-rank size)``, in order."""
    out: dict[int, list[tuple[int, int]]] = {}
    for k in range(plan.num_runs):
        lay = plan.run_blocks(k)
        out.setdefault(int(plan.buckets[k]), []).extend(
            (int(plan.starts[k]) + lay.batch_start(i), lay.batch_size_at(i))
            for i in range(lay.num_batches)
        )
    return out


def _sampler(ds: Any, rank: int, dp: int, **kw: Any) -> SequentialBucketSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SequentialBucketSampler(
            ds, num_replicas=dp, rank=rank, bucket_order="interleaved", **kw
        )


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=7),
    batch=st.integers(1, 4),
    unit=st.sampled_from([1, 2, 4, 6]),
    drop_last=st.booleans(),
    key=st.integers(0, 2**64 - 1),
)
def test_same_steps_as_sequential_in_another_order(
    sizes: list[int], batch: int, unit: int, drop_last: bool, key: int
) -> None:
    """Every layout R dividing U reads exactly the sequential epoch's (bucket, batch) steps, and
    every window of chunks holds each bucket's share of chunks within 2 x its bound."""
    n = np.array(sizes)
    b = np.full(n.size, batch)
    for dp in [d for d in range(1, unit + 1) if unit % d == 0]:
        plan = plan_interleaved_epoch(n, b, unit=unit, dp_size=dp, drop_last=drop_last, key=key)
        seq = plan_bucket_epoch(np.arange(n.size), n, b, dp_size=dp, drop_last=drop_last)
        assert _steps(plan) == _steps(seq)  # the same global batches, each bucket in order
        assert (plan.num_steps, plan.samples_dropped, plan.samples_padded) == (
            seq.num_steps,
            seq.samples_dropped,
            seq.samples_padded,
        )
    # exact shares: chunk t of the arrangement is the apportionment's slot t
    counts = -(-n // (b * unit))
    ap = Apportionment(counts.tolist(), key)
    plan = plan_interleaved_epoch(n, b, unit=unit, dp_size=1, drop_last=drop_last, key=key)
    total, bound = int(counts.sum()), ap.deviation_bounds()
    for a in range(0, total + 1, max(1, total // 7)):
        for c in range(a, total + 1, max(1, total // 5)):
            window = np.bincount(plan.buckets[a:c], minlength=n.size)
            share = counts * (c - a) / total
            assert np.all(np.abs(window - share) <= 2 * bound + 1e-9)


def test_chunks_mix_shapes_and_stay_in_lock_step() -> None:
    ds = _ds([60, 30, 90, 12])
    plans = [_sampler(ds, r, 3, base_batch_size=2, drop_last=False) for r in range(3)]
    epochs = [run_epoch(s) for s in plans]
    assert len({len(e) for e in epochs}) == 1
    table = ds.bucket_table
    bucket_of = np.empty(len(ds), dtype=np.int64)
    for j in range(table.num_buckets):
        bucket_of[table.bucket_indices(j)] = j
    for step in range(len(epochs[0])):  # every rank reads one bucket at each step
        assert len({int(bucket_of[i]) for e in epochs for i in e[step]}) == 1
    seq = SequentialBucketSampler(ds, base_batch_size=2, drop_last=False, num_replicas=3, rank=0)
    assert plans[0].longest_shape_run() <= 2 < seq.longest_shape_run() == 15
    flat = sorted(i for e in epochs for b in e for i in b)
    assert set(flat) == set(range(len(ds)))  # every sample, padding repeats only


def test_elastic_on_divisors_of_the_unit_and_refused_elsewhere() -> None:
    ds = _ds([50, 20, 33])
    s = _sampler(ds, 0, 4, base_batch_size=2, interleave_unit=4, seed=3)
    run_epoch(s, limit=5)
    state = s.state_dict()
    assert state["config.interleaved"] == 4  # the order and its unit, in one field
    assert "config.bucket_order" not in state
    seen = [i for r in range(4) for b in run_epoch(_sampler(ds, r, 4, base_batch_size=2,
            interleave_unit=4, seed=3), limit=5) for i in b]  # fmt: skip
    rest = []
    for r in range(2):  # continue on 2 ranks
        t = SequentialBucketSampler.from_state(state, dataset=ds, rank=r, dp_size=2)
        assert (t.bucket_order, t.interleave_unit) == ("interleaved", 4)
        rest += [i for b in run_epoch(t) for i in b]
    assert sorted(seen + rest) == sorted(range(len(ds)))[: len(seen + rest)] or len(
        set(seen + rest)
    ) == len(seen + rest)
    with pytest.raises(ValueError, match="interleave_unit must be a multiple of num_replicas=3"):
        SequentialBucketSampler.from_state(state, dataset=ds, rank=0, dp_size=3)
    bad = {**state, "layout.num_replicas": 3}  # a layout the unit rules out: refused on load
    with pytest.raises(ValueError, match="divides interleave_unit=4"):
        _sampler(ds, 0, 2, base_batch_size=2, interleave_unit=4, seed=3).load_state_dict(bad)
    with pytest.raises(ValueError, match="interleave_unit must be a multiple of num_replicas=3"):
        _sampler(ds, 0, 3, base_batch_size=2, interleave_unit=4)


def test_a_state_of_another_unit_or_order_names_interleave_unit() -> None:
    """The state key is ``config.interleaved``; a mismatch said
    "interleaved is 8 in the state but 4", naming no argument."""
    ds = _ds([50, 20, 33])
    eight = _sampler(ds, 0, 4, base_batch_size=2, interleave_unit=8, seed=3).state_dict()
    four = _sampler(ds, 0, 4, base_batch_size=2, interleave_unit=4, seed=3)
    sequential = SequentialBucketSampler(ds, base_batch_size=2, num_replicas=4, rank=0, seed=3)
    label = (
        "state is from another configuration: interleave_unit (state key config.interleaved: the "
        "chunk size U of bucket_order='interleaved', absent in the sequential order) is "
    )
    for sampler, state, tail in [
        (four, eight, "8 in the state but 4 in this sampler"),
        (sequential, eight, "8 in the state but not set here"),
        (four, sequential.state_dict(), "not in the state but 4 in this sampler"),
    ]:
        with pytest.raises(ValueError, match="^" + re.escape(label + tail) + "$"):
            sampler.load_state_dict(state)
    assert set(eight) - set(sequential.state_dict()) == {"config.interleaved"}  # format kept


def test_arguments_are_checked() -> None:
    ds = _ds([8, 8])
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"bucket_order": "random"}, ValueError, "bucket_order must be one of 'sequential', "),
        ({"bucket_order": "interleaved", "compat": "nemo"}, ValueError, "with compat='nemo'"),
        ({"interleave_unit": 2}, ValueError, "interleave_unit must be None unless"),
        (
            {"bucket_order": "interleaved", "interleave_unit": 3},
            ValueError,
            "interleave_unit must be a multiple of num_replicas=2",
        ),
        (
            {"bucket_order": "interleaved", "interleave_unit": True},
            TypeError,
            "interleave_unit must be an int in",
        ),
        (
            {"bucket_order": "interleaved", "interleave_unit": 2**16 + 2},
            ValueError,
            r"interleave_unit must be an int in \[1, 65536\]; got interleave_unit=65538",
        ),
    ]
    with pytest.raises(ValueError, match=r"num_replicas must be at most 65536 with bucket_order="):
        SequentialBucketSampler(
            ds, base_batch_size=2, num_replicas=2**16 + 1, rank=0, bucket_order="interleaved"
        )
    for kw, exc, message in cases:
        with pytest.raises(exc, match=message):
            SequentialBucketSampler(ds, base_batch_size=2, num_replicas=2, rank=0, **kw)


def test_shuffle_buckets_redraws_the_arrangement_each_epoch() -> None:
    ds = _ds([40, 40, 40, 40])
    moving = _sampler(ds, 0, 1, base_batch_size=2)
    fixed = _sampler(ds, 0, 1, base_batch_size=2, shuffle_buckets=False)
    arr = [[int(x) for x in s.bucket_plan(e).buckets] for s in (moving, fixed) for e in (0, 1)]
    assert arr[0] != arr[1]
    assert arr[2] == arr[3]
    assert longest_shape_run(fixed.bucket_plan(0)) == 1
