"""``dataorder demo --fault-tolerant``: a torchft job on CPU that loses replicas and checks that
every committed step trained exactly its global batch.

torchft's ``LighthouseServer`` runs in this process; each replica group is a separate process
(its inner ranks are threads, as in torchft's own integration tests) with ``ProcessGroupGloo``
on loopback and a tiny model. One replica kills itself (SIGKILL) in the middle of a seeded
random step, before its gradients are reduced, and is restarted: it heals from a peer (model,
optimizer and torchft's ``{"step", "batches_committed"}``), and serves the right batch on its
first step. Another leaves for good a step later. Every replica records the items it trained
in each step, committed or not; :func:`check_records` then checks, from the records alone:

* the committed steps' items, all replicas together, in participant and row order, are
  exactly each step's nominal global batch, so the run's committed items are exactly the base
  order's first ``committed x G`` positions, each once;
* every committed step trained exactly ``G`` units (``LiveBatches.units``; tokens for packed
  rows);
* a step whose commit failed was trained again, in full, under the next quorum.

Every process has a hard timeout; the job as a whole too. :func:`replica_loop` is the loop of
docs/integrations.md ("torchft"), written out.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from dataorder.core.batching import BATCHES, read_spans
from dataorder.integrations.torchft import LiveLoader
from dataorder.live.batches import LiveBatches
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.llm.packing import PackedSampler
from dataorder.tools.output import EXIT_CHECKS_FAILED

__all__ = [
    "CONFIGS",
    "JobReport",
    "build_live",
    "check_records",
    "main",
    "replica_loop",
    "run_from_cli",
    "run_job",
    "wait_for_peers",
]

#: The nominal data-parallel size of every configuration (replica groups x inner ranks).
NOMINAL_DP = 4
_N = 96
_LENGTHS = [int(x) for x in np.random.default_rng(3).integers(1, 60, 90)]


def _megatron(dp: int) -> Any:
    return MegatronPretrainingRandomSampler(_N, 2, 0, dp, seed=7, global_batch_size=4 * dp)


def _blend(dp: int) -> Any:
    return BlendedSampler([60, 36], [0.7, 0.3], 1, 0, dp, 3 * dp, seed=8, total_samples=96)


def _packed(dp: int) -> Any:
    return PackedSampler(_LENGTHS, 32, 1, 0, dp, 2 * dp, seed=9, chunk=4, window=16)


def _bucket(dp: int) -> Any:
    # Imported here: these two import torch, which this module imports only where it is used.
    from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
    from dataorder.diffusion.sampler.sampler import SequentialBucketSampler

    ids = np.random.default_rng(4).integers(0, 3, _N)
    ds = BaseMultiresolutionDataset.from_bucket_ids(ids, [(256, 256), (320, 192), (192, 320)])
    return SequentialBucketSampler(ds, base_batch_size=2, seed=10, num_replicas=dp, rank=0)


#: The job's sampler, by name: ``make(nominal_dp)`` at the nominal layout.
CONFIGS: dict[str, Callable[[int], Any]] = {
    "megatron": _megatron,
    "blend": _blend,
    "packed": _packed,
    "bucket": _bucket,
}


def build_live(config: str) -> LiveBatches[Any]:
    """The job's :class:`~dataorder.live.LiveBatches` (the same on every replica)."""
    return LiveBatches(CONFIGS[config](NOMINAL_DP))


def _spans(live: LiveBatches[Any], items: Sequence[Any]) -> list[list[int]]:
    keys, starts, stops = read_spans(live.batching, items).spans
    return [[int(k), int(a), int(b)] for k, a, b in zip(keys, starts, stops, strict=True)]


def _features(item: Any) -> Any:
    """What a worker makes of an item: one row per slot, a few numbers from its spans."""
    import torch

    if item and isinstance(item[0], tuple):  # packed rows: spans (document, start, stop)
        spans = [s for row in item for s in row]
    else:
        spans = [(k, 0, 1) for k in BATCHES.slots(item) if k is not None]
    x = torch.tensor([[k % 7, (k % 11) / 11, b - a, 1.0] for k, a, b in spans] or [[0.0] * 4])
    return x.float(), torch.tensor([float(b - a) for _, a, b in spans] or [0.0])


# -- one replica group ----------------------------------------------------------------------------
def wait_for_peers(directory: Path, replica: int, replicas: int, timeout: float = 150.0) -> None:
    """Say this replica is up (its ``Manager`` heartbeats), then wait until all ``replicas`` are:
    otherwise the first two to import torch could run the whole job before the third joins
    (a restarted replica finds every mark already there)."""
    (directory / f"up_{replica}").touch()
    deadline = time.monotonic() + timeout
    while not all((directory / f"up_{r}").exists() for r in range(replicas)):
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"replica {replica}: the other replicas did not start in {timeout} s"
            )
        time.sleep(0.05)


def replica_loop(
    *,
    config: str,
    replica: int,
    inner_rank: int,
    inner_size: int,
    store_port: int,
    lighthouse: str,
    steps: int,
    die_at: int,
    leave_at: int,
    out: Path,
    num_workers: int = 0,
    replicas: int = 3,
) -> None:
    """One rank of one replica group: the torchft loop of docs/integrations.md, recording what
    it trains. ``die_at``/``leave_at`` (-1: never) kill the process mid-step, or leave the job."""
    import torch
    from torchft import Manager, ProcessGroupGloo
    from torchft.process_group import ReduceOp

    torch.manual_seed(0)  # the same initial model on every replica
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=10)),
        min_replica_size=2,
        load_state_dict=lambda sd: (
            model.load_state_dict(sd["model"]),
            optimizer.load_state_dict(sd["optim"]),
        ),
        state_dict=lambda: {"model": model.state_dict(), "optim": optimizer.state_dict()},
        replica_id=f"replica_{replica}",
        store_addr="localhost",
        store_port=store_port,
        rank=inner_rank,
        world_size=inner_size,
        lighthouse_addr=lighthouse,
        use_async_quorum=False,
        timeout=timedelta(seconds=15),
        quorum_timeout=timedelta(seconds=150),  # a restarted replica imports torch first
        connect_timeout=timedelta(seconds=15),
    )
    if inner_rank == 0:
        wait_for_peers(out.parent, replica, replicas)
    live = build_live(config)
    extra: dict[str, Any] = (
        {"persistent_workers": True, "prefetch_factor": 2} if num_workers else {}
    )
    loader = LiveLoader(
        live,
        manager,
        fetch=_features,
        inner_rank=inner_rank,
        inner_size=inner_size,
        num_workers=num_workers,
        **extra,
    )
    with out.open("a", encoding="utf-8") as log:
        while manager.current_step() < steps:
            if manager.current_step() == leave_at:
                break  # this replica leaves the job for good
            manager.start_quorum()
            batches = loader.step_batches()  # this replica's share of this step
            units = loader.units()  # the global batch's units, whoever takes part
            optimizer.zero_grad()
            loss = torch.zeros(())
            for x, weight in batches:
                loss = loss + (model(x).squeeze(-1).pow(2) * weight).sum()
            if batches:
                (loss / units).backward()  # type: ignore[no-untyped-call]
            if loader.last["step"] == die_at and inner_rank == 0:
                os.kill(os.getpid(), signal.SIGKILL)  # mid-step, before the allreduce
            for p in model.parameters():
                grad = p.grad if p.grad is not None else torch.zeros_like(p)
                manager.allreduce(grad, reduce_op=ReduceOp.SUM).wait()
                p.grad = grad
            committed = manager.should_commit()
            if committed:
                optimizer.step()
            record = {
                **loader.last,
                "inner": inner_rank,
                "committed": bool(committed),
                "units": units,
                "items": json.loads(json.dumps(loader.step_items())),
            }
            log.write(json.dumps(record) + "\n")
            log.flush()
    manager.shutdown(wait=False)


def _replica_main(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    store = dist.TCPStore(  # type: ignore[attr-defined]
        "localhost", 0, is_master=True, wait_for_workers=False
    )
    errors: list[BaseException] = []

    def run(inner: int) -> None:
        try:
            replica_loop(
                config=args.config,
                replica=args.replica,
                inner_rank=inner,
                inner_size=args.inner,
                store_port=store.port,
                lighthouse=args.lighthouse,
                steps=args.steps,
                die_at=args.die_at,
                leave_at=args.leave_at,
                out=Path(args.out).with_suffix(f".{inner}.jsonl"),
                num_workers=args.workers,
                replicas=args.replicas,
            )
        except BaseException as err:  # reported by the exit code
            errors.append(err)
            raise

    threads = [threading.Thread(target=run, args=(i,)) for i in range(args.inner)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print(f"replica {args.replica} failed: {errors[0]!r}", flush=True)
    sys.stdout.flush()
    # torchft's manager and process group keep non-daemon threads that can outlive shutdown():
    # leave without waiting for them (everything this replica writes is flushed)
    os._exit(1 if errors else 0)


# -- the job --------------------------------------------------------------------------------------
@dataclass
class JobReport:
    """What :func:`check_records` found.

    Attributes:
        committed_steps: Steps committed (each once, all replicas together).
        units_per_step: The units each committed step trained (``G``: constant in samples; in
            tokens, what the step's rows hold).
        failed_attempts: Step attempts whose commit failed (re-trained in full afterwards).
        quorum_sizes: The participants of each committed step (-1 where records disagree).
        problems: Every violation, in words (empty: the check passed).
    """

    committed_steps: int = 0
    units_per_step: list[int] = field(default_factory=list)
    failed_attempts: int = 0
    quorum_sizes: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return not self.problems


def check_records(
    live: LiveBatches[Any], records: Sequence[dict[str, Any]], steps: int
) -> JobReport:
    """Check a job's records against the base order (see the module docstring)."""
    report = JobReport()
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["committed"]:
            by_step[r["step"]].append(r)
        else:
            report.failed_attempts += 1
    report.committed_steps = len(by_step)
    if sorted(by_step) != list(range(steps)):
        report.problems.append(f"committed steps {sorted(by_step)} are not 0..{steps - 1}")
    base = []
    trained = []
    for s in range(steps):
        group = sorted(by_step.get(s, []), key=lambda r: (r["participant"], r["inner"]))
        inner = max((r["inner"] for r in group), default=0) + 1
        if any(r["participant"] < 0 for r in group):
            report.problems.append(f"step {s}: a replica that did not take part recorded items")
        got: list[Any] = []
        for p in sorted({r["participant"] for r in group}):
            columns = [r["items"] for r in group if r["participant"] == p]
            if len(columns) != inner or len({len(c) for c in columns}) != 1:
                report.problems.append(f"step {s}: participant {p}'s inner ranks differ")
                continue
            for row in zip(*columns, strict=True):
                got += row
        want = json.loads(json.dumps(live.global_batch(s)))
        trained += got
        base += want
        if got != want:
            report.problems.append(f"step {s}: trained {got} but its global batch is {want}")
        units = {r["units"] for r in group}
        report.units_per_step.append(units.pop() if len(units) == 1 else -1)
        read = read_spans(live.batching, [x for x in got if x is not None]).spans
        if {report.units_per_step[-1], int((read[2] - read[1]).sum())} != {live.units(s)}:
            report.problems.append(
                f"step {s}: trained {int((read[2] - read[1]).sum())} units, recorded "
                f"{report.units_per_step[-1]}, but its global batch holds {live.units(s)}"
            )
        quorum = {r["participants"] for r in group}
        report.quorum_sizes.append(quorum.pop() if len(quorum) == 1 else -1)
    sampler = live.sampler
    nominal: list[Any] = []
    e = 0
    while len(nominal) < len(base):
        for a in range(sampler.epoch_plan(e).num_steps):
            nominal += [sampler.batch_at(a, rank=r, epoch=e) for r in range(live.dp_size)]
        e += 1
    if trained != json.loads(json.dumps(nominal[: len(base)])):
        report.problems.append("the committed items are not the base order's first positions")
    by_epoch: dict[int, list[Any]] = defaultdict(list)
    for st in range(steps):
        items = [r["items"] for r in by_step.get(st, [])]
        by_epoch[live.epoch_of(st)] += [x for column in items for x in column]
    for epoch, items in by_epoch.items():
        spans = _spans(live, [x for x in items if x is not None])
        if len({tuple(s) for s in spans}) != len(spans) and live.batching.unit == "token":
            report.problems.append(f"a token was trained twice in epoch {epoch}")
    failed = {r["step"] for r in records if not r["committed"]}
    if not failed <= set(by_step):
        report.problems.append(f"failed steps {sorted(failed - set(by_step))} never committed")
    return report


Start = Callable[[int, int], "subprocess.Popen[bytes]"]


def _supervise(
    start: Start,
    die_at: int,
    replicas: int,
    workdir: Path,
    timeout: float,
    say: Callable[[str], None],
) -> bool:
    """Run the replicas to their end: restart replica 1 once when it is killed, fail on any
    other exit than 0, kill every process past ``timeout``. Whether replica 1 was restarted."""
    procs = {r: start(r, die_at if r == 1 else -1) for r in range(replicas)}
    restarted = False
    deadline = time.monotonic() + timeout
    try:
        while procs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the torchft job did not finish within {timeout} s")
            for r, proc in list(procs.items()):
                code = proc.poll()
                if code is None:
                    continue
                del procs[r]
                if r == 1 and code == -signal.SIGKILL and not restarted:
                    say(f"replica 1 killed in step {die_at}; restarting it")
                    restarted = True
                    procs[r] = start(r, -1)
                elif code != 0:
                    log = (workdir / f"replica_{r}.log").read_text(errors="replace")
                    raise RuntimeError(f"replica {r} exited with {code}:\n{log[-3000:]}")
            time.sleep(0.05)
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    return restarted


def _say_report(report: JobReport, unit: str, say: Callable[[str], None]) -> None:
    say(
        f"committed steps: {report.committed_steps}; {unit}s per step: "
        f"{report.units_per_step}; participants per step: {report.quorum_sizes}; "
        f"failed commits re-run: {report.failed_attempts}"
    )
    verdict = "exact (every committed position once, the global batch per step)"
    say("coverage: " + (verdict if report.ok else "FAILED"))
    for problem in report.problems:
        say(f"  {problem}")


def run_job(
    config: str = "megatron",
    *,
    workdir: Path,
    replicas: int = 3,
    inner: int = 1,
    steps: int = 10,
    seed: int = 0,
    workers: int = 0,
    timeout: float = 240.0,
    replica_cmd: Sequence[str] | None = None,
    say: Callable[[str], None] = print,
) -> JobReport:
    """Start torchft's lighthouse and ``replicas`` replica groups, kill replica 1 at a seeded
    random step and restart it, let replica 2 leave for good a step later, and check the records.

    Args:
        config: A name in :data:`CONFIGS`.
        workdir: Where the records go.
        replicas: Replica groups (at least 3).
        inner: Ranks per replica group (a divisor of :data:`NOMINAL_DP`).
        steps: Committed steps to run.
        seed: Chooses the step replica 1 dies at.
        workers: Loader worker processes per rank.
        timeout: Seconds for the whole job; every process is killed past it.
        replica_cmd: The command that runs one replica (``--replica`` and the rest are added);
            default: this module.

    Raises:
        ValueError: If an argument is out of range.
        RuntimeError: If a process fails or the job times out.
    """
    from torchft._torchft import LighthouseServer

    if config not in CONFIGS:
        raise ValueError(f"config must be one of {', '.join(CONFIGS)}; got config={config!r}")
    if replicas < 3:
        raise ValueError(f"replicas must be at least 3; got replicas={replicas}")
    if steps < 6:
        raise ValueError(f"steps must be at least 6; got steps={steps}")
    rng = random.Random(seed)
    die_at = rng.randrange(2, steps - 3)
    leave_at = die_at + 1
    say(
        f"torchft job: {replicas} replica groups x {inner} rank(s), sampler {config}, "
        f"{steps} steps; replica 1 is killed in step {die_at} and restarted, replica 2 leaves "
        f"at step {leave_at}"
    )
    workdir.mkdir(parents=True, exist_ok=True)
    for old in [*workdir.glob("replica_*.*"), *workdir.glob("up_*")]:
        old.unlink()
    lighthouse = LighthouseServer(
        bind="[::]:0", min_replicas=2, join_timeout_ms=2000, heartbeat_timeout_ms=3000
    )
    cmd = list(replica_cmd or [sys.executable, "-m", "dataorder.tools.demo_live"])

    def start(replica: int, die: int) -> subprocess.Popen[bytes]:
        options = {
            "replica": replica,
            "config": config,
            "lighthouse": lighthouse.address(),
            "steps": steps,
            "inner": inner,
            "workers": workers,
            "die-at": die,
            "leave-at": leave_at if replica == 2 else -1,
            "out": workdir / f"replica_{replica}",
            "replicas": replicas,
        }
        argv = [*cmd, *(x for k, v in options.items() for x in (f"--{k}", str(v)))]
        log = (workdir / f"replica_{replica}.log").open("ab")  # a pipe could fill and block it
        try:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()

    try:
        restarted = _supervise(start, die_at, replicas, workdir, timeout, say)
    finally:
        lighthouse.shutdown()
    if not restarted:
        raise RuntimeError("replica 1 was never killed: the job ended before its step")
    records = [
        json.loads(line)
        for path in sorted(workdir.glob("replica_*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    live = build_live(config)
    report = check_records(live, records, steps)
    _say_report(report, live.batching.unit, say)
    return report


def run_from_cli(args: argparse.Namespace, out: Any) -> int:
    """``dataorder demo --fault-tolerant``: the megatron configuration, with the demo's
    ``--seed`` choosing the step replica 1 dies at; 0 if the coverage check passed."""
    try:
        report = run_job(
            "megatron",
            workdir=Path(args.out) / "fault_tolerant",
            seed=args.seed,
            timeout=min(float(args.timeout) * 2.5, 600.0),
            say=out.line,
        )
    except RuntimeError as err:
        print(f"dataorder: error: {err}", file=sys.stderr)
        return EXIT_CHECKS_FAILED
    return 0 if report.ok else EXIT_CHECKS_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dataorder.tools.demo_live``: the job, or (``--replica``) one replica."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="megatron", choices=sorted(CONFIGS))
    p.add_argument("--replica", type=int, default=None)
    p.add_argument("--lighthouse", default="")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--inner", type=int, default=1)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--die-at", type=int, default=-1)
    p.add_argument("--leave-at", type=int, default=-1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/demo_live")
    p.add_argument("--replicas", type=int, default=3)
    args = p.parse_args(argv)
    if args.replica is not None:
        _replica_main(args)
        return 0
    report = run_job(
        args.config,
        workdir=Path(args.out),
        inner=args.inner,
        steps=args.steps,
        seed=args.seed,
        workers=args.workers,
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
