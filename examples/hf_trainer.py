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
  exactly; ``--per-device 2`` on one process (another global batch) is refused. The global
  batch may also be split otherwise between per-device batch and ``--accumulation``: the
  checkpoint's ``dataorder.json`` records the last optimizer step's position, not the loader's
  read-ahead.
* ``--sampler megatron`` reads through a dataorder batch sampler (Megatron's random sampler)
  instead of ``DistributedSampler``. Each item carries a ``length`` the model's ``forward`` does
  not take: ``remove_unused_columns`` (on by default) drops it for either sampler, as the stock
  Trainer does.
* Every run ends with its check, one line per epoch: what every process trained (and, resumed,
  what the ``--first-record`` run trained before the checkpoint) holds each sample once.
  ``--record`` writes one file per run (``full.json``), every process's reads, replaced whole.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import TrainingArguments
from transformers.utils import logging as hf_logging

from dataorder.integrations.hf_trainer import DataorderTrainer
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.parallel.distributed import DistributedSampler

N = 24


class Points(torch.utils.data.Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, Any]:
        # "length" is not an argument of Tiny.forward: remove_unused_columns drops it
        return {"idx": i, "x": torch.full((4,), float(i) / N), "length": i % 5 + 1}


class Tiny(nn.Module):
    """A linear model that also records which samples it trained on, in order, and in which
    epoch (``epoch_of``, set to the Trainer's once the trainer exists)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.seen: list[list[int]] = []
        self.epoch_of: Callable[[], int] = lambda: 0

    def forward(self, idx: torch.Tensor, x: torch.Tensor) -> dict[str, torch.Tensor]:
        self.seen += [[self.epoch_of(), i] for i in idx.tolist()]
        return {"loss": (self.lin(x) - x.sum(1, keepdim=True)).pow(2).mean()}


def sampler_fn(kind: str, per_device: int) -> Callable[[Any, int, int], Any]:
    def make(ds: Any, rank: int, world: int) -> Any:
        if kind == "megatron":
            return MegatronPretrainingRandomSampler(len(ds), per_device, rank, world, seed=1234)
        return DistributedSampler(ds, num_replicas=world, rank=rank, seed=1234)

    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--record", required=True, help="this run's record: <record>.json")
    parser.add_argument("--first-record", default="full", help="the record of the first run")
    parser.add_argument("--resume", help="a checkpoint folder to resume from")
    parser.add_argument("--per-device", type=int, default=2)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--sampler", choices=["distributed", "megatron"], default="distributed")
    parser.add_argument("--no-epoch-sync", action="store_true", help="show the upstream bug")
    args = parser.parse_args()
    hf_logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    training = TrainingArguments(
        output_dir=args.out,
        per_device_train_batch_size=args.per_device,
        gradient_accumulation_steps=args.accumulation,
        num_train_epochs=2,
        save_steps=3,
        save_strategy="steps",
        save_only_model=False,
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None,  # torchrun or one process
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    model = Tiny()
    trainer = DataorderTrainer(
        model=model,
        args=training,
        train_dataset=Points(),
        sampler_fn=sampler_fn(args.sampler, args.per_device),
    )
    # the Trainer's epoch (state.epoch is epoch + the fraction of it done at the last step)
    model.epoch_of = lambda: int(trainer.state.epoch or 0)
    if args.no_epoch_sync:
        trainer.remove_callback(type(trainer.callback_handler.callbacks[-1]))
    rank, world = training.process_index, training.world_size
    try:
        trainer.train(resume_from_checkpoint=args.resume)
    except ValueError as err:
        if rank == 0:
            print(f"resume refused: {err}")
        return
    everyone: list[Any] = [model.seen]
    if world > 1:
        everyone = [None] * world
        torch.distributed.all_gather_object(everyone, model.seen)
    if rank == 0:
        resumed_at = trainer_step(args.resume)
        record = {"resumed_at": resumed_at, "per_step": args.per_device * args.accumulation}
        Path(f"{args.record}.json").write_text(json.dumps({**record, "ranks": everyone}))
        reads = [read for ranks in everyone for read in ranks]
        if args.resume:
            reads += before_checkpoint(args.first_record, resumed_at)
        print(f"trained {len(model.seen)} samples on process 0 ({os.path.basename(args.record)})")
        check_each_sample_once(reads, fail=not args.no_epoch_sync)  # --no-epoch-sync: shown


def trainer_step(checkpoint: str | None) -> int:
    """The optimizer steps a checkpoint holds (0 for a run from scratch)."""
    if checkpoint is None:
        return 0
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    return int(state["global_step"])


def before_checkpoint(first: str, step: int) -> list[list[int]]:
    """What the first run (from scratch) trained in its first ``step`` optimizer steps."""
    record = json.loads(Path(f"{first}.json").read_text())
    if record["resumed_at"] != 0:
        raise SystemExit(f"cannot check: {first}.json is not a run from scratch")
    done = step * record["per_step"]  # samples every process trained before the checkpoint
    return [read for ranks in record["ranks"] for read in ranks[:done]]


def check_each_sample_once(reads: list[list[int]], *, fail: bool) -> None:
    """One line per epoch: every sample of the epoch trained exactly once (else, if ``fail``,
    exit 1)."""
    counts: dict[int, Counter[int]] = {}
    for epoch, i in reads:
        counts.setdefault(epoch, Counter())[i] += 1
    for epoch in range(2):
        seen = counts.get(epoch, Counter())
        once = sum(1 for i in range(N) if seen[i] == 1)
        ok = once == N == sum(seen.values())
        verdict = "every sample once ✓" if ok else "NOT every sample once ✗"
        print(f"epoch {epoch}: {verdict} ({once} of {N})")
        if fail and not ok:
            raise SystemExit(f"epoch {epoch} was not trained exactly once")


if __name__ == "__main__":
    main()
