"""Segment bases saved with a mixture log: a resume starts from them instead of rebuilding every
base, reads the same counts and order, and an edited or foreign base is refused or not used."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from dataorder.llm.blend import BlendedSampler
from dataorder.llm.mixlog import MixtureLog
from dataorder.llm.mixlog_counts import BASE_SPACING
from dataorder.llm.mixlog_entries import SegmentBases
from dataorder.llm.schedule import BatchSizeSchedule

ENTRIES = 5 * BASE_SPACING + 9
BATCHES = BatchSizeSchedule.constant(16)


def random_log(k: int = 9, entries: int = ENTRIES, seed: int = 4) -> MixtureLog:
    rng = np.random.default_rng(seed)
    w = rng.random((entries, k)) ** 3
    w[rng.random((entries, k)) < 0.2] = 0.0
    w[:, 0] += 1e-6
    log = MixtureLog(w[0].tolist())
    for step in range(1, entries):
        log.set_weights(step + step // 7, w[step].tolist())  # some steps skipped
    return log


def built(mix: Any) -> int:
    return sum(base is not None for base in mix._base_c)


def every_count(mix: Any, log: MixtureLog) -> list[list[int]]:
    last = mix.entry_start(len(log) - 1) + 40
    return mix.counts_at(np.arange(0, last, 5)).tolist()


def edited(data: bytes, **changes: Any) -> bytes:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        arrays = {key: z[key] for key in z.files}
    for key, value in changes.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_a_resumed_log_starts_from_its_saved_bases_and_counts_as_the_original() -> None:
    log = random_log()
    original = log.compile(0, BATCHES)
    want = every_count(original, log)  # the original builds every base
    back = MixtureLog.from_bytes(log.to_bytes())
    mix = back.compile(0, BATCHES)
    mix.counts(mix.entry_start(len(back) - 1) + 3)  # a resume near the end
    # the saved bases (one every BASE_SPACING segments) and at most BASE_SPACING walked
    assert built(mix) <= 1 + len(mix._seg_pos) // BASE_SPACING + BASE_SPACING
    assert built(mix) < len(mix._seg_pos) // 2
    assert every_count(mix, back) == want
    for j in range(len(mix._seg_pos)):  # and every base equals the one built from scratch
        assert mix._base(j)[0].tolist() == original._base(j)[0].tolist()
        assert mix._base(j)[1].tolist() == original._base(j)[1].tolist()


def test_a_blend_resumed_from_a_log_with_bases_reads_the_uninterrupted_order() -> None:
    """An online run appends as it trains; a resume on another data-parallel size from the
    log's bytes (bases included) reads what the uninterrupted run reads."""
    rng = np.random.default_rng(8)
    plan = {step: (rng.random(4) ** 2 + 1e-6).tolist() for step in range(1, 3 * BASE_SPACING)}

    def run(dp: int, first: int, stop: int, log: MixtureLog, state: Any) -> tuple[list[int], Any]:
        ranks = [
            BlendedSampler([50, 70, 90, 30], log, 2, r, dp, 8, seed=3, total_samples=10**5)
            for r in range(dp)
        ]
        for sampler in ranks:
            if state is not None:
                sampler.load_state_dict(state)
        iters = [iter(sampler) for sampler in ranks]
        seen: list[int] = []
        for step in range(first, stop):
            if step in plan:
                log.set_weights(step, plan[step])
            for _ in range(8 // (2 * dp)):
                for it in iters:
                    seen += next(it)
        return seen, ranks[0]

    whole, _ = run(4, 0, 3 * BASE_SPACING + 5, MixtureLog([1, 1, 1, 1]), None)
    first = MixtureLog([1, 1, 1, 1])
    head, sampler = run(4, 0, 2 * BASE_SPACING + 7, first, None)
    data = first.to_bytes()
    assert "bases_counts" in np.load(io.BytesIO(data)).files
    live = MixtureLog([1, 1, 1, 1])
    live.extend_to(MixtureLog.from_bytes(data))
    tail, resumed = run(2, 2 * BASE_SPACING + 7, 3 * BASE_SPACING + 5, live, sampler.state_dict())
    assert built(resumed._mixture) < 2 * BASE_SPACING  # it did not rebuild from the start
    assert sorted(head + tail) == sorted(whole)

    def blocks(seen: list[int]) -> list[list[int]]:  # each global batch, as a set
        return [sorted(seen[i : i + 8]) for i in range(0, len(seen), 8)]

    assert blocks(head + tail) == blocks(whole)


def test_a_saved_base_edited_in_the_file_is_refused() -> None:
    log = random_log()
    mix = log.compile(0, BATCHES)  # bases are saved from the samplers alive over the log
    mix.counts(mix.entry_start(len(log) - 1))
    data = log.to_bytes()
    counts = np.load(io.BytesIO(data))["bases_counts"].copy()
    counts[1, 0] += 1  # one sample moved from source 1 to source 0: within the bound
    counts[1, 1] -= 1
    with pytest.raises(ValueError, match=r"log\.bases_digest must be the digest of its segment"):
        MixtureLog.from_bytes(edited(data, bases_counts=counts))
    with pytest.raises(ValueError, match=r"log\.bases_segments must be increasing"):
        MixtureLog.from_bytes(edited(data, bases_segments=np.array([0])))
    with pytest.raises(ValueError, match=r"log\.bases_\* must be the arrays"):
        MixtureLog.from_bytes(edited(data, bases_digest=None))


def test_a_saved_base_forged_with_its_digest_is_refused_when_it_breaks_the_bound() -> None:
    """A base whose digest was recomputed by hand still has to agree with the log: its counts
    sum to its sample and its errors, derived from the entries, stay within the bound."""
    log = random_log()
    mix = log.compile(0, BATCHES)
    mix.counts(mix.entry_start(len(log) - 1))
    saved = mix.saved_bases()
    assert saved is not None
    for change in ([40, -40], [1, 0]):  # past the bound; a sum that is not the sample
        counts = saved.counts.copy()
        counts[2, :2] += change
        digest = SegmentBases.digest_of(
            log._chain[saved.entries], saved.entries, saved.starts, saved.segments, counts
        )
        back = MixtureLog.from_bytes(
            edited(log.to_bytes(), bases_counts=counts, bases_digest=np.array(digest))
        )
        again = back.compile(0, BATCHES)
        with pytest.raises(
            ValueError, match=r"the base saved for segment 192 \(sample \d+\) does not"
        ):
            again.counts(5)


def test_saved_bases_of_another_batch_schedule_or_log_are_not_used() -> None:
    log = random_log()
    mix = log.compile(0, BATCHES)
    mix.counts(mix.entry_start(len(log) - 1))
    back = MixtureLog.from_bytes(log.to_bytes())
    other = BatchSizeSchedule.constant(24)
    mine = back.compile(0, other)
    assert every_count(mine, back) == every_count(random_log().compile(0, other), log)
    assert all(mine._base_c[j] is not None for j in range(len(mine._seg_pos)))  # built itself
    # a log that differs in an early entry takes no base saved with the other one
    different = random_log(seed=5)
    different._bases = back._bases
    fresh = different.compile(0, BATCHES)
    fresh.counts(fresh.entry_start(len(different) - 1))
    assert every_count(fresh, different) == every_count(
        random_log(seed=5).compile(0, BATCHES), different
    )


def test_a_log_file_without_bases_loads_and_counts_the_same() -> None:
    log = random_log()
    mix = log.compile(0, BATCHES)
    want = every_count(mix, log)
    old = edited(
        log.to_bytes(),
        bases_entries=None,
        bases_starts=None,
        bases_segments=None,
        bases_counts=None,
        bases_digest=None,
    )
    back = MixtureLog.from_bytes(old)
    assert back == log
    assert every_count(back.compile(0, BATCHES), back) == want
    assert MixtureLog([1, 2]).to_bytes() == edited(MixtureLog([1, 2]).to_bytes())  # none saved
