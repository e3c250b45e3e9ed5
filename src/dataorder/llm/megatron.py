"""Megatron-style micro-batch samplers: each item is one data-parallel rank's micro-batch.

Drop-in replacements for the samplers of Megatron-LM and NeMo Automodel
(``MegatronPretrainingSampler`` "single", ``MegatronPretrainingRandomSampler`` "cyclic"), used as
``DataLoader(dataset, batch_sampler=sampler)``, that resume exactly in O(1), survive a change of
the number of GPUs, and never hand out an empty batch or a negative index. The layout of an
epoch is :mod:`dataorder.llm.orders`'s; worked examples, the checkpoint schemas and how a state
resumes on another layout: docs/llm_samplers.md.

NOTE [ consumed_samples ]
    ``consumed_samples=`` is Megatron's run-wide count, ``epoch x P + consumed`` (``P``
    positions per epoch), read as every sampler reads one (NOTE [ The run-wide count ] in
    :mod:`dataorder.core.runcount`): exact on any layout when an epoch ends on whole global
    batches (a ``global_batch_size`` with ``drop_last=True``, or padded to, or dividing
    ``total_samples``) or the order pins the layout (``compat=``); otherwise exact inside the
    first epoch and refused past it. A ``state_dict()`` has none of these limits.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from dataorder._validate import check_bool, check_int, fail
from dataorder.core.assembly import Mode, Modes, Schema, flag, recorded
from dataorder.core.blockplan import FixedBlocks
from dataorder.core.keys import MAX_SEED
from dataorder.core.partition import EpochBlocks
from dataorder.core.permutation import MAX_DOMAIN
from dataorder.core.readonly import ReadOnly
from dataorder.core.topology import Topology
from dataorder.llm.compat_megatron import MegatronLMOrder
from dataorder.llm.compat_nemo import NemoOrder
from dataorder.llm.orders import EpochSpec, IdentityOrder, MegatronOrder, MicroBatch, default_order
from dataorder.llm.sampler import PLACEMENT, RUN_COUNT, MicroBatchSampler
from dataorder.llm.sources import EpochEnd, SampleOrder

__all__ = [
    "MEGATRON_MODES",
    "BaseMegatronSampler",
    "MegatronPretrainingRandomSampler",
    "MegatronPretrainingSampler",
]

#: The orders of the cyclic sampler, by ``compat=`` (NOTE [ Adding a sampler or a compat mode ]
#: in :mod:`dataorder.core.assembly`).
MEGATRON_MODES = Modes(
    family="MegatronPretrainingRandomSampler",
    field="order",
    none=True,
    modes=(
        Mode(
            "default",
            build=default_order,
            records={
                "global": {"compat": None, "data_sharding": False},
                "sharded": {"compat": None, "data_sharding": True},
            },
            summary="dataorder's keyed order (a global shuffle, or per-rank shards)",
        ),
        Mode(
            "nemo",
            build=NemoOrder,
            records={"nemo": {"compat": "nemo", "data_sharding": False}},
            summary="NeMo Automodel's order",
        ),
        Mode(
            "megatron",
            build=MegatronLMOrder,
            records={
                "megatron-sharded": {"compat": "megatron", "data_sharding": True},
                "megatron-strided": {"compat": "megatron", "data_sharding": False},
            },
            summary="Megatron-LM's order",
        ),
    ),
)

_FIELDS = (
    recorded("total_samples"),
    flag("drop_last"),
    recorded("global_batch_size", none_as=0),
    flag("pad_samples_to_global_batch_size", name="pad"),
)


class BaseMegatronSampler(MicroBatchSampler[MicroBatch]):
    """A pass over the samples in a Megatron order, in fixed global blocks: the
    :class:`~dataorder.llm.sources.SampleOrder` source times the
    :class:`~dataorder.core.blockplan.FixedBlocks` batching. Subclasses choose the order
    (:mod:`dataorder.llm.orders`). Not instantiated directly.

    Args:
        total_samples: Samples in the dataset, ``>= 1``.
        micro_batch_size: Samples per micro-batch on each rank, ``>= 1``.
        data_parallel_rank, data_parallel_size, mesh, dp_dims, topology: The data-parallel
            place (:class:`~dataorder.llm.sampler.MicroBatchSampler`).
        drop_last: Drop the tail that does not fill a whole block (or global batch, if
            ``global_batch_size`` is set); if False, pad it with ``None``.
        global_batch_size: ``G``, a multiple of ``micro_batch_size x data_parallel_size``, or
            None. It only decides the end of the epoch; the samplers stay micro-batch granular.
        pad_samples_to_global_batch_size: With ``drop_last=False``, pad the last global batch to
            ``G`` slots (needs ``global_batch_size``); ``None`` means False, as in NeMo.
        consumed_samples: Megatron's run-wide count of consumed positions (padding included):
            the sampler starts there, on a step of this layout (NOTE [ consumed_samples ]).

    Raises:
        TypeError: If an argument has the wrong type (a bool where an int is meant, too).
        ValueError: If an argument is out of range; the message names it and its value.
    """

    def __init__(
        self,
        total_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int | None = None,
        data_parallel_size: int | None = None,
        drop_last: bool = True,
        global_batch_size: int | None = None,
        pad_samples_to_global_batch_size: bool | None = False,
        *,
        consumed_samples: int = 0,
        mesh: Any = None,
        dp_dims: Sequence[str] | None = None,
        topology: Topology | None = None,
    ) -> None:
        # positions are int64 and permutations work on 63-bit words: 2**62 keeps both exact
        self._n = check_int("total_samples", total_samples, min_value=1, max_value=MAX_DOMAIN)
        super().__init__(
            micro_batch_size, data_parallel_rank, data_parallel_size, mesh, dp_dims, topology
        )
        mbs, dp = self._mbs, self._dp
        end = EpochEnd.of_passes(
            drop_last, global_batch_size, pad_samples_to_global_batch_size, mbs, dp
        )
        source = SampleOrder(self._n, mbs, dp, end, self._build_order)
        self._strategy: MegatronOrder = source.strategy
        self._compose(source, FixedBlocks(), end)
        self._blocks = source.epochs.blocks(0, mbs, dp, end)
        if self._blocks.num_batches == 0:
            gbs = end.global_batch_size
            what = (
                f"at least one global batch (global_batch_size={gbs})"
                if gbs is not None
                else "at least one micro-batch per rank "
                f"(micro_batch_size x data_parallel_size = {mbs} x {dp} = {mbs * dp})"
            )
            fail(
                "total_samples",
                f"{what} when drop_last=True, or there is nothing to train",
                total_samples,
            )
        self._start(consumed_samples)

    def _build_order(self, spec: EpochSpec) -> MegatronOrder:
        """The order on the layout of ``spec`` (chosen once, and again for another layout)."""
        return IdentityOrder()

    total_samples = ReadOnly[int]("_n", "Samples in the dataset.")
    micro_batch_times_data_parallel_size = ReadOnly[int](
        lambda s: s._mbs * s._dp, "Positions in one global block."
    )
    drop_last = ReadOnly[bool]("_end.drop_last", "Whether the tail is dropped (else padded).")
    global_batch_size = ReadOnly[int | None](
        "_end.global_batch_size", "The global batch size that decides the epoch's end, or None."
    )
    pad_samples_to_global_batch_size = ReadOnly[bool](
        "_end.pad", "Whether the last global batch is padded to ``global_batch_size`` slots."
    )
    blocks = ReadOnly[EpochBlocks]("_blocks", "The epoch's global blocks (the same on every rank).")
    samples_dropped = ReadOnly[int](
        lambda s: s._epoch_coverage()[0], "Samples no rank reads in an epoch (summed over ranks)."
    )
    samples_padded = ReadOnly[int](
        lambda s: s._epoch_coverage()[1], "Padding slots (``None``) per epoch, summed over ranks."
    )

    @property
    def layout(self) -> EpochBlocks:
        """Deprecated 0.2 name of :attr:`blocks` ("layout" is the data-parallel layout)."""
        warnings.warn(
            f"{type(self).__name__}.layout is deprecated; use .blocks", DeprecationWarning, 2
        )
        return self.blocks

    def __repr__(self) -> str:
        return self._repr(
            f"total_samples={self._n}, ",
            f", drop_last={self.drop_last}, global_batch_size={self.global_batch_size}, "
            f"pad_samples_to_global_batch_size={self._end.pad}",
        )


class MegatronPretrainingSampler(BaseMegatronSampler):
    """Megatron's "single" sampler: the dataset in its own order, the same every epoch.

    Position ``p`` holds sample ``p`` (shuffling, if any, is the dataset's). Wherever NeMo
    Automodel's sampler of the same name yields well-formed micro-batches, this one yields the
    same lists; where NeMo yields a short or empty list or negative padding indices, this one
    yields full micro-batches with ``None`` in the padding slots, and ``len()`` always equals what
    is yielded. Arguments: :class:`BaseMegatronSampler`'s. Examples for each end of an epoch and
    the checkpoint schema: docs/llm_samplers.md.

    >>> s = MegatronPretrainingSampler(10, 2, data_parallel_rank=1, data_parallel_size=2,
    ...                                drop_last=False)
    >>> len(s), list(s), s.samples_padded
    (3, [[2, 3], [6, 7], [None, None]], 2)
    """

    schema = Schema(
        kind="megatron_single",
        fields=_FIELDS,
        layout=PLACEMENT,
        steps="micro-steps",
        details=(RUN_COUNT,),
    )

    def get_start_end_idx(self) -> tuple[int, int]:
        """``(start, end)`` of this rank's slice of each global block (NeMo's method)."""
        start = self._rank * self._mbs
        return start, start + self._mbs


class MegatronPretrainingRandomSampler(BaseMegatronSampler):
    """Megatron's "cyclic" sampler: a new order every epoch, keyed by ``(seed, epoch)``.

    Four orders (each one's sequences, rules and checkpoint schema: docs/llm_samplers.md): the
    default, a global shuffle by a :class:`~dataorder.core.permutation.Permutation` keyed by
    ``(seed, epoch)`` (O(1) memory and time to any micro-batch, elastic); ``data_sharding=True``,
    each rank in its contiguous shard; ``compat="nemo"`` and ``compat="megatron"``, exactly NeMo
    Automodel's and Megatron-LM's sequences (:mod:`dataorder.llm.compat_megatron`). The last
    three record the layout they depend on, so a state from another layout is refused, named.

    Args:
        seed: Any int in ``[0, 2**63)``; every seed gives an unrelated order.
        data_sharding: Keep each rank inside its contiguous shard.
        compat: None, ``"nemo"`` (NeMo Automodel's exact sequences) or ``"megatron"``
            (Megatron-LM's).
        dataset: Optional; its ``set_epoch`` (Megatron-LM's ``RandomSeedDataset``), if any, is
            called with each pass's epoch before the pass's first micro-batch, as Megatron-LM does.
        *others: :class:`BaseMegatronSampler`'s, honoured as by
            :class:`MegatronPretrainingSampler`.

    >>> s = MegatronPretrainingRandomSampler(10, 2, data_parallel_rank=1, data_parallel_size=2)
    >>> list(s), list(s)  # epoch 0, then epoch 1 (the pass after one that ran out moves on)
    ([[6, 2], [5, 8]], [[5, 7], [9, 8]])
    """

    schema = Schema(
        kind="megatron_random",
        fields=(*_FIELDS, recorded("seed")),
        layout=PLACEMENT,
        modes=MEGATRON_MODES,
        steps="micro-steps",
        details=(RUN_COUNT,),
    )

    def __init__(
        self,
        total_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int | None = None,
        data_parallel_size: int | None = None,
        drop_last: bool = True,
        global_batch_size: int | None = None,
        pad_samples_to_global_batch_size: bool | None = False,
        seed: int = 0,
        *,
        data_sharding: bool = False,
        compat: Literal["default", "nemo", "megatron"] | None = None,
        consumed_samples: int = 0,
        dataset: Any = None,
        mesh: Any = None,
        dp_dims: Sequence[str] | None = None,
        topology: Topology | None = None,
    ) -> None:
        self._seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
        self._data_sharding = check_bool("data_sharding", data_sharding)
        self._mode = MEGATRON_MODES.choose(compat)
        self._dataset = dataset
        super().__init__(
            total_samples,
            micro_batch_size,
            data_parallel_rank,
            data_parallel_size,
            drop_last,
            global_batch_size,
            pad_samples_to_global_batch_size,
            consumed_samples=consumed_samples,
            mesh=mesh,
            dp_dims=dp_dims,
            topology=topology,
        )

    def _build_order(self, spec: EpochSpec) -> MegatronOrder:
        # chosen once per layout: the samplers never branch on the mode again
        order: MegatronOrder = self._mode.build(self._seed, spec, data_sharding=self._data_sharding)
        return order

    seed = ReadOnly[int]("_seed", "The user's seed.")
    data_sharding = ReadOnly[bool]("_data_sharding", "Whether each rank stays in its shard.")
    compat = ReadOnly[str | None](
        lambda s: None if s._mode.name == "default" else s._mode.name,
        '``"nemo"`` or ``"megatron"`` in a compatibility mode, else None.',
    )

    def _pass(self) -> Iterator[MicroBatch]:
        # Megatron-LM's epoch hook: its RandomSeedDataset reseeds augmentation per epoch
        hook = getattr(self._dataset, "set_epoch", None)
        if not callable(hook):
            yield from super()._pass()
            return
        first = True
        for batch in super()._pass():
            if first:
                hook(self._epoch)
                first = False
            yield batch
