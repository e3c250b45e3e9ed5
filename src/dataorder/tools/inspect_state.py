"""``dataorder inspect STATE.json``: what a saved sampler state means, and the next batch.

The state is found wherever it sits (alone, inside a torchdata loader state, inside a training
checkpoint), the sampler that wrote it rebuilds itself from it (``from_state``), says where its
cursor is (``describe_progress``) and what each rank reads next (``batch_at``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import dataorder
from dataorder.core.state import find_sampler_states
from dataorder.tools.output import EXIT_USAGE, Output, calculator_from_args, one_line

__all__ = ["cmd_inspect", "read_json"]


def _given(args: argparse.Namespace, schedule: Any) -> dict[str, tuple[Any, str]]:
    """What the command line can give a sampler's ``from_state`` (the values a state does not
    hold, :class:`~dataorder.core.assembly.Given`), and the flags that give it."""
    return {
        "dataset": (_bucket_dataset(args), "--manifest MANIFEST or --sizes CSV"),
        "sizes": (args.source_sizes, "--source-sizes N,N,..."),
        "weights": (
            args.weights if schedule is None else schedule,
            "--weights W,W,... (or --schedule FILE for a MixtureSchedule, as "
            "MixtureSchedule.to_json() writes it)",
        ),
        "base_resolution": (args.base_resolution, "--base-resolution W,H"),
    }


def _bucket_dataset(args: argparse.Namespace) -> Any:
    from dataorder.diffusion.multires import BaseMultiresolutionDataset

    if args.manifest:
        return BaseMultiresolutionDataset.from_manifest(args.manifest)
    if args.sizes:
        import numpy as np

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


def _schedule(args: argparse.Namespace) -> Any:
    """``--schedule FILE``: the blend's MixtureSchedule (``MixtureSchedule.to_json``), or None."""
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


def cmd_inspect(args: argparse.Namespace, out: Output) -> int:
    path = Path(args.state)
    raw = read_json(path)
    schedule = _schedule(args)  # a bad --schedule is a usage error before anything is shown
    found = find_sampler_states(raw)
    if not found:
        raise ValueError(
            f"{path} holds no dataorder sampler state (a dict with "
            '"format": "dataorder.state", alone or inside a loader state)'
        )
    reports = [_inspect_one(where, state, args, schedule) for where, state in found]
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
        print(f"dataorder: error: {one_line(ValueError(f'{path}: {errors[0]}'))}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _inspect_one(
    where: str, state: dict[str, Any], args: argparse.Namespace, schedule: Any
) -> dict[str, Any]:
    from dataorder.core.state import config_fingerprint, split_state

    kind = str(state.get("kind"))
    config, layout, progress = split_state(state)
    fields: dict[str, object] = {
        "found at": where,
        "kind": kind,
        "version": state.get("version"),
        "epoch": state.get("epoch"),
        "progress": ", ".join(f"{k}={v}" for k, v in progress.items()),
        "layout": ", ".join(f"{k}={v}" for k, v in layout.items()) or "-",
        "config": ", ".join(f"{k}={v}" for k, v in config.items()),
    }
    intact = state.get("fingerprint") == config_fingerprint(config)  # type: ignore[arg-type]
    fields["fingerprint"] = (
        f"{state.get('fingerprint')} (matches the config)"
        if intact
        else f"{state.get('fingerprint')} DOES NOT match the config: edited or corrupted"
    )
    next_rows: list[dict[str, Any]] = []
    note = error = ""
    cls = dataorder.samplers().get(kind)
    what = "batch" if cls is None or cls.schema.batching.batched else f"{args.count} indices"
    try:
        if cls is None:
            raise ValueError(f"dataorder does not know how to rebuild a {kind!r} sampler")
        for key, value in layout.items():  # sizes; named as the state names them
            if type(value) is not int or value < 1:
                raise ValueError(f"layout.{key} must be a positive int; got layout.{key}={value!r}")
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
        if missing:
            note = f"next batch: not shown; a {kind} sampler needs " + "; ".join(missing)
        else:
            probe = cls.from_state(state, **context)  # ValueError naming what does not match
            samplers = {
                r: cls.from_state(state, rank=r, **context)
                for r in _inspect_ranks(args, probe.topology.dp_size)
            }
            fields.update(probe.describe_progress())
            if args.num_replicas or args.micro_batch_size:
                fields["shown on"] = (
                    f"{probe.topology.dp_size} ranks (an elastic resume of the saved layout)"
                )
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
