"""What the command line's commands share: tables, exit codes, and the bucket calculator options.

Tables use rich when it is installed (``pip install 'dataorder[cli]'``) and plain text otherwise
(or with ``--plain``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import IO, Any

__all__ = [
    "EXIT_CHECKS_FAILED",
    "EXIT_USAGE",
    "Output",
    "add_calculator_args",
    "calculator_from_args",
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


# -- demo -----------------------------------------------------------------------------------------
def calculator_from_args(args: argparse.Namespace) -> Any:
    from dataorder.diffusion.buckets import MultiTierBucketCalculator

    kwargs: dict[str, Any] = {"compat": args.compat}
    if getattr(args, "no_upscale", False):
        kwargs["no_upscale"] = True
    if args.max_pixels is not None:
        return MultiTierBucketCalculator(args.quantization, args.max_pixels, **kwargs)
    return MultiTierBucketCalculator.from_preset(args.preset, args.quantization, **kwargs)


def add_calculator_args(p: argparse.ArgumentParser, *, upscale: bool) -> None:
    p.add_argument(
        "--preset",
        default="1024p",
        help="pixel budget: 256p, 512p, 768p, 1024p or 1536p (default: 1024p)",
    )
    p.add_argument(
        "--max-pixels", type=int, default=None, help="an explicit pixel budget instead of --preset"
    )
    p.add_argument(
        "--quantization", type=int, default=64, help="bucket sides are multiples (default: 64)"
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


def one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        text = f"{err.strerror}: {err.filename}"
    return " ".join(text.split())
