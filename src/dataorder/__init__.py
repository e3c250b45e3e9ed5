"""dataorder: which samples every data-parallel rank reads at every step of distributed training.

The global order of an epoch is a pure function of (configuration, seed, epoch, position); ranks
take slices of global blocks, so they stay in lock-step by construction; a sampler's state is a
few integers, so resume is O(1), exact, and elastic when the number of GPUs changes.

Public names are imported lazily: ``import dataorder`` does not import torch, and neither do the
core modules (:mod:`dataorder.permutation`, :mod:`dataorder.keys`, :mod:`dataorder.partition`,
:mod:`dataorder.state`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "BaseMegatronSampler": "dataorder.megatron",
    "BaseMultiresolutionDataset": "dataorder.multires",
    "BatchSizeSchedule": "dataorder.schedule",
    "BucketEpochPlan": "dataorder.bucket_sampler",
    "BucketStats": "dataorder.bucket_stats",
    "BucketTable": "dataorder.multires",
    "CursorSampler": "dataorder.cursor",
    "DataParallelError": "dataorder.verify",
    "DataParallelReport": "dataorder.verify",
    "DistributedSampler": "dataorder.distributed",
    "EpochLayout": "dataorder.partition",
    "Manifest": "dataorder.scan",
    "MegatronPretrainingRandomSampler": "dataorder.megatron",
    "MegatronPretrainingSampler": "dataorder.megatron",
    "MultiTierBucketCalculator": "dataorder.buckets",
    "Permutation": "dataorder.permutation",
    "SequentialBucketSampler": "dataorder.bucket_sampler",
    "StepInfo": "dataorder.schedule",
    "Topology": "dataorder.topology",
    "build_manifest": "dataorder.scan",
    "create_megatron_sampler": "dataorder.megatron",
    "data_parallel_dims": "dataorder.topology",
    "data_parallel_topology": "dataorder.topology",
    "derive_key": "dataorder.keys",
    "format_bucket_table": "dataorder.bucket_stats",
    "plan_bucket_epoch": "dataorder.bucket_sampler",
    "plan_epoch": "dataorder.partition",
    "plot_bucket_stats": "dataorder.bucket_stats",
    "read_manifest": "dataorder.scan",
    "resize_and_crop": "dataorder.crop",
    "resolve_topology": "dataorder.topology",
    "scan_images": "dataorder.scan",
    "verify_data_parallel": "dataorder.verify",
    "write_manifest": "dataorder.scan",
}

__all__ = [
    "BaseMegatronSampler",
    "BaseMultiresolutionDataset",
    "BatchSizeSchedule",
    "BucketEpochPlan",
    "BucketStats",
    "BucketTable",
    "CursorSampler",
    "DataParallelError",
    "DataParallelReport",
    "DistributedSampler",
    "EpochLayout",
    "Manifest",
    "MegatronPretrainingRandomSampler",
    "MegatronPretrainingSampler",
    "MultiTierBucketCalculator",
    "Permutation",
    "SequentialBucketSampler",
    "StepInfo",
    "Topology",
    "__version__",
    "build_manifest",
    "create_megatron_sampler",
    "data_parallel_dims",
    "data_parallel_topology",
    "derive_key",
    "format_bucket_table",
    "plan_bucket_epoch",
    "plan_epoch",
    "plot_bucket_stats",
    "read_manifest",
    "resize_and_crop",
    "resolve_topology",
    "scan_images",
    "verify_data_parallel",
    "write_manifest",
]

if TYPE_CHECKING:
    from dataorder.bucket_sampler import BucketEpochPlan, SequentialBucketSampler, plan_bucket_epoch
    from dataorder.bucket_stats import BucketStats, format_bucket_table, plot_bucket_stats
    from dataorder.buckets import MultiTierBucketCalculator
    from dataorder.crop import resize_and_crop
    from dataorder.cursor import CursorSampler
    from dataorder.distributed import DistributedSampler
    from dataorder.keys import derive_key
    from dataorder.megatron import (
        BaseMegatronSampler,
        MegatronPretrainingRandomSampler,
        MegatronPretrainingSampler,
        create_megatron_sampler,
    )
    from dataorder.multires import BaseMultiresolutionDataset, BucketTable
    from dataorder.partition import EpochLayout, plan_epoch
    from dataorder.permutation import Permutation
    from dataorder.scan import Manifest, build_manifest, read_manifest, scan_images, write_manifest
    from dataorder.schedule import BatchSizeSchedule, StepInfo
    from dataorder.topology import (
        Topology,
        data_parallel_dims,
        data_parallel_topology,
        resolve_topology,
    )
    from dataorder.verify import DataParallelError, DataParallelReport, verify_data_parallel


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dataorder' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
