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

The schedule as data (its entries checked and quantised, its JSON, its trained part: NOTE [
Trained part of a schedule ]) is :mod:`dataorder.llm.mixture_schedule`; this module re-exports
its public names, so ``from dataorder.llm.mixture import MixtureSchedule`` is the import to use.

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

Example:
    >>> sched = MixtureSchedule([(0, [3, 1]), (8, Ramp([3, 1], [1, 3])), (16, [1, 3])])
    >>> mix = Mixture(sched, key=0)
    >>> [mix.counts(t).tolist() for t in (4, 8, 16, 20)]
    [[3, 1], [6, 2], [10, 6], [11, 9]]
    >>> sched.weights_at(12)
    (0.5, 0.5)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.core.apportion import MAX_POSITION, MAX_TOTAL, Apportionment
from dataorder.llm.mixture_schedule import MixtureSchedule, MixtureSegment, Ramp, WeightVector

__all__ = [
    "Mixture",
    "MixtureSchedule",
    "MixtureSegment",
    "Ramp",
    "WeightVector",
    "ramp_split",
]

_I64 = np.int64


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
