"""3-D parallel training (data x tensor x context parallel): each DP rank its own data, done right.

Run it on CPU (gloo), 8 processes on a (dp, tp, cp) = (2, 2, 2) mesh:

    torchrun --standalone --nproc-per-node=8 examples/parallel_3d.py --tp 2 --cp 2

The usual recipe (e.g. HF Transformers' ``3d_parallel_checks.py``) builds torch's
DistributedSampler with ``num_replicas=dp_mesh.size(), rank=dp_mesh.get_local_rank()``, then
checks the partition by all-gathering the first ten tokens of the first batch over the DP group
and asserting on rank 0 that no two are *equal*. That check proves little: it looks at one batch,
it passes when two ranks share all but one sample, it never compares the tensor- and
context-parallel peers that must read *identical* data, it runs ``assert`` (gone under
``python -O``), and it fails on rank 0 only while the other ranks go on into the next collective.

Here instead:

* ``DistributedSampler(dataset, mesh=mesh, dp_dims=("dp",))`` takes the DP rank and size from the
  mesh, so TP and CP peers read the same indices by construction;
* ``verify_data_parallel(sampler, mesh=mesh, dp_dims=("dp",))`` checks the whole epoch before it
  starts: DP ranks disjoint (except the declared wrap-around padding), every TP/CP replica
  identical to its peers, the same number of batches everywhere. A violation raises
  ``DataParallelError`` on *every* rank, with the reason;
* ``--show-mistake`` first builds the sampler the classic wrong way (the global rank and world
  size, as if every process were a DP rank) and shows the check catching it.

The model is replicated (a bigram language model over the token dataset shipped with dataorder);
only the data layout of 3-D parallelism matters here. Gradients are averaged over the DP group.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.utils.data import DataLoader

from dataorder.parallel.distributed import DistributedSampler
from dataorder.parallel.verify import DataParallelError, verify_data_parallel
from dataorder.tools.demo import load_tokens

VOCAB = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel size")
    parser.add_argument("--cp", type=int, default=2, help="context-parallel size")
    parser.add_argument("--global-batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--show-mistake", action="store_true")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % (args.tp * args.cp):
        raise SystemExit(f"the world size {world} is not a multiple of tp x cp")
    dp = world // (args.tp * args.cp)
    mesh = init_device_mesh("cpu", (dp, args.tp, args.cp), mesh_dim_names=("dp", "tp", "cp"))
    tokens = torch.from_numpy(load_tokens().astype("int64"))

    if args.show_mistake:
        # Every process takes itself for a DP rank: TP/CP peers read different data.
        wrong = DistributedSampler(tokens, num_replicas=world, rank=rank, seed=args.seed)
        try:
            verify_data_parallel(wrong, mesh=mesh, dp_dims=("dp",))
        except DataParallelError as err:  # raised on every rank, so none is left waiting
            if rank == 0:
                print(f"the wrong sampler is caught:\n{err}\n", flush=True)

    sampler = DistributedSampler(tokens, mesh=mesh, dp_dims=("dp",), seed=args.seed)
    report = verify_data_parallel(sampler, mesh=mesh, dp_dims=("dp",))
    if rank == 0:
        print(report, flush=True)
    loader = DataLoader(tokens, batch_size=args.global_batch_size // dp, sampler=sampler)

    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 32), torch.nn.Linear(32, VOCAB))
    generator = torch.Generator().manual_seed(args.seed)  # the same initial model on every rank
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    dp_group = mesh["dp"].get_group()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            model.zero_grad()
            logits = model(batch[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1)
            )
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad, group=dp_group)
                p.grad /= dp
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.5 * p.grad
        if rank == 0:
            print(f"epoch {epoch}: {len(loader)} steps, last loss {loss.item():.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
