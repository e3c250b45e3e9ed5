"""Regressions of the outside review of ``dataorder.llm.packing`` (hostile-user pass before it
ships): one test per defect, each failing on the code before its fix.

The sweeps that would have caught them are in ``tests/test_hostile_*.py``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from dataorder.core.state import MAX_EPOCH
from dataorder.llm.mixture import MixtureSchedule
from dataorder.llm.packing import PackedSampler, PackingPlan, pack_window

WEB = [5, 3, 9, 2, 7, 100, 1, 40] * 10
CODE = [50, 30, 9, 20] * 10


def _mixture(**kw: Any) -> PackedSampler:
    args: dict[str, Any] = {
        "seed": 5, "chunk": 4, "window": 8, "mixture": ([WEB, CODE], [2, 1]),
        "global_batch_size": 4,
    }  # fmt: skip
    args.update(kw)
    return PackedSampler(None, 16, 2, 0, 2, **args)


# -- arguments ------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [2**63, 10**30])
def test_a_huge_global_batch_size_is_named(value: int) -> None:
    """It was refused as ``unit must be an int in [1, 2**62]`` (core's name, not the user's)."""
    with pytest.raises(ValueError, match=r"global_batch_size must be an int in \[1, 4611686"):
        PackedSampler(WEB, 16, 2, 0, 2, seed=0, global_batch_size=value)
    with pytest.raises(ValueError, match=r"global_batch_size must be an int in \[1, 4611686"):
        _mixture(global_batch_size=value)


def test_a_huge_total_rows_is_named() -> None:
    """It was refused as ``n must be an int in [0, 2**62]``."""
    with pytest.raises(ValueError, match=r"total_rows must be an int in \[4, 4611686"):
        _mixture(total_rows=2**63)


@pytest.mark.parametrize("value", [True, 1.5, "x"])
def test_total_rows_of_the_wrong_type_is_a_type_error(value: object) -> None:
    """One corpus compared ``total_rows != rows`` first: a ValueError for a float, and
    ``True`` passed wherever the epoch had one row."""
    with pytest.raises(TypeError, match="total_rows must be a non-negative int"):
        PackedSampler(WEB, 16, 2, 0, 2, seed=0, total_rows=value)
    with pytest.raises(TypeError, match="total_rows must be a non-negative int"):
        PackedSampler([3], 16, 1, 0, 1, seed=0, total_rows=value)


def test_a_mixture_refuses_drop_last_false() -> None:
    """``drop_last=False`` was accepted and ignored (a mixture's epochs are whole global batches),
    as ``create_megatron_sampler(mixture=...)`` refuses it."""
    with pytest.raises(ValueError, match="drop_last must be True with mixture="):
        _mixture(drop_last=False)


def test_a_long_run_over_a_small_source_reaches_its_last_step() -> None:
    """A source's pass ``j // rows`` passed ``MAX_EPOCH`` in a run of 2**62 rows: the sampler was
    accepted and ``batch_at`` of its last step raised ``epoch must be an int in [0, 2**32 - 1]``."""
    s = _mixture(total_rows=2**62)
    last = s.batch_at(len(s) - 1)
    assert len(last) == 2
    assert PackingPlan(WEB, 16).epoch(MAX_EPOCH + 1).num_rows > 0


# -- states ---------------------------------------------------------------------------------------
def _saved(sampler: PackedSampler, steps: int = 2) -> dict[str, Any]:
    it = iter(sampler)
    for _ in range(steps):
        next(it)
    state: dict[str, Any] = json.loads(json.dumps(sampler.state_dict()))
    return state


@pytest.mark.parametrize("gbs", [None, 8])
def test_from_state_rebuilds_one_corpus_with_a_global_batch_size(gbs: int | None) -> None:
    """The global batch size was not given back: ``from_state`` refused its own state
    (``global_batch_size is 8 in the state but 0 in this sampler``)."""
    state = _saved(PackedSampler(WEB, 16, 2, 0, 2, seed=3, global_batch_size=gbs))
    again = PackedSampler.from_state(state, lengths=WEB, rank=1)
    assert again.state_dict() == state
    assert again.global_batch_size_field == (gbs or 0)


@pytest.mark.parametrize(
    "weights", [[2, 1], MixtureSchedule([(0, [1, 1]), (40, [1, 3])])], ids=["weights", "schedule"]
)
def test_from_state_rebuilds_a_mixture(weights: Any) -> None:
    """Every mixture state failed with ``__init__() missing 1 required positional argument:
    'lengths'`` (and its int global batch size was lost)."""
    state = _saved(_mixture(mixture=([WEB, CODE], weights)))
    again = PackedSampler.from_state(state, mixture=([WEB, CODE], weights))
    assert again.state_dict() == state


def test_a_state_from_another_seed_names_the_seed() -> None:
    """It named ``total_rows`` (the seed moves the windows, so the row count moved too), and
    ``from_state`` with other lengths said ``total_rows must be None or 150``."""
    state = _saved(PackedSampler(WEB, 16, 2, 0, 2, seed=3))
    with pytest.raises(ValueError, match="seed is 3 in the state but 4 in this sampler"):
        PackedSampler(WEB, 16, 2, 0, 2, seed=4).load_state_dict(state)
    with pytest.raises(ValueError, match=r"lengths is '.*' in the state but '.*' in this"):
        PackedSampler.from_state(state, lengths=CODE)


def test_one_corpus_and_a_mixture_refuse_each_others_states_by_their_lengths() -> None:
    """A one-corpus state loaded into a mixture said ``state is missing keys ['mixture']``."""
    one = _saved(PackedSampler(WEB, 16, 2, 0, 2, seed=5, chunk=4, window=8))
    mix = _saved(_mixture())
    with pytest.raises(ValueError, match=r"lengths is '[0-9a-f]{16}' in the state but 'sources:"):
        _mixture().load_state_dict(one)
    with pytest.raises(ValueError, match=r"lengths is 'sources:[0-9a-f]{16}' in the state but"):
        PackedSampler(WEB, 16, 2, 0, 2, seed=5, chunk=4, window=8).load_state_dict(mix)


# -- a window's packing costs its documents, not its rows ------------------------------------------
def test_a_huge_document_at_seq_len_1_packs_without_a_row_per_token() -> None:
    """One document of 2**31 - 1 tokens at ``seq_len=1`` materialised 2**31 spans (16 GB per
    array): the sampler was accepted, then its first batch never came. NOTE [ Full rows are not
    stored ]: its full rows are one entry."""
    w = pack_window(np.array([7]), np.array([2**31 - 1]), 1)
    assert w.num_rows == 2**31 - 1
    assert (w.full_doc.tolist(), w.full_first.tolist()) == ([7], [0, 2**31 - 1])
    last = np.array([0, 2**31 - 2])
    assert w.rows(last) == [((7, 0, 1),), ((7, 2**31 - 2, 2**31 - 1),)]
    assert w.costs_of(last).tolist() == w.tokens_of(last).tolist() == [1, 1]
    s = PackedSampler([2**31 - 1, 5], 2, 2, 1, 2, seed=1)
    assert len(s) == 2**28
    assert [len(b) for b in (s.batch_at(0), s.batch_at(len(s) - 1), next(iter(s)))] == [2, 2, 2]
    assert (s.tokens_dropped, s.tokens_padded, s.documents_split) == (4, 0, 2)


def test_a_dropped_tail_of_2_40_rows_is_counted_from_window_totals() -> None:
    """``tokens_dropped`` listed every row of the tail a global batch drops (a Python tuple per
    row): 2**40 - 1024 rows here."""
    s = PackedSampler([2**31 - 1] * 1024, 1, 2, 1, 2, seed=1, global_batch_size=2**40)
    tokens = 1024 * (2**31 - 1)
    assert s.tokens_dropped == tokens - 2**40
    assert s.tokens_padded == 0


@pytest.mark.parametrize("split", ["overflow", "never"])
@pytest.mark.parametrize("seq_len", [1, 3, 16])
def test_tokens_from_any_position_agree_with_the_rows(split: str, seq_len: int) -> None:
    lengths = np.random.default_rng(seq_len).integers(0, 40, 37)
    epoch = PackingPlan(lengths, seq_len, split=split, chunk=2, window=6, seed=4).epoch(2)
    rows = epoch.rows(np.arange(epoch.num_rows))
    tokens = [sum(b - a for _, a, b in row) for row in rows]
    assert [epoch.tokens_from(p) for p in range(epoch.num_rows + 1)] == [
        sum(tokens[p:]) for p in range(epoch.num_rows + 1)
    ]
