"""Real torch.distributed jobs: 8 gloo processes on loopback, a 2 x 2 x 2 (dp, tp, cp) mesh.

What only real processes show: a real ``DeviceMesh`` and its groups, ``all_gather_object`` over
them, DataLoader worker processes, and a rank that dies mid-step. The rank programs are in
``tests/parallel/mp_workers.py``. A node agent plays torchrun: it imports torch once, forks the
ranks, and when one fails it gives the others a second to fail in their collective, then stops
them. Every job has a hard deadline (the agent's, then the test's, then pytest-timeout), so a
hang fails fast.

The results are checked here, independently of
:func:`dataorder.parallel.verify.verify_data_parallel`:
data-parallel ranks disjoint (but for declared padding), tensor/context-parallel peers identical,
equal batch counts, and the epoch covered.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.parallel import mp_workers as W

pytestmark = pytest.mark.multiprocess

WORKER = Path(__file__).with_name("mp_workers.py")
WORLD = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(job: str, workdir: Path, *, phase: int = 0, deadline: float = 90.0) -> list[int]:
    """Run ``job`` on WORLD ranks under a node agent (``mp_workers.agent``); return exit codes.

    The agent forks the ranks and, like torchrun, stops them all when one fails. The agent's
    whole process group is killed if it outlives ``deadline`` (plus a grace period): a hang
    fails the test instead of the CI run.
    """
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    command = [sys.executable, str(WORKER), job, str(WORLD), str(free_port()), str(workdir)]
    with open(workdir / f"{job}.phase{phase}.agent.log", "w") as log:
        agent = subprocess.Popen(
            [*command, str(phase), str(deadline)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            agent.wait(timeout=deadline + 30)
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait(timeout=10)
            raise AssertionError(
                f"{job} phase {phase}: agent still running after {deadline + 30}s\n"
                + logs_tail(workdir, job, phase)
            ) from None
        finally:
            # the agent's session: the ranks and their DataLoader workers (a killed rank's
            # workers are orphans until their watchdog notices); all of them are ours
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent.pid, signal.SIGKILL)
            agent.wait(timeout=10)
    assert agent.returncode == 0, (workdir / f"{job}.phase{phase}.agent.log").read_text()
    codes = json.loads((workdir / f"{job}.phase{phase}.codes.json").read_text())
    assert None not in codes, f"{job} phase {phase}: ranks hung: {codes}\n" + logs_tail(
        workdir, job, phase
    )
    return [int(c) for c in codes]


def logs_tail(workdir: Path, job: str, phase: int) -> str:
    return "\n".join(
        f"--- rank {r}\n{_read(workdir / f'{job}.phase{phase}.rank{r}.log')[-2000:]}"
        for r in range(WORLD)
    )


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else "(no log)"


def results(workdir: Path, job: str, phase: int = 0) -> list[dict[str, Any]]:
    return [
        json.loads((workdir / f"{job}.phase{phase}.rank{r}.json").read_text()) for r in range(WORLD)
    ]


def slots(items: list[Any]) -> list[int | None]:
    return [x for item in items for x in (item if isinstance(item, list) else [item])]


def check_partition(
    name: str, per_rank: list[dict[str, Any]], key: str, padded: int, dropped: int
) -> None:
    """DP ranks disjoint but for padding, replicas identical, equal batch counts, full coverage."""
    by_dp: dict[int, list[Any]] = {}
    for r in per_rank:
        items = r["items"] if key == "items" else r["batches"]
        dp = r["coord"][0]
        if dp in by_dp:
            assert items == by_dp[dp], f"{name}: tp/cp peers of DP rank {dp} read different data"
        by_dp[dp] = items
    counts = {len(v) for v in by_dp.values()}
    assert len(counts) == 1, f"{name}: unequal batch counts {counts}"
    everything = [x for v in by_dp.values() for x in slots(v)]
    real = [x for x in everything if x is not None]
    assert all(0 <= x < W.N_MESH for x in real), name
    assert len(set(real)) == W.N_MESH - dropped, f"{name}: coverage"
    assert len(everything) - len(set(real)) == padded, f"{name}: padding"


@pytest.mark.timeout(150)
def test_mesh_every_sampler(tmp_path: Path) -> None:
    codes = launch("mesh", tmp_path, deadline=60)
    assert codes == [0] * WORLD, logs_tail(tmp_path, "mesh", 0)
    per_rank = results(tmp_path, "mesh")

    for rank, r in enumerate(per_rank):
        d, t, c = r["coord"]
        assert rank == d * 4 + t * 2 + c
        assert r["topology"] == [d, 2, t * 2 + c, 4], "DP rank from the mesh, TP x CP replicas"
        assert r["process_group_topology"] == [rank, WORLD, 0, 1, "process_group"]

    names = list(per_rank[0]["samplers"])
    assert names == [
        "distributed",
        "distributed-torch-drop",
        "megatron-single",
        "megatron-random",
        "megatron-factory",
        "bucket",
        "bucket-drop",
    ]
    for name in names:
        entries = [{**r["samplers"][name], "coord": r["coord"]} for r in per_rank]
        first = entries[0]
        check_partition(name, entries, "items", first["padded"], first["dropped"])
        for e in entries:
            rep = e["report"]
            assert rep["ok"], name
            assert rep["full_epoch"], name
            assert rep["dp"] == [e["coord"][0], 2], name
            assert rep["replica"][1] == 4, name
            assert rep["num_batches"] == len(e["items"]), name
            assert rep["padding_slots"] == rep["allowed_padding"] == first["padded"], name
            assert rep["distinct"] == W.N_MESH - first["dropped"], name
            epoch, progress = e["cursor"]
            assert epoch == 0, f"{name}: verify moved the cursor"
            assert not any(progress.values()), f"{name}: verify moved the cursor"
            assert e["epoch_after"] == 1, f"{name}: the pass ran out but epoch 0 comes next"
            head = e["first_batches"]
            assert head["ok"], name
            assert head["num_batches"] == min(3, len(e["items"])), name
            assert not head["full_epoch"] or len(e["items"]) <= 3, name

    # the sampler over the global world: refused identically on every rank, nobody hung
    verdicts = [r["global_world_sampler"] for r in per_rank]
    assert verdicts[0] is not None
    assert all(v == verdicts[0] for v in verdicts)
    text = "\n".join(verdicts[0])
    assert "the samplers declare num_replicas [8] but the data-parallel group has 2 ranks" in text
    assert "read 4 different versions" in text

    # what came out of DataLoaders with two worker processes
    for name in per_rank[0]["loaders"]:
        entries = [{**r["loaders"][name], "coord": r["coord"]} for r in per_rank]
        sampler = {
            "loader-megatron-random": "megatron-random",
            "loader-bucket": "bucket",
            "loader-distributed": "distributed",
        }[name]
        declared = per_rank[0]["samplers"][sampler]
        check_partition(name, entries, "batches", declared["padded"], declared["dropped"])
        for e in entries:
            assert e["report"]["ok"], name
            assert e["report"]["padding_slots"] <= e["report"]["allowed_padding"], name
            assert e["loader_report"]["ok"], name
            assert e["loader_report"]["full_epoch"], name
            assert e["loader_report"]["padding_slots"] == declared["padded"], name
        own = [x for e in entries for x in slots(e["batches"])]
        assert Counter(own) == Counter(
            x for r in per_rank for x in slots(r["samplers"][sampler]["items"])
        ), f"{name}: the workers delivered exactly the sampler's indices"

    # HF Accelerate, when installed: prepare() shards the rank-aware sampler a second time (over
    # all 8 processes); the recipe of docs/integrations.md hands each process exactly its indices
    if per_rank[0]["accelerate"] is not None:
        for r in per_rank:
            acc, ours = r["accelerate"], r["samplers"]["distributed"]["items"]
            assert acc["num_processes"] == WORLD
            assert acc["recipe"] == ours
            assert len(acc["default"]) < len(ours), "double sharding"
            assert set(acc["default"]) <= set(ours)


@pytest.mark.timeout(240)
def test_crash_mid_epoch_and_restart_reads_every_sample_once(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    codes = launch("crash", tmp_path, phase=0, deadline=60)
    killed = W.CRASH_KILL["rank"]
    assert codes[killed] == -9, logs_tail(tmp_path, "crash", 0)
    assert all(c != 0 for c in codes), "the job died with its rank, as in real life"
    latest = json.loads((tmp_path / "ckpt" / "latest.json").read_text())
    assert latest == {"step": 12, "epoch": 0}, "the checkpoint after epoch 0's loop"

    codes = launch("crash", tmp_path, phase=1, deadline=60)
    assert codes == [0] * WORLD, logs_tail(tmp_path, "crash", 1)
    per_rank = results(tmp_path, "crash", phase=1)
    steps = W.CRASH_EPOCHS * W.N_CRASH // (W.CRASH_BATCH * 2)
    assert {(r["start"], r["last_step"]) for r in per_rank} == {(12, steps)}
    # both loaders ran the last epoch out: the next pass of both is the epoch after it
    assert all(r["cursors"] == [[W.CRASH_EPOCHS, 0]] * 2 for r in per_rank)

    # the trained record: committed steps up to the checkpoint, then phase 1
    logs: dict[int, list[dict[str, Any]]] = {}
    for rank, r in enumerate(per_rank):
        lines = [
            json.loads(x) for x in (tmp_path / f"log.rank{rank}.jsonl").read_text().splitlines()
        ]
        assert [x["step"] for x in lines] == list(range(1, steps + 1)), f"rank {rank}"
        dp = r["dp_rank"]
        if dp in logs:
            assert lines == logs[dp], f"tp/cp peers of DP rank {dp} trained on different data"
        logs[dp] = lines
    for key in ("a", "b"):  # a: DistributedSampler via StatefulDataLoader; b: Megatron
        for epoch in range(W.CRASH_EPOCHS):
            read = Counter(
                x
                for lines in logs.values()
                for line in lines
                if line["epoch"] == epoch
                for x in line[key]
            )
            assert sorted(read) == list(range(W.N_CRASH)), f"loader {key} epoch {epoch}: coverage"
            assert set(read.values()) == {1}, f"loader {key} epoch {epoch}: a sample read twice"
