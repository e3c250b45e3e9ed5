"""Megatron samplers: worked examples, NeMo's bugs B11-B16 gone, validation, resume, elastic
resume, the default orders pinned, and the DataLoader / StatefulDataLoader integration."""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import dataorder.llm.megatron
from dataorder.core.keys import derive_key
from dataorder.core.partition import plan_epoch
from dataorder.core.permutation import Permutation
from dataorder.llm.factory import create_megatron_sampler
from dataorder.llm.megatron import (
    BaseMegatronSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
)
from dataorder.llm.orders import plan_megatron_epoch, shard_bounds

Single = MegatronPretrainingSampler
Random = MegatronPretrainingRandomSampler


def ranks(cls: type[BaseMegatronSampler], n: int, mbs: int, dp: int, **kw: Any) -> list[Any]:
    return [cls(n, mbs, r, dp, **kw) for r in range(dp)]


def epoch_of(samplers: list[Any]) -> list[list[list[int | None]]]:
    return [list(s) for s in samplers]


def global_stream(per_rank: list[list[list[int | None]]]) -> list[int | None]:
    """Micro-batches of each step in rank order: the job's global order of positions."""
    return [x for step in zip(*per_rank, strict=True) for mb in step for x in mb]


# -- worked examples (nemo_behaviour.md section 5, N=10, mbs=2, dp=2) -----------------------------
@pytest.mark.parametrize(
    ("kwargs", "rank0", "rank1"),
    [
        ({}, [[0, 1], [4, 5]], [[2, 3], [6, 7]]),
        ({"global_batch_size": 4}, [[0, 1], [4, 5]], [[2, 3], [6, 7]]),
        # NeMo: rank 1 gets an empty list (B12); here a full micro-batch of padding.
        (
            {"global_batch_size": 4, "drop_last": False},
            [[0, 1], [4, 5], [8, 9]],
            [[2, 3], [6, 7], [None, None]],
        ),
        # NeMo: rank 1 gets [-1, -2], real samples from the end of a shuffled dataset (B12).
        (
            {"global_batch_size": 4, "drop_last": False, "pad_samples_to_global_batch_size": True},
            [[0, 1], [4, 5], [8, 9]],
            [[2, 3], [6, 7], [None, None]],
        ),
        (
            {"global_batch_size": 8, "drop_last": False, "pad_samples_to_global_batch_size": True},
            [[0, 1], [4, 5], [8, 9], [None, None]],
            [[2, 3], [6, 7], [None, None], [None, None]],
        ),
    ],
)
def test_single_worked_examples(
    kwargs: dict[str, Any], rank0: list[list[int | None]], rank1: list[list[int | None]]
) -> None:
    samplers = ranks(Single, 10, 2, 2, **kwargs)
    assert [len(s) for s in samplers] == [len(rank0)] * 2
    assert epoch_of(samplers) == [rank0, rank1]


def test_len_equals_yielded_in_nemos_wrong_cases() -> None:
    """B11: NeMo's len() is 3 vs 2 yielded, 2 vs 3, 6 vs 5 in these configurations."""
    s = Single(10, 2, 0, 2)  # NeMo: len 3, yields 2
    assert len(s) == len(list(s)) == 2
    s = Single(12, 2, 0, 2, global_batch_size=8)  # NeMo: len 2, yields 3
    assert len(s) == len(list(s)) == 2
    assert s.samples_dropped == 4  # whole global batches only: the 4 left over are dropped
    s = Single(10, 1, 1, 2, global_batch_size=4, drop_last=False)  # NeMo: len 6, yields 5
    assert len(s) == len(list(s)) == 5
    r = Random(10, 1, 0, 1, drop_last=False)  # NeMo's cyclic: len 9, yields 10 (B14)
    assert len(r) == len(list(r)) == 10
    r = Random(10, 1, 1, 2, global_batch_size=4)  # NeMo's cyclic: len 4, yields 5
    assert len(r) == len(list(r)) == 4


@pytest.mark.parametrize("cls", [Single, Random])
@pytest.mark.parametrize("n", [1, 5, 9, 31])
@pytest.mark.parametrize("mbs_dp", [(1, 1), (1, 4), (3, 2), (2, 5)])
def test_no_empty_batch_no_negative_index(
    cls: type[BaseMegatronSampler], n: int, mbs_dp: tuple[int, int]
) -> None:
    mbs, dp = mbs_dp
    samplers = ranks(cls, n, mbs, dp, drop_last=False)
    per_rank = epoch_of(samplers)
    for got in per_rank:
        assert all(len(mb) == mbs for mb in got)
        assert all(x is None or 0 <= x < n for mb in got for x in mb)
    stream = global_stream(per_rank)
    assert sorted(x for x in stream if x is not None) == list(range(n))
    # padding only at the very end of the global stream
    assert stream[n:] == [None] * (len(stream) - n)
    assert samplers[0].samples_padded == len(stream) - n


# -- validation (B13, B14, B16) -------------------------------------------------------------------
BASE = {
    "total_samples": 10,
    "micro_batch_size": 2,
    "data_parallel_rank": 0,
    "data_parallel_size": 2,
}


@pytest.mark.parametrize("cls", [Single, Random])
@pytest.mark.parametrize(
    ("override", "exc", "message"),
    [
        (
            {"data_parallel_rank": -1},
            ValueError,
            "data_parallel_rank must be an int in [0, 1]; got data_parallel_rank=-1",
        ),
        (
            {"data_parallel_rank": 2},
            ValueError,
            "data_parallel_rank must be an int in [0, 1]; got data_parallel_rank=2",
        ),
        (
            {"data_parallel_rank": True},
            TypeError,
            "data_parallel_rank must be an int in [0, 1]; got data_parallel_rank=True",
        ),
        (
            {"total_samples": 0},
            ValueError,
            "total_samples must be an int in [1, 4611686018427387904]; got total_samples=0",
        ),
        (
            {"micro_batch_size": 0},
            ValueError,
            "micro_batch_size must be an int in [1, 2147483648]; got micro_batch_size=0",
        ),
        (
            {"micro_batch_size": 2.0},
            TypeError,
            "micro_batch_size must be an int in [1, 2147483648]; got micro_batch_size=2.0",
        ),
        (
            {"data_parallel_size": 0},
            ValueError,
            "data_parallel_size must be an int in [1, 2147483648]; got data_parallel_size=0",
        ),
        (
            {"global_batch_size": 0},
            ValueError,
            "global_batch_size must be an int in [1, 4611686018427387904]; got global_batch_size=0",
        ),
        (
            {"global_batch_size": -8},
            ValueError,
            "global_batch_size must be an int in [1, 4611686018427387904]; "
            "got global_batch_size=-8",
        ),
        (
            {"global_batch_size": True},
            TypeError,
            "global_batch_size must be an int in [1, 4611686018427387904]; "
            "got global_batch_size=True",
        ),
        (
            {"global_batch_size": 6},
            ValueError,
            "global_batch_size must be a multiple of micro_batch_size x data_parallel_size = "
            "2 x 2 = 4; got global_batch_size=6",
        ),
        (
            {"pad_samples_to_global_batch_size": True, "drop_last": False},
            ValueError,
            "global_batch_size must be an int when pad_samples_to_global_batch_size=True; "
            "got global_batch_size=None",
        ),
        (
            {"pad_samples_to_global_batch_size": True, "global_batch_size": 4},
            ValueError,
            "drop_last must be False when pad_samples_to_global_batch_size=True; "
            "got drop_last=True",
        ),
        (
            {"drop_last": 0},
            TypeError,
            "drop_last must be a bool; got drop_last=0",
        ),
        (
            {"pad_samples_to_global_batch_size": "yes"},
            TypeError,
            "pad_samples_to_global_batch_size must be a bool; got "
            "pad_samples_to_global_batch_size='yes'",
        ),
        (
            {"total_samples": 3},
            ValueError,
            "total_samples must be at least one micro-batch per rank (micro_batch_size x "
            "data_parallel_size = 2 x 2 = 4) when drop_last=True, or there is nothing to train; "
            "got total_samples=3",
        ),
        (
            {"global_batch_size": 12},
            ValueError,
            "total_samples must be at least one global batch (global_batch_size=12) when "
            "drop_last=True, or there is nothing to train; got total_samples=10",
        ),
        (
            {"consumed_samples": -4},
            ValueError,
            "consumed_samples must be a non-negative int; got consumed_samples=-4",
        ),
        (
            {"consumed_samples": 6},
            ValueError,
            "consumed_samples must be on a step boundary of this layout (micro_batch_size=2, "
            "data_parallel_size=2): 6 falls inside a step (epoch 0 starts at count 0 here, and "
            "consumed=6 is not a position this layout reaches: it takes blocks of "
            "per_rank x dp_size = 2 x 2 = 4 up to 8 positions); got consumed_samples=6",
        ),
    ],
)
def test_bad_arguments(
    cls: type[BaseMegatronSampler], override: dict[str, Any], exc: type[Exception], message: str
) -> None:
    with pytest.raises(exc) as info:
        cls(**{**BASE, **override})
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("override", "exc", "message"),
    [
        ({"seed": -1}, ValueError, "seed must be an int in [0, 9223372036854775807]; got seed=-1"),
        ({"seed": 2**63}, ValueError, "seed must be an int in [0, 9223372036854775807]"),
        ({"seed": False}, TypeError, "seed must be an int in [0, 9223372036854775807]"),
        (
            {"compat": "megatron-lm"},
            ValueError,
            "compat must be None or one of 'default', 'nemo', 'megatron'; got compat='megatron-lm'",
        ),
        ({"data_sharding": 1}, TypeError, "data_sharding must be a bool; got data_sharding=1"),
    ],
)
def test_bad_random_arguments(override: dict[str, Any], exc: type[Exception], message: str) -> None:
    with pytest.raises(exc) as info:
        Random(**{**BASE, **override})
    assert str(info.value).startswith(message)


def test_none_pad_flag_means_false_as_in_nemo() -> None:
    assert Single(10, 2, 0, 2, pad_samples_to_global_batch_size=None).samples_dropped == 2


def test_factory_forwards_everything() -> None:
    """B16: NeMo's factory drops gbs, pad and the seed for 'cyclic'."""
    s = create_megatron_sampler(
        10,
        2,
        8,
        dataloader_type="cyclic",
        drop_last=False,
        pad_samples_to_global_batch_size=True,
        rank=1,
        world_size=2,
        seed=17,
    )
    assert isinstance(s, Random)
    assert (s.seed, s.global_batch_size, s.pad_samples_to_global_batch_size) == (17, 8, True)
    assert (s.data_parallel_rank, s.data_parallel_size, s.samples_padded) == (1, 2, 6)
    assert len(s) == 4
    assert list(s) == list(Random(10, 2, 1, 2, False, 8, True, seed=17))
    other = create_megatron_sampler(10, 2, 8, "cyclic", False, True, 1, 2, seed=18)
    assert list(other) != list(Random(10, 2, 1, 2, False, 8, True, seed=17))
    single = create_megatron_sampler(10, 2, None, rank=1, world_size=2, drop_last=False)
    assert isinstance(single, Single)
    assert list(single) == [[2, 3], [6, 7], [None, None]]
    assert single.get_start_end_idx() == (2, 4)


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        (
            {"dataloader_type": "batch"},
            ValueError,
            "dataloader_type must be one of 'single', 'cyclic'; got dataloader_type='batch'",
        ),
        ({"seed": -2}, ValueError, "seed must be an int in [0, 9223372036854775807]; got seed=-2"),
        ({"world_size": 0}, ValueError, "world_size must be an int in [1, 2147483648]"),
        ({"rank": 2, "world_size": 2}, ValueError, "rank must be an int in [0, 1]; got rank=2"),
    ],
)
def test_factory_errors(kwargs: dict[str, Any], exc: type[Exception], message: str) -> None:
    with pytest.raises(exc) as info:
        create_megatron_sampler(
            **{"dataset_len": 10, "micro_batch_size": 1, "global_batch_size": 2, **kwargs}
        )
    assert str(info.value).startswith(message)


# -- epochs, cursor, consumed_samples --------------------------------------------------------------
def test_set_epoch_restarts_the_epoch_at_its_origin() -> None:
    s = Random(40, 2, 0, 2, seed=3)
    full = list(s)
    # the pass ran out: the state is epoch 0 at its end; len() is still a whole epoch
    assert (s.epoch, s.progress, len(s), s.remaining) == (0, {"consumed": 40}, 10, 10)
    s.set_epoch(0)  # the loop says "epoch 0" again: it restarts, as torch's samplers do
    assert list(s) == full
    s = Random(40, 2, 0, 2, seed=3)
    it = iter(s)
    head = [next(it) for _ in range(4)]
    state = s.state_dict()
    s.set_epoch(0)  # the loop says the current epoch: the position goes back to the origin
    assert (len(s), s.remaining, s.progress) == (10, 10, {"consumed": 0})
    assert list(s) == full  # a new pass reads the whole epoch
    s = Random(40, 2, 0, 2, seed=3)
    it = iter(s)
    head = [next(it) for _ in range(4)]
    s.set_epoch(0)  # a loader started its pass (workers prefetch) before the loop's set_epoch:
    assert head + list(it) == full  # the running pass goes on and reads the rest of the epoch
    assert s.progress == {"consumed": 40}
    s = Random(40, 2, 0, 2, seed=3)
    it = iter(s)
    head = [next(it) for _ in range(4)]
    s.set_epoch(1)  # another epoch places the cursor: the running pass stops
    assert list(it) == []
    t = Random(40, 2, 0, 2, seed=3)
    t.load_state_dict(state)  # a resumed epoch restarts at the resumed position
    t.set_epoch(0)
    assert (len(t), t.remaining) == (10, 6)
    assert head + list(t) == full
    s.set_epoch(2)
    assert (s.epoch, s.progress, len(s)) == (2, {"consumed": 0}, 10)
    s.set_epoch(0)
    assert list(s) == full


def test_passes_without_set_epoch_read_the_next_epochs() -> None:
    s = Random(40, 2, 0, 2, seed=3)
    e0, e1 = list(s), list(s)
    assert (s.epoch, s.progress) == (1, {"consumed": 40})
    t = Random(40, 2, 0, 2, seed=3)
    t.set_epoch(1)
    assert e0 != e1 == list(t)


def test_consumed_samples_across_layouts_is_exact_or_refused() -> None:
    """N=10, mbs 1, gbs 4, drop_last=False: an epoch is 12 positions on 4 ranks but 10 on 2."""
    kw: dict[str, Any] = {"drop_last": False, "global_batch_size": 4}
    four = [Single(10, 1, r, 4, **kw) for r in range(4)]
    for _ in range(2):
        epoch_of(four)
    assert four[0].state_dict()["epoch"] == 1  # two whole epochs read, at the end of epoch 1
    counted = 2 * 12  # Megatron's run-wide count after two epochs on 4 ranks
    with pytest.raises(ValueError, match=r"consumed_samples must be inside the first epoch"):
        Single(10, 1, 0, 2, consumed_samples=counted, **kw)
    two = [Single(10, 1, r, 2, **kw) for r in range(2)]
    for s in two:  # the state names the epoch: exact on the new layout
        s.load_state_dict(four[0].state_dict())
    assert global_stream(epoch_of(two)) == []
    assert global_stream(epoch_of(two)) == list(range(10))
    # inside the first epoch every layout agrees, and a count is exact anywhere
    assert global_stream(
        epoch_of([Single(10, 1, r, 2, consumed_samples=4, **kw) for r in range(2)])
    ) == list(range(4, 10))
    # with whole global batches per epoch the count is exact on any layout, in any epoch
    kw = {"drop_last": False, "global_batch_size": 4, "pad_samples_to_global_batch_size": True}
    s = Single(10, 1, 0, 2, consumed_samples=2 * 12 + 4, **kw)
    assert (s.epoch, s.progress) == (2, {"consumed": 4})


@pytest.mark.parametrize("cls", [Single, Random])
def test_consumed_samples_is_megatrons_run_wide_count(cls: type[BaseMegatronSampler]) -> None:
    n, mbs, dp = 50, 2, 3  # 8 blocks of 6 = 48 positions per epoch, on every layout
    ref = cls(n, mbs, 2, dp, global_batch_size=6)
    run = [mb for _ in range(3) for mb in ref]
    assert ref.consumed_samples == 2 * 48 + 48  # two passes ran out; the third is at its end
    for consumed in (0, 6, 42, 48, 54, 100 - 100 % 6, 3 * 48):
        s = cls(n, mbs, 2, dp, consumed_samples=consumed, global_batch_size=6)
        assert s.consumed_samples == consumed
        assert (s.epoch, s.progress) == (consumed // 48, {"consumed": consumed % 48})
        k = consumed // 6
        rest = [mb for _ in range(3 - consumed // 48) for mb in s]
        assert rest == run[k:]


def _at_epoch(s: BaseMegatronSampler, epoch: int) -> BaseMegatronSampler:
    s.set_epoch(epoch)
    return s


def test_seed_and_epoch_change_the_order() -> None:
    orders = {
        (seed, epoch): tuple(
            x for mb in _at_epoch(Random(64, 4, 0, 1, seed=seed), epoch) for x in mb
        )
        for seed in (0, 1, 2)
        for epoch in (0, 1, 2)
    }
    assert len(set(orders.values())) == 9
    # seed s, epoch e+1 is not seed s+1, epoch e (NeMo's seed + epoch collides)
    assert orders[(0, 1)] != orders[(1, 0)]


def test_default_order_is_a_global_shuffle() -> None:
    """Any sample can reach any rank; the dropped tail changes every epoch (NeMo: never)."""
    n, mbs, dp = 103, 2, 4
    samplers = ranks(Random, n, mbs, dp, seed=0)
    rank_of: dict[int, set[int]] = {}
    dropped = []
    for _ in range(6):
        per_rank = epoch_of(samplers)
        for r, got in enumerate(per_rank):
            for mb in got:
                for x in mb:
                    assert x is not None
                    rank_of.setdefault(x, set()).add(r)
        seen = set(global_stream(per_rank))
        dropped.append(frozenset(set(range(n)) - seen))
    assert all(len(d) == 103 % 8 for d in dropped)
    assert len(set(dropped)) == 6
    assert sum(len(v) > 1 for v in rank_of.values()) > n // 2


def test_default_orders_are_pinned() -> None:
    """Golden values: an algorithm change must be deliberate (and bump a version)."""
    assert epoch_of(ranks(Random, 10, 2, 2)) == [[[7, 9], [4, 1]], [[6, 2], [5, 8]]]
    assert epoch_of(ranks(Random, 10, 2, 2, seed=1234, data_sharding=True)) == [
        [[0, 3], [2, 4]],
        [[8, 7], [6, 5]],
    ]
    big = Random(10**9, 8, 7, 8, seed=1234, global_batch_size=1536)
    assert next(iter(big)) == [
        534211213,
        345477755,
        161574151,
        563646533,
        651463305,
        544321164,
        831123309,
        566513281,
    ]
    assert big.state_dict()["consumed"] == 64


def test_default_order_matches_its_definition_at_scale() -> None:
    n, mbs, dp, rank = 10**9, 8, 64, 13
    s = Random(n, mbs, rank, dp, seed=99, consumed_samples=n // 2 - (n // 2) % (mbs * dp))
    pi = Permutation(n, derive_key(99, epoch=0, stream="megatron", purpose="sample-order"))
    start = s.progress["consumed"]
    it = iter(s)
    for k in range(3):
        first = start + k * mbs * dp + rank * mbs
        assert next(it) == [pi.index(p) for p in range(first, first + mbs)]
    state = json.dumps(s.state_dict(), separators=(",", ":"))
    assert len(state) <= 512


def test_sharded_ranks_read_their_shard_only() -> None:
    n, mbs, dp = 1001, 4, 5
    samplers = ranks(Random, n, mbs, dp, seed=8, data_sharding=True, drop_last=False)
    assert [shard_bounds(n, dp, r) for r in range(dp)] == [
        (0, 200),
        (200, 400),
        (400, 600),
        (600, 800),
        (800, 1001),
    ]
    e0, e1 = epoch_of(samplers), epoch_of(samplers)
    for r in range(dp):
        lo, hi = shard_bounds(n, dp, r)
        for epoch in (e0, e1):
            reals = [x for mb in epoch[r] for x in mb if x is not None]
            assert sorted(reals) == list(range(lo, hi))
        assert e0[r] != e1[r]
    assert samplers[0].samples_padded == 51 * 20 - n


# -- resume ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        {"drop_last": False, "global_batch_size": 8, "pad_samples_to_global_batch_size": True},
        {
            "drop_last": False,
            "global_batch_size": 8,
            "pad_samples_to_global_batch_size": True,
            "seed": 3,
        },
    ],
)
def test_resume_inside_the_padding_of_the_last_global_batch(kwargs: dict[str, Any]) -> None:
    """The padded global batch is completed after a resume, as in an uninterrupted run."""
    cls = Random if "seed" in kwargs else Single
    full = list(cls(10, 1, 0, 2, **kwargs))
    assert len(full) == 8
    assert full[5:] == [[None]] * 3
    for k in range(len(full)):
        a = cls(10, 1, 0, 2, **kwargs)
        it = iter(a)
        head = [next(it) for _ in range(k)]
        b = cls(10, 1, 0, 2, **kwargs)
        b.load_state_dict(a.state_dict())
        assert (len(b), b.remaining) == (len(full), len(full) - k)
        assert head + list(b) == full
    assert plan_epoch(10, per_rank=1, dp_size=2, tail="pad", unit=8).step_of(10) == 5


def test_load_is_strict_and_names_the_field() -> None:
    s = Random(100, 2, 0, 4, seed=1)
    state = s.state_dict()
    with pytest.raises(ValueError, match="seed is 1 in the state but 2 in this sampler"):
        Random(100, 2, 0, 4, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="order is 'global' in the state but 'sharded'"):
        Random(100, 2, 0, 4, seed=1, data_sharding=True).load_state_dict(state)
    with pytest.raises(ValueError, match="total_samples is 100 in the state but 101"):
        Random(101, 2, 0, 4, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="global_batch_size is 0 in the state but 16"):
        Random(100, 2, 0, 4, seed=1, global_batch_size=16).load_state_dict(state)
    with pytest.raises(ValueError, match="'megatron_random' sampler, not a 'megatron_single'"):
        Single(100, 2, 0, 4).load_state_dict(state)


# -- elastic resume ------------------------------------------------------------------------------
def _run_steps(samplers: list[Any], steps: int | None) -> list[list[list[int | None]]]:
    iters = [iter(s) for s in samplers]
    out: list[list[list[int | None]]] = [[] for _ in samplers]
    k = 0
    while steps is None or k < steps:
        try:
            row = [next(it) for it in iters]
        except StopIteration:
            break
        for r, mb in enumerate(row):
            out[r].append(mb)
        k += 1
    return out


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (Single, {"global_batch_size": 48}),
        (Random, {"global_batch_size": 48, "seed": 5}),
        (
            Random,
            {
                "global_batch_size": 48,
                "seed": 5,
                "drop_last": False,
                "pad_samples_to_global_batch_size": True,
            },
        ),
    ],
)
@pytest.mark.parametrize("new_dp", [4, 6])
def test_elastic_resume_continues_the_same_global_stream(
    cls: type[BaseMegatronSampler], kwargs: dict[str, Any], new_dp: int
) -> None:
    """Saved on 8 ranks after 3 global batches, continued on 4 or 6: the global stream of the
    whole epoch, step by step in rank order, is exactly the uninterrupted one."""
    n = 1000
    reference = global_stream(epoch_of(ranks(cls, n, 1, 8, **kwargs)))
    old = ranks(cls, n, 1, 8, **kwargs)
    before = global_stream(_run_steps(old, 3 * 48 // 8))
    state = json.loads(json.dumps(old[0].state_dict()))
    assert state["consumed"] == 3 * 48
    assert all(s.state_dict() == old[0].state_dict() for s in old)
    new = ranks(cls, n, 1, new_dp, **kwargs)
    for s in new:
        s.load_state_dict(state)
    assert {s.remaining for s in new} == {(len(reference) - 3 * 48) // new_dp}
    after = global_stream(epoch_of(new))
    assert before + after == reference
    # and the next epoch runs whole on the new layout
    assert global_stream(epoch_of(new)) == global_stream(
        epoch_of(
            [cls(n, 1, r, new_dp, consumed_samples=len(reference), **kwargs) for r in range(new_dp)]
        )
    )


def test_resume_with_another_micro_batch_size() -> None:
    """Megatron resumes by samples: mbs may change if the consumed count is on the new block."""
    kw = {"seed": 2, "global_batch_size": 24}
    reference = global_stream(epoch_of(ranks(Random, 200, 2, 3, **kw)))
    old = ranks(Random, 200, 2, 3, **kw)
    before = global_stream(_run_steps(old, 8))  # 8 blocks of 6 = 48 = 2 global batches
    new = ranks(Random, 200, 4, 3, **kw)  # blocks of 12
    for s in new:
        s.load_state_dict(old[0].state_dict())
    assert before + global_stream(epoch_of(new)) == reference


def test_elastic_resume_refuses_a_count_off_the_new_block() -> None:
    old = ranks(Random, 1000, 1, 8, seed=5)
    _run_steps(old, 1)  # consumed 8
    state = old[0].state_dict()
    with pytest.raises(ValueError) as info:
        Random(1000, 1, 0, 6, seed=5).load_state_dict(state)
    assert str(info.value).startswith(
        "cannot resume epoch 0 on this layout ({'micro_batch_size': 1, 'data_parallel_size': 6}): "
        "consumed=8 is not a multiple of the global block per_rank x dp_size = 1 x 6 = 6"
    )
    Random(1000, 1, 0, 4, seed=5).load_state_dict(state)


def test_sharded_resume_refuses_another_data_parallel_size_but_not_another_mbs() -> None:
    old = ranks(Random, 120, 2, 4, seed=5, data_sharding=True)
    before = _run_steps(old, 3)
    state = old[0].state_dict()
    with pytest.raises(
        ValueError, match="data_parallel_size is 4 in the state but 2 in this sampler"
    ):
        Random(120, 2, 0, 2, seed=5, data_sharding=True).load_state_dict(state)
    full = epoch_of(ranks(Random, 120, 2, 4, seed=5, data_sharding=True))
    new = ranks(Random, 120, 6, 4, seed=5, data_sharding=True)  # blocks of 24: 24 = 3 x 8
    for s in new:
        s.load_state_dict(state)
    for r in range(4):
        flat = [x for mb in before[r] + list(new[r]) for x in mb]
        assert flat == [x for mb in full[r] for x in mb]


# -- DataLoader / StatefulDataLoader ------------------------------------------------------------
class Tokens(Dataset[dict[str, torch.Tensor]]):
    """A dataset that understands the sampler's padding slots (``None``)."""

    def __len__(self) -> int:
        return 45

    def __getitem__(self, idx: int | None) -> dict[str, torch.Tensor]:
        if idx is None:
            return {"index": torch.tensor(-1), "loss_mask": torch.tensor(0.0)}
        return {"index": torch.tensor(idx), "loss_mask": torch.tensor(1.0)}


def _indices(batches: Iterator[dict[str, torch.Tensor]] | list[Any]) -> list[list[int]]:
    return [b["index"].tolist() for b in batches]


def test_plain_dataloader_masks_padding() -> None:
    s = Random(
        45,
        4,
        1,
        2,
        seed=3,
        drop_last=False,
        global_batch_size=16,
        pad_samples_to_global_batch_size=True,
    )
    batches = list(DataLoader(Tokens(), batch_sampler=s))
    assert len(batches) == len(s) == 6
    mask = torch.cat([b["loss_mask"] for b in batches])
    ids = torch.cat([b["index"] for b in batches])
    assert ((ids >= 0) == (mask > 0)).all()
    # 45 samples padded to 48: positions 45-47 are in rank 1's slice of the last block
    assert int((mask == 0).sum()) == 3 == s.samples_padded


def test_plain_dataloader_with_workers_resumed_at_the_end_of_an_epoch() -> None:
    """The resumed loop over DataLoader(batch_sampler=s, num_workers=2), from a state saved after
    the last micro-batch of epoch 0: loop epoch 0 is empty, loop epoch 1 reads epoch 1."""

    def make() -> Any:
        return Random(45, 4, 1, 2, seed=3, drop_last=False)

    a = make()
    for _ in zip(range(len(a)), a, strict=False):  # the last micro-batch; never ran out
        pass
    s = make()
    s.load_state_dict(a.state_dict())
    loader = DataLoader(Tokens(), batch_sampler=s, num_workers=2)
    got = []
    for epoch in (0, 1):
        s.set_epoch(epoch)
        got.append(_indices(list(loader)))
    expected = make()
    expected.set_epoch(1)
    assert got == [[], [[i if i is not None else -1 for i in b] for b in expected]]


# -- module hygiene --------------------------------------------------------------------------------
def test_importing_megatron_does_not_import_torch() -> None:
    code = (
        "import sys, dataorder.llm.megatron, dataorder.llm.schedule; "
        "s = dataorder.llm.megatron.MegatronPretrainingRandomSampler(10, 2, 0, 2); list(s); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_docstring_examples() -> None:
    result = doctest.testmod(dataorder.llm.megatron, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 4  # the checkpoint schemas: docs/llm_samplers.md
    assert result.failed == 0


def test_plan_megatron_epoch_tail_rules() -> None:
    lay = plan_megatron_epoch(21, 2, 2, drop_last=True, global_batch_size=8)
    assert (lay.num_batches, lay.dropped, lay.padded) == (4, 5, 0)
    lay = plan_megatron_epoch(21, 2, 2, drop_last=False, global_batch_size=8)
    assert (lay.num_batches, lay.dropped, lay.padded) == (6, 0, 3)
    lay = plan_megatron_epoch(
        21, 2, 2, drop_last=False, global_batch_size=8, pad_samples_to_global_batch_size=True
    )
    assert (lay.num_batches, lay.dropped, lay.padded) == (6, 0, 3)
    lay = plan_megatron_epoch(
        17, 2, 2, drop_last=False, global_batch_size=8, pad_samples_to_global_batch_size=True
    )
    assert (lay.num_batches, lay.padded) == (6, 7)
    assert np.array_equal(lay.batch_positions(5, rank=1, split="contiguous"), [22, 23])
