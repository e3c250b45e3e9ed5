"""What the command line's commands share: tables, exit codes, and the bucket calculator options.

NOTE [ Tables are never cut ]
    A table's cells are the command's answer, so no layout may cut one: in a terminal, tables
    use rich when it is installed (``pip install 'dataorder[cli]'``), whose columns wrap and fold
    a cell that does not fit; anywhere else (a pipe, a file, a CI log, ``| tee``) and with
    ``--plain``, they are aligned plain text, as wide as their widest cell. A terminal too narrow
    for rich to keep a character of every column (fewer than :data:`RICH_COLUMN_WIDTH` columns
    of it per table column: rich's last resort then squeezes a column to its padding and drops
    its cells) gets the plain layout too, whose long lines the terminal wraps but never cuts.

NOTE [ Tables fold between columns ]
    A table wider than the terminal is not squeezed (rich would break ``768x134 / 4`` and the
    header ``bucket`` into ``buck/et``): its columns are laid out in groups, each as wide as its
    widest cell, each group as wide as the terminal allows, the first column (the row's key:
    the id, the sampler, the rank) repeated in every group, one table after the other. Only a
    column that does not fit beside the key alone wraps its cells, at spaces first
    (:func:`column_groups`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import IO, Any

from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE
from dataorder.diffusion.buckets.video_frames import MAX_VIDEO_SIZE
from dataorder.diffusion.calculators.image import (
    COMPATS,
    MAX_PIXELS,
    MAX_QUANTIZATION,
    PRESETS,
    MultiTierBucketCalculator,
)
from dataorder.diffusion.calculators.video import PRESETS as VIDEO_PRESETS
from dataorder.diffusion.calculators.video import VideoBucketCalculator

__all__ = [
    "COLUMN_GAP",
    "EXIT_CHECKS_FAILED",
    "EXIT_USAGE",
    "INT64_MAX",
    "RICH_COLUMN_WIDTH",
    "Output",
    "add_calculator_args",
    "calculator_from_args",
    "check_output_dir",
    "check_output_file",
    "column_groups",
    "cut_value",
    "float_arg",
    "int_arg",
    "one_line",
    "resolution_arg",
    "stderr_is_terminal",
    "working",
]

#: Exit status of a user error (bad argument, unreadable file): argparse's convention.
EXIT_USAGE = 2
#: Exit status when the demo ran but a check failed, or a demo process crashed.
EXIT_CHECKS_FAILED = 1
#: Terminal columns per table column below which a table is laid out plain, not by rich
#: (NOTE [ Tables are never cut ]; rich 15 lost cells of the demo table from 3.3 a column).
#: With tables folded between columns (NOTE [ Tables fold between columns ]), a group holds the
#: key and at least one column, so a terminal narrower than twice this is laid out plain.
RICH_COLUMN_WIDTH = 4
#: Spaces between two columns of a table, plain or rich.
COLUMN_GAP = 2


def _is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal: progress is shown there, and only there (NOTE [ Progress
    goes to a terminal's stderr ])."""
    return _is_terminal(sys.stderr)


@contextlib.contextmanager
def working(what: str, stream: IO[str] | None = None) -> Iterator[None]:
    """Show that ``what`` is under way while the block runs, on stderr, only if it is a terminal.

    NOTE [ Progress goes to a terminal's stderr ]
        Long work (packing 10^7 documents, fitting or scanning 10^6 items) says that it works,
        so that a user does not wait on a silent terminal; it says so on stderr, never on
        stdout (whose text is the command's answer, read by scripts), and not at all when
        stderr is not a terminal (a pipe, a file, a CI log), where a live line is noise. With
        rich (``pip install 'dataorder[cli]'``) it is a spinner with the time elapsed, removed
        when the work ends; without it, one line before and one after.
    """
    stream = sys.stderr if stream is None else stream
    if not _is_terminal(stream):
        yield
        return
    try:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    except ImportError:
        start = time.perf_counter()
        print(f"{what} ...", file=stream, flush=True)
        yield
        print(f"{what}: {time.perf_counter() - start:.1f} s", file=stream, flush=True)
        return
    console = Console(file=stream, highlight=False)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        progress.add_task(what, total=None)
        yield


class Output:
    """Tables through rich in a terminal when it is installed (and not ``--plain``), aligned
    plain text otherwise; no cell is ever cut (NOTE [ Tables are never cut ])."""

    def __init__(self, stream: IO[str], plain: bool) -> None:
        self.stream = stream
        self.console: Any = None
        if not plain and _is_terminal(stream):
            try:
                from rich.console import Console
            except ImportError:
                pass
            else:
                self.console = Console(file=stream, highlight=False)

    def line(self, text: str = "") -> None:
        if self.console is not None:
            self.console.print(text, markup=False, soft_wrap=True)
        else:
            print(text, file=self.stream)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        cells = [[str(c) for c in row] for row in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
        if self.console is not None and self.console.width >= RICH_COLUMN_WIDTH * 2:
            # rich pads the table's two edges by a space each
            groups = column_groups(widths, self.console.width - 2)
            for k, group in enumerate(groups):
                part = title if k == 0 else "(continued)"
                self._rich_table(
                    part, [columns[i] for i in group], [[r[i] for i in group] for r in cells]
                )
            return

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

    def _rich_table(self, title: str, columns: Sequence[str], cells: list[list[str]]) -> None:
        from rich import box
        from rich.table import Table

        # no vertical rules: as compact as the plain layout, so wide tables fit a terminal; the
        # title is a line of its own, which the terminal wraps but rich would fold to the table
        self.line(title)
        table = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            collapse_padding=True,
        )
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
        fits = sum(widths) + COLUMN_GAP * (len(widths) - 1) + 2 <= self.console.width
        for i, name in enumerate(columns):
            justify: Any = "right" if _numeric(cells, i) else "left"
            if fits:  # NOTE [ Tables fold between columns ]: no cell or header is broken
                table.add_column(name, justify=justify, no_wrap=True, min_width=widths[i])
            else:  # one column wider than the terminal: wrap at spaces, fold a longer word
                table.add_column(name, justify=justify, overflow="fold")
        for row in cells:
            table.add_row(*row)
        self.console.print(table)

    def fields(self, title: str, items: Sequence[tuple[str, object]]) -> None:
        """``key  value`` lines under a title (values are long: they wrap, never truncate)."""
        self.line(title)
        width = max(len(k) for k, _ in items)
        for key, value in items:
            self.line(f"  {key.ljust(width)}  {value}")

    def json(self, value: object) -> None:
        print(json.dumps(value, indent=1, default=str), file=self.stream)


def column_groups(widths: Sequence[int], width: int) -> list[list[int]]:
    """Column indices in groups that each fit ``width`` terminal columns at their natural
    ``widths`` (:data:`COLUMN_GAP` between columns), the first column (the row's key) leading
    every group (NOTE [ Tables fold between columns ]). A column that does not fit beside the key
    alone is a group by itself (with the key), whose cells then wrap.
    """
    groups: list[list[int]] = []
    current, used = [0], widths[0] if widths else 0
    for i in range(1, len(widths)):
        if len(current) > 1 and used + COLUMN_GAP + widths[i] > width:
            groups.append(current)
            current, used = [0], widths[0]
        current.append(i)
        used += COLUMN_GAP + widths[i]
    groups.append(current)
    return groups


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


#: The largest value of an int option that names no tighter bound: int64's (the library's arrays
#: and states hold int64; a value past it is a usage error, never an OverflowError).
INT64_MAX = 2**63 - 1


def int_arg(min_value: int, max_value: int = INT64_MAX) -> Callable[[str], int]:
    """An argparse ``type`` for an int in ``[min_value, max_value]`` (1: positive, 0: non-negative).

    A value out of range is a usage error naming the option, never a silently ignored 0, a
    negative size passed on, or a value past int64 that overflows later (``argument --count:
    must be a positive int; got '-1'``, ``argument --batch-size: must be a positive int of at
    most 2147483648; got '99999999999999999999'``).
    """
    what = {0: "a non-negative int", 1: "a positive int"}.get(min_value, f"an int >= {min_value}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # a float, or an int of more digits than Python converts
            raise argparse.ArgumentTypeError(f"must be {what}; got {cut_value(text)}") from None
        if value < min_value:
            raise argparse.ArgumentTypeError(f"must be {what}; got {cut_value(text)}")
        if value > max_value:
            raise argparse.ArgumentTypeError(
                f"must be {what} of at most {max_value}; got {cut_value(text)}"
            )
        return value

    parse.__name__ = what  # argparse names the type in some of its messages
    return parse


def float_arg(
    what: str, low: float, high: float, *, low_open: bool = False
) -> Callable[[str], float]:
    """An argparse ``type`` for a finite float in ``[low, high]`` (``(low, high]`` if
    ``low_open``): NaN, infinities and values past ``high`` (``1e400`` reads as inf) are usage
    errors naming the option, ``what`` saying what is asked (``"a number in [0, 1]"``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}; got {cut_value(text)}") from None
        above = value > low if low_open else value >= low
        if not (math.isfinite(value) and above and value <= high):  # NaN fails every comparison
            raise argparse.ArgumentTypeError(f"must be {what}; got {cut_value(text)}")
        return value

    parse.__name__ = what
    return parse


def resolution_arg(text: str) -> tuple[int, int]:
    """An argparse ``type`` for ``WIDTHxHEIGHT`` (``512x512``), each side in
    ``[1, MAX_IMAGE_SIDE]``."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be WIDTHxHEIGHT such as 512x512; got {cut_value(text)}"
        ) from None
    if not (1 <= w <= MAX_IMAGE_SIDE and 1 <= h <= MAX_IMAGE_SIDE):
        raise argparse.ArgumentTypeError(
            f"must be WIDTHxHEIGHT with sides in [1, {MAX_IMAGE_SIDE}]; got {cut_value(text)}"
        )
    return w, h


def cut_value(text: str) -> str:
    """An option's value in a message: its repr, cut in the middle past 60 characters (a
    100,000-digit number must not flood the terminal)."""
    shown = repr(text)
    return shown if len(shown) <= 60 else f"{shown[:28]}...{shown[-28:]} ({len(text)} characters)"


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
    if text.lower() == "none":
        return "none"
    what = f"a number in [1, {MAX_VIDEO_SIZE}] such as 3/2 or 1.5, or none"
    try:
        value = Fraction(text)  # exact: "1e400" is an int of 401 digits, "nan" is refused
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"must be {what}; got {cut_value(text)}") from None
    # No side is below 1 or above MAX_VIDEO_SIZE, so a larger upscale never binds: "none" says it.
    if not 1 <= value <= MAX_VIDEO_SIZE:
        raise argparse.ArgumentTypeError(f"must be {what}; got {cut_value(text)}")
    return value


def add_calculator_args(p: argparse.ArgumentParser, *, upscale: bool, video: bool = False) -> None:
    """The bucket-set options; with ``video``, also ``--video`` and its own options."""
    presets = f"{', '.join(PRESETS)} (default: {DEFAULT_IMAGE_PRESET})"
    if video:
        presets += f"; with --video: {', '.join(VIDEO_PRESETS)} (default: {DEFAULT_VIDEO_PRESET})"
    p.add_argument("--preset", default=None, help=f"pixel budget: {presets}")

    p.add_argument(
        "--max-pixels",
        type=int_arg(1, MAX_PIXELS),
        default=None,
        help="an explicit pixel budget instead of --preset (default: the preset's)",
    )
    p.add_argument(
        "--quantization",
        type=int_arg(1, MAX_QUANTIZATION),
        default=None,
        help="bucket sides are multiples (default: 64; video: the preset's patch in pixels)",
    )
    p.add_argument(
        "--compat",
        default="default",
        choices=COMPATS,
        help="the bucket rule (default: default); 'nemo': NeMo Automodel's exact buckets",
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
            type=int_arg(1, MAX_VIDEO_SIZE),
            default=None,
            help="with --video: the longest bucket (default: the preset's)",
        )
        p.add_argument(
            "--max-upscale",
            type=_upscale_arg,
            default=None,
            help="with --video: the largest upscale of a clip, e.g. 3/2 (the default) or none",
        )


# -- output paths ----------------------------------------------------------------------------------
def check_output_file(path: str | os.PathLike[str], flag: str) -> None:
    """Refuse an output file that cannot be written, before any work: its folder missing or not
    a folder, the path a folder, or either not writable. The message names the path as given
    (never a temporary file beside it), after ``flag``.

    Raises:
        ValueError: If ``path`` cannot be written.
    """
    given = os.fspath(path)
    shown = f"{flag}={cut_value(given)}"
    if os.path.isdir(given):
        raise ValueError(f"{flag} must name a file, not a folder; got {shown}")
    folder = os.path.dirname(given) or "."
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ValueError(f"{flag} must be in an existing folder; got {shown} ({folder!r} {what})")
    if not os.access(folder, os.W_OK | os.X_OK) or (
        os.path.exists(given) and not os.access(given, os.W_OK)
    ):
        raise ValueError(f"{flag} must be a path this user may write; got {shown}")


def check_output_dir(path: str | os.PathLike[str], flag: str) -> None:
    """Refuse an output folder that cannot be made or written, before any work: the path an
    existing file, or its nearest existing parent not a writable folder.

    Raises:
        ValueError: If ``path`` cannot be used as an output folder.
    """
    given = os.fspath(path)
    shown = f"{flag}={cut_value(given)}"
    if os.path.exists(given) and not os.path.isdir(given):
        raise ValueError(f"{flag} must be a folder; got {shown} (a file)")
    existing = os.path.abspath(given)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"{flag} must be a folder; got {shown} ({existing!r} is a file)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} must be a folder this user may write; got {shown}")


def one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        text = f"{err.strerror}: {err.filename}"
    return " ".join(text.split())
