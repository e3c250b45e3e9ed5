"""What the command line's commands share: tables, exit codes, and the bucket calculator options.

Tables use rich when it is installed (``pip install 'dataorder[cli]'``) and plain text otherwise
(or with ``--plain``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import IO, Any

__all__ = [
    "EXIT_CHECKS_FAILED",
    "EXIT_USAGE",
    "Output",
    "add_calculator_args",
    "calculator_from_args",
    "int_arg",
    "one_line",
]

#: Exit status of a user error (bad argument, unreadable file): argparse's convention.
EXIT_USAGE = 2
#: Exit status when the demo ran but a check failed, or a demo process crashed.
EXIT_CHECKS_FAILED = 1


class Output:
    """Tables through rich when available (and not ``--plain``), aligned plain text otherwise."""

    def __init__(self, stream: IO[str], plain: bool) -> None:
        self.stream = stream
        self.console: Any = None
        if not plain:
            try:
                from rich.console import Console
            except ImportError:
                pass
            else:
                # a wide virtual terminal when piped, so tables are not wrapped at 80 columns
                width = None if stream.isatty() else 120
                self.console = Console(file=stream, width=width, highlight=False)

    def line(self, text: str = "") -> None:
        if self.console is not None:
            self.console.print(text, markup=False, soft_wrap=True)
        else:
            print(text, file=self.stream)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        cells = [[str(c) for c in row] for row in rows]
        if self.console is not None:
            from rich import box
            from rich.table import Table

            # no vertical rules: as compact as the plain layout, so wide tables fit a terminal
            table = Table(
                title=title,
                title_justify="left",
                box=box.SIMPLE_HEAD,
                show_edge=False,
                collapse_padding=True,
            )
            for i, name in enumerate(columns):
                if _numeric(cells, i):
                    table.add_column(name, justify="right", no_wrap=True)
                else:
                    table.add_column(name, justify="left", no_wrap=True)
            for row in cells:
                table.add_row(*row)
            self.console.print(table)
            return
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

        def fmt(row: Sequence[str]) -> str:
            parts = [
                v.rjust(w) if _numeric(cells, i) else v.ljust(w)
                for i, (v, w) in enumerate(zip(row, widths, strict=True))
            ]
            return "  ".join(parts).rstrip()

        print(title, file=self.stream)
        print(fmt(list(columns)), file=self.stream)
        print("  ".join("-" * w for w in widths), file=self.stream)
        for row in cells:
            print(fmt(row), file=self.stream)

    def fields(self, title: str, items: Sequence[tuple[str, object]]) -> None:
        """``key  value`` lines under a title (values are long: they wrap, never truncate)."""
        self.line(title)
        width = max(len(k) for k, _ in items)
        for key, value in items:
            self.line(f"  {key.ljust(width)}  {value}")

    def json(self, value: object) -> None:
        print(json.dumps(value, indent=1, default=str), file=self.stream)


def _numeric(cells: Sequence[Sequence[str]], column: int) -> bool:
    values = [row[column] for row in cells if row[column] not in ("", "-")]
    if not values:
        return False
    try:
        for v in values:
            float(v.rstrip("%").replace(",", ""))
    except ValueError:
        return False
    return True


def int_arg(min_value: int) -> Callable[[str], int]:
    """An argparse ``type`` for an int of at least ``min_value`` (1: positive, 0: non-negative).

    A value out of range is a usage error naming the option, never a silently ignored 0 or a
    negative size passed on (``argument --count: must be a positive int; got '-1'``).
    """
    what = {0: "a non-negative int", 1: "a positive int"}.get(min_value, f"an int >= {min_value}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}; got {text!r}") from None
        if value < min_value:
            raise argparse.ArgumentTypeError(f"must be {what}; got {text!r}")
        return value

    parse.__name__ = what  # argparse names the type in some of its messages
    return parse


# -- the bucket calculator options -----------------------------------------------------------------
#: ``--preset`` when none is given.
DEFAULT_IMAGE_PRESET = "1024p"
DEFAULT_VIDEO_PRESET = "wan2.1-480p"


def calculator_from_args(args: argparse.Namespace) -> Any:
    """The calculator the options describe: a video one with ``--video``, else an image one.

    Raises:
        ValueError: For an option the chosen kind does not take, or an unknown preset.
    """
    if getattr(args, "video", False):
        return _video_calculator(args)
    from dataorder.diffusion.buckets import MultiTierBucketCalculator

    for flag, value in (("--max-frames", getattr(args, "max_frames", None)),
                        ("--max-upscale", getattr(args, "max_upscale", None))):  # fmt: skip
        if value is not None:
            raise ValueError(f"{flag} applies to video buckets: add --video")
    quantization = 64 if args.quantization is None else args.quantization
    kwargs: dict[str, Any] = {"compat": args.compat}
    if getattr(args, "no_upscale", False):
        kwargs["no_upscale"] = True
    if args.max_pixels is not None:
        return MultiTierBucketCalculator(quantization, args.max_pixels, **kwargs)
    preset = args.preset or DEFAULT_IMAGE_PRESET
    return MultiTierBucketCalculator.from_preset(preset, quantization, **kwargs)


def _video_calculator(args: argparse.Namespace) -> Any:
    from dataorder.diffusion.video import VideoBucketCalculator

    for flag, given in (("--max-pixels", args.max_pixels is not None),
                        ("--compat", args.compat != "default"),
                        ("--no-upscale", getattr(args, "no_upscale", False))):  # fmt: skip
        if given:
            raise ValueError(
                f"{flag} applies to image buckets; a video bucket set comes from --preset, "
                "--max-frames, --max-upscale and --quantization"
            )
    overrides: dict[str, Any] = {}
    if args.max_frames is not None:
        overrides["max_frames"] = args.max_frames
    if args.max_upscale is not None:
        overrides["max_upscale"] = None if args.max_upscale == "none" else args.max_upscale
    if args.quantization is not None:
        overrides["quantization"] = args.quantization
    return VideoBucketCalculator.from_preset(args.preset or DEFAULT_VIDEO_PRESET, **overrides)


def _upscale_arg(text: str) -> Any:
    """``--max-upscale``: ``none``, or an exact number such as ``3/2`` or ``1.5``."""
    from fractions import Fraction

    if text.lower() == "none":
        return "none"
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(
            f"must be a number >= 1 such as 3/2 or 1.5, or none; got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a number >= 1 or none; got {text!r}")
    return value


def add_calculator_args(p: argparse.ArgumentParser, *, upscale: bool, video: bool = False) -> None:
    """The bucket-set options; with ``video``, also ``--video`` and its own options."""
    presets = "256p, 512p, 768p, 1024p or 1536p (default: 1024p)"
    if video:
        from dataorder.diffusion.video import PRESETS

        presets += f"; with --video: {', '.join(PRESETS)} (default: {DEFAULT_VIDEO_PRESET})"
    p.add_argument("--preset", default=None, help=f"pixel budget: {presets}")
    p.add_argument(
        "--max-pixels",
        type=int_arg(1),
        default=None,
        help="an explicit pixel budget instead of --preset",
    )
    p.add_argument(
        "--quantization",
        type=int_arg(1),
        default=None,
        help="bucket sides are multiples (default: 64; video: the preset's patch in pixels)",
    )
    p.add_argument(
        "--compat",
        default="default",
        choices=("default", "nemo"),
        help="'nemo': NeMo Automodel's exact buckets and choices",
    )
    if upscale:
        p.add_argument(
            "--no-upscale",
            action="store_true",
            help="only assign an image to buckets that fit inside it",
        )
    if video:
        p.add_argument(
            "--video",
            action="store_true",
            help="video buckets (frames x height x width under a token budget)",
        )
        p.add_argument(
            "--max-frames",
            type=int_arg(1),
            default=None,
            help="with --video: the longest bucket (default: the preset's)",
        )
        p.add_argument(
            "--max-upscale",
            type=_upscale_arg,
            default=None,
            help="with --video: the largest upscale of a clip, e.g. 3/2 (the default) or none",
        )


def one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        text = f"{err.strerror}: {err.filename}"
    return " ".join(text.split())
