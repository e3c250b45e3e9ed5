"""A Megatron-style micro-batch sampler over a weighted mixture of K map-style sources.

:class:`BlendedSampler` replaces Megatron-LM's ``BlendedDataset`` index (``--data-path 0.3 A 0.7
B``) and its sampler with one pure function of the run's sample count: no index arrays, no cache
files, no build step. It yields flat indices into ``torch.utils.data.ConcatDataset(datasets)``
(sample ``i`` of source ``d`` is ``sum(sizes[:d]) + i``). The order is
:class:`~dataorder.llm.blend_order.BlendOrder`'s; how the peers blend, how a state resumes and
the checkpoint schema: docs/llm_samplers.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, check_sequence, fail
from dataorder.core.apportion import APPORTIONMENT_VERSION, MAX_POSITION
from dataorder.core.assembly import Detail, Field, Given, Schema, recorded
from dataorder.core.blockplan import FixedBlocks
from dataorder.core.keys import KEY_DERIVATION_VERSION, MAX_SEED
from dataorder.core.permutation import MAX_DOMAIN, PERMUTATION_VERSION
from dataorder.core.readonly import ReadOnly
from dataorder.core.state import digest
from dataorder.core.topology import Topology
from dataorder.llm.blend_order import BLEND_STREAM, BLEND_VERSION, BlendOrder
from dataorder.llm.mixlog import LogMixture, MixtureLog
from dataorder.llm.mixture import MixtureSchedule, WeightVector
from dataorder.llm.sampler import (
    BATCH_SIZE_SCHEDULE,
    MIXTURE_STATE,
    PLACEMENT,
    RUN_COUNT,
    MicroBatchSampler,
    global_batch_field,
)
from dataorder.llm.schedule import BatchSizeSchedule
from dataorder.llm.sources import Blend, EpochEnd, SampleDraws, compile_mixture

__all__ = ["BlendedSampler"]

# Every construction the order depends on, in one field (the state stays within MAX_STATE_BYTES
# with a long schedule tag, a 19-digit seed and a batch-size schedule digest).
_VERSIONS = (
    f"blend{BLEND_VERSION}-permutation{PERMUTATION_VERSION}-key{KEY_DERIVATION_VERSION}-"
    f"apportionment{APPORTIONMENT_VERSION}"
)
_DIGEST_ONLY = "(a state holds only its digest)"


def _check_sizes(sizes: object, smallest: int = 1) -> tuple[int, ...]:
    items = check_sequence("sizes", sizes, "a sequence of positive ints, one per source")
    out = tuple(
        n
        if type(n) is int and smallest <= n <= MAX_DOMAIN  # the common case: no ABC checks
        else check_int(f"sizes[{d}]", n, min_value=smallest, max_value=MAX_DOMAIN)
        for d, n in enumerate(items)
    )
    if not out:
        fail("sizes", "a non-empty sequence of positive ints", sizes)
    if sum(out) > MAX_DOMAIN:
        fail("sum(sizes)", "at most 2**62", sum(out))
    return out


def _check_weights(
    sizes: object, weights: Any
) -> tuple[tuple[int, ...], MixtureSchedule | MixtureLog]:
    """The sizes and the weights as a schedule, or a log over as many sources (with corpus
    changes, built over these sizes: NOTE [ Corpus changes ])."""
    corpus = isinstance(weights, MixtureLog) and weights.sizes is not None
    sizes = _check_sizes(sizes, 0 if corpus else 1)  # 0: a source added later
    if not isinstance(weights, MixtureLog):
        return sizes, MixtureSchedule.for_sources(weights, len(sizes), name="weights")
    if corpus and weights.sizes != sizes:
        fail(
            "sizes",
            f"the sizes the MixtureLog was built with, {list(weights.sizes or ())} "
            "(NOTE [ Corpus changes ])",
            list(sizes),
        )
    if weights.num_sources != len(sizes):
        fail(
            "weights",
            f"a MixtureLog over len(sizes) = {len(sizes)} sources",
            f"MixtureLog over {weights.num_sources} sources",
        )
    return sizes, weights


def _mixture_entry(sampler: BlendedSampler) -> str:
    schedule = sampler.schedule
    if isinstance(schedule, LogMixture):
        return schedule.describe(sampler.consumed_samples)
    entry = schedule.segment_at(sampler.consumed_samples)
    return f"entry {entry} of {len(schedule)} (from sample {schedule.segments[entry].start})"


def _position(sampler: BlendedSampler) -> str:
    first, end = sampler.order.epoch_bounds(sampler.epoch)
    where = sampler._source.epochs.where(sampler.epoch)
    return (
        f"{sampler.progress['consumed']} of {end - first} samples of epoch {sampler.epoch}{where}"
    )


class BlendedSampler(MicroBatchSampler[list[int]]):
    """Micro-batches of a weighted mixture of K sources, exact in every global batch: the
    :class:`~dataorder.llm.sources.Blend` of :class:`~dataorder.llm.sources.SampleDraws` times
    the :class:`~dataorder.core.blockplan.FixedBlocks` batching.

    Each item is one rank's micro-batch of flat ``ConcatDataset`` indices. After every global
    batch each source has given its share within ``B_d < 1.75`` (NOTE [ Mixture exactness ] in
    :mod:`dataorder.llm.mixture`), every source reading its samples without repeats until it has
    read them all. State O(1), memory O(K); epochs are stretches of one run (NOTE [ Blended
    epochs ] in :mod:`dataorder.llm.blend_order`).

    Args:
        sizes: Samples in each source (the lengths of the datasets given to ``ConcatDataset``,
            in the same order), positive ints.
        weights: One weight per source (non-negative reals, at least one positive, normalised),
            a :class:`~dataorder.llm.mixture.MixtureSchedule` over the samples consumed, or a
            :class:`~dataorder.llm.mixlog.MixtureLog`. Weights are relative to the *samples
            trained*, not to the sources' sizes (Megatron's ``--data-path`` convention).
        micro_batch_size: Samples per micro-batch on each rank.
        data_parallel_rank, data_parallel_size, mesh, dp_dims, topology: The data-parallel
            place (:class:`~dataorder.llm.sampler.MicroBatchSampler`).
        global_batch_size: ``G`` (a multiple of ``micro_batch_size x data_parallel_size``), or
            a :class:`~dataorder.llm.schedule.BatchSizeSchedule` (ramp-up): the quotas are exact
            for each global batch as the loop trains it.
        seed: The seed of the slot and source orders, an int in ``[0, 2**63)``.
        total_samples: Samples per epoch (NOTE [ Blended epochs ]); default ``sum(sizes)``. At
            least the largest global batch size.
        consumed_samples: Megatron's run-wide count of consumed samples: the sampler starts
            there (on a step of this layout from its epoch's start).

    Raises:
        TypeError: If an argument has the wrong type (a bool where an int is meant, too).
        ValueError: If an argument is out of range; the message names it and its value.

    Two sources of 6 and 4 samples (flat indices 0-5 and 6-9), weights 3:1: each global batch
    of 4 takes 3 samples of source 0 and 1 of source 1, shuffled (6 and 9 are not read):

    >>> ranks = [BlendedSampler([6, 4], [3, 1], 2, r, 2, 4, seed=0, total_samples=8)
    ...          for r in range(2)]
    >>> [list(s) for s in ranks]
    [[[1, 5], [2, 0]], [[4, 7], [8, 3]]]
    >>> ranks[0].consumed_per_source(8).tolist(), ranks[0].samples_dropped
    ([6, 2], 2)
    """

    #: What a position of the order counts, in messages.
    position_unit = "sample"

    schema = Schema(
        kind="blended",
        fields=(
            Field("sizes", lambda s: digest(s.sizes)),
            recorded("total_samples"),
            global_batch_field(lambda s: s.batch_size_schedule),
            recorded("seed"),
            Field("versions", lambda s: _VERSIONS),
        ),
        layout=PLACEMENT,
        given=(
            Given("sizes", f"the sources' sizes the state was written over {_DIGEST_ONLY}"),
            Given("weights", f"the weights or MixtureSchedule of the run {_DIGEST_ONLY}"),
            BATCH_SIZE_SCHEDULE,
        ),
        extras=(MIXTURE_STATE,),
        details=(
            RUN_COUNT,
            Detail("per source", lambda s: s._blend.describe(s.consumed_samples)),
            Detail("mixture", _mixture_entry),
        ),
        position=_position,
        steps="micro-steps",
    )

    def __init__(
        self,
        sizes: Sequence[int],
        weights: WeightVector | MixtureSchedule | MixtureLog,
        micro_batch_size: int,
        data_parallel_rank: int | None = None,
        data_parallel_size: int | None = None,
        global_batch_size: int | BatchSizeSchedule | None = None,
        *,
        seed: int,
        total_samples: int | None = None,
        consumed_samples: int = 0,
        mesh: Any = None,
        dp_dims: Sequence[str] | None = None,
        topology: Topology | None = None,
    ) -> None:
        self._sizes, checked = _check_weights(sizes, weights)
        super().__init__(
            micro_batch_size, data_parallel_rank, data_parallel_size, mesh, dp_dims, topology
        )
        end, self._batches = EpochEnd.of_run(
            global_batch_size,
            what="a positive int or a BatchSizeSchedule",
            micro_batch_size=self._mbs,
            data_parallel_size=self._dp,
        )
        self._seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
        largest = max(seg.global_batch_size for seg in self._batches.segments)
        if total_samples is None:
            default = sum(self._sizes)
            if default < largest:
                fail(
                    "total_samples",
                    f"given when sum(sizes) = {default} is below the largest global batch "
                    f"size {largest} (an epoch holds at least one global batch)",
                    None,
                )
            total_samples = default
        self._total = check_int(
            "total_samples", total_samples, min_value=largest, max_value=MAX_DOMAIN
        )
        self._schedule, self._mixture = compile_mixture(
            checked, self._seed, BLEND_STREAM, self._batches
        )
        self._order = BlendOrder(self._sizes, self._mixture, self._batches, self._total, self._seed)
        self._blend = Blend(self._order, SampleDraws(self._order))
        self._compose(self._blend, FixedBlocks(), end)
        self._start(consumed_samples)

    sizes = ReadOnly[tuple[int, ...]]("_sizes", "Samples in each source.")
    num_sources = ReadOnly[int](lambda s: len(s._sizes), "The number of sources K.")
    schedule = ReadOnly[MixtureSchedule | LogMixture](
        "_schedule", "The mixture schedule (constant for plain weights; a log's compiled form)."
    )
    batch_size_schedule = ReadOnly[BatchSizeSchedule](
        "_batches", "The global batch size schedule (a constant one for an int)."
    )

    @property
    def order(self) -> BlendOrder:
        """The order: run positions to flat indices."""
        return self._order

    seed = ReadOnly[int]("_seed", "The seed.")
    total_samples = ReadOnly[int]("_total", "Samples per epoch (nominal; NOTE [ Blended epochs ]).")
    samples_dropped = ReadOnly[int](
        lambda s: s._epoch_coverage()[0],
        "Samples of the datasets the cursor's epoch never reads (NOTE [ Blended epochs ]), "
        "computed on first use per epoch.",
    )
    samples_padded = ReadOnly[int](
        lambda s: s._epoch_coverage()[1],
        "Reads in the cursor's epoch that repeat a sample already read in it (an upsampled "
        "source, or reads that cross into a source's next pass). Never ``None``.",
    )

    def consumed_per_source(self, samples: int | None = None) -> npt.NDArray[np.int64]:
        """The samples each source has given after ``samples`` run-wide samples (default:
        :attr:`consumed_samples`): K int64 counts summing to ``samples``, in O(K) per schedule
        entry before ``samples`` (each entry's starting counts are kept once computed)."""
        if samples is None:
            samples = self.consumed_samples
        return self._mixture.counts(check_int("samples", samples, min_value=0))

    def retired_unread(self, samples: int | None = None) -> dict[int, int]:
        """Per source retired by the log (an entry that starts at or before ``samples``), the
        documents of its last pass it has not read after ``samples`` run-wide samples (default:
        :attr:`consumed_samples`): what its retirement leaves unread (NOTE [ Corpus changes ]).

        A retired source may still be given the few samples it is owed (at most its deviation
        bound), which read unread documents of that pass, so the count can fall a little after
        the retirement, then stays. Empty for a blend without a log of corpus changes.
        """
        if samples is None:
            samples = self.consumed_samples
        return self._blend.retired_unread(
            check_int("samples", samples, min_value=0, max_value=MAX_POSITION)
        )

    def __repr__(self) -> str:
        return self._repr(
            f"sources={len(self._sizes)}, ",
            f", global_batch_size={self.order_config()['global_batch_size']!r}, "
            f"seed={self._seed}, total_samples={self._total}",
        )
