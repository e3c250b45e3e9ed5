"""Packed sequences as a pure function: the rows of an epoch from (lengths, seq_len, seed, epoch).

* :mod:`~dataorder.llm.packing.lengths`: :class:`DocumentLengths`, the token count of every
  document from an array, a Megatron index or an Arrow column, never loaded whole;
* :mod:`~dataorder.llm.packing.megatron_files`: the Megatron ``.idx``/``.bin`` format, our reader
  and a small writer;
* :mod:`~dataorder.llm.packing.arrow_columns`: list columns of HF datasets and pyarrow tables;
* :mod:`~dataorder.llm.packing.windows`: which documents are packed together;
* :mod:`~dataorder.llm.packing.fit`: best-fit decreasing of one window;
* :mod:`~dataorder.llm.packing.plan`: :class:`PackingPlan` and :class:`EpochRows`, the row stream;
* :mod:`~dataorder.core.dealing` (a core batching, exported here): :func:`deal`, a global
  batch's rows to ranks by cost;
* :mod:`~dataorder.llm.packing.dataset`: :class:`PackedDataset`, a row into tensors;
* :mod:`~dataorder.llm.packing.batch_styles`: the tensors' formats, Hugging Face's and
  Megatron-LM's (:class:`MegatronStyle`);
* :mod:`~dataorder.llm.packing.rule`: :class:`PackedRows`, the batching rule of rows;
* :mod:`~dataorder.llm.packing.sampler`: :class:`PackedSampler`, micro-batches of rows.

Nothing here imports torch except :mod:`~dataorder.llm.packing.dataset`, lazily, when it makes
tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataorder._lazy import lazy_exports

#: Every public name of the package -> the module that defines it (one list: ``__all__`` and the
#: lazy import both read it; tests/test_static.py checks the typing block below against it).
_EXPORTS: dict[str, str] = {
    "ConcatTokens": "dataset",
    "DocumentLengths": "lengths",
    "DocumentRange": "dataset",
    "EpochRows": "plan",
    "MegatronStyle": "batch_styles",
    "PackedDataset": "dataset",
    "PackedRows": "rule",
    "PackedSampler": "sampler",
    "PackedWindow": "fit",
    "PackingPlan": "plan",
    "PackingStats": "plan",
    "deal": "dataorder.core.dealing",  # a core batching, exported here where packing uses it
    "deal_bounds": "dataorder.core.dealing",
    "pack_window": "fit",
    "read_index": "megatron_files",
    "write_megatron": "megatron_files",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers only: what __getattr__ returns
    from dataorder.core.dealing import deal as deal
    from dataorder.core.dealing import deal_bounds as deal_bounds
    from dataorder.llm.packing.batch_styles import MegatronStyle as MegatronStyle
    from dataorder.llm.packing.dataset import ConcatTokens as ConcatTokens
    from dataorder.llm.packing.dataset import DocumentRange as DocumentRange
    from dataorder.llm.packing.dataset import PackedDataset as PackedDataset
    from dataorder.llm.packing.fit import PackedWindow as PackedWindow
    from dataorder.llm.packing.fit import pack_window as pack_window
    from dataorder.llm.packing.lengths import DocumentLengths as DocumentLengths
    from dataorder.llm.packing.megatron_files import read_index as read_index
    from dataorder.llm.packing.megatron_files import write_megatron as write_megatron
    from dataorder.llm.packing.plan import EpochRows as EpochRows
    from dataorder.llm.packing.plan import PackingPlan as PackingPlan
    from dataorder.llm.packing.plan import PackingStats as PackingStats
    from dataorder.llm.packing.rule import PackedRows as PackedRows
    from dataorder.llm.packing.sampler import PackedSampler as PackedSampler


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
