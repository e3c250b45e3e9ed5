"""The loop contract (NOTE [ The loop contract ] in dataorder.core.cursor): a test per break.

Each test is a reported repro, in the few lines a user would write; all of them lost or repeated
data before. The recipe matrix in dataorder.testing checks the same promises at every batch for
every sampler; these keep the original cases readable.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from dataorder import (
    BaseMultiresolutionDataset,
    DistributedSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    SequentialBucketSampler,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


class Indices(torch.utils.data.Dataset[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int | None) -> int:
        return -1 if i is None else int(i)


def _collate(batch: list[int]) -> list[int]:
    return [int(x) for x in batch]


def _epoch(e: int, n: int = 5, world: int = 1, rank: int = 0) -> list[int]:
    s = DistributedSampler(range(n), world, rank, seed=1)
    s.set_epoch(e)
    return list(s)


def test_1_stateful_loader_checkpoint_after_the_last_partial_batch() -> None:
    """5 samples, batch 2: the documented save after the epoch's last (partial) batch."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make() -> tuple[DistributedSampler, Any]:
        s = DistributedSampler(Indices(5), 1, 0, seed=1)
        return s, StatefulDataLoader(Indices(5), sampler=s, batch_size=2, collate_fn=_collate)

    sampler, loader = make()
    sampler.set_epoch(0)
    sizes = []
    for batch in loader:
        sizes.append(len(batch))
        checkpoint = {"epoch": 0, "loader": loader.state_dict()}  # after [x], the partial batch
    assert sizes == [2, 2, 1]
    sampler, loader = make()
    loader.load_state_dict(checkpoint["loader"])
    trained = []
    for epoch in range(checkpoint["epoch"], 2):
        sampler.set_epoch(epoch)
        trained += [x for b in loader for x in b]
    assert trained == _epoch(1), "epoch 0 trained a second time"


def test_1_plain_dataloader_checkpoint_after_the_last_partial_batch() -> None:
    def make() -> tuple[DistributedSampler, Any]:
        s = DistributedSampler(Indices(5), 1, 0, seed=1)
        return s, DataLoader(Indices(5), sampler=s, batch_size=2, collate_fn=_collate)

    sampler, loader = make()
    sampler.set_epoch(0)
    for _ in loader:
        checkpoint = {"epoch": 0, "sampler": sampler.state_dict()}
    sampler, loader = make()
    sampler.load_state_dict(checkpoint["sampler"])
    trained = []
    for epoch in range(checkpoint["epoch"], 2):
        sampler.set_epoch(epoch)
        trained += [x for b in loader for x in b]
    assert trained == _epoch(1)


@pytest.mark.parametrize("family", ["distributed", "megatron"])
@pytest.mark.parametrize("n", [12, 13])  # the epoch's last batch full, or partial
def test_2_accelerate_read_ahead_checkpoint_after_the_last_batch(family: str, n: int) -> None:
    from accelerate.data_loader import prepare_data_loader
    from torchdata.stateful_dataloader.sampler import BatchSampler

    def make() -> Any:
        if family == "distributed":
            s: Any = DistributedSampler(Indices(n), 1, 0, seed=2)
            batches: Any = BatchSampler(s, 4, False)
        else:
            batches = MegatronPretrainingRandomSampler(n, 4, 0, 1, seed=2, drop_last=False)
        base = DataLoader(Indices(n), batch_sampler=batches, collate_fn=_collate)
        return prepare_data_loader(
            base,
            num_processes=1,
            process_index=0,
            put_on_device=False,
            use_stateful_dataloader=True,
        )

    def run(loader: Any, first: int, last: int) -> list[tuple[int, list[int]]]:
        out = []
        for epoch in range(first, last):
            loader.set_epoch(epoch)
            out += [(epoch, list(b)) for b in loader]
        return out

    reference = run(make(), 0, 3)
    loader = make()
    loader.set_epoch(0)
    for _ in loader:
        checkpoint = {"epoch": 0, "loader": loader.state_dict()}  # Accelerate read ahead
    resumed = make()
    resumed.load_state_dict(checkpoint["loader"])
    first_epoch = [(e, b) for e, b in reference if e == 0]
    assert first_epoch + run(resumed, 0, 3) == reference, "the next epoch replayed"


def _lightning_run(tmp: Path, ckpt: str | None, seen: list[tuple[int, list[int]]]) -> None:
    import lightning.pytorch as pl
    from torchdata.stateful_dataloader import StatefulDataLoader

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            seen.append((self.current_epoch, [int(x) for x in batch]))
            return self.w * 0.0

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.0)

    class Data(pl.LightningDataModule):
        def train_dataloader(self) -> Any:
            s = DistributedSampler(Indices(10), 1, 0, seed=4)
            return StatefulDataLoader(Indices(10), sampler=s, batch_size=2, collate_fn=_collate)

    trainer = pl.Trainer(
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        reload_dataloaders_every_n_epochs=1,
        callbacks=[
            pl.callbacks.ModelCheckpoint(
                dirpath=tmp, every_n_train_steps=1, save_top_k=-1, filename="{step}"
            )
        ],
        default_root_dir=tmp,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), datamodule=Data(), ckpt_path=ckpt)


@pytest.mark.parametrize("step", [2, 5])  # k batches into epoch 0; its last batch
def test_3_lightning_resume_keeps_every_batch(tmp_path: Path, step: int) -> None:
    reference: list[tuple[int, list[int]]] = []
    _lightning_run(tmp_path / "ref", None, reference)
    assert len(reference) == 15
    resumed: list[tuple[int, list[int]]] = []
    _lightning_run(tmp_path / "resumed", str(tmp_path / "ref" / f"step={step}.ckpt"), resumed)
    assert reference[:step] + resumed == reference


@pytest.mark.parametrize("num_workers", [0, 2])
def test_4_a_peek_loses_nothing(num_workers: int) -> None:
    def make() -> tuple[MegatronPretrainingRandomSampler, Any]:
        s = MegatronPretrainingRandomSampler(16, 2, 0, 1, seed=5)
        return s, DataLoader(
            Indices(16), batch_sampler=s, collate_fn=_collate, num_workers=num_workers
        )

    def run(peek: bool, set_epoch: bool) -> list[list[int]]:
        sampler, loader = make()
        if peek:
            next(iter(loader))  # to see the shapes
        out = []
        for epoch in range(2):
            if set_epoch:
                sampler.set_epoch(epoch)
            out += [list(b) for b in loader]
        return out

    reference = run(peek=False, set_epoch=True)
    assert run(peek=True, set_epoch=True) == reference
    assert run(peek=True, set_epoch=False) == reference  # 8 batches: longer than the prefetch


def test_5_megatron_consumed_samples_on_another_layout_is_exact_or_refused() -> None:
    kw: dict[str, Any] = {"drop_last": False, "global_batch_size": 4}
    with pytest.raises(ValueError, match="consumed_samples must be inside the first epoch"):
        MegatronPretrainingSampler(10, 1, 0, 2, consumed_samples=24, **kw)  # 2 epochs on DP 4


def test_6_a_bucket_state_is_refused_when_membership_moved() -> None:
    res = [(64, 64), (128, 64)]
    ids = np.array([0] * 6 + [1] * 6)
    before = BaseMultiresolutionDataset.from_bucket_ids(ids, resolutions=res)
    moved = BaseMultiresolutionDataset.from_bucket_ids(ids[::-1].copy(), resolutions=res)
    assert np.array_equal(before.bucket_table.sizes, moved.bucket_table.sizes)
    s = SequentialBucketSampler(before, base_batch_size=2, num_replicas=1, rank=0)
    next(iter(s))
    with pytest.raises(ValueError, match=r"dataset is '[0-9a-f]{16}' in the state but"):
        SequentialBucketSampler(moved, base_batch_size=2, num_replicas=1, rank=0).load_state_dict(
            s.state_dict()
        )


@pytest.mark.parametrize(
    "make",
    [
        lambda: DistributedSampler(range(20), 2, 0, seed=1),
        lambda: MegatronPretrainingRandomSampler(20, 2, 0, 2, seed=1),
    ],
)
def test_7_a_tampered_consumed_is_refused_naming_the_field(make: Any) -> None:
    s = make()
    next(iter(s))
    state = s.state_dict()
    for bad in (10**30, state["consumed"] + 1, 10**6):
        with pytest.raises(ValueError, match=rf"state\['consumed'\]={bad} is not a position"):
            make().load_state_dict({**state, "consumed": bad})
