"""``compat="torch"`` for the distributed sampler: torch's exact indices.

torch's ``DistributedSampler`` shuffles with ``torch.randperm(N)`` on a generator seeded
``seed + epoch`` (additive seeding, reproduced on purpose: seed ``s`` in epoch ``e + 1`` replays
seed ``s + 1`` in epoch ``e``). This order materialises that permutation once per epoch, as torch
does (as an int64 array, 8 bytes per index, not a Python list), so it costs O(N) time and memory
per epoch and depends on torch's ``randperm`` (pin the torch version of the run you continue).
Everything else (state, resume, mesh, padding mask) is dataorder's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from dataorder._validate import check_int
from dataorder.core.assembly import Extra, Foreign, Mode
from dataorder.core.state import Scalar

__all__ = ["TORCH_MODE", "TorchOrder"]


class TorchOrder:
    """torch's order (see the module docstring), behind
    :class:`~dataorder.parallel.distributed.IndexOrder`."""

    name = "torch"
    elastic = True  # like torch's: one permutation of the dataset, whatever the DP size

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def epoch(
        self, dataset_size: int, epoch: int
    ) -> Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]:
        # seed < 2**63 and epoch < 2**32 (dataorder.core.keys.MAX_SEED, state.MAX_EPOCH): the
        # sum is below 2**64, as torch.manual_seed requires
        generator = torch.Generator()
        generator.manual_seed(self.seed + epoch)
        table: npt.NDArray[np.int64] = torch.randperm(dataset_size, generator=generator).numpy()
        return lambda positions: table[positions]

    def config(self) -> dict[str, Scalar]:
        # 0: the order comes from torch, not from dataorder's constructions
        return {"permutation_version": 0, "key_version": 0}


# NOTE [ torchdata states ]
#     torchdata's StatefulDistributedSampler saves ``{"yielded": k}``: the indices this rank has
#     handed out in the epoch the loop set. In this mode (torch's order, which that sampler
#     shares) such a state loads: the cursor goes to position ``k x num_replicas`` of the current
#     epoch, which is where torchdata's sampler continues. Our own states carry ``yielded`` in
#     this mode too, so torchdata's sampler can load them: a job can switch either way between
#     two checkpoints.


def _yielded(sampler: Any, epoch: int, progress: Mapping[str, int]) -> Scalar:
    return int(progress["consumed"] // sampler.num_replicas)  # torchdata's attribute, at progress


def _check_yielded(
    sampler: Any, value: object, epoch: int, progress: Mapping[str, int], layout: Mapping[str, int]
) -> None:
    expected = progress["consumed"] // layout["num_replicas"]
    if value != expected:
        raise ValueError(
            f"state['yielded'] must be consumed // layout.num_replicas = {expected}; got "
            f"state['yielded']={value!r}"
        )


def _place_torchdata(sampler: Any, state: Mapping[str, Any]) -> tuple[int, dict[str, int]]:
    k = state["yielded"]
    # torchdata's own words first, then our template
    if isinstance(k, int) and not isinstance(k, bool) and k < 0:
        raise ValueError(
            f"Cannot load state_dict with negative yielded value {k} (yielded must be an int "
            f"in [0, {sampler.num_samples}]; got yielded={k})"
        )
    k = check_int("yielded", k, min_value=0, max_value=sampler.num_samples)
    return sampler.epoch, {"consumed": k * sampler.num_replicas}


#: ``compat="torch"`` of the distributed sampler (NOTE [ torchdata states ]).
TORCH_MODE = Mode(
    "torch",
    build=TorchOrder,
    records={"torch": {"compat": "torch"}},
    summary="torch's order",
    extras=(Extra("yielded", _yielded, _check_yielded, required=False),),
    foreign=(
        Foreign(
            frozenset({"yielded"}), "a torchdata StatefulDistributedSampler state", _place_torchdata
        ),
    ),
)
