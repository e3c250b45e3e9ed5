"""Global-block partition math: which positions of a global stream each rank reads.

A *segment* is a run of ``n`` global positions (an epoch of a dataset, or one bucket of a bucket
sampler). It is cut into global blocks of ``per_rank * world`` positions; block ``k`` is one step
on every rank, and each rank takes its slice of the block:

* ``"contiguous"`` (Megatron): rank ``r`` takes ``[r * per_rank, (r + 1) * per_rank)`` of the block;
* ``"strided"`` (torch's DistributedSampler, NeMo's bucket sampler): rank ``r`` takes positions
  ``r, r + world, r + 2 * world, ...`` of the block.

The end of the segment is handled for the whole block, never per rank, so every rank always gets
the same number of batches of the same size (a per-rank drop is how DDP jobs hang):

* ``"drop"``: only whole blocks (or whole ``unit``\\ s, e.g. a global batch) are used; the rest of
  the segment is dropped, and :attr:`EpochLayout.dropped` says how many positions.
* ``"pad"``: the segment is extended to a whole number of blocks (or ``unit``\\ s); positions
  ``>= n`` are padding, and :attr:`EpochLayout.padded` says how many.
* ``"shrink"``: whole blocks, then one smaller final block with ``ceil(t / world)`` positions per
  rank for the ``t`` left over, padded by fewer than ``world`` positions.

Positions ``>= n`` are padding; what a padding slot holds (``None``, a repeated sample) is the
sampler's choice. Nothing here knows about orders or randomness.

Worked example (``n=10``, ``per_rank=2``, ``world=2``, ``tail="pad"``)::

    >>> from dataorder.partition import plan_epoch
    >>> lay = plan_epoch(10, per_rank=2, world=2, tail="pad")
    >>> lay.num_batches, lay.padded
    (3, 2)
    >>> lay.batch_positions(0, rank=1, split="contiguous").tolist()
    [2, 3]
    >>> lay.batch_positions(2, rank=1, split="contiguous").tolist()  # 10, 11 are padding
    [10, 11]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_choice, check_int

__all__ = ["SPLITS", "TAILS", "EpochLayout", "Split", "Tail", "plan_epoch", "rank_offsets"]

Split = Literal["contiguous", "strided"]
Tail = Literal["drop", "pad", "shrink"]
SPLITS: tuple[str, ...] = ("contiguous", "strided")
TAILS: tuple[str, ...] = ("drop", "pad", "shrink")


def rank_offsets(per_rank: int, world: int, rank: int, split: Split) -> npt.NDArray[np.int64]:
    """Offsets of ``rank``'s slice inside one block of ``per_rank * world`` positions."""
    steps = np.arange(per_rank, dtype=np.int64)
    if split == "contiguous":
        return rank * per_rank + steps
    return rank + world * steps


@dataclass(frozen=True)
class EpochLayout:
    """How one segment of ``n`` positions is cut into global blocks. Build with :func:`plan_epoch`.

    Attributes:
        n: Real positions in the segment.
        per_rank: Positions per rank in a full block (the per-rank batch size).
        world: Number of data-parallel ranks.
        full_blocks: Number of full blocks of ``per_rank * world`` positions.
        tail_per_rank: Per-rank size of one final smaller block (``"shrink"``), else 0.
    """

    n: int
    per_rank: int
    world: int
    full_blocks: int
    tail_per_rank: int

    @property
    def block_size(self) -> int:
        """Positions in one full block: ``per_rank * world``."""
        return self.per_rank * self.world

    @property
    def num_batches(self) -> int:
        """Batches every rank gets in the segment."""
        return self.full_blocks + (1 if self.tail_per_rank else 0)

    @property
    def total_positions(self) -> int:
        """Positions covered by all blocks, padding included."""
        return self.full_blocks * self.block_size + self.tail_per_rank * self.world

    @property
    def dropped(self) -> int:
        """Real positions that no block covers."""
        return max(0, self.n - self.total_positions)

    @property
    def padded(self) -> int:
        """Padding positions (``>= n``) that blocks cover."""
        return max(0, self.total_positions - self.n)

    def batch_start(self, batch: int) -> int:
        """Global position where block ``batch`` starts."""
        return batch * self.block_size

    def batch_size_at(self, batch: int) -> int:
        """Per-rank size of block ``batch``."""
        return self.tail_per_rank if batch >= self.full_blocks else self.per_rank

    def batch_positions(self, batch: int, *, rank: int, split: Split) -> npt.NDArray[np.int64]:
        """Positions of ``rank``'s slice of block ``batch`` (padding positions are ``>= n``)."""
        batch = check_int("batch", batch, min_value=0, max_value=self.num_batches - 1)
        per = self.batch_size_at(batch)
        return self.batch_start(batch) + rank_offsets(per, self.world, rank, split)

    def batch_for_consumed(self, consumed: int) -> int:
        """Index of the block that starts at global position ``consumed``.

        ``consumed`` counts positions (padding included) already taken by all ranks. It must fall
        on a block boundary of *this* layout; a count at or past the end of the blocks means the
        segment is finished and gives :attr:`num_batches`. So does a count inside a block but past
        the real data (another layout's padding ended the segment). A block boundary past the
        real data but before the end (the padding blocks of a ``unit``) gives that block, so a
        resume completes the padded unit exactly as an uninterrupted run does.

        Raises:
            ValueError: If ``consumed`` is negative or inside a block of this layout before the
                end of the real data.
        """
        consumed = check_int("consumed", consumed, min_value=0)
        if consumed >= self.total_positions:
            return self.num_batches
        if consumed % self.block_size == 0:
            return consumed // self.block_size
        if consumed >= self.n and self.padded:
            return self.num_batches
        raise ValueError(
            f"consumed={consumed} is not a multiple of the global block "
            f"per_rank x world = {self.per_rank} x {self.world} = {self.block_size}; "
            "this layout cannot continue from it (resume at a global-batch boundary, or with "
            "a data-parallel size whose block divides it)"
        )

    def iter_rank_positions(
        self, *, rank: int, split: Split, start_batch: int = 0, chunk: int = 1024
    ) -> Iterator[npt.NDArray[np.int64]]:
        """Yield ``rank``'s positions from ``start_batch`` on, as 2-D arrays of whole batches.

        Each array has shape ``(k, batch size)``: ``k`` starts at 1 and doubles up to ``chunk``,
        so the first batch after a start or a resume costs one batch's work, and later work is
        vectorised over many batches. The final smaller block of a ``"shrink"`` layout comes as
        its own array.
        """
        rank = check_int("rank", rank, min_value=0, max_value=self.world - 1)
        start_batch = check_int("start_batch", start_batch, min_value=0)
        chunk = check_int("chunk", chunk, min_value=1)
        b = start_batch
        k = 1
        if b < self.full_blocks:
            offsets = rank_offsets(self.per_rank, self.world, rank, split)
            while b < self.full_blocks:
                e = min(self.full_blocks, b + k)
                starts = np.arange(b, e, dtype=np.int64) * self.block_size
                yield starts[:, None] + offsets[None, :]
                b = e
                k = min(chunk, 2 * k)
        if self.tail_per_rank and start_batch <= self.full_blocks:
            yield self.batch_positions(self.full_blocks, rank=rank, split=split)[None, :]


def plan_epoch(
    n: int,
    *,
    per_rank: int,
    world: int,
    tail: Tail,
    unit: int | None = None,
) -> EpochLayout:
    """Cut a segment of ``n`` positions into global blocks of ``per_rank * world``.

    Args:
        n: Real positions in the segment (``>= 0``).
        per_rank: Per-rank batch size (``>= 1``).
        world: Data-parallel size (``>= 1``).
        tail: ``"drop"``, ``"pad"`` or ``"shrink"`` (see the module docstring).
        unit: With ``"drop"`` or ``"pad"``, drop or pad to a whole number of ``unit`` positions
            instead of blocks, e.g. a global batch of several micro-batch blocks. Must be a
            multiple of ``per_rank * world``.

    Returns:
        The :class:`EpochLayout`.
    """
    n = check_int("n", n, min_value=0)
    per_rank = check_int("per_rank", per_rank, min_value=1)
    world = check_int("world", world, min_value=1)
    tail = check_choice("tail", tail, TAILS)  # type: ignore[assignment]
    block = per_rank * world
    if unit is None:
        unit = block
    unit = check_int("unit", unit, min_value=1)
    if unit % block:
        raise ValueError(f"unit must be a multiple of per_rank x world = {block}; got unit={unit}")
    if tail == "shrink":
        if unit != block:
            raise ValueError(f"unit applies only to tail='drop' or 'pad'; got unit={unit}")
        full, rest = divmod(n, block)
        return EpochLayout(n, per_rank, world, full, -(-rest // world))
    units = n // unit if tail == "drop" else -(-n // unit)
    return EpochLayout(n, per_rank, world, units * (unit // block), 0)
