"""``create_megatron_sampler``: NeMo Automodel's factory of the Megatron micro-batch samplers.

Example:
    >>> sampler = create_megatron_sampler(10, 2, None, "cyclic", rank=1, world_size=2, seed=3)
    >>> type(sampler).__name__, len(sampler)
    ('MegatronPretrainingRandomSampler', 2)
"""

from __future__ import annotations

import re
from typing import Literal

from dataorder._validate import check_choice, check_int
from dataorder.llm.megatron import (
    MAX_SEED,
    BaseMegatronSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
)

__all__ = ["DATALOADER_TYPES", "create_megatron_sampler"]

#: The ``dataloader_type`` values :func:`create_megatron_sampler` accepts.
DATALOADER_TYPES: tuple[str, ...] = ("single", "cyclic")


def create_megatron_sampler(
    dataset_len: int,
    micro_batch_size: int,
    global_batch_size: int | None,
    dataloader_type: Literal["single", "cyclic"] = "single",
    drop_last: bool = True,
    pad_samples_to_global_batch_size: bool = False,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
) -> BaseMegatronSampler:
    """Build a Megatron micro-batch sampler for one data-parallel rank (NeMo's factory).

    Unlike NeMo's factory, ``global_batch_size``, padding and ``seed`` reach the "cyclic"
    sampler too.

    Args:
        dataset_len: Samples in the dataset.
        micro_batch_size: Samples per micro-batch on each rank.
        global_batch_size: ``micro_batch_size x world_size x gradient accumulation``, or None.
        dataloader_type: ``"single"`` (:class:`MegatronPretrainingSampler`) or ``"cyclic"``
            (:class:`MegatronPretrainingRandomSampler`, default global shuffle).
        drop_last: See :class:`BaseMegatronSampler`.
        pad_samples_to_global_batch_size: See :class:`BaseMegatronSampler`.
        rank: This process's data-parallel rank.
        world_size: The data-parallel size.
        seed: The shuffle seed of "cyclic". "single" has no randomness: its order does not
            depend on the seed (it is still validated).

    Returns:
        The sampler.

    Raises:
        ValueError: If ``dataloader_type`` is not ``'single'`` or ``'cyclic'``, or an argument
            is out of range.
        TypeError: If an argument has the wrong type.
    """
    check_choice("dataloader_type", dataloader_type, DATALOADER_TYPES)
    seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
    try:
        if dataloader_type == "single":
            return MegatronPretrainingSampler(
                dataset_len,
                micro_batch_size,
                data_parallel_rank=rank,
                data_parallel_size=world_size,
                drop_last=drop_last,
                global_batch_size=global_batch_size,
                pad_samples_to_global_batch_size=pad_samples_to_global_batch_size,
            )
        return MegatronPretrainingRandomSampler(
            dataset_len,
            micro_batch_size,
            data_parallel_rank=rank,
            data_parallel_size=world_size,
            drop_last=drop_last,
            global_batch_size=global_batch_size,
            pad_samples_to_global_batch_size=pad_samples_to_global_batch_size,
            seed=seed,
        )
    except (TypeError, ValueError) as err:
        # the sampler names its own parameters; the caller passed this factory's
        raise type(err)(_caller_names(str(err))) from None


_RENAMES = (
    ("total_samples", "dataset_len"),
    ("data_parallel_rank", "rank"),
    ("data_parallel_size", "world_size"),
)


def _caller_names(message: str) -> str:
    for inner, outer in _RENAMES:
        message = re.sub(rf"\b{inner}\b", outer, message)
    return message
