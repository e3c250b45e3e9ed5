"""The ``dataorder`` command line (also ``python -m dataorder``).

Subcommands:

* ``dataorder demo``: a real 8-process gloo job that trains with every sampler, checkpoints
  mid-epoch, restarts on another data-parallel size and checks the result
  (:mod:`dataorder.tools.demo`);
* ``dataorder buckets --preset 1024p``: the bucket table of a preset (``--video --preset
  wan2.1-480p``: of a video model's setting, :mod:`dataorder.diffusion.video`);
* ``dataorder scan DIR -o MANIFEST``: image sizes from headers into a manifest
  (:mod:`dataorder.diffusion.scan`); with ``--video``, clip sizes and frame counts
  (:mod:`dataorder.diffusion.video_scan`, needs PyAV: ``pip install 'dataorder[video]'``);
* ``dataorder plan MANIFEST --num-replicas 64 --batch-size 8``: what an epoch of the bucket
  sampler looks like on that layout: samples per bucket, crop loss (and trim loss for clips),
  dropped or padded samples, steps (:mod:`dataorder.diffusion.stats`); ``--fit`` adds a bucket
  set fitted to the manifest, beside its own (:mod:`dataorder.diffusion.fit`; for a video
  manifest, ``--video --fit``: :mod:`dataorder.diffusion.video_fit`);
* ``dataorder inspect STATE.json``: what a saved sampler state means, and the next batch.

Tables use rich when it is installed (``pip install 'dataorder[cli]'``) and plain text otherwise
(or with ``--plain``). A user error prints one line, ``dataorder: error: ...``, and exits with
status 2, without a traceback (``--traceback`` shows it); a demo whose checks fail exits with 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

from dataorder.tools.inspect_state import cmd_inspect
from dataorder.tools.output import (
    DEFAULT_IMAGE_PRESET,
    DEFAULT_VIDEO_PRESET,
    EXIT_CHECKS_FAILED,
    EXIT_USAGE,
    Output,
    add_calculator_args,
    calculator_from_args,
    int_arg,
    one_line,
)
from dataorder.tools.plan import cmd_plan

__all__ = ["EXIT_CHECKS_FAILED", "EXIT_USAGE", "build_parser", "main"]

# Exceptions that mean "the input was wrong", reported as one line. Anything else is a bug and
# keeps its traceback.
_USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, OSError, ImportError)


class _UsageError(Exception):
    """An argparse error, carried out of the parser so main() can print it as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


def _mesh_arg(name: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        from dataorder.tools.demo import MeshShape

        try:
            return MeshShape.parse(text, name=name)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def _default_first_mesh(mesh: Any) -> Any:
    """Twice the data-parallel size of ``mesh`` on as many processes when it can, else more."""
    from dataorder.tools.demo import MeshShape

    if mesh.cp % 2 == 0:
        return MeshShape(mesh.dp * 2, mesh.tp, mesh.cp // 2)
    if mesh.tp % 2 == 0:
        return MeshShape(mesh.dp * 2, mesh.tp // 2, mesh.cp)
    return MeshShape(mesh.dp * 2, mesh.tp, mesh.cp)


def _cmd_demo(args: argparse.Namespace, out: Output) -> int:
    from dataorder.tools.demo import CHECKS, SAMPLERS, DemoConfig, DemoError, run_demo

    samplers = tuple(args.samplers.split(",")) if args.samplers else SAMPLERS
    first = args.first_mesh or _default_first_mesh(args.mesh)
    config = DemoConfig(
        first_mesh=first,
        mesh=args.mesh,
        micro_batch_size=args.micro_batch_size,
        seed=args.seed,
        timeout=args.timeout,
        samplers=samplers,
        inject_bug=args.inject_bug,
    )
    if not args.json:
        out.line(
            f"dataorder demo: {first.world} processes on mesh ({first}), checkpoint mid-epoch, "
            f"restart as {config.mesh.world} processes on ({config.mesh}); "
            f"global batch {config.global_batch_size} in both phases"
        )
    try:
        report = run_demo(
            config, args.out, log=None if args.json else out.line, plot=not args.no_plot
        )
    except DemoError as err:
        print(f"dataorder: error: {err}", file=sys.stderr)
        return EXIT_CHECKS_FAILED
    if args.json:
        out.json(report.to_json())
        return 0 if report.ok else EXIT_CHECKS_FAILED
    columns = ["sampler", "steps", *CHECKS.values(), "drop/pad", "loss"]
    rows = []
    for r in report.results:
        cells = [r.name, f"{r.steps[0]}+{r.steps[1]}"]
        for key in CHECKS:
            cells.append("-" if key not in r.checks else "ok" if r.checks[key] else "FAILED")
        cells.append(f"{r.dropped}/{r.padded}")
        cells.append(f"{r.loss[0]:.2f}>{r.loss[1]:.2f}")
        rows.append(cells)
    out.table(
        f"({config.first_mesh}) -> ({config.mesh}): optimizer steps before+after the restart",
        columns,
        rows,
    )
    for r in report.results:
        for note in r.notes:
            out.line(f"{r.name}: {note}")
    for r in report.results:
        for key, passed in r.checks.items():
            if not passed:
                out.line(f"FAILED {r.name} {CHECKS[key]}: {r.details[key]}")
    for name, path in report.outputs.items():
        if not name.startswith("checkpoint:"):
            out.line(f"wrote {path}")
    ckpt = Path(report.outputs[f"checkpoint:{report.results[0].name}"]).parent
    hint = f"dataorder inspect {ckpt}/{report.results[0].name}.json"
    if any(r.name == "buckets" for r in report.results):
        hint += f", or {ckpt}/buckets.json --manifest {ckpt}/buckets.manifest.tsv"
    out.line(f"wrote the restart checkpoint to {ckpt}/ (try: {hint})")
    seconds = report.seconds
    verdict = "all checks passed" if report.ok else "SOME CHECKS FAILED"
    out.line(
        f"{verdict} in {seconds['total']:.1f} s "
        f"(phase 0 {seconds['phase0']:.1f} s, phase 1 {seconds['phase1']:.1f} s)"
    )
    return 0 if report.ok else EXIT_CHECKS_FAILED


# -- buckets --------------------------------------------------------------------------------------
def _aspect(w: int, h: int) -> str:
    from dataorder.diffusion.table import aspect_name

    return aspect_name(w / h)


def _cmd_buckets(args: argparse.Namespace, out: Output) -> int:
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
    source = f"--max-pixels {budget:,}" if args.max_pixels is not None else calc_preset(args)
    out.table(
        f"{len(buckets)} buckets: {source}, quantization {calc.quantization}, "
        f"compat {calc.compat!r}",
        ["id", "resolution", "w/h", "shape", "pixels", "of budget"],
        rows,
    )
    return 0


def calc_preset(args: argparse.Namespace) -> str:
    """The preset the options name (their default if none)."""
    return str(args.preset or (DEFAULT_VIDEO_PRESET if args.video else DEFAULT_IMAGE_PRESET))


def _video_buckets(args: argparse.Namespace, out: Output, calc: Any, buckets: Any) -> int:
    from dataorder.diffusion.video import PRESETS

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
    name = calc_preset(args)
    out.table(
        f"{len(buckets)} buckets: {name}, {len(frames)} frame counts {frames[0]}..{frames[-1]}, "
        f"max_tokens {calc.max_tokens:,}, quantization {calc.quantization}, "
        f"max_upscale {upscale}",
        ["id", "frames", "resolution", "w/h", "shape", "tokens", "of budget"]
        + ([] if sizes is None else [f"batch (b={args.batch_size} at the budget)"]),
        rows,
    )
    out.line(PRESETS[name].description)
    out.line(f"source: {PRESETS[name].source}")
    return 0


# -- scan -----------------------------------------------------------------------------------------
def _cmd_scan(args: argparse.Namespace, out: Output) -> int:
    from dataorder.diffusion.manifest import manifest_from_scan, write_manifest
    from dataorder.diffusion.scan import scan_images

    if not os.path.isdir(args.directory):
        raise ValueError(f"DIR must be an existing directory; got DIR={args.directory!r}")
    calc = calculator_from_args(args)
    what = "clips" if args.video else "images"
    progress: Any = False
    if not args.no_progress:
        try:
            import rich  # noqa: F401  (the scan draws the bar with it)
        except ImportError:
            progress = _plain_progress(sys.stderr, what)
        else:
            progress = True
    unassigned = None
    if args.video:
        from dataorder.diffusion.video_scan import scan_videos

        scan = scan_videos(args.directory, calc, workers=args.workers, progress=progress)
        unassigned = scan.unassigned()
        manifest = manifest_from_scan(scan)
    else:
        manifest = scan_images(args.directory, calc, workers=args.workers, progress=progress)
    if len(manifest) == 0:
        reason = f" ({len(manifest.errors)} unusable)" if manifest.errors else ""
        one = what[:-1]
        raise ValueError(f"no readable {one} under {args.directory}{reason}; nothing written")
    write_manifest(manifest, args.output)
    used = int((manifest.bucket_counts() > 0).sum())
    out.line(
        f"scanned {len(manifest)} {what} into {used} of {len(manifest.buckets)} buckets; "
        f"wrote {args.output}"
    )
    errors = manifest.errors
    if unassigned is not None and any(unassigned.values()):
        out.line(
            f"{unassigned['too_short']} clips too short and {unassigned['too_small']} too small "
            "for every bucket were left out (listed in the manifest header with the reason)"
        )
        errors = [e for e in errors if not e[1].startswith(("too short:", "too small:"))]
    if errors:
        out.line(f"{len(errors)} files could not be read and were skipped:")
        for path, reason in errors[:5]:
            out.line(f"  {path}: {reason}")
        if len(errors) > 5:
            out.line(f"  ... and {len(errors) - 5} more (listed in the manifest header)")
    return 0


def _plain_progress(stream: IO[str], what: str = "images") -> Callable[[int, int], None]:
    last = [-1]

    def report(done: int, total: int) -> None:
        percent = 100 * done // max(total, 1)
        if percent != last[0] and (percent % 10 == 0 or done == total):
            last[0] = percent
            print(f"scanned {done}/{total} {what} ({percent}%)", file=stream, flush=True)

    return report


# -- the parser -----------------------------------------------------------------------------------
def _resolution(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be WIDTHxHEIGHT such as 512x512; got {text!r}"
        ) from None
    if w < 1 or h < 1:
        raise argparse.ArgumentTypeError(f"must be positive; got {text!r}")
    return w, h


def _share(text: str) -> float:
    """A share in ``[0, 1]`` (``--max-waste``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1]; got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1]; got {text!r}")
    return value


def _int_list(text: str) -> list[int]:
    """Comma-separated positive ints (``--source-sizes``)."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be positive ints separated by commas; got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"must be positive ints separated by commas; got {text!r}")
    return values


def _float_list(text: str) -> list[float]:
    """Comma-separated non-negative numbers (``--weights``)."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be numbers separated by commas; got {text!r}"
        ) from None
    return values


def build_parser() -> argparse.ArgumentParser:
    """The ``dataorder`` argument parser."""
    from dataorder import __version__

    parser = _Parser(
        prog="dataorder",
        description="Which samples every data-parallel rank reads at every step.",
    )
    parser.add_argument("--version", action="version", version=f"dataorder {__version__}")
    common = _Parser(add_help=False)
    common.add_argument("--plain", action="store_true", help="plain-text tables (no rich)")
    common.add_argument("--traceback", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser(
        "demo",
        parents=[common],
        help="run an 8-process CPU job that checkpoints, shrinks and checks itself",
        description=(
            "Train a tiny model with every sampler on a real torch.distributed (gloo) job, "
            "checkpoint mid-epoch through torchdata's StatefulDataLoader, restart on another "
            "data-parallel size and check: DP ranks disjoint, TP/CP replicas identical, equal "
            "batch counts, lock-step buckets, nothing lost or repeated across the restart."
        ),
    )
    p.add_argument(
        "--mesh",
        type=_mesh_arg("--mesh"),
        default="2,2,2",
        help="dp,tp,cp mesh after the restart (default: 2,2,2, 8 processes)",
    )
    p.add_argument(
        "--first-mesh",
        type=_mesh_arg("--first-mesh"),
        default=None,
        help="dp,tp,cp mesh before the restart (default: twice --mesh's dp, e.g. 4,2,1)",
    )
    p.add_argument("--out", default="out/demo", help="output directory (default: out/demo)")
    p.add_argument("--seed", type=int, default=1234, help="seed of every sampler (default: 1234)")
    p.add_argument("--micro-batch-size", type=int, default=4, help="per-rank batch (default: 4)")
    p.add_argument(
        "--samplers",
        default=None,
        help="comma-separated subset of megatron-single,megatron-cyclic,buckets,distributed",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per phase (default: 120)")
    p.add_argument("--no-plot", action="store_true", help="do not write schedule.png")
    p.add_argument(
        "--inject-bug",
        default=None,
        choices=("global-world", "no-resume"),
        help=(
            "make a classic mistake on purpose and watch the checks fail: 'global-world' builds "
            "the samplers with the global rank and world size, 'no-resume' restarts without "
            "loading the checkpoint"
        ),
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser(
        "buckets",
        parents=[common],
        help="the bucket table of a preset",
        description=(
            "Print the resolution buckets of a pixel budget, or with --video the (frames, "
            "height, width) buckets of a video model's token budget."
        ),
    )
    add_calculator_args(p, upscale=False, video=True)
    p.add_argument(
        "--batch-size",
        type=int_arg(1),
        default=None,
        help="with --video: the per-rank batch at the full budget; show each bucket's",
    )
    p.add_argument("--json", action="store_true", help="print the buckets as JSON")
    p.set_defaults(func=_cmd_buckets)

    p = sub.add_parser(
        "scan",
        parents=[common],
        help="read image (or video) sizes from headers into a manifest",
        description=(
            "Read the size of every image under DIR (headers only) and bucket it; with --video, "
            "the size and frame count of every clip (needs PyAV: pip install 'dataorder[video]')."
        ),
    )
    p.add_argument("directory", metavar="DIR")
    p.add_argument("-o", "--output", required=True, metavar="MANIFEST", help="manifest to write")
    add_calculator_args(p, upscale=True, video=True)
    p.add_argument("--workers", type=int_arg(1), default=None, help="reader threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_scan)

    p = sub.add_parser(
        "plan",
        parents=[common],
        help="what an epoch of the bucket sampler looks like on a layout",
        description=(
            "For a manifest and a data-parallel layout: images per bucket, crop loss, samples "
            "dropped or padded, steps per epoch, and a PNG."
        ),
    )
    p.add_argument("manifest", metavar="MANIFEST")
    p.add_argument("--num-replicas", type=int_arg(1), required=True, help="data-parallel size")
    p.add_argument("--batch-size", type=int_arg(1), required=True, help="per-rank batch size")
    p.add_argument("--drop-last", action="store_true", help="drop each bucket's partial batch")
    p.add_argument(
        "--dynamic-batch-size",
        action="store_true",
        help="scale the batch size with each bucket's pixels",
    )
    p.add_argument(
        "--base-resolution",
        type=_resolution,
        default=(512, 512),
        help="where --batch-size applies with --dynamic-batch-size (default: 512x512)",
    )
    p.add_argument("--png", default=None, help="write a plot of the plan to this PNG")
    p.add_argument(
        "--fit",
        action="store_true",
        help="also fit a bucket set to the manifest for this layout, shown beside its own",
    )
    p.add_argument("--video", action="store_true", help="the manifest is a video one (checked)")
    p.add_argument(
        "--max-waste",
        type=_share,
        default=0.01,
        help="with --fit: largest share of samples dropped or padded (default: 0.01)",
    )
    p.add_argument(
        "--write-manifest",
        metavar="PATH",
        default=None,
        help="with --fit: write the manifest re-bucketed by the fitted set",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser(
        "inspect",
        parents=[common],
        help="what a saved sampler state means, and the next batch",
        description=(
            "Explain a sampler state (a sampler's state_dict() or a StatefulDataLoader state "
            "saved as JSON): kind, epoch, position, layout, config; and, when the sampler can "
            "be rebuilt, the next batch on each rank."
        ),
    )
    p.add_argument("state", metavar="STATE.json")
    p.add_argument("--rank", type=int_arg(0), default=None, help="show only this rank's next batch")
    p.add_argument(
        "--num-replicas",
        type=int_arg(1),
        default=None,
        help="show the next batches on this data-parallel size (an elastic resume)",
    )
    p.add_argument(
        "--micro-batch-size",
        type=int_arg(1),
        default=None,
        help="Megatron: another micro-batch size",
    )
    p.add_argument(
        "--count",
        type=int_arg(1),
        default=8,
        help="indices to show for a per-index sampler (default: 8)",
    )
    p.add_argument("--manifest", default=None, help="bucket sampler: the dataset's manifest")
    p.add_argument(
        "--source-sizes",
        type=_int_list,
        default=None,
        help="blended sampler: samples in each source, e.g. 1000,500,250",
    )
    p.add_argument(
        "--weights",
        type=_float_list,
        default=None,
        help="blended sampler: the weights it was built with, e.g. 0.5,0.3,0.2",
    )
    p.add_argument(
        "--sizes",
        default=None,
        help="bucket sampler: a CSV of width,height rows (with --preset etc.)",
    )
    add_calculator_args(p, upscale=False)
    p.add_argument(
        "--base-resolution",
        type=_resolution,
        default=(512, 512),
        help="bucket sampler with dynamic batch sizes: its base resolution (default: 512x512)",
    )
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.set_defaults(func=cmd_inspect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, :data:`EXIT_USAGE` for a user error, :data:`EXIT_CHECKS_FAILED` when the
        demo's checks fail.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as err:
        print(f"dataorder: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exit_:  # --help and --version
        return int(exit_.code or 0)
    out = Output(sys.stdout, plain=args.plain)
    try:
        status: int = args.func(args, out)
    except _USER_ERRORS as err:
        if args.traceback:
            raise
        print(f"dataorder: error: {one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("dataorder: interrupted", file=sys.stderr)
        return 130
    return status
