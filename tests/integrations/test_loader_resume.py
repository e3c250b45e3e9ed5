"""A loader's way back into a run: the state training consumed, counted from its own snapshot.

* The batches a torchdata ``StatefulDataLoader`` handed out since its last worker snapshot are
  counted from the snapshot's state (``state_after``), never on a copy of the live sampler: a
  checkpoint taken after ``set_epoch(e + 1)`` and before its first batch loses nothing, and a
  dataset holding a lock is never copied.
* Two loads in a row leave the last, whichever of the loader and the sampler state came first.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from dataorder.integrations.common import consumed_state
from dataorder.integrations.dcp import OrderState
from dataorder.integrations.nemo_automodel import LoaderSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from tests.helpers.stack_samplers import FAMILIES, Items, collate_list
from tests.test_examples import torchrun


def _loader(sampler: Any, workers: int, every: int = 1, dataset: Any = None) -> StatefulDataLoader:
    return StatefulDataLoader(
        Items(64) if dataset is None else dataset,
        batch_sampler=sampler,
        num_workers=workers,
        snapshot_every_n_steps=every,
        collate_fn=collate_list,
    )


def _ids(batches: Any) -> list[int]:
    return [i for batch in batches for i in batch]


def test_a_checkpoint_after_set_epoch_before_its_first_batch_keeps_the_epoch(
    tmp_path: Path,
) -> None:
    """12 batches, snapshots every 5 with a worker: the loader's state is the snapshot after
    10 batches of epoch 0 plus 2 steps; the loop has said set_epoch(1) since."""
    import torch.distributed.checkpoint as dcp

    sampler = MegatronPretrainingRandomSampler(12, 1, 0, 1)
    loader = _loader(sampler, workers=1, every=5)
    sampler.set_epoch(0)
    epoch0 = _ids(loader)
    sampler.set_epoch(1)
    state = consumed_state(loader)
    assert (state["epoch"], state["consumed"]) == (0, 12)  # epoch 0 at its end, not epoch 1
    dcp.save({"data": OrderState(loader)}, checkpoint_id=str(tmp_path), no_dist=True)

    resumed = MegatronPretrainingRandomSampler(12, 1, 0, 1)
    again = _loader(resumed, workers=1, every=5)
    dcp.load({"data": OrderState(again)}, checkpoint_id=str(tmp_path), no_dist=True)
    read = []
    for epoch in range(resumed.epoch, 2):  # the loop of dataorder.integrations.dcp's docstring
        resumed.set_epoch(epoch)
        read += _ids(again)
    reference = MegatronPretrainingRandomSampler(12, 1, 0, 1)
    reference.set_epoch(1)
    assert sorted(epoch0) == list(range(12))
    assert read == [i for mb in reference for i in mb]  # all of epoch 1, in its order


class LockedItems(Items):
    """A dataset holding a lock, as one guarding an open file does: it cannot be copied."""

    def __init__(self) -> None:
        super().__init__(64)
        self.lock = threading.Lock()

    def set_epoch(self, epoch: int) -> None:  # Megatron-LM's RandomSeedDataset hook
        with self.lock:
            self.epoch = epoch


@pytest.mark.parametrize("workers", [0, 1])
def test_the_steps_since_a_snapshot_are_counted_without_copying_the_dataset(workers: int) -> None:
    dataset = LockedItems()
    sampler = MegatronPretrainingRandomSampler(40, 2, 0, 1, seed=4, dataset=dataset)
    loader = _loader(sampler, workers=workers, every=3, dataset=dataset)
    batches = iter(loader)
    for _ in range(5):  # a snapshot after 3 batches, 2 since
        next(batches)
    reference = MegatronPretrainingRandomSampler(40, 2, 0, 1, seed=4)
    it = iter(reference)
    for _ in range(5):
        next(it)
    assert OrderState(loader).state_dict() == {"sampler": reference.state_dict()}


def _state_after(name: str, steps: int) -> dict[str, Any]:
    sampler = FAMILIES[name](0, 1)
    it = iter(sampler)
    for _ in range(steps):
        next(it)
    return sampler.state_dict()


@pytest.mark.parametrize("how", ["order-state", "loader-sampler"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_sampler_state_loaded_after_a_loader_state_wins(how: str, workers: int) -> None:
    """The loader's pending state A (torchdata applies it at the next iter()) must not win over
    the sampler state B loaded after it."""
    name = "megatron-random"
    early = FAMILIES[name](0, 1)
    early_loader = _loader(early, workers)
    batches = iter(early_loader)
    next(batches)
    a = early_loader.state_dict()  # one batch in
    b = _state_after(name, 7)
    sampler = FAMILIES[name](0, 1)
    loader = _loader(sampler, workers)
    loader.load_state_dict(a)
    if how == "order-state":
        OrderState(loader).load_state_dict({"sampler": b})
    else:
        LoaderSampler(sampler, loader).load_state_dict(b)
    expected = FAMILIES[name](0, 1)
    expected.load_state_dict(b)
    want = list(expected)
    assert len(want) == 24 - 7
    assert list(loader) == want  # not the 23 batches left after A


def test_a_refused_state_leaves_the_loaders_pending_state() -> None:
    sampler = FAMILIES["megatron-random"](0, 1)
    loader = _loader(sampler, 0)
    next(iter(loader))
    a = loader.state_dict()
    other = FAMILIES["megatron-single"](0, 1)
    fresh = FAMILIES["megatron-random"](0, 1)
    target = _loader(fresh, 0)
    target.load_state_dict(a)
    with pytest.raises(ValueError, match="megatron_single"):
        OrderState(target).load_state_dict({"sampler": other.state_dict()})
    assert len(list(target)) == len(fresh) - 1  # A still applies: nothing changed


@pytest.mark.slow  # the single-process case above is the default one
@pytest.mark.multiprocess
@pytest.mark.timeout(150)
def test_a_real_job_with_workers_resumes_the_next_epoch_whole(tmp_path: Path) -> None:
    """3 ranks, 2 workers each, a snapshot every 3 of 14 steps: saved after set_epoch(1)."""
    proc = torchrun(
        "../tests/integrations/loader_resume_ranks.py", 3, str(tmp_path / "ckpt"), cwd=tmp_path
    )
    assert "epoch 1: 42 ids, each once" in proc.stdout
