"""DistributedSampler: torch's exact indices, the keyed default order, padding, state, loaders."""

from __future__ import annotations

import copy
import itertools
import json
import pickle
import tracemalloc
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as TorchDistributedSampler

from dataorder.parallel.distributed import DistributedSampler, distributed_blocks, epoch_order

# torchdata 0.11 calls a deprecated torch API on every StatefulDataLoader
pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


class IndexDataset(torch.utils.data.Dataset[int]):
    """Returns its index, so a loader's batches are the sampler's indices."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


class FakeMesh:
    """The DeviceMesh methods topology uses, for a process at ``coords``."""

    def __init__(self, names: tuple[str, ...], shape: tuple[int, ...], coords: tuple[int, ...]):
        self.mesh_dim_names = names
        self.ndim = len(shape)
        self._shape = shape
        self._coords = coords

    def size(self, dim: int) -> int:
        return self._shape[dim]

    def get_local_rank(self, dim: int | str) -> int:
        return self._coords[dim if isinstance(dim, int) else self.mesh_dim_names.index(dim)]

    def get_coordinate(self) -> list[int]:
        return list(self._coords)


def all_ranks(n: int, world: int, **kwargs: Any) -> list[list[int]]:
    return [list(DistributedSampler(range(n), world, r, **kwargs)) for r in range(world)]


def interleave(per_rank: list[list[int]]) -> list[int]:
    """Rebuild the global stream from strided rank slices."""
    return [x for step in zip(*per_rank, strict=True) for x in step]


# -- torch equivalence -------------------------------------------------------------------------

SIZES = (0, 1, 2, 3, 5, 7, 8, 10, 16, 33, 100)
WORLDS = (1, 2, 3, 4, 7, 8)


@pytest.mark.parametrize("n", SIZES)
def test_compat_torch_is_torch_exactly(n: int) -> None:
    """compat='torch' yields torch's indices for every rank, seed, epoch, shuffle, drop_last."""
    for world, seed, epoch, shuffle, drop_last in itertools.product(
        WORLDS, (0, 5), (0, 3), (True, False), (True, False)
    ):
        for rank in range(world):
            ref = TorchDistributedSampler(
                range(n), world, rank, shuffle=shuffle, seed=seed, drop_last=drop_last
            )
            ref.set_epoch(epoch)
            ours = DistributedSampler(
                range(n), world, rank, shuffle, seed, drop_last, compat="torch"
            )
            ours.set_epoch(epoch)
            where = f"n={n} world={world} rank={rank} seed={seed} epoch={epoch}"
            assert (ours.num_samples, ours.total_size) == (ref.num_samples, ref.total_size), where
            assert len(ours) == len(ref), where
            assert list(ours) == list(ref), where


@given(
    n=st.integers(0, 300),
    world=st.integers(1, 9),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 50),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
)
def test_compat_torch_property(
    n: int, world: int, seed: int, epoch: int, shuffle: bool, drop_last: bool
) -> None:
    rank = seed % world
    ref = TorchDistributedSampler(range(n), world, rank, shuffle, seed, drop_last)
    ref.set_epoch(epoch)
    ours = DistributedSampler(range(n), world, rank, shuffle, seed, drop_last, compat="torch")
    ours.set_epoch(epoch)
    assert list(ours) == list(ref)


@pytest.mark.parametrize(("n", "world"), [(10, 4), (7, 8), (16, 4), (1, 3), (0, 2)])
def test_default_unshuffled_equals_torch(n: int, world: int) -> None:
    for drop_last in (True, False):
        for rank in range(world):
            ref = TorchDistributedSampler(range(n), world, rank, False, drop_last=drop_last)
            ours = DistributedSampler(range(n), world, rank, False, drop_last=drop_last)
            assert list(ours) == list(ref)


@pytest.mark.parametrize("n", SIZES)
def test_default_follows_torch_partition_rules(n: int) -> None:
    """Same sizes as torch; the global stream is a permutation, padded by wrapping around."""
    for world, drop_last in itertools.product(WORLDS, (True, False)):
        ref = TorchDistributedSampler(range(n), world, 0, drop_last=drop_last)
        per_rank = all_ranks(n, world, seed=11, drop_last=drop_last)
        assert {len(x) for x in per_rank} == {ref.num_samples}
        stream = interleave(per_rank)
        assert len(stream) == ref.total_size
        real = stream[: min(n, ref.total_size)]
        assert len(set(real)) == len(real)
        if not drop_last:
            assert sorted(real) == list(range(n))
            assert stream[n:] == [stream[p % n] for p in range(n, len(stream))]


def test_default_order_is_keyed_not_additive() -> None:
    """Unlike torch, seed s epoch e+1 and seed s+1 epoch e are unrelated orders."""
    a = DistributedSampler(range(1000), 1, 0, seed=5)
    a.set_epoch(1)
    b = DistributedSampler(range(1000), 1, 0, seed=6)
    assert list(a) != list(b)
    t1 = DistributedSampler(range(1000), 1, 0, seed=5, compat="torch")
    t1.set_epoch(1)
    assert list(t1) == list(DistributedSampler(range(1000), 1, 0, seed=6, compat="torch"))


def test_golden_default_order() -> None:
    """Pins the default order: changing it must be a deliberate, versioned decision."""
    assert all_ranks(10, 4, seed=7) == [[1, 6, 7], [0, 4, 2], [3, 9, 1], [8, 5, 0]]
    s = DistributedSampler(range(1000), 3, 2, seed=2024)
    s.set_epoch(5)
    assert list(itertools.islice(s, 6)) == [855, 513, 493, 661, 474, 653]


def test_epochs_differ_and_repeat() -> None:
    s = DistributedSampler(range(100), 2, 1, seed=3)
    e0, e1 = list(s), list(s)  # a pass that ran out: the next pass is the next epoch
    assert (s.epoch, s.progress) == (1, {"consumed": 100})
    assert e0 != e1
    s.set_epoch(0)
    assert list(s) == e0


def test_billion_samples_first_index_without_memory() -> None:
    tracemalloc.start()
    try:
        s = DistributedSampler(range(10**9), num_replicas=1024, rank=1023, seed=1)
        it = iter(s)
        first = [next(it) for _ in range(3)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert s.num_samples == 976563
    assert all(0 <= x < 10**9 for x in first)
    assert peak < 32 * 2**20, f"peak {peak} bytes"
    assert len(json.dumps(s.state_dict())) <= 512


def test_epoch_order_function() -> None:
    order = epoch_order(10, seed=7, epoch=0)
    s = DistributedSampler(range(10), 4, 2, seed=7)
    assert order(np.array([2, 6, 10])).tolist() == list(s)
    assert epoch_order(5, seed=0, epoch=0, shuffle=False)(np.arange(7)).tolist() == [
        0,
        1,
        2,
        3,
        4,
        0,
        1,
    ]
    lay = distributed_blocks(10, 4, drop_last=True)
    assert (lay.num_batches, lay.total_positions, lay.dropped) == (2, 8, 2)


# -- padding and evaluation --------------------------------------------------------------------


@pytest.mark.parametrize(("n", "world"), [(10, 4), (7, 8), (16, 4), (1, 3), (0, 2), (33, 7)])
@pytest.mark.parametrize("compat", ["default", "torch"])
def test_padding_mask_marks_exactly_the_repeats(n: int, world: int, compat: str) -> None:
    samplers = [DistributedSampler(range(n), world, r, compat=compat) for r in range(world)]  # type: ignore[arg-type]
    kept: list[int] = []
    for s in samplers:
        items = list(s)
        mask = s.padding_mask()
        assert mask.shape == (s.num_samples,)
        assert int(mask.sum()) == s.num_padding
        kept += [x for x, pad in zip(items, mask, strict=True) if not pad]
    assert sorted(kept) == list(range(n)), "evaluation with the mask reads every sample once"
    assert sum(s.num_padding for s in samplers) == samplers[0].samples_padded
    assert samplers[0].samples_padded == samplers[0].total_size - n


def test_drop_last_has_no_padding() -> None:
    for r in range(4):
        s = DistributedSampler(range(10), 4, r, drop_last=True)
        assert s.num_padding == 0
        assert not s.padding_mask().any()
        assert (s.samples_dropped, s.samples_padded) == (2, 0)


def test_eval_recipe_with_a_loader() -> None:
    """The docstring's recipe: slice the mask per batch and keep the real samples only."""
    n, world, b = 23, 4, 3
    seen: list[int] = []
    for r in range(world):
        s = DistributedSampler(IndexDataset(n), world, r, shuffle=False)
        mask = s.padding_mask()
        for step, batch in enumerate(DataLoader(IndexDataset(n), sampler=s, batch_size=b)):
            keep = ~torch.from_numpy(mask[step * b : (step + 1) * b])
            seen += batch[keep].tolist()
    assert sorted(seen) == list(range(n))


# -- cursor, state, elastic resume -------------------------------------------------------------


def test_set_epoch_and_epoch_attribute() -> None:
    s = DistributedSampler(range(20), 2, 0, seed=1)
    it = iter(s)
    next(it)
    s.set_epoch(0)  # current epoch: back to where this process started it (torch restarts too)
    assert (len(s), s.remaining) == (10, 10)
    s.epoch = 4  # torch-style assignment goes through set_epoch
    assert (s.epoch, len(s)) == (4, 10)
    ref = DistributedSampler(range(20), 2, 0, seed=1)
    ref.set_epoch(4)
    assert list(s) == list(ref)


@pytest.mark.parametrize("compat", ["default", "torch"])
def test_resume_mid_epoch_exact(compat: str) -> None:
    n, world = 37, 3
    for r in range(world):
        full = list(DistributedSampler(range(n), world, r, seed=9, compat=compat))  # type: ignore[arg-type]
        for k in range(len(full) + 1):
            a = DistributedSampler(range(n), world, r, seed=9, compat=compat)  # type: ignore[arg-type]
            head = list(itertools.islice(a, k))
            state = json.loads(json.dumps(a.state_dict()))
            assert state["consumed"] == k * world
            b = DistributedSampler(range(n), world, r, seed=9, compat=compat)  # type: ignore[arg-type]
            b.load_state_dict(state)
            if k < len(full):
                assert head + list(b) == full


def test_elastic_resume_covers_the_epoch_once() -> None:
    n = 103
    old = [DistributedSampler(range(n), 4, r, seed=2) for r in range(4)]
    seen = [x for s in old for x in itertools.islice(s, 6)]  # consumed = 24
    state = old[0].state_dict()
    assert all(s.state_dict() == state for s in old)
    for new_world in (1, 2, 3, 6, 8, 12, 24):
        new = [DistributedSampler(range(n), new_world, r, seed=2) for r in range(new_world)]
        for s in new:
            s.load_state_dict(state)
        assert len({len(s) for s in new}) == 1
        rest = [x for s in new for x in s]
        padded = new[0].samples_padded
        assert sorted(set(seen + rest)) == list(range(n))
        assert len(seen) + len(rest) == n + padded


def test_elastic_resume_refused_when_not_divisible() -> None:
    s = DistributedSampler(range(100), 4, 0)
    list(itertools.islice(s, 5))  # consumed = 20
    state = s.state_dict()
    t = DistributedSampler(range(100), 3, 0)
    with pytest.raises(
        ValueError,
        match=r"cannot resume epoch 0 on this layout \(\{'num_replicas': 3\}\): consumed=20 is not "
        r"a multiple of the global block per_rank x dp_size = 1 x 3 = 3",
    ):
        t.load_state_dict(state)
    assert t.state_dict()["consumed"] == 0, "a refused load leaves the sampler unchanged"


@pytest.mark.parametrize(
    ("field", "kwargs", "match"),
    [
        ("seed", {"seed": 1}, "seed is 0 in the state but 1 in this sampler"),
        ("compat", {"compat": "torch"}, "compat is 'default' in the state but 'torch'"),
        ("shuffle", {"shuffle": False}, "shuffle is 1 in the state but 0"),
        ("drop_last", {"drop_last": True}, "drop_last is 0 in the state but 1"),
    ],
)
def test_state_from_another_configuration_is_refused(
    field: str, kwargs: dict[str, Any], match: str
) -> None:
    state = DistributedSampler(range(10), 2, 0).state_dict()
    with pytest.raises(ValueError, match=match):
        DistributedSampler(range(10), 2, 0, **kwargs).load_state_dict(state)
    with pytest.raises(ValueError, match="dataset_size is 10 in the state but 11"):
        DistributedSampler(range(11), 2, 0).load_state_dict(state)


def test_pickle_and_deepcopy_keep_the_cursor() -> None:
    s = DistributedSampler(range(50), 2, 1, seed=4)
    list(itertools.islice(s, 7))
    for t in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert t.state_dict() == s.state_dict()
        assert list(t) == list(copy.deepcopy(s))


# -- topology ----------------------------------------------------------------------------------


def test_topology_from_mesh_env_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    mesh = FakeMesh(("dp", "tp", "cp"), (2, 2, 2), (1, 0, 1))
    s = DistributedSampler(range(10), mesh=mesh)
    assert (s.rank, s.num_replicas, s.topology.replica_size) == (1, 2, 4)
    peer = DistributedSampler(range(10), mesh=FakeMesh(("dp", "tp", "cp"), (2, 2, 2), (1, 1, 0)))
    assert list(peer) == list(s), "tensor/context-parallel peers read identical data"
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert (DistributedSampler(range(10)).rank, DistributedSampler(range(10)).num_replicas) == (
        0,
        1,
    )
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    s = DistributedSampler(range(10))
    assert (s.rank, s.num_replicas, s.topology.source) == (3, 4, "env")


def test_mesh_contradiction() -> None:
    mesh = FakeMesh(("dp", "tp"), (4, 2), (1, 1))
    with pytest.raises(ValueError, match="rank=2 contradicts the mesh's data-parallel rank 1"):
        DistributedSampler(range(10), rank=2, mesh=mesh)
    with pytest.raises(ValueError, match="num_replicas=8 contradicts the mesh's data-parallel"):
        DistributedSampler(range(10), num_replicas=8, mesh=mesh)


# -- validation --------------------------------------------------------------------------------


class Unsized:
    pass


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [
        ((Unsized(), 2, 0), {}, TypeError, r"dataset must be a sized dataset \(with __len__\)"),
        (
            (range(4), 0, 0),
            {},
            ValueError,
            r"num_replicas must be an int in \[1, 2147483648\]; got num_rep",
        ),
        (
            (range(4), True, 0),
            {},
            TypeError,
            r"num_replicas must be an int in \[1, 2147483648\]; got num_r",
        ),
        ((range(4), 4, 4), {}, ValueError, r"rank must be an int in \[0, 3\]; got rank=4"),
        ((range(4), 4, -1), {}, ValueError, r"rank must be an int in \[0, 3\]; got rank=-1"),
        ((range(4), 4, False), {}, TypeError, r"rank must be an int in \[0, 3\]; got rank=False"),
        ((range(4), 2, 0, "yes"), {}, TypeError, "shuffle must be a bool; got shuffle='yes'"),
        (
            (range(4), 2, 0, True, -1),
            {},
            ValueError,
            r"seed must be an int in \[0, 9223372036854775807\].*=-1",
        ),
        (
            (range(4), 2, 0, True, 1.0),
            {},
            TypeError,
            r"seed must be an int in \[0, 9223372036854775807\].*=1.0",
        ),
        ((range(4), 2, 0, True, 0, 1), {}, TypeError, "drop_last must be a bool; got drop_la"),
        ((range(4), 2, 0), {"compat": "nemo"}, ValueError, "compat must be one of 'default', "),
        ((range(4), 2, 0), {"dp_dims": ("dp",)}, ValueError, "dp_dims needs a mesh"),
        (  # regression: a 0-d array raised "len() of unsized object"
            (np.array(10), 2, 0),
            {},
            TypeError,
            r"dataset must be a sized dataset \(with __len__\); got dataset=array\(10\)",
        ),
        (
            (range(4), 2, 0),
            {"seed": 2**63, "compat": "torch"},
            ValueError,
            r"seed must be an int in \[0, 9223372036854775807\]; got seed=9223372036854775808",
        ),
    ],
)
def test_bad_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        DistributedSampler(*args, **kwargs)


def test_compat_torch_seed_plus_epoch_always_fits_torch() -> None:
    # the largest seed at the largest epoch: seed + epoch is below 2**64, as torch requires
    s = DistributedSampler(range(4), 1, 0, seed=2**63 - 1, compat="torch")
    s.set_epoch(2**32 - 1)
    assert sorted(s) == [0, 1, 2, 3]


def test_epoch_order_validation() -> None:
    with pytest.raises(ValueError, match="dataset_size must be a positive int; got dataset_size=0"):
        epoch_order(0, seed=0, epoch=0)
    with pytest.raises(TypeError, match="shuffle must be a bool; got shuffle=1"):
        epoch_order(3, seed=0, epoch=0, shuffle=1)  # type: ignore[arg-type]


# -- data loaders ------------------------------------------------------------------------------


def loader_indices(loader: Any, limit: int | None = None) -> list[int]:
    out: list[int] = []
    for i, batch in enumerate(loader):
        if limit is not None and i >= limit:
            break
        out += batch.tolist()
    return out


def test_stateful_dataloader_state_holds_the_sampler_state() -> None:
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    s = DistributedSampler(IndexDataset(40), 2, 0, seed=1)
    assert isinstance(s, sdl.Stateful), "torchdata's Stateful protocol"
    loader = sdl.StatefulDataLoader(IndexDataset(40), sampler=s, batch_size=3)
    it = iter(loader)
    next(it)
    next(it)
    inner = loader.state_dict()["_sampler_iter_state"]["sampler_state"]
    assert inner == s.state_dict()
    assert inner["consumed"] == 12


def test_stateful_dataloader_with_torchdata_batch_sampler() -> None:
    """Passing torchdata's BatchSampler as batch_sampler= is equally exact."""
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    from torchdata.stateful_dataloader.sampler import BatchSampler

    def make() -> Any:
        s = DistributedSampler(IndexDataset(30), 2, 1, seed=8)
        return sdl.StatefulDataLoader(IndexDataset(30), batch_sampler=BatchSampler(s, 4, False))

    full = loader_indices(make())
    loader = make()
    it = iter(loader)
    head = next(it).tolist() + next(it).tolist()
    state = loader.state_dict()
    loader2 = make()
    loader2.load_state_dict(state)
    assert head + loader_indices(loader2) == full


def test_plain_dataloader_with_workers() -> None:
    s = DistributedSampler(IndexDataset(50), 4, 3, seed=6)
    got = loader_indices(DataLoader(IndexDataset(50), sampler=s, batch_size=4, num_workers=2))
    assert got == list(DistributedSampler(range(50), 4, 3, seed=6))
