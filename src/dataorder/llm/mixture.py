"""Mixture schedules: how many samples each of K sources has contributed after ``t`` samples.

A run reads a *global stream* of samples ``0, 1, 2, ...``; a :class:`MixtureSchedule` says, by
sample count, which weights the sources have: piecewise constant (``(start, weights)`` entries)
with optional linear ramps between two weight vectors (a :class:`Ramp` entry). A
:class:`Mixture` compiles a schedule with a key into the pure function this module exists for:

``counts(t)[d]``: how many of the first ``t`` samples of the run come from source ``d``.

It is exact, monotone in ``t`` (every window's quota is non-negative), sums to ``t``, costs O(K)
per segment of the schedule at any ``t`` (no replay), and keeps O(K) memory per distinct weight
vector. Which sample of source ``d`` its ``j``-th draw reads is :mod:`dataorder.llm.blend_order`'s
business, and which rank reads it :mod:`dataorder.llm.blend`'s.

NOTE [ Mixture exactness ]
    Inside a segment that starts at sample ``s`` with (normalised) weights ``w``, source ``d``
    contributes ``c_d(t) - c_d(s) = A(t - s)[d]``, where ``A`` is the
    :class:`~dataorder.core.apportion.Apportionment` of ``w`` quantised to ``2**40`` units.
    Hence, at *every* ``t`` of the segment (so at every global-batch boundary)::

        |c_d(t) - c_d(s) - w_d * (t - s)| <= B_d + (t - s) * 2**-40

    with the apportionment's per-source bound ``B_d < 1.75`` (typically about 1), the second
    term being the quantisation (0.001 of a sample after 10**9 samples). A source of weight
    ``1e-6`` gets its first sample within ``B_d / 1e-6`` samples of the segment's start and
    is never rounded away; a source of weight 0 gets nothing. Megatron's greedy blend, the
    reference at batch granularity, strays by up to about 2.2 on the same weights (measured in
    ``benchmarks/bench_blend.py``). With constant weights (one segment, ``s = 0``) this is the
    whole guarantee: ``|c_d(t) - w_d t| <= B_d < 1.75`` against the quantised weights.

    Across a change of weights each source continues exactly where it left off: ``c_d`` is
    continuous and the next segment's draws follow the last one's. Exactness is per segment,
    and the offset a segment ends with is carried into the next one, not corrected.

    *A source's share under a schedule* is the integral of its weight over the samples
    consumed: ``S_d(t) = integral from 0 to t of w_d(x) dx``, where ``w(x)`` is the
    schedule's quantised, normalised weight vector at sample count ``x``: constant on a
    constant entry, and on a :class:`Ramp` from ``u`` at ``s`` to ``v`` at ``s + L`` the line
    ``u + (v - u)(x - s) / L`` (so ``S_d(s + tau) - S_d(s) = u_d tau + (v_d - u_d) tau**2 /
    (2 L)``). The bound that holds at every ``t`` in entry ``j`` is::

        |c_d(t) - S_d(t)| <= beta_0,d + beta_1,d + ... + beta_j,d

    where ``beta_i`` is entry ``i``'s own bound (:meth:`Mixture.deviation_bounds`):
    ``B_d(w_i) < 1.75`` for a constant entry, ``B_u,d + B_v,d + |v_d - u_d| / 2 < 4`` for a
    ramp (NOTE [ Linear ramps ]); :meth:`Mixture.share_bounds` evaluates the sum. Proof:
    ``c_d(0) = S_d(0) = 0``, so ``c_d(t) - S_d(t)`` telescopes into one term per entry
    reached, ``[c_d(b) - c_d(a)] - [S_d(b) - S_d(a)]`` over the part ``[a, b)`` of entry
    ``i`` before ``t``. Inside an entry ``c_d(b) - c_d(a)`` is the entry's own count at
    ``b - a`` samples into it (its apportionment, or its cross-fade for a ramp) and
    ``S_d(b) - S_d(a)`` that count's exact target, so each term is at most ``beta_i,d`` in
    magnitude (the first paragraph, NOTE [ Linear ramps ]). Against the weights as given,
    add the quantisation: less than ``t * 2**-40`` per source, unless a weight below
    ``2**-40`` of its vector was raised to one unit (:func:`~dataorder.core.apportion.
    quantize_weights`). The bound grows with the entries trained, because nothing corrects
    the offset an entry ends with: a schedule of ``m`` constant entries keeps each source
    within ``1.75 m`` of its share, however long the run. For example the step schedule
    ``[(0, [7, 1]), (12, [2, 7]), (17, [4, 4]), (22, [1, 1]), (49, [7, 7])]`` with global
    batches of 10 and seed 3 leaves source 0 2.11 samples short of its share from global
    batch 5 on, within its bound of 2.5 (five entries of ``B = 0.5``).

NOTE [ Linear ramps ]
    A :class:`Ramp` entry from ``u`` to ``v`` over ``L`` samples (up to the next entry's start)
    gives sample ``s + tau`` the weights ``(1 - tau / L) u + (tau / L) v``. It is a cross-fade of
    the two fixed mixtures: of the first ``tau`` samples of the ramp, ``M(tau) = floor((tau**2 +
    L) / (2 L))``, the nearest integer to ``tau**2 / (2 L)``, are drawn from ``v``'s
    apportionment and ``tau - M(tau)`` from ``u``'s. ``M`` rises by 0 or 1 per sample (its
    slope ``tau / L`` is at most 1), so both parts and the sum are monotone; every count is an
    exact integer function of ``tau``. Against the ramp's exact integral each source stays
    within ``B_u,d + B_v,d + |v_d - u_d| / 2`` (< 4, typically about 2): looser than a constant
    segment's bound, and drift-free over the whole ramp, however long.

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
    >>> sched = MixtureSchedule([(0, [3, 1]), (8, Ramp([3, 1], [1, 3])), (16, [1, 3])])
    >>> mix = Mixture(sched, key=0)
    >>> [mix.counts(t).tolist() for t in (4, 8, 16, 20)]
    [[3, 1], [6, 2], [10, 6], [11, 9]]
    >>> sched.weights_at(12)
    (0.5, 0.5)
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
import numpy.typing as npt

from dataorder._validate import check_int, check_sequence, fail, is_zero_d
from dataorder.core.apportion import MAX_POSITION, MAX_TOTAL, Apportionment, quantize_weights
from dataorder.core.state import digest as state_digest

__all__ = [
    "Mixture",
    "MixtureSchedule",
    "MixtureSegment",
    "Ramp",
    "WeightVector",
    "ramp_split",
]

#: Weights as given: non-negative reals (ints, floats, numpy scalars, Fractions).
WeightVector = Sequence[Any]

#: Entries whose own digest a trained tag keeps (NOTE [ Trained part of a schedule ]).
_NAMED_ENTRIES = 12
_SHORT = 3  # hex digits of an entry's digest in a trained tag
_I64 = np.int64


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
        starts: list[int] = []
        values: list[tuple[tuple[Any, ...], tuple[Any, ...], bool]] = []
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
        units: dict[tuple[Any, ...], tuple[int, ...]] = {}

        def quantised(weights: tuple[Any, ...]) -> tuple[int, ...]:
            found = units.get(weights)
            if found is None:
                found = units[weights] = quantize_weights(weights)
            return found

        segments = []
        for i, (first, last, is_ramp) in enumerate(values):
            end = starts[i + 1] if i + 1 < len(starts) else None
            segments.append(
                MixtureSegment(i, starts[i], end, quantised(first), quantised(last), is_ramp)
            )
        self._entries = tuple(
            (s, Ramp(a, b) if r else a) for s, (a, b, r) in zip(starts, values, strict=True)
        )
        self._segments = tuple(segments)
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
        fields = tag.split(":") if isinstance(tag, str) else []
        valid = (fields == ["0"]) or (
            len(fields) == 3
            and fields[0].isdigit()
            and len(fields[1]) == 16
            and len(fields[2]) == _SHORT * min(int(fields[0]), _NAMED_ENTRIES)
        )
        if not valid:
            fail(name, "a trained-schedule tag such as '2:9f12...:abc123'", tag)
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


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def ramp_split(tau: int, length: int) -> int:
    """``M(tau)``: how many of a ramp's first ``tau`` samples follow its end weights.

    ``floor((tau**2 + L) / (2 L))``, the nearest integer to ``tau**2 / (2 L)`` (halves up); see
    NOTE [ Linear ramps ].

    >>> [ramp_split(t, 4) for t in range(5)]
    [0, 0, 1, 1, 2]
    """
    return (tau * tau + length) // (2 * length)


def _ramp_split_at(taus: npt.NDArray[np.int64], length: int) -> npt.NDArray[np.int64]:
    """:func:`ramp_split` for many ``tau``, exactly (int64 when it cannot overflow)."""
    if taus.size == 0:
        empty: npt.NDArray[np.int64] = np.zeros(0, dtype=_I64)
        return empty
    top = int(taus.max())
    if top * top + length < 2**63:
        out: npt.NDArray[np.int64] = (taus * taus + length) // (2 * length)
        return out
    return np.array([ramp_split(int(t), length) for t in taus.tolist()], dtype=_I64)


class Mixture:
    """A :class:`MixtureSchedule` compiled with a key: per-source counts at any sample.

    ``counts(t)`` is the pure function of NOTE [ Mixture exactness ]. Apportionments are built
    on first use, one per distinct weight vector (a ramp shares its ends' with the constant
    entries around it), and each segment's starting counts are kept once computed: O(K)
    memory per distinct vector and per segment.

    Args:
        schedule: The schedule.
        key: The apportionments' key (it only breaks ties, never a bound).
    """

    __slots__ = ("_aps", "_bases", "_key", "_schedule", "_starts")

    def __init__(self, schedule: MixtureSchedule, key: int) -> None:
        if not isinstance(schedule, MixtureSchedule):
            fail("schedule", "a MixtureSchedule", schedule, TypeError)
        self._schedule = schedule
        self._key = check_int("key", key, min_value=0, max_value=2**64 - 1)
        self._starts = np.array([seg.start for seg in schedule.segments], dtype=_I64)
        self._aps: dict[tuple[int, ...], Apportionment] = {}
        self._bases: list[npt.NDArray[np.int64]] = [np.zeros(schedule.num_sources, dtype=_I64)]

    @property
    def schedule(self) -> MixtureSchedule:
        """The schedule."""
        return self._schedule

    @property
    def num_sources(self) -> int:
        """The number of sources K."""
        return self._schedule.num_sources

    def apportionment(self, units: tuple[int, ...]) -> Apportionment:
        """The apportionment of one quantised weight vector (built once)."""
        ap = self._aps.get(units)
        if ap is None:
            ap = self._aps[units] = Apportionment(units, key=self._key)
        return ap

    def _local(self, seg: MixtureSegment, tau: int) -> npt.NDArray[np.int64]:
        first = self.apportionment(seg.start_units)
        if not seg.is_ramp or seg.end is None:
            return first.counts(tau)
        m = ramp_split(tau, seg.end - seg.start)
        return first.counts(tau - m) + self.apportionment(seg.end_units).counts(m)

    def _local_at(self, seg: MixtureSegment, taus: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        first = self.apportionment(seg.start_units)
        if not seg.is_ramp or seg.end is None:
            return first.counts_at(taus)
        m = _ramp_split_at(taus, seg.end - seg.start)
        return first.counts_at(taus - m) + self.apportionment(seg.end_units).counts_at(m)

    def base(self, segment: int) -> npt.NDArray[np.int64]:
        """Counts at the start of entry ``segment`` (a copy)."""
        segment = check_int("segment", segment, min_value=0, max_value=len(self._schedule) - 1)
        while len(self._bases) <= segment:
            seg = self._schedule.segments[len(self._bases) - 1]
            if seg.length is None:  # pragma: no cover - only the last entry is open-ended
                raise RuntimeError("an open-ended entry has no successor")
            self._bases.append(self._bases[-1] + self._local(seg, seg.length))
        base: npt.NDArray[np.int64] = self._bases[segment].copy()
        return base

    def counts(self, t: int) -> npt.NDArray[np.int64]:
        """``c_d(t)`` for every source: how many of samples ``0 .. t - 1`` each one supplies.

        Exact Python-int arithmetic, O(K) per entry before ``t`` the first time, O(K) after.

        Raises:
            TypeError, ValueError: If ``t`` is not an int in ``[0, 2**62]``.
        """
        t = check_int("t", t, min_value=0, max_value=MAX_POSITION)
        s = int(np.searchsorted(self._starts, t, side="right")) - 1
        seg = self._schedule.segments[s]
        return self.base(s) + self._local(seg, t - seg.start)

    def counts_at(self, ts: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """``c_d(t)`` for many ``t`` at once: an int64 array of shape ``(n, K)``.

        Vectorised per entry of the schedule (O(depth) numpy calls per entry touched).

        Raises:
            TypeError: If ``ts`` is not integer.
            ValueError: If ``ts`` is not 1-D or a position lies outside ``[0, 2**62]``.
        """
        arr = np.asarray(ts)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise TypeError(f"ts must be integers; got dtype {arr.dtype}")
        if arr.ndim != 1:
            raise ValueError(f"ts must be 1-D; got shape {arr.shape}")
        arr = arr.astype(_I64, copy=False)
        out = np.empty((arr.size, self.num_sources), dtype=_I64)
        if arr.size == 0:
            return out
        if int(arr.min()) < 0 or int(arr.max()) > MAX_POSITION:
            raise ValueError(
                f"ts must lie in [0, 2**62]; got min={int(arr.min())}, max={int(arr.max())}"
            )
        where = np.searchsorted(self._starts, arr, side="right") - 1
        for s in np.flatnonzero(np.bincount(where)).tolist():
            sel = where == s
            seg = self._schedule.segments[s]
            out[sel] = self.base(s) + self._local_at(seg, arr[sel] - seg.start)
        return out

    def share_bounds(self, t: int) -> npt.NDArray[np.float64]:
        """Per-source bound on ``|c_d(t) - S_d(t)|``, ``S_d`` the integral of the schedule's
        quantised weights over samples ``[0, t)``: the sum of :meth:`deviation_bounds` over
        the entries that start at or before ``t`` (NOTE [ Mixture exactness ]).

        Raises:
            TypeError, ValueError: If ``t`` is not an int in ``[0, 2**62]``.
        """
        last = self._schedule.segment_at(check_int("t", t, min_value=0, max_value=MAX_POSITION))
        total: npt.NDArray[np.float64] = np.sum(
            [self.deviation_bounds(i) for i in range(last + 1)], axis=0
        )
        return total

    def deviation_bounds(self, segment: int) -> npt.NDArray[np.float64]:
        """Per-source bound of entry ``segment`` (NOTE [ Mixture exactness ], [ Linear ramps ]).

        Against the quantised weights: ``|c_d(t) - c_d(s) - target_d(t)|`` stays below it
        everywhere in the entry, ``target`` being ``w_d (t - s)`` or the ramp's integral.
        """
        segment = check_int("segment", segment, min_value=0, max_value=len(self._schedule) - 1)
        seg = self._schedule.segments[segment]
        first = self.apportionment(seg.start_units).deviation_bounds()
        if not seg.is_ramp:
            return first
        last = self.apportionment(seg.end_units).deviation_bounds()
        gap = np.abs(
            np.array(seg.end_units, dtype=np.float64) - np.array(seg.start_units, dtype=np.float64)
        )
        bounds: npt.NDArray[np.float64] = first + last + gap / (2 * MAX_TOTAL)
        return bounds
