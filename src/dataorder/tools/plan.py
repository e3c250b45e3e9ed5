"""``dataorder plan MANIFEST --num-replicas R --batch-size B``: an epoch of the bucket sampler.

Images per bucket, crop loss, steps, and the samples dropped or padded by lock-step global
batches on that layout. Steps, drops and padding are the sampler's own plan
(:mod:`dataorder.diffusion.bucket_plan`); ``bucket_stats`` adds the crop loss and the per-bucket
view over the same partition.
"""

from __future__ import annotations

import argparse

from dataorder.tools.output import Output

__all__ = ["cmd_plan"]


def cmd_plan(args: argparse.Namespace, out: Output) -> int:
    import warnings

    import numpy as np

    from dataorder.diffusion.bucket_sampler import SequentialBucketSampler
    from dataorder.diffusion.multires import BaseMultiresolutionDataset
    from dataorder.diffusion.scan import read_manifest
    from dataorder.diffusion.stats import bucket_stats, plot_bucket_stats

    manifest = read_manifest(args.manifest)
    if len(manifest) == 0:
        raise ValueError(f"{args.manifest} lists no image; nothing to plan")
    # The sampler itself says what an epoch is: steps, drops and padding on this layout.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = SequentialBucketSampler(
            BaseMultiresolutionDataset.from_manifest(manifest),
            base_batch_size=args.batch_size,
            base_resolution=args.base_resolution,
            drop_last=args.drop_last,
            dynamic_batch_size=args.dynamic_batch_size,
            num_replicas=args.num_replicas,
            rank=0,
        )
    # per-rank batch size of every calculator bucket (the sampler's, for the buckets in use)
    calc = manifest.calculator_object()
    sizes = [
        calc.get_dynamic_batch_size(
            b["resolution"], base_batch_size=args.batch_size, base_resolution=args.base_resolution
        )
        if args.dynamic_batch_size
        else args.batch_size
        for b in manifest.buckets
    ]
    stats = bucket_stats(
        manifest, num_replicas=args.num_replicas, batch_size=sizes, drop_last=args.drop_last
    )
    o = stats.overall
    steps, dropped, padded = len(sampler), sampler.samples_dropped, sampler.samples_padded
    if args.json:
        used = np.flatnonzero(stats.counts)
        out.json(
            {
                "manifest": args.manifest,
                "num_replicas": args.num_replicas,
                "batch_size": args.batch_size,
                "drop_last": args.drop_last,
                "dynamic_batch_size": args.dynamic_batch_size,
                "steps_per_epoch": steps,
                "samples_dropped": dropped,
                "samples_padded": padded,
                "overall": o,
                "buckets": [
                    {
                        "id": int(j),
                        "resolution": list(stats.buckets[j]["resolution"]),
                        "images": int(stats.counts[j]),
                        "mean_crop_loss": float(stats.mean_crop_loss[j]),
                        "p95_crop_loss": float(stats.p95_crop_loss[j]),
                        "batch_size": int(stats.batch_sizes[j]),
                        "steps": int(stats.batches[j]),
                        "dropped": int(stats.dropped[j]),
                        "padded": int(stats.padded[j]),
                    }
                    for j in used
                ],
            }
        )
        return 0
    rows = []
    for j in np.flatnonzero(stats.counts):
        w, h = stats.buckets[j]["resolution"]
        rows.append(
            [
                int(j),
                f"{w}x{h}",
                int(stats.counts[j]),
                f"{100 * stats.mean_crop_loss[j]:.1f}",
                f"{100 * stats.p95_crop_loss[j]:.1f}",
                int(stats.upscaled[j]),
                int(stats.batch_sizes[j]),
                int(stats.batches[j]),
                int(stats.dropped[j]),
                int(stats.padded[j]),
            ]
        )
    out.table(
        f"{args.manifest}: {int(o['images'])} images in {len(rows)} of {len(stats.buckets)} "
        "buckets",
        [
            "id",
            "bucket",
            "images",
            "crop % mean",
            "crop % p95",
            "upscaled",
            "batch",
            "steps",
            "dropped",
            "padded",
        ],
        rows,
    )
    out.line(
        f"crop loss: mean {100 * o['mean_crop_loss']:.1f} %, p95 {100 * o['p95_crop_loss']:.1f} %, "
        f"{100 * o['share_over_10']:.1f} % of images lose more than 10 % of their area; "
        f"{int(o['upscaled'])} images smaller than their bucket (upscaled)"
    )
    per_rank = "dynamic batch" if args.dynamic_batch_size else f"batch {args.batch_size}"
    out.line(
        f"on {args.num_replicas} replicas x {per_rank} per rank: {steps} steps per epoch; "
        f"{dropped} samples dropped, {padded} padding slots (repeated samples)"
        + ("" if args.drop_last else "; every image is read once per epoch")
    )
    small = int(o["buckets_below_one_global_batch"])
    if small:
        fate = "dropped whole (drop_last)" if args.drop_last else "read in one padded step each"
        out.line(f"{small} buckets hold fewer images than one global batch: {fate}")
    for warning in caught:
        out.line(f"note: {warning.message}")
    if args.png:
        plot_bucket_stats(stats, args.png)
        out.line(f"wrote {args.png}")
    return 0
