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
* ``--record`` writes what the run trained on, every rank's, into one file (``a.json``, resumed
  ``b.json``) that the run replaces whole: each run's record is its own, so resuming on 3 ranks
  and then again on 1 from the same checkpoint leaves no rank file of the 3-rank run for the
  1-rank one to count. The resumed run's rank 0 reads the first run's record and its own and
  prints, for each epoch, whether every sample was trained exactly once; a first record that
  is not the checkpoint's (another stop step) is named, never counted.
* ``--packed`` (in both runs) trains a tiny causal LM on packed rows instead: a
  ``PackedSampler`` over 60 documents (907 tokens, rows of 32) feeds ``PackedDataset`` rows,
  collated into ``input_ids``, ``labels``, ``position_ids`` and ``cu_seqlens``, and the check is
  in tokens: every token of each epoch trained exactly once, from the ``input_ids`` themselves.

    torchrun --standalone --nproc-per-node=2 examples/torch_dcp.py --ckpt p --stop-after 3 --packed
    torchrun --standalone --nproc-per-node=3 examples/torch_dcp.py --ckpt p --resume --packed
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
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
from dataorder.llm.packing import PackedDataset, PackedSampler
from dataorder.llm.packing.dataset import SequenceTokens
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


# -- packed rows: a tiny causal LM on packed documents ---------------------------------------------
SEQ_LEN = 32
#: 60 documents of 1 to 81 tokens (lognormal-like): 907 tokens, 30 rows of 32 per epoch, which
#: blocks of 2 rows x 1, 2 and 3 ranks all divide, so no layout drops a tail.
LENGTHS = np.clip(np.random.default_rng(1).lognormal(2.5, 0.9, 60), 1, 96).astype(int).tolist()
#: Document ``d``'s tokens are ``FIRST[d] + 1 .. FIRST[d] + LENGTHS[d]``: every token of the corpus
#: has its own id (0 is padding), so what a batch trained on is read off its ``input_ids``.
FIRST = np.concatenate([[0], np.cumsum(LENGTHS)[:-1]]).tolist()
VOCAB = sum(LENGTHS) + 1


def packed_sampler(rank: int, world: int) -> PackedSampler:
    """Micro-batches of 2 rows of ``SEQ_LEN`` tokens, windows of 16 documents (4 per epoch)."""
    return PackedSampler(LENGTHS, SEQ_LEN, 2, rank, world, seed=7, chunk=4, window=16)


class TinyLM(nn.Module):
    """A causal LM small enough for CPU: token and position embeddings, then each token's mean
    over its segment so far (attention with equal weights, kept inside each document by
    ``cu_seqlens``), then a linear head. The logits are flat, ``(batch x seq_len, vocab)``, as
    varlen kernels lay tokens out (and not a view, which FSDP2 warns about)."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(SEQ_LEN, dim)
        self.head = nn.Linear(dim, VOCAB)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, cu_seqlens: torch.Tensor
    ) -> torch.Tensor:
        h = (self.tok(input_ids) + self.pos(position_ids)).reshape(-1, self.tok.embedding_dim)
        sums = torch.cat([h.new_zeros(1, h.shape[1]), h.cumsum(0)])
        cu = cu_seqlens.long()
        start = torch.repeat_interleave(cu[:-1], cu[1:] - cu[:-1])  # each token's segment start
        end = torch.arange(h.shape[0]) + 1
        context = (sums[end] - sums[start]) / (end - start)[:, None]
        logits: torch.Tensor = self.head(h + context)
        return logits


def lm_loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    logits = model(batch["input_ids"], batch["position_ids"], batch["cu_seqlens"])
    logits = logits.unflatten(0, batch["input_ids"].shape)
    labels = batch["labels"][:, 1:]  # unshifted labels (NOTE [ Packed labels ]): shift here
    return nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100
    )


def packed_read(batch: dict[str, Any]) -> list[object]:
    """What a step trained on: its token ids (padding left out) and its padding slots."""
    ids = batch["input_ids"][batch["document_ids"] >= 0]
    return [ids.tolist(), int((batch["document_ids"] < 0).sum())]


# -- the job --------------------------------------------------------------------------------------
@dataclass
class Job:
    """What differs between the two runs of this example: the model, the data and the loss."""

    model: nn.Module
    sampler: Any
    loader: StatefulDataLoader
    loss: Callable[[nn.Module, dict[str, Any]], torch.Tensor]
    read: Callable[[dict[str, Any]], list[object]]  # what a batch trained on, for the record


def points_job(rank: int, world: int, workers: int) -> Job:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    sampler = DistributedSampler(Points(), num_replicas=world, rank=rank, seed=7)
    loader = StatefulDataLoader(Points(), sampler=sampler, batch_size=4, num_workers=workers)
    return Job(
        model,
        sampler,
        loader,
        lambda model, batch: nn.functional.mse_loss(model(batch["x"]), batch["y"]),
        lambda batch: [batch["idx"].tolist()],
    )


def packed_job(rank: int, world: int, workers: int) -> Job:
    corpus = [list(range(f + 1, f + n + 1)) for f, n in zip(FIRST, LENGTHS, strict=True)]
    sampler = packed_sampler(rank, world)
    loader = StatefulDataLoader(
        PackedDataset(SequenceTokens(corpus), SEQ_LEN),
        batch_sampler=sampler,
        collate_fn=PackedDataset.collate,
        num_workers=workers,
    )
    return Job(TinyLM(), sampler, loader, lm_loss, packed_read)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", type=Path, required=True, help="the DCP checkpoint folder")
    parser.add_argument("--stop-after", type=int, help="save and stop after this many steps")
    parser.add_argument("--resume", action="store_true", help="load the checkpoint first")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="loader worker processes")
    parser.add_argument("--packed", action="store_true", help="a tiny causal LM on packed rows")
    parser.add_argument("--record", help="prefix of what each rank read (default: a, resumed b)")
    parser.add_argument("--first-record", default="a", help="--record of the run resumed from")
    args = parser.parse_args()
    args.record = args.record or ("b" if args.resume else "a")
    # torchdata 0.11 calls a torch API that torch deprecates, once per loader and rank: noise
    warnings.filterwarnings("ignore", message=".*set_vital.* is deprecated")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank (and in every run)
    job = (packed_job if args.packed else points_job)(rank, world, args.workers)
    model, sampler, loader = job.model, job.sampler, job.loader
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.children():
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
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

    resumed_at = loop["step"]
    records: list[list[object]] = []
    stopped = False
    for epoch in range(loop["epoch"], args.epochs):
        sampler.set_epoch(epoch)
        loop["epoch"] = epoch
        for batch in loader:
            loss = job.loss(model, batch)
            loss.backward()
            optim.step()
            optim.zero_grad()
            loop["step"] += 1
            records.append([epoch, *job.read(batch)])
            if args.stop_after is not None and loop["step"] == args.stop_after:
                stopped = True
                break
        if stopped:
            break

    write_record(args.record, records, loop["step"] if stopped else None, rank, world)
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
        check = check_every_token_once if args.packed else check_every_sample_once
        check(args, world, resumed_at)
    dist.destroy_process_group()


def write_record(
    prefix: str, steps: list[list[object]], stop: int | None, rank: int, world: int
) -> None:
    """Rank 0 writes every rank's steps into ``{prefix}.json``, replacing any earlier run's."""
    gathered: list[Any] = [None] * world if rank == 0 else []
    dist.gather_object(steps, gathered if rank == 0 else None, dst=0)
    if rank == 0:
        record = {"world_size": world, "stopped_after": stop, "ranks": gathered}
        tmp = Path(f"{prefix}.json.tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(f"{prefix}.json")


def records(args: argparse.Namespace, resumed_at: int) -> list[list[Any]]:
    """Both runs' steps, every rank's: the first run's record must be the checkpoint's."""
    first = Path(f"{args.first_record}.json")
    if not first.is_file():
        raise SystemExit(f"cannot check: {first} (the first run's record) is not here")
    saved = json.loads(first.read_text())
    if saved["stopped_after"] != resumed_at:
        raise SystemExit(
            f"cannot check: {first} is a run that stopped after step {saved['stopped_after']}, "
            f"but the checkpoint is at step {resumed_at} (run the first command again)"
        )
    ours = json.loads(Path(f"{args.record}.json").read_text())
    return [step for run in (saved, ours) for rank in run["ranks"] for step in rank]


def check_every_sample_once(args: argparse.Namespace, world: int, resumed_at: int) -> None:
    """Rank 0 of the resumed run: both runs' records together read each epoch exactly once."""
    seen: dict[int, Counter[int]] = {}
    for epoch, batch in records(args, resumed_at):
        seen.setdefault(epoch, Counter()).update(batch)
    for epoch in range(args.epochs):
        counts = seen.get(epoch, Counter())
        once = sum(1 for i in range(N) if counts[i] == 1)
        if once == N == sum(counts.values()):
            print(f"epoch {epoch}: every sample once ✓ ({once} of {N})")
        else:
            missing = sum(1 for i in range(N) if counts[i] == 0)
            repeated = sum(c - 1 for c in counts.values() if c > 1)
            print(
                f"epoch {epoch}: NOT every sample once ✗ ({once} of {N} once, {missing} "
                f"missing, {repeated} repeated)"
            )
            raise SystemExit(f"epoch {epoch} was not read exactly once")


def check_every_token_once(args: argparse.Namespace, world: int, resumed_at: int) -> None:
    """Rank 0 of the resumed packed run: both runs' records together read every token of each
    epoch exactly once, but the tail the resumed layout drops (``tokens_dropped``, 0 here), and
    padded exactly what the sampler counts (``tokens_padded``)."""
    seen: dict[int, Counter[int]] = {}
    padding: Counter[int] = Counter()
    for epoch, ids, pads in records(args, resumed_at):
        seen.setdefault(epoch, Counter()).update(ids)
        padding[epoch] += pads
    for epoch in range(args.epochs):
        counts = packed_sampler(0, world)
        counts.set_epoch(epoch)  # the resumed layout read the end of every epoch
        once = [i for i, c in seen.get(epoch, Counter()).items() if c == 1]
        ok = (
            len(once)
            == sum(seen.get(epoch, Counter()).values())
            == VOCAB - 1 - (counts.tokens_dropped)
            and padding[epoch] == counts.tokens_padded
        )
        verdict = "every token once ✓" if ok else "NOT every token once ✗"
        print(
            f"epoch {epoch}: {verdict} ({len(once)} of {VOCAB - 1}, {counts.tokens_dropped} "
            f"dropped, {padding[epoch]} padding)"
        )
        if not ok:
            raise SystemExit(f"epoch {epoch} was not read exactly once")


if __name__ == "__main__":
    main()
