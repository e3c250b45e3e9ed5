"""Packed rows as sources (:class:`~dataorder.llm.sources.Source`): one corpus, or corpora read
by a blend, built from :class:`~dataorder.llm.packing.sampler.PackedSampler`'s arguments by
:func:`packed_source`.

* :class:`PackedCorpus`: an epoch is one pass over a corpus's rows
  (:class:`~dataorder.llm.packing.plan.EpochRows`: windows in a keyed order, each packed by best
  fit, its rows in a keyed order).
* :class:`RowDraws`: how a :class:`~dataorder.llm.sources.Blend` reads K corpora, each packed on
  its own: the ``j``-th row source ``d`` gives is row ``j mod P`` of its pass ``j // P`` (``P``
  rows per pass), its document ids shifted to be flat over the sources. Over a log of corpus
  changes the blend reads :class:`~dataorder.llm.packing.growth.GrowingRows` instead.

Both fill :class:`~dataorder.core.dealing.CostedItems` (rows and their attention costs), which
the :class:`~dataorder.core.dealing.DealtByCost` batching deals to the ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.core.keys import KEY_DERIVATION_VERSION, derive_key
from dataorder.core.partition import MAX_POSITIONS, EpochBlocks
from dataorder.core.permutation import PERMUTATION_VERSION
from dataorder.core.state import digest
from dataorder.llm.blend_order import BLEND_VERSION, BlendOrder
from dataorder.llm.mixlog import LogMixture, MixtureLog
from dataorder.llm.mixture import MixtureSchedule
from dataorder.llm.packing.growth import GrowingRows, MakePlan
from dataorder.llm.packing.plan import PACKING_VERSION, EpochRows, PackingPlan, Row
from dataorder.llm.sources import Blend, EpochEnd, Passes, compile_mixture, per_source_progress

__all__ = ["MIXTURE_PREFIX", "Packed", "PackedCorpus", "RowDraws", "packed_source"]

IntArray = npt.NDArray[np.int64]

#: ``config.lengths`` of a mixture's state starts with this (then the digest of every source's).
MIXTURE_PREFIX = "sources:"
_VERSIONS = f"packing{PACKING_VERSION}-permutation{PERMUTATION_VERSION}-key{KEY_DERIVATION_VERSION}"
_STREAM = "packed"
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

    def retired_unread(self, t: int) -> dict[int, int]:
        """Nothing is retired from one corpus."""
        return {}


class RowDraws:
    """K corpora read by a blend, each packed on its own (see the module docstring). Document
    ids are flat: document ``i`` of source ``d`` is ``sum(documents of sources before d) + i``."""

    unit = "rows"

    def __init__(self, plans: Sequence[PackingPlan]) -> None:
        self.plans = self.first_plans = list(plans)
        self.first_document = np.concatenate(
            [[0], np.cumsum([len(p.lengths) for p in plans])[:-1]]
        ).astype(np.int64)
        self.per_pass = np.array([p.rows_per_epoch for p in plans], dtype=np.int64)
        self.first_rows: list[int] = self.per_pass.tolist()

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
        ``d`` gives its draws ``[c_d(first), c_d(end))``, rows ``j mod P`` of passes ``j // P``
        (:meth:`~dataorder.llm.packing.plan.PackingPlan.pass_tokens`)."""
        starts, stops = order.mixture.counts(first), order.mixture.counts(end)
        units = distinct = 0
        for plan, j0, j1 in zip(self.plans, starts.tolist(), stops.tolist(), strict=True):
            if j1 > j0:
                read, seen = plan.pass_tokens(0, j0, j1)
                units, distinct = units + read, distinct + seen
        universe = sum(int(p.lengths.total_tokens) for p in self.plans)
        rows = end - first
        return universe - distinct, (units - distinct) + rows * self.plans[0].seq_len - units

    def chunk_steps(self, order: BlendOrder, mbs: int, dp: int) -> int:
        return _chunk_steps(mbs, dp)

    def describe(self, order: BlendOrder, t: int) -> str:
        return per_source_progress(
            order.mixture.counts(t).tolist(), order.sizes.tolist(), self.unit
        )

    def retired_unread(self, order: BlendOrder, t: int) -> dict[int, int]:
        return {}

    def grown_print(self, order: BlendOrder, t: int) -> str | None:
        return None

    def first_prints(self) -> list[str]:
        """Every source's lengths fingerprint: what ``config.lengths`` digests."""
        return [str(p.config()["lengths"]) for p in self.plans]


@dataclass(frozen=True)
class Packed:
    """The source :func:`packed_source` builds and what the sampler reads of it: the epoch
    end; the plans (one per source); ``recorded``, what the configuration records (NOTE
    [ Packed state fields ] in :mod:`dataorder.llm.packing.sampler`: a field is recorded when its
    key is here; ``drop_last`` and ``pad`` map to None, their values read from the sampler);
    rows per epoch (nominal for a mixture); ``what``, the head of the sampler's ``repr``
    (``"5 documents"``, ``"mixture"``); a mixture's schedule and order, or None."""

    rows: PackedCorpus | Blend[Row]
    end: EpochEnd
    plans: list[PackingPlan]
    recorded: Mapping[str, object]
    total_rows: int
    what: str
    schedule: MixtureSchedule | LogMixture | None = None
    order: BlendOrder | None = None


def _no_rows(plan: PackingPlan) -> str:
    """What lengths that pack into no row must be, and why these pack into none."""
    lengths, s = plan.lengths, plan.seq_len
    n, longer = len(lengths), lengths.count_longer_than(plan.seq_len)
    drop = f"long_documents={plan.long_documents!r}"
    if longer == n:
        why = f"every document is longer than seq_len={s}, and {drop} drops it"
    elif longer == 0:
        why = "every document is empty (0 tokens)"
    else:
        why = f"{longer} of {n} documents are longer than seq_len={s} ({drop} drops them) and "
        why += "the others are empty"
    return f"documents that fill at least one row of seq_len={s}; {why}"


def packed_source(
    lengths: Any,
    mixture: object,
    make_plan: MakePlan,
    seed: int,
    layout: tuple[int, int],
    ends: tuple[bool, bool, object],
    total_rows: object,
) -> Packed:
    """The source :class:`~dataorder.llm.packing.sampler.PackedSampler`'s arguments name (the
    one choice of source, by the arguments' form): one corpus of ``lengths``, or with
    ``mixture=(sources, weights)`` the blend of corpora packed on their own. ``layout`` is
    ``(micro_batch_size, data_parallel_size)``; ``ends`` is ``(drop_last,
    pad_samples_to_global_batch_size, global_batch_size)``."""
    if mixture is not None:
        if lengths is not None:
            fail("lengths", "None with mixture= (the sources' lengths are in it)", "<given>")
        return _blend(mixture, make_plan, seed, layout, ends, total_rows)
    if lengths is None:
        fail("lengths", "document lengths, or given in mixture=", None, TypeError)
    return _one(make_plan(lengths, seed=seed), layout, ends, total_rows)


def _one(
    plan: PackingPlan, layout: tuple[int, int], ends: tuple[bool, bool, object], total_rows: object
) -> Packed:
    (mbs, dp), (drop_last, pad, global_batch_size) = layout, ends
    rows = plan.rows_per_epoch
    if rows > MAX_POSITIONS:
        fail(
            "seq_len",
            f"large enough for at most {MAX_POSITIONS} rows per epoch (the lengths hold "
            f"{plan.lengths.total_tokens} tokens)",
            plan.seq_len,
        )
    if total_rows is not None and (check_int("total_rows", total_rows, min_value=0) != rows):
        fail("total_rows", f"None or {rows} without mixture= (an epoch is one pass)", total_rows)
    end = EpochEnd.of_passes(drop_last, global_batch_size, pad, mbs, dp)
    gbs = end.global_batch_size
    source = PackedCorpus(plan)
    what = f"<{len(plan.lengths)} documents>"
    if rows == 0:  # nothing to pack: say why, whatever drop_last is
        fail("lengths", _no_rows(plan), what)
    if source.epochs.blocks(0, mbs, dp, end).num_batches == 0:
        unit = f"global batch of global_batch_size={gbs}" if gbs else f"block of {mbs * dp}"
        fail(
            "lengths",
            f"enough tokens for one {unit} rows of seq_len={plan.seq_len} when "
            f"drop_last=True ({plan.rows_per_epoch} rows)",
            what,
        )
    recorded = {
        "lengths": str(plan.config()["lengths"]),
        "drop_last": None,
        "pad": None,
        "global_batch_size": gbs,
        "versions": _VERSIONS,
    }
    return Packed(source, end, [plan], recorded, rows, f"{len(plan.lengths)} documents")


def _blend(
    mixture: object,
    make_plan: MakePlan,
    seed: int,
    layout: tuple[int, int],
    ends: tuple[bool, bool, object],
    total_rows: object,
) -> Packed:
    (mbs, dp), (drop_last, pad, global_batch_size) = layout, ends
    sources, weights = _check_mixture(mixture, drop_last, pad)
    plans = [make_plan(lengths, seed=_source_seed(seed, d)) for d, lengths in enumerate(sources)]
    checked = _weights(weights, len(plans))
    end, batches = EpochEnd.of_run(
        global_batch_size,
        what="an int or a BatchSizeSchedule with mixture=",
        max_value=MAX_POSITIONS,
        micro_batch_size=mbs,
        data_parallel_size=dp,
    )
    schedule, compiled = compile_mixture(checked, seed, _STREAM, batches)
    draws: RowDraws | GrowingRows = RowDraws(plans)
    if isinstance(compiled, LogMixture) and compiled.log.sizes is not None:
        # corpus changes (NOTE [ Packed corpus changes ]): the rows of the log's first sizes
        draws = GrowingRows(plans, make_plan, compiled)
    per_pass = draws.first_rows
    largest = max(seg.global_batch_size for seg in batches.segments)
    if total_rows is None and sum(per_pass) < largest:
        fail(
            "global_batch_size",
            f"at most total_rows (by default every source's rows of one pass, {sum(per_pass)})",
            largest,
        )
    total = sum(per_pass) if total_rows is None else total_rows
    total = check_int("total_rows", total, min_value=largest, max_value=MAX_POSITIONS)
    for d, (rows, first) in enumerate(zip(per_pass, draws.first_plans, strict=True)):
        if rows < 1 and first is not None:  # a source added later has no rows yet
            fail(f"mixture[0][{d}]", _no_rows(plans[d]), "<no rows>")
    order = BlendOrder(per_pass, compiled, batches, total, seed)
    recorded = {
        "lengths": MIXTURE_PREFIX + digest(draws.first_prints()),
        "global_batch_size": batches,
        "total_rows": None,
        "versions": f"{_VERSIONS}-blend{BLEND_VERSION}",
    }
    return Packed(Blend(order, draws), end, plans, recorded, total, "mixture", schedule, order)


def _check_mixture(mixture: object, drop_last: bool, pad: bool) -> tuple[Sequence[Any], Any]:
    """``mixture=``'s ``(sources, weights)``, and the arguments a mixture forces."""
    if not isinstance(mixture, tuple | list) or len(mixture) != 2:
        fail("mixture", "a pair ([lengths, ...], weights or MixtureSchedule)", mixture, TypeError)
    sources, weights = mixture
    if isinstance(sources, str | bytes) or not isinstance(sources, Sequence) or not sources:
        fail("mixture[0]", "a non-empty sequence of document lengths", sources, TypeError)
    if pad:
        fail("pad_samples_to_global_batch_size", "False with mixture= (nothing is padded)", True)
    if not drop_last:
        # as create_megatron_sampler(mixture=...): an epoch of a mixture is whole global
        # batches, so there is no tail to keep; accepting False would promise padding
        fail(
            "drop_last",
            "True with mixture= (a mixture drops nothing: its epochs are whole global batches)",
            False,
        )
    return sources, weights


def _weights(weights: Any, k: int) -> MixtureSchedule | MixtureLog:
    """``mixture[1]`` as a schedule over ``k`` sources, or a log over ``k``."""
    if not isinstance(weights, MixtureLog):
        return MixtureSchedule.for_sources(
            weights, k, name="mixture[1]", counted_as="len(mixture[0])"
        )
    if weights.num_sources != k:
        fail(
            "mixture[1]",
            f"a MixtureLog over len(mixture[0]) = {k} sources",
            f"MixtureLog over {weights.num_sources} sources",
        )
    return weights


def _source_seed(seed: int, source: int) -> int:
    """Source ``source``'s packing seed: its own windows and orders."""
    key = derive_key(seed, epoch=0, stream=_STREAM, purpose="source", extra=(source,))
    return key >> 1  # a seed is below 2**63
