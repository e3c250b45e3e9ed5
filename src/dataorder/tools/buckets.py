"""``dataorder buckets``: the bucket table of a preset or a pixel budget, or with ``--video`` of a
video model's setting (:mod:`dataorder.diffusion.calculators.video`)."""

from __future__ import annotations

import argparse
from typing import Any

from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.diffusion.calculators.video import PRESETS as VIDEO_PRESETS
from dataorder.tools.output import (
    DEFAULT_IMAGE_PRESET,
    DEFAULT_VIDEO_PRESET,
    Output,
    add_calculator_args,
    calculator_from_args,
    int_arg,
)

__all__ = ["add_parser", "preset_name", "run"]


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``dataorder buckets`` to ``subparsers``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "buckets",
        parents=parents,
        help="the bucket table of a preset",
        description=(
            "Print the resolution buckets of a pixel budget, or with --video the (frames, "
            "height, width) buckets of a video model's token budget."
        ),
    )
    add_calculator_args(p, upscale=False, video=True)
    p.add_argument(
        "--batch-size",
        type=int_arg(1, MAX_BATCH_SIZE),
        default=None,
        help="with --video: the per-rank batch at the full budget; show each bucket's "
        "(default: not shown)",
    )
    p.add_argument("--json", action="store_true", help="print the buckets as JSON")
    return p


def _aspect(w: int, h: int) -> str:
    # not at the top: --help would load diffusion.sampler and diffusion.scan for it (NOTE [ What
    # a subcommand module imports ] in dataorder.tools.cli)
    from dataorder.diffusion.sampler.table import aspect_name

    return aspect_name(w / h)


def preset_name(args: argparse.Namespace) -> str:
    """The preset the options name (their default if none)."""
    return str(args.preset or (DEFAULT_VIDEO_PRESET if args.video else DEFAULT_IMAGE_PRESET))


def run(args: argparse.Namespace, out: Output) -> int:
    """Print the bucket table the options describe."""
    calc = calculator_from_args(args)
    if args.batch_size is not None and not args.video:
        raise ValueError("--batch-size applies with --video (cost-model batch sizes per bucket)")
    buckets = calc.get_all_buckets()
    if args.video:
        return _video_buckets(args, out, calc, buckets)
    if args.json:
        out.json({"calculator": calc.config(), "buckets": buckets})
        return 0
    budget = calc.max_pixels
    rows = [
        [
            b["id"],
            f"{b['resolution'][0]}x{b['resolution'][1]}",
            f"{b['aspect_ratio']:.3f}",
            _aspect(*b["resolution"]),
            f"{b['pixels']:,}",
            f"{b['pixels'] / budget:.1%}",
        ]
        for b in buckets
    ]
    source = f"--max-pixels {budget:,}" if args.max_pixels is not None else preset_name(args)
    out.table(
        f"{len(buckets)} buckets: {source}, quantization {calc.quantization}, "
        f"compat {calc.compat!r}",
        ["id", "resolution", "w/h", "shape", "pixels", "of budget"],
        rows,
    )
    return 0


def _video_buckets(args: argparse.Namespace, out: Output, calc: Any, buckets: Any) -> int:
    sizes = None if args.batch_size is None else calc.batch_sizes(args.batch_size).tolist()
    if args.json:
        extra = {} if sizes is None else {"batch_sizes": sizes}
        out.json({"calculator": calc.config(), "buckets": buckets, **extra})
        return 0
    rows = [
        [
            b["id"],
            b["frames"],
            f"{b['resolution'][0]}x{b['resolution'][1]}",
            f"{b['aspect_ratio']:.3f}",
            _aspect(*b["resolution"]),
            f"{b['tokens']:,}",
            f"{b['tokens'] / calc.max_tokens:.1%}",
            *([] if sizes is None else [sizes[b["id"]]]),
        ]
        for b in buckets
    ]
    frames = calc.frame_counts
    upscale = "none" if calc.max_upscale is None else str(calc.max_upscale)
    name = preset_name(args)
    out.table(
        f"{len(buckets)} buckets: {name}, {len(frames)} frame counts {frames[0]}..{frames[-1]}, "
        f"max_tokens {calc.max_tokens:,}, quantization {calc.quantization}, "
        f"max_upscale {upscale}",
        ["id", "frames", "resolution", "w/h", "shape", "tokens", "of budget"]
        + ([] if sizes is None else [f"batch (b={args.batch_size} at the budget)"]),
        rows,
    )
    out.line(VIDEO_PRESETS[name].description)
    out.line(f"source: {VIDEO_PRESETS[name].source}")
    return 0
