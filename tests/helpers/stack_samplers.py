"""Every sampler family the stack integrations must carry, built for one rank of a layout.

``FAMILIES`` maps a name to ``make(rank, dp_size) -> sampler``: Megatron single and random,
blended, torch-style per-index, bucket, ``packed``, the real
:class:`~dataorder.llm.packing.PackedSampler` over :data:`DOCUMENT_LENGTHS` (60 documents, rows
of :data:`SEQ_LEN` tokens, 4 windows), and ``vsl``, the
:class:`~dataorder.llm.vsl.VariableLengthSampler` over the same documents (chunks of 4 to 16
tokens, 32 tokens per rank and step). Their micro-batches hold ``(document, start, stop)``
spans, not ints, so no integration may assume a batch is a list of ints, and what they read is
counted in tokens through their batching rule (NOTE [ Coverage ] in
:mod:`dataorder.core.batching`).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from dataorder.core.batching import Coverage, coverage
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.llm.packing import PackedSampler
from dataorder.llm.vsl import VariableLengthSampler
from dataorder.parallel.distributed import DistributedSampler

N = 48
SEQ_LEN = 32
#: Token counts of 60 documents, lognormal-like (mean ~15, one of 80 tokens, split over rows):
#: 879 tokens in 30 rows of 32 per epoch, packed in windows of 16 documents.
DOCUMENT_LENGTHS = [
    13, 17, 10, 6, 8, 5, 14, 44, 8, 7, 20, 18, 14, 5, 13, 25, 4, 8, 2, 4,
    2, 10, 4, 17, 15, 11, 1, 8, 12, 14, 3, 8, 5, 6, 34, 6, 13, 29, 7, 12,
    14, 14, 4, 14, 45, 3, 29, 14, 7, 80, 26, 4, 14, 22, 11, 24, 12, 24, 49, 7,
]  # fmt: skip


def packed(rank: int, dp_size: int) -> PackedSampler:
    """Micro-batches of 2 rows of :data:`SEQ_LEN` tokens; windows of 16 documents, chunks of 4."""
    return PackedSampler(DOCUMENT_LENGTHS, SEQ_LEN, 2, rank, dp_size, seed=11, chunk=4, window=16)


def bucket_dataset() -> BaseMultiresolutionDataset:
    rng = np.random.default_rng(5)
    return BaseMultiresolutionDataset.from_bucket_ids(
        rng.integers(0, 3, N), resolutions=[(256, 256), (320, 192), (192, 320)]
    )


FAMILIES: dict[str, Callable[[int, int], Any]] = {
    "megatron-single": lambda r, w: MegatronPretrainingSampler(N, 2, r, w),
    "megatron-random": lambda r, w: MegatronPretrainingRandomSampler(N, 2, r, w, seed=3),
    "blended": lambda r, w: BlendedSampler([30, 18], [0.6, 0.4], 2, r, w, 2 * w, seed=4),
    "distributed": lambda r, w: DistributedSampler(range(N), num_replicas=w, rank=r, seed=5),
    "bucket": lambda r, w: SequentialBucketSampler(
        bucket_dataset(), base_batch_size=2, drop_last=False, seed=6, num_replicas=w, rank=r
    ),
    "packed": packed,
    "vsl": lambda r, w: VariableLengthSampler(
        DOCUMENT_LENGTHS, 16, SEQ_LEN, r, w, seed=12, min_seq_len=4
    ),
}


class Items:
    """``dataset[i] == i`` for any ``i`` (an int, a span, ``None`` padding)."""

    def __init__(self, size: int = N) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: Any) -> Any:
        return i


def collate_list(batch: list[Any]) -> list[Any]:
    return list(batch)


def example(script: str) -> ModuleType:
    """``examples/<script>`` as a module (its ``main()`` is not run), under a name of its own."""
    path = Path(__file__).resolve().parents[2] / "examples" / script
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    if spec.name not in sys.modules:  # a dataclass in it looks its module up there
        sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def token_coverage(ids: Iterable[int], first: Sequence[int]) -> Coverage:
    """What trained token ids cover (NOTE [ Coverage ] in :mod:`dataorder.core.batching`), in a
    corpus whose document ``d`` holds the ids ``first[d] + 1 .. first[d] + length``: id ``i`` is
    the one-token span ``(d, t, t + 1)`` of its document."""
    at = np.asarray(list(ids), dtype=np.int64) - 1
    documents = np.searchsorted(np.asarray(first, dtype=np.int64), at, side="right") - 1
    starts = at - np.asarray(first, dtype=np.int64)[documents]
    return coverage((documents, starts, starts + 1))
