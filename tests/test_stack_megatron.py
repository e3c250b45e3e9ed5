"""Megatron-LM ``--dataloader-type external`` as its loop drives it (examples/megatron_lm.py).

Megatron-LM's ``pretrain()`` needs CUDA and Megatron-LM is not on PyPI, so the example replays
its calls with a fake ``args``: the checkpoint's ``consumed_train_samples`` is restored before the
provider builds every rank's iterator, each iteration takes ``global_batch / (mbs x dp)``
micro-batches per rank and adds the global batch to the count; the job is rebuilt on DP 4 -> 2
-> 3. ``compat="megatron"`` is compared with the golden sequences taken from Megatron-LM's own
``data_samplers.py`` (tests/test_megatron_lm_compat.py), crossing epochs as its ``cyclic_iter``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dataorder.integrations.megatron_lm import EpochStream, external_provider
from test_megatron_lm_compat import GOLDEN

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "megatron_lm.py"


def test_the_example_reads_every_sample_once_per_epoch_across_dp_4_2_3() -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    for order in ("cyclic", "single"):
        assert f"{order}: DP 2, consumed_train_samples 36 -> 84" in out
        for epoch in (0, 1):
            assert f"{order}: epoch {epoch}: 60 samples, each exactly once" in out
    assert "single: equal to Megatron's sampler at consumed_samples 0, 12, 36 on 2 ranks" in out


def _args(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(consumed_valid_samples=0, global_batch_size=None, **kw)


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_compat_megatron_is_megatrons_cyclic_order(key: tuple[int, int, int, bool, int]) -> None:
    n, mbs, dp, sharding, consumed = key
    for rank in range(dp):
        args = _args(micro_batch_size=mbs, consumed_train_samples=consumed, data_sharding=sharding)
        provider = external_provider(
            lambda _: (list(range(n)), None, None),
            compat="megatron",
            collate_fn=list,
            get_args=lambda args=args: args,
            data_parallel=lambda rank=rank: (rank, dp),
        )
        train = provider(None)[0]
        want = [b for one_pass in GOLDEN[key][rank] for b in one_pass]
        assert [next(train) for _ in want] == want


def test_the_valid_iterator_starts_at_consumed_valid_samples() -> None:
    args = _args(micro_batch_size=2, consumed_train_samples=0)
    args.consumed_valid_samples = 8
    provider = external_provider(
        lambda _: (list(range(20)), list(range(16)), None),
        order="single",
        collate_fn=list,
        get_args=lambda: args,
        data_parallel=lambda: (1, 2),
    )
    _, valid, test = provider(None)
    assert isinstance(valid, EpochStream)
    assert test is None
    assert [next(valid) for _ in range(3)] == [[10, 11], [14, 15], [2, 3]]  # into epoch 1


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="order must be one of"):
        external_provider(lambda _: (None, None, None), order="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="order must be 'cyclic' with compat='megatron'"):
        external_provider(lambda _: (None, None, None), order="single", compat="megatron")
