"""The recipes of docs/integrations.md: HF Accelerate, PyTorch Lightning, StatefulDataLoader.

Each test skips when its package is absent. Ranks are simulated in one process through the
arguments the frameworks derive from the environment (``num_processes``/``process_index`` for
Accelerate, an explicit ``rank``/``num_replicas`` for the sampler);
``tests/parallel/test_multiprocess.py`` runs the Accelerate recipe in a real 8-process job too.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from dataorder.parallel.distributed import DistributedSampler

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning"
)


class IndexDataset(torch.utils.data.Dataset[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def indices(loader: Any, limit: int | None = None) -> list[int]:
    return [x for batch in itertools.islice(loader, limit) for x in batch.tolist()]


def epoch_of(n: int, world: int, rank: int, epoch: int, **kw: Any) -> list[int]:
    s = DistributedSampler(range(n), world, rank, **kw)
    s.set_epoch(epoch)
    return list(s)


# -- torchdata StatefulDataLoader ---------------------------------------------------------------


def test_stateful_loader_with_a_dataorder_batch_sampler() -> None:
    """batch_sampler= a Megatron sampler: the loader's state embeds it, the resume is exact."""
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    megatron = pytest.importorskip("dataorder.llm.megatron")

    def make() -> Any:
        s = megatron.MegatronPretrainingRandomSampler(50, 4, 1, 2, drop_last=False, seed=1)
        return sdl.StatefulDataLoader(
            IndexDataset(50), batch_sampler=s, num_workers=2, collate_fn=list
        )

    full = list(make())
    for k in (1, 4):
        loader = make()
        it = iter(loader)
        head = [next(it) for _ in range(k)]
        state = loader.state_dict()
        del it
        resumed = make()
        resumed.load_state_dict(state)
        assert head + list(resumed) == full


# -- HF Accelerate ------------------------------------------------------------------------------


def test_accelerate_default_prepare_shards_a_rank_aware_sampler_again() -> None:
    """The trap the recipe avoids: prepare() re-shards, each process sees a part of its share."""
    acc_dl = pytest.importorskip("accelerate.data_loader")
    n, world = 50, 2
    for rank in range(world):
        s = DistributedSampler(IndexDataset(n), world, rank, seed=1)
        loader = DataLoader(IndexDataset(n), sampler=s, batch_size=4)
        prepared = acc_dl.prepare_data_loader(loader, num_processes=world, process_index=rank)
        got = indices(prepared)
        ours = epoch_of(n, world, rank, 0, seed=1)
        assert got != ours
        assert set(got) < set(ours), "a strict part of this rank's share: double sharding"


@pytest.mark.parametrize("world", [1, 3])
def test_accelerate_recipe_each_process_sees_exactly_our_indices(world: int) -> None:
    acc_dl = pytest.importorskip("accelerate.data_loader")
    n = 50
    for rank in range(world):
        s = DistributedSampler(IndexDataset(n), world, rank, seed=1)
        loader = DataLoader(IndexDataset(n), sampler=s, batch_size=4)
        # The recipe: the sampler already shards, so Accelerate must see a single process.
        prepared = acc_dl.prepare_data_loader(
            loader, device=torch.device("cpu"), num_processes=1, process_index=0, put_on_device=True
        )
        for epoch in range(3):
            prepared.set_epoch(epoch)  # DataLoaderShard passes it to the sampler
            assert indices(prepared) == epoch_of(n, world, rank, epoch, seed=1)


def test_accelerate_recipe_with_an_accelerator() -> None:
    accelerate = pytest.importorskip("accelerate")
    from accelerate.data_loader import prepare_data_loader

    accelerator = accelerate.Accelerator(cpu=True)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    s = DistributedSampler(IndexDataset(20), num_replicas=4, rank=2, seed=3)
    loader = prepare_data_loader(
        DataLoader(IndexDataset(20), sampler=s, batch_size=2),
        device=accelerator.device,
        num_processes=1,
        process_index=0,
        put_on_device=True,
    )
    seen = []
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(batch.float()[:, None]).sum()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        seen += batch.tolist()
    assert seen == epoch_of(20, 4, 2, 0, seed=3)


def test_accelerate_stateful_resume_is_exact() -> None:
    """use_stateful_dataloader=True and torchdata's BatchSampler: the loader's state is exact.

    Accelerate's DataLoaderShard reads one batch ahead, so the sampler's own cursor is one batch
    past what training consumed: checkpoint the prepared loader's ``state_dict()``, not the
    sampler's.
    """
    acc_dl = pytest.importorskip("accelerate.data_loader")
    tds = pytest.importorskip("torchdata.stateful_dataloader.sampler")
    n, world, rank, b = 50, 2, 1, 4

    def make() -> tuple[DistributedSampler, Any]:
        s = DistributedSampler(IndexDataset(n), world, rank, seed=1)
        loader = DataLoader(IndexDataset(n), batch_sampler=tds.BatchSampler(s, b, False))
        prepared = acc_dl.prepare_data_loader(
            loader, num_processes=1, process_index=0, use_stateful_dataloader=True
        )
        return s, prepared

    full = indices(make()[1])
    assert full == epoch_of(n, world, rank, 0, seed=1)
    for k in (1, 3, 6):
        s, prepared = make()
        it = iter(prepared)
        head = [x for _ in range(k) for x in next(it).tolist()]
        state = prepared.state_dict()
        # reading ahead, the sampler is one batch past training (at most at the epoch's end)
        ahead = (0, min((k + 1) * b, len(full)) * world)
        assert (s.epoch, s.progress["consumed"]) == ahead, "the sampler is one batch ahead"
        _, resumed = make()
        resumed.load_state_dict(state)
        assert head + indices(resumed) == full, f"resume after {k} batches"


def test_accelerate_resume_across_epochs_with_set_epoch() -> None:
    """The recipe's loop: ``prepared.set_epoch(epoch)`` every epoch, from the saved epoch on.

    DataLoaderShard calls ``set_epoch(self.iteration)`` on every ``iter()``, and ``iteration``
    restarts at 0 in a new process, so the loop must set the epoch it resumes.
    """
    acc_dl = pytest.importorskip("accelerate.data_loader")
    tds = pytest.importorskip("torchdata.stateful_dataloader.sampler")

    def make() -> Any:
        s = DistributedSampler(IndexDataset(30), 3, 2, seed=8)
        loader = DataLoader(IndexDataset(30), batch_sampler=tds.BatchSampler(s, 3, False))
        return acc_dl.prepare_data_loader(
            loader, num_processes=1, process_index=0, use_stateful_dataloader=True
        )

    prepared = make()
    reference = []
    for epoch in range(4):
        prepared.set_epoch(epoch)
        reference.append(indices(prepared))
    assert reference == [epoch_of(30, 3, 2, e, seed=8) for e in range(4)]

    prepared = make()
    for epoch in range(2):
        prepared.set_epoch(epoch)
        indices(prepared)
    prepared.set_epoch(2)
    it = iter(prepared)
    head = next(it).tolist() + next(it).tolist()
    checkpoint = {"epoch": 2, "loader": prepared.state_dict()}

    resumed = make()
    resumed.load_state_dict(checkpoint["loader"])
    got = []
    for epoch in range(checkpoint["epoch"], 4):
        resumed.set_epoch(epoch)
        got.append(indices(resumed))
    assert [head + got[0], got[1]] == reference[2:]

    # a checkpoint after the inner loop saves the loop's own epoch too: its state still
    # describes that epoch, at its end, so the resumed loop reads nothing more of it
    prepared = make()
    for epoch in range(2):
        prepared.set_epoch(epoch)
        indices(prepared)
    checkpoint = {"epoch": epoch, "loader": prepared.state_dict()}
    resumed = make()
    resumed.load_state_dict(checkpoint["loader"])
    got = []
    for epoch in range(checkpoint["epoch"], 4):
        resumed.set_epoch(epoch)
        got.append(indices(resumed))
    assert got == [[], *reference[2:]]


# -- PyTorch Lightning --------------------------------------------------------------------------


def _lightning() -> Any:
    return pytest.importorskip("lightning.pytorch")


class _Recorder:
    """Builds a LightningModule that records the indices of every training batch."""

    @staticmethod
    def module() -> Any:
        pl = _lightning()

        class Recorder(pl.LightningModule):  # type: ignore[misc, name-defined]
            def __init__(self) -> None:
                super().__init__()
                self.lin = torch.nn.Linear(1, 1)
                self.seen: list[tuple[int, list[int]]] = []

            def training_step(self, batch: Any, batch_idx: int) -> Any:
                self.seen.append((self.current_epoch, batch.tolist()))
                return self.lin(batch.float()[:, None]).sum()

            def configure_optimizers(self) -> Any:
                return torch.optim.SGD(self.parameters(), lr=0.0)

        return Recorder()


def _trainer(**kw: Any) -> Any:
    pl = _lightning()
    defaults: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 2,
        "use_distributed_sampler": False,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    return pl.Trainer(**{**defaults, **kw})


def _stateful_loader(n: int, world: int, rank: int) -> tuple[DistributedSampler, Any]:
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    s = DistributedSampler(IndexDataset(n), world, rank, seed=3)
    return s, sdl.StatefulDataLoader(IndexDataset(n), sampler=s, batch_size=4)


def test_lightning_trains_on_exactly_our_indices_and_sets_epochs() -> None:
    module = _Recorder.module()
    s = DistributedSampler(IndexDataset(30), num_replicas=2, rank=1, seed=3)
    assert isinstance(s, torch.utils.data.DistributedSampler), "Lightning never replaces it"
    _trainer().fit(module, DataLoader(IndexDataset(30), sampler=s, batch_size=4))
    for epoch in (0, 1):
        got = [x for e, batch in module.seen if e == epoch for x in batch]
        assert got == epoch_of(30, 2, 1, epoch, seed=3)


def test_lightning_mid_epoch_resume_with_a_stateful_loader(tmp_path: Path) -> None:
    """A checkpoint mid-epoch resumes exactly, with reload_dataloaders_every_n_epochs=1."""
    callbacks = pytest.importorskip("lightning.pytorch.callbacks")
    module = _Recorder.module()
    every = callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, filename="{step}"
    )
    _trainer(enable_checkpointing=True, callbacks=[every]).fit(
        module, _stateful_loader(30, 2, 1)[1]
    )
    full = [x for _, batch in module.seen for x in batch]
    assert full == epoch_of(30, 2, 1, 0, seed=3) + epoch_of(30, 2, 1, 1, seed=3)
    for step in (3, 6):  # mid-epoch 0, mid-epoch 1
        resumed = _Recorder.module()
        _trainer(reload_dataloaders_every_n_epochs=1).fit(
            resumed, _stateful_loader(30, 2, 1)[1], ckpt_path=tmp_path / f"step={step}.ckpt"
        )
        head = [x for _, batch in module.seen[:step] for x in batch]
        assert head + [x for _, batch in resumed.seen for x in batch] == full, f"step {step}"


def test_lightning_resume_without_reload_is_exact(tmp_path: Path) -> None:
    """Lightning sizes every epoch by len(loader), measured once after restoring the state, and
    counts the epoch from the restored batch: len() is a whole epoch, so no reload is needed."""
    callbacks = pytest.importorskip("lightning.pytorch.callbacks")
    module = _Recorder.module()
    every = callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, filename="{step}"
    )
    _trainer(enable_checkpointing=True, callbacks=[every]).fit(
        module, _stateful_loader(30, 2, 1)[1]
    )
    resumed = _Recorder.module()
    _trainer().fit(resumed, _stateful_loader(30, 2, 1)[1], ckpt_path=tmp_path / "step=3.ckpt")
    assert module.seen[:3] + resumed.seen == module.seen
