"""compat="megatron": NVIDIA Megatron-LM's cyclic sampler, sequence for sequence.

The golden sequences are what Megatron-LM's own ``data_samplers.py`` (main, commit d98e8a6, torch
2.13 CPU) yields on each rank over successive ``iter()`` of one sampler object, which is what its
``cyclic_iter`` does; with ``MEGATRON_LM_DATA_SAMPLERS`` set, the oracle tests compare against
that file directly on a grid of layouts and resume points.
"""

from __future__ import annotations

from typing import Any

import pytest

from dataorder.llm.compat_megatron import uneven_micro_batches
from dataorder.llm.megatron import MegatronPretrainingRandomSampler as Random

# (N, mbs, dp, data_sharding, consumed) -> per rank, per pass
GOLDEN: dict[tuple[int, int, int, bool, int], list[list[list[list[int]]]]] = {
    (10, 2, 2, True, 0): [
        [[[0, 1], [3, 2]], [[1, 3], [2, 0]], [[0, 1], [3, 2]]],
        [[[4, 5], [7, 6]], [[5, 7], [6, 4]], [[4, 5], [7, 6]]],
    ],
    (10, 2, 2, False, 0): [
        [[[4, 7], [3, 0]], [[5, 1], [0, 9]], [[8, 1], [6, 0]]],
        [[[1, 5], [9, 8]], [[6, 2], [8, 3]], [[7, 5], [9, 4]]],
    ],
    (10, 2, 2, False, 12): [[[[0, 9]], [[8, 1], [6, 0]]], [[[8, 3]], [[7, 5], [9, 4]]]],
    (12, 1, 2, True, 0): [
        [[[2], [5], [3], [0], [1], [4]], [[1], [5], [2], [0], [3], [4]]],
        [[[8], [11], [9], [6], [7], [10]], [[7], [11], [8], [6], [9], [10]]],
    ],
    (12, 1, 2, False, 0): [
        [[[8], [5], [7], [2], [3], [11]], [[1], [6], [11], [5], [2], [10]]],
        [[[0], [9], [4], [10], [1], [6]], [[4], [8], [0], [3], [9], [7]]],
    ],
    (12, 1, 2, False, 14): [
        [[[6], [11], [5], [2], [10]], [[0], [3], [10], [6], [8], [4]]],
        [[[8], [0], [3], [9], [7]], [[9], [2], [5], [7], [1], [11]]],
    ],
    (10, 2, 3, True, 0): [
        [[[0, 1]], [[1, 0]], [[0, 1]]],
        [[[2, 3]], [[3, 2]], [[2, 3]]],
        [[[4, 5]], [[5, 4]], [[4, 5]]],
    ],
    (10, 1, 3, True, 12): [
        [[[2], [0]], [[0], [2], [1]]],
        [[[5], [3]], [[3], [5], [4]]],
        [[[8], [6]], [[6], [8], [7]]],
    ],
}


def _passes(n: int, mbs: int, dp: int, sharding: bool, consumed: int, rank: int, k: int) -> Any:
    s = Random(
        n, mbs, rank, dp, compat="megatron", data_sharding=sharding, consumed_samples=consumed
    )
    return [list(s) for _ in range(k)]


@pytest.mark.parametrize("key", list(GOLDEN), ids=[str(k) for k in GOLDEN])
def test_megatron_lm_golden_sequences(key: tuple[int, int, int, bool, int]) -> None:
    n, mbs, dp, sharding, consumed = key
    for rank, expected in enumerate(GOLDEN[key]):
        assert _passes(n, mbs, dp, sharding, consumed, rank, len(expected)) == expected


def test_sharded_is_nemo_with_seed_zero() -> None:
    for n, mbs, dp in ((10, 2, 2), (23, 3, 2), (40, 1, 4)):
        for r in range(dp):
            a = Random(n, mbs, r, dp, compat="megatron", data_sharding=True)
            b = Random(n, mbs, r, dp, compat="nemo", seed=0)
            assert [list(a) for _ in range(3)] == [list(b) for _ in range(3)]


def test_uneven_layouts_and_unsupported_options_are_refused() -> None:
    assert uneven_micro_batches(10, 2, 3)
    assert uneven_micro_batches(10, 1, 3)
    assert not uneven_micro_batches(12, 1, 2)
    with pytest.raises(ValueError, match=r"Megatron-LM gives some ranks one micro-batch more"):
        Random(10, 2, 0, 3, compat="megatron", data_sharding=False)
    Random(10, 2, 0, 3, compat="megatron", data_sharding=True)  # sharded has no such bug
    cases: list[tuple[dict[str, Any], str]] = [
        ({"seed": 1}, "seed must be 0 with compat='megatron'"),
        ({"drop_last": False}, "drop_last must be True with compat='megatron'"),
        (
            {"drop_last": False, "global_batch_size": 4, "pad_samples_to_global_batch_size": True},
            "pad_samples_to_global_batch_size must be False with compat='megatron'",
        ),
        ({"global_batch_size": 12}, r"global_batch_size must be a divisor of Megatron-LM's epoch"),
        ({"compat": "megatron-lm"}, "compat must be None or one of 'default', 'nemo', 'megatron'"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            Random(**{"total_samples": 10, "micro_batch_size": 2, "data_parallel_rank": 0,
                      "data_parallel_size": 2, "compat": "megatron", **kwargs})  # fmt: skip


def test_state_round_trip_and_refusal_on_another_layout() -> None:
    s = Random(24, 2, 1, 2, compat="megatron", data_sharding=False)
    it = iter(s)
    head = [next(it) for _ in range(2)]
    state = s.state_dict()
    assert state["config.order"] == "megatron-strided"
    t = Random.from_state(state, rank=1)
    assert (t.compat, t.data_sharding) == ("megatron", False)
    assert head + list(t) == list(Random(24, 2, 1, 2, compat="megatron", data_sharding=False))
    with pytest.raises(ValueError, match="data_parallel_size"):
        Random(24, 2, 0, 4, compat="megatron", data_sharding=False).load_state_dict(state)
    # Megatron-LM's own resume: the run-wide consumed_train_samples
    assert s.consumed_samples == 8
    u = Random(24, 2, 1, 2, compat="megatron", data_sharding=False, consumed_samples=8)
    assert list(u) == list(it)


def test_random_seed_dataset_hook_gets_each_pass_epoch() -> None:
    class SeedDataset:
        def __init__(self) -> None:
            self.epochs: list[int] = []

        def set_epoch(self, epoch: int) -> None:
            self.epochs.append(epoch)

    ds = SeedDataset()
    s = Random(8, 2, 0, 2, compat="megatron", data_sharding=True, consumed_samples=8, dataset=ds)
    list(s)
    list(s)
    assert ds.epochs == [1, 2]  # Megatron-LM's PR #5014 test: consumed 8 of 8 is epoch 1


# -- the oracle: Megatron-LM's own file, when MEGATRON_LM_DATA_SAMPLERS points at it ---------------
def test_oracle_grid() -> None:
    from tests.llm.megatron_lm_oracle import cyclic_passes

    checked = refused = 0
    for n in range(1, 19):
        for mbs in range(1, 4):
            for dp in range(1, 4):
                if n < mbs * dp:
                    continue
                block = mbs * dp
                active = n - n % block
                for sharding in (True, False):
                    for consumed in sorted({0, block, active + block}):
                        for r in range(dp):
                            try:
                                ours = _passes(n, mbs, dp, sharding, consumed, r, 3)
                            except ValueError:
                                assert not sharding
                                assert uneven_micro_batches(n, mbs, dp)
                                refused += 1
                                continue
                            theirs = cyclic_passes(
                                n, consumed, mbs, r, dp, data_sharding=sharding, passes=3
                            )
                            assert ours == theirs, (n, mbs, dp, sharding, consumed, r)
                            checked += 1
    assert checked > 1000
    assert refused > 0
