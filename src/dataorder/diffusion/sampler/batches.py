"""What the bucket sampler reads from a dataset, and what one of its batches is. No torch here.

:class:`~dataorder.diffusion.sampler.sampler.SequentialBucketSampler` holds configuration and a
cursor; these module-level functions give it its inputs and describe its output:

* :func:`dataset_table`: the dataset's :class:`~dataorder.diffusion.sampler.table.BucketTable`;
* :func:`dataset_batch_sizes`: each bucket's per-rank batch size. Image buckets scale with their
  pixels (the calculator's ``get_dynamic_batch_size``, or NeMo's formula in its mode); video
  buckets with their latent tokens, through the video calculator's cost model, relative to its
  full budget (NOTE [ Cost-model batch sizes ] in :mod:`dataorder.diffusion.buckets.cost`);
* :func:`check_something_to_train`: the refusal (or warning) when ``drop_last`` leaves buckets,
  or everything, without a whole global batch;
* :func:`batch_info`: what step ``k`` of an epoch plan is on one rank.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import fail
from dataorder.core.buckets import BucketEpochPlan
from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.diffusion.sampler.plan import BucketOrder, bucket_batch_sizes
from dataorder.diffusion.sampler.table import BucketTable

__all__ = [
    "DEFAULT_BASE_RESOLUTION",
    "batch_info",
    "check_resolution",
    "check_something_to_train",
    "dataset_batch_sizes",
    "dataset_table",
    "digest",
]

IntArray = npt.NDArray[np.int64]

#: ``base_resolution`` of the sampler when none is given (NeMo's default).
DEFAULT_BASE_RESOLUTION = (512, 512)


def dataset_table(dataset: object) -> BucketTable:
    """The dataset's bucket table, or one converted from NeMo's two attributes (done once)."""
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


def digest(values: IntArray) -> str:
    """16 hex digits of an int array (what a state records of the batch sizes)."""
    data = np.ascontiguousarray(values, "<i8").tobytes()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def check_resolution(value: object) -> tuple[int, int]:
    """``base_resolution`` as a ``(width, height)`` pair of positive ints."""
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


def dataset_batch_sizes(
    dataset: Any,
    table: BucketTable,
    order: BucketOrder,
    *,
    base_batch_size: int,
    base_resolution: tuple[int, int],
    dynamic: bool,
) -> IntArray:
    """Per-rank batch size of every bucket of ``table``, by row (shape ``(B,)``).

    Fixed: ``base_batch_size`` everywhere. Dynamic, image buckets: the order's rule (NeMo's in
    its mode), else ``dataset.calculator.get_dynamic_batch_size``, with ``base_batch_size`` at
    ``base_resolution``. Dynamic, video buckets: ``dataset.calculator.cost_model`` over the
    table's tokens, ``base_batch_size`` being what fits the calculator's full budget
    (``max_tokens``); ``base_resolution`` has no meaning there and must stay at its default.
    Dynamic sizes are clamped, as the calculators clamp them, and never exceed
    ``MAX_BATCH_SIZE``, the largest per-rank batch a plan takes.

    Raises:
        TypeError: If the dataset's calculator cannot size dynamic batches.
        ValueError: For a ``base_resolution`` given to video buckets, or NeMo's pixel formula
            on video buckets.
    """
    if not dynamic or table.frames is None:
        fn = _image_batch_size_fn(dataset, order) if dynamic else None
        sizes = bucket_batch_sizes(
            table.resolutions,
            base_batch_size=base_batch_size,
            base_resolution=base_resolution,
            dynamic=dynamic,
            batch_size_fn=fn,
        )
        return np.minimum(sizes, MAX_BATCH_SIZE)
    if order.batch_size_fn(dataset) is not None:
        raise ValueError(
            "dynamic_batch_size with compat='nemo' is NeMo's pixel formula, which has no frames; "
            "video buckets size their batches by tokens with compat='default'"
        )
    if base_resolution != DEFAULT_BASE_RESOLUTION:
        fail(
            "base_resolution",
            f"{DEFAULT_BASE_RESOLUTION} (unused) for video buckets: their dynamic batch sizes "
            "are relative to the calculator's full token budget, max_tokens",
            base_resolution,
        )
    calculator: Any = getattr(dataset, "calculator", None)
    cost = getattr(calculator, "cost_model", None)
    if cost is None or table.tokens is None:
        raise TypeError(
            "dynamic_batch_size=True on video buckets needs their tokens and "
            "dataset.calculator.cost_model (a VideoBucketCalculator); got "
            f"dataset.calculator={calculator!r}"
        )
    sizes = cost.batch_sizes(
        table.tokens, calculator.max_tokens, base_batch_size, calculator.max_batch_size
    )
    return np.minimum(np.asarray(sizes, dtype=np.int64), MAX_BATCH_SIZE)


def _image_batch_size_fn(dataset: Any, order: BucketOrder) -> Any:
    fn = order.batch_size_fn(dataset)
    if fn is not None:
        return fn
    calculator = getattr(dataset, "calculator", None)
    fn = getattr(calculator, "get_dynamic_batch_size", None)
    if fn is None:
        raise TypeError(
            "dynamic_batch_size=True needs dataset.calculator.get_dynamic_batch_size; got "
            f"dataset.calculator={calculator!r}"
        )
    return fn


def check_something_to_train(
    plan: BucketEpochPlan,
    *,
    drop_last: bool,
    base_batch_size: int,
    dynamic: bool,
    num_replicas: int,
    num_samples: int,
) -> None:
    """Refuse an epoch that ``drop_last`` leaves empty; warn about buckets it removes whole.

    Raises:
        ValueError: If no bucket holds one global batch.
    """
    if not drop_last:
        return  # every bucket yields at least its tail batch
    # per bucket, not per run: the interleaved order cuts a bucket into several runs
    kept = np.zeros(plan.bucket_sizes.size, dtype=bool)
    kept[plan.buckets[plan.segments.full_blocks > 0]] = True
    empty = ~kept
    if not empty.any():
        return
    block = (
        f"per-rank batch x num_replicas = {base_batch_size} x {num_replicas}"
        if not dynamic
        else f"per-rank batch (dynamic) x num_replicas = b x {num_replicas}"
    )
    if plan.num_steps == 0:
        raise ValueError(
            f"drop_last=True leaves nothing to train on: each of the {int(empty.sum())} "
            f"buckets holds fewer samples than one global batch ({block}; largest bucket "
            f"{int(plan.bucket_sizes.max())} samples). Use drop_last=False, a smaller "
            "base_batch_size or a smaller num_replicas"
        )
    warnings.warn(
        f"drop_last=True removes {int(empty.sum())} of {plan.bucket_sizes.size} "
        f"buckets entirely ({int(plan.bucket_sizes[empty].sum())} of {num_samples} samples): each "
        f"holds fewer samples than one global batch ({block}). drop_last=False keeps them, "
        "with fewer than num_replicas repeated samples per bucket",
        UserWarning,
        stacklevel=3,  # the sampler's caller
    )


def batch_info(
    plan: BucketEpochPlan, table: BucketTable, step: int, *, rank: int, epoch: int
) -> dict[str, Any]:
    """Step ``step`` of ``plan`` on ``rank`` (see ``SequentialBucketSampler.get_batch_info``)."""
    k, b = plan.locate(step)
    layout = plan.run_blocks(k)
    bucket = int(plan.buckets[k])
    per = layout.batch_size_at(b)
    start = layout.batch_start(b)
    # this rank's slots are start + rank + R * i, i < per; those >= n are padding
    first_pad = max(0, -(-(layout.n - start - rank) // layout.dp_size))
    key = table.key(bucket)
    info: dict[str, Any] = {
        "epoch": epoch,
        "bucket": bucket,
        "ordinal": k,
        "batch_in_bucket": b,
        "bucket_key": key,
        "resolution": key[1],
        "aspect_name": key[0],
    }
    if table.frames is not None:
        info["frames"] = int(table.frames[bucket])
    info.update(
        batch_size=per,
        bucket_batch_size=layout.per_rank,
        global_batch_size=per * layout.dp_size,
        padding=max(0, per - first_pad),
        padding_global=min(per * layout.dp_size, max(0, start + per * layout.dp_size - layout.n)),
    )
    return info
