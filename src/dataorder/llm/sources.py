"""The sources of the LLM samplers: which item each position of an epoch holds (NOTE [ A sampler
is a source times a batching ] in :mod:`dataorder.llm.sampler`).

* :class:`Source`: what a source says; :class:`Epochs`, how its positions fall into epochs:
  :class:`Passes` (passes over the same items, the tail dropped or padded) or
  :class:`Stretches` (stretches of one run of whole global batches).
* :class:`SampleOrder`: a pass over ``total_samples`` samples in a Megatron order (every mode of
  :data:`~dataorder.llm.megatron.MEGATRON_MODES`), what the Megatron samplers read.
* :class:`Blend`: K sources apportioned by weight (:class:`~dataorder.llm.blend_order.
  BlendOrder`), each read through its :class:`Draws`: :class:`SampleDraws` (map-style datasets,
  :class:`~dataorder.llm.blend.BlendedSampler`) or packed rows
  (:class:`~dataorder.llm.packing.sources.RowDraws`,
  :class:`~dataorder.llm.packing.growth.GrowingRows`).
* :class:`~dataorder.llm.packing.sources.PackedCorpus`: a pass over one corpus's packed rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.core.cursor import RunCount
from dataorder.core.keys import derive_key
from dataorder.core.partition import EpochBlocks, plan_epoch
from dataorder.core.state import MAX_EPOCH
from dataorder.llm.blend_order import BlendOrder
from dataorder.llm.mixlog import LogMixture, MixtureLog
from dataorder.llm.mixture import Mixture, MixtureSchedule
from dataorder.llm.orders import (
    EpochSpec,
    MegatronOrder,
    MicroBatch,
    check_epoch_end,
    micro_batches,
    plan_megatron_epoch,
)
from dataorder.llm.schedule import BatchSizeSchedule

__all__ = [
    "Blend",
    "Draws",
    "EpochEnd",
    "Epochs",
    "Passes",
    "SampleDraws",
    "SampleOrder",
    "Source",
    "Stretches",
    "compile_mixture",
    "per_source_progress",
]

T = TypeVar("T")
IntArray = npt.NDArray[np.int64]

# Positions mapped per vectorised chunk and rank: large enough that per-chunk overhead vanishes,
# small enough that the first micro-batch of an epoch (or after a resume) costs well under 1 ms.
_CHUNK_POSITIONS = 16384
# Most (window x source) counts a chunk of a blend holds at once: 2**20 int64 = 8 MB.
_CHUNK_CELLS = 2**20
# Sources named one by one in a description of a mixture's progress; the rest are counted.
_SHOWN_SOURCES = 8


@dataclass(frozen=True)
class EpochEnd:
    """How an epoch ends, for the whole job: ``drop_last`` (else pad) the tail that does not fill
    a whole block, or a whole ``global_batch_size`` (an int, or None); ``pad`` the last global
    batch to ``global_batch_size``."""

    drop_last: bool
    global_batch_size: int | None
    pad: bool

    @classmethod
    def of_passes(cls, drop: object, gbs: object, pad: object, mbs: int, dp: int) -> EpochEnd:
        """Megatron's rules (``check_epoch_end``): the tail of a pass dropped or padded."""
        return cls(*check_epoch_end(drop, gbs, pad, micro_batch_size=mbs, data_parallel_size=dp))

    @classmethod
    def of_run(
        cls,
        global_batch_size: object,
        *,
        what: str,
        max_value: int | None = None,
        micro_batch_size: int,
        data_parallel_size: int,
    ) -> tuple[EpochEnd, BatchSizeSchedule]:
        """Whole global batches of ``global_batch_size``, an int or a schedule (required:
        ``what`` says what it must be), which the layout must divide; and the schedule."""
        batches = global_batch_size
        if batches is None:
            fail("global_batch_size", what, None, TypeError)
        if not isinstance(batches, BatchSizeSchedule):
            gbs = check_int("global_batch_size", batches, min_value=1, max_value=max_value)
            batches = BatchSizeSchedule.constant(gbs)
        batches.check_layout(
            micro_batch_size=micro_batch_size, data_parallel_size=data_parallel_size
        )
        return cls(True, None, False), batches


class Epochs(Protocol):
    """How a source's positions fall into epochs, the epoch end applied: the largest epoch;
    ``blocks(epoch, mbs, dp, end)``, an epoch's global blocks on ``mbs x dp`` (ValueError for a
    layout the end refuses); ``run_count(mbs, dp, end)``, where epochs start in a run-wide count
    (NOTE [ The run-wide count ]); ``where(epoch)``, where it lies in the run, in words."""

    @property
    def max_epoch(self) -> int: ...
    def blocks(self, epoch: int, mbs: int, dp: int, end: EpochEnd) -> EpochBlocks: ...
    def run_count(self, mbs: int, dp: int, end: EpochEnd) -> RunCount: ...
    def where(self, epoch: int) -> str: ...


@dataclass(frozen=True)
class Passes:
    """Epochs that are passes over the same ``n`` items, the tail dropped or padded; ``pinned``:
    the order's configuration pins the layout; ``why(end)``: why a bare count past the first
    epoch may mean another position on another layout (NOTE [ The run-wide count ])."""

    n: int
    pinned: bool
    why: Callable[[EpochEnd], str]
    max_epoch: int = MAX_EPOCH

    def blocks(self, epoch: int, mbs: int, dp: int, end: EpochEnd) -> EpochBlocks:
        gbs = end.global_batch_size
        if gbs is not None and gbs % (mbs * dp):
            fail(
                "micro_batch_size x data_parallel_size",
                f"a divisor of global_batch_size={gbs}",
                f"{mbs} x {dp}",
            )
        return plan_megatron_epoch(
            self.n,
            mbs,
            dp,
            drop_last=end.drop_last,
            global_batch_size=gbs,
            pad_samples_to_global_batch_size=end.pad,
        )

    def run_count(self, mbs: int, dp: int, end: EpochEnd) -> RunCount:
        gbs = end.global_batch_size
        whole = gbs is not None and (end.drop_last or end.pad or self.n % gbs == 0)
        return RunCount.equal_epochs(
            self.blocks(0, mbs, dp, end).total_positions,
            same_on_every_layout=self.pinned or whole,
            why=self.why(end),
        )

    def where(self, epoch: int) -> str:
        return ""


@dataclass(frozen=True)
class Stretches:
    """A blend's epochs: stretches of one run-wide stream of whole global batches (NOTE
    [ Blended epochs ] in :mod:`dataorder.llm.blend_order`) of ``order``; ``unit`` says what a
    position is (``"rows"``)."""

    order: BlendOrder
    unit: str = "samples"

    @property
    def max_epoch(self) -> int:
        """``MAX_EPOCH``, or fewer when the run-wide count would pass ``2**62``."""
        return max(0, min(MAX_EPOCH, 2**62 // self.order.total_samples - 2))

    def blocks(self, epoch: int, mbs: int, dp: int, end: EpochEnd) -> EpochBlocks:
        first, stop = self.order.epoch_bounds(epoch)
        batches = self.order.batches
        batches.check_layout(
            micro_batch_size=mbs, data_parallel_size=dp, from_step=batches.step_at(first)
        )
        return plan_epoch(stop - first, per_rank=mbs, dp_size=dp, tail="drop")

    def run_count(self, mbs: int, dp: int, end: EpochEnd) -> RunCount:
        order = self.order
        return RunCount(
            lambda epoch: order.epoch_bounds(epoch)[0],
            lambda count: order.epoch_of(count)[0],
            same_on_every_layout=True,
        )

    def where(self, epoch: int) -> str:
        first, stop = self.order.epoch_bounds(epoch)
        return f" (the run's {self.unit} {first} to {stop - 1})"


class Source(Protocol):
    """Which item each position of an epoch holds (NOTE [ A sampler is a source times a
    batching ]): its :class:`Epochs`; ``fill(epoch, mbs, dp, end)``, what fills an epoch's blocks,
    in the form the batching reads (:class:`~dataorder.core.blockplan.Rows`,
    :class:`~dataorder.core.dealing.CostedItems`); ``coverage(epoch, blocks)``, the ``(dropped,
    padded)`` of an epoch cut into ``blocks``, in the source's unit (samples, tokens);
    ``chunk_steps(mbs, dp)``, most steps evaluated together while iterating."""

    @property
    def epochs(self) -> Epochs: ...
    def fill(self, epoch: int, mbs: int, dp: int, end: EpochEnd) -> Any: ...
    def coverage(self, epoch: int, blocks: EpochBlocks) -> tuple[int, int]: ...
    def chunk_steps(self, mbs: int, dp: int) -> int: ...


def per_source_progress(counts: Sequence[int], sizes: Sequence[int], unit: str = "") -> str:
    """What a mixture has taken of each source, in words (the first few sources): ``counts[d]``
    of source ``d``, a pass being ``sizes[d]``; ``unit`` names what is counted (``"rows"``).

    >>> per_source_progress([5, 2], [10, 4], "rows")
    '5 rows of source 0 (0.5 passes over 10); 2 rows of source 1 (0.5 passes over 4)'
    """
    of = f" {unit} of" if unit else " of"
    shown = [
        f"{c}{of} source {d} ({c / n:.3g} passes over {n})" if n else f"source {d} not added yet"
        for d, (c, n) in enumerate(zip(counts, sizes, strict=True))
    ]
    if len(shown) > _SHOWN_SOURCES:
        shown = [*shown[:_SHOWN_SOURCES], f"... and {len(shown) - _SHOWN_SOURCES} more sources"]
    return "; ".join(shown)


def compile_mixture(
    weights: MixtureSchedule | MixtureLog, seed: int, stream: str, batches: BatchSizeSchedule
) -> tuple[MixtureSchedule | LogMixture, Mixture | LogMixture]:
    """``(schedule, compiled)`` of a blend's checked weights: a schedule and its
    :class:`~dataorder.llm.mixture.Mixture`, or a log's compiled form twice (NOTE [ Mixture log
    exactness ] in :mod:`dataorder.llm.mixlog`), keyed by ``(seed, stream)``."""
    key = derive_key(seed, epoch=0, stream=stream, purpose="apportionment")
    if isinstance(weights, MixtureLog):
        compiled = weights.compile(key, batches)
        return compiled, compiled
    return weights, Mixture(weights, key)


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
    steps evaluated together while iterating; after ``t`` run positions: ``describe(order, t)``,
    what each source has given, in words; ``retired_unread(order, t)``, per source retired by a
    corpus change, what its last pass leaves unread; ``grown_print(order, t)``, the digest of
    what a state there binds beyond the configuration, or None (NOTE [ Lengths a state binds ]
    in :mod:`dataorder.llm.packing.growth`)."""

    unit: str

    def items(self, d: IntArray, j: IntArray) -> list[T]: ...
    def costs(self, d: IntArray, j: IntArray) -> IntArray: ...
    def coverage(self, order: BlendOrder, first: int, end: int) -> tuple[int, int]: ...
    def chunk_steps(self, order: BlendOrder, mbs: int, dp: int) -> int: ...
    def describe(self, order: BlendOrder, t: int) -> str: ...
    def retired_unread(self, order: BlendOrder, t: int) -> dict[int, int]: ...
    def grown_print(self, order: BlendOrder, t: int) -> str | None: ...


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

    def describe(self, order: BlendOrder, t: int) -> str:
        """Samples per source, a pass being its size after the log's corpus changes."""
        sizes = order.sizes_at(t).tolist()
        shown = per_source_progress(order.mixture.counts(t).tolist(), sizes)
        retired = self.retired_unread(order, t)
        if retired:
            shown += "; retired (documents of the last pass unread): " + ", ".join(
                f"source {d}: {n}" for d, n in retired.items()
            )
        return shown

    def retired_unread(self, order: BlendOrder, t: int) -> dict[int, int]:
        """Documents of the last pass unread, per source retired (NOTE [ Corpus changes ])."""
        mixture = order.mixture
        if not isinstance(mixture, LogMixture) or mixture.log.sizes is None:
            return {}
        retired = [
            e.source
            for e in mixture.log.corpus_changes()
            if e.op == "retire" and e.source is not None and mixture.entry_start(e.index) <= t
        ]
        if not retired:
            return {}
        unread = order.unread(t)
        return {d: int(unread[d]) for d in retired}

    def grown_print(self, order: BlendOrder, t: int) -> str | None:
        return None  # a state binds the sizes, which the configuration digests


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
        return self.draws.describe(self.order, t)

    def retired_unread(self, t: int) -> dict[int, int]:
        """Per source retired by ``t`` run positions, what its last pass leaves unread."""
        return self.draws.retired_unread(self.order, t)

    def grown_print(self, t: int) -> str | None:
        """What a state at run position ``t`` binds beyond the configuration, or None."""
        return self.draws.grown_print(self.order, t)


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
