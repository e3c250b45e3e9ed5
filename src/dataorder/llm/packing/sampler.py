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
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_int, fail
from dataorder.core.assembly import Detail, Field, Given, Schema, flag, recorded
from dataorder.core.dealing import DealtBlocks, DealtByCost
from dataorder.core.keys import MAX_SEED
from dataorder.core.readonly import ReadOnly
from dataorder.core.state import Scalar
from dataorder.core.topology import Topology
from dataorder.llm.blend_order import BlendOrder
from dataorder.llm.mixlog import LogMixture
from dataorder.llm.mixture import MixtureSchedule
from dataorder.llm.packing.fit import LongDocuments, Split
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.plan import DEFAULT_CHUNK, PackingPlan, Row
from dataorder.llm.packing.rule import PackedRows
from dataorder.llm.packing.sources import MIXTURE_PREFIX, Packed, packed_source
from dataorder.llm.sampler import (
    BATCH_SIZE_SCHEDULE,
    MIXTURE_STATE,
    PLACEMENT,
    MicroBatchSampler,
    global_batch_field,
)
from dataorder.llm.schedule import BatchSizeSchedule

__all__ = ["MAX_BLOCK_ROWS", "DealtBlocks", "PackedSampler"]

IntArray = npt.NDArray[np.int64]

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
_PACKING = r"([0-9]+)/(overflow|never|never-drop)/([0-9]+)/([0-9]+)"
_PACKING_LABEL = "packing (seq_len/split/window/chunk; split 'never-drop' is long_documents='drop')"


def _lengths_field() -> Field:
    """``config.lengths``: the lengths' fingerprint, or with a mixture ``"sources:"`` and the
    digest of every source's (a state from other lengths is refused, named). A mixture's state
    rebuilds with ``lengths=None`` (its sources are given in ``mixture=``)."""

    def args(value: Scalar) -> Mapping[str, Any]:
        return {"lengths": None} if _is_mixture_print(value) else {}

    return Field("lengths", lambda s: s._packed.recorded["lengths"], args)


def _is_mixture_print(value: object) -> bool:
    return isinstance(value, str) and value.startswith(MIXTURE_PREFIX)


_GLOBAL_BATCH = global_batch_field(lambda s: s._packed.recorded["global_batch_size"])


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
        lambda s: field.read(s) if field.name in s._packed.recorded else None,
        field.args,
        label,
        optional=True,
    )


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
            Field("versions", lambda s: s._packed.recorded["versions"]),
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
        extras=(MIXTURE_STATE,),
        details=(
            Detail("consumed_samples", lambda s: f"{s.consumed_samples} rows (run-wide)"),
            Detail("per source", lambda s: s._packed.rows.describe(s.consumed_samples)),
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
        # the one choice of source, by the arguments' form (NOTE [ A sampler is a source times a
        # batching ]): a mixture of packed corpora is the blend over packed corpora
        self._packed: Packed = packed_source(
            lengths,
            mixture,
            plan,
            self._seed,
            (self._mbs, self._dp),
            (self._drop_last, self._pad, global_batch_size),
            total_rows,
        )
        self._compose(self._packed.rows, _DEALT, self._packed.end)
        self._start(consumed_samples)

    plans = ReadOnly[list[PackingPlan]]("_packed.plans", "The packing plan of each source.")
    mixture = ReadOnly[MixtureSchedule | LogMixture | None](
        "_packed.schedule", "A mixture's schedule (a log's compiled form), or None."
    )
    order = ReadOnly[BlendOrder | None](
        "_packed.order", "A mixture's order (run positions to rows of sources), or None."
    )
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
        "_packed.total_rows",
        "Rows per epoch before the end is dropped or padded (a mixture: nominal).",
    )
    global_batch_size_field = ReadOnly[Scalar | None](
        _GLOBAL_BATCH.read, "``config.global_batch_size``: 0 for none, an int, or a digest."
    )
    versions = ReadOnly[str](
        lambda s: str(s._packed.recorded["versions"]),
        "The versions of the constructions the rows use.",
    )

    def consumed_per_source(self, rows: int | None = None) -> IntArray:
        """With a mixture, the rows each source has given after ``rows`` run-wide rows."""
        t = self.consumed_samples if rows is None else check_int("rows", rows, min_value=0)
        return self._packed.rows.counts(t)  # one corpus: refused, naming mixture=

    def retired_unread(self, rows: int | None = None) -> dict[int, int]:
        """Per source retired by the mixture's log (an entry that starts at or before ``rows``
        run-wide rows; default: :attr:`consumed_samples`), the tokens of its last pass it has
        not read (NOTE [ Packed corpus changes ] in :mod:`dataorder.llm.packing.growth`).
        Empty without a log of corpus changes."""
        t = self.consumed_samples if rows is None else check_int("rows", rows, min_value=0)
        return self._packed.rows.retired_unread(t)

    schedule = ReadOnly[MixtureSchedule | LogMixture | None](
        "_packed.schedule", "The mixture's schedule (what its state digests), or None."
    )

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
        return self._repr(f"{self._packed.what}, seq_len={self.seq_len}, split={self.split!r}, ")

    def dealt_blocks(self, epoch: int | None = None) -> DealtBlocks[Row]:
        """The :class:`~dataorder.core.dealing.DealtBlocks` of ``epoch`` (default: the cursor's)
        on this layout."""
        plan = self.epoch_plan(epoch)
        if not isinstance(plan, DealtBlocks):  # pragma: no cover - what _make_plan builds
            raise TypeError(f"unexpected epoch plan {plan!r}")
        return plan
