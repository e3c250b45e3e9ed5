"""Fault-tolerant data parallelism with torchft, on CPU: replicas fail and rejoin, and every
committed step still trains exactly its global batch, with no data checkpoint.

    python examples/torchft_ddp.py                   # lighthouse + 3 replica groups, one killed
    python examples/torchft_ddp.py --config packed   # packed rows: the loss is per token

One command starts torchft's lighthouse and 3 replica groups (processes, gloo on loopback);
replica 1 is killed in the middle of a step and restarted (it heals from a peer: model,
optimizer and torchft's step), replica 2 leaves for good. Each replica writes what it trained;
at the end the coverage check prints: the committed steps, all replicas together, are exactly
the base order's first ``committed x G`` positions, each once.

The loop (``train`` below) is what a training script does; the orchestration and the check are
:mod:`dataorder.tools.demo_live`'s (``dataorder demo --fault-tolerant`` runs the same job).
Needs ``pip install torchft==0.2.0``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torchft import Manager, ProcessGroupGloo
from torchft.process_group import ReduceOp

from dataorder.integrations.torchft import LiveLoader
from dataorder.tools.demo_live import CONFIGS, build_live, run_job, wait_for_peers


def features(item: list) -> tuple[torch.Tensor, torch.Tensor]:
    """What a loader worker makes of one item (here: a few numbers per sample or span)."""
    spans = (
        [s for row in item for s in row]
        if item and isinstance(item[0], tuple)
        else [(i, 0, 1) for i in item if i is not None]
    )
    x = torch.tensor([[k % 7, (k % 11) / 11, b - a, 1.0] for k, a, b in spans] or [[0.0] * 4])
    return x, torch.tensor([float(b - a) for _, a, b in spans] or [0.0])


def train(args: argparse.Namespace, store_port: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=10)),
        min_replica_size=2,
        load_state_dict=lambda sd: (
            model.load_state_dict(sd["model"]),
            optimizer.load_state_dict(sd["optim"]),
        ),
        state_dict=lambda: {"model": model.state_dict(), "optim": optimizer.state_dict()},
        replica_id=f"replica_{args.replica}",
        store_addr="localhost",
        store_port=store_port,
        rank=0,
        world_size=1,
        lighthouse_addr=args.lighthouse,
        use_async_quorum=False,  # a healing replica takes part in its first step
        quorum_timeout=timedelta(seconds=150),
    )
    wait_for_peers(Path(args.out).parent, args.replica, args.replicas)  # the job starts together
    # The job's nominal layout, the same on every replica; a replica restarted with another is
    # refused when it heals. Nothing about the data is checkpointed.
    live = build_live(args.config)
    loader = LiveLoader(live, manager, fetch=features, num_workers=args.workers)
    log = Path(args.out).with_suffix(".0.jsonl").open("a", encoding="utf-8")
    while manager.current_step() < args.steps:
        if manager.current_step() == args.leave_at:
            break  # this replica leaves the job
        manager.start_quorum()
        batches = loader.step_batches()  # this replica's share of the step torchft is on
        units = loader.units()  # samples (tokens) of the whole global batch
        optimizer.zero_grad()
        loss = torch.zeros(())
        for x, weight in batches:
            loss = loss + (model(x).squeeze(-1).pow(2) * weight).sum()
        if batches:
            (loss / units).backward()  # the global mean once the gradients are summed
        if loader.last["step"] == args.die_at:
            os.kill(os.getpid(), signal.SIGKILL)  # a machine dies mid-step
        for p in model.parameters():
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            manager.allreduce(grad, reduce_op=ReduceOp.SUM).wait()  # a sum, not an average
            p.grad = grad
        committed = manager.should_commit()  # False: the same step runs again
        if committed:
            optimizer.step()
        record = {**loader.last, "inner": 0, "committed": committed, "units": units}
        record["items"] = json.loads(json.dumps(loader.step_items()))
        log.write(json.dumps(record) + "\n")
        log.flush()
    log.close()
    manager.shutdown(wait=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="megatron", choices=sorted(CONFIGS))
    p.add_argument("--seed", type=int, default=0, help="chooses the step replica 1 dies in")
    p.add_argument("--workers", type=int, default=0, help="loader workers per replica")
    p.add_argument("--out", default=None)
    # one replica (the job starts the replicas with these)
    p.add_argument("--replica", type=int, default=None)
    p.add_argument("--lighthouse", default="")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--inner", type=int, default=1)
    p.add_argument("--die-at", type=int, default=-1)
    p.add_argument("--leave-at", type=int, default=-1)
    p.add_argument("--replicas", type=int, default=3)
    args = p.parse_args()
    if args.replica is not None:
        store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
        train(args, store.port)
        sys.stdout.flush()
        os._exit(0)  # torchft's background threads can outlive shutdown()
    workdir = Path(args.out or tempfile.mkdtemp(prefix="torchft_ddp_"))
    report = run_job(
        args.config,
        workdir=workdir,
        steps=args.steps,
        seed=args.seed,
        workers=args.workers,
        replica_cmd=[sys.executable, os.path.abspath(__file__)],
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
