"""LLM pretraining with the Megatron "cyclic" sampler and a global batch size ramp-up.

Run it on CPU (gloo), then resume it:

    torchrun --standalone --nproc-per-node=2 examples/llm_pretraining.py --steps 9 --save c.json
    torchrun --standalone --nproc-per-node=2 examples/llm_pretraining.py --resume c.json

What it shows:

* The sampler is micro-batch granular: every item is one rank's micro-batch, and it never changes
  when the global batch size does. ``BatchSizeSchedule`` (Megatron's ``--rampup-batch-size``) says
  how many micro-batches step ``k`` takes on every rank: ``global batch / (micro batch x DP size)``.
* The schedule's ``consumed_samples(k)`` is the sampler's run-wide ``consumed_samples`` before
  step ``k``: the loop checks that they agree at every step.
* The checkpoint is the sampler's ``state_dict()``: a few integers, the same on every rank,
  written once. Resuming loads it and continues exactly where the run stopped, at any step of
  any epoch; ``--record`` writes what each rank read, so you can compare a resumed run with an
  uninterrupted one (``tests/test_examples.py`` does).
* The run ends with its check, one line per epoch: what every rank trained (and, resumed,
  what the run before the checkpoint trained, saved beside it as ``c.reads.json``) holds each
  sample of a finished epoch exactly once, but the short last block the sampler drops
  (``samples_dropped``), and no sample twice in the epoch still running.

The model is a bigram language model over the token dataset shipped with dataorder; gradients are
averaged over the data-parallel group by hand (what DDP does).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from dataorder.llm.factory import create_megatron_sampler
from dataorder.llm.schedule import BatchSizeSchedule
from dataorder.tools.demo import load_tokens

VOCAB = 64


class TokenRows(Dataset[tuple[int, torch.Tensor]]):
    """Row ``i`` of the shipped token dataset, with its index (to record what was read)."""

    def __init__(self) -> None:
        self.tokens = torch.from_numpy(load_tokens().astype("int64"))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor]:
        return index, self.tokens[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="train until this step")
    parser.add_argument("--micro-batch-size", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--save", type=Path, help="write the checkpoint here at the end")
    parser.add_argument("--resume", type=Path, help="resume from this checkpoint")
    parser.add_argument("--record", type=Path, help="write what each rank read (a JSON prefix)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mbs = args.micro_batch_size
    # Megatron's --rampup-batch-size 8 8 64 with --global-batch-size 32 (scaled by the DP size):
    # 8, then 16, 24 and 32 samples per step as the first 64 x world samples go by.
    schedule = BatchSizeSchedule.rampup(
        8 * world // 2, 8 * world // 2, 64 * world, global_batch_size=32 * world // 2
    )
    schedule.check_layout(micro_batch_size=mbs, data_parallel_size=world)

    dataset = TokenRows()
    sampler = create_megatron_sampler(
        len(dataset),
        micro_batch_size=mbs,
        global_batch_size=None,  # the batch size changes; the epoch ends on a micro-batch block
        dataloader_type="cyclic",
        rank=rank,
        world_size=world,
        seed=args.seed,
    )
    loader = DataLoader(dataset, batch_sampler=sampler)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 32), torch.nn.Linear(32, VOCAB))
    generator = torch.Generator().manual_seed(args.seed)  # the same initial model on every rank
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1)

    step = 0
    if args.resume:
        checkpoint = json.loads(args.resume.read_text())
        step = checkpoint["step"]
        sampler.load_state_dict(checkpoint["sampler"])
        model.load_state_dict(torch.load(args.resume.with_suffix(".pt"), weights_only=True))

    read: list[list[int]] = []
    epochs: list[int] = []  # the epoch of each micro-batch read, for the check
    batches = iter(loader)
    while step < args.steps:
        info = schedule.at_step(step, micro_batch_size=mbs, data_parallel_size=world)
        assert sampler.consumed_samples == info.consumed_samples  # the two counts agree
        model.zero_grad()
        for _ in range(info.num_micro_batches):
            batch = next(batches, None)
            if batch is None:  # end of the epoch: running out moved the sampler to the next one
                batches = iter(loader)
                batch = next(batches)
            index, rows = batch
            read.append(index.tolist())
            epochs.append(sampler.epoch)
            logits = model(rows[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), rows[:, 1:].reshape(-1)
            )
            (loss / info.num_micro_batches).backward()
        for p in model.parameters():  # average gradients over the data-parallel group
            dist.all_reduce(p.grad)
            p.grad /= world
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
        if rank == 0:
            print(
                f"step {step}: global batch {info.global_batch_size} = {info.num_micro_batches} "
                f"micro-batches x {mbs} x {world} ranks, consumed {info.consumed_samples}, "
                f"loss {loss.item():.3f}",
                flush=True,
            )
        step += 1

    if args.save and rank == 0:  # the state is global: one copy for every rank
        args.save.write_text(json.dumps({"step": step, "sampler": sampler.state_dict()}))
        torch.save(model.state_dict(), args.save.with_suffix(".pt"))
    if args.record:
        Path(f"{args.record}.rank{rank}.json").write_text(json.dumps(read))
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, [[e, ids] for e, ids in zip(epochs, read, strict=True)])
    if rank == 0:
        reads = [step for rank_reads in everyone for step in rank_reads]
        if args.resume:  # what the run before the checkpoint trained
            reads += json.loads(args.resume.with_suffix(".reads.json").read_text())
        if args.save:
            args.save.with_suffix(".reads.json").write_text(json.dumps(reads))
        check_each_sample_once(reads, len(dataset), sampler.samples_dropped)
    dist.barrier()
    dist.destroy_process_group()


def check_each_sample_once(reads: list[list[Any]], n: int, dropped: int) -> None:
    """One line per epoch: a finished epoch trained every sample once but the ``dropped`` short
    last block; the epoch still running trained no sample twice."""
    counts: dict[int, Counter[int]] = {}
    for epoch, ids in reads:
        counts.setdefault(epoch, Counter()).update(ids)
    for epoch, seen in sorted(counts.items()):
        twice = sum(c - 1 for c in seen.values() if c > 1)
        if epoch < max(counts):  # finished: the loop went on to the next epoch
            ok = twice == 0 and len(seen) == n - dropped
            what = f"every sample once {'✓' if ok else '✗'} ({len(seen)} of {n}, {dropped} "
            what += "dropped: the short last block)"
        else:
            ok = twice == 0
            what = f"no sample twice so far {'✓' if ok else '✗'} ({len(seen)} of {n} read)"
        print(f"epoch {epoch}: {what}" + ("" if ok else f", {twice} repeated"), flush=True)
        if not ok:
            raise SystemExit(f"epoch {epoch} was not read exactly once")


if __name__ == "__main__":
    main()
