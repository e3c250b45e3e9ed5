"""The packing engine: windows, best fit decreasing, the plan and its epochs.

Property tests over random length distributions and parameters (every token once under
"overflow", no document split under "never", rows within seq_len, row counts equal to the
formula or the cached counts, statistics equal to a recount, rows independent of how positions
are asked), the fit rule replayed step by step, keys and epochs, golden rows, bad input, and the
modules' doctests.
"""

from __future__ import annotations

import doctest
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataorder.core.batching as batching_module
import dataorder.llm.packing.dataset as dataset_module
import dataorder.llm.packing.fit as fit_module
import dataorder.llm.packing.plan as plan_module
import dataorder.llm.packing.rule as rule_module
import dataorder.llm.packing.sampler as sampler_module
import dataorder.llm.packing.windows as windows_module
from dataorder.llm.packing.fit import best_fit, pack_window
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.plan import CACHED_EPOCHS, PackingPlan
from dataorder.llm.packing.windows import window_grid

SETTINGS = settings(max_examples=60, deadline=None, database=None)


@st.composite
def corpora(draw: Any) -> dict[str, Any]:
    """Random lengths (some empty, some longer than seq_len) and packing parameters."""
    seq_len = draw(st.integers(1, 64))
    n = draw(st.integers(1, 120))
    kind = draw(st.sampled_from(["small", "mixed", "long", "equal"]))
    top = {"small": seq_len, "mixed": 3 * seq_len, "long": 6 * seq_len, "equal": 0}[kind]
    if kind == "equal":
        value = draw(st.integers(0, 2 * seq_len))
        lengths = [value] * n
    else:
        lengths = draw(st.lists(st.integers(0, top), min_size=n, max_size=n))
    chunk = draw(st.integers(1, 8))
    window = chunk * draw(st.integers(1, 6))
    return {
        "lengths": np.array(lengths, dtype=np.int64),
        "seq_len": seq_len,
        "chunk": chunk,
        "window": window,
        "seed": draw(st.integers(0, 2**63 - 1)),
        "epoch": draw(st.integers(0, 5)),
    }


def all_rows(plan: PackingPlan, epoch: int) -> list[tuple[tuple[int, int, int], ...]]:
    rows = plan.epoch(epoch)
    return rows.rows(np.arange(rows.num_rows))


def spans_by_document(rows: list[Any]) -> dict[int, list[tuple[int, int, int]]]:
    """Every span of every row, grouped by document: ``(start, stop, row)``."""
    out: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for r, row in enumerate(rows):
        for d, a, b in row:
            out[d].append((a, b, r))
    return out


# -- split="overflow" ----------------------------------------------------------------------------


@SETTINGS
@given(corpora())
def test_overflow_reads_every_token_of_every_document_exactly_once(c: dict[str, Any]) -> None:
    lengths, s = c["lengths"], c["seq_len"]
    plan = PackingPlan(
        lengths, s, window=c["window"], chunk=c["chunk"], seed=c["seed"], split="overflow"
    )
    rows = all_rows(plan, c["epoch"])
    assert len(rows) == plan.rows_per_epoch == plan.epoch(c["epoch"]).num_rows
    assert all(0 < sum(b - a for _, a, b in row) <= s for row in rows)
    spans = spans_by_document(rows)
    for d, length in enumerate(lengths.tolist()):
        covered = sorted(spans.get(d, []))
        # spans tile [0, length) with no gap and no overlap
        assert [a for a, _, _ in covered] == [0, *(b for _, b, _ in covered[:-1])][: len(covered)]
        assert (covered[-1][1] if covered else 0) == length
        assert all(a < b for a, b, _ in covered)
    # the row count of every window is the formula
    totals = [int(lengths[plan.grid.documents(w)].sum()) for w in range(plan.num_windows)]
    assert plan.rows_per_window.tolist() == [-(-t // s) for t in totals]
    # statistics equal a recount
    stats = plan.stats()
    filled = sum(b - a for row in rows for _, a, b in row)
    assert filled == stats.tokens == int(lengths.sum())
    assert stats.tokens_padded == len(rows) * s - filled < max(1, plan.num_windows) * s
    rows_of = {d: {r for _, _, r in v} for d, v in spans.items()}
    short = sum(1 for d, rs in rows_of.items() if len(rs) > 1 and lengths[d] <= s)
    long = sum(1 for d, rs in rows_of.items() if len(rs) > 1 and lengths[d] > s)
    assert plan.documents_split() == (short, long) == (stats.split_shorter, stats.split_longer)
    assert long == int((lengths > s).sum()) == stats.documents_longer
    assert stats.documents_empty == int((lengths == 0).sum())
    assert stats.tokens_cut == stats.documents_dropped == 0


@SETTINGS
@given(corpora())
def test_never_splits_no_document_and_cuts_exactly_the_counted_ones(c: dict[str, Any]) -> None:
    lengths, s = c["lengths"], c["seq_len"]
    for long_documents in ("truncate", "drop"):
        plan = PackingPlan(
            lengths,
            s,
            split="never",
            window=c["window"],
            chunk=c["chunk"],
            seed=c["seed"],
            long_documents=long_documents,
        )
        rows = all_rows(plan, c["epoch"])
        assert len(rows) == plan.rows_per_epoch == int(plan.rows_per_window.sum())
        assert all(0 < sum(b - a for _, a, b in row) <= s for row in rows)
        spans = spans_by_document(rows)
        for d, length in enumerate(lengths.tolist()):
            got = spans.get(d, [])
            if length == 0 or (length > s and long_documents == "drop"):
                assert got == []
            else:
                assert [(a, b) for a, b, _ in got] == [(0, min(length, s))]
        longer = lengths > s
        cut = int((lengths[longer] - s).sum())
        if long_documents == "drop":
            cut += s * int(longer.sum())
        stats = plan.stats()
        assert stats.tokens_cut == plan.tokens_cut_per_epoch == cut
        assert stats.documents_dropped == (int(longer.sum()) if long_documents == "drop" else 0)
        filled = sum(b - a for row in rows for _, a, b in row)
        assert filled == int(lengths.sum()) - cut
        assert stats.tokens_padded == len(rows) * s - filled
        assert plan.documents_split() == (0, 0)
        # the fill histogram (counted run by run, not packed) is the packed rows'
        fills = [sum(b - a for _, a, b in row) * 200 // s for row in rows]
        expect = np.bincount(np.minimum(fills, 199), minlength=200) if rows else np.zeros(200)
        assert plan.fill_histogram().tolist() == expect.tolist()
        # a truncated document has a row of its own
        for d in np.flatnonzero(longer).tolist():
            if long_documents == "truncate":
                r = spans[d][0][2]
                assert rows[r] == ((d, 0, s),)


@settings(max_examples=30, deadline=None, database=None)
@given(corpora(), st.randoms(use_true_random=False))
def test_rows_do_not_depend_on_how_positions_are_asked(c: dict[str, Any], rnd: Any) -> None:
    plan = PackingPlan(c["lengths"], c["seq_len"], window=c["window"], chunk=c["chunk"])
    epoch = plan.epoch(c["epoch"])
    whole = epoch.rows(np.arange(epoch.num_rows))
    costs = epoch.costs(np.arange(epoch.num_rows))
    positions = list(range(epoch.num_rows)) * 2
    rnd.shuffle(positions)
    # a fresh plan (no cached windows), positions shuffled, repeated and asked in pieces
    fresh = PackingPlan(c["lengths"], c["seq_len"], window=c["window"], chunk=c["chunk"])
    again = fresh.epoch(c["epoch"])
    got: list[Any] = []
    at = 0
    while at < len(positions):
        step = rnd.randint(1, 7)
        got += again.rows(np.array(positions[at : at + step], dtype=np.int64))
        at += step
    assert got == [whole[p] for p in positions]
    assert again.costs(np.array(positions, dtype=np.int64)).tolist() == [
        int(costs[p]) for p in positions
    ]
    assert costs.tolist() == [sum((b - a) ** 2 for _, a, b in row) for row in whole]


@SETTINGS
@given(corpora())
def test_every_epoch_has_the_same_row_count_and_statistics(c: dict[str, Any]) -> None:
    for split in ("overflow", "never"):
        plan = PackingPlan(c["lengths"], c["seq_len"], window=c["window"], chunk=c["chunk"],
                           seed=c["seed"], split=split)  # fmt: skip
        counts = set()
        for epoch in (0, 1, c["epoch"] + 2):
            rows = all_rows(plan, epoch)
            fill = sorted(sum(b - a for _, a, b in row) for row in rows)
            split_docs = sum(
                1 for v in spans_by_document(rows).values() if len({r for *_, r in v}) > 1
            )
            counts.add((len(rows), tuple(fill), split_docs))
        assert len(counts) == 1


def test_a_different_epoch_or_seed_gives_another_order_of_the_same_rows_count() -> None:
    rng = np.random.default_rng(5)
    lengths = np.maximum(1, rng.lognormal(4.0, 1.0, 3000)).astype(np.int64)
    base = PackingPlan(lengths, 256, window=512, chunk=16, seed=1)
    other_seed = PackingPlan(lengths, 256, window=512, chunk=16, seed=2)
    rows = {
        "e0": all_rows(base, 0),
        "e1": all_rows(base, 1),
        "s2": all_rows(other_seed, 0),
    }
    assert len({len(v) for v in rows.values()}) == 1
    assert rows["e0"] != rows["e1"]
    assert rows["e0"] != rows["s2"]
    # the window order differs too, and every epoch is a permutation of the windows
    orders = [base.epoch(e).window_order.tolist() for e in range(3)]
    assert all(sorted(o) == list(range(base.num_windows)) for o in orders)
    assert len({tuple(o) for o in orders}) == 3


# -- the fit rule --------------------------------------------------------------------------------


@SETTINGS
@given(
    st.integers(1, 50),
    st.lists(st.integers(1, 50), max_size=80),
    st.booleans(),
)
def test_best_fit_follows_its_rule_at_every_step(s: int, raw: list[int], fixed: bool) -> None:
    """Replay the placements: each whole piece went to the row with the least room that holds
    it; under "overflow" a piece that fit nowhere filled the roomiest row; under "never" a row
    opened only when no row had room."""
    sizes = sorted((min(x, s) for x in raw), reverse=True)
    rows = -(-sum(sizes) // s) if fixed else None
    piece, row, size, n_rows = best_fit(sizes, s, rows)
    room: dict[int, int] = dict.fromkeys(range(rows), s) if rows else {}
    placed = [0] * len(sizes)
    for p, r, x in zip(piece, row, size, strict=True):
        left = sizes[p] - placed[p]
        fits = [v for v in room.values() if v >= left]
        if fits:
            assert x == left
            assert room[r] == min(fits)
        elif rows is not None:
            assert x == room[r] == max(room.values()) > 0
        else:
            assert r == len(room)
            assert x == left
            room[r] = s
        room[r] -= x
        placed[p] += x
    assert placed == sizes
    assert n_rows == (rows if rows is not None else len(room))
    assert all(v >= 0 for v in room.values())
    if rows is None:
        # never: every piece whole
        assert len(piece) == len(set(piece)) == len(sizes)


def test_pack_window_puts_long_documents_in_full_rows_first() -> None:
    docs = np.array([10, 11, 12, 13], dtype=np.int64)
    lengths = np.array([9, 3, 20, 0], dtype=np.int64)
    w = pack_window(docs, lengths, 8)
    rows = [w.row(i) for i in range(w.num_rows)]
    assert rows[:3] == [((10, 0, 8),), ((12, 0, 8),), ((12, 8, 16),)]
    assert sorted(s for row in rows[3:] for s in row) == [(10, 8, 9), (11, 0, 3), (12, 16, 20)]
    assert w.num_rows == -(-32 // 8)
    assert w.padding == 0
    assert (w.split_short, w.split_long, w.cut, w.dropped) == (0, 2, 0, 0)
    assert w.costs_of(np.arange(4)).tolist() == [64, 64, 64, 1 + 9 + 16]
    assert w.tokens_of(np.arange(4)).tolist() == [8, 8, 8, 8]
    never = pack_window(docs, lengths, 8, split="never", long_documents="drop")
    assert [never.row(i) for i in range(never.num_rows)] == [((11, 0, 3),)]
    assert (never.cut, never.dropped) == (29, 2)


def test_a_short_document_is_split_only_when_nothing_else_fits() -> None:
    # 3 rows of 10 for 30 tokens: 9, 7, 7 leave 1 + 3 + 3 and the last 7 must be split: its head
    # fills a roomiest row (3), then the next (3), and the last token goes where it fits best
    w = pack_window(np.arange(4, dtype=np.int64), np.array([7, 7, 7, 9]), 10)
    assert w.num_rows == 3
    assert w.padding == 0
    assert (w.split_short, w.split_long) == (1, 0)
    assert [w.row(i) for i in range(3)] == [
        ((3, 0, 9), (2, 6, 7)),
        ((0, 0, 7), (2, 3, 6)),
        ((1, 0, 7), (2, 0, 3)),
    ]


# -- windows -------------------------------------------------------------------------------------


@SETTINGS
@given(st.integers(1, 3000), st.integers(1, 64), st.integers(1, 40), st.integers(0, 2**63 - 1))
def test_windows_partition_the_documents_and_differ_by_one_chunk(
    n: int, chunk: int, per_window: int, seed: int
) -> None:
    grid = window_grid(n, chunk, chunk * per_window, seed)
    docs = [grid.documents(w) for w in range(grid.num_windows)]
    assert sorted(np.concatenate(docs).tolist()) == list(range(n))
    chunks = [grid.chunks(w).shape[0] for w in range(grid.num_windows)]
    assert max(chunks) - min(chunks) <= 1
    assert max(chunks) <= per_window
    lengths = np.random.default_rng(n).integers(0, 100, n)
    chunk_totals = DocumentLengths(lengths).block_totals(chunk)
    assert grid.totals(chunk_totals).tolist() == [int(lengths[d].sum()) for d in docs]
    # a chunk is a run of consecutive documents
    for w in range(grid.num_windows):
        for k in grid.chunks(w).tolist():
            assert k * chunk < n


def test_a_window_is_a_cross_section_of_the_corpus() -> None:
    grid = window_grid(100_000, 10, 1000, seed=3)
    assert grid.num_windows == 100
    for w in (0, 57):
        chunks = grid.chunks(w)
        assert chunks.shape[0] == 100
        # one chunk in each tenth... one in each run of nW consecutive chunks
        assert (chunks // grid.num_windows).tolist() == list(range(100))


# -- golden rows ---------------------------------------------------------------------------------


def test_golden_rows() -> None:
    """Pins the construction (grid offsets, tie order, fit, row order, window order): a change
    here changes every packed run and must bump PACKING_VERSION."""
    lengths = np.array([5, 3, 9, 2, 7, 1, 4, 8, 6, 2, 11, 3], dtype=np.int64)
    plan = PackingPlan(lengths, 8, window=4, chunk=2, seed=7)
    rows = all_rows(plan, 1)
    assert plan.epoch(1).window_order.tolist() == GOLDEN_WINDOW_ORDER
    assert rows == GOLDEN_ROWS


GOLDEN_WINDOW_ORDER = [1, 0, 2]
GOLDEN_ROWS = [
    ((6, 0, 4),),
    ((7, 0, 8),),
    ((0, 0, 5), (1, 0, 3)),
    ((4, 0, 7), (5, 0, 1)),
    ((10, 0, 8),),
    ((10, 8, 11), (11, 0, 3)),
    ((8, 0, 6), (3, 0, 2)),
    ((2, 0, 8),),
    ((9, 0, 2), (2, 8, 9)),
]


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"seq_len": 0}, ValueError, "seq_len must be an int in [1, 2147483648]; got seq_len=0"),
        ({"seq_len": 2**31 + 1}, ValueError, "seq_len must be an int in"),
        ({"seq_len": True}, TypeError, "seq_len must be"),
        ({"seq_len": 8.0}, TypeError, "seq_len must be"),
        ({"split": "always"}, ValueError, "split must be one of 'overflow', 'never'"),
        ({"chunk": 0}, ValueError, "chunk must be an int in [1, 1048576]; got chunk=0"),
        ({"window": 100, "chunk": 64}, ValueError, "window must be a multiple of chunk=64"),
        ({"window": 2**25}, ValueError, "window must be an int in [1, 1048576]"),
        ({"long_documents": "keep"}, ValueError, "long_documents must be one of"),
        ({"long_documents": "drop"}, ValueError, "long_documents must be 'truncate' under"),
        ({"seed": -1}, ValueError, "seed must be an int in [0, 9223372036854775807]"),
        ({"seed": 2**63}, ValueError, "seed must be an int in"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], exc: type, message: str) -> None:
    args: dict[str, Any] = {"seq_len": 8, **kwargs}
    with pytest.raises(exc) as err:
        PackingPlan(np.array([3, 4, 5]), **args)
    assert message in str(err.value)


def test_bad_positions_and_epochs_are_named() -> None:
    plan = PackingPlan(np.array([3, 4, 5, 9]), 8)
    epoch = plan.epoch(0)
    with pytest.raises(ValueError, match=r"positions must be row positions in \[0, 2\]; got"):
        epoch.rows([3])
    with pytest.raises(ValueError, match="positions must be row positions"):
        epoch.costs([-1])
    with pytest.raises(TypeError, match="positions must be integers"):
        epoch.locate([0.5])
    with pytest.raises(ValueError, match="epoch must be an int in"):
        plan.epoch(-1)
    with pytest.raises(TypeError, match="epoch must be"):
        plan.epoch(True)
    with pytest.raises(ValueError, match="window must be an int in"):
        plan.packed_window(0, 5)
    assert epoch.rows(np.zeros(0, dtype=np.int64)) == []


def test_locate_maps_positions_to_windows_in_visit_order() -> None:
    plan = PackingPlan(np.arange(1, 41), 16, window=4, chunk=2, seed=9)
    epoch = plan.epoch(2)
    ordinal, row = epoch.locate(np.arange(epoch.num_rows))
    counts = plan.rows_per_window[epoch.window_order]
    assert np.bincount(ordinal).tolist() == counts.tolist()
    assert row.tolist() == [r for c in counts.tolist() for r in range(c)]


def test_what_a_plan_hands_out_is_read_only() -> None:
    plan = PackingPlan(np.arange(1, 41), 16, window=4, chunk=2)
    epoch = plan.epoch(0)
    for array in (plan.window_tokens, plan.rows_per_window, epoch.window_order, epoch.row_starts,
                  plan.lengths.block_totals(2), plan.fill_histogram()):  # fmt: skip
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 7


def test_a_plan_holds_only_a_few_packed_windows() -> None:
    plan = PackingPlan(np.arange(1, 401), 64, window=8, chunk=4)
    epoch = plan.epoch(0)
    epoch.rows(np.arange(epoch.num_rows))
    assert len(plan._cache) <= plan_module.CACHED_WINDOWS


def test_a_window_whose_counts_disagree_with_its_lengths_is_refused(tmp_path: Path) -> None:
    """A Megatron index whose length disagrees with its pointers: refused by the first packing
    of its window, stats() (which packs before any row count) included."""
    from dataorder.llm.packing import write_megatron

    write_megatron(tmp_path / "x", [[1] * 5] * 4)
    raw = bytearray((tmp_path / "x.idx").read_bytes())
    raw[34:38] = (6).to_bytes(4, "little")  # lengths[0]: 6, its pointers still say 5
    (tmp_path / "x.idx").write_bytes(bytes(raw))

    def every_window(plan: PackingPlan) -> None:  # document 0's window among them
        for w in range(plan.num_windows):
            plan.packed_window(0, w)

    for ask in (every_window, PackingPlan.stats):
        plan = PackingPlan(DocumentLengths.from_megatron(tmp_path / "x"), 8, window=2, chunk=1)
        with pytest.raises(ValueError, match="disagree with its cumulative counts in window"):
            ask(plan)


def test_config_names_every_field_the_rows_depend_on() -> None:
    plan = PackingPlan(np.array([3, 4, 5]), 8, split="never", long_documents="drop", seed=3)
    config = plan.config()
    assert config["seq_len"] == 8
    assert config["split"] == "never"
    assert config["seed"] == 3
    assert config["long_documents"] == "drop"
    assert config["packing_version"] == 1
    assert config["lengths"] == plan.lengths.fingerprint()


@pytest.mark.parametrize(
    "module",
    [plan_module, fit_module, windows_module, sampler_module, rule_module, dataset_module,
     batching_module],
    ids=lambda m: m.__name__,
)  # fmt: skip
def test_doctests(module: Any) -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_exact_at_the_largest_legal_values() -> None:
    """seq_len 2**31 and lengths 2**31 - 1: token totals, row counts and row costs stay exact
    (a span squared is below 2**62, a row's cost at most seq_len**2 = 2**62)."""
    big = 2**31 - 1
    lengths = DocumentLengths(np.array([big, big, 5, big], dtype=np.int32))
    plan = PackingPlan(lengths, 2**31, window=4, chunk=2)
    total = 3 * big + 5
    assert plan.lengths.total_tokens == total
    assert plan.rows_per_epoch == -(-total // 2**31) == 4
    epoch = plan.epoch(0)
    rows = epoch.rows(np.arange(4))
    costs = epoch.costs(np.arange(4)).tolist()
    assert costs == [sum((b - a) ** 2 for _, a, b in row) for row in rows]
    assert max(costs) <= 2**62
    assert sorted(span for row in rows for span in row) == [
        (0, 0, big),
        (1, 0, big),
        (2, 0, 5),
        (3, 0, big),
    ]
    never = PackingPlan(lengths, 2**31 - 2, split="never", window=4, chunk=2)
    assert never.tokens_cut_per_epoch == 3
    assert never.stats().rows == 4


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"seq_len": 0}, ValueError, "seq_len must be an int in [1, 2147483648]; got seq_len=0"),
        ({"split": "x"}, ValueError, "split must be one of 'overflow', 'never'; got split='x'"),
        ({"long_documents": "x"}, ValueError, "long_documents must be one of"),
        ({"tie_key": -1}, ValueError, "tie_key must be an int in"),
        ({"lengths": np.array([1, -1])}, ValueError, "lengths[1] must be an int in"),
        ({"lengths": np.array([1.0, 2.0])}, TypeError, "lengths[0] must be an int in"),
        ({"lengths": np.array([1, 2, 3])}, ValueError, "lengths must be one length per document"),
        ({"documents": np.array([-1, 0])}, ValueError, "documents[0] must be an int in"),
    ],
)
def test_pack_window_names_bad_arguments(kwargs: dict[str, Any], exc: type, message: str) -> None:
    args: dict[str, Any] = {
        "documents": np.array([0, 1]),
        "lengths": np.array([3, 4]),
        "seq_len": 8,
        **kwargs,
    }
    documents, lengths, seq_len = args.pop("documents"), args.pop("lengths"), args.pop("seq_len")
    with pytest.raises(exc) as err:
        pack_window(documents, lengths, seq_len, **args)
    assert message in str(err.value)


def test_many_rows_of_a_window_read_the_same_as_a_few() -> None:
    lengths = np.random.default_rng(2).integers(1, 40, 500)
    w = pack_window(np.arange(500, dtype=np.int64), lengths, 64, tie_key=5)
    assert w.num_rows > fit_module._FEW_ROWS
    every = np.arange(w.num_rows, dtype=np.int64)
    assert w.rows(every) == [w.row(i) for i in range(w.num_rows)]
    assert w.rows(every[::-7][:5]) == [w.row(i) for i in every[::-7][:5].tolist()]
    assert w.tokens_of(every).tolist() == [
        sum(b - a for _, a, b in w.row(i)) for i in every.tolist()
    ]
    assert w.costs_of(every).tolist() == [sum((b - a) ** 2 for _, a, b in w.row(i)) for i in every]


@SETTINGS
@given(st.integers(1, 60), st.lists(st.integers(1, 60), max_size=150))
def test_counting_rooms_run_by_run_is_best_fit(s: int, raw: list[int]) -> None:
    """best_fit_rooms (runs of equal pieces in bulk) leaves the same rooms as best_fit (piece by
    piece) under "never"."""
    sizes = sorted((min(x, s) for x in raw), reverse=True)
    _, row, size, n_rows = best_fit(sizes, s, None)
    room = [s] * n_rows
    for r, x in zip(row, size, strict=True):
        room[r] -= x
    values, counts = np.unique(np.array(sizes, dtype=np.int64), return_counts=True)
    got = fit_module.best_fit_rooms(values[::-1].tolist(), counts[::-1].tolist(), s)
    expect: dict[int, int] = {}
    for v in room:
        expect[v] = expect.get(v, 0) + 1
    assert got == expect


def test_padding_and_splitting_targets_and_the_readme_figures_on_lognormal_lengths() -> None:
    """The packing's targets on a lognormal distribution (2 x 10^5 lognormal(6.0, 1.1) lengths, the
    benchmark's draw): overflow at 8192 pads at most 0.1 % and splits at most 1 % of the
    documents shorter than seq_len; never at 2048 pads at most 0.2 %. The README quotes the
    figures rounded (0.05 %, none split, 0.02 %): they are these."""
    rng = np.random.default_rng(20261125)  # benchmarks/bench_pack.py's SEED
    lengths = np.maximum(1, np.floor(rng.lognormal(6.0, 1.1, 200_000))).astype(np.int64)
    over = PackingPlan(lengths, 8192, seed=0).stats()
    padding = over.tokens_padded / (over.rows * 8192)
    shorter = over.documents - over.documents_longer
    assert padding <= 0.001
    assert over.split_shorter <= 0.01 * shorter
    assert (round(100 * padding, 2), over.split_shorter) == (0.05, 0)
    never = PackingPlan(lengths, 2048, split="never", seed=0).stats()
    padding = never.tokens_padded / (never.rows * 2048)
    assert padding <= 0.002
    assert (round(100 * padding, 2), never.split_shorter, never.split_longer) == (0.02, 0, 0)


def test_epoch_rows_are_kept_for_the_last_epochs() -> None:
    """A mixture built an EpochRows (a permutation of every window and a cumulative sum) per
    source and pass on every batch; the plan now keeps the last CACHED_EPOCHS."""
    plan = PackingPlan(np.arange(1, 200) % 13 + 1, 8, chunk=1, window=4)
    first = plan.epoch(0)
    assert plan.epoch(0) is first
    for e in range(1, CACHED_EPOCHS + 1):
        plan.epoch(e)
    again = plan.epoch(0)  # pushed out, rebuilt: the cache stays bounded
    assert again is not first
    assert again.window_order.tolist() == first.window_order.tolist()
    assert again.row_starts.tolist() == first.row_starts.tolist()
