"""Global batch size schedules: which global batch size step ``k`` uses, and where it starts.

Megatron changes the global batch size during training as a function of the samples consumed so
far, evaluated before every step:

* ``--rampup-batch-size START INCR SAMPLES`` (legacy): over ``SAMPLES`` samples, grow from
  ``START`` to ``--global-batch-size`` in steps of ``INCR``. With ``k = (G - START) / INCR``
  increments and ``per = SAMPLES / k`` (a float, as in Megatron), a step that starts after
  ``c`` samples uses ``G`` if ``c > SAMPLES``, else ``START + int(c / per) * INCR``.
* ``--step-batch-size-schedule "0:768 250B:1536"``: a step that starts after ``c`` samples uses
  the batch size of the last threshold ``<= c``. Thresholds are samples, or tokens when a
  sequence length is given (then ``tokens // seq_length`` samples), with optional suffixes
  K, M, B, T (10**3 ... 10**12).

Because the batch size of a step depends on the samples consumed before it, "which samples does
step ``k`` read" is a sum over the schedule. :class:`BatchSizeSchedule` walks the schedule once,
at construction, into segments of equal batch size, so every query costs
O(log number of segments), never O(steps):

>>> from dataorder.llm.schedule import BatchSizeSchedule
>>> s = BatchSizeSchedule.from_step_schedule("0:8 20:16 100:32")
>>> [s.global_batch_size(k) for k in range(6)], s.consumed_samples(5)
([8, 8, 8, 16, 16, 16], 56)
>>> s.step_at(56), s.at_step(5, micro_batch_size=2, data_parallel_size=4)
(5, StepInfo(step=5, global_batch_size=16, num_micro_batches=2, consumed_samples=56))

Step 2 starts at 16 samples (< 20) and still uses 8; step 3 starts at 24 and uses 16. The
Megatron samplers (:mod:`dataorder.llm.megatron`) are micro-batch granular: step ``k`` is the next
``num_micro_batches`` micro-batches on every rank, and ``consumed_samples(k)`` is the sampler's
run-wide ``consumed_samples`` before it, so a changing batch size needs no change to them.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from dataorder._validate import check_int, fail, is_zero_d

__all__ = [
    "MAX_RAMPUP_INCREMENTS",
    "MAX_SAMPLES",
    "BatchSizeSchedule",
    "ScheduleSegment",
    "StepInfo",
    "parse_count",
]

#: Largest threshold, batch size or ramp-up length, in samples. Run-wide sample counts are int64
#: in Megatron's checkpoints and in our positions; 2**62 keeps every sum of two of them exact.
MAX_SAMPLES = 2**62

#: Most increments of a ramp-up. The schedule is walked at construction, one segment per
#: increment; a real ramp has tens to thousands (``--rampup-batch-size 32 32 ...`` to 1536: 47).
MAX_RAMPUP_INCREMENTS = 2**16

_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_COUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([KMBT]?)\s*$", re.IGNORECASE)


def parse_count(text: str, *, name: str = "count") -> int:
    """Parse ``"250B"``, ``"1.5K"`` or ``"768"`` into a non-negative int (exactly, no floats).

    Raises:
        ValueError: If ``text`` is not a number with an optional K/M/B/T suffix, or is not a
            whole number once the suffix is applied.
    """
    if not isinstance(text, str):
        fail(name, "a str such as '250B'", text, TypeError)
    match = _COUNT.match(text)
    if match is None:
        fail(name, "a number with an optional K, M, B or T suffix", text)
    try:
        value = Decimal(match.group(1)) * _SUFFIXES[match.group(2).upper()]
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        fail(name, "a number with an optional K, M, B or T suffix", text)
    if value != value.to_integral_value():
        fail(name, "a whole number once its suffix is applied", text)
    return int(value)


@dataclass(frozen=True)
class ScheduleSegment:
    """A run of global steps with one global batch size.

    Attributes:
        first_step: The first global step of the run.
        consumed_samples: The start of ``first_step``: the samples of the global batches
            before it.
        global_batch_size: The global batch size of every step of the run.
        num_steps: Steps in the run; None for the last run, which never ends.
    """

    first_step: int
    consumed_samples: int
    global_batch_size: int
    num_steps: int | None


@dataclass(frozen=True)
class StepInfo:
    """One global step (an optimizer step, one global batch) of a schedule on one layout.

    Attributes:
        step: The global step (0-based).
        global_batch_size: Samples the step consumes, over all ranks.
        num_micro_batches: Micro-batches every rank takes in the step (gradient accumulation).
        consumed_samples: The start of the step: the samples of the global batches before it
            (Megatron-LM's ``consumed_samples`` when it begins the step).
    """

    step: int
    global_batch_size: int
    num_micro_batches: int
    consumed_samples: int


def _ramp_threshold(i: int, rampup_samples: int, per_increment: float, increments: int) -> int:
    """Smallest integer ``c`` with ``c / per_increment >= i`` (``i >= 1``), in Megatron's float
    maths.

    ``c / per_increment`` never decreases as ``c`` grows, so the answer is bracketed around the
    exact estimate by doubling steps and then bisected: a few float divisions whatever the
    magnitude (past 2**53 one float spans many integers, and stepping by one would not end).
    """

    def reached(c: int) -> bool:
        return c / per_increment >= i

    guess = max(1, -(-i * rampup_samples // increments))  # exact maths; floats are within ulps
    step = 1
    if reached(guess):
        hi, lo = guess, guess - 1
        while lo > 0 and reached(lo):
            hi, lo = lo, max(0, guess - step)
            step *= 2
    else:
        lo, hi = guess, guess + 1
        while not reached(hi):
            lo, hi = hi, guess + step
            step *= 2
    while hi - lo > 1:  # reached(hi) and not reached(lo); c = 0 never reaches i >= 1
        mid = (lo + hi) // 2
        if reached(mid):
            hi = mid
        else:
            lo = mid
    return hi


class BatchSizeSchedule:
    """A global batch size that changes with the samples consumed, walked into segments.

    Build it with :meth:`constant`, :meth:`rampup`, :meth:`from_step_schedule` or
    :meth:`from_megatron_args`; or directly from ``(threshold, global_batch_size)`` pairs: a step
    that starts after ``c`` samples uses the batch size of the last threshold ``<= c``.

    Args:
        thresholds: Pairs ``(samples, global_batch_size)``; in any order, thresholds distinct,
            one of them 0, batch sizes positive.

    Raises:
        TypeError, ValueError: If a pair is malformed, a threshold repeats, none is 0, or a batch
            size is not positive.
    """

    __slots__ = ("_firsts", "_segments", "_starts", "_thresholds")

    def __init__(self, thresholds: Iterable[tuple[int, int]]) -> None:
        given: object = thresholds
        if isinstance(given, str | bytes) or not isinstance(given, Iterable) or is_zero_d(given):
            fail(
                "thresholds",
                "an iterable of (samples, global_batch_size) pairs",
                thresholds,
                TypeError,
            )
        pairs = []
        for entry in thresholds:
            if not isinstance(entry, tuple | list) or len(entry) != 2:
                fail("thresholds", "(samples, global_batch_size) pairs", entry, TypeError)
            pairs.append(
                (
                    check_int("threshold", entry[0], min_value=0, max_value=MAX_SAMPLES),
                    check_int("global_batch_size", entry[1], min_value=1, max_value=MAX_SAMPLES),
                )
            )
        pairs.sort()
        if not pairs or pairs[0][0] != 0:
            fail("thresholds", "a schedule with a threshold at 0 samples", pairs)
        for (a, _), (b, _) in itertools.pairwise(pairs):
            if a == b:
                fail("thresholds", "distinct (each threshold once)", pairs)
        self._thresholds = tuple(pairs)
        self._segments = self._walk(self._thresholds)
        self._firsts = [seg.first_step for seg in self._segments]
        self._starts = [seg.consumed_samples for seg in self._segments]

    @staticmethod
    def _walk(thresholds: Sequence[tuple[int, int]]) -> tuple[ScheduleSegment, ...]:
        segments = []
        step = consumed = 0
        for i, (_, gbs) in enumerate(thresholds):
            if i + 1 == len(thresholds):
                segments.append(ScheduleSegment(step, consumed, gbs, None))
                break
            end = thresholds[i + 1][0]
            if consumed >= end:
                continue  # the previous run overshot this threshold: no step starts here
            steps = -(-(end - consumed) // gbs)
            segments.append(ScheduleSegment(step, consumed, gbs, steps))
            step += steps
            consumed += steps * gbs
        return tuple(segments)

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def constant(cls, global_batch_size: int) -> BatchSizeSchedule:
        """The same global batch size at every step."""
        return cls([(0, global_batch_size)])

    @classmethod
    def rampup(
        cls,
        start_batch_size: int,
        batch_size_increment: int,
        rampup_samples: int,
        *,
        global_batch_size: int,
    ) -> BatchSizeSchedule:
        """Megatron's ``--rampup-batch-size START INCR SAMPLES`` with ``--global-batch-size G``.

        The steps reproduce Megatron's ``RampupBatchsizeNumMicroBatchesCalculator`` exactly,
        including its float arithmetic. Megatron divides by zero when ``SAMPLES`` is 0 or
        ``START == G``; both are refused here. Sample counts and batch sizes are at most
        :data:`MAX_SAMPLES`, and a ramp has at most :data:`MAX_RAMPUP_INCREMENTS` increments
        (the schedule is walked at construction).

        Raises:
            TypeError, ValueError: If an argument is out of range, or ``G - START`` is not a
                positive multiple of ``INCR``, or the ramp has too many increments.
        """
        gbs = check_int("global_batch_size", global_batch_size, min_value=2, max_value=MAX_SAMPLES)
        start = check_int("start_batch_size", start_batch_size, min_value=1, max_value=gbs - 1)
        incr = check_int("batch_size_increment", batch_size_increment, min_value=1)
        samples = check_int("rampup_samples", rampup_samples, min_value=1, max_value=MAX_SAMPLES)
        if (gbs - start) % incr:
            fail(
                "batch_size_increment",
                f"a divisor of global_batch_size - start_batch_size = {gbs} - {start}",
                incr,
            )
        increments = (gbs - start) // incr
        if increments > MAX_RAMPUP_INCREMENTS:
            fail(
                "batch_size_increment",
                f"at least (global_batch_size - start_batch_size) / {MAX_RAMPUP_INCREMENTS} = "
                f"{-(-(gbs - start) // MAX_RAMPUP_INCREMENTS)} (a ramp has at most "
                f"{MAX_RAMPUP_INCREMENTS} increments)",
                incr,
            )
        per_increment = samples / increments
        final = min(samples + 1, _ramp_threshold(increments, samples, per_increment, increments))
        pairs = {0: start}
        for i in range(1, increments):
            t = _ramp_threshold(i, samples, per_increment, increments)
            if t >= final:
                break
            pairs[t] = start + i * incr  # equal thresholds: the later increment wins
        pairs[final] = gbs
        return cls(sorted(pairs.items()))

    @classmethod
    def from_step_schedule(
        cls, schedule: str, *, seq_length: int | None = None
    ) -> BatchSizeSchedule:
        """Megatron's ``--step-batch-size-schedule "THRESHOLD:BS THRESHOLD:BS ..."``.

        Entries are separated by spaces or commas; numbers take K/M/B/T suffixes. With
        ``seq_length``, thresholds are tokens and become ``tokens // seq_length`` samples.

        Raises:
            TypeError, ValueError: If an entry is malformed, a threshold repeats (after the token
                conversion), none is 0, or a batch size is not positive.
        """
        if not isinstance(schedule, str):
            fail("schedule", "a str such as '0:768 250B:1536'", schedule, TypeError)
        seq = None if seq_length is None else check_int("seq_length", seq_length, min_value=1)
        pairs: list[tuple[int, int]] = []
        tokens: dict[int, int] = {}  # samples -> the tokens they came from
        for entry in schedule.replace(",", " ").split():
            threshold, sep, batch = entry.partition(":")
            if not sep:
                fail("schedule", "entries of the form THRESHOLD:BATCH_SIZE", entry)
            t = parse_count(threshold, name="threshold")
            if seq is not None:
                if t // seq in tokens and tokens[t // seq] != t:
                    fail(
                        "thresholds",
                        f"distinct (each threshold once) in samples: {tokens[t // seq]} and {t} "
                        f"tokens are both {t // seq} samples with seq_length={seq}",
                        [p[0] for p in pairs] + [t // seq],
                    )
                tokens[t // seq] = t
            pairs.append((t if seq is None else t // seq, parse_count(batch, name="batch_size")))
        return cls(pairs)

    @classmethod
    def from_megatron_args(
        cls,
        *,
        global_batch_size: int | None = None,
        rampup_batch_size: Sequence[int | str] | None = None,
        step_batch_size_schedule: str | None = None,
        seq_length: int | None = None,
    ) -> BatchSizeSchedule:
        """The schedule Megatron builds from its command-line arguments.

        ``rampup_batch_size`` is the three values of ``--rampup-batch-size``;
        ``seq_length`` applies to ``step_batch_size_schedule`` only (as in Megatron).

        Raises:
            ValueError: If both a ramp-up and a step schedule are given, or neither a schedule
                nor a global batch size.
        """
        if rampup_batch_size is not None and step_batch_size_schedule is not None:
            fail(
                "rampup_batch_size",
                "None when step_batch_size_schedule is given",
                rampup_batch_size,
            )
        if step_batch_size_schedule is not None:
            return cls.from_step_schedule(step_batch_size_schedule, seq_length=seq_length)
        if global_batch_size is None:
            fail("global_batch_size", "an int unless step_batch_size_schedule is given", None)
        if rampup_batch_size is None:
            return cls.constant(global_batch_size)
        if (
            isinstance(rampup_batch_size, str | bytes)
            or not isinstance(rampup_batch_size, Sequence)
            or len(rampup_batch_size) != 3
        ):
            fail("rampup_batch_size", "three values START INCR SAMPLES", rampup_batch_size)
        start, incr, samples = (
            parse_count(v, name="rampup_batch_size") if isinstance(v, str) else v
            for v in rampup_batch_size
        )
        return cls.rampup(start, incr, samples, global_batch_size=global_batch_size)

    # -- queries --------------------------------------------------------------------------------
    @property
    def thresholds(self) -> tuple[tuple[int, int], ...]:
        """The ``(samples, global_batch_size)`` pairs, sorted."""
        return self._thresholds

    @property
    def segments(self) -> tuple[ScheduleSegment, ...]:
        """Runs of steps with one batch size, in order; thresholds no step reaches are omitted."""
        return self._segments

    def _segment_for_step(self, step: int) -> tuple[int, ScheduleSegment]:
        """``step`` as a Python int (numpy ints would wrap), and the segment it falls in."""
        step = check_int("step", step, min_value=0)
        return step, self._segments[bisect.bisect_right(self._firsts, step) - 1]

    def global_batch_size(self, step: int) -> int:
        """The global batch size of ``step``."""
        return self._segment_for_step(step)[1].global_batch_size

    def consumed_samples(self, step: int) -> int:
        """The start of global step ``step``: the samples of the global batches before it (so
        ``consumed_samples(0) == 0``); a Python int. The name is Megatron's; docs/design.md's
        glossary calls it the start of a global step, apart from a sampler's run-wide count."""
        step, seg = self._segment_for_step(step)
        return seg.consumed_samples + (step - seg.first_step) * seg.global_batch_size

    def step_at(self, consumed_samples: int) -> int:
        """The global step that reads sample ``consumed_samples`` of the schedule's stream.

        When ``consumed_samples`` is the start of a global step, this is the number of global
        steps completed.
        """
        consumed = check_int("consumed_samples", consumed_samples, min_value=0)
        seg = self._segments[bisect.bisect_right(self._starts, consumed) - 1]
        return seg.first_step + (consumed - seg.consumed_samples) // seg.global_batch_size

    def at_step(self, step: int, *, micro_batch_size: int, data_parallel_size: int) -> StepInfo:
        """Batch size, micro-batch count and consumed samples of ``step`` on one layout.

        Every field of the result is a Python int (JSON-serialisable), whatever int type
        ``step`` was given as.

        Raises:
            ValueError: If the step's global batch size is not a multiple of
                ``micro_batch_size x data_parallel_size``.
        """
        step, seg = self._segment_for_step(step)
        block = self._block(micro_batch_size, data_parallel_size)
        self._check_segment(seg, block, micro_batch_size, data_parallel_size)
        return StepInfo(
            step=step,
            global_batch_size=seg.global_batch_size,
            num_micro_batches=seg.global_batch_size // block,
            consumed_samples=seg.consumed_samples + (step - seg.first_step) * seg.global_batch_size,
        )

    def check_layout(
        self, *, micro_batch_size: int, data_parallel_size: int, from_step: int = 0
    ) -> None:
        """Check that every step from ``from_step`` on divides into whole micro-batch blocks.

        Steps before ``from_step`` are not checked: after a resume on more GPUs, the early, small
        batch sizes of a ramp no longer need to divide the new layout.

        Raises:
            ValueError: Naming the first step whose global batch size is not a multiple of
                ``micro_batch_size x data_parallel_size``.
        """
        block = self._block(micro_batch_size, data_parallel_size)
        first = bisect.bisect_right(self._firsts, check_int("from_step", from_step, min_value=0))
        for seg in self._segments[first - 1 :]:
            self._check_segment(seg, block, micro_batch_size, data_parallel_size)

    @staticmethod
    def _block(micro_batch_size: int, data_parallel_size: int) -> int:
        mbs = check_int("micro_batch_size", micro_batch_size, min_value=1)
        return mbs * check_int("data_parallel_size", data_parallel_size, min_value=1)

    @staticmethod
    def _check_segment(seg: ScheduleSegment, block: int, mbs: int, dp: int) -> None:
        if seg.global_batch_size % block:
            fail(
                "global_batch_size",
                f"a multiple of micro_batch_size x data_parallel_size = {mbs} x {dp} = {block} "
                f"(used from step {seg.first_step}, after {seg.consumed_samples} samples)",
                seg.global_batch_size,
            )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchSizeSchedule):
            return NotImplemented
        return self._thresholds == other._thresholds

    def __hash__(self) -> int:
        return hash(self._thresholds)

    def __repr__(self) -> str:
        pairs = " ".join(f"{t}:{b}" for t, b in self._thresholds)
        return f"BatchSizeSchedule.from_step_schedule({pairs!r})"
