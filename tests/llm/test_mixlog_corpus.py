"""Corpus changes in a MixtureLog (grow, retire, add a source): each source's passes read every
document once, old and new, a retired source's unread documents are counted, the order replays
bit-identically on other data-parallel sizes, and a log with another corpus entry is refused."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dataorder.llm.blend import BlendedSampler
from dataorder.llm.mixlog import SOURCE_STRIDE, MixtureLog, SourceDatasets, split_index
from tests.helpers.corpus_logs import Action, apply, draw_actions

GBS = 12  # a multiple of every data-parallel size below (micro-batches of 1)
STEPS = 10


@st.composite
def plans(draw: Any) -> tuple[list[int], list[float], list[Action]]:
    """Sizes (0: a source added later), first weights, and the entries of a log that a running
    job appends (weights, grows, retirements, additions); only entries the log accepts."""
    k = draw(st.integers(2, 4))
    later = draw(st.sets(st.integers(1, k - 1), min_size=1, max_size=k - 1))
    sizes = [0 if d in later else draw(st.integers(1, 9)) for d in range(k)]
    weights = [0.0 if d in later else draw(st.sampled_from([1e-6, 0.3, 1.0])) for d in range(k)]
    actions, _ = draw_actions(draw, sizes, weights, STEPS, 9)
    return sizes, weights, actions


def _run(
    sizes: list[int],
    weights: list[float],
    actions: list[Action],
    chain: list[int],
    kills: list[int],
) -> tuple[list[int], BlendedSampler, MixtureLog]:
    """Run ``STEPS`` global batches, appending each entry just before its step, on the
    data-parallel sizes of ``chain`` in turn (a fresh process at each kill: the log comes back
    from its bytes, the sampler from its state): the run-wide stream."""
    stream: list[int] = []
    state: dict[str, Any] | None = None
    saved: bytes | None = None
    bounds = [0, *kills, STEPS]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        log = MixtureLog(weights, sizes=sizes)
        if saved is not None:
            log.extend_to(MixtureLog.from_bytes(saved))
        dp = chain[i % len(chain)]
        ranks = [
            BlendedSampler(sizes, log, 1, r, dp, GBS, seed=5, total_samples=10**6)
            for r in range(dp)
        ]
        if state is not None:
            for s in ranks:
                s.load_state_dict(state)
        iters = [iter(s) for s in ranks]
        for step in range(a, b):
            for action in actions:
                if action[0] == step:
                    apply(log, action)
            for _ in range(GBS // dp):
                for it in iters:
                    stream += next(it)
        state = ranks[0].state_dict()
        saved = log.to_bytes()
    return stream, ranks[0], log


def _check_passes(stream: list[int], sampler: BlendedSampler, log: MixtureLog) -> None:
    """Replay each source's reads against what the promise says (an oracle that knows only
    the draw counts at each change): within a pass no document twice, none skipped; a growth
    inside a pass adds the new documents to its unread ones; a retired source's unread ones
    are what ``retired_unread`` counts."""
    k = log.num_sources
    schedule = sampler.schedule
    changes: dict[int, list[tuple[int, str, int]]] = {d: [] for d in range(k)}
    for e in log.corpus_changes():
        assert e.source is not None
        draw = int(sampler.consumed_per_source(schedule.entry_start(e.index))[e.source])  # type: ignore[union-attr]
        changes[e.source].append((draw, e.op, e.size or 0))
    size = list(log.sizes or ())
    unread = [set(range(n)) for n in size]
    read = [0] * k  # reads of the pass under way
    drawn = [0] * k

    def catch_up(d: int) -> None:
        while changes[d] and changes[d][0][0] == drawn[d]:
            _, op, new = changes[d].pop(0)
            if op == "retire":
                continue
            if read[d] == 0 or not unread[d]:
                # nothing of the pass under way read (the run's first, or a pass just ended):
                # the growth begins a fresh pass of the new size, all of it unread until it
                # reads (a retirement there leaves it unread)
                unread[d], read[d] = set(range(new)), 0
            else:  # inside a pass: the new documents join its unread ones
                unread[d] |= set(range(size[d], new))
            size[d] = new

    # Within a global batch the slots are shuffled: a source's draws are its reads in the
    # order of its draw index (the layout's, tested elsewhere), which the passes are about.
    d_of, j_of = sampler.order.draws(np.arange(len(stream), dtype=np.int64))
    for p in np.lexsort((j_of, d_of)).tolist():
        d, doc = split_index(stream[p])
        assert d == d_of[p]
        assert j_of[p] == drawn[d]
        catch_up(d)
        if not unread[d]:  # a new pass of every document
            unread[d], read[d] = set(range(size[d])), 0
        assert doc in unread[d], (d, doc, "read twice in a pass, or not a document")
        unread[d].remove(doc)
        read[d] += 1
        drawn[d] += 1
    for d in range(k):
        catch_up(d)
        assert not changes[d], "a change at a draw the source never reached"
    retired = sampler.retired_unread(len(stream))
    assert set(retired) == set(log.retired)
    for d, count in retired.items():
        expected = len(unread[d]) if drawn[d] else size[d]
        assert count == expected, (d, count, expected)


@settings(max_examples=8, deadline=None)
@example(  # a growth at a pass boundary, then retired before the fresh pass reads
    plan=(
        [1, 1, 0],
        [1e-06, 1e-06, 0.0],
        [(1, "grow", (0, 3)), (4, "grow", (0, 4)), (9, "grow", (1, 2)), (9, "retire", (1,))],
    ),
    chain=[4, 3],
    kills=[1],
)
@given(
    plans(),
    st.sampled_from([[4, 3], [3, 2, 4], [2, 6]]),
    st.lists(st.integers(1, STEPS - 1), min_size=1, max_size=2, unique=True),
)
def test_corpus_changes_read_each_pass_once_and_replay_on_other_sizes(
    plan: tuple[list[int], list[float], list[Action]], chain: list[int], kills: list[int]
) -> None:
    sizes, weights, actions = plan
    reference, sampler, log = _run(sizes, weights, actions, [1], [])
    _check_passes(reference, sampler, log)
    resumed, _, _ = _run(sizes, weights, actions, chain, sorted(kills))
    assert resumed == reference
    # a pure function of the finished log and the position: the log built ahead reads the same
    ahead = MixtureLog(weights, sizes=sizes)
    for action in actions:
        apply(ahead, action)
    order = BlendedSampler(sizes, ahead, 1, 0, 1, GBS, seed=5, total_samples=10**6).order
    assert order.samples(np.arange(len(reference))).tolist() == reference
    # the bound of the counts against the integral of the weights still holds
    schedule = sampler.schedule
    bounds = schedule.deviation_bounds()  # type: ignore[union-attr]
    for t in range(0, len(reference) + 1, GBS):
        gap = np.abs(sampler.consumed_per_source(t) - schedule.shares(t))  # type: ignore[union-attr]
        assert (gap <= bounds + 1e-9).all(), (t, gap, bounds)


def _state_after(log: MixtureLog, sizes: list[int], steps: int) -> dict[str, Any]:
    s = BlendedSampler(sizes, log, 1, 0, 1, GBS, seed=5, total_samples=10**6)
    it = iter(s)
    for _ in range(steps * GBS):
        next(it)
    return s.state_dict()


def _grown(size: int) -> MixtureLog:
    log = MixtureLog([1, 1, 0], sizes=[6, 4, 0])
    log.grow(2, 0, size)
    log.add_source(3, 2, 5, [1, 1, 1])
    log.retire(4, 1)
    return log


def test_a_log_with_another_corpus_entry_is_refused_naming_it() -> None:
    state = _state_after(_grown(10), [6, 4, 0], 5)
    other = _grown(11)
    assert other.first_difference(_grown(10)) == 1
    with pytest.raises(ValueError, match=r"entry 1 is the first that differs"):
        BlendedSampler([6, 4, 0], other, 1, 0, 2, GBS, seed=5, total_samples=10**6).load_state_dict(
            state
        )
    fresh = MixtureLog([1, 1, 0], sizes=[6, 4, 0])
    fresh.grow(2, 0, 11)
    with pytest.raises(ValueError, match=r"its entry 1 differs"):
        fresh.extend_to(_grown(10))
    shorter = MixtureLog([1, 1, 0], sizes=[6, 4, 0])
    shorter.grow(2, 0, 10)
    with pytest.raises(ValueError, match=r"trained 4 log entries .* this log has 2 there"):
        BlendedSampler(
            [6, 4, 0], shorter, 1, 0, 2, GBS, seed=5, total_samples=10**6
        ).load_state_dict(state)
    # the first sizes are part of the first entry
    assert MixtureLog([1, 1, 0], sizes=[6, 5, 0]).first_difference(_grown(10)) == 0


def test_a_growth_inside_a_pass_reads_its_unread_documents_then_the_new_ones() -> None:
    log = MixtureLog([1], sizes=[8])
    log.grow(3, 0, 13)  # after 3 of the 8 documents of the first pass (global batches of 1)
    s = BlendedSampler([8], log, 1, 0, 1, 1, seed=2, total_samples=30)
    docs = s.order.samples(np.arange(30)).tolist()
    first = docs[:3]
    assert sorted(docs[:13]) == list(range(13))  # the pass: every document once, old and new
    assert set(docs[3:8]) == set(range(8)) - set(first)  # the unread old ones come first
    assert sorted(docs[8:13]) == list(range(8, 13))
    assert sorted(docs[13:26]) == list(range(13))  # the next pass: all 13


def test_a_growth_at_a_pass_boundary_starts_a_pass_of_the_new_size() -> None:
    log = MixtureLog([1], sizes=[6])
    log.grow(2, 0, 9)  # after exactly one pass (global batches of 3)
    s = BlendedSampler([6], log, 1, 0, 1, 3, seed=2, total_samples=30)
    docs = s.order.samples(np.arange(24)).tolist()
    assert sorted(docs[:6]) == list(range(6))
    assert sorted(docs[6:15]) == list(range(9))
    assert sorted(docs[15:24]) == list(range(9))


def test_a_retired_source_draws_nothing_new_and_counts_what_it_left_unread() -> None:
    log = MixtureLog([1, 1], sizes=[100, 50])
    log.retire(3, 1)
    s = BlendedSampler([100, 50], log, 1, 0, 1, 4, seed=0, total_samples=100)
    at_retirement = int(s.consumed_per_source(12)[1])
    later = s.consumed_per_source(80).tolist()
    assert later[1] <= at_retirement + s.schedule.deviation_bounds()[1]  # type: ignore[union-attr]
    assert s.retired_unread(80) == {1: 50 - later[1]}
    assert s.retired_unread(11) == {}  # not retired yet at sample 11
    plain = BlendedSampler([100, 50], MixtureLog([1, 1]), 1, 0, 1, 4, seed=0, total_samples=100)
    assert plain.retired_unread() == {}


def test_an_added_source_starts_a_pass_of_its_own_and_draws_nothing_before() -> None:
    log = MixtureLog([1, 0], sizes=[40, 0])
    log.add_source(2, 1, 7, [1, 1])
    s = BlendedSampler([40, 0], log, 1, 0, 1, 4, seed=1, total_samples=40)
    assert s.consumed_per_source(8).tolist() == [8, 0]
    docs = s.order.samples(np.arange(8, 40)).tolist()
    added = [split_index(x)[1] for x in docs if x >= SOURCE_STRIDE]
    assert len(added) >= 14
    assert sorted(added[:7]) == list(range(7))


def test_corpus_entries_are_refused_when_malformed_naming_the_argument() -> None:
    with pytest.raises(ValueError, match=r"grow.*|log must be a MixtureLog built with sizes"):
        MixtureLog([1, 1]).grow(1, 0, 5)
    log = MixtureLog([1, 1, 0], sizes=[3, 4, 0])
    with pytest.raises(ValueError, match=r"weights\[2\] must be 0: source 2 is of size 0"):
        log.set_weights(1, [1, 1, 1])
    with pytest.raises(ValueError, match=r"size must be .*>= 4|size must be"):
        log.grow(1, 0, 3)
    with pytest.raises(ValueError, match=r"source must be a source of positive size"):
        log.grow(1, 2, 5)
    with pytest.raises(ValueError, match=r"source must be a source declared with size 0"):
        log.add_source(1, 0, 5, [1, 1, 1])
    with pytest.raises(ValueError, match=r"source must be"):
        log.grow(1, 3, 5)
    with pytest.raises(ValueError, match=r"sizes\[1\] must be"):
        MixtureLog([1, 1], sizes=[3, -1])
    with pytest.raises(ValueError, match=r"weights\[1\] must be 0"):
        MixtureLog([1, 1], sizes=[3, 0])
    log.retire(1, 1)
    with pytest.raises(ValueError, match=r"source must be a source not retired"):
        log.grow(2, 1, 9)
    with pytest.raises(ValueError, match=r"weights\[1\] must be 0: source 1 is retired"):
        log.set_weights(2, [1, 1, 0])
    with pytest.raises(ValueError, match=r"the only one with a positive weight"):
        log.retire(2, 0)
    with pytest.raises(ValueError, match=r"sizes must be the sizes the MixtureLog was built with"):
        BlendedSampler([3, 5, 0], log, 1, 0, 1, 4, seed=0, total_samples=8)
    log.set_weights(3, [1, 0, 0])
    with pytest.raises(ValueError, match=r"step must be at least the last entry's step, 3"):
        log.grow(2, 0, 9)


def test_a_log_file_keeps_its_corpus_entries_and_an_edited_one_is_refused(tmp_path: Path) -> None:
    log = _grown(10)
    path = tmp_path / "log.npz"
    log.save(path)
    back = MixtureLog.load(path)
    assert back == log
    assert back.current_sizes == (10, 4, 5)
    assert back.retired == {1}
    assert [(e.op, e.source, e.size) for e in back.corpus_changes()] == [
        ("grow", 0, 10),
        ("add", 2, 5),
        ("retire", 1, None),
    ]
    with np.load(path) as z:
        arrays = {name: z[name] for name in z.files}
    arrays["events"][0, 3] = 12  # the growth's size: only the digest tells
    np.savez(tmp_path / "edited.npz", **arrays)
    with pytest.raises(ValueError, match=r"digest must be the digest of its entries"):
        MixtureLog.load(tmp_path / "edited.npz")


def test_source_datasets_keep_every_index_when_a_source_grows() -> None:
    a, b = ["a0", "a1"], ["b0"]
    data = SourceDatasets([a, b])
    log = MixtureLog([1, 1], sizes=[2, 1])
    log.grow(1, 0, 4)
    s = BlendedSampler([2, 1], log, 1, 0, 1, 2, seed=0, total_samples=12)
    a += ["a2", "a3"]  # the documents appended to source 0
    read: Callable[[int], str] = data.__getitem__
    got = [read(i) for i in s.order.samples(np.arange(12)).tolist()]
    assert set(got) == {"a0", "a1", "a2", "a3", "b0"}
    assert data[SOURCE_STRIDE] == "b0"  # unmoved by the growth of source 0
    with pytest.raises(ValueError, match=r"index must be a source below 2"):
        data[2 * SOURCE_STRIDE]


def test_the_state_details_show_sizes_after_the_changes_and_retired_unread() -> None:
    log = MixtureLog([1, 1, 0], sizes=[6, 4, 0])
    s = BlendedSampler([6, 4, 0], log, 1, 0, 1, 4, seed=0, total_samples=40)
    assert "source 2 not added yet" in _shown(s)
    log.add_source(1, 2, 5, [1, 1, 1])
    log.retire(2, 1)
    it = iter(s)
    for _ in range(16):
        next(it)
    unread = s.retired_unread()[1]
    assert f"retired (documents of the last pass unread): source 1: {unread}" in _shown(s)
    assert "passes over 5" in _shown(s)
    assert s.samples_dropped == 0  # the epoch of 40 reads every document of 6 + 4 + 5


def _shown(sampler: BlendedSampler) -> str:
    return "\n".join(text for _, text in sampler.describe_progress())


@pytest.mark.parametrize("grow", [True, False])
def test_a_growth_at_a_pass_boundary_then_retired_counts_the_fresh_pass(grow: bool) -> None:
    """Source 1 (2 documents) ends its 12th pass at draw 24; a growth to 4 documents there
    begins a fresh pass, which the retirement leaves wholly unread: its 4 documents are counted
    (2 of them never read at all). Without the growth no pass is under way: nothing unread."""
    log = MixtureLog([1, 0], sizes=[30, 0])
    log.add_source(1, 1, 2, [0, 1])
    log.set_weights(3, [1, 0])
    if grow:
        log.grow(4, 1, 4)
    log.retire(5, 1)
    s = BlendedSampler([30, 0], log, 1, 0, 1, 12, seed=5, total_samples=10**6)
    assert s.consumed_per_source(72).tolist() == [48, 24]
    assert s.retired_unread(72) == {1: 4 if grow else 0}
