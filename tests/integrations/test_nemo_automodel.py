"""NeMo Automodel 0.7.0 in its own code paths (examples/nemo_automodel.py under torchrun).

The diffusion loader config is resolved from its YAML ``_target_`` by NeMo's config loader, reads
a preprocessed cache through NeMo's dataset and collate function, is tracked by NeMo's
``BaseRecipe``, trained by the recipe's loop (``StepScheduler``, ``set_epoch``) with 2 workers
(resumed with 0 or 1: another number of workers continues exactly too, with per-DP-rank loader
files as well, checked in-process 2 -> 0 and 0 -> 2), saved by the recipe's
dispatch through NeMo's ``Checkpointer`` and restored by
``BaseRecipe._load_checkpoint_tracked_state`` in NeMo's order (loader, then rank 0's
``sampler.pt``). Saved on 2 ranks: growing to 3 is refused by NeMo with per-DP loader files and
exact through the DCP path; shrinking to 1 is exact with both. The LLM recipe's loader is built by
NeMo's ``DataloaderConfig`` with our batch sampler config. Skipped without NeMo Automodel
(``pip install --no-deps nemo-automodel==0.7.0``; its imports used here need transformers).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.test_examples import torchrun

# one worker runs this module (tests/conftest.py: NOTE [ xdist ]): its tests share a
# module-scoped run that each worker would otherwise start again
pytestmark = pytest.mark.xdist_group("nemo_automodel")


@pytest.fixture(scope="module", autouse=True)
def _needs_nemo_automodel() -> None:
    """Skip without NeMo Automodel: imported when the module's tests run, not at collection
    (about 9 s of CPU that every xdist worker would pay, for the one that runs them)."""
    pytest.importorskip("nemo_automodel.recipes.base_recipe")


N = 36


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nemo")
    out = torchrun("nemo_automodel.py", 2, "--dir", "run", "--save", cwd=root).stdout
    assert "files: _target_ resolved to DiffusionBucketLoader; saved step 1" in out
    assert "'dataloader: per DP rank', 'sampler: rank 0'" in out
    assert "'dataloader: DCP', 'sampler: rank 0'" in out
    return root


def _check(root: Path, mode: str, world: int, workers: int = 2) -> None:
    seen: dict[int, Counter[int]] = {}
    for tag in (f"{mode}.a", f"{mode}.b{world}w{workers}"):
        for rank_records in json.loads((root / "run" / f"{tag}.json").read_text()):
            for epoch, ids in rank_records:
                seen.setdefault(epoch, Counter()).update(ids)
    assert seen == {0: Counter(range(N)), 1: Counter(range(N))}, (mode, world)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_growing_dp_is_refused_with_files_and_exact_through_dcp(saved: Path) -> None:
    """Saved with 2 loader workers, resumed with none (another number of workers)."""
    out = torchrun("nemo_automodel.py", 3, "--dir", "run", "--workers", "0", cwd=saved).stdout
    assert "files: resume on 3 ranks refused by NeMo" in out
    assert "FileNotFoundError: dataloader_dp_rank_2.pt" in out
    for epoch in (0, 1):
        line = f"dcp: resumed on 3 ranks with 0 workers; epoch {epoch}: every sample once ✓"
        assert f"{line} (36 of 36)" in out
    _check(saved, "dcp", 3, workers=0)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_growing_dp_with_the_same_workers_is_exact_through_dcp(saved: Path) -> None:
    torchrun("nemo_automodel.py", 3, "--dir", "run", cwd=saved)
    _check(saved, "dcp", 3)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_shrinking_dp_is_exact_with_both(saved: Path) -> None:
    torchrun("nemo_automodel.py", 1, "--dir", "run", cwd=saved)
    _check(saved, "files", 1)
    _check(saved, "dcp", 1)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_shrinking_dp_with_another_number_of_workers_is_exact_with_both(saved: Path) -> None:
    """Per-DP-rank files hold torchdata's own loader state, saved with 2 workers (1 asked):
    rank 0's ``sampler.pt``, loaded after it, drops it and places the order."""
    out = torchrun("nemo_automodel.py", 1, "--dir", "run", "--workers", "1", cwd=saved).stdout
    for mode in ("files", "dcp"):
        line = f"{mode}: resumed on 1 ranks with 1 workers; epoch 1: every sample once ✓"
        assert f"{line} (36 of 36)" in out
        _check(saved, mode, 1, workers=1)


def _files_recipe(workers: int, ckpt_dir: Path) -> Any:
    """The diffusion recipe's tracked loader and sampler (DiffusionBucketLoader.build's pair)."""
    from nemo_automodel.components.checkpoint.checkpointing import Checkpointer
    from nemo_automodel.components.checkpoint.config import CheckpointingConfig
    from nemo_automodel.recipes.base_recipe import BaseRecipe
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataorder.integrations.nemo_automodel import LoaderSampler
    from tests.helpers.stack_samplers import FAMILIES, Items, collate_list

    class Recipe(BaseRecipe):
        pass

    sampler = FAMILIES["bucket"](0, 1)
    loader = StatefulDataLoader(
        Items(),
        batch_sampler=sampler,
        collate_fn=collate_list,
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    recipe = Recipe()
    recipe.dataloader = loader
    recipe.sampler = LoaderSampler(sampler, loader)
    recipe.checkpointer = Checkpointer(
        CheckpointingConfig(checkpoint_dir=str(ckpt_dir)), dp_rank=0, tp_rank=0, pp_rank=0
    )
    return recipe


@pytest.mark.parametrize(("saved_with", "resumed_with"), [(2, 0), (0, 2)])
def test_a_files_resume_with_another_number_of_workers_reads_every_sample_once(
    tmp_path: Path, saved_with: int, resumed_with: int
) -> None:
    """NeMo's default mode: the per-DP-rank file is torchdata's own loader state, which records
    its number of workers (torchdata asserts it at the next iter()). NeMo's restore applies it,
    then rank 0's ``sampler.pt`` through ``LoaderSampler``, which drops the loader's pending
    state: the sampler state places the cursor, whatever the number of workers."""
    import torch

    from tests.helpers.stack_samplers import N as items

    ckpt = tmp_path / "epoch_0_step_3"
    before = _files_recipe(saved_with, tmp_path)
    before.sampler.set_epoch(0)
    batches = iter(before.dataloader)
    read = [next(batches) for _ in range(3)]
    before.checkpointer.save_on_dp_ranks(before.dataloader, "dataloader", str(ckpt))
    torch.save(before.sampler.state_dict(), ckpt / "sampler.pt")  # rank 0's, as NeMo's save
    saved = torch.load(ckpt / "dataloader" / "dataloader_dp_rank_0.pt")
    assert ("_snapshot" in saved) == (saved_with > 0)  # torchdata's per-worker layout

    after = _files_recipe(resumed_with, tmp_path)
    after._load_checkpoint_tracked_state(str(ckpt))  # NeMo's restore, in its order
    epochs = []
    for epoch in (0, 1):  # the recipe's loop: set_epoch at every epoch, then a pass
        after.sampler.set_epoch(epoch)
        epochs.append((read if epoch == 0 else []) + list(after.dataloader))
    reference = _files_recipe(0, tmp_path)
    whole = []
    for epoch in (0, 1):
        reference.sampler.set_epoch(epoch)
        whole.append(list(reference.dataloader))
    assert epochs == whole  # the same batches in the same order: every sample once
    for batches_of_epoch in epochs:
        assert sorted(i for b in batches_of_epoch for i in b) == list(range(items))


def test_the_llm_recipes_loader_takes_our_batch_sampler() -> None:
    from nemo_automodel.components.datasets.llm.megatron.sampler import MegatronSamplerConfig
    from nemo_automodel.components.datasets.loader import DataloaderConfig

    from dataorder.integrations.nemo_automodel import MegatronBatchSampler, install_batch_sampler
    from dataorder.llm.megatron import MegatronPretrainingRandomSampler

    class Rows:
        def build(self) -> list[int]:
            return list(range(40))

    nemo = DataloaderConfig(
        dataset_config=Rows(),  # type: ignore[arg-type]
        batch_sampler_config=MegatronSamplerConfig(4, 8, dataloader_type="cyclic"),
        batch_size=None,
        seed=7,
        collate_fn=list,
    )
    recipe = SimpleNamespace(cfg=SimpleNamespace(dataloader=nemo))
    ours = install_batch_sampler(recipe)
    assert recipe.cfg.__dict__["dataloader"] is ours
    assert ours.batch_sampler_config == MegatronBatchSampler(4, 8, "cyclic", seed=7)
    assert dataclasses.replace(ours, batch_sampler_config=None) == dataclasses.replace(
        nemo, batch_sampler_config=None
    )
    loaders = [ours.build(dp_rank=r, dp_world_size=2) for r in range(2)]
    assert all(isinstance(dl.batch_sampler, MegatronPretrainingRandomSampler) for dl in loaders)
    # the recipe never reaches a batch sampler with set_epoch: the next pass is the next epoch
    epochs = [[b for dl in loaders for b in dl] for _ in range(2)]
    for reads in epochs:
        assert sorted(i for b in reads for i in b) == list(range(40))
    assert epochs[0] != epochs[1]
