"""VariableLengthSampler resumes exactly on any number of ranks, from any state, for every
curriculum: chains of layouts read every kept token at most once and leave only what the last
layout cannot fill (counted in ``tokens_dropped``), one chunk length per step on every rank, and
the same chain read twice is bit-identical. Edited and foreign states are refused by name."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataorder.llm import VariableLengthSampler

Chunk = tuple[int, int, int]


def _lengths(n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(5.0, 1.0, n), 0, 2000).astype(int).tolist()


DOCS = _lengths(120, 7)


def _skip(sampler: VariableLengthSampler, steps: int) -> None:
    """Read ``steps`` batches of the sampler's next pass."""
    assert len(list(itertools.islice(iter(sampler), steps))) == steps


def _make(lengths: list[int], rank: int, world: int, **kw: Any) -> VariableLengthSampler:
    kw = {"seed": 3, "min_seq_len": 32} | kw
    return VariableLengthSampler(lengths, 256, kw.pop("tokens_per_rank", 512), rank, world, **kw)


def _chain(
    lengths: list[int], sizes: list[int], fractions: list[float], epoch: int = 0, **kw: Any
) -> tuple[list[list[Chunk]], VariableLengthSampler, list[dict[str, Any]]]:
    """Read epoch ``epoch`` on ``sizes[0]`` ranks, save, continue on ``sizes[1]``, ...; each
    layout reads ``fractions[i]`` of what it has left (the last reads to the end). Returns
    every step's chunks (all ranks), the last layout's rank 0 and the states saved."""
    steps: list[list[Chunk]] = []
    states: list[dict[str, Any]] = []
    state: dict[str, Any] | None = None
    for i, world in enumerate(sizes):
        ranks = [_make(lengths, r, world, **kw) for r in range(world)]
        for s in ranks:
            s.set_epoch(epoch)
            if state is not None:
                s.load_state_dict(json.loads(json.dumps(state)))  # a state survives JSON
        left = {s.remaining for s in ranks}
        assert len(left) == 1, f"ranks disagree on the steps left: {left}"
        take = left.pop()
        if i < len(sizes) - 1:
            take = int(take * fractions[i])
        its = [iter(s) for s in ranks]
        for _ in range(take):
            batches = [next(it) for it in its]
            shapes = {b - a for batch in batches for _, a, b in batch}
            assert len(shapes) == 1, f"a step of several chunk lengths: {shapes}"
            (shape,) = shapes
            assert {len(batch) for batch in batches} == {ranks[0].tokens_per_rank // shape}
            steps.append([c for batch in batches for c in batch])
        if i == len(sizes) - 1:
            assert all(next(it, None) is None for it in its), "a step past the epoch's end"
        state = ranks[0].state_dict()
        assert all(s.state_dict() == state for s in ranks), "ranks disagree on the state"
        states.append(state)
    return steps, ranks[0], states


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 7), min_size=1, max_size=4),
    fractions=st.lists(st.floats(0, 1), min_size=4, max_size=4),
    curriculum=st.sampled_from(["natural", "grow"]),
    unit=st.sampled_from([None, 1, 3, 8]),
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 3),
    docs=st.integers(0, 2**16),
)
def test_a_chain_of_any_layouts_reads_every_kept_token_once_and_counts_the_rest(
    sizes: list[int],
    fractions: list[float],
    curriculum: str,
    unit: int | None,
    seed: int,
    epoch: int,
    docs: int,
) -> None:
    lengths = _lengths(60, docs)
    kw: dict[str, Any] = {"seed": seed, "curriculum": curriculum}
    if curriculum == "natural":
        kw["interleave_unit"] = unit
    steps, last, states = _chain(lengths, sizes, fractions, epoch, **kw)
    chunks = [c for step in steps for c in step]
    assert len(set(chunks)) == len(chunks), "a chunk read twice"
    tokens = [0] * len(lengths)
    for d, a, b in chunks:
        assert 0 <= a < b <= lengths[d]
        tokens[d] += b - a
    read = sum(tokens)
    assert read + last.tokens_dropped == sum(lengths), "read + dropped is not every token"
    assert all(int(k.split(".")[1]) for k in last.progress_keys)
    assert len(last.progress_keys) == 4  # 32, 64, 128, 256: one count per chunk length
    again, _, states_again = _chain(lengths, sizes, fractions, epoch, **kw)
    assert again == steps, "the same chain read twice differs"
    assert states_again == states


def test_a_state_continues_on_a_layout_that_divides_nothing_and_back() -> None:
    """2 -> 3 -> 2 -> 5 -> 1 ranks; the same layouts re-read give the same order, another seed
    another one."""
    sizes, fractions = [2, 3, 2, 5, 1], [0.3, 0.5, 0.2, 0.6]
    steps, last, states = _chain(DOCS, sizes, fractions)
    assert [s["layout.data_parallel_size"] for s in states] == sizes
    assert len({c for step in steps for c in step}) == sum(len(step) for step in steps)
    assert sum(b - a for step in steps for _, a, b in step) + last.tokens_dropped == sum(DOCS)
    other, _, _ = _chain(DOCS, sizes, fractions, seed=4)
    assert other != steps


def test_a_resume_on_the_same_layout_is_the_uninterrupted_run_at_every_step() -> None:
    for world, kw in ((3, {}), (2, {"curriculum": "grow"}), (3, {"interleave_unit": 4})):
        whole = [list(_make(DOCS, r, world, **kw)) for r in range(world)]
        for k in range(len(whole[0]) + 1):
            saved = _make(DOCS, 0, world, **kw)
            _skip(saved, k)
            for r in range(world):
                s = VariableLengthSampler.from_state(saved.state_dict(), lengths=DOCS, rank=r)
                assert list(s) == whole[r][k:], (world, kw, k)


def test_state_after_and_batch_at_follow_a_state_of_another_layout() -> None:
    two = _make(DOCS, 0, 2)
    _skip(two, 7)
    state = two.state_dict()
    three = [_make(DOCS, r, 3) for r in range(3)]
    for s in three:
        s.load_state_dict(state)
    start = three[0].epoch_plan().step_of(three[0].progress)
    read = [list(s) for s in three]
    for k in range(len(read[0]) + 1):
        after = three[0].state_after(state, k)
        if k < len(read[0]):
            assert [s.batch_at(start + k) for s in three] == [r[k] for r in read]
        fresh = [_make(DOCS, r, 3) for r in range(3)]
        for s in fresh:
            s.load_state_dict(after)
        assert [list(s) for s in fresh] == [r[k:] for r in read]
    # the cursor's own path is not disturbed by a question about another one
    assert three[0].state_after(_make(DOCS, 0, 3).state_dict(), 2) != three[0].state_after(state, 2)
    assert three[0].state_dict() == three[0].state_after(state, len(read[0]))


def test_tokens_dropped_counts_what_the_path_through_a_loaded_state_leaves() -> None:
    fresh = _make(DOCS, 0, 4)
    two = _make(DOCS, 0, 2)
    _skip(two, 5)
    loaded = _make(DOCS, 0, 4)
    loaded.load_state_dict(two.state_dict())
    plan = loaded.epoch_plan()
    left = plan.buckets.leftover(plan.counts(two.progress), 4)
    cut = fresh.tokens_dropped - sum(
        n << k for n, k in zip(fresh.epoch_plan().left_over(), range(5, 9), strict=True)
    )
    assert loaded.tokens_dropped == cut + sum(
        n << k for n, k in zip(left, range(5, 9), strict=True)
    )
    loaded.set_epoch(1)
    assert loaded.tokens_dropped == fresh.tokens_dropped  # a new epoch: this layout's own


def _state() -> dict[str, Any]:
    s = _make(DOCS, 0, 2)
    _skip(s, 3)
    return s.state_dict()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"chunks.32": 1}, r"chunks\.32 must be a multiple of 16"),
        ({"chunks.256": 10**9}, r"chunks\.256 must be a multiple of 2 \(whole rank batches\)"),
        ({"chunks.64": -8}, r"state\['chunks\.64'\] must be a non-negative int"),
        ({"chunks.128": True}, r"state\['chunks\.128'\] must be a non-negative int"),
        ({"chunks.128": 2**80}, r"chunks\.128 must be a multiple of 4"),
        ({"chunks.128": "4"}, r"state\['chunks\.128'\] must be a non-negative int"),
        ({"chunks.512": 0}, r"state has unknown keys \['chunks\.512'\]"),
        ({"bucket": 1, "consumed": 2}, r"unknown keys \['bucket', 'consumed'\]"),
    ],
)
def test_an_edited_position_is_refused_naming_the_count(edit: dict[str, Any], message: str) -> None:
    state = _state() | edit
    for world in (2, 3):
        s = _make(DOCS, 0, world)
        before = s.state_dict()
        with pytest.raises(ValueError, match=message):
            s.load_state_dict(state)
        assert s.state_dict() == before
        with pytest.raises(ValueError, match=message):
            s.state_after(state, 1)


def test_a_missing_count_or_another_chunk_range_is_refused() -> None:
    state = _state()
    del state["chunks.64"]
    with pytest.raises(ValueError, match=r"missing keys \['chunks\.64'\]"):
        _make(DOCS, 0, 2).load_state_dict(state)
    with pytest.raises(ValueError, match="min_seq_len is 32 in the state but 64"):
        _make(DOCS, 0, 2, min_seq_len=64).load_state_dict(_state())


def test_the_unit_is_checked_and_no_layout_is_refused_for_it() -> None:
    with pytest.raises(ValueError, match=r"interleave_unit must be an int in \[1, 65536\]"):
        _make(DOCS, 0, 2, interleave_unit=0)
    with pytest.raises(ValueError, match="interleave_unit must be None unless"):
        _make(DOCS, 0, 2, interleave_unit=2, curriculum="grow")
    s = _make(DOCS, 0, 2, interleave_unit=2**16)
    assert _make(DOCS, 0, 7, interleave_unit=3).remaining > 0
    VariableLengthSampler.from_state(s.state_dict(), lengths=DOCS, dp_size=5)


def test_state_after_an_epochs_end_starts_the_next_epoch_at_its_beginning() -> None:
    """Even when the cursor sits in that next epoch at a state of another layout."""
    two = _make(DOCS, 0, 2)
    two.set_epoch(1)
    _skip(two, 1)
    here = _make(DOCS, 0, 3)
    here.load_state_dict(two.state_dict())  # the cursor: epoch 1, on the 2-rank path
    ended = _make(DOCS, 0, 3)
    list(ended)
    fresh = _make(DOCS, 0, 3)
    fresh.set_epoch(1)
    _skip(fresh, 2)
    assert here.state_after(ended.state_dict(), 2) == fresh.state_dict()
