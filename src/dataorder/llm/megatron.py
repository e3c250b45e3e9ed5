"""Megatron-style micro-batch samplers: each item is one data-parallel rank's micro-batch.

Drop-in replacements for the samplers of Megatron-LM and NeMo Automodel
(``MegatronPretrainingSampler`` "single", ``MegatronPretrainingRandomSampler`` "cyclic",
``create_megatron_sampler``), used as ``DataLoader(dataset, batch_sampler=sampler)``, that resume
exactly in O(1), survive a change of the number of GPUs, and never hand out an empty batch or a
negative index.

The layout of an epoch (global blocks of ``micro_batch_size x data_parallel_size``, how its end
is dropped or padded, and what a padding slot is) is :mod:`dataorder.llm.orders`'s.

Resume. A sampler is configuration plus a cursor ``(epoch, consumed)``, where ``consumed`` counts
the global positions (padding included) that all ranks together have taken in the epoch. The
state is a few hundred bytes of JSON whatever the dataset size, identical on every rank, and
loading it sets where the next ``iter()`` starts: nothing is replayed. Because the global stream
does not depend on the number of ranks, a state saved with one ``micro_batch_size x
data_parallel_size`` loads into another one whose block divides the consumed count (elastic
resume), except in the modes whose order depends on the layout (``data_sharding``,
``compat="nemo"``), which refuse it. The epoch and iteration rules (``len()``, ``set_epoch``, a
peek, the end of an epoch) are :mod:`dataorder.core.cursor`'s NOTE [ The loop contract ].

NOTE [ consumed_samples ]
    ``consumed_samples=`` in the constructor is Megatron's run-wide count, ``epoch x P +
    consumed``, where ``P`` is the number of positions in an epoch, read as every sampler reads
    one (NOTE [ The run-wide count ] in :mod:`dataorder.core.cursor`):

    * if the epoch ends on whole global batches (a ``global_batch_size`` with
      ``drop_last=True``, or ``pad_samples_to_global_batch_size=True``, or one that divides
      ``total_samples``), ``P`` is the same on every layout a run may move to, and the count
      means the same position on any ``micro_batch_size x data_parallel_size``: a restart is
      exact on any layout;
    * so it is in an order whose configuration pins the layout (``compat="nemo"``,
      ``compat="megatron"``: another layout is another order), read as Megatron reads it;
    * otherwise ``P`` depends on the layout that counted, which a bare count does not say: a
      count past the first epoch is refused, and inside it (where every layout agrees on what
      was trained) it is exact.

    In every case a ``state_dict()`` has none of these limits: it records the epoch and resumes
    exactly on any layout that can continue it.

The samplers are micro-batch granular and know nothing of gradient accumulation: a global batch
of ``G`` is ``G / M`` consecutive micro-batches on every rank, so a global batch size that changes
during training (:mod:`dataorder.llm.schedule`) needs no change here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from dataorder._validate import check_bool, check_int, fail
from dataorder.core.assembly import Detail, Layout, Mode, Modes, Schema, flag, recorded
from dataorder.core.blockplan import FixedBlocks
from dataorder.core.keys import MAX_SEED
from dataorder.core.partition import EpochBlocks
from dataorder.core.permutation import MAX_DOMAIN
from dataorder.core.topology import Topology
from dataorder.llm.compat_megatron import MegatronLMOrder
from dataorder.llm.compat_nemo import NemoOrder
from dataorder.llm.orders import EpochSpec, IdentityOrder, MegatronOrder, MicroBatch, default_order
from dataorder.llm.sampler import EpochEnd, MicroBatchSampler
from dataorder.llm.sources import SampleOrder

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
_LAYOUT = Layout(rank="data_parallel_rank", size="data_parallel_size", others=("micro_batch_size",))
_DETAILS = (
    Detail("consumed_samples", lambda s: f"{s.consumed_samples} (Megatron's run-wide count)"),
)


class BaseMegatronSampler(MicroBatchSampler[MicroBatch]):
    """A pass over the samples in a Megatron order, in fixed global blocks: the
    :class:`~dataorder.llm.sources.SampleOrder` source times the
    :class:`~dataorder.core.blockplan.FixedBlocks` batching.

    Subclasses choose the order (:mod:`dataorder.llm.orders`): which sample each global position
    holds. Not instantiated directly.

    Args:
        total_samples: Samples in the dataset, ``>= 1``.
        micro_batch_size: Samples per micro-batch on each rank, ``>= 1``.
        data_parallel_rank: This rank, in ``[0, data_parallel_size)``. None: from ``topology``,
            ``mesh``, the process group or the environment
            (:func:`~dataorder.core.topology.resolve_topology`).
        data_parallel_size: Number of data-parallel ranks, ``>= 1``. None: as the rank.
        drop_last: Drop the tail that does not fill a whole block (or global batch, if
            ``global_batch_size`` is set); if False, pad it with ``None``.
        global_batch_size: The global batch size ``G``, a multiple of
            ``micro_batch_size x data_parallel_size``, or None. It only decides the end of the
            epoch (drop or pad to whole global batches); the samplers stay micro-batch granular.
        pad_samples_to_global_batch_size: With ``drop_last=False``, pad the last global batch to
            ``G`` slots (needs ``global_batch_size``); otherwise only the last block is padded.
            ``None`` means False, as in NeMo's signature.
        consumed_samples: Megatron's run-wide count of consumed positions (padding included):
            the sampler starts at epoch ``consumed_samples // P`` and position
            ``consumed_samples % P``, where ``P`` is the number of positions per epoch. The
            position must be a multiple of ``micro_batch_size x data_parallel_size``. Which
            layouts it is exact on is NOTE [ consumed_samples ] in the module docstring.
        mesh: A ``DeviceMesh``: rank and size are its data-parallel coordinates.
        dp_dims: The mesh's data-parallel dims (default: the dims named ``dp``...).
        topology: A :class:`~dataorder.core.topology.Topology` value instead of the rank and size.

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
        super().__init__()
        # positions are int64 and permutations work on 63-bit words: 2**62 keeps both exact
        self._n = check_int("total_samples", total_samples, min_value=1, max_value=MAX_DOMAIN)
        self._set_placement(
            micro_batch_size,
            data_parallel_rank,
            data_parallel_size,
            mesh=mesh,
            dp_dims=dp_dims,
            topology=topology,
        )
        end = EpochEnd.of_passes(
            drop_last,
            global_batch_size,
            pad_samples_to_global_batch_size,
            micro_batch_size=self._mbs,
            data_parallel_size=self._dp,
        )
        spec = EpochSpec(
            self._n, self._mbs, self._dp, end.drop_last, end.global_batch_size, end.pad
        )
        source = SampleOrder(spec, self._build_order)
        self._strategy: MegatronOrder = source.strategy
        self._compose(source, FixedBlocks(), end)
        self._blocks = source.epochs.blocks(0, self._mbs, self._dp, end)
        if self._blocks.num_batches == 0:
            gbs, block = end.global_batch_size, self._mbs * self._dp
            what = (
                f"at least one global batch (global_batch_size={gbs})"
                if gbs is not None
                else "at least one micro-batch per rank "
                f"(micro_batch_size x data_parallel_size = {self._mbs} x {self._dp} = {block})"
            )
            fail(
                "total_samples",
                f"{what} when drop_last=True, or there is nothing to train",
                total_samples,
            )
        self._start(consumed_samples)

    def _build_order(self, spec: EpochSpec) -> MegatronOrder:
        """The order of this sampler on the layout of ``spec`` (chosen once, at construction,
        and again for a plan of another layout)."""
        return IdentityOrder()

    # -- configuration, read-only ---------------------------------------------------------------
    @property
    def total_samples(self) -> int:
        """Samples in the dataset."""
        return self._n

    @property
    def micro_batch_times_data_parallel_size(self) -> int:
        """Positions in one global block: ``micro_batch_size x data_parallel_size``."""
        return self._mbs * self._dp

    @property
    def drop_last(self) -> bool:
        """Whether the tail is dropped (else padded)."""
        return self._end.drop_last

    @property
    def global_batch_size(self) -> int | None:
        """The global batch size that decides the end of the epoch, or None."""
        return self._end.global_batch_size

    @property
    def pad_samples_to_global_batch_size(self) -> bool:
        """Whether the last global batch is padded to ``global_batch_size`` slots."""
        return self._end.pad

    @property
    def blocks(self) -> EpochBlocks:
        """The epoch's global blocks (the same on every rank)."""
        return self._blocks

    @property
    def layout(self) -> EpochBlocks:
        """Deprecated 0.2 name of :attr:`blocks` ("layout" is the data-parallel layout)."""
        warnings.warn(
            f"{type(self).__name__}.layout is deprecated; use .blocks", DeprecationWarning, 2
        )
        return self.blocks

    @property
    def samples_dropped(self) -> int:
        """Samples no rank reads in an epoch (summed over ranks)."""
        return self._epoch_coverage()[0]

    @property
    def samples_padded(self) -> int:
        """Padding slots (``None``) per epoch, summed over ranks."""
        return self._epoch_coverage()[1]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(total_samples={self._n}, micro_batch_size={self._mbs}, "
            f"data_parallel_rank={self._rank}, data_parallel_size={self._dp}, "
            f"drop_last={self.drop_last}, global_batch_size={self.global_batch_size}, "
            f"pad_samples_to_global_batch_size={self._end.pad}; epoch={self._epoch}, "
            f"consumed={self._position['consumed']})"
        )


class MegatronPretrainingSampler(BaseMegatronSampler):
    """Megatron's "single" sampler: the dataset in its own order, the same every epoch.

    Position ``p`` holds sample ``p``. Shuffling, if any, is the dataset's business (Megatron's
    GPTDataset shuffles through its own index). Wherever NeMo Automodel's sampler of the same
    name yields well-formed micro-batches, this one yields the same lists; where NeMo yields a
    short or empty list, or negative padding indices, this one yields full micro-batches with
    ``None`` in the padding slots, and ``len()`` always equals what is yielded.

    Args:
        See :class:`BaseMegatronSampler`.

    Example: ``total_samples=10, micro_batch_size=2, data_parallel_size=2``::

        drop_last=True:  rank 0: [0, 1], [4, 5]          rank 1: [2, 3], [6, 7]   (8, 9 dropped)
        drop_last=False: rank 0: [0, 1], [4, 5], [8, 9]  rank 1: [2, 3], [6, 7], [None, None]
        global_batch_size=8, drop_last=True: rank 0: [0, 1], [4, 5]  rank 1: [2, 3], [6, 7]
        global_batch_size=8, drop_last=False, pad_samples_to_global_batch_size=True:
            rank 0: [0, 1], [4, 5], [8, 9], [None, None]
            rank 1: [2, 3], [6, 7], [None, None], [None, None]

    >>> s = MegatronPretrainingSampler(10, 2, data_parallel_rank=1, data_parallel_size=2,
    ...                                drop_last=False)
    >>> len(s), list(s), s.samples_padded
    (3, [[2, 3], [6, 7], [None, None]], 2)

    Checkpoint schema (after the first micro-batch of epoch 0; ``global_batch_size`` 0 means
    None, bools are 0/1; ``layout.*`` is informational, the state loads on any layout whose
    block divides ``consumed``):

    >>> s = MegatronPretrainingSampler(10, 2, data_parallel_rank=0, data_parallel_size=2)
    >>> _ = next(iter(s))
    >>> s.state_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'format': 'dataorder.state', 'version': 1, 'kind': 'megatron_single',
     'fingerprint': '391a873df2108758', 'epoch': 0, 'consumed': 4,
     'config.total_samples': 10, 'config.drop_last': 1, 'config.global_batch_size': 0,
     'config.pad': 0, 'layout.micro_batch_size': 2, 'layout.data_parallel_size': 2}
    """

    schema = Schema(
        kind="megatron_single",
        fields=_FIELDS,
        layout=_LAYOUT,
        steps="micro-steps",
        details=_DETAILS,
    )

    def get_start_end_idx(self) -> tuple[int, int]:
        """``(start, end)`` of this rank's slice of each global block (NeMo's method)."""
        start = self._rank * self._mbs
        return start, start + self._mbs


class MegatronPretrainingRandomSampler(BaseMegatronSampler):
    """Megatron's "cyclic" sampler: a new order every epoch, keyed by ``(seed, epoch)``.

    Three orders:

    * default: a global shuffle. Position ``p`` of epoch ``e`` holds ``pi_e(p)``, where ``pi_e``
      is a :class:`~dataorder.core.permutation.Permutation` of the whole dataset keyed by
      ``derive_key(seed, epoch=e, stream="megatron", purpose="sample-order")``. Any sample can go
      to any rank, the dropped tail is a different set of samples each epoch, memory is O(1)
      and the first micro-batch of an epoch (or of a resume) costs microseconds at any size.
      Elastic: a state loads on another ``micro_batch_size x data_parallel_size`` whose block
      divides the consumed count.
    * ``data_sharding=True``: each rank reads only its contiguous shard of the dataset
      (:func:`shard_bounds`, sizes differ by at most one) for I/O locality, shuffled every epoch
      by a permutation keyed by ``(seed, epoch, data_parallel_size, rank)``. Still O(1), but
      shards depend on the number of ranks, so ``data_parallel_size`` is part of the order and a
      state from another DP size is refused (a different ``micro_batch_size`` is fine).
    * ``compat="nemo"``: exactly NeMo Automodel's sequences, so a run can move over
      mid-training: static per-rank shards of ``(total_samples // M) x micro_batch_size``
      samples, the same ``torch.randperm(shard, generator=manual_seed(seed + epoch))`` on every
      rank, and the last ``total_samples mod M`` samples never used. NeMo's restrictions apply
      (no padding; ``drop_last=False`` only when ``M == 1``; additionally a
      ``global_batch_size`` must divide NeMo's epoch, because NeMo does not drop whole global
      batches). It costs O(shard) time and memory per epoch, depends on torch's ``randperm``
      (pin the torch version of the NeMo run), and is not elastic.
    * ``compat="megatron"``: exactly NVIDIA Megatron-LM's sequences (its ``cyclic`` sampler), in
      both of its modes: ``data_sharding=True`` (Megatron's default: NeMo's shards with the
      epoch as the only seed) and ``data_sharding=False`` (one ``torch.randperm`` of the
      dataset per epoch, read with a rank stride). ``seed`` must be 0, the tail is dropped,
      and the layouts where Megatron-LM gives ranks unequal micro-batch counts are refused
      (:mod:`dataorder.llm.compat_megatron`). Resume a Megatron-LM run with
      ``consumed_samples=`` its ``consumed_train_samples``. Not elastic.

    The class attribute ``elastic`` is True because the default order is elastic; the two
    other orders put ``data_parallel_size`` (and, for ``compat="nemo"``, ``micro_batch_size``)
    into their order configuration, so the configuration check refuses a state from another
    layout and names the field.

    Args:
        seed: Any int in ``[0, 2**63)``; every seed gives an unrelated order.
        data_sharding: Keep each rank inside its contiguous shard (see above).
        compat: None, ``"nemo"`` for NeMo Automodel's exact sequences, or ``"megatron"`` for
            Megatron-LM's.
        dataset: Optional; if it has ``set_epoch`` (Megatron-LM's ``RandomSeedDataset``), it is
            called with the epoch of each pass before the pass's first micro-batch is handed
            out, as Megatron-LM's sampler does.
        *others: See :class:`BaseMegatronSampler`; ``global_batch_size`` and padding are honoured
            exactly as by :class:`MegatronPretrainingSampler`.

    Example: ``total_samples=10, micro_batch_size=2, data_parallel_size=2, seed=0``::

        default, epoch 0:       rank 0: [7, 9], [4, 1]   rank 1: [6, 2], [5, 8]   (3, 0 dropped)
        default, epoch 1:       rank 0: [6, 1], [4, 2]   rank 1: [5, 7], [9, 8]   (0, 3 dropped)
        compat="nemo", epoch 0: rank 0: [0, 1], [3, 2]   rank 1: [4, 5], [7, 6]   (8, 9 never used)
        compat="nemo", epoch 1: rank 0: [1, 3], [2, 0]   rank 1: [5, 7], [6, 4]

    >>> s = MegatronPretrainingRandomSampler(10, 2, data_parallel_rank=1, data_parallel_size=2)
    >>> list(s), list(s)  # epoch 0, then epoch 1 (the pass after one that ran out moves on)
    ([[6, 2], [5, 8]], [[5, 7], [9, 8]])

    Checkpoint schema (after the first micro-batch of epoch 0; ``config.data_parallel_size``
    and ``config.micro_batch_size`` are 0 unless the order depends on them, as with
    ``data_sharding`` and the compatibility modes, whose states carry no construction versions:
    their orders come from torch):

    >>> s = MegatronPretrainingRandomSampler(10, 2, data_parallel_rank=0, data_parallel_size=2)
    >>> _ = next(iter(s))
    >>> s.state_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'format': 'dataorder.state', 'version': 1, 'kind': 'megatron_random',
     'fingerprint': '9f129ad7ed7ccb85', 'epoch': 0, 'consumed': 4,
     'config.order': 'global', 'config.total_samples': 10, 'config.drop_last': 1,
     'config.global_batch_size': 0, 'config.pad': 0, 'config.seed': 0,
     'config.data_parallel_size': 0, 'config.micro_batch_size': 0,
     'config.permutation_version': 1, 'config.key_version': 1,
     'layout.micro_batch_size': 2, 'layout.data_parallel_size': 2}
    """

    schema = Schema(
        kind="megatron_random",
        fields=(*_FIELDS, recorded("seed")),
        layout=_LAYOUT,
        modes=MEGATRON_MODES,
        steps="micro-steps",
        details=_DETAILS,
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

    @property
    def seed(self) -> int:
        """The user's seed."""
        return self._seed

    @property
    def data_sharding(self) -> bool:
        """Whether each rank stays inside its contiguous shard."""
        return self._data_sharding

    @property
    def compat(self) -> str | None:
        """``"nemo"`` or ``"megatron"`` in a compatibility mode, else None."""
        return None if self._mode.name == "default" else self._mode.name

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
