"""NeMo Automodel 0.7.0's diffusion recipe with dataorder's loader: config, tracking, restore.

Run it on CPU (gloo): save on 2 ranks after 1 step (12 images), resume on 1 (shrink) or 3 (grow):

    torchrun --standalone --nproc-per-node=2 examples/nemo_automodel.py --dir run --save
    torchrun --standalone --nproc-per-node=3 examples/nemo_automodel.py --dir run

What runs is NeMo's own code wherever it runs on a CPU: the YAML ``_target_`` is resolved by
NeMo's config loader (``RecipeConfig.resolve_diffusion_dataloader``), NeMo's dataset and collate
function read a tiny preprocessed cache, the recipe's attributes are tracked by ``BaseRecipe``,
the loop is the diffusion recipe's (``StepScheduler.epochs``, ``sampler.set_epoch``, groups of
micro-batches), the checkpoint goes through NeMo's ``Checkpointer`` by the recipe's dispatch
(per-DP-rank loader files, rank 0's ``sampler.pt``, DCP for ``use_distributed_checkpointing``)
and is restored by ``BaseRecipe._load_checkpoint_tracked_state`` in NeMo's order (the loader's
state, then the sampler's, both with 2 workers). The model and optimizer are left out.

Two modes: ``files`` (NeMo's default: a loader file per DP rank) resumes on fewer ranks and is
refused by NeMo on more (no file for the new ranks); ``dcp`` (``distributed_checkpointing: true``)
resumes on any number. Rank 0 of the resumed run checks that every sample of each epoch was
trained exactly once over both runs (one line per epoch). ``--workers`` sets the loader's worker
processes (2 by default): a run resumed with another number than the save continues exactly in
both modes (with ``files``, torchdata's own per-rank loader state, which holds its number of
workers, is dropped by the ``sampler.pt`` loaded after it, which places the order).
Each run writes what every rank read into one file (``run/dcp.a.json``, resumed
``run/dcp.b3w2.json``), replaced whole: a run never counts another run's ranks.

Two known warnings of the libraries are filtered here, in this script only: torchdata's
``'set_vital' is deprecated`` (once per loader and rank) and NeMo's ``save_consolidated=final
but v4_compatible=False`` (once per ``Checkpointer`` and rank; no model is saved here).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

N = 36  # images: 3 buckets of 12, whole global batches of 2 x 1, 2 and 3 ranks (none dropped)
STOP = 1  # optimizer steps (of 12 images) before the save
GLOBAL_BATCH = 12  # kept on every DP size (NeMo's step count must mean the same images)


def write_cache(root: Path) -> None:
    """NeMo's preprocessed cache: metadata.json, a shard of items, one .pt file per image."""
    root.mkdir(parents=True, exist_ok=True)
    sizes = [(256, 256), (320, 192), (192, 320)]
    items = []
    for i in range(N):
        w, h = sizes[i % 3]
        path = root / f"{i}.pt"
        torch.save(
            {
                "latent": torch.zeros(4, h // 8, w // 8),
                "crop_offset": [0, 0],
                "prompt": f"image {i}",
                "image_path": str(i),
                "prompt_embeds": torch.zeros(1, 3, 4),
            },
            path,
        )
        items.append(
            {
                "cache_file": str(path),
                "crop_resolution": [w, h],
                "original_resolution": [w, h],
                "bucket_id": i % 3,
                "aspect_ratio": w / h,
            }
        )
    (root / "shard_000.json").write_text(json.dumps(items))
    (root / "metadata.json").write_text(json.dumps({"shards": ["shard_000.json"]}))


def make_recipe(mode: str, cache: Path, ckpt_dir: Path, rank: int, world: int, workers: int) -> Any:
    from nemo_automodel.components.checkpoint.checkpointing import Checkpointer
    from nemo_automodel.components.checkpoint.config import CheckpointingConfig
    from nemo_automodel.components.config.loader import ConfigNode
    from nemo_automodel.components.training.step_scheduler import StepScheduler
    from nemo_automodel.recipes._typed_config import RecipeConfig
    from nemo_automodel.recipes.base_recipe import BaseRecipe

    # the YAML a user writes, resolved by NeMo's own loader
    node = ConfigNode(
        {
            "_target_": "dataorder.integrations.nemo_automodel.DiffusionBucketLoader",
            "cache_dir": str(cache),
            "base_resolution": [256, 256],
            "num_workers": workers,
            "pin_memory": False,
            "seed": 1234,
            "drop_last": True,
            "distributed_checkpointing": mode == "dcp",
        }
    )
    config = RecipeConfig.resolve_diffusion_dataloader(node)

    class Recipe(BaseRecipe):  # what TrainDiffusionRecipe.setup() assigns, minus the model
        pass

    recipe = Recipe()
    build = config.build(dp_rank=rank, dp_world_size=world, batch_size=2)
    recipe.dataloader = build.dataloader
    recipe.sampler = build.sampler
    recipe.step_scheduler = StepScheduler(
        global_batch_size=GLOBAL_BATCH,  # gradient accumulation: 12 / (2 x world)
        local_batch_size=2,
        dp_size=world,
        dataloader=recipe.dataloader,
        num_epochs=2,
        preemption_signal=None,
    )
    recipe.checkpointer = Checkpointer(
        CheckpointingConfig(checkpoint_dir=str(ckpt_dir)), dp_rank=rank, tp_rank=0, pp_rank=0
    )
    return recipe, type(config).__name__


def save(recipe: Any, path: Path) -> list[str]:
    """BaseRecipe.save_checkpoint's dispatch of the tracked states (model/optimizer left out)."""
    from nemo_automodel.recipes.base_recipe import is_dataloader, is_distributed_stateful

    path.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    how = []
    for key in sorted(recipe.__dict__["__state_tracked"]):
        obj = getattr(recipe, key)
        if key == "checkpointer":
            continue
        if is_dataloader(obj):
            recipe.checkpointer.save_on_dp_ranks(obj, key, str(path))
            how.append(f"{key}: per DP rank")
        elif is_distributed_stateful(obj):
            recipe.checkpointer.save_distributed_state(obj, key, str(path))
            how.append(f"{key}: DCP")
        else:
            if dist.get_rank() == 0:
                torch.save(obj.state_dict(), path / f"{key}.pt")
            how.append(f"{key}: rank 0")
    dist.barrier()
    return how


def train(recipe: Any, stop: int | None) -> list[list[int]]:
    """The diffusion recipe's loop (run_train_validation_loop), recording the images read."""
    seen = []
    for epoch in recipe.step_scheduler.epochs:
        recipe.sampler.set_epoch(epoch)
        recipe.step_scheduler.dataloader = recipe.dataloader
        for batch_group in recipe.step_scheduler:
            for batch in batch_group:
                seen.append([epoch, [int(p) for p in batch["metadata"]["image_paths"]]])
            if stop is not None and recipe.step_scheduler.step + 1 == stop:
                return seen
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--workers", type=int, default=2, help="loader worker processes")
    args = parser.parse_args()
    quiet_known_warnings()
    # this file is named like the package it uses: keep its folder off the import path
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cache = args.dir / "cache"
    if args.save and rank == 0:
        write_cache(cache)
    dist.barrier()
    for mode in ("files", "dcp"):
        ckpt = args.dir / f"ckpt-{mode}" / "epoch_0_step_1"
        recipe, resolved = make_recipe(mode, cache, ckpt.parent, rank, world, args.workers)
        tag = f"{mode}.{'a' if args.save else f'b{world}w{args.workers}'}"
        if args.save:
            seen = train(recipe, STOP)
            how = save(recipe, ckpt)
            if rank == 0:
                print(f"{mode}: _target_ resolved to {resolved}; saved step {STOP}: {how}")
        else:
            error = ""
            try:
                recipe._load_checkpoint_tracked_state(str(ckpt))  # NeMo's restore, in its order
            except FileNotFoundError as err:  # a new rank has no loader file of its own
                error = f"{type(err).__name__}: {Path(str(err.filename)).name}"
            errors: list[Any] = [None] * world
            dist.all_gather_object(errors, error)  # every rank stops if one cannot resume
            if any(errors):
                if rank == 0:
                    print(f"{mode}: resume on {world} ranks refused by NeMo: {errors}")
                continue
            seen = train(recipe, None)
        everyone: list[Any] = [None] * world
        dist.all_gather_object(everyone, seen)
        if rank == 0:
            (args.dir / f"{tag}.json").write_text(json.dumps(everyone))
        if not args.save and rank == 0:
            check_once(args.dir, mode, world, args.workers)
    dist.destroy_process_group()
    os._exit(0)  # the persistent loader workers of a refused resume are not waited for


def quiet_known_warnings() -> None:
    """Filter the two known warnings of the libraries (module docstring), here only."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", message=".*set_vital.* is deprecated")
    logging.getLogger().addFilter(
        lambda record: "save_consolidated=final but v4_compatible=False" not in record.getMessage()
    )


def check_once(root: Path, mode: str, world: int, workers: int) -> None:
    """One line per epoch: both runs' records (every rank's) read each sample exactly once."""
    seen: dict[int, Counter[int]] = {}
    for tag in (f"{mode}.a", f"{mode}.b{world}w{workers}"):
        for rank_records in json.loads((root / f"{tag}.json").read_text()):
            for epoch, ids in rank_records:
                seen.setdefault(epoch, Counter()).update(ids)
    for epoch, counts in sorted(seen.items()):
        once = sum(1 for i in range(N) if counts[i] == 1)
        ok = once == N == sum(counts.values())
        verdict = "every sample once ✓" if ok else "NOT every sample once ✗"
        print(
            f"{mode}: resumed on {world} ranks with {workers} workers; epoch {epoch}: {verdict} "
            f"({once} of {N})"
        )
        if not ok:
            raise SystemExit(f"{mode}: epoch {epoch} was not read exactly once")


if __name__ == "__main__":
    main()
