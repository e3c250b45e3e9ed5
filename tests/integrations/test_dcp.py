"""torch.distributed.checkpoint + FSDP2 in their own loop: examples/torch_dcp.py under torchrun.

A 2-rank run trains 3 steps with an FSDP2-sharded model and saves one ``dcp.save`` of model,
optimizer, ``OrderState(loader)`` and the loop counters; runs on 3 ranks (2 loader workers: DCP's
template ``state_dict()`` starts an iterator that must be dropped) and on 1 rank (no workers)
load it. Each must find the parameters bit-identical after the reshard and train every sample of
each epoch exactly once over both runs. With ``--packed`` the same runs train a tiny causal LM
on the rows of the real ``PackedSampler`` (``PackedDataset`` rows, ``collate``'s ``input_ids``,
``labels``, ``position_ids``, ``cu_seqlens``): read off the trained ``input_ids``, every token of
epochs 0 and 1 exactly once over both runs, and the padding the sampler counts (NOTE
[ Coverage ]). In-process tests pin what DCP does with the state.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.stack_samplers import example, token_coverage
from tests.test_examples import torchrun

# one worker runs this module (tests/conftest.py: NOTE [ xdist ]): its tests share a
# module-scoped run that each worker would otherwise start again
pytestmark = pytest.mark.xdist_group("dcp")

N = 48


def _steps(root: Path, *prefixes: str) -> list[list[Any]]:
    """Every rank's steps of the runs recorded as ``prefixes`` (one file per run)."""
    runs = [json.loads((root / f"{prefix}.json").read_text()) for prefix in prefixes]
    return [step for run in runs for rank in run["ranks"] for step in rank]


def _reads(tmp_path: Path, *prefixes: str) -> dict[int, Counter[int]]:
    seen: dict[int, Counter[int]] = {}
    for epoch, batch in _steps(tmp_path, *prefixes):
        seen.setdefault(epoch, Counter()).update(batch)
    return seen


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dcp")
    first = torchrun(
        "torch_dcp.py", 2, "--ckpt", "ckpt", "--stop-after", "3", "--record", "a", cwd=root
    )
    assert "saved after step 3 on 2 ranks" in first.stdout
    assert sum(_reads(root, "a")[0].values()) == 3 * 4 * 2  # 3 steps of 4 on 2 ranks
    return root


def _check_resumed(root: Path, world: int, prefix: str, *extra: str) -> None:
    proc = torchrun(
        "torch_dcp.py", world, "--ckpt", "ckpt", "--resume", "--record", prefix, *extra, cwd=root
    )
    assert (
        f"resumed on {world} ranks at epoch 0 step 3: parameters equal after the reshard"
        in proc.stdout
    )
    seen = _reads(root, "a", prefix)
    for epoch in (0, 1):
        assert seen[epoch] == Counter(range(N)), (prefix, epoch)  # every sample once
        assert f"epoch {epoch}: every sample once ✓ (48 of 48)" in proc.stdout


@pytest.mark.slow  # the docstring's sequence below runs it by default
@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_fsdp2_dcp_saved_on_2_ranks_resumes_on_3_with_workers(saved: Path) -> None:
    _check_resumed(saved, 3, "b")  # 2 workers: DCP's template state_dict() starts an iterator


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_fsdp2_dcp_saved_on_2_ranks_resumes_on_1(saved: Path) -> None:
    _check_resumed(saved, 1, "c", "--workers", "0")


@pytest.mark.multiprocess
@pytest.mark.timeout(420)
def test_the_docstrings_sequence_in_one_folder_reports_every_sample_once(tmp_path: Path) -> None:
    """The module docstring's commands as a user runs them, one folder, default records: save on
    2 ranks, resume on 3, then on 1. The 1-rank run counted the 3-rank run's rank files
    ("epoch 0: 48 samples, each NOT once", exit 1). Each run's record is its own file."""
    torchrun("torch_dcp.py", 2, "--ckpt", "c", "--stop-after", "3", cwd=tmp_path)
    for world in (3, 1):
        out = torchrun("torch_dcp.py", world, "--ckpt", "c", "--resume", cwd=tmp_path).stdout
        for epoch in (0, 1):
            assert f"epoch {epoch}: every sample once ✓ (48 of 48)" in out, (world, out)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["a.json", "b.json"]


@pytest.mark.parametrize(
    ("first", "message"),
    [
        (None, "cannot check: a.json (the first run's record) is not here"),
        (
            5,
            "cannot check: a.json is a run that stopped after step 5, but the checkpoint is at "
            "step 3",
        ),
    ],
)
def test_a_first_record_that_is_not_the_checkpoints_is_named_never_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: int | None, message: str
) -> None:
    from argparse import Namespace

    job = example("torch_dcp.py")
    monkeypatch.chdir(tmp_path)
    if first is not None:
        (tmp_path / "a.json").write_text(
            json.dumps({"world_size": 2, "stopped_after": first, "ranks": [[], []]})
        )
    (tmp_path / "b.json").write_text(
        json.dumps({"world_size": 1, "stopped_after": None, "ranks": [[[0, list(range(N))]]]})
    )
    args = Namespace(first_record="a", record="b", epochs=1)
    with pytest.raises(SystemExit, match=re.escape(message)):
        job.check_every_sample_once(args, 1, 3)


@pytest.fixture(scope="module")
def saved_packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dcp-packed")
    args = ("--ckpt", "ckpt", "--stop-after", "3", "--record", "a", "--packed")
    assert "saved after step 3 on 2 ranks" in torchrun("torch_dcp.py", 2, *args, cwd=root).stdout
    steps = _steps(root, "a")
    tokens = sum(len(ids) + pads for _, ids, pads in steps)
    assert tokens == 3 * 2 * 2 * 32  # 3 steps of 2 rows of 32 tokens on 2 ranks
    return root


def _check_packed_resumed(root: Path, world: int, prefix: str, *extra: str) -> None:
    args = ("--ckpt", "ckpt", "--resume", "--record", prefix, "--packed", *extra)
    proc = torchrun("torch_dcp.py", world, *args, cwd=root)
    assert (
        f"resumed on {world} ranks at epoch 0 step 3: parameters equal after the reshard"
        in proc.stdout
    )
    job = example("torch_dcp.py")
    ids: dict[int, list[int]] = {}
    padding: Counter[int] = Counter()
    for epoch, read, pads in _steps(root, "a", prefix):
        ids.setdefault(epoch, []).extend(read)
        padding[epoch] += pads
    assert sorted(ids) == [0, 1]
    for epoch in (0, 1):
        # the resumed layout read the end of each epoch: its counters are the epoch's
        sampler = job.packed_sampler(0, world)
        sampler.set_epoch(epoch)
        read = token_coverage(ids[epoch], job.FIRST)
        assert read.distinct == sum(job.LENGTHS) - sampler.tokens_dropped, (world, epoch)
        assert read.repeated == 0, (world, epoch)  # a packed sampler never repeats a token
        assert padding[epoch] == sampler.tokens_padded, (world, epoch)
        assert sampler.tokens_dropped == 0  # 30 rows: blocks of 2 x 1, 2, 3 ranks drop none
    assert "epoch 1: every token once ✓ (907 of 907, 0 dropped," in proc.stdout


# The docstring's sequence above is this example's default real job. Packed rows read in a real
# job and resumed on another mesh, every token once, by default: test_demo's packed phase.
@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_fsdp2_dcp_packed_rows_saved_on_2_ranks_resume_on_3_every_token_once(
    saved_packed: Path,
) -> None:
    _check_packed_resumed(saved_packed, 3, "b")  # 2 loader workers


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_fsdp2_dcp_packed_rows_saved_on_2_ranks_resume_on_1_every_token_once(
    saved_packed: Path,
) -> None:
    _check_packed_resumed(saved_packed, 1, "c", "--workers", "0")


def test_dcp_keeps_one_copy_of_each_key(tmp_path: Path) -> None:
    """What makes a global state necessary: DCP saves a non-tensor key once, from one rank."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    from dataorder.integrations.dcp import OrderState
    from dataorder.llm.megatron import MegatronPretrainingRandomSampler

    sampler = MegatronPretrainingRandomSampler(40, 2, 0, 2, seed=3)
    it = iter(sampler)
    next(it), next(it)  # 2 blocks of 2 x 2: a position that a DP size of 4 can continue
    dcp.save({"data": OrderState(sampler)}, checkpoint_id=str(tmp_path), no_dist=True)
    loaded = _load_state_dict_from_keys(checkpoint_id=str(tmp_path))
    assert loaded["data"] == {"sampler": sampler.state_dict()}
    # the same state loads on another data-parallel size, through DCP's own load
    other = MegatronPretrainingRandomSampler(40, 2, 2, 4, seed=3)
    dcp.load({"data": OrderState(other)}, checkpoint_id=str(tmp_path), no_dist=True)
    assert other.epoch == 0
    assert other.state_dict()["consumed"] == 8
