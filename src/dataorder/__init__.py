"""dataorder: which samples every data-parallel rank reads at every step of distributed training.

The global order of an epoch is a pure function of (configuration, seed, epoch, position); ranks
take slices of global blocks, so they stay in lock-step by construction; a sampler's state is a
few integers, so resume is O(1), exact, and elastic when the number of GPUs changes.

Public names are imported lazily: ``import dataorder`` does not import torch, and neither do the
core modules (:mod:`dataorder.permutation`, :mod:`dataorder.keys`, :mod:`dataorder.partition`,
:mod:`dataorder.state`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "BaseMegatronSampler": "dataorder.megatron",
    "BatchSizeSchedule": "dataorder.schedule",
    "CursorSampler": "dataorder.cursor",
    "EpochLayout": "dataorder.partition",
    "MegatronPretrainingRandomSampler": "dataorder.megatron",
    "MegatronPretrainingSampler": "dataorder.megatron",
    "Permutation": "dataorder.permutation",
    "StepInfo": "dataorder.schedule",
    "create_megatron_sampler": "dataorder.megatron",
    "derive_key": "dataorder.keys",
    "plan_epoch": "dataorder.partition",
}

__all__ = [
    "BaseMegatronSampler",
    "BatchSizeSchedule",
    "CursorSampler",
    "EpochLayout",
    "MegatronPretrainingRandomSampler",
    "MegatronPretrainingSampler",
    "Permutation",
    "StepInfo",
    "__version__",
    "create_megatron_sampler",
    "derive_key",
    "plan_epoch",
]

if TYPE_CHECKING:
    from dataorder.cursor import CursorSampler
    from dataorder.keys import derive_key
    from dataorder.megatron import (
        BaseMegatronSampler,
        MegatronPretrainingRandomSampler,
        MegatronPretrainingSampler,
        create_megatron_sampler,
    )
    from dataorder.partition import EpochLayout, plan_epoch
    from dataorder.permutation import Permutation
    from dataorder.schedule import BatchSizeSchedule, StepInfo


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dataorder' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
