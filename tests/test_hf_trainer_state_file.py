"""``check_resume`` on a malformed ``dataorder.json``, in one process (no transformers needed:
the file is read before the Trainer is). The resume itself is tested in
tests/test_stack_hf_trainer.py."""

from __future__ import annotations

import json
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
