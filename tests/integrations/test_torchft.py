"""dataorder.integrations.torchft: the loader against a scripted Manager, and the whole protocol
on torchft's real engine (its LighthouseServer, 3 replica groups as processes, ProcessGroupGloo
on loopback), where one replica is killed mid-step and restarted and another leaves for good.

The real-engine job checks, from what every replica recorded (dataorder.tools.demo_live): the
committed steps' items, all replicas together, are exactly the base order's first
``committed x G`` positions, each once; every committed step trained exactly ``G`` units; a step
whose commit failed was trained again in full. One configuration runs by default (through
``dataorder demo --fault-tolerant``); the blend, packed rows (tokens, loader workers), the bucket
sampler and 2 inner ranks per group are ``slow``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dataorder.integrations.torchft import STATE_KEY, LiveLoader
from dataorder.live import LiveBatches
from dataorder.llm.megatron import MegatronPretrainingRandomSampler

ROOT = Path(__file__).resolve().parents[2]


class ScriptedManager:
    """The Manager calls LiveLoader makes, answering from a script of quorums."""

    def __init__(self) -> None:
        self.step = 0
        self.committed = 0
        self.rank: int | None = 0
        self.participants = 1
        self.fns: dict[str, Any] = {}

    def current_step(self) -> int:
        return self.step

    def batches_committed(self) -> int:
        return self.committed

    def participating_rank(self) -> int | None:
        return self.rank

    def num_participants(self) -> int:
        return self.participants

    def register_state_dict_fn(self, key: str, load: Any, save: Any) -> None:
        self.fns[key] = (load, save)

    def commit(self) -> None:
        self.step += 1
        self.committed += self.participants


def _live(**kw: Any) -> LiveBatches[Any]:
    return LiveBatches(
        MegatronPretrainingRandomSampler(64, 2, 0, 4, seed=1, global_batch_size=16), **kw
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_serves_the_share_and_replans_on_a_failed_commit_or_a_new_quorum(
    workers: int,
) -> None:
    live = _live()
    manager = ScriptedManager()
    extra = {"persistent_workers": True, "prefetch_factor": 2} if workers else {}
    loader = LiveLoader(live, manager, num_workers=workers, **extra)
    # (participant, participants, commits?) per attempt: a quorum change, a failed commit
    script = [(0, 1, True), (1, 3, True), (1, 3, False), (0, 2, True), (0, 2, True), (2, 4, True)]
    for participant, participants, ok in script:
        manager.rank, manager.participants = participant, participants
        got = loader.step_batches()
        assert got == live.items(manager.step, participant, participants)
        assert loader.step_items() == got
        assert loader.units() == 16
        if ok:
            manager.commit()
    assert loader.replans == 4  # the first step, 3 groups, the re-run on 2, then 4 groups


@pytest.mark.parametrize("workers", [0, 2])
def test_mixture_weights_set_after_the_workers_start_are_served(workers: int) -> None:
    from dataorder.llm.blend import BlendedSampler
    from dataorder.llm.mixlog import MixtureLog

    log = MixtureLog([1, 1])
    live = LiveBatches(BlendedSampler([200, 200], log, 2, 0, 2, 8, seed=0))
    manager = ScriptedManager()
    extra = {"num_workers": 2, "prefetch_factor": 2} if workers else {}
    loader = LiveLoader(live, manager, fetch=list, **extra)
    served = []
    for step in range(6):
        manager.step = step
        served.append(loader.step_batches())
        if step == 1:  # decided after step 1 for step 3, while steps ahead are prefetched
            log.set_weights(3, [1, 0])
    assert served == [live.items(step, 0, 1) for step in range(6)]
    assert all(i < 200 for batch in served[3:] for row in batch for i in row)  # source 0 only


def test_a_replica_outside_the_quorum_trains_nothing() -> None:
    manager = ScriptedManager()
    loader = LiveLoader(_live(), manager)
    manager.rank = None  # healing under an asynchronous quorum, or a spare
    assert loader.step_batches() == []
    assert loader.step_items() == []
    assert loader.units() == 16


def test_per_participant_positions_follow_batches_committed() -> None:
    live = _live(mode="per_participant")
    manager = ScriptedManager()
    loader = LiveLoader(live, manager)
    for participants in (2, 2, 3, 1):
        manager.participants = participants
        got = loader.step_batches()
        assert got == live.items(manager.committed, 0, participants)
        assert loader.units() == live.units(manager.committed, participants)
        manager.commit()
    assert manager.committed == 8


def test_a_restarted_replica_with_another_configuration_is_refused_when_it_heals() -> None:
    peer, restarted = ScriptedManager(), ScriptedManager()
    LiveLoader(_live(), peer)
    other = LiveBatches(MegatronPretrainingRandomSampler(64, 2, 0, 4, seed=2, global_batch_size=16))
    LiveLoader(other, restarted)
    load, _ = restarted.fns[STATE_KEY]
    _, save = peer.fns[STATE_KEY]
    with pytest.raises(ValueError, match=r"state\['config.seed'\] is 1 in the job but 2 here"):
        load(save())  # what torchft does with the peer's state when the replica heals


def test_the_loader_refuses_what_it_cannot_serve() -> None:
    with pytest.raises(TypeError, match=r"live must be a dataorder\.live\.LiveBatches"):
        LiveLoader(object(), ScriptedManager())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="batch_size"):
        LiveLoader(_live(), ScriptedManager(), batch_size=2)
    with pytest.raises(ValueError, match="inner_size must be a divisor"):
        LiveLoader(_live(), ScriptedManager(), inner_size=3)
    with pytest.raises(RuntimeError, match="call step_batches"):
        LiveLoader(_live(), ScriptedManager()).units()


# -- torchft's real engine ------------------------------------------------------------------------
@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_a_torchft_job_that_loses_replicas_trains_every_committed_position_once(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torchft")
    proc = subprocess.run(
        [sys.executable, "-m", "dataorder", "demo", "--fault-tolerant", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=360,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "replica 1 killed in step" in proc.stdout
    assert "coverage: exact" in proc.stdout
    assert "failed commits re-run: 0" not in proc.stdout


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    ("config", "inner", "workers"),
    [("blend", 1, 0), ("packed", 1, 2), ("bucket", 2, 0), ("megatron", 2, 0)],
)
def test_every_family_survives_torchft_failures_exactly(
    tmp_path: Path, config: str, inner: int, workers: int
) -> None:
    pytest.importorskip("torchft")
    from dataorder.tools.demo_live import run_job

    report = run_job(config, workdir=tmp_path, inner=inner, workers=workers, seed=3, timeout=300)
    assert report.ok, report.problems
    assert report.committed_steps == 10
    assert report.failed_attempts >= 1
    if config != "packed":  # samples: G every step; tokens: what each step's rows hold
        assert len(set(report.units_per_step)) == 1


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_the_torchft_example_runs_its_job_and_prints_exact_coverage(tmp_path: Path) -> None:
    pytest.importorskip("torchft")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "torchft_ddp.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=360,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "coverage: exact" in proc.stdout


def _records(config: str, quorums: list[tuple[int, bool]]) -> list[dict[str, Any]]:
    """What replicas record on a script of ``(participants, commits?)`` attempts."""
    import json

    from dataorder.tools.demo_live import build_live

    live = build_live(config)
    out, step = [], 0
    for participants, ok in quorums:
        for p in range(participants):
            items = json.loads(json.dumps(live.items(step, p, participants)))
            out.append(
                {"step": step, "participant": p, "participants": participants, "inner": 0,
                 "committed": ok, "units": live.units(step), "items": items}
            )  # fmt: skip
        step += ok
    return out


@pytest.mark.parametrize("config", ["megatron", "packed"])
def test_the_job_check_passes_exact_records_and_catches_each_violation(config: str) -> None:
    from dataorder.tools.demo_live import build_live, check_records

    live = build_live(config)
    script = [(3, True), (3, False), (2, True), (2, True), (1, True), (3, True), (3, True)]
    records = _records(config, script)
    assert check_records(live, records, 6).ok
    lost = [dict(r, items=r["items"][1:]) if i == 6 else r for i, r in enumerate(records)]
    assert any("trained" in p for p in check_records(live, lost, 6).problems)
    repeated = [*records, records[0]]
    assert not check_records(live, repeated, 6).ok
    never = [*records, dict(records[0], step=9, committed=False)]
    assert any("never committed" in p for p in check_records(live, never, 6).problems)
    short = [r for r in records if r["step"] != 5]
    assert any("not 0..5" in p for p in check_records(live, short, 6).problems)
