"""The examples run as users run them: under torchrun, gloo on loopback, with a hard timeout.

Each script is launched with ``python -m torch.distributed.run --standalone`` in its own session;
on a timeout the whole session (torchrun and its workers) is killed and the test fails. What a
run reads is compared with what it must read: a resumed run continues exactly where the first
one stopped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.llm.schedule import BatchSizeSchedule

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"


def torchrun(
    script: str, nproc: int, *args: str, cwd: Path, timeout: float = 150
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(EXAMPLES / script),
        *args,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")  # N processes on a few cores
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and every worker it started
        proc.communicate()
        pytest.fail(f"{script} did not finish within {timeout} s")
    assert proc.returncode == 0, f"{script} failed:\n{out}\n{err[-4000:]}"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


# -- docs ---------------------------------------------------------------------------------------
def _gen_api() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api", DOCS / "gen_api.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_current() -> None:
    expected = _gen_api().render()
    current = (DOCS / "api.md").read_text(encoding="utf-8")
    assert current == expected, "docs/api.md is out of date: run python docs/gen_api.py"


def test_api_reference_covers_every_public_name() -> None:
    import dataorder

    text = (DOCS / "api.md").read_text(encoding="utf-8")
    for name in dataorder.__all__:
        assert f"`{name}`" in text, name
    for module in _gen_api().public_modules():
        assert f"## dataorder.{module}\n" in text, module
    assert " at 0x" not in text  # nothing that changes from run to run


_MIGRATION_BLOCKS = re.findall(
    r"```python\n(.*?)```", (DOCS / "migration.md").read_text(encoding="utf-8"), flags=re.S
)


@pytest.mark.parametrize("index", range(len(_MIGRATION_BLOCKS)))
def test_migration_guide_code_runs(index: int) -> None:
    code = compile(_MIGRATION_BLOCKS[index], f"docs/migration.md[python {index}]", "exec")
    exec(code, {})


def test_llm_sampler_reference_examples_run() -> None:
    """docs/llm_samplers.md's ``>>>`` examples (the checkpoint schemas) hold as written."""
    import doctest

    result = doctest.testfile(
        str(DOCS / "llm_samplers.md"), module_relative=False, optionflags=doctest.ELLIPSIS
    )
    assert result.attempted >= 12
    assert result.failed == 0


# -- examples -------------------------------------------------------------------------------------
def test_the_quickstart_runs() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "rank 0: first micro-batch" in proc.stdout


@pytest.mark.multiprocess
@pytest.mark.timeout(360)
def test_llm_pretraining_resumes_exactly_through_the_ramp(tmp_path: Path) -> None:
    first = torchrun(
        "llm_pretraining.py", 2, "--steps", "9", "--save", "c.json", "--record", "a", cwd=tmp_path
    )
    assert first.stdout.splitlines()[-1] == "epoch 0: no sample twice so far ✓ (96 of 410 read)"
    proc = torchrun("llm_pretraining.py", 2, "--resume", "c.json", "--record", "b", cwd=tmp_path)
    assert "step 19: global batch 32 = 8 micro-batches x 2 x 2 ranks" in proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[-2:] == [
        "epoch 0: every sample once ✓ (408 of 410, 2 dropped: the short last block)",
        "epoch 1: no sample twice so far ✓ (24 of 410 read)",
    ]
    # What each rank must read: the ramp's micro-batch counts, drawn from an uninterrupted
    # sampler that crosses into epoch 1 at step 19.
    schedule = BatchSizeSchedule.rampup(8, 8, 128, global_batch_size=32)
    needed = sum(
        schedule.at_step(k, micro_batch_size=2, data_parallel_size=2).num_micro_batches
        for k in range(20)
    )
    for rank in range(2):
        sampler = MegatronPretrainingRandomSampler(410, 2, rank, 2, seed=1234)
        expected: list[list[int]] = []
        while len(expected) < needed:
            expected += list(sampler)
        a = json.loads((tmp_path / f"a.rank{rank}.json").read_text())
        b = json.loads((tmp_path / f"b.rank{rank}.json").read_text())
        assert len(a) == sum(
            schedule.at_step(k, micro_batch_size=2, data_parallel_size=2).num_micro_batches
            for k in range(9)
        )
        assert a + b == expected[:needed]


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_parallel_3d_verifies_the_mesh_and_catches_the_mistake(tmp_path: Path) -> None:
    # 4 processes as (dp, tp, cp) = (2, 2, 1): the 2x2x2 layout runs in test_demo.py, where
    # starting 8 processes is cheaper than under torchrun.
    proc = torchrun(
        "parallel_3d.py",
        4,
        "--tp",
        "2",
        "--cp",
        "1",
        "--show-mistake",
        "--epochs",
        "1",
        cwd=tmp_path,
    )
    out = proc.stdout
    assert "the wrong sampler is caught" in out
    assert "the samplers declare num_replicas [4] but the data-parallel group has 2 ranks" in out
    assert "tensor/context-parallel replicas" in out
    assert (
        "data-parallel partition OK over the whole epoch of epoch 0: 2 DP ranks x 2 replicas" in out
    )
    assert "epoch 0: 26 steps" in out  # 410 samples, 205 per DP rank, batches of 8
    assert (
        "epoch 0: every sample once ✓ (410 of 410 over 2 DP ranks, 0 repeats for 0 declared "
        "padding; tensor/context-parallel replicas identical)"
    ) in out
    assert out.splitlines()[-1].startswith("epoch 0: every sample once ✓")


@pytest.mark.multiprocess
@pytest.mark.timeout(360)
def test_diffusion_resume_reads_every_image_once(tmp_path: Path) -> None:
    small = ["--images", "300", "--workers", "1"]  # a worker process still prefetches
    first = torchrun(
        "diffusion_resume.py",
        2,
        "--ckpt",
        "c",
        "--stop-at",
        "12",
        "--record",
        "a",
        *small,
        cwd=tmp_path,
    )
    assert "stopped after step 12" in first.stdout
    assert first.stdout.splitlines()[-1].startswith("epoch 0: no image twice so far ✓ (")
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved["step"] == 12
    second = torchrun(
        "diffusion_resume.py",
        2,
        "--ckpt",
        "c",
        "--resume",
        "--record",
        "b",
        *small,
        cwd=tmp_path,
    )
    assert "finished the epoch" in second.stdout
    last = second.stdout.splitlines()[-1]
    assert last.startswith("epoch 0: every image once ✓ (300 of 300; the "), last
    reads: Counter[int] = Counter()
    declared = 0
    for rank in range(2):
        a = json.loads((tmp_path / f"a.rank{rank}.json").read_text())
        b = json.loads((tmp_path / f"b.rank{rank}.json").read_text())
        assert len(a) == 12
        for batch in a + b:
            reads.update(batch["indices"])
            declared += batch["padding"]
    assert sorted(reads) == list(range(300))  # every image of the epoch
    assert sum(reads.values()) - 300 == declared  # repeats only where the sampler said so


@pytest.mark.timeout(300)
def test_online_mixing_resumes_on_another_size_with_the_same_log_and_order(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "online_mixing.py"),
            "--steps",
            "16",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["same_log"] is True
    assert report["same_order"] is True
    assert report["entries"] == 1 + 16 // 4  # the first entry, then one decision per 4 steps
    assert (tmp_path / "online_mixing.png").stat().st_size > 0
