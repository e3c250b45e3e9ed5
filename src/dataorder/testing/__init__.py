"""The sampler contract suite: what every dataorder sampler promises, checked on any sampler.

:mod:`dataorder.testing.contract` holds the direct checks (partition, ``len()``, resume, peek,
elasticity, ``batch_at``); :mod:`dataorder.testing.recipes` the same promises in the training
loops people run (DataLoader, StatefulDataLoader, Accelerate, Lightning).
:func:`check_contract` (:mod:`dataorder.testing.suite`) runs both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataorder._lazy import lazy_exports

#: Every public name of the package -> the module that defines it (one list: ``__all__`` and the
#: lazy import both read it; tests/test_static.py checks the typing block below against it).
_EXPORTS: dict[str, str] = {
    "ContractViolation": "contract",
    "MAX_STATE_BYTES": "contract",
    "RECIPES": "recipes",
    "SamplerCase": "contract",
    "WORKER_RECIPES": "recipes",
    "available_recipes": "recipes",
    "check_batch_at": "contract",
    "check_contract": "suite",
    "check_determinism_across_processes": "contract",
    "check_elastic_resume": "contract",
    "check_epoch_partition": "contract",
    "check_forgotten_set_epoch": "contract",
    "check_loop_recipes": "recipes",
    "check_passes_and_placement": "contract",
    "check_peek": "contract",
    "check_repeated_resume": "contract",
    "check_resume_at_every_step": "contract",
    "check_state_round_trip": "contract",
    "flatten": "contract",
    "run_epoch": "contract",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers only: what __getattr__ returns
    from dataorder.testing.contract import MAX_STATE_BYTES as MAX_STATE_BYTES
    from dataorder.testing.contract import ContractViolation as ContractViolation
    from dataorder.testing.contract import SamplerCase as SamplerCase
    from dataorder.testing.contract import check_batch_at as check_batch_at
    from dataorder.testing.contract import (
        check_determinism_across_processes as check_determinism_across_processes,
    )
    from dataorder.testing.contract import check_elastic_resume as check_elastic_resume
    from dataorder.testing.contract import check_epoch_partition as check_epoch_partition
    from dataorder.testing.contract import check_forgotten_set_epoch as check_forgotten_set_epoch
    from dataorder.testing.contract import check_passes_and_placement as check_passes_and_placement
    from dataorder.testing.contract import check_peek as check_peek
    from dataorder.testing.contract import check_repeated_resume as check_repeated_resume
    from dataorder.testing.contract import check_resume_at_every_step as check_resume_at_every_step
    from dataorder.testing.contract import check_state_round_trip as check_state_round_trip
    from dataorder.testing.contract import flatten as flatten
    from dataorder.testing.contract import run_epoch as run_epoch
    from dataorder.testing.recipes import RECIPES as RECIPES
    from dataorder.testing.recipes import WORKER_RECIPES as WORKER_RECIPES
    from dataorder.testing.recipes import available_recipes as available_recipes
    from dataorder.testing.recipes import check_loop_recipes as check_loop_recipes
    from dataorder.testing.suite import check_contract as check_contract


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
