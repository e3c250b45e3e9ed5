"""One micro-batch sampler for every LLM order: a source times a batching.

NOTE [ A sampler is a source times a batching ]
    A *source* (:class:`~dataorder.llm.sources.Source`: :mod:`dataorder.llm.sources`,
    :mod:`dataorder.llm.packing.sources`) says which item each position of an epoch holds and
    how positions fall into epochs (:class:`~dataorder.llm.sources.Passes`,
    :class:`~dataorder.llm.sources.Stretches`); a *batching* (``core``: ``FixedBlocks``,
    ``DealtByCost``) says how an epoch's global blocks become each rank's steps.
    :class:`MicroBatchSampler` composes the two and owns, once, the placement, the epoch end
    (:class:`~dataorder.llm.sources.EpochEnd`), the run-wide count and what an epoch drops or
    pads; it never asks what its source is. The public LLM samplers are its subclasses
    (docs/design.md, "A sampler is a source times a batching").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from dataorder._validate import check_int, fail
from dataorder.core.assembly import AssembledSampler, Detail, Extra, Field, Given, Layout
from dataorder.core.blockplan import Batching
from dataorder.core.cursor import CursorBatchSampler, EpochPlan, RunCount
from dataorder.core.partition import MAX_BATCH_SIZE, EpochBlocks
from dataorder.core.readonly import ReadOnly
from dataorder.core.state import Scalar, digest
from dataorder.core.topology import Topology, resolve_topology
from dataorder.llm.schedule import BatchSizeSchedule
from dataorder.llm.sources import EpochEnd, Source

__all__ = [
    "BATCH_SIZE_SCHEDULE",
    "MIXTURE_STATE",
    "PLACEMENT",
    "RUN_COUNT",
    "MicroBatchSampler",
    "global_batch_field",
]

T = TypeVar("T")


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


def _trained_at(sampler: Any, epoch: int, progress: Mapping[str, int]) -> tuple[int, str | None]:
    """The run position of a state and the digest of what its source binds there beyond the
    configuration (None: nothing; NOTE [ Lengths a state binds ] in
    :mod:`dataorder.llm.packing.growth`)."""
    at = sampler.order.epoch_bounds(epoch)[0] + progress["consumed"]
    binds = getattr(sampler._source, "grown_print", None)  # a Blend's (its draws')
    grown: str | None = None if binds is None else binds(at)
    return at, None if grown is None else grown[:8]


def _check_trained(
    sampler: Any, saved: object, epoch: int, progress: Mapping[str, int], layout: Mapping[str, int]
) -> None:
    at, grown = _trained_at(sampler, epoch, progress)
    tag, suffix = saved, None
    if grown is not None:
        tag, _, suffix = saved.rpartition("/") if isinstance(saved, str) else ("", "", "")
        if not tag:
            fail(
                "state['mixture']",
                "the log's tag, '/' and 8 hex digits of the lengths its corpus changes brought "
                "into play (NOTE [ Lengths a state binds ])",
                saved,
            )
    try:
        sampler.schedule.check_trained(
            tag, sampler.order.quotas_fixed_through(at), saved_at=at, unit=sampler.position_unit
        )
    except ValueError as err:  # the position is the state's too: name it, as it may be the edit
        where = ", ".join(f"state[{k!r}]={v}" for k, v in {"epoch": epoch, **progress}.items())
        raise ValueError(f"{err} (the saved {sampler.position_unit}: {where})") from None
    if suffix != grown:
        fail(
            "state['mixture']",
            f"a tag ending in /{grown}: the lengths differ for a grown or added document the "
            "state had reached (NOTE [ Lengths a state binds ])",
            saved,
        )


def _trained_tag(sampler: Any, epoch: int, progress: Mapping[str, int]) -> str | None:
    if sampler.schedule is None:
        return None
    at, grown = _trained_at(sampler, epoch, progress)
    tag: str = sampler.schedule.trained_tag(sampler.order.quotas_fixed_through(at))
    return tag if grown is None else f"{tag}/{grown}"


#: The state's ``mixture`` key under a :class:`~dataorder.llm.mixture.MixtureSchedule` or a
#: :class:`~dataorder.llm.mixlog.MixtureLog`: its digest through the end of the global batch
#: under way (NOTE [ Trained part of a schedule ]), read from the sampler's ``schedule``, ``order``
#: and ``position_unit``; when the source's ``grown_print`` (a
#: :class:`~dataorder.llm.sources.Blend`'s) binds lengths, as over packed corpus changes,
#: followed by ``/`` and 8 hex digits of them (in the same key: a state at every cap stays
#: within MAX_STATE_BYTES). A refusal names the saved position's keys. Absent without a mixture.
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
