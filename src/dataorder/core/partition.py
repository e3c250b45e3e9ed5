"""Global-block partition math: which positions of a global stream each rank reads.

A *segment* is a run of ``n`` global positions (an epoch of a dataset, or one bucket's share of
an epoch). It is cut into global blocks of ``per_rank * dp_size`` positions; block ``k`` is one
step on every rank, and each rank takes its slice of the block:

* ``"contiguous"`` (Megatron): rank ``r`` takes ``[r * per_rank, (r + 1) * per_rank)`` of the block;
* ``"strided"`` (torch's DistributedSampler, NeMo's bucket sampler): rank ``r`` takes positions
  ``r, r + dp_size, r + 2 * dp_size, ...`` of the block.

The end of the segment is handled for the whole block, never per rank, so every rank always gets
the same number of batches of the same size (a per-rank drop is how DDP jobs hang):

* ``"drop"``: only whole blocks (or whole ``unit``\\ s, e.g. a global batch) are used; the rest of
  the segment is dropped, and :attr:`EpochBlocks.dropped` says how many positions.
* ``"pad"``: the segment is extended to a whole number of blocks (or ``unit``\\ s); positions
  ``>= n`` are padding, and :attr:`EpochBlocks.padded` says how many.
* ``"shrink"``: whole blocks, then one smaller final block with ``ceil(t / dp_size)`` positions
  per rank for the ``t`` left over, padded by fewer than ``dp_size`` positions.

``round_to`` first pads a segment to a multiple of that many positions (NeMo's bucket sampler
pads each bucket to a multiple of the number of ranks, then drops per rank). Positions ``>= n``
are padding; what a padding slot holds (``None``, a repeated sample) is the sampler's choice.
Nothing here knows about orders or randomness.

One implementation serves one segment (:func:`plan_epoch`, an :class:`EpochBlocks`) and many
(:func:`plan_segments`, a :class:`SegmentPlan` whose arrays are vectorised over segments).

Worked example (``n=10``, ``per_rank=2``, ``dp_size=2``, ``tail="pad"``)::

    >>> from dataorder.core.partition import plan_epoch
    >>> lay = plan_epoch(10, per_rank=2, dp_size=2, tail="pad")
    >>> lay.num_batches, lay.padded
    (3, 2)
    >>> lay.batch_positions(0, rank=1, split="contiguous").tolist()
    [2, 3]
    >>> lay.batch_positions(2, rank=1, split="contiguous").tolist()  # 10, 11 are padding
    [10, 11]
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_choice, check_int, check_int_array

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_POSITIONS",
    "SPLITS",
    "TAILS",
    "EpochBlocks",
    "SegmentPlan",
    "Split",
    "Tail",
    "plan_epoch",
    "plan_segments",
    "rank_offsets",
]

Split = Literal["contiguous", "strided"]
Tail = Literal["drop", "pad", "shrink"]
SPLITS: tuple[str, ...] = ("contiguous", "strided")
TAILS: tuple[str, ...] = ("drop", "pad", "shrink")

IntArray = npt.NDArray[np.int64]

#: Largest per-rank batch a sampler accepts, and (``dataorder.core.topology.MAX_DP_SIZE``) the
#: largest data-parallel size: a global block then has at most 2**62 positions, so every global
#: position of an epoch of up to :data:`MAX_POSITIONS` samples is an exact int64.
MAX_BATCH_SIZE = 2**31

#: Largest number of samples in a segment (an epoch, a bucket).
MAX_POSITIONS = 2**62


def rank_offsets(per_rank: int, dp_size: int, rank: int, split: Split) -> IntArray:
    """Offsets of ``rank``'s slice inside one block of ``per_rank * dp_size`` positions."""
    steps = np.arange(per_rank, dtype=np.int64)
    if split == "contiguous":
        return rank * per_rank + steps
    return rank + dp_size * steps


def _cut(
    n: IntArray, per_rank: IntArray, dp_size: int, tail: Tail, unit: IntArray, round_to: int
) -> tuple[IntArray, IntArray]:
    """The partition arithmetic, vectorised over segments: ``(full_blocks, tail_per_rank)``."""
    span = -(-n // round_to) * round_to
    block = per_rank * dp_size
    if tail == "shrink":
        full = span // block
        return full, -(-(span - full * block) // dp_size)
    units = span // unit if tail == "drop" else -(-span // unit)
    return units * (unit // block), np.zeros_like(span)


@dataclass(frozen=True)
class EpochBlocks:
    """How one segment of ``n`` positions is cut into global blocks. Build with :func:`plan_epoch`.

    Attributes:
        n: Real positions in the segment.
        per_rank: Positions per rank in a full block (the per-rank batch size).
        dp_size: Number of data-parallel ranks.
        full_blocks: Number of full blocks of ``per_rank * dp_size`` positions.
        tail_per_rank: Per-rank size of one final smaller block (``"shrink"``), else 0.
    """

    n: int
    per_rank: int
    dp_size: int
    full_blocks: int
    tail_per_rank: int

    @property
    def block_size(self) -> int:
        """Positions in one full block: ``per_rank * dp_size``."""
        return self.per_rank * self.dp_size

    @property
    def num_batches(self) -> int:
        """Batches every rank gets in the segment."""
        return self.full_blocks + (1 if self.tail_per_rank else 0)

    @property
    def total_positions(self) -> int:
        """Positions covered by all blocks, padding included."""
        return self.full_blocks * self.block_size + self.tail_per_rank * self.dp_size

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

    def batch_positions(self, batch: int, *, rank: int, split: Split) -> IntArray:
        """Positions of ``rank``'s slice of block ``batch`` (padding positions are ``>= n``)."""
        batch = check_int("batch", batch, min_value=0, max_value=self.num_batches - 1)
        per = self.batch_size_at(batch)
        return self.batch_start(batch) + rank_offsets(per, self.dp_size, rank, split)

    def step_of(self, consumed: int, *, strict: bool = False) -> int:
        """The block index (step) after which ``consumed`` positions have been taken.

        Args:
            consumed: Positions (padding included) all ranks have taken.
            strict: If True, ``consumed`` must be a count this layout itself reaches: ``k`` full
                blocks (``k <= full_blocks``) or :attr:`total_positions`. If False (the default),
                it may also come from another layout of the same segment: a count at or past the
                end of the blocks means the segment is finished, and so does a count inside a
                block but past the real data (another layout's padding ended the segment). A
                block boundary past the real data but before the end (the padding blocks of a
                ``unit``) gives that block, so a resume completes the padded unit exactly as an
                uninterrupted run does.

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
                f"per_rank x dp_size = {self.per_rank} x {self.dp_size} = {self.block_size} up "
                f"to {self.total_positions} positions"
            )
        if consumed >= self.total_positions:
            return self.num_batches
        if consumed % self.block_size == 0:
            return consumed // self.block_size
        if consumed >= self.n and self.padded:
            return self.num_batches
        raise ValueError(
            f"consumed={consumed} is not a multiple of the global block "
            f"per_rank x dp_size = {self.per_rank} x {self.dp_size} = {self.block_size}; "
            "this layout cannot continue from it (resume at a global-batch boundary, or with "
            "a data-parallel size whose block divides it)"
        )

    def consumed_at(self, step: int) -> int:
        """Positions all ranks have taken after ``step`` blocks (``0 <= step <= num_batches``)."""
        step = check_int("step", step, min_value=0, max_value=self.num_batches)
        return self.total_positions if step >= self.full_blocks else step * self.block_size

    def rank_positions(self, *, rank: int, split: Split, start: int, stop: int) -> list[IntArray]:
        """``rank``'s positions of blocks ``start .. stop - 1``, as whole batches.

        Returns:
            At most two arrays: the full blocks in the range as one ``(k, per_rank)`` array, then
            the final smaller block of a ``"shrink"`` tail as a ``(1, tail_per_rank)`` array.
            Padding positions are ``>= n``.
        """
        rank = check_int("rank", rank, min_value=0, max_value=self.dp_size - 1)
        start = check_int("start", start, min_value=0, max_value=self.num_batches)
        stop = check_int("stop", stop, min_value=start, max_value=self.num_batches)
        out: list[IntArray] = []
        full_stop = min(stop, self.full_blocks)
        if start < full_stop:
            starts = np.arange(start, full_stop, dtype=np.int64) * self.block_size
            offsets = rank_offsets(self.per_rank, self.dp_size, rank, split)
            out.append(starts[:, None] + offsets[None, :])
        if self.tail_per_rank and start <= self.full_blocks < stop:
            out.append(self.batch_positions(self.full_blocks, rank=rank, split=split)[None, :])
        return out


def _check_args(
    per_rank: int, dp_size: int, tail: str, unit: int | None, round_to: int
) -> tuple[int, int, Tail, int, int]:
    per_rank = check_int("per_rank", per_rank, min_value=1, max_value=MAX_BATCH_SIZE)
    dp_size = check_int("dp_size", dp_size, min_value=1, max_value=MAX_BATCH_SIZE)
    checked: Tail = check_choice("tail", tail, TAILS)  # type: ignore[assignment]
    block = per_rank * dp_size
    unit = block if unit is None else check_int("unit", unit, min_value=1, max_value=MAX_POSITIONS)
    if unit % block:
        raise ValueError(
            f"unit must be a multiple of per_rank x dp_size = {block}; got unit={unit}"
        )
    if checked == "shrink" and unit != block:
        raise ValueError(f"unit applies only to tail='drop' or 'pad'; got unit={unit}")
    round_to = check_int("round_to", round_to, min_value=1, max_value=MAX_POSITIONS)
    return per_rank, dp_size, checked, unit, round_to


def plan_epoch(
    n: int,
    *,
    per_rank: int,
    dp_size: int,
    tail: Tail,
    unit: int | None = None,
    round_to: int = 1,
) -> EpochBlocks:
    """Cut a segment of ``n`` positions into global blocks of ``per_rank * dp_size``.

    Args:
        n: Real positions in the segment (``>= 0``).
        per_rank: Per-rank batch size (``>= 1``).
        dp_size: Data-parallel size (``>= 1``).
        tail: ``"drop"``, ``"pad"`` or ``"shrink"`` (see the module docstring).
        unit: With ``"drop"`` or ``"pad"``, drop or pad to a whole number of ``unit`` positions
            instead of blocks, e.g. a global batch of several micro-batch blocks. Must be a
            multiple of ``per_rank * dp_size``.
        round_to: Pad the segment to a multiple of this many positions first.

    Returns:
        The :class:`EpochBlocks`.
    """
    n = check_int("n", n, min_value=0, max_value=MAX_POSITIONS)
    per_rank, dp_size, checked, unit, round_to = _check_args(
        per_rank, dp_size, tail, unit, round_to
    )
    one = np.array([n], dtype=np.int64)
    full, tail_per_rank = _cut(
        one, np.array([per_rank], dtype=np.int64), dp_size, checked, np.array([unit]), round_to
    )
    return EpochBlocks(n, per_rank, dp_size, int(full[0]), int(tail_per_rank[0]))


@dataclass(frozen=True, eq=False)
class SegmentPlan:
    """Consecutive segments, each cut into global blocks: an epoch made of runs (bucket by
    bucket, or interleaved). Arrays have shape ``(S,)``, except ``offsets``. Build with
    :func:`plan_segments`.

    Attributes:
        n: Real positions of each segment.
        per_rank: Per-rank batch size of each segment.
        dp_size: Number of data-parallel ranks.
        full_blocks: Whole global blocks of each segment.
        tail_per_rank: Per-rank size of each segment's final smaller block, or 0.
        offsets: Shape ``(S + 1,)``: segment ``k`` is steps ``offsets[k] .. offsets[k + 1] - 1``.
    """

    n: IntArray
    per_rank: IntArray
    dp_size: int
    full_blocks: IntArray
    tail_per_rank: IntArray
    offsets: IntArray

    @property
    def num_segments(self) -> int:
        """Number of segments ``S``."""
        return int(self.n.size)

    @property
    def num_steps(self) -> int:
        """Steps (batches per rank) of all segments."""
        return int(self.offsets[-1])

    def layout(self, k: int) -> EpochBlocks:
        """Deprecated 0.2 name of :meth:`blocks`."""
        warnings.warn("SegmentPlan.layout() is deprecated; use .blocks()", DeprecationWarning, 2)
        return self.blocks(k)

    def blocks(self, k: int) -> EpochBlocks:
        """The :class:`EpochBlocks` of segment ``k``."""
        return EpochBlocks(
            int(self.n[k]),
            int(self.per_rank[k]),
            self.dp_size,
            int(self.full_blocks[k]),
            int(self.tail_per_rank[k]),
        )

    def total_positions(self) -> IntArray:
        """Shape ``(S,)``: positions each segment's blocks cover, padding included."""
        return (self.full_blocks * self.per_rank + self.tail_per_rank) * self.dp_size

    @property
    def dropped(self) -> int:
        """Real positions no block covers, over all segments."""
        return int(np.maximum(self.n - self.total_positions(), 0).sum())

    @property
    def padded(self) -> int:
        """Padding positions blocks cover, over all segments."""
        return int(np.maximum(self.total_positions() - self.n, 0).sum())

    def locate(self, step: int) -> tuple[int, int]:
        """``(segment, step in segment)`` of step ``step`` (O(log S)); past the end, ``(S, 0)``."""
        if step >= self.num_steps:
            return self.num_segments, 0
        k = int(np.searchsorted(self.offsets, step, side="right")) - 1
        return k, step - int(self.offsets[k])


def plan_segments(
    n: npt.ArrayLike,
    *,
    per_rank: int | npt.ArrayLike,
    dp_size: int,
    tail: Tail,
    round_to: int = 1,
) -> SegmentPlan:
    """Cut consecutive segments into global blocks, vectorised (equal to :func:`plan_epoch` on
    each segment).

    Args:
        n: Shape ``(S,)``: real positions of each segment (``>= 0``).
        per_rank: Shape ``(S,)``, or one int: per-rank batch size of each segment (``>= 1``).
        dp_size: Data-parallel size (``>= 1``).
        tail: ``"drop"``, ``"pad"`` or ``"shrink"``, for every segment.
        round_to: Pad each segment to a multiple of this many positions first.

    Returns:
        The :class:`SegmentPlan`.

    Raises:
        ValueError: If the arrays have other shapes or hold out-of-range values.
    """
    sizes = check_int_array("n", n, min_value=0, max_value=MAX_POSITIONS)
    if isinstance(per_rank, int | numbers.Integral) and not isinstance(per_rank, bool):
        one = check_int("per_rank", per_rank, min_value=1, max_value=MAX_BATCH_SIZE)
        per = np.full(sizes.shape, one, dtype=np.int64)
    else:
        per = check_int_array("per_rank", per_rank, min_value=1, max_value=MAX_BATCH_SIZE)
        if per.shape != sizes.shape:
            raise ValueError(
                f"per_rank must have n's shape {sizes.shape} or be one int; got {per.shape}"
            )
    _, dp_size, checked, _, round_to = _check_args(1, dp_size, tail, None, round_to)
    full, tail_per_rank = _cut(sizes, per, dp_size, checked, per * dp_size, round_to)
    offsets = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(full + (tail_per_rank > 0), out=offsets[1:])
    return SegmentPlan(sizes, per, dp_size, full, tail_per_rank, offsets)


def __getattr__(name: str) -> Any:
    # ``EpochLayout``, the 0.2 name of :class:`EpochBlocks` ("layout" now means only the
    # data-parallel layout, the sizes a state records): kept so code written for 0.2 runs, with a
    # warning; to be removed in 0.4
    if name == "EpochLayout":
        warnings.warn(
            "dataorder.core.partition.EpochLayout is deprecated; use EpochBlocks",
            DeprecationWarning,
            2,
        )
        return EpochBlocks
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
