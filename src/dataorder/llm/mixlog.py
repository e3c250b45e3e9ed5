"""Mixture logs: source weights a running job decides, replayed exactly from an append-only log.

A :class:`MixtureLog` is the schedule an online data-mixing method writes while it trains (an
EXP3 bandit on the training loss, DoReMi-style reweighting): ``log.set_weights(step, weights)``
says that global batch ``step`` and every later one draw with ``weights``, until the next entry.
A sampler takes the log wherever it takes a :class:`~dataorder.llm.mixture.MixtureSchedule`
(:class:`~dataorder.llm.blend.BlendedSampler`'s ``weights=``,
:class:`~dataorder.llm.packing.sampler.PackedSampler`'s ``mixture=``); its order is then a pure
function of (configuration, seed, log, position): every rank that appends the same entries reads
the same order, on any data-parallel size, and a resume replays nothing.

* An entry takes effect at the start of global batch ``step`` (a global-batch boundary), never
  inside a global batch: an entry for a step a sampler sharing the log has already begun (it
  computed the quotas of that batch) is refused, naming the step (NOTE [ Frozen steps ]).
* Appending costs O(K) (the weights quantised once, a digest chained) and nothing per step
  afterwards; the counts at a position cost a bisection over the entries plus O(K) work.
* A log built with ``sizes=`` also records corpus changes: :meth:`MixtureLog.grow`,
  :meth:`MixtureLog.retire`, :meth:`MixtureLog.add_source`; every source's pass still reads each
  of its documents once (NOTE [ Corpus changes ] in ``docs/design.md``).
* :func:`broadcast_weights` is how a job appends: rank 0 decides, one broadcast of ``K + 1``
  float64 values (the step and the weights) reaches every rank, and each appends the same entry.
* The log is saved beside the sampler's state (:meth:`MixtureLog.save`, and in
  :class:`~dataorder.integrations.dcp.OrderState`); the state holds only the number of entries
  trained and their chained digest, so it stays a few hundred bytes however long the log.

NOTE [ Mixture log exactness ]
    A :class:`~dataorder.llm.mixture.MixtureSchedule` apportions each of its entries on its own
    and carries the offset an entry ends with into the next (NOTE [ Mixture exactness ] in
    :mod:`dataorder.llm.mixture`), so its bound grows with the entries trained. A log written by
    a controller may hold 10**4 entries, so its counts track the *integral* instead:
    ``S_d(t)``, the sum over entries of ``w_d`` (quantised) times the samples of the entry
    before ``t``. ``c_d(t)`` is built by a fixed binary tree over the sources (balanced by
    index). Node ``v`` covers a range of sources; its count ``c_v`` and target ``S_v`` are the
    sums over the range, its error ``E_v = c_v - S_v``; the root's count is ``t`` (exact). In
    an entry that starts at sample ``s`` with node ``v``'s first child ``a`` holding the
    fraction ``rho`` of ``v``'s weight, ``a`` receives, of the ``n = c_v(t) - c_v(s)`` samples
    ``v`` received since ``s``::

        clamp(floor(rho * n + phi), 0, n),   phi = 1/2 + rho * E_v(s) - E_a(s)

    and the second child the rest. ``floor(rho n + phi)`` rises by 0 or 1 with ``n``, and so
    does ``n`` minus it, so both children are monotone (every global batch's quota is
    non-negative) and sum to ``v``. Unclamped, ``E_a = 1/2 + rho E_v - theta`` with
    ``theta`` in ``[0, 1)``: the error ``a`` entered the entry with is cancelled at once, so
    nothing accumulates from entry to entry. A clamp holds only at the start of an entry, while
    an over-served child waits (its error only falls) or an under-served one takes every sample
    of ``v`` (its error only rises). By induction over time and depth, with ``U_v`` and ``L_v``
    the largest positive and negative errors of node ``v`` (``0`` at the root):
    ``U_a <= 1/2 + U_v`` and ``L_a <= L_v + U_v + 1/2``, so a source at depth ``h`` stays
    within ``h (h + 1) / 4`` samples of its integral (above it by at most ``h / 2``), at every
    sample, whatever the number of entries: 1.5 for 3 sources, 18 for 200 (depth 8);
    :meth:`LogMixture.deviation_bounds` gives them. Measured on random logs they are far
    smaller (``tests/llm/test_mixlog.py``). A weight of 0 draws nothing new: a source whose
    weight drops to 0 is given at most the samples it is owed (its error, within the bound) and
    then none; a source of weight ``1e-6`` gets its first sample within ``bound / 1e-6``
    samples. All arithmetic is exact Python integers (weights quantised to ``2**40`` units,
    :func:`~dataorder.core.apportion.quantize_weights`).

NOTE [ Frozen steps ]
    The counts of global batch ``k`` (and so its layout of slots) may be computed by a rank the
    moment its first micro-batch is asked for. An entry appended for a step ``<= k`` after that
    would change a batch that some rank has begun, so ranks (or a resumed run) would disagree.
    Every :class:`LogMixture` tells its log the first step it has not begun; the log refuses an
    entry before it, naming both. A sampler over a log computes one micro-batch at a time, so
    an entry for the next step is accepted until the next step's first micro-batch is asked
    for. Decide the weights of step ``k + 1`` after step ``k`` (as
    ``examples/online_mixing.py`` does), or for ``k + 2`` when a loader prefetches a step.

Example:
    >>> from dataorder.llm.schedule import BatchSizeSchedule
    >>> log = MixtureLog([1, 1, 2])
    >>> log.set_weights(3, [0, 1, 1])
    >>> mix = log.compile(key=0, batches=BatchSizeSchedule.constant(4))
    >>> [mix.counts(t).tolist() for t in (4, 12, 20)]
    [[1, 1, 2], [3, 3, 6], [3, 7, 10]]
"""

from __future__ import annotations

import bisect
import hashlib
import io
import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.core.apportion import MAX_POSITION, MAX_TOTAL, quantize_weights
from dataorder.llm.schedule import BatchSizeSchedule

__all__ = [
    "MIXLOG_FORMAT",
    "SOURCE_STRIDE",
    "LogEntry",
    "LogMixture",
    "MixtureLog",
    "SourceDatasets",
    "broadcast_weights",
    "split_index",
]

#: The ``format`` of a saved log (:meth:`MixtureLog.save`); version 1.
MIXLOG_FORMAT = "dataorder.mixlog.1"

#: Largest step of an entry.
MAX_STEP = 2**62

_I64 = np.int64
_U64 = np.uint64
_BLOCK = 1024  # entries per block of a log's units: an append never copies the earlier ones
_ERROR_LIMIT = 2**56  # a scaled error (E * 2**40) stays far below: |E| <= h (h + 1) / 4
_LOW20 = (1 << 20) - 1
_WAVE_LEAST = 16  # from this many segments to build, one wave of the tree per segment
_WAVE_CHUNK = 4096  # segments a wave builds at once (bounds its memory: 2 int64 per node each)
_LOW40 = (1 << 40) - 1
_UNIT_BYTES = 6  # a quantised weight is at most 2**40: six bytes in a saved log
_DIGEST = 8  # bytes of each chained digest
_SEED_DIGEST = hashlib.blake2b(MIXLOG_FORMAT.encode(), digest_size=_DIGEST).digest()
_OP_WEIGHTS = 0
_OP_GROW = 1
_OP_RETIRE = 2
_OP_ADD = 3
_OPS = {_OP_WEIGHTS: "weights", _OP_GROW: "grow", _OP_RETIRE: "retire", _OP_ADD: "add"}
#: Flat index of document ``i`` of source ``d`` in a blend over a log with corpus entries:
#: ``d * SOURCE_STRIDE + i`` (NOTE [ Corpus changes ]).
SOURCE_STRIDE = 2**40


@dataclass(frozen=True)
class LogEntry:
    """One decision of a :class:`MixtureLog`.

    Attributes:
        index: Its index in the log.
        step: The global batch from which it holds.
        units: The weights, quantised to ``2**40`` units (what the order depends on).
        op: ``"weights"``, or a corpus change: ``"grow"``, ``"retire"`` or ``"add"``
            (NOTE [ Corpus changes ]).
        source: The source a corpus change concerns (None for ``"weights"``).
        size: Its size after a ``"grow"`` or ``"add"`` (None otherwise).
    """

    index: int
    step: int
    units: tuple[int, ...]
    op: str = "weights"
    source: int | None = None
    size: int | None = None

    @property
    def weights(self) -> tuple[float, ...]:
        """The normalised weights (floats of the quantised ones)."""
        return tuple(u / MAX_TOTAL for u in self.units)


def _chain(
    previous: bytes, step: int, op: int, units: npt.NDArray[np.int64], extra: bytes = b""
) -> bytes:
    h = hashlib.blake2b(previous, digest_size=_DIGEST)
    h.update(int(step).to_bytes(8, "little"))
    h.update(bytes([op]))
    h.update(np.ascontiguousarray(units, dtype="<i8").tobytes())
    h.update(extra)  # the sizes (first entry) or (source, size) of a corpus change
    return h.digest()


class MixtureLog:
    """An append-only, step-keyed log of source weights (see the module docstring).

    Args:
        weights: The weights from step 0 (non-negative finite reals, at least one positive,
            normalised): the log's first entry. Their number is the number of sources K.
        sizes: The sources' sizes (documents) at step 0, for a log that records corpus changes
            (:meth:`grow`, :meth:`retire`, :meth:`add_source`; NOTE [ Corpus changes ] in
            ``docs/design.md``): a source to be added later is declared with size 0 and weight
            0, so the tree over the sources stays fixed. A blend over such a log indexes
            document ``i`` of source ``d`` as ``d * SOURCE_STRIDE + i`` (read it with
            :class:`SourceDatasets`). None: no corpus changes, ``ConcatDataset`` indices.

    Raises:
        TypeError, ValueError: If a weight is not a finite non-negative real, or all are 0, or
            a size is not a non-negative int, or a source of size 0 has a positive weight.

    Example:
        >>> log = MixtureLog([0.5, 0.5])
        >>> log.set_weights(10, [0.75, 0.25])
        >>> len(log), log.entry(1).step, log.entry(1).weights
        (2, 10, (0.75, 0.25))

        A corpus that changes: source 2 is added at step 5, source 0 grows at step 8, source 1
        is retired at step 9.

        >>> log = MixtureLog([1, 1, 0], sizes=[100, 50, 0])
        >>> log.add_source(5, 2, 30, [1, 1, 1])
        >>> log.grow(8, 0, 160)
        >>> log.retire(9, 1)
        >>> log.current_sizes, sorted(log.retired), [e.op for e in log.corpus_changes()]
        ((160, 50, 30), [1], ['add', 'grow', 'retire'])
    """

    __slots__ = (
        "__weakref__",
        "_blocks",
        "_chain",
        "_events",
        "_frozen",
        "_k",
        "_n",
        "_retired",
        "_sizes",
        "_sizes0",
        "_steps",
        "_users",
    )

    def __init__(self, weights: Sequence[Any], *, sizes: Sequence[int] | None = None) -> None:
        units = self._quantise("weights", weights, None)
        self._init(len(units), sizes)
        self._check_empty("weights", units)
        self._append(0, units)

    def _init(self, k: int, sizes: Sequence[int] | None) -> None:
        self._k = k
        self._n = 0
        self._steps = np.zeros(16, dtype=_I64)
        self._blocks: list[npt.NDArray[np.int64]] = []  # the units, _BLOCK entries each
        self._chain: list[bytes] = [_SEED_DIGEST]
        self._frozen = 0
        self._users: weakref.WeakSet[LogMixture] = weakref.WeakSet()
        self._events: list[tuple[int, int, int, int]] = []  # (entry, op, source, size)
        self._retired: set[int] = set()
        if sizes is None:
            self._sizes0: tuple[int, ...] | None = None
            self._sizes: list[int] = []
            return
        if isinstance(sizes, str | bytes) or not isinstance(sizes, Sequence):
            fail("sizes", "a sequence of non-negative ints, one per source", sizes, TypeError)
        if len(sizes) != k:
            fail("len(sizes)", f"the number of sources, {k}", len(sizes))
        self._sizes0 = tuple(
            check_int(f"sizes[{d}]", n, min_value=0, max_value=SOURCE_STRIDE)
            for d, n in enumerate(sizes)
        )
        self._sizes = list(self._sizes0)

    def _check_empty(self, name: str, units: Sequence[int]) -> None:
        """A source of size 0 (not added yet) or retired must have weight 0."""
        if self._sizes0 is None:
            return
        for d, u in enumerate(units):
            if u and (self._sizes[d] == 0 or d in self._retired):
                what = "retired" if d in self._retired else "of size 0 (not added yet)"
                fail(f"{name}[{d}]", f"0: source {d} is {what}", units[d] / MAX_TOTAL)

    # -- appending ------------------------------------------------------------------------------
    @staticmethod
    def _quantise(name: str, weights: object, k: int | None) -> tuple[int, ...]:
        if isinstance(weights, np.ndarray):
            weights = weights.tolist()
        if isinstance(weights, str | bytes) or not isinstance(weights, Sequence):
            fail(name, "a sequence of non-negative reals, one per source", weights, TypeError)
        if k is not None and len(weights) != k:
            fail(f"len({name})", f"the number of sources, {k}", len(weights))
        try:
            return quantize_weights(weights)
        except (TypeError, ValueError) as err:
            message = str(err).replace("weights", name, 1)
            raise type(err)(message) from None

    def _append(
        self,
        step: int,
        units: Sequence[int] | npt.NDArray[np.int64],
        op: int = _OP_WEIGHTS,
        source: int = 0,
        size: int = 0,
    ) -> None:
        if self._n == self._steps.size:  # 8 bytes an entry: a copy of 80 kB at 10**4
            self._steps = np.concatenate([self._steps, np.zeros_like(self._steps)])
        block, at = divmod(self._n, _BLOCK)
        if block == len(self._blocks):  # never a copy of the earlier units
            self._blocks.append(np.zeros((_BLOCK, self._k), dtype=_I64))
        row = np.asarray(units, dtype=_I64)
        if op != _OP_WEIGHTS:
            extra = np.array([source, size], dtype="<i8").tobytes()
            self._events.append((self._n, op, source, size))
            if op == _OP_RETIRE:
                self._retired.add(source)
            else:
                self._sizes[source] = size
        elif self._n == 0 and self._sizes0 is not None:
            extra = np.array(self._sizes0, dtype="<i8").tobytes()
        else:
            extra = b""
        self._steps[self._n] = step
        self._blocks[block][at] = row
        self._chain.append(_chain(self._chain[-1], step, op, row, extra))
        self._n += 1

    def _check_step(self, step: int) -> int:
        step = check_int("step", step, min_value=0, max_value=MAX_STEP)
        last = int(self._steps[self._n - 1])
        if step < last:
            fail("step", f"at least the last entry's step, {last} (the log is append-only)", step)
        if step < self._frozen:
            fail(
                "step",
                f"at least {self._frozen}: a sampler over this log has begun global batch "
                f"{self._frozen - 1} (NOTE [ Frozen steps ])",
                step,
            )
        return step

    def set_weights(self, step: int, weights: Sequence[Any]) -> None:
        """Draw with ``weights`` from global batch ``step`` on (until the next entry).

        Steps never decrease; an entry at the step of the last one replaces its weights from
        that step (both stay in the log). O(K): the weights are quantised and a digest chained.

        Args:
            step: A global batch (a training step), at least the last entry's and at least the
                first step no sampler over this log has begun (NOTE [ Frozen steps ]).
            weights: K non-negative finite reals, at least one positive; 0 for a source not
                added yet or retired (a log with ``sizes``).

        Raises:
            TypeError, ValueError: If the step is before the last entry's or inside a global
                batch a sampler has begun, or the weights are malformed (named).
        """
        step = self._check_step(step)
        units = self._quantise("weights", weights, self._k)
        self._check_empty("weights", units)
        self._append(step, units)

    # -- corpus changes (NOTE [ Corpus changes ]) -------------------------------------------------
    def _check_source(self, source: int) -> int:
        if self._sizes0 is None:
            fail(
                "log",
                "a MixtureLog built with sizes= (corpus changes need the sources' sizes)",
                "MixtureLog without sizes",
            )
        source = check_int("source", source, min_value=0, max_value=self._k - 1)
        if source in self._retired:
            fail("source", "a source not retired", source)
        return source

    def grow(self, step: int, source: int, size: int) -> None:
        """Source ``source`` has ``size`` documents from global batch ``step`` on (documents
        appended: its old ones keep their indices). The weights do not change.

        The rest of the source's pass under way reads every document it has not read, old and
        new, once (NOTE [ Corpus changes ]); later passes read all ``size`` documents.

        Raises:
            ValueError: If the log has no sizes, the step is refused (as in
                :meth:`set_weights`), the source is retired or empty, or ``size`` is not larger
                than its size.
        """
        step = self._check_step(step)
        source = self._check_source(source)
        old = self._sizes[source]
        if old == 0:
            fail("source", "a source of positive size (add_source adds an empty one)", source)
        size = check_int("size", size, min_value=old + 1, max_value=SOURCE_STRIDE)
        self._append(step, self._row(self._n - 1).copy(), _OP_GROW, source, size)

    def retire(self, step: int, source: int) -> None:
        """Source ``source`` draws nothing new from global batch ``step`` on: its weight becomes
        0 (the others renormalised), and stays 0. It is still given the few samples it is owed
        (at most its deviation bound; NOTE [ Mixture log exactness ]), which continue its pass;
        the documents of its pass it never reads are counted
        (:meth:`~dataorder.llm.blend.BlendedSampler.retired_unread`).

        Raises:
            ValueError: If the log has no sizes, the step is refused, the source is retired or
                empty, or it is the only one with a positive weight.
        """
        step = self._check_step(step)
        source = self._check_source(source)
        if self._sizes[source] == 0:
            fail("source", "a source that was added (it has size 0)", source)
        units = self._row(self._n - 1).tolist()
        units[source] = 0
        if not any(units):
            fail("source", "a source other than the only one with a positive weight", source)
        self._append(step, quantize_weights(units), _OP_RETIRE, source, -1)

    def add_source(self, step: int, source: int, size: int, weights: Sequence[Any]) -> None:
        """Add source ``source`` with ``size`` documents, drawing with ``weights`` from global
        batch ``step`` on. It starts a pass of its own.

        A source to be added is declared when the log is built, with size 0 (``sizes``) and
        weight 0: the tree over the sources (NOTE [ Mixture log exactness ]) stays fixed, so
        the bound holds across the addition, and the source's integral starts at this entry.

        Raises:
            ValueError: If the log has no sizes, the step is refused, the source was added or
                retired already, ``size`` is not positive, or the weights are malformed.
        """
        step = self._check_step(step)
        source = self._check_source(source)
        if self._sizes[source] != 0:
            fail("source", "a source declared with size 0 and not added yet", source)
        size = check_int("size", size, min_value=1, max_value=SOURCE_STRIDE)
        units = self._quantise("weights", weights, self._k)
        self._sizes[source] = size
        try:
            self._check_empty("weights", units)
        finally:
            self._sizes[source] = 0
        self._append(step, units, _OP_ADD, source, size)

    @property
    def sizes(self) -> tuple[int, ...] | None:
        """The sources' sizes when the log was built (None: a log without corpus changes)."""
        return self._sizes0

    @property
    def current_sizes(self) -> tuple[int, ...] | None:
        """The sources' sizes after every entry (None: a log without corpus changes)."""
        return None if self._sizes0 is None else tuple(self._sizes)

    @property
    def retired(self) -> frozenset[int]:
        """The sources retired by the log's entries."""
        return frozenset(self._retired)

    def corpus_changes(self) -> list[LogEntry]:
        """The log's corpus changes (grow, retire, add), in order."""
        return [self.entry(e[0]) for e in self._events]

    # -- reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @property
    def num_sources(self) -> int:
        """The number of sources K."""
        return self._k

    @property
    def frozen_step(self) -> int:
        """The first step a new entry may take (NOTE [ Frozen steps ])."""
        return self._frozen

    def entry(self, index: int) -> LogEntry:
        """Entry ``index`` (0-based)."""
        index = check_int("index", index, min_value=0, max_value=self._n - 1)
        units = tuple(int(u) for u in self._row(index).tolist())
        for at, op, source, size in self._events:
            if at == index:
                shown = None if size < 0 else size
                return LogEntry(index, int(self._steps[index]), units, _OPS[op], source, shown)
        return LogEntry(index, int(self._steps[index]), units)

    @property
    def steps(self) -> npt.NDArray[np.int64]:
        """The entries' steps (a copy)."""
        out: npt.NDArray[np.int64] = self._steps[: self._n].copy()
        return out

    @property
    def units(self) -> npt.NDArray[np.int64]:
        """The entries' quantised weights, shape ``(len(self), K)`` (a read-only copy)."""
        out = self._rows()
        out.flags.writeable = False
        return out

    def _row(self, index: int) -> npt.NDArray[np.int64]:
        """Entry ``index``'s units (a view)."""
        block, at = divmod(index, _BLOCK)
        out: npt.NDArray[np.int64] = self._blocks[block][at]
        return out

    def _rows(self) -> npt.NDArray[np.int64]:
        """Every entry's units, shape ``(len(self), K)`` (a copy)."""
        out: npt.NDArray[np.int64] = np.concatenate(self._blocks)[: self._n]
        return out

    def digest(self, entries: int | None = None) -> str:
        """16 hex digits chained over the first ``entries`` entries (default: all)."""
        m = (
            self._n
            if entries is None
            else check_int("entries", entries, min_value=0, max_value=self._n)
        )
        return self._chain[m].hex()

    def first_difference(self, other: MixtureLog) -> int | None:
        """The first entry where ``other`` differs from this log (one being shorter counts as a
        difference at its length), or None when they are equal."""
        if not isinstance(other, MixtureLog):
            fail("other", "a MixtureLog", other, TypeError)
        m = min(self._n, other._n)
        if self._chain[m] == other._chain[m]:
            return None if self._n == other._n else m
        # chained digests: equal after i entries means equal up to i, so bisect the change
        lo, hi = 0, m  # equal after lo entries, different after hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._chain[mid] == other._chain[mid]:
                lo = mid
            else:
                hi = mid
        return lo

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MixtureLog):
            return NotImplemented
        return self._n == other._n and self._chain[-1] == other._chain[-1]

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"MixtureLog(sources={self._k}, entries={self._n}, last_step="
            f"{int(self._steps[self._n - 1])}, digest={self.digest()})"
        )

    # -- restoring --------------------------------------------------------------------------------
    def extend_to(self, saved: MixtureLog) -> None:
        """Append the entries of ``saved`` this log lacks (a resume: the live log, often just its
        first entry, catches up with the one saved in the checkpoint).

        Raises:
            ValueError: If this log is not a prefix of ``saved``, naming the first entry that
                differs.
        """
        first = self.first_difference(saved)
        if first is None or first == saved._n:  # equal, or the saved log is a prefix of this
            return
        if first < self._n or saved._k != self._k:
            fail(
                "saved",
                f"a log that continues this one; its entry {first} differs from this log's "
                f"({self._describe(first)} here, {saved._describe(first)} saved)",
                f"<MixtureLog of {saved._n} entries>",
            )
        events = {e[0]: e[1:] for e in saved._events}
        for i in range(first, saved._n):
            step = int(saved._steps[i])
            if step < self._frozen:
                fail("saved", f"entries from step {self._frozen} on (NOTE [ Frozen steps ])", step)
            self._append(step, saved._row(i), *events.get(i, (_OP_WEIGHTS, 0, 0)))

    def _describe(self, index: int) -> str:
        if index >= self._n:
            return f"no entry {index} ({self._n} entries)"
        return f"step {int(self._steps[index])}, digest {self._chain[index + 1].hex()}"

    # -- files ----------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The log as an ``.npz`` file's bytes (see :meth:`save`)."""
        buf = io.BytesIO()
        units = self._rows().astype("<u8").view(np.uint8)
        packed = units.reshape(self._n, self._k, 8)[:, :, :_UNIT_BYTES]
        arrays: dict[str, npt.NDArray[Any]] = {
            "format": np.array(MIXLOG_FORMAT),
            "steps": self._steps[: self._n].astype("<i8"),
            "units": np.ascontiguousarray(packed),
            "digest": np.array(self.digest()),
        }
        if self._sizes0 is not None:  # corpus changes: the first sizes and every change
            arrays["sizes"] = np.array(self._sizes0, dtype="<i8")
            arrays["events"] = np.array(self._events, dtype="<i8").reshape(-1, 4)
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        return buf.getvalue()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the log to ``path``: an uncompressed ``.npz`` of ``format``, ``steps`` (int64),
        ``units`` (each quantised weight, at most 2**40, in 6 little-endian bytes: 1200 bytes
        per entry at K = 200, 12 MB for 10**4 entries) and ``digest`` (the chained digest of
        all entries, checked on load). Written to a temporary file and renamed into place."""
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "wb") as f:
            f.write(self.to_bytes())
        os.replace(tmp, path)

    @classmethod
    def from_bytes(cls, data: bytes, *, name: str = "log") -> MixtureLog:
        """The log :meth:`to_bytes` wrote.

        Raises:
            ValueError: If ``data`` is not a saved log, or its digest disagrees with its
                entries (an edited or truncated file), naming ``name``.
        """
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                fmt = str(z["format"])
                steps = z["steps"].astype(_I64)
                packed = z["units"]
                recorded = str(z["digest"])
                sizes = z["sizes"].tolist() if "sizes" in z.files else None
                events = z["events"].tolist() if "events" in z.files else []
        except Exception as err:  # any unreadable file is the same refusal
            fail(name, f"a saved MixtureLog ({MIXLOG_FORMAT} .npz)", f"<unreadable: {err}>")
        if fmt != MIXLOG_FORMAT:
            fail(f"{name}.format", repr(MIXLOG_FORMAT), fmt)
        if packed.ndim != 3 or packed.shape[0] != steps.size or packed.shape[2] != _UNIT_BYTES:
            fail(f"{name}.units", f"shape (entries, K, {_UNIT_BYTES})", packed.shape)
        if steps.size == 0 or steps[0] != 0:
            fail(f"{name}.steps", "a log whose first entry is at step 0", steps[:1].tolist())
        full = np.zeros((*packed.shape[:2], 8), dtype=np.uint8)
        full[:, :, :_UNIT_BYTES] = packed
        units = full.view("<u8").reshape(packed.shape[:2]).astype(_I64)
        log = cls.__new__(cls)
        log._init(units.shape[1], sizes)
        log._steps = np.zeros(max(16, steps.size), dtype=_I64)
        by_entry: dict[int, tuple[int, int, int]] = {}
        for row in events:
            if len(row) != 4 or row[1] not in _OPS or not 0 <= row[2] < log._k:
                fail(f"{name}.events", "rows (entry, op, source, size)", row)
            by_entry[int(row[0])] = (int(row[1]), int(row[2]), int(row[3]))
        for i in range(steps.size):
            row = units[i]
            if int(row.sum()) != MAX_TOTAL or int(row.min()) < 0:
                fail(f"{name}.units[{i}]", "quantised weights summing to 2**40", row.tolist())
            if i and steps[i] < steps[i - 1]:
                fail(f"{name}.steps[{i}]", f"at least steps[{i - 1}]={steps[i - 1]}", steps[i])
            log._append(int(steps[i]), row, *by_entry.get(i, (_OP_WEIGHTS, 0, 0)))
        if log.digest() != recorded:
            fail(
                f"{name}.digest",
                f"the digest of its entries, {log.digest()} (the file was edited or truncated)",
                recorded,
            )
        return log

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MixtureLog:
        """The log :meth:`save` wrote to ``path``."""
        with open(path, "rb") as f:
            return cls.from_bytes(f.read(), name=os.fspath(path))

    # -- compiling ------------------------------------------------------------------------------
    def compile(self, key: int, batches: BatchSizeSchedule) -> LogMixture:
        """The counts of this log for a sampler with ``batches`` (steps to samples)."""
        return LogMixture(self, key, batches)

    def _freeze(self, step: int) -> None:
        self._frozen = max(self._frozen, step)


def _tree(k: int) -> tuple[list[tuple[int, int, int, int, int, int]], list[int]]:
    """The fixed binary tree over ``k`` sources, balanced by index.

    Returns ``(nodes, depths)``: internal nodes top-down as ``(v, a, b, lo, mid, hi)`` (node
    ``v`` covers sources ``lo .. hi - 1``, its first child ``a`` covers ``lo .. mid - 1``;
    sources are nodes ``0 .. k - 1``), and each source's depth.
    """
    nodes: list[tuple[int, int, int, int, int, int]] = []
    depths = [0] * k
    counter = [k]

    def build(lo: int, hi: int, depth: int) -> int:
        if hi - lo == 1:
            depths[lo] = depth
            return lo
        mid = (lo + hi) // 2
        a = build(lo, mid, depth + 1)
        b = build(mid, hi, depth + 1)
        v = counter[0]
        counter[0] += 1
        nodes.append((v, a, b, lo, mid, hi))
        return v

    build(0, k, 0)
    nodes.reverse()  # parents before children
    return nodes, depths


def _quota_constant(
    ua: npt.NDArray[np.int64],
    uv: npt.NDArray[np.int64],
    ev: npt.NDArray[np.int64],
    ea: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """``ua (E_v >> 40) - uv (E_a >> 40) + floor(L / 2**40)`` of NOTE [ Segment bases in
    int64 ], exact in int64."""
    evl, eal = ev & _LOW40, ea & _LOW40
    a1 = ua * (evl >> 20) - uv * (eal >> 20)
    a0 = ua * (evl & _LOW20) - uv * (eal & _LOW20)
    out: npt.NDArray[np.int64] = (
        ua * (ev >> 40) - uv * (ea >> 40) + (((uv << 19) + a1 + (a0 >> 20)) >> 20)
    )
    return out


class _LevelWalk:
    """The walk of :meth:`LogMixture._local` over all nodes of a level at once, in int64.

    NOTE [ Segment bases in int64 ]
        A segment's base (each source's count and scaled error at its start) depends on every
        earlier segment, so a resume at ``N`` entries walks the tree ``N`` times. In Python
        integers that is 0.66 ms an entry at K = 200; here one entry is a few dozen numpy
        operations on arrays of a level's nodes (the tree has ``ceil(log2 K)`` levels). The
        quota ``x = floor(P / Q)`` of :meth:`LogMixture._segment_params` (halved:
        ``P = 2**40 ua n + 2**39 uv + ua E_v - uv E_a``, ``Q = 2**40 uv``, errors scaled by
        ``2**40``) has 143-bit terms, yet it is computed exactly in int64:

        * an estimate ``x0 = floor(float(ua / uv) * n)``, off by at most ``2**12`` for
          ``n <= 2**62``; then ``x = x0 + floor(R / Q)`` with ``R = P - x0 Q``;
        * ``R = 2**40 H + L``, ``H = (ua n - x0 uv) + ua (E_v >> 40) - uv (E_a >> 40)``: the
          term ``ua n - x0 uv`` is near ``uv (rho n - x0)``, below ``2**53``, so its value
          modulo ``2**64`` (wrapping uint64 products) is the value;
        * ``L = 2**39 uv + ua (E_v & (2**40 - 1)) - uv (E_a & (2**40 - 1))``, each low part
          split in two 20-bit halves so every product stays below ``2**60``, and
          ``floor(L / 2**40)`` taken as two floors by ``2**20``;
        * ``floor(R / Q) = floor((H + floor(L / 2**40)) / uv)``, since ``2**40 H`` is a
          multiple of ``2**40``.

        The errors at the segment's end, ``E + 2**40 c - u length``, wrap the same way and are
        exact because they are bounded (NOTE [ Mixture log exactness ]). A lookup
        (:meth:`LogMixture._local`) still walks in Python integers; ``tests/test_mixlog.py``
        checks both against the per-entry walk in Python integers on random logs.
    """

    __slots__ = (
        "_a",
        "_all_first",
        "_all_level",
        "_all_order",
        "_b",
        "_hi",
        "_inner_first",
        "_inner_level",
        "_k",
        "_leaf_level",
        "_levels",
        "_lo",
        "_mid",
        "_node_hi",
        "_node_lo",
        "_v",
    )

    def __init__(self, nodes: list[tuple[int, int, int, int, int, int]], k: int) -> None:
        self._k = k
        depth = {2 * k - 2: 0}
        for v, a, b, *_ in nodes:  # parents before children
            depth[a] = depth[b] = depth[v] + 1
        order = sorted(nodes, key=lambda node: depth[node[0]])
        cols = np.array(order, dtype=np.intp).reshape(-1, 6)
        self._v, self._a, self._b, self._lo, self._mid, self._hi = cols.T.copy()
        bounds = np.cumsum(np.bincount([depth[node[0]] for node in order])).tolist()
        self._levels = [slice(lo, hi) for lo, hi in zip([0, *bounds], bounds, strict=False)]
        # every node (sources 0 .. k - 1, then the inner ones) by level, for the waves
        size = 2 * k - 1
        self._node_lo = np.arange(size, dtype=np.intp)
        self._node_hi = np.arange(1, size + 1, dtype=np.intp)
        for v, _, _, lo, _, hi in nodes:
            self._node_lo[v], self._node_hi[v] = lo, hi
        levels = np.array([depth[x] for x in range(size)], dtype=np.intp)
        self._all_order = np.argsort(levels, kind="stable").astype(np.intp)
        self._all_level = levels[self._all_order]
        self._leaf_level = levels[:k]
        self._all_first = np.searchsorted(self._all_level, np.arange(levels.max() + 2)).tolist()
        self._inner_level = levels[self._v]
        self._inner_first = np.searchsorted(self._inner_level, np.arange(levels.max() + 1)).tolist()

    def local(
        self, units: npt.NDArray[np.int64], errors: npt.NDArray[np.int64], length: int
    ) -> npt.NDArray[np.int64]:
        """Per-source counts ``length`` samples into a segment with weights ``units`` and
        scaled errors ``errors`` at its start."""
        k = self._k
        if k == 1:
            return np.array([length], dtype=_I64)
        pu = np.zeros(k + 1, dtype=_U64)
        np.cumsum(units.view(_U64), out=pu[1:])
        pe = np.zeros(k + 1, dtype=_U64)
        np.cumsum(errors.view(_U64), out=pe[1:])  # wraps; the differences are exact
        lo, mid, hi = self._lo, self._mid, self._hi
        ua = (pu[mid] - pu[lo]).view(_I64)
        uv = (pu[hi] - pu[lo]).view(_I64)
        ev = (pe[hi] - pe[lo]).view(_I64)
        ea = (pe[mid] - pe[lo]).view(_I64)
        empty = uv == 0
        if empty.any():  # no weight below v: any rho keeps the bound; split its debts
            ua = np.where(empty, 1, ua)
            uv = np.where(empty, 2, uv)
        const = _quota_constant(ua, uv, ev, ea)
        rho = ua / uv
        ua_u, uv_u = ua.view(_U64), uv.view(_U64)
        c = np.zeros(2 * k - 1, dtype=_I64)
        c[-1] = length
        v_all, a_all, b_all = self._v, self._a, self._b
        for level in self._levels:
            n = c[v_all[level]]
            x0 = (rho[level] * n).astype(_I64)  # n >= 0: truncation is the floor
            t1 = (ua_u[level] * n.view(_U64) - uv_u[level] * x0.view(_U64)).view(_I64)
            x = x0 + (t1 + const[level]) // uv[level]
            ca = np.minimum(np.maximum(x, 0), n)
            c[a_all[level]] = ca
            c[b_all[level]] = n - ca
        out: npt.NDArray[np.int64] = c[:k].copy()
        return out

    def bases(
        self,
        units: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64],
        errors: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.int64],
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The bases at the ends of ``m`` consecutive segments (weights ``units[j]``,
        ``lengths[j]`` samples), from the base ``counts``, ``errors`` of the first: arrays of
        shape ``(m, K)``.

        NOTE [ Waves of the tree ]
            Node ``v`` splits segment ``s`` from its own count at the end of ``s`` (set by its
            parent in ``s``), its error at the start of ``s`` and its first child's error at
            the start of ``s`` (set when the child's share of ``s - 1`` was known). So level
            ``l`` of segment ``s`` needs only level ``l - 1`` of ``s`` and level ``l`` of
            ``s - 1``: wave ``w`` computes every level ``l`` at segment ``w - l`` at once, the
            whole tree in one set of numpy operations per segment instead of one per level.
            Each node's arithmetic is :meth:`local`'s.
        """
        k, m = self._k, len(lengths)
        size = 2 * k - 1
        nodes_lo, nodes_hi = self._node_lo, self._node_hi
        pu = np.zeros((m, k + 1), dtype=_U64)
        np.cumsum(units.view(_U64), axis=1, out=pu[:, 1:])
        un = pu[:, nodes_hi] - pu[:, nodes_lo]  # (m, nodes): each node's units per segment
        drawn = un * lengths.view(_U64)[:, None]  # its integral over the segment x 2**40 (wraps)
        ua_all, uv_all = un[:, self._a].view(_I64), un[:, self._v].view(_I64)
        empty = uv_all == 0
        if empty.any():  # no weight below v: any rho keeps the bound; split its debts
            ua_all = np.where(empty, 1, ua_all)
            uv_all = np.where(empty, 2, uv_all)
        rho_all = ua_all / uv_all
        start = np.zeros(k + 1, dtype=_U64)
        np.cumsum(counts.view(_U64), out=start[1:])
        cs = (start[nodes_hi] - start[nodes_lo]).view(_I64)  # counts at the current start
        np.cumsum(errors.view(_U64), out=start[1:])
        es = (start[nodes_hi] - start[nodes_lo]).view(_I64)  # scaled errors there
        pending = np.zeros(size, dtype=_I64)  # the count at the end of the current segment
        taken = np.zeros(size, dtype=_I64)  # n: what the node received in it
        entered = np.zeros(size, dtype=_I64)  # its error at the start of it
        ends = int(cs[size - 1]) + np.cumsum(lengths)
        snap_c = np.empty((m + len(self._all_first), k), dtype=_I64)  # sources after wave w
        snap_e = np.empty_like(snap_c)
        order, level_of, first = self._all_order, self._all_level, self._all_first
        inner, inner_level, inner_first = self._v, self._inner_level, self._inner_first
        a_all, b_all = self._a, self._b
        inner_cols = np.arange(len(inner))
        top = len(first) - 2  # the deepest level
        for w in range(m + top):
            lo_level, hi_level = max(0, w - m + 1), min(w, top)
            if w < m:
                pending[size - 1] = ends[w]
            # every node whose count at the end of its segment w - level is known: advance
            span = slice(first[lo_level], first[hi_level + 1])
            idx, seg = order[span], w - level_of[span]
            n = pending[idx] - cs[idx]
            taken[idx] = n
            entered[idx] = es[idx]
            cs[idx] = pending[idx]
            es[idx] = (es[idx].view(_U64) + (n.view(_U64) << _U64(40)) - drawn[seg, idx]).view(_I64)
            snap_c[w] = cs[:k]
            snap_e[w] = es[:k]
            # every inner node splits its segment w - level between its children
            hi_inner = min(hi_level, top - 1)
            if lo_level > hi_inner:
                continue
            span = slice(inner_first[lo_level], inner_first[hi_inner + 1])
            v, seg = inner[span], w - inner_level[span]
            a, b, cols = a_all[span], b_all[span], inner_cols[span]
            ua, uv = ua_all[seg, cols], uv_all[seg, cols]
            const = _quota_constant(ua, uv, entered[v], es[a])
            n = taken[v]
            x0 = (rho_all[seg, cols] * n).astype(_I64)
            t1 = (ua.view(_U64) * n.view(_U64) - uv.view(_U64) * x0.view(_U64)).view(_I64)
            ca = np.minimum(np.maximum(x0 + (t1 + const) // uv, 0), n)
            pending[a] = cs[a] + ca
            pending[b] = cs[b] + n - ca
        # source d's base at the end of segment j is its snapshot after wave j + level(d)
        rows = np.arange(m)[:, None] + self._leaf_level[None, :]
        leaves = np.arange(k)[None, :]
        return snap_c[rows, leaves], snap_e[rows, leaves]


class LogMixture:
    """A :class:`MixtureLog` compiled for one sampler: per-source counts at any sample
    (NOTE [ Mixture log exactness ]), and the trained part's digest for its state.

    It serves both as the sampler's mixture (``counts``, ``counts_at``) and as its schedule
    (``trained_tag``, ``check_trained``). Segment bases (each entry's starting counts and
    errors, two int64 rows of K) are computed once, as the log grows; a lookup bisects the
    entries and walks the tree once: O(log entries + K).

    Args:
        log: The log.
        key: Unused by the counts (kept for the interface of
            :class:`~dataorder.llm.mixture.Mixture`; the tree needs no tie-break).
        batches: The sampler's global batch size schedule: an entry at step ``k`` starts at
            sample ``batches.consumed_samples(k)``.
    """

    def __init__(self, log: MixtureLog, key: int, batches: BatchSizeSchedule) -> None:
        if not isinstance(log, MixtureLog):
            fail("log", "a MixtureLog", log, TypeError)
        if not isinstance(batches, BatchSizeSchedule):
            fail("batches", "a BatchSizeSchedule", batches, TypeError)
        self._log = log
        self._key = key
        self._batches = batches
        self._nodes, self._depths = _tree(log.num_sources)
        self._walk = _LevelWalk(self._nodes, log.num_sources)
        # Per segment (entries at one start merged, the last one's weights holding):
        self._seg_pos: list[int] = []  # its first sample
        self._seg_entry: list[int] = []  # the log entry whose weights it uses
        self._seg_count: list[int] = []  # log entries that start at or before it
        self._base_c: list[npt.NDArray[np.int64]] = []  # per-source counts at its start
        self._base_e: list[npt.NDArray[np.int64]] = []  # per-source errors x 2**40 at its start
        self._synced = 0
        self._params: dict[int, list[tuple[int, int, int, int, int, int]]] = {}
        log._users.add(self)

    @property
    def log(self) -> MixtureLog:
        """The log."""
        return self._log

    @property
    def num_sources(self) -> int:
        """The number of sources K."""
        return self._log.num_sources

    # -- segments -------------------------------------------------------------------------------
    def _sync(self) -> None:
        log = self._log
        n = len(log)
        if self._synced == n:
            return
        k = self.num_sources
        for i in range(self._synced, n):
            pos = self._batches.consumed_samples(int(log._steps[i]))
            if pos > MAX_POSITION:
                fail(f"log.entry({i}).step", "a step that starts within 2**62 samples", pos)
            if self._seg_pos and self._seg_pos[-1] == pos:
                self._seg_entry[-1] = i  # same start: the later entry's weights hold
                self._seg_count[-1] = i + 1
                self._params.pop(len(self._seg_pos) - 1, None)
                continue
            self._seg_pos.append(pos)
            self._seg_entry.append(i)
            self._seg_count.append(i + 1)
        self._synced = n
        if not self._base_c:
            self._base_c.append(np.zeros(k, dtype=_I64))
            self._base_e.append(np.zeros(k, dtype=_I64))
        while len(self._base_c) < len(self._seg_pos):
            s = len(self._base_c) - 1
            m = min(len(self._seg_pos) - 1 - s, _WAVE_CHUNK)
            if m < _WAVE_LEAST:  # a few new entries (a running job): one walk each
                c, e = self._advance(s, self._seg_pos[s + 1] - self._seg_pos[s])
                self._base_c.append(c)
                self._base_e.append(e)
                continue
            units = np.stack([self._log._row(self._seg_entry[s + j]) for j in range(m)])
            starts = np.array(self._seg_pos[s : s + m + 1], dtype=_I64)
            lengths: npt.NDArray[np.int64] = starts[1:] - starts[:-1]
            cs, es = self._walk.bases(units, self._base_c[s], self._base_e[s], lengths)
            if int(np.abs(es).max()) >= _ERROR_LIMIT:  # pragma: no cover - as in _advance
                raise RuntimeError("mixture log error out of range")
            self._base_c.extend(cs)
            self._base_e.extend(es)

    def _advance(self, s: int, length: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Counts and scaled errors at the end of segment ``s`` after ``length`` samples: the
        walk of :meth:`_local`, one level of the tree at a time in int64 (NOTE [ Segment bases
        in int64 ])."""
        units = self._log._row(self._seg_entry[s])
        base_c, base_e = self._base_c[s], self._base_e[s]
        local = self._walk.local(units, base_e, length)
        errors = (
            base_e.view(_U64) + (local.view(_U64) << _U64(40)) - units.view(_U64) * _U64(length)
        ).view(_I64)
        if int(np.abs(errors).max()) >= _ERROR_LIMIT:  # pragma: no cover - the bound: < 2**47
            raise RuntimeError(f"mixture log error out of range: {errors.tolist()}")
        counts: npt.NDArray[np.int64] = base_c + local
        return counts, errors

    def _segment_params(self, s: int) -> list[tuple[int, int, int, int, int, int]]:
        params = self._params.get(s)
        if params is not None:
            return params
        units = self._log._row(self._seg_entry[s]).tolist()
        errors = self._base_e[s].tolist()
        pu = [0]
        pe = [0]
        for u, e in zip(units, errors, strict=True):
            pu.append(pu[-1] + u)
            pe.append(pe[-1] + e)
        d = MAX_TOTAL
        params = []
        for v, a, b, lo, mid, hi in self._nodes:
            ua, uv = pu[mid] - pu[lo], pu[hi] - pu[lo]
            ev, ea = pe[hi] - pe[lo], pe[mid] - pe[lo]
            if uv == 0:
                ua, uv = 1, 2  # no weight below v: any rho keeps the bound; split its debts
            params.append((v, a, b, 2 * ua * d, uv * d + 2 * ua * ev - 2 * uv * ea, 2 * uv * d))
        if len(self._params) > 64:
            self._params.clear()
        self._params[s] = params
        return params

    def _local(self, s: int, tau: int) -> list[int]:
        """Per-source counts ``tau`` samples into segment ``s`` (relative to its start)."""
        k = self.num_sources
        c = [0] * (2 * k - 1)
        c[-1 if k > 1 else 0] = tau
        for v, a, b, slope, num0, den in self._segment_params(s):
            n = c[v]
            if n == 0:
                continue
            x = (slope * n + num0) // den
            ca = n if x >= n else (x if x > 0 else 0)
            c[a] = ca
            c[b] = n - ca
        return c[:k]

    def _segment_of(self, t: int) -> int:
        return bisect.bisect_right(self._seg_pos, t) - 1

    def _note(self, t: int) -> None:
        """Counts at ``t`` were computed: freeze the steps they depend on."""
        b = self._batches
        step = b.step_at(t)
        self._log._freeze(step if b.consumed_samples(step) == t else step + 1)

    # -- the Mixture interface --------------------------------------------------------------------
    def counts(self, t: int) -> npt.NDArray[np.int64]:
        """``c_d(t)``: how many of samples ``0 .. t - 1`` each source supplies, with the log as
        it stands (a query: it freezes no step, unlike :meth:`counts_at`)."""
        t = check_int("t", t, min_value=0, max_value=MAX_POSITION)
        self._sync()
        s = self._segment_of(t)
        local = np.array(self._local(s, t - self._seg_pos[s]), dtype=_I64)
        out: npt.NDArray[np.int64] = self._base_c[s] + local
        return out

    def counts_at(self, ts: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """``c_d(t)`` for many ``t``: an int64 array of shape ``(n, K)``.

        What the order calls to lay out global batches: the steps the counts depend on are
        frozen (NOTE [ Frozen steps ]).
        """
        arr = np.asarray(ts)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise TypeError(f"ts must be integers; got dtype {arr.dtype}")
        if arr.ndim != 1:
            raise ValueError(f"ts must be 1-D; got shape {arr.shape}")
        out = np.empty((arr.size, self.num_sources), dtype=_I64)
        if arr.size == 0:
            return out
        if int(arr.min()) < 0 or int(arr.max()) > MAX_POSITION:
            raise ValueError(
                f"ts must lie in [0, 2**62]; got min={int(arr.min())}, max={int(arr.max())}"
            )
        self._sync()
        self._note(int(arr.max()))
        for i, t in enumerate(arr.tolist()):
            s = self._segment_of(t)
            out[i] = self._base_c[s] + np.array(self._local(s, t - self._seg_pos[s]), dtype=_I64)
        return out

    # -- what the counts track (NOTE [ Mixture log exactness ]) ------------------------------------
    def shares(self, t: int) -> npt.NDArray[np.float64]:
        """``S_d(t)``: the integral of each source's logged (quantised) weight over samples
        ``[0, t)``, the target the counts track."""
        t = check_int("t", t, min_value=0, max_value=MAX_POSITION)
        self._sync()
        s = self._segment_of(t)
        units = self._log._row(self._seg_entry[s]).tolist()
        local = self._local(s, t - self._seg_pos[s])
        counts = self._base_c[s].tolist()
        errors = self._base_e[s].tolist()
        tau = t - self._seg_pos[s]
        # S = c - E exactly: (c * 2**40 - E * 2**40) / 2**40 with E at the segment start
        return np.array(
            [
                ((c + d) * MAX_TOTAL - (e + d * MAX_TOTAL - u * tau)) / MAX_TOTAL
                for c, d, e, u in zip(counts, local, errors, units, strict=True)
            ],
            dtype=np.float64,
        )

    def deviation_bounds(self) -> npt.NDArray[np.float64]:
        """Per-source bound on ``|c_d(t) - S_d(t)|`` at every sample, whatever the log:
        ``h (h + 1) / 4`` for a source at depth ``h`` of the tree (NOTE [ Mixture log
        exactness ])."""
        return np.array([h * (h + 1) / 4 for h in self._depths], dtype=np.float64)

    def share_bounds(self, t: int) -> npt.NDArray[np.float64]:
        """:meth:`deviation_bounds` (they do not grow with ``t`` or the entries)."""
        check_int("t", t, min_value=0, max_value=MAX_POSITION)
        return self.deviation_bounds()

    # -- the schedule interface (NOTE [ Trained part of a schedule ] in mixture.py) -------------
    def __len__(self) -> int:
        return len(self._log)

    def trained_entries(self, samples: int) -> int:
        """How many log entries start before sample ``samples``."""
        samples = check_int("samples", samples, min_value=0, max_value=MAX_POSITION)
        self._sync()
        s = bisect.bisect_left(self._seg_pos, samples)
        return self._seg_count[s - 1] if s else 0

    def trained_tag(self, samples: int) -> str:
        """``"<entries>:<digest>"`` of the log entries that start before ``samples`` (``"0"``
        before any sample): the log's length and chained digest a state records."""
        m = self.trained_entries(samples)
        return "0" if m == 0 else f"{m}:{self._log.digest(m)}"

    def check_trained(
        self,
        tag: object,
        samples: int,
        *,
        name: str = "state['mixture']",
        saved_at: int | None = None,
        unit: str = "sample",
    ) -> None:
        """Refuse this log if its entries before ``samples`` are not the ones ``tag`` digests.

        Raises:
            ValueError: If ``tag`` is malformed, or the log's trained part differs: the message
                names the first entry that differs when the lengths differ, else the range.
        """
        ours = self.trained_tag(samples)
        if tag == ours:
            self._note(samples)  # the entries before it are trained: none may be added there
            return
        fields = tag.split(":") if isinstance(tag, str) else []
        valid = fields == ["0"] or (
            len(fields) == 2 and fields[0].isdigit() and len(fields[1]) == 2 * _DIGEST
        )
        if not valid:
            fail(name, "a mixture-log tag such as '12:9f12ab34cd56ef78'", tag)
        theirs = int(fields[0])
        mine = self.trained_entries(samples)
        at = f"before {unit} {samples}"
        if saved_at is not None and saved_at != samples:
            at += f" (the end of the global batch under way at the saved {unit} {saved_at})"
        if theirs != mine:
            prefix = theirs < mine and self._log.digest(theirs) == fields[1]
            what = (
                f"the state trained {theirs} log entries {at} and this log has {mine} there; "
                + (
                    f"the first {theirs} agree, so entry {theirs} is the first that differs"
                    if prefix
                    else f"entry {min(theirs, mine)} is the first that differs at the latest"
                )
            )
        else:
            what = (
                f"its first {mine} entries (the ones {at}) digest to {self._log.digest(mine)}, "
                f"the state's to {fields[1]}: one of entries 0..{mine - 1} differs (compare the "
                "saved log with MixtureLog.first_difference to name it)"
            )
        raise ValueError(
            f"the mixture log cannot continue this state: {what}. Resume with the log saved "
            "beside the state (MixtureLog.load, or OrderState)"
        )

    def segment_at(self, samples: int) -> int:
        """The index of the log entry in effect at sample ``samples``."""
        samples = check_int("samples", samples, min_value=0, max_value=MAX_POSITION)
        self._sync()
        return self._seg_entry[self._segment_of(samples)]

    def entry_start(self, index: int) -> int:
        """The sample at which log entry ``index`` starts."""
        entry = self._log.entry(index)
        return self._batches.consumed_samples(entry.step)

    def weights_at(self, samples: int) -> tuple[float, ...]:
        """The normalised weights in effect at sample ``samples``."""
        return self._log.entry(self.segment_at(samples)).weights

    def describe(self, samples: int) -> str:
        """Which entry holds at ``samples``, and the counts against their integral, in words."""
        index = self.segment_at(samples)
        counts = self.counts(samples).tolist() if samples else [0] * self.num_sources
        shares = self.shares(samples).tolist()
        shown = "; ".join(
            f"source {d}: {c} vs {s:.2f}"
            for d, (c, s) in enumerate(zip(counts, shares, strict=True))
        )
        if self.num_sources > 8:
            shown = "; ".join(shown.split("; ")[:8]) + f"; ... {self.num_sources - 8} more"
        return (
            f"log entry {index} of {len(self._log)} (from step {self._log.entry(index).step}, "
            f"sample {self.entry_start(index)}); counts vs integral of the weights: {shown}"
        )


def split_index(index: int) -> tuple[int, int]:
    """``(source, document)`` of a flat index of a blend over a log with corpus changes
    (``source * SOURCE_STRIDE + document``; NOTE [ Corpus changes ]).

    >>> split_index(2 * SOURCE_STRIDE + 7)
    (2, 7)
    """
    index = check_int("index", index, min_value=0, max_value=2**63 - 1)
    return divmod(index, SOURCE_STRIDE)


class SourceDatasets:
    """The dataset to read a blend over a log with corpus changes: ``sources[d][i]`` at flat
    index ``d * SOURCE_STRIDE + i``, so documents appended to a source (a growth) or a source
    added later never move another document's index, as ``ConcatDataset``'s offsets would.

    Args:
        sources: One indexable per source (a list, a map-style dataset); a source may grow in
            place (documents appended) or start empty and be filled when it is added.

    Example:
        >>> data = SourceDatasets([["a0", "a1"], []])
        >>> data[1]
        'a1'
        >>> data.sources[1].append("b0")
        >>> data[SOURCE_STRIDE + 0]
        'b0'
    """

    def __init__(self, sources: Sequence[Any]) -> None:
        if isinstance(sources, str | bytes) or not isinstance(sources, Sequence):
            fail("sources", "a sequence of indexable datasets, one per source", sources, TypeError)
        self.sources = list(sources)

    def __getitem__(self, index: int) -> Any:
        source, document = split_index(index)
        if source >= len(self.sources):
            fail("index", f"a source below {len(self.sources)} (source {source})", index)
        return self.sources[source][document]


def broadcast_weights(
    log: MixtureLog,
    step: int,
    weights: Sequence[float] | None,
    *,
    src: int = 0,
    group: Any = None,
) -> tuple[float, ...]:
    """Append rank ``src``'s decision to ``log`` on every rank of a ``torch.distributed`` job.

    One broadcast of ``K + 1`` float64 values (the step, then the weights) from ``src``; every
    rank then appends the same entry, so every rank's order stays the same. Call it on every
    rank with the same ``step`` (checked: a rank whose ``step`` differs from ``src``'s raises
    instead of appending).

    Args:
        log: This rank's log.
        step: The global batch from which the weights hold.
        weights: The weights on rank ``src``; ignored (may be None) on the others.
        src: The deciding rank.
        group: The process group (default: the world).

    Returns:
        The weights appended, as floats.

    Raises:
        ValueError: If this rank's ``step`` differs from ``src``'s, or the log refuses the entry.
    """
    import torch
    import torch.distributed as dist

    step = check_int("step", step, min_value=0, max_value=2**53)
    buf = torch.zeros(log.num_sources + 1, dtype=torch.float64)
    if dist.get_rank(group) == src if group is not None else dist.get_rank() == src:
        if weights is None:
            fail("weights", f"the weights on the deciding rank {src}", None, TypeError)
        values = np.asarray(weights, dtype=np.float64)
        if values.shape != (log.num_sources,):
            fail("len(weights)", f"the number of sources, {log.num_sources}", values.size)
        buf[0] = float(step)
        buf[1:] = torch.from_numpy(values.copy())
    dist.broadcast(buf, src=src, group=group)
    got = buf.tolist()
    if int(got[0]) != step:
        fail("step", f"rank {src}'s step, {int(got[0])} (every rank appends the same entry)", step)
    decided = tuple(got[1:])
    log.set_weights(step, decided)
    return decided
