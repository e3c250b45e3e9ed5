"""Where another library's checkpoint puts the cursor, against the loop contract's rules.

A foreign checkpoint (torchdata's ``{"yielded": k}``, NeMo Automodel's ``{"epoch",
"batches_yielded"}``) is placed where that library's own sampler continues. One corner differs
from the cursor's own states (NOTE [ The loop contract ]): a dataorder state of an earlier epoch,
loaded after the loop said ``set_epoch(e)`` and before any batch, keeps ``e``'s start (with a
warning); a NeMo state of an earlier epoch is placed at its own epoch and step, silently, because
NeMo's sampler continues the epoch its state names.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.parallel.distributed import DistributedSampler
from dataorder.testing import run_epoch

DATASET = BaseMultiresolutionDataset.from_bucket_ids(
    np.arange(30) % 3, resolutions=[(64, 64), (128, 64), (64, 128)]
)


def _nemo() -> SequentialBucketSampler:
    return SequentialBucketSampler(
        DATASET, base_batch_size=2, drop_last=False, num_replicas=2, rank=1, seed=4, compat="nemo"
    )


def _torch() -> DistributedSampler:
    return DistributedSampler(range(40), num_replicas=2, rank=1, seed=5, compat="torch")


def _epoch(make: object, epoch: int) -> list[object]:
    s = make()  # type: ignore[operator]
    s.set_epoch(epoch)
    return run_epoch(s)


def test_a_nemo_state_of_an_earlier_epoch_loaded_after_set_epoch_lands_at_its_own_epoch() -> None:
    full1 = _epoch(_nemo, 1)
    s = _nemo()
    s.set_epoch(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # placed silently: no steps are skipped
        s.load_state_dict({"epoch": 1, "batches_yielded": 3})
    assert (s.epoch, s.next_start()) == (1, (1, 3))
    assert run_epoch(s) == full1[3:]
    assert run_epoch(s) == []  # the loop owns the loaded epoch: only set_epoch moves it
    s.set_epoch(2)
    assert run_epoch(s) == _epoch(_nemo, 2)


def test_our_state_of_the_same_position_keeps_the_loops_epoch_instead() -> None:
    s = _nemo()
    s.set_epoch(2)
    ours = _nemo().state_at(1, 3)  # the dataorder state at the NeMo state's position
    with pytest.warns(UserWarning, match="the loop set epoch 2 before loading a state of epoch 1"):
        s.load_state_dict(ours)
    assert (s.epoch, s.next_start()) == (2, (2, 0))
    assert run_epoch(s) == _epoch(_nemo, 2)


def test_a_nemo_state_state_after_counts_from_its_own_epoch() -> None:
    s = _nemo()
    s.set_epoch(2)
    after = s.state_after({"epoch": 1, "batches_yielded": 3}, 2)
    assert after == _nemo().state_at(1, 5)
    assert s.epoch == 2  # nothing moved


def test_a_torchdata_state_lands_in_the_epoch_the_loop_set() -> None:
    full2 = _epoch(_torch, 2)
    s = _torch()
    s.set_epoch(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.load_state_dict({"yielded": 7})
    assert (s.epoch, s.next_start()) == (2, (2, 7))
    assert run_epoch(s) == full2[7:]
    t = _torch()
    run_epoch(t)  # a whole pass of epoch 0 without set_epoch: the next pass would read epoch 1
    t.load_state_dict({"yielded": 4})
    assert (t.epoch, t.next_start()) == (0, (0, 4))
    assert t.state_after({"yielded": 4}, 3) == _torch().state_at(0, 7)
