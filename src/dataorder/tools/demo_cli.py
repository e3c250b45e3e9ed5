"""``dataorder demo``: its options, and its report as the command line prints it.

The demo itself is :mod:`dataorder.tools.demo`; this module turns the options into a
:class:`~dataorder.tools.demo_config.DemoConfig` (refusing a bad one before any process starts)
and prints the :class:`~dataorder.tools.demo_config.DemoReport`; it imports the demo
only to run it (NOTE [ What a subcommand module imports ] in :mod:`dataorder.tools.cli`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataorder.core.keys import MAX_SEED
from dataorder.tools.demo_checks import CHECKS
from dataorder.tools.demo_config import (
    BUGS,
    MAX_DEMO_TIMEOUT,
    SAMPLERS,
    DemoConfig,
    DemoReport,
    MeshShape,
    check_demo_world,
)
from dataorder.tools.output import (
    EXIT_CHECKS_FAILED,
    Output,
    check_output_dir,
    float_arg,
    int_arg,
)

__all__ = ["add_parser", "print_report", "report_table", "run"]

# DemoConfig fields that are options of the same name (``micro_batch_size``: --micro-batch-size)
_DEMO_OPTIONS = ("mesh", "micro_batch_size", "seed", "timeout", "samplers", "inject_bug")


def _mesh_arg(name: str) -> Callable[[str], MeshShape]:
    def parse(text: str) -> MeshShape:
        try:
            return MeshShape.parse(text, name=name)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``dataorder demo`` to ``subparsers``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        parents=parents,
        help="run an 8-process CPU job that checkpoints, shrinks and checks itself",
        description=(
            "Train a tiny model with every sampler (packed rows of documents included) through "
            "DistributedDataParallel on a real torch.distributed (gloo) job, checkpoint "
            "mid-epoch through torch.distributed.checkpoint (model, optimizer and the data "
            "order's OrderState), restart on another data-parallel size and check: DP ranks "
            "disjoint, TP/CP replicas identical, equal batch counts, lock-step buckets, one "
            "checkpoint loaded exactly, nothing lost or repeated across the restart (every token "
            "once, for packed rows), packed rows dealt to ranks by cost."
        ),
    )
    _add_meshes(p)
    p.add_argument("--out", default="out/demo", help="output directory (default: out/demo)")
    _add_training(p)
    p.add_argument("--no-plot", action="store_true", help="do not write schedule.png")
    p.add_argument(
        "--inject-bug",
        default=None,
        choices=BUGS,
        help=(
            "make a classic mistake on purpose and watch the checks fail: 'global-world' builds "
            "the samplers with the global rank and world size, 'no-resume' restarts without "
            "loading the checkpoint, 'skip-batches' restarts from the checkpoint's model but "
            "skips as many batches as each rank had read instead of loading the data order "
            "(default: none, the job done right)"
        ),
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--fault-tolerant",
        action="store_true",
        help="run a torchft job instead: kill and restart a replica, check coverage",
    )
    return p


def _add_meshes(p: argparse.ArgumentParser) -> None:
    """The job's layout before and after the restart."""
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


def _add_training(p: argparse.ArgumentParser) -> None:
    """What every sampler trains with, and for how long a phase may run."""
    p.add_argument(
        "--seed",
        type=int_arg(0, MAX_SEED),
        default=1234,
        help=f"seed of every sampler, in [0, {MAX_SEED}] (default: 1234)",
    )
    p.add_argument(
        "--micro-batch-size",
        type=int_arg(1),
        default=4,
        help="per-rank batch (default: 4; the global batch must leave 4 in the 410 token rows)",
    )
    p.add_argument(
        "--samplers",
        default=None,
        help=f"comma-separated subset of {','.join(SAMPLERS)} (default: all)",
    )
    p.add_argument(
        "--timeout",
        type=float_arg(
            f"a number of seconds in (0, {MAX_DEMO_TIMEOUT:g}]", 0, MAX_DEMO_TIMEOUT, low_open=True
        ),
        default=120.0,
        help="seconds per phase (default: 120)",
    )


def _as_option(message: str) -> str:
    """A :class:`~dataorder.tools.demo_config.DemoConfig` message, with the field named as its
    option."""
    field, sep, rest = message.partition(" must be ")
    flag = "--" + field.replace("_", "-")
    if not sep or field not in _DEMO_OPTIONS:
        return message
    return f"{flag} must be {rest.replace(f'; got {field}=', f'; got {flag}=')}"


def _default_first_mesh(mesh: MeshShape) -> MeshShape:
    """Twice the data-parallel size of ``mesh`` on as many processes when it can, else more."""
    if mesh.cp % 2 == 0:
        return MeshShape(mesh.dp * 2, mesh.tp, mesh.cp // 2)
    if mesh.tp % 2 == 0:
        return MeshShape(mesh.dp * 2, mesh.tp // 2, mesh.cp)
    return MeshShape(mesh.dp * 2, mesh.tp, mesh.cp)


def _config(args: argparse.Namespace) -> DemoConfig:
    """The options as a config, checked here, in the parent, before any process starts: a
    child's refusal would come back as a traceback and the "checks failed" status."""
    first = args.first_mesh or _default_first_mesh(args.mesh)
    check_demo_world(args.mesh, "--mesh")
    if args.first_mesh is None:
        check_demo_world(first, "--mesh", f" (so --first-mesh defaults to {first.shape})")
    else:
        check_demo_world(first, "--first-mesh")
    try:
        return DemoConfig(
            first_mesh=first,
            mesh=args.mesh,
            micro_batch_size=args.micro_batch_size,
            seed=args.seed,
            timeout=args.timeout,
            samplers=tuple(args.samplers.split(",")) if args.samplers else SAMPLERS,
            inject_bug=args.inject_bug,
        )
    except ValueError as err:  # named as the config names it: say the option instead
        raise ValueError(_as_option(str(err))) from None


def run(args: argparse.Namespace, out: Output) -> int:
    """Run ``dataorder demo``; 0 if every check passed, :data:`EXIT_CHECKS_FAILED` if not."""
    from dataorder.tools.demo import DemoError, require_demo_extras, run_demo

    if args.fault_tolerant:
        from dataorder.tools.demo_live import run_from_cli

        return run_from_cli(args, out)
    config = _config(args)
    check_output_dir(args.out, "--out")  # before any process starts
    require_demo_extras()
    if not args.json:
        out.line(
            f"dataorder demo: {config.first_mesh.world} processes on mesh ({config.first_mesh}), "
            f"checkpoint mid-epoch, restart as {config.mesh.world} processes on ({config.mesh}); "
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
    else:
        print_report(out, report)
    return 0 if report.ok else EXIT_CHECKS_FAILED


def report_table(report: DemoReport) -> tuple[str, list[str], list[list[str]]]:
    """The report's table: ``(title, columns, rows)``, one row per sampler."""
    columns = ["sampler", "steps", *CHECKS.values(), "drop/pad", "loss"]
    rows = []
    for r in report.results:
        cells = [r.name, f"{r.steps[0]}+{r.steps[1]}"]
        for key in CHECKS:
            cells.append("-" if key not in r.checks else "ok" if r.checks[key] else "FAILED")
        cells.append(f"{r.dropped}/{r.padded}" + ("" if r.unit == "sample" else f" {r.unit}s"))
        cells.append(f"{r.loss[0]:.2f}>{r.loss[1]:.2f}")
        rows.append(cells)
    config = report.config
    title = f"({config.first_mesh}) -> ({config.mesh}): optimizer steps before+after the restart"
    return title, columns, rows


def print_report(out: Output, report: DemoReport) -> None:
    """The report as ``dataorder demo`` prints it: the table, each sampler's notes, what failed,
    what was written, and the ``dataorder inspect`` commands that explain the checkpoint."""
    from dataorder.tools.demo import inspect_commands

    out.table(*report_table(report))
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
    out.line(f"wrote the restart checkpoint to {ckpt}/; explain it, with the next batches, by:")
    for command in inspect_commands(report.config, ckpt).values():
        out.line(f"  {command}")
    seconds = report.seconds
    verdict = "all checks passed" if report.ok else "SOME CHECKS FAILED"
    out.line(
        f"{verdict} in {seconds['total']:.1f} s "
        f"(phase 0 {seconds['phase0']:.1f} s, phase 1 {seconds['phase1']:.1f} s)"
    )
