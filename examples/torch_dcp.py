"""FSDP2 + torch.distributed.checkpoint: save on 2 ranks, resume on 3 (or 1), every sample once.

Run it on CPU (gloo), stop after 3 steps, then resume on another number of ranks:

    torchrun --standalone --nproc-per-node=2 examples/torch_dcp.py --ckpt c --stop-after 3
    torchrun --standalone --nproc-per-node=3 examples/torch_dcp.py --ckpt c --resume

What it shows:

* The model is sharded with FSDP2 (``fully_shard`` on a CPU mesh); the checkpoint is one
  ``dcp.save`` of the app state ``{"model", "optim", "data": OrderState(loader), "loop"}``.
  DCP reshards the parameters to the new number of ranks; the resumed run checks that every
  parameter is bit-identical to what the first run saved.
* ``OrderState`` saves the data order's state: the same few integers on every rank (checked
  with ``check_same_on_all_ranks`` before saving), so DCP's one de-duplicated copy is every
  rank's, at any size. With worker processes it is the state training consumed, not what the
  workers prefetched, and loading drops the iterator DCP started while loading.
* ``--record`` writes what each rank trained on; the resumed run's rank 0 reads both runs'
  records and checks that every sample of each epoch was trained exactly once.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torchdata.stateful_dataloader import StatefulDataLoader

from dataorder.integrations.common import check_same_on_all_ranks
from dataorder.integrations.dcp import OrderState
from dataorder.parallel.distributed import DistributedSampler

N = 48  # divisible by 4 x 1, 2 and 3 ranks: no padding, so "exactly once" is exact


class Points(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Sample ``i``: a fixed feature vector and target, plus ``i`` itself (to record it)."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        x = torch.randn(4, generator=g)
        return {"idx": torch.tensor(i), "x": x, "y": x.sum(0, keepdim=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", type=Path, required=True, help="the DCP checkpoint folder")
    parser.add_argument("--stop-after", type=int, help="save and stop after this many steps")
    parser.add_argument("--resume", action="store_true", help="load the checkpoint first")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="loader worker processes")
    parser.add_argument("--record", help="prefix of what each rank read (default: a, resumed b)")
    parser.add_argument("--first-record", default="a", help="--record of the run resumed from")
    args = parser.parse_args()
    args.record = args.record or ("b" if args.resume else "a")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank (and in every run)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    mesh = init_device_mesh("cpu", (world,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)

    sampler = DistributedSampler(Points(), num_replicas=world, rank=rank, seed=7)
    loader = StatefulDataLoader(Points(), sampler=sampler, batch_size=4, num_workers=args.workers)
    loop = {"epoch": 0, "step": 0}

    def app_state() -> dict[str, object]:
        msd, osd = get_state_dict(model, optim)
        return {"model": msd, "optim": osd, "data": OrderState(loader), "loop": loop}

    if args.resume:
        state = app_state()
        dcp.load(state, checkpoint_id=str(args.ckpt))
        set_state_dict(
            model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        saved = torch.load(args.ckpt / "params.pt")
        full = {k: v.full_tensor() for k, v in model.state_dict().items()}
        same = all(torch.equal(full[k], saved[k]) for k in saved)
        if rank == 0:
            print(
                f"resumed on {world} ranks at epoch {loop['epoch']} step {loop['step']}: "
                f"parameters {'equal' if same else 'DIFFERENT'} after the reshard from the save"
            )
        if not same:
            raise SystemExit("parameters differ after the reshard")

    records: list[list[object]] = []
    stopped = False
    for epoch in range(loop["epoch"], args.epochs):
        sampler.set_epoch(epoch)
        loop["epoch"] = epoch
        for batch in loader:
            loss = nn.functional.mse_loss(model(batch["x"]), batch["y"])
            loss.backward()
            optim.step()
            optim.zero_grad()
            loop["step"] += 1
            records.append([epoch, batch["idx"].tolist()])
            if args.stop_after is not None and loop["step"] == args.stop_after:
                stopped = True
                break
        if stopped:
            break

    Path(f"{args.record}.rank{rank}.json").write_text(json.dumps(records))
    if stopped:
        order = OrderState(loader).state_dict()
        check_same_on_all_ranks(order["sampler"])  # a global state: DCP keeps one copy
        dcp.save(app_state(), checkpoint_id=str(args.ckpt))
        full = {k: v.full_tensor() for k, v in model.state_dict().items()}
        if rank == 0:
            torch.save(full, args.ckpt / "params.pt")
            print(
                f"saved after step {loop['step']} on {world} ranks; the order state is the "
                f"same on every rank: {json.dumps(order['sampler'])[:60]}..."
            )
    dist.barrier()
    if args.resume and rank == 0:
        check_every_sample_once(args)
    dist.destroy_process_group()


def check_every_sample_once(args: argparse.Namespace) -> None:
    """Rank 0 of the resumed run: both runs' records together read each epoch exactly once."""
    seen: dict[int, list[int]] = {}
    for path in [
        *Path().glob(f"{args.first_record}.rank*.json"),
        *Path().glob(f"{args.record}.rank*.json"),
    ]:
        for epoch, batch in json.loads(path.read_text()):
            seen.setdefault(epoch, []).extend(batch)
    for epoch in range(args.epochs):
        ok = sorted(seen.get(epoch, [])) == list(range(N))
        print(f"epoch {epoch}: {N} samples, each {'exactly once' if ok else 'NOT once'}")
        if not ok:
            raise SystemExit(f"epoch {epoch} was not read exactly once")


if __name__ == "__main__":
    main()
