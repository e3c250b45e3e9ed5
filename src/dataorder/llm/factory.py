"""``create_megatron_sampler``: NeMo Automodel's factory of the Megatron micro-batch samplers.

With ``mixture=(sizes, weights)`` it builds a :class:`~dataorder.llm.blend.BlendedSampler`
instead: the same arguments, read as Megatron reads them for a ``--data-path`` blend.

Example:
    >>> sampler = create_megatron_sampler(10, 2, None, "cyclic", rank=1, world_size=2, seed=3)
    >>> type(sampler).__name__, len(sampler)
    ('MegatronPretrainingRandomSampler', 2)
    >>> blend = create_megatron_sampler(
    ...     64, 2, 8, "cyclic", rank=1, world_size=2, seed=3, mixture=([100, 30], [0.75, 0.25]))
    >>> type(blend).__name__, len(blend), blend.consumed_per_source(64).tolist()
    ('BlendedSampler', 16, [48, 16])
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, overload

from dataorder._validate import check_bool, check_choice, check_int, fail
from dataorder.core.keys import MAX_SEED
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.megatron import (
    BaseMegatronSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
)
from dataorder.llm.mixture import MixtureSchedule, WeightVector
from dataorder.llm.schedule import BatchSizeSchedule

__all__ = ["DATALOADER_TYPES", "create_megatron_sampler"]

#: The ``dataloader_type`` values :func:`create_megatron_sampler` accepts.
DATALOADER_TYPES: tuple[str, ...] = ("single", "cyclic")

#: ``mixture=``: a blend's sources (their sizes) and its mixture (weights, or a schedule of them).
SourcesAndMixture = tuple[Sequence[int], WeightVector | MixtureSchedule]


@overload
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
    *,
    mixture: None = None,
) -> BaseMegatronSampler: ...
@overload
def create_megatron_sampler(
    dataset_len: int,
    micro_batch_size: int,
    global_batch_size: int | BatchSizeSchedule,
    dataloader_type: Literal["cyclic"],
    drop_last: bool = True,
    pad_samples_to_global_batch_size: bool = False,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    *,
    mixture: SourcesAndMixture,
) -> BlendedSampler: ...
def create_megatron_sampler(
    dataset_len: int,
    micro_batch_size: int,
    global_batch_size: int | BatchSizeSchedule | None,
    dataloader_type: Literal["single", "cyclic"] = "single",
    drop_last: bool = True,
    pad_samples_to_global_batch_size: bool = False,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    *,
    mixture: SourcesAndMixture | None = None,
) -> BaseMegatronSampler | BlendedSampler:
    """Build a Megatron micro-batch sampler for one data-parallel rank (NeMo's factory).

    Unlike NeMo's factory, ``global_batch_size``, padding and ``seed`` reach the "cyclic"
    sampler too.

    Args:
        dataset_len: Samples in the dataset. With ``mixture``: samples per epoch (Megatron's
            ``train_samples`` for a run of one epoch), **not** ``len(ConcatDataset)``; pass
            ``sum(sizes)`` for one dataset's worth of samples per epoch (NOTE [ Blended epochs ]
            in :mod:`dataorder.llm.blend_order`).
        micro_batch_size: Samples per micro-batch on each rank.
        global_batch_size: ``micro_batch_size x world_size x gradient accumulation``, or None.
            With ``mixture``: required (the quotas are per global batch), an int or a
            :class:`~dataorder.llm.schedule.BatchSizeSchedule`.
        dataloader_type: ``"single"`` (:class:`MegatronPretrainingSampler`) or ``"cyclic"``
            (:class:`MegatronPretrainingRandomSampler`, default global shuffle). With
            ``mixture``: ``"cyclic"`` (a blend is a shuffled order).
        drop_last: See :class:`BaseMegatronSampler`. With ``mixture``: True (a blend's epochs
            are whole global batches of one stream; nothing is dropped).
        pad_samples_to_global_batch_size: See :class:`BaseMegatronSampler`. With ``mixture``:
            False (nothing is padded; None means False, as in NeMo).
        rank: This process's data-parallel rank.
        world_size: The data-parallel size.
        seed: The shuffle seed of "cyclic". "single" has no randomness: its order does not
            depend on the seed (it is still validated).
        mixture: None, or ``(sizes, weights)``: build a
            :class:`~dataorder.llm.blend.BlendedSampler` over ``ConcatDataset(datasets)`` with
            ``len(datasets[d]) == sizes[d]``, reading the sources in proportion to ``weights``
            (a weight per source, or a :class:`~dataorder.llm.mixture.MixtureSchedule`).

    Returns:
        The sampler: a :class:`BaseMegatronSampler`, or a
        :class:`~dataorder.llm.blend.BlendedSampler` with ``mixture``.

    Raises:
        ValueError: If ``dataloader_type`` is not ``'single'`` or ``'cyclic'``, or an argument
            is out of range, or does not go with ``mixture``.
        TypeError: If an argument has the wrong type.
    """
    check_choice("dataloader_type", dataloader_type, DATALOADER_TYPES)
    seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
    if mixture is not None:
        return _blended(
            mixture,
            dataset_len,
            micro_batch_size,
            global_batch_size,
            dataloader_type,
            drop_last,
            pad_samples_to_global_batch_size,
            rank,
            world_size,
            seed,
        )
    if isinstance(global_batch_size, BatchSizeSchedule):
        fail(
            "global_batch_size",
            "an int or None (a BatchSizeSchedule is for mixture=)",
            global_batch_size,
            TypeError,
        )
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


def _blended(
    mixture: object,
    dataset_len: int,
    micro_batch_size: int,
    global_batch_size: int | BatchSizeSchedule | None,
    dataloader_type: str,
    drop_last: object,
    pad: object,
    rank: int,
    world_size: int,
    seed: int,
) -> BlendedSampler:
    """``create_megatron_sampler(..., mixture=(sizes, weights))``."""
    if isinstance(mixture, str | bytes) or not (
        isinstance(mixture, tuple | list) and len(mixture) == 2
    ):
        fail("mixture", "None or a (sizes, weights) pair", mixture, TypeError)
    if dataloader_type != "cyclic":
        fail(
            "dataloader_type",
            "'cyclic' with mixture= (a blend is a shuffled order)",
            dataloader_type,
        )
    if global_batch_size is None:
        fail(
            "global_batch_size",
            "an int or a BatchSizeSchedule with mixture= (the quotas are per global batch)",
            None,
        )
    if not check_bool("drop_last", drop_last):
        fail(
            "drop_last",
            "True with mixture= (a blend drops nothing: its epochs are whole global batches)",
            drop_last,
        )
    if pad is not None and check_bool("pad_samples_to_global_batch_size", pad):
        fail("pad_samples_to_global_batch_size", "False with mixture= (a blend pads nothing)", pad)
    sizes, weights = mixture
    try:
        return BlendedSampler(
            sizes,
            weights,
            micro_batch_size,
            rank,
            world_size,
            global_batch_size,
            seed=seed,
            total_samples=dataset_len,
        )
    except (TypeError, ValueError) as err:
        raise type(err)(_caller_names(str(err), _MIXTURE_RENAMES)) from None


_RENAMES = (
    ("total_samples", "dataset_len"),
    ("data_parallel_rank", "rank"),
    ("data_parallel_size", "world_size"),
)
# BlendedSampler's sizes and weights arrive as the two items of mixture=
_MIXTURE_RENAMES = (*_RENAMES, ("sizes", "mixture[0]"), ("weights", "mixture[1]"))


def _caller_names(message: str, renames: tuple[tuple[str, str], ...] = _RENAMES) -> str:
    for inner, outer in renames:
        message = re.sub(rf"\b{inner}\b", outer, message)
    return message
