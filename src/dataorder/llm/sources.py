"""The sources of the LLM samplers (:class:`~dataorder.llm.sampler.Source`): which item each
position of an epoch holds.

* :class:`SampleOrder`: a pass over ``total_samples`` samples in a Megatron order (every mode of
  :data:`~dataorder.llm.megatron.MEGATRON_MODES`), what the Megatron samplers read.
* :class:`Blend`: K sources apportioned by weight (:class:`~dataorder.llm.blend_order.
  BlendOrder`), each read through its :class:`Draws`: :class:`SampleDraws` (map-style datasets,
  :class:`~dataorder.llm.blend.BlendedSampler`) or packed rows
  (:class:`~dataorder.llm.packing.sources.RowDraws`).
* :class:`~dataorder.llm.packing.sources.PackedCorpus`: a pass over one corpus's packed rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from dataorder.core.partition import EpochBlocks
from dataorder.llm.blend_order import BlendOrder
from dataorder.llm.mixlog import LogMixture
from dataorder.llm.orders import EpochSpec, MegatronOrder, MicroBatch, micro_batches
from dataorder.llm.sampler import EpochEnd, Passes, Stretches, per_source_progress

__all__ = ["Blend", "Draws", "SampleDraws", "SampleOrder"]

T = TypeVar("T")
IntArray = npt.NDArray[np.int64]

# Positions mapped per vectorised chunk and rank: large enough that per-chunk overhead vanishes,
# small enough that the first micro-batch of an epoch (or after a resume) costs well under 1 ms.
_CHUNK_POSITIONS = 16384
# Most (window x source) counts a chunk of a blend holds at once: 2**20 int64 = 8 MB.
_CHUNK_CELLS = 2**20


def _megatron_why(end: EpochEnd) -> str:
    if end.drop_last:
        why = "drop_last=True without global_batch_size drops total_samples mod M"
    elif end.global_batch_size is None:
        why = "drop_last=False pads total_samples up to a multiple of M"
    else:
        gbs = end.global_batch_size
        why = f"drop_last=False pads only the last block, not to global_batch_size={gbs}"
    return f"{why}, M = micro_batch_size x data_parallel_size"


class SampleOrder:
    """A pass over ``n`` samples in a Megatron order, the same on every rank, on the layout
    ``mbs x dp`` with the epoch end ``end``; ``build(spec)`` builds the order on the layout of
    ``spec`` (again for another layout: an order may bake the layout in)."""

    def __init__(
        self, n: int, mbs: int, dp: int, end: EpochEnd, build: Callable[[EpochSpec], MegatronOrder]
    ) -> None:
        self.spec, self._build = _spec(n, mbs, dp, end), build
        self.strategy = build(self.spec)
        config = self.strategy.config()
        pinned = bool(config.get("data_parallel_size")) and bool(config.get("micro_batch_size"))
        self.epochs = Passes(n, pinned, _megatron_why)

    def fill(self, epoch: int, mbs: int, dp: int, end: EpochEnd) -> _OrderFill:
        if (mbs, dp) == (self.spec.micro_batch_size, self.spec.data_parallel_size):
            return _OrderFill(self.strategy, self.spec, epoch)
        spec = _spec(self.spec.total_samples, mbs, dp, end)
        return _OrderFill(self._build(spec), spec, epoch)

    def coverage(self, epoch: int, blocks: EpochBlocks) -> tuple[int, int]:
        return blocks.dropped, blocks.padded

    def chunk_steps(self, mbs: int, dp: int) -> int:
        return max(1, _CHUNK_POSITIONS // mbs)


def _spec(n: int, mbs: int, dp: int, end: EpochEnd) -> EpochSpec:
    return EpochSpec(n, mbs, dp, end.drop_last, end.global_batch_size, end.pad)


class _OrderFill:
    """The fill of fixed blocks by a Megatron order (a :class:`~dataorder.core.blockplan.Rows`)."""

    def __init__(self, order: MegatronOrder, spec: EpochSpec, epoch: int) -> None:
        self.order, self.spec, self.epoch = order, spec, epoch

    def make_rows(self, rank: int) -> Callable[[IntArray], list[MicroBatch]]:
        sample = self.order.sample_map(self.spec, self.epoch, rank)
        return lambda positions: micro_batches(sample(positions))


class Draws(Protocol[T]):
    """How a blend reads its sources: ``unit``, what a position is (``"samples"``, ``"rows"``);
    ``items(d, j)`` and ``costs(d, j)``, the items the draws ``j`` of sources ``d`` hold (1-D
    arrays of one length) and their costs; ``coverage(order, first, end)``, the ``(dropped,
    padded)`` of the run positions ``first .. end - 1``; ``chunk_steps(order, mbs, dp)``, most
    steps evaluated together while iterating."""

    unit: str

    def items(self, d: IntArray, j: IntArray) -> list[T]: ...
    def costs(self, d: IntArray, j: IntArray) -> IntArray: ...
    def coverage(self, order: BlendOrder, first: int, end: int) -> tuple[int, int]: ...
    def chunk_steps(self, order: BlendOrder, mbs: int, dp: int) -> int: ...


class SampleDraws:
    """The sources of a blend as map-style datasets: draw ``j`` of source ``d`` is the flat
    ``ConcatDataset`` index of the sample its keyed order per pass holds (NOTE [ Source
    orders ] in :mod:`dataorder.llm.blend_order`); every sample costs 1."""

    unit = "samples"

    def __init__(self, order: BlendOrder) -> None:
        self.order = order

    def items(self, d: IntArray, j: IntArray) -> list[int]:
        out: list[int] = (self.order.offsets[d] + self.order.source_samples(d, j)).tolist()
        return out

    def costs(self, d: IntArray, j: IntArray) -> IntArray:
        return np.ones(d.size, dtype=np.int64)

    def coverage(self, order: BlendOrder, first: int, end: int) -> tuple[int, int]:
        distinct, reads = order.coverage(first, end)
        seen = int(distinct.sum())
        return int(order.sizes_at(end).sum()) - seen, int(reads.sum()) - seen

    def chunk_steps(self, order: BlendOrder, mbs: int, dp: int) -> int:
        # Keep the (window x source) counts of a chunk bounded: a chunk of s micro-steps spans
        # about s * M / G_min + 2 global batches.
        smallest = min(seg.global_batch_size for seg in order.batches.segments)
        windows = max(3, _CHUNK_CELLS // (order.sizes.size + 1))
        return max(1, min(_CHUNK_POSITIONS // mbs, (windows - 2) * smallest // (mbs * dp)))


class Blend(Generic[T]):
    """K sources apportioned by weight, exact in every global batch: run position ``p`` is draw
    ``j`` of source ``d`` of ``order`` (:meth:`~dataorder.llm.blend_order.BlendOrder.draws`),
    read through ``draws``. A blend takes any source: a mixture of packed corpora is this blend
    over packed rows."""

    def __init__(self, order: BlendOrder, draws: Draws[T]) -> None:
        self.order, self.draws = order, draws
        self.epochs = Stretches(order, draws.unit)

    def fill(self, epoch: int, mbs: int, dp: int, end: EpochEnd) -> _BlendFill[T]:
        return _BlendFill(self, self.order.epoch_bounds(epoch)[0])

    def coverage(self, epoch: int, blocks: EpochBlocks) -> tuple[int, int]:
        return self.draws.coverage(self.order, *self.order.epoch_bounds(epoch))

    def chunk_steps(self, mbs: int, dp: int) -> int:
        if isinstance(self.order.mixture, LogMixture):
            return 1  # one micro-batch at a time: NOTE [ Frozen steps ] in dataorder.llm.mixlog
        return self.draws.chunk_steps(self.order, mbs, dp)

    def counts(self, t: int) -> IntArray:
        """Draws of each source after ``t`` run positions."""
        return self.order.mixture.counts(t)

    def describe(self, t: int) -> str:
        """What each source has given after ``t`` run positions, in words."""
        return per_source_progress(
            self.counts(t).tolist(), self.order.sizes.tolist(), self.draws.unit
        )


class _BlendFill(Generic[T]):
    """One epoch of a :class:`Blend`: fixed blocks' rows and dealt items alike."""

    def __init__(self, blend: Blend[T], first: int) -> None:
        self.blend, self.first = blend, first  # the epoch's first run position

    def items(self, positions: IntArray) -> list[T]:
        if positions.size == 0:
            return []
        return self.blend.draws.items(*self.blend.order.draws(positions + self.first))

    def costs(self, positions: IntArray) -> IntArray:
        return self.blend.draws.costs(*self.blend.order.draws(positions + self.first))

    def make_rows(self, rank: int) -> Callable[[IntArray], list[list[T]]]:
        def rows(positions: IntArray) -> list[list[T]]:
            flat, width = self.items(positions.reshape(-1)), positions.shape[-1]
            return [flat[i : i + width] for i in range(0, len(flat), width)]

        return rows
