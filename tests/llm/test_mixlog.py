"""MixtureLog: counts that track the integral of logged weights, a pure-function order over a log
that a running job appends to, elastic resumes, refusals, files and the broadcast helper."""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataorder.core.apportion import MAX_TOTAL
from dataorder.core.state import MAX_STATE_BYTES
from dataorder.integrations.dcp import OrderState
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.mixlog import LogMixture, MixtureLog
from dataorder.llm.schedule import BatchSizeSchedule

# -- random logs ---------------------------------------------------------------------------------

WEIGHT = st.one_of(st.just(0.0), st.just(1e-6), st.just(1.0), st.floats(0.0, 1.0, allow_nan=False))


@st.composite
def logs(draw: Any, max_sources: int = 200, max_entries: int = 40) -> tuple[MixtureLog, int]:
    """A log over K sources with random steps and weights (0, 1e-6 and 1 included), and the
    last step it holds."""
    k = draw(st.integers(1, max_sources))

    def vector() -> list[float]:
        w = [draw(WEIGHT) for _ in range(min(k, 6))] + [draw(WEIGHT)] * (k - min(k, 6))
        if not any(w):
            w[draw(st.integers(0, k - 1))] = 1.0
        return w

    log = MixtureLog(vector())
    step = 0
    for _ in range(draw(st.integers(0, max_entries))):
        step += draw(st.integers(0, 5))
        log.set_weights(step, vector())
    return log, step


def exact_shares(log: MixtureLog, batches: BatchSizeSchedule, t: int) -> list[Fraction]:
    """The integral of the logged (quantised) weights over samples [0, t), from the entries."""
    starts = [batches.consumed_samples(int(s)) for s in log.steps]
    out = [Fraction(0)] * log.num_sources
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else None
        stop = t if end is None else min(t, end)
        if stop <= start:
            continue
        units = log.units[i].tolist()
        out = [o + Fraction(u * (stop - start), MAX_TOTAL) for o, u in zip(out, units, strict=True)]
    return out


@settings(max_examples=25, deadline=None)
@given(logs(), st.integers(1, 9), st.randoms(use_true_random=False))
def test_counts_track_the_integral_within_the_stated_bound_on_random_logs(
    drawn: tuple[MixtureLog, int], gbs: int, rnd: Any
) -> None:
    log, last = drawn
    batches = BatchSizeSchedule.constant(gbs)
    mix = log.compile(0, batches)
    bound = mix.deviation_bounds()
    depth = int(np.ceil(np.log2(log.num_sources))) if log.num_sources > 1 else 0
    assert bound.max() <= depth * (depth + 1) / 4
    boundaries = sorted(
        {0, (last + 3) * gbs, *(rnd.randrange((last + 3) * gbs) for _ in range(30))}
    )
    boundaries = sorted({b - b % gbs for b in boundaries})
    previous = np.zeros(log.num_sources, dtype=np.int64)
    for t in boundaries:
        counts = mix.counts(t)
        assert int(counts.sum()) == t
        assert (counts >= previous).all(), (t, counts, previous)
        previous = counts
        shares = exact_shares(log, batches, t)
        for d in range(log.num_sources):
            assert abs(Fraction(int(counts[d])) - shares[d]) <= Fraction(bound[d]), (t, d)
    # the vectorised path agrees with the scalar one
    assert (mix.counts_at(boundaries) == np.array([mix.counts(t) for t in boundaries])).all()


def test_the_bound_does_not_grow_with_the_number_of_entries() -> None:
    """10**4 entries that swing the weights at every global batch: every source stays within
    its bound at every boundary, and the worst deviation of the last thousand batches is no
    larger than that of the first thousand's bound."""
    rng = np.random.default_rng(5)
    log = MixtureLog([1, 1, 1, 1, 1])
    for step in range(1, 10_000):
        w = rng.random(5) ** 3
        w[rng.random(5) < 0.3] = 0.0
        w[rng.integers(5)] += 1e-6
        log.set_weights(step, w.tolist())
    batches = BatchSizeSchedule.constant(3)
    mix = log.compile(0, batches)
    ts = np.arange(0, 10_001 * 3, 3)
    counts = mix.counts_at(ts)
    units = log.units.astype(np.float64) / MAX_TOTAL
    shares = np.vstack([np.zeros(5), np.cumsum(units * 3, axis=0)])
    deviation = np.abs(counts - shares[: len(ts)])
    assert (deviation <= mix.deviation_bounds() + 1e-6).all()
    assert (np.diff(counts, axis=0) >= 0).all()
    assert deviation[-1000:].max() <= mix.deviation_bounds().max()


def reference_bases(
    log: MixtureLog, batches: BatchSizeSchedule, nodes: list[tuple[int, ...]]
) -> list[tuple[list[int], list[int]]]:
    """Each segment's starting counts and scaled errors, walked per entry in Python integers
    (the computation the int64 level walk replaced: NOTE [ Segment bases in int64 ])."""
    k, d = log.num_sources, MAX_TOTAL
    starts, entries = [], []
    for i, step in enumerate(log.steps.tolist()):
        pos = batches.consumed_samples(step)
        if starts and starts[-1] == pos:
            entries[-1] = i
        else:
            starts.append(pos)
            entries.append(i)
    bases = [([0] * k, [0] * k)]
    for s in range(len(starts) - 1):
        counts, errors = bases[-1]
        units = [int(u) for u in log.units[entries[s]].tolist()]
        length = starts[s + 1] - starts[s]
        pu, pe = [0], [0]
        for u, e in zip(units, errors, strict=True):
            pu.append(pu[-1] + u)
            pe.append(pe[-1] + e)
        c = [0] * (2 * k - 1)
        c[-1] = length
        for v, a, b, lo, mid, hi in nodes:
            ua, uv = pu[mid] - pu[lo], pu[hi] - pu[lo]
            ev, ea = pe[hi] - pe[lo], pe[mid] - pe[lo]
            if uv == 0:
                ua, uv = 1, 2
            n = c[v]
            x = (2 * ua * d * n + uv * d + 2 * ua * ev - 2 * uv * ea) // (2 * uv * d)
            c[a] = min(max(x, 0), n)
            c[b] = n - c[a]
        bases.append(
            (
                [x + y for x, y in zip(counts, c[:k], strict=True)],
                [e + y * d - u * length for e, y, u in zip(errors, c[:k], units, strict=True)],
            )
        )
    return bases


def assert_bases_match_the_reference(log: MixtureLog, batches: BatchSizeSchedule) -> None:
    mix = log.compile(0, batches)
    mix.counts(mix.entry_start(len(log) - 1))  # builds every segment base
    got = [(c.tolist(), e.tolist()) for c, e in zip(mix._base_c, mix._base_e, strict=True)]
    assert got == reference_bases(log, batches, mix._nodes)


@settings(max_examples=30, deadline=None)
@given(logs(max_entries=25), st.integers(0, 3), st.randoms(use_true_random=False))
def test_segment_bases_equal_the_per_entry_walk_in_python_integers(
    drawn: tuple[MixtureLog, int], scale: int, rnd: Any
) -> None:
    """The int64 level walk gives every segment's base exactly as the per-entry walk in Python
    integers does, for segments of a few samples up to 2**45 (batches up to 2**30)."""
    log, last = drawn
    sizes = [1, 7, 2**17 + 3, 2**30][scale]
    batches = BatchSizeSchedule.from_step_schedule(
        " ".join(f"{step}:{rnd.randint(1, sizes)}" for step in range(0, last + 1, 3))
    )
    assert_bases_match_the_reference(log, batches)


def test_segment_bases_are_exact_for_segments_near_the_largest_position() -> None:
    """Segments of 2**61 samples: the float estimate inside the int64 walk is off by
    thousands there, and the exact correction still gives the per-entry walk's bases."""
    rng = np.random.default_rng(11)
    log = MixtureLog((rng.random(37) ** 3).tolist())
    log.set_weights(1, [0.0] * 36 + [1.0])
    log.set_weights(2, (rng.random(37) ** 5).tolist())
    log.set_weights(3, [1e-6] * 18 + [1.0] * 19)
    assert_bases_match_the_reference(log, BatchSizeSchedule.constant(2**60 + 12345))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, MAX_TOTAL),
    st.integers(-(2**45), 2**45),
    st.integers(0, 2**62),
    st.integers(-3, 3),
)
def test_the_int64_quota_is_exact_at_the_boundaries_of_the_floor(
    ua: int, ev: int, n: int, r: int
) -> None:
    """Errors chosen so that the quota's quotient lands within 2**40 of an integer (its low
    bits then decide the floor): the int64 walk of a two-source tree gives the Python-integer
    quota and split."""
    d = MAX_TOTAL
    uv = d if ua else 2  # the sources' units sum to 2**40 (a zero first weight: rho = 1/2)
    big, quotient = 2**40 * uv, 2**40 * ua * n + 2**39 * uv + ua * ev
    target = quotient % 2**40 + (r % 2) * (big - 2**40)  # P mod Q near 0 or near Q
    ea = ((quotient - target) // uv) % 2**40
    ea -= 2**40 if ea >= 2**39 else 0
    ea += r // 2  # and a few units either side
    x = (2 * ua * d * n + uv * d + 2 * ua * ev - 2 * uv * ea) // (2 * uv * d)
    want = min(max(x, 0), n)
    walk = MixtureLog([1, 1]).compile(0, BatchSizeSchedule.constant(1))._walk
    units = np.array([ua, d - ua], dtype=np.int64)
    errors = np.array([ea, ev - ea], dtype=np.int64)
    assert walk.local(units, errors, n).tolist() == [want, n - want]


def test_segment_bases_over_200_sources_and_many_entries_equal_the_reference() -> None:
    rng = np.random.default_rng(3)
    w = rng.random((300, 200)) ** 3
    w[rng.random((300, 200)) < 0.2] = 0.0
    log = MixtureLog(w[0].tolist())
    for step in range(1, 300):
        log.set_weights(step, w[step].tolist())
    assert_bases_match_the_reference(log, BatchSizeSchedule.constant(64))


def test_appending_never_moves_the_units_already_logged() -> None:
    """The units live in fixed blocks: an append past a block's end adds a block and leaves the
    earlier ones where they are (no copy of the whole log), and every entry reads back."""
    rng = np.random.default_rng(2)
    w = rng.random((2 * 1024 + 5, 3))
    log = MixtureLog(w[0].tolist())
    first = log._blocks[0]
    for step in range(1, len(w)):
        log.set_weights(step, w[step].tolist())
    assert log._blocks[0] is first
    assert len(log._blocks) == 3
    again = MixtureLog.from_bytes(log.to_bytes())
    assert (again.units == log.units).all()
    assert log.units.shape == (len(w), 3)
    assert log.entry(2000).units == tuple(log.units[2000].tolist())
    assert log.entry(2000).units == MixtureLog(w[2000].tolist()).entry(0).units


def test_a_zero_weight_draws_nothing_new_and_a_tiny_one_is_not_rounded_away() -> None:
    log = MixtureLog([1, 0, 1e-6])
    mix = log.compile(0, BatchSizeSchedule.constant(10))
    assert mix.counts(10**6).tolist()[1] == 0
    assert mix.counts(2 * 10**6)[2] >= 1


def test_appending_never_changes_what_was_computed() -> None:
    log = MixtureLog([3, 1, 1])
    mix = log.compile(0, BatchSizeSchedule.constant(8))
    before = mix.counts_at(np.arange(0, 41, 8))
    log.set_weights(5, [0, 0, 1])
    log.set_weights(9, [1, 5, 0])
    assert (mix.counts_at(np.arange(0, 41, 8)) == before).all()
    assert (mix.counts(48) - mix.counts(40)).tolist() == [0, 0, 8]


# -- refusals ------------------------------------------------------------------------------------


def test_an_entry_for_a_begun_global_batch_is_refused() -> None:
    log = MixtureLog([1, 1])
    mix = log.compile(0, BatchSizeSchedule.constant(4))
    mix.counts_at([8, 12])  # global batch 2 laid out: steps 0..2 are frozen
    with pytest.raises(ValueError, match=r"step must be at least 3: .* begun global batch 2"):
        log.set_weights(2, [1, 0])
    log.set_weights(3, [1, 0])
    with pytest.raises(ValueError, match=r"at least the last entry's step, 3 .* append-only"):
        log.set_weights(1, [1, 0])


@pytest.mark.parametrize(
    ("weights", "error", "message"),
    [
        (
            [1, 2, 3],
            ValueError,
            r"len\(weights\) must be the number of sources, 2; got len\(weights\)=3",
        ),
        ([0, 0], ValueError, r"weights must be a non-empty sequence with a positive entry"),
        ([1, -1], ValueError, r"weights\[1\] must be a finite non-negative real"),
        ([1, float("nan")], ValueError, r"weights\[1\] must be a finite non-negative real"),
        ("ab", TypeError, r"weights must be a sequence"),
        ([1, "x"], TypeError, r"weights\[1\] must be a real number"),
    ],
)
def test_malformed_weights_are_named(weights: Any, error: type, message: str) -> None:
    log = MixtureLog([1, 1])
    with pytest.raises(error, match=message):
        log.set_weights(1, weights)
    assert len(log) == 1


def test_a_sampler_refuses_a_log_over_other_sources() -> None:
    with pytest.raises(ValueError, match=r"weights must be a MixtureLog over len\(sizes\) = 3"):
        BlendedSampler([4, 4, 4], MixtureLog([1, 1]), 1, 0, 1, 4, seed=0)


# -- the sampler: online appends, resumes, elastic ------------------------------------------------

SIZES = [7, 13, 29]
GBS = 40


def _decisions(seed: int, steps: int) -> dict[int, list[float]]:
    rng = np.random.default_rng(seed)
    out = {}
    for step in sorted(set(rng.integers(1, steps, size=steps // 3).tolist())):
        w = rng.random(3)
        w[rng.random(3) < 0.25] = 0.0
        if rng.random() < 0.2:
            w[rng.integers(3)] = 1e-6
        out[step] = w.tolist() if w.any() else [1.0, 0.0, 0.0]
    return out


def _make(log: MixtureLog, rank: int, dp: int) -> BlendedSampler:
    return BlendedSampler(SIZES, log, 1, rank, dp, GBS, seed=3, total_samples=10**6)


def _train(
    log: MixtureLog, dp: int, first: int, stop: int, decisions: dict[int, list[float]], state: Any
) -> tuple[list[int], dict[str, Any]]:
    """Global steps ``first .. stop - 1`` on ``dp`` ranks (one process, shared log), appending
    each decision just before its step: the run-wide stream and the state after."""
    ranks = [_make(log, r, dp) for r in range(dp)]
    if state is not None:
        for s in ranks:
            s.load_state_dict(state)
    iters = [iter(s) for s in ranks]
    stream: list[int] = []
    for step in range(first, stop):
        if step in decisions:
            log.set_weights(step, decisions[step])
        for _ in range(GBS // dp):
            for it in iters:
                stream += next(it)
    return stream, ranks[0].state_dict()


@settings(max_examples=3, deadline=None)
@given(st.integers(0, 2**16), st.lists(st.integers(1, 11), min_size=1, max_size=3, unique=True))
def test_an_online_run_resumed_on_other_sizes_reads_the_uninterrupted_order(
    seed: int, kills: list[int]
) -> None:
    steps = 12
    decisions = _decisions(seed, steps)
    reference, _ = _train(MixtureLog([1, 1, 1]), 8, 0, steps, decisions, None)
    stream: list[int] = []
    state = None
    saved: bytes | None = None
    sizes = [8, 5, 4, 2]
    bounds = [0, *sorted(kills), steps]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        log = MixtureLog([1, 1, 1])  # a fresh process: the log comes from the checkpoint
        if saved is not None:
            log.extend_to(MixtureLog.from_bytes(saved))
        part, state = _train(log, sizes[i % len(sizes)], a, b, decisions, state)
        stream += part
        saved = log.to_bytes()
    assert stream == reference


def test_the_state_holds_the_log_length_and_digest_and_stays_small() -> None:
    log = MixtureLog([1, 1, 1])
    _, state = _train(log, 2, 0, 4, {2: [1, 0, 1]}, None)
    assert state["mixture"] == f"2:{log.digest(2)}:{log.digest(1)[:8]}"
    worst = dict(state, consumed=2**62, mixture=f"{2**62}:{'f' * 16}:{'f' * 32}", epoch=2**32 - 1)
    worst["config.seed"] = 2**63 - 1
    assert len(json.dumps(worst, separators=(",", ":"))) <= MAX_STATE_BYTES


def test_a_resume_with_another_log_is_refused_naming_the_entry() -> None:
    decisions = {3: [1, 0, 1], 6: [0, 1, 1]}
    log = MixtureLog([1, 1, 1])
    _, state = _train(log, 4, 0, 9, decisions, None)
    other = MixtureLog([1, 1, 1])
    other.set_weights(3, [1, 0, 1])
    with pytest.raises(ValueError, match=r"trained 3 log entries .* this log has 2 there; entry 2"):
        _make(other, 0, 5).load_state_dict(state)
    other.set_weights(6, [0, 1, 2])
    with pytest.raises(ValueError, match=r"entry 2 is the first that differs \(the state's"):
        _make(other, 0, 5).load_state_dict(state)
    old = {**state, "mixture": ":".join(state["mixture"].split(":")[:2])}  # an older state
    with pytest.raises(ValueError, match=r"one of entries 0\.\.2 differs \(compare"):
        _make(other, 0, 5).load_state_dict(old)
    longer = MixtureLog([1, 1, 1])
    for step, w in [*decisions.items(), (7, [1, 1, 1])]:
        longer.set_weights(step, w)
    with pytest.raises(ValueError, match=r"the first 3 agree, so entry 3 is the first"):
        _make(longer, 0, 5).load_state_dict(state)
    assert other.first_difference(log) == 2
    with pytest.raises(ValueError, match=r"its entry 2 differs"):
        other.extend_to(log)


def test_a_state_names_the_entry_when_the_log_diverged_in_its_last_four() -> None:
    """Equal lengths, another digest: the state's digests of the last four shorter prefixes
    name the entry that differs; an earlier divergence names the range before them; a state
    written without those digests still loads with the log it was saved with."""
    decisions = {step: [step % 3, 1, 1] for step in range(1, 9)}
    log = MixtureLog([1, 1, 1])
    _, state = _train(log, 4, 0, 12, decisions, None)
    m = int(state["mixture"].split(":")[0])
    assert m == 9
    assert len(state["mixture"].split(":")[2]) == 32
    for wrong in range(1, 9):  # the log that decided otherwise at one step
        other = MixtureLog([1, 1, 1])
        for step, w in decisions.items():
            other.set_weights(step, [5, 1, 1] if step == wrong else w)
        expect = (
            rf"entry {wrong} is the first" if wrong >= m - 4 else rf"entries 0\.\.{m - 5} differs"
        )
        with pytest.raises(ValueError, match=expect):
            _make(other, 0, 5).load_state_dict(state)
    old = {**state, "mixture": ":".join(state["mixture"].split(":")[:2])}
    _make(log, 0, 5).load_state_dict(old)  # the older tag of the same log is accepted
    with pytest.raises(ValueError, match="must be a mixture-log tag"):
        _make(log, 0, 5).load_state_dict({**state, "mixture": state["mixture"] + "0"})


def test_the_log_file_round_trips_and_an_edited_file_is_refused(tmp_path: Path) -> None:
    log = MixtureLog([0.5, 0.25, 0.25])
    for step in range(1, 50):
        log.set_weights(step, [step % 3, 1, 1e-6])
    path = tmp_path / "mix.npz"
    log.save(path)
    back = MixtureLog.load(path)
    assert back == log
    assert back.first_difference(log) is None
    assert (back.units == log.units).all()
    with np.load(path) as z:
        arrays = {name: z[name] for name in z.files}
    arrays["units"][8, [0, 1]] = arrays["units"][8, [1, 0]]  # still 2**40: only the digest tells
    edited = tmp_path / "edited.npz"
    np.savez(edited, **arrays)
    with pytest.raises(ValueError, match=r"digest must be the digest of its entries"):
        MixtureLog.load(edited)
    with pytest.raises(ValueError, match=r"log must be a saved MixtureLog"):
        MixtureLog.from_bytes(b"not a log")


@pytest.mark.slow
def test_a_log_of_ten_thousand_entries_over_200_sources_is_twelve_megabytes() -> None:
    rng = np.random.default_rng(0)
    log = MixtureLog(rng.random(200).tolist())
    rows = rng.random((9_999, 200))
    for step, row in enumerate(rows, start=1):
        log.set_weights(step, row.tolist())
    size = len(log.to_bytes())
    assert 10_000 * 200 * 6 <= size <= 16 * 10**6


def test_order_state_saves_the_log_and_brings_a_fresh_one_up_to_it() -> None:
    log = MixtureLog([1, 1, 1])
    _, _ = _train(log, 2, 0, 5, {2: [1, 0, 1], 4: [0, 1, 0]}, None)
    sampler = _make(log, 0, 2)
    saved = OrderState(sampler, log=log).state_dict()
    assert set(saved) == {"sampler", "mixture_log"}
    fresh = MixtureLog([1, 1, 1])
    target = _make(fresh, 1, 4)
    OrderState(target, log=fresh).load_state_dict(saved)
    assert fresh == log
    wrong = MixtureLog([1, 2, 1])
    with pytest.raises(ValueError, match=r"its entry 0 differs"):
        OrderState(_make(wrong, 0, 4), log=wrong).load_state_dict(saved)


def test_inspect_shows_counts_against_the_integral(tmp_path: Path, capsys: Any) -> None:
    from dataorder.tools.cli import main

    log = MixtureLog([1, 1, 1])
    _, state = _train(log, 2, 0, 5, {2: [1, 0, 1]}, None)
    (tmp_path / "state.json").write_text(json.dumps(state))
    log.save(tmp_path / "log.npz")
    code = main(
        [
            "inspect",
            str(tmp_path / "state.json"),
            "--source-sizes",
            ",".join(map(str, SIZES)),
            "--log",
            str(tmp_path / "log.npz"),
            "--micro-batch-size",
            "1",
            "--num-replicas",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "counts vs integral of the weights: source 0: 87 vs 86.67" in out, out


# -- a real job ----------------------------------------------------------------------------------

_WORKER = textwrap.dedent(
    """
    import datetime, json, sys
    import torch.distributed as dist
    from dataorder.llm.blend import BlendedSampler
    from dataorder.llm.mixlog import MixtureLog, broadcast_weights

    rank, out = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=30))
    log = MixtureLog([1, 1, 1])
    sampler = BlendedSampler([7, 13, 29], log, 2, rank, 2, 8, seed=4, total_samples=10**6)
    it = iter(sampler)
    seen = []
    for step in range(6):
        mine = [float(step + 1), float(rank), 0.5] if rank == 0 else None
        broadcast_weights(log, step + 1, mine)
        seen += next(it) + next(it)
    dist.barrier()
    json.dump({"seen": seen, "digest": log.digest(), "state": sampler.state_dict()},
              open(out, "w"))
    dist.destroy_process_group()
    """
)


@pytest.mark.timeout(270)
def test_broadcast_weights_appends_rank_zeros_decision_on_every_rank(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    logs = [(tmp_path / f"{r}.err").open("w") for r in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(tmp_path / f"{r}.json")],
            env=env,
            stdout=logs[r],
            stderr=subprocess.STDOUT,
        )
        for r in range(2)
    ]
    try:
        for p in procs:
            p.wait(timeout=240)
    finally:
        for p in procs:
            p.kill()
        for f in logs:
            f.close()
    errors = [(tmp_path / f"{r}.err").read_text()[-2000:] for r in range(2)]
    assert all(p.returncode == 0 for p in procs), errors
    results = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(2)]
    assert results[0]["digest"] == results[1]["digest"]
    assert results[0]["state"] == results[1]["state"]
    log = MixtureLog([1, 1, 1])
    for step in range(6):
        log.set_weights(step + 1, [float(step + 1), 0.0, 0.5])
    assert log.digest() == results[0]["digest"]
    ranks = [
        BlendedSampler([7, 13, 29], log, 2, r, 2, 8, seed=4, total_samples=10**6) for r in range(2)
    ]
    for r in range(2):
        expect = [i for b in itertools.islice(ranks[r], 12) for i in b]
        assert results[r]["seen"] == expect


def test_the_lookup_of_a_compiled_log_is_a_bisection() -> None:
    log = MixtureLog([1, 2])
    for step in range(1, 2000):
        log.set_weights(step, [step % 5, 1])
    mix = LogMixture(log, 0, BatchSizeSchedule.constant(2))
    mix.counts(3998)
    calls = []
    original = mix._local
    mix._local = lambda s, tau: calls.append(s) or original(s, tau)  # type: ignore[method-assign]
    mix.counts(2 * 1234 + 1)
    assert calls == [1234]


def test_a_packed_mixture_over_a_log_resumes_elastically_and_counts_rows() -> None:
    from dataorder.llm.packing import PackedSampler

    rng = np.random.default_rng(1)
    web, code = rng.integers(5, 90, 300), rng.integers(20, 200, 120)
    decisions = {2: [0.2, 0.8], 5: [1.0, 1e-6]}

    def run(dp: int, first: int, stop: int, log: MixtureLog, state: Any) -> Any:
        ranks = [
            PackedSampler(None, 64, 1, r, dp, 8, seed=5, mixture=([web, code], log))
            for r in range(dp)
        ]
        for s in ranks:
            if state is not None:
                s.load_state_dict(state)
        iters = [iter(s) for s in ranks]
        rows = []
        for step in range(first, stop):
            if step in decisions:
                log.set_weights(step, decisions[step])
            for _ in range(8 // dp):
                for it in iters:
                    rows += next(it)
        return rows, ranks[0]

    log = MixtureLog([1, 1])
    reference, sampler = run(4, 0, 8, log, None)
    assert (
        sampler.state_dict()["mixture"]
        == f"3:{log.digest()}:{log.digest(2)[:8]}{log.digest(1)[:8]}"
    )
    assert sampler.consumed_per_source().tolist() == sampler.schedule.counts(64).tolist()
    first_log = MixtureLog([1, 1])
    head, saved = run(4, 0, 3, first_log, None)
    resumed = MixtureLog([1, 1])
    resumed.extend_to(MixtureLog.from_bytes(first_log.to_bytes()))
    tail, _ = run(8, 3, 8, resumed, saved.state_dict())

    def batches(rows: list[Any]) -> list[list[Any]]:  # rows are dealt by cost inside a block
        return [sorted(rows[i : i + 8]) for i in range(0, len(rows), 8)]

    assert batches(head + tail) == batches(reference)


def test_the_module_examples_hold() -> None:
    import doctest

    import dataorder.llm.mixlog as module
    import dataorder.llm.mixlog_corpus as corpus

    for each in (module, corpus):
        assert doctest.testmod(each, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0
