"""An epoch that is one segment of global blocks: the plan of the Megatron and distributed samplers.

:class:`BlockPlan` joins an :class:`~dataorder.core.partition.EpochBlocks` (which positions each
rank reads at each step) with the sampler's order (which sample a position holds), and answers
the :class:`~dataorder.core.cursor.EpochPlan` questions with one global counter, ``consumed``:
the positions all ranks together have taken in the epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from dataorder.core.partition import EpochBlocks, Split

__all__ = ["BlockPlan", "BlockSteps", "RowMaker"]

T = TypeVar("T")

#: ``make(rank)`` returns a function that turns that rank's positions, shape ``(k, b)``, into its
#: ``k`` batches. It is called once per rank and plan, so it may build a rank's order eagerly.
RowMaker = Callable[[int], Callable[[npt.NDArray[np.int64]], list[T]]]


class BlockSteps:
    """The :class:`~dataorder.core.cursor.EpochPlan` questions an epoch of global blocks answers
    by itself, with one global counter, ``consumed`` (counted in :attr:`unit`): a plan that adds
    what fills the blocks (:class:`BlockPlan`; the packed sampler's dealt rows) inherits them.
    """

    blocks: EpochBlocks
    #: What ``consumed`` counts, in :meth:`describe`.
    unit: ClassVar[str] = "global positions"

    @property
    def num_steps(self) -> int:
        """Batches every rank yields in the epoch."""
        return self.blocks.num_batches

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks the blocks are cut for."""
        return self.blocks.dp_size

    def step_of(self, progress: Mapping[str, int], *, strict: bool = False) -> int:
        """The step at ``progress["consumed"]`` (see :meth:`EpochBlocks.step_of`)."""
        return self.blocks.step_of(progress["consumed"], strict=strict)

    def describe(self, progress: Mapping[str, int], epoch: int) -> str:
        """Where ``progress`` stands in ``epoch``, in words."""
        total = self.blocks.total_positions
        return f"{progress['consumed']} of {total} {self.unit} of epoch {epoch}"

    def progress_at(self, step: int) -> dict[str, int]:
        """``{"consumed": positions taken after step steps}``."""
        return {"consumed": self.blocks.consumed_at(step)}


@dataclass(frozen=True, eq=False)
class BlockPlan(BlockSteps, Generic[T]):
    """One epoch of global blocks on one layout, with the order that fills them.

    Attributes:
        blocks: The epoch's blocks.
        split: How a block is cut between ranks (``"contiguous"`` or ``"strided"``).
        make_rows: See :data:`RowMaker`.
    """

    blocks: EpochBlocks
    split: Split
    make_rows: RowMaker[T]
    _rows: dict[int, Callable[[npt.NDArray[np.int64]], list[T]]] = field(
        default_factory=dict, repr=False
    )

    def batches(self, rank: int, start: int, stop: int) -> list[T]:
        """``rank``'s batches of steps ``start .. stop - 1``."""
        rows = self._rows.get(rank)
        if rows is None:
            rows = self._rows[rank] = self.make_rows(rank)
        out: list[T] = []
        for positions in self.blocks.rank_positions(
            rank=rank, split=self.split, start=start, stop=stop
        ):
            out += rows(positions)
        return out
