"""Global batch size schedules: Megatron's ramp-up and step schedules, step <-> consumed samples,
and the Megatron samplers driven through a ramp without any change."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.llm.schedule import (
    MAX_RAMPUP_INCREMENTS,
    MAX_SAMPLES,
    BatchSizeSchedule,
    ScheduleSegment,
    StepInfo,
    _ramp_threshold,
    parse_count,
)


# -- reference: Megatron's rules, evaluated one step at a time ------------------------------------
def megatron_rampup(start: int, incr: int, samples: int, gbs: int) -> Callable[[int], int]:
    """The batch size of a step that starts after ``c`` samples (RampupBatchsize calculator)."""
    per_increment = samples / ((gbs - start) // incr)

    def batch_size(c: int) -> int:
        if c > samples:
            return gbs
        return start + int(c / per_increment) * incr

    return batch_size


def megatron_steps(pairs: list[tuple[int, int]]) -> Callable[[int], int]:
    """The batch size of the last threshold <= c (StepBatchsize calculator)."""
    return lambda c: [b for t, b in sorted(pairs) if t <= c][-1]


def simulate(batch_size: Callable[[int], int], steps: int) -> list[tuple[int, int]]:
    """``(global batch size, consumed before)`` of each step, walking step by step."""
    out, consumed = [], 0
    for _ in range(steps):
        b = batch_size(consumed)
        out.append((b, consumed))
        consumed += b
    return out


def check_against(schedule: BatchSizeSchedule, expected: list[tuple[int, int]]) -> None:
    for step, (gbs, consumed) in enumerate(expected):
        assert schedule.global_batch_size(step) == gbs
        assert schedule.consumed_samples(step) == consumed
        assert schedule.step_at(consumed) == step
        assert schedule.step_at(consumed + gbs - 1) == step


@given(
    start=st.integers(1, 64),
    incr=st.integers(1, 32),
    increments=st.integers(1, 40),
    samples=st.integers(1, 3000),
)
def test_rampup_matches_megatron_step_by_step(
    start: int, incr: int, increments: int, samples: int
) -> None:
    gbs = start + incr * increments
    schedule = BatchSizeSchedule.rampup(start, incr, samples, global_batch_size=gbs)
    steps = samples // start + 5
    check_against(schedule, simulate(megatron_rampup(start, incr, samples, gbs), steps))
    assert schedule.segments[-1].global_batch_size == gbs
    assert len(schedule.segments) <= increments + 1


@given(
    pairs=st.lists(
        st.tuples(st.integers(1, 5000), st.integers(1, 300)), min_size=0, max_size=8
    ).map(lambda p: sorted(dict(p).items())),
    first=st.integers(1, 300),
)
def test_step_schedule_matches_megatron_step_by_step(
    pairs: list[tuple[int, int]], first: int
) -> None:
    pairs = [(0, first), *pairs]
    text = " ".join(f"{t}:{b}" for t, b in reversed(pairs))  # any order is accepted
    schedule = BatchSizeSchedule.from_step_schedule(text)
    assert schedule.thresholds == tuple(pairs)
    check_against(schedule, simulate(megatron_steps(pairs), 5000 // first + 10))
    assert schedule == BatchSizeSchedule(pairs)


def test_worked_step_schedule() -> None:
    s = BatchSizeSchedule.from_step_schedule("0:768 250B:1536")
    assert s.thresholds == ((0, 768), (250 * 10**9, 1536))
    first_big = -(-250 * 10**9 // 768)  # 325520834 steps of 768 reach 250B
    assert s.segments == (
        ScheduleSegment(0, 0, 768, first_big),
        ScheduleSegment(first_big, first_big * 768, 1536, None),
    )
    assert s.global_batch_size(first_big - 1) == 768
    assert s.global_batch_size(first_big) == 1536
    step = first_big + 10**9
    assert s.consumed_samples(step) == first_big * 768 + 10**9 * 1536
    assert s.step_at(s.consumed_samples(step) + 5) == step
    assert s.at_step(step, micro_batch_size=4, data_parallel_size=8) == StepInfo(
        step=step,
        global_batch_size=1536,
        num_micro_batches=48,
        consumed_samples=first_big * 768 + 10**9 * 1536,
    )


def test_tokens_with_seq_length() -> None:
    s = BatchSizeSchedule.from_step_schedule("0:768, 250B:1536, 1T:3072", seq_length=4096)
    assert s.thresholds == ((0, 768), (250 * 10**9 // 4096, 1536), (10**12 // 4096, 3072))


def test_overshooting_a_threshold_skips_its_segment() -> None:
    # 0:100 then 150:8 then 200:50: step 1 starts at 100 (< 150), step 2 at 200, past 150 and 200
    s = BatchSizeSchedule.from_step_schedule("0:100 150:8 200:50")
    assert [(g.first_step, g.global_batch_size) for g in s.segments] == [(0, 100), (2, 50)]
    assert [s.global_batch_size(k) for k in range(4)] == [100, 100, 50, 50]


def test_rampup_in_megatrons_float_arithmetic() -> None:
    """Step 8 starts at exactly 27 samples, and 27 / (27 / 13) is 12.999... in floats: Megatron
    uses 13 there, where exact arithmetic would give 14. The schedule follows Megatron."""
    s = BatchSizeSchedule.rampup(1, 1, 27, global_batch_size=14)
    assert [s.global_batch_size(k) for k in range(10)] == [1, 1, 1, 2, 3, 4, 6, 9, 13, 14]
    assert s.consumed_samples(9) == 40
    check_against(s, simulate(megatron_rampup(1, 1, 27, 14), 20))
    canonical = BatchSizeSchedule.rampup(16, 8, 300_000, global_batch_size=1536)
    check_against(canonical, simulate(megatron_rampup(16, 8, 300_000, 1536), 2000))
    assert canonical.consumed_samples(956) == 300_304  # first step at 1536


@given(
    increments=st.integers(1, 2000),
    samples=st.one_of(st.integers(1, 10**6), st.integers(2**52, MAX_SAMPLES)),
    i=st.integers(1, 2000),
)
def test_ramp_thresholds_at_any_magnitude(increments: int, samples: int, i: int) -> None:
    """The threshold of increment ``i`` is the smallest ``c`` with ``c / per >= i`` in floats,
    also past 2**53, where one float spans many integers (stepping by one ran for ever)."""
    i = min(i, increments)
    per = samples / increments
    c = _ramp_threshold(i, samples, per, increments)
    assert c / per >= i
    assert (c - 1) / per < i


def test_huge_ramps_are_refused_at_once_or_built_quickly() -> None:
    """Regression: ``rampup_samples=10**30`` and ``global_batch_size=2**62`` ran for ever."""
    cases = [
        (lambda: BatchSizeSchedule.rampup(1, 1, 10**30, global_batch_size=64),
         "rampup_samples must be an int in [1, 4611686018427387904]; "
         "got rampup_samples=1000000000000000000000000000000"),
        (lambda: BatchSizeSchedule.rampup(1, 1, 1000, global_batch_size=2**62),
         "batch_size_increment must be at least (global_batch_size - start_batch_size) / 65536 = "
         "70368744177664 (a ramp has at most 65536 increments); got batch_size_increment=1"),
        (lambda: BatchSizeSchedule.rampup(1, 1, 1000, global_batch_size=2**62 + 1),
         "global_batch_size must be an int in [2, 4611686018427387904]; "
         "got global_batch_size=4611686018427387905"),
        (lambda: BatchSizeSchedule([(0, 8), (10**30, 16)]),
         "threshold must be an int in [0, 4611686018427387904]; "
         "got threshold=1000000000000000000000000000000"),
        (lambda: BatchSizeSchedule(8),  # type: ignore[arg-type]
         "thresholds must be an iterable of (samples, global_batch_size) pairs; got thresholds=8"),
        (lambda: BatchSizeSchedule.from_megatron_args(global_batch_size=8, rampup_batch_size=3),
         "rampup_batch_size must be three values START INCR SAMPLES; got rampup_batch_size=3"),
    ]  # fmt: skip
    for build, message in cases:
        with pytest.raises((TypeError, ValueError)) as info:
            build()
        assert str(info.value) == message
        assert info.type is (TypeError if "iterable" in message else ValueError)
    # the largest legal values: a ramp of MAX_RAMPUP_INCREMENTS over MAX_SAMPLES samples
    big = BatchSizeSchedule.rampup(1, 1, MAX_SAMPLES, global_batch_size=MAX_RAMPUP_INCREMENTS + 1)
    assert len(big.segments) == MAX_RAMPUP_INCREMENTS + 1
    assert big.global_batch_size(10**30) == MAX_RAMPUP_INCREMENTS + 1
    top = BatchSizeSchedule.rampup(MAX_SAMPLES - 1, 1, MAX_SAMPLES, global_batch_size=MAX_SAMPLES)
    assert [top.global_batch_size(k) for k in range(3)] == [MAX_SAMPLES - 1] + [MAX_SAMPLES] * 2
    assert top.consumed_samples(2) == 2 * MAX_SAMPLES - 1


def test_numpy_steps_give_python_ints() -> None:
    """Regression: ``consumed_samples(np.int64(2**60))`` wrapped to 0 and ``StepInfo`` held
    ``np.int64`` (not JSON)."""
    s = BatchSizeSchedule.constant(16)
    assert s.consumed_samples(np.int64(2**60)) == 2**64
    info = s.at_step(np.int64(2**60), micro_batch_size=np.int64(2), data_parallel_size=np.int32(4))
    assert info == StepInfo(
        step=2**60, global_batch_size=16, num_micro_batches=2, consumed_samples=2**64
    )
    assert all(type(v) is int for v in vars(info).values())
    assert json.loads(json.dumps(vars(info))) == vars(info)
    assert type(s.step_at(np.uint64(2**63))) is int
    assert s.step_at(np.uint64(2**63)) == 2**59


@pytest.mark.parametrize(
    ("text", "value"),
    [("768", 768), ("250B", 250 * 10**9), ("1.5k", 1500), ("2T", 2 * 10**12), (" 3M ", 3 * 10**6)],
)
def test_parse_count(text: str, value: int) -> None:
    assert parse_count(text) == value


@pytest.mark.parametrize(
    ("text", "exc", "message"),
    [
        (
            "1.5",
            ValueError,
            "count must be a whole number once its suffix is applied; got count='1.5'",
        ),
        (
            "12X",
            ValueError,
            "count must be a number with an optional K, M, B or T suffix; got count='12X'",
        ),
        (
            "-4",
            ValueError,
            "count must be a number with an optional K, M, B or T suffix; got count='-4'",
        ),
        ("1e3", ValueError, "count must be a number with an optional K, M, B or T suffix"),
        (12, TypeError, "count must be a str such as '250B'; got count=12"),
    ],
)
def test_parse_count_errors(text: Any, exc: type[Exception], message: str) -> None:
    with pytest.raises(exc) as info:
        parse_count(text)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("build", "exc", "message"),
    [
        (
            lambda: BatchSizeSchedule.from_step_schedule("0:8 100"),
            ValueError,
            "schedule must be entries of the form THRESHOLD:BATCH_SIZE; got schedule='100'",
        ),
        (
            lambda: BatchSizeSchedule.from_step_schedule("10:8 100:16"),
            ValueError,
            "thresholds must be a schedule with a threshold at 0 samples",
        ),
        (
            lambda: BatchSizeSchedule.from_step_schedule("0:8 100:16 0.1K:32"),
            ValueError,
            "thresholds must be distinct (each threshold once)",
        ),
        (
            lambda: BatchSizeSchedule.from_step_schedule("0:8 4096:16", seq_length=8192),
            ValueError,
            "thresholds must be distinct (each threshold once) in samples: 0 and 4096 tokens are "
            "both 0 samples with seq_length=8192; got thresholds=[0, 0]",
        ),
        (
            lambda: BatchSizeSchedule.from_step_schedule("0:0"),
            ValueError,
            "global_batch_size must be an int in [1, 4611686018427387904]; got global_batch_size=0",
        ),
        (
            lambda: BatchSizeSchedule.from_step_schedule(""),
            ValueError,
            "thresholds must be a schedule with a threshold at 0 samples; got thresholds=[]",
        ),
        (
            lambda: BatchSizeSchedule.from_step_schedule(["0:8"]),
            TypeError,
            "schedule must be a str such as '0:768 250B:1536'",
        ),
        (
            lambda: BatchSizeSchedule.from_step_schedule("0:8", seq_length=0),
            ValueError,
            "seq_length must be a positive int; got seq_length=0",
        ),
        (
            lambda: BatchSizeSchedule([(0, 8, 1)]),
            TypeError,
            "thresholds must be (samples, global_batch_size) pairs; got thresholds=(0, 8, 1)",
        ),
        (
            lambda: BatchSizeSchedule.rampup(32, 8, 100, global_batch_size=32),
            ValueError,
            "start_batch_size must be an int in [1, 31]; got start_batch_size=32",
        ),
        (
            lambda: BatchSizeSchedule.rampup(16, 8, 0, global_batch_size=32),
            ValueError,
            "rampup_samples must be an int in [1, 4611686018427387904]; got rampup_samples=0",
        ),
        (
            lambda: BatchSizeSchedule.rampup(16, 6, 100, global_batch_size=32),
            ValueError,
            "batch_size_increment must be a divisor of global_batch_size - start_batch_size = "
            "32 - 16; got batch_size_increment=6",
        ),
        (
            lambda: BatchSizeSchedule.rampup(16, True, 100, global_batch_size=32),
            TypeError,
            "batch_size_increment must be a positive int; got batch_size_increment=True",
        ),
        (
            lambda: BatchSizeSchedule.from_megatron_args(
                global_batch_size=32, rampup_batch_size=(16, 8, 100), step_batch_size_schedule="0:8"
            ),
            ValueError,
            "rampup_batch_size must be None when step_batch_size_schedule is given",
        ),
        (
            lambda: BatchSizeSchedule.from_megatron_args(),
            ValueError,
            "global_batch_size must be an int unless step_batch_size_schedule is given; "
            "got global_batch_size=None",
        ),
        (  # regression: numpy's "iteration over a 0-d array" named nothing
            lambda: BatchSizeSchedule(np.array(10)),
            TypeError,
            "thresholds must be an iterable of (samples, global_batch_size) pairs; "
            "got thresholds=array(10)",
        ),
        (
            lambda: BatchSizeSchedule.from_megatron_args(
                global_batch_size=32, rampup_batch_size=(16, 8)
            ),
            ValueError,
            "rampup_batch_size must be three values START INCR SAMPLES; "
            "got rampup_batch_size=(16, 8)",
        ),
    ],
)
def test_bad_schedules(build: Callable[[], Any], exc: type[Exception], message: str) -> None:
    with pytest.raises(exc) as info:
        build()
    assert str(info.value).startswith(message)


def test_from_megatron_args() -> None:
    assert BatchSizeSchedule.from_megatron_args(global_batch_size=64) == BatchSizeSchedule.constant(
        64
    )
    ramp = BatchSizeSchedule.from_megatron_args(
        global_batch_size=1536, rampup_batch_size=["16", "8", "300K"]
    )
    assert ramp == BatchSizeSchedule.rampup(16, 8, 300_000, global_batch_size=1536)
    step = BatchSizeSchedule.from_megatron_args(
        global_batch_size=99, step_batch_size_schedule="0:768 250B:1536", seq_length=2
    )
    assert step.thresholds == ((0, 768), (125 * 10**9, 1536))


def test_layout_divisibility() -> None:
    s = BatchSizeSchedule.from_step_schedule("0:8 100:64")
    assert s.at_step(0, micro_batch_size=2, data_parallel_size=4).num_micro_batches == 1
    with pytest.raises(ValueError) as info:
        s.at_step(3, micro_batch_size=1, data_parallel_size=16)
    assert str(info.value) == (
        "global_batch_size must be a multiple of micro_batch_size x data_parallel_size = "
        "1 x 16 = 16 (used from step 0, after 0 samples); got global_batch_size=8"
    )
    with pytest.raises(ValueError, match="used from step 0"):
        s.check_layout(micro_batch_size=1, data_parallel_size=16)
    # after scaling up to 16 ranks at step 13 (the first step of 64), the small batches are past
    s.check_layout(micro_batch_size=1, data_parallel_size=16, from_step=13)
    assert s.at_step(13, micro_batch_size=1, data_parallel_size=16).num_micro_batches == 4
    with pytest.raises(ValueError, match="micro_batch_size must be a positive int"):
        s.check_layout(micro_batch_size=0, data_parallel_size=1)
    with pytest.raises(ValueError, match="step must be a non-negative int; got step=-1"):
        s.global_batch_size(-1)


# -- the samplers through a ramp: no change needed -----------------------------------------------
def forever(sampler: Any) -> Iterator[list[int | None]]:
    while True:
        yield from sampler


def run_schedule(
    samplers: list[Any], schedule: BatchSizeSchedule, first: int, last: int
) -> list[list[int | None]]:
    """Steps ``first..last-1``: each rank takes the step's micro-batches; return global batches."""
    streams = [forever(s) for s in samplers]
    dp, mbs = samplers[0].data_parallel_size, samplers[0].micro_batch_size
    out = []
    for step in range(first, last):
        info = schedule.at_step(step, micro_batch_size=mbs, data_parallel_size=dp)
        per_rank = [[next(it) for _ in range(info.num_micro_batches)] for it in streams]
        # micro-step k of every rank, in rank order, is the global order of positions
        out.append(
            [
                x
                for k in range(info.num_micro_batches)
                for mb in (p[k] for p in per_rank)
                for x in mb
            ]
        )
        assert len(out[-1]) == info.global_batch_size
        assert {s.consumed_samples for s in samplers} == {schedule.consumed_samples(step + 1)}
    return out


@pytest.mark.parametrize("cls", [MegatronPretrainingSampler, MegatronPretrainingRandomSampler])
def test_samplers_follow_a_rampup_unchanged(cls: type[Any]) -> None:
    schedule = BatchSizeSchedule.rampup(8, 8, 300, global_batch_size=32)
    # The target global batch (as the Megatron-LM provider passes it) only decides where an
    # epoch ends: 224 of 250 positions, whole global batches of 32 on every layout of the ramp,
    # so a run-wide count means one position on all of them (NOTE [ The run-wide count ]).
    n, gbs = 250, 32

    def build(mbs: int, rank: int, dp: int, **kw: Any) -> Any:
        return cls(n, mbs, rank, dp, global_batch_size=gbs, **kw)

    run = run_schedule([build(1, r, 4) for r in range(4)], schedule, 0, 60)
    assert [len(b) for b in run[:3]] == [8, 8, 8]
    assert len(run[-1]) == 32
    # a restart at any step from Megatron's consumed_samples continues the same global batches,
    # past the first epoch too, also on 8 ranks (micro-batches of 2, or 8 ranks of 1)
    for step in (7, 23, 41):
        consumed = schedule.consumed_samples(step)
        restarted = [build(1, r, 4, consumed_samples=consumed) for r in range(4)]
        assert run_schedule(restarted, schedule, step, 60) == run[step:]
    step = schedule.step_at(200)
    schedule.check_layout(micro_batch_size=1, data_parallel_size=8, from_step=step)
    consumed = schedule.consumed_samples(step)
    wider = [build(1, r, 8, consumed_samples=consumed) for r in range(8)]
    assert run_schedule(wider, schedule, step, 60) == run[step:]
    bigger = [build(2, r, 4, consumed_samples=consumed) for r in range(4)]
    assert run_schedule(bigger, schedule, step, 60) == run[step:]
    # without it an epoch's end depends on the layout (n mod M dropped), and a bare count past
    # the first epoch could mean another position on the layout that counted it: refused
    late = schedule.consumed_samples(41)
    assert late > n - n % gbs  # the restart at step 41 above is past the first epoch
    with pytest.raises(ValueError, match="consumed_samples must be inside the first epoch"):
        cls(n, 1, 0, 8, consumed_samples=late)
