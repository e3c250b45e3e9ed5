"""HF Transformers Trainer options that change what a step holds, in the Trainer's own loop.

One process (the loop, its checkpoints and ``train(resume_from_checkpoint=...)`` are the stock
Trainer's; two processes run in tests/integrations/test_hf_trainer.py). Each option is crossed
with a per-index sampler and both Megatron batch samplers:

* ``remove_unused_columns`` (on by default): an item ``{idx, x, length}`` trains a model whose
  ``forward(idx, x)`` does not take ``length``; off, the stock Trainer's crash is kept.
* accumulation against per-device batch: a checkpoint saved at 2 x accumulation 2 resumes at
  4 x 1 (and back) reading exactly what the uninterrupted run read after it.
* ``dataloader_drop_last`` with a short last batch (per-index sampler; a batch sampler refuses it).
* ``max_steps`` that stops mid-epoch, resumed by a run of whole epochs.

Skipped without transformers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import torch
from torch import nn

from dataorder.integrations.hf_trainer import (
    RECORD_VERSION,
    STATE_FILE,
    check_resume,
    loader_batches,
    step_state,
)
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.parallel.distributed import DistributedSampler


class Items(torch.utils.data.Dataset[dict[str, Any]]):
    """``{idx, x, length}``: ``length`` is a column the model's ``forward`` does not take."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"idx": i, "x": torch.full((4,), float(i) / self.n), "length": i % 5 + 1}


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.seen: list[int] = []

    def forward(self, idx: torch.Tensor, x: torch.Tensor) -> dict[str, torch.Tensor]:
        self.seen += idx.tolist()
        return {"loss": (self.lin(x) - x.sum(1, keepdim=True)).pow(2).mean()}


def _sampler_fn(kind: str, micro: int) -> Callable[[Any, int, int], Any]:
    def make(ds: Any, rank: int, world: int) -> Any:
        if kind == "distributed":
            return DistributedSampler(ds, num_replicas=world, rank=rank, seed=1234)
        if kind == "blend":  # two halves of the dataset at fixed weights, 4 samples a step
            half = len(ds) // 2
            return BlendedSampler([half, len(ds) - half], [1, 1], micro, rank, world, 4, seed=0)
        cls = MegatronPretrainingRandomSampler if kind == "random" else MegatronPretrainingSampler
        extra = {"seed": 1234} if kind == "random" else {}
        return cls(len(ds), micro, rank, world, **extra)

    return make


def _run(
    out: Path,
    kind: str,
    *,
    per_device: int = 2,
    accumulation: int = 1,
    n: int = 24,
    resume: str | None = None,
    **options: Any,
) -> list[int]:
    """Train 2 epochs (a checkpoint every step) and return the sample ids trained, in order."""
    from transformers import TrainingArguments
    from transformers.utils import logging as hf_logging

    from dataorder.integrations.hf_trainer import DataorderTrainer

    hf_logging.set_verbosity_error()
    options = {"save_strategy": "steps", "save_steps": 1, **options}
    args = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        num_train_epochs=2,
        save_only_model=False,
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
        **options,
    )
    model = Tiny()
    trainer = DataorderTrainer(
        model=model, args=args, train_dataset=Items(n), sampler_fn=_sampler_fn(kind, per_device)
    )
    trainer.train(resume_from_checkpoint=resume)
    return model.seen


KINDS = [
    "random",
    pytest.param("distributed", marks=pytest.mark.slow),
    pytest.param("single", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("kind", KINDS)
def test_unused_columns_are_removed_for_every_sampler(tmp_path: Path, kind: str) -> None:
    """A batch sampler's loader passed ``length`` on to ``forward`` (unexpected keyword)."""
    seen = _run(tmp_path, kind, save_strategy="no")
    assert sorted(seen[:24]) == sorted(seen[24:]) == list(range(24))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["random", "distributed"])
def test_unused_columns_kept_reach_forward_as_in_the_stock_trainer(
    tmp_path: Path, kind: str
) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'length'"):
        _run(tmp_path, kind, save_strategy="no", remove_unused_columns=False)


def test_the_record_holds_the_last_optimizer_steps_position(tmp_path: Path) -> None:
    """The loader reads a micro-batch ahead: 0.3.0 recorded consumed=6 after one step of 4."""
    _run(tmp_path, "random", accumulation=2, max_steps=1)
    record = json.loads((tmp_path / "checkpoint-1" / STATE_FILE).read_text())
    assert record["version"] == RECORD_VERSION
    assert (record["sampler"]["epoch"], record["sampler"]["consumed"]) == (0, 4)


SPLITS = [
    pytest.param("random", (2, 2), (4, 1), 2, id="random-2x2-to-4x1-mid-epoch"),
    pytest.param("random", (4, 1), (2, 2), 6, marks=pytest.mark.slow, id="random-4x1-to-2x2-end"),
    pytest.param("single", (2, 2), (4, 1), 8, marks=pytest.mark.slow, id="single-2x2-to-4x1"),
    pytest.param(
        "distributed", (2, 2), (4, 1), 4, marks=pytest.mark.slow, id="distributed-2x2-to-4x1"
    ),
    pytest.param(
        "distributed", (1, 4), (2, 2), 9, marks=pytest.mark.slow, id="distributed-1x4-to-2x2"
    ),
]


@pytest.mark.parametrize(("kind", "saved", "resumed", "step"), SPLITS)
def test_a_resume_with_the_global_batch_split_otherwise_is_exact(
    tmp_path: Path, kind: str, saved: tuple[int, int], resumed: tuple[int, int], step: int
) -> None:
    """Saved at per-device x accumulation ``saved``, resumed at ``resumed`` (6 steps of 4 an
    epoch): 0.3.0 refused it (``consumed=6 is not a multiple of ... 4``)."""
    full = _run(tmp_path, kind, per_device=saved[0], accumulation=saved[1])
    assert len(full) == 48
    after = _run(
        tmp_path / "b",
        kind,
        per_device=resumed[0],
        accumulation=resumed[1],
        resume=str(tmp_path / f"checkpoint-{step}"),
    )
    assert after == full[4 * step :]


def test_another_cut_of_the_epoch_into_steps_is_refused(tmp_path: Path) -> None:
    """A record whose position is not where the Trainer's skip from its ``global_step`` lands
    on this layout (here an edited step count) is refused, naming both positions."""
    _run(tmp_path, "distributed", per_device=4, n=25, max_steps=3)
    ckpt = tmp_path / "checkpoint-3"
    record = json.loads((ckpt / STATE_FILE).read_text())
    assert record["sampler"]["consumed"] == 12
    record["global_step"] = 2
    (ckpt / STATE_FILE).write_text(json.dumps(record))
    fresh = DistributedSampler(Items(25), num_replicas=1, rank=0, seed=1234)
    with pytest.raises(
        ValueError, match=r"skip from global_step=2 lands at \{'epoch': 0, 'consumed': 8\}"
    ):
        check_resume(ckpt, fresh, _args(per_device=4, accumulation=1))


def test_a_blend_resumes_in_the_trainer(tmp_path: Path) -> None:
    """A blend's state carries the tag of the schedule it trained: the resume check zeroed the
    position and kept the tag, so every blend (fixed weights too) was refused on resume."""
    full = _run(tmp_path, "blend", accumulation=2, n=40, max_steps=4, save_steps=2)
    assert len(full) == 16
    after = _run(
        tmp_path / "b",
        "blend",
        accumulation=2,
        n=40,
        max_steps=4,
        save_steps=2,
        resume=str(tmp_path / "checkpoint-2"),
    )
    assert after == full[8:]


def _args(**fields: Any) -> Any:
    from types import SimpleNamespace

    base = {
        "per_device_train_batch_size": fields.pop("per_device"),
        "gradient_accumulation_steps": fields.pop("accumulation"),
        "world_size": 1,
        "dataloader_drop_last": fields.pop("dataloader_drop_last", False),
        "ignore_data_skip": False,
    }
    return SimpleNamespace(**{**base, **fields})


def test_a_record_of_0_3_0_still_loads(tmp_path: Path) -> None:
    """0.3.0 wrote the sampler's read-ahead state and no version: configuration and global batch
    are checked, the position (a micro-batch past the step) is not."""
    ahead = MegatronPretrainingRandomSampler(24, 2, 0, 1, seed=1234)
    batches = iter(ahead)
    for _ in range(3):  # one step of 2 x accumulation 2, and the loader's read-ahead
        next(batches)
    record = {"sampler": ahead.state_dict(), "positions_per_step": 4, "global_step": 1}
    (tmp_path / STATE_FILE).write_text(json.dumps(record))
    fresh = MegatronPretrainingRandomSampler(24, 4, 0, 1, seed=1234)
    assert check_resume(tmp_path, fresh, _args(per_device=4, accumulation=1))
    other = MegatronPretrainingRandomSampler(24, 4, 0, 1, seed=5)
    with pytest.raises(ValueError, match="seed is 1234 in the state but 5"):
        check_resume(tmp_path, other, _args(per_device=4, accumulation=1))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"version": 3}, r"\['version'\] must be 2 or absent \(0.3.0\)"),
        ({"version": RECORD_VERSION, "global_step": "1"}, r"\['global_step'\] must be a non-neg"),
        ({"version": RECORD_VERSION, "global_step": None}, r"\['global_step'\] must be a non-neg"),
        (
            {"version": RECORD_VERSION, "global_step": 1, "update_steps_per_epoch": 0},
            r"\['update_steps_per_epoch'\] must be a positive int",
        ),
    ],
)
def test_a_record_of_another_version_is_refused_by_name(
    tmp_path: Path, edit: dict[str, Any], message: str
) -> None:
    sampler = MegatronPretrainingRandomSampler(24, 4, 0, 1, seed=1234)
    record = {"sampler": sampler.state_dict(), "positions_per_step": 4, **edit}
    (tmp_path / STATE_FILE).write_text(json.dumps(record))
    with pytest.raises(ValueError, match=message):
        check_resume(tmp_path, sampler, _args(per_device=4, accumulation=1))


@pytest.mark.parametrize(
    ("drop_last", "resumed"),
    [(True, (4, 1)), pytest.param(False, (2, 2), marks=pytest.mark.slow)],
    ids=["drop", "keep"],
)
def test_dataloader_drop_last_resumes_exactly(
    tmp_path: Path, drop_last: bool, resumed: tuple[int, int]
) -> None:
    """26 samples in batches of 4: 6 or 7 batches an epoch; a resume mid-epoch and one at the
    epoch's end read what the uninterrupted run read after it (kept: at 2 x 2 too, whose 13
    batches make the same 7 steps)."""
    full = _run(tmp_path, "distributed", per_device=4, n=26, dataloader_drop_last=drop_last)
    per_epoch = 24 if drop_last else 26
    assert len(full) == 2 * per_epoch
    assert len(set(full[:per_epoch])) == per_epoch  # the short batch dropped, nothing repeated
    steps = 6 if drop_last else 7
    for step in (2, steps):
        after = _run(
            tmp_path / f"r{step}",
            "distributed",
            per_device=resumed[0],
            accumulation=resumed[1],
            n=26,
            dataloader_drop_last=drop_last,
            resume=str(tmp_path / f"checkpoint-{step}"),
        )
        assert after == full[min(4 * step, per_epoch) :], step  # the last step may be short


def test_another_split_that_drops_another_tail_is_refused(tmp_path: Path) -> None:
    """Dropping the short last batch, 4 x 1 cuts 26 samples into 6 steps, 2 x 2 into 7 (13
    batches of 2, none dropped): the Trainer's skip from global_step would land in another
    epoch."""
    _run(tmp_path, "distributed", per_device=4, n=26, dataloader_drop_last=True, max_steps=2)
    fresh = DistributedSampler(Items(26), num_replicas=1, rank=0, seed=1234)
    args = _args(per_device=2, accumulation=2, dataloader_drop_last=True)
    with pytest.raises(ValueError, match=r"cut an epoch into 6 steps .* update_steps_per_epoch=7"):
        check_resume(tmp_path / "checkpoint-2", fresh, args)


def test_a_batch_sampler_refuses_dataloader_drop_last(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"pass drop_last= to it\); got dataloader_drop_last=True"):
        _run(tmp_path, "random", save_strategy="no", dataloader_drop_last=True)


@pytest.mark.parametrize("kind", ["random", pytest.param("distributed", marks=pytest.mark.slow)])
def test_max_steps_mid_epoch_then_whole_epochs_resume_exactly(tmp_path: Path, kind: str) -> None:
    full = _run(tmp_path / "full", kind, save_strategy="no")
    first = _run(tmp_path, kind, max_steps=5)  # 12 steps of 2 an epoch
    assert first == full[:10]
    assert _run(tmp_path / "b", kind, resume=str(tmp_path / "checkpoint-5")) == full[10:]


@pytest.mark.parametrize(
    ("kind", "drop_last"),
    [("random", False), ("distributed", False), ("distributed", True)],
)
def test_loader_batches_is_the_trainers_loader_length(kind: str, drop_last: bool) -> None:
    from transformers import TrainingArguments

    from dataorder.integrations.hf_trainer import DataorderTrainer

    args = TrainingArguments(
        output_dir="unused",
        per_device_train_batch_size=4,
        use_cpu=True,
        report_to=[],
        dataloader_drop_last=drop_last,
    )
    trainer = DataorderTrainer(
        model=Tiny(), args=args, train_dataset=Items(26), sampler_fn=_sampler_fn(kind, 4)
    )
    loader = trainer.get_train_dataloader()
    assert loader_batches(trainer.dataorder_sampler, args) == len(loader)
    state = step_state(trainer.dataorder_sampler, args, len(loader))  # one epoch's steps
    assert (state["epoch"], state["consumed"]) == (1, 0)
