"""Where a process sits in the data-parallel layout: a small frozen value, detected at the edge.

Samplers take a :class:`Topology` (or plain ``rank``/``num_replicas``) and never look at the
environment themselves. :func:`resolve_topology` is the one place that detects it, in this order:

1. an explicit ``rank`` and ``num_replicas``;
2. a ``torch.distributed.device_mesh.DeviceMesh`` and its data-parallel dims (``dp_dims``), e.g.
   ``("dp",)`` or ``("dp_replicate", "dp_shard")``: the DP rank is the row-major index over those
   dims, and the other dims (tensor, context, pipeline parallel) are replicas that must read
   identical data;
3. the initialised default process group (its whole world is taken as data-parallel);
4. the ``RANK`` and ``WORLD_SIZE`` environment variables;
5. ``(0, 1)``.

With tensor or context parallelism the global world is *not* the data-parallel size: pass the
mesh, or the DP rank and size, as ``torch``'s DistributedSampler docs for 3-D parallelism do.

Example:
    >>> from dataorder.topology import resolve_topology
    >>> resolve_topology(num_replicas=4, rank=1)
    Topology(dp_rank=1, dp_size=4, replica_rank=0, replica_size=1, source='explicit')
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dataorder._validate import check_int

__all__ = ["DP_DIM_NAMES", "Topology", "data_parallel_topology", "resolve_topology"]

#: Mesh dimension names taken as data-parallel when ``dp_dims`` is not given (in mesh order).
DP_DIM_NAMES = ("dp", "dp_replicate", "dp_shard", "data_parallel")


@dataclass(frozen=True)
class Topology:
    """This process's place in the data-parallel layout.

    Attributes:
        dp_rank: Rank in the data-parallel group, in ``[0, dp_size)``.
        dp_size: Number of data-parallel ranks (distinct data streams).
        replica_rank: Rank among the processes that must read identical data (TP x CP x PP).
        replica_size: Size of that replica group.
        source: How it was found: ``"explicit"``, ``"mesh"``, ``"process_group"``, ``"env"`` or
            ``"default"``.
    """

    dp_rank: int
    dp_size: int
    replica_rank: int = 0
    replica_size: int = 1
    source: str = "explicit"

    def __post_init__(self) -> None:
        check_int("dp_size", self.dp_size, min_value=1)
        check_int("dp_rank", self.dp_rank, min_value=0, max_value=self.dp_size - 1)
        check_int("replica_size", self.replica_size, min_value=1)
        check_int("replica_rank", self.replica_rank, min_value=0, max_value=self.replica_size - 1)


def _mesh_dim_names(mesh: Any) -> tuple[str, ...]:
    names = getattr(mesh, "mesh_dim_names", None)
    if not names:
        raise ValueError("mesh must have mesh_dim_names to find its data-parallel dims; got none")
    return tuple(names)


def data_parallel_topology(mesh: Any, dp_dims: Sequence[str] | None = None) -> Topology:
    """Return this process's data-parallel rank and size from a ``DeviceMesh``.

    Args:
        mesh: A ``torch.distributed.device_mesh.DeviceMesh`` with named dims, containing the
            calling process.
        dp_dims: The data-parallel dims, outermost first. Default: the dims of the mesh named in
            :data:`DP_DIM_NAMES`.

    Returns:
        The :class:`Topology`; ``dp_rank`` is the row-major index over ``dp_dims`` and the
        remaining dims form the replica group.

    Raises:
        ValueError: If a dim is unknown, repeated, or no data-parallel dim can be found.
    """
    names = _mesh_dim_names(mesh)
    if dp_dims is None:
        dims = tuple(n for n in names if n in DP_DIM_NAMES)
        if not dims:
            raise ValueError(
                f"dp_dims must name the mesh's data-parallel dims; got dp_dims=None and the mesh "
                f"has dims {names}, none of them in {DP_DIM_NAMES}"
            )
    else:
        if isinstance(dp_dims, str):
            dp_dims = (dp_dims,)
        dims = tuple(dp_dims)
        unknown = [d for d in dims if d not in names]
        if not dims or unknown or len(set(dims)) != len(dims):
            raise ValueError(
                f"dp_dims must be distinct dims of the mesh {names}; got dp_dims={dp_dims!r}"
            )
    coords = {n: int(mesh.get_local_rank(n)) for n in names}
    sizes = {n: int(mesh.size(names.index(n))) for n in names}
    dp_rank, dp_size = 0, 1
    for d in dims:
        dp_rank = dp_rank * sizes[d] + coords[d]
        dp_size *= sizes[d]
    rep_rank, rep_size = 0, 1
    for n in names:
        if n not in dims:
            rep_rank = rep_rank * sizes[n] + coords[n]
            rep_size *= sizes[n]
    return Topology(dp_rank, dp_size, rep_rank, rep_size, source="mesh")


def _process_group() -> tuple[int, int] | None:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def resolve_topology(
    num_replicas: int | None = None,
    rank: int | None = None,
    *,
    mesh: Any = None,
    dp_dims: Sequence[str] | None = None,
) -> Topology:
    """Resolve the data-parallel rank and size (see the module docstring for the order).

    An explicit ``rank`` or ``num_replicas`` that contradicts the mesh raises ValueError, and so
    does a ``rank`` outside ``[0, num_replicas)``.

    Raises:
        TypeError: If ``rank`` or ``num_replicas`` is not an int (bools included).
        ValueError: If they are out of range, contradict the mesh, or only one is given and the
            other cannot be found consistently.
    """
    if num_replicas is not None:
        num_replicas = check_int("num_replicas", num_replicas, min_value=1)
    if rank is not None:
        rank = check_int("rank", rank, min_value=0)
    if mesh is not None:
        topo = data_parallel_topology(mesh, dp_dims)
        if num_replicas is not None and num_replicas != topo.dp_size:
            raise ValueError(
                f"num_replicas={num_replicas} contradicts the mesh's data-parallel size "
                f"{topo.dp_size} (dims {dp_dims or 'auto'})"
            )
        if rank is not None and rank != topo.dp_rank:
            raise ValueError(
                f"rank={rank} contradicts the mesh's data-parallel rank {topo.dp_rank}"
            )
        return topo
    if dp_dims is not None:
        raise ValueError(f"dp_dims needs a mesh; got dp_dims={dp_dims!r} and mesh=None")
    if num_replicas is not None and rank is not None:
        if rank >= num_replicas:
            raise ValueError(f"rank must be an int in [0, {num_replicas - 1}]; got rank={rank}")
        return Topology(rank, num_replicas)
    found: tuple[int, int, str] | None = None
    pg = _process_group()
    if pg is not None:
        found = (pg[0], pg[1], "process_group")
    elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        try:
            found = (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env")
        except ValueError as err:
            raise ValueError(
                "RANK and WORLD_SIZE must be ints; got "
                f"RANK={os.environ['RANK']!r}, WORLD_SIZE={os.environ['WORLD_SIZE']!r}"
            ) from err
    if found is None:
        found = (0, 1, "default")
    g_rank, g_size, source = found
    if num_replicas is None and rank is None:
        return Topology(g_rank, g_size, source=source)
    if num_replicas is not None:
        # only num_replicas given: the global rank is its DP rank only if the world is all DP
        if g_size != num_replicas:
            raise ValueError(
                f"rank is None and cannot be inferred: num_replicas={num_replicas} but the "
                f"{source} world size is {g_size}; pass rank= (the data-parallel rank) or mesh="
            )
        return Topology(g_rank, num_replicas, source=source)
    assert rank is not None  # only rank given
    if rank >= g_size:
        raise ValueError(f"rank must be an int in [0, {g_size - 1}]; got rank={rank}")
    return Topology(rank, g_size, source=source)
