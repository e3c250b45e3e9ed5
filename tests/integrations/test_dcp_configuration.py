"""A state loaded through torch.distributed.checkpoint into another configuration names the field.

DCP loads only the keys of the loading object's own state (its template) and drops the others,
so a bucket sampler saved with ``bucket_order="interleaved"`` (which records
``config.interleaved``) reaches a sequential sampler without that key: the refusal must still
name what changed, not blame an edit or another dataorder.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.integrations.dcp import OrderState
from dataorder.integrations.nemo_automodel import DiffusionBucketLoader
from tests.helpers.stack_samplers import bucket_dataset, collate_list


def _bucket(order: str, rank: int = 0, size: int = 2) -> SequentialBucketSampler:
    return SequentialBucketSampler(
        bucket_dataset(),
        base_batch_size=2,
        drop_last=False,
        seed=6,
        num_replicas=size,
        rank=rank,
        bucket_order=order,
    )


def _save(obj: Any, path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    dcp.save({"data": obj}, checkpoint_id=str(path), no_dist=True)


def _load(obj: Any, path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    dcp.load({"data": obj}, checkpoint_id=str(path), no_dist=True)


def test_an_interleaved_state_loaded_into_a_sequential_sampler_names_the_order(
    tmp_path: Path,
) -> None:
    saved = _bucket("interleaved")
    next(iter(saved))
    _save(OrderState(saved), tmp_path)
    with pytest.raises(ValueError, match=r"interleave_unit .* is not set here") as info:
        _load(OrderState(_bucket("sequential")), tmp_path)
    assert "edited or written by an incompatible dataorder" not in str(info.value)
    same = _bucket("interleaved", rank=1)
    _load(OrderState(same), tmp_path)  # the same configuration still loads
    assert same.state_dict() == saved.state_dict()


def test_a_sequential_state_loaded_into_an_interleaved_sampler_names_the_key(
    tmp_path: Path,
) -> None:
    from torch.distributed.checkpoint.api import CheckpointException

    _save(OrderState(_bucket("sequential")), tmp_path)
    with pytest.raises(CheckpointException, match=r"config\.interleaved"):  # DCP's own refusal
        _load(OrderState(_bucket("interleaved")), tmp_path)


@dataclasses.dataclass
class _Loader(DiffusionBucketLoader):
    """NeMo's loader config over the stack tests' bucket dataset (no NeMo install needed)."""

    def make_dataset(self) -> Any:
        return bucket_dataset()

    def make_collate_fn(self) -> Any:
        return collate_list


def test_nemos_distributed_loader_with_its_bucket_order_changed_names_it(tmp_path: Path) -> None:
    def build(order: str) -> Any:
        config = _Loader("unused", num_workers=0, bucket_order=order)
        config.distributed_checkpointing = True
        return config.build(dp_rank=0, dp_world_size=2, batch_size=2)

    saved = build("interleaved")
    next(iter(saved.dataloader))
    _save(saved.dataloader, tmp_path)
    with pytest.raises(ValueError, match=r"interleave_unit .* is not set here"):
        _load(build("sequential").dataloader, tmp_path)
