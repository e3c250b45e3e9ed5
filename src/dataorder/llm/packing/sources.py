"""Packed rows as sources (:class:`~dataorder.llm.sampler.Source`): one corpus, or a corpus read
by a blend.

* :class:`PackedCorpus`: an epoch is one pass over a corpus's rows
  (:class:`~dataorder.llm.packing.plan.EpochRows`: windows in a keyed order, each packed by best
  fit, its rows in a keyed order).
* :class:`RowDraws`: how a :class:`~dataorder.llm.sources.Blend` reads K corpora, each packed on
  its own: the ``j``-th row source ``d`` gives is row ``j mod P`` of its pass ``j // P`` (``P``
  rows per pass), its document ids shifted to be flat over the sources.

Both fill :class:`~dataorder.core.dealing.CostedItems` (rows and their attention costs), which
the :class:`~dataorder.core.dealing.DealtByCost` batching deals to the ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from dataorder._validate import fail
from dataorder.core.partition import EpochBlocks
from dataorder.llm.blend_order import BlendOrder
from dataorder.llm.packing.plan import EpochRows, PackingPlan, Row
from dataorder.llm.sampler import EpochEnd, Passes

__all__ = ["PackedCorpus", "RowDraws"]

IntArray = npt.NDArray[np.int64]

# Rows evaluated together while iterating (rows of all ranks): a chunk of blocks shares the
# packing of its windows and one search over the epoch's row counts.
_CHUNK_ROWS = 4096
_WHY = "the rows an epoch drops or pads depend on M = micro_batch_size x data_parallel_size"


def _why(end: EpochEnd) -> str:
    return _WHY


def _chunk_steps(mbs: int, dp: int) -> int:
    return max(1, _CHUNK_ROWS // (mbs * dp))


class _EpochFill:
    """The rows of one epoch of one corpus (a :class:`~dataorder.core.dealing.CostedItems`)."""

    def __init__(self, rows: EpochRows) -> None:
        self.stream = rows

    def items(self, positions: IntArray) -> list[Row]:
        return self.stream.rows(positions)

    def costs(self, positions: IntArray) -> IntArray:
        return self.stream.costs(positions)


class PackedCorpus:
    """One corpus: an epoch is one pass over its rows, the tail dropped or padded."""

    def __init__(self, plan: PackingPlan) -> None:
        self.plan = plan
        self.epochs = Passes(plan.rows_per_epoch, False, _why)

    def fill(self, epoch: int, mbs: int, dp: int, end: EpochEnd) -> _EpochFill:
        return _EpochFill(self.plan.epoch(epoch))

    def coverage(self, epoch: int, blocks: EpochBlocks) -> tuple[int, int]:
        """``(tokens_dropped, tokens_padded)``: the tail's tokens and what packing cuts, the
        room rows leave and whole padding rows."""
        plan, s = self.plan, self.plan.seq_len
        read = min(blocks.n, blocks.total_positions)
        tail = blocks.n - read
        tail_tokens = plan.epoch(epoch).tokens_from(read)
        dropped = plan.tokens_cut_per_epoch + tail_tokens
        padded = plan.tokens_padded_per_epoch - (tail * s - tail_tokens) + blocks.padded * s
        return dropped, padded

    def chunk_steps(self, mbs: int, dp: int) -> int:
        return _chunk_steps(mbs, dp)

    def describe(self, t: int) -> str:
        """What each source has given: one corpus."""
        return "one corpus"

    def counts(self, t: int) -> IntArray:
        """Only a mixture counts rows per source: refused, naming ``mixture=``."""
        fail("mixture", "given for consumed_per_source()", None)


class RowDraws:
    """K corpora read by a blend, each packed on its own (see the module docstring). Document
    ids are flat: document ``i`` of source ``d`` is ``sum(documents of sources before d) + i``."""

    unit = "rows"

    def __init__(self, plans: Sequence[PackingPlan]) -> None:
        self.plans = list(plans)
        self.first_document = np.concatenate(
            [[0], np.cumsum([len(p.lengths) for p in plans])[:-1]]
        ).astype(np.int64)
        self.per_pass = np.array([p.rows_per_epoch for p in plans], dtype=np.int64)

    def _each_pass(
        self, d: IntArray, j: IntArray
    ) -> Iterator[tuple[int, IntArray, EpochRows, IntArray]]:
        """``(source, indices into d, the source's pass, rows of the pass)`` for every pass of a
        source the draws read."""
        per_pass = self.per_pass[d]
        passes = j // per_pass
        for source, pass_ in sorted(set(zip(d.tolist(), passes.tolist(), strict=True))):
            sel = np.flatnonzero((d == source) & (passes == pass_))
            yield source, sel, self.plans[source].epoch(pass_), j[sel] - pass_ * per_pass[sel]

    def items(self, d: IntArray, j: IntArray) -> list[Row]:
        out: list[Row] = [()] * d.size
        for source, sel, stream, at_rows in self._each_pass(d, j):
            shift = int(self.first_document[source])
            for i, row in zip(sel.tolist(), stream.rows(at_rows), strict=True):
                out[i] = tuple((doc + shift, a, b) for doc, a, b in row)
        return out

    def costs(self, d: IntArray, j: IntArray) -> IntArray:
        out = np.zeros(d.size, dtype=np.int64)
        for _, sel, stream, at_rows in self._each_pass(d, j):
            out[sel] = stream.costs(at_rows)
        return out

    def coverage(self, order: BlendOrder, first: int, end: int) -> tuple[int, int]:
        """NOTE [ Coverage ] of a mixture's epoch, per source, without listing its rows: source
        ``d`` gives its draws ``[c_d(first), c_d(end))``, rows ``j mod P`` of passes ``j // P``,
        so a run of whole passes, and at most a tail of one pass and a head of the next."""
        starts, stops = order.mixture.counts(first), order.mixture.counts(end)
        units = distinct = 0
        for plan, j0, j1 in zip(self.plans, starts.tolist(), stops.tolist(), strict=True):
            if j1 <= j0:
                continue
            per_pass, tokens = plan.rows_per_epoch, plan.tokens_per_epoch
            (p0, a), (p1, b) = divmod(j0, per_pass), divmod(j1, per_pass)
            if p0 == p1:
                stream = plan.epoch(p0)
                part = stream.tokens_from(a) - stream.tokens_from(b)
                units, distinct = units + part, distinct + part
                continue
            head = plan.epoch(p0).tokens_from(a)
            tail = tokens - plan.epoch(p1).tokens_from(b) if b else 0
            units += head + (p1 - p0 - 1) * tokens + tail
            if p1 - p0 > 1 or a == 0:  # a whole pass read: every token it holds
                distinct += tokens
            else:
                distinct += plan.tokens_covered([(p0, a, per_pass), (p1, 0, b)])
        universe = sum(int(p.lengths.total_tokens) for p in self.plans)
        rows = end - first
        return universe - distinct, (units - distinct) + rows * self.plans[0].seq_len - units

    def chunk_steps(self, order: BlendOrder, mbs: int, dp: int) -> int:
        return _chunk_steps(mbs, dp)
