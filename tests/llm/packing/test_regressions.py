"""Regressions of the outside review of ``dataorder.llm.packing`` (hostile-user pass before it
ships): one test per defect, each failing on the code before its fix.

The sweeps that would have caught them are in the hostile-input tables (tests/README.md).
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataorder.core.state import MAX_EPOCH
from dataorder.llm.mixture import MixtureSchedule
from dataorder.llm.packing import (
    DocumentLengths,
    PackedDataset,
    PackedSampler,
    PackingPlan,
    pack_window,
    write_megatron,
)
from dataorder.llm.packing.plan import DEFAULT_CHUNK, DEFAULT_WINDOW, default_window

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


# -- files ----------------------------------------------------------------------------------------
def _special(tmp_path: Path, name: str, kind: str) -> Path:
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
@pytest.mark.parametrize("kind", ["fifo", "directory"])
@pytest.mark.parametrize("name", ["x.idx", "x.bin", "x.npy", "x.arrow", "x.parquet"])
def test_a_fifo_or_a_directory_named_like_a_corpus_is_refused_unopened(
    tmp_path: Path, name: str, kind: str
) -> None:
    """A FIFO named x.idx, x.npy or x.arrow blocked open() forever (x.arrow inside pyarrow's C
    code, where no signal reaches); a directory raised IsADirectoryError, or for x.bin said
    'holds 4096 bytes'. Only os.stat looks at it now."""
    if name == "x.bin":
        write_megatron(tmp_path / "x", [[1, 2], [3]])
        (tmp_path / "x.bin").unlink()
    path = _special(tmp_path, name, kind)
    what = "a FIFO (named pipe)" if kind == "fifo" else "a directory"
    with pytest.raises(ValueError, match=re.escape(f"{path} is {what}, not a regular file")):
        DocumentLengths.from_file(path)
    if name in ("x.idx", "x.bin"):
        with pytest.raises(ValueError, match=re.escape(f"{path} is {what}")):
            PackedDataset.from_megatron(tmp_path / "x", 8)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "No data left in file"),
        (b"garbage" * 10, "pickled"),
        (b"\x93NUMPY\x01\x00v\x00{'descr': '<i4', 'fortran_order': False, 'shape': (100,), }", ""),
    ],
    ids=["empty", "garbage", "truncated"],
)
def test_a_corrupt_npy_is_named(tmp_path: Path, content: bytes, fragment: str) -> None:
    """np.load's own messages (or EOFError) did not name the file."""
    path = tmp_path / "l.npy"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(f"{path} is not a readable .npy file")) as info:
        DocumentLengths.from_file(path)
    assert fragment in str(info.value)


@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
def test_a_corrupt_arrow_or_parquet_file_is_named(tmp_path: Path, suffix: str) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / f"t{suffix}"
    path.write_bytes(b"garbage")
    with pytest.raises(ValueError, match=re.escape(f"{path} is not a readable {suffix[1:]}")):
        DocumentLengths.from_file(path)


def test_a_pointer_swapped_inside_a_chunk_is_named_when_its_tokens_are_read(
    tmp_path: Path,
) -> None:
    """Two pointers swapped inside one chunk keep every chunk's total: the sampler is right (it
    reads lengths), but PackedDataset read document 1 from document 2's bytes, silently."""
    write_megatron(tmp_path / "c", [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]])
    raw = bytearray((tmp_path / "c.idx").read_bytes())
    at = 34 + 4 * 4  # header, then 4 int32 lengths, then the int64 pointers
    one, two = struct.unpack_from("<2q", raw, at + 8)
    struct.pack_into("<2q", raw, at + 8, two, one)
    (tmp_path / "c.idx").write_bytes(bytes(raw))
    dataset = PackedDataset.from_megatron(tmp_path / "c", 4)
    assert dataset.arrays(((3, 0, 1),))["input_ids"].tolist() == [10, 0, 0, 0]
    with pytest.raises(ValueError, match="sequence 1 has length 2 at byte 20, but the next"):
        dataset.arrays(((1, 0, 2),))  # read [6, 7] before
    with pytest.raises(ValueError, match="sequence 0 has length 3 at byte 0, but the next"):
        dataset.arrays(((0, 0, 3),))


def test_float_tokens_are_not_token_ids(tmp_path: Path) -> None:
    """A Megatron float dtype (codes 6, 7) and float tokens given to write_megatron were cast
    to ids silently ([1.5] became 1)."""
    write_megatron(tmp_path / "f", [[1.5, 2.5]], dtype=np.float64)
    with pytest.raises(ValueError, match="holds float64 values, not token ids"):
        PackedDataset.from_megatron(tmp_path / "f", 4)
    with pytest.raises(ValueError, match=r"documents\[0\] must be a 1-D sequence of int32"):
        write_megatron(tmp_path / "g", [[1.5]])
    with pytest.raises(ValueError, match=r"documents\[0\] must hold ids in \[0, 255\]"):
        write_megatron(tmp_path / "h", [[300]], dtype=np.uint8)
    with pytest.raises(ValueError, match="dtype must be one of"):
        write_megatron(tmp_path / "i", [[1]], dtype=None)  # np.dtype(None) is float64


# -- Arrow ----------------------------------------------------------------------------------------
def test_arrow_columns_must_hold_integer_ids_and_no_null_id() -> None:
    """A null token id became -2**63 in input_ids, float ids were truncated, uint64 ids past
    int64 wrapped to -1, and list<string> failed inside numpy ('invalid literal for int()')."""
    pa = pytest.importorskip("pyarrow")
    for values in ([["a"], ["b", "c"]], [[1.5, 2.5]], [[[1], [2]]]):
        with pytest.raises(TypeError, match="column must be a list column of integer token ids"):
            DocumentLengths.from_arrow(pa.table({"input_ids": values}))
    nulls = pa.table({"input_ids": [[1, None], None, [4, 5, 6]]})
    assert DocumentLengths.from_arrow(nulls).take([0, 1, 2]).tolist() == [2, 0, 3]  # null row
    with pytest.raises(ValueError, match="row 0 of column 'input_ids' holds 1 null token ids"):
        PackedDataset.from_arrow(nulls, 8).arrays(((0, 0, 2),))
    huge = pa.table({"input_ids": pa.array([[2**64 - 1]], type=pa.list_(pa.uint64()))})
    with pytest.raises(ValueError, match="must be token ids below 2\\*\\*63"):
        PackedDataset.from_arrow(huge, 8).arrays(((0, 0, 1),))


# -- small arguments ------------------------------------------------------------------------------
def test_small_arguments_are_named() -> None:
    """Each was accepted or refused in numpy's or Python's words."""
    with pytest.raises(ValueError, match="lengths must be at least one document"):
        DocumentLengths([])  # a float64 array: 'must be an integer array' before
    with pytest.raises(ValueError, match="lengths must be a 1-D integer array"):
        DocumentLengths([[1, 2], [3]])
    with pytest.raises(ValueError, match="indices must be document indices in \\[0, 2\\]; got "):
        DocumentLengths([1, 2, 3]).take([2**63])  # uint64, wrapped to -2**63 in the message
    with pytest.raises(ValueError, match="pad_id must be an int in"):
        PackedDataset([[1, 2]], 4, pad_id=2**63)  # accepted, then OverflowError in arrays()
    with pytest.raises(ValueError, match="token_source must be at least one document"):
        PackedDataset([], 4)
    with pytest.raises(TypeError, match=r"prefix must be a str or os\.PathLike"):
        DocumentLengths.from_megatron(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike"):
        DocumentLengths.from_file(3)  # type: ignore[arg-type]


def test_collate_names_items_that_do_not_stack() -> None:
    """torch.stack's RuntimeError and 'int object is not iterable'."""
    pytest.importorskip("torch")
    eight, four = PackedDataset([[1, 2, 3]], 8), PackedDataset([[1, 2, 3]], 4)
    with pytest.raises(TypeError, match=r"items\[0\] must be a dict of input_ids"):
        PackedDataset.collate([1, 2])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="items must be rows of one seq_len"):
        PackedDataset.collate([eight[((0, 0, 3),)], four[()]])


def _recount(samplers: list[PackedSampler], universe: int, seq_len: int) -> tuple[int, int]:
    """NOTE [ Coverage ] by brute force: every token each row holds, all ranks, one epoch."""
    rows = [row for step in zip(*samplers, strict=True) for batch in step for row in batch]
    seen: dict[tuple[int, int], int] = {}
    for row in rows:
        for d, a, b in row:
            for t in range(a, b):
                seen[d, t] = seen.get((d, t), 0) + 1
    units = sum(seen.values())
    return universe - len(seen), units - len(seen) + len(rows) * seq_len - units


@pytest.mark.parametrize("trial", range(12))
def test_mixture_counters_agree_with_a_recount_without_listing_rows(trial: int) -> None:
    """A mixture's tokens_dropped/tokens_padded listed every row of the epoch (a Python tuple
    each): 'array is too big' at total_rows=2**62, and O(rows) on any real run. They now come
    from each source's passes; a recount of the rows checks them, passes wrapping mid-epoch."""
    rng = np.random.default_rng(trial)
    sources = [rng.integers(0, 60, int(rng.integers(1, 12))).tolist() for _ in range(2)]
    for lengths in sources:
        lengths[0] += 1
    seq_len = int(rng.choice([3, 8, 32]))
    split = ("overflow", "never")[trial % 2]
    weights: Any = rng.random(2).tolist()
    if trial % 3 == 0:
        weights = MixtureSchedule([(0, weights), (int(rng.integers(1, 20)), [1, 2])])
    dp, window = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    total = int(rng.integers(2 * dp, 50))
    job = [
        PackedSampler(None, seq_len, 1, r, dp, seed=trial, chunk=1, window=window, split=split,
                      mixture=(sources, weights), global_batch_size=2 * dp, total_rows=total)
        for r in range(dp)
    ]  # fmt: skip
    for epoch in (0, 1, 3):
        for s in job:
            s.set_epoch(epoch)
        expect = _recount(job, sum(map(sum, sources)), seq_len)
        assert (job[0].tokens_dropped, job[0].tokens_padded) == expect, epoch
    s = _mixture(total_rows=2**62)
    assert s.tokens_dropped == 0  # every token of both sources is read many times over
    assert s.tokens_padded > 0


def test_dealing_a_large_block_makes_at_most_max_swaps(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 4096 ranks x 4 rows every rank spent 2.5 s per step improving the dealing (up to
    per_rank x dp_size swaps, each a look at the whole block): NOTE [ Dealing cost ]."""
    from dataorder.core import dealing

    caps: list[int] = []
    improve = dealing._improve

    def spy(c: Any, own: Any, loads: Any, cap: int) -> None:
        caps.append(cap)
        improve(c, own, loads, cap)

    monkeypatch.setattr(dealing, "_improve", spy)
    costs = np.random.default_rng(0).integers(1, 8192, 4 * 4096) ** 2
    dealt = dealing.deal(costs, 4, 4096)
    assert caps == [dealing.MAX_SWAPS]
    loads = costs[dealt].sum(axis=1)
    assert loads.max() <= 1.10 * dealing.deal_bounds(costs, 4, 4096)[0]
    assert sorted(dealt.ravel().tolist()) == list(range(4 * 4096))


# -- index arrays ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [[0.9], ["1"], [True], np.array([1.0]), np.array([[0.0]])])
def test_non_integer_indices_are_refused_everywhere(bad: Any) -> None:
    """PackedWindow.rows cast with ``dtype=np.int64``: ``rows([0.9])`` was row 0 and
    ``rows(['1'])`` row 1. All three index checks are now one (check_index_array)."""
    window = pack_window(np.arange(3, dtype=np.int64), np.array([3, 4, 5]), 8)
    plan = PackingPlan(np.array([3, 4, 5, 9]), 8)
    for read, name in (
        (window.rows, "indices"),
        (plan.epoch(0).rows, "positions"),
        (DocumentLengths([1, 2, 3]).take, "indices"),
    ):
        with pytest.raises(TypeError, match=f"{name} must be integers; got {name}="):
            read(bad)


def test_index_checks_keep_messages_and_shapes() -> None:
    window = pack_window(np.arange(3, dtype=np.int64), np.array([3, 4, 5]), 8)
    last = window.num_rows - 1
    with pytest.raises(ValueError, match=rf"indices must be rows of the window in \[0, {last}\]"):
        window.rows([0, last + 1])
    with pytest.raises(ValueError, match=r"document indices in \[0, 2\]; got indices=18446"):
        DocumentLengths([1, 2, 3]).take(np.array([1, 2**64 - 1], dtype=np.uint64))  # not -1
    assert DocumentLengths([1, 2, 3]).take(np.array([[2], [0]], dtype=np.uint8)).tolist() == [
        [3],
        [1],
    ]
    assert window.rows([]) == []
    assert PackingPlan(np.array([3, 4, 5, 9]), 8).epoch(0).rows([]) == []


# -- the default window ---------------------------------------------------------------------------
def test_the_default_window_fits_any_chunk() -> None:
    """``chunk=100`` with the default window raised "window must be a multiple of chunk=100"
    (only the CLI rounded DEFAULT_WINDOW to whole chunks)."""
    lengths = np.arange(1, 20001) % 97 + 1
    assert PackingPlan(lengths, 64, chunk=100).window == default_window(100) == 16300
    assert PackingPlan(lengths, 64).window == DEFAULT_WINDOW == default_window(DEFAULT_CHUNK)
    assert PackingPlan(lengths, 64, chunk=2**20).window == 2**20  # at least one chunk
    with pytest.raises(
        ValueError, match="window must be a multiple of chunk=100; got window=16384"
    ):
        PackingPlan(lengths, 64, chunk=100, window=16384)  # an explicit window is not rounded
    s = PackedSampler(lengths, 64, 2, 1, 2, seed=3, chunk=100)
    s.set_epoch(1)
    batches = iter(s)
    next(batches)
    state = s.state_dict()
    assert state["config.packing"] == "64/overflow/16300/100"
    again = PackedSampler.from_state(state, lengths=lengths, rank=1)
    assert again.state_dict() == state
    assert list(again) == list(batches)
    assert PackedSampler(lengths, 64, 2, 1, 2, seed=3).state_dict()["config.packing"] == (
        "64/overflow/16384/128"
    )


def test_a_mixture_of_many_sources_describes_the_first_few() -> None:
    """The packed mixture's progress says what it took of each source as the blend does, the
    first eight sources and how many more (it listed every source)."""
    sources = [[5 + d] * 8 for d in range(10)]
    sampler = PackedSampler(None, 16, 1, 0, 1, 4, seed=2, mixture=(sources, [1] * 10))
    next(iter(sampler))
    text = dict(sampler.describe_progress())["per source"]
    assert "rows of source 7 (" in text
    assert "rows of source 8 (" not in text
    assert "... and 2 more sources" in text
