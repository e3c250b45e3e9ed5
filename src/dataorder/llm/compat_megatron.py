"""``compat="megatron"`` for the cyclic sampler: NVIDIA Megatron-LM's own "cyclic" orders.

Reproduced on purpose from Megatron-LM's ``MegatronPretrainingRandomSampler`` (main branch,
``megatron/training/datasets/data_samplers.py``; the sampler classes are unchanged since 2022).
With ``M = micro_batch_size x data_parallel_size``, an epoch is the first ``active = total_samples
- total_samples mod M`` positions, and every epoch's shuffle is ``torch.randperm`` from a CPU
generator seeded with **the epoch number alone** (Megatron has no sampler seed):

* ``data_sharding=True`` (Megatron's command-line default): rank ``r`` owns the samples
  ``[r * S, (r + 1) * S)`` with ``S = (total_samples // M) x micro_batch_size``; every rank draws
  the same ``randperm(S)`` and reads its bucket through it. The last ``total_samples mod M``
  samples are never used. This equals NeMo Automodel's order with ``seed=0``.
* ``data_sharding=False``: one ``randperm(F)`` with ``F = (total_samples // micro_batch_size) x
  micro_batch_size``, read with a stride: slot ``i`` of rank ``r`` in block ``k`` holds entry
  ``k * M + i * data_parallel_size + r``. Entries ``[active, F)`` and the samples ``[F,
  total_samples)`` are never used.

Megatron-LM resumes by rebuilding the sampler with the run's ``consumed_train_samples``; pass it as
``consumed_samples=`` (epoch ``consumed // active``, then the offset, as Megatron reads it).

Refused, because Megatron-LM cannot do them or a shared cursor cannot represent them:

* a seed other than 0 (the order would no longer be Megatron's);
* ``drop_last=False`` and padding (Megatron always drops an incomplete micro-batch);
* a ``global_batch_size`` that does not divide ``active`` (Megatron's epoch is ``active``
  positions whatever the global batch size; a global batch may not straddle two epochs here);
* with ``data_sharding=False``, the layouts where Megatron-LM gives some ranks one micro-batch
  more than others every epoch (``micro_batch_size x ((total_samples mod M) //
  micro_batch_size) > data_parallel_size x (micro_batch_size - 1)``): its ranks then read from
  different epochs, which no shared cursor reproduces. Megatron-LM PR #7299 and Megatron-Bridge
  PR #5944 fix it by cutting the permutation to ``active`` first, which is what the other layouts
  already read.

Not elastic: ``data_parallel_size`` and ``micro_batch_size`` are part of the configuration. The
order depends on torch's ``randperm`` (pin the torch version of the Megatron run). What differs
from Megatron-LM outside the order (``len()`` is micro-batches, not ``total_samples``; a new
``iter()`` follows the loop contract; errors are ValueError) is in docs/migration.md.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dataorder._validate import fail
from dataorder.core.state import Scalar
from dataorder.llm.orders import EpochSpec, SampleMap, rank_sequence_offsets, torch_randperm

__all__ = ["MegatronLMOrder", "uneven_micro_batches"]


def uneven_micro_batches(
    total_samples: int, micro_batch_size: int, data_parallel_size: int
) -> bool:
    """Whether Megatron-LM's non-sharded cyclic sampler gives ranks unequal micro-batch counts.

    True exactly when ``micro_batch_size x ((total_samples mod M) // micro_batch_size) >
    data_parallel_size x (micro_batch_size - 1)`` with ``M = micro_batch_size x
    data_parallel_size`` (checked against Megatron-LM's file on every layout with
    ``total_samples <= 26`` and both sizes ``<= 4``).

    Example:
        >>> uneven_micro_batches(10, 2, 3), uneven_micro_batches(10, 2, 2)
        (True, False)
    """
    block = micro_batch_size * data_parallel_size
    tail = micro_batch_size * ((total_samples % block) // micro_batch_size)
    return tail > data_parallel_size * (micro_batch_size - 1)


def _sharded_map(
    shard: int, perm: npt.NDArray[np.int64], mbs: int, dp: int, rank: int
) -> SampleMap:
    def sample(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        j = rank_sequence_offsets(positions, micro_batch_size=mbs, data_parallel_size=dp, rank=rank)
        return rank * shard + perm[j]

    return sample


def _strided_map(perm: npt.NDArray[np.int64], mbs: int, dp: int, rank: int) -> SampleMap:
    block = mbs * dp

    def sample(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        # our position p = k * M + rank * mbs + i is Megatron's entry k * M + i * dp + rank
        slot = positions % block - rank * mbs
        out: npt.NDArray[np.int64] = perm[positions - positions % block + slot * dp + rank]
        return out

    return sample


class MegatronLMOrder:
    """Megatron-LM's cyclic orders (see the module docstring)."""

    elastic = True  # the configuration pins both sizes: another layout is refused, named

    def __init__(self, seed: int, spec: EpochSpec, *, data_sharding: bool) -> None:
        self.data_sharding = data_sharding
        self.spec = spec
        self.name = "megatron-sharded" if data_sharding else "megatron-strided"
        why = " with compat='megatron'"
        if seed:
            fail("seed", f"0{why} (Megatron-LM seeds each epoch's shuffle with the epoch)", seed)
        if spec.pad:
            fail("pad_samples_to_global_batch_size", f"False{why}", True)
        if not spec.drop_last:
            fail("drop_last", f"True{why} (Megatron-LM drops an incomplete micro-batch)", False)
        block = spec.block
        active = spec.total_samples // block * block
        gbs = spec.global_batch_size
        if gbs is not None and active % gbs:
            fail(
                "global_batch_size",
                f"a divisor of Megatron-LM's epoch{why} (total_samples // {block} x {block} = "
                f"{active} samples), or None",
                gbs,
            )
        n, mbs, dp = spec.total_samples, spec.micro_batch_size, spec.data_parallel_size
        if not data_sharding and uneven_micro_batches(n, mbs, dp):
            raise ValueError(
                f"compat='megatron' with data_sharding=False cannot reproduce total_samples={n}, "
                f"micro_batch_size={mbs}, data_parallel_size={dp}: there Megatron-LM gives some "
                "ranks one micro-batch more than the others every epoch (micro_batch_size x "
                f"((total_samples mod {block}) // micro_batch_size) = "
                f"{mbs * ((n % block) // mbs)} > data_parallel_size x (micro_batch_size - 1) = "
                f"{dp * (mbs - 1)}), so its ranks drift into different epochs. Use "
                "data_sharding=True, another layout, or the fix of Megatron-LM PR #7299 (our "
                "default order needs none of this)"
            )

    def config(self) -> dict[str, Scalar]:
        """The layout Megatron-LM's order depends on (no construction versions: the order comes
        from torch, not from dataorder's code)."""
        return {
            "data_parallel_size": self.spec.data_parallel_size,
            "micro_batch_size": self.spec.micro_batch_size,
        }

    def sample_map(self, spec: EpochSpec, epoch: int, rank: int) -> SampleMap:
        """Positions of ``rank``'s share of ``epoch`` to sample indices, as Megatron-LM reads
        them (its shard's ``randperm``, or the global one strided over ranks)."""
        mbs, dp = spec.micro_batch_size, spec.data_parallel_size
        if self.data_sharding:
            shard = spec.total_samples // (mbs * dp) * mbs
            return _sharded_map(shard, torch_randperm(shard, epoch), mbs, dp, rank)
        full = spec.total_samples // mbs * mbs
        return _strided_map(torch_randperm(full, epoch), mbs, dp, rank)
