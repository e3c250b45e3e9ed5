"""``dataorder demo``: a real multi-process training job that checkpoints, shrinks, and proves it.

On one machine without a GPU, the demo runs a ``torch.distributed`` job (gloo, loopback) in two
phases, one process group each:

1. **before**: ``first_mesh`` (default ``(dp, tp, cp) = (4, 2, 1)``, 8 processes). Every process
   trains a tiny model with each sampler of the library, through torchdata's
   ``StatefulDataLoader`` and ``torch.nn.parallel.DistributedDataParallel`` over the mesh's
   data-parallel group, up to the middle of the epoch, then checkpoints the model, the optimizer
   and the data order (:class:`~dataorder.integrations.dcp.OrderState`) through
   ``torch.distributed.checkpoint`` (one checkpoint for the whole job), and the job stops;
2. **after**: ``mesh`` (default ``(2, 2, 2)``, 8 processes): a different data-parallel size. Every
   process loads the same checkpoint and trains to the end of the epoch.

The samplers, one entry each in :data:`~dataorder.tools.demo_samplers.DEMO_SAMPLERS`, over data
shipped in ``dataorder/data/`` (synthetic and deterministic, see ``dataorder/data/README.md``):

* Megatron "single" and "cyclic" over the token rows of ``tokens.npy``;
* a mixture: the token rows as four weighted sources (``BlendedSampler``) over a ``MixtureLog``
  whose corpus changes mid-run (a source added before the restart, one grown after it, inside
  its first pass), checked per source against ``consumed_per_source``, pass by pass, and global
  batch by global batch against the order from the start (an uninterrupted run);
* the bucket sampler over the image sizes of ``image_sizes.csv``, with buckets fitted to those
  sizes and the job's layout (``fit_to_data``) in the interleaved order; the report compares the
  fitted plan with the 1024p preset;
* the bucket sampler over video buckets (frames x height x width under a token budget) of the
  clips in ``clip_sizes.csv``, fitted to those clips and the job's layout
  (``VideoBucketCalculator.fit_to_data``), with batch sizes from the cost model; the report
  compares the fitted set with the wan2.1-480p preset it starts from;
* the ``DistributedSampler`` over the token rows;
* packed rows: the token rows end to end, cut into documents of varied lengths, packed into rows
  of 32 tokens by the ``PackedSampler`` (every token once, a long document split across rows)
  and read through ``PackedDataset``, training a tiny causal language model whose positions
  restart at every document and whose attention stays inside it.

The global batch size stays the same across the restart (gradient accumulation makes up for the
smaller data-parallel size), as a real elastic job would keep it.

Every process records what its loader really yielded (the ``index`` carried by each sample of the
batch the model trained on). The parent process then checks, per sampler:

* **DP disjoint / TP-CP identical**: :func:`dataorder.parallel.verify.verify_data_parallel`, a
  collective
  over the job's own process groups, in both phases; and, from the records, that every TP/CP
  replica of a data-parallel rank trained on exactly the same batches;
* **equal batches**: every rank took the same number of batches, of the same size at every step;
* **lock-step buckets**: at every step all ranks drew from one bucket (so shapes match);
* **one checkpoint**: all processes saved an identical data-order state, model and optimizer
  (progress is global; DCP keeps one copy), and phase 1 loaded exactly them;
* **nothing lost or repeated**: over the epoch, before and after the restart together, every
  sample (every token of every document, for packed rows) was read exactly once, apart from what
  the sampler itself reports as dropped or padded;
* **per source** (the mixture): each source was read exactly as often as the sampler's
  ``consumed_per_source`` says, no sample of a source twice before all of them once (a growth
  joins the pass under way), and every global batch trained, before and after the restart,
  is the one the order gives from the start;
* **costs dealt** (packed rows): at every step the rows were dealt to the ranks by attention
  cost, the costliest rank within ``mean + costliest row`` (its ratio to the bound reported).

It writes ``report.json``, ``schedule.png`` (see :mod:`dataorder.tools.plots`) and the checkpoint
under ``out``. :func:`run_demo` is the entry point; ``dataorder demo`` prints its report and exits
with status 1 if a check fails. ``DemoConfig(inject_bug=...)`` (``dataorder demo --inject-bug``)
makes a classic mistake on purpose, to see the checks catch it.

How it runs: each phase is one process group of ``dp * tp * cp`` processes, started by
``torch.multiprocessing`` from a forkserver that has imported torch once (8 processes start in
about a second on 2 cores), meeting at a TCP store the parent hosts on a port the OS picks. Every
phase has a deadline: past it, its processes are killed and :class:`DemoError` says so.
"""

from __future__ import annotations

import importlib
import json
import os
import shlex
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataorder._validate import fail
from dataorder.tools.demo_checks import CHECKS, check_sampler
from dataorder.tools.demo_config import (
    BUGS,
    SAMPLERS,
    DemoConfig,
    DemoError,
    DemoReport,
    MeshShape,
    SamplerResult,
    check_demo_world,
)
from dataorder.tools.demo_data import load_image_sizes, load_tokens
from dataorder.tools.demo_job import load_phase, run_phase
from dataorder.tools.demo_samplers import DEMO_SAMPLERS
from dataorder.tools.plots import plot_schedule

__all__ = [
    "BUGS",
    "CHECKS",
    "DEMO_EXTRAS",
    "SAMPLERS",
    "DemoConfig",
    "DemoError",
    "DemoReport",
    "MeshShape",
    "SamplerResult",
    "check_demo_world",
    "demo_can_plot",
    "inspect_commands",
    "load_image_sizes",
    "load_tokens",
    "require_demo_extras",
    "run_demo",
    "write_inspect_files",
]

#: NOTE [ The demo's extras are checked before any process starts ]
#:     The core install is numpy and torch; the demo's loaders are torchdata's
#:     ``StatefulDataLoader`` and its plot is matplotlib's. A missing torchdata found inside the
#:     job's processes surfaces as a spawn traceback per process and a SIGTERM warning per
#:     sibling, so the parent imports it first and refuses in one line naming the extra; a
#:     missing matplotlib only costs the PNG, which is skipped and named.
#: Modules the demo's processes cannot run without, and the extra that installs each.
DEMO_EXTRAS: dict[str, str] = {"torchdata.stateful_dataloader": "torchdata"}


def require_demo_extras() -> None:
    """Import what the demo's processes need, in this process, before any starts (NOTE [ The
    demo's extras are checked before any process starts ]).

    Raises:
        ImportError: Naming the extra to install, e.g. ``pip install 'dataorder[torchdata]'``.
    """
    for module, extra in DEMO_EXTRAS.items():
        try:
            importlib.import_module(module)
        except ImportError:
            raise ImportError(
                f"dataorder demo needs {module.partition('.')[0]} ({module} does not import "
                f"here); install it with: pip install 'dataorder[{extra}]'"
            ) from None


def demo_can_plot() -> bool:
    """Whether matplotlib imports, so that ``schedule.png`` can be drawn."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return False
    return True


def write_inspect_files(config: DemoConfig, ckpt: str | os.PathLike[str]) -> list[Path]:
    """Write what ``dataorder inspect`` needs beside the checkpoints, written by the parent.

    Each sampler's entry says what (:attr:`~dataorder.tools.demo_samplers.Inspect.write`): the
    mixture's state holds only the length and digest of the log it trained on, so its log goes
    to ``mixture.mixlog.npz`` (:meth:`~dataorder.llm.mixlog.MixtureLog.save`), for ``--log``
    (:func:`inspect_commands`); the packed state only a fingerprint of its
    documents' lengths, so they go to ``packed.lengths.npy``, for ``--lengths``. The bucket
    sampler's manifest is written by its rank 0 (``buckets.manifest.tsv``,
    ``DemoSampler.files``).

    Returns:
        The paths written.
    """
    written = []
    for name in config.samplers:
        how = DEMO_SAMPLERS[name].inspect
        if how is not None and how.write is not None:
            written += how.write(config, Path(ckpt) / name)
    return written


def inspect_commands(config: DemoConfig, ckpt: str | os.PathLike[str]) -> dict[str, str]:
    """Per sampler, the ``dataorder inspect`` command line that explains its checkpoint in
    ``ckpt`` and shows the next batch on each rank (with the files it needs beside it); a
    sampler whose dataset is no file has none."""
    root = Path(ckpt)
    commands = {}
    for name in config.samplers:
        how = DEMO_SAMPLERS[name].inspect
        if how is None:
            continue

        def file(suffix: str, name: str = name) -> str:
            return shlex.quote(str(root / f"{name}{suffix}"))

        args = "" if how.args is None else how.args(config, file)
        commands[name] = f"dataorder inspect {file('.json')}{args}"
    return commands


def _fresh_output(root: Path) -> Path:
    """Empty ``root`` of an earlier run's records and checkpoints; the checkpoint folder."""
    if root.exists() and not root.is_dir():
        fail("out", "a directory", str(root))
    ranks = root / "ranks"
    ckpt = root / "checkpoint"
    for stale in [*ranks.glob("phase*/rank*.json"), *ckpt.glob("*.json"), *ckpt.glob("*.npy")]:
        stale.unlink()
    for folder in ckpt.glob("*/.metadata"):  # a DCP checkpoint of an earlier run
        shutil.rmtree(folder.parent)
    ckpt.mkdir(parents=True, exist_ok=True)
    return ckpt


def _run_phases(
    config: DemoConfig, root: Path, say: Callable[[str], None]
) -> tuple[list[list[dict[str, Any]]], dict[str, float]]:
    """Run both phases; every process's records of each, and the seconds each took."""
    spec_args = {"config": config, "workdir": str(root)}
    seconds: dict[str, float] = {}
    phases: list[list[dict[str, Any]]] = []
    for phase, mesh in enumerate((config.first_mesh, config.mesh)):
        t0 = time.perf_counter()
        what = "train to mid-epoch, checkpoint, stop" if phase == 0 else "resume, train to the end"
        say(f"phase {phase}: {mesh.world} processes on mesh ({mesh}): {what}")
        run_phase(spec_args, phase, mesh, config.timeout)
        phases.append(load_phase(root / "ranks", phase, mesh.world))
        if phase == 0:  # the processes wrote the checkpoint; inspect needs these beside it
            write_inspect_files(config, root / "checkpoint")
        seconds[f"phase{phase}"] = round(time.perf_counter() - t0, 2)
    return phases, seconds


def run_demo(
    config: DemoConfig | None = None,
    out: str | os.PathLike[str] = "out/demo",
    *,
    log: Callable[[str], None] | None = None,
    plot: bool = True,
) -> DemoReport:
    """Run the two-phase job, check it, and write its report, plot and checkpoint under ``out``.

    Writes ``out/report.json`` (:meth:`DemoReport.to_json`), ``out/schedule.png``,
    ``out/checkpoint/<sampler>/`` (the DCP checkpoint every process loads on restart: model,
    optimizer, data order), ``out/checkpoint/<sampler>.json`` (its data order, which
    ``dataorder inspect`` explains), ``buckets.manifest.tsv`` (the fitted buckets' dataset, which
    ``dataorder inspect --manifest`` needs for the bucket state), ``mixture.mixlog.npz`` (the
    mixture's log, for ``--log``), ``packed.lengths.npy`` (the packed documents'
    lengths, for ``--lengths``; :func:`inspect_commands` gives each command line), and each
    process's records under ``out/ranks/``.

    Args:
        config: What to run; default ``DemoConfig()``.
        out: Output directory (created; earlier results in it are replaced).
        log: Called with one line per stage (e.g. ``print``); default: silent.
        plot: Write ``schedule.png`` (needs matplotlib: without it, the PNG is skipped and
            ``log`` says so).

    Returns:
        The :class:`DemoReport`; ``report.ok`` says whether every check passed.

    Raises:
        ImportError: If torchdata is missing (NOTE [ The demo's extras are checked before any
            process starts ]).
        DemoError: If a process failed or a phase timed out.
        ValueError: If ``out`` exists and is not a directory, or a mesh has more processes than
            this machine may start (:func:`~dataorder.tools.demo_config.max_demo_processes`).
    """
    config = config or DemoConfig()
    check_demo_world(config.first_mesh, "first_mesh")  # before any process starts
    check_demo_world(config.mesh, "mesh")
    require_demo_extras()
    say = log or (lambda _line: None)
    if plot and not demo_can_plot():
        plot = False
        say("schedule.png will not be drawn: matplotlib is not installed "
            "(pip install 'dataorder[plots]')")  # fmt: skip
    root = Path(out)
    ckpt = _fresh_output(root)
    start = time.perf_counter()
    phases, seconds = _run_phases(config, root, say)
    results = []
    schedule = []
    for name in config.samplers:
        entry = DEMO_SAMPLERS[name]
        result, rows = check_sampler(
            name,
            phases,
            extra=entry.checks,
            declared_padding=entry.padding is not None,
            batching=entry.reading.batching,
        )
        results.append(result)
        schedule += rows
    outputs = {"report": str(root / "report.json")}
    outputs.update({f"checkpoint:{name}": str(ckpt / f"{name}.json") for name in config.samplers})
    if plot:
        png = root / "schedule.png"
        title = (
            f"dataorder demo: ({config.first_mesh}) -> ({config.mesh}), "
            f"global batch {config.global_batch_size}"
        )
        declared = {r.name: (r.dataset_size, r.dropped, r.padded) for r in results}
        plot_schedule(schedule, png, title=title, declared=declared)
        outputs["plot"] = str(png)
    seconds["total"] = round(time.perf_counter() - start, 2)
    report = DemoReport(config=config, results=results, seconds=seconds, outputs=outputs)
    (root / "report.json").write_text(json.dumps(report.to_json(), indent=1, default=str))
    return report
