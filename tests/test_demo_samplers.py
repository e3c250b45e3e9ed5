"""The demo's registry of samplers: each entry builds for any rank, the checks and the commands
it names exist, and the demo's other parts follow it (no process is started here)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from dataorder.tools.demo import inspect_commands, write_inspect_files
from dataorder.tools.demo_checks import EXTRA_CHECKS
from dataorder.tools.demo_config import SAMPLERS, DemoConfig
from dataorder.tools.demo_job import PRELOAD, preload
from dataorder.tools.demo_samplers import DEMO_SAMPLERS, Placement

CONFIG = DemoConfig()


def test_the_samplers_are_the_registry() -> None:
    assert tuple(DEMO_SAMPLERS) == SAMPLERS
    assert [e.name for e in DEMO_SAMPLERS.values()] == list(SAMPLERS)
    for entry in DEMO_SAMPLERS.values():
        assert set(entry.checks) <= set(EXTRA_CHECKS), entry.name
    names = preload(SAMPLERS)
    assert names[: len(PRELOAD)] == list(PRELOAD)
    for module in names:
        assert importlib.util.find_spec(module) is not None, module


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize(
    "where",
    [Placement(1, 2), Placement(7, 8)],  # a DP rank of the job; the injected bug's global world
    ids=["dp", "global-world"],
)
def test_every_entry_builds_for_a_rank(name: str, where: Placement) -> None:
    entry = DEMO_SAMPLERS[name]
    data = entry.data(CONFIG)
    sampler = entry.build(data, where, CONFIG)
    assert (sampler.topology.dp_rank, sampler.topology.dp_size) == (where.rank, where.size)
    first = next(iter(sampler))
    items = first if sampler.batching.batched else [first]
    assert items
    assert all(i is None or 0 <= i < len(data.dataset) for i in items)
    model, loss_fn = entry.model(0)
    batch = _collate([data.dataset[i] for i in items])
    assert math.isfinite(float(loss_fn(model, batch).detach()))
    if entry.notes is not None:
        assert all(isinstance(line, str) for line in entry.notes(data, sampler, CONFIG))


def _collate(samples: list[dict[str, object]]) -> dict[str, object]:
    import torch

    return {k: torch.stack([torch.as_tensor(s[k]) for s in samples]) for k in samples[0]}


def test_placement_keywords_follow_the_sampler_schema() -> None:
    from dataorder.llm.blend import BlendedSampler
    from dataorder.parallel.distributed import DistributedSampler

    where = Placement(3, 8)
    assert where.keywords(BlendedSampler) == {"data_parallel_rank": 3, "data_parallel_size": 8}
    assert where.keywords(DistributedSampler) == {"rank": 3, "num_replicas": 8}
    mesh = object()
    assert Placement(0, 2, mesh).keywords(DistributedSampler) == {"mesh": mesh, "dp_dims": ("dp",)}
    # more ranks than the global batch holds micro-batches: one micro-batch per rank
    assert Placement(0, 4).global_batch_size(CONFIG) == CONFIG.global_batch_size
    assert Placement(0, 8).global_batch_size(CONFIG) == CONFIG.micro_batch_size * 8


def test_inspect_commands_and_files_follow_the_registry(tmp_path: Path) -> None:
    commands = inspect_commands(CONFIG, tmp_path)
    assert list(commands) == [n for n, e in DEMO_SAMPLERS.items() if e.inspect is not None]
    assert commands["buckets"].endswith(f"--manifest {tmp_path / 'buckets.manifest.tsv'}")
    assert f"--schedule {tmp_path / 'mixture.schedule.json'}" in commands["mixture"]
    assert write_inspect_files(CONFIG, tmp_path) == [tmp_path / "mixture.schedule.json"]
    only = DemoConfig(samplers=("distributed",))
    assert inspect_commands(only, tmp_path) == {
        "distributed": f"dataorder inspect {tmp_path / 'distributed.json'}"
    }
    assert write_inspect_files(only, tmp_path) == []
