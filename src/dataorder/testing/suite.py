"""The whole contract suite on one sampler case: the direct checks, then the loop recipes.

:func:`check_contract` runs every check of :mod:`dataorder.testing.contract` and the loop recipes
of :mod:`dataorder.testing.recipes` (which build on the contract's :class:`SamplerCase`); it lives
apart from both so that neither imports the other's user.

Example:
    >>> from dataorder import MegatronPretrainingRandomSampler
    >>> from dataorder.testing import SamplerCase, check_contract
    >>> case = SamplerCase(
    ...     name="megatron-random",
    ...     dataset_size=50,
    ...     dp_size=2,
    ...     make=lambda rank, size: MegatronPretrainingRandomSampler(
    ...         50, micro_batch_size=2, data_parallel_rank=rank, data_parallel_size=size, seed=3),
    ...     elastic_dp_sizes=(1,),
    ... )
    >>> check_contract(case, resume_points=3, recipes=())
    []
"""

from __future__ import annotations

from collections.abc import Sequence

from dataorder.testing.contract import (
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
)
from dataorder.testing.recipes import check_loop_recipes

__all__ = ["check_contract"]


def check_contract(
    case: SamplerCase,
    *,
    resume_points: int = 40,
    processes: bool = False,
    recipes: Sequence[str] | None = None,
) -> list[str]:
    """Run every check on ``case``; raise :class:`ContractViolation` on the first violation.

    Args:
        case: The sampler configuration.
        resume_points: How many resume positions per epoch to try (all of them if the epoch is
            shorter).
        processes: Also check the order in a fresh interpreter (slower).
        recipes: Loop recipes of :mod:`dataorder.testing.recipes` to run; None means every
            recipe whose framework is installed, ``()`` none.

    Returns:
        The names of the loop recipes that ran.
    """
    check_epoch_partition(case, epoch=0)
    check_epoch_partition(case, epoch=3)
    check_state_round_trip(case)
    check_resume_at_every_step(case, budget=resume_points)
    check_repeated_resume(case)
    check_peek(case)
    check_forgotten_set_epoch(case)
    check_passes_and_placement(case)
    check_batch_at(case)
    for w in case.elastic_dp_sizes:
        check_elastic_resume(case, w)
    if processes:
        check_determinism_across_processes(case)
    return check_loop_recipes(case, recipes)
