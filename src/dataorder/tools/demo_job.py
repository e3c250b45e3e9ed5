"""What runs inside each process of the demo: build the samplers, train, checkpoint, record.

See :mod:`dataorder.tools.demo`. The parent (:func:`run_phase`) starts one process per rank
(forkserver, gloo on loopback) and collects what each one recorded. Each process builds every
sampler of the registry the configuration names (:func:`build_job`), trains through
``torch.nn.parallel.DistributedDataParallel`` over the mesh's data-parallel group with a
``torch.optim.SGD`` optimizer, and at the end of phase 0 checkpoints through
``torch.distributed.checkpoint`` (:func:`save_checkpoint`), which phase 1 loads on its other
data-parallel size (:func:`load_checkpoint`).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import time
import warnings
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from dataorder.core.batching import BATCHES, rule_of
from dataorder.core.keys import derive_key
from dataorder.core.topology import data_parallel_topology
from dataorder.integrations.dcp import OrderState
from dataorder.parallel.verify import verify_data_parallel
from dataorder.tools.demo_checks import DEMO_CHECKS
from dataorder.tools.demo_config import MESH_DIMS, DemoConfig, DemoError, MeshShape, PhaseSpec
from dataorder.tools.demo_data import LossFn
from dataorder.tools.demo_samplers import DEMO_SAMPLERS, DemoSampler, Placement, Reading

__all__ = [
    "PRELOAD",
    "Job",
    "PhaseSpec",  # from demo_config
    "build_job",
    "load_checkpoint",
    "load_phase",
    "preload",
    "run_phase",
    "save_checkpoint",
]

_LEARNING_RATE = 0.5
# Momentum gives the optimizer a state (a buffer per parameter) that the checkpoint must carry.
_MOMENTUM = 0.5
#: Imported once by the forkserver, so that no process imports them again (a missing one is
#: skipped by multiprocessing and imported by the process that needs it), beside each sampler's
#: own (:func:`preload`). ``torch._dynamo``: DistributedDataParallel's constructor imports it,
#: which costs seconds in every process of a small machine.
PRELOAD: tuple[str, ...] = (
    "torch",
    "torch.distributed",
    "torch.distributed.device_mesh",
    "torch._dynamo",
    "torch.distributed.checkpoint",
    "torch.distributed.checkpoint.state_dict",
    "torch.distributed.checkpoint.state_dict_loader",
    "torch.distributed.checkpoint.state_dict_saver",
    "torchdata.stateful_dataloader",
    "dataorder.integrations.dcp",
    "dataorder.tools.demo_job",
    "dataorder.parallel.verify",
)


def preload(samplers: tuple[str, ...]) -> list[str]:
    """:data:`PRELOAD` and the modules the named samplers' builders import."""
    own = (module for name in samplers for module in DEMO_SAMPLERS[name].imports)
    return list(dict.fromkeys((*PRELOAD, *own)))


# -- one sampler, built -------------------------------------------------------------------------
@dataclass
class Job:
    """What one process trains with, for one sampler: its registry entry, built."""

    entry: DemoSampler[Any]
    config: DemoConfig
    data: Any
    sampler: Any
    loader: Any
    model: Any
    loss_fn: LossFn
    optimizer: Any

    @property
    def reading(self) -> Reading:
        """How the loader batches and how a trained batch is read back (the entry's)."""
        return self.entry.reading

    def dropped(self) -> int:
        """The sampler's own count of units (samples, tokens) the epoch does not reach."""
        return int(getattr(self.sampler, rule_of(self.sampler).dropped_counter))

    def padded(self) -> int:
        """The sampler's own count of padding units (slots, tokens) in the epoch."""
        return int(getattr(self.sampler, rule_of(self.sampler).padded_counter))

    def batch_padding(self, epoch: int, index: int, item: Any) -> int:
        """Units of the item at ``index`` of ``epoch`` that hold nothing new: its padding as the
        rule reads it (``None`` slots, the empty tokens of rows) and the repeats the sampler
        declares (``DemoSampler.padding``)."""
        pads = self.reading.batching.padding(self.reading.batching.slots(item))
        declare = self.entry.padding
        return pads + (0 if declare is None else declare(self.sampler, epoch, index))

    def holds_data(self, item: Any) -> bool:
        """Whether the item covers any unit (else its loss is not shown)."""
        keys, _, _ = self.reading.batching.spans(self.reading.batching.slots(item))
        return bool(keys.size)

    def records(self) -> dict[str, Any]:
        """What the entry's extra checks need recorded at the end of the phase."""
        out: dict[str, Any] = {}
        for check in self.entry.checks:
            record = DEMO_CHECKS[check].record
            if record is not None:
                out.update(record(self.sampler))
        return out

    def notes(self) -> list[str]:
        """What the phase shows beyond the checks, one line each."""
        notes = self.entry.notes
        return [] if notes is None else notes(self.data, self.sampler, self.config)


def _model_seed(seed: int, name: str) -> int:
    # torch.Generator.manual_seed takes 64-bit seeds; the top bit is dropped to stay signed-safe
    return derive_key(seed, epoch=0, stream=f"demo/{name}", purpose="model-init") >> 1


def _placement(mesh: Any, inject_bug: str | None) -> Placement:
    """Where the samplers think they are: the DP rank and size, unless the bug is injected."""
    if inject_bug == "global-world":
        import torch.distributed as dist

        return Placement(dist.get_rank(), dist.get_world_size())
    topo = data_parallel_topology(mesh, ("dp",))
    return Placement(topo.dp_rank, topo.dp_size, mesh)


def build_job(name: str, spec: PhaseSpec, mesh: Any) -> Job:
    """Build sampler ``name`` of the registry for this process: its data, sampler, loader and
    model."""
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    entry = DEMO_SAMPLERS[name]
    cfg = spec.config
    data = entry.data(cfg)
    sampler = entry.build(data, _placement(mesh, cfg.inject_bug), cfg)
    rule = rule_of(sampler)
    # what a trained batch is read back as: the sampler's items, or the loader's batches of them
    if entry.reading.batching != (rule if rule.batched else BATCHES):
        raise TypeError(
            f"DEMO_SAMPLERS[{name!r}].reading.batching must be the rule of what it trains on, "
            f"{rule if rule.batched else BATCHES!r}; got {entry.reading.batching!r}"
        )
    collate = entry.reading.collate
    if rule.batched:
        loader = StatefulDataLoader(data.dataset, batch_sampler=sampler, collate_fn=collate)
    else:  # a per-index sampler: the loader makes the micro-batches
        loader = StatefulDataLoader(
            data.dataset, batch_size=cfg.micro_batch_size, sampler=sampler, collate_fn=collate
        )
    model, loss_fn = entry.model(_model_seed(cfg.seed, name))
    optimizer = torch.optim.SGD(model.parameters(), lr=_LEARNING_RATE, momentum=_MOMENTUM)
    return Job(entry, cfg, data, sampler, loader, model, loss_fn, optimizer)


# -- the checkpoint -------------------------------------------------------------------------------
# The two functions below are the only place that saves or loads it: one
# torch.distributed.checkpoint (DCP) folder per sampler, ``<sampler>/``, written and read by every
# process of the job. Its app state is the model and the optimizer (every replica holds the same:
# DCP keeps one copy of each tensor, and loads them on any number of processes), the data order
# (``OrderState``: the sampler's state as training consumed it, the same on every process, so
# DCP's one copy serves every rank of any data-parallel size) and the loop's counters. Beside it,
# rank 0 writes the order state as ``<sampler>.json``, which ``dataorder inspect`` explains, and
# the files inspect needs (``DemoSampler.files``). No loader state is saved: with no worker
# processes, the sampler's state is all of the loader's that a resume needs.
def _app_state(job: Job, loop: dict[str, int], *, order: bool = True) -> dict[str, Any]:
    """The DCP app state of ``job``: what :func:`save_checkpoint` saves and
    :func:`load_checkpoint` loads (without the data order when ``order`` is False)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, optim = get_state_dict(job.model, job.optimizer)
    app: dict[str, Any] = {"model": model, "optim": optim, "loop": loop}
    if order:
        app["data"] = OrderState(job.loader)
    return app


def _model_digest(job: Job) -> str:
    """A digest of the model's and the optimizer's state: equal on two processes, or before a
    save and after a load, only if every tensor and setting is."""
    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict

    h = hashlib.blake2b(digest_size=8)

    def walk(where: str, value: Any) -> None:
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                walk(f"{where}.{key}", value[key])
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(f"{where}.{i}", item)
        elif isinstance(value, torch.Tensor):
            h.update(where.encode())
            h.update(value.detach().contiguous().numpy().tobytes())
        else:
            h.update(f"{where}={value!r}".encode())

    model, optim = get_state_dict(job.model, job.optimizer)
    walk("model", model)
    walk("optim", optim)
    return h.hexdigest()


def save_checkpoint(job: Job, ckpt: Path, rank: int, loop: dict[str, int]) -> dict[str, Any]:
    """Checkpoint ``job`` at the end of phase 0 (a collective: every process calls it).

    Returns:
        What this process gave DCP, for the checks: ``{"order": the order state, "model": a
        digest of the model and optimizer}``.
    """
    # dcp.save, from the module that defines it (torch does not re-export it explicitly)
    from torch.distributed.checkpoint.state_dict_saver import save

    name = job.entry.name
    app = _app_state(job, loop)
    order = app["data"].state_dict()["sampler"]
    save(app, checkpoint_id=ckpt / name)
    if rank == 0:
        (ckpt / f"{name}.json").write_text(json.dumps(order, indent=1, sort_keys=True))
        if job.entry.files is not None:
            job.entry.files(job.data, ckpt / name)
    return {"order": order, "model": _model_digest(job)}


def load_checkpoint(job: Job, ckpt: Path, *, order: bool = True) -> dict[str, Any]:
    """Load phase 0's checkpoint into ``job``, before phase 1 reads anything (a collective).

    The sampler is placed at the saved order now (``OrderState`` drops the loader's iterator),
    so that the check before training covers what this phase will read: the rest of the epoch,
    on the new layout. ``order=False`` leaves the data order alone (the ``skip-batches`` bug).

    Returns:
        ``{"restored": a digest of the model and optimizer loaded, "loop": the loop's
        counters}``.
    """
    from torch.distributed.checkpoint.state_dict import set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load  # dcp.load

    loop = {"steps": 0, "micro_batches": 0}
    app = _app_state(job, loop, order=order)
    load(app, checkpoint_id=ckpt / job.entry.name)
    set_state_dict(
        job.model, job.optimizer, model_state_dict=app["model"], optim_state_dict=app["optim"]
    )
    return {"restored": _model_digest(job), "loop": dict(app["loop"])}


# -- training -------------------------------------------------------------------------------------
@dataclass
class _Trained:
    """What this process trained on, batch by batch, and the loss of each optimizer step."""

    batches: list[Any] = field(default_factory=list)  # each as the sampler yielded it
    buckets: list[int | None] = field(default_factory=list)
    padding: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


def _batch_bucket(batch: dict[str, Any]) -> int | None:
    """The bucket of a batch of latents, -1 if its samples come from several, None if no buckets."""
    bucket = batch.get("bucket")
    if bucket is None:
        return None
    ids = set(bucket.tolist())
    return ids.pop() if len(ids) == 1 else -1


def _step(
    job: Job, ddp: Any, micro: list[dict[str, Any]], out: _Trained, at: tuple[int, int]
) -> None:
    """One optimizer step over ``micro``: gradients accumulated locally, averaged over the
    data-parallel group by DDP on the last micro-batch's backward."""
    epoch, first_index = at
    job.optimizer.zero_grad()
    shown: list[float] = []  # the loss of micro-batches that hold real data
    for k, batch in enumerate(micro):
        with nullcontext() if k == len(micro) - 1 else ddp.no_sync():
            loss = job.loss_fn(ddp, batch)
            (loss / len(micro)).backward()
        item = job.reading.item(batch)  # what the model really trained on
        if job.holds_data(item):
            shown.append(loss.item())
        out.padding.append(job.batch_padding(epoch, first_index + len(out.batches), item))
        out.batches.append(item)
        out.buckets.append(_batch_bucket(batch))
    job.optimizer.step()
    out.losses.append(sum(shown) / max(1, len(shown)))


def _train_phase(job: Job, spec: PhaseSpec, dp_group: Any, skip: int = 0) -> _Trained:
    """Train this phase's part of the epoch: phase 0 up to its middle, phase 1 to its end,
    after drawing ``skip`` micro-batches untrained (the ``skip-batches`` bug)."""
    from torch.nn.parallel import DistributedDataParallel

    accumulation = spec.config.accumulation(spec.mesh)
    # phase 0 stops at the middle of the epoch, on an optimizer-step boundary
    stop = max(1, len(job.loader) // accumulation // 2) if spec.phase == 0 else None
    # Every replica starts from the same parameters (seeded, or loaded): DDP's broadcast from
    # the group's first rank changes nothing.
    ddp = DistributedDataParallel(job.model, process_group=dp_group)
    out = _Trained()
    it: Iterator[dict[str, Any]] = iter(job.loader)
    # The epoch this phase reads (it never crosses into the next one), taken before the first
    # batch: the cursor's epoch may change under the loop (a loader with workers starts its next
    # pass early), possibly before the last micro-batches of a step are accounted for.
    at = (int(job.sampler.epoch), job.sampler.next_start()[1] + skip)
    for _ in range(skip):  # replay to a per-rank position: the bug, never the way to resume
        next(it, None)
    while stop is None or len(out.losses) < stop:
        micro = [b for b in (next(it, None) for _ in range(accumulation)) if b is not None]
        if not micro:
            break
        _step(job, ddp, micro, out, at)
    return out


def _train(name: str, spec: PhaseSpec, mesh: Any, rank: int) -> dict[str, Any]:
    """Train with one sampler for this phase; return what this process read, and its checks."""
    t_start = time.perf_counter()
    job = build_job(name, spec, mesh)
    t_built = time.perf_counter()
    ckpt = Path(spec.workdir) / "checkpoint"
    bug = spec.config.inject_bug
    restored: dict[str, Any] = {"restored": None, "loop": {"micro_batches": 0}}
    if spec.phase > 0 and bug != "no-resume":
        restored = load_checkpoint(job, ckpt, order=bug != "skip-batches")
    t_loaded = time.perf_counter()
    skip = int(restored["loop"]["micro_batches"]) if bug == "skip-batches" else 0
    # The collective check, over the mesh's groups, of every batch this phase is about to read.
    # It runs before iter(loader): it reads the sampler and then restores its cursor, which must
    # not happen under a live iterator.
    report = verify_data_parallel(job.sampler, mesh=mesh, dp_dims=("dp",), raise_on_error=False)
    t_verified = time.perf_counter()
    trained = _train_phase(job, spec, mesh["dp"].get_group(), skip)
    out: dict[str, Any] = {
        "batches": trained.batches,
        "buckets": trained.buckets,
        "padding": trained.padding,
        "losses": trained.losses,
        "verify": {"ok": report.ok, "summary": str(report)},
        "dropped": job.dropped(),
        "padded": job.padded(),
        "universe": job.reading.universe(job.data),
        "restored": restored["restored"],
        "seconds": {
            "setup": t_verified - t_start,
            "checkpoint": t_loaded - t_built,
            "train": time.perf_counter() - t_verified,
        },
        **job.records(),
    }
    if rank == 0:
        out["notes"] = job.notes()
    if spec.phase == 0:
        t_saved = time.perf_counter()
        loop = {"steps": len(trained.losses), "micro_batches": len(trained.batches)}
        out["checkpoint"] = save_checkpoint(job, ckpt, rank, loop)
        out["seconds"]["checkpoint"] = time.perf_counter() - t_saved
    return out


# -- one process ----------------------------------------------------------------------------------
def _phase_main(rank: int, spec: PhaseSpec) -> None:
    """One process of one phase: join the group, build the mesh, train with every sampler."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    # Eight processes share a few cores: intra-op threads would only contend with each other.
    torch.set_num_threads(1)
    # torchdata 0.11 calls a torch API that torch deprecates; the warning is noise in a demo
    warnings.filterwarnings("ignore", message=".*set_vital.* is deprecated")
    t0 = time.perf_counter()
    timeout = timedelta(seconds=spec.config.timeout)
    # TCPStore is public torch API, re-exported without __all__ (hence the ignore)
    store = dist.TCPStore("127.0.0.1", spec.port, None, False, timeout)  # type: ignore[attr-defined]
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=spec.mesh.world, timeout=timeout
    )
    try:
        mesh = init_device_mesh("cpu", spec.mesh.shape, mesh_dim_names=MESH_DIMS)
        topo = data_parallel_topology(mesh, ("dp",))
        t_mesh = time.perf_counter() - t0
        result: dict[str, Any] = {
            "seconds_init": t_mesh,
            "rank": rank,
            "dp_rank": topo.dp_rank,
            "dp_size": topo.dp_size,
            "replica_rank": topo.replica_rank,
            "samplers": {name: _train(name, spec, mesh, rank) for name in spec.config.samplers},
        }
        path = Path(spec.workdir) / "ranks" / f"phase{spec.phase}" / f"rank{rank}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(path)
        dist.barrier()
    finally:
        dist.destroy_process_group()


# -- the parent: launch, wait, collect ------------------------------------------------------------
def run_phase(spec_args: dict[str, Any], phase: int, mesh: MeshShape, timeout: float) -> None:
    """Run one phase: ``mesh.world`` processes, killed past ``timeout`` seconds.

    Raises:
        DemoError: If a process failed, or the phase did not finish in time.
    """
    import torch.distributed as dist

    # public torch API that torch does not re-export explicitly (hence the ignores)
    from torch.multiprocessing import (  # type: ignore[attr-defined]
        ProcessExitedException,
        ProcessRaisedException,
        start_processes,
    )

    # forkserver: each process is forked from a server that has imported torch once, which
    # starts 8 processes in about a second where "spawn" re-imports torch 8 times; and unlike
    # "fork" it never copies the caller's threads or state.
    multiprocessing.set_forkserver_preload(preload(spec_args["config"].samplers))
    # The parent hosts the rendezvous store on a port the OS picks: no free-port race.
    store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", 0, None, True, timedelta(seconds=timeout), False
    )
    spec = PhaseSpec(phase=phase, mesh=mesh, port=store.port, **spec_args)
    (Path(spec.workdir) / "ranks" / f"phase{phase}").mkdir(parents=True, exist_ok=True)
    context = start_processes(  # type: ignore[no-untyped-call]
        _phase_main, args=(spec,), nprocs=mesh.world, join=False, start_method="forkserver"
    )
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=max(0.05, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise DemoError(
                    f"phase {phase} ({mesh}) did not finish within {timeout:g} s; "
                    "its processes were killed"
                )
    except ProcessRaisedException as err:
        raise DemoError(f"phase {phase} ({mesh}): a process failed:\n{err}") from None
    except ProcessExitedException as err:
        raise DemoError(f"phase {phase} ({mesh}): {err}") from None
    finally:
        for proc in context.processes:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
        del store


def load_phase(workdir: Path, phase: int, world: int) -> list[dict[str, Any]]:
    """Every process's record of one phase, by rank.

    Raises:
        DemoError: If a process wrote none.
    """
    records = []
    for rank in range(world):
        path = workdir / f"phase{phase}" / f"rank{rank}.json"
        if not path.is_file():
            raise DemoError(f"phase {phase}: rank {rank} wrote no result ({path} is missing)")
        records.append(json.loads(path.read_text()))
    return records
