"""One micro-batch sampler for every LLM order: a source times a batching.

NOTE [ A sampler is a source times a batching ]
    A *source* (:class:`Source`: :mod:`dataorder.llm.sources`, :mod:`dataorder.llm.packing.
    sources`) says which item each position of an epoch holds and how positions fall into epochs
    (:class:`Passes`, :class:`Stretches`); a *batching* (``core``: ``FixedBlocks``,
    ``DealtByCost``) says how an epoch's global blocks become each rank's steps.
    :class:`MicroBatchSampler` composes the two and owns, once, the placement, the epoch end
    (:class:`EpochEnd`), the run-wide count and what an epoch drops or pads; it never asks what
    its source is. The public LLM samplers are its subclasses (docs/design.md, "A sampler is a
    source times a batching").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from dataorder._validate import check_int, fail
from dataorder.core.assembly import AssembledSampler, Detail, Extra, Field, Given, Layout
from dataorder.core.blockplan import Batching
from dataorder.core.cursor import CursorBatchSampler, EpochPlan, RunCount
from dataorder.core.keys import derive_key
from dataorder.core.partition import MAX_BATCH_SIZE, EpochBlocks, plan_epoch
from dataorder.core.readonly import ReadOnly
from dataorder.core.state import MAX_EPOCH, Scalar, digest
from dataorder.core.topology import Topology, resolve_topology
from dataorder.llm.blend_order import BlendOrder
from dataorder.llm.mixlog import LogMixture, MixtureLog
from dataorder.llm.mixture import Mixture, MixtureSchedule
from dataorder.llm.orders import check_epoch_end, plan_megatron_epoch
from dataorder.llm.schedule import BatchSizeSchedule

__all__ = [
    "BATCH_SIZE_SCHEDULE",
    "MIXTURE_STATE",
    "PLACEMENT",
    "RUN_COUNT",
    "EpochEnd",
    "Epochs",
    "MicroBatchSampler",
    "Passes",
    "Source",
    "Stretches",
    "compile_mixture",
    "global_batch_field",
    "per_source_progress",
]

T = TypeVar("T")

# Sources named one by one in a description of a mixture's progress; the rest are counted.
_SHOWN_SOURCES = 8


@dataclass(frozen=True)
class EpochEnd:
    """How an epoch ends, for the whole job: ``drop_last`` (else pad) the tail that does not fill
    a whole block, or a whole ``global_batch_size`` (an int, or None); ``pad`` the last global
    batch to ``global_batch_size``; ``batches``: the global batch size schedule of a run whose
    epochs are whole global batches (a blend's), or None."""

    drop_last: bool
    global_batch_size: int | None
    pad: bool
    batches: BatchSizeSchedule | None = None

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
        return cls(True, None, False, batches), batches


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


#: The layout every :class:`MicroBatchSampler` records (its placement, never the rank).
PLACEMENT = Layout("data_parallel_rank", "data_parallel_size", ("micro_batch_size",))
#: ``dataorder inspect``'s line for Megatron's run-wide count.
RUN_COUNT = Detail(
    "consumed_samples", lambda s: f"{s.consumed_samples} (Megatron's run-wide count)"
)


class MicroBatchSampler(AssembledSampler[T], CursorBatchSampler[T]):
    """A source times a batching, placed on a data-parallel rank (NOTE [ A sampler is a source
    times a batching ]). A subclass checks its own arguments, calls this constructor, then
    :meth:`_compose` and :meth:`_start`, and declares a :class:`~dataorder.core.assembly.Schema`.

    Args:
        micro_batch_size: Items per micro-batch on each rank, ``>= 1``.
        data_parallel_rank: This rank, in ``[0, data_parallel_size)``. None: from ``topology``,
            ``mesh``, the process group or the environment
            (:func:`~dataorder.core.topology.resolve_topology`).
        data_parallel_size: The number of data-parallel ranks, ``>= 1``. None: as the rank.
        mesh: A ``DeviceMesh``: rank and size are its data-parallel coordinates.
        dp_dims: The mesh's data-parallel dims (default: the dims named ``dp``...).
        topology: A :class:`~dataorder.core.topology.Topology` instead of the rank and size.
    """

    _source: Source
    _batching: Batching
    _end: EpochEnd

    def __init__(
        self,
        micro_batch_size: int,
        data_parallel_rank: int | None,
        data_parallel_size: int | None,
        mesh: Any,
        dp_dims: Sequence[str] | None,
        topology: Topology | None,
    ) -> None:
        super().__init__()
        self._mbs = check_int(
            "micro_batch_size", micro_batch_size, min_value=1, max_value=MAX_BATCH_SIZE
        )
        self._topology = resolve_topology(
            data_parallel_size,
            data_parallel_rank,
            mesh=mesh,
            dp_dims=dp_dims,
            topology=topology,
            names=("data_parallel_size", "data_parallel_rank"),
        )
        self._dp, self._rank = self._topology.dp_size, self._topology.dp_rank

    micro_batch_size = ReadOnly[int]("_mbs", "Items per micro-batch on each rank.")
    data_parallel_rank = ReadOnly[int]("_rank", "This sampler's rank.")
    data_parallel_size = ReadOnly[int]("_dp", "The number of data-parallel ranks.")
    dp_rank = ReadOnly[int]("_rank", "This sampler's data-parallel rank.")
    topology = ReadOnly[Topology]("_topology", "This process's data-parallel place.")
    max_epoch = ReadOnly[int](
        lambda s: s._source.epochs.max_epoch,
        "The largest epoch (fewer than ``MAX_EPOCH`` when a blend's run-wide count would pass "
        "``2**62``).",
    )
    consumed_samples = ReadOnly[int](
        lambda s: s._count_now(), "The run-wide count of positions consumed (Megatron's)."
    )

    def _compose(self, source: Source, batching: Batching, end: EpochEnd) -> None:
        self._source, self._batching, self._end = source, batching, end
        self._coverage: tuple[int, tuple[int, int]] | None = None

    def _start(self, consumed_samples: int) -> None:
        """Start at the run-wide count ``consumed_samples`` (after the subclass's checks)."""
        if check_int("consumed_samples", consumed_samples, min_value=0):
            self._apply_state(*self.count_position(consumed_samples), foreign=False)
        else:  # this layout against the first epoch (a blend's early global batches)
            self._source.epochs.blocks(0, self._mbs, self._dp, self._end)

    def _make_plan(self, epoch: int, layout: Mapping[str, int]) -> EpochPlan[T]:
        mbs = check_int("micro_batch_size", layout["micro_batch_size"], min_value=1)
        dp = check_int("data_parallel_size", layout["data_parallel_size"], min_value=1)
        self._batching.check(mbs, dp)
        blocks = self._source.epochs.blocks(epoch, mbs, dp, self._end)
        return self._batching.plan(blocks, self._source.fill(epoch, mbs, dp, self._end))

    def _run_count(self) -> RunCount:
        return self._source.epochs.run_count(self._mbs, self._dp, self._end)

    def _chunk_steps(self) -> int:
        return self._source.chunk_steps(self._mbs, self._dp)

    def _epoch_coverage(self) -> tuple[int, int]:
        """The source's ``(dropped, padded)`` in the cursor's epoch, computed once per epoch."""
        if self._coverage is None or self._coverage[0] != self._epoch:
            blocks: EpochBlocks = getattr(self.epoch_plan(), "blocks")  # noqa: B009
            self._coverage = (self._epoch, self._source.coverage(self._epoch, blocks))
        return self._coverage[1]

    def _repr(self, head: str, tail: str = "") -> str:
        """``Name(<head>micro_batch_size=.., data_parallel_rank=.., data_parallel_size=..<tail>;
        epoch=.., consumed=..)``."""
        return (
            f"{type(self).__name__}({head}micro_batch_size={self._mbs}, "
            f"data_parallel_rank={self._rank}, data_parallel_size={self._dp}{tail}; "
            f"epoch={self._epoch}, consumed={self._position['consumed']})"
        )


# -- what the blends share -----------------------------------------------------------------------
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


def global_batch_field(read: Callable[[Any], BatchSizeSchedule | int | None]) -> Field:
    """``config.global_batch_size``: 0 for none, an int, or ``"schedule:<digest>"`` of a
    :class:`~dataorder.llm.schedule.BatchSizeSchedule` (then ``from_state`` needs it given)."""

    def value(sampler: Any) -> Scalar:
        batches = read(sampler)
        if not isinstance(batches, BatchSizeSchedule):
            return batches or 0
        thresholds = batches.thresholds
        return thresholds[0][1] if len(thresholds) == 1 else f"schedule:{digest(thresholds)}"

    def args(saved: Scalar) -> Mapping[str, Any]:
        return {} if isinstance(saved, str) else {"global_batch_size": saved or None}

    return Field("global_batch_size", value, args)


def _check_trained(
    sampler: Any, tag: object, epoch: int, progress: Mapping[str, int], layout: Mapping[str, int]
) -> None:
    saved = sampler.order.epoch_bounds(epoch)[0] + progress["consumed"]
    sampler.schedule.check_trained(
        tag, sampler.order.quotas_fixed_through(saved), saved_at=saved, unit=sampler.position_unit
    )


def _trained_tag(sampler: Any, epoch: int, progress: Mapping[str, int]) -> str | None:
    if sampler.schedule is None:
        return None
    at = sampler.order.epoch_bounds(epoch)[0] + progress["consumed"]
    tag: str = sampler.schedule.trained_tag(sampler.order.quotas_fixed_through(at))
    return tag


#: The state's ``mixture`` key under a :class:`~dataorder.llm.mixture.MixtureSchedule`: its
#: digest through the end of the global batch under way (NOTE [ Trained part of a schedule ]),
#: read from the sampler's ``schedule``, ``order`` and ``position_unit``; absent without one.
MIXTURE_STATE = Extra(
    "mixture", _trained_tag, _check_trained, required=lambda s: s.schedule is not None
)

#: ``global_batch_size=`` of ``from_state``, given when the state holds a
#: :class:`~dataorder.llm.schedule.BatchSizeSchedule`'s digest (``config.global_batch_size`` a str).
BATCH_SIZE_SCHEDULE = Given(
    "global_batch_size",
    lambda config: (
        "the BatchSizeSchedule of a state with global_batch_size="
        f"{config.get('global_batch_size')!r} (a state holds only its digest)"
    ),
    required=lambda config: isinstance(config.get("global_batch_size"), str),
)


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
