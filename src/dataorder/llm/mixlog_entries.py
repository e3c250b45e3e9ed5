"""The entries of a mixture log and their chained digest (what a MixtureLog stores).

:class:`EntryLog` holds a log's entries: each entry's step, its quantised weights (in fixed blocks
of 1024 entries, so an append never copies the earlier ones) and, for a corpus change, its op,
source and size; and a blake2b digest chained over them, so two logs are equal up to entry ``i``
exactly when their digests after ``i`` entries are. It reads entries, compares logs
(:meth:`EntryLog.first_difference` bisects the chain) and refuses an entry for a step a sampler
has begun (NOTE [ Frozen steps ] in :mod:`dataorder.llm.mixlog`). The public class is
:class:`~dataorder.llm.mixlog.MixtureLog`, which builds on this one and on
:class:`~dataorder.llm.mixlog_corpus.CorpusLog`.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.core.apportion import MAX_TOTAL, quantize_weights

__all__ = [
    "BLOCK",
    "DIGEST_BYTES",
    "MAX_STEP",
    "MIXLOG_FORMAT",
    "OPS",
    "OP_ADD",
    "OP_GROW",
    "OP_RETIRE",
    "OP_WEIGHTS",
    "SOURCE_STRIDE",
    "EntryLog",
    "LogEntry",
    "SegmentBases",
    "chain_digest",
]

#: The ``format`` of a saved log (:meth:`~dataorder.llm.mixlog.MixtureLog.save`); version 1.
MIXLOG_FORMAT = "dataorder.mixlog.1"

#: Largest step of an entry.
MAX_STEP = 2**62

_I64 = np.int64

#: Entries per block of a log's units: an append never copies the earlier ones.
BLOCK = 1024
#: Bytes of each chained digest.
DIGEST_BYTES = 8
_SEED_DIGEST = hashlib.blake2b(MIXLOG_FORMAT.encode(), digest_size=DIGEST_BYTES).digest()
#: The ops of an entry: weights, or a corpus change (NOTE [ Corpus changes ]).
OP_WEIGHTS = 0
OP_GROW = 1
OP_RETIRE = 2
OP_ADD = 3
OPS = {OP_WEIGHTS: "weights", OP_GROW: "grow", OP_RETIRE: "retire", OP_ADD: "add"}
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


def chain_digest(
    previous: bytes, step: int, op: int, units: npt.NDArray[np.int64], extra: bytes = b""
) -> bytes:
    """The digest after an entry, chained from the digest before it (8 bytes of blake2b)."""
    h = hashlib.blake2b(previous, digest_size=DIGEST_BYTES)
    h.update(int(step).to_bytes(8, "little"))
    h.update(bytes([op]))
    h.update(np.ascontiguousarray(units, dtype="<i8").tobytes())
    h.update(extra)  # the sizes (first entry) or (source, size) of a corpus change
    return h.digest()


@dataclass(frozen=True, eq=False)
class SegmentBases:
    """Per-source counts at some segment starts of a log compiled for one batch size schedule,
    saved beside the log so that a resume does not rebuild them (NOTE [ Saved segment bases ]
    in :mod:`dataorder.llm.mixlog_counts`).

    Attributes:
        entries: The log entries they were saved with: they are bound to those entries' digest.
        starts: Every segment's first sample, up to the last saved segment (int64).
        segments: The saved segments, indices into ``starts`` (int64, increasing, positive).
        counts: Each saved segment's per-source counts at its start, shape
            ``(len(segments), K)`` (int64).
        digest: 16 hex digits of blake2b over the entries' chained digest and the arrays.
    """

    entries: int
    starts: npt.NDArray[np.int64]
    segments: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]
    digest: str

    @staticmethod
    def digest_of(
        log_digest: bytes,
        entries: int,
        starts: npt.NDArray[np.int64],
        segments: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64],
    ) -> str:
        """The ``digest`` of bases saved with a log whose first ``entries`` entries digest to
        ``log_digest``."""
        h = hashlib.blake2b(log_digest, digest_size=DIGEST_BYTES)
        h.update(int(entries).to_bytes(8, "little"))
        for array in (starts, segments, counts):
            h.update(len(array).to_bytes(8, "little"))
            h.update(np.ascontiguousarray(array, dtype="<i8").tobytes())
        return h.hexdigest()


class EntryLog:
    """The entries of a mixture log and their chained digest; see
    :class:`~dataorder.llm.mixlog.MixtureLog`, the class to use."""

    __slots__ = (
        "__weakref__",
        "_bases",
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

    def _init(self, k: int, sizes: Sequence[int] | None) -> None:
        self._k = k
        self._n = 0
        self._steps = np.zeros(16, dtype=_I64)
        self._blocks: list[npt.NDArray[np.int64]] = []  # the units, BLOCK entries each
        self._chain: list[bytes] = [_SEED_DIGEST]
        self._frozen = 0
        self._bases: SegmentBases | None = None  # saved with the log (NOTE [ Saved segment bases ])
        self._users: weakref.WeakSet[Any] = weakref.WeakSet()
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
        op: int = OP_WEIGHTS,
        source: int = 0,
        size: int = 0,
    ) -> None:
        if self._n == self._steps.size:  # 8 bytes an entry: a copy of 80 kB at 10**4
            self._steps = np.concatenate([self._steps, np.zeros_like(self._steps)])
        block, at = divmod(self._n, BLOCK)
        if block == len(self._blocks):  # never a copy of the earlier units
            self._blocks.append(np.empty((BLOCK, self._k), dtype=_I64))  # rows below _n only
        row = np.asarray(units, dtype=_I64)
        if op != OP_WEIGHTS:
            extra = np.array([source, size], dtype="<i8").tobytes()
            self._events.append((self._n, op, source, size))
            if op == OP_RETIRE:
                self._retired.add(source)
            else:
                self._sizes[source] = size
        elif self._n == 0 and self._sizes0 is not None:
            extra = np.array(self._sizes0, dtype="<i8").tobytes()
        else:
            extra = b""
        self._steps[self._n] = step
        self._blocks[block][at] = row
        self._chain.append(chain_digest(self._chain[-1], step, op, row, extra))
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
                return LogEntry(index, int(self._steps[index]), units, OPS[op], source, shown)
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
        block, at = divmod(index, BLOCK)
        out: npt.NDArray[np.int64] = self._blocks[block][at]
        return out

    def _rows_at(self, indices: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """The units of entries ``indices``, shape ``(len(indices), K)`` (a copy)."""
        out = np.empty((len(indices), self._k), dtype=_I64)
        blocks, at = np.divmod(indices, BLOCK)
        for block in np.unique(blocks).tolist():
            where = blocks == block
            out[where] = self._blocks[block][at[where]]
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

    def first_difference(self, other: EntryLog) -> int | None:
        """The first entry where ``other`` differs from this log (one being shorter counts as a
        difference at its length), or None when they are equal."""
        if not isinstance(other, EntryLog):
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
        if not isinstance(other, EntryLog):
            return NotImplemented
        return self._n == other._n and self._chain[-1] == other._chain[-1]

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"MixtureLog(sources={self._k}, entries={self._n}, last_step="
            f"{int(self._steps[self._n - 1])}, digest={self.digest()})"
        )

    def _describe(self, index: int) -> str:
        if index >= self._n:
            return f"no entry {index} ({self._n} entries)"
        return f"step {int(self._steps[index])}, digest {self._chain[index + 1].hex()}"

    def _freeze(self, step: int) -> None:
        self._frozen = max(self._frozen, step)
