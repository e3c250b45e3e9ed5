"""What runs inside each process of the demo: build the samplers, train, checkpoint, record.

See :mod:`dataorder.tools.demo`. The parent (:func:`run_phase`) starts one process per rank
(forkserver, gloo on loopback) and collects what each one recorded.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from dataorder.tools.demo_config import (
    _LEARNING_RATE,
    _MESH_DIMS,
    _PRELOAD,
    DemoError,
    MeshShape,
    PhaseSpec,
)
from dataorder.tools.demo_samplers import build_job

__all__ = ["PhaseSpec", "load_phase", "run_phase"]  # PhaseSpec: from demo_config


# -- what runs inside each process ----------------------------------------------------------------
def _grad_all_reduce(model: Any, group: Any, size: int) -> None:
    import torch
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)  # one collective per step: DDP's job, done by hand
    flat /= size
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def _sgd_step(model: Any, lr: float) -> None:
    # Plain SGD by hand: constructing a torch.optim optimizer imports torch._dynamo, which costs
    # seconds in every process of a small machine, and plain SGD has no state to checkpoint.
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad


def _batch_bucket(batch: dict[str, Any]) -> int | None:
    """The bucket of a batch of latents, -1 if its samples come from several, None if no buckets."""
    bucket = batch.get("bucket")
    if bucket is None:
        return None
    ids = set(bucket.tolist())
    return ids.pop() if len(ids) == 1 else -1


def _train(name: str, spec: PhaseSpec, mesh: Any, rank: int) -> dict[str, Any]:
    """Train with one sampler for this phase; return what this process read, and its checks."""
    import torch

    from dataorder.core.state import find_sampler_states
    from dataorder.core.topology import data_parallel_topology
    from dataorder.parallel.verify import verify_data_parallel

    cfg = spec.config
    t_start = time.perf_counter()
    topo = data_parallel_topology(mesh, ("dp",))
    dp_group = mesh["dp"].get_group()
    job = build_job(name, spec, mesh)
    ckpt = Path(spec.workdir) / "checkpoint"
    if spec.phase > 0 and cfg.inject_bug != "no-resume":
        loader_state = json.loads((ckpt / f"{name}.json").read_text())
        job.loader.load_state_dict(loader_state)  # applied by the next iter(loader)
        # The sampler's own state, inside the loader's, is set now too, so that the check below
        # covers what this phase will read: the rest of the epoch, on the new layout.
        ((_where, sampler_state),) = find_sampler_states(loader_state)
        job.sampler.load_state_dict(sampler_state)
        job.model.load_state_dict(torch.load(ckpt / f"{name}.model.pt", weights_only=True))
    # The collective check, over the mesh's groups, of every batch this phase is about to read.
    # It runs before iter(loader): it reads the sampler and then restores its cursor, which must
    # not happen under a live iterator.
    report = verify_data_parallel(job.sampler, mesh=mesh, dp_dims=("dp",), raise_on_error=False)
    t_verified = time.perf_counter()

    accumulation = cfg.accumulation(spec.mesh)
    epoch_micro_batches = len(job.loader)
    # phase 0 stops at the middle of the epoch, on an optimizer-step boundary
    stop = max(1, epoch_micro_batches // accumulation // 2) if spec.phase == 0 else None
    batches: list[list[int]] = []
    buckets: list[int | None] = []
    padding: list[int] = []
    losses: list[float] = []
    it: Iterator[dict[str, Any]] = iter(job.loader)
    # The epoch this phase reads (it never crosses into the next one), taken before the first
    # batch: the cursor's epoch may change under the loop (a loader with workers starts its next
    # pass early), possibly before the last micro-batches of a step are accounted for.
    epoch = int(job.sampler.epoch)
    first_index = job.next_batch_index()
    while stop is None or len(losses) < stop:
        micro = [b for b in (next(it, None) for _ in range(accumulation)) if b is not None]
        if not micro:
            break
        job.model.zero_grad()
        shown: list[float] = []  # the loss of micro-batches that hold a real sample
        for batch in micro:
            loss = job.loss_fn(job.model, batch)
            (loss / len(micro)).backward()
            if int((batch["index"] >= 0).sum()):
                shown.append(loss.item())
            padding.append(job.batch_padding(epoch, first_index + len(batches), batch))
            batches.append(batch["index"].tolist())  # what the model really trained on
            buckets.append(_batch_bucket(batch))
        _grad_all_reduce(job.model, dp_group, topo.dp_size)
        _sgd_step(job.model, _LEARNING_RATE)
        losses.append(sum(shown) / max(1, len(shown)))
    out: dict[str, Any] = {
        "batches": batches,
        "buckets": buckets,
        "padding": padding,
        "losses": losses,
        "verify": {"ok": report.ok, "summary": str(report)},
        "dropped": job.dropped(),
        "padded": job.padded(),
        "dataset_size": len(job.loader.dataset),
        "seconds": {"setup": t_verified - t_start, "train": time.perf_counter() - t_verified},
        **job.extra(),
    }
    if rank == 0:
        out["notes"] = job.notes()
    if spec.phase == 0:
        out["loader_state"] = job.loader.state_dict()
        if rank == 0:  # every replica holds the same model: one copy is the checkpoint
            torch.save(job.model.state_dict(), ckpt / f"{name}.model.pt")
            if job.save_files is not None:
                job.save_files(ckpt)
    return out


def _phase_main(rank: int, spec: PhaseSpec) -> None:
    """One process of one phase: join the group, build the mesh, train with every sampler."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from dataorder.core.topology import data_parallel_topology

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
        mesh = init_device_mesh("cpu", spec.mesh.shape, mesh_dim_names=_MESH_DIMS)
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


# -- the parent: launch, wait, check --------------------------------------------------------------
def run_phase(spec_args: dict[str, Any], phase: int, mesh: MeshShape, timeout: float) -> None:
    import multiprocessing

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
    multiprocessing.set_forkserver_preload(list(_PRELOAD))
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
    records = []
    for rank in range(world):
        path = workdir / f"phase{phase}" / f"rank{rank}.json"
        if not path.is_file():
            raise DemoError(f"phase {phase}: rank {rank} wrote no result ({path} is missing)")
        records.append(json.loads(path.read_text()))
    return records
