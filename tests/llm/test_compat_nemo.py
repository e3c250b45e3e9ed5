"""NeMo Automodel compatibility of the Megatron samplers.

* ``MegatronPretrainingSampler`` yields NeMo's sequences wherever NeMo's are well formed; where
  NeMo yields a short or empty list or negative pad indices, ours has ``None`` in those slots,
  and where NeMo yields micro-batches beyond its own ``len()`` (B11), ours stops at that ``len()``.
* ``MegatronPretrainingRandomSampler(compat="nemo")`` yields exactly NeMo's sequences, epoch after
  epoch, and from any ``consumed_samples``.

The worked examples of nemo_behaviour.md run everywhere; the oracle tests compare with NeMo's own
file and skip unless ``nemo-automodel==0.7.0`` is installed (``tests/helpers/nemo_oracle.py``).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from tests.helpers import nemo_oracle

SAMPLER_FILE = "components/datasets/llm/megatron/sampler.py"


def _nemo() -> Any:
    return nemo_oracle.load(SAMPLER_FILE)


def _as_ours(micro_batch: list[int], mbs: int) -> list[int | None]:
    """NeMo's micro-batch as ours: negative pads become None, short lists are filled with None."""
    return [x if x >= 0 else None for x in micro_batch] + [None] * (mbs - len(micro_batch))


# -- worked examples (no oracle needed) ---------------------------------------------------------
def test_compat_worked_example() -> None:
    """N=10, mbs=2, dp=2, seed=0 (nemo_behaviour.md section 5)."""
    samplers = [
        MegatronPretrainingRandomSampler(10, 2, r, 2, seed=0, compat="nemo") for r in range(2)
    ]
    assert [len(s) for s in samplers] == [2, 2]
    assert [list(s) for s in samplers] == [[[0, 1], [3, 2]], [[4, 5], [7, 6]]]
    assert [list(s) for s in samplers] == [[[1, 3], [2, 0]], [[5, 7], [6, 4]]]
    assert samplers[0].samples_dropped == 2  # 8 and 9 are never used
    resumed = MegatronPretrainingRandomSampler(
        10, 2, 1, 2, seed=0, compat="nemo", consumed_samples=12
    )
    assert (resumed.epoch, list(resumed)) == (1, [[6, 4]])


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        (
            {"drop_last": False, "global_batch_size": 4, "pad_samples_to_global_batch_size": True},
            ValueError,
            "pad_samples_to_global_batch_size must be False with compat='nemo' (NeMo's random "
            "sampler cannot pad); got pad_samples_to_global_batch_size=True",
        ),
        (
            {"drop_last": False},
            ValueError,
            "drop_last must be True with compat='nemo' when micro_batch_size x "
            "data_parallel_size = 2 x 2 = 4 > 1; got drop_last=False",
        ),
        (
            {"global_batch_size": 16, "total_samples": 26},
            ValueError,
            "global_batch_size must be a divisor of NeMo's epoch with compat='nemo' "
            "(total_samples // 4 x 4 = 24 samples; NeMo would end each epoch with a partial "
            "global batch), or None; got global_batch_size=16",
        ),
        (
            {"data_sharding": True},
            ValueError,
            "data_sharding must be False with compat='nemo' (NeMo's static shards are part of "
            "that mode); got data_sharding=True",
        ),
        (
            {"total_samples": 3},
            ValueError,  # NeMo: ZeroDivisionError
            "total_samples must be at least one micro-batch per rank",
        ),
    ],
)
def test_compat_restrictions(kwargs: dict[str, Any], exc: type[Exception], message: str) -> None:
    args: dict[str, Any] = {
        "total_samples": 10,
        "micro_batch_size": 2,
        "data_parallel_rank": 0,
        "data_parallel_size": 2,
        "compat": "nemo",
        **kwargs,
    }
    with pytest.raises(exc) as info:
        MegatronPretrainingRandomSampler(**args)
    assert str(info.value).startswith(message)


def test_compat_allows_what_nemo_allows() -> None:
    one = MegatronPretrainingRandomSampler(7, 1, 0, 1, drop_last=False, compat="nemo", seed=3)
    assert sorted(x for mb in one for x in mb if x is not None) == list(range(7))
    gbs = MegatronPretrainingRandomSampler(26, 2, 0, 2, global_batch_size=12, compat="nemo")
    assert len(gbs) == len(list(gbs)) == 3 * 2  # NeMo's epoch of 24 = two global batches


def test_compat_is_not_elastic() -> None:
    s = MegatronPretrainingRandomSampler(40, 2, 0, 4, compat="nemo")
    next(iter(s))
    state = s.state_dict()
    assert (state["config.data_parallel_size"], state["config.micro_batch_size"]) == (4, 2)
    with pytest.raises(ValueError, match="data_parallel_size is 4 in the state but 2"):
        MegatronPretrainingRandomSampler(40, 2, 0, 2, compat="nemo").load_state_dict(state)
    with pytest.raises(ValueError, match="micro_batch_size is 2 in the state but 1"):
        MegatronPretrainingRandomSampler(40, 1, 0, 4, compat="nemo").load_state_dict(state)
    with pytest.raises(ValueError, match="order is 'nemo' in the state but 'global'"):
        MegatronPretrainingRandomSampler(40, 2, 0, 4).load_state_dict(state)


def test_compat_seed_plus_epoch_always_fits_torch() -> None:
    # the largest seed at the largest epoch: seed + epoch stays below 2**64, as torch requires
    s = MegatronPretrainingRandomSampler(8, 1, 0, 1, seed=2**63 - 1, compat="nemo")
    s.set_epoch(2**32 - 1)
    assert sorted(i for b in s for i in b) == list(range(8))
    with pytest.raises(ValueError, match=r"epoch must be an int in \[0, 4294967295\]"):
        s.set_epoch(2**32)
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 9223372036854775807\]"):
        MegatronPretrainingRandomSampler(8, 1, 0, 1, seed=2**63, compat="nemo")


# -- oracle: NeMo's own sampler file ------------------------------------------------------------
GRID = list(
    itertools.product(
        (1, 2, 5, 9, 16, 23, 40),  # total_samples
        (1, 2, 3),  # micro_batch_size
        (1, 2, 4),  # data_parallel_size
        (None, 1, 2),  # global batch = this many blocks
        (True, False),  # drop_last
        (False, True),  # pad
    )
)


def _configs() -> list[tuple[int, int, int, int | None, bool, bool]]:
    out = []
    for n, mbs, dp, units, drop_last, pad in GRID:
        block = mbs * dp
        gbs = None if units is None else units * block
        if pad and (gbs is None or drop_last):
            continue  # NeMo refuses pad without gbs; pad with drop_last is refused here
        if drop_last and n < (gbs or block):
            continue  # nothing to train: refused here (NeMo yields nothing or divides by zero)
        out.append((n, mbs, dp, gbs, drop_last, pad))
    return out


def test_single_matches_nemo_wherever_nemo_is_well_formed() -> None:
    nemo = _nemo()
    compared = 0
    for n, mbs, dp, gbs, drop_last, pad in _configs():
        for rank in range(dp):
            kw = {
                "drop_last": drop_last,
                "global_batch_size": gbs,
                "pad_samples_to_global_batch_size": pad,
            }
            theirs_sampler = nemo.MegatronPretrainingSampler(n, mbs, rank, dp, **kw)
            theirs = [_as_ours(mb, mbs) for mb in theirs_sampler]
            ours = MegatronPretrainingSampler(n, mbs, rank, dp, **kw)
            got = list(ours)
            assert len(ours) == len(got)
            if drop_last and gbs is not None:
                # NeMo yields every whole block but promises (len) whole global batches only
                assert len(got) == len(theirs_sampler)
                assert got == theirs[: len(got)]
            else:
                assert got == theirs, (n, mbs, dp, gbs, drop_last, pad, rank)
            compared += 1
    assert compared > 300


def test_factory_single_matches_nemo() -> None:
    from dataorder.llm.factory import create_megatron_sampler

    nemo = _nemo()
    for n, mbs, dp, gbs, drop_last, pad in _configs()[::7]:
        if gbs is None or (drop_last and n % gbs):
            continue  # compared above; here the factory path with a gbs that does not truncate
        for rank in range(dp):
            kw = {"rank": rank, "world_size": dp, "drop_last": drop_last}
            kw["pad_samples_to_global_batch_size"] = pad
            theirs = [_as_ours(mb, mbs) for mb in nemo.create_megatron_sampler(n, mbs, gbs, **kw)]
            assert list(create_megatron_sampler(n, mbs, gbs, **kw)) == theirs


def test_compat_matches_nemo_over_epochs() -> None:
    """NeMo's sampler iterated again and again walks the epochs through consumed_samples."""
    nemo = _nemo()
    compared = 0
    for n, mbs, dp, gbs, drop_last, pad in _configs():
        block = mbs * dp
        if pad or (not drop_last and block > 1) or n < block:
            continue  # NeMo's own restrictions
        if drop_last and gbs is not None and (n // block * block) % gbs:
            continue  # refused here: NeMo would end its epochs with a partial global batch
        seed = n * 7 + mbs
        for rank in range(dp):
            theirs = nemo.MegatronPretrainingRandomSampler(
                n, mbs, rank, dp, drop_last=drop_last, global_batch_size=gbs, seed=seed
            )
            ours = MegatronPretrainingRandomSampler(
                n, mbs, rank, dp, drop_last, gbs, seed=seed, compat="nemo"
            )
            for _ in range(4):
                assert list(ours) == list(theirs), (n, mbs, dp, gbs, rank)
            assert ours.consumed_samples == theirs.consumed_samples
            compared += 1
    assert compared > 50


def test_compat_moves_over_mid_training() -> None:
    """From NeMo's consumed_samples, at any micro-batch of any epoch, the rest is NeMo's."""
    nemo = _nemo()
    n, mbs, dp, seed = 37, 2, 3, 1234
    for rank in range(dp):
        for consumed in range(0, 3 * 36, 6):
            theirs = nemo.MegatronPretrainingRandomSampler(n, mbs, rank, dp, seed=seed)
            theirs.consumed_samples = consumed
            ours = MegatronPretrainingRandomSampler(
                n, mbs, rank, dp, seed=seed, compat="nemo", consumed_samples=consumed
            )
            for _ in range(2):
                assert list(ours) == list(theirs)
