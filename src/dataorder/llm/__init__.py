"""LLM pretraining and fine-tuning: micro-batch samplers, batch-size schedules, mixtures, packing.

==========================  ==================================================================
module                      what it is
==========================  ==================================================================
``sampler``                 the one micro-batch sampler: a source times a batching
``sources``                 its sources: a sample order, a blend of sources
``megatron``                Megatron-LM's and NeMo's "single" and "cyclic" micro-batch samplers
``orders``                  their orders (compat modes: ``compat_nemo``, ``compat_megatron``)
``factory``                 NeMo's ``create_megatron_sampler``
``schedule``                global batch-size schedules (Megatron's ramp-up)
``mixture``                 mixture weights and schedules, and their exact counts
``blend_order``, ``blend``  mixtures exact in every global batch (``BlendedSampler``)
``packing``                 packed rows of tokens as a pure function (``PackedSampler``)
``splits``                  held-out splits: ``--split`` ranges and ``held_out`` samplers
==========================  ==================================================================

Nothing here imports torch until tensors are made.
"""

from dataorder.llm.blend import BlendedSampler
from dataorder.llm.factory import create_megatron_sampler
from dataorder.llm.megatron import (
    BaseMegatronSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
)
from dataorder.llm.mixlog import MixtureLog, SourceDatasets, broadcast_weights
from dataorder.llm.mixture import MixtureSchedule, Ramp
from dataorder.llm.packing import (
    ConcatTokens,
    DocumentLengths,
    DocumentRange,
    MegatronStyle,
    PackedDataset,
    PackedSampler,
)
from dataorder.llm.schedule import BatchSizeSchedule, StepInfo
from dataorder.llm.splits import held_out, split_documents

__all__ = [
    "BaseMegatronSampler",
    "BatchSizeSchedule",
    "BlendedSampler",
    "ConcatTokens",
    "DocumentLengths",
    "DocumentRange",
    "MegatronPretrainingRandomSampler",
    "MegatronPretrainingSampler",
    "MegatronStyle",
    "MixtureLog",
    "MixtureSchedule",
    "PackedDataset",
    "PackedSampler",
    "Ramp",
    "SourceDatasets",
    "StepInfo",
    "broadcast_weights",
    "create_megatron_sampler",
    "held_out",
    "split_documents",
]
