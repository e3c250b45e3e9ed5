"""Where a process sits in the data-parallel layout: a small frozen value, detected at the edge.

Samplers take a :class:`Topology` (or plain ``rank``/``num_replicas``) and never look at the
environment themselves. :func:`resolve_topology` is the one place that detects it, in this order:

1. an explicit ``rank`` and ``num_replicas``;
2. a ``torch.distributed.device_mesh.DeviceMesh`` and its data-parallel dims (``dp_dims``), e.g.
   ``("dp",)`` or ``("dp_replicate", "dp_shard")``: the DP rank is the row-major index over those
   dims, and the other dims (tensor, context, pipeline parallel) are replicas that must read
   identical data (a 1-D mesh without dim names is all data-parallel; a process outside the mesh
   is refused);
3. the initialised default process group (its whole world is taken as data-parallel);
4. the ``RANK`` and ``WORLD_SIZE`` environment variables;
5. ``(0, 1)``.

With tensor or context parallelism the global world is *not* the data-parallel size: pass the
mesh, or the DP rank and size, as ``torch``'s DistributedSampler docs for 3-D parallelism do.

Example:
    >>> from dataorder.core.topology import resolve_topology
    >>> resolve_topology(num_replicas=4, rank=1)
    Topology(dp_rank=1, dp_size=4, replica_rank=0, replica_size=1, source='explicit')
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dataorder._validate import check_int, fail

__all__ = [
    "DP_DIM_NAMES",
    "MAX_DP_SIZE",
    "Topology",
    "data_parallel_dims",
    "data_parallel_topology",
    "resolve_topology",
]

#: Largest data-parallel size a sampler accepts: global positions stay exact int64 with any
#: per-rank batch up to the same bound.
MAX_DP_SIZE = 2**31

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
        # frozen: plain ints (a numpy int would leak into states and JSON) set through object
        size = check_int("dp_size", self.dp_size, min_value=1, max_value=MAX_DP_SIZE)
        rank = check_int("dp_rank", self.dp_rank, min_value=0, max_value=size - 1)
        rsize = check_int("replica_size", self.replica_size, min_value=1, max_value=MAX_DP_SIZE)
        rrank = check_int("replica_rank", self.replica_rank, min_value=0, max_value=rsize - 1)
        if not isinstance(self.source, str):
            raise TypeError(f"source must be a str; got source={self.source!r}")
        for name, value in (("dp_size", size), ("dp_rank", rank)):
            object.__setattr__(self, name, value)
        for name, value in (("replica_size", rsize), ("replica_rank", rrank)):
            object.__setattr__(self, name, value)


def data_parallel_dims(
    mesh: Any, dp_dims: Sequence[str] | str | None = None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Split a mesh's dims into data-parallel dims and replica dims, as dim indices.

    Args:
        mesh: A ``DeviceMesh``. Its dims must be named, except a 1-D mesh, which is taken as
            data-parallel when ``dp_dims`` is None.
        dp_dims: The data-parallel dim names (a str is one name), outermost first. Default: the
            mesh's dims named in :data:`DP_DIM_NAMES`, in mesh order.

    Returns:
        ``(dp, replicas)``: indices of the data-parallel dims (in ``dp_dims`` order) and of the
        other dims (tensor, context, pipeline parallel; in mesh order).

    Raises:
        ValueError: If a dim is unknown or repeated, or no data-parallel dim can be found.
    """
    raw_names = getattr(mesh, "mesh_dim_names", None)
    ndim = int(getattr(mesh, "ndim", len(raw_names or ())))
    if not raw_names:
        if ndim == 1 and dp_dims is None:
            return (0,), ()
        fail(
            "mesh",
            "a DeviceMesh with named dims (init_device_mesh(..., mesh_dim_names=...)) unless it "
            "is 1-D and dp_dims is None",
            f"<mesh with mesh_dim_names=None, dp_dims={dp_dims!r}>",
        )
    names = tuple(raw_names)
    if dp_dims is None:
        dp = tuple(i for i, name in enumerate(names) if name in DP_DIM_NAMES)
        if not dp:
            raise ValueError(
                f"dp_dims must name the mesh's data-parallel dims; got dp_dims=None and the mesh "
                f"has dims {names}, none of them in {DP_DIM_NAMES}"
            )
    else:
        wanted = (dp_dims,) if isinstance(dp_dims, str) else tuple(dp_dims)
        unknown = [d for d in wanted if d not in names]
        if not wanted or unknown or len(set(wanted)) != len(wanted):
            raise ValueError(
                f"dp_dims must be distinct dims of the mesh {names}; got dp_dims={dp_dims!r}"
                + (
                    " (a flattened dim is not a dim of its root mesh: pass its dims, or the "
                    "flattened mesh itself)"
                    if unknown
                    else ""
                )
            )
        dp = tuple(names.index(d) for d in wanted)
    return dp, tuple(i for i in range(len(names)) if i not in dp)


def data_parallel_topology(mesh: Any, dp_dims: Sequence[str] | str | None = None) -> Topology:
    """Return this process's data-parallel rank and size from a ``DeviceMesh``.

    Args:
        mesh: A ``torch.distributed.device_mesh.DeviceMesh`` containing the calling process,
            with named dims (or 1-D).
        dp_dims: The data-parallel dims, outermost first. Default: the dims of the mesh named in
            :data:`DP_DIM_NAMES`.

    Returns:
        The :class:`Topology`; ``dp_rank`` is the row-major index over ``dp_dims`` and the
        remaining dims form the replica group (row-major in mesh order).

    Raises:
        ValueError: If a dim is unknown, repeated, no data-parallel dim can be found, or the
            calling process is not in the mesh.
    """
    dp, replicas = data_parallel_dims(mesh, dp_dims)
    get_coordinate = getattr(mesh, "get_coordinate", None)
    if get_coordinate is not None and get_coordinate() is None:
        raise ValueError(
            "mesh must contain the calling process; got a mesh without it (build the sampler "
            "only on the ranks of the mesh, or pass the mesh those ranks belong to)"
        )
    dp_rank, dp_size = 0, 1
    for d in dp:
        dp_rank = dp_rank * int(mesh.size(d)) + int(mesh.get_local_rank(d))
        dp_size *= int(mesh.size(d))
    rep_rank, rep_size = 0, 1
    for d in replicas:
        rep_rank = rep_rank * int(mesh.size(d)) + int(mesh.get_local_rank(d))
        rep_size *= int(mesh.size(d))
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
    dp_dims: Sequence[str] | str | None = None,
    topology: Topology | None = None,
    names: tuple[str, str] = ("num_replicas", "rank"),
) -> Topology:
    """Resolve the data-parallel rank and size (see the module docstring for the order).

    The one place where a sampler's place is found: every sampler passes what it was given.
    An explicit ``rank`` or ``num_replicas`` that contradicts ``topology`` or the mesh raises
    ValueError, and so does a ``rank`` outside ``[0, num_replicas)``.

    Args:
        num_replicas: The data-parallel size, or None.
        rank: The data-parallel rank, or None.
        mesh: A ``DeviceMesh`` (see :func:`data_parallel_topology`), or None.
        dp_dims: The mesh's data-parallel dims.
        topology: A :class:`Topology` value, or None. Excludes ``mesh``.
        names: How the caller names ``num_replicas`` and ``rank`` in its messages (the Megatron
            samplers say ``data_parallel_size`` and ``data_parallel_rank``).

    Raises:
        TypeError: If ``rank`` or ``num_replicas`` is not an int (bools included), or
            ``topology`` is not a :class:`Topology`.
        ValueError: If they are out of range, contradict the mesh or the topology, or only one
            is given and the other cannot be found consistently.
    """
    size_name, rank_name = names
    if num_replicas is not None:
        num_replicas = check_int(size_name, num_replicas, min_value=1, max_value=MAX_DP_SIZE)
    if rank is not None:
        # with the size known, the message gives the whole range, whatever is wrong
        top = None if num_replicas is None else num_replicas - 1
        rank = check_int(rank_name, rank, min_value=0, max_value=top)
    if topology is not None or mesh is not None:
        return _agreed(num_replicas, rank, mesh, dp_dims, topology, names)
    if dp_dims is not None:
        raise ValueError(f"dp_dims needs a mesh; got dp_dims={dp_dims!r} and mesh=None")
    if num_replicas is not None and rank is not None:
        if rank >= num_replicas:
            raise ValueError(
                f"{rank_name} must be an int in [0, {num_replicas - 1}]; got {rank_name}={rank}"
            )
        return Topology(rank, num_replicas)
    return _from_world(num_replicas, rank, names)


def _from_world(num_replicas: int | None, rank: int | None, names: tuple[str, str]) -> Topology:
    """Complete a rank or a size not both given from the detected world (the launcher's
    environment or the process group), which must then be all data-parallel."""
    size_name, rank_name = names
    g_rank, g_size, source = _detected()
    if rank is None:
        if num_replicas is None:
            return Topology(g_rank, g_size, source=source)
        # only num_replicas given: the global rank is its DP rank only if the world is all DP
        if g_size != num_replicas:
            raise ValueError(
                f"{rank_name} is None and cannot be inferred: {size_name}={num_replicas} but the "
                f"{source} world size is {g_size}; pass {rank_name}= (the data-parallel rank) or "
                "mesh="
            )
        return Topology(g_rank, num_replicas, source=source)
    # only rank given: the world must be all data-parallel
    if rank >= g_size:
        raise ValueError(f"{rank_name} must be an int in [0, {g_size - 1}]; got {rank_name}={rank}")
    return Topology(rank, g_size, source=source)


def _agreed(
    num_replicas: int | None,
    rank: int | None,
    mesh: Any,
    dp_dims: Sequence[str] | str | None,
    topology: Topology | None,
    names: tuple[str, str],
) -> Topology:
    """The topology given, or the mesh's, checked against an explicit rank and size."""
    size_name, rank_name = names
    if topology is not None:
        if not isinstance(topology, Topology):
            fail("topology", "a dataorder Topology", topology, TypeError)
        if mesh is not None:
            raise ValueError("pass topology= or mesh=, not both; got both")
        topo = topology
    else:
        topo = data_parallel_topology(mesh, dp_dims)
    where = "the topology" if topology is not None else "the mesh"
    if num_replicas is not None and num_replicas != topo.dp_size:
        raise ValueError(
            f"{size_name}={num_replicas} contradicts {where}'s data-parallel size "
            f"{topo.dp_size}" + (f" (dims {dp_dims or 'auto'})" if mesh is not None else "")
        )
    if rank is not None and rank != topo.dp_rank:
        raise ValueError(
            f"{rank_name}={rank} contradicts {where}'s data-parallel rank {topo.dp_rank}"
        )
    return topo


def _detected() -> tuple[int, int, str]:
    """``(rank, world size, source)`` from the process group, else the environment, else
    ``(0, 1, "default")``, checked."""
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
    if g_size < 1 or not 0 <= g_rank < g_size:
        raise ValueError(
            f"the {source} rank and world size must satisfy 0 <= rank < world size; got "
            f"rank={g_rank}, world size={g_size}"
        )
    return found
