"""The diffusion bucket sampler: one bucket at a time, every rank in lock-step, exact O(1) resume.

:class:`BucketSampler` (and :class:`SequentialBucketSampler`, its name in NeMo Automodel, of which
it is a drop-in) is used as ``DataLoader(dataset, batch_sampler=sampler)`` over a
:class:`~dataorder.diffusion.sampler.dataset.BaseMultiresolutionDataset`. Each item it yields is one
rank's batch: dataset indices that all share one bucket (one resolution). A bucket is a shape: a
video dataset's buckets are ``(w, h, frames)`` and are read the same way, with dynamic batch
sizes from the video calculator's cost model (:mod:`dataorder.diffusion.sampler.batches`).

How an epoch is laid out is :mod:`dataorder.core.buckets` (the lock-step bucket batching, over
the dataset's bucket table through :mod:`dataorder.diffusion.sampler.plan`): the buckets one after
another, each a stream of positions cut into global batches of ``b_j x R`` (``b_j`` the bucket's
per-rank batch size, ``R`` the number of data-parallel ranks), rank ``r`` reading positions
``r, r + R, ...`` of each. So at every step every rank reads the same bucket with the same batch
size, and all ranks have the same number of steps, by construction. The end of each bucket is
decided for the whole job:

* ``drop_last=True``: only whole global batches of real samples; the rest of the bucket is
  dropped. A bucket smaller than one global batch gives no batch at all (a warning says how many
  buckets and samples that is).
* ``drop_last=False``: whole global batches, then one smaller global batch of ``ceil(t / R)``
  per rank for the ``t`` samples left; its fewer than ``R`` padding positions repeat the
  bucket's own samples (so shapes stay valid). Every sample is read each epoch.

Resume. The cursor is ``(epoch, bucket, consumed)``: the ordinal of the current bucket in this
epoch's order and the positions of it that all ranks together have taken. Loading a state sets
the cursor; nothing is replayed. The bucket streams do not depend on ``R``, so in the default
mode a state saved on 8 ranks continues on 4 (or any ``R'`` with ``b_j x R'`` dividing
``consumed``); ``compat="nemo"`` (:mod:`dataorder.diffusion.sampler.nemo_order`) records
``num_replicas`` and refuses another one, as its padding and drop rule depend on it. Epochs,
``len()`` and checkpoints follow the loop contract of :mod:`dataorder.core.cursor`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from torch.utils.data import Sampler

from dataorder._validate import check_bool, check_choice, check_int, fail
from dataorder.core.assembly import (
    AssembledSampler,
    Field,
    Given,
    Layout,
    Mode,
    Modes,
    Schema,
    flag,
    recorded,
)
from dataorder.core.buckets import (
    BUCKET_ORDERS,
    MAX_INTERLEAVE_UNIT,
    BucketEpoch,
    BucketEpochPlan,
    longest_shape_run,
    plan_sampler_epoch,
)
from dataorder.core.cursor import CursorBatchSampler
from dataorder.core.keys import MAX_SEED
from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.core.state import Scalar
from dataorder.core.topology import Topology, resolve_topology
from dataorder.diffusion.sampler.batches import (
    batch_info,
    check_resolution,
    check_something_to_train,
    dataset_batch_sizes,
    dataset_table,
    digest,
)
from dataorder.diffusion.sampler.nemo_order import NEMO_BUCKET_MODE
from dataorder.diffusion.sampler.plan import BucketOrder, KeyedBucketOrder
from dataorder.diffusion.sampler.table import BucketTable

__all__ = ["BUCKET_MODES", "COMPAT_MODES", "BucketSampler", "SequentialBucketSampler"]

Compat = Literal["default", "nemo"]


def _keyed(seed: int, *, shuffle_buckets: bool, num_replicas: int) -> KeyedBucketOrder:
    return KeyedBucketOrder(seed)


#: The bucket orders, by ``compat=`` (NOTE [ Adding a sampler or a compat mode ] in
#: :mod:`dataorder.core.assembly`).
BUCKET_MODES = Modes(
    family="SequentialBucketSampler",
    field="compat",
    modes=(
        Mode(
            "default",
            build=_keyed,
            records={"default": {"compat": "default"}},
            summary="dataorder's keyed order",
        ),
        NEMO_BUCKET_MODE,
    ),
)
#: Values of ``compat=``.
COMPAT_MODES: tuple[str, ...] = BUCKET_MODES.names

IntArray = npt.NDArray[np.int64]

# A rank's next batches are mapped together, up to this many positions: a vectorised
# Permutation call has a fixed cost, so a chunk amortises it over many steps and still keeps
# the first batch of an epoch (or of a resume) near a millisecond.
_CHUNK_POSITIONS = 8192


def _interleaved() -> Field:
    """``config.interleaved``: the interleaved order and its unit in one field (absent in the
    sequential order), so the state stays within MAX_STATE_BYTES (NOTE [ State size ])."""

    def read(sampler: SequentialBucketSampler) -> Scalar | None:
        return sampler.interleave_unit

    def args(value: Scalar) -> Mapping[str, Any]:
        return {"bucket_order": "interleaved", "interleave_unit": value}

    label = (
        "interleave_unit (state key config.interleaved: the chunk size U of "
        "bucket_order='interleaved', absent in the sequential order)"
    )
    return Field("interleaved", read, args, label, optional=True)


class BucketSampler(AssembledSampler[list[int]], CursorBatchSampler[list[int]], Sampler[list[int]]):
    """Batches of one bucket at a time, the same bucket and batch size on every rank at each step.

    Two bucket orders (NOTE [ Interleaved buckets ] in :mod:`dataorder.core.buckets`):
    ``"sequential"`` (the default, and NeMo's: :class:`SequentialBucketSampler` is NeMo's name
    of this class) runs each bucket to its end before the next; ``"interleaved"`` spreads
    chunks of ``interleave_unit`` global batches of every bucket evenly through the epoch, so
    every stretch of training sees the dataset's mixture of shapes (each step still reads one
    shape on every rank). Choose interleaved for training from scratch or fine-tuning on many
    shapes, where long runs of one shape bias the updates; sequential when a bucket's batches
    should stay together (profiling one shape, or reproducing NeMo).

    Args:
        dataset: A :class:`~dataorder.diffusion.sampler.dataset.BaseMultiresolutionDataset`, or any
            dataset with NeMo's ``sorted_bucket_keys`` and ``bucket_groups`` (converted once).
        base_batch_size: Per-rank batch size, or its value at ``base_resolution`` if
            ``dynamic_batch_size``.
        base_resolution: Reference ``(width, height)`` for dynamic batch sizes.
        drop_last: Drop each bucket's samples that do not fill a whole global batch; if False,
            pad each bucket's last global batch with repeats of its own samples.
        shuffle_buckets: Visit the buckets in a new order every epoch (else fewest pixels first).
        shuffle_within_bucket: Shuffle each bucket every epoch (else dataset order).
        dynamic_batch_size: Per-bucket batch size from ``dataset.calculator``'s
            ``get_dynamic_batch_size`` (NeMo's formula in ``compat="nemo"``).
        seed: An int in ``[0, 2**63)`` (:data:`~dataorder.core.keys.MAX_SEED`).
        num_replicas: Data-parallel size; default: from ``mesh``, the process group or the
            environment (:func:`~dataorder.core.topology.resolve_topology`).
        rank: Data-parallel rank, in ``[0, num_replicas)``; default as ``num_replicas``.
        compat: ``"default"`` (structured keys, elastic) or ``"nemo"`` (NeMo Automodel's exact
            batches; :mod:`dataorder.diffusion.sampler.nemo_order`).
        bucket_order: ``"sequential"`` or ``"interleaved"`` (see above). With
            ``"interleaved"``, ``shuffle_buckets`` draws a new arrangement every epoch (else
            the same one), and ``compat`` must be ``"default"``.
        interleave_unit: ``U``, the chunk size in global batches of ``U`` ranks (interleaved
            only), at most :data:`~dataorder.core.buckets.MAX_INTERLEAVE_UNIT`
            (65,536); default ``num_replicas``. A state resumes on any ``num_replicas`` that
            divides it: pick the largest job size you may run on (e.g. 64) to stay elastic. The
            state records it as ``config.interleaved`` (absent in the sequential order).
        mesh: A ``DeviceMesh``: rank and size are the data-parallel group's, not the world's.
        dp_dims: The mesh's data-parallel dims (default: the dims named ``dp``...).
        topology: A :class:`~dataorder.core.topology.Topology` value instead of ``rank`` and
            ``num_replicas`` (or ``mesh``).

    Worked example: samples 0-4 are 256x256 and 5-7 are 320x192, ``base_batch_size=2``, two
    ranks, no shuffling (the 320x192 bucket has fewer pixels, so it comes first)::

        drop_last=False: rank 0: [5, 7], [0, 2], [4]    rank 1: [6, 5], [1, 3], [0]
        drop_last=True:  rank 0: [0, 2]                 rank 1: [1, 3]

    With ``drop_last=False`` the 3-sample bucket fills one global batch of 2 x 2 with one
    padding slot (position 3 repeats sample 5), and the 5-sample bucket ends with a global batch
    of 1 per rank whose second slot repeats sample 0: ``samples_padded == 2``. With
    ``drop_last=True`` the 320x192 bucket is smaller than one global batch and is dropped whole
    (with a warning), as is sample 4: ``samples_dropped == 4``.

    >>> from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
    >>> ds = BaseMultiresolutionDataset.from_bucket_ids(
    ...     [0, 0, 0, 0, 0, 1, 1, 1], resolutions=[(256, 256), (320, 192)])
    >>> s = BucketSampler(ds, base_batch_size=2, drop_last=False,
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
    bucket all ranks have taken; ``layout.num_replicas`` is informational in the default mode;
    ``compat="nemo"`` records ``config.num_replicas`` and NeMo's ``batches_yielded`` instead,
    NOTE [ NeMo bucket states ]):

    >>> s = BucketSampler(ds, base_batch_size=2, drop_last=False,
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

    schema = Schema(
        kind="sequential_bucket",
        fields=(
            recorded("seed"),
            recorded("base_batch_size"),
            flag("drop_last"),
            flag("shuffle_buckets"),
            flag("shuffle_within_bucket"),
            flag("dynamic_batch_size"),
            Field("dataset", lambda s: s.bucket_table.fingerprint),
            Field("batch_sizes", lambda s: s._batch_sizes_digest),
            _interleaved(),
        ),
        layout=Layout(rank="rank", size="num_replicas"),
        modes=BUCKET_MODES,
        given=(
            Given(
                "dataset", "the dataset the state was written over (a state holds only its digest)"
            ),
            Given(
                "base_resolution",
                "the reference resolution of dynamic batch sizes (a state holds a digest of the "
                "batch sizes)",
                required=False,
            ),
        ),
        progress=("bucket", "consumed"),
        steps="batches",
    )

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
        topology: Topology | None = None,
        bucket_order: str = "sequential",
        interleave_unit: int | None = None,
    ) -> None:
        AssembledSampler.__init__(self)
        mode = BUCKET_MODES.choose(compat)
        self._bucket_order = check_choice("bucket_order", bucket_order, BUCKET_ORDERS)
        if self._bucket_order == "interleaved" and mode.name != "default":
            fail("bucket_order", "'sequential' with compat='nemo' (NeMo's order)", bucket_order)
        if interleave_unit is not None and self._bucket_order != "interleaved":
            fail("interleave_unit", "None unless bucket_order='interleaved'", interleave_unit)
        self._base_batch_size = check_int(
            "base_batch_size", base_batch_size, min_value=1, max_value=MAX_BATCH_SIZE
        )
        self._base_resolution = check_resolution(base_resolution)
        self._drop_last = check_bool("drop_last", drop_last)
        self._shuffle_buckets = check_bool("shuffle_buckets", shuffle_buckets)
        self._shuffle_within = check_bool("shuffle_within_bucket", shuffle_within_bucket)
        self._dynamic = check_bool("dynamic_batch_size", dynamic_batch_size)
        # capped in every mode: a larger seed would push the state past MAX_STATE_BYTES
        self._seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
        self._topology = resolve_topology(
            num_replicas, rank, mesh=mesh, dp_dims=dp_dims, topology=topology
        )
        # NOTE [ Bucket order strategies ]: chosen once, here
        self._strategy: BucketOrder = mode.build(
            self._seed,
            shuffle_buckets=self._shuffle_buckets,
            num_replicas=self._topology.dp_size,
        )
        self._unit = 0
        if self._bucket_order == "interleaved":
            dp = self._topology.dp_size
            if interleave_unit is None and dp > MAX_INTERLEAVE_UNIT:
                fail(
                    "num_replicas",
                    f"at most {MAX_INTERLEAVE_UNIT} with bucket_order='interleaved'",
                    dp,
                )
            self._unit = (
                dp
                if interleave_unit is None
                else check_int(
                    "interleave_unit", interleave_unit, min_value=1, max_value=MAX_INTERLEAVE_UNIT
                )
            )
            if self._unit % dp:
                fail(
                    "interleave_unit",
                    f"a multiple of num_replicas={dp} (each chunk is interleave_unit / "
                    "num_replicas global batches)",
                    interleave_unit,
                )
        self._dataset = dataset
        self._table = dataset_table(dataset)
        self._batch_sizes = dataset_batch_sizes(
            dataset,
            self._table,
            self._strategy,
            base_batch_size=self._base_batch_size,
            base_resolution=self._base_resolution,
            dynamic=self._dynamic,
        )
        # once, not on each state_dict() and load_state_dict() that records or compares it
        self._batch_sizes_digest = digest(self._batch_sizes)
        # Batch counts, drops and pads do not depend on the order, so one plan tells them all.
        check_something_to_train(
            self.bucket_plan(0),
            drop_last=self._drop_last,
            base_batch_size=self._base_batch_size,
            dynamic=self._dynamic,
            num_replicas=self.num_replicas,
            num_samples=self._table.num_samples,
        )

    # -- configuration, read-only (NeMo's attribute names) ----------------------------------------
    @property
    def dataset(self) -> Any:
        """The dataset the buckets come from."""
        return self._dataset

    @property
    def compat(self) -> Compat:
        """``"default"`` or ``"nemo"``."""
        return "nemo" if self._strategy.name == "nemo" else "default"

    @property
    def bucket_order(self) -> str:
        """``"sequential"`` or ``"interleaved"``."""
        return self._bucket_order

    @property
    def interleave_unit(self) -> int | None:
        """``U`` of the interleaved order (chunks of ``U`` global batches of ``U`` ranks)."""
        return self._unit or None

    def longest_shape_run(self, epoch: int | None = None) -> int:
        """The longest stretch of consecutive steps of ``epoch`` that read one bucket."""
        return longest_shape_run(self.bucket_plan(epoch))

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

    @property
    def dp_rank(self) -> int:
        """Data-parallel rank (the same as :attr:`rank`)."""
        return self._topology.dp_rank

    # -- planning ---------------------------------------------------------------------------------
    def bucket_plan(self, epoch: int | None = None) -> BucketEpochPlan:
        """The :class:`~dataorder.core.buckets.BucketEpochPlan` of ``epoch`` (default:
        the cursor's epoch) on this layout: its runs of buckets and their global batches (the
        bucket view of :meth:`epoch_plan`)."""
        plan = self.epoch_plan(epoch)
        if not isinstance(plan, BucketEpoch):  # pragma: no cover - what _make_plan builds
            raise TypeError(f"unexpected epoch plan {plan!r}")
        return plan.plan

    def plan(self, epoch: int | None = None) -> BucketEpochPlan:
        """Deprecated 0.2 name of :meth:`bucket_plan` (beside :meth:`epoch_plan` it read as a
        second plan of the epoch)."""
        warnings.warn(
            f"{type(self).__name__}.plan() is deprecated; use .bucket_plan()", DeprecationWarning, 2
        )
        return self.bucket_plan(epoch)

    def _make_plan(self, epoch: int, layout: Mapping[str, int]) -> BucketEpoch[list[int]]:
        # a layout field the order's config records is not repeated in the layout (NeMo's mode)
        dp_size = check_int(
            "num_replicas", layout.get("num_replicas", self.num_replicas), min_value=1
        )
        plan = plan_sampler_epoch(
            self._strategy,
            self._table.sizes,
            self._batch_sizes,
            epoch=epoch,
            dp_size=dp_size,
            drop_last=self.drop_last,
            shuffle_buckets=self.shuffle_buckets,
            interleave_unit=self._unit,
        )
        within = self._strategy.within_orders(epoch=epoch, shuffle=self.shuffle_within_bucket)
        return BucketEpoch(plan, within, self._table)

    def _chunk_steps(self) -> int:
        return max(1, _CHUNK_POSITIONS // int(self._batch_sizes.max()))

    @property
    def bucket_table(self) -> BucketTable:
        """The dataset's :class:`~dataorder.diffusion.sampler.table.BucketTable`."""
        return self._table

    @property
    def batch_sizes(self) -> IntArray:
        """Shape ``(B,)``: per-rank batch size of each bucket, by bucket row (a copy)."""
        out: IntArray = self._batch_sizes.copy()
        return out

    @property
    def samples_dropped(self) -> int:
        """Samples no rank reads in an epoch (``drop_last=True`` only), summed over ranks."""
        return self.bucket_plan(0).samples_dropped

    @property
    def samples_padded(self) -> int:
        """Slots per epoch that repeat a sample of their bucket, summed over ranks."""
        return self.bucket_plan(0).samples_padded

    # -- inspection -------------------------------------------------------------------------------
    def get_batch_info(self, batch_idx: int, *, epoch: int | None = None) -> dict[str, Any]:
        """Describe batch ``batch_idx`` of the cursor's epoch (or ``epoch``) as it is yielded.

        ``batch_idx`` counts from the start of the epoch, whatever the cursor, and the answer
        follows the epoch's real bucket order (shuffled or not). O(log B). Name the epoch when
        a new pass may have started: the pass after one that ran out starts the next epoch, and
        a DataLoader with workers starts it while training still holds the last batches.

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
        plan = self.bucket_plan(e)
        batch_idx = check_int("batch_idx", batch_idx, min_value=0, max_value=plan.num_steps - 1)
        return batch_info(plan, self._table, batch_idx, rank=self.rank, epoch=e)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(buckets={self._table.num_buckets}, "
            f"samples={self._table.num_samples}, base_batch_size={self.base_batch_size}, "
            f"drop_last={self.drop_last}, shuffle_buckets={self.shuffle_buckets}, "
            f"shuffle_within_bucket={self.shuffle_within_bucket}, "
            f"dynamic_batch_size={self.dynamic_batch_size}, seed={self.seed}, "
            f"rank={self.rank}, num_replicas={self.num_replicas}, compat={self.compat!r}; "
            f"epoch={self._epoch}, bucket={self._position['bucket']}, "
            f"consumed={self._position['consumed']})"
        )


class SequentialBucketSampler(BucketSampler):
    """NeMo Automodel's name of :class:`BucketSampler`: the same class, arguments and states.

    A drop-in for NeMo's ``SequentialBucketSampler``: its buckets come one after another, in
    NeMo's order with ``compat="nemo"``. ``bucket_order="interleaved"`` still works here (the 0.2
    spelling), but reads against the name; write ``BucketSampler(..., bucket_order=
    "interleaved")``.
    """
