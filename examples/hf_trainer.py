"""HF Transformers Trainer with a dataorder sampler: no double sharding, exact resume in any epoch.

Run it on CPU (2 processes, gloo), then resume from a checkpoint in epoch 1:

    torchrun --standalone --nproc-per-node=2 examples/hf_trainer.py --out run --record full
    torchrun --standalone --nproc-per-node=2 examples/hf_trainer.py --out run --record r9 \
        --resume run/checkpoint-9

What it shows (24 samples, 2 epochs of 6 steps with a per-device batch of 2 on 2 processes, a
checkpoint every 3 steps):

* ``DataorderTrainer`` reads ``sampler_fn(dataset, rank, world)``; Accelerate's re-sharding is
  turned off, so the two processes read disjoint halves that cover the epoch (the run prints
  it). The stock Trainer with this sampler would train each process on half of its half.
* Resumed from ``checkpoint-3`` (epoch 0) or ``checkpoint-9`` (epoch 1), each process reads
  exactly what the uninterrupted run read after that step (``--record`` files; the test
  compares them). ``--no-epoch-sync`` leaves out the callback that calls ``set_epoch``, and
  the rest of epoch 1 is read in epoch 0's order (the Trainer's skip loader hides the sampler).
* One process with ``--per-device 4`` (the same global batch) resumes a 2-process checkpoint
  exactly; ``--per-device 2`` on one process (another global batch) is refused.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import TrainingArguments
from transformers.utils import logging as hf_logging

from dataorder.integrations.hf_trainer import DataorderTrainer
from dataorder.parallel.distributed import DistributedSampler

N = 24


class Points(torch.utils.data.Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"idx": i, "x": torch.full((4,), float(i) / N)}


class Tiny(nn.Module):
    """A linear model that also records which samples it trained on, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.seen: list[int] = []

    def forward(self, idx: torch.Tensor, x: torch.Tensor) -> dict[str, torch.Tensor]:
        self.seen += idx.tolist()
        return {"loss": (self.lin(x) - x.sum(1, keepdim=True)).pow(2).mean()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--record", required=True, help="prefix of the per-process read files")
    parser.add_argument("--resume", help="a checkpoint folder to resume from")
    parser.add_argument("--per-device", type=int, default=2)
    parser.add_argument("--no-epoch-sync", action="store_true", help="show the upstream bug")
    args = parser.parse_args()
    hf_logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    training = TrainingArguments(
        output_dir=args.out,
        per_device_train_batch_size=args.per_device,
        num_train_epochs=2,
        save_steps=3,
        save_strategy="steps",
        save_only_model=False,
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None,  # torchrun or one process
        remove_unused_columns=False,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    model = Tiny()
    trainer = DataorderTrainer(
        model=model,
        args=training,
        train_dataset=Points(),
        sampler_fn=lambda ds, rank, world: DistributedSampler(
            ds, num_replicas=world, rank=rank, seed=1234
        ),
    )
    if args.no_epoch_sync:
        trainer.remove_callback(type(trainer.callback_handler.callbacks[-1]))
    rank = training.process_index
    try:
        trainer.train(resume_from_checkpoint=args.resume)
    except ValueError as err:
        if rank == 0:
            print(f"resume refused: {err}")
        return
    Path(f"{args.record}.rank{rank}.json").write_text(json.dumps(model.seen))
    if training.world_size > 1:
        torch.distributed.barrier()
    if rank == 0 and args.resume is None:
        halves = [json.loads(Path(f"{args.record}.rank{r}.json").read_text()) for r in (0, 1)]
        for epoch in range(2):
            part = [i for h in halves for i in h[epoch * N // 2 : (epoch + 1) * N // 2]]
            once = "exactly once" if sorted(part) == list(range(N)) else "NOT once"
            print(f"epoch {epoch}: {N} samples over 2 processes, each {once}")
    if rank == 0:
        print(f"trained {len(model.seen)} samples on process 0 ({os.path.basename(args.record)})")


if __name__ == "__main__":
    main()
