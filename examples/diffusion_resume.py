"""A diffusion training loop over resolution buckets that stops, and resumes exactly.

Run it on CPU (gloo): stop after 20 steps (as a crash or a preemption would), then resume:

    torchrun --standalone --nproc-per-node=2 examples/diffusion_resume.py --stop-at 20 --ckpt c
    torchrun --standalone --nproc-per-node=2 examples/diffusion_resume.py --ckpt c --resume

What it shows:

* ``SequentialBucketSampler``: every rank draws from the same bucket at every step, with the same
  batch size (here a dynamic one: more small images per batch than large ones), so every batch
  stacks into one tensor and the ranks stay in lock-step. Its rank and size come from the
  process group (or pass ``mesh=`` with tensor/context parallelism).
* torchdata's ``StatefulDataLoader(batch_sampler=sampler, num_workers=2)``: its ``state_dict()``
  is taken as each batch is handed out, so the worker processes' prefetching never makes the
  checkpoint run ahead. The sampler's part of it is a few integers (epoch, bucket, position),
  identical on every rank: one JSON file for the whole job.
* Resuming loads that state and continues the epoch with the next batch: nothing is replayed or
  skipped, and ``get_batch_info`` describes every batch as it is really yielded.
* The run ends with its check in one line: every rank's images (and, resumed, those the run
  before the checkpoint trained, saved beside it as ``c.reads.json``) hold every image of the
  epoch once, repeated only where the sampler declared padding (``get_batch_info``); a run that
  stops early checks that no image came twice so far.

The image sizes are the synthetic set shipped with dataorder (``dataorder/data/``); each image is
a random "latent" of its bucket's shape, and the model a convolution that learns to predict the
noise added to it.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.tools.demo import load_image_sizes


class Latents(Dataset[dict[str, Any]]):
    """Image ``i`` as a 4-channel latent of its bucket's shape (1/64 of its pixels per side)."""

    def __init__(self, images: BaseMultiresolutionDataset) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, Any]:
        width, height = self.images[index]["bucket_resolution"]
        generator = torch.Generator().manual_seed(index)  # the sample's own, never the global RNG
        shape = (4, height // 64, width // 64)
        return {
            "index": index,
            "latent": torch.randn(shape, generator=generator),
            "noise": torch.randn(shape, generator=generator),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", type=Path, required=True, help="checkpoint path prefix")
    parser.add_argument("--resume", action="store_true", help="resume from --ckpt")
    parser.add_argument("--stop-at", type=int, default=None, help="stop after this many steps")
    parser.add_argument("--images", type=int, default=600, help="how many shipped sizes to use")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--record", type=Path, help="write what each rank read (a JSON prefix)")
    args = parser.parse_args()

    # torchdata 0.11 calls a torch API that torch 2.13 deprecates: noise, not a problem here
    warnings.filterwarnings("ignore", message=".*set_vital.* is deprecated")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    widths, heights = load_image_sizes()
    images = BaseMultiresolutionDataset.from_sizes(
        widths[: args.images],
        heights[: args.images],
        calculator=MultiTierBucketCalculator.from_preset("512p"),
    )
    sampler = SequentialBucketSampler(
        images,
        base_batch_size=4,
        base_resolution=(512, 512),
        dynamic_batch_size=True,  # 4 images per rank at 512x512, more when smaller
        drop_last=False,  # every image once per epoch; each bucket's last batch is padded
        seed=args.seed,
    )
    loader = StatefulDataLoader(Latents(images), batch_sampler=sampler, num_workers=args.workers)
    model = torch.nn.Conv2d(4, 4, 3, padding=1)
    generator = torch.Generator().manual_seed(args.seed)  # the same initial model on every rank
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1)

    step = 0
    if args.resume:
        saved = json.loads(args.ckpt.with_suffix(".json").read_text())
        step = saved["step"]
        loader.load_state_dict(saved["loader"])  # the sampler continues where it stopped
        model.load_state_dict(torch.load(args.ckpt.with_suffix(".pt"), weights_only=True))

    epoch = 0  # one epoch here; a longer run calls sampler.set_epoch(epoch) for each
    read: list[dict[str, Any]] = []
    for batch in loader:
        # batch `step` of the epoch, named explicitly: the workers prefetch, so the sampler may
        # already have run out and moved its cursor on to the next epoch
        info = sampler.get_batch_info(step, epoch=epoch)
        width, height = info["resolution"]
        if tuple(batch["latent"].shape) != (info["batch_size"], 4, height // 64, width // 64):
            raise RuntimeError(f"batch {step} is not what get_batch_info says: {info}")
        noisy = batch["latent"] + 0.5 * batch["noise"]
        loss = torch.nn.functional.mse_loss(model(noisy), batch["noise"])
        model.zero_grad()
        loss.backward()
        for p in model.parameters():  # average gradients over the data-parallel group
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
        read.append({"indices": batch["index"].tolist(), "padding": info["padding"]})
        step += 1
        if rank == 0 and step % 10 == 0:
            print(
                f"step {step}: bucket {width}x{height}, {info['batch_size']} images per rank, "
                f"loss {loss.item():.3f}",
                flush=True,
            )
        if step == args.stop_at:
            break

    finished = step != args.stop_at
    if rank == 0:  # the loader state is the same on every rank: one copy for the job
        state = {"step": step, "loader": loader.state_dict()}
        args.ckpt.with_suffix(".json").write_text(json.dumps(state))
        torch.save(model.state_dict(), args.ckpt.with_suffix(".pt"))
        done = "finished the epoch" if finished else "stopped"
        print(f"{done} after step {step}; checkpoint in {args.ckpt.with_suffix('.json')}")
    if args.record:
        Path(f"{args.record}.rank{rank}.json").write_text(json.dumps(read))
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, read)
    if rank == 0:
        reads = [batch for rank_reads in everyone for batch in rank_reads]
        if args.resume:  # what the run before the checkpoint trained
            reads += json.loads(args.ckpt.with_suffix(".reads.json").read_text())
        args.ckpt.with_suffix(".reads.json").write_text(json.dumps(reads))
        check_each_image_once(reads, len(images), finished)
    dist.barrier()
    dist.destroy_process_group()


def check_each_image_once(reads: list[dict[str, Any]], n: int, finished: bool) -> None:
    """One line: every image once, repeated only in the padding the sampler declared (so far,
    for a run that stopped before the epoch's end)."""
    counts: Counter[int] = Counter()
    for batch in reads:
        counts.update(batch["indices"])
    padding = sum(batch["padding"] for batch in reads)
    repeats = sum(counts.values()) - len(counts)
    if finished:
        ok = len(counts) == n and repeats == padding
        what = f"every image once {'✓' if ok else '✗'} ({len(counts)} of {n}"
    else:
        ok = repeats <= padding
        what = f"no image twice so far {'✓' if ok else '✗'} ({len(counts)} of {n} read"
    if ok:
        what += f"; the {repeats} repeats are the declared padding)"
    else:
        what += f"; {repeats} repeats, {padding} declared as padding)"
    print(f"epoch 0: {what}", flush=True)
    if not ok:
        raise SystemExit("epoch 0 was not read exactly once")


if __name__ == "__main__":
    main()
