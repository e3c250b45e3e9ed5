"""Where a Megatron-style sampler sits: its micro-batch size and its data-parallel place.

The Megatron samplers (:mod:`dataorder.llm.megatron`) and the blended sampler
(:mod:`dataorder.llm.blend`) take the same placement arguments, in Megatron's names
(``micro_batch_size``, ``data_parallel_rank``, ``data_parallel_size``, or a ``mesh`` or a
:class:`~dataorder.core.topology.Topology`), check them the same way and record the same layout
in their states (``micro_batch_size`` and ``data_parallel_size``, never the rank).
:class:`MicroBatchPlacement` holds that once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dataorder._validate import check_int
from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.core.topology import Topology, resolve_topology

__all__ = ["MicroBatchPlacement"]


class MicroBatchPlacement:
    """Mixin: the micro-batch size and data-parallel place of a micro-batch sampler.

    A subclass calls :meth:`_set_placement` in its constructor, before anything that needs the
    layout. It provides the :class:`~dataorder.core.cursor.CursorSampler` hooks
    :attr:`dp_rank` and :meth:`layout_info`.
    """

    _mbs: int
    _dp: int
    _rank: int
    _topology: Topology

    def _set_placement(
        self,
        micro_batch_size: int,
        data_parallel_rank: int | None,
        data_parallel_size: int | None,
        *,
        mesh: Any,
        dp_dims: Sequence[str] | None,
        topology: Topology | None,
    ) -> None:
        """Check ``micro_batch_size`` and resolve the rank and size (explicit values, ``mesh``,
        ``topology``, the process group or the environment, in the Megatron names)."""
        self._mbs = check_int(
            "micro_batch_size", micro_batch_size, min_value=1, max_value=MAX_BATCH_SIZE
        )
        self._topology = resolve_topology(
            data_parallel_size,
            data_parallel_rank,
            mesh=mesh,
            dp_dims=dp_dims,
            topology=topology,
            names=("data_parallel_size", "data_parallel_rank"),
        )
        self._dp = self._topology.dp_size
        self._rank = self._topology.dp_rank

    @property
    def micro_batch_size(self) -> int:
        """Samples per micro-batch on each rank."""
        return self._mbs

    @property
    def data_parallel_rank(self) -> int:
        """This sampler's rank."""
        return self._rank

    @property
    def data_parallel_size(self) -> int:
        """The number of data-parallel ranks."""
        return self._dp

    @property
    def topology(self) -> Topology:
        """This process's data-parallel place (rank, size, replica group)."""
        return self._topology

    @property
    def dp_rank(self) -> int:
        """This sampler's data-parallel rank."""
        return self._rank

    def layout_info(self) -> dict[str, int]:
        """``micro_batch_size`` and ``data_parallel_size`` (recorded, never the rank)."""
        return {"micro_batch_size": self._mbs, "data_parallel_size": self._dp}
