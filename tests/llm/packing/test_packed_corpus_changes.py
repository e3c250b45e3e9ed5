"""Corpus changes (grow, retire, add a source) on a packed mixture: within each source's pass
every token of every document in play is read exactly once, old and new; a retired source's
unread tokens are counted; the order replays bit-identically on other data-parallel sizes; the
counts stay within the bound; coverage matches a listing; a mismatched log is refused."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataorder.core.batching import coverage
from dataorder.core.keys import MAX_SEED
from dataorder.core.partition import MAX_POSITIONS
from dataorder.core.state import MAX_STATE_BYTES
from dataorder.llm.mixlog import MixtureLog
from dataorder.llm.packing import PackedSampler
from dataorder.llm.packing.growth import GrowingRows
from dataorder.llm.packing.plan import MAX_CHUNK, MAX_SEQ_LEN, MAX_WINDOW
from dataorder.llm.packing.sampler import MAX_BLOCK_ROWS
from dataorder.llm.schedule import BatchSizeSchedule
from dataorder.testing import SamplerCase, check_contract
from dataorder.testing.contract import check_elastic_resume, check_epoch_partition
from tests.helpers.corpus_logs import Action, apply, draw_actions

GBS = 12  # a multiple of every data-parallel size below (micro-batches of 1)
STEPS = 9
SEQ = 32


def _lengths(seed: int, n: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 80, n).tolist()


@st.composite
def plans(draw: Any) -> tuple[list[int], list[float], list[Action], list[list[int]]]:
    """First sizes (0: added later), first weights, the entries a running job appends, and
    every source's lengths (all the documents the log will name)."""
    k = draw(st.integers(2, 3))
    later = draw(st.sets(st.integers(1, k - 1), max_size=1))
    sizes = [0 if d in later else draw(st.integers(2, 12)) for d in range(k)]
    weights = [0.0 if d in later else draw(st.sampled_from([1e-6, 0.3, 1.0])) for d in range(k)]
    actions, scratch = draw_actions(draw, sizes, weights, STEPS, 8)
    final = scratch.current_sizes or ()
    seed = draw(st.integers(0, 2**16))
    lengths = [_lengths(seed + d, max(1, final[d])) for d in range(k)]
    return sizes, weights, actions, lengths


def _make(
    lengths: list[list[int]], log: MixtureLog, rank: int, dp: int, **kw: Any
) -> PackedSampler:
    kw.setdefault("total_rows", 10**6)
    return PackedSampler(
        None, SEQ, 1, rank, dp, GBS, seed=5, mixture=(lengths, log), chunk=2, window=4, **kw
    )


def _run(
    plan: tuple[list[int], list[float], list[Action], list[list[int]]],
    chain: list[int],
    kills: list[int],
) -> tuple[list[list[Any]], PackedSampler, MixtureLog]:
    """``STEPS`` global batches, each entry appended just before its step, on the data-parallel
    sizes of ``chain`` in turn (a fresh log from its bytes and a fresh sampler from its state at
    each kill): every global batch's rows, sorted (the dealing to ranks depends on the layout)."""
    sizes, weights, actions, lengths = plan
    batches: list[list[Any]] = []
    state: dict[str, Any] | None = None
    saved: bytes | None = None
    for i, (a, b) in enumerate(itertools.pairwise([0, *kills, STEPS])):
        log = MixtureLog(weights, sizes=sizes)
        if saved is not None:
            log.extend_to(MixtureLog.from_bytes(saved))
        dp = chain[i % len(chain)]
        ranks = [_make(lengths, log, r, dp) for r in range(dp)]
        if state is not None:
            for s in ranks:
                s.load_state_dict(state)
        iters = [iter(s) for s in ranks]
        for step in range(a, b):
            for action in actions:
                if action[0] == step:
                    apply(log, action)
            rows = [row for _ in range(GBS // dp) for it in iters for row in next(it)]
            batches.append(sorted(rows))
        state = ranks[0].state_dict()
        saved = log.to_bytes()
    return batches, ranks[0], log


def _check_passes(sampler: PackedSampler, log: MixtureLog, lengths: list[list[int]]) -> None:
    """Each source's rows in draw order, against the promise (an oracle that knows only the
    draw counts at each change): in every pass each token of each document in play once; a
    growth inside a pass adds the new documents to it; a retired source's unread tokens are
    what ``retired_unread`` counts."""
    total = STEPS * GBS
    draws = sampler._packed.rows.draws  # the rows of (source, draw)
    assert isinstance(draws, GrowingRows)
    k = log.num_sources
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in lengths])[:-1]]).tolist()
    schedule = sampler.schedule
    changes: dict[int, list[tuple[int, str, int]]] = {d: [] for d in range(k)}
    for e in log.corpus_changes():
        assert e.source is not None
        at = schedule.entry_start(e.index)  # type: ignore[union-attr]
        changes[e.source].append(
            (int(sampler.consumed_per_source(at)[e.source]), e.op, e.size or 0)
        )
    size = list(log.sizes or ())
    counts = sampler.consumed_per_source(total).tolist()
    unread: list[int] = [0] * k
    for d in range(k):
        read: dict[int, list[tuple[int, int]]] = {}
        in_play = set(range(size[d]))
        tokens_read = 0
        js = np.arange(counts[d], dtype=np.int64)
        rows = draws.items(np.full(js.size, d, dtype=np.int64), js) if js.size else []
        for j in range(counts[d] + 1):
            while changes[d] and changes[d][0][0] == j:
                _, op, new = changes[d].pop(0)
                if op == "retire":
                    continue
                if tokens_read in (0, sum(lengths[d][i] for i in in_play)):
                    # the pass has not begun (or the last one is over): a pass of the new size
                    read, tokens_read, in_play = {}, 0, set(range(new))
                else:
                    in_play |= set(range(size[d], new))
                size[d] = new
            if j == counts[d]:
                break
            if tokens_read == sum(lengths[d][i] for i in in_play):  # a new pass
                read, tokens_read, in_play = {}, 0, set(range(size[d]))
            for doc, a, b in rows[j]:
                local = doc - offsets[d]
                assert local in in_play, (d, j, local, "a document not in play")
                assert 0 <= a < b <= lengths[d][local]
                for x, y in read.get(local, []):
                    assert b <= x or y <= a, (d, j, local, "a token read twice in a pass")
                read.setdefault(local, []).append((a, b))
                tokens_read += b - a
        assert not changes[d], "a change at a draw the source never reached"
        whole = sum(lengths[d][i] for i in in_play)
        unread[d] = whole - tokens_read if counts[d] else whole
    retired = sampler.retired_unread(total)
    assert set(retired) == set(log.retired)
    for d, tokens in retired.items():
        assert tokens == unread[d], (d, tokens, unread[d])


@settings(max_examples=3, deadline=None)
@given(
    plans(),
    st.sampled_from([[4, 3], [3, 2, 4], [2, 6]]),
    st.lists(st.integers(1, STEPS - 1), min_size=1, max_size=2, unique=True),
)
def test_packed_corpus_changes_read_each_pass_once_and_replay_on_other_sizes(
    plan: tuple[list[int], list[float], list[Action], list[list[int]]],
    chain: list[int],
    kills: list[int],
) -> None:
    reference, sampler, log = _run(plan, [1], [])
    _check_passes(sampler, log, plan[3])
    # the rows of the whole run looked up at once (the vectorised walk through the growths)
    # are the ones the run read a global batch at a time (the walk row by row)
    d, j = sampler.order.draws(np.arange(STEPS * GBS, dtype=np.int64))
    rows = sampler._packed.rows.draws.items(d, j)
    assert [sorted(rows[k : k + GBS]) for k in range(0, len(rows), GBS)] == reference
    resumed, _, _ = _run(plan, chain, sorted(kills))
    assert resumed == reference
    # a pure function of the finished log and the position: the log built ahead reads the same
    ahead = MixtureLog(plan[1], sizes=plan[0])
    for action in plan[2]:
        apply(ahead, action)
    again = _make(plan[3], ahead, 0, 1)
    got = [sorted(again.batch_at(step * GBS + i)[0] for i in range(GBS)) for step in range(STEPS)]
    assert [sorted(b) for b in got] == reference
    # the bound of the rows given against the integral of the weights still holds
    schedule = sampler.schedule
    bounds = schedule.deviation_bounds()  # type: ignore[union-attr]
    for t in range(0, STEPS * GBS + 1, GBS):
        gap = np.abs(sampler.consumed_per_source(t) - schedule.shares(t))  # type: ignore[union-attr]
        assert (gap <= bounds + 1e-9).all(), (t, gap, bounds)


# -- fixed logs --------------------------------------------------------------------------------

WEB = _lengths(11, 30)
CODE = _lengths(12, 24)
MATH = _lengths(13, 16)


def _grown_log() -> MixtureLog:
    """Source 0 starts with 18 of its 30 documents, grows twice inside a pass; source 2 is added
    at step 2; source 1 is retired at step 5."""
    log = MixtureLog([1, 1, 0], sizes=[18, 24, 0])
    log.grow(1, 0, 24)
    log.add_source(2, 2, 16, [1, 1, 1])
    log.grow(3, 0, 30)
    log.retire(5, 1)
    return log


def _grown(rank: int, dp: int, **kw: Any) -> PackedSampler:
    kw.setdefault("total_rows", 48)
    return _make([WEB, CODE, MATH], _grown_log(), rank, dp, **kw)


def _listed_coverage(sampler: PackedSampler, epoch: int) -> tuple[int, int]:
    """``(tokens_dropped, tokens_padded)`` of an epoch from its rows, listed (the brute force):
    the documents the log names by the epoch's end are the universe."""
    first, end = sampler.order.epoch_bounds(epoch)
    rows = [sampler.batch_at(p, epoch=epoch)[0] for p in range(end - first)]  # one row a step
    spans = np.array([x for row in rows for x in row], dtype=np.int64).reshape(-1, 3)
    c = coverage((spans[:, 0], spans[:, 1], spans[:, 2]))
    draws = sampler._packed.rows.draws
    assert isinstance(draws, GrowingRows)
    universe = sum(sum(x[:n]) for x, n in zip([WEB, CODE, MATH], draws.sizes_at(end), strict=True))
    return universe - c.distinct, c.repeated + len(rows) * SEQ - c.units


@pytest.mark.parametrize("total_rows", [48, 144])
def test_packed_coverage_over_grown_passes_matches_a_listing(total_rows: int) -> None:
    # 144 rows an epoch: epoch 0 reads a pass of source 0 grown twice and part of the next
    s = _grown(0, 1, total_rows=total_rows)
    for epoch in range(3):
        s.set_epoch(epoch)
        assert (s.tokens_dropped, s.tokens_padded) == _listed_coverage(s, epoch), epoch


def test_a_growth_inside_a_pass_spreads_the_new_documents_over_its_rest() -> None:
    # the rest of the pass interleaves the unread rows with the new documents' rows: the new
    # documents are not all read at the end of the pass
    s = _grown(0, 1)
    draws = s._packed.rows.draws
    assert isinstance(draws, GrowingRows)
    assert len(draws.passes()[0][2].growths) == 2  # the second growth lands in the same pass
    rec = draws.passes()[0][1]  # after the first growth
    assert rec.growths
    assert rec.start == 0
    at = rec.growths[0].at
    j = np.arange(at, rec.length, dtype=np.int64)
    rows = draws.items(np.zeros(j.size, dtype=np.int64), j)
    new = [any(18 <= doc < 24 for doc, _, _ in row) for row in rows]
    assert any(new)
    assert not all(new[-sum(new) :])  # not appended after the unread rows
    assert not all(new[: sum(new)])


def test_packed_retired_unread_counts_tokens_of_the_last_pass() -> None:
    s = _grown(0, 1, total_rows=10**6)
    it = iter(s)
    for _ in range(5 * GBS):
        next(it)
    assert set(s.retired_unread()) == {1}  # from the start of its entry (step 5) on
    assert s.retired_unread(5 * GBS - 1) == {}
    for _ in range(3 * GBS):
        next(it)
    unread = s.retired_unread()
    assert set(unread) == {1}
    draws = s._packed.rows.draws
    assert isinstance(draws, GrowingRows)
    given = int(s.consumed_per_source()[1])
    read = sum(
        b - a for row in draws.items(np.ones(given, np.int64), np.arange(given)) for _, a, b in row
    )
    per_pass = draws.plan(1, 24).rows_per_epoch
    passes, rem = divmod(given, per_pass)
    expected = 0 if rem == 0 else sum(CODE) * (passes + 1) - read
    assert unread[1] == expected
    assert _make([WEB, CODE], MixtureLog([1, 1], sizes=[30, 24]), 0, 1).retired_unread() == {}


def test_a_resume_with_another_corpus_entry_is_refused_naming_it() -> None:
    s = _grown(0, 2)
    it = iter(s)
    for _ in range(4 * GBS // 2):
        next(it)
    state = s.state_dict()
    other = MixtureLog([1, 1, 0], sizes=[18, 24, 0])
    other.grow(1, 0, 25)  # another size, then the same entries
    other.add_source(2, 2, 16, [1, 1, 1])
    other.grow(3, 0, 30)
    other.retire(5, 1)
    with pytest.raises(ValueError, match=r"entry 1"):
        _make([WEB, CODE, MATH], other, 0, 2, total_rows=48).load_state_dict(state)


def test_a_resume_over_other_lengths_of_the_grown_documents_is_refused() -> None:
    """A state binds the lengths of the documents in play at its position: past the growth to
    30 (step 3), another length for one of its documents is refused, naming the key."""
    s = _grown(0, 1)
    it = iter(s)
    for _ in range(4 * GBS):
        next(it)
    other = [*WEB[:-1], WEB[-1] + 1]  # a document of the last growth differs
    with pytest.raises(ValueError, match=r"state\['mixture'\].*lengths differ"):
        _make([other, CODE, MATH], _grown_log(), 0, 1, total_rows=48).load_state_dict(
            s.state_dict()
        )
    first = [WEB[0] + 1, *WEB[1:]]  # a document of the first sizes differs
    with pytest.raises(ValueError, match=r"another configuration: lengths"):
        _make([first, CODE, MATH], _grown_log(), 0, 1, total_rows=48).load_state_dict(
            s.state_dict()
        )


def test_a_state_before_a_growth_loads_over_other_lengths_of_documents_not_in_play() -> None:
    s = _grown(0, 1)
    next(iter(s))  # step 0: the growth to 30 (step 3) has not started
    other = [*WEB[:-1], WEB[-1] + 1]
    _make([other, CODE, MATH], _grown_log(), 0, 1, total_rows=48).load_state_dict(s.state_dict())


def _rows_from(sampler: PackedSampler, steps: int) -> list[Any]:
    it = iter(sampler)
    return [next(it) for _ in range(steps)]


@pytest.mark.parametrize("dp", [2, 3])
def test_a_job_resumes_with_longer_lengths_when_its_corpus_grows(dp: int) -> None:
    """The crawl case: a job packs the 18 documents of source 0 it has, trains 4 global
    batches and stops; its corpus has grown to 30 documents, so it restarts with the longer
    lengths and a log that grows source 0 at step 6, from the old state, on ``dp`` ranks: the
    rows it reads are the uninterrupted run's (given all 30 lengths and the same log)."""
    first = MixtureLog([1, 1], sizes=[18, 24])
    old = [_make([WEB[:18], CODE], first, r, 2, total_rows=10**6) for r in range(2)]
    for s in old:
        _rows_from(s, 4 * GBS // 2)
    state = old[0].state_dict()
    grown = MixtureLog.from_bytes(first.to_bytes())
    grown.grow(6, 0, 30)
    resumed = [_make([WEB, CODE], grown, r, dp, total_rows=10**6) for r in range(dp)]
    whole = [_make([WEB, CODE], grown, r, dp, total_rows=10**6) for r in range(dp)]
    for r in range(dp):
        resumed[r].load_state_dict(state)
        whole[r].load_state_dict(whole[r].state_at(0, 4 * GBS // dp))
    got = [_rows_from(s, 6 * GBS // dp) for s in resumed]
    want = [_rows_from(s, 6 * GBS // dp) for s in whole]
    assert got == want
    ids = {span[0] for rank in got for batch in rank for row in batch for span in row}
    assert ids & set(range(18, 30))  # the new documents are read after the growth
    before, after = state["mixture"], resumed[0].state_dict()["mixture"]
    assert before.rpartition("/")[2] != after.rpartition("/")[2]  # the new lengths are bound


def test_the_progress_shows_rows_per_pass_after_the_changes_and_retired_unread_tokens() -> None:
    s = _grown(0, 1, total_rows=10**6)
    shown = "\n".join(text for _, text in s.describe_progress())
    assert "source 2 not added yet" in shown
    it = iter(s)
    for _ in range(7 * GBS):
        next(it)
    draws = s._packed.rows.draws
    assert isinstance(draws, GrowingRows)
    shown = "\n".join(text for _, text in s.describe_progress())
    rows = draws.plan(0, 30).rows_per_epoch
    assert f"passes over {rows})" in shown
    unread = s.retired_unread()[1]
    assert f"retired (tokens of the last pass unread): source 1: {unread}" in shown


def test_a_log_naming_documents_the_lengths_lack_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"mixture\[0\]\[1\] must be the lengths of at least the 25"
    ):
        _make([WEB, CODE], MixtureLog([1, 1], sizes=[30, 25]), 0, 1)
    log = MixtureLog([1, 1], sizes=[30, 24])
    s = _make([WEB, CODE], log, 0, 1)
    log.grow(2, 1, 40)  # appended while running, past the 24 documents of CODE
    with pytest.raises(ValueError, match=r"mixture\[1\] must be .*entry 1 \(grow at step 2\).*40"):
        s.batch_at(3 * GBS)


def test_a_growth_at_a_pass_boundary_then_retired_counts_the_whole_new_pass() -> None:
    # source 1 reads whole passes of 2 documents, stops being drawn at a pass boundary, grows
    # to 4 documents there (a fresh pass of 4) and is retired: none of the 4 was read in it
    log = MixtureLog([1, 0], sizes=[30, 0])
    log.add_source(1, 1, 2, [0, 1])
    log.set_weights(3, [1, 0])
    log.grow(4, 1, 4)
    log.retire(5, 1)
    s = _make([WEB, CODE[:4]], log, 0, 1)
    given = int(s.consumed_per_source(6 * GBS)[1])
    draws = s._packed.rows.draws
    assert isinstance(draws, GrowingRows)
    assert given % draws.plan(1, 2).rows_per_epoch == 0  # a boundary of its passes of 2
    assert s.retired_unread(6 * GBS) == {1: sum(CODE[:4])}


def test_retired_unread_refuses_a_negative_row_count_naming_it() -> None:
    with pytest.raises(ValueError, match=r"rows must be a non-negative int; got rows=-1"):
        _grown(0, 1).retired_unread(-1)


def test_an_added_source_that_packs_into_no_row_is_refused_naming_the_entry() -> None:
    log = MixtureLog([1, 0], sizes=[30, 0])
    log.add_source(1, 1, 2, [1, 1])
    s = _make([WEB, [0, 0, 5]], log, 0, 1, split="never")
    with pytest.raises(ValueError, match=r"entry 1 \(add\)"):
        s.batch_at(2 * GBS)


def test_a_packed_blend_over_a_log_without_changes_reads_as_without_sizes() -> None:
    # a log with sizes but no corpus change reads the rows of the same log without sizes
    a = _make([WEB, CODE], MixtureLog([1, 2], sizes=[30, 24]), 0, 1)
    b = _make([WEB, CODE], MixtureLog([1, 2]), 0, 1)
    assert [a.batch_at(i) for i in range(40)] == [b.batch_at(i) for i in range(40)]


def _contract_case() -> SamplerCase:
    # every change lands in epoch 0, so each epoch's universe is every document given
    return SamplerCase(
        name="packed-corpus-changes",
        make=lambda rank, dp: _grown(rank, dp, total_rows=72),
        dataset_size=len(WEB) + len(CODE) + len(MATH),
        dp_size=4,
        elastic_dp_sizes=(3,),
        extents=WEB + CODE + MATH,
    )


def test_epochs_of_a_packed_blend_with_corpus_changes_partition_and_resume_elastically() -> None:
    case = _contract_case()
    check_epoch_partition(case, epoch=0)  # the epoch of every change
    check_epoch_partition(case, epoch=2)
    check_elastic_resume(case, 3)


@pytest.mark.slow
def test_the_contract_on_a_packed_blend_with_corpus_changes() -> None:
    assert check_contract(_contract_case(), resume_points=6, recipes=()) == []


def test_a_state_over_corpus_changes_at_every_cap_fits_the_state_bound() -> None:
    """The lengths the changes bring in add 9 characters to the ``mixture`` tag: a packed state at
    every cap (seq_len, window, chunk, seed, 2**18 ranks, a batch-size schedule, epochs of 2**62
    rows: its last epoch, its last row) with a tag naming 2**62 entries still fits
    MAX_STATE_BYTES (fewer rows an epoch allow more epochs: as many digits in all)."""
    log = MixtureLog([1, 1], sizes=[3, 3])
    log.grow(1, 1, 4)
    docs = [2**31 - 1, 5, 7, 3]
    gbs = MAX_POSITIONS
    s = PackedSampler(
        None, MAX_SEQ_LEN, 1, MAX_BLOCK_ROWS - 1, MAX_BLOCK_ROWS,
        BatchSizeSchedule([(0, gbs), (MAX_POSITIONS, gbs)]), seed=MAX_SEED, window=MAX_WINDOW,
        chunk=MAX_CHUNK, split="never", long_documents="drop", mixture=([docs, docs], log),
        total_rows=MAX_POSITIONS,
    )  # fmt: skip
    state = s.state_dict()
    grown = state["mixture"].rpartition("/")[2]
    assert len(grown) == 8
    worst = dict(state, consumed=MAX_POSITIONS, epoch=s.max_epoch)
    worst["mixture"] = f"{2**62}:{'f' * 16}:{'f' * 32}/{grown}"
    assert len(json.dumps(worst, separators=(",", ":"))) <= MAX_STATE_BYTES


@pytest.mark.parametrize(("dp", "extra"), [(1, 0), (3, 0), (4, 0), (6, 0), (1, 1), (2, 1)])
def test_every_way_back_in_reads_the_same_rows_past_the_corpus_changes(dp: int, extra: int) -> None:
    """A state saved on 2 ranks after 4 global batches (every change but the retirement
    started), or one micro-step further: a load (twice), ``from_state``, the run-wide count and
    a snapshot two steps older moved on by ``state_after`` all continue with the same rows."""
    s = _grown(0, 2, total_rows=10**6)
    it = iter(s)
    steps = 4 * GBS // 2 + extra
    for _ in range(steps):
        next(it)
    state = s.state_dict()

    def fresh(rank: int, **kw: Any) -> PackedSampler:
        return _make([WEB, CODE, MATH], _grown_log(), rank, dp, total_rows=10**6, **kw)

    loaded, snapshot = [fresh(r) for r in range(dp)], [fresh(r) for r in range(dp)]
    for x in loaded:
        x.load_state_dict(state)
        x.load_state_dict(state)
    for x in snapshot:
        x.load_state_dict(s.state_after(s.state_at(0, steps - 2), 2))
    counted = [fresh(r, consumed_samples=s.consumed_samples) for r in range(dp)]
    rebuilt = [
        PackedSampler.from_state(
            state, mixture=([WEB, CODE, MATH], _grown_log()), data_parallel_rank=r,
            data_parallel_size=dp,
        )
        for r in range(dp)
    ]  # fmt: skip

    def rows(ranks: list[PackedSampler]) -> list[list[Any]]:
        return [[next(i) for _ in range(3)] for i in map(iter, ranks)]

    want = rows(loaded)
    assert rows(snapshot) == want
    assert rows(counted) == want
    assert rows(rebuilt) == want


@pytest.mark.parametrize("edit", ["drop", "other", "int", "huge", "empty"])
def test_an_edited_mixture_tag_over_corpus_changes_is_refused_naming_it(edit: str) -> None:
    s = _grown(0, 1)
    it = iter(s)
    for _ in range(4 * GBS):
        next(it)
    state = s.state_dict()
    tag, _, grown = state["mixture"].rpartition("/")
    state["mixture"] = {
        "drop": tag,
        "other": f"{tag}/{'0' * 8 if grown != '0' * 8 else '1' * 8}",
        "int": 7,
        "huge": 2**80,
        "empty": "",
    }[edit]
    fresh = _grown(0, 1)
    before = fresh.state_dict()
    with pytest.raises(ValueError, match=r"state\['mixture'\]"):
        fresh.load_state_dict(state)
    assert fresh.state_dict() == before  # a refused state moves nothing


def test_growing_rows_refuse_an_uncompiled_log_naming_it() -> None:
    """GrowingRows reads the log's counts as the sampler compiled them: a bare MixtureLog is a
    TypeError naming ``mixture``, not an AttributeError deep inside."""
    plans = _grown(0, 1).plans
    with pytest.raises(TypeError, match=r"mixture must be a LogMixture.*got mixture='MixtureLog'"):
        GrowingRows(plans, lambda lengths, seed: plans[0], _grown_log())


def test_a_moved_position_over_corpus_changes_is_refused_naming_the_state_keys() -> None:
    """A state whose epoch is edited lands where the log's trained tag no longer matches: the
    refusal names the position's keys, which may be what the user edited."""
    s = _grown(0, 2)
    it = iter(s)
    for _ in range(3):
        next(it)
    state = s.state_dict()
    state["epoch"] += 1
    with pytest.raises(
        ValueError, match=r"\(the saved row: state\['epoch'\]=1, state\['consumed'\]="
    ):
        _grown(0, 2).load_state_dict(state)
