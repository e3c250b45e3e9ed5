"""Topology resolution without processes: explicit values, a mesh stand-in, env, contradictions."""

from __future__ import annotations

import itertools

import pytest

from dataorder.core.topology import (
    Topology,
    data_parallel_dims,
    data_parallel_topology,
    resolve_topology,
)


class FakeMesh:
    """The DeviceMesh methods topology uses, for a process at ``coords`` (None: not in the mesh).

    Like the real ``DeviceMesh``, ``get_local_rank`` takes a dim index or a dim name.
    """

    def __init__(
        self,
        names: tuple[str, ...] | None,
        shape: tuple[int, ...],
        coords: tuple[int, ...] | None,
    ):
        self.mesh_dim_names = names
        self.ndim = len(shape)
        self._shape = shape
        self._coords = coords

    def size(self, dim: int) -> int:
        return self._shape[dim]

    def get_coordinate(self) -> list[int] | None:
        return None if self._coords is None else list(self._coords)

    def get_local_rank(self, dim: int | str) -> int:
        assert self._coords is not None, "the real DeviceMesh fails here too (IndexError)"
        if isinstance(dim, str):
            assert self.mesh_dim_names is not None
            dim = self.mesh_dim_names.index(dim)
        return self._coords[dim]


def test_explicit() -> None:
    assert resolve_topology(4, 3) == Topology(3, 4)


def test_mesh_2x2x2_dp_tp_cp() -> None:
    seen = {}
    for coords in itertools.product(range(2), range(2), range(2)):
        topo = data_parallel_topology(FakeMesh(("dp", "tp", "cp"), (2, 2, 2), coords))
        assert topo.dp_size == 2
        assert topo.replica_size == 4
        assert topo.dp_rank == coords[0]
        seen[coords] = topo
    # tp/cp peers share the dp rank
    assert seen[(1, 0, 0)].dp_rank == seen[(1, 1, 1)].dp_rank == 1


def test_mesh_two_dp_dims_row_major() -> None:
    mesh = FakeMesh(("dp_replicate", "dp_shard", "tp"), (2, 3, 2), (1, 2, 0))
    topo = data_parallel_topology(mesh)
    assert (topo.dp_rank, topo.dp_size, topo.replica_size) == (5, 6, 2)
    only_shard = data_parallel_topology(mesh, dp_dims=("dp_shard",))
    assert (only_shard.dp_rank, only_shard.dp_size, only_shard.replica_size) == (2, 3, 4)


def test_mesh_contradictions() -> None:
    mesh = FakeMesh(("dp", "tp"), (4, 2), (1, 1))
    assert resolve_topology(4, 1, mesh=mesh).dp_rank == 1
    with pytest.raises(ValueError, match="rank=2 contradicts the mesh's data-parallel rank 1"):
        resolve_topology(rank=2, mesh=mesh)
    with pytest.raises(
        ValueError, match="num_replicas=8 contradicts the mesh's data-parallel size 4"
    ):
        resolve_topology(num_replicas=8, mesh=mesh)
    with pytest.raises(ValueError, match=r"dp_dims must be distinct dims of the mesh"):
        data_parallel_topology(mesh, dp_dims=("pp",))
    with pytest.raises(ValueError, match="none of them in"):
        data_parallel_topology(FakeMesh(("x", "y"), (2, 2), (0, 0)))


def test_env_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resolve_topology() == Topology(0, 1, source="default")
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert resolve_topology() == Topology(5, 8, source="env")
    assert resolve_topology(num_replicas=8) == Topology(5, 8, source="env")
    with pytest.raises(ValueError, match="rank is None and cannot be inferred: num_replicas=4"):
        resolve_topology(num_replicas=4)
    assert resolve_topology(rank=2) == Topology(2, 8, source="env")


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (
            {"num_replicas": 4, "rank": 4},
            ValueError,
            r"rank must be an int in \[0, 3\]; got rank=4",
        ),
        (
            {"num_replicas": 4, "rank": -1},
            ValueError,
            r"rank must be an int in \[0, 3\]; got rank=-1",
        ),
        (
            {"num_replicas": 0, "rank": 0},
            ValueError,
            r"num_replicas must be an int in \[1, 2147483648\]",
        ),
        ({"num_replicas": True, "rank": 0}, TypeError, "got num_replicas=True"),
        ({"dp_dims": ("dp",)}, ValueError, "dp_dims needs a mesh"),
    ],
)
def test_bad_input(kwargs: dict[str, object], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        resolve_topology(**kwargs)  # type: ignore[arg-type]


def test_data_parallel_dims() -> None:
    mesh = FakeMesh(("pp", "dp_replicate", "dp_shard", "cp", "tp"), (2, 2, 2, 2, 2), (0,) * 5)
    assert data_parallel_dims(mesh) == ((1, 2), (0, 3, 4))
    assert data_parallel_dims(mesh, "dp_shard") == ((2,), (0, 1, 3, 4))
    assert data_parallel_dims(mesh, ("dp_shard", "dp_replicate")) == ((2, 1), (0, 3, 4))
    with pytest.raises(ValueError, match=r"got dp_dims=\('dp', 'dp'\)$"):
        data_parallel_dims(FakeMesh(("dp", "tp"), (2, 2), (0, 0)), ("dp", "dp"))
    with pytest.raises(ValueError, match="a flattened dim is not a dim of its root mesh"):
        data_parallel_dims(mesh, ("dp",))


def test_unnamed_one_dimensional_mesh_is_data_parallel() -> None:
    topo = data_parallel_topology(FakeMesh(None, (8,), (5,)))
    assert (topo.dp_rank, topo.dp_size, topo.replica_size) == (5, 8, 1)
    with pytest.raises(ValueError, match="mesh must be a DeviceMesh with named dims"):
        data_parallel_topology(FakeMesh(None, (2, 4), (1, 1)))
    with pytest.raises(ValueError, match="mesh must be a DeviceMesh with named dims"):
        data_parallel_topology(FakeMesh(None, (8,), (5,)), dp_dims=("dp",))


def test_process_outside_the_mesh() -> None:
    # a real DeviceMesh over a subset of the ranks gives the others get_coordinate() -> None
    # and an IndexError from get_local_rank
    with pytest.raises(ValueError, match="mesh must contain the calling process"):
        data_parallel_topology(FakeMesh(("dp", "tp"), (1, 2), None))


def test_env_out_of_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "8")
    monkeypatch.setenv("WORLD_SIZE", "8")
    with pytest.raises(ValueError, match="the env rank and world size must satisfy 0 <= rank <"):
        resolve_topology()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK and WORLD_SIZE must be ints; got RANK='x'"):
        resolve_topology()
