"""The demo's checks, from what every process of every phase recorded it trained on.

The lock-step and replica checks are :func:`dataorder.parallel.checks.check_items`, the same code
``verify_data_parallel`` runs; the demo adds what only a whole run shows: one checkpoint for the
job, lock-step buckets, and every sample of the epoch read exactly once across the restart.

Every check is one entry of :data:`DEMO_CHECKS` (its column title, its verdict, what a process
records for it); every sampler gets the checks that are not ``extra``, and an entry of the
samplers' registry (:data:`~dataorder.tools.demo_samplers.DEMO_SAMPLERS`) names the
:data:`EXTRA_CHECKS` it needs too.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

from dataorder.parallel.checks import check_items
from dataorder.tools.demo_config import SamplerResult
from dataorder.tools.plots import ScheduleBatch

__all__ = [
    "CHECKS",
    "DEMO_CHECKS",
    "EXTRA_CHECKS",
    "Check",
    "SamplerRun",
    "Verdict",
    "check_sampler",
    "mine",
]

#: A check's verdict: passed, and one line saying what was found.
Verdict = tuple[bool, str]


def mine(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    """One process's record of sampler ``name``."""
    sampler: dict[str, Any] = record["samplers"][name]
    return sampler


class SamplerRun:
    """One sampler's records over every phase, and what the job read over the epoch, one
    process per DP rank speaking for its replicas: what every check reads.

    Attributes:
        name: The sampler.
        phases: Every process's record, phase by phase.
        last: The first process's record of the last phase (which reads the epoch's end).
        reads: How often each sample was read.
        none_slots: Padding slots (``None``, recorded as index -1) read.
        schedule: Every DP rank's batches, for the plot.
    """

    def __init__(
        self, name: str, phases: Sequence[list[dict[str, Any]]], declared_padding: bool
    ) -> None:
        self.name, self.phases, self._declared = name, phases, declared_padding
        self.last = mine(phases[-1][0], name)
        self.reads: Counter[int] = Counter()
        self.none_slots = self._declared_sum = 0
        self.schedule: list[ScheduleBatch] = []
        position = 0
        for p, records in enumerate(phases):
            leaders = sorted(
                (r for r in records if r["replica_rank"] == 0), key=lambda r: r["dp_rank"]
            )
            for step in range(min(len(self.of(r)["batches"]) for r in leaders)):
                block = sum(len(self.of(r)["batches"][step]) for r in leaders)
                for r in leaders:
                    self._read(p, r, step, position, block)
                position += block

    def _read(self, phase: int, record: Mapping[str, Any], step: int, at: int, block: int) -> None:
        own = self.of(record)
        batch = own["batches"][step]
        real = [i for i in batch if i >= 0]
        self.reads.update(real)
        self.none_slots += len(batch) - len(real)
        self._declared_sum += own["padding"][step]
        self.schedule.append(
            ScheduleBatch(
                sampler=self.name,
                phase=phase,
                dp_rank=record["dp_rank"],
                dp_size=record["dp_size"],
                position=at,
                block=block,
                samples=tuple(i if i >= 0 else None for i in batch),
                padding=own["padding"][step],
                bucket=own["buckets"][step],
            )
        )

    def of(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """``record``'s part for this sampler."""
        return mine(record, self.name)

    @cached_property
    def trained_faults(self) -> tuple[list[str], list[str]]:
        """:func:`_what_was_trained`, which two checks report."""
        return _what_was_trained(self)

    @property
    def missing(self) -> int:
        """Samples of the dataset never read."""
        return int(self.last["dataset_size"]) - len(self.reads)

    @property
    def extra(self) -> int:
        """Reads beyond one per sample, padding slots included."""
        return sum(c - 1 for c in self.reads.values()) + self.none_slots

    @property
    def dropped(self) -> int:
        """What the sampler declares dropped: the last phase reads the end of the epoch, so its
        layout decides it."""
        return int(self.last["dropped"])

    @property
    def padded(self) -> int:
        """What the sampler declares padded. A bucket sampler pads the last global batch of
        every bucket, before or after the restart: what it padded is what it declared, batch
        by batch (``DemoSampler.padding``); others pad at the epoch's end."""
        return self._declared_sum if self._declared else int(self.last["padded"])


# -- the checks every sampler gets ----------------------------------------------------------------
def _dp_disjoint(run: SamplerRun) -> Verdict:
    # verify_data_parallel ran in every process of every phase, each time over what the phase
    # was about to read; every process reaches the same verdict, so one line per phase says it.
    bad = {
        p: run.of(r)["verify"]["summary"]
        for p, records in enumerate(run.phases)
        for r in records
        if not run.of(r)["verify"]["ok"]
    }
    if bad:
        return False, " | ".join(
            f"phase {p}: {' '.join(v.split())}" for p, v in sorted(bad.items())
        )
    return True, "; ".join(
        f"phase {p}: {run.of(records[0])['verify']['summary']}"
        for p, records in enumerate(run.phases)
    )


def _phase_items(run: SamplerRun, records: Sequence[Mapping[str, Any]]) -> tuple[Any, Any]:
    """``(batches of each DP rank's first replica, batches of every replica by DP rank)``."""
    by_dp: dict[int, list[list[Any]]] = {}
    for r in sorted(records, key=lambda r: (r["dp_rank"], r["replica_rank"])):
        batches = [[None if i < 0 else i for i in b] for b in run.of(r)["batches"]]
        by_dp.setdefault(r["dp_rank"], []).append(batches)
    dp_ranks = sorted(by_dp)
    return [by_dp[d][0] for d in dp_ranks], [by_dp[d] for d in dp_ranks]


def _what_was_trained(run: SamplerRun) -> tuple[list[str], list[str]]:
    """Faults of what was trained, checked as verify_data_parallel checks what is about to be
    read: ``(replicas that differ, DP ranks out of step in counts or sizes)``."""
    replica_faults: list[str] = []
    lockstep_faults: list[str] = []
    for p, records in enumerate(run.phases):
        firsts, replicas = _phase_items(run, records)
        structure = check_items(firsts, allowed_padding=None)
        counts = sorted({len(run.of(r)["batches"]) for r in records})
        if not structure and len(counts) > 1:  # a replica ran longer than its DP rank's first
            structure = [f"batch counts {counts} over the {len(records)} processes"]
        lockstep_faults += [f"phase {p}: {v}" for v in structure]
        replica_faults += [
            f"phase {p}: {v}" for v in check_items([], allowed_padding=None, replicas=replicas)
        ]
    return replica_faults, lockstep_faults


def _replicas_identical(run: SamplerRun) -> Verdict:
    faults, _ = run.trained_faults
    if faults:
        return False, "; ".join(faults)
    return True, "every replica read exactly the batches of the other replicas of its DP rank"


def _equal_batches(run: SamplerRun) -> Verdict:
    _, faults = run.trained_faults
    if faults:
        return False, "; ".join(faults)
    return True, "same count, and same size at every step, everywhere"


def _one_checkpoint(run: SamplerRun) -> Verdict:
    # progress is global, so every process saved the same state
    first = run.phases[0]
    states = {json.dumps(run.of(r)["loader_state"], sort_keys=True) for r in first}
    if len(states) == 1:
        return True, f"all {len(first)} processes saved the same loader state"
    return False, f"the {len(first)} processes saved {len(states)} different loader states"


def _exactly_once(run: SamplerRun) -> Verdict:
    # every sample exactly once over the epoch, apart from what the sampler declares
    n, read = run.last["dataset_size"], len(run.reads)
    return run.missing == run.dropped and run.extra == run.padded, (
        f"{read} of {n} samples read; {run.missing} never ({run.dropped} declared dropped), "
        f"{run.extra} extra reads ({run.padded} declared padding)"
    )


# -- the checks an entry asks for -----------------------------------------------------------------
def _lock_step(run: SamplerRun) -> Verdict:
    # at every step every process's batch comes from one and the same bucket
    off = []
    for p, records in enumerate(run.phases):
        steps = min(len(run.of(r)["buckets"]) for r in records)
        for step in range(steps):
            seen = {run.of(r)["buckets"][step] for r in records}
            # -1: a batch of several buckets; None: a batch that says no bucket
            one = len(seen) == 1 and all(isinstance(b, int) and b >= 0 for b in seen)
            if not one:
                shown = sorted(seen, key=lambda b: -2 if b is None else b)
                off.append(f"phase {p} step {step}: buckets {shown}")
    if off:
        return False, f"{len(off)} steps out of lock-step, first {off[0]}"
    return True, "every step drew all processes from one bucket"


def _source_record(sampler: Any) -> dict[str, Any]:
    return {
        "source_sizes": list(sampler.sizes),
        "consumed_per_source": sampler.consumed_per_source().tolist(),
        "consumed_samples": sampler.consumed_samples,
    }


def _per_source(run: SamplerRun) -> Verdict:
    """A mixture's reads per source against its own accounting (``consumed_per_source`` after
    the run), and no source sample read twice before every sample of its source was read."""
    last, reads = run.last, run.reads
    sizes = [int(x) for x in last["source_sizes"]]
    expected = [int(x) for x in last["consumed_per_source"]]
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + size)
    got, spread = [], []
    for k, size in enumerate(sizes):
        counts = [reads.get(i, 0) for i in range(starts[k], starts[k] + size)]
        got.append(sum(counts))
        spread.append(max(counts) - min(counts))
    return got == expected and max(spread) <= 1, (
        f"reads per source {got}, consumed_per_source says {expected} after "
        f"{last['consumed_samples']} samples; reads of one source differ by at most "
        f"{max(spread)} between its samples"
    )


# -- the registry of checks ----------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One check of the demo, one column of its report.

    Attributes:
        title: The column's title.
        check: Its verdict from the records.
        extra: Whether only the samplers whose entry names it (``DemoSampler.checks``) get it;
            else every sampler does.
        record: ``record(sampler)``: what each process records for it at the end of a phase,
            beyond the batches; None if the batches say enough.
        absent: The detail of a sampler that does not get it (None: no detail).
    """

    title: str
    check: Callable[[SamplerRun], Verdict]
    extra: bool = False
    record: Callable[[Any], dict[str, Any]] | None = None
    absent: str | None = None


#: Every check, by name, in report order.
DEMO_CHECKS: Mapping[str, Check] = MappingProxyType(
    {
        "dp_disjoint": Check("DP disjoint", _dp_disjoint),
        "replicas_identical": Check("TP/CP same", _replicas_identical),
        "equal_batches": Check("equal batches", _equal_batches),
        # a bucket sampler: every batch of a step from one bucket, so shapes match
        "lock_step": Check("lock-step", _lock_step, extra=True, absent="not a bucket sampler"),
        "one_checkpoint": Check("one ckpt", _one_checkpoint),
        "exactly_once": Check("each once", _exactly_once),
        # a mixture: each source read as often as the sampler's own accounting says
        "per_source": Check("per source", _per_source, extra=True, record=_source_record),
    }
)
#: Check name -> the column title the report shows, in report order.
CHECKS: Mapping[str, str] = MappingProxyType({k: c.title for k, c in DEMO_CHECKS.items()})
#: The checks an entry of the registry may ask for (``DemoSampler.checks``).
EXTRA_CHECKS: tuple[str, ...] = tuple(k for k, c in DEMO_CHECKS.items() if c.extra)


# -- one sampler ----------------------------------------------------------------------------------
def check_sampler(
    name: str,
    phases: Sequence[list[dict[str, Any]]],
    *,
    extra: Collection[str] = (),
    declared_padding: bool = False,
) -> tuple[SamplerResult, list[ScheduleBatch]]:
    """Check one sampler from every process's records of every phase; also return plot rows.

    Args:
        name: The sampler's name in the records.
        phases: Every process's record, phase by phase.
        extra: The :data:`EXTRA_CHECKS` to run too (its entry's ``checks``); the others of
            :data:`DEMO_CHECKS` run for every sampler.
        declared_padding: Whether the records' per-batch padding is the sampler's whole padding
            (its entry declares ``padding``), else its ``padded`` counter at the end says it.

    Raises:
        ValueError: If ``extra`` names a check that is not in :data:`EXTRA_CHECKS`.
    """
    unknown = sorted(set(extra) - set(EXTRA_CHECKS))
    if unknown:
        raise ValueError(f"extra must name checks among {', '.join(EXTRA_CHECKS)}; got {unknown}")
    run = SamplerRun(name, phases, declared_padding)
    checks: dict[str, bool] = {}
    details: dict[str, str] = {}
    for key, spec in DEMO_CHECKS.items():
        if not spec.extra or key in extra:
            checks[key], details[key] = spec.check(run)
        elif spec.absent is not None:
            details[key] = spec.absent
    return _result(run, checks, details), run.schedule


def _result(run: SamplerRun, checks: dict[str, bool], details: dict[str, str]) -> SamplerResult:
    first = run.of(run.phases[0][0])
    losses = [x for records in run.phases for x in run.of(records[0])["losses"]]
    return SamplerResult(
        name=run.name,
        steps=(len(first["losses"]), len(run.last["losses"])),
        micro_batches=(len(first["batches"]), len(run.last["batches"])),
        checks=checks,
        details=details,
        dataset_size=run.last["dataset_size"],
        lost=run.missing - run.dropped,
        repeated=run.extra - run.padded,
        dropped=run.dropped,
        padded=run.padded,
        loss=(losses[0], losses[-1]) if losses else (math.nan, math.nan),
        notes=list(first.get("notes", [])),
    )
