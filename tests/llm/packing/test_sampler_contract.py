"""PackedSampler's promises in tokens, on fixed and random corpora.

The contract suite runs on its configurations in tests/test_contract_table.py (the rows
``packed corpus x dealt by cost`` and ``blend of packed corpora x dealt by cost``, on the corpora
:data:`WEB` and :data:`CODE` defined here). It reads a packed sampler through its batching rule
(:class:`~dataorder.llm.packing.rule.PackedRows`): every token of every document read once per
epoch, except what ``tokens_dropped`` counts, and ``tokens_padded`` exactly the room rows leave
(NOTE [ Coverage ] in :mod:`dataorder.core.batching`). The properties here drive random lengths,
layouts, modes and resume points through the same checks.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataorder.llm.packing import PackedSampler
from dataorder.testing import SamplerCase
from dataorder.testing.contract import check_elastic_resume, check_epoch_partition, run_epoch


def _lengths(n: int, seed: int, high: int = 90) -> list[int]:
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(3.0, 0.9, n), 0, high).astype(int).tolist()


WEB = _lengths(40, 1)
CODE = _lengths(24, 2, high=140)


def test_every_token_once_and_the_counters() -> None:
    s = [PackedSampler(WEB, 64, 2, r, 2, seed=3, chunk=4, window=16) for r in range(2)]
    rows = [row for x in s for batch in x for row in batch]  # one pass: epoch 0
    tokens = sum(b - a for row in rows for _, a, b in row)
    assert tokens == sum(WEB) - s[0].tokens_dropped
    assert len(rows) * 64 - tokens == s[0].tokens_padded
    assert all(sum(b - a for _, a, b in row) <= 64 for row in rows)


def test_never_splits_no_document() -> None:
    s = PackedSampler(CODE, 64, 2, 0, 1, seed=1, split="never", chunk=4, window=16)
    seen: dict[int, int] = {}
    for batch in s:
        for row in batch:
            for d, a, b in row:
                assert d not in seen, d  # one span per document, ever
                seen[d] = b - a
                assert a == 0
                assert b == min(CODE[d], 64)


def test_ranks_are_dealt_by_cost() -> None:
    # rows of one global batch differ in cost (sum of span lengths squared); the dealing gives
    # every rank micro_batch_size of them and evens the costliest rank
    lengths = [64] * 16 + [8] * 128
    s = [PackedSampler(lengths, 64, 2, r, 4, seed=0, chunk=16, window=144) for r in range(4)]
    for step in zip(*s, strict=True):
        loads = [sum((b - a) ** 2 for row in batch for _, a, b in row) for batch in step]
        costs = sorted([sum((b - a) ** 2 for _, a, b in row) for batch in step for row in batch])
        bound = max(sum(costs) / 4, costs[-1])
        assert max(loads) <= 1.5 * bound


def test_state_holds_a_fingerprint_of_the_lengths() -> None:
    a = PackedSampler(WEB, 64, 2, 0, 2, seed=3, chunk=4, window=16)
    next(iter(a))
    state = a.state_dict()
    assert len(json.dumps(state, separators=(",", ":"))) <= 576
    other = list(WEB)
    other[5] += 1
    b = PackedSampler(other, 64, 2, 0, 2, seed=3, chunk=4, window=16)
    with pytest.raises(ValueError, match="state is from another configuration: lengths is"):
        b.load_state_dict(state)
    again = PackedSampler.from_state(state, lengths=WEB, rank=1)
    assert next(iter(again)) == a.batch_at(1, rank=1)
    with pytest.raises(ValueError, match=r"lengths must be the document lengths"):
        PackedSampler.from_state(state)


def test_from_state_keeps_the_global_batch_size() -> None:
    # regression: config.global_batch_size was recorded but not given back, so from_state
    # refused the state of a sampler built with a global batch ("8 in the state but 0")
    a = PackedSampler(WEB, 64, 2, 0, 2, 8, seed=3, chunk=4, window=16)
    next(iter(a))
    again = PackedSampler.from_state(a.state_dict(), lengths=WEB, rank=0, dp_size=1)
    assert again.global_batch_size_field == 8
    one = PackedSampler(WEB, 64, 2, 0, 1, 8, seed=3, chunk=4, window=16)
    assert next(iter(again)) == one.batch_at(2)  # 4 rows consumed: 2 steps of 2 on one rank


def test_mixture_shares_rows_by_weight_within_two_rows() -> None:
    s = PackedSampler(None, 64, 1, 0, 1, 8, seed=2, mixture=([WEB, CODE], [3, 1]), chunk=4,
                      window=16)  # fmt: skip
    for k in range(1, s.steps_per_epoch // 8):
        counts = s.consumed_per_source(8 * k)
        assert abs(counts[0] - 0.75 * 8 * k) < 2
        assert abs(counts[1] - 0.25 * 8 * k) < 2


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"seq_len": 0}, ValueError, "seq_len must be an int in [1, 2147483648]; got seq_len=0"),
        ({"split": "maybe"}, ValueError, "split must be one of 'overflow', 'never'; got"),
        ({"lengths": [3, -1]}, ValueError, "lengths"),
        ({"micro_batch_size": 0}, ValueError, "micro_batch_size must be"),
        ({"global_batch_size": 3}, ValueError, "global_batch_size must be a multiple of"),
        ({"lengths": None}, TypeError, "lengths must be document lengths"),
        ({"mixture": ([WEB], [1])}, ValueError, "lengths must be None with mixture="),
        ({"seed": -1}, ValueError, "seed must be an int in [0, "),
    ],
)
def test_bad_input_names_the_argument(
    kwargs: dict[str, Any], exc: type[Exception], message: str
) -> None:
    args: dict[str, Any] = {"lengths": WEB, "seq_len": 64, "micro_batch_size": 2, "seed": 1}
    args.update(kwargs)
    lengths, seq_len, mbs = args.pop("lengths"), args.pop("seq_len"), args.pop("micro_batch_size")
    with pytest.raises(exc) as info:
        PackedSampler(lengths, seq_len, mbs, 0, 2, **args)
    assert message in str(info.value)


@given(
    lengths=st.lists(st.integers(0, 200), min_size=1, max_size=80),
    seq_len=st.integers(8, 96),
    split=st.sampled_from(["overflow", "never"]),
    mbs=st.integers(1, 3),
    world=st.integers(1, 3),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**63 - 1),
)
def test_random_corpora_keep_the_contract(
    lengths: list[int],
    seq_len: int,
    split: str,
    mbs: int,
    world: int,
    drop_last: bool,
    seed: int,
) -> None:
    def make(rank: int, dp: int) -> PackedSampler:
        return PackedSampler(lengths, seq_len, mbs, rank, dp, seed=seed, split=split,
                             chunk=2, window=8, drop_last=drop_last)  # fmt: skip

    try:
        make(0, world)
    except ValueError:
        return  # too few tokens for one block with drop_last: refused, named (tested above)
    case = SamplerCase("random", make, len(lengths), world, extents=lengths)
    check_epoch_partition(case)
    for other in (1, world + 1):
        try:
            make(0, other)
        except ValueError:
            continue
        probe = make(0, world)
        half = len(probe) // 2
        run_epoch(probe, limit=half)
        try:
            make(0, other).load_state_dict(probe.state_dict())
        except ValueError:
            continue  # a layout whose block does not divide the rows consumed: refused
        check_elastic_resume(case, other)
