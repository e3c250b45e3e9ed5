"""The ``dataorder`` command line (also ``python -m dataorder``).

Subcommands:

* ``dataorder demo``: a real 8-process gloo job that trains with every sampler, checkpoints
  mid-epoch, restarts on another data-parallel size and checks the result
  (:mod:`dataorder.tools.demo`);
* ``dataorder buckets --preset 1024p``: the bucket table of a preset (``--video --preset
  wan2.1-480p``: of a video model's setting, :mod:`dataorder.diffusion.calculators.video`);
* ``dataorder scan DIR -o MANIFEST``: image sizes from headers into a manifest
  (:mod:`dataorder.diffusion.scan.images`); with ``--video``, clip sizes and frame counts
  (:mod:`dataorder.diffusion.scan.videos`, needs PyAV: ``pip install 'dataorder[video]'``);
* ``dataorder plan MANIFEST --num-replicas 64 --batch-size 8``: what an epoch of the bucket sampler
  looks like on that layout: samples per bucket, crop loss (and trim loss for clips), dropped or
  padded samples, steps (:mod:`dataorder.diffusion.sampler.stats`); ``--fit`` adds a bucket set
  fitted to the manifest, beside its own (:mod:`dataorder.diffusion.fit.images`; for a video
  manifest, ``--video --fit``: :mod:`dataorder.diffusion.fit.video`);
* ``dataorder pack LENGTHS --seq-len 8192``: what packing a corpus (or weighted corpora,
  ``W1 LENGTHS1 W2 LENGTHS2``) into rows does (length percentiles, padding, split documents,
  rows and steps) and a PNG of row fill (:mod:`dataorder.tools.pack`);
* ``dataorder inspect STATE``: what a saved sampler state means (a JSON file, a ``.pt`` file or
  a DCP checkpoint folder), and the next batch.

Each subcommand is a module with ``add_parser(subparsers, parents)`` and ``run(args, out)``,
registered by one line in :data:`COMMANDS` (NOTE [ What a subcommand module imports ]). Tables
use rich in a terminal when it is installed (``pip install 'dataorder[cli]'``) and aligned plain
text otherwise (in a pipe, a file, a CI log, or with ``--plain``); no layout cuts a cell
(NOTE [ Tables are never cut ] in :mod:`dataorder.tools.output`), and a table wider than the
terminal folds between its columns (NOTE [ Tables fold between columns ]). Output paths are
checked before any work (:func:`~dataorder.tools.output.check_output_file`); long work shows
progress on a terminal's stderr only (NOTE [ Progress goes to a terminal's stderr ]).

A user error prints one line, ``dataorder: error: ...``, and exits with status 2, without a
traceback (``--traceback`` shows it); a demo whose checks fail exits with 1. A reader that stops
early (``dataorder buckets | head -1``) is no error: exit 0, nothing on stderr
(NOTE [ A closed pipe is no error ]).

NOTE [ A closed pipe is no error ]
    When the reader of stdout exits (``head -1``), the next write raises BrokenPipeError. The
    command had nothing left to say to anyone, so it exits with 0 and says nothing. As the Python
    docs' recipe (``signal`` module, "Note on SIGPIPE") does, stdout is then pointed at
    ``os.devnull``, so that the interpreter's final flush of the buffered rest does not raise
    again at exit. It is handled once, in :func:`main`, for every command.

NOTE [ What a subcommand module imports ]
    ``dataorder --help`` (and every command) builds the whole parser, so it imports every
    subcommand module and what they import at their top. A subcommand module imports there
    what its parser needs and what that parser already loads (the core's bounds, the bucket
    calculators and fits, the packing plan, numpy). What only its ``run`` needs and the parser
    does not load it imports inside the function that uses it: anything that imports torch
    (the bucket dataset and sampler, ``DistributedSampler``; tests/test_layers.py checks that
    this module imports no torch), the diffusion stats, scans and manifest, the LLM samplers,
    the demo itself. So ``dataorder buckets`` and ``--help`` start without them, and a
    subcommand pays only for its own work.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, Protocol

from dataorder import __version__
from dataorder.tools import buckets, demo_cli, inspect_state, pack, plan, scan
from dataorder.tools.output import EXIT_CHECKS_FAILED, EXIT_USAGE, Output, one_line

__all__ = ["COMMANDS", "EXIT_CHECKS_FAILED", "EXIT_USAGE", "Command", "build_parser", "main"]

# Exceptions that mean "the input was wrong", reported as one line. Anything else is a bug and
# keeps its traceback.
_USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, OSError, ImportError)


class Command(Protocol):
    """A subcommand: a module with its parser and its run."""

    def add_parser(
        self, subparsers: Any, parents: list[argparse.ArgumentParser]
    ) -> argparse.ArgumentParser:
        """Add the subcommand's parser (with ``parents``' options) to ``subparsers``."""
        ...

    def run(self, args: argparse.Namespace, out: Output) -> int:
        """Run it; return the exit status. A ValueError is a user error (one line, status 2)."""
        ...


#: The subcommands, in the order ``dataorder --help`` lists them. A new one is a module with
#: ``add_parser`` and ``run``, and one entry here.
COMMANDS: tuple[Command, ...] = (demo_cli, buckets, scan, plan, pack, inspect_state)


class _UsageError(Exception):
    """An argparse error, carried out of the parser so main() can print it as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    """The ``dataorder`` argument parser: one subparser per entry of :data:`COMMANDS`.

    Every numeric option is bounded where it is parsed (the library's documented cap, else
    int64's; floats finite): a value past it is a usage error naming the option, exit status 2.
    """
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
    for command in COMMANDS:
        command.add_parser(sub, [common]).set_defaults(func=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success and when the reader of stdout stopped early (NOTE [ A closed pipe is no
        error ]), :data:`EXIT_USAGE` for a user error, :data:`EXIT_CHECKS_FAILED` when the
        demo's checks fail.
    """
    try:
        status = _run(argv)
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
    except BrokenPipeError:  # NOTE [ A closed pipe is no error ]
        _quiet_stdout()
        return 0
    return status


def _run(argv: Sequence[str] | None) -> int:
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
    except BrokenPipeError:  # an OSError, but no user error: main() handles it
        raise
    except _USER_ERRORS as err:
        if args.traceback:
            raise
        print(f"dataorder: error: {one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("dataorder: interrupted", file=sys.stderr)
        return 130
    return status


def _quiet_stdout() -> None:
    """Point stdout's descriptor at ``os.devnull``: what is still buffered for a reader that has
    gone is dropped at exit, without a second BrokenPipeError (NOTE [ A closed pipe is no
    error ])."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
