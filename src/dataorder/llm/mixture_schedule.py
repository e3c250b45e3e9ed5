"""Mixture schedules as data: the weights of K sources as a function of the run's sample count.

A :class:`MixtureSchedule` is a list of ``(start_sample, value)`` entries: a weight vector (the
weights from that sample on) or a :class:`Ramp` (linear to the next entry's start). It is
validated and quantised once (:class:`MixtureSegment`: ``2**40`` units per vector,
:func:`~dataorder.core.apportion.quantize_weights`), written to and read from JSON, and digested
by its *trained part* so a resumed run may change only what it has not trained. What the
schedule's counts are, ``c_d(t)``, is :class:`~dataorder.llm.mixture.Mixture`'s business
(:mod:`dataorder.llm.mixture`, which re-exports these names: import them from there).

NOTE [ Trained part of a schedule ]
    A run may change its schedule after a resume (an annealing phase decided late), but only
    where it has not trained yet. The *trained part* through sample ``E`` is every entry that
    starts before ``E``, each with the quantised weights that fix its counts; a ramp also
    with its end, which shapes its counts. ``c(t)`` for every ``t <= E`` depends on nothing
    else. :meth:`MixtureSchedule.trained_tag` digests it into a short string that a
    sampler's state records; :meth:`MixtureSchedule.check_trained` refuses a schedule whose
    trained part differs, naming the first segment (entry) that differs (per-segment digests
    are kept for the first 12 segments; beyond them the message gives the range). Entries
    that start at ``E`` or later may be added, removed or edited.

    ``E`` is not the saved position ``P`` but the end of the global batch under way at ``P``
    (:meth:`~dataorder.llm.blend_order.BlendOrder.quotas_fixed_through`): a global batch
    ``[a, a + G)`` takes the quotas ``c(a + G) - c(a)``, and a state saved inside it (after
    some micro-batches, ``a < P < a + G``) has read part of a batch whose slots those quotas
    laid out. Another schedule before ``a + G`` would lay the same batch out again with other
    quotas, so the rest of it would read some draws twice and never read others. At a
    global-batch boundary (``P = a``) the next batch has not started: ``E = P``. With a
    batch-size schedule, ``G`` is the size of the step that holds ``P``, and the batch-size
    schedule itself is part of the sampler's configuration, so ``E`` is the same in the run
    that saved and the run that loads, on any layout.

Example:
    >>> s = MixtureSchedule([(0, [3, 1]), (8, Ramp([3, 1], [1, 3])), (16, [1, 3])])
    >>> s.trained_entries(8), s.trained_entries(9)
    (1, 2)
    >>> s.trained_tag(8) == s.trained_tag(5), s.trained_tag(9) == s.trained_tag(8)
    (True, False)
"""

from __future__ import annotations

import bisect
import hashlib
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dataorder._validate import check_int, check_sequence, fail, is_zero_d
from dataorder.core.apportion import MAX_POSITION, MAX_TOTAL, quantize_weights
from dataorder.core.state import digest as state_digest

__all__ = ["MixtureSchedule", "MixtureSegment", "Ramp", "WeightVector"]

#: Weights as given: non-negative reals (ints, floats, numpy scalars, Fractions).
WeightVector = Sequence[Any]

#: Entries whose own digest a trained tag keeps (NOTE [ Trained part of a schedule ]).
_NAMED_ENTRIES = 12
_SHORT = 3  # hex digits of an entry's digest in a trained tag


class _Abbrev:
    """A long weight vector in an error message: its head and its length."""

    def __init__(self, values: Sequence[Any]) -> None:
        self._values = list(values)

    def __repr__(self) -> str:
        head = ", ".join(repr(v) for v in self._values[:4])
        return f"[{head}, ...] ({len(self._values)} entries)"


def _shown(values: Sequence[Any]) -> object:
    items = list(values)
    return items if len(items) <= 8 else _Abbrev(items)


def _check_weights(name: str, values: object, num_sources: int | None) -> tuple[Any, ...]:
    """Validate one weight vector; return it with numpy scalars turned into Python numbers."""
    items = check_sequence(name, values, "a sequence of non-negative reals, one per source")
    out: list[Any] = []
    for j, value in enumerate(items):
        number: Any
        if type(value) is float or type(value) is int:  # the common case: no ABC checks
            number = value
        elif isinstance(value, bool) or not isinstance(value, numbers.Real):
            fail(f"{name}[{j}]", "a finite non-negative real", value, TypeError)
        elif isinstance(value, (int, float, Fraction)):
            number = value
        elif isinstance(value, numbers.Integral):
            number = int(value)
        else:
            number = float(value)  # numpy floats: exact (float32 and float64 are dyadic)
        finite = not isinstance(number, float) or math.isfinite(number)
        if not finite or number < 0:
            fail(f"{name}[{j}]", "a finite non-negative real", value)
        out.append(number)
    if num_sources is not None and len(out) != num_sources:
        fail(f"len({name})", f"the number of sources, {num_sources}", len(out))
    if not out:
        fail(name, "a non-empty sequence of non-negative reals", items)
    if not any(out):
        fail(name, "a sequence with at least one positive weight", _shown(items))
    return tuple(out)


@dataclass(frozen=True)
class Ramp:
    """A linear ramp between two weight vectors (NOTE [ Linear ramps ]).

    As the value of a :class:`MixtureSchedule` entry ``(start, Ramp(u, v))``, the weights move
    linearly from ``u`` at ``start`` to ``v`` at the next entry's start. Each vector is
    normalised on its own, as every weight vector is.

    Attributes:
        start_weights: The weights at the ramp's start.
        end_weights: The weights the ramp reaches at its end.
    """

    start_weights: WeightVector
    end_weights: WeightVector

    def __post_init__(self) -> None:
        for name in ("start_weights", "end_weights"):
            value = getattr(self, name)
            # a 0-d array stays as given: MixtureSchedule refuses it, naming the entry
            if isinstance(value, (Sequence, np.ndarray)) and not (
                isinstance(value, (str, bytes)) or is_zero_d(value)
            ):
                object.__setattr__(self, name, tuple(value))


@dataclass(frozen=True)
class MixtureSegment:
    """One entry of a :class:`MixtureSchedule`, validated and quantised.

    Attributes:
        index: The entry's index in the schedule.
        start: The sample at which it starts.
        end: The sample at which the next entry starts, or None for the last one.
        start_units: The weights at ``start``, quantised to ``2**40`` units
            (:func:`~dataorder.core.apportion.quantize_weights`).
        end_units: The weights the entry reaches at ``end``: ``start_units`` unless a ramp.
        is_ramp: Whether the entry is a :class:`Ramp`.
    """

    index: int
    start: int
    end: int | None
    start_units: tuple[int, ...]
    end_units: tuple[int, ...]
    is_ramp: bool

    @property
    def length(self) -> int | None:
        """Samples in the segment, or None for the last one."""
        return None if self.end is None else self.end - self.start

    def canonical(self) -> list[Any]:
        """What fixes the segment's counts (NOTE [ Trained part of a schedule ]).

        A constant segment's end is left out: its counts up to any sample do not depend on it.
        """
        if self.is_ramp:
            return ["ramp", self.start, self.end, list(self.start_units), list(self.end_units)]
        return ["constant", self.start, list(self.start_units)]

    def digest(self) -> str:
        """16 hex digits of BLAKE2b over :meth:`canonical`."""
        return state_digest(self.canonical())


#: Per entry: its first weights, its last weights (the first unless a ramp), whether a ramp.
_Entry = tuple[tuple[Any, ...], tuple[Any, ...], bool]


def _checked_entries(items: list[Any], name: str) -> tuple[list[int], list[_Entry]]:
    """Validate a schedule's entries (messages name ``name[i]``): their starts, and each one's
    weights as :data:`_Entry`."""
    starts: list[int] = []
    values: list[_Entry] = []
    k: int | None = None
    for i, entry in enumerate(items):
        where = f"{name}[{i}]"
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            fail(where, "a (start_sample, weights) pair", entry, TypeError)
        start = check_int(f"{where}[0]", entry[0], min_value=0, max_value=MAX_POSITION)
        if i == 0 and start != 0:
            fail(f"{where}[0]", "0 (a schedule starts at sample 0)", start)
        if i > 0 and start <= starts[-1]:
            fail(
                f"{where}[0]",
                f"greater than {name}[{i - 1}][0]={starts[-1]} (starts strictly increase)",
                start,
            )
        value = entry[1]
        if isinstance(value, Ramp):
            if i == len(items) - 1:
                fail(
                    f"{where}[1]",
                    "a weight vector: a Ramp runs to the next entry's start, and the last "
                    "entry has none",
                    value,
                )
            first = _check_weights(f"{where}[1].start_weights", value.start_weights, k)
            k = len(first)
            last = _check_weights(f"{where}[1].end_weights", value.end_weights, k)
            values.append((first, last, True))
        else:
            weights = _check_weights(f"{where}[1]", value, k)
            k = len(weights)
            values.append((weights, weights, False))
        starts.append(start)
    return starts, values


def _quantised_segments(starts: list[int], values: list[_Entry]) -> tuple[MixtureSegment, ...]:
    """The segments of validated entries, each distinct weight vector quantised once."""
    units: dict[tuple[Any, ...], tuple[int, ...]] = {}

    def quantised(weights: tuple[Any, ...]) -> tuple[int, ...]:
        found = units.get(weights)
        if found is None:
            found = units[weights] = quantize_weights(weights)
        return found

    segments: list[MixtureSegment] = []
    for i, (first, last, is_ramp) in enumerate(values):
        end = starts[i + 1] if i + 1 < len(starts) else None
        segments.append(
            MixtureSegment(i, starts[i], end, quantised(first), quantised(last), is_ramp)
        )
    return tuple(segments)


class MixtureSchedule:
    """Source weights as a function of the run's sample count.

    Args:
        entries: ``(start_sample, value)`` pairs, starts strictly increasing from 0. A value is
            a weight vector (the weights from that sample on) or a :class:`Ramp` (linear from its
            ``start_weights`` to its ``end_weights`` at the next entry's start; not the last
            entry). Weights are non-negative finite reals, at least one positive per vector,
            the same number in every vector; each vector is normalised on its own.

    Raises:
        TypeError: If an entry or a weight has the wrong type.
        ValueError: If a start is out of order or the first is not 0, a weight is negative or
            not finite, a vector is all zero or of another length, or the last entry is a ramp.
            Messages name the entry, e.g. ``schedule[1][0]``.

    Example:
        >>> s = MixtureSchedule([(0, [0.7, 0.3]), (1000, Ramp([0.7, 0.3], [0.2, 0.8])),
        ...                      (1500, [0.2, 0.8])])
        >>> s.num_sources, len(s), [round(w, 3) for w in s.weights_at(1250)]
        (2, 3, [0.45, 0.55])
    """

    __slots__ = ("_entries", "_segments", "_starts")

    def __init__(self, entries: Iterable[tuple[int, WeightVector | Ramp]]) -> None:
        self._init(entries, "schedule")

    def _init(self, entries: object, name: str) -> None:
        if (
            isinstance(entries, (str, bytes))
            or not isinstance(entries, Iterable)
            or is_zero_d(entries)
        ):
            fail(name, "a sequence of (start_sample, weights) pairs", entries, TypeError)
        items = list(entries)
        if not items:
            fail(name, "a non-empty sequence of (start_sample, weights) pairs", items)
        starts, values = _checked_entries(items, name)
        self._segments = _quantised_segments(starts, values)
        self._entries = tuple(
            (s, Ramp(a, b) if r else a) for s, (a, b, r) in zip(starts, values, strict=True)
        )
        self._starts = tuple(starts)

    @classmethod
    def constant(cls, weights: WeightVector, *, name: str = "weights") -> MixtureSchedule:
        """One weight vector for the whole run; messages name it ``name``.

        Raises:
            TypeError, ValueError: As for the constructor, naming ``weights[j]``.
        """
        schedule = cls.__new__(cls)
        _check_weights(name, weights, None)
        schedule._init([(0, weights)], "schedule")
        return schedule

    @classmethod
    def for_sources(
        cls,
        weights: WeightVector | MixtureSchedule,
        num_sources: int,
        *,
        name: str = "weights",
        counted_as: str = "len(sizes)",
    ) -> MixtureSchedule:
        """``weights`` as a schedule over ``num_sources`` sources: a schedule as it is, a weight
        vector as a constant one; messages name it ``name`` and the number of sources
        ``counted_as``.

        Raises:
            TypeError, ValueError: As :meth:`constant`, or if the number of sources differs.
        """
        if isinstance(weights, MixtureSchedule):
            if weights.num_sources != num_sources:
                fail(
                    name,
                    f"a MixtureSchedule over {counted_as} = {num_sources} sources",
                    f"MixtureSchedule over {weights.num_sources} sources",
                )
            return weights
        schedule = cls.constant(weights, name=name)
        if schedule.num_sources != num_sources:
            fail(f"len({name})", f"{counted_as} = {num_sources}", schedule.num_sources)
        return schedule

    # -- description ----------------------------------------------------------------------------
    @property
    def entries(self) -> tuple[tuple[int, tuple[Any, ...] | Ramp], ...]:
        """The ``(start_sample, weights or Ramp)`` entries, weights as tuples."""
        return self._entries

    @property
    def segments(self) -> tuple[MixtureSegment, ...]:
        """The validated, quantised entries."""
        return self._segments

    @property
    def num_sources(self) -> int:
        """The number of sources K."""
        return len(self._segments[0].start_units)

    def __len__(self) -> int:
        return len(self._segments)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MixtureSchedule):
            return NotImplemented
        return self._segments == other._segments

    def __hash__(self) -> int:
        return hash(self._segments)

    def __repr__(self) -> str:
        parts = []
        for start, value in self._entries:
            shown = (
                f"Ramp({_shown(value.start_weights)!r}, {_shown(value.end_weights)!r})"
                if isinstance(value, Ramp)
                else repr(_shown(value))
            )
            parts.append(f"({start}, {shown})")
        return f"MixtureSchedule([{', '.join(parts)}])"

    def append(self, start: int, weights: WeightVector | Ramp) -> MixtureSchedule:
        """A new schedule with one more entry at ``start`` (after every existing one).

        Raises:
            TypeError, ValueError: As for the constructor.
        """
        return MixtureSchedule([*self._entries, (start, weights)])

    # -- as JSON (e.g. beside a checkpoint, for `dataorder inspect --schedule`) -------------------
    def to_json(self) -> list[list[Any]]:
        """The entries as plain JSON values, which :meth:`from_json` turns back into an equal
        schedule (the same quantised weights, hence the same counts).

        An entry is ``[start, [w, ...]]`` or ``[start, {"ramp": [[u, ...], [v, ...]]}]``; a
        weight is a JSON int or float as given (a float's ``repr`` is exact), and a
        ``Fraction`` is the string ``"p/q"``.

        Example:
            >>> s = MixtureSchedule([(0, [0.6, Fraction(1, 3)]), (8, Ramp([1, 1], [0, 1])),
            ...                      (16, [0, 1])])
            >>> s.to_json()
            [[0, [0.6, '1/3']], [8, {'ramp': [[1, 1], [0, 1]]}], [16, [0, 1]]]
            >>> MixtureSchedule.from_json(s.to_json()) == s
            True
        """

        def plain(weights: Sequence[Any]) -> list[Any]:
            return [str(w) if isinstance(w, Fraction) else w for w in weights]

        return [
            [start, {"ramp": [plain(v.start_weights), plain(v.end_weights)]}]
            if isinstance(v, Ramp)
            else [start, plain(v)]
            for start, v in self._entries
        ]

    @classmethod
    def from_json(cls, value: object, *, name: str = "schedule") -> MixtureSchedule:
        """The schedule :meth:`to_json` wrote (``value`` as ``json.loads`` returns it).

        A string weight is read as a ``Fraction`` (``"1/3"``, ``"0.25"``); every other check is
        the constructor's, with messages naming ``name[i]``.

        Raises:
            TypeError: If an entry is not a ``[start, weights]`` pair, a ramp not
                ``{"ramp": [u, v]}``, or a weight not a number or a string.
            ValueError: As for the constructor, or for a string that is not a number.
        """
        if not isinstance(value, list):
            fail(name, "a JSON list of [start, weights] pairs", value, TypeError)

        def weights(where: str, items: object) -> Any:
            if not isinstance(items, list):
                return items  # the constructor names it
            out = []
            for j, w in enumerate(items):
                if isinstance(w, str):
                    try:
                        w = Fraction(w)
                    except (ValueError, ZeroDivisionError):
                        fail(f"{where}[{j}]", "a number, or a string such as '1/3'", w)
                out.append(w)
            return out

        entries: list[tuple[Any, Any]] = []
        for i, entry in enumerate(value):
            where = f"{name}[{i}]"
            if not isinstance(entry, list) or len(entry) != 2:
                fail(where, "a [start, weights] pair", entry, TypeError)
            start, v = entry
            if isinstance(v, dict):
                pair = v.get("ramp") if set(v) == {"ramp"} else None
                if not isinstance(pair, list) or len(pair) != 2:
                    fail(f"{where}[1]", 'a weight list or {"ramp": [u, v]}', v, TypeError)
                ramp_at = f"{where}[1].ramp"
                v = Ramp(weights(f"{ramp_at}[0]", pair[0]), weights(f"{ramp_at}[1]", pair[1]))
            else:
                v = weights(f"{where}[1]", v)
            entries.append((start, v))
        schedule = cls.__new__(cls)
        schedule._init(entries, name)
        return schedule

    def segment_at(self, samples: int) -> int:
        """The index of the entry that sample ``samples`` (0-based) falls in."""
        samples = check_int("samples", samples, min_value=0, max_value=MAX_POSITION)
        return bisect.bisect_right(self._starts, samples) - 1

    def weights_at(self, samples: int) -> tuple[float, ...]:
        """The normalised weights of sample ``samples`` (a ramp's interpolated ones), as floats
        of the quantised weights the counts follow."""
        seg = self._segments[self.segment_at(samples)]
        if not seg.is_ramp or seg.end is None:
            return tuple(u / MAX_TOTAL for u in seg.start_units)
        tau, length = samples - seg.start, seg.end - seg.start
        return tuple(
            float(Fraction((length - tau) * a + tau * b, length * MAX_TOTAL))
            for a, b in zip(seg.start_units, seg.end_units, strict=True)
        )

    # -- the trained part (NOTE [ Trained part of a schedule ]) ---------------------------------
    def trained_entries(self, samples: int) -> int:
        """How many entries start before sample ``samples``: the trained part's length."""
        samples = check_int("samples", samples, min_value=0, max_value=MAX_POSITION)
        return bisect.bisect_left(self._starts, samples)

    def trained_tag(self, samples: int) -> str:
        """A short digest of the part of the schedule the first ``samples`` samples used.

        ``"<entries>:<16 hex digits>:<3 hex digits per entry, first 12 entries>"``, or ``"0"``
        before any sample.
        """
        m = self.trained_entries(samples)
        if m == 0:
            return "0"
        digests = [seg.digest() for seg in self._segments[:m]]
        full = hashlib.blake2b("".join(digests).encode(), digest_size=8).hexdigest()
        short = "".join(d[:_SHORT] for d in digests[:_NAMED_ENTRIES])
        return f"{m}:{full}:{short}"

    def check_trained(
        self,
        tag: object,
        samples: int,
        *,
        name: str = "state['mixture']",
        saved_at: int | None = None,
        unit: str = "sample",
    ) -> None:
        """Refuse this schedule if its part before ``samples`` is not the one ``tag`` digests.

        Args:
            tag: A :meth:`trained_tag`, from a state.
            samples: Where the trained part ends: ``E`` of NOTE [ Trained part of a schedule ].
            name: What the message calls ``tag``.
            saved_at: The saved position ``P`` when it is not ``samples`` (a state saved inside
                a global batch): the message says why the schedule is fixed beyond it.
            unit: What a position counts, in the message (``"row"`` for packed rows).

        Raises:
            ValueError: If ``tag`` is not a trained tag, or the trained parts differ; the message
                names the first segment (entry) that differs and the sample it starts at.
        """
        ours = self.trained_tag(samples)
        if tag == ours:
            return
        what = self._difference(_tag_fields(tag, name), ours, samples, unit)
        if saved_at is None or saved_at == samples:
            allowed = f"start at or after the saved position ({unit} {samples}) may change"
        else:
            allowed = (
                f"start at or after {unit} {samples}, the end of the global batch under way at "
                f"the saved position ({unit} {saved_at}), may change: that batch's quotas were "
                "fixed when it started"
            )
        raise ValueError(
            f"the mixture schedule cannot continue this state: {what}. Only segments that "
            f"{allowed} (NOTE [ Trained part of a schedule ])"
        )

    def _difference(self, fields: list[str], ours: str, samples: int, unit: str) -> str:
        """What differs between a state's trained part (its tag's ``fields``) and ours."""
        theirs_m = int(fields[0])
        theirs_short = fields[2] if theirs_m else ""
        ours_m = self.trained_entries(samples)
        ours_short = ours.split(":")[2] if ours_m else ""
        first = None
        for i in range(min(theirs_m, ours_m, _NAMED_ENTRIES)):
            if (
                theirs_short[i * _SHORT : (i + 1) * _SHORT]
                != ours_short[i * _SHORT : (i + 1) * _SHORT]
            ):
                first = i
                break
        if first is None and theirs_m != ours_m:
            first = min(theirs_m, ours_m)
        if first is not None:
            if first < len(self._segments):
                where = f"segment {first} (starting at {unit} {self._segments[first].start})"
            else:
                where = f"segment {first}"
            what = (
                f"the state trained {theirs_m} segment{_s(theirs_m)} before {unit} {samples} "
                f"and this schedule has {ours_m}; its {where} differs"
                if first == min(theirs_m, ours_m)
                else f"its {where} differs from the one the state was trained with"
            )
        else:
            what = (
                f"one of its segments {_NAMED_ENTRIES}..{ours_m - 1} differs from the ones the "
                "state was trained with"
            )
        return what


def _tag_fields(tag: object, name: str) -> list[str]:
    """The fields of a trained tag (:meth:`MixtureSchedule.trained_tag`), or refuse it."""
    fields = tag.split(":") if isinstance(tag, str) else []
    valid = (fields == ["0"]) or (
        len(fields) == 3
        and fields[0].isdigit()
        and len(fields[1]) == 16
        and len(fields[2]) == _SHORT * min(int(fields[0]), _NAMED_ENTRIES)
    )
    if not valid:
        fail(name, "a trained-schedule tag such as '2:9f12...:abc123'", tag)
    return fields


def _s(count: int) -> str:
    return "" if count == 1 else "s"
