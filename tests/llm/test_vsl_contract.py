"""VariableLengthSampler's promises in tokens, on fixed and random corpora.

The contract suite runs on it in tests/test_contract_table.py (the rows ``chunk lengths x
buckets ...``, on :data:`DOCS` defined here) and reads it through its batching rule
(:class:`~dataorder.llm.vsl.VslChunks`): every kept token of every document read once per epoch,
what ``tokens_dropped`` counts never read, no padding. The properties here drive random lengths,
chunk bounds, layouts, curricula and seeds: every kept token once, one chunk length per step on
every rank, the decomposition's chunks, and ``tokens_dropped + covered == total``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataorder.llm import VariableLengthSampler
from dataorder.llm.vsl import CHUNK_BLOCK, VslChunks


def _lengths(n: int, seed: int, high: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(5.0, 1.0, n), 0, high).astype(int).tolist()


DOCS = _lengths(36, 4, 700)  # 5 steps an epoch on 2 ranks: short epochs for the loop recipes


def _decomposition(length: int, low: int, high: int) -> list[tuple[int, int]]:
    """The reference rule: ``(start, stop)`` of a document's chunks, largest first."""
    out, at = [], 0
    while length - at >= high:
        out.append((at, at + high))
        at += high
    size = high // 2
    while size >= low:
        if length - at >= size:
            out.append((at, at + size))
            at += size
        size //= 2
    return out


def _epoch(samplers: list[VariableLengthSampler], epoch: int) -> list[list[Any]]:
    for s in samplers:
        s.set_epoch(epoch)
    return [list(s) for s in samplers]


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 3000), min_size=1, max_size=80),
    low_log=st.integers(4, 7),
    span=st.integers(0, 3),
    factor=st.integers(1, 3),
    world=st.integers(1, 4),
    curriculum=st.sampled_from(["natural", "grow"]),
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 3),
)
def test_every_kept_token_once_in_lock_step(
    lengths: list[int],
    low_log: int,
    span: int,
    factor: int,
    world: int,
    curriculum: str,
    seed: int,
    epoch: int,
) -> None:
    low, high = 1 << low_log, 1 << (low_log + span)
    if max(lengths) < low:
        with pytest.raises(ValueError, match="lengths must be documents with at least"):
            VariableLengthSampler(
                lengths, high, high * factor, 0, world, seed=seed, min_seq_len=low
            )
        return
    samplers = [
        VariableLengthSampler(
            lengths,
            high,
            high * factor,
            r,
            world,
            seed=seed,
            min_seq_len=low,
            curriculum=curriculum,
        )
        for r in range(world)
    ]
    items = _epoch(samplers, epoch)
    assert len({len(x) for x in items}) == 1
    assert len(items[0]) == len(samplers[0])
    reference = {(d, a, b) for d, n in enumerate(lengths) for a, b in _decomposition(n, low, high)}
    seen: set[tuple[int, int, int]] = set()
    for step in zip(*items, strict=True):
        chunk = {b - a for batch in step for _, a, b in batch}
        assert len(chunk) == 1, f"ranks read several lengths in one step: {chunk}"
        (size,) = chunk
        assert all(len(batch) == high * factor // size for batch in step)
        for batch in step:
            for c in batch:
                assert c in reference, f"{c} is not a chunk of the decomposition"
                assert c not in seen, f"{c} read twice"
                seen.add(c)
    covered = sum(b - a for _, a, b in seen)
    assert samplers[0].tokens_dropped + covered == sum(lengths)
    assert samplers[0].tokens_padded == 0
    assert sum(
        n * c for n, c in zip(samplers[0].chunk_lengths, samplers[0].chunk_counts, strict=True)
    ) == (sum(b - a for _, a, b in reference))


def test_grow_reads_short_to_long_and_natural_mixes() -> None:
    def sizes(curriculum: str) -> list[int]:
        s = VariableLengthSampler(
            DOCS * 4, 256, 512, 0, 1, seed=1, min_seq_len=32, curriculum=curriculum
        )
        return [batch[0][2] - batch[0][1] for batch in s]

    grow, natural = sizes("grow"), sizes("natural")
    assert grow == sorted(grow)
    assert len(set(grow)) > 2
    assert sorted(natural) == grow
    assert natural != grow
    # a length's share of the first half of the epoch is near its share of the epoch
    half = natural[: len(natural) // 2]
    for size in set(grow):
        assert abs(half.count(size) - natural.count(size) / 2) <= 4


def test_a_chunk_found_across_blocks_of_the_index() -> None:
    # more documents than one block of the index: chunks are found in later blocks too
    n = CHUNK_BLOCK * 2 + 5
    lengths = np.full(n, 96, dtype=np.int32)  # 64 + 32 each
    s = VariableLengthSampler(lengths, 64, 64 * 64, 0, 1, seed=0, min_seq_len=32)
    assert s.chunk_counts == [n, n]
    read = [c for batch in s for c in batch]
    chunks = set(read)
    assert len(chunks) == len(read)
    docs = {d for d, _, _ in chunks}
    assert max(docs) >= CHUNK_BLOCK * 2
    assert all((a, b) in ((0, 64), (64, 96)) for _, a, b in chunks), (
        "a chunk is not where the decomposition puts it"
    )


def test_the_order_is_keyed_by_the_seed_and_the_epoch() -> None:
    a = VariableLengthSampler(DOCS, 256, 512, 0, 1, seed=1, min_seq_len=32)
    b = VariableLengthSampler(DOCS, 256, 512, 0, 1, seed=2, min_seq_len=32)
    assert list(a) != list(b)
    assert a.batch_at(0, epoch=0) != a.batch_at(0, epoch=1)


def test_state_refuses_other_lengths_and_from_state_rebuilds() -> None:
    a = VariableLengthSampler(DOCS, 256, 512, 0, 2, seed=3, min_seq_len=32)
    it = iter(a)
    next(it)
    state = a.state_dict()
    assert all(isinstance(v, int | str) for v in state.values())
    other = list(DOCS)
    other[3] += 1
    b = VariableLengthSampler(other, 256, 512, 0, 2, seed=3, min_seq_len=32)
    with pytest.raises(ValueError, match="another configuration: lengths"):
        b.load_state_dict(state)
    again = VariableLengthSampler.from_state(state, lengths=DOCS, rank=1)
    assert next(iter(again)) == a.batch_at(1, rank=1)
    with pytest.raises(ValueError, match="lengths must be the document lengths"):
        VariableLengthSampler.from_state(state)


def test_natural_continues_a_state_on_layouts_its_unit_does_not_divide() -> None:
    """The next length is a function of the counts and the ranks (NOTE [ Counted positions ]):
    a state of 2 ranks (unit 2) continues on 3 and 4, every rank reading its own chunks."""
    a = VariableLengthSampler(DOCS, 256, 512, 0, 2, seed=3, min_seq_len=32, interleave_unit=2)
    next(iter(a))
    for dp in (3, 4):
        ranks = [
            VariableLengthSampler.from_state(a.state_dict(), lengths=DOCS, rank=r, dp_size=dp)
            for r in range(dp)
        ]
        step = [next(iter(s)) for s in ranks]
        assert len({c[2] - c[1] for chunks in step for c in chunks}) == 1  # one length a step
        read = [c for chunks in step for c in chunks]
        assert len(read) == len(set(read))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"max_seq_len": 300}, "max_seq_len must be a power of two; got max_seq_len=300"),
        ({"min_seq_len": 24}, "min_seq_len must be a power of two; got min_seq_len=24"),
        ({"min_seq_len": 512}, "min_seq_len must be at most max_seq_len=256"),
        ({"tokens_per_rank": 640}, "tokens_per_rank must be a multiple of max_seq_len=256"),
        ({"tokens_per_rank": 128}, "tokens_per_rank must be an int in"),
        ({"curriculum": "shrink"}, "curriculum must be one of"),
        ({"curriculum": "grow", "interleave_unit": 2}, "interleave_unit must be None unless"),
        ({"interleave_unit": 0}, "interleave_unit must be an int in"),
        ({"data_parallel_rank": 2}, "data_parallel_rank must be an int in"),
        ({"seed": -1}, "seed must be an int"),
        ({"lengths": [10, 20]}, "lengths must be documents with at least min_seq_len=32"),
    ],
)
def test_bad_arguments_are_named(kw: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {
        "lengths": DOCS,
        "max_seq_len": 256,
        "tokens_per_rank": 512,
        "data_parallel_rank": 0,
        "data_parallel_size": 2,
        "seed": 0,
        "min_seq_len": 32,
    } | kw
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        VariableLengthSampler(**args)


def test_the_rule_refuses_what_is_not_a_micro_batch_of_chunks() -> None:
    rule = VslChunks()
    with pytest.raises(TypeError, match="items must be micro-batches"):
        rule.slots("abc")
    with pytest.raises(TypeError, match="got a chunk"):
        rule.slots([(1, 2)])
    with pytest.raises(TypeError, match="got a chunk"):
        rule.slots([(1, True, 3)])
    assert rule.padding(rule.slots([(1, 0, 4)])) == 0
