"""verify_data_parallel in one process: alone (world 1), and on a simulated grid of ranks.

The grid runs every simulated rank's :func:`dataorder.parallel.verify._verify` in its own thread,
with
all-gathers over in-process groups, so the nesting of gathers along several dims and the shared
verdict are exercised exactly as with torch.distributed
(``tests/parallel/test_multiprocess.py`` runs the real thing on gloo).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from dataorder.parallel.distributed import DistributedSampler
from dataorder.parallel.verify import (
    DataParallelError,
    DataParallelReport,
    _collect,
    _verify,
    verify_data_parallel,
)


class IndexDataset(torch.utils.data.Dataset[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


class ThreadGroup:
    """An all-gather among threads: each member contributes at its index, all get the list."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.slots: list[Any] = [None] * size
        self.barrier = threading.Barrier(size, timeout=30)

    def gather_for(self, index: int) -> Callable[[Any], list[Any]]:
        def gather(obj: Any) -> list[Any]:
            self.slots[index] = obj
            self.barrier.wait()
            out = list(self.slots)
            self.barrier.wait()
            return out

        return gather


def run_grid(
    make: Callable[[int, int], Any],
    shape: tuple[int, ...] = (2, 2, 2),
    *,
    num_batches: int | None = None,
    epoch: int | None = None,
    raise_on_error: bool = True,
) -> dict[tuple[int, ...], Any]:
    """Verify on a (dp, tp, cp, ...) grid; ``make(global_rank, dp_rank)`` builds each source.

    Returns each rank's report, or the exception it raised.
    """
    coords = list(itertools.product(*(range(s) for s in shape)))
    groups: dict[tuple[int, tuple[int, ...]], ThreadGroup] = {}
    for dim, size in enumerate(shape):
        for c in coords:
            key = (dim, c[:dim] + c[dim + 1 :])
            groups.setdefault(key, ThreadGroup(size))
    results: dict[tuple[int, ...], Any] = {}

    def worker(global_rank: int, c: tuple[int, ...]) -> None:
        try:
            gathers = [
                groups[(dim, c[:dim] + c[dim + 1 :])].gather_for(c[dim])
                for dim in range(len(shape))
            ]
            replica_rank, replica_size = 0, 1
            for dim in range(1, len(shape)):
                replica_rank = replica_rank * shape[dim] + c[dim]
                replica_size *= shape[dim]
            payload = _collect(make(global_rank, c[0]), num_batches=num_batches, epoch=epoch)
            results[c] = _verify(
                payload,
                (c[0], shape[0], replica_rank, replica_size),
                gathers[:1],
                gathers[1:],
                None,
                raise_on_error,
            )
        except Exception as err:
            results[c] = err

    threads = [
        threading.Thread(target=worker, args=(g, c), daemon=True) for g, c in enumerate(coords)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(not t.is_alive() for t in threads), "a simulated rank hung"
    return results


def errors_of(results: dict[tuple[int, ...], Any]) -> list[str]:
    """The single violation message every rank raised (asserting they all raised it)."""
    assert all(isinstance(r, DataParallelError) for r in results.values()), results
    messages = {str(r) for r in results.values()}
    assert len(messages) == 1, "every rank must reach the same verdict"
    first: DataParallelError = next(iter(results.values()))
    return list(first.violations)


# -- one process --------------------------------------------------------------------------------


def test_world_of_one_per_index_sampler() -> None:
    s = DistributedSampler(range(10), 1, 0, seed=3)
    report = verify_data_parallel(s)
    assert isinstance(report, DataParallelReport)
    assert report.ok
    assert report.full_epoch
    assert not report.batched
    assert (report.dp_rank, report.dp_size, report.replica_size) == (0, 1, 1)
    assert (report.num_batches, report.slots, report.distinct_samples) == (10, 10, 10)
    assert report.epoch == 0
    assert "data-parallel partition OK over the whole epoch of epoch 0" in str(report)


def test_cursor_is_left_where_it_was() -> None:
    s = DistributedSampler(range(30), 1, 0, seed=1)
    it = iter(s)
    head = [next(it) for _ in range(4)]
    before = s.state_dict()
    report = verify_data_parallel(s)  # what the next iter() reads: a new pass, the whole epoch
    assert (report.full_epoch, report.num_batches) == (True, 30)
    assert s.state_dict() == before
    assert head + list(it) == list(DistributedSampler(range(30), 1, 0, seed=1))  # still live
    resumed = DistributedSampler(range(30), 1, 0, seed=1)
    resumed.load_state_dict(before)
    report = verify_data_parallel(resumed)
    assert (report.full_epoch, report.num_batches) == (False, 26), "the rest of the epoch"
    whole = verify_data_parallel(resumed, epoch=0)
    assert (whole.full_epoch, whole.num_batches) == (True, 30)
    assert resumed.state_dict() == before


def test_first_batches_and_another_epoch() -> None:
    s = DistributedSampler(range(30), 1, 0)
    report = verify_data_parallel(s, num_batches=5, epoch=3)
    assert (report.num_batches, report.epoch, report.full_epoch) == (5, 3, False)
    assert s.epoch == 0


def test_end_of_epoch_cursor_reads_the_next_epoch_whole() -> None:
    s = DistributedSampler(range(8), 1, 0)
    list(s)  # the pass ran out: the next pass is epoch 1
    report = verify_data_parallel(s)
    assert (report.epoch, report.full_epoch, report.num_batches) == (1, True, 8)
    assert (s.epoch, s.progress) == (0, {"consumed": 8})


def _placed_at_the_end(n: int, world: int, rank: int) -> DistributedSampler:
    """A sampler loaded from a state taken after the epoch's last index, before StopIteration."""
    a = DistributedSampler(range(n), world, rank, seed=4)
    for _ in zip(range(len(a)), a, strict=False):  # the last index; never ran out
        pass
    s = DistributedSampler(range(n), world, rank, seed=4)
    s.load_state_dict(a.state_dict())
    return s


def test_cursor_placed_at_the_end_checks_what_the_job_reads_next() -> None:
    # the next iter() is an empty pass that completes epoch 0; the job's next data is epoch 1,
    # which is what verify checks (and what dataorder inspect shows: the cursor's upcoming())
    s = _placed_at_the_end(8, 1, 0)
    assert s.upcoming() == (1, 0)
    report = verify_data_parallel(s)
    assert (report.epoch, report.full_epoch, report.num_batches) == (1, True, 8)
    assert (s.epoch, s.progress, len(s), s.remaining) == (0, {"consumed": 8}, 8, 0)
    assert list(s) == []  # the empty pass completes the epoch (the loop never set one)...
    epoch1 = DistributedSampler(range(8), 1, 0, seed=4)
    epoch1.set_epoch(1)
    assert list(s) == list(epoch1)  # ...to epoch 1


def test_grid_cursors_placed_at_the_end_check_the_next_epoch_whole() -> None:
    # Two DP ranks with declared padding: the job's next data is epoch 1, read whole, so its
    # padding must be exactly the declared one.
    results = run_grid(lambda g, dp: _placed_at_the_end(11, 2, dp), (2, 2))
    for r in results.values():
        assert isinstance(r, DataParallelReport), r
        assert (r.epoch, r.num_batches, r.full_epoch, r.padding_slots) == (1, 6, True, 1)
        assert r.allowed_padding == 1


def test_repeats_in_one_process_are_caught() -> None:
    with pytest.raises(DataParallelError, match=r"2 padding slots .* but the sampler declares 0"):
        verify_data_parallel([[0, 1], [1, 2], [2, 3]])
    report = verify_data_parallel([[0, 1], [1, 2], [2, None]], allowed_padding=3)
    assert report.ok
    assert report.batched
    assert report.padding_slots == 3
    with pytest.raises(DataParallelError, match="DP rank 0 repeats 1 of its own samples"):
        verify_data_parallel([3, 4, 3])


def test_tensors_and_arrays_are_read() -> None:
    report = verify_data_parallel(torch.arange(6))  # 0-d tensors: single indices
    assert (report.batched, report.num_batches, report.distinct_samples) == (False, 6, 6)
    report = verify_data_parallel([np.array([0, 1]), torch.tensor([2, 3])])
    assert (report.batched, report.num_batches, report.distinct_samples) == (True, 2, 4)


def test_raise_on_error_false_returns_the_violations() -> None:
    report = verify_data_parallel([[0, 0]], raise_on_error=False)
    assert not report.ok
    assert report.violations
    assert "padding slots" in report.violations[0]
    assert str(report).startswith("data-parallel check failed (1 violation)")


def test_bad_items_become_a_violation_not_a_lone_exception() -> None:
    with pytest.raises(DataParallelError, match="reading the items failed: ValueError: indices"):
        verify_data_parallel([[0, -1]])
    with pytest.raises(DataParallelError, match="items must be indices, None or batches"):
        verify_data_parallel([{"x": 1}])
    with pytest.raises(DataParallelError, match="items mix single indices and batches"):
        verify_data_parallel([0, [1]])


def test_dataloader_source_uses_its_samplers_padding() -> None:
    s = DistributedSampler(IndexDataset(10), 1, 0, seed=2)
    loader = DataLoader(IndexDataset(10), sampler=s, batch_size=3, num_workers=0)
    report = verify_data_parallel(loader)
    assert report.batched
    assert report.full_epoch
    assert report.num_batches == 4
    assert report.distinct_samples == 10
    assert s.progress == {"consumed": 0}, "the loader's sampler is restored too"


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"num_batches": 0}, ValueError, "num_batches must be a positive int; got num_batches=0"),
        ({"num_batches": True}, TypeError, "num_batches must be a positive int; got num_bat"),
        ({"epoch": -1}, ValueError, "epoch must be a non-negative int; got epoch=-1"),
        ({"allowed_padding": -2}, ValueError, "allowed_padding must be a non-negative int"),
        ({"raise_on_error": 1}, TypeError, "raise_on_error must be a bool; got raise_on_error=1"),
        ({"dp_dims": ("dp",)}, ValueError, "dp_dims needs a mesh"),
        ({"replica_group": object()}, ValueError, "replica_group needs dp_group"),
        ({"dp_group": object()}, ValueError, "dp_group needs an initialised torch.distributed"),
        (
            {"mesh": object(), "dp_group": object()},
            ValueError,
            "mesh and dp_group/replica_group are exclusive",
        ),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        verify_data_parallel(DistributedSampler(range(4), 1, 0), **kwargs)


def test_bad_sources() -> None:
    with pytest.raises(TypeError, match="source must be a sampler or an iterable"):
        verify_data_parallel(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epoch needs a source with set_epoch"):
        verify_data_parallel([[1]], epoch=0)


# -- a simulated 2 x 2 x 2 (dp, tp, cp) grid ---------------------------------------------------


def test_grid_correct_sampler() -> None:
    results = run_grid(lambda g, dp: DistributedSampler(range(11), 2, dp, seed=4))
    for c, r in results.items():
        assert isinstance(r, DataParallelReport), r
        assert (r.dp_rank, r.dp_size, r.replica_size) == (c[0], 2, 4)
        assert r.full_epoch
        assert r.padding_slots == r.allowed_padding == 1
        assert (r.slots, r.distinct_samples) == (12, 11)


def test_grid_sampler_built_with_the_global_world() -> None:
    """The classic 3-D parallel bug: num_replicas=world, rank=global rank."""
    violations = errors_of(run_grid(lambda g, dp: DistributedSampler(range(16), 8, g, seed=4)))
    text = "\n".join(violations)
    assert "the samplers declare num_replicas [8] but the data-parallel group has 2" in text
    assert "tensor/context-parallel replicas) read 4 different versions" in text


def test_grid_same_rank_everywhere() -> None:
    violations = errors_of(run_grid(lambda g, dp: DistributedSampler(range(16), 2, 0, seed=4)))
    text = "\n".join(violations)
    assert "the samplers declare ranks [0, 0] on DP ranks [0, 1]" in text
    assert "DP ranks 0 and 1 share 8 samples" in text


def test_grid_unequal_batch_counts_and_sizes() -> None:
    def make(g: int, dp: int) -> list[list[int]]:
        return [[0, 1], [2, 3], [4]] if dp == 0 else [[5, 6], [7]]

    text = "\n".join(errors_of(run_grid(make)))
    assert "DP ranks have different numbers of batches (a collective hangs at the end): " in text
    assert "rank 0: 3, rank 1: 2" in text
    assert "batch sizes differ at 1 steps, first at step 1: [2, 1]" in text


def test_grid_one_rank_fails_to_read_and_nobody_hangs() -> None:
    class Broken:
        def __iter__(self) -> Any:
            raise OSError("disk gone")

    def make(g: int, dp: int) -> Any:
        return Broken() if g == 5 else DistributedSampler(range(16), 2, dp)

    violations = errors_of(run_grid(make))
    assert violations == ["DP rank 1: reading the items failed: OSError: disk gone"]


def test_grid_report_instead_of_raise() -> None:
    results = run_grid(lambda g, dp: DistributedSampler(range(16), 2, 0), raise_on_error=False)
    assert all(isinstance(r, DataParallelReport) and not r.ok for r in results.values())
    assert len({r.violations for r in results.values()}) == 1


def test_grid_first_batches_only() -> None:
    results = run_grid(lambda g, dp: DistributedSampler(range(100), 2, dp), num_batches=7)
    assert all(r.num_batches == 7 and not r.full_epoch for r in results.values())


def test_grid_two_dp_dims() -> None:
    """(dp_replicate, dp_shard, tp): DP over the first two dims, gathered one after the other."""
    shape = (2, 2, 2)
    coords = list(itertools.product(range(2), range(2), range(2)))
    groups: dict[tuple[int, tuple[int, ...]], ThreadGroup] = {}
    for dim in range(3):
        for c in coords:
            groups.setdefault((dim, c[:dim] + c[dim + 1 :]), ThreadGroup(shape[dim]))
    results: dict[tuple[int, ...], Any] = {}

    def worker(c: tuple[int, ...]) -> None:
        gathers = [groups[(d, c[:d] + c[d + 1 :])].gather_for(c[d]) for d in range(3)]
        dp_rank = c[0] * 2 + c[1]
        payload = _collect(
            DistributedSampler(range(9), 4, dp_rank, seed=1), num_batches=None, epoch=None
        )
        try:
            results[c] = _verify(payload, (dp_rank, 4, c[2], 2), gathers[:2], gathers[2:], None)
        except Exception as err:
            results[c] = err

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in coords]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(isinstance(r, DataParallelReport) for r in results.values()), results
    r = results[(1, 0, 1)]
    assert (r.dp_rank, r.dp_size, r.slots, r.distinct_samples, r.padding_slots) == (2, 4, 12, 9, 3)


# -- every sampler of the library, alone -------------------------------------------------------


def library_samplers() -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [
        ("distributed", DistributedSampler(range(13), 1, 0, seed=1)),
        ("distributed-torch", DistributedSampler(range(13), 1, 0, compat="torch")),
    ]
    megatron = pytest.importorskip("dataorder.llm.megatron")
    out += [
        ("megatron-single", megatron.MegatronPretrainingSampler(13, 4, 0, 1, drop_last=False)),
        ("megatron-random", megatron.MegatronPretrainingRandomSampler(13, 4, 0, 1, seed=2)),
    ]
    multires = pytest.importorskip("dataorder.diffusion.sampler.dataset")
    bucket = pytest.importorskip("dataorder.diffusion.sampler.sampler")
    rng = np.random.default_rng(0)
    ds = multires.BaseMultiresolutionDataset.from_sizes(
        rng.integers(256, 1024, 40), rng.integers(256, 1024, 40)
    )
    out.append(
        (
            "bucket",
            bucket.SequentialBucketSampler(
                ds, base_batch_size=3, drop_last=False, num_replicas=1, rank=0
            ),
        )
    )
    return out


def test_every_library_sampler_alone() -> None:
    for name, s in library_samplers():
        before = s.state_dict()
        report = verify_data_parallel(s)
        assert report.ok, name
        assert report.full_epoch, name
        assert report.padding_slots == s.samples_padded, name
        assert s.state_dict() == before, name


def test_disagreeing_padding_counters_are_named_by_the_rule() -> None:
    """Ranks that declare different padding are told by the counter their rule reads: a packed
    sampler's ``tokens_padded``, not ``samples_padded``."""
    from dataorder.llm.packing.rule import PackedRows
    from dataorder.parallel.checks import check_dp, read_items

    rule = PackedRows(8)
    payloads = [
        {**read_items([[((r, 0, 4),)]], rule), "dp_rank": r, "declared": None, "allowed": a,
         "errors": [], "full": False}
        for r, a in ((0, 4), (1, 5))
    ]  # fmt: skip
    assert check_dp(payloads, None) == ["DP ranks declare different tokens_padded [4, 5]"]
