"""The batching "fixed global blocks": the plan of the Megatron, blended and distributed samplers.

A *batching* (:class:`Batching`) says how an epoch's global blocks become each rank's steps, and
knows nothing of what fills them: :class:`FixedBlocks` cuts every block the same way between the
ranks (here); :class:`~dataorder.core.dealing.DealtByCost` deals each block by cost.
:class:`BlockPlan` joins an :class:`~dataorder.core.partition.EpochBlocks` (which positions each
rank reads at each step) with the sampler's order (which sample a position holds), and answers
the :class:`~dataorder.core.cursor.EpochPlan` questions with one global counter, ``consumed``:
the positions all ranks together have taken in the epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from dataorder.core.cursor import EpochPlan
from dataorder.core.partition import EpochBlocks, Split

__all__ = ["Batching", "BlockPlan", "BlockSteps", "FixedBlocks", "RowMaker"]

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


class Batching(Protocol):
    """How an epoch's global blocks become each rank's steps (NOTE [ A sampler is a source times
    a batching ] in :mod:`dataorder.llm.sampler`): it checks a layout, and plans an epoch from
    its blocks and what fills them (the fill is the source's, in the form this batching reads)."""

    def check(self, per_rank: int, dp_size: int) -> None:
        """Refuse a layout this batching cannot serve (ValueError naming it)."""
        ...

    def plan(self, blocks: EpochBlocks, fill: Any) -> EpochPlan[Any]:
        """The :class:`~dataorder.core.cursor.EpochPlan` of ``blocks`` filled by ``fill``."""
        ...


class Rows(Protocol[T]):
    """What fills fixed blocks: :meth:`make_rows` (a :data:`RowMaker`)."""

    def make_rows(self, rank: int) -> Callable[[npt.NDArray[np.int64]], list[T]]:
        """See :data:`RowMaker`."""
        ...


@dataclass(frozen=True)
class FixedBlocks:
    """The batching "fixed global blocks": each block cut between the ranks by ``split``.

    Attributes:
        split: ``"contiguous"`` (rank ``r`` reads slots ``r * per_rank ...``) or ``"strided"``.
    """

    split: Split = "contiguous"

    def check(self, per_rank: int, dp_size: int) -> None:
        """Any layout is served."""

    def plan(self, blocks: EpochBlocks, fill: Rows[Any]) -> BlockPlan[Any]:
        """The :class:`BlockPlan` of ``blocks`` filled by ``fill``."""
        return BlockPlan(blocks, self.split, fill.make_rows)
