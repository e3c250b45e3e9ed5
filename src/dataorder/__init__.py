"""dataorder: which samples every data-parallel rank reads at every step of distributed training.

The global order of an epoch is a pure function of (configuration, seed, epoch, position); ranks
take slices of global blocks, so they stay in lock-step by construction; a sampler's state is a
few integers, so resume is O(1), exact, and elastic when the number of GPUs changes.

The package is layered; each layer imports only those above it in this list:

* :mod:`dataorder.core`: the permutation, keys, apportionment, partition, state, cursor and
  topology. No torch.
* :mod:`dataorder.llm`: Megatron-style micro-batch samplers and batch-size schedules.
* :mod:`dataorder.diffusion`: resolution buckets, scans, datasets and the bucket sampler.
* :mod:`dataorder.parallel`: torch's DistributedSampler over a mesh, and the partition check.
* :mod:`dataorder.live`: live elasticity, the items each replica group of a fault-tolerant run
  trains at a committed step, whoever takes part, over any sampler. No torch.
* :mod:`dataorder.integrations`: the samplers in DCP, NeMo Automodel, Megatron-LM, HF Trainer
  and torchtitan (each stack imported lazily; nothing imports this layer).
* :mod:`dataorder.testing`: the contract suite, usable on any sampler.
* :mod:`dataorder.tools`: the command line, the demo and plots.

Each subpackage exports its names (``from dataorder.llm import PackedSampler``); this package
re-exports every subpackage's ``__all__``, imported lazily: ``import dataorder`` imports nothing
more, and ``dataorder.core`` and ``dataorder.llm`` never import torch. The training stacks
(:mod:`dataorder.integrations`) and the contract suite (:mod:`dataorder.testing`) are imported
from their own packages.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

__version__ = "0.3.0"

#: The subpackages whose ``__all__`` the top level re-exports, in layer order. Each subpackage
#: lists its own public names once (its ``__all__``); this package lists none of its own.
PACKAGES: tuple[str, ...] = ("core", "llm", "parallel", "diffusion", "live")

if TYPE_CHECKING:
    from dataorder.core import *  # noqa: F403
    from dataorder.core.assembly import AssembledSampler
    from dataorder.diffusion import *  # noqa: F403
    from dataorder.live import *  # noqa: F403
    from dataorder.llm import *  # noqa: F403
    from dataorder.parallel import *  # noqa: F403


def _package_of(name: str) -> Any:
    for package in PACKAGES:
        module = importlib.import_module(f"dataorder.{package}")
        if name in module.__all__:
            return module
    return None


def public_names() -> list[str]:
    """Every name ``import dataorder`` offers, sorted (imports every subpackage)."""
    names = {"__version__", "samplers"}
    for package in PACKAGES:
        names.update(importlib.import_module(f"dataorder.{package}").__all__)
    return sorted(names)


def samplers() -> dict[str, type[AssembledSampler[Any]]]:
    """Every dataorder sampler class, by the ``kind`` its states record.

    The classes register themselves when they are defined (:mod:`dataorder.core.assembly`);
    this imports every subpackage first, so the answer does not depend on what was imported
    before (``dataorder inspect`` rebuilds any state through it).
    """
    from dataorder.core.assembly import SAMPLERS

    for package in PACKAGES:
        module = importlib.import_module(f"dataorder.{package}")
        for name in module.__all__:  # a lazy package imports a name's module when asked
            getattr(module, name)
    return dict(SAMPLERS)


#: Names 0.2 exported at the top level and 0.3 renamed -> their new names (a warning says so).
_RENAMED: dict[str, str] = {"EpochLayout": "EpochBlocks"}


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return public_names()
    if name in _RENAMED:
        new = _RENAMED[name]
        warnings.warn(f"dataorder.{name} is deprecated; use dataorder.{new}", DeprecationWarning, 2)
        return __getattr__(new)
    module = _package_of(name)
    if module is None:
        raise AttributeError(f"module 'dataorder' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(public_names()))
