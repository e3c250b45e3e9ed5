"""SequentialBucketSampler: lock-step by construction, exact and elastic resume, honest batch info,
eager validation, and the DataLoader / StatefulDataLoader integration."""

from __future__ import annotations

import doctest
import json
import warnings
from collections import Counter
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dataorder.diffusion.sampler.sampler
from dataorder.core.keys import MAX_SEED, derive_key
from dataorder.core.partition import MAX_BATCH_SIZE, plan_epoch, plan_segments
from dataorder.core.permutation import Permutation
from dataorder.core.state import MAX_EPOCH
from dataorder.core.topology import MAX_DP_SIZE
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.nemo_order import nemo_bucket_order
from dataorder.diffusion.sampler.plan import KeyedBucketOrder, plan_bucket_epoch
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.testing import (
    MAX_STATE_BYTES,
    SamplerCase,
    check_elastic_resume,
    check_repeated_resume,
    run_epoch,
)

S = SequentialBucketSampler


def make_dataset(
    sizes: Sequence[int], seed: int = 0, calculator: Any = None
) -> BaseMultiresolutionDataset:
    """Buckets of the given sizes, samples interleaved at random; bucket ``j`` is ``64(j+1) x 64``,
    so the rows of the sorted bucket table are the ``j`` in order."""
    ids = np.repeat(np.arange(len(sizes)), sizes)
    np.random.default_rng(seed).shuffle(ids)
    res = [(64 * (j + 1), 64) for j in range(len(sizes))]
    return BaseMultiresolutionDataset.from_bucket_ids(ids, res, calculator=calculator)


def worked_example() -> BaseMultiresolutionDataset:
    """Section 4 of the NeMo notes: samples 0-4 are 256x256, 5-7 are 320x192."""
    return BaseMultiresolutionDataset.from_bucket_ids(
        [0, 0, 0, 0, 0, 1, 1, 1], resolutions=[(256, 256), (320, 192)]
    )


def all_ranks(ds: Any, world: int, **kw: Any) -> list[list[list[int]]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samplers = [S(ds, num_replicas=world, rank=r, **kw) for r in range(world)]
    return [run_epoch(s) for s in samplers]


def quiet(ds: Any, **kw: Any) -> SequentialBucketSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return S(ds, **kw)


# -- the worked example and pinned orders ----------------------------------------------------------
def test_docstring_examples() -> None:
    result = doctest.testmod(
        dataorder.diffusion.sampler.sampler, optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted >= 6
    assert result.failed == 0


def test_worked_example_default_mode() -> None:
    kw = {"base_batch_size": 2, "shuffle_buckets": False, "shuffle_within_bucket": False}
    assert all_ranks(worked_example(), 2, drop_last=False, **kw) == [
        [[5, 7], [0, 2], [4]],
        [[6, 5], [1, 3], [0]],
    ]
    # drop_last drops whole global batches of real samples: the 3-sample bucket goes entirely
    assert all_ranks(worked_example(), 2, drop_last=True, **kw) == [[[0, 2]], [[1, 3]]]
    s = quiet(worked_example(), drop_last=True, num_replicas=2, rank=0, **kw)
    assert (s.samples_dropped, s.samples_padded, len(s)) == (4, 0, 1)


def test_default_order_is_pinned() -> None:
    # Golden values: a change of the key derivation, the permutation or the layout shows here.
    ds = make_dataset([5, 3, 7], seed=1)
    e0 = all_ranks(ds, 2, base_batch_size=2, drop_last=False, seed=1234)
    assert e0 == GOLDEN_EPOCH0
    s = S(ds, base_batch_size=2, drop_last=False, seed=1234, num_replicas=2, rank=1)
    s.set_epoch(1)
    assert run_epoch(s) == GOLDEN_EPOCH1_RANK1


GOLDEN_EPOCH0 = [
    [[7, 11], [3, 12], [14, 5], [8], [2, 6]],
    [[9, 1], [4, 7], [10, 0], [14], [13, 2]],
]
GOLDEN_EPOCH1_RANK1 = [[6, 2], [11, 3], [7, 4], [14, 0], [10]]


def test_default_stream_is_the_documented_function() -> None:
    """Position p of bucket j holds indices_j[Permutation(n_j, key_j)(p mod n_j)]."""
    ds = make_dataset([9, 4, 13, 6], seed=2)
    t = ds.bucket_table
    seed, epoch, world, bs = 77, 5, 3, 2
    samplers = [
        S(ds, base_batch_size=bs, drop_last=False, seed=seed, num_replicas=world, rank=r)
        for r in range(world)
    ]
    for sampler in samplers:
        sampler.set_epoch(epoch)
    got = [run_epoch(sampler) for sampler in samplers]
    key = derive_key(seed, epoch=epoch, stream="sequential_bucket", purpose="bucket-order")
    order = Permutation(4, key)(np.arange(4))
    step = 0
    for j in order.tolist():
        n = int(t.sizes[j])
        key = derive_key(
            seed, epoch=epoch, stream="sequential_bucket", purpose="within-bucket", extra=(j,)
        )
        perm = Permutation(n, key)
        lay = plan_epoch(n, per_rank=bs, dp_size=world, tail="shrink")
        for b in range(lay.num_batches):
            for r in range(world):
                pos = lay.batch_positions(b, rank=r, split="strided") % n
                assert got[r][step] == t.bucket_indices(j)[perm(pos)].tolist()
            step += 1
    assert step == len(got[0])


# -- lock-step, coverage and len: properties over every rank ---------------------------------------
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=6),
    bs=st.integers(1, 5),
    world=st.integers(1, 5),
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 3),
    drop_last=st.booleans(),
    shuffle_buckets=st.booleans(),
    shuffle_within=st.booleans(),
    dynamic=st.booleans(),
    compat=st.sampled_from(["default", "nemo"]),
)
def test_lock_step_coverage_and_len(
    sizes: list[int],
    bs: int,
    world: int,
    seed: int,
    epoch: int,
    drop_last: bool,
    shuffle_buckets: bool,
    shuffle_within: bool,
    dynamic: bool,
    compat: str,
) -> None:
    ds = make_dataset(sizes, seed=len(sizes))
    t = ds.bucket_table
    kw: dict[str, Any] = {
        "base_batch_size": bs,
        "base_resolution": (128, 64),
        "drop_last": drop_last,
        "shuffle_buckets": shuffle_buckets,
        "shuffle_within_bucket": shuffle_within,
        "dynamic_batch_size": dynamic,
        "seed": seed,
        "compat": compat,
    }
    try:
        samplers = [quiet(ds, num_replicas=world, rank=r, **kw) for r in range(world)]
    except ValueError as err:
        message = str(err)
        assert drop_last, message
        assert "drop_last=True leaves nothing to train on" in message
        return
    for s in samplers:
        s.set_epoch(epoch)
    lens = [len(s) for s in samplers]
    got = [run_epoch(s) for s in samplers]
    assert [len(g) for g in got] == lens
    assert len(set(lens)) == 1
    # every pass ran out: each cursor is at the end of the epoch, and the next pass is the next
    assert {(s.epoch, s.progress["bucket"], s.progress["consumed"]) for s in samplers} == {
        (epoch, t.num_buckets, 0)
    }
    assert {(s.next_start(), s.remaining) for s in samplers} == {((epoch + 1, 0), lens[0])}
    bucket_of = {i: ds[i]["bucket"] for i in range(len(ds))}
    runs: list[int] = []
    streams: dict[int, list[int]] = {}
    for step in range(lens[0]):
        info = samplers[0].get_batch_info(step, epoch=epoch)
        batches = [got[r][step] for r in range(world)]
        assert {len(b) for b in batches} == {info["batch_size"]}  # one shape on every rank
        assert {bucket_of[i] for b in batches for i in b} == {info["bucket"]}  # one bucket
        start = len(streams.get(info["bucket"], []))  # the global batch's first position
        n = int(t.sizes[info["bucket"]])
        for r in range(world):
            slots = range(start + r, start + r + world * info["batch_size"], world)
            info_r = samplers[r].get_batch_info(step, epoch=epoch)
            assert info_r["padding"] == sum(p >= n for p in slots)
        assert info["padding_global"] == max(0, start + world * info["batch_size"] - max(n, start))
        if not runs or runs[-1] != info["bucket"]:
            runs.append(info["bucket"])
        # the rank-interleaved global batch continues the bucket's stream
        streams.setdefault(info["bucket"], []).extend(
            batches[i % world][i // world] for i in range(world * info["batch_size"])
        )
    assert len(runs) == len(set(runs))  # buckets one after another, never revisited
    if not shuffle_buckets:
        assert runs == sorted(runs)
    padded = 0
    for j, stream in streams.items():
        n = int(t.sizes[j])
        real = stream[:n]
        assert len(set(real)) == len(real)  # no repeat before the bucket is exhausted
        assert all(stream[p] == stream[p % n] for p in range(n, len(stream)))  # p mod n padding
        padded += max(0, len(stream) - n)
        if not shuffle_within:
            assert real == t.bucket_indices(j)[: len(real)].tolist()
    seen = {i for g in got for b in g for i in b}
    assert padded == samplers[0].samples_padded
    assert len(seen) == len(ds) - samplers[0].samples_dropped
    if not drop_last:
        assert seen == set(range(len(ds)))
        assert samplers[0].samples_dropped == 0
    if drop_last and compat == "default":
        assert samplers[0].samples_padded == 0


@given(
    n=st.integers(1, 300),
    b=st.integers(1, 9),
    world=st.integers(1, 9),
    drop_last=st.booleans(),
)
def test_bucket_runs_are_plan_epoch(n: int, b: int, world: int, drop_last: bool) -> None:
    tail = "drop" if drop_last else "shrink"
    seg = plan_segments([n], per_rank=b, dp_size=world, tail=tail).blocks(0)
    assert seg == plan_epoch(n, per_rank=b, dp_size=world, tail=tail)
    nemo = plan_segments([n], per_rank=b, dp_size=world, tail=tail, round_to=world).blocks(0)
    per_rank = -(-n // world)  # NeMo: pad to a multiple of R, chunk each rank's list by b
    assert nemo.full_blocks * b + nemo.tail_per_rank == (
        per_rank // b * b if drop_last else per_rank
    )


def test_plan_prefix_sums_and_locate() -> None:
    plan = plan_bucket_epoch([2, 0, 1], [10, 3, 7], [2, 1, 3], dp_size=2, drop_last=False)
    assert plan.buckets.tolist() == [2, 0, 1]
    assert plan.segments.n.tolist() == [7, 10, 3]
    assert plan.segments.full_blocks.tolist() == [1, 2, 1]
    assert plan.segments.tail_per_rank.tolist() == [1, 1, 1]
    assert plan.segments.offsets.tolist() == [0, 2, 5, 7]
    assert [plan.locate(i) for i in range(7)] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        (1, 2),
        (2, 0),
        (2, 1),
    ]
    assert (plan.samples_padded, plan.samples_dropped, plan.num_steps) == (1 + 0 + 1, 0, 7)


def test_planning_functions_check_their_input() -> None:
    with pytest.raises(
        ValueError, match=r"dp_size must be an int in \[1, 2147483648\]; got dp_size=0"
    ):
        plan_segments([3], per_rank=1, dp_size=0, tail="drop")
    with pytest.raises(ValueError, match=r"order, sizes and batch_sizes must have one shape"):
        plan_bucket_epoch([0, 1], [3, 4], [1], dp_size=1, drop_last=True)
    with pytest.raises(ValueError, match=r"batch_sizes\[0\] must be an int in \[1, 2147483648\]"):
        plan_bucket_epoch([0], [3], [0], dp_size=1, drop_last=True)
    with pytest.raises(ValueError, match=r"order must be a permutation of the bucket rows"):
        plan_bucket_epoch([1, 1], [3, 4], [1, 1], dp_size=1, drop_last=True)


def test_bucket_orders() -> None:
    keyed = KeyedBucketOrder(3)  # the seed is bound when a strategy is built
    order = keyed.bucket_order(50, epoch=2, shuffle=True)
    assert sorted(order.tolist()) == list(range(50))
    assert not np.array_equal(order, keyed.bucket_order(50, epoch=3, shuffle=True))
    assert keyed.bucket_order(5, epoch=2, shuffle=False).tolist() == [0, 1, 2, 3, 4]
    g = torch.Generator()
    g.manual_seed(45)
    assert (
        nemo_bucket_order(9, seed=42, epoch=3, shuffle=True).tolist()
        == torch.randperm(9, generator=g).tolist()
    )


def test_structured_keys_do_not_collide_across_seed_and_epoch() -> None:
    ds = make_dataset([20, 30, 25], seed=3)

    def epoch_of(seed: int, epoch: int, compat: str) -> list[list[int]]:
        s = S(ds, base_batch_size=2, drop_last=False, seed=seed, num_replicas=1, compat=compat)
        s.set_epoch(epoch)
        return run_epoch(s)

    assert epoch_of(10, 4, "default") != epoch_of(11, 3, "default")
    assert epoch_of(10, 4, "default") != epoch_of(10, 5, "default")
    # NeMo seeds seed + epoch, so its orders collide; compat mode reproduces that on purpose
    assert epoch_of(10, 4, "nemo") == epoch_of(11, 3, "nemo")


# -- resume ----------------------------------------------------------------------------------------
def test_successive_resumes_are_exact() -> None:
    """NeMo's B1: 16 samples, bs 2, no shuffle; its third segment repeats [4,5],[6,7]."""
    ds = BaseMultiresolutionDataset.from_bucket_ids([0] * 16, resolutions=[(64, 64)])
    kw = {"base_batch_size": 2, "shuffle_buckets": False, "shuffle_within_bucket": False}
    got: list[list[int]] = []
    state = None
    for _ in range(4):
        s = S(ds, num_replicas=1, rank=0, **kw)
        if state is not None:
            s.load_state_dict(state)
        assert len(s) == 8  # len() is a whole epoch, as torch and NeMo define it
        assert s.remaining == 8 - len(got)  # what the next iter() yields
        got += run_epoch(s, limit=2)
        state = s.state_dict()
    assert got == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]


@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=5),
    bs=st.integers(1, 4),
    half=st.integers(1, 3),
    seed=st.integers(0, 2**32),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    data=st.data(),
)
def test_resume_properties(
    sizes: list[int],
    bs: int,
    half: int,
    seed: int,
    drop_last: bool,
    shuffle: bool,
    data: st.DataObject,
) -> None:
    """Resume at any step on any rank reproduces the rest; successive resumes stay exact; a
    state saved on 2h ranks continues on h with nothing repeated or skipped beyond padding."""
    ds = make_dataset(sizes, seed=len(sizes))
    kw: dict[str, Any] = {
        "base_batch_size": bs,
        "drop_last": drop_last,
        "shuffle_buckets": shuffle,
        "shuffle_within_bucket": shuffle,
        "seed": seed,
    }
    world = 2 * half
    try:
        quiet(ds, num_replicas=world, rank=0, **kw)
    except ValueError:
        return  # drop_last=True leaves nothing at this size (tested elsewhere)
    case = SamplerCase(
        name="property",
        make=lambda r, w: quiet(ds, num_replicas=w, rank=r, **kw),
        dataset_size=len(ds),
        dp_size=world,
    )
    rank = data.draw(st.integers(0, world - 1))
    full = run_epoch(case.make(rank, world))
    k = data.draw(st.integers(0, len(full)))
    a = case.make(rank, world)
    head = run_epoch(a, limit=k)
    b = case.make(rank, world)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    if k < len(full):
        assert head + run_epoch(b) == full
    check_repeated_resume(case, segments=(1, 2, 1))
    check_elastic_resume(case, half)


def test_set_epoch_after_load_keeps_or_resets() -> None:
    """NeMo's B2: a loaded skip applies to whatever epoch is set; here it belongs to its epoch."""
    ds = make_dataset([12, 8], seed=4)
    ref = S(ds, base_batch_size=2, num_replicas=2, rank=0, drop_last=False)
    ref.set_epoch(1)
    full1 = run_epoch(ref)
    a = S(ds, base_batch_size=2, num_replicas=2, rank=0, drop_last=False)
    a.set_epoch(1)
    run_epoch(a, limit=2)
    b = S(ds, base_batch_size=2, num_replicas=2, rank=0, drop_last=False)
    b.load_state_dict(a.state_dict())
    b.set_epoch(1)  # the recipe calls set_epoch every epoch: the position is kept
    assert run_epoch(b) == full1[2:]
    c = S(ds, base_batch_size=2, num_replicas=2, rank=0, drop_last=False)
    c.load_state_dict(a.state_dict())
    c.set_epoch(2)
    d = S(ds, base_batch_size=2, num_replicas=2, rank=0, drop_last=False)
    d.set_epoch(2)
    assert run_epoch(c) == run_epoch(d)


def test_state_after_an_epoch_describes_its_end() -> None:
    ds = make_dataset([6, 6])
    s = S(ds, base_batch_size=2, num_replicas=2, rank=0)
    epoch1 = run_epoch(S(ds, base_batch_size=2, num_replicas=2, rank=0, seed=42), limit=None)
    run_epoch(s)  # the pass ran out: the state still describes epoch 0, at its end
    assert (s.epoch, s.progress) == (0, {"bucket": 2, "consumed": 0})
    assert (s.state_dict()["epoch"], s.state_dict()["bucket"], len(s), s.remaining) == (0, 2, 2, 2)
    assert s.next_start() == (1, 0)  # this process ran the epoch out: the next pass is epoch 1
    # NeMo's stale window: a loop that stops at the last batch without running the pass out
    t = S(ds, base_batch_size=2, num_replicas=2, rank=0)
    run_epoch(t, limit=len(t))
    assert (t.epoch, t.progress) == (0, {"bucket": 2, "consumed": 0})
    it = iter(t)  # a generator: nothing moves before its first batch
    assert (t.state_dict()["epoch"], t.state_dict()["bucket"]) == (0, 2)
    assert list(it) == run_epoch(s) != epoch1
    assert t.epoch == 1


def test_state_is_small_and_names_every_field() -> None:
    ds = make_dataset([40, 50, 60])
    for compat in ("default", "nemo"):
        s = S(
            ds,
            seed=2**63 - 1,
            base_batch_size=65536,
            drop_last=False,
            compat=compat,
            num_replicas=1024,
            rank=1023,
            dynamic_batch_size=True,
        )
        run_epoch(s, limit=1)
        text = json.dumps(s.state_dict(), separators=(",", ":"))
        assert len(text) <= 512, text


def test_nemo_states_fit_the_budget_at_the_largest_legal_values() -> None:
    """NOTE [ NeMo bucket states ]: the largest seed, epoch, batch and data-parallel size."""
    seed = MAX_SEED  # every mode's cap
    assert seed + MAX_EPOCH < 2**64  # NeMo seeds torch with seed + epoch: no legal pair overflows
    s = quiet(make_dataset([40, 50, 60]), seed=seed, base_batch_size=MAX_BATCH_SIZE,
              drop_last=False, compat="nemo", num_replicas=MAX_DP_SIZE, rank=MAX_DP_SIZE - 1,
              dynamic_batch_size=True)  # fmt: skip
    with pytest.raises(ValueError, match=r"epoch must be an int in \[0, 4294967295\]; got epoch="):
        s.set_epoch(2**64 - 1)
    s.set_epoch(MAX_EPOCH)
    assert s.batch_at(0)  # torch.manual_seed(seed + epoch) takes it
    state = s.state_dict()
    text = json.dumps(state, separators=(",", ":"))
    assert len(text) <= MAX_STATE_BYTES, text
    # the mode records num_replicas in its config and does not repeat it in the layout
    assert state["config.num_replicas"] == MAX_DP_SIZE
    assert "layout.num_replicas" not in state
    back = S.from_state(json.loads(text), dataset=s.dataset, rank=3)
    assert (back.num_replicas, back.epoch, back.rank) == (MAX_DP_SIZE, MAX_EPOCH, 3)


def test_older_nemo_states_with_a_layout_still_load() -> None:
    ds = make_dataset([5, 9, 14], seed=2)
    s = quiet(ds, base_batch_size=2, compat="nemo", drop_last=False, num_replicas=2, rank=0)
    run_epoch(s, limit=3)
    state = s.state_dict()
    older = {**state, "layout.num_replicas": 2}  # what states of this mode held before
    fresh = quiet(ds, base_batch_size=2, compat="nemo", drop_last=False, num_replicas=2, rank=0)
    fresh.load_state_dict(older)
    assert fresh.state_dict() == state
    whole = run_epoch(quiet(ds, base_batch_size=2, compat="nemo", drop_last=False, num_replicas=2,
                            rank=0))  # fmt: skip
    assert run_epoch(fresh) == whole[3:]
    assert older["layout.num_replicas"] == 2  # not mutated
    assert S.from_state(older, dataset=ds).num_replicas == 2
    with pytest.raises(
        ValueError,
        match=r"state\['layout.num_replicas'\] must equal state\['config.num_replicas'\]",
    ):
        fresh.load_state_dict({**state, "layout.num_replicas": 4})
    with pytest.raises(ValueError, match="num_replicas is 2 in the state but 4 in this sampler"):
        quiet(ds, base_batch_size=2, compat="nemo", drop_last=False, num_replicas=4,
              rank=0).load_state_dict(older)  # fmt: skip


def _state(ds: Any, **kw: Any) -> dict[str, Any]:
    s = quiet(ds, **kw)
    run_epoch(s, limit=1)
    return s.state_dict()


def test_foreign_states_are_refused_with_the_field() -> None:
    ds = make_dataset([20, 30, 12])
    kw: dict[str, Any] = {"base_batch_size": 2, "num_replicas": 2, "rank": 0}
    state = _state(ds, **kw)
    with pytest.raises(ValueError, match=r"dataset is '[0-9a-f]{16}' in the state but"):
        S(make_dataset([20, 30, 13]), **kw).load_state_dict(state)
    with pytest.raises(ValueError, match="seed is 42 in the state but 7 in this sampler"):
        S(ds, seed=7, **kw).load_state_dict(state)
    with pytest.raises(ValueError, match="drop_last is 1 in the state but 0"):
        S(ds, drop_last=False, **kw).load_state_dict(state)
    dyn = _state(ds, dynamic_batch_size=True, **kw)
    clamped = make_dataset([20, 30, 12], calculator=MultiTierBucketCalculator(max_batch_size=3))
    with pytest.raises(ValueError, match=r"batch_sizes is '[0-9a-f]{16}' in the state but"):
        quiet(clamped, dynamic_batch_size=True, **kw).load_state_dict(dyn)
    nemo = _state(ds, compat="nemo", base_batch_size=2, num_replicas=4, rank=0)
    with pytest.raises(ValueError, match="num_replicas is 4 in the state but 2 in this sampler"):
        S(ds, compat="nemo", **kw).load_state_dict(nemo)


def test_positions_the_layout_cannot_continue_are_refused() -> None:
    ds = make_dataset([64])
    s = S(ds, base_batch_size=2, num_replicas=4, rank=0, shuffle_buckets=False)
    run_epoch(s, limit=1)
    state = s.state_dict()
    assert state["consumed"] == 8
    s8 = S(ds, base_batch_size=2, num_replicas=8, rank=0, shuffle_buckets=False)
    with pytest.raises(
        ValueError,
        match=r"cannot resume epoch 0 on this layout \(\{'num_replicas': 8\}\): consumed=8 in "
        r"bucket ordinal 0 \(bucket 0, 64 samples\) is not a multiple of its global batch "
        r"per-rank batch x num_replicas = 2 x 8 = 16",
    ):
        s8.load_state_dict(state)
    assert s8.progress == {"bucket": 0, "consumed": 0}  # unchanged when it raises
    with pytest.raises(ValueError, match=r"bucket must be an ordinal in \[0, 1\]"):
        s8.load_state_dict({**state, "bucket": 2})
    with pytest.raises(ValueError, match=r"bucket must be an ordinal in \[0, 1\]"):
        s8.load_state_dict({**state, "bucket": 1, "consumed": 16})
    # a count the saving layout (4 ranks, global batch 8) never reaches
    with pytest.raises(
        ValueError,
        match=r"state\['bucket'\]=0, state\['consumed'\]=12 is not a "
        r"position the saving layout \{'num_replicas': 4\} reaches",
    ):
        s8.load_state_dict({**state, "consumed": 12})
    with pytest.raises(ValueError, match=r"state\['consumed'\]=10{30}"):
        s8.load_state_dict({**state, "consumed": 10**30})


@pytest.mark.parametrize("drop_last", [True, False])
def test_elastic_resume_continues_the_same_bucket_streams(drop_last: bool) -> None:
    """8 -> 4 ranks mid-epoch: the samples read before and after are exactly the per-bucket
    streams, positions [0, consumed) in the old layout and [consumed, end) in the new one."""
    sizes = [70, 33, 150, 5, 96, 41]
    ds = make_dataset(sizes, seed=9)
    t = ds.bucket_table
    kw: dict[str, Any] = {"base_batch_size": 3, "seed": 5, "drop_last": drop_last}
    old = [quiet(ds, num_replicas=8, rank=r, **kw) for r in range(8)]
    stop = 7
    before = [i for s in old for b in run_epoch(s, limit=stop) for i in b]
    state = old[0].state_dict()
    assert all(s.state_dict() == state for s in old)
    assert state["consumed"] > 0  # mid-bucket
    new = [quiet(ds, num_replicas=4, rank=r, **kw) for r in range(4)]
    for s in new:
        s.load_state_dict(state)
    assert len({s.remaining for s in new}) == 1
    after = [i for s in new for b in run_epoch(s) for i in b]

    expected: list[int] = []
    plan_old, plan_new = old[0].bucket_plan(0), new[0].bucket_plan(0)
    assert np.array_equal(plan_old.buckets, plan_new.buckets)
    for k, j in enumerate(plan_old.buckets.tolist()):
        n = int(t.sizes[j])
        perm = Permutation(
            n,
            derive_key(5, epoch=0, stream="sequential_bucket", purpose="within-bucket", extra=(j,)),
        )
        end_old = int(plan_old.segments.total_positions()[k])
        end_new = int(plan_new.segments.total_positions()[k])
        if k < state["bucket"]:
            positions = range(end_old)
        elif k == state["bucket"]:
            positions = range(max(end_new, state["consumed"]))
        else:
            positions = range(end_new)
        expected += t.bucket_indices(j)[perm(np.arange(positions.stop) % n)].tolist()
    assert Counter(before + after) == Counter(expected)
    if not drop_last:
        assert set(before + after) == set(range(len(ds)))


# -- get_batch_info --------------------------------------------------------------------------------
def test_get_batch_info_follows_the_shuffled_order() -> None:
    """NeMo's B3: its get_batch_info ignores shuffling and the epoch."""
    ds = make_dataset([7, 12, 3, 25], seed=6)
    for epoch in (0, 1):
        s = S(ds, base_batch_size=2, drop_last=False, num_replicas=3, rank=2, seed=7)
        s.set_epoch(epoch)
        infos = [s.get_batch_info(i) for i in range(len(s))]
        for info, batch in zip(infos, run_epoch(s), strict=True):
            assert {ds[i]["bucket"] for i in batch} == {info["bucket"]}
            assert len(batch) == info["batch_size"]
            assert info["resolution"] == ds[batch[0]]["bucket_resolution"]
            assert info["epoch"] == epoch
        assert [i["bucket"] for i in infos] != sorted(i["bucket"] for i in infos)
        assert sum(i["padding_global"] for i in infos) == s.samples_padded
        # the same epoch can be asked for explicitly once the cursor moved on
        assert s.get_batch_info(0, epoch=epoch) == infos[0]


def test_get_batch_info_range_and_padding() -> None:
    s = S(
        worked_example(),
        base_batch_size=2,
        drop_last=False,
        shuffle_buckets=False,
        shuffle_within_bucket=False,
        num_replicas=2,
        rank=0,
    )
    assert s.get_batch_info(0)["padding"] == 0  # rank 0 reads positions 0 and 2 of [5, 6, 7]
    assert s.get_batch_info(0)["padding_global"] == 1  # rank 1's second slot repeats 5
    assert s.get_batch_info(0)["bucket_key"] == ("wide", (320, 192))
    with pytest.raises(ValueError, match=r"batch_idx must be an int in \[0, 2\]; got batch_idx=3"):
        s.get_batch_info(3)
    with pytest.raises(ValueError, match=r"batch_idx must be an int in \[0, 2\]; got batch_idx=-1"):
        s.get_batch_info(-1)
    with pytest.raises(TypeError, match="batch_idx must be an int"):
        s.get_batch_info(True)


# -- validation (NeMo's B4) and topology (B6) ------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "exc", "message"),
    [
        ({"rank": 2}, ValueError, r"rank must be an int in \[0, 1\]; got rank=2"),
        ({"rank": -1}, ValueError, r"rank must be an int in \[0, 1\]; got rank=-1"),
        ({"rank": True}, TypeError, r"rank must be an int in \[0, 1\]; got rank=True"),
        (
            {"num_replicas": 0},
            ValueError,
            r"num_replicas must be an int in \[1, 2147483648\]; got num_replicas=0",
        ),
        (
            {"base_batch_size": 0},
            ValueError,
            r"base_batch_size must be an int in \[1, 2147483648\]; got base_batch_size=0",
        ),
        (
            {"base_batch_size": -2},
            ValueError,
            r"base_batch_size must be an int in \[1, 2147483648\]; got base_batch_size=-2",
        ),
        (
            {"base_batch_size": True},
            TypeError,
            r"base_batch_size must be an int in \[1, 2147483648\]; got base_batch_size=True",
        ),
        (
            {"base_batch_size": 2.0},
            TypeError,
            r"base_batch_size must be an int in \[1, 2147483648\]; got base_batch_size=2.0",
        ),
        (
            {"base_resolution": (512, 0)},
            ValueError,
            r"base_resolution must be a \(width, height\) pair of positive ints; got "
            r"base_resolution=\(512, 0\)",
        ),
        ({"base_resolution": 512}, TypeError, "base_resolution must be a"),
        ({"base_resolution": (512, True)}, TypeError, "base_resolution must be a"),
        ({"drop_last": 1}, TypeError, "drop_last must be a bool; got drop_last=1"),
        ({"shuffle_buckets": None}, TypeError, "shuffle_buckets must be a bool"),
        ({"shuffle_within_bucket": "yes"}, TypeError, "shuffle_within_bucket must be a bool"),
        ({"dynamic_batch_size": 0}, TypeError, "dynamic_batch_size must be a bool"),
        (
            {"seed": -1},
            ValueError,
            r"seed must be an int in \[0, 9223372036854775807\]; got seed=-1",
        ),
        (
            {"seed": 2**63, "compat": "nemo"},
            ValueError,
            r"seed must be an int in \[0, 9223372036854775807\]; got seed=9223372036854775808",
        ),
        (
            {"compat": "torch"},
            ValueError,
            "compat must be one of 'default', 'nemo'; got compat='torch'",
        ),
    ],
)
def test_arguments_are_checked(kw: dict[str, Any], exc: type[Exception], message: str) -> None:
    args: dict[str, Any] = {"num_replicas": 2, "rank": 0, **kw}
    with pytest.raises(exc, match=message):
        S(worked_example(), **args)


def test_dataset_is_checked() -> None:
    with pytest.raises(
        TypeError, match=r"dataset must be a BaseMultiresolutionDataset .* type list"
    ):
        S([1, 2, 3], num_replicas=1, rank=0)
    empty = SimpleNamespace(sorted_bucket_keys=[], bucket_groups={}, calculator=None)
    with pytest.raises(ValueError, match="dataset must hold at least one sample; got 0 samples"):
        S(empty, num_replicas=1, rank=0)
    no_calc = SimpleNamespace(
        sorted_bucket_keys=[("square", (64, 64))],
        bucket_groups={
            ("square", (64, 64)): {"indices": [0], "aspect_name": "square", "resolution": (64, 64)}
        },
    )
    with pytest.raises(TypeError, match=r"dynamic_batch_size=True needs dataset\.calculator"):
        S(no_calc, num_replicas=1, rank=0, dynamic_batch_size=True)


def test_nothing_to_train_is_an_error_and_lost_buckets_a_warning() -> None:
    with pytest.raises(
        ValueError,
        match=r"drop_last=True leaves nothing to train on: each of the 2 buckets holds fewer "
        r"samples than one global batch \(per-rank batch x num_replicas = 4 x 2; largest bucket "
        r"5 samples\)",
    ):
        S(worked_example(), base_batch_size=4, num_replicas=2, rank=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = S(worked_example(), base_batch_size=2, num_replicas=2, rank=0)
        run_epoch(s)
        run_epoch(s)
    ours = [w for w in caught if "buckets entirely" in str(w.message)]  # once, not per epoch
    assert [str(w.message)[:71] for w in ours] == [
        "drop_last=True removes 1 of 2 buckets entirely (3 of 8 samples): each h"
    ]
    assert ours[0].category is UserWarning
    assert ours[0].filename == __file__  # points at the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        S(worked_example(), base_batch_size=2, num_replicas=2, rank=0, drop_last=False)


def test_interleaved_runs_are_not_counted_as_lost_buckets() -> None:
    # Two buckets of 9 and 5 images, global batch 4: each keeps at least one batch and drops its
    # tail (1 + 1). The interleaved order cuts each bucket into runs of 4 (unit 2 x 2) and a tail
    # run; a tail run is not a bucket removed whole, so there is no warning (a regression: the
    # warning counted runs).
    sizes = [(64, 64)] * 9 + [(128, 64)] * 5
    data = BaseMultiresolutionDataset.from_sizes(
        [w for w, _ in sizes], [h for _, h in sizes], calculator=MultiTierBucketCalculator(64)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = S(
            data,
            base_batch_size=2,
            num_replicas=2,
            rank=0,
            bucket_order="interleaved",
            interleave_unit=2,
        )
    assert (s.samples_dropped, len(s)) == (2, 3)


class FakeMesh:
    """What resolve_topology reads from a DeviceMesh: named dims, local ranks and sizes."""

    mesh_dim_names = ("dp", "tp")

    def __init__(self, dp_rank: int, dp_size: int) -> None:
        self._coords = {"dp": dp_rank, "tp": 1}
        self._sizes = (dp_size, 2)

    def get_local_rank(self, dim: int | str) -> int:
        return self._coords[dim if isinstance(dim, str) else self.mesh_dim_names[dim]]

    def size(self, dim: int) -> int:
        return self._sizes[dim]


def test_rank_and_world_default_to_the_data_parallel_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = S(worked_example(), base_batch_size=1, mesh=FakeMesh(2, 3))
    assert (s.rank, s.num_replicas) == (2, 3)  # the DP dim, not the 6-process world
    assert s.topology.replica_size == 2
    with pytest.raises(ValueError, match="num_replicas=6 contradicts the mesh"):
        S(worked_example(), base_batch_size=1, mesh=FakeMesh(2, 3), num_replicas=6)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    s = S(worked_example(), base_batch_size=1, drop_last=False)
    assert (s.rank, s.num_replicas) == (3, 4)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    s = S(worked_example(), base_batch_size=1)
    assert (s.rank, s.num_replicas) == (0, 1)


# -- datasets and batch sizes ----------------------------------------------------------------------
def test_nemo_style_dataset_is_accepted() -> None:
    ds = make_dataset([9, 14, 5], seed=7)
    nemo_like = SimpleNamespace(
        sorted_bucket_keys=ds.sorted_bucket_keys,
        bucket_groups=ds.bucket_groups,
        calculator=ds.calculator,
    )
    kw: dict[str, Any] = {"base_batch_size": 2, "drop_last": False, "dynamic_batch_size": True}
    assert all_ranks(nemo_like, 2, **kw) == all_ranks(ds, 2, **kw)
    a = S(nemo_like, num_replicas=2, rank=0, **kw)
    b = S(ds, num_replicas=2, rank=0, **kw)
    run_epoch(a, limit=2)
    b.load_state_dict(a.state_dict())  # the same dataset fingerprint
    assert a.bucket_table.fingerprint == b.bucket_table.fingerprint


def test_dynamic_batch_sizes() -> None:
    ds = BaseMultiresolutionDataset.from_bucket_ids(
        [0] * 3 + [1] * 3 + [2] * 3, resolutions=[(64, 64), (512, 512), (1024, 1024)]
    )
    kw: dict[str, Any] = {"dynamic_batch_size": True, "drop_last": False, "num_replicas": 1}
    # default calculator: at most 4 x base; NeMo's formula has no upper clamp (B10)
    assert S(ds, **kw).batch_sizes.tolist() == [128, 32, 8]
    assert S(ds, compat="nemo", **kw).batch_sizes.tolist() == [2048, 32, 8]
    assert S(ds, drop_last=False, num_replicas=1).batch_sizes.tolist() == [32, 32, 32]
    assert S(ds, base_resolution=(256, 256), **kw).batch_sizes.tolist() == [128, 8, 2]


def test_a_pickled_sampler_continues() -> None:
    import pickle

    ds = make_dataset([11, 23], seed=8)
    s = S(ds, base_batch_size=2, drop_last=False, num_replicas=2, rank=1)
    head = run_epoch(s, limit=3)
    t = pickle.loads(pickle.dumps(s))
    rest = run_epoch(t)
    assert head + rest == run_epoch(
        S(ds, base_batch_size=2, drop_last=False, num_replicas=2, rank=1)
    )


# -- DataLoader / StatefulDataLoader ---------------------------------------------------------------
class Indexed(BaseMultiresolutionDataset):
    """Returns the index and the bucket, as a loader would return tensors."""

    def __getitem__(self, idx: int) -> dict[str, Any]:
        meta = super().__getitem__(idx)
        return {"index": idx, "bucket": meta["bucket"]}


def _loader_batches(batches: Any) -> list[list[int]]:
    out = []
    for b in batches:
        assert len(set(b["bucket"].tolist())) == 1  # the collate sees one resolution
        out.append(b["index"].tolist())
    return out


def test_plain_dataloader() -> None:
    from torch.utils.data import DataLoader, Sampler

    ds = Indexed.from_bucket_ids(np.arange(40) % 3, resolutions=[(64, 64), (128, 64), (64, 128)])
    s = S(ds, base_batch_size=3, drop_last=False, num_replicas=2, rank=1)
    assert isinstance(s, Sampler)
    dl = DataLoader(ds, batch_sampler=s)
    assert len(dl) == len(s)
    expected = run_epoch(S(ds, base_batch_size=3, drop_last=False, num_replicas=2, rank=1))
    assert _loader_batches(dl) == expected
