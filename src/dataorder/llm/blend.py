"""A Megatron-style micro-batch sampler over a weighted mixture of K map-style sources.

:class:`BlendedSampler` replaces Megatron-LM's ``BlendedDataset`` index (``--data-path 0.3 A 0.7
B``) and its sampler with one pure function of the run's sample count: no index arrays, no cache
files, no build step. It yields each rank's micro-batches as flat indices into
``torch.utils.data.ConcatDataset(datasets)`` (sample ``i`` of source ``d`` is
``sum(sizes[:d]) + i``), so any map-style datasets work through
``DataLoader(ConcatDataset(datasets), batch_sampler=sampler)``.

The order is :class:`~dataorder.llm.blend_order.BlendOrder`'s (its module docstring has the
four steps): each global batch takes each source's quota from the exact counts
(NOTE [ Mixture exactness ] in :mod:`dataorder.llm.mixture`), its slots shuffled, every source
reading its samples in a fresh keyed order per pass over it (NOTE [ Source orders ] in
:mod:`dataorder.llm.blend_order`).
This module is the sampler around it: configuration, the partition of each global batch into
the ranks' micro-batches, the checkpoint and the cursor.

How the peers blend (read for design only; details in the project's reference notes):

* Megatron-LM's ``BlendedDataset`` runs a greedy loop over every sample before the first one
  (``build_blending_indices`` in ``megatron/core/datasets/helpers.cpp``: O(samples x K), 10
  bytes per sample of ``dataset_index``/``dataset_sample_index``), caches it on a shared file
  system, and rebuilds it, into another order, whenever the weights, the size or the seed
  change; a blend cannot change mid-run (Megatron-LM #457, PR #725 open). Its prefixes stray by
  up to about 2 samples with skewed weights; with the same constant weights ours stay within
  ``B_d < 1.75`` at every global-batch boundary, with O(K) memory and nothing to build.
* Levanter's block-deterministic mixture truncates each block's counts and gives the remainder
  to the largest source, so small weights round to zero for a whole run (marin PR #8373).
  Here a source of weight ``1e-6`` gets its first sample within ``B_d / 1e-6 < 1.75e6``
  samples of its segment's start (about ``1e6`` in practice).
* MosaicML Streaming's ``stratified`` batching is exact per batch but regenerates an epoch's
  sample ids (8 bytes per sample) at every start; torchdata's ``MultiNodeWeightedSampler``,
  lhotse, litdata and Megatron-Energon draw sources i.i.d. (exact only in expectation) with
  per-rank RNG states, so they are not elastic.

Resume, elasticity and the loop contract are :mod:`dataorder.core.cursor`'s, exactly as for the
Megatron samplers: the state is the epoch and the global count of samples consumed in it (plus
a digest of the trained part of the mixture schedule), identical on every rank, and loads into
any micro-batch size and data-parallel size whose block divides the count and every global batch.
A layout's block must divide every global batch of each epoch it reads, from the epoch's start:
after a batch-size ramp-up, a layout that does not divide the ramp's early batches continues
from the next epoch, not inside the ramp's epoch. A state holds digests of the sizes and the
schedules, not the values: :meth:`BlendedSampler.from_state` takes them from the caller, and the
digests prove them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, check_sequence, fail
from dataorder.core.apportion import APPORTIONMENT_VERSION, MAX_POSITION
from dataorder.core.assembly import Detail, Field, Given, Layout, Schema, recorded
from dataorder.core.blockplan import FixedBlocks
from dataorder.core.cursor import RunCount
from dataorder.core.keys import KEY_DERIVATION_VERSION, MAX_SEED
from dataorder.core.permutation import MAX_DOMAIN, PERMUTATION_VERSION
from dataorder.core.state import digest
from dataorder.core.topology import Topology
from dataorder.llm.blend_order import BLEND_STREAM, BLEND_VERSION, BlendOrder
from dataorder.llm.mixlog import LogMixture, MixtureLog
from dataorder.llm.mixture import MixtureSchedule, WeightVector
from dataorder.llm.sampler import (
    BATCH_SIZE_SCHEDULE,
    MIXTURE_STATE,
    EpochEnd,
    MicroBatchSampler,
    Stretches,
    compile_mixture,
    global_batch_field,
    per_source_progress,
)
from dataorder.llm.schedule import BatchSizeSchedule
from dataorder.llm.sources import Blend, SampleDraws

__all__ = [
    "BATCH_SIZE_SCHEDULE",
    "MIXTURE_STATE",
    "BlendedSampler",
    "blend_run_count",
    "per_source_progress",
]

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


def blend_run_count(order: BlendOrder) -> RunCount:
    """The :class:`~dataorder.core.cursor.RunCount` of a sampler over ``order``: its epochs
    are stretches of the run (NOTE [ Blended epochs ]), the same on every layout."""
    return Stretches(order).run_count(1, 1, EpochEnd(True, None, False))


def _per_source(sampler: BlendedSampler) -> str:
    samples = sampler.consumed_samples
    sizes = sampler.order.sizes_at(samples).tolist()  # after the log's corpus changes
    shown = per_source_progress(sampler.consumed_per_source().tolist(), sizes)
    retired = sampler.retired_unread(samples)
    if retired:
        shown += "; retired (documents of the last pass unread): " + ", ".join(
            f"source {d}: {n}" for d, n in retired.items()
        )
    return shown


def _mixture_entry(sampler: BlendedSampler) -> str:
    schedule = sampler.schedule
    if isinstance(schedule, LogMixture):
        return schedule.describe(sampler.consumed_samples)
    entry = schedule.segment_at(sampler.consumed_samples)
    return f"entry {entry} of {len(schedule)} (from sample {schedule.segments[entry].start})"


def _position(sampler: BlendedSampler) -> str:
    first, end = sampler.order.epoch_bounds(sampler.epoch)
    consumed = sampler.progress["consumed"]
    return (
        f"{consumed} of {end - first} samples of epoch {sampler.epoch} (the run's samples "
        f"{first} to {end - 1})"
    )


class BlendedSampler(MicroBatchSampler[list[int]]):
    """Micro-batches of a weighted mixture of K sources, exact in every global batch: the
    :class:`~dataorder.llm.sources.Blend` of :class:`~dataorder.llm.sources.SampleDraws` times
    the :class:`~dataorder.core.blockplan.FixedBlocks` batching.

    Each item is one data-parallel rank's micro-batch of flat ``ConcatDataset`` indices (the
    order is :class:`~dataorder.llm.blend_order.BlendOrder`'s). With constant weights ``w``,
    after every global batch each source has given ``w_d t`` of the ``t`` samples consumed
    within ``B_d < 1.75``. Under a :class:`~dataorder.llm.mixture.MixtureSchedule` each entry
    holds that bound over its own samples (a ramp ``< 4`` against its integral) and the
    offsets carry over: against its share, the integral of its weight over the samples
    consumed, a source stays within the sum of the bounds of the entries reached
    (:meth:`~dataorder.llm.mixture.Mixture.share_bounds`; NOTE [ Mixture exactness ] in
    :mod:`dataorder.llm.mixture`). The slots are shuffled so every rank gets a random mix;
    every source reads its samples without repeats until it has read them all
    (NOTE [ Source orders ] in :mod:`dataorder.llm.blend_order`). State is O(1), memory O(K),
    and the batch of any step is computed without replay. Epochs are stretches of one run
    (NOTE [ Blended epochs ], ibid.).

    Args:
        sizes: Samples in each source (the lengths of the datasets given to ``ConcatDataset``,
            in the same order), positive ints.
        weights: One weight per source (non-negative reals, at least one positive, normalised),
            or a :class:`~dataorder.llm.mixture.MixtureSchedule` that changes them with the
            samples consumed (piecewise constant, or linear :class:`~dataorder.llm.mixture.Ramp`
            \\ s). Weights are relative to the *samples trained*, not to the sources' sizes
            (Megatron's ``--data-path`` convention).
        micro_batch_size: Samples per micro-batch on each rank.
        data_parallel_rank: This rank; None: from ``topology``, ``mesh``, the process group or
            the environment (:func:`~dataorder.core.topology.resolve_topology`).
        data_parallel_size: The number of data-parallel ranks; None: as the rank.
        global_batch_size: The global batch size ``G`` (a multiple of ``micro_batch_size x
            data_parallel_size``), or a :class:`~dataorder.llm.schedule.BatchSizeSchedule`
            (ramp-up): the quotas are exact for each global batch as the loop trains it.
        seed: The seed of the slot and source orders, an int in ``[0, 2**63)``.
        total_samples: Samples per epoch (NOTE [ Blended epochs ]); default ``sum(sizes)``. At
            least the largest global batch size.
        consumed_samples: Megatron's run-wide count of consumed samples: the sampler starts
            there (a multiple of ``micro_batch_size x data_parallel_size`` from its epoch's
            start).
        mesh: A ``DeviceMesh``: rank and size are its data-parallel coordinates.
        dp_dims: The mesh's data-parallel dims.
        topology: A :class:`~dataorder.core.topology.Topology` instead of the rank and size.

    Raises:
        TypeError: If an argument has the wrong type (a bool where an int is meant, too).
        ValueError: If an argument is out of range; the message names it and its value.

    Example: two sources of 6 and 4 samples (flat indices 0-5 and 6-9), weights 3:1,
    ``micro_batch_size=2, data_parallel_size=2, global_batch_size=4, total_samples=8``. Each
    global batch of 4 takes 3 samples of source 0 and 1 of source 1, in a shuffled order, so
    the epoch reads all six samples of source 0 once and two of source 1 (6 and 9 are not
    read: ``samples_dropped == 2``)::

        step 0: rank 0: [1, 5]  rank 1: [4, 7]      (sources 0, 0 | 0, 1)
        step 1: rank 0: [2, 0]  rank 1: [8, 3]      (sources 0, 0 | 1, 0)

    >>> ranks = [BlendedSampler([6, 4], [3, 1], 2, r, 2, 4, seed=0, total_samples=8)
    ...          for r in range(2)]
    >>> [list(s) for s in ranks]
    [[[1, 5], [2, 0]], [[4, 7], [8, 3]]]
    >>> ranks[0].consumed_per_source(8).tolist(), ranks[0].samples_dropped
    ([6, 2], 2)

    Checkpoint schema (after the first micro-batch; the same on every rank): ``consumed`` is
    the samples of the epoch all ranks have taken, ``mixture`` the digest of the schedule's
    trained part (NOTE [ Trained part of a schedule ]), ``config.sizes`` a digest of the
    sizes, ``config.global_batch_size`` an int or ``"schedule:<digest>"``, ``config.versions``
    the versions of the constructions the order uses; ``layout.*`` is informational:

    >>> s = BlendedSampler([6, 4], [3, 1], 2, 0, 2, 4, seed=0, total_samples=8)
    >>> _ = next(iter(s))
    >>> s.state_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'format': 'dataorder.state', 'version': 1, 'kind': 'blended',
     'fingerprint': '74451f53c4938613', 'epoch': 0, 'consumed': 4,
     'mixture': '1:d85e6794c688ebc4:1b3', 'config.sizes': '7adca2809df81fd3',
     'config.total_samples': 8, 'config.global_batch_size': 4,
     'config.seed': 0, 'config.versions': 'blend1-permutation1-key1-apportionment1',
     'layout.micro_batch_size': 2, 'layout.data_parallel_size': 2}
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
        layout=Layout(
            rank="data_parallel_rank", size="data_parallel_size", others=("micro_batch_size",)
        ),
        given=(
            Given("sizes", f"the sources' sizes the state was written over {_DIGEST_ONLY}"),
            Given("weights", f"the weights or MixtureSchedule of the run {_DIGEST_ONLY}"),
            BATCH_SIZE_SCHEDULE,
        ),
        extras=(MIXTURE_STATE,),
        details=(
            Detail(
                "consumed_samples", lambda s: f"{s.consumed_samples} (Megatron's run-wide count)"
            ),
            Detail("per source", _per_source),
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
        super().__init__()
        self._sizes, checked = _check_weights(sizes, weights)
        self._set_placement(
            micro_batch_size,
            data_parallel_rank,
            data_parallel_size,
            mesh=mesh,
            dp_dims=dp_dims,
            topology=topology,
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
        self._compose(Blend(self._order, SampleDraws(self._order)), FixedBlocks(), end)
        self._start(consumed_samples)

    # -- configuration, read-only ---------------------------------------------------------------
    @property
    def sizes(self) -> tuple[int, ...]:
        """Samples in each source."""
        return self._sizes

    @property
    def num_sources(self) -> int:
        """The number of sources K."""
        return len(self._sizes)

    @property
    def schedule(self) -> MixtureSchedule | LogMixture:
        """The mixture schedule (a constant one for plain weights; a log's compiled form)."""
        return self._schedule

    @property
    def batch_size_schedule(self) -> BatchSizeSchedule:
        """The global batch size schedule (a constant one for an int)."""
        return self._batches

    @property
    def order(self) -> BlendOrder:
        """The order: run positions to flat indices."""
        return self._order

    @property
    def seed(self) -> int:
        """The seed."""
        return self._seed

    @property
    def total_samples(self) -> int:
        """Samples per epoch (nominal; NOTE [ Blended epochs ])."""
        return self._total

    def consumed_per_source(self, samples: int | None = None) -> npt.NDArray[np.int64]:
        """How many samples each source has contributed after ``samples`` run-wide samples.

        Args:
            samples: A run-wide count (default: :attr:`consumed_samples`).

        Returns:
            An int64 array of K counts summing to ``samples``. O(K) per schedule entry before
            ``samples`` (each entry's starting counts are kept once computed).
        """
        if samples is None:
            samples = self.consumed_samples
        return self._mixture.counts(check_int("samples", samples, min_value=0))

    @property
    def samples_dropped(self) -> int:
        """Samples of the datasets the cursor's epoch never reads (NOTE [ Blended epochs ]).

        Computed on first use per epoch, in O(min(head, tail)) per source that crosses a source
        epoch (:func:`~dataorder.llm.blend_order.distinct_draws`); the order never needs it.
        """
        return self._epoch_coverage()[0]

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
        samples = check_int("samples", samples, min_value=0, max_value=MAX_POSITION)
        mixture = self._mixture
        if not isinstance(mixture, LogMixture) or mixture.log.sizes is None:
            return {}
        retired = [
            e.source
            for e in mixture.log.corpus_changes()
            if e.op == "retire" and e.source is not None and mixture.entry_start(e.index) <= samples
        ]
        if not retired:
            return {}
        unread = self._order.unread(samples)
        return {d: int(unread[d]) for d in retired}

    @property
    def samples_padded(self) -> int:
        """Reads in the cursor's epoch that repeat a sample already read in it (an upsampled
        source, or a source's reads that cross into its next source epoch). Never ``None``."""
        return self._epoch_coverage()[1]

    def __repr__(self) -> str:
        return (
            f"BlendedSampler(sources={len(self._sizes)}, micro_batch_size={self._mbs}, "
            f"data_parallel_rank={self._rank}, data_parallel_size={self._dp}, "
            f"global_batch_size={self.order_config()['global_batch_size']!r}, seed={self._seed}, "
            f"total_samples={self._total}; epoch={self._epoch}, "
            f"consumed={self._position['consumed']})"
        )
