"""Lock-step bucket batching over any grouping: which bucket each step reads, and how each
bucket is cut into every rank's batches.

A *grouping* puts the positions of an epoch's items into ``B`` buckets (bucket ``j`` holds
``n_j`` items) and gives each bucket a per-rank batch size ``b_j`` (items of one shape, one
length, one cost). Nothing here knows what an item is.

An epoch is a sequence of *runs*. A run is a stretch of one bucket's stream of positions: bucket
``j`` is a stream ``0, 1, 2, ...`` whose position ``p`` holds the bucket's item at place
``p mod n_j`` of its within-bucket order (positions past the end repeat the bucket's own items,
so shapes stay valid). Each run is cut into global batches of ``b_j x R`` positions (``R`` the
data-parallel size) by the shared partition (:func:`~dataorder.core.partition.plan_segments`),
and rank ``r`` takes positions ``r, r + R, r + 2R, ...`` of each (strided, NeMo's layout). So at
every step every rank reads the same bucket with the same batch size, and all ranks have the
same number of steps.

The *sequential* order has one run per bucket (the whole bucket), in a keyed or sorted bucket
order (:func:`plan_bucket_epoch`). The *interleaved* order (:func:`plan_interleaved_epoch`) cuts
every bucket into chunks of ``unit`` global batches and spreads the chunks of all buckets evenly
through the epoch (NOTE [ Interleaved buckets ]). Everything here is a pure function of the
configuration, the seed and the epoch; a sampler holds a cursor over :class:`BucketEpoch`.

NOTE [ Interleaved buckets ]
    A sequential epoch runs each bucket to its end before the next: long stretches of training
    see one shape, and the last steps of an epoch are whatever bucket came last. The interleaved
    order keeps every rank on one shape per step (lock-step) but mixes shapes through the epoch.
    Bucket ``j`` with ``n_j`` items and per-rank batch ``b_j`` is cut into ``C_j =
    ceil(n_j / (b_j x U))`` chunks of ``b_j x U`` consecutive positions of its stream (the last
    one shorter), where ``U`` (``interleave_unit``, by default the number of ranks the sampler
    was built for) is fixed in the configuration. The order of the ``sum C_j`` chunks is an
    :class:`~dataorder.core.apportion.Apportionment` with weights ``C_j``: every window of
    chunks holds each bucket's share within ``2 x 1.75`` chunks, and chunk ``t`` is found in
    O(depth) without replaying the epoch. On ``R`` ranks with ``R`` dividing ``U`` a full chunk
    is ``U / R`` global batches, so the chunk sequence, and with it every position, is the
    same on all those layouts (elastic for divisors of ``U``); the last chunk of a bucket is
    cut like the end of a sequential bucket, so an epoch drops and pads exactly what the
    sequential order does on the same layout, in another order.

NOTE [ Bucket order strategies ]
    Which buckets come in which order, how each bucket is shuffled, and how a bucket's end is
    padded are a :class:`BucketOrder` strategy chosen once when the sampler is built: the default
    :class:`KeyedBucketOrder` (structured keys, O(1) memory, elastic) here, a compat order (a
    peer's bug-compatible one) in its sampler family's own module. The plan and the iteration
    code never look at the mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_int, check_int_array
from dataorder.core.apportion import Apportionment
from dataorder.core.keys import KEY_DERIVATION_VERSION, derive_key
from dataorder.core.partition import (
    MAX_BATCH_SIZE,
    MAX_POSITIONS,
    EpochBlocks,
    SegmentPlan,
    plan_segments,
)
from dataorder.core.permutation import PERMUTATION_VERSION, Permutation
from dataorder.core.state import Scalar

__all__ = [
    "BUCKET_ORDERS",
    "MAX_INTERLEAVE_UNIT",
    "BucketEpoch",
    "BucketEpochPlan",
    "BucketOrder",
    "Grouping",
    "KeyedBucketOrder",
    "Within",
    "identity",
    "longest_shape_run",
    "plan_bucket_epoch",
    "plan_interleaved_epoch",
    "plan_sampler_epoch",
]

#: The ``bucket_order=`` values of a bucket sampler.
BUCKET_ORDERS: tuple[str, ...] = ("sequential", "interleaved")
#: The largest ``interleave_unit`` (so the most data-parallel ranks of the interleaved order):
#: 65,536 ranks, more than any job runs, and what keeps a bucket sampler's state within
#: MAX_STATE_BYTES at the largest seed, batch size, epoch and position (NOTE [ State size ] in
#: dataorder.core.state).
MAX_INTERLEAVE_UNIT = 2**16

IntArray = npt.NDArray[np.int64]
T_co = TypeVar("T_co", covariant=True)

#: A within-bucket order: places ``[0, n)`` of a bucket to places of its shuffled order.
Within = Callable[[IntArray], IntArray]


def identity(local: IntArray) -> IntArray:
    """The unshuffled within-bucket order."""
    return local


@dataclass(frozen=True, eq=False)
class BucketEpochPlan:
    """One epoch of a bucket sampler: runs of one bucket each, every run cut into global batches.

    Arrays have shape ``(S,)`` over the runs, in visiting order, except ``bucket_sizes``.

    Attributes:
        buckets: The bucket (row of the grouping) each run reads.
        starts: Where each run starts in its bucket's stream of positions.
        bucket_sizes: Shape ``(B,)``: items per bucket, by row.
        segments: The runs' :class:`~dataorder.core.partition.SegmentPlan`: ``n`` is each run's
            length, ``per_rank`` its bucket's batch size, ``offsets`` the steps it covers.
    """

    buckets: IntArray
    starts: IntArray
    bucket_sizes: IntArray
    segments: SegmentPlan

    @property
    def dp_size(self) -> int:
        """Number of data-parallel ranks ``R``."""
        return self.segments.dp_size

    @property
    def num_runs(self) -> int:
        """Number of runs ``S``."""
        return self.segments.num_segments

    @property
    def num_steps(self) -> int:
        """Batches every rank yields in the epoch."""
        return self.segments.num_steps

    @property
    def samples_dropped(self) -> int:
        """Items no rank reads in the epoch."""
        return self.segments.dropped

    @property
    def samples_padded(self) -> int:
        """Padding slots (repeats of the bucket's own items), summed over ranks."""
        return self.segments.padded

    def run_blocks(self, k: int) -> EpochBlocks:
        """The :class:`~dataorder.core.partition.EpochBlocks` of run ``k``."""
        return self.segments.blocks(k)

    def locate(self, step: int) -> tuple[int, int]:
        """``(run, batch in run)`` of the epoch's step ``step`` (O(log S))."""
        return self.segments.locate(step)


def plan_bucket_epoch(
    order: npt.ArrayLike,
    sizes: npt.ArrayLike,
    batch_sizes: npt.ArrayLike,
    *,
    dp_size: int,
    drop_last: bool,
    round_to: int = 1,
) -> BucketEpochPlan:
    """Plan a sequential epoch: one run per bucket, in ``order``.

    Args:
        order: Shape ``(B,)``, the bucket rows in visiting order.
        sizes: Shape ``(B,)``, items per bucket, by bucket row.
        batch_sizes: Shape ``(B,)``, per-rank batch size, by bucket row.
        dp_size: Number of data-parallel ranks.
        drop_last: Drop each bucket's end that does not fill a whole global batch; if False,
            end it with one smaller global batch of ``ceil(t / dp_size)`` per rank.
        round_to: Pad each bucket to a multiple of this many positions first (NeMo pads to a
            multiple of ``dp_size``, then drops per-rank remainders).

    Raises:
        ValueError: If the arrays do not match or hold out-of-range values.
    """
    n = check_int_array("sizes", sizes, min_value=1, max_value=MAX_POSITIONS)
    b = check_int_array("batch_sizes", batch_sizes, min_value=1, max_value=MAX_BATCH_SIZE)
    o = check_int_array("order", order, min_value=0, max_value=max(0, n.size - 1))
    drop_last = check_bool("drop_last", drop_last)
    if n.shape != b.shape or o.shape != n.shape:
        raise ValueError(
            f"order, sizes and batch_sizes must have one shape; got {o.shape}, {n.shape}, {b.shape}"
        )
    if o.size and not np.array_equal(np.sort(o), np.arange(o.size)):
        raise ValueError(f"order must be a permutation of the bucket rows; got {o.tolist()}")
    segments = plan_segments(
        n[o],
        per_rank=b[o],
        dp_size=dp_size,
        tail="drop" if drop_last else "shrink",
        round_to=round_to,
    )
    return BucketEpochPlan(o, np.zeros_like(o), n, segments)


def plan_interleaved_epoch(
    sizes: npt.ArrayLike,
    batch_sizes: npt.ArrayLike,
    *,
    unit: int,
    dp_size: int,
    drop_last: bool,
    key: int,
) -> BucketEpochPlan:
    """Plan an interleaved epoch (NOTE [ Interleaved buckets ]): chunks of ``unit`` global
    batches of every bucket, spread evenly by an apportionment keyed by ``key``.

    Args:
        sizes: Shape ``(B,)``, items per bucket, by bucket row.
        batch_sizes: Shape ``(B,)``, per-rank batch size, by bucket row.
        unit: ``U``, the chunk size in global batches of ``U`` ranks.
        dp_size: ``R``, the number of data-parallel ranks; must divide ``unit``.
        drop_last: As for :func:`plan_bucket_epoch` (it applies to each bucket's last chunk).
        key: The apportionment's key.

    Returns:
        A :class:`BucketEpochPlan` whose runs are the chunks, in order.

    Raises:
        ValueError: If ``dp_size`` does not divide ``unit``, or the arrays do not match.

    Example:
        >>> plan = plan_interleaved_epoch([6, 2], [1, 1], unit=2, dp_size=2, drop_last=True, key=0)
        >>> plan.buckets.tolist(), plan.starts.tolist()  # 3 chunks of bucket 0, 1 of bucket 1
        ([0, 1, 0, 0], [0, 0, 2, 4])
    """
    n = check_int_array("sizes", sizes, min_value=1, max_value=MAX_POSITIONS)
    b = check_int_array("batch_sizes", batch_sizes, min_value=1, max_value=MAX_BATCH_SIZE)
    drop_last = check_bool("drop_last", drop_last)
    if n.shape != b.shape:
        raise ValueError(f"sizes and batch_sizes must have one shape; got {n.shape}, {b.shape}")
    unit = check_int("interleave_unit", unit, min_value=1)
    dp_size = check_int("num_replicas", dp_size, min_value=1)
    if unit % dp_size:
        raise ValueError(
            f"bucket_order='interleaved' runs on a num_replicas that divides interleave_unit="
            f"{unit}; got num_replicas={dp_size}"
        )
    chunk = b * unit
    counts = -(-n // chunk)
    parties, ordinals = Apportionment(counts.tolist(), key).party_slots(0, int(counts.sum()))
    starts = ordinals * chunk[parties]
    lengths = np.minimum(chunk[parties], n[parties] - starts)
    segments = plan_segments(
        lengths, per_rank=b[parties], dp_size=dp_size, tail="drop" if drop_last else "shrink"
    )
    return BucketEpochPlan(parties, starts, n, segments)


def plan_sampler_epoch(
    order: BucketOrder,
    sizes: npt.ArrayLike,
    batch_sizes: npt.ArrayLike,
    *,
    epoch: int,
    dp_size: int,
    drop_last: bool,
    shuffle_buckets: bool,
    interleave_unit: int = 0,
) -> BucketEpochPlan:
    """A bucket sampler's plan of ``epoch``, sequential or interleaved: what the sampler reads
    and what its statistics measure (one function, so the two cannot drift).

    Args:
        order: The sampler's :class:`BucketOrder` strategy.
        sizes: Shape ``(B,)``, items per bucket, by row of the grouping.
        batch_sizes: Shape ``(B,)``, per-rank batch size, by bucket row.
        epoch: The epoch.
        dp_size: Number of data-parallel ranks.
        drop_last: As for :func:`plan_bucket_epoch`.
        shuffle_buckets: A new bucket order (or interleaved arrangement) every epoch.
        interleave_unit: ``U`` of the interleaved order; 0 for the sequential order.
    """
    if interleave_unit:
        key = order.interleave_key(epoch if shuffle_buckets else 0)
        return plan_interleaved_epoch(
            sizes,
            batch_sizes,
            unit=interleave_unit,
            dp_size=dp_size,
            drop_last=drop_last,
            key=key,
        )
    visit = order.bucket_order(np.asarray(sizes).size, epoch=epoch, shuffle=shuffle_buckets)
    return plan_bucket_epoch(
        visit,
        sizes,
        batch_sizes,
        dp_size=dp_size,
        drop_last=drop_last,
        round_to=order.round_to(dp_size),
    )


def longest_shape_run(plan: BucketEpochPlan) -> int:
    """The longest stretch of consecutive steps that read one bucket."""
    steps = np.diff(plan.segments.offsets)
    keep = steps > 0
    buckets, steps = plan.buckets[keep], steps[keep]
    if steps.size == 0:
        return 0
    change = np.flatnonzero(np.diff(buckets)) + 1
    bounds = np.concatenate(([0], change, [steps.size]))
    return int(np.add.reduceat(steps, bounds[:-1]).max())


class BucketOrder(Protocol):
    """A bucket order strategy (NOTE [ Bucket order strategies ]): an
    :class:`~dataorder.core.assembly.OrderStrategy` with the seed bound when it is built."""

    @property
    def name(self) -> str:
        """The ``compat=`` value it answers to, recorded as ``config.compat``."""
        ...

    @property
    def elastic(self) -> bool:
        """Whether a state may move to another number of ranks."""
        ...

    def bucket_order(self, num_buckets: int, *, epoch: int, shuffle: bool) -> IntArray:
        """The buckets' visiting order in ``epoch``: shape ``(B,)``, bucket rows."""
        ...

    def round_to(self, dp_size: int) -> int:
        """Each bucket is padded to a multiple of this many positions before it is cut."""
        ...

    def interleave_key(self, epoch: int) -> int:
        """The key of the interleaved order's apportionment in ``epoch`` (NOTE [ Interleaved
        buckets ]).

        Raises:
            ValueError: If the strategy has no interleaved order.
        """
        ...

    def within_orders(
        self, *, epoch: int, shuffle: bool
    ) -> Callable[[int, BucketEpochPlan], Within]:
        """``within(run, plan)``: the within-bucket order of the bucket that run reads."""
        ...

    def config(self) -> dict[str, Scalar]:
        """Fields the order depends on, recorded in the state's configuration."""
        ...


class KeyedBucketOrder:
    """dataorder's bucket order: every choice from structured keys, nothing materialised.

    The bucket order is a :class:`~dataorder.core.permutation.Permutation` of ``B`` keyed by
    ``derive_key(seed, epoch=e, stream=stream, purpose="bucket-order")``, and bucket ``j``'s
    order a Permutation of ``n_j`` keyed with ``purpose="within-bucket", extra=(j,)``, where
    ``j`` is the bucket's row in the grouping. A rank
    evaluates only its own positions, so a step costs O(batch size) whatever the number of ranks
    or the bucket size, and memory is O(B). Bucket streams do not depend on the number of ranks,
    so a state continues on another one (elastic).
    """

    name = "default"
    elastic = True

    def __init__(self, seed: int, *, stream: str) -> None:
        self.seed = seed
        self.stream = stream

    def bucket_order(self, num_buckets: int, *, epoch: int, shuffle: bool) -> IntArray:
        ordinals = np.arange(num_buckets, dtype=np.int64)
        if not shuffle:
            return ordinals
        key = derive_key(self.seed, epoch=epoch, stream=self.stream, purpose="bucket-order")
        return Permutation(num_buckets, key)(ordinals)

    def interleave_key(self, epoch: int) -> int:
        return derive_key(self.seed, epoch=epoch, stream=self.stream, purpose="interleave")

    def round_to(self, dp_size: int) -> int:
        return 1

    def within_orders(
        self, *, epoch: int, shuffle: bool
    ) -> Callable[[int, BucketEpochPlan], Within]:
        if not shuffle:
            return lambda k, plan: identity
        seed, stream = self.seed, self.stream

        def keyed(k: int, plan: BucketEpochPlan) -> Within:
            bucket = int(plan.buckets[k])
            key = derive_key(
                seed, epoch=epoch, stream=stream, purpose="within-bucket", extra=(bucket,)
            )
            return Permutation(int(plan.bucket_sizes[bucket]), key)

        return keyed

    def config(self) -> dict[str, Scalar]:
        return {"order_version": 100 * PERMUTATION_VERSION + KEY_DERIVATION_VERSION}


class Grouping(Protocol[T_co]):
    """What a :class:`BucketEpoch` reads its batches from: the items of each bucket, by place.

    A grouping may hold its items (a CSR table of dataset indices) or compute them
    (the chunks of one length of a corpus, found from a place without listing the rest).
    """

    def take(self, bucket: int, places: IntArray) -> Sequence[T_co]:
        """The batches at ``places`` (shape ``(batches, per_rank)``, places in ``[0, n_j)``)
        of bucket ``bucket``: one item per row."""
        ...

    def shape_name(self, bucket: int) -> str:
        """What the bucket's items share, for messages (``"832x480"``, ``"2048 tokens"``)."""
        ...


def _ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True, eq=False)
class BucketEpoch(Generic[T_co]):
    """The :class:`~dataorder.core.cursor.EpochPlan` of a bucket sampler: its
    :class:`BucketEpochPlan` plus the within-bucket orders, built once per run and epoch, over
    the :class:`Grouping` that says what a bucket's places hold.

    Progress is ``{"bucket": run, "consumed": positions of that run all ranks have taken}``;
    after a run's last batch it is ``{"bucket": run + 1, "consumed": 0}``. (With one run per
    bucket, as in the sequential order, ``bucket`` is the bucket's ordinal in the epoch.)
    """

    plan: BucketEpochPlan
    within: Callable[[int, BucketEpochPlan], Within]
    grouping: Grouping[T_co]
    _orders: dict[int, Within] = field(default_factory=dict, repr=False)

    @property
    def num_steps(self) -> int:
        return self.plan.num_steps

    @property
    def dp_size(self) -> int:
        return self.plan.dp_size

    def step_of(self, progress: Mapping[str, int], *, strict: bool = False) -> int:
        plan = self.plan
        k, consumed = progress["bucket"], progress["consumed"]
        if k > plan.num_runs or (k == plan.num_runs and consumed):
            raise ValueError(
                f"bucket must be an ordinal in [0, {plan.num_runs}] of the {plan.num_runs} "
                f"runs (and consumed=0 at the end); got bucket={k}, consumed={consumed}"
            )
        if k == plan.num_runs:
            return plan.num_steps
        layout = plan.run_blocks(k)
        try:
            return int(plan.segments.offsets[k]) + layout.step_of(consumed, strict=strict)
        except ValueError:
            raise ValueError(
                f"consumed={consumed} in bucket ordinal {k} (bucket {int(plan.buckets[k])}, "
                f"{layout.n} samples) is not a multiple of its global batch per-rank batch x "
                f"num_replicas = {layout.per_rank} x {layout.dp_size} = {layout.block_size}"
                + (f" up to {layout.total_positions} positions" if strict else "")
                + ("" if strict else "; resume with a num_replicas whose global batch divides it")
            ) from None

    def describe(self, progress: Mapping[str, int], epoch: int) -> str:
        """Where ``progress`` stands in ``epoch``, in buckets: the bucket read now, and, where
        a bucket is read in several runs (the interleaved order), which run of how many."""
        plan, k = self.plan, progress["bucket"]
        used = len(set(plan.buckets.tolist()))
        in_set = len(plan.bucket_sizes)
        buckets = f"{used} of the set's {in_set} buckets hold samples"
        one_run_each = plan.num_runs == used
        if k >= plan.num_runs:
            unit = "buckets" if one_run_each else f"runs ({buckets})"
            return f"after the last of {plan.num_runs} {unit} of epoch {epoch}"
        row, n = int(plan.buckets[k]), int(plan.segments.n[k])
        taken = f"{progress['consumed']} positions taken"
        if one_run_each:
            return (
                f"bucket {row} ({self.grouping.shape_name(row)}, {n} samples), the "
                f"{_ordinal(k + 1)} of {used} in epoch {epoch}'s order: {taken}"
            )
        return (
            f"bucket {row} ({self.grouping.shape_name(row)}, {n} samples in this run): run "
            f"{k + 1} of {plan.num_runs} in epoch {epoch}'s order (a run is consecutive steps "
            f"of one bucket; {buckets}): {taken}"
        )

    def progress_at(self, step: int) -> dict[str, int]:
        k, b = self.plan.locate(step)
        if k >= self.plan.num_runs:
            return {"bucket": k, "consumed": 0}
        return {"bucket": k, "consumed": b * self.plan.run_blocks(k).block_size}

    def _order(self, k: int) -> Within:
        order = self._orders.get(k)
        if order is None:
            order = self._orders[k] = self.within(k, self.plan)
        return order

    def batches(self, rank: int, start: int, stop: int) -> list[T_co]:
        plan, grouping = self.plan, self.grouping
        out: list[T_co] = []
        step = start
        while step < stop:
            k, b = plan.locate(step)
            layout = plan.run_blocks(k)
            end = min(stop - step, layout.num_batches - b) + b
            bucket = int(plan.buckets[k])
            n = int(plan.bucket_sizes[bucket])
            first = int(plan.starts[k])
            within = self._order(k)
            for positions in layout.rank_positions(rank=rank, split="strided", start=b, stop=end):
                # a position past the bucket's end repeats the bucket's own place p mod n
                places = within(((first + positions) % n).ravel()).reshape(positions.shape)
                out += grouping.take(bucket, places)
            step += end - b
        return out
