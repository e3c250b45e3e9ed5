"""``compat="torch"`` for the distributed sampler: torch's exact indices.

torch's ``DistributedSampler`` shuffles with ``torch.randperm(N)`` on a generator seeded
``seed + epoch`` (additive seeding, reproduced on purpose: seed ``s`` in epoch ``e + 1`` replays
seed ``s + 1`` in epoch ``e``). This order materialises that permutation once per epoch, as torch
does (as an int64 array, 8 bytes per index, not a Python list), so it costs O(N) time and memory
per epoch and depends on torch's ``randperm`` (pin the torch version of the run you continue).
Everything else (state, resume, mesh, padding mask) is dataorder's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["TorchOrder"]


class TorchOrder:
    """torch's order (see the module docstring), behind
    :class:`~dataorder.parallel.distributed.IndexOrder`."""

    name: ClassVar[str] = "torch"

    def epoch(
        self, dataset_size: int, *, seed: int, epoch: int
    ) -> Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]:
        # seed < 2**63 and epoch < 2**32 (dataorder.core.keys.MAX_SEED, state.MAX_EPOCH): the
        # sum is below 2**64, as torch.manual_seed requires
        generator = torch.Generator()
        generator.manual_seed(seed + epoch)
        table: npt.NDArray[np.int64] = torch.randperm(dataset_size, generator=generator).numpy()
        return lambda positions: table[positions]

    def versions(self) -> dict[str, int]:
        # 0: the order comes from torch, not from dataorder's constructions
        return {"permutation_version": 0, "key_version": 0}
