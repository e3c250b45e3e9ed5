"""Packed sequences as a pure function: the rows of an epoch from (lengths, seq_len, seed, epoch).

* :mod:`~dataorder.llm.packing.lengths`: :class:`DocumentLengths`, the token count of every
  document from an array, a Megatron index or an Arrow column, never loaded whole;
* :mod:`~dataorder.llm.packing.megatron_files`: the Megatron ``.idx``/``.bin`` format, our reader
  and a small writer;
* :mod:`~dataorder.llm.packing.arrow_columns`: list columns of HF datasets and pyarrow tables;
* :mod:`~dataorder.llm.packing.windows`: which documents are packed together;
* :mod:`~dataorder.llm.packing.fit`: best-fit decreasing of one window;
* :mod:`~dataorder.llm.packing.plan`: :class:`PackingPlan` and :class:`EpochRows`, the row stream;
* :func:`deal` and :func:`deal_bounds` (from :mod:`dataorder.core.dealing`): a global batch's
  rows to ranks by cost;
* :mod:`~dataorder.llm.packing.dataset`: :class:`PackedDataset`, a row into tensors;
* :mod:`~dataorder.llm.packing.batch_styles`: the tensors' formats, Hugging Face's and
  Megatron-LM's (:class:`MegatronStyle`);
* :mod:`~dataorder.llm.packing.rule`: :class:`PackedRows`, the batching rule of rows;
* :mod:`~dataorder.llm.packing.sampler`: :class:`PackedSampler`, micro-batches of rows.

Nothing here imports torch except :mod:`~dataorder.llm.packing.dataset`, lazily, when it makes
tensors.
"""

from __future__ import annotations

from dataorder.core.dealing import deal, deal_bounds
from dataorder.llm.packing.batch_styles import MegatronStyle
from dataorder.llm.packing.dataset import ConcatTokens, DocumentRange, PackedDataset
from dataorder.llm.packing.fit import PackedWindow, pack_window
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.megatron_files import read_index, write_megatron
from dataorder.llm.packing.plan import EpochRows, PackingPlan, PackingStats
from dataorder.llm.packing.rule import PackedRows
from dataorder.llm.packing.sampler import PackedSampler

__all__ = [
    "ConcatTokens",
    "DocumentLengths",
    "DocumentRange",
    "EpochRows",
    "MegatronStyle",
    "PackedDataset",
    "PackedRows",
    "PackedSampler",
    "PackedWindow",
    "PackingPlan",
    "PackingStats",
    "deal",
    "deal_bounds",
    "pack_window",
    "read_index",
    "write_megatron",
]
