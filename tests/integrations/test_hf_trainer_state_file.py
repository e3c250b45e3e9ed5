"""``check_resume`` on a malformed ``dataorder.json``, in one process (no transformers needed:
the file is read before the Trainer is). The resume itself is tested in
tests/integrations/test_hf_trainer.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dataorder.integrations.hf_trainer import STATE_FILE, check_resume
from dataorder.parallel.distributed import DistributedSampler

ARGS = SimpleNamespace(per_device_train_batch_size=4, world_size=1, gradient_accumulation_steps=1)


def _sampler() -> DistributedSampler:
    return DistributedSampler(range(24), num_replicas=1, rank=0, seed=1234)


def _record() -> dict[str, Any]:
    return {"sampler": _sampler().state_dict(), "positions_per_step": 4, "describe": "x"}


def _check(tmp_path: Path, text: str) -> bool:
    (tmp_path / STATE_FILE).write_text(text)
    return check_resume(tmp_path, _sampler(), ARGS)


def test_a_well_formed_record_is_checked(tmp_path: Path) -> None:
    assert _check(tmp_path, json.dumps(_record()))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([1, 2], "must hold a JSON object (as DataorderTrainer writes it); got [1, 2]"),
        ({"positions_per_step": 4}, "must hold the key 'sampler' (as DataorderTrainer"),
        ({"sampler": {}}, "must hold the key 'positions_per_step' (as DataorderTrainer"),
        ({"sampler": [], "positions_per_step": 4}, "['sampler'] must be a JSON object"),
        ({"sampler": {}, "positions_per_step": "4"}, "['positions_per_step'] must be a positive"),
        ({"sampler": {}, "positions_per_step": True}, "['positions_per_step'] must be a positive"),
    ],
)
def test_a_malformed_record_names_the_file_and_the_key(
    tmp_path: Path, content: object, message: str
) -> None:
    """A record without "sampler" raised a bare KeyError('sampler'), a list a TypeError."""
    with pytest.raises(ValueError) as err:
        _check(tmp_path, json.dumps(content))
    assert str(err.value).startswith(str(tmp_path / STATE_FILE))
    assert message in str(err.value)


def test_a_record_that_is_not_json_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"dataorder\.json must hold JSON"):
        _check(tmp_path, "{not json")


def test_a_record_without_its_description_still_names_the_global_batch(tmp_path: Path) -> None:
    record = _record()
    del record["describe"]  # only the refusal message reads it
    record["positions_per_step"] = 8
    with pytest.raises(ValueError, match="read 8 samples per optimizer step"):
        _check(tmp_path, json.dumps(record))


# -- a record of a mixture: the step's own state, every key (the mixture tag) included ----------
def _v2_record(sampler: Any, args: Any, global_step: int) -> dict[str, Any]:
    """The record DataorderTrainer's on_save writes at ``global_step``."""
    from dataorder.integrations.hf_trainer import (
        RECORD_VERSION,
        positions_per_step,
        step_state,
        update_steps_per_epoch,
    )

    return {
        "version": RECORD_VERSION,
        "sampler": step_state(sampler, args, global_step),
        "positions_per_step": positions_per_step(sampler, args),
        "update_steps_per_epoch": update_steps_per_epoch(sampler, args),
        "global_step": global_step,
    }


def _split(per_device: int, accumulation: int) -> SimpleNamespace:
    return SimpleNamespace(
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        world_size=1,
        dataloader_drop_last=False,
        ignore_data_skip=False,
    )


def _blend(micro: int) -> Any:
    from dataorder.llm.blend import BlendedSampler

    return BlendedSampler([20, 20], [1, 1], micro, 0, 1, 4, seed=0)


def _packed_mixture(micro: int) -> Any:
    import numpy as np

    from dataorder.llm.packing import PackedSampler

    rng = np.random.default_rng(1)
    web = rng.integers(1, 64, 40).tolist()
    code = rng.integers(1, 140, 24).tolist()
    return PackedSampler(
        None, 64, micro, 0, 1, 4, seed=2, mixture=([web, code], [3, 1]), chunk=4, window=16
    )


@pytest.mark.parametrize("make", [_blend, _packed_mixture], ids=["blend", "packed-mixture"])
@pytest.mark.parametrize("resumed", [(2, 2), (4, 1)], ids=["same-split", "other-split"])
def test_a_mixture_record_is_resumed_on_the_same_global_batch(
    tmp_path: Path, make: Callable[[int], Any], resumed: tuple[int, int]
) -> None:
    """A mixture's state carries a tag of the schedule trained through its position: the check
    zeroed the position and kept the tag, refusing every blend and packed mixture."""
    sampler = make(2)
    batches = iter(sampler)
    for _ in range(5):  # two steps of 2 x accumulation 2, and the loader's read-ahead
        next(batches)
    record = _v2_record(sampler, _split(2, 2), 2)
    assert record["sampler"]["consumed"] == 8
    (tmp_path / STATE_FILE).write_text(json.dumps(record))
    assert check_resume(tmp_path, make(resumed[0]), _split(*resumed))


def test_a_mixture_log_record_holds_the_tag_of_the_step_not_the_read_ahead() -> None:
    """The record copied the loader's read-ahead state and replaced its position only: the
    ``mixture`` tag described 3.5 global batches when the step was at 2."""
    from dataorder.integrations.hf_trainer import step_state
    from dataorder.llm.blend import BlendedSampler
    from dataorder.llm.mixlog import MixtureLog

    log = MixtureLog([1, 1])
    log.set_weights(2, [1, 3])
    log.set_weights(3, [3, 1])

    def make() -> BlendedSampler:
        return BlendedSampler([40, 30], log, 2, 0, 1, 4, seed=0, total_samples=40)

    ahead, trained = make(), make()
    batches = iter(ahead)
    for _ in range(7):  # two steps of 2 x accumulation 2, and 3 micro-batches read ahead
        next(batches)
    batches = iter(trained)
    for _ in range(4):  # exactly the two steps
        next(batches)
    record = step_state(ahead, _split(2, 2), 2)
    assert record == trained.state_dict()
    fresh = make()
    fresh.load_state_dict(record)
    assert fresh.state_dict() == trained.state_dict()
