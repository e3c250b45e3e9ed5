"""Optional oracle: Megatron-LM's own ``data_samplers.py``, loaded by path when a checkout is given.

Megatron-LM is never a dependency and none of its code is in this repository. Point
``MEGATRON_LM_DATA_SAMPLERS`` at ``megatron/training/datasets/data_samplers.py`` of a Megatron-LM
checkout (main; the sampler classes are unchanged since 2022) to run the oracle tests; they skip
otherwise. The file's four Megatron imports (``mpu``, ``Split``, ``get_args`` and the signal
handler) are only used by its loader-building function, never by the sampler classes, so they are
satisfied by empty stand-in modules while the file is executed, and removed again afterwards.
"""

from __future__ import annotations

import enum
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_CACHE: dict[str, ModuleType] = {}
_STUBS = (
    "megatron",
    "megatron.core",
    "megatron.core.mpu",
    "megatron.core.datasets",
    "megatron.core.datasets.utils",
    "megatron.training",
    "megatron.training.dist_signal_handler",
)


def _stand_ins() -> dict[str, ModuleType]:
    mods = {name: ModuleType(name) for name in _STUBS}
    mods["megatron.core"].mpu = mods["megatron.core.mpu"]  # type: ignore[attr-defined]
    mods["megatron.core.datasets.utils"].Split = enum.Enum(  # type: ignore[attr-defined]
        "Split", "train valid test"
    )
    mods["megatron.training"].get_args = lambda: None  # type: ignore[attr-defined]
    mods["megatron.training.dist_signal_handler"].DistributedSignalHandler = object  # type: ignore[attr-defined]
    return mods


def load() -> ModuleType:
    """Megatron-LM's ``data_samplers`` module, or skip the calling test."""
    path = os.environ.get("MEGATRON_LM_DATA_SAMPLERS", "")
    if not path or not Path(path).is_file():
        pytest.skip("MEGATRON_LM_DATA_SAMPLERS is not set to Megatron-LM's data_samplers.py")
    if path not in _CACHE:
        saved = {name: sys.modules.get(name) for name in _STUBS}
        sys.modules.update(_stand_ins())
        try:
            spec = importlib.util.spec_from_file_location("megatron_lm_data_samplers", path)
            assert spec is not None
            assert spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            for name, old in saved.items():
                if old is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = old
        _CACHE[path] = module
    return _CACHE[path]


def cyclic_passes(
    n: int, consumed: int, mbs: int, rank: int, dp: int, *, data_sharding: bool, passes: int
) -> list[list[Any]]:
    """``passes`` successive ``iter()`` of one Megatron-LM cyclic sampler object."""
    sampler = load().MegatronPretrainingRandomSampler(
        None, n, consumed, mbs, rank, dp, data_sharding
    )
    return [list(sampler) for _ in range(passes)]
