"""``compat="nemo"`` for the Megatron samplers: NeMo Automodel 0.7.0's "cyclic" order.

Reproduced on purpose, from the behaviour spec (nemo_behaviour.md section 5): static per-rank
shards of ``(total_samples // M) x micro_batch_size`` samples (``M = micro_batch_size x
data_parallel_size``), the same ``torch.randperm(shard, generator=manual_seed(seed + epoch))`` on
every rank, and the last ``total_samples mod M`` samples never used. NeMo's restrictions apply: no
padding, ``drop_last=False`` only when ``M == 1``, and a ``global_batch_size`` must divide NeMo's
epoch (NeMo does not drop whole global batches). It costs O(shard) time and memory per epoch,
depends on torch's ``randperm`` (pin the torch version of the NeMo run), and is not elastic:
``data_parallel_size`` and ``micro_batch_size`` are part of its configuration.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dataorder._validate import fail
from dataorder.core.state import Scalar
from dataorder.llm.orders import EpochSpec, SampleMap, rank_sequence_offsets, torch_randperm

__all__ = ["NemoOrder"]


def _nemo_map(start: int, perm: npt.NDArray[np.int64], mbs: int, dp: int, rank: int) -> SampleMap:
    """NeMo's static shard: the rank's ``j``-th read is ``start + randperm[j]``."""

    def sample(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        j = rank_sequence_offsets(positions, micro_batch_size=mbs, data_parallel_size=dp, rank=rank)
        return start + perm[j]

    return sample


class NemoOrder:
    """NeMo Automodel's order (see the module docstring)."""

    name = "nemo"
    elastic = True  # the configuration pins both sizes: another layout is refused, named

    def __init__(self, seed: int, spec: EpochSpec, *, data_sharding: bool) -> None:
        self.seed = seed
        self.spec = spec
        block = spec.block
        if data_sharding:
            fail(
                "data_sharding",
                "False with compat='nemo' (NeMo's static shards are part of that mode)",
                True,
            )
        if spec.pad:
            fail(
                "pad_samples_to_global_batch_size",
                "False with compat='nemo' (NeMo's random sampler cannot pad)",
                True,
            )
        if not spec.drop_last and block > 1:
            fail(
                "drop_last",
                "True with compat='nemo' when micro_batch_size x data_parallel_size = "
                f"{spec.micro_batch_size} x {spec.data_parallel_size} = {block} > 1",
                False,
            )
        epoch_samples = spec.total_samples // block * block
        gbs = spec.global_batch_size
        if spec.drop_last and gbs is not None and epoch_samples % gbs:
            fail(
                "global_batch_size",
                "a divisor of NeMo's epoch with compat='nemo' (total_samples // "
                f"{block} x {block} = {epoch_samples} samples; NeMo would end each epoch with a "
                "partial global batch), or None",
                gbs,
            )

    def config(self) -> dict[str, Scalar]:
        # no construction versions: the order comes from torch, not from dataorder's code
        return {
            "data_parallel_size": self.spec.data_parallel_size,
            "micro_batch_size": self.spec.micro_batch_size,
        }

    def sample_map(self, spec: EpochSpec, epoch: int, rank: int) -> SampleMap:
        # seed < 2**63 and epoch < 2**32: seed + epoch is below 2**64, as torch requires
        mbs, dp = spec.micro_batch_size, spec.data_parallel_size
        shard = spec.total_samples // (mbs * dp) * mbs
        perm = torch_randperm(shard, self.seed + epoch)
        return _nemo_map(rank * shard, perm, mbs, dp, rank)
