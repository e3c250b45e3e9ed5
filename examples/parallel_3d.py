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
  size, as if every process were a DP rank) and shows the check catching it;
* each epoch ends with its check in one line, on what was really trained: every process's
  sample ids, gathered, hold every sample once over the DP ranks (repeated only in the declared
  padding) and are identical within each DP rank's tensor/context-parallel replicas.

The model is replicated (a bigram language model over the token dataset shipped with dataorder);
only the data layout of 3-D parallelism matters here. Gradients are averaged over the DP group.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.utils.data import DataLoader, TensorDataset

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
    rows = TensorDataset(torch.arange(len(tokens)), tokens)  # each row with its sample id
    loader = DataLoader(rows, batch_size=args.global_batch_size // dp, sampler=sampler)

    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 32), torch.nn.Linear(32, VOCAB))
    generator = torch.Generator().manual_seed(args.seed)  # the same initial model on every rank
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    dp_group = mesh["dp"].get_group()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        trained: list[int] = []
        for ids, batch in loader:
            trained += ids.tolist()
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
        everyone: list[Any] = [None] * world
        dist.all_gather_object(everyone, (mesh["dp"].get_local_rank(), trained))
        if rank == 0:
            check_epoch(epoch, everyone, len(tokens), sampler.samples_padded)
    dist.barrier()
    dist.destroy_process_group()


def check_epoch(epoch: int, everyone: list[Any], n: int, padded: int) -> None:
    """One line: every sample once over the DP ranks (but the declared padding), and every
    tensor/context-parallel replica of a DP rank trained what that DP rank trained."""
    by_dp: dict[int, list[list[int]]] = {}
    for dp_rank, ids in everyone:
        by_dp.setdefault(dp_rank, []).append(ids)
    replicas_agree = all(all(r == reads[0] for r in reads) for reads in by_dp.values())
    counts = Counter(i for reads in by_dp.values() for i in reads[0])
    repeats = sum(counts.values()) - len(counts)
    ok = replicas_agree and len(counts) == n and repeats == padded
    verdict = "every sample once ✓" if ok else "NOT every sample once ✗"
    print(
        f"epoch {epoch}: {verdict} ({len(counts)} of {n} over {len(by_dp)} DP ranks, "
        f"{repeats} repeats for {padded} declared padding; tensor/context-parallel replicas "
        f"{'identical' if replicas_agree else 'DIFFERENT'})",
        flush=True,
    )
    if not ok:
        raise SystemExit(f"epoch {epoch} was not trained exactly once")


if __name__ == "__main__":
    main()
