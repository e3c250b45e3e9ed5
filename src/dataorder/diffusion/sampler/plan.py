"""The image and video bucket samplers' epoch plan: the core's lock-step bucket batching
(:mod:`dataorder.core.buckets`) over a dataset's :class:`~dataorder.diffusion.sampler.table.
BucketTable`, with what only images and videos need: per-bucket batch sizes from resolutions,
a bucket order that may bring its own dynamic batch size rule, and the default order's stream.

How an epoch is laid out (runs of one bucket, sequential or interleaved), NOTE [ Interleaved
buckets ] and NOTE [ Bucket order strategies ] are in :mod:`dataorder.core.buckets`; the names
that lived here before are re-exported from there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int
from dataorder.core import buckets
from dataorder.core.buckets import (
    BUCKET_ORDERS,
    MAX_INTERLEAVE_UNIT,
    BucketEpoch,
    BucketEpochPlan,
    Within,
    identity,
    longest_shape_run,
    plan_bucket_epoch,
    plan_interleaved_epoch,
    plan_sampler_epoch,
)

__all__ = [
    "BUCKET_ORDERS",
    "BUCKET_STREAM",
    "MAX_INTERLEAVE_UNIT",
    "BucketEpoch",
    "BucketEpochPlan",
    "BucketOrder",
    "KeyedBucketOrder",
    "Within",
    "bucket_batch_sizes",
    "identity",
    "longest_shape_run",
    "plan_bucket_epoch",
    "plan_interleaved_epoch",
    "plan_sampler_epoch",
]

IntArray = npt.NDArray[np.int64]

#: The stream name of every key of the bucket sampler's default order.
BUCKET_STREAM = "sequential_bucket"


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


class BucketOrder(buckets.BucketOrder, Protocol):
    """A bucket order strategy of the image and video samplers: the core's
    :class:`~dataorder.core.buckets.BucketOrder` plus the dynamic batch size rule it may bring."""

    def batch_size_fn(
        self, dataset: Any
    ) -> Callable[[tuple[int, int], int, tuple[int, int]], int] | None:
        """The dynamic batch size rule, or None to take the dataset calculator's."""
        ...


class KeyedBucketOrder(buckets.KeyedBucketOrder):
    """dataorder's bucket order (:class:`~dataorder.core.buckets.KeyedBucketOrder`) on the
    stream ``"sequential_bucket"``, where ``j`` is the bucket's row in the dataset's sorted
    bucket table; it takes the dataset calculator's dynamic batch size rule."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed, stream=BUCKET_STREAM)

    def batch_size_fn(
        self, dataset: Any
    ) -> Callable[[tuple[int, int], int, tuple[int, int]], int] | None:
        return None
