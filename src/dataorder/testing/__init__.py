"""The sampler contract suite: what every dataorder sampler promises, checked on any sampler.

:mod:`dataorder.testing.contract` holds the direct checks (partition, ``len()``, resume, peek,
elasticity, ``batch_at``); :mod:`dataorder.testing.recipes` the same promises in the training
loops people run (DataLoader, StatefulDataLoader, Accelerate, Lightning).
:func:`check_contract` (:mod:`dataorder.testing.suite`) runs both.
"""

from dataorder.testing.contract import (
    MAX_STATE_BYTES,
    ContractViolation,
    SamplerCase,
    check_batch_at,
    check_determinism_across_processes,
    check_elastic_resume,
    check_epoch_partition,
    check_forgotten_set_epoch,
    check_passes_and_placement,
    check_peek,
    check_repeated_resume,
    check_resume_at_every_step,
    check_state_round_trip,
    flatten,
    run_epoch,
)
from dataorder.testing.recipes import (
    RECIPES,
    WORKER_RECIPES,
    available_recipes,
    check_loop_recipes,
)
from dataorder.testing.suite import check_contract

__all__ = [
    "MAX_STATE_BYTES",
    "RECIPES",
    "WORKER_RECIPES",
    "ContractViolation",
    "SamplerCase",
    "available_recipes",
    "check_batch_at",
    "check_contract",
    "check_determinism_across_processes",
    "check_elastic_resume",
    "check_epoch_partition",
    "check_forgotten_set_epoch",
    "check_loop_recipes",
    "check_passes_and_placement",
    "check_peek",
    "check_repeated_resume",
    "check_resume_at_every_step",
    "check_state_round_trip",
    "flatten",
    "run_epoch",
]
