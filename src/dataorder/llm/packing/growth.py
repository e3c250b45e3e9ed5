"""Packed rows of corpora that change while training: a source grown, retired or added by a
:class:`~dataorder.llm.mixlog.MixtureLog` built with ``sizes=`` (NOTE [ Packed corpus changes ]).

:class:`GrowingRows` is how a :class:`~dataorder.llm.sources.Blend` reads K packed corpora whose
sizes the log changes (the :class:`~dataorder.llm.sources.Draws` that
:class:`~dataorder.llm.packing.sources.RowDraws` is for fixed corpora): the ``j``-th row source
``d`` gives is found in its :class:`RowPass` records, one per corpus change, in O(growths in the
pass under way) per row, nothing listed per row or per document.

NOTE [ Packed corpus changes ]
    The packed form of NOTE [ Corpus changes ] (the sample blend's, in
    :mod:`dataorder.llm.blend_order`): within each source's pass no document is read twice and
    none is skipped. Source ``d``'s sizes are the log's; its documents are the first ``size`` of
    ``mixture[0][d]`` (the lengths given hold every document the log will name; document ids in
    rows stay flat over the given lengths, as without changes). A change takes effect when the
    source has given ``c`` rows (its count at the start of the change's entry):

    * a growth from ``n`` to ``n'`` documents at row ``a = c - start`` of the pass under way
      (``0 < a < L``, ``L`` its rows): the rest of the pass is its unread rows ``[a, L)`` together
      with the rows of a :class:`~dataorder.llm.packing.plan.PackingPlan` over only the new
      documents (``lengths[n:n']``, seeded by the source's seed and the entry), each in its own
      order, merged evenly over the ``L - a + G`` remaining slots (:class:`Growth`): a global
      batch reads a window or two of each, as without changes (a keyed permutation of the
      slots would scatter every global batch over every window of the pass, each packed
      again). No row is read twice; every unread
      document is read once: an old one in its unread rows (a document the old packing split
      keeps its pieces where they were), a new one in the new plan. Later passes pack all
      ``n'`` documents with the normal plan (seed of the source, pass index continued). Several
      growths in one pass compose (the rest of the modified pass with a plan over the newest
      documents), so a lookup walks the pass's growths, newest first.
    * a growth at a pass boundary (nothing of the pass read): the pass is a normal pass of the
      new size.
    * a retirement: the source is no longer drawn (its weight is 0); the rows it is still owed
      continue its pass, and the tokens of its pass it never reads are counted
      (:meth:`GrowingRows.retired_unread`).
    * an addition: a source of size 0 starts its first pass (pass 0 of its plan) when added.

    NOTE [ Lengths a state binds ]: a state binds the lengths of the documents in play at its
    position, no others: ``config.lengths`` digests every source's first ``size`` lengths (the
    log's first sizes), and the end of the state's ``mixture`` tag those of the documents the
    changes that started by then brought in. So a job that learns of new documents only when
    its corpus grows resumes its old state with the longer lengths and the log's new entry; a
    state that has read a grown document is refused over other lengths for it (the documents
    after the sources given first shift their flat ids, as the longer lengths say).

    Coverage (NOTE [ Coverage ]) of an epoch: a source's rows inside one stretch of normal
    passes of one plan are counted from window totals, as without changes; rows that touch a
    pass a growth modified are listed span by span (the cost of that epoch's count, once, like
    the sample blend's changed sources).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dataorder._validate import fail
from dataorder.core.batching import coverage
from dataorder.core.keys import derive_key
from dataorder.core.state import digest
from dataorder.llm.blend_order import BlendOrder
from dataorder.llm.mixlog import LogMixture
from dataorder.llm.mixlog_corpus import CorpusLog
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.plan import PackingPlan, Row
from dataorder.llm.sources import per_source_progress

__all__ = ["GrowingRows", "Growth", "RowPass", "check_corpus_log"]

IntArray = npt.NDArray[np.int64]
#: ``make_plan(lengths, seed=...)``: a plan with the sampler's packing arguments.
MakePlan = Callable[..., PackingPlan]

_STREAM = "packed"
# Rows listed per call when a range of a modified pass is counted span by span.
_LIST_ROWS = 2**14
# At most this many rows of a pass under way are walked through its growths one by one.
_FEW_ROWS = 16


def _walk(growths: Sequence[Growth], row: int) -> tuple[int, int]:
    """``(growth, row of its plan)`` of row ``row`` of a pass under way, or ``(-1, row of the
    base pass)``: :class:`Growth`'s even merge, newest growth first."""
    for i in range(len(growths) - 1, -1, -1):
        g = growths[i]
        if row < g.at:
            continue
        t = row - g.at
        before = t * g.rows // g.slots
        if (t + 1) * g.rows // g.slots > before:
            return i, before
        row = g.at + t - before
    return -1, row


@dataclass(frozen=True)
class Growth:
    """A growth inside a pass: from row ``at`` on, the pass reads its rows ``[at, before)`` as
    they were and the ``G = plan.rows_per_epoch`` rows of a plan over the new documents (ids
    from ``shift``), each in its own order, merged evenly: of the ``S = before - at + G`` slots,
    slot ``t`` is a new row iff ``floor((t + 1) G / S) > floor(t G / S)``, and then it is new
    row ``floor(t G / S)`` (else old row ``at + t - floor(t G / S)``)."""

    at: int
    before: int
    plan: PackingPlan
    shift: int
    rows: int  # plan.rows_per_epoch, kept: a lookup reads it once per growth

    @property
    def slots(self) -> int:
        """Rows of the pass from ``at`` on, after the growth."""
        return self.before - self.at + self.rows


@dataclass(frozen=True)
class RowPass:
    """A source's passes from its row ``first`` on, after a corpus change (NOTE [ Packed corpus
    changes ]).

    The pass under way starts at row ``start`` and has ``length`` rows: pass ``index`` of
    ``base`` with ``growths`` applied in order. Later passes are passes ``index + 1 + q`` of
    the plan of all ``size`` documents (:meth:`GrowingRows.plan`). ``base`` is None for a
    source of size 0. ``fresh``: a growth or an addition started the pass under way (at
    ``start``), so its documents are unread there even if the pass before was read whole.
    """

    first: int
    start: int
    length: int
    base: PackingPlan | None
    index: int
    growths: tuple[Growth, ...]
    size: int
    fresh: bool = False  # the pass under way was started by a growth or an addition


def check_corpus_log(log: CorpusLog, lengths: Sequence[DocumentLengths]) -> None:
    """Refuse a log whose sizes the lengths given in ``mixture[0]`` do not hold, naming the
    source (its first sizes) or the entry (a growth or an addition past them).

    Raises:
        ValueError: If a source's lengths hold fewer documents than the log names.
    """
    sizes = log.sizes or ()
    for d, (n, given) in enumerate(zip(sizes, lengths, strict=True)):
        if n > len(given):
            fail(
                f"mixture[0][{d}]",
                f"the lengths of at least the {n} documents the MixtureLog's sizes give source {d}",
                f"<{len(given)} documents>",
            )
    for e in log.corpus_changes():
        if e.source is None or e.size is None:
            continue
        d, size = e.source, e.size
        if size > len(lengths[d]):
            fail(
                "mixture[1]",
                f"a MixtureLog whose entries name only documents mixture[0] holds; entry "
                f"{e.index} ({e.op} at step {e.step}) gives source {d} {size} documents, "
                f"mixture[0][{d}] has {len(lengths[d])}",
                f"<MixtureLog of {len(log)} entries>",
            )


class GrowingRows:
    """K packed corpora read by a blend over a log with corpus changes (see the module
    docstring). Document ids are flat over the given lengths: document ``i`` of source ``d``
    is ``sum(len(lengths[e]) for e < d) + i``.

    Args:
        plans: Every source's plan over all its given lengths (at least the documents the log
            names): their lengths, seeds and packing are the sources'.
        make_plan: ``make_plan(lengths, seed=...)``: a plan with the sampler's packing arguments.
        mixture: The log (with ``sizes``) compiled for the sampler, whose counts place each
            change.

    Raises:
        ValueError: If the lengths hold fewer documents than the log names
            (:func:`check_corpus_log`).
    """

    unit = "rows"

    def __init__(
        self, plans: Sequence[PackingPlan], make_plan: MakePlan, mixture: LogMixture
    ) -> None:
        if not isinstance(mixture, LogMixture):
            fail(
                "mixture",
                "a LogMixture (MixtureLog.compile: the log compiled for the sampler)",
                type(mixture).__name__,
                TypeError,
            )
        self.lengths = [p.lengths for p in plans]
        self.seeds = [p.seed for p in plans]
        self.seq_len = plans[0].seq_len
        check_corpus_log(mixture.log, self.lengths)
        self.mixture, self.log = mixture, mixture.log
        self.make_plan = make_plan
        self.first_document = np.concatenate(
            [[0], np.cumsum([len(x) for x in self.lengths])[:-1]]
        ).astype(np.int64)
        self._plans = {(d, len(p.lengths), -1): p for d, p in enumerate(plans)}
        self._passes: list[list[RowPass]] = []
        self._passes_at = -1
        self._grown_prints: dict[tuple[int, int, int], str] = {}
        sizes = self.log.sizes or ()
        self.first_plans = [self.plan(d, n) if n else None for d, n in enumerate(sizes)]

    @property
    def first_rows(self) -> list[int]:
        """Every source's rows per pass at the log's first sizes (0: a source added later)."""
        return [0 if p is None else p.rows_per_epoch for p in self.first_plans]

    # -- plans ----------------------------------------------------------------------------------
    def plan(self, source: int, size: int) -> PackingPlan:
        """The normal plan of source ``source`` at ``size`` documents (its first ``size``)."""
        key = (source, size, -1)
        hit = self._plans.get(key)
        if hit is None:
            given = self.lengths[source]
            prefix = given if size == len(given) else DocumentLengths(given.slice(0, size))
            hit = self._plans[key] = self.make_plan(prefix, seed=self.seeds[source])
        return hit

    def _growth(self, source: int, entry: int, old: int, new: int, at: int, before: int) -> Growth:
        key = (source, new, entry)
        plan = self._plans.get(key)
        if plan is None:
            added = DocumentLengths(self.lengths[source].slice(old, new))
            seed = derive_key(
                self.seeds[source], epoch=0, stream=_STREAM, purpose="growth", extra=(entry,)
            )
            plan = self._plans[key] = self.make_plan(added, seed=seed >> 1)
        return Growth(at, before, plan, old, plan.rows_per_epoch)

    # -- the passes -------------------------------------------------------------------------------
    def passes(self) -> list[list[RowPass]]:
        """Every source's :class:`RowPass` records, as the log stands (recomputed when it grows:
        a pure function of the log and its counts)."""
        log = self.mixture.log
        if self._passes_at != len(log):
            check_corpus_log(log, self.lengths)
            changes: list[list[tuple[int, str, int, int]]] = [[] for _ in self.lengths]
            for e in log.corpus_changes():
                if e.source is None:  # pragma: no cover - a corpus change names its source
                    continue
                row = int(self.mixture.counts(self.mixture.entry_start(e.index))[e.source])
                changes[e.source].append((row, e.op, e.size or 0, e.index))
            self._passes = [self._source_passes(d, c) for d, c in enumerate(changes)]
            self._passes_at = len(log)
        return self._passes

    def _source_passes(self, d: int, changes: list[tuple[int, str, int, int]]) -> list[RowPass]:
        """Mirrors :func:`~dataorder.llm.blend_order.source_passes` over rows. A plan of the
        whole corpus is built only where a pass of it starts (several growths inside one pass
        build one plan over the new documents each, no plan of the sizes between)."""
        n = (self.mixture.log.sizes or ())[d]
        base = self.plan(d, n) if n else None
        start = index = 0
        length = base.rows_per_epoch if base is not None else 0
        growths: tuple[Growth, ...] = ()
        fresh = False
        out = [RowPass(0, start, length, base, index, growths, n)]
        for row, op, new, entry in changes:
            if row >= start + length:
                if n == 0:
                    start = row  # an empty source is never drawn (its weight is 0)
                else:
                    base = self.plan(d, n)
                    per_pass = base.rows_per_epoch
                    q = (row - start - length) // per_pass
                    start, index = start + length + q * per_pass, index + 1 + q
                    growths, length, fresh = (), per_pass, False
            if op != "retire":
                if row == start:  # nothing of this pass read: a normal pass of the new size
                    base, growths, fresh = self.plan(d, new), (), True
                    length = base.rows_per_epoch
                    if length == 0:
                        fail(
                            "mixture[1]",
                            f"corpus changes that leave source {d} documents filling at least "
                            f"one row; entry {entry} ({op}) gives it {new} documents that pack "
                            "into none",
                            f"<MixtureLog of {len(self.mixture.log)} entries>",
                        )
                else:
                    g = self._growth(d, entry, n, new, row - start, length)
                    growths, length = (*growths, g), row - start + g.slots
                n = new
            out.append(RowPass(row, start, length, base, index, growths, n, fresh))
        return out

    def _locate(
        self, source: int, j: IntArray
    ) -> Iterator[tuple[IntArray, PackingPlan, int, IntArray, int]]:
        """``(indices into j, plan, epoch, rows of that epoch, first document)`` for every plan
        pass the draws ``j`` of ``source`` read."""
        records = self.passes()[source]
        which = np.searchsorted(np.array([r.first for r in records]), j, "right") - 1
        for w in sorted(set(which.tolist())):
            sel = np.flatnonzero(which == w)
            rec = records[w]
            off = j[sel] - rec.start
            inside = off < rec.length
            if inside.any():
                yield from self._inside(rec, sel[inside], off[inside])
            if not inside.all():
                if rec.size == 0:  # pragma: no cover - the log's weights prevent it
                    raise RuntimeError(f"source {source} drew from an empty source")
                plan = self.plan(source, rec.size)
                r = off[~inside] - rec.length
                per_pass = plan.rows_per_epoch
                q = r // per_pass
                rest = sel[~inside]
                for p in sorted(set(q.tolist())):
                    m = q == p
                    yield rest[m], plan, rec.index + 1 + p, r[m] - p * per_pass, 0

    def _inside(
        self, rec: RowPass, sel: IntArray, off: IntArray
    ) -> Iterator[tuple[IntArray, PackingPlan, int, IntArray, int]]:
        """Rows ``off`` of a pass under way, through its growths, newest first."""
        if rec.base is None:  # pragma: no cover - the log's weights prevent it
            raise RuntimeError("a source of size 0 was drawn from")
        row = off.copy()
        owner = np.full(off.shape, -1, dtype=np.int64)
        if off.size <= _FEW_ROWS:  # a few rows: Python ints, no per-growth array overhead
            for k, r in enumerate(off.tolist()):
                owner[k], row[k] = _walk(rec.growths, r)
        else:  # element-wise, no gathers: a growth costs a dozen passes over the rows
            for i in range(len(rec.growths) - 1, -1, -1):
                g = rec.growths[i]
                hit = (owner < 0) & (row >= g.at)
                t = row - g.at
                before = t * g.rows // g.slots  # new rows among the slots before t (even merge)
                new = hit & ((t + 1) * g.rows // g.slots > before)
                owner = np.where(new, i, owner)
                row = np.where(new, before, np.where(hit, g.at + t - before, row))
        base = owner < 0
        if base.any():
            yield sel[base], rec.base, rec.index, row[base], 0
        for i in sorted(set(owner[~base].tolist())):
            m = owner == i
            g = rec.growths[i]
            yield sel[m], g.plan, 0, row[m], g.shift

    # -- Draws ----------------------------------------------------------------------------------
    def _each(
        self, d: IntArray, j: IntArray
    ) -> Iterator[tuple[int, IntArray, PackingPlan, int, IntArray, int]]:
        for source in sorted(set(d.tolist())):
            at = np.flatnonzero(d == source)
            for sel, plan, epoch, rows, shift in self._locate(source, j[at]):
                yield source, at[sel], plan, epoch, rows, shift

    def items(self, d: IntArray, j: IntArray) -> list[Row]:
        out: list[Row] = [()] * d.size
        for source, sel, plan, epoch, rows, shift in self._each(d, j):
            base = int(self.first_document[source]) + shift
            for i, row in zip(sel.tolist(), plan.epoch(epoch).rows(rows), strict=True):
                out[i] = tuple((doc + base, a, b) for doc, a, b in row)
        return out

    def costs(self, d: IntArray, j: IntArray) -> IntArray:
        out = np.zeros(d.size, dtype=np.int64)
        for _, sel, plan, epoch, rows, _ in self._each(d, j):
            out[sel] = plan.epoch(epoch).costs(rows)
        return out

    def chunk_steps(self, order: BlendOrder, mbs: int, dp: int) -> int:
        return 1  # a log's blend evaluates one micro-batch at a time (Blend.chunk_steps)

    # -- what is read ---------------------------------------------------------------------------
    def sizes_at(self, position: int) -> list[int]:
        """The sources' sizes after the corpus changes whose entries start before run position
        ``position``."""
        mixture = self.mixture
        out = list(mixture.log.sizes or ())
        for e in mixture.log.corpus_changes():
            if (
                e.op != "retire"
                and e.source is not None
                and mixture.entry_start(e.index) < position
            ):
                out[e.source] = e.size or 0
        return out

    def _spans(self, source: int, j0: int, j1: int) -> tuple[IntArray, IntArray, IntArray]:
        """Every span of draws ``[j0, j1)`` of ``source`` (local document ids), listed."""
        keys: list[IntArray] = []
        starts: list[IntArray] = []
        stops: list[IntArray] = []
        for lo in range(j0, j1, _LIST_ROWS):
            j = np.arange(lo, min(j1, lo + _LIST_ROWS), dtype=np.int64)
            for _, plan, epoch, rows, shift in self._locate(source, j):
                spans = [s for row in plan.epoch(epoch).rows(rows) for s in row]
                table = np.array(spans, dtype=np.int64).reshape(-1, 3)
                keys.append(table[:, 0] + shift)
                starts.append(table[:, 1])
                stops.append(table[:, 2])
        if not keys:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return np.concatenate(keys), np.concatenate(starts), np.concatenate(stops)

    def _stretch(self, source: int, j0: int, j1: int) -> tuple[PackingPlan, int, int] | None:
        """``(plan, first row, its pass index)`` when draws ``[j0, j1)`` of ``source`` lie in
        one stretch of normal passes of one plan, else None."""
        records = self.passes()[source]
        w = int(np.searchsorted(np.array([r.first for r in records]), j0, "right")) - 1
        rec = records[w]
        if w + 1 < len(records) and j1 > records[w + 1].first:
            return None
        if rec.size == 0:
            return None
        plan = self.plan(source, rec.size)
        if not rec.growths and rec.base is plan:
            return plan, rec.start, rec.index
        after = rec.start + rec.length
        if j0 >= after:
            return plan, after, rec.index + 1
        return None

    def _read(self, source: int, j0: int, j1: int) -> tuple[int, int]:
        """``(tokens read, distinct tokens read)`` by draws ``[j0, j1)`` of ``source``."""
        stretch = self._stretch(source, j0, j1)
        if stretch is None:
            c = coverage(self._spans(source, j0, j1))
            return c.units, c.distinct
        plan, origin, index = stretch
        return plan.pass_tokens(index, j0 - origin, j1 - origin)

    def coverage(self, order: BlendOrder, first: int, end: int) -> tuple[int, int]:
        """NOTE [ Coverage ] of a mixture's epoch over a changing corpus: every document the
        log names by the epoch's end is in the universe (a retired source's included)."""
        starts, stops = self.mixture.counts(first), self.mixture.counts(end)
        units = distinct = 0
        for source, (j0, j1) in enumerate(zip(starts.tolist(), stops.tolist(), strict=True)):
            if j1 > j0:
                u, x = self._read(source, j0, j1)
                units, distinct = units + u, distinct + x
        universe = 0
        for source, n in enumerate(self.sizes_at(end)):
            if n:
                universe += int(self.plan(source, n).lengths.total_tokens)
        rows = end - first
        return universe - distinct, (units - distinct) + rows * self.seq_len - units

    def unread_tokens(self, source: int, j: int) -> int:
        """Tokens of the pass of ``source`` holding its draw ``j - 1`` (its last) that it has not
        read after ``j`` draws; before its first draw, its whole first pass, and likewise the
        whole pass a growth started at ``j`` (its new documents were never read)."""
        records = self.passes()[source]
        w = int(np.searchsorted(np.array([r.first for r in records]), j, "right")) - 1
        rec = records[w]
        if j == 0 or (j == rec.start and rec.fresh):  # nothing of a pass of new documents read
            return 0 if rec.base is None else rec.base.tokens_per_epoch
        if j <= rec.start:
            return 0
        end = rec.start + rec.length
        if j <= end:
            if not rec.growths and rec.base is not None:
                return rec.base.epoch(rec.index).tokens_from(j - rec.start)
            return self._tokens_listed(source, j, end)
        if rec.size == 0:  # pragma: no cover - the log's weights prevent it
            return 0
        plan = self.plan(source, rec.size)
        q, rem = divmod(j - end, plan.rows_per_epoch)
        return 0 if rem == 0 else plan.epoch(rec.index + 1 + q).tokens_from(rem)

    def _tokens_listed(self, source: int, j0: int, j1: int) -> int:
        _, a, b = self._spans(source, j0, j1)
        return int((b - a).sum())

    def describe(self, order: BlendOrder, position: int) -> str:
        """What each source has given after ``position`` run-wide rows, a pass being its rows
        at the sizes then, and what retired sources leave unread, in words."""
        counts = self.mixture.counts(position).tolist()
        rows = [
            self.plan(d, n).rows_per_epoch if n else 0
            for d, n in enumerate(self.sizes_at(position))
        ]
        shown = per_source_progress(counts, rows, self.unit)
        retired = self.retired_unread(order, position)
        if retired:
            shown += "; retired (tokens of the last pass unread): " + ", ".join(
                f"source {d}: {n}" for d, n in retired.items()
            )
        return shown

    def first_prints(self) -> list[str]:
        """Every source's lengths fingerprint at the log's first sizes (``""``: a source added
        later): what ``config.lengths`` digests, so lengths that only add documents the run has
        not reached yet load the same states (NOTE [ Lengths a state binds ])."""
        return ["" if p is None else str(p.config()["lengths"]) for p in self.first_plans]

    def grown_print(self, order: BlendOrder, position: int) -> str:
        """The digest of the lengths of every document a corpus change has brought into play by
        run position ``position`` (entries that start at or before it): the state's
        ``mixture`` tag ends in its first 8 hex digits (NOTE [ Lengths a state binds ])."""
        first = self.log.sizes or ()
        parts: list[object] = []
        for d, n in enumerate(self.sizes_at(position + 1)):
            if n > first[d]:
                key = (d, first[d], n)
                if key not in self._grown_prints:
                    part = DocumentLengths(self.lengths[d].slice(first[d], n))
                    self._grown_prints[key] = part.fingerprint()
                parts.append([d, first[d], n, self._grown_prints[key]])
        return digest(parts)

    def retired_unread(self, order: BlendOrder, position: int) -> dict[int, int]:
        """Per source retired by an entry that starts at or before run position ``position``,
        the tokens of its last pass it has not read (NOTE [ Packed corpus changes ])."""
        mixture = self.mixture
        retired = [
            e.source
            for e in mixture.log.corpus_changes()
            if e.op == "retire"
            and e.source is not None
            and mixture.entry_start(e.index) <= position
        ]
        counts = mixture.counts(position).tolist() if retired else []
        return {d: self.unread_tokens(d, int(counts[d])) for d in retired}
