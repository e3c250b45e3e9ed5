"""``dataorder inspect STATE``: what a saved sampler state means, and the next batch.

STATE is a JSON file, a ``torch.save`` file (``.pt``/``.pth``, read with ``weights_only=True``:
tensors, dicts, lists, ints and strings, never arbitrary pickled objects) or a
``torch.distributed.checkpoint`` folder (its ``.metadata`` read by ``FileSystemReader`` in this
one process, and only the entries of the dataorder states in it loaded: an
:class:`~dataorder.integrations.dcp.OrderState` saves ``<key>.sampler.format``,
``<key>.sampler.epoch``, ...; never the model's tensors), :func:`read_states`.

The state is found wherever it sits (alone, inside a torchdata loader state, inside a training
checkpoint), the sampler that wrote it rebuilds itself from it (``from_state``), says where its
cursor is (``describe_progress``) and what each rank reads next (``batch_at``). The text report
and the ``--json`` one hold the same facts; in JSON every count is a number (:func:`report_json`).

Imports inside functions: NOTE [ What a subcommand module imports ] in :mod:`dataorder.tools.cli`.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import dataorder
from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.core.permutation import MAX_DOMAIN
from dataorder.core.state import STATE_FORMAT, config_fingerprint, find_sampler_states, split_state
from dataorder.core.topology import MAX_DP_SIZE
from dataorder.tools.output import (
    EXIT_USAGE,
    Output,
    add_calculator_args,
    calculator_from_args,
    cut_value,
    int_arg,
    one_line,
    resolution_arg,
)
from dataorder.tools.pack import read_lengths

__all__ = ["add_parser", "read_dcp_states", "read_json", "read_states", "report_json", "run"]


def _int_list(text: str) -> list[int]:
    """Comma-separated positive ints of at most ``MAX_DOMAIN`` (``--source-sizes``)."""
    what = f"positive ints of at most {MAX_DOMAIN} separated by commas"
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}; got {cut_value(text)}") from None
    if not values or min(values) < 1 or max(values) > MAX_DOMAIN:
        raise argparse.ArgumentTypeError(f"must be {what}; got {cut_value(text)}")
    return values


def _float_list(text: str) -> list[float]:
    """Comma-separated finite non-negative numbers (``--weights``)."""
    what = "finite non-negative numbers separated by commas"
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}; got {cut_value(text)}") from None
    if not all(math.isfinite(v) and v >= 0 for v in values):  # 1e400 reads as inf
        raise argparse.ArgumentTypeError(f"must be {what}; got {cut_value(text)}")
    return values


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``dataorder inspect`` to ``subparsers``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "inspect",
        parents=parents,
        help="what a saved sampler state means, and the next batch",
        description=(
            "Explain a sampler state (a sampler's state_dict() or a StatefulDataLoader state "
            "saved as JSON or with torch.save, or the OrderState inside a "
            "torch.distributed.checkpoint folder): kind, epoch, position, layout, config; and, "
            "when the sampler can be rebuilt, the next batch on each rank."
        ),
    )
    p.add_argument(
        "state",
        metavar="STATE",
        help="a .json file, a torch.save .pt/.pth file, or a DCP checkpoint folder",
    )
    _add_layout_args(p)
    p.add_argument(
        "--count",
        type=int_arg(1),
        default=8,
        help="indices to show for a per-index sampler (default: 8)",
    )
    _add_given_args(p)
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    return p


def _add_layout_args(p: argparse.ArgumentParser) -> None:
    """Which ranks to show the next batch of, on which layout."""
    p.add_argument(
        "--rank",
        type=int_arg(0, MAX_DP_SIZE - 1),
        default=None,
        help="show only this rank's next batch (default: every rank up to 8; else 0, 1, 2, last)",
    )
    p.add_argument(
        "--num-replicas",
        type=int_arg(1, MAX_DP_SIZE),
        default=None,
        help="show the next batches on this data-parallel size, an elastic resume (default: the "
        "saved layout's)",
    )
    p.add_argument(
        "--micro-batch-size",
        type=int_arg(1, MAX_BATCH_SIZE),
        default=None,
        help="Megatron: another micro-batch size (default: the saved layout's)",
    )


def _add_given_args(p: argparse.ArgumentParser) -> None:
    """What a state does not hold and its sampler needs to be rebuilt (:func:`_given`)."""
    p.add_argument(
        "--manifest", default=None, help="bucket sampler: the dataset's manifest (default: none)"
    )
    p.add_argument(
        "--lengths",
        metavar="FILE",
        default=None,
        help=(
            "packed sampler: the documents' lengths, a Megatron .idx/.bin or prefix, a .npy, or "
            "a .parquet/.arrow file with an input_ids list column (the demo writes "
            "packed.lengths.npy beside packed.json); a save_to_disk folder as dataorder pack "
            "reads it (default: none)"
        ),
    )
    p.add_argument(
        "--column",
        default="input_ids",
        help="with --lengths: the Arrow/parquet list column of token ids (default: input_ids)",
    )
    p.add_argument(
        "--source-sizes",
        type=_int_list,
        default=None,
        help="blended sampler: samples in each source, e.g. 1000,500,250 (default: none)",
    )
    p.add_argument(
        "--weights",
        type=_float_list,
        default=None,
        help="blended sampler: the weights it was built with, e.g. 0.5,0.3,0.2 (default: none)",
    )
    p.add_argument(
        "--schedule",
        metavar="FILE",
        default=None,
        help=(
            "blended sampler built with a MixtureSchedule: a JSON file of its entries, "
            '[[start, [w, ...]], [start, {"ramp": [[u, ...], [v, ...]]}], ...] '
            "(MixtureSchedule.to_json(); the demo writes one beside mixture.json; default: none)"
        ),
    )
    p.add_argument(
        "--log",
        metavar="FILE",
        default=None,
        help=(
            "blended sampler built with a MixtureLog: the log saved beside the state "
            "(MixtureLog.save); shows each source's count against the integral of its weights "
            "(default: none)"
        ),
    )
    p.add_argument(
        "--sizes",
        default=None,
        help="bucket sampler: a CSV of width,height rows (with --preset etc.; default: none)",
    )
    add_calculator_args(p, upscale=False)
    p.add_argument(
        "--base-resolution",
        type=resolution_arg,
        default=(512, 512),
        help="bucket sampler with dynamic batch sizes: its base resolution (default: 512x512)",
    )


def _given(args: argparse.Namespace, schedule: Any) -> dict[str, tuple[Any, str]]:
    """What the command line can give a sampler's ``from_state`` (the values a state does not
    hold, :class:`~dataorder.core.assembly.Given`), and the flags that give it."""
    return {
        "dataset": (_bucket_dataset(args), "--manifest MANIFEST or --sizes CSV"),
        "lengths": (
            getattr(args, "lengths_read", None),
            "--lengths FILE (a .npy, a Megatron .idx or an Arrow/parquet file)",
        ),
        "sizes": (
            # a MixtureLog with corpus changes holds its sources' first sizes (0: added later)
            args.source_sizes
            if args.source_sizes is not None or getattr(schedule, "sizes", None) is None
            else list(schedule.sizes),
            "--source-sizes N,N,...",
        ),
        "weights": (
            args.weights if schedule is None else schedule,
            "--weights W,W,... (or --schedule FILE for a MixtureSchedule, as "
            "MixtureSchedule.to_json() writes it)",
        ),
        "base_resolution": (args.base_resolution, "--base-resolution W,H"),
    }


def _lengths(args: argparse.Namespace) -> Any:
    """``--lengths FILE``: :class:`~dataorder.llm.packing.lengths.DocumentLengths` as
    ``DocumentLengths.from_file`` reads the file, or None."""
    if args.lengths is None:
        return None
    try:
        return read_lengths(args.lengths, args.column)
    except (ValueError, TypeError) as err:
        raise ValueError(f"--lengths {args.lengths}: {err}") from None


def _bucket_dataset(args: argparse.Namespace) -> Any:
    from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset

    if args.manifest:
        return BaseMultiresolutionDataset.from_manifest(args.manifest)
    if args.sizes:
        try:
            table = np.loadtxt(args.sizes, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
        except ValueError as err:  # numpy names the row, not the file
            raise ValueError(f"{args.sizes}: not a CSV of width,height rows ({err})") from None
        if table.shape[1] != 2:
            raise ValueError(f"--sizes must be a CSV of width,height rows; got {args.sizes}")
        return BaseMultiresolutionDataset.from_sizes(
            table[:, 0], table[:, 1], calculator=calculator_from_args(args)
        )
    return None


def _inspect_ranks(args: argparse.Namespace, world: int) -> list[int]:
    if args.rank is not None:
        if not 0 <= args.rank < world:
            raise ValueError(f"--rank must be an int in [0, {world - 1}]; got --rank={args.rank}")
        return [args.rank]
    if world <= 8:
        return list(range(world))
    return [0, 1, 2, world - 1]


def _next_items(sampler: Any, count: int) -> tuple[list[Any], int]:
    """The next batch (or ``count`` indices of a per-index sampler) and its epoch: asked of the
    order (the cursor's :meth:`~dataorder.core.cursor.CursorSampler.upcoming`), so the
    sampler's cursor does not move."""
    epoch, step = sampler.upcoming()
    if sampler.batching.batched:
        return list(sampler.batch_at(step, epoch=epoch)), epoch
    steps = sampler.epoch_plan(epoch).num_steps
    return [sampler.batch_at(k, epoch=epoch) for k in range(step, min(steps, step + count))], epoch


def read_json(path: Path) -> Any:
    """The JSON document in ``path``, or a ValueError naming the file (never a traceback).

    Raises:
        ValueError: If the file is not UTF-8 JSON, is nested too deeply for Python's decoder
            (a hostile file: states and schedules are shallow), or holds an int of more digits
            than Python converts.
        OSError: If the file cannot be read.
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON: {err}") from None
    except RecursionError:  # json's decoder recurses per level
        raise ValueError(
            f"{path}: its JSON is nested too deeply to read (states and schedules are shallow)"
        ) from None
    except ValueError as err:  # not UTF-8, or an int of more digits than Python converts
        raise ValueError(f"{path}: cannot read it as JSON: {err}") from None


#: Suffixes of a ``torch.save`` file.
TORCH_SUFFIXES = (".pt", ".pth")


def read_states(path: Path) -> Any:
    """What ``dataorder inspect`` searches for sampler states: the JSON document, the
    ``torch.save`` object, or a DCP folder's dataorder states (:func:`read_dcp_states`).

    Raises:
        ValueError: If the file cannot be read as its kind (named).
        OSError: If it cannot be read at all.
    """
    if path.is_dir():
        if not (path / ".metadata").is_file():
            raise ValueError(
                f"STATE {str(path)!r} is a folder without .metadata: give a state file (.json, "
                ".pt) or a torch.distributed.checkpoint folder"
            )
        return read_dcp_states(path)
    if path.suffix.lower() in TORCH_SUFFIXES:
        return _read_torch(path)
    return read_json(path)


def _read_torch(path: Path) -> Any:
    """A ``torch.save`` file, loaded with ``weights_only=True`` on the CPU (no arbitrary
    unpickling: a state is ints and strings)."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
        raise ValueError(
            f"{path} cannot be read by torch.load(weights_only=True): {one_line(err)}"
        ) from None


def read_dcp_states(folder: Path) -> dict[str, dict[str, Any]]:
    """The dataorder states inside a ``torch.distributed.checkpoint`` folder, by where they sit
    (``"data.sampler"``), read in this one process.

    DCP flattens a state's keys under its app-state key (an
    :class:`~dataorder.integrations.dcp.OrderState` under ``"data"`` saves
    ``data.sampler.format``, ``data.sampler.config.seed``, ...) and stores each as a small
    pickled entry beside the tensors. The metadata names them; the ``.format`` entries are loaded
    first, and only under those that say ``dataorder.state`` is the rest of the state loaded:
    no tensor and no other entry is read.

    Raises:
        ValueError: If the folder is no readable DCP checkpoint.
    """
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    try:
        metadata = FileSystemReader(str(folder)).read_metadata()
    except Exception as err:  # torch raises many kinds for a bad folder
        raise ValueError(f"{folder} is not a readable DCP checkpoint: {one_line(err)}") from None
    entries = [
        k for k, v in metadata.state_dict_metadata.items() if isinstance(v, BytesStorageMetadata)
    ]

    def load(keys: list[str]) -> dict[str, Any]:
        values: dict[str, Any] = dict.fromkeys(keys)
        if keys:
            try:
                with warnings.catch_warnings():  # "assuming ... a single process": it is
                    warnings.simplefilter("ignore", UserWarning)
                    dcp_load(values, storage_reader=FileSystemReader(str(folder)), no_dist=True)
            except Exception as err:  # as above
                raise ValueError(f"{folder}: DCP cannot load {keys[0]}: {one_line(err)}") from None
        return values

    formats = load([k for k in entries if k.endswith(".format")])
    prefixes = [k[: -len(".format")] for k, v in formats.items() if v == STATE_FORMAT]
    values = load([k for k in entries if any(k.startswith(f"{p}.") for p in prefixes)])
    states: dict[str, dict[str, Any]] = {}
    for prefix in prefixes:
        # the longest prefix wins: a state inside another's keys is impossible (keys are flat)
        states[prefix] = {
            k[len(prefix) + 1 :]: v for k, v in values.items() if k.startswith(f"{prefix}.")
        }
    return states


def _schedule(args: argparse.Namespace) -> Any:
    """``--schedule FILE``: the blend's MixtureSchedule (``MixtureSchedule.to_json``), or
    ``--log FILE``: its MixtureLog (``MixtureLog.save``), or None."""
    if getattr(args, "log", None) is not None:
        if args.weights is not None or args.schedule is not None:
            raise ValueError("--log excludes --weights and --schedule: pass one of them")
        from dataorder.llm.mixlog import MixtureLog

        try:
            return MixtureLog.load(args.log)
        except (ValueError, OSError) as err:
            raise ValueError(f"--log {args.log}: {err}") from None
    if args.schedule is None:
        return None
    if args.weights is not None:
        raise ValueError("--weights and --schedule exclude each other: pass one of them")
    from dataorder.llm.mixture import MixtureSchedule

    path = Path(args.schedule)
    try:
        return MixtureSchedule.from_json(read_json(path), name="schedule")
    except (ValueError, TypeError) as err:
        raise ValueError(f"--schedule {path}: {err}") from None


def run(args: argparse.Namespace, out: Output) -> int:
    """Explain every sampler state in the file, and show the next batches."""
    path = Path(args.state)
    raw = read_states(path)
    schedule = _schedule(args)  # a bad --schedule is a usage error before anything is shown
    args.lengths_read = _lengths(args)  # and so is a bad --lengths
    found = find_sampler_states(raw)
    if not found:
        raise ValueError(
            f"{path} holds no dataorder sampler state (a dict with "
            '"format": "dataorder.state", alone, inside a loader state or a checkpoint)'
        )
    reports = [_inspect_one(where, state, args, schedule) for where, state in found]
    if args.json:
        data = [report_json(r) for r in reports]
        out.json(data if len(data) > 1 else data[0])
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
        print(f"dataorder: error: {one_line(ValueError(f'{path}: {errors[0]}'))}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _order_free(config: dict[str, object], layout: dict[str, object]) -> list[str]:
    """Config fields a state records as 0 because the order does not depend on them, while its
    layout holds their real value (a Megatron state's ``config.data_parallel_size=0`` beside
    ``layout.data_parallel_size=4``): shown as such, never as a size of 0."""
    return [k for k, v in config.items() if v == 0 and k in layout]


def _state_fields(where: str, state: dict[str, Any]) -> dict[str, object]:
    """What the state says by itself: where it was found, its kind, cursor, layout and config,
    and whether its fingerprint still matches the config."""
    config, layout, progress = split_state(state)
    free = _order_free(config, layout)
    fields: dict[str, object] = {
        "found at": where,
        "kind": str(state.get("kind")),
        "version": state.get("version"),
        "epoch": state.get("epoch"),
        "progress": ", ".join(f"{k}={v}" for k, v in progress.items()),
        "layout": ", ".join(f"{k}={v}" for k, v in layout.items()) or "-",
        "config": ", ".join(f"{k}={v}" for k, v in config.items() if k not in free),
    }
    if free:
        fields["not in the order"] = (
            f"{', '.join(free)} (recorded as 0: the order is the same at any value; the saved "
            "layout above has the run's)"
        )
    intact = state.get("fingerprint") == config_fingerprint(config)  # type: ignore[arg-type]
    fields["fingerprint"] = (
        f"{state.get('fingerprint')} (matches the config)"
        if intact
        else f"{state.get('fingerprint')} DOES NOT match the config: edited or corrupted"
    )
    return fields


def report_json(report: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` form of one state's report: the same facts as the text, every count a
    number (the text's ``"consumed=32"`` is ``{"consumed": 32}``), every sentence kept as text
    under a name of its own."""
    state = report["state"]
    config, layout, progress = split_state(state)
    free = _order_free(config, layout)
    return {
        "found_at": report["fields"]["found at"],
        "kind": state.get("kind"),
        "version": state.get("version"),
        "epoch": state.get("epoch"),
        "progress": progress,
        "layout": layout,
        "config": {k: v for k, v in config.items() if k not in free},
        "not_in_the_order": free,
        "fingerprint": state.get("fingerprint"),
        "fingerprint_matches": state.get("fingerprint") == config_fingerprint(config),  # type: ignore[arg-type]
        "cursor": report["cursor"],
        "next": report["next"],
        "next_what": report["next_what"],
        "note": report["note"] or None,
        "error": report["error"] or None,
        "state": state,
    }


def _context(
    cls: Any, config: dict[str, Any], args: argparse.Namespace, schedule: Any
) -> tuple[dict[str, Any], list[str]]:
    """What ``from_state`` is given beyond the state (the layout to show, the values the state
    does not hold), and what is missing to rebuild it."""
    context: dict[str, Any] = {"dp_size": args.num_replicas}
    if "micro_batch_size" in cls.schema.layout.others:
        context["micro_batch_size"] = args.micro_batch_size
    offered = _given(args, schedule) if cls.schema.given else {}
    missing = []
    for given in cls.schema.given:
        value, flags = offered.get(given.name, (None, "(not on the command line)"))
        if value is not None:
            context[given.name] = value
        elif given.needed(config):
            missing.append(f"{given.describe(config)}: pass {flags}")
    return context, missing


def _next_rows(
    cls: Any,
    state: dict[str, Any],
    context: dict[str, Any],
    args: argparse.Namespace,
    fields: dict[str, object],
    cursor: dict[str, Any],
) -> list[dict[str, Any]]:
    """The next batch of each rank shown, from the sampler rebuilt from ``state``; where its
    cursor is goes into ``fields`` (as text) and ``cursor`` (as numbers)."""
    probe = cls.from_state(state, **context)  # ValueError naming what does not match
    samplers = {
        r: cls.from_state(state, rank=r, **context)
        for r in _inspect_ranks(args, probe.topology.dp_size)
    }
    lines = probe.describe_progress()
    fields.update(lines)
    epoch, step = probe.upcoming()
    cursor.update(
        {
            "epoch": epoch,
            "steps_done": step,
            "steps_per_epoch": probe.epoch_plan(epoch).num_steps,
            "steps_left": probe.remaining,
            "steps_are": probe.schema.steps,
            "data_parallel_size": probe.topology.dp_size,
            "described": dict(lines),
        }
    )
    consumed = getattr(probe, "consumed_samples", None)
    if type(consumed) is int:
        cursor["consumed_samples"] = consumed
    cursor["elastic_resume"] = bool(args.num_replicas or args.micro_batch_size)
    if cursor["elastic_resume"]:
        size = probe.topology.dp_size
        fields["shown on"] = f"{size} ranks (an elastic resume of the saved layout)"
    rows = []
    for r, s in samplers.items():
        items, epoch = _next_items(s, args.count)
        rows.append({"rank": r, "epoch": epoch, "items": items})
    return rows


def _inspect_one(
    where: str, state: dict[str, Any], args: argparse.Namespace, schedule: Any
) -> dict[str, Any]:
    kind = str(state.get("kind"))
    config, layout, _progress = split_state(state)
    fields = _state_fields(where, state)
    next_rows: list[dict[str, Any]] = []
    cursor: dict[str, Any] = {}
    note = error = ""
    cls = dataorder.samplers().get(kind)
    what = "batch" if cls is None or cls.schema.batching.batched else f"{args.count} indices"
    try:
        if cls is None:
            raise ValueError(f"dataorder does not know how to rebuild a {kind!r} sampler")
        for key, value in layout.items():  # sizes; named as the state names them
            if type(value) is not int or value < 1:
                raise ValueError(f"layout.{key} must be a positive int; got layout.{key}={value!r}")
        context, missing = _context(cls, config, args, schedule)
        if missing:
            note = f"next batch: not shown; a {kind} sampler needs " + "; ".join(missing)
        else:
            next_rows = _next_rows(cls, state, context, args, fields, cursor)
    except (ValueError, TypeError, KeyError) as err:
        # KeyError: a config field this dataorder does not know, from an edited state
        error = f"cannot rebuild the {kind} sampler from this state: {err}"
    return {
        "fields": fields,
        "cursor": cursor,
        "next": next_rows,
        "next_what": what,
        "note": note,
        "error": error,
        "state": state,
    }
