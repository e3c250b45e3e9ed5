"""One micro-batch sampler for every LLM order: a source times a batching.

NOTE [ A sampler is a source times a batching ]
    A *source* says which item each position of an epoch holds (:mod:`dataorder.llm.sources`:
    a sample order and its compat variants, a blend of sources; :mod:`dataorder.llm.packing.
    sources`: packed rows), and how its positions fall into epochs (:class:`Passes` of a fixed
    set of items, or :class:`Stretches` of one run-wide stream, a blend's). A *batching* says
    how an epoch's global blocks become each rank's steps, and knows nothing of LLMs:
    :class:`~dataorder.core.blockplan.FixedBlocks`, :class:`~dataorder.core.dealing.
    DealtByCost`. :class:`MicroBatchSampler` composes the two and owns, once, what every LLM
    sampler shares: the placement (``micro_batch_size``, ``data_parallel_rank``/``size``, a
    mesh or a topology), the epoch end (:class:`EpochEnd`: ``drop_last``, the global batch
    size, an int or a :class:`~dataorder.llm.schedule.BatchSizeSchedule`, and padding), the
    run-wide count (``consumed_samples``) and the counts of what an epoch drops or pads. It
    never asks what its source is. The public samplers (Megatron's two, the blend, the packed
    sampler) are its subclasses: each validates its users' arguments, builds its source, and
    declares its state (:class:`~dataorder.core.assembly.Schema`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from dataorder._validate import check_int, fail
from dataorder.core.assembly import AssembledSampler, Extra, Field, Given
from dataorder.core.blockplan import Batching
from dataorder.core.cursor import CursorBatchSampler, EpochPlan, RunCount
from dataorder.core.keys import derive_key
from dataorder.core.partition import MAX_BATCH_SIZE, EpochBlocks, plan_epoch
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
    """How an epoch ends, for the whole job (validated by the sampler's constructor).

    Attributes:
        drop_last: Drop the tail that does not fill a whole block (or global batch); else pad.
        global_batch_size: The constant global batch size that decides the tail, or None.
        pad: Pad the last global batch to ``global_batch_size`` (with ``drop_last=False``).
        batches: The global batch size schedule of a run whose epochs are whole global batches
            (a blend's), or None.
    """

    drop_last: bool
    global_batch_size: int | None
    pad: bool
    batches: BatchSizeSchedule | None = None

    @classmethod
    def of_passes(
        cls, drop_last: object, global_batch_size: object, pad: object, **layout: int
    ) -> EpochEnd:
        """Megatron's rules (``check_epoch_end``): the tail of a pass dropped or padded."""
        drop, gbs, padded = check_epoch_end(drop_last, global_batch_size, pad, **layout)
        return cls(drop, gbs, padded)

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
        if isinstance(global_batch_size, BatchSizeSchedule):
            batches = global_batch_size
        elif global_batch_size is None:
            fail("global_batch_size", what, None, TypeError)
        else:
            gbs = check_int(
                "global_batch_size", global_batch_size, min_value=1, max_value=max_value
            )
            batches = BatchSizeSchedule.constant(gbs)
        batches.check_layout(
            micro_batch_size=micro_batch_size, data_parallel_size=data_parallel_size
        )
        return cls(True, None, False, batches), batches


class Epochs(Protocol):
    """How a source's positions fall into epochs, the epoch end applied."""

    @property
    def max_epoch(self) -> int:
        """The largest epoch."""
        ...

    def blocks(self, epoch: int, mbs: int, dp: int, end: EpochEnd) -> EpochBlocks:
        """The global blocks of ``epoch`` on ``mbs x dp`` (ValueError for a layout the end
        refuses)."""
        ...

    def run_count(self, mbs: int, dp: int, end: EpochEnd) -> RunCount:
        """Where the epochs start in a run-wide count (NOTE [ The run-wide count ])."""
        ...

    def where(self, epoch: int) -> str:
        """Where ``epoch`` lies in the run, in words ("" for passes)."""
        ...


@dataclass(frozen=True)
class Passes:
    """Epochs that are passes over the same ``n`` items, the tail dropped or padded.

    Attributes:
        n: Items per pass.
        pinned: Whether the order's configuration pins the layout (no other layout continues it).
        why: ``why(end)``: why a bare count past the first epoch may mean another position on
            another layout (NOTE [ The run-wide count ]).
    """

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
    [ Blended epochs ] in :mod:`dataorder.llm.blend_order`).

    Attributes:
        order: The blend's order (its :meth:`~BlendOrder.epoch_bounds`).
        unit: What a position is, in words (``"rows"``).
    """

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
    batching ])."""

    @property
    def epochs(self) -> Epochs:
        """How the positions fall into epochs."""
        ...

    def fill(self, epoch: int, mbs: int, dp: int, end: EpochEnd) -> Any:
        """What fills ``epoch``'s blocks on ``mbs x dp``, in the form the sampler's batching
        reads (:class:`~dataorder.core.blockplan.Rows`, :class:`~dataorder.core.dealing.
        CostedItems`)."""
        ...

    def coverage(self, epoch: int, blocks: EpochBlocks) -> tuple[int, int]:
        """``(dropped, padded)``: what ``epoch`` (cut into ``blocks``) leaves unread and reads
        as padding or repeats, in the source's unit (samples, tokens)."""
        ...

    def chunk_steps(self, mbs: int, dp: int) -> int:
        """Most steps evaluated together while iterating."""
        ...


class MicroBatchSampler(AssembledSampler[T], CursorBatchSampler[T]):
    """A source times a batching, placed on a data-parallel rank (NOTE [ A sampler is a source
    times a batching ]). Subclasses call :meth:`_set_placement`, then :meth:`_compose`, then
    :meth:`_start`, and declare a :class:`~dataorder.core.assembly.Schema`.
    """

    _mbs: int
    _dp: int
    _rank: int
    _topology: Topology
    _source: Source
    _batching: Batching
    _end: EpochEnd

    # -- placement --------------------------------------------------------------------------------
    def _set_placement(
        self,
        micro_batch_size: int,
        data_parallel_rank: int | None,
        data_parallel_size: int | None,
        *,
        mesh: Any,
        dp_dims: Sequence[str] | None,
        topology: Topology | None,
    ) -> None:
        """Check ``micro_batch_size`` and resolve the rank and size (explicit values, ``mesh``,
        ``topology``, the process group or the environment, in the Megatron names)."""
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
        self._dp = self._topology.dp_size
        self._rank = self._topology.dp_rank

    @property
    def micro_batch_size(self) -> int:
        """Items per micro-batch on each rank."""
        return self._mbs

    @property
    def data_parallel_rank(self) -> int:
        """This sampler's rank."""
        return self._rank

    @property
    def data_parallel_size(self) -> int:
        """The number of data-parallel ranks."""
        return self._dp

    @property
    def topology(self) -> Topology:
        """This process's data-parallel place (rank, size, replica group)."""
        return self._topology

    @property
    def dp_rank(self) -> int:
        """This sampler's data-parallel rank."""
        return self._rank

    # -- composition ------------------------------------------------------------------------------
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

    @property
    def max_epoch(self) -> int:
        """The largest epoch (fewer than ``MAX_EPOCH`` when a blend's run-wide count would pass
        ``2**62``)."""
        return self._source.epochs.max_epoch

    @property
    def consumed_samples(self) -> int:
        """The run-wide count of positions consumed (Megatron's ``consumed_samples``)."""
        return self._count_now()

    def _epoch_coverage(self) -> tuple[int, int]:
        """The source's ``(dropped, padded)`` in the cursor's epoch, computed once per epoch."""
        if self._coverage is None or self._coverage[0] != self._epoch:
            blocks: EpochBlocks = getattr(self.epoch_plan(), "blocks")  # noqa: B009
            self._coverage = (self._epoch, self._source.coverage(self._epoch, blocks))
        return self._coverage[1]


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
    # NOTE [ Trained part of a schedule ]: through the end of the global batch under way
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


#: The ``mixture`` key of the state of a sampler over a :class:`~dataorder.llm.mixture.
#: MixtureSchedule` (NOTE [ Trained part of a schedule ]): the digest of the schedule through
#: the end of the global batch under way. Declared by every sampler whose ``schedule``,
#: ``order`` (a :class:`~dataorder.llm.blend_order.BlendOrder`) and ``position_unit`` say what
#: was trained; absent when ``schedule`` is None.
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
