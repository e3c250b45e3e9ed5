"""HF Transformers Trainer in its own loop: examples/hf_trainer.py (2 processes under torchrun).

The uninterrupted run (24 samples, 2 epochs of 6 steps, a checkpoint every 3) must give each
process a disjoint half of every epoch (no double sharding by Accelerate's BatchSamplerShard);
``train(resume_from_checkpoint=...)`` from a checkpoint in epoch 1 (and, slow, in epoch 0) must
read on each process exactly what the uninterrupted run read after it; without the epoch
callback it must not (the upstream bug this module works around). One process with the same
global batch resumes a 2-process checkpoint exactly (slow); with another global batch the resume
is refused. Skipped without transformers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.test_examples import EXAMPLES, torchrun

# one worker runs this module (tests/conftest.py: NOTE [ xdist ]): its tests share a
# module-scoped run that each worker would otherwise start again
pytestmark = pytest.mark.xdist_group("hf_trainer")

pytest.importorskip("transformers")

N = 24


def _read(root: Path, prefix: str, rank: int = 0) -> list[int]:
    """The sample ids process ``rank`` trained in the run recorded as ``prefix``, in order."""
    record = json.loads((root / f"{prefix}.json").read_text())
    return [i for _, i in record["ranks"][rank]]


def _one_process(root: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "hf_trainer.py"), "--out", "run", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf")
    out = torchrun("hf_trainer.py", 2, "--out", "run", "--record", "full", cwd=root).stdout
    for epoch in (0, 1):
        assert f"epoch {epoch}: every sample once ✓ (24 of 24)" in out
    halves = [_read(root, "full", r) for r in (0, 1)]
    assert all(len(h) == N for h in halves)  # 12 per epoch per process: none lost to re-sharding
    assert Counter(halves[0][:12] + halves[1][:12]) == Counter(range(N))
    assert halves[0][:12] != halves[0][12:]  # the epochs differ
    return root


def _resume(root: Path, step: int, prefix: str, *extra: str) -> list[list[int]]:
    out = torchrun(
        "hf_trainer.py",
        2,
        *("--out", "run", "--record", prefix, "--resume", f"run/checkpoint-{step}", *extra),
        cwd=root,
    ).stdout
    if "--no-epoch-sync" in extra:
        assert "epoch 1: NOT every sample once ✗" in out
    else:
        for epoch in (0, 1):  # the run before the checkpoint and this one
            assert f"epoch {epoch}: every sample once ✓ (24 of 24)" in out
    return [_read(root, prefix, r) for r in (0, 1)]


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_resume_in_epoch_1_equals_the_uninterrupted_run(full: Path) -> None:
    resumed = _resume(full, 9, "r9")
    for rank in (0, 1):
        assert resumed[rank] == _read(full, "full", rank)[18:]  # 9 steps x 2 samples done


def test_another_global_batch_is_refused_by_the_checkpoints_record(full: Path) -> None:
    """The check ``train(resume_from_checkpoint=...)`` runs first, on the file the Trainer's
    checkpoint holds (the subprocess test below runs it through ``train``)."""
    from types import SimpleNamespace

    from dataorder.integrations.hf_trainer import STATE_FILE, check_resume
    from dataorder.parallel.distributed import DistributedSampler

    ckpt = full / "run" / "checkpoint-3"
    assert (ckpt / STATE_FILE).is_file()
    fresh = DistributedSampler(range(N), num_replicas=1, rank=0, seed=1234)
    same = SimpleNamespace(
        per_device_train_batch_size=4,
        world_size=1,
        gradient_accumulation_steps=1,
        dataloader_drop_last=False,
        ignore_data_skip=False,
    )
    assert check_resume(ckpt, fresh, same)
    other = SimpleNamespace(**{**vars(same), "per_device_train_batch_size": 2})
    with pytest.raises(ValueError, match="got positions_per_step=2"):
        check_resume(ckpt, fresh, other)
    with pytest.raises(ValueError, match="seed is 1234 in the state but 5 in this sampler"):
        check_resume(ckpt, DistributedSampler(range(N), num_replicas=1, rank=0, seed=5), same)
    assert not check_resume(full / "run", fresh, same)  # no record: nothing to check


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_process_resumes_at_another_split_through_a_batch_sampler(full: Path) -> None:
    """A Megatron batch sampler (items with a column ``forward`` does not take), saved on 2
    processes at 2 x accumulation 1, resumed on one at 2 x accumulation 2: the same global batch."""
    torchrun(
        "hf_trainer.py",
        2,
        *("--out", "meg", "--record", "meg", "--sampler", "megatron"),
        cwd=full,
    )
    out = _one_process(
        full,
        *("--out", "meg2", "--record", "meg1", "--first-record", "meg", "--sampler", "megatron"),
        *("--accumulation", "2", "--resume", "meg/checkpoint-3"),
    )
    for epoch in (0, 1):
        assert f"epoch {epoch}: every sample once ✓ (24 of 24)" in out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_another_global_batch_is_refused(full: Path) -> None:
    out = _one_process(full, "--record", "one2", "--resume", "run/checkpoint-3")
    assert "resume refused: the global batch must stay the same" in out
    assert "read 4 samples per optimizer step (per-rank batch 2 x world size 2" in out
    assert "got positions_per_step=2 (per-rank batch 2 x world size 1" in out


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_resume_in_epoch_0_equals_the_uninterrupted_run(full: Path) -> None:
    resumed = _resume(full, 3, "r3")
    for rank in (0, 1):
        assert resumed[rank] == _read(full, "full", rank)[6:]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_without_the_epoch_callback_epoch_1_replays_epoch_0s_order(full: Path) -> None:
    resumed = _resume(full, 9, "nosync", "--no-epoch-sync")
    assert resumed[0] != _read(full, "full", 0)[18:]  # pins the upstream behaviour


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_process_with_the_same_global_batch_resumes_exactly(full: Path) -> None:
    out = _one_process(
        full, "--record", "one4", "--per-device", "4", "--resume", "run/checkpoint-3"
    )
    assert "epoch 1: every sample once ✓ (24 of 24)" in out
    one = _read(full, "one4")
    halves = [_read(full, "full", r) for r in (0, 1)]
    before = halves[0][:6] + halves[1][:6]  # 3 steps x 2 on each process
    assert Counter(before + one[:12]) == Counter(range(N))  # the rest of epoch 0, once
    assert Counter(one[12:]) == Counter(halves[0][12:] + halves[1][12:])  # epoch 1, the same
