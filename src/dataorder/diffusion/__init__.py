"""Diffusion: resolution and video buckets, fits, scans, manifests, multi-resolution datasets and
the lock-step bucket sampler.

==================  =============================================================================
subpackage          what it is
==================  =============================================================================
``buckets``         bucket geometry: lattices, the bucket rules (default, NeMo's, fitted), cost
                    models, crops, video frame counts and sets; no sampler, no fit
``fit``             the fits: bucket sets chosen for a dataset and a job layout (images, video)
``calculators``     the public faces: ``MultiTierBucketCalculator``, ``VideoBucketCalculator``
``scan``            sizes and frame counts from file headers, and the manifests that keep them
``sampler``         the bucket sampler: tables, epoch plans, NeMo's order, the dataset, statistics
==================  =============================================================================

NOTE [ diffusion layers ]
    The subpackages form a DAG, bottom first: buckets <- fit <- calculators <- scan <- sampler.
    A module imports its own subpackage and those below it, lazy imports included, never one
    above (``tests/test_layers.py`` reads every import from the source). So the fit never
    imports a calculator: what it needs of one, the class to build or the calculator whose rules
    a video set keeps, comes in as an argument, and ``MultiTierBucketCalculator.fit_to_data``
    passes itself. NeMo's bucket rule (``buckets.nemo_rule``) is geometry and NeMo's sampler
    order (``sampler.nemo_order``) is the sampler's, so bucket sets never depend on sampler
    planning. Each subpackage's ``__init__`` is its reading guide, one line per module, and
    imports nothing.

Lazy: ``import dataorder.diffusion`` imports no module until a name below is first used, and no
module but the sampler's and the dataset's (``sampler.sampler``, ``sampler.dataset``) imports
torch, so the command line's bucket tables and scans start fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataorder._lazy import lazy_exports

#: Every public name of the package -> the module that defines it (one list: ``__all__`` and the
#: lazy import both read it; tests/test_static.py checks the typing block below against it).
_EXPORTS: dict[str, str] = {
    "BaseMultiresolutionDataset": "sampler.dataset",
    "BucketEpochPlan": "sampler.plan",
    "BucketSampler": "sampler.sampler",
    "BucketStats": "sampler.stats",
    "BucketTable": "sampler.table",
    "CostModel": "buckets.cost",
    "CropResult": "buckets.crop",
    "FitResult": "fit.images",
    "Manifest": "scan.manifest",
    "MultiTierBucketCalculator": "calculators.image",
    "SequentialBucketSampler": "sampler.sampler",
    "VideoBucketCalculator": "calculators.video",
    "VideoScan": "scan.videos",
    "bucket_stats": "sampler.stats",
    "build_manifest": "scan.manifest",
    "format_bucket_table": "sampler.stats",
    "manifest_from_scan": "scan.manifest",
    "plan_bucket_epoch": "sampler.plan",
    "plot_bucket_stats": "sampler.stats",
    "read_manifest": "scan.manifest",
    "resize_and_crop": "buckets.crop",
    "scan_images": "scan.images",
    "scan_videos": "scan.videos",
    "write_manifest": "scan.manifest",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers only: what __getattr__ returns
    from dataorder.diffusion.buckets.cost import CostModel as CostModel
    from dataorder.diffusion.buckets.crop import CropResult as CropResult
    from dataorder.diffusion.buckets.crop import resize_and_crop as resize_and_crop
    from dataorder.diffusion.calculators.image import (
        MultiTierBucketCalculator as MultiTierBucketCalculator,
    )
    from dataorder.diffusion.calculators.video import VideoBucketCalculator as VideoBucketCalculator
    from dataorder.diffusion.fit.images import FitResult as FitResult
    from dataorder.diffusion.sampler.dataset import (
        BaseMultiresolutionDataset as BaseMultiresolutionDataset,
    )
    from dataorder.diffusion.sampler.plan import BucketEpochPlan as BucketEpochPlan
    from dataorder.diffusion.sampler.plan import plan_bucket_epoch as plan_bucket_epoch
    from dataorder.diffusion.sampler.sampler import BucketSampler as BucketSampler
    from dataorder.diffusion.sampler.sampler import (
        SequentialBucketSampler as SequentialBucketSampler,
    )
    from dataorder.diffusion.sampler.stats import BucketStats as BucketStats
    from dataorder.diffusion.sampler.stats import bucket_stats as bucket_stats
    from dataorder.diffusion.sampler.stats import format_bucket_table as format_bucket_table
    from dataorder.diffusion.sampler.stats import plot_bucket_stats as plot_bucket_stats
    from dataorder.diffusion.sampler.table import BucketTable as BucketTable
    from dataorder.diffusion.scan.images import scan_images as scan_images
    from dataorder.diffusion.scan.manifest import Manifest as Manifest
    from dataorder.diffusion.scan.manifest import build_manifest as build_manifest
    from dataorder.diffusion.scan.manifest import manifest_from_scan as manifest_from_scan
    from dataorder.diffusion.scan.manifest import read_manifest as read_manifest
    from dataorder.diffusion.scan.manifest import write_manifest as write_manifest
    from dataorder.diffusion.scan.videos import VideoScan as VideoScan
    from dataorder.diffusion.scan.videos import scan_videos as scan_videos


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
