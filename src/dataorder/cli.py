"""The ``dataorder`` command line (also ``python -m dataorder``).

Subcommands:

* ``dataorder demo``: a real 8-process gloo job that trains with every sampler, checkpoints
  mid-epoch, restarts on another data-parallel size and checks the result
  (:mod:`dataorder.demo`);
* ``dataorder buckets --preset 1024p``: the bucket table of a preset;
* ``dataorder scan DIR -o MANIFEST``: image sizes from headers into a manifest
  (:mod:`dataorder.scan`);
* ``dataorder plan MANIFEST --num-replicas 64 --batch-size 8``: what an epoch of the bucket
  sampler looks like on that layout: images per bucket, crop loss, dropped or padded samples,
  steps (:mod:`dataorder.bucket_stats`);
* ``dataorder inspect STATE.json``: what a saved sampler state means, and the next batch.

Tables use rich when it is installed (``pip install 'dataorder[cli]'``) and plain text otherwise
(or with ``--plain``). A user error prints one line, ``dataorder: error: ...``, and exits with
status 2, without a traceback (``--traceback`` shows it); a demo whose checks fail exits with 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

__all__ = [
    "EXIT_CHECKS_FAILED",
    "EXIT_USAGE",
    "build_parser",
    "find_sampler_states",
    "main",
]

#: Exit status of a user error (bad argument, unreadable file): argparse's convention.
EXIT_USAGE = 2
#: Exit status when the demo ran but a check failed, or a demo process crashed.
EXIT_CHECKS_FAILED = 1

# Exceptions that mean "the input was wrong", reported as one line. Anything else is a bug and
# keeps its traceback.
_USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, OSError, ImportError)


class _UsageError(Exception):
    """An argparse error, carried out of the parser so main() can print it as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


# -- output ---------------------------------------------------------------------------------------
class _Output:
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
def _mesh_arg(name: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        from dataorder.demo import MeshShape

        try:
            return MeshShape.parse(text, name=name)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def _default_first_mesh(mesh: Any) -> Any:
    """Twice the data-parallel size of ``mesh`` on as many processes when it can, else more."""
    from dataorder.demo import MeshShape

    if mesh.cp % 2 == 0:
        return MeshShape(mesh.dp * 2, mesh.tp, mesh.cp // 2)
    if mesh.tp % 2 == 0:
        return MeshShape(mesh.dp * 2, mesh.tp // 2, mesh.cp)
    return MeshShape(mesh.dp * 2, mesh.tp, mesh.cp)


def _cmd_demo(args: argparse.Namespace, out: _Output) -> int:
    from dataorder.demo import CHECKS, SAMPLERS, DemoConfig, DemoError, run_demo

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
        for key, passed in r.checks.items():
            if not passed:
                out.line(f"FAILED {r.name} {CHECKS[key]}: {r.details[key]}")
    for name, path in report.outputs.items():
        if not name.startswith("checkpoint:"):
            out.line(f"wrote {path}")
    ckpt = Path(report.outputs[f"checkpoint:{report.results[0].name}"]).parent
    out.line(f"wrote the restart checkpoint to {ckpt}/ (try: dataorder inspect {ckpt}/*.json)")
    seconds = report.seconds
    verdict = "all checks passed" if report.ok else "SOME CHECKS FAILED"
    out.line(
        f"{verdict} in {seconds['total']:.1f} s "
        f"(phase 0 {seconds['phase0']:.1f} s, phase 1 {seconds['phase1']:.1f} s)"
    )
    return 0 if report.ok else EXIT_CHECKS_FAILED


# -- buckets --------------------------------------------------------------------------------------
def _calculator(args: argparse.Namespace) -> Any:
    from dataorder.buckets import MultiTierBucketCalculator

    kwargs: dict[str, Any] = {"compat": args.compat}
    if getattr(args, "no_upscale", False):
        kwargs["no_upscale"] = True
    if args.max_pixels is not None:
        return MultiTierBucketCalculator(args.quantization, args.max_pixels, **kwargs)
    return MultiTierBucketCalculator.from_preset(args.preset, args.quantization, **kwargs)


def _add_calculator_args(p: argparse.ArgumentParser, *, upscale: bool) -> None:
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


def _aspect(w: int, h: int) -> str:
    from dataorder.multires import aspect_name

    return aspect_name(w / h)


def _cmd_buckets(args: argparse.Namespace, out: _Output) -> int:
    calc = _calculator(args)
    buckets = calc.get_all_buckets()
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
    source = f"--max-pixels {budget:,}" if args.max_pixels is not None else args.preset
    out.table(
        f"{len(buckets)} buckets: {source}, quantization {calc.quantization}, "
        f"compat {calc.compat!r}",
        ["id", "resolution", "w/h", "shape", "pixels", "of budget"],
        rows,
    )
    return 0


# -- scan -----------------------------------------------------------------------------------------
def _cmd_scan(args: argparse.Namespace, out: _Output) -> int:
    from dataorder.scan import scan_images, write_manifest

    if not os.path.isdir(args.directory):
        raise ValueError(f"DIR must be an existing directory; got DIR={args.directory!r}")
    calc = _calculator(args)
    progress: Any = False
    if not args.no_progress:
        try:
            import rich  # noqa: F401  (scan_images draws the bar with it)
        except ImportError:
            progress = _plain_progress(sys.stderr)
        else:
            progress = True
    manifest = scan_images(args.directory, calc, workers=args.workers, progress=progress)
    if len(manifest) == 0:
        reason = f" ({len(manifest.errors)} unreadable)" if manifest.errors else ""
        raise ValueError(f"no readable image under {args.directory}{reason}; nothing written")
    write_manifest(manifest, args.output)
    used = int((manifest.bucket_counts() > 0).sum())
    out.line(
        f"scanned {len(manifest)} images into {used} of {len(manifest.buckets)} buckets; "
        f"wrote {args.output}"
    )
    if manifest.errors:
        out.line(f"{len(manifest.errors)} files could not be read and were skipped:")
        for path, reason in manifest.errors[:5]:
            out.line(f"  {path}: {reason}")
        if len(manifest.errors) > 5:
            out.line(f"  ... and {len(manifest.errors) - 5} more (listed in the manifest header)")
    return 0


def _plain_progress(stream: IO[str]) -> Callable[[int, int], None]:
    last = [-1]

    def report(done: int, total: int) -> None:
        percent = 100 * done // max(total, 1)
        if percent != last[0] and (percent % 10 == 0 or done == total):
            last[0] = percent
            print(f"scanned {done}/{total} images ({percent}%)", file=stream, flush=True)

    return report


# -- inspect --------------------------------------------------------------------------------------
def find_sampler_states(value: object, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every dataorder sampler state inside ``value``, with where it was found.

    ``value`` is a sampler's ``state_dict()`` or anything that holds one, e.g. a torchdata
    ``StatefulDataLoader`` state (under ``_index_sampler_state`` for a ``batch_sampler``, or
    ``_sampler_iter_state.sampler_state`` for a ``sampler``) or a whole training checkpoint.

    Returns:
        ``(path, state)`` pairs, ``path`` like ``"_index_sampler_state"``, in document order.
    """
    from dataorder.state import STATE_FORMAT

    if isinstance(value, dict):
        if value.get("format") == STATE_FORMAT:
            return [(where or "(top level)", value)]
        found = []
        for key, item in value.items():
            found += find_sampler_states(item, f"{where}.{key}" if where else str(key))
        return found
    if isinstance(value, list):
        return [
            s for i, item in enumerate(value) for s in find_sampler_states(item, f"{where}[{i}]")
        ]
    return []


def _split_state(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    config = {k[7:]: v for k, v in state.items() if k.startswith("config.")}
    layout = {k[7:]: v for k, v in state.items() if k.startswith("layout.")}
    header = {"format", "version", "kind", "fingerprint", "epoch"}
    progress = {
        k: v
        for k, v in state.items()
        if k not in header and not k.startswith(("config.", "layout."))
    }
    return config, layout, progress


def _bucket_dataset(args: argparse.Namespace) -> Any:
    from dataorder.multires import BaseMultiresolutionDataset

    if args.manifest:
        return BaseMultiresolutionDataset.from_manifest(args.manifest)
    if args.sizes:
        import numpy as np

        table = np.loadtxt(args.sizes, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
        if table.shape[1] != 2:
            raise ValueError(f"--sizes must be a CSV of width,height rows; got {args.sizes}")
        return BaseMultiresolutionDataset.from_sizes(
            table[:, 0], table[:, 1], calculator=_calculator(args)
        )
    return None


def _rebuild(
    kind: str, state: Mapping[str, Any], args: argparse.Namespace
) -> tuple[Callable[[int], Any], int] | str:
    """``(make(rank), world)`` that rebuilds the saved sampler, or why it cannot be rebuilt."""
    config, layout, _ = _split_state(state)
    if kind in ("megatron_single", "megatron_random"):
        from dataorder.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler

        mbs = args.micro_batch_size or layout["micro_batch_size"]
        world = args.num_replicas or layout["data_parallel_size"]
        drop_last = bool(config["drop_last"])
        gbs = config["global_batch_size"] or None  # 0 in the state means None
        pad = bool(config["pad"])
        if kind == "megatron_single":
            return (
                lambda r: MegatronPretrainingSampler(
                    config["total_samples"], mbs, r, world, drop_last, gbs, pad
                ),
                world,
            )
        return (
            lambda r: MegatronPretrainingRandomSampler(
                config["total_samples"],
                mbs,
                r,
                world,
                drop_last,
                gbs,
                pad,
                seed=config["seed"],
                data_sharding=config["order"] == "sharded",
                compat="nemo" if config["order"] == "nemo" else None,
            ),
            world,
        )
    if kind == "distributed":
        from dataorder.distributed import DistributedSampler

        world = args.num_replicas or layout["num_replicas"]
        return (
            lambda r: DistributedSampler(
                range(config["dataset_size"]),
                num_replicas=world,
                rank=r,
                shuffle=bool(config["shuffle"]),
                seed=config["seed"],
                drop_last=bool(config["drop_last"]),
                compat=config["compat"],
            ),
            world,
        )
    if kind == "sequential_bucket":
        dataset = _bucket_dataset(args)
        if dataset is None:
            return "a bucket sampler needs its dataset: pass --manifest MANIFEST or --sizes CSV"
        from dataorder.bucket_sampler import SequentialBucketSampler

        world = args.num_replicas or layout["num_replicas"]
        return (
            lambda r: SequentialBucketSampler(
                dataset,
                base_batch_size=config["base_batch_size"],
                base_resolution=args.base_resolution,
                drop_last=bool(config["drop_last"]),
                shuffle_buckets=bool(config["shuffle_buckets"]),
                shuffle_within_bucket=bool(config["shuffle_within_bucket"]),
                dynamic_batch_size=bool(config["dynamic_batch_size"]),
                seed=config["seed"],
                num_replicas=world,
                rank=r,
                compat=config["compat"],
            ),
            world,
        )
    return f"dataorder does not know how to rebuild a {kind!r} sampler"


def _position(kind: str, sampler: Any, state: Mapping[str, Any]) -> list[tuple[str, object]]:
    """Lines that say where the saved cursor is, in the sampler's own terms."""
    epoch, consumed = state["epoch"], state.get("consumed", 0)
    remaining = sampler.remaining
    if kind.startswith("megatron"):
        lay = sampler.layout
        done = consumed // lay.block_size
        return [
            ("position", f"{consumed} of {lay.total_positions} global positions of epoch {epoch}"),
            ("micro-steps", f"{done} of {lay.num_batches} done; {remaining} left on every rank"),
            ("consumed_samples", f"{sampler.consumed_samples} (Megatron's run-wide count)"),
        ]
    if kind == "distributed":
        world = sampler.num_replicas
        return [
            ("position", f"{consumed} of {sampler.total_size} global positions of epoch {epoch}"),
            (
                "indices",
                f"{consumed // world} of {sampler.num_samples} done; "
                f"{remaining} left on every rank",
            ),
        ]
    if kind == "sequential_bucket":
        plan = sampler.plan()
        k = state["bucket"]
        if k >= plan.num_buckets:
            where = f"after the last of {plan.num_buckets} buckets of epoch {epoch}"
        else:
            row = int(plan.order[k])
            w, h = sampler.bucket_table.resolutions[row].tolist()
            where = (
                f"bucket {k + 1} of {plan.num_buckets} in epoch {epoch}'s order "
                f"(row {row}, {w}x{h}, {int(plan.sizes[k])} samples): {consumed} positions taken"
            )
        return [
            ("position", where),
            (
                "batches",
                f"{remaining} left on every rank, of {plan.total_batches} in a whole epoch on "
                f"{sampler.num_replicas} ranks",
            ),
        ]
    return [("position", f"epoch {epoch}, {consumed} consumed")]


def _inspect_ranks(args: argparse.Namespace, world: int) -> list[int]:
    if args.rank is not None:
        if not 0 <= args.rank < world:
            raise ValueError(f"--rank must be an int in [0, {world - 1}]; got --rank={args.rank}")
        return [args.rank]
    if world <= 8:
        return list(range(world))
    return [0, 1, 2, world - 1]


def _next_items(sampler: Any, count: int) -> tuple[list[Any], int]:
    """The next batch (or ``count`` indices of a per-index sampler) and the epoch it is in."""
    # A state saved after an epoch's last batch resumes into an empty pass, which moves the
    # cursor on: the next batch the job reads is then the first of the next epoch.
    for _ in range(2):
        it = iter(sampler)
        first = next(it, None)
        if first is not None:
            break
    epoch = sampler.epoch  # read at the first item: running out would move the cursor on
    if first is None:
        return [], epoch
    if isinstance(first, list):
        return first, epoch
    items = [first]
    for item in it:
        if len(items) >= count:
            break
        items.append(item)
    return items, epoch


def _cmd_inspect(args: argparse.Namespace, out: _Output) -> int:
    path = Path(args.state)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON: {err}") from None
    found = find_sampler_states(raw)
    if not found:
        raise ValueError(
            f"{path} holds no dataorder sampler state (a dict with "
            '"format": "dataorder.state", alone or inside a loader state)'
        )
    reports = [_inspect_one(where, state, args) for where, state in found]
    if args.json:
        out.json(reports if len(reports) > 1 else reports[0])
    else:
        for report in reports:
            out.fields(f"{path}: {report['fields']['found at']}", list(report["fields"].items()))
            if report["next"]:
                out.table(
                    f"next {report['next_what']} on each rank",
                    ["rank", "epoch", "items"],
                    [[r["rank"], r["epoch"], r["items"]] for r in report["next"]],
                )
            if report["note"]:
                out.line(report["note"])
    errors = [r["error"] for r in reports if r["error"]]
    if errors:  # the explanation above still stands; what failed is rebuilding the sampler
        print(f"dataorder: error: {_one_line(ValueError(errors[0]))}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _inspect_one(where: str, state: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from dataorder.state import config_fingerprint

    kind = str(state.get("kind"))
    config, layout, progress = _split_state(state)
    fields: dict[str, object] = {
        "found at": where,
        "kind": kind,
        "version": state.get("version"),
        "epoch": state.get("epoch"),
        "progress": ", ".join(f"{k}={v}" for k, v in progress.items()),
        "layout": ", ".join(f"{k}={v}" for k, v in layout.items()) or "-",
        "config": ", ".join(f"{k}={v}" for k, v in config.items()),
    }
    intact = state.get("fingerprint") == config_fingerprint(config)
    fields["fingerprint"] = (
        f"{state.get('fingerprint')} (matches the config)"
        if intact
        else f"{state.get('fingerprint')} DOES NOT match the config: edited or corrupted"
    )
    next_rows: list[dict[str, Any]] = []
    note = error = ""
    what = f"{args.count} indices" if kind == "distributed" else "batch"
    try:
        rebuilt = _rebuild(kind, state, args)
        if isinstance(rebuilt, str):
            note = f"next batch: not shown; {rebuilt}"
        else:
            make, world = rebuilt
            samplers = {}
            for r in _inspect_ranks(args, world):
                s = make(r)
                s.load_state_dict(state)  # raises ValueError naming what does not match
                samplers[r] = s
            first = next(iter(samplers.values()))
            fields.update(_position(kind, first, state))
            if args.num_replicas or args.micro_batch_size:
                fields["shown on"] = f"{world} ranks (an elastic resume of the saved layout)"
            for r, s in samplers.items():
                items, epoch = _next_items(s, args.count)
                next_rows.append({"rank": r, "epoch": epoch, "items": items})
    except (ValueError, TypeError, KeyError) as err:
        # KeyError: a config field this dataorder does not know, from an edited state
        error = f"cannot rebuild the {kind} sampler from this state: {err}"
    return {
        "fields": fields,
        "next": next_rows,
        "next_what": what,
        "note": note,
        "error": error,
        "state": state,
    }


# -- plan -----------------------------------------------------------------------------------------
def _cmd_plan(args: argparse.Namespace, out: _Output) -> int:
    import warnings

    import numpy as np

    from dataorder.bucket_sampler import SequentialBucketSampler
    from dataorder.bucket_stats import bucket_stats, plot_bucket_stats
    from dataorder.multires import BaseMultiresolutionDataset
    from dataorder.scan import read_manifest

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
        manifest, replicas=args.num_replicas, batch_size=sizes, drop_last=args.drop_last
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
    if (int(o["batches"]), int(o["dropped"]), int(o["padded"])) != (steps, dropped, padded):
        out.line(  # the two computations must agree; say so loudly if they ever do not
            f"warning: bucket_stats counts {int(o['batches'])} steps, {int(o['dropped'])} "
            f"dropped, {int(o['padded'])} padded; the sampler {steps}, {dropped}, {padded}"
        )
    for warning in caught:
        out.line(f"note: {warning.message}")
    if args.png:
        plot_bucket_stats(stats, args.png)
        out.line(f"wrote {args.png}")
    return 0


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
        description="Print the resolution buckets of a pixel budget.",
    )
    _add_calculator_args(p, upscale=False)
    p.add_argument("--json", action="store_true", help="print the buckets as JSON")
    p.set_defaults(func=_cmd_buckets)

    p = sub.add_parser(
        "scan",
        parents=[common],
        help="read image sizes from headers into a manifest",
        description="Read the size of every image under DIR (headers only) and bucket it.",
    )
    p.add_argument("directory", metavar="DIR")
    p.add_argument("-o", "--output", required=True, metavar="MANIFEST", help="manifest to write")
    _add_calculator_args(p, upscale=True)
    p.add_argument("--workers", type=int, default=None, help="reader threads")
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
    p.add_argument("--num-replicas", type=int, required=True, help="data-parallel size")
    p.add_argument("--batch-size", type=int, required=True, help="per-rank batch size")
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
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=_cmd_plan)

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
    p.add_argument("--rank", type=int, default=None, help="show only this rank's next batch")
    p.add_argument(
        "--num-replicas",
        type=int,
        default=None,
        help="show the next batches on this data-parallel size (an elastic resume)",
    )
    p.add_argument(
        "--micro-batch-size", type=int, default=None, help="Megatron: another micro-batch size"
    )
    p.add_argument(
        "--count",
        type=int,
        default=8,
        help="indices to show for a per-index sampler (default: 8)",
    )
    p.add_argument("--manifest", default=None, help="bucket sampler: the dataset's manifest")
    p.add_argument(
        "--sizes",
        default=None,
        help="bucket sampler: a CSV of width,height rows (with --preset etc.)",
    )
    _add_calculator_args(p, upscale=False)
    p.add_argument(
        "--base-resolution",
        type=_resolution,
        default=(512, 512),
        help="bucket sampler with dynamic batch sizes: its base resolution (default: 512x512)",
    )
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.set_defaults(func=_cmd_inspect)
    return parser


def _one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        text = f"{err.strerror}: {err.filename}"
    return " ".join(text.split())


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
    out = _Output(sys.stdout, plain=args.plain)
    try:
        status: int = args.func(args, out)
    except _USER_ERRORS as err:
        if args.traceback:
            raise
        print(f"dataorder: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("dataorder: interrupted", file=sys.stderr)
        return 130
    return status
