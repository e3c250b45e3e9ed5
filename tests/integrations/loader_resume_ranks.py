"""Rank program for tests/integrations/test_loader_resume.py (run under torchrun, gloo on loopback).

Three ranks read epoch 0 of a ``MegatronPretrainingRandomSampler`` through a
``StatefulDataLoader`` with 2 workers and ``snapshot_every_n_steps=3`` (14 steps: the last
snapshot is 2 steps old), call ``set_epoch(1)`` and save ``OrderState(loader)`` with
``dcp.save``. New loaders then ``dcp.load`` it and run the loop ``for e in range(sampler.epoch,
2)``: rank 0 prints how many ids of epoch 1 the three ranks read, and whether each once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torchdata.stateful_dataloader import StatefulDataLoader

# run as a script: the repository root on the path, for the tests package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dataorder.integrations.dcp import OrderState
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from tests.helpers.stack_samplers import Items, collate_list

N = 42


def _loader(rank: int, world: int) -> tuple[MegatronPretrainingRandomSampler, StatefulDataLoader]:
    sampler = MegatronPretrainingRandomSampler(N, 1, rank, world, seed=7)
    loader = StatefulDataLoader(
        Items(N),
        batch_sampler=sampler,
        num_workers=2,
        snapshot_every_n_steps=3,
        collate_fn=collate_list,
    )
    return sampler, loader


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    path = sys.argv[1]
    sampler, loader = _loader(rank, world)
    sampler.set_epoch(0)
    for _ in loader:
        pass
    sampler.set_epoch(1)
    dcp.save({"data": OrderState(loader)}, checkpoint_id=path)
    resumed, again = _loader(rank, world)
    dcp.load({"data": OrderState(again)}, checkpoint_id=path)
    read: dict[int, list[int]] = {0: [], 1: []}
    for epoch in range(resumed.epoch, 2):
        resumed.set_epoch(epoch)
        read[epoch] += [i for batch in again for i in batch]
    gathered: list[object] = [None] * world
    dist.all_gather_object(gathered, read[1])
    if rank == 0:
        ids = sorted(i for part in gathered for i in part)  # type: ignore[union-attr]
        once = "each once" if ids == list(range(N)) else "NOT each once"
        print(f"epoch 1: {len(ids)} ids, {once}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
