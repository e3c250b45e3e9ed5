"""Rank programs for ``tests/parallel/test_multiprocess.py``, run under a node agent.

``python mp_workers.py JOB WORLD PORT WORKDIR PHASE DEADLINE`` starts :func:`agent`, which forks
WORLD ranks; each joins a gloo process group on loopback, does its job and writes what it saw to
``WORKDIR/<job>.phase<P>.rank<R>.json``; the test process checks those files. Jobs:

* ``mesh``: on a 2 x 2 x 2 (dp, tp, cp) ``DeviceMesh``, every sampler of the library reads an
  epoch and runs :func:`dataorder.parallel.verify.verify_data_parallel`; a sampler built with the
  global
  world must be refused on every rank; DataLoaders with two workers feed the check too.
* ``crash``: a training loop over a ``StatefulDataLoader`` (two workers) and a Megatron sampler
  that checkpoints every few steps and logs the indices of every committed step. Phase 0 kills
  one rank mid-step (``SIGKILL``); the others block in the step's all-reduce (the killed rank's
  DataLoader workers still hold its sockets, so gloo only notices at its timeout) until the
  agent stops them, as torchrun does; phase 1 restarts every rank from the last complete
  checkpoint and finishes the epoch.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

# -- shared with the test process --------------------------------------------------------------

MESH_SHAPE = (2, 2, 2)
MESH_DIMS = ("dp", "tp", "cp")
N_MESH = 101  # not a multiple of any block: every sampler pads or drops
N_CRASH = 96  # 2 DP ranks x micro-batches of 4: 12 steps an epoch, no padding: "exactly once"
CRASH_BATCH = 4
CRASH_EPOCHS = 2
CRASH_EVERY = 3  # checkpoint after steps 3, 6, 9, ... and after each epoch's loop
# mid-step 14 of phase 0 (epoch 1): the last checkpoint is the one after epoch 0's loop, whose
# loader state is at the end of epoch 0 (the loader ran out: torchdata marks it finished)
CRASH_KILL = {"rank": 5, "step": 14}


class IndexDataset(Dataset[Any]):
    """Returns its index (``None`` for a padding slot), so batches are the sampler's indices."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int | None) -> int | None:
        return index


def collate_indices(batch: list[int | None]) -> list[int | None]:
    """Keep a batch as a list: padding slots (``None``) cannot be collated into a tensor."""
    return list(batch)


def multires_dataset(n: int) -> Any:
    import numpy as np

    from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset

    rng = np.random.default_rng(7)
    return BaseMultiresolutionDataset.from_sizes(
        rng.integers(256, 1536, n), rng.integers(256, 1536, n)
    )


# -- the mesh job ------------------------------------------------------------------------------


def _samplers(mesh: Any, topo: Any) -> dict[str, Any]:
    from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
    from dataorder.llm.factory import create_megatron_sampler
    from dataorder.llm.megatron import (
        MegatronPretrainingRandomSampler,
        MegatronPretrainingSampler,
    )
    from dataorder.parallel.distributed import DistributedSampler

    r, w = topo.dp_rank, topo.dp_size
    ds = multires_dataset(N_MESH)
    return {
        "distributed": DistributedSampler(range(N_MESH), mesh=mesh, seed=1),
        "distributed-torch-drop": DistributedSampler(
            range(N_MESH), mesh=mesh, dp_dims=("dp",), seed=2, drop_last=True, compat="torch"
        ),
        "megatron-single": MegatronPretrainingSampler(N_MESH, 4, r, w, drop_last=False),
        "megatron-random": MegatronPretrainingRandomSampler(
            N_MESH, 3, r, w, drop_last=False, seed=3
        ),
        "megatron-factory": create_megatron_sampler(
            N_MESH, 4, 16, "cyclic", drop_last=True, rank=r, world_size=w, seed=4
        ),
        "bucket": SequentialBucketSampler(
            ds, base_batch_size=3, drop_last=False, seed=5, mesh=mesh
        ),
        "bucket-drop": SequentialBucketSampler(
            ds, base_batch_size=2, drop_last=True, seed=6, mesh=mesh, dp_dims=("dp",)
        ),
    }


def _report(report: Any) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "dp": [report.dp_rank, report.dp_size],
        "replica": [report.replica_rank, report.replica_size],
        "num_batches": report.num_batches,
        "full_epoch": report.full_epoch,
        "padding_slots": report.padding_slots,
        "allowed_padding": report.allowed_padding,
        "distinct": report.distinct_samples,
    }


def job_mesh(rank: int, world: int, workdir: Path, phase: int) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh

    from dataorder.core.topology import data_parallel_topology, resolve_topology
    from dataorder.parallel.distributed import DistributedSampler
    from dataorder.parallel.verify import DataParallelError, verify_data_parallel

    mesh = init_device_mesh("cpu", MESH_SHAPE, mesh_dim_names=MESH_DIMS)
    topo = data_parallel_topology(mesh)
    out: dict[str, Any] = {
        "coord": list(mesh.get_coordinate()),
        "topology": [topo.dp_rank, topo.dp_size, topo.replica_rank, topo.replica_size],
        "process_group_topology": list(vars(resolve_topology()).values()),
        "samplers": {},
    }
    for name, sampler in _samplers(mesh, topo).items():
        report = verify_data_parallel(sampler, mesh=mesh)
        cursor = [sampler.epoch, sampler.progress]  # verify did not move it: epoch 0's start
        out["samplers"][name] = {
            "items": list(sampler),  # the whole of epoch 0
            "cursor": cursor,
            "epoch_after": sampler.next_start()[0],  # the pass ran out: epoch 1 comes next
            "padded": sampler.samples_padded,
            "dropped": sampler.samples_dropped,
            "report": _report(report),
            "first_batches": _report(verify_data_parallel(sampler, mesh=mesh, num_batches=3)),
        }

    # the 3-D parallel bug: a sampler over the global world; every rank must refuse it together
    wrong = DistributedSampler(range(N_MESH), num_replicas=world, rank=rank)
    try:
        verify_data_parallel(wrong, mesh=mesh)
        out["global_world_sampler"] = None
    except DataParallelError as err:
        out["global_world_sampler"] = list(err.violations)

    # DataLoaders with two workers: what comes out of them is verified, the sampler untouched
    samplers = _samplers(mesh, topo)
    loaders = {
        "loader-megatron-random": DataLoader(
            IndexDataset(N_MESH),
            batch_sampler=samplers["megatron-random"],
            num_workers=2,
            collate_fn=collate_indices,
        ),
        "loader-bucket": DataLoader(
            IndexDataset(N_MESH),
            batch_sampler=samplers["bucket"],
            num_workers=2,
            collate_fn=collate_indices,
        ),
        "loader-distributed": DataLoader(
            IndexDataset(N_MESH), sampler=samplers["distributed"], batch_size=5, num_workers=2
        ),
    }
    out["loaders"] = {}
    for name, loader in loaders.items():
        batches = [b.tolist() if hasattr(b, "tolist") else list(b) for b in loader]
        declared = _declared(loader)
        out["loaders"][name] = {
            "batches": batches,
            # what came out of the workers, checked as plain batches against declared padding
            "report": _report(
                verify_data_parallel(batches, mesh=mesh, allowed_padding=declared.samples_padded)
            ),
            # and the loader itself as the source (its sampler is read and restored)
            "loader_report": _report(verify_data_parallel(loader, mesh=mesh, epoch=1)),
        }
    out["accelerate"] = _accelerate(mesh) if importlib.util.find_spec("accelerate") else None
    return out


def _accelerate(mesh: Any) -> dict[str, Any]:
    """Accelerate in a real job: prepare() re-shards a rank-aware sampler; the recipe does not."""
    from accelerate import Accelerator
    from accelerate.data_loader import prepare_data_loader

    from dataorder.parallel.distributed import DistributedSampler

    accelerator = Accelerator(cpu=True)

    def loader() -> DataLoader[Any]:
        sampler = DistributedSampler(IndexDataset(N_MESH), mesh=mesh, seed=1)
        return DataLoader(IndexDataset(N_MESH), sampler=sampler, batch_size=4)

    default = accelerator.prepare(loader())
    recipe = prepare_data_loader(
        loader(), device=accelerator.device, num_processes=1, process_index=0, put_on_device=True
    )
    return {
        "num_processes": accelerator.num_processes,
        "default": [x for b in default for x in b.tolist()],
        "recipe": [x for b in recipe for x in b.tolist()],
    }


def _declared(loader: DataLoader[Any]) -> Any:
    inner = loader.batch_sampler
    return inner if hasattr(inner, "samples_padded") else inner.sampler  # type: ignore[union-attr]


# -- the crash job -----------------------------------------------------------------------------


def _crash_loaders(mesh: Any, topo: Any) -> tuple[Any, Any, Any, Any]:
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataorder.llm.megatron import MegatronPretrainingRandomSampler
    from dataorder.parallel.distributed import DistributedSampler

    dist_sampler = DistributedSampler(IndexDataset(N_CRASH), mesh=mesh, seed=11)
    # two workers: the loader prefetches ahead of training, and its snapshots account for it
    stateful = StatefulDataLoader(
        IndexDataset(N_CRASH), sampler=dist_sampler, batch_size=CRASH_BATCH, num_workers=2
    )
    megatron = MegatronPretrainingRandomSampler(
        N_CRASH, CRASH_BATCH, topo.dp_rank, topo.dp_size, seed=12
    )
    # no workers: nothing is prefetched, so the sampler's own state is the training position
    plain = DataLoader(
        IndexDataset(N_CRASH), batch_sampler=megatron, num_workers=0, collate_fn=collate_indices
    )
    return stateful, dist_sampler, plain, megatron


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def job_crash(rank: int, world: int, workdir: Path, phase: int) -> dict[str, Any]:
    """Train one epoch; checkpoint every CRASH_EVERY steps; log each step after its commit."""
    from torch.distributed.device_mesh import init_device_mesh

    from dataorder.core.topology import data_parallel_topology

    mesh = init_device_mesh("cpu", MESH_SHAPE, mesh_dim_names=MESH_DIMS)
    topo = data_parallel_topology(mesh)
    stateful, dist_sampler, plain, megatron = _crash_loaders(mesh, topo)
    ckpt = workdir / "ckpt"
    log = workdir / f"log.rank{rank}.jsonl"
    start = 0
    if phase > 0:
        start = json.loads((ckpt / "latest.json").read_text())["step"]
        state = json.loads((ckpt / f"step{start}.rank{rank}.json").read_text())
        stateful.load_state_dict(state["stateful_loader"])
        megatron.load_state_dict(state["megatron"])
        # the model is rolled back to the checkpoint: steps logged after it are trained again
        kept = [line for line in log.read_text().splitlines() if json.loads(line)["step"] <= start]
        _write_atomic(log, "".join(line + "\n" for line in kept))
    step = start
    first_epoch = json.loads((ckpt / "latest.json").read_text())["epoch"] if phase else 0

    def checkpoint(epoch: int) -> None:
        state = {"stateful_loader": stateful.state_dict(), "megatron": megatron.state_dict()}
        _write_atomic(ckpt / f"step{step}.rank{rank}.json", json.dumps(state))
        dist.barrier()  # every rank's file is on disk before the checkpoint is declared
        if rank == 0:  # the loop's own epoch, as most loops save it
            _write_atomic(ckpt / "latest.json", json.dumps({"step": step, "epoch": epoch}))
        dist.barrier()

    for epoch in range(first_epoch, CRASH_EPOCHS):
        dist_sampler.set_epoch(epoch)
        megatron.set_epoch(epoch)
        for batch_a, batch_b in zip(stateful, plain, strict=True):
            step += 1
            if phase == 0 and rank == CRASH_KILL["rank"] and step == CRASH_KILL["step"]:
                os.kill(os.getpid(), signal.SIGKILL)  # mid-step: data read, nothing committed
            # the step's collective (a gradient all-reduce): it completes on every rank or none
            grad = torch.tensor([float(sum(batch_a.tolist())), float(sum(batch_b))])
            dist.all_reduce(grad)
            with open(log, "a") as f:  # commit: only now is the step trained
                f.write(
                    json.dumps({"step": step, "epoch": epoch, "a": batch_a.tolist(), "b": batch_b})
                    + "\n"
                )
            if step % CRASH_EVERY == 0:
                checkpoint(epoch)
        checkpoint(epoch)  # after the epoch's loop: both loaders ran out
    return {
        "coord": list(mesh.get_coordinate()),
        "dp_rank": topo.dp_rank,
        "start": start,
        "last_step": step,
        # the loop ran both loaders out of the last epoch: the next pass is the epoch after it
        "cursors": [list(s.next_start()) for s in (dist_sampler, megatron)],
    }


JOBS = {"mesh": job_mesh, "crash": job_crash}


def run_rank(job: str, rank: int, world: int, port: int, workdir: Path, phase: int) -> None:
    """One rank: join the gloo group on loopback, run the job, write its result file."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        GLOO_SOCKET_IFNAME="lo",
    )
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30)
    )
    try:
        result = JOBS[job](rank, world, workdir, phase)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    _write_atomic(workdir / f"{job}.phase{phase}.rank{rank}.json", json.dumps(result))


def agent(job: str, world: int, port: int, workdir: Path, phase: int, deadline: float) -> int:
    """A node agent, as torchrun's: start the ranks, and tear them all down when one fails.

    Torch and the library are imported once here and the ranks are forked from this process, so
    the job does not pay ``import torch`` eight times on a 2-core machine. Writes the ranks' exit
    codes (negative: killed by that signal) to ``<job>.phase<phase>.codes.json``.
    """
    import torchdata.stateful_dataloader  # noqa: F401  (imported before the fork on purpose)

    if job == "mesh" and importlib.util.find_spec("accelerate"):
        import accelerate  # noqa: F401

    pids = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:  # the rank: never returns into the agent
            code = 1
            try:
                log = os.open(
                    workdir / f"{job}.phase{phase}.rank{rank}.log",
                    os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                )
                os.dup2(log, 1)
                os.dup2(log, 2)
                run_rank(job, rank, world, port, workdir, phase)
                code = 0
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids[pid] = rank
    codes: dict[int, int] = {}
    end = time.monotonic() + deadline
    while len(codes) < world:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid:
            codes[pids[pid]] = os.waitstatus_to_exitcode(status)
            if codes[pids[pid]] != 0:
                _stop(pids, codes, wait=1.0, sig=signal.SIGTERM, grace=5.0)
            continue
        if time.monotonic() > end:
            _stop(pids, codes, wait=0.0, sig=signal.SIGKILL, grace=5.0)
            break
        time.sleep(0.02)
    _write_atomic(
        workdir / f"{job}.phase{phase}.codes.json",
        json.dumps([codes.get(r) for r in range(world)]),
    )
    return 0


def _reap(pids: dict[int, int], codes: dict[int, int], running: list[int]) -> None:
    for pid in list(running):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            codes[pids[pid]] = os.waitstatus_to_exitcode(status)
            running.remove(pid)


def _stop(
    pids: dict[int, int], codes: dict[int, int], *, wait: float, sig: int, grace: float
) -> None:
    """Give the ranks ``wait`` seconds to fail by themselves (a collective error), then send
    ``sig``, then SIGKILL whatever is left after ``grace`` seconds."""
    running = [pid for pid, rank in pids.items() if rank not in codes]
    end = time.monotonic() + wait
    while running and time.monotonic() < end:
        _reap(pids, codes, running)
        time.sleep(0.02)
    for pid in running:
        os.kill(pid, sig)
    end = time.monotonic() + grace
    while running:
        _reap(pids, codes, running)
        if running and time.monotonic() > end:
            for pid in running:
                os.kill(pid, signal.SIGKILL)
            end = float("inf")
        time.sleep(0.02)


if __name__ == "__main__":
    _job, _world, _port, _workdir, _phase, _deadline = sys.argv[1:]
    sys.exit(agent(_job, int(_world), int(_port), Path(_workdir), int(_phase), float(_deadline)))
