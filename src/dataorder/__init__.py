"""dataorder: which samples every data-parallel rank reads at every step of distributed training.

The global order of an epoch is a pure function of (configuration, seed, epoch, position); ranks
take slices of global blocks, so they stay in lock-step by construction; a sampler's state is a
few integers, so resume is O(1), exact, and elastic when the number of GPUs changes.

The package is layered; each layer imports only those above it in this list:

* :mod:`dataorder.core`: the permutation, keys, apportionment, partition, state, cursor and
  topology. No torch.
* :mod:`dataorder.llm`: Megatron-style micro-batch samplers and batch-size schedules.
* :mod:`dataorder.diffusion`: resolution buckets, scans, datasets and the bucket sampler.
* :mod:`dataorder.parallel`: torch's DistributedSampler over a mesh, and the partition check.
* :mod:`dataorder.integrations`: the samplers in DCP, NeMo Automodel, Megatron-LM, HF Trainer
  and torchtitan (each stack imported lazily; nothing imports this layer).
* :mod:`dataorder.testing`: the contract suite, usable on any sampler.
* :mod:`dataorder.tools`: the command line, the demo and plots.

Every public name is re-exported here, imported lazily: ``import dataorder`` does not import
torch, and neither do the core modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Apportionment": "dataorder.core.apportion",
    "BaseMegatronSampler": "dataorder.llm.megatron",
    "BaseMultiresolutionDataset": "dataorder.diffusion.multires",
    "BatchSizeSchedule": "dataorder.llm.schedule",
    "BlendedSampler": "dataorder.llm.blend",
    "BucketEpochPlan": "dataorder.diffusion.bucket_plan",
    "BucketStats": "dataorder.diffusion.stats",
    "BucketTable": "dataorder.diffusion.table",
    "CostModel": "dataorder.diffusion.cost",
    "CropResult": "dataorder.diffusion.crop",
    "CursorBatchSampler": "dataorder.core.cursor",
    "CursorSampler": "dataorder.core.cursor",
    "DataParallelError": "dataorder.parallel.verify",
    "DataParallelReport": "dataorder.parallel.verify",
    "DistributedSampler": "dataorder.parallel.distributed",
    "EpochBlocks": "dataorder.core.partition",
    "EpochPlan": "dataorder.core.cursor",
    "FitResult": "dataorder.diffusion.fit",
    "Manifest": "dataorder.diffusion.manifest",
    "MegatronPretrainingRandomSampler": "dataorder.llm.megatron",
    "MegatronPretrainingSampler": "dataorder.llm.megatron",
    "MixtureSchedule": "dataorder.llm.mixture",
    "MultiTierBucketCalculator": "dataorder.diffusion.buckets",
    "Permutation": "dataorder.core.permutation",
    "Ramp": "dataorder.llm.mixture",
    "SegmentPlan": "dataorder.core.partition",
    "SequentialBucketSampler": "dataorder.diffusion.bucket_sampler",
    "StepInfo": "dataorder.llm.schedule",
    "Topology": "dataorder.core.topology",
    "VideoBucketCalculator": "dataorder.diffusion.video",
    "VideoScan": "dataorder.diffusion.video_scan",
    "bucket_stats": "dataorder.diffusion.stats",
    "build_manifest": "dataorder.diffusion.manifest",
    "check_items": "dataorder.parallel.checks",
    "create_megatron_sampler": "dataorder.llm.factory",
    "data_parallel_dims": "dataorder.core.topology",
    "data_parallel_topology": "dataorder.core.topology",
    "derive_key": "dataorder.core.keys",
    "format_bucket_table": "dataorder.diffusion.stats",
    "manifest_from_scan": "dataorder.diffusion.manifest",
    "permute_many": "dataorder.core.permutation",
    "plan_bucket_epoch": "dataorder.diffusion.bucket_plan",
    "plan_epoch": "dataorder.core.partition",
    "plan_segments": "dataorder.core.partition",
    "plot_bucket_stats": "dataorder.diffusion.stats",
    "quantize_weights": "dataorder.core.apportion",
    "read_manifest": "dataorder.diffusion.manifest",
    "resize_and_crop": "dataorder.diffusion.crop",
    "resolve_topology": "dataorder.core.topology",
    "scan_images": "dataorder.diffusion.scan",
    "scan_videos": "dataorder.diffusion.video_scan",
    "verify_data_parallel": "dataorder.parallel.verify",
    "write_manifest": "dataorder.diffusion.manifest",
}

__all__ = [
    "Apportionment",
    "BaseMegatronSampler",
    "BaseMultiresolutionDataset",
    "BatchSizeSchedule",
    "BlendedSampler",
    "BucketEpochPlan",
    "BucketStats",
    "BucketTable",
    "CostModel",
    "CropResult",
    "CursorBatchSampler",
    "CursorSampler",
    "DataParallelError",
    "DataParallelReport",
    "DistributedSampler",
    "EpochBlocks",
    "EpochPlan",
    "FitResult",
    "Manifest",
    "MegatronPretrainingRandomSampler",
    "MegatronPretrainingSampler",
    "MixtureSchedule",
    "MultiTierBucketCalculator",
    "Permutation",
    "Ramp",
    "SegmentPlan",
    "SequentialBucketSampler",
    "StepInfo",
    "Topology",
    "VideoBucketCalculator",
    "VideoScan",
    "__version__",
    "bucket_stats",
    "build_manifest",
    "check_items",
    "create_megatron_sampler",
    "data_parallel_dims",
    "data_parallel_topology",
    "derive_key",
    "format_bucket_table",
    "manifest_from_scan",
    "permute_many",
    "plan_bucket_epoch",
    "plan_epoch",
    "plan_segments",
    "plot_bucket_stats",
    "quantize_weights",
    "read_manifest",
    "resize_and_crop",
    "resolve_topology",
    "scan_images",
    "scan_videos",
    "verify_data_parallel",
    "write_manifest",
]

if TYPE_CHECKING:
    from dataorder.core.apportion import Apportionment, quantize_weights
    from dataorder.core.assembly import AssembledSampler
    from dataorder.core.cursor import CursorBatchSampler, CursorSampler, EpochPlan
    from dataorder.core.keys import derive_key
    from dataorder.core.partition import EpochBlocks, SegmentPlan, plan_epoch, plan_segments
    from dataorder.core.permutation import Permutation, permute_many
    from dataorder.core.topology import (
        Topology,
        data_parallel_dims,
        data_parallel_topology,
        resolve_topology,
    )
    from dataorder.diffusion.bucket_plan import BucketEpochPlan, plan_bucket_epoch
    from dataorder.diffusion.bucket_sampler import SequentialBucketSampler
    from dataorder.diffusion.buckets import MultiTierBucketCalculator
    from dataorder.diffusion.cost import CostModel
    from dataorder.diffusion.crop import CropResult, resize_and_crop
    from dataorder.diffusion.fit import FitResult
    from dataorder.diffusion.manifest import (
        Manifest,
        build_manifest,
        manifest_from_scan,
        read_manifest,
        write_manifest,
    )
    from dataorder.diffusion.multires import BaseMultiresolutionDataset
    from dataorder.diffusion.scan import scan_images
    from dataorder.diffusion.stats import (
        BucketStats,
        bucket_stats,
        format_bucket_table,
        plot_bucket_stats,
    )
    from dataorder.diffusion.table import BucketTable
    from dataorder.diffusion.video import VideoBucketCalculator
    from dataorder.diffusion.video_scan import VideoScan, scan_videos
    from dataorder.llm.blend import BlendedSampler
    from dataorder.llm.factory import create_megatron_sampler
    from dataorder.llm.megatron import (
        BaseMegatronSampler,
        MegatronPretrainingRandomSampler,
        MegatronPretrainingSampler,
    )
    from dataorder.llm.mixture import MixtureSchedule, Ramp
    from dataorder.llm.schedule import BatchSizeSchedule, StepInfo
    from dataorder.parallel.checks import check_items
    from dataorder.parallel.distributed import DistributedSampler
    from dataorder.parallel.verify import (
        DataParallelError,
        DataParallelReport,
        verify_data_parallel,
    )


def samplers() -> dict[str, type[AssembledSampler[Any]]]:
    """Every dataorder sampler class, by the ``kind`` its states record.

    The classes register themselves when they are defined (:mod:`dataorder.core.assembly`);
    this imports every public module first, so the answer does not depend on what was imported
    before (``dataorder inspect`` rebuilds any state through it).
    """
    from dataorder.core.assembly import SAMPLERS

    for module in sorted(set(_EXPORTS.values())):
        importlib.import_module(module)
    return dict(SAMPLERS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dataorder' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
