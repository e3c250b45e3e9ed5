"""The diffusion bucket sampler: one bucket at a time, every rank in lock-step, exact O(1) resume.

:class:`SequentialBucketSampler` is a drop-in for NeMo Automodel's sampler of the same name, used
as ``DataLoader(dataset, batch_sampler=sampler)`` over a
:class:`~dataorder.multires.BaseMultiresolutionDataset`. Each item it yields is one rank's batch:
dataset indices that all share one bucket (one resolution).

How an epoch is laid out. The epoch visits the ``B`` buckets one after another, in an order that
is the same on every rank (the *ordinals* ``k = 0 .. B-1``; bucket order is shuffled per epoch or
sorted by pixels). Bucket ``j`` with ``n_j`` samples and per-rank batch size ``b_j`` is a stream
of positions ``0, 1, 2, ...``; position ``p`` holds the bucket's sample at place ``p mod n_j`` of
its within-bucket order. The stream is cut into global batches of ``b_j x R`` positions and rank
``r`` takes positions ``r, r + R, r + 2R, ...`` of each (strided, NeMo's layout). So at every step
every rank reads the same bucket with the same batch size, and all ranks have the same number of
steps, by construction. The end of each bucket is decided for the whole job:

* ``drop_last=True``: only whole global batches of real samples; the rest of the bucket is
  dropped. A bucket smaller than one global batch gives no batch at all (a warning says how many
  buckets and samples that is).
* ``drop_last=False``: whole global batches, then one smaller global batch of ``ceil(t / R)``
  per rank for the ``t`` samples left; its fewer than ``R`` padding positions ``p >= n_j`` repeat
  the bucket's own samples ``p mod n_j`` (so shapes stay valid). Every sample is read each epoch.

:func:`plan_bucket_epoch` computes all of that for an epoch as arrays over the buckets (order,
batch sizes, batch counts and their prefix sums); the sampler holds the configuration and a cursor.

Randomness. The default mode derives every choice from structured keys: the bucket order is a
:class:`~dataorder.permutation.Permutation` of ``B`` keyed by
``derive_key(seed, epoch=e, stream="sequential_bucket", purpose="bucket-order")``, and bucket
``j``'s order a Permutation of ``n_j`` keyed with ``purpose="within-bucket", extra=(j,)``, where
``j`` is the bucket's row in the dataset's sorted bucket table. Nothing is materialised: a rank
evaluates only its own positions (its next batches in the bucket, up to 8,192 positions at a
time), so a step costs O(batch size) whatever the number of ranks or the bucket size, and memory
is O(B) plus one chunk. ``compat="nemo"`` reproduces
NeMo Automodel's batches exactly instead (same torch version): one ``torch.Generator`` seeded
``seed + epoch``, ``randperm(B)`` first if ``shuffle_buckets``, then one ``randperm(n_j)`` per
bucket in visiting order if ``shuffle_within_bucket``; NeMo's per-bucket drop rule (a rank's last
short batch is dropped after padding the bucket to a multiple of ``R``); materialised orders
(O(largest bucket) memory, and a resume draws the permutations of the buckets before it).

Resume. The cursor is ``(epoch, bucket, consumed)``: the ordinal of the current bucket in this
epoch's order and the positions of it that all ranks together have taken. Loading a state sets
the cursor; nothing is replayed. The per-bucket streams do not depend on ``R``, so in the default
mode a state saved on 8 ranks continues on 4 (or any ``R'`` with ``b_j x R'`` dividing
``consumed``); ``compat="nemo"`` records ``num_replicas`` and refuses another one, as its
padding and drop rule depend on it.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Sampler

from dataorder._validate import check_bool, check_choice, check_int, fail
from dataorder.cursor import CursorBatchSampler
from dataorder.keys import KEY_DERIVATION_VERSION, derive_key
from dataorder.multires import BucketTable
from dataorder.partition import EpochLayout
from dataorder.permutation import PERMUTATION_VERSION, Permutation
from dataorder.state import Scalar
from dataorder.topology import Topology, resolve_topology

__all__ = [
    "COMPAT_MODES",
    "BucketEpochPlan",
    "SequentialBucketSampler",
    "bucket_batch_sizes",
    "bucket_layouts",
    "bucket_order",
    "nemo_bucket_order",
    "plan_bucket_epoch",
]

Compat = Literal["default", "nemo"]
COMPAT_MODES: tuple[str, ...] = ("default", "nemo")

IntArray = npt.NDArray[np.int64]

_STREAM = "sequential_bucket"
_MAX_NEMO_SEED = 2**63 - 1  # torch.manual_seed(seed + epoch) must stay in range for any epoch
# A rank's next batches in a bucket are mapped together, up to this many positions: a vectorised
# Permutation call has a fixed cost of a few hundred microseconds (numpy overhead times the cycle
# walk's rounds) and then costs ~0.1 us per position, so a chunk amortises it over many steps and
# still keeps the first batch of an epoch (or of a resume) near a millisecond.
_CHUNK_POSITIONS = 8192


# -- planning: pure functions over ints and arrays ------------------------------------------------
def bucket_batch_sizes(
    resolutions: npt.ArrayLike,
    *,
    base_batch_size: int,
    base_resolution: tuple[int, int],
    dynamic: bool,
    batch_size_fn: Callable[[tuple[int, int], int, tuple[int, int]], int] | None = None,
) -> IntArray:
    """Per-rank batch size of each bucket.

    Args:
        resolutions: Shape ``(B, 2)``, ``(width, height)`` per bucket.
        base_batch_size: The batch size (fixed), or the one at ``base_resolution`` (dynamic).
        base_resolution: Reference ``(width, height)`` for dynamic batch sizes.
        dynamic: Scale the batch size with the bucket's pixels through ``batch_size_fn``.
        batch_size_fn: ``fn(resolution, base_batch_size, base_resolution) -> int``, e.g. a
            calculator's ``get_dynamic_batch_size``; required if ``dynamic``.

    Returns:
        Shape ``(B,)`` int64, every entry ``>= 1``.
    """
    res = np.asarray(resolutions, dtype=np.int64).reshape(-1, 2)
    if not dynamic:
        return np.full(res.shape[0], base_batch_size, dtype=np.int64)
    if batch_size_fn is None:
        raise TypeError("batch_size_fn is required when dynamic=True")
    out = np.empty(res.shape[0], dtype=np.int64)
    for j, (w, h) in enumerate(res.tolist()):
        out[j] = check_int(
            f"dynamic batch size of bucket {w}x{h}",
            batch_size_fn((w, h), base_batch_size, base_resolution),
            min_value=1,
        )
    return out


def bucket_layouts(
    sizes: npt.ArrayLike,
    batch_sizes: npt.ArrayLike,
    *,
    world: int,
    drop_last: bool,
    compat: Compat = "default",
) -> tuple[IntArray, IntArray]:
    """Global-batch counts of every bucket (vectorised :func:`~dataorder.partition.plan_epoch`).

    Args:
        sizes: Shape ``(B,)``, samples per bucket (``n``).
        batch_sizes: Shape ``(B,)``, per-rank batch size per bucket (``b``).
        world: Number of data-parallel ranks ``R``.
        drop_last: See the module docstring.
        compat: ``"nemo"`` applies NeMo's drop rule: pad the bucket to a multiple of ``R``, then
            each rank keeps ``floor(ceil(n / R) / b)`` batches (the last kept global batch may
            hold up to ``R - 1`` padding positions).

    Returns:
        ``(full_blocks, tail_per_rank)``, each shape ``(B,)``: bucket ``j`` has
        ``full_blocks[j]`` global batches of ``b_j`` per rank, then, if ``tail_per_rank[j] > 0``,
        one of ``tail_per_rank[j]`` per rank. Equal to ``plan_epoch(n, per_rank=b, world=R,
        tail="drop" if drop_last else "shrink")`` in the default mode.
    """
    world = check_int("world", world, min_value=1)
    n = np.asarray(sizes, dtype=np.int64)
    b = np.asarray(batch_sizes, dtype=np.int64)
    if n.shape != b.shape or (b.size and int(b.min()) < 1):
        raise ValueError(
            f"batch_sizes must be positive and shaped like sizes {n.shape}; got {b.tolist()}"
        )
    if compat == "nemo":
        per_rank = -(-n // world)
        full = per_rank // b
        tail = np.zeros_like(full) if drop_last else per_rank - full * b
        return full, tail
    block = b * world
    full = n // block
    if drop_last:
        return full, np.zeros_like(full)
    return full, -(-(n - full * block) // world)


def bucket_order(num_buckets: int, *, seed: int, epoch: int, shuffle: bool) -> IntArray:
    """The default mode's bucket order of an epoch: shape ``(B,)``, bucket rows by ordinal.

    Sorted order (``arange(B)``) if not ``shuffle``; otherwise a keyed
    :class:`~dataorder.permutation.Permutation`, the same on every rank.
    """
    ordinals = np.arange(num_buckets, dtype=np.int64)
    if not shuffle:
        return ordinals
    key = derive_key(seed, epoch=epoch, stream=_STREAM, purpose="bucket-order")
    return Permutation(num_buckets, key)(ordinals)


def _nemo_generator(seed: int, epoch: int) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)  # NeMo's seeding, reproduced only in compat="nemo"
    return generator


def nemo_bucket_order(num_buckets: int, *, seed: int, epoch: int, shuffle: bool) -> IntArray:
    """NeMo Automodel's bucket order: ``randperm(B)`` of a generator seeded ``seed + epoch``."""
    if not shuffle:
        return np.arange(num_buckets, dtype=np.int64)
    return torch.randperm(num_buckets, generator=_nemo_generator(seed, epoch)).numpy()


@dataclass(frozen=True, eq=False)
class BucketEpochPlan:
    """One epoch's plan over the buckets. Arrays have shape ``(B,)`` and are indexed by ordinal
    ``k`` (place in this epoch's bucket order), except ``batch_offsets``.

    Attributes:
        world: Number of data-parallel ranks ``R``.
        order: The bucket (row of the dataset's bucket table) visited at ordinal ``k``.
        sizes: Samples in that bucket.
        batch_sizes: Its per-rank batch size.
        full_blocks: Its whole global batches.
        tail_per_rank: Per-rank size of its final smaller global batch, or 0.
        batch_offsets: Shape ``(B + 1,)``: ordinal ``k`` yields the epoch's batches
            ``batch_offsets[k] .. batch_offsets[k + 1] - 1`` on every rank.
    """

    world: int
    order: IntArray
    sizes: IntArray
    batch_sizes: IntArray
    full_blocks: IntArray
    tail_per_rank: IntArray
    batch_offsets: IntArray

    @property
    def num_buckets(self) -> int:
        """Number of buckets ``B``."""
        return int(self.order.size)

    @property
    def total_batches(self) -> int:
        """Batches every rank yields in the epoch."""
        return int(self.batch_offsets[-1])

    def layout(self, ordinal: int) -> EpochLayout:
        """The :class:`~dataorder.partition.EpochLayout` of the bucket at ``ordinal``."""
        k = ordinal
        return EpochLayout(
            int(self.sizes[k]),
            int(self.batch_sizes[k]),
            self.world,
            int(self.full_blocks[k]),
            int(self.tail_per_rank[k]),
        )

    def total_positions(self) -> IntArray:
        """Shape ``(B,)``: positions each bucket's global batches cover, padding included."""
        return self.full_blocks * self.batch_sizes * self.world + self.tail_per_rank * self.world

    @property
    def samples_dropped(self) -> int:
        """Samples no rank reads in the epoch."""
        return int(np.maximum(self.sizes - self.total_positions(), 0).sum())

    @property
    def samples_padded(self) -> int:
        """Padding slots (repeats of the bucket's own samples), summed over ranks."""
        return int(np.maximum(self.total_positions() - self.sizes, 0).sum())

    def locate(self, batch_idx: int) -> tuple[int, int]:
        """``(ordinal, batch in bucket)`` of the epoch's batch ``batch_idx`` (O(log B))."""
        k = int(np.searchsorted(self.batch_offsets, batch_idx, side="right")) - 1
        return k, batch_idx - int(self.batch_offsets[k])


def plan_bucket_epoch(
    order: npt.ArrayLike,
    sizes: npt.ArrayLike,
    batch_sizes: npt.ArrayLike,
    *,
    world: int,
    drop_last: bool,
    compat: Compat = "default",
) -> BucketEpochPlan:
    """Plan an epoch: bucket order, batch sizes, batch counts and prefix sums.

    Args:
        order: Shape ``(B,)``, the bucket rows in visiting order (:func:`bucket_order`).
        sizes: Shape ``(B,)``, samples per bucket, by bucket row.
        batch_sizes: Shape ``(B,)``, per-rank batch size, by bucket row.
        world: Number of data-parallel ranks.
        drop_last: See the module docstring.
        compat: ``"default"`` or ``"nemo"`` (NeMo's drop rule, see :func:`bucket_layouts`).
    """
    o = np.asarray(order, dtype=np.int64)
    n = np.asarray(sizes, dtype=np.int64)[o]
    b = np.asarray(batch_sizes, dtype=np.int64)[o]
    full, tail = bucket_layouts(n, b, world=world, drop_last=drop_last, compat=compat)
    offsets = np.zeros(o.size + 1, dtype=np.int64)
    np.cumsum(full + (tail > 0), out=offsets[1:])
    return BucketEpochPlan(world, o, n, b, full, tail, offsets)


# -- within-bucket orders -------------------------------------------------------------------------
_Within = Callable[[IntArray], IntArray]  # places in [0, n) -> places of the bucket's order


def _identity(local: IntArray) -> IntArray:
    return local


def _table_within(perm: IntArray) -> _Within:
    def within(local: IntArray) -> IntArray:
        return perm[local]

    return within


def _dataset_table(dataset: object) -> BucketTable:
    table = getattr(dataset, "bucket_table", None)
    if isinstance(table, BucketTable):
        return table
    keys = getattr(dataset, "sorted_bucket_keys", None)
    groups = getattr(dataset, "bucket_groups", None)
    if keys is not None and groups is not None:
        return BucketTable.from_nemo_groups(keys, groups)
    raise TypeError(
        "dataset must be a BaseMultiresolutionDataset (or have NeMo's sorted_bucket_keys and "
        f"bucket_groups); got dataset of type {type(dataset).__name__}"
    )


def _digest(values: IntArray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(values, "<i8").tobytes(), digest_size=8).hexdigest()


@dataclass(frozen=True, eq=False)
class _BucketEpoch:
    """The :class:`~dataorder.cursor.EpochPlan` of a bucket sampler: its
    :class:`BucketEpochPlan` plus the within-bucket orders, built once per bucket and plan.

    Progress is ``{"bucket": ordinal, "consumed": positions of that bucket taken by all ranks}``;
    after a bucket's last batch it is ``{"bucket": ordinal + 1, "consumed": 0}``.
    """

    plan: BucketEpochPlan
    within: Callable[[int, BucketEpochPlan], _Within]
    table: BucketTable
    _orders: dict[int, _Within] = field(default_factory=dict, repr=False)

    @property
    def num_steps(self) -> int:
        return self.plan.total_batches

    @property
    def dp_size(self) -> int:
        return self.plan.world

    def step_of(self, progress: Mapping[str, int], *, strict: bool = False) -> int:
        plan = self.plan
        k, consumed = progress["bucket"], progress["consumed"]
        if k > plan.num_buckets or (k == plan.num_buckets and consumed):
            raise ValueError(
                f"bucket must be an ordinal in [0, {plan.num_buckets}] of the "
                f"{plan.num_buckets} buckets (and consumed=0 at the end); got bucket={k}, "
                f"consumed={consumed}"
            )
        if k == plan.num_buckets:
            return plan.total_batches
        layout = plan.layout(k)
        try:
            return int(plan.batch_offsets[k]) + layout.step_of(consumed, strict=strict)
        except ValueError:
            raise ValueError(
                f"consumed={consumed} in bucket ordinal {k} (bucket {int(plan.order[k])}, "
                f"{layout.n} samples) is not a multiple of its global batch per-rank batch x "
                f"num_replicas = {layout.per_rank} x {layout.world} = {layout.block_size}"
                + (f" up to {layout.total_positions} positions" if strict else "")
                + ("" if strict else "; resume with a num_replicas whose global batch divides it")
            ) from None

    def progress_at(self, step: int) -> dict[str, int]:
        plan = self.plan
        if step >= plan.total_batches:
            return {"bucket": plan.num_buckets, "consumed": 0}
        k, b = plan.locate(step)
        return {"bucket": k, "consumed": b * plan.layout(k).block_size}

    def _order(self, k: int) -> _Within:
        order = self._orders.get(k)
        if order is None:
            order = self._orders[k] = self.within(k, self.plan)
        return order

    def batches(self, rank: int, start: int, stop: int) -> list[list[int]]:
        plan, indices, offsets = self.plan, self.table.indices, self.table.offsets
        out: list[list[int]] = []
        step = start
        while step < stop:
            k, b = plan.locate(step)
            layout = plan.layout(k)
            end = min(stop - step, layout.num_batches - b) + b
            n = layout.n
            base = int(offsets[plan.order[k]])
            within = self._order(k)
            for positions in layout.rank_positions(rank=rank, split="strided", start=b, stop=end):
                # padding positions p >= n repeat the bucket's own place p mod n
                places = within((positions % n).ravel()).reshape(positions.shape)
                out += indices[base + places].tolist()
            step += end - b
        return out


# -- the sampler ----------------------------------------------------------------------------------
class SequentialBucketSampler(CursorBatchSampler[list[int]], Sampler[list[int]]):
    """Batches of one bucket at a time, the same bucket and batch size on every rank at each step.

    Args:
        dataset: A :class:`~dataorder.multires.BaseMultiresolutionDataset`, or any dataset with
            NeMo's ``sorted_bucket_keys`` and ``bucket_groups`` (converted once, O(N)).
        base_batch_size: Per-rank batch size, or its value at ``base_resolution`` if
            ``dynamic_batch_size``.
        base_resolution: Reference ``(width, height)`` for dynamic batch sizes.
        drop_last: Drop each bucket's samples that do not fill a whole global batch; if False,
            pad each bucket's last global batch with repeats of its own samples.
        shuffle_buckets: Visit the buckets in a new order every epoch (else fewest pixels first).
        shuffle_within_bucket: Shuffle each bucket every epoch (else dataset order).
        dynamic_batch_size: Per-bucket batch size from ``dataset.calculator``'s
            ``get_dynamic_batch_size`` (NeMo's formula in ``compat="nemo"``).
        seed: Non-negative int.
        num_replicas: Data-parallel size; default: from ``mesh``, the process group or the
            environment (:func:`~dataorder.topology.resolve_topology`).
        rank: Data-parallel rank, in ``[0, num_replicas)``; default as ``num_replicas``.
        compat: ``"default"`` (structured keys, elastic) or ``"nemo"`` (NeMo Automodel's exact
            batches).
        mesh: A ``DeviceMesh``: rank and size are the data-parallel group's, not the world's.
        dp_dims: The mesh's data-parallel dims (default: the dims named ``dp``...).

    Worked example: samples 0-4 are 256x256 and 5-7 are 320x192, ``base_batch_size=2``, two
    ranks, no shuffling (the 320x192 bucket has fewer pixels, so it comes first)::

        drop_last=False: rank 0: [5, 7], [0, 2], [4]    rank 1: [6, 5], [1, 3], [0]
        drop_last=True:  rank 0: [0, 2]                 rank 1: [1, 3]

    With ``drop_last=False`` the 3-sample bucket fills one global batch of 2 x 2 with one
    padding slot (position 3 repeats sample 5), and the 5-sample bucket ends with a global batch
    of 1 per rank whose second slot repeats sample 0: ``samples_padded == 2``. With
    ``drop_last=True`` the 320x192 bucket is smaller than one global batch and is dropped whole
    (with a warning), as is sample 4: ``samples_dropped == 4``.

    >>> from dataorder.multires import BaseMultiresolutionDataset
    >>> ds = BaseMultiresolutionDataset.from_bucket_ids(
    ...     [0, 0, 0, 0, 0, 1, 1, 1], resolutions=[(256, 256), (320, 192)])
    >>> s = SequentialBucketSampler(ds, base_batch_size=2, drop_last=False,
    ...     shuffle_buckets=False, shuffle_within_bucket=False, num_replicas=2, rank=1)
    >>> list(s), s.samples_padded
    ([[6, 5], [1, 3], [0]], 2)
    >>> s.epoch, s.progress, len(s)  # the pass ran out: epoch 0, at its end; len() is an epoch
    (0, {'bucket': 2, 'consumed': 0}, 3)
    >>> s.get_batch_info(2, epoch=0)  # doctest: +NORMALIZE_WHITESPACE
    {'epoch': 0, 'bucket': 1, 'ordinal': 1, 'batch_in_bucket': 1,
     'bucket_key': ('square', (256, 256)), 'resolution': (256, 256), 'aspect_name': 'square',
     'batch_size': 1, 'bucket_batch_size': 2, 'global_batch_size': 2, 'padding': 1,
     'padding_global': 1}

    Checkpoint schema (after the first batch of epoch 0; bools are 0/1; ``config.dataset`` hashes
    the buckets and the samples each holds, ``config.batch_sizes`` the per-bucket batch sizes;
    ``bucket`` is the ordinal in the epoch's bucket order and ``consumed`` the positions of that
    bucket all ranks have taken; ``layout.num_replicas`` is informational in the default mode):

    >>> s = SequentialBucketSampler(ds, base_batch_size=2, drop_last=False,
    ...     shuffle_buckets=False, shuffle_within_bucket=False, num_replicas=2, rank=0)
    >>> _ = next(iter(s))
    >>> s.state_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'format': 'dataorder.state', 'version': 1, 'kind': 'sequential_bucket',
     'fingerprint': 'd49e04d19aab0340', 'epoch': 0, 'bucket': 1, 'consumed': 0,
     'config.compat': 'default', 'config.seed': 42, 'config.base_batch_size': 2,
     'config.drop_last': 0, 'config.shuffle_buckets': 0, 'config.shuffle_within_bucket': 0,
     'config.dynamic_batch_size': 0, 'config.dataset': 'a0736331508c8615',
     'config.batch_sizes': '79c6c4115855f363',
     'config.order_version': 101, 'layout.num_replicas': 2}

    Raises:
        TypeError: If an argument has the wrong type (a bool where an int is meant, too).
        ValueError: If an argument is out of range (rank outside ``[0, num_replicas)``, a batch
            size ``<= 0``), the dataset is empty, or ``drop_last=True`` leaves no batch at all.
    """

    state_kind: ClassVar[str] = "sequential_bucket"
    progress_keys: ClassVar[tuple[str, ...]] = ("bucket", "consumed")
    #: The default mode resumes on another ``num_replicas``; ``compat="nemo"`` records it in its
    #: configuration and so refuses another one.
    elastic: ClassVar[bool] = True

    def __init__(
        self,
        dataset: Any,
        base_batch_size: int = 32,
        base_resolution: tuple[int, int] = (512, 512),
        drop_last: bool = True,
        shuffle_buckets: bool = True,
        shuffle_within_bucket: bool = True,
        dynamic_batch_size: bool = False,
        seed: int = 42,
        num_replicas: int | None = None,
        rank: int | None = None,
        *,
        compat: Compat = "default",
        mesh: Any = None,
        dp_dims: Sequence[str] | None = None,
    ) -> None:
        CursorBatchSampler.__init__(self)
        self._compat: Compat = check_choice("compat", compat, COMPAT_MODES)  # type: ignore[assignment]
        self._base_batch_size = check_int("base_batch_size", base_batch_size, min_value=1)
        self._base_resolution = _check_resolution(base_resolution)
        self._drop_last = check_bool("drop_last", drop_last)
        self._shuffle_buckets = check_bool("shuffle_buckets", shuffle_buckets)
        self._shuffle_within = check_bool("shuffle_within_bucket", shuffle_within_bucket)
        self._dynamic = check_bool("dynamic_batch_size", dynamic_batch_size)
        # capped in every mode: a larger seed would push the state past its 512-byte budget
        max_seed = _MAX_NEMO_SEED if self._compat == "nemo" else 2**64 - 1
        self._seed = check_int("seed", seed, min_value=0, max_value=max_seed)
        self._topology = resolve_topology(num_replicas, rank, mesh=mesh, dp_dims=dp_dims)
        self._dataset = dataset
        self._table = _dataset_table(dataset)
        self._batch_sizes = bucket_batch_sizes(
            self._table.resolutions,
            base_batch_size=self._base_batch_size,
            base_resolution=self._base_resolution,
            dynamic=self._dynamic,
            batch_size_fn=self._batch_size_fn() if self._dynamic else None,
        )
        self._batch_digest = _digest(self._batch_sizes)
        # Batch counts, drops and pads do not depend on the order, so one plan tells them all.
        plan = self._plan(0)
        self._epoch_batches = plan.total_batches
        self._dropped = plan.samples_dropped
        self._padded = plan.samples_padded
        self._check_something_to_train(plan)

    # -- configuration, read-only (NeMo's attribute names) ----------------------------------------
    @property
    def dataset(self) -> Any:
        """The dataset the buckets come from."""
        return self._dataset

    @property
    def compat(self) -> Compat:
        """``"default"`` or ``"nemo"``."""
        return self._compat

    @property
    def base_batch_size(self) -> int:
        """Per-rank batch size (or its value at :attr:`base_resolution` if dynamic)."""
        return self._base_batch_size

    @property
    def base_resolution(self) -> tuple[int, int]:
        """Reference ``(width, height)`` of dynamic batch sizes."""
        return self._base_resolution

    @property
    def drop_last(self) -> bool:
        """Whether each bucket's incomplete global batch is dropped (else padded)."""
        return self._drop_last

    @property
    def shuffle_buckets(self) -> bool:
        """Whether the bucket order changes every epoch."""
        return self._shuffle_buckets

    @property
    def shuffle_within_bucket(self) -> bool:
        """Whether each bucket is shuffled every epoch."""
        return self._shuffle_within

    @property
    def dynamic_batch_size(self) -> bool:
        """Whether batch sizes scale with the bucket's pixels."""
        return self._dynamic

    @property
    def seed(self) -> int:
        """The seed."""
        return self._seed

    @property
    def topology(self) -> Topology:
        """This process's data-parallel place (rank, size, replica group)."""
        return self._topology

    @property
    def num_replicas(self) -> int:
        """Data-parallel size ``R``."""
        return self._topology.dp_size

    @property
    def rank(self) -> int:
        """Data-parallel rank."""
        return self._topology.dp_rank

    def _batch_size_fn(self) -> Callable[[tuple[int, int], int, tuple[int, int]], int]:
        if self.compat == "nemo":
            from dataorder.buckets import MultiTierBucketCalculator

            return MultiTierBucketCalculator(compat="nemo").get_dynamic_batch_size
        calculator = getattr(self.dataset, "calculator", None)
        fn = getattr(calculator, "get_dynamic_batch_size", None)
        if fn is None:
            raise TypeError(
                "dynamic_batch_size=True needs dataset.calculator.get_dynamic_batch_size; got "
                f"dataset.calculator={calculator!r}"
            )
        return fn  # type: ignore[no-any-return]

    def _check_something_to_train(self, plan: BucketEpochPlan) -> None:
        if not self.drop_last:
            return  # every bucket yields at least its tail batch
        empty = plan.full_blocks == 0
        if not empty.any():
            return
        block = (
            f"per-rank batch x num_replicas = {self.base_batch_size} x {self.num_replicas}"
            if not self.dynamic_batch_size
            else f"per-rank batch (dynamic) x num_replicas = b x {self.num_replicas}"
        )
        if plan.total_batches == 0:
            raise ValueError(
                f"drop_last=True leaves nothing to train on: each of the {plan.num_buckets} "
                f"buckets holds fewer samples than one global batch ({block}; largest bucket "
                f"{int(plan.sizes.max())} samples). Use drop_last=False, a smaller "
                "base_batch_size or fewer replicas"
            )
        warnings.warn(
            f"drop_last=True removes {int(empty.sum())} of {plan.num_buckets} buckets entirely "
            f"({int(plan.sizes[empty].sum())} of {self._table.num_samples} samples): each holds "
            f"fewer samples than one global batch ({block}). drop_last=False keeps them, with "
            "fewer than num_replicas repeated samples per bucket",
            UserWarning,
            stacklevel=3,
        )

    # -- planning ---------------------------------------------------------------------------------
    def _plan(self, epoch: int, world: int | None = None) -> BucketEpochPlan:
        world = self.num_replicas if world is None else world
        order_fn = nemo_bucket_order if self.compat == "nemo" else bucket_order
        order = order_fn(
            self._table.num_buckets, seed=self.seed, epoch=epoch, shuffle=self.shuffle_buckets
        )
        return plan_bucket_epoch(
            order,
            self._table.sizes,
            self._batch_sizes,
            world=world,
            drop_last=self.drop_last,
            compat=self.compat,
        )

    def plan(self, epoch: int | None = None) -> BucketEpochPlan:
        """The :class:`BucketEpochPlan` of ``epoch`` (default: the cursor's epoch)."""
        plan = self.epoch_plan(epoch)
        assert isinstance(plan, _BucketEpoch)  # what _make_plan builds
        return plan.plan

    @property
    def bucket_table(self) -> BucketTable:
        """The dataset's :class:`~dataorder.multires.BucketTable`."""
        return self._table

    @property
    def batch_sizes(self) -> IntArray:
        """Shape ``(B,)``: per-rank batch size of each bucket, by bucket row (a copy)."""
        out: IntArray = self._batch_sizes.copy()
        return out

    @property
    def samples_dropped(self) -> int:
        """Samples no rank reads in an epoch (``drop_last=True`` only), summed over ranks."""
        return self._dropped

    @property
    def samples_padded(self) -> int:
        """Slots per epoch that repeat a sample of their bucket, summed over ranks."""
        return self._padded

    # -- CursorSampler ----------------------------------------------------------------------------
    def order_config(self) -> dict[str, Scalar]:
        """Fields that fix the order and the batches; a state must match them to load."""
        config: dict[str, Scalar] = {
            "compat": self.compat,
            "seed": self.seed,
            "base_batch_size": self.base_batch_size,
            "drop_last": int(self.drop_last),
            "shuffle_buckets": int(self.shuffle_buckets),
            "shuffle_within_bucket": int(self.shuffle_within_bucket),
            "dynamic_batch_size": int(self.dynamic_batch_size),
            "dataset": self._table.fingerprint,
            "batch_sizes": self._batch_digest,
            # 0 in compat="nemo": its order comes from torch, not from dataorder's constructions
            "order_version": 0
            if self.compat == "nemo"
            else 100 * PERMUTATION_VERSION + KEY_DERIVATION_VERSION,
        }
        if self.compat == "nemo":
            config["num_replicas"] = self.num_replicas
        return config

    def layout_info(self) -> dict[str, int]:
        """``num_replicas`` (recorded, never the rank)."""
        return {"num_replicas": self.num_replicas}

    @property
    def dp_rank(self) -> int:
        """Data-parallel rank (the same as :attr:`rank`)."""
        return self._topology.dp_rank

    def _chunk_steps(self) -> int:
        return max(1, _CHUNK_POSITIONS // int(self._batch_sizes.max()))

    def _make_plan(self, epoch: int, layout: Mapping[str, int]) -> _BucketEpoch:
        world = check_int("num_replicas", layout["num_replicas"], min_value=1)
        return _BucketEpoch(self._plan(epoch, world), self._within_orders(epoch), self._table)

    def _within_orders(self, epoch: int) -> Callable[[int, BucketEpochPlan], _Within]:
        """``within(ordinal, plan)``: the within-bucket order of the bucket at that ordinal."""
        if not self.shuffle_within_bucket:
            return lambda k, plan: _identity
        if self.compat == "default":

            def keyed(k: int, plan: BucketEpochPlan) -> _Within:
                key = derive_key(
                    self.seed,
                    epoch=epoch,
                    stream=_STREAM,
                    purpose="within-bucket",
                    extra=(int(plan.order[k]),),
                )
                return Permutation(int(plan.sizes[k]), key)

            return keyed
        # NeMo draws every permutation from one generator: the bucket order first, then one per
        # bucket in visiting order, dropped buckets included. Reaching ordinal k draws (and keeps)
        # those before it: compat="nemo" materialises its orders, as NeMo does.
        drawn: list[_Within] = []
        generators: list[torch.Generator] = []

        def nemo(k: int, plan: BucketEpochPlan) -> _Within:
            if not generators:
                generators.append(_nemo_generator(self.seed, epoch))
                if self.shuffle_buckets:
                    torch.randperm(plan.num_buckets, generator=generators[0])
            while len(drawn) <= k:
                size = int(plan.sizes[len(drawn)])
                drawn.append(_table_within(torch.randperm(size, generator=generators[0]).numpy()))
            return drawn[k]

        return nemo

    # -- inspection -------------------------------------------------------------------------------
    def get_batch_info(self, batch_idx: int, *, epoch: int | None = None) -> dict[str, Any]:
        """Describe batch ``batch_idx`` of the cursor's epoch (or ``epoch``) as it is yielded.

        ``batch_idx`` counts from the start of the epoch, whatever the cursor, and the answer
        follows the epoch's real bucket order (shuffled or not). O(log B). Name the epoch when
        the pass may have run out: that moves the cursor to the next epoch, and a DataLoader with
        workers runs it out while training still holds the epoch's last batches.

        Returns:
            ``{"epoch", "bucket" (row of the dataset's bucket table), "ordinal" (place in the
            epoch's bucket order), "batch_in_bucket", "bucket_key" (NeMo's
            ``(aspect_name, (w, h))``), "resolution", "aspect_name", "batch_size" (this batch's
            per-rank size, the same on every rank; smaller for a bucket's last batch with
            ``drop_last=False``), "bucket_batch_size" (the bucket's per-rank batch size, what
            NeMo calls ``batch_size``), "global_batch_size" (this batch over all ranks),
            "padding" (slots of this rank's batch that repeat a sample), "padding_global" (the
            same over all ranks)}``.

        Raises:
            ValueError: If ``batch_idx`` is outside ``[0, len)`` of a whole epoch (NeMo returns
                ``{}`` past the end and the first bucket for a negative index; both are errors
                here, in every mode).
        """
        e = self._epoch if epoch is None else check_int("epoch", epoch, min_value=0)
        plan = self.plan(e)
        batch_idx = check_int("batch_idx", batch_idx, min_value=0, max_value=plan.total_batches - 1)
        k, b = plan.locate(batch_idx)
        layout = plan.layout(k)
        bucket = int(plan.order[k])
        per = layout.batch_size_at(b)
        start = layout.batch_start(b)
        # this rank's slots are start + rank + R * i, i < per; those >= n are padding
        first_pad = max(0, -(-(layout.n - start - self.rank) // layout.world))
        name, res = self._table.key(bucket)
        return {
            "epoch": e,
            "bucket": bucket,
            "ordinal": k,
            "batch_in_bucket": b,
            "bucket_key": (name, res),
            "resolution": res,
            "aspect_name": name,
            "batch_size": per,
            "bucket_batch_size": layout.per_rank,
            "global_batch_size": per * layout.world,
            "padding": max(0, per - first_pad),
            "padding_global": min(
                per * layout.world, max(0, start + per * layout.world - layout.n)
            ),
        }

    def __repr__(self) -> str:
        return (
            f"SequentialBucketSampler(buckets={self._table.num_buckets}, "
            f"samples={self._table.num_samples}, base_batch_size={self.base_batch_size}, "
            f"drop_last={self.drop_last}, shuffle_buckets={self.shuffle_buckets}, "
            f"shuffle_within_bucket={self.shuffle_within_bucket}, "
            f"dynamic_batch_size={self.dynamic_batch_size}, seed={self.seed}, "
            f"rank={self.rank}, num_replicas={self.num_replicas}, compat={self.compat!r}; "
            f"epoch={self._epoch}, bucket={self._position['bucket']}, "
            f"consumed={self._position['consumed']})"
        )


def _check_resolution(value: object) -> tuple[int, int]:
    what = "a (width, height) pair of positive ints"
    if not isinstance(value, tuple | list) or len(value) != 2:
        fail("base_resolution", what, value, TypeError)
    w, h = value
    for v in (w, h):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            fail("base_resolution", what, value, TypeError)
        if v <= 0:
            fail("base_resolution", what, value)
    return int(w), int(h)
