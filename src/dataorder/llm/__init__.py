"""LLM pretraining and fine-tuning: micro-batch samplers, batch-size schedules, mixtures, packing.

==========================  ==================================================================
module                      what it is
==========================  ==================================================================
``sampler``                 the one micro-batch sampler: a source times a batching
``sources``                 its sources (a sample order, a blend) and what a source says
``megatron``                Megatron-LM's and NeMo's "single" and "cyclic" micro-batch samplers
``orders``                  their orders (compat modes: ``compat_nemo``, ``compat_megatron``)
``factory``                 NeMo's ``create_megatron_sampler``
``schedule``                global batch-size schedules (Megatron's ramp-up)
``mixture``                 mixture weights and schedules, and their exact counts
``blend_order``, ``blend``  mixtures exact in every global batch (``BlendedSampler``)
``packing``                 packed rows of tokens as a pure function (``PackedSampler``)
``splits``                  held-out splits: ``--split`` ranges and ``held_out`` samplers
``vsl``                     power-of-two chunks in lock-step (``VariableLengthSampler``)
==========================  ==================================================================

Nothing here imports torch until tensors are made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataorder._lazy import lazy_exports

#: Every public name of the package -> the module that defines it (one list: ``__all__`` and the
#: lazy import both read it; tests/test_static.py checks the typing block below against it).
_EXPORTS: dict[str, str] = {
    "BaseMegatronSampler": "megatron",
    "BatchSizeSchedule": "schedule",
    "BlendedSampler": "blend",
    "ConcatTokens": "packing.dataset",
    "DocumentLengths": "packing.lengths",
    "DocumentRange": "packing.dataset",
    "MegatronPretrainingRandomSampler": "megatron",
    "MegatronPretrainingSampler": "megatron",
    "MegatronStyle": "packing.batch_styles",
    "MixtureLog": "mixlog",
    "MixtureSchedule": "mixture",
    "PackedDataset": "packing.dataset",
    "PackedSampler": "packing.sampler",
    "Ramp": "mixture",
    "SourceDatasets": "mixlog",
    "StepInfo": "schedule",
    "broadcast_weights": "mixlog",
    "create_megatron_sampler": "factory",
    "held_out": "splits",
    "split_documents": "splits",
    "VariableLengthSampler": "vsl",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers only: what __getattr__ returns
    from dataorder.llm.blend import BlendedSampler as BlendedSampler
    from dataorder.llm.factory import create_megatron_sampler as create_megatron_sampler
    from dataorder.llm.megatron import BaseMegatronSampler as BaseMegatronSampler
    from dataorder.llm.megatron import (
        MegatronPretrainingRandomSampler as MegatronPretrainingRandomSampler,
    )
    from dataorder.llm.megatron import MegatronPretrainingSampler as MegatronPretrainingSampler
    from dataorder.llm.mixlog import MixtureLog as MixtureLog
    from dataorder.llm.mixlog import SourceDatasets as SourceDatasets
    from dataorder.llm.mixlog import broadcast_weights as broadcast_weights
    from dataorder.llm.mixture import MixtureSchedule as MixtureSchedule
    from dataorder.llm.mixture import Ramp as Ramp
    from dataorder.llm.packing.batch_styles import MegatronStyle as MegatronStyle
    from dataorder.llm.packing.dataset import ConcatTokens as ConcatTokens
    from dataorder.llm.packing.dataset import DocumentRange as DocumentRange
    from dataorder.llm.packing.dataset import PackedDataset as PackedDataset
    from dataorder.llm.packing.lengths import DocumentLengths as DocumentLengths
    from dataorder.llm.packing.sampler import PackedSampler as PackedSampler
    from dataorder.llm.schedule import BatchSizeSchedule as BatchSizeSchedule
    from dataorder.llm.schedule import StepInfo as StepInfo
    from dataorder.llm.splits import held_out as held_out
    from dataorder.llm.splits import split_documents as split_documents
    from dataorder.llm.vsl import VariableLengthSampler as VariableLengthSampler


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
