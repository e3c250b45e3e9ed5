"""``dataorder scan DIR -o MANIFEST``: image sizes from headers into a manifest
(:mod:`dataorder.diffusion.scan.images`); with ``--video``, clip sizes and frame counts
(:mod:`dataorder.diffusion.scan.videos`, needs PyAV: ``pip install 'dataorder[video]'``).

Imports inside functions: NOTE [ What a subcommand module imports ] in :mod:`dataorder.tools.cli`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import IO, Any

from dataorder.tools.output import (
    Output,
    add_calculator_args,
    calculator_from_args,
    check_output_file,
    int_arg,
    stderr_is_terminal,
)

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``dataorder scan`` to ``subparsers``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "scan",
        parents=parents,
        help="read image (or video) sizes from headers into a manifest",
        description=(
            "Read the size of every image under DIR (headers only) and bucket it; with --video, "
            "the size and frame count of every clip (needs PyAV: pip install 'dataorder[video]')."
        ),
    )
    p.add_argument("directory", metavar="DIR")
    p.add_argument("-o", "--output", required=True, metavar="MANIFEST", help="manifest to write")
    add_calculator_args(p, upscale=True, video=True)
    p.add_argument(
        "--workers",
        type=int_arg(1),
        default=None,
        help="reader threads (default: min(32, 4 x the CPU count))",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (it is shown only when stderr is a terminal)",
    )
    p.add_argument("--json", action="store_true", help="print what was scanned as JSON")
    return p


def _progress(args: argparse.Namespace, what: str) -> Any:
    """What the scan reports its progress with: False, rich's bar, or plain lines; only on a
    terminal's stderr (NOTE [ Progress goes to a terminal's stderr ])."""
    if args.no_progress or not stderr_is_terminal():
        return False
    try:
        import rich  # noqa: F401  (the scan draws the bar with it)
    except ImportError:
        return _plain_progress(sys.stderr, what)
    return True


def _plain_progress(stream: IO[str], what: str = "images") -> Callable[[int, int], None]:
    last = [-1]

    def report(done: int, total: int) -> None:
        percent = 100 * done // max(total, 1)
        if percent != last[0] and (percent % 10 == 0 or done == total):
            last[0] = percent
            print(f"scanned {done}/{total} {what} ({percent}%)", file=stream, flush=True)

    return report


def _nothing_readable(args: argparse.Namespace, manifest: Any, unassigned: Any) -> ValueError:
    """The error of a scan that found nothing to write."""
    what = "clips" if args.video else "images"
    unread = len(manifest.errors) - sum((unassigned or {}).values())
    if unassigned is not None and any(unassigned.values()):  # read, but too small or short
        also = f"; {unread} files could not be read" if unread else ""
        return ValueError(
            f"{sum(unassigned.values())} clips read under {args.directory}, none has a "
            f"bucket: {unassigned['too_small']} too small, {unassigned['too_short']} too "
            f"short{also}; nothing written"
        )
    reason = f" ({unread} unusable)" if unread else ""
    return ValueError(f"no readable {what[:-1]} under {args.directory}{reason}; nothing written")


def run(args: argparse.Namespace, out: Output) -> int:
    """Scan the directory and write its manifest."""
    from dataorder.diffusion.scan.images import scan_images
    from dataorder.diffusion.scan.manifest import manifest_from_scan, write_manifest

    if not os.path.isdir(args.directory):
        raise ValueError(f"DIR must be an existing directory; got DIR={args.directory!r}")
    check_output_file(args.output, "--output")  # before the scan, not after it
    calc = calculator_from_args(args)
    what = "clips" if args.video else "images"
    progress = _progress(args, what)
    unassigned = None
    if args.video:
        from dataorder.diffusion.scan.videos import scan_videos

        scan = scan_videos(args.directory, calc, workers=args.workers, progress=progress)
        unassigned = scan.unassigned()
        manifest = manifest_from_scan(scan)
    else:
        manifest = scan_images(args.directory, calc, workers=args.workers, progress=progress)
    if len(manifest) == 0:
        raise _nothing_readable(args, manifest, unassigned)
    try:
        write_manifest(manifest, args.output)
    except OSError as err:  # named as given, not as the temporary file written first
        raise OSError(err.errno, err.strerror, args.output) from None
    used = int((manifest.bucket_counts() > 0).sum())
    if args.json:
        out.json(_as_json(args, manifest, unassigned, used))
        return 0
    out.line(
        f"scanned {len(manifest)} {what} into {used} of {len(manifest.buckets)} buckets; "
        f"wrote {args.output}"
    )
    _report_left_out(out, manifest.errors, unassigned)
    return 0


def _as_json(args: argparse.Namespace, manifest: Any, unassigned: Any, used: int) -> dict[str, Any]:
    """``dataorder scan --json``: what was written and what was left out, counts as numbers."""
    return {
        "manifest": str(args.output),
        "directory": str(args.directory),
        "kind": "clips" if args.video else "images",
        "scanned": len(manifest),
        "buckets_used": used,
        "buckets": len(manifest.buckets),
        "unassigned": dict(unassigned or {}),
        "unreadable": len(manifest.errors) - sum((unassigned or {}).values()),
        "errors": [[str(path), str(reason)] for path, reason in manifest.errors],
    }


def _report_left_out(out: Output, errors: list[Any], unassigned: Any) -> None:
    """What the manifest leaves out: clips without a bucket, and files that could not be read."""
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
