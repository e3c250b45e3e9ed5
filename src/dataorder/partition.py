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
        """Index of the block that starts at global position ``consumed`` (lenient).

        ``consumed`` counts positions (padding included) already taken by all ranks. It must fall
        on a block boundary of *this* layout; a count at or past the end of the blocks means the
        segment is finished and gives :attr:`num_batches`. So does a count inside a block but past
        the real data (another layout's padding ended the segment). A block boundary past the
        real data but before the end (the padding blocks of a ``unit``) gives that block, so a
        resume completes the padded unit exactly as an uninterrupted run does. This is what a
        layout may *continue* from; :meth:`step_of` with ``strict=True`` says what it can *reach*.

        Raises:
            ValueError: If ``consumed`` is negative or inside a block of this layout before the
                end of the real data.
        """
        return self.step_of(consumed)

    def step_of(self, consumed: int, *, strict: bool = False) -> int:
        """The block index (step) after which ``consumed`` positions have been taken.

        Args:
            consumed: Positions (padding included) all ranks have taken.
            strict: If True, ``consumed`` must be a count this layout itself reaches: ``k`` full
                blocks (``k <= full_blocks``) or :attr:`total_positions`. If False (the default),
                it may also come from another layout of the same segment (see
                :meth:`batch_for_consumed`).

        Raises:
            ValueError: If ``consumed`` is negative, not on a block boundary of this layout
                before the end of the real data, or (``strict``) not reachable at all.
        """
        consumed = check_int("consumed", consumed, min_value=0)
        if strict:
            if consumed == self.total_positions:
                return self.num_batches
            k, rest = divmod(consumed, self.block_size)
            if rest == 0 and k <= self.full_blocks:
                return k
            raise ValueError(
                f"consumed={consumed} is not a position this layout reaches: it takes blocks of "
                f"per_rank x world = {self.per_rank} x {self.world} = {self.block_size} up to "
                f"{self.total_positions} positions"
            )
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

    def consumed_at(self, step: int) -> int:
        """Positions all ranks have taken after ``step`` blocks (``0 <= step <= num_batches``)."""
        step = check_int("step", step, min_value=0, max_value=self.num_batches)
        return self.total_positions if step >= self.full_blocks else step * self.block_size

    def rank_positions(
        self, *, rank: int, split: Split, start: int, stop: int
    ) -> list[npt.NDArray[np.int64]]:
        """``rank``'s positions of blocks ``start .. stop - 1``, as whole batches.

        Returns:
            At most two arrays: the full blocks in the range as one ``(k, per_rank)`` array, then
            the final smaller block of a ``"shrink"`` layout as a ``(1, tail_per_rank)`` array.
            Padding positions are ``>= n``.
        """
        rank = check_int("rank", rank, min_value=0, max_value=self.world - 1)
        start = check_int("start", start, min_value=0, max_value=self.num_batches)
        stop = check_int("stop", stop, min_value=start, max_value=self.num_batches)
        out: list[npt.NDArray[np.int64]] = []
        full_stop = min(stop, self.full_blocks)
        if start < full_stop:
            starts = np.arange(start, full_stop, dtype=np.int64) * self.block_size
            offsets = rank_offsets(self.per_rank, self.world, rank, split)
            out.append(starts[:, None] + offsets[None, :])
        if self.tail_per_rank and start <= self.full_blocks < stop:
            out.append(self.batch_positions(self.full_blocks, rank=rank, split=split)[None, :])
        return out


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
