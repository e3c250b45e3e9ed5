"""``dataorder plan MANIFEST --num-replicas R --batch-size B``: an epoch of the bucket sampler.

Samples per bucket, crop loss (and trim loss for a video manifest), steps, and the samples
dropped or padded by lock-step global batches on that layout. Steps, drops and padding are the
sampler's own plan (:mod:`dataorder.diffusion.sampler.plan`); ``bucket_stats`` adds the crop loss
and the per-bucket view over the same partition.

With ``--fit`` it also fits a bucket set to the manifest's sizes for this layout (images:
:func:`dataorder.diffusion.fit.images.fit_to_data`; clips: :func:`dataorder.diffusion.fit.video.
fit_video_to_data`, within the manifest's calculator's token budget and frame rule; at most
``--max-waste`` of the samples wasted) and prints it beside the manifest's set: crop loss (and
trim loss and the spread of per-step cost for clips), steps and waste for both.
``--write-manifest PATH`` saves the manifest re-bucketed by the fitted set, whose calculator
config records it, for the training run to read. ``--video`` says the manifest is a video one
(checked).

Imports inside functions: NOTE [ What a subcommand module imports ] in :mod:`dataorder.tools.cli`.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import numpy as np

from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.core.topology import MAX_DP_SIZE
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import VideoBucketCalculator
from dataorder.diffusion.fit.images import fit_to_data
from dataorder.diffusion.fit.video import fit_video_to_data
from dataorder.tools.output import (
    Output,
    check_output_file,
    float_arg,
    int_arg,
    resolution_arg,
    working,
)

__all__ = ["add_parser", "run"]


def _sampler(manifest: Any, args: argparse.Namespace, dataset: Any = None) -> Any:
    """The sampler of this layout over the manifest's dataset (or ``dataset``), with the
    warnings it gives."""
    from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
    from dataorder.diffusion.sampler.sampler import SequentialBucketSampler

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = SequentialBucketSampler(
            dataset if dataset is not None else BaseMultiresolutionDataset.from_manifest(manifest),
            base_batch_size=args.batch_size,
            base_resolution=args.base_resolution,
            drop_last=args.drop_last,
            dynamic_batch_size=args.dynamic_batch_size,
            num_replicas=args.num_replicas,
            rank=0,
        )
    return sampler, caught


def _batch_sizes(manifest: Any, calc: Any, args: argparse.Namespace) -> list[int]:
    """The per-rank batch size of every calculator bucket (the sampler's, for those in use)."""
    if not args.dynamic_batch_size:
        return [args.batch_size] * len(manifest.buckets)
    if manifest.is_video:  # the cost model, relative to the full token budget
        return [int(b) for b in calc.batch_sizes(args.batch_size)]
    return [
        calc.get_dynamic_batch_size(
            b["resolution"], base_batch_size=args.batch_size, base_resolution=args.base_resolution
        )
        for b in manifest.buckets
    ]


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``dataorder plan`` to ``subparsers``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "plan",
        parents=parents,
        help="what an epoch of the bucket sampler looks like on a layout",
        description=(
            "For a manifest and a data-parallel layout: images per bucket, crop loss, samples "
            "dropped or padded, steps per epoch, and a PNG."
        ),
    )
    p.add_argument("manifest", metavar="MANIFEST")
    p.add_argument(
        "--num-replicas", type=int_arg(1, MAX_DP_SIZE), required=True, help="data-parallel size"
    )
    p.add_argument(
        "--batch-size", type=int_arg(1, MAX_BATCH_SIZE), required=True, help="per-rank batch size"
    )
    p.add_argument("--drop-last", action="store_true", help="drop each bucket's partial batch")
    p.add_argument(
        "--dynamic-batch-size",
        action="store_true",
        help="scale the batch size with each bucket's pixels",
    )
    p.add_argument(
        "--base-resolution",
        type=resolution_arg,
        default=(512, 512),
        help="where --batch-size applies with --dynamic-batch-size (default: 512x512)",
    )
    p.add_argument(
        "--png", default=None, help="write a plot of the plan to this PNG (default: none)"
    )
    p.add_argument(
        "--fit",
        action="store_true",
        help="also fit a bucket set to the manifest for this layout, shown beside its own",
    )
    p.add_argument("--video", action="store_true", help="the manifest is a video one (checked)")
    p.add_argument(
        "--max-waste",
        type=float_arg("a number in [0, 1]", 0, 1),
        default=0.01,
        help="with --fit: largest share of samples dropped or padded (default: 0.01)",
    )
    p.add_argument(
        "--write-manifest",
        metavar="PATH",
        default=None,
        help="with --fit: write the manifest re-bucketed by the fitted set (default: none)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    return p


def _check_args(args: argparse.Namespace, manifest: Any) -> None:
    """Refuse options this manifest does not take."""
    if len(manifest) == 0:
        what = "clip" if manifest.is_video else "image"
        raise ValueError(f"{args.manifest} lists no {what}; nothing to plan")
    if args.video and not manifest.is_video:
        raise ValueError(f"--video plans a video manifest; {args.manifest} is an image manifest")
    if args.write_manifest and not args.fit:
        raise ValueError("--write-manifest writes the fitted set's manifest: add --fit")
    for flag, path in (("--png", args.png), ("--write-manifest", args.write_manifest)):
        if path:
            check_output_file(path, flag)


def run(args: argparse.Namespace, out: Output) -> int:
    """Print (or write as JSON) what an epoch of the bucket sampler is on this layout."""
    from dataorder.diffusion.sampler.stats import bucket_stats, plot_bucket_stats
    from dataorder.diffusion.scan.manifest import read_manifest

    manifest = read_manifest(args.manifest)
    _check_args(args, manifest)
    what = f"{len(manifest):,} {'clips' if manifest.is_video else 'images'}"
    # The sampler itself says what an epoch is: steps, drops and padding on this layout.
    with working(f"planning an epoch of {what}"):
        sampler, caught = _sampler(manifest, args)
        calc = manifest.calculator_object()
        stats = bucket_stats(
            manifest,
            num_replicas=args.num_replicas,
            batch_size=_batch_sizes(manifest, calc, args),
            drop_last=args.drop_last,
        )
    plan = (len(sampler), sampler.samples_dropped, sampler.samples_padded)
    fitted: _Fitted | _VideoFitted | None = None
    if args.fit:
        with working(f"fitting a bucket set to {what}"):
            fitted = (_VideoFitted if manifest.is_video else _Fitted).build(manifest, calc, args)
    if args.json:
        out.json(_as_json(args, stats, plan, fitted))
        return 0
    _print_plan(out, args, stats, plan)
    for warning in caught:
        out.line(f"note: {warning.message}")
    if fitted is not None:
        fitted.print(out, stats, plan)
    if args.png:
        plot_bucket_stats(stats, args.png)
        out.line(f"wrote {args.png}")
    return 0


def _as_json(
    args: argparse.Namespace,
    stats: Any,
    plan: tuple[int, int, int],
    fitted: _Fitted | _VideoFitted | None,
) -> dict[str, Any]:
    steps, dropped, padded = plan
    return {
        "manifest": args.manifest,
        "num_replicas": args.num_replicas,
        "batch_size": args.batch_size,
        "drop_last": args.drop_last,
        "dynamic_batch_size": args.dynamic_batch_size,
        "steps_per_epoch": steps,
        "samples_dropped": dropped,
        "samples_padded": padded,
        "overall": stats.overall,
        "buckets": [_json_bucket(stats, int(j)) for j in np.flatnonzero(stats.counts)],
        **({"fitted": fitted.as_json()} if fitted is not None else {}),
    }


def _print_plan(
    out: Output, args: argparse.Namespace, stats: Any, plan: tuple[int, int, int]
) -> None:
    o, video = stats.overall, stats.is_video
    what = "clips" if video else "images"
    rows = [_row(stats, int(j)) for j in np.flatnonzero(stats.counts)]
    head = ["id", "bucket", *(["frames"] if video else []), what, "crop % mean", "crop % p95"]
    head += ["trim % mean", "trim % p95"] if video else []
    head += ["upscaled", "batch", "steps", "dropped", "padded"]
    out.table(
        f"{args.manifest}: {int(o['images'])} {what} in {len(rows)} of {len(stats.buckets)} "
        "buckets",
        head,
        rows,
    )
    out.line(
        f"crop loss: mean {100 * o['mean_crop_loss']:.1f} %, p95 {100 * o['p95_crop_loss']:.1f} %, "
        f"{100 * o['share_over_10']:.1f} % of {what} lose more than 10 % of their area; "
        f"{int(o['upscaled'])} {what} smaller than their bucket (upscaled)"
    )
    if video:
        out.line(
            f"trim loss: mean {100 * o['mean_trim_loss']:.1f} %, p95 "
            f"{100 * o['p95_trim_loss']:.1f} % of a clip's frames cut to its bucket's frame count"
        )
    steps, dropped, padded = plan
    per_rank = "dynamic batch" if args.dynamic_batch_size else f"batch {args.batch_size}"
    out.line(
        f"on {args.num_replicas} replicas x {per_rank} per rank: {steps} steps per epoch; "
        f"{dropped} samples dropped, {padded} padding slots (repeated samples)"
        + ("" if args.drop_last else f"; every {what[:-1]} is read once per epoch")
    )
    small = int(o["buckets_below_one_global_batch"])
    if small:
        fate = "dropped whole (drop_last)" if args.drop_last else "read in one padded step each"
        out.line(f"{small} buckets hold fewer {what} than one global batch: {fate}")


def _row(stats: Any, j: int) -> list[object]:
    b = stats.buckets[j]
    w, h = b["resolution"]
    row: list[object] = [j, f"{w}x{h}", *([b["frames"]] if stats.is_video else [])]
    row += [int(stats.counts[j]), f"{100 * stats.mean_crop_loss[j]:.1f}"]
    row += [f"{100 * stats.p95_crop_loss[j]:.1f}"]
    if stats.is_video:
        row += [f"{100 * stats.mean_trim_loss[j]:.1f}", f"{100 * stats.p95_trim_loss[j]:.1f}"]
    row += [int(stats.upscaled[j]), int(stats.batch_sizes[j]), int(stats.batches[j])]
    return [*row, int(stats.dropped[j]), int(stats.padded[j])]


def _json_bucket(stats: Any, j: int) -> dict[str, Any]:
    b = stats.buckets[j]
    out: dict[str, Any] = {"id": j, "resolution": list(b["resolution"])}
    if stats.is_video:
        out["frames"] = int(b["frames"])
    out["clips" if stats.is_video else "images"] = int(stats.counts[j])
    out.update(
        mean_crop_loss=float(stats.mean_crop_loss[j]),
        p95_crop_loss=float(stats.p95_crop_loss[j]),
    )
    if stats.is_video:
        out["mean_trim_loss"] = float(stats.mean_trim_loss[j])
        out["p95_trim_loss"] = float(stats.p95_trim_loss[j])
    out.update(
        batch_size=int(stats.batch_sizes[j]),
        steps=int(stats.batches[j]),
        dropped=int(stats.dropped[j]),
        padded=int(stats.padded[j]),
    )
    return out


class _FittedPlan:
    """What a fitted set and the sampler over it give, for the image and the video plans."""

    def __init__(self, fit: Any, stats: Any, sampler: Any, written: str | None) -> None:
        self.fit, self.stats, self.sampler, self.written = fit, stats, sampler, written

    def as_json(self) -> dict[str, Any]:
        return {
            "config": self.sampler.dataset.calculator.config(),
            **({"method": self.fit.method} if hasattr(self.fit, "method") else {}),
            "steps_per_epoch": len(self.sampler),
            "samples_dropped": self.sampler.samples_dropped,
            "samples_padded": self.sampler.samples_padded,
            "overall": self.stats.overall,
            "written": self.written,
        }


def _rewrite(manifest: Any, fitted: Any, args: argparse.Namespace, **frames: Any) -> str | None:
    """Write the manifest re-bucketed by ``fitted`` to ``--write-manifest``, if asked."""
    from dataorder.diffusion.scan.manifest import build_manifest, write_manifest

    if not args.write_manifest:
        return None
    rebucketed = build_manifest(manifest.paths, manifest.widths, manifest.heights, fitted,
                                errors=manifest.errors, **frames)  # fmt: skip
    write_manifest(rebucketed, args.write_manifest)
    return str(args.write_manifest)


class _Fitted(_FittedPlan):
    """A bucket set fitted to a manifest for one layout, and what the sampler does with it."""

    @classmethod
    def build(cls, manifest: Any, calc: Any, args: argparse.Namespace) -> _Fitted:
        """Fit for the sampler's own waste on this layout: ``drop_last`` drops ``n mod (b R)``
        per bucket; without it the last batch shrinks and pads ``(-n) mod R``."""
        from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
        from dataorder.diffusion.sampler.stats import bucket_stats

        r = args.num_replicas
        # a fitted calculator scales batches as the default rule does
        scale = MultiTierBucketCalculator(
            calc.quantization, calc.max_pixels, max_batch_size=calc.max_batch_size
        )

        def per_rank(w: int, h: int) -> int:
            if not args.dynamic_batch_size:
                return int(args.batch_size)
            return scale.get_dynamic_batch_size((w, h), args.batch_size, args.base_resolution)

        g: Any = r  # no drop_last: the last batch shrinks and pads (-n) mod R
        if args.drop_last:
            g = (
                (lambda w, h: r * per_rank(w, h))
                if args.dynamic_batch_size
                else r * args.batch_size
            )
        common = {
            "global_batch_size": g,
            "max_waste": args.max_waste,
            "max_pixels": calc.max_pixels,
            "quantization": calc.quantization,
            "drop_last": args.drop_last,
        }
        fit = fit_to_data(
            manifest.widths, manifest.heights, calculator=MultiTierBucketCalculator, **common
        )
        fitted = fit.calculator(max_batch_size=calc.max_batch_size)  # one fit, not two
        sizes = [per_rank(w, h) for w, h in fitted.resolutions.tolist()]
        stats = bucket_stats(manifest.widths, manifest.heights, fitted, num_replicas=r,
                             batch_size=sizes, drop_last=args.drop_last)  # fmt: skip
        dataset = BaseMultiresolutionDataset.from_sizes(manifest.widths, manifest.heights, fitted)
        sampler, _ = _sampler(None, args, dataset)
        return cls(fit, stats, sampler, _rewrite(manifest, fitted, args))

    def print(self, out: Output, stats: Any, plan: tuple[int, int, int]) -> None:
        mine = (len(self.sampler), self.sampler.samples_dropped, self.sampler.samples_padded)
        rows = [
            _side_row(f"manifest's ({len(stats.buckets)} buckets)", stats, plan),
            _side_row(f"fitted ({self.fit.num_buckets} buckets)", self.stats, mine),
        ]
        head = ["bucket set", "used", "crop % mean", "crop % p95", "> 10 %", "steps", "dropped",
                "padded"]  # fmt: skip
        out.table("bucket sets on this layout", head, rows)
        kind = "dropped" if self.fit.drop_last else "padded"
        out.line(
            f"fitted ({self.fit.method}): {self.fit.waste} samples {kind} "
            f"({100 * self.fit.waste_share:.2f} % <= {100 * self.fit.max_waste:.2f} %), "
            f"mean crop loss {100 * self.fit.mean_crop_loss:.2f} %"
        )
        s = self.stats
        fitted_rows = [
            [j, f"{w}x{h}", int(s.counts[j]), f"{100 * s.mean_crop_loss[j]:.1f}",
             int(s.batch_sizes[j]), int(s.batches[j]), int(s.dropped[j]), int(s.padded[j])]
            for j, (w, h) in enumerate(b["resolution"] for b in s.buckets)
        ]  # fmt: skip
        out.table(
            "fitted buckets",
            ["id", "bucket", "images", "crop % mean", "batch", "steps", "dropped", "padded"],
            fitted_rows,
        )
        if self.written:
            out.line(f"wrote {self.written}: the manifest re-bucketed by the fitted set")


def _side_row(name: str, stats: Any, plan: tuple[int, int, int]) -> list[object]:
    o = stats.overall
    return [
        name,
        int((stats.counts > 0).sum()),
        f"{100 * o['mean_crop_loss']:.2f}",
        f"{100 * o['p95_crop_loss']:.2f}",
        f"{100 * o['share_over_10']:.2f}",
        *plan,
    ]


class _VideoFitted(_FittedPlan):
    """A video bucket set fitted to a manifest for one layout, and what the sampler does."""

    @classmethod
    def build(cls, manifest: Any, calc: Any, args: argparse.Namespace) -> _VideoFitted:
        """Fit for the sampler's own waste on this layout: ``drop_last`` drops ``n mod (b R)``
        per bucket (``b`` from the cost model with ``--dynamic-batch-size``); without it the
        last batch shrinks and pads ``(-n) mod R``."""
        from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
        from dataorder.diffusion.sampler.stats import bucket_stats

        base = calc
        if calc.bucket_set is not None:  # refit from the same rules
            config = {k: v for k, v in calc.config().items() if k != "bucket_set"}
            base = VideoBucketCalculator.from_config(config)
        r = args.num_replicas
        g: Any = r  # no drop_last: the last batch shrinks and pads (-n) mod R
        if args.drop_last:
            dynamic = args.dynamic_batch_size
            g = base.global_batch_size(r, args.batch_size) if dynamic else r * args.batch_size
        w, h, f = manifest.widths, manifest.heights, manifest.frames
        fit = fit_video_to_data(w, h, f, base, global_batch_size=g, max_waste=args.max_waste,
                                drop_last=args.drop_last)  # fmt: skip
        fitted = fit.calculator()
        sizes = (
            [int(b) for b in fitted.batch_sizes(args.batch_size)]
            if args.dynamic_batch_size
            else args.batch_size
        )
        stats = bucket_stats(w, h, fitted, frames=f, num_replicas=r, batch_size=sizes,
                             drop_last=args.drop_last)  # fmt: skip
        sampler, _ = _sampler(
            None, args, BaseMultiresolutionDataset.from_video_sizes(w, h, f, fitted)
        )
        return cls(fit, stats, sampler, _rewrite(manifest, fitted, args, frames=f))

    def print(self, out: Output, stats: Any, plan: tuple[int, int, int]) -> None:
        mine = (len(self.sampler), self.sampler.samples_dropped, self.sampler.samples_padded)
        rows = [
            _video_side_row(f"manifest's ({len(stats.buckets)} buckets)", stats, plan),
            _video_side_row(f"fitted ({self.fit.num_buckets} buckets)", self.stats, mine),
        ]
        head = ["bucket set", "used", "clips", "crop % mean", "trim % mean", "step cost max/mean",
                "steps", "dropped", "padded"]  # fmt: skip
        out.table("bucket sets on this layout", head, rows)
        kind = "dropped" if self.fit.drop_last else "padded"
        bands = self.fit.bucket_set.bands
        out.line(
            f"fitted: {self.fit.waste} clips {kind} ({100 * self.fit.waste_share:.2f} % <= "
            f"{100 * self.fit.max_waste:.2f} %), mean crop loss "
            f"{100 * self.fit.mean_crop_loss:.2f} %, mean trim loss "
            f"{100 * self.fit.mean_trim_loss:.2f} %; {len(bands)} bands, "
            f"{sum(len(b.classes) for b in bands)} aspect classes, frame counts "
            f"{list(self.fit.bucket_set.frame_counts)}"
        )
        s = self.stats
        fitted_rows = [
            [j, f"{w}x{h}", b["frames"], int(s.counts[j]), f"{100 * s.mean_crop_loss[j]:.1f}",
             f"{100 * s.mean_trim_loss[j]:.1f}", int(s.batch_sizes[j]), int(s.batches[j]),
             int(s.dropped[j]), int(s.padded[j])]
            for j, b in enumerate(s.buckets)
            for w, h in [b["resolution"]]
        ]  # fmt: skip
        out.table(
            "fitted buckets",
            [
                "id",
                "bucket",
                "frames",
                "clips",
                "crop % mean",
                "trim % mean",
                "batch",
                "steps",
                "dropped",
                "padded",
            ],
            fitted_rows,
        )
        if self.written:
            out.line(f"wrote {self.written}: the manifest re-bucketed by the fitted set")


def _video_side_row(name: str, stats: Any, plan: tuple[int, int, int]) -> list[object]:
    o = stats.overall
    return [
        name,
        int((stats.counts > 0).sum()),
        int(o["images"]),
        f"{100 * o['mean_crop_loss']:.2f}",
        f"{100 * o['mean_trim_loss']:.2f}",
        f"{o['step_cost_max_over_mean']:.2f}",
        *plan,
    ]
