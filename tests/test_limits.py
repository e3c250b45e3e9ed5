"""Absurd sizes and seeds are refused up front instead of overflowing later.

Positions are int64 and permutations work on 62-bit domains; seeds are stored in states that
must stay within MAX_STATE_BYTES (576).
"""

from __future__ import annotations

import json

import pytest

from dataorder import (
    BaseMultiresolutionDataset,
    DistributedSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    Permutation,
    SequentialBucketSampler,
)


def test_domain_cap() -> None:
    assert Permutation(2**62, key=1).index(2**62 - 1) < 2**62
    with pytest.raises(ValueError, match=r"n must be an int in \[1, 4611686018427387904\]"):
        Permutation(2**62 + 1, key=1)
    for cls in (MegatronPretrainingSampler, MegatronPretrainingRandomSampler):
        with pytest.raises(ValueError, match="got total_samples=18446744073709551616"):
            cls(2**64, 2, 0, 2)


def test_seed_caps_keep_states_small() -> None:
    # one seed range for every sampler: [0, MAX_SEED]
    ds = BaseMultiresolutionDataset.from_bucket_ids([0, 0, 1], resolutions=[(64, 64), (64, 128)])
    for seed in (2**63, 2**64):
        with pytest.raises(ValueError, match=f"got seed={seed}"):
            SequentialBucketSampler(ds, base_batch_size=1, seed=seed, num_replicas=1, rank=0)
        with pytest.raises(ValueError, match=f"got seed={seed}"):
            DistributedSampler(range(10), num_replicas=1, rank=0, seed=seed)
        with pytest.raises(ValueError, match=f"got seed={seed}"):
            MegatronPretrainingRandomSampler(10, 1, 0, 1, seed=seed)
    big = SequentialBucketSampler(ds, base_batch_size=1, seed=2**63 - 1, num_replicas=1, rank=0)
    assert len(json.dumps(big.state_dict(), separators=(",", ":"))) <= 512
