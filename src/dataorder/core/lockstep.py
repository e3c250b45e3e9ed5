"""Lock-step steps of buckets driven by counts: a position is how many items of each bucket have
been read, and the bucket of the next step is a pure function of that position.

A grouping puts an epoch's items in ``B`` buckets: bucket ``j`` holds ``n_j`` items, read in a
fixed order of its own (its *stream*: places ``0, 1, 2, ...``), and a rank's batch of it is
``b_j`` items. A *position* is the vector ``c`` of the items of each bucket read so far. A step
on ``R`` ranks reads ``R x b_j`` items of one bucket ``j``, places ``[c_j, c_j + R b_j)``; rank
``r`` takes ``[c_j + r b_j, c_j + (r + 1) b_j)``, so every rank reads the same bucket with the
same batch size (lock-step). A bucket can fill a step while ``n_j - c_j >= R b_j``; when none
can, the epoch ends, and the ``n_j - c_j`` items left of each bucket are not read (a caller
counts them). Which bucket the next step reads is an *arrangement*, chosen among the buckets
that can fill a step: interleaved (NOTE [ Counted interleave ]) or sequential in a given order.

NOTE [ Counted positions ]
    The next bucket depends only on the position and ``R``, so the steps after a position are the
    same whatever path reached it. A state is the position (a few integers); a state written on
    ``R`` ranks continues on any ``R'`` (each of the steps after it is a whole step of
    ``R'``), and an epoch's order is a pure function of the arrangement and the sequence of
    data-parallel sizes it ran on. Nothing per step is stored: the position ``t`` steps ahead
    is a selection among ``B`` sorted sequences (:meth:`CountedBuckets.advance`, O(B^2 log n)
    in exact integers). A step is numbered on ``R`` ranks as ``S_R(0) - S_R(c)``, ``S_R(c) =
    sum_j floor((n_j - c_j) / (R b_j))`` the steps left from ``c``: on ``R``'s own path from the
    epoch's start it is the number of steps taken, and from any position the steps left are
    ``S_R(0)`` (the epoch's length on ``R``) minus it.

NOTE [ Counted interleave ]
    Bucket ``j``'s next step has the key ``K_j = (floor(c_j / (U b_j)) + phi_j) x U b_j / n_j``:
    the share of the bucket read at a point (the phase ``phi_j`` in ``(0, 1)``) of the block of
    ``U`` rank batches that holds ``c_j``, with ``U`` the unit (by default ``R``: a block is one
    step). The next step reads the bucket of the smallest key, ties to the lower row. Keys grow
    as a bucket is read, so each bucket's blocks are spread through the epoch in proportion to
    its size (a divisor method of apportionment: every stretch of steps holds each bucket's
    share within about a block), the steps of one block come together (runs of about ``U / R``
    steps), and phases keyed by the epoch give every epoch another arrangement. ``phi_j =
    (2 h_j + 1) / (2 PHASES)`` for an int ``h_j`` in ``[0, PHASES)``; keys are compared as
    exact fractions of integers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, check_int_array, fail
from dataorder.core.buckets import Grouping, Within
from dataorder.core.partition import MAX_BATCH_SIZE, MAX_POSITIONS

__all__ = ["PHASES", "CountedBuckets", "CountedEpoch"]

#: Phases ``h_j`` of the interleaved arrangement are ints in ``[0, PHASES)``.
PHASES = 2**20

IntArray = npt.NDArray[np.int64]
T_co = TypeVar("T_co", covariant=True)
Counts = tuple[int, ...]
#: A step's sort key: ``(num, den, row)``, the fraction ``num / den`` first.
Key = tuple[int, int, int]


class CountedBuckets:
    """An arrangement of lock-step steps over buckets, driven by counts (module docstring).

    Args:
        sizes: Shape ``(B,)``: items per bucket, ``n_j >= 0`` (an empty bucket is never read).
        batch_sizes: Shape ``(B,)``: a rank's batch of each bucket, ``b_j >= 1``.
        phases: The interleaved arrangement: ``h_j`` in ``[0, PHASES)`` per bucket
            (NOTE [ Counted interleave ]).
        order: The sequential arrangement instead: the bucket rows in reading order (a bucket
            is read while it can fill a step, then the next).
        unit: The interleaved arrangement's block, in rank batches; None: the data-parallel
            size (one step per block).

    Raises:
        ValueError: If the arrays do not match or hold out-of-range values, or not exactly one
            of ``phases`` and ``order`` is given.

    Example:
        >>> cb = CountedBuckets([8, 2], [1, 1], phases=[0, 0])
        >>> cb.steps_left((0, 0), 2), cb.runs((0, 0), 2, 5)  # (bucket, first place, steps)
        (5, [(0, 0, 2), (1, 0, 1), (0, 4, 2)])
        >>> cb.advance((0, 0), 2, 3)  # where the 3 steps above leave every bucket
        (4, 2)
    """

    def __init__(
        self,
        sizes: npt.ArrayLike,
        batch_sizes: npt.ArrayLike,
        *,
        phases: Sequence[int] | None = None,
        order: Sequence[int] | None = None,
        unit: int | None = None,
    ) -> None:
        n = check_int_array("sizes", sizes, min_value=0, max_value=MAX_POSITIONS)
        b = check_int_array("batch_sizes", batch_sizes, min_value=1, max_value=MAX_BATCH_SIZE)
        if n.shape != b.shape or n.ndim != 1:
            fail("batch_sizes", f"one per bucket ({n.shape[0]})", b.tolist())
        self.sizes: list[int] = n.tolist()
        self.batch_sizes: list[int] = b.tolist()
        self.unit = None if unit is None else check_int("unit", unit, min_value=1)
        rows = len(self.sizes)
        if (phases is None) == (order is None):
            fail("phases", "given unless order is (one arrangement)", phases)
        if phases is not None:
            h = check_int_array("phases", phases, min_value=0, max_value=PHASES - 1)
            if h.shape != n.shape:
                fail("phases", f"one per bucket ({rows})", h.tolist())
            self.phases: list[int] | None = h.tolist()
            self._rank = list(range(rows))
        else:
            o = check_int_array("order", order, min_value=0, max_value=max(0, rows - 1))
            if sorted(o.tolist()) != list(range(rows)):
                fail("order", "a permutation of the bucket rows", o.tolist())
            self.phases = None
            self._rank = [0] * rows
            for place, row in enumerate(o.tolist()):
                self._rank[row] = place

    # -- positions --------------------------------------------------------------------------------
    def check(self, counts: Sequence[object], names: Sequence[str]) -> Counts:
        """``counts`` as a position, each ``counts[j]`` (named ``names[j]``) a multiple of
        ``b_j`` in ``[0, n_j]``: whole rank batches, which every step of every layout reads.

        Raises:
            ValueError: Naming the first count that is not.
        """
        if len(counts) != len(self.sizes):
            fail("counts", f"one per bucket ({len(self.sizes)})", list(counts))
        out = []
        for c, name, n, b in zip(counts, names, self.sizes, self.batch_sizes, strict=True):
            v = check_int(name, c, min_value=0)
            if v > n or v % b:
                fail(name, f"a multiple of {b} (whole rank batches) in [0, {n}]", v)
            out.append(v)
        return tuple(out)

    def left(self, counts: Counts, dp_size: int) -> list[int]:
        """Steps each bucket can still fill on ``dp_size`` ranks from ``counts``."""
        return [
            (n - c) // (dp_size * b)
            for n, c, b in zip(self.sizes, counts, self.batch_sizes, strict=True)
        ]

    def steps_left(self, counts: Counts, dp_size: int) -> int:
        """Steps from ``counts`` to the end of the epoch on ``dp_size`` ranks."""
        return sum(self.left(counts, dp_size))

    def leftover(self, counts: Counts, dp_size: int) -> list[int]:
        """Items of each bucket never read when the epoch goes on from ``counts`` on
        ``dp_size`` ranks to its end."""
        return [
            (n - c) % (dp_size * b)
            for n, c, b in zip(self.sizes, counts, self.batch_sizes, strict=True)
        ]

    # -- which bucket -----------------------------------------------------------------------------
    def _block(self, j: int, dp_size: int) -> int:
        return (dp_size if self.unit is None else self.unit) * self.batch_sizes[j]

    def _key(self, j: int, count: int, dp_size: int) -> Key:
        """The sort key of bucket ``j``'s step that starts at place ``count``: the fraction
        ``num / den``, then the row (NOTE [ Counted interleave ]; sequential: the place in
        the order)."""
        if self.phases is None:
            return self._rank[j], 1, j
        block = self._block(j, dp_size)
        g = count // block
        return (2 * PHASES * g + 2 * self.phases[j] + 1) * block, 2 * PHASES * self.sizes[j], j

    def _before(self, k: int, key: Key, c: int, s: int, m: int, dp_size: int) -> int:
        """How many of bucket ``k``'s next ``m`` steps (from place ``c``, ``s`` items each) sort
        before ``key``."""
        num, den, j = key
        if self.phases is None:
            return m if (self._rank[k], k) < (num, j) else 0
        block, q = self._block(k, dp_size), 2 * PHASES
        # blocks g with (q g + 2h + 1) B / (q n) < num / den (<= for a lower row): g < x (g <= x)
        # for x = top / bottom, in exact integers
        top = num * q * self.sizes[k] - (2 * self.phases[k] + 1) * den * block
        bottom = q * den * block
        blocks = top // bottom + 1 if k < j else -(-top // bottom)
        return min(m, max(0, -(-(blocks * block - c) // s)))

    def advance(self, counts: Counts, dp_size: int, steps: int) -> Counts:
        """The position ``steps`` steps after ``counts`` on ``dp_size`` ranks (NOTE [ Counted
        positions ]), without walking them.

        Raises:
            ValueError: If ``steps`` is more than the epoch has left from ``counts``.
        """
        m = self.left(counts, dp_size)
        steps = check_int("steps", steps, min_value=0, max_value=sum(m))
        s = [dp_size * b for b in self.batch_sizes]
        if steps == sum(m):
            return tuple(c + mj * sj for c, mj, sj in zip(counts, m, s, strict=True))
        rows = range(len(m))
        for j in rows:
            lo, hi = 0, m[j] - 1  # the last of bucket j's steps whose rank is <= steps
            found = None
            while lo <= hi:
                i = (lo + hi) // 2
                key = self._key(j, counts[j] + i * s[j], dp_size)
                before = [
                    i if k == j else self._before(k, key, counts[k], s[k], m[k], dp_size)
                    for k in rows
                ]
                if sum(before) <= steps:
                    found, lo = before, i + 1
                else:
                    hi = i - 1
            if found is not None and sum(found) == steps:
                return tuple(c + f * sk for c, f, sk in zip(counts, found, s, strict=True))
        raise AssertionError("unreachable: one bucket holds the step")  # pragma: no cover

    def next_bucket(self, counts: Counts, dp_size: int) -> int | None:
        """The bucket of the step at ``counts`` on ``dp_size`` ranks; None at the epoch's end."""
        best: Key | None = None
        for j, (n, c, b) in enumerate(zip(self.sizes, counts, self.batch_sizes, strict=True)):
            if n - c >= dp_size * b:
                key = self._key(j, c, dp_size)
                if best is None or key[0] * best[1] < best[0] * key[1]:  # ties: the lower row
                    best = key
        return None if best is None else best[2]

    def runs(self, counts: Counts, dp_size: int, steps: int) -> list[tuple[int, int, int]]:
        """The next ``steps`` steps from ``counts`` as runs ``(bucket, first place, steps)`` of
        one bucket each (fewer steps if the epoch ends first)."""
        out: list[tuple[int, int, int]] = []
        at = list(counts)
        for _ in range(steps):
            j = self.next_bucket(tuple(at), dp_size)
            if j is None:
                break
            if out and out[-1][0] == j:
                out[-1] = (j, out[-1][1], out[-1][2] + 1)
            else:
                out.append((j, at[j], 1))
            at[j] += dp_size * self.batch_sizes[j]
        return out


@dataclass(frozen=True, eq=False)
class CountedEpoch(Generic[T_co]):
    """The :class:`~dataorder.core.cursor.EpochPlan` of counted lock-step steps on one layout,
    over a :class:`~dataorder.core.buckets.Grouping`; progress is ``{keys[j]: c_j}``.

    Steps are numbered as NOTE [ Counted positions ] says. The steps from ``anchor`` on are its
    path (where a resumed run goes on); the steps before ``anchor``'s are this layout's own path
    from the epoch's start. :meth:`anchored` gives the plan of another anchor.

    Attributes:
        buckets: The arrangement.
        dp_size: Data-parallel ranks ``R``.
        keys: The progress key of each bucket.
        within: ``within(j)``: bucket ``j``'s order of places (its stream).
        grouping: What a bucket's places hold.
        anchor: Where the path this plan follows passes.
    """

    buckets: CountedBuckets
    dp_size: int
    keys: tuple[str, ...]
    within: Callable[[int], Within]
    grouping: Grouping[T_co]
    anchor: Counts = ()
    _orders: dict[int, Within] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.anchor:
            object.__setattr__(self, "anchor", (0,) * len(self.keys))

    def anchored(self, progress: Mapping[str, int]) -> CountedEpoch[T_co]:
        """This plan, following the path through ``progress`` (checked)."""
        return replace(self, anchor=self.counts(progress))

    def counts(self, progress: Mapping[str, int]) -> Counts:
        """``progress`` as a position (checked: ValueError naming the key)."""
        return self.buckets.check([progress[k] for k in self.keys], self.keys)

    @property
    def num_steps(self) -> int:
        return self.buckets.steps_left((0,) * len(self.keys), self.dp_size)

    def step_of(self, progress: Mapping[str, int], *, strict: bool = False) -> int:
        return self.num_steps - self.buckets.steps_left(self.counts(progress), self.dp_size)

    def _counts_at(self, step: int) -> Counts:
        step = check_int("step", step, min_value=0, max_value=self.num_steps)
        origin = self.num_steps - self.buckets.steps_left(self.anchor, self.dp_size)
        if step >= origin:
            return self.buckets.advance(self.anchor, self.dp_size, step - origin)
        return self.buckets.advance((0,) * len(self.keys), self.dp_size, step)

    def progress_at(self, step: int) -> dict[str, int]:
        return dict(zip(self.keys, self._counts_at(step), strict=True))

    def left_over(self) -> list[int]:
        """Items of each bucket the epoch leaves unread, on the path through the anchor."""
        return self.buckets.leftover(self.anchor, self.dp_size)

    def _order(self, j: int) -> Within:
        order = self._orders.get(j)
        if order is None:
            order = self._orders[j] = self.within(j)
        return order

    def batches(self, rank: int, start: int, stop: int) -> list[T_co]:
        out: list[T_co] = []
        if stop <= start:
            return out
        at = self._counts_at(start)
        for j, first, steps in self.buckets.runs(at, self.dp_size, stop - start):
            b = self.buckets.batch_sizes[j]
            rows = first + np.arange(steps, dtype=np.int64)[:, None] * (self.dp_size * b)
            places = rows + rank * b + np.arange(b, dtype=np.int64)
            out += self.grouping.take(j, self._order(j)(places.ravel()).reshape(places.shape))
        return out

    def describe(self, progress: Mapping[str, int], epoch: int) -> str:
        """Where ``progress`` stands in ``epoch``: the items read of each bucket."""
        counts = self.counts(progress)
        read = ", ".join(
            f"{self.grouping.shape_name(j)}: {c} of {n}"
            for j, (c, n) in enumerate(zip(counts, self.buckets.sizes, strict=True))
            if n
        )
        return f"epoch {epoch}, read of each bucket: {read}"
