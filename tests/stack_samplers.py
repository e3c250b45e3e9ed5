"""Every sampler family the stack integrations must carry, built for one rank of a layout.

``FAMILIES`` maps a name to ``make(rank, dp_size) -> sampler``. Besides the library's families
(Megatron single and random, blended, torch-style per-index, bucket) there is ``packed``: a
stand-in for a packed sampler whose micro-batches hold structured rows, ``(document, start,
stop)`` spans, not ints, so no integration may assume a batch is a list of ints. Its order and
state are a Megatron sampler's; only the items differ.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.parallel.distributed import DistributedSampler

N = 48
Span = tuple[int, int, int]


class PackedStandIn:
    """Micro-batches of ``(document, start, stop)`` spans; order and state of a Megatron sampler."""

    def __init__(self, rank: int, dp_size: int) -> None:
        self.inner = MegatronPretrainingRandomSampler(N, 2, rank, dp_size, seed=11)

    @staticmethod
    def rows(batch: list[int]) -> list[Span]:
        return [(i, 8 * (i % 3), 8 * (i % 3) + 8) for i in batch]

    @property
    def sampler(self) -> PackedStandIn:
        return self

    @property
    def epoch(self) -> int:
        return self.inner.epoch

    @property
    def remaining(self) -> int:
        return self.inner.remaining

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[list[Span]]:
        return (self.rows(b) for b in self.inner)

    def batch_at(self, step: int, *, rank: int | None = None, epoch: int | None = None) -> Any:
        return self.rows(self.inner.batch_at(step, rank=rank, epoch=epoch))

    def set_epoch(self, epoch: int) -> None:
        self.inner.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


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
    "packed": lambda r, w: PackedStandIn(r, w),
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
