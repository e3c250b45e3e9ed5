"""The packed sampler: each item is one rank's micro-batch of packed rows, a pure function.

:class:`PackedSampler` is a batch sampler (``DataLoader(PackedDataset(...),
batch_sampler=sampler, collate_fn=PackedDataset.collate)``) over the rows of a
:class:`~dataorder.llm.packing.plan.PackingPlan`: the Megatron samplers' global blocks over
rows instead of samples (a mixture apportions the rows among corpora packed on their own, as
:class:`~dataorder.llm.blend.BlendedSampler` apportions samples). The steps, the state and the
checkpoint schema: docs/llm_samplers.md.

NOTE [ Dealing rows ]
    Every rank knows its block's rows (a pure function of the position), so each deals the block
    to the ranks by attention cost (:func:`~dataorder.core.dealing.deal`) and builds only its
    own: ranks finish a step together, with no collective. Only the dealing depends on the
    layout, so a state at a block boundary continues on any layout that divides it (elastic).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_int, fail
from dataorder.core.assembly import Detail, Extra, Field, Given, Schema, flag, recorded
from dataorder.core.dealing import DealtBlocks, DealtByCost
from dataorder.core.keys import KEY_DERIVATION_VERSION, MAX_SEED, derive_key
from dataorder.core.partition import MAX_POSITIONS
from dataorder.core.permutation import PERMUTATION_VERSION
from dataorder.core.readonly import ReadOnly
from dataorder.core.state import Scalar, digest
from dataorder.core.topology import Topology
from dataorder.llm.blend_order import BLEND_VERSION, BlendOrder
from dataorder.llm.mixlog import LogMixture, MixtureLog
from dataorder.llm.mixture import MixtureSchedule
from dataorder.llm.packing.fit import LongDocuments, Split
from dataorder.llm.packing.growth import GrowingRows
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.plan import DEFAULT_CHUNK, PACKING_VERSION, PackingPlan, Row
from dataorder.llm.packing.rule import PackedRows
from dataorder.llm.packing.sources import PackedCorpus, RowDraws
from dataorder.llm.sampler import (
    BATCH_SIZE_SCHEDULE,
    MIXTURE_STATE,
    PLACEMENT,
    EpochEnd,
    MicroBatchSampler,
    compile_mixture,
    global_batch_field,
)
from dataorder.llm.schedule import BatchSizeSchedule
from dataorder.llm.sources import Blend

__all__ = ["MAX_BLOCK_ROWS", "DealtBlocks", "PackedSampler"]

IntArray = npt.NDArray[np.int64]

_VERSIONS = f"packing{PACKING_VERSION}-permutation{PERMUTATION_VERSION}-key{KEY_DERIVATION_VERSION}"
_STREAM = "packed"
#: Most rows in one global block (``micro_batch_size x data_parallel_size``): every rank costs
#: and deals its whole block each step (NOTE [ Dealing rows ]), about 7 us a row here (4,096
#: rows: 0.03 s; 65,536, 16,384 ranks of 4 rows: 0.44 s). Larger blocks are refused rather than
#: left to hang every step.
MAX_BLOCK_ROWS = 2**18
_DEALT = DealtByCost[Row]((), "rows", MAX_BLOCK_ROWS, "MAX_BLOCK_ROWS")


# -- state fields -------------------------------------------------------------------------------
# NOTE [ Packed state fields ]
#     A field a configuration forces carries no information and is left out (a state is at most
#     MAX_STATE_BYTES, NOTE [ State size ]): ``total_rows`` of one corpus (a function of the
#     lengths and the packing), ``long_documents`` unless ``"drop"`` (then ``split`` reads
#     ``"never-drop"``), ``drop_last`` and ``pad`` of a mixture (always True and False).
#     ``from_state`` then uses the constructor's default, which is the forced value. Arguments
#     the user sets come before what they determine, so a state from another seed names the
#     seed, not the row count.
#     The packing's four arguments share one field, ``config.packing`` (``"8192/overflow/
#     16384/128"``): the state of a mixture at every cap at once (a batch-size schedule, a long
#     schedule tag, 19-digit counts) fits MAX_STATE_BYTES that way, and a one-corpus state at
#     the caps fits 512 bytes.
_MIXTURE_PREFIX = "sources:"
_PACKING = r"([0-9]+)/(overflow|never|never-drop)/([0-9]+)/([0-9]+)"
_PACKING_LABEL = "packing (seq_len/split/window/chunk; split 'never-drop' is long_documents='drop')"


def _lengths_field() -> Field:
    """``config.lengths``: the lengths' fingerprint, or with a mixture ``"sources:"`` and the
    digest of every source's (a state from other lengths is refused, named). A mixture's state
    rebuilds with ``lengths=None`` (its sources are given in ``mixture=``)."""

    def args(value: Scalar) -> Mapping[str, Any]:
        return {"lengths": None} if _is_mixture_print(value) else {}

    return Field("lengths", lambda s: s._record["lengths"], args)


def _is_mixture_print(value: object) -> bool:
    return isinstance(value, str) and value.startswith(_MIXTURE_PREFIX)


_GLOBAL_BATCH = global_batch_field(lambda s: s._record["global_batch_size"])


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


def _mixture_weights(weights: Any, k: int) -> MixtureSchedule | MixtureLog:
    """``mixture[1]`` as a schedule over ``k`` sources, or a log over ``k`` without sizes."""
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


def _packing_field() -> Field:
    """``config.packing``: ``"seq_len/split/window/chunk"``, the packing in one field (NOTE
    [ Packed state fields ]); ``split`` is ``"never-drop"`` under ``split="never",
    long_documents="drop"``."""

    def read(sampler: PackedSampler) -> Scalar:
        split = sampler.split
        if split == "never" and sampler.long_documents == "drop":
            split = "never-drop"
        return f"{sampler.seq_len}/{split}/{sampler.window}/{sampler.chunk}"

    def args(value: Scalar) -> Mapping[str, Any]:
        found = re.fullmatch(_PACKING, value) if isinstance(value, str) else None
        if found is None:
            fail("state['config.packing']", "'seq_len/split/window/chunk'", value)
        seq_len, split, window, chunk = found.groups()
        drop = split == "never-drop"
        return {
            "seq_len": int(seq_len),
            "split": "never" if drop else split,
            "window": int(window),
            "chunk": int(chunk),
            "long_documents": "drop" if drop else "truncate",
        }

    return Field("packing", read, args, _PACKING_LABEL)


def _only_if(field: Field, label: str) -> Field:
    """``field``, recorded only by the configurations that record it (NOTE [ Packed state
    fields ]); ``label`` names it in messages and says when it is recorded."""
    return Field(
        field.name,
        lambda s: field.read(s) if field.name in s._record else None,
        field.args,
        label,
        optional=True,
    )


def _per_source(sampler: PackedSampler) -> str:
    """The rows each source has given (over a changing corpus: a pass at the sizes then, and
    the tokens retired sources leave unread; NOTE [ Packed corpus changes ])."""
    growing = sampler._growing
    if growing is not None:
        return growing.describe(sampler.consumed_samples)
    return sampler._rows.describe(sampler.consumed_samples)


def _grown_at(
    sampler: PackedSampler, growing: GrowingRows, epoch: int, progress: Mapping[str, int]
) -> str:
    return growing.grown_print(sampler.order.epoch_bounds(epoch)[0] + progress["consumed"])[:8]


def _mixture_tag(sampler: PackedSampler, epoch: int, progress: Mapping[str, int]) -> Scalar | None:
    """The state's ``mixture``: the schedule's tag, and over a log of corpus changes ``/`` and 8
    hex digits of the lengths its changes brought into play (NOTE [ Lengths a state binds ])."""
    tag = MIXTURE_STATE.save(sampler, epoch, progress)
    growing = sampler._growing
    if tag is None or growing is None:
        return tag
    return f"{tag}/{_grown_at(sampler, growing, epoch, progress)}"


def _check_mixture_tag(
    sampler: PackedSampler,
    saved: object,
    epoch: int,
    progress: Mapping[str, int],
    layout: Mapping[str, int],
) -> None:
    growing = sampler._growing
    if growing is None:
        MIXTURE_STATE.check(sampler, saved, epoch, progress, layout)
        return
    tag, _, grown = saved.rpartition("/") if isinstance(saved, str) else ("", "", "")
    if not tag:
        fail(
            "state['mixture']",
            "the log's tag, '/' and 8 hex digits of the lengths its corpus changes brought into "
            "play (NOTE [ Lengths a state binds ])",
            saved,
        )
    MIXTURE_STATE.check(sampler, tag, epoch, progress, layout)
    want = _grown_at(sampler, growing, epoch, progress)
    if grown != want:
        fail(
            "state['mixture']",
            f"a tag ending in /{want}: the lengths differ for a "
            "grown or added document the state had reached (NOTE [ Lengths a state binds ])",
            saved,
        )


#: The state's ``mixture`` key: :data:`~dataorder.llm.sampler.MIXTURE_STATE`'s tag, over a log
#: of corpus changes followed by the digest of the lengths it brought into play (8 hex digits, in
#: the same key: a state at every cap stays within MAX_STATE_BYTES).
_MIXTURE = Extra("mixture", _mixture_tag, _check_mixture_tag, required=MIXTURE_STATE.required)


def _position_of(sampler: PackedSampler) -> str:
    text = sampler.dealt_blocks().describe(sampler.progress, sampler.epoch)
    return text + sampler._source.epochs.where(sampler.epoch)


class PackedSampler(MicroBatchSampler[list[Row]]):
    """Micro-batches of packed rows of ``seq_len`` tokens: the
    :class:`~dataorder.llm.packing.sources.PackedCorpus` source, or the
    :class:`~dataorder.llm.sources.Blend` of packed corpora with ``mixture=``, times the
    :class:`~dataorder.core.dealing.DealtByCost` batching.

    Args:
        lengths: The documents' token counts (a :class:`~dataorder.llm.packing.lengths.
            DocumentLengths` or an integer array); None with ``mixture``.
        seq_len: Tokens per row, an int in ``[1, 2**31]``.
        micro_batch_size: Rows per micro-batch on each rank.
        data_parallel_rank, data_parallel_size, mesh, dp_dims, topology: The data-parallel
            place (:class:`~dataorder.llm.sampler.MicroBatchSampler`).
        global_batch_size: Rows per global batch, a multiple of ``micro_batch_size x
            data_parallel_size``, or None (a block). With a mixture, required (an int or a
            :class:`~dataorder.llm.schedule.BatchSizeSchedule`): each global batch takes each
            source's exact share.
        seed: An int in ``[0, 2**63)``: the windows, the orders, the slot orders.
        split: ``"overflow"`` (pretraining: every token of every document once per epoch, only
            what cannot fit split across rows) or ``"never"`` (fine-tuning: no document split).
        window: Documents packed together (a multiple of ``chunk``; larger windows pad less, a
            resume packs one); None: :func:`~dataorder.llm.packing.plan.default_window`.
        chunk: Consecutive documents read together (the grain of the windows).
        long_documents: Under ``"never"``, ``"truncate"`` a document longer than ``seq_len``
            to ``seq_len`` tokens, or ``"drop"`` it (counted).
        drop_last: Drop the rows that do not fill a whole block (or global batch); if False, pad
            with empty rows ``()``. With a mixture, True (the default): its epochs are whole
            global batches of one run, with no tail to drop or pad.
        pad_samples_to_global_batch_size: With ``drop_last=False``, pad the last global batch.
        mixture: ``([lengths_0, lengths_1, ...], weights_or_schedule)``: pack each source on its
            own and take rows by weight (a weight vector, a
            :class:`~dataorder.llm.mixture.MixtureSchedule` over the rows trained, or a
            :class:`~dataorder.llm.mixlog.MixtureLog`; one built with ``sizes=`` may grow, add
            and retire sources, its lengths here holding every document it names (a state
            binds only the lengths in play at its position, so longer lengths load it: NOTE
            [ Lengths a state binds ] in :mod:`dataorder.llm.packing.growth`). Document ids
            in rows are then flat over the sources, in order
            (:class:`~dataorder.llm.packing.dataset.ConcatTokens`).
        total_rows: With a mixture, rows per epoch (default: every source's rows per pass).
        consumed_samples: A run-wide count of rows consumed (Megatron's convention): the sampler
            starts there.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If an argument is out of range; the message names it and its value.

    Five documents of 5, 3, 9, 2 and 7 tokens in rows of 8, two ranks of one row each: every
    token once, the 9-token document split, nothing padded but the last row's room.

    >>> s = [PackedSampler([5, 3, 9, 2, 7], 8, 1, r, 2, seed=0, chunk=1, window=5,
    ...                    drop_last=False) for r in range(2)]
    >>> [len(x) for x in s], s[0].tokens_padded, s[0].tokens_dropped
    ([2, 2], 6, 0)
    >>> sorted(span for x in s for batch in x for row in batch for span in row)
    [(0, 0, 5), (1, 0, 3), (2, 0, 8), (2, 8, 9), (3, 0, 2), (4, 0, 7)]
    """

    #: What a position of the order counts, in messages.
    position_unit = "row"
    #: The rows of a log of corpus changes, or None (NOTE [ Packed corpus changes ]).
    _growing: GrowingRows | None = None

    schema = Schema(
        kind="packed",
        fields=(
            _lengths_field(),
            _packing_field(),
            _only_if(flag("drop_last"), "drop_last (recorded without mixture= only)"),
            _GLOBAL_BATCH,
            _only_if(
                flag("pad_samples_to_global_batch_size", name="pad"),
                "pad_samples_to_global_batch_size (state key config.pad, recorded without "
                "mixture= only)",
            ),
            recorded("seed"),
            _only_if(recorded("total_rows"), "total_rows (recorded with mixture= only)"),
            Field("versions", lambda s: s._record["versions"]),
        ),
        layout=PLACEMENT,
        given=(
            Given(
                "lengths",
                "the document lengths the state was written over (a state holds only their "
                "fingerprint)",
                required=lambda config: not _is_mixture_print(config.get("lengths")),
            ),
            Given(
                "mixture",
                "the ([lengths, ...], weights) of the run (a state holds only digests)",
                required=lambda config: _is_mixture_print(config.get("lengths")),
            ),
            BATCH_SIZE_SCHEDULE,
        ),
        batching_of=lambda s: PackedRows(s.seq_len),
        extras=(_MIXTURE,),
        details=(
            Detail("consumed_samples", lambda s: f"{s.consumed_samples} rows (run-wide)"),
            Detail("per source", lambda s: _per_source(s)),
        ),
        position=_position_of,
        steps="micro-steps",
    )

    def __init__(
        self,
        lengths: DocumentLengths | npt.ArrayLike | None,
        seq_len: int,
        micro_batch_size: int,
        data_parallel_rank: int | None = None,
        data_parallel_size: int | None = None,
        global_batch_size: int | BatchSizeSchedule | None = None,
        *,
        seed: int,
        split: Split = "overflow",
        window: int | None = None,
        chunk: int = DEFAULT_CHUNK,
        long_documents: LongDocuments = "truncate",
        drop_last: bool = True,
        pad_samples_to_global_batch_size: bool = False,
        mixture: tuple[Sequence[DocumentLengths | npt.ArrayLike], Any] | None = None,
        total_rows: int | None = None,
        consumed_samples: int = 0,
        mesh: Any = None,
        dp_dims: Sequence[str] | None = None,
        topology: Topology | None = None,
    ) -> None:
        self._seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
        super().__init__(
            micro_batch_size, data_parallel_rank, data_parallel_size, mesh, dp_dims, topology
        )
        _DEALT.check(self._mbs, self._dp)
        self._drop_last = check_bool("drop_last", drop_last)
        self._pad = check_bool("pad_samples_to_global_batch_size", pad_samples_to_global_batch_size)
        plan = partial(
            PackingPlan,
            seq_len=seq_len,
            split=split,
            window=window,
            chunk=chunk,
            long_documents=long_documents,
        )

        self.mixture: MixtureSchedule | LogMixture | None = None
        self.order: BlendOrder
        # The one choice of source, by the arguments' form (NOTE [ A sampler is a source times a
        # batching ]): a mixture of packed corpora is the blend over packed corpora.
        if mixture is not None:
            if lengths is not None:
                fail("lengths", "None with mixture= (the sources' lengths are in it)", "<given>")
            self._blend(mixture, plan, global_batch_size, total_rows)
        elif lengths is None:
            fail("lengths", "document lengths, or given in mixture=", None, TypeError)
        else:
            self.plans = [plan(lengths, seed=self._seed)]
            self._one(global_batch_size, total_rows)
        self._start(consumed_samples)

    # -- construction: the two sources ------------------------------------------------------------
    def _one(self, global_batch_size: object, total_rows: object) -> None:
        packing = self.plans[0]
        rows = packing.rows_per_epoch
        if rows > MAX_POSITIONS:
            fail(
                "seq_len",
                f"large enough for at most {MAX_POSITIONS} rows per epoch (the lengths hold "
                f"{packing.lengths.total_tokens} tokens)",
                packing.seq_len,
            )
        if total_rows is not None and (check_int("total_rows", total_rows, min_value=0) != rows):
            fail(
                "total_rows", f"None or {rows} without mixture= (an epoch is one pass)", total_rows
            )
        block = self._mbs * self._dp
        end = EpochEnd.of_passes(self._drop_last, global_batch_size, self._pad, self._mbs, self._dp)
        gbs = end.global_batch_size
        source = PackedCorpus(packing)
        self._compose(source, _DEALT, end)
        self._rows: PackedCorpus | Blend[Row] = source
        # what this configuration records (NOTE [ Packed state fields ]): an optional field is
        # recorded when its key is here (drop_last and pad are read from the sampler)
        self._record: dict[str, object] = {
            "lengths": str(packing.config()["lengths"]),
            "drop_last": None,
            "pad": None,
            "global_batch_size": gbs,
            "versions": _VERSIONS,
        }
        self._total_rows, self._what = rows, f"{len(packing.lengths)} documents"
        if rows == 0:  # nothing to pack: say why, whatever drop_last is
            fail("lengths", _no_rows(packing), f"<{len(packing.lengths)} documents>")
        if source.epochs.blocks(0, self._mbs, self._dp, end).num_batches == 0:
            unit = f"global batch of global_batch_size={gbs}" if gbs else f"block of {block}"
            fail(
                "lengths",
                f"enough tokens for one {unit} rows of seq_len={packing.seq_len} when "
                f"drop_last=True ({packing.rows_per_epoch} rows)",
                f"<{len(packing.lengths)} documents>",
            )

    def _blend(
        self,
        mixture: object,
        plan: Callable[..., PackingPlan],
        global_batch_size: object,
        total_rows: object,
    ) -> None:
        sources, weights = self._check_mixture(mixture)
        self.plans = [plan(lengths, seed=self._source_seed(d)) for d, lengths in enumerate(sources)]
        weights = _mixture_weights(weights, len(self.plans))
        end, batches = EpochEnd.of_run(
            global_batch_size,
            what="an int or a BatchSizeSchedule with mixture=",
            max_value=MAX_POSITIONS,
            micro_batch_size=self._mbs,
            data_parallel_size=self._dp,
        )
        largest = max(seg.global_batch_size for seg in batches.segments)
        # corpus changes (NOTE [ Packed corpus changes ]): the rows of the log's first sizes
        growing = None
        if isinstance(weights, MixtureLog) and weights.sizes is not None:
            growing = GrowingRows(self.plans, lambda x, seed: plan(x, seed=seed), weights)
        per_pass = [p.rows_per_epoch for p in self.plans] if growing is None else growing.first_rows
        if total_rows is None and sum(per_pass) < largest:
            fail(
                "global_batch_size",
                f"at most total_rows (by default every source's rows of one pass, {sum(per_pass)})",
                largest,
            )
        total = sum(per_pass) if total_rows is None else total_rows
        total = check_int("total_rows", total, min_value=largest, max_value=MAX_POSITIONS)
        added = [] if growing is None else [d for d, p in enumerate(growing.first_plans) if not p]
        if min(r for d, r in enumerate(per_pass) if d not in added) < 1:
            d = next(d for d, r in enumerate(per_pass) if r < 1 and d not in added)
            fail(f"mixture[0][{d}]", _no_rows(self.plans[d]), "<no rows>")
        self.mixture, compiled = compile_mixture(weights, self._seed, _STREAM, batches)
        self.order = BlendOrder(per_pass, compiled, batches, total, self._seed)
        draws: RowDraws | GrowingRows = RowDraws(self.plans)
        if growing is not None and isinstance(compiled, LogMixture):
            growing.mixture, draws = compiled, growing
        self._rows = source = Blend(self.order, draws)
        self._compose(source, _DEALT, end)
        self._growing = growing
        prints = (
            [p.config()["lengths"] for p in self.plans]
            if growing is None
            else growing.first_prints()
        )
        self._record = {
            "lengths": _MIXTURE_PREFIX + digest(prints),
            "global_batch_size": batches,
            "total_rows": None,
            "versions": f"{_VERSIONS}-blend{BLEND_VERSION}",
        }
        self._total_rows, self._what = total, "mixture"

    def _check_mixture(self, mixture: object) -> tuple[Sequence[Any], Any]:
        """``mixture=``'s ``(sources, weights)``, and the arguments a mixture forces."""
        if not isinstance(mixture, tuple | list) or len(mixture) != 2:
            fail(
                "mixture", "a pair ([lengths, ...], weights or MixtureSchedule)", mixture, TypeError
            )
        sources, weights = mixture
        if isinstance(sources, str | bytes) or not isinstance(sources, Sequence) or not sources:
            fail("mixture[0]", "a non-empty sequence of document lengths", sources, TypeError)
        if self._pad:
            fail(
                "pad_samples_to_global_batch_size", "False with mixture= (nothing is padded)", True
            )
        if not self._drop_last:
            # as create_megatron_sampler(mixture=...): an epoch of a mixture is whole global
            # batches, so there is no tail to keep; accepting False would promise padding
            fail(
                "drop_last",
                "True with mixture= (a mixture drops nothing: its epochs are whole global batches)",
                False,
            )
        return sources, weights

    def _source_seed(self, source: int) -> int:
        """Source ``source``'s packing seed: its own windows and orders."""
        key = derive_key(self._seed, epoch=0, stream=_STREAM, purpose="source", extra=(source,))
        return key >> 1  # a seed is below 2**63

    seq_len = ReadOnly[int](lambda s: s.plans[0].seq_len, "Tokens per row.")
    split = ReadOnly[str](lambda s: s.plans[0].split, '``"overflow"`` or ``"never"``.')
    window = ReadOnly[int](lambda s: s.plans[0].window, "Documents packed together.")
    chunk = ReadOnly[int](lambda s: s.plans[0].chunk, "Consecutive documents read together.")
    long_documents = ReadOnly[str](
        lambda s: s.plans[0].long_documents,
        'What ``"never"`` does to a document longer than ``seq_len``.',
    )
    seed = ReadOnly[int]("_seed", "The seed.")
    drop_last = ReadOnly[bool](
        "_drop_last", "Whether the end of an epoch is dropped (else padded)."
    )
    pad_samples_to_global_batch_size = ReadOnly[bool](
        "_pad", "Whether the last global batch is padded to ``global_batch_size`` rows."
    )
    total_rows = ReadOnly[int](
        "_total_rows", "Rows per epoch before the end is dropped or padded (a mixture: nominal)."
    )
    global_batch_size_field = ReadOnly[Scalar | None](
        _GLOBAL_BATCH.read, "``config.global_batch_size``: 0 for none, an int, or a digest."
    )
    versions = ReadOnly[str](
        lambda s: str(s._record["versions"]), "The versions of the constructions the rows use."
    )

    def consumed_per_source(self, rows: int | None = None) -> IntArray:
        """With a mixture, the rows each source has given after ``rows`` run-wide rows."""
        t = self.consumed_samples if rows is None else check_int("rows", rows, min_value=0)
        return self._rows.counts(t)  # one corpus: refused, naming mixture=

    def retired_unread(self, rows: int | None = None) -> dict[int, int]:
        """Per source retired by the mixture's log (an entry that starts at or before ``rows``
        run-wide rows; default: :attr:`consumed_samples`), the tokens of its last pass it has
        not read (NOTE [ Packed corpus changes ] in :mod:`dataorder.llm.packing.growth`).
        Empty without a log of corpus changes."""
        t = self.consumed_samples if rows is None else check_int("rows", rows, min_value=0)
        return {} if self._growing is None else self._growing.retired_unread(t)

    @property
    def schedule(self) -> MixtureSchedule | LogMixture | None:
        """The mixture's schedule (what its state digests; a log's compiled form), or None."""
        return self.mixture

    tokens_dropped = ReadOnly[int](
        lambda s: s._epoch_coverage()[0],
        "Tokens of the corpus the cursor's epoch does not read, summed over ranks: the tail rows "
        '``drop_last`` drops, the tokens ``split="never"`` cuts; with a mixture, every token its '
        "epoch does not reach. Counted from window totals on first use.",
    )
    tokens_padded = ReadOnly[int](
        lambda s: s._epoch_coverage()[1],
        "Padding tokens of the cursor's epoch, summed over ranks: the room rows leave, whole "
        "padding rows, and (a mixture) tokens read a second time.",
    )
    documents_split = ReadOnly[int](
        lambda s: sum(sum(p.documents_split()) for p in s.plans),
        "Documents whose tokens are in more than one row of the packing of an epoch (packs "
        "every window once, on first use): a property of the packing, not of what is read (a "
        "mixture counts one pass of each source).",
    )

    def __repr__(self) -> str:
        return self._repr(f"{self._what}, seq_len={self.seq_len}, split={self.split!r}, ")

    def dealt_blocks(self, epoch: int | None = None) -> DealtBlocks[Row]:
        """The :class:`~dataorder.core.dealing.DealtBlocks` of ``epoch`` (default: the cursor's)
        on this layout."""
        plan = self.epoch_plan(epoch)
        if not isinstance(plan, DealtBlocks):  # pragma: no cover - what _make_plan builds
            raise TypeError(f"unexpected epoch plan {plan!r}")
        return plan
