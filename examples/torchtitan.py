"""torchtitan 0.3.0: a dataorder loader saved as CheckpointManager saves, resumed on a new DP size.

Run it on CPU (gloo): save on 2 ranks after 3 steps, then resume on 3 (or 1):

    torchrun --standalone --nproc-per-node=2 examples/torchtitan.py --ckpt c --save
    torchrun --standalone --nproc-per-node=3 examples/torchtitan.py --ckpt c

What it shows:

* The loader is built the way torchtitan's trainer builds ``config.dataloader``:
  ``DataorderLoader.Config(...).build(dp_world_size=, dp_rank=, tokenizer=, seq_len=,
  local_batch_size=, snapshot_every_n_steps=)``; a config registry sets that one field.
* The checkpoint is one ``dcp.save`` of the states ``CheckpointManager`` composes:
  ``{"train_state": ..., "dataloader": loader, <the model's flattened parameters>}``.
  The loader's state is global, so it loads on any data-parallel size; torchtitan's own
  ``ParallelAwareDataloader`` (per-rank keys) is refused on the new size, which the run shows.
* The loader crosses epochs itself (torchtitan iterates once and never calls ``set_epoch``):
  the run goes on past the end of epoch 0. Both runs go with 0 and with 2 loader workers, and
  the resumed rank 0 checks that each epoch's samples were read exactly once over both runs
  (one line per epoch). ``--swap-workers`` resumes each checkpoint with the other number of
  workers (saved with 0, resumed with 2, and back).
* Each run writes what every rank read into one file per worker count (``a.w0.json``,
  resumed ``b3.w0.json``), replaced whole: a run never counts another run's ranks.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn

from dataorder.integrations.common import check_same_on_all_ranks

N = 48  # samples; micro-batches of 2 on 1, 2 and 3 ranks divide it: no padding
SEQ = 8


def token_dataset(*, path: str | None, seq_len: int, tokenizer: Any) -> list[int]:
    """What ``DataorderLoader.Config.dataset_fn`` names: here sample ``i`` is ``i`` itself."""
    return list(range(N))


def collate(samples: list[int]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """torchtitan's batch shape: ``({"input": tokens}, labels)``; the sample ids ride along."""
    ids = torch.tensor(samples)
    tokens = (ids[:, None] * SEQ + torch.arange(SEQ)) % 97
    return {"input": tokens, "ids": ids}, tokens


class TrainState:
    """The trainer's own ``{"step", "ntokens_seen"}``, as torchtitan saves it."""

    def __init__(self) -> None:
        self.step = 0
        self.ntokens_seen = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step, "ntokens_seen": self.ntokens_seen}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step, self.ntokens_seen = state["step"], state["ntokens_seen"]


def build(workers: int, rank: int, world: int) -> Any:
    from dataorder.integrations.torchtitan import DataorderLoader

    config = DataorderLoader.Config(
        dataset_fn="__main__:token_dataset",
        collate_fn="__main__:collate",
        seed=1234,
        num_workers=workers,
    )
    return config.build(
        dp_world_size=world,
        dp_rank=rank,
        tokenizer=None,
        seq_len=SEQ,
        local_batch_size=2,
        snapshot_every_n_steps=1,
    )


def main() -> None:
    # this file is named like the package it uses: keep its folder off the import path
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", type=Path, required=True)
    parser.add_argument("--save", action="store_true", help="train 5 steps and save")
    parser.add_argument("--steps", type=int, default=3, help="steps before the save")
    parser.add_argument(
        "--swap-workers", action="store_true", help="resume each checkpoint with the other count"
    )
    args = parser.parse_args()
    # torchdata 0.11 calls a torch API that torch deprecates, once per loader and rank: noise
    warnings.filterwarnings("ignore", message=".*set_vital.* is deprecated")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(SEQ, 1)  # replicated: its parameters are the same on every rank

    for workers in (0, 2):
        loader = build(workers, rank, world)
        train_state = TrainState()
        states = {"train_state": train_state, "dataloader": loader, **model.state_dict()}
        saved_with = 2 - workers if args.swap_workers and not args.save else workers
        ckpt = args.ckpt / f"w{saved_with}"
        stock = args.ckpt / f"stock-w{workers}"
        if not args.save:
            dcp.load(states, checkpoint_id=str(ckpt))
        records: list[list[object]] = []
        # to the end of epoch 1: 2 epochs of N samples, read 2 x world per step
        todo = args.steps if args.save else (2 * N - train_state.ntokens_seen // SEQ) // (2 * world)
        batches = iter(loader)  # torchtitan: once, for the whole run
        for _ in range(todo):
            inputs, labels = next(batches)
            epoch = train_state.ntokens_seen // SEQ // N  # samples all ranks read before
            train_state.step += 1
            train_state.ntokens_seen += labels.numel() * world  # counted over all ranks
            records.append([epoch, inputs["ids"].tolist()])
        tag = "a" if args.save else f"b{world}{'x' if args.swap_workers else ''}"
        everyone: list[Any] = [None] * world
        dist.all_gather_object(everyone, records)
        if rank == 0:
            Path(f"{tag}.w{workers}.json").write_text(json.dumps(everyone))
        if args.save:
            check_same_on_all_ranks(loader.state_dict()["dataorder"])
            dcp.save(states, checkpoint_id=str(ckpt))
            save_stock_loader(stock, rank, world)
            if rank == 0:
                print(f"workers={workers}: saved step {train_state.step} on {world} ranks")
        else:
            if rank == 0:
                print(
                    f"workers={workers}: resumed at step {train_state.step - todo} on {world} "
                    f"ranks, trained on to step {train_state.step}, the end of epoch 1 (saved "
                    f"with {saved_with} workers)"
                )
                check_once(workers, [f"a.w{saved_with}", f"{tag}.w{workers}"])
            refused = stock_loader_refused(stock, rank, world)
            if rank == 0:
                print(f"workers={workers}: torchtitan's own loader on {world} ranks: {refused}")
        dist.barrier()
    dist.destroy_process_group()


def save_stock_loader(path: Path, rank: int, world: int) -> None:
    from torchtitan.components.dataloader import ParallelAwareDataloader

    loader = ParallelAwareDataloader(list(range(N)), dp_rank=rank, dp_world_size=world)
    dcp.save({"dataloader": loader}, checkpoint_id=str(path))


def stock_loader_refused(path: Path, rank: int, world: int) -> str:
    from torchtitan.components.dataloader import ParallelAwareDataloader

    loader = ParallelAwareDataloader(list(range(N)), dp_rank=rank, dp_world_size=world)
    try:
        dcp.load({"dataloader": loader}, checkpoint_id=str(path))
    except (Exception, dist.checkpoint.api.CheckpointException) as err:  # grow, or its assert
        first = str(err).strip().splitlines()
        return (
            "refused ("
            + next((x for x in first if "dp_rank" in x or "dp_degree" in x), first[0])[:90]
            + ")"
        )
    return "loaded"


def check_once(workers: int, runs: list[str]) -> None:
    """One line per epoch: both runs' records (every rank's) read each sample exactly once."""
    seen: dict[int, Counter[int]] = {}
    for run in runs:
        for rank_records in json.loads(Path(f"{run}.json").read_text()):
            for epoch, ids in rank_records:
                seen.setdefault(epoch, Counter()).update(ids)
    for epoch, counts in sorted(seen.items()):
        once = sum(1 for i in range(N) if counts[i] == 1)
        ok = once == N == sum(counts.values())
        verdict = "every sample once ✓" if ok else "NOT every sample once ✗"
        print(f"workers={workers}: epoch {epoch}: {verdict} ({once} of {N})")
        if not ok:
            raise SystemExit(f"epoch {epoch} was not read exactly once")


if __name__ == "__main__":
    main()
