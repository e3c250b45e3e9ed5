"""The orders of the Megatron samplers: which sample each global position of an epoch holds.

An epoch of a Megatron sampler is one segment of global blocks of ``micro_batch_size x
data_parallel_size`` positions (:func:`plan_megatron_epoch`); an *order* maps each rank's
positions to samples. The orders are strategies chosen once when a sampler is built:

* :class:`IdentityOrder`: position ``p`` holds sample ``p`` ("single");
* :class:`GlobalOrder`: a keyed global shuffle, a new one every epoch (the default of "cyclic");
* :class:`ShardedOrder`: each rank shuffles inside its own contiguous shard (``data_sharding``);
* NeMo Automodel's order (``compat="nemo"``) in :mod:`dataorder.llm.compat_nemo`.

An order says which configuration fields it depends on (recorded in every state), checks the
options it cannot honour, and maps positions; the samplers never branch on it. Padding is the
sentinel ``-1`` inside arrays and ``None`` in the micro-batches a sampler yields.

How an epoch is laid out. The epoch is a *global stream* of positions ``0, 1, 2, ...``; position
``p`` holds the sample ``order(p)`` for ``p < total_samples`` and padding beyond. The stream is cut
into global blocks of ``M = micro_batch_size x data_parallel_size`` positions; block ``k`` is
micro-step ``k`` on every rank, and rank ``r`` reads the contiguous slice
``[r * micro_batch_size, (r + 1) * micro_batch_size)`` of it (Megatron's placement). The end of the
epoch is decided for the whole job, never per rank (:func:`plan_megatron_epoch`):

=========  =================  =======  ===========================================================
drop_last  global_batch_size  pad      the epoch covers
=========  =================  =======  ===========================================================
True       None               --       whole blocks of ``M``; the last ``total_samples mod M``
                                       positions are dropped
True       ``G``              --       whole global batches of ``G``; ``total_samples mod G``
                                       positions are dropped
False      None or ``G``      False    every sample; the last block is padded to ``M`` slots
False      ``G``              True     every sample; padded to a whole global batch of ``G``
=========  =================  =======  ===========================================================

Padding slots hold ``None``. A padded slot is never a negative or repeated index (NeMo's ``-1``,
``-2``, ... pads index real samples from the end of a shuffled dataset and train on them with full
loss). Megatron-LM's ``GPTDataset.__getitem__`` already returns a padding sample with a zero loss
mask for ``idx is None``; any other dataset should do the same::

    def __getitem__(self, idx):
        if idx is None:  # a padding slot from the sampler: keep the shapes, mask the loss
            return {"tokens": torch.zeros(seq_len, dtype=torch.long),
                    "loss_mask": torch.zeros(seq_len)}
        ...

and the loss must be averaged over ``loss_mask`` (not over the micro-batch size), so padding adds
nothing. ``samples_padded`` and ``samples_dropped`` say how many slots an epoch pads and how many
samples it leaves out, summed over ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_int, fail
from dataorder.core.keys import KEY_DERIVATION_VERSION, derive_key
from dataorder.core.partition import MAX_POSITIONS, EpochBlocks, plan_epoch
from dataorder.core.permutation import PERMUTATION_VERSION, Permutation
from dataorder.core.state import Scalar

__all__ = [
    "PAD",
    "EpochSpec",
    "GlobalOrder",
    "IdentityOrder",
    "MegatronOrder",
    "MicroBatch",
    "SampleMap",
    "ShardedOrder",
    "check_epoch_end",
    "default_order",
    "micro_batches",
    "plan_megatron_epoch",
    "rank_sequence_offsets",
    "shard_bounds",
    "torch_randperm",
]

#: One rank's micro-batch: dataset indices, ``None`` in a padding slot.
MicroBatch = list[int | None]

#: Padding inside numpy arrays; it never leaves the samplers (it becomes ``None``).
PAD = -1

_STREAM = "megatron"

#: Maps a rank's positions (any shape, int64) to samples, :data:`PAD` for padding.
SampleMap = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]


@dataclass(frozen=True)
class EpochSpec:
    """What a Megatron sampler's epoch is made of (validated by the sampler).

    Attributes:
        total_samples: Samples in the dataset.
        micro_batch_size: Samples per micro-batch on each rank.
        data_parallel_size: Data-parallel ranks.
        drop_last: Drop the tail (else pad it).
        global_batch_size: The global batch size that decides the end of the epoch, or None.
        pad: Pad the last global batch (``pad_samples_to_global_batch_size``).
    """

    total_samples: int
    micro_batch_size: int
    data_parallel_size: int
    drop_last: bool
    global_batch_size: int | None
    pad: bool

    @property
    def block(self) -> int:
        """Positions in one global block: ``micro_batch_size x data_parallel_size``."""
        return self.micro_batch_size * self.data_parallel_size


def plan_megatron_epoch(
    total_samples: int,
    micro_batch_size: int,
    data_parallel_size: int,
    *,
    drop_last: bool,
    global_batch_size: int | None = None,
    pad_samples_to_global_batch_size: bool = False,
) -> EpochBlocks:
    """The global blocks of one epoch under Megatron's tail rules (see the module docstring).

    Arguments are not validated here; the samplers validate them first.

    Returns:
        The :class:`~dataorder.core.partition.EpochBlocks` with ``per_rank=micro_batch_size`` and
        ``dp_size=data_parallel_size``.
    """
    if drop_last:
        return plan_epoch(
            total_samples,
            per_rank=micro_batch_size,
            dp_size=data_parallel_size,
            tail="drop",
            unit=global_batch_size,
        )
    return plan_epoch(
        total_samples,
        per_rank=micro_batch_size,
        dp_size=data_parallel_size,
        tail="pad",
        unit=global_batch_size if pad_samples_to_global_batch_size else None,
    )


def check_epoch_end(
    drop_last: object,
    global_batch_size: object,
    pad_samples_to_global_batch_size: object,
    *,
    micro_batch_size: int,
    data_parallel_size: int,
) -> tuple[bool, int | None, bool]:
    """Validate how an epoch ends (the table in the module docstring): ``(drop_last,
    global_batch_size, pad)``, the global batch size a multiple of the block or None, and
    padding to it only with ``drop_last=False`` (``None`` for ``pad`` means False, as in NeMo's
    signature).

    Raises:
        TypeError, ValueError: Naming the argument, as the samplers' constructors do.
    """
    drop = check_bool("drop_last", drop_last)
    pad = (
        False
        if pad_samples_to_global_batch_size is None
        else check_bool("pad_samples_to_global_batch_size", pad_samples_to_global_batch_size)
    )
    block = micro_batch_size * data_parallel_size
    gbs: int | None = None
    if global_batch_size is not None:
        gbs = check_int(
            "global_batch_size", global_batch_size, min_value=1, max_value=MAX_POSITIONS
        )
        if gbs % block:
            fail(
                "global_batch_size",
                "a multiple of micro_batch_size x data_parallel_size = "
                f"{micro_batch_size} x {data_parallel_size} = {block}",
                gbs,
            )
    if pad and gbs is None:
        fail("global_batch_size", "an int when pad_samples_to_global_batch_size=True", None)
    if pad and drop:
        fail("drop_last", "False when pad_samples_to_global_batch_size=True", drop_last)
    return drop, gbs, pad


def shard_bounds(total_samples: int, data_parallel_size: int, rank: int) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s contiguous shard of the dataset (``data_sharding=True``).

    Shards are balanced: their sizes differ by at most one, so the smallest shard still holds
    every micro-batch its rank reads when the tail is dropped, and the largest fits in the slots
    its rank has when the tail is padded.
    """
    return rank * total_samples // data_parallel_size, (
        (rank + 1) * total_samples // data_parallel_size
    )


def rank_sequence_offsets(
    positions: npt.NDArray[np.int64], *, micro_batch_size: int, data_parallel_size: int, rank: int
) -> npt.NDArray[np.int64]:
    """Map ``rank``'s global positions to its own running index ``j = block * mbs + i``.

    Position ``p = k * M + rank * mbs + i`` (block ``k``, slot ``i``) is the ``j``-th sample the
    rank reads in the epoch. Sharded orders are defined per rank through ``j``.
    """
    block = micro_batch_size * data_parallel_size
    return (positions // block) * micro_batch_size + (positions % block - rank * micro_batch_size)


def _global_map(n: int, order: Permutation | None) -> SampleMap:
    """Position ``p`` holds ``order(p)`` (identity if ``order`` is None), padding if ``p >= n``."""

    def sample(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        if positions.size and int(positions.max()) < n:
            return positions if order is None else order(positions)
        out = np.full(positions.shape, PAD, dtype=np.int64)
        real = positions < n
        out[real] = positions[real] if order is None else order(positions[real])
        return out

    return sample


def _sharded_map(
    start: int, length: int, order: Permutation | None, mbs: int, dp: int, rank: int
) -> SampleMap:
    """The rank's ``j``-th read is ``start + order(j)`` inside its shard, padding once past it."""

    def sample(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        j = rank_sequence_offsets(positions, micro_batch_size=mbs, data_parallel_size=dp, rank=rank)
        out = np.full(positions.shape, PAD, dtype=np.int64)
        real = j < length
        if order is not None:
            out[real] = start + order(j[real])
        return out

    return sample


def torch_randperm(size: int, seed: int) -> npt.NDArray[np.int64]:
    """``torch.randperm(size)`` from a fresh CPU generator seeded with ``seed``, as numpy.

    The compatibility orders that reproduce torch-based samplers use it; torch is imported here
    only, so the default orders never need it. The result depends on torch's ``randperm``
    implementation: pin the torch version of the run being reproduced.
    """
    import torch

    generator = torch.Generator()
    generator.manual_seed(seed)
    return torch.randperm(size, generator=generator).numpy()


def micro_batches(samples: npt.NDArray[np.int64]) -> list[MicroBatch]:
    """Rows of ``samples`` as lists, with the padding sentinel replaced by ``None``."""
    rows = samples.tolist()
    if samples.size and int(samples.min()) < 0:
        # Padding sits at the end of an epoch, so this slower path is rare.
        return [row if min(row) >= 0 else [x if x >= 0 else None for x in row] for row in rows]
    return rows  # type: ignore[no-any-return]


class MegatronOrder(Protocol):
    """An order of the Megatron samplers (see the module docstring): an
    :class:`~dataorder.core.assembly.OrderStrategy` that maps each rank's positions to samples.

    Built once per sampler, with the seed and the sampler's :class:`EpochSpec` bound; an order
    that bakes the layout in (its :meth:`config` records it) is built again for another layout.
    """

    @property
    def name(self) -> str:
        """The value of ``config.order`` in a state."""
        ...

    @property
    def elastic(self) -> bool:
        """Whether the global order is the same on every layout."""
        ...

    def config(self) -> dict[str, Scalar]:
        """The fields the order depends on, recorded in the state's configuration."""
        ...

    def sample_map(self, spec: EpochSpec, epoch: int, rank: int) -> SampleMap:
        """The map of ``rank``'s positions in ``epoch`` on the layout of ``spec``."""
        ...


class IdentityOrder:
    """Position ``p`` holds sample ``p``, every epoch (Megatron's "single")."""

    name = "identity"
    elastic = True

    def config(self) -> dict[str, Scalar]:
        return {}

    def sample_map(self, spec: EpochSpec, epoch: int, rank: int) -> SampleMap:
        return _global_map(spec.total_samples, None)


class GlobalOrder:
    """Position ``p`` of epoch ``e`` holds ``pi_e(p)``, a :class:`~dataorder.core.permutation.
    Permutation` of the whole dataset keyed by ``derive_key(seed, epoch=e, stream="megatron",
    purpose="sample-order")``. Elastic: it does not depend on the layout."""

    name = "global"
    elastic = True

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def config(self) -> dict[str, Scalar]:
        return _keyed_config(data_parallel_size=0)

    def sample_map(self, spec: EpochSpec, epoch: int, rank: int) -> SampleMap:
        key = derive_key(self.seed, epoch=epoch, stream=_STREAM, purpose="sample-order")
        return _global_map(spec.total_samples, Permutation(spec.total_samples, key))


class ShardedOrder:
    """Each rank reads only its contiguous shard (:func:`shard_bounds`), shuffled every epoch by
    a permutation keyed by ``(seed, epoch, data_parallel_size, rank)``. The shards depend on the
    number of ranks, so ``data_parallel_size`` is part of the configuration."""

    name = "sharded"
    elastic = True  # another micro_batch_size is fine; the configuration pins the DP size

    def __init__(self, seed: int, spec: EpochSpec) -> None:
        self.seed = seed
        self.data_parallel_size = spec.data_parallel_size

    def config(self) -> dict[str, Scalar]:
        return _keyed_config(data_parallel_size=self.data_parallel_size)

    def sample_map(self, spec: EpochSpec, epoch: int, rank: int) -> SampleMap:
        dp, mbs = spec.data_parallel_size, spec.micro_batch_size
        start, stop = shard_bounds(spec.total_samples, dp, rank)
        order = None
        if stop > start:
            key = derive_key(
                self.seed, epoch=epoch, stream=_STREAM, purpose="shard-order", extra=(dp, rank)
            )
            order = Permutation(stop - start, key)
        return _sharded_map(start, stop - start, order, mbs, dp, rank)


def default_order(seed: int, spec: EpochSpec, *, data_sharding: bool) -> MegatronOrder:
    """dataorder's order of the cyclic sampler: global, or per-rank shards (``data_sharding``)."""
    return ShardedOrder(seed, spec) if data_sharding else GlobalOrder(seed)


def _keyed_config(*, data_parallel_size: int) -> dict[str, Scalar]:
    return {
        "data_parallel_size": data_parallel_size,
        "micro_batch_size": 0,
        "permutation_version": PERMUTATION_VERSION,
        "key_version": KEY_DERIVATION_VERSION,
    }
