"""The demo's checks, from what every process of every phase recorded it trained on.

The lock-step and replica checks are :func:`dataorder.parallel.checks.check_items`, the same code
``verify_data_parallel`` runs; the demo adds what only a whole run shows: one checkpoint for the
job (the same state from every process, loaded exactly by the next phase), lock-step buckets,
every unit of the epoch read exactly once across the restart (a sample, or a token of a document
for packed rows), and packed rows dealt to ranks by cost.

A process records each micro-batch it trained on as the item its sampler yielded; every check
reads those items through the entry's batching rule (:class:`~dataorder.tools.demo_samplers.
Reading`, NOTE [ Coverage ] in :mod:`dataorder.core.batching`), never through int assumptions.

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

import numpy as np

from dataorder.core.batching import BATCHES, BatchRule, Coverage, coverage
from dataorder.core.dealing import deal_bounds
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


def leaders(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The first replica of every DP rank, by DP rank: who speaks for the DP rank."""
    return sorted((r for r in records if r["replica_rank"] == 0), key=lambda r: r["dp_rank"])


class SamplerRun:
    """One sampler's records over every phase, and what the job read over the epoch, one
    process per DP rank speaking for its replicas: what every check reads.

    Attributes:
        name: The sampler.
        phases: Every process's record, phase by phase.
        rule: How a recorded item is read (the entry's ``Reading.batching``).
        last: The first process's record of the last phase (which reads the epoch's end).
        padding_units: Padding units read (``None`` slots, the empty tokens of rows).
        schedule: Every DP rank's batches, for the plot.
    """

    def __init__(
        self,
        name: str,
        phases: Sequence[list[dict[str, Any]]],
        declared_padding: bool,
        rule: BatchRule = BATCHES,
    ) -> None:
        self.name, self.phases, self._declared, self.rule = name, phases, declared_padding, rule
        self.last = mine(phases[-1][0], name)
        # a mixture over a log with corpus changes reads flat indices source * 2**40 + document:
        # the plot shows them as rows of the sources laid end to end
        firsts, sizes = self.last.get("source_firsts"), self.last.get("source_sizes")
        self._offsets = None
        if firsts is not None and sizes is not None and any(firsts[1:]):
            self._offsets = [sum(sizes[:d]) for d in range(len(sizes))]
        self._spans: list[tuple[Any, Any, Any]] = []
        self.padding_units = self._declared_sum = 0
        self.schedule: list[ScheduleBatch] = []
        position = 0
        for p, records in enumerate(phases):
            first = leaders(records)
            for step in range(min(len(self.of(r)["batches"]) for r in first)):
                block = sum(len(rule.slots(self.of(r)["batches"][step])) for r in first)
                for r in first:
                    self._read(p, r, step, position, block)
                position += block

    def _read(self, phase: int, record: Mapping[str, Any], step: int, at: int, block: int) -> None:
        own = self.of(record)
        slots = self.rule.slots(own["batches"][step])
        spans = self.rule.spans(slots)
        self._spans.append(spans)
        self.padding_units += self.rule.padding(slots)
        self._declared_sum += own["padding"][step]
        # the plot shows the samples, or the documents of the rows' spans
        shown = tuple(slots) if self.rule.unit == "sample" else tuple(spans[0].tolist())
        if self._offsets is not None:
            offsets = self._offsets
            shown = tuple(
                None if i is None else offsets[i >> 40] + (i & (2**40 - 1)) for i in shown
            )
        self.schedule.append(
            ScheduleBatch(
                sampler=self.name,
                phase=phase,
                dp_rank=record["dp_rank"],
                dp_size=record["dp_size"],
                position=at,
                block=block,
                samples=shown,
                padding=own["padding"][step],
                bucket=own["buckets"][step],
                unit=self.rule.unit,
            )
        )

    def of(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """``record``'s part for this sampler."""
        return mine(record, self.name)

    @cached_property
    def covered(self) -> Coverage:
        """What the job read over the epoch, in the rule's units (NOTE [ Coverage ])."""
        if not self._spans:
            return Coverage(0, 0)
        keys, starts, stops = (np.concatenate(part) for part in zip(*self._spans, strict=True))
        return coverage((keys, starts, stops))

    @cached_property
    def reads(self) -> Counter[int]:
        """How often each key was read (each sample, for a rule of samples)."""
        return Counter(k for keys, _, _ in self._spans for k in keys.tolist())

    @cached_property
    def trained_faults(self) -> tuple[list[str], list[str]]:
        """:func:`_what_was_trained`, which two checks report."""
        return _what_was_trained(self)

    @property
    def universe(self) -> int:
        """Units of the dataset: its samples, or every token of every document."""
        return int(self.last["universe"])

    @property
    def missing(self) -> int:
        """Units of the dataset never read."""
        return self.universe - self.covered.distinct

    @property
    def extra(self) -> int:
        """Reads beyond one per unit, padding units included."""
        return self.covered.repeated + self.padding_units

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
        by_dp.setdefault(r["dp_rank"], []).append(run.of(r)["batches"])
    dp_ranks = sorted(by_dp)
    return [by_dp[d][0] for d in dp_ranks], [by_dp[d] for d in dp_ranks]


def _what_was_trained(run: SamplerRun) -> tuple[list[str], list[str]]:
    """Faults of what was trained, checked as verify_data_parallel checks what is about to be
    read: ``(replicas that differ, DP ranks out of step in counts or sizes)``."""
    replica_faults: list[str] = []
    lockstep_faults: list[str] = []
    for p, records in enumerate(run.phases):
        firsts, replicas = _phase_items(run, records)
        structure = check_items(firsts, allowed_padding=None, batching=run.rule)
        counts = sorted({len(run.of(r)["batches"]) for r in records})
        if not structure and len(counts) > 1:  # a replica ran longer than its DP rank's first
            structure = [f"batch counts {counts} over the {len(records)} processes"]
        lockstep_faults += [f"phase {p}: {v}" for v in structure]
        replica_faults += [
            f"phase {p}: {v}"
            for v in check_items([], allowed_padding=None, replicas=replicas, batching=run.rule)
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
    """One checkpoint for the job: every process gave DCP the same data-order state and the same
    model and optimizer (DCP keeps one copy of each), and every process of the next phase loaded
    exactly that model and optimizer."""
    first = run.phases[0]
    saved = [run.of(r)["checkpoint"] for r in first]
    orders = {json.dumps(c["order"], sort_keys=True) for c in saved}
    models = {c["model"] for c in saved}
    faults = []
    if len(orders) > 1:
        faults.append(f"the {len(first)} processes saved {len(orders)} different order states")
    if len(models) > 1:
        faults.append(
            f"the {len(first)} processes held {len(models)} different models and optimizers "
            "(replicas diverged; DCP keeps one copy of each tensor)"
        )
    for p, records in enumerate(run.phases[1:], start=1):
        loaded = [run.of(r).get("restored") for r in records]
        if None in loaded:
            faults.append(f"phase {p}: {loaded.count(None)} processes did not load the checkpoint")
        elif len(models) == 1 and set(loaded) != models:
            faults.append(f"phase {p}: the model and optimizer loaded differ from those saved")
    if faults:
        return False, "; ".join(faults)
    return True, (
        f"all {len(first)} processes saved the same order state, model and optimizer (one DCP "
        "checkpoint); the next phase loaded exactly them"
    )


def _exactly_once(run: SamplerRun) -> Verdict:
    # every unit exactly once over the epoch, apart from what the sampler declares
    unit = run.rule.unit
    return run.missing == run.dropped and run.extra == run.padded, (
        f"{run.covered.distinct} of {run.universe} {unit}s read; {run.missing} never "
        f"({run.dropped} declared dropped), {run.extra} extra reads or padding {unit}s "
        f"({run.padded} declared padding)"
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
    """A mixture's accounting after the run, and its global batches from the start (asked of
    the order, ``batch_at`` on every rank): what an uninterrupted run reads."""
    log: Any = getattr(sampler.schedule, "log", None)
    changed = log is not None and log.current_sizes is not None
    sizes = list(log.current_sizes if changed else sampler.sizes)  # after every corpus change
    # a log with corpus changes indexes source * 2**40 + document (SOURCE_STRIDE), else the
    # sources follow each other (ConcatDataset)
    firsts = [d << 40 if changed else sum(sizes[:d]) for d in range(len(sizes))]
    state = sampler.state_dict()
    gbs, dp = state["config.global_batch_size"], sampler.data_parallel_size
    per_step = gbs // (sampler.micro_batch_size * dp)
    order = [
        sorted(
            i
            for m in range(k * per_step, (k + 1) * per_step)
            for r in range(dp)
            for i in sampler.batch_at(m, rank=r)
        )
        for k in range(sampler.consumed_samples // gbs)
        if sampler.data_parallel_rank == 0  # DP rank 0 of the last phase speaks (SamplerRun.last)
    ]
    return {
        "source_sizes": sizes,
        "source_firsts": firsts,
        "consumed_per_source": sampler.consumed_per_source().tolist(),
        "consumed_samples": sampler.consumed_samples,
        "global_batches": order,
    }


def _global_batches(run: SamplerRun, size: int) -> list[list[Any]]:
    """What the job trained on, global batch by global batch (each sorted), over both phases:
    the DP ranks' micro-batches step by step, ``size`` samples a global batch."""
    reads: list[Any] = []
    for records in run.phases:
        first = leaders(records)
        for step in range(min(len(run.of(r)["batches"]) for r in first)):
            for r in first:
                reads += run.rule.slots(run.of(r)["batches"][step])
    return [sorted(reads[i : i + size]) for i in range(0, len(reads) - size + 1, size)]


def _per_source(run: SamplerRun) -> Verdict:
    """A mixture's reads per source against its own accounting (``consumed_per_source`` after
    the run); no source sample read twice before every sample of its source was read (within
    a pass, which a growth extends: NOTE [ Corpus changes ]); and every global batch, before
    and after the restart, the one the order gives from the start (an uninterrupted run)."""
    last, reads = run.last, run.reads
    sizes = [int(x) for x in last["source_sizes"]]
    expected = [int(x) for x in last["consumed_per_source"]]
    starts = [int(x) for x in last["source_firsts"]]
    got, spread = [], []
    for k, size in enumerate(sizes):
        counts = [reads.get(i, 0) for i in range(starts[k], starts[k] + size)]
        got.append(sum(counts))
        spread.append(max(counts) - min(counts))
    # the order's global batches from the start, as DP rank 0 of the last phase asked them
    order = run.of(leaders(run.phases[-1])[0]).get("global_batches", [])
    trained = _global_batches(run, len(order[0])) if order else []
    same = bool(order) and trained == order
    return got == expected and max(spread) <= 1 and same, (
        f"reads per source {got}, consumed_per_source says {expected} after "
        f"{last['consumed_samples']} samples; reads of one source differ by at most "
        f"{max(spread)} between its samples; the {len(trained)} global batches trained "
        f"{'are' if same else 'are NOT'} the uninterrupted order's"
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _row_cost(rule: BatchRule, row: Any) -> int:
    """A packed row's attention cost: the sum of its spans' lengths squared."""
    _keys, starts, stops = rule.spans([row])
    return sum((b - a) ** 2 for a, b in zip(starts.tolist(), stops.tolist(), strict=True))


def _costs_dealt(run: SamplerRun) -> Verdict:
    """Packed rows dealt to ranks by attention cost (NOTE [ Dealing rows ] in
    :mod:`dataorder.llm.packing.sampler`), step by step, from the rows each DP rank trained on.

    A step waits for its costliest rank. No dealing of whole rows does better than
    ``max(mean rank cost, costliest row)`` (:func:`~dataorder.core.dealing.deal_bounds`):
    the figure reported is the costliest rank over that bound. The check fails a step whose
    costliest rank exceeds ``mean + costliest row``: a dealing where no swap of two rows helps
    the costliest rank meets it (beyond it, a rank below the mean would hold only rows costlier
    than the costliest rank's, hence more load: a contradiction), a dealing by position need not.
    """
    parts, faults = [], []
    for p, records in enumerate(run.phases):
        first = leaders(records)
        ranks = len(first)
        ratios = []
        for step in range(min(len(run.of(r)["batches"]) for r in first)):
            rows = [run.rule.slots(run.of(r)["batches"][step]) for r in first]
            if len({len(x) for x in rows}) > 1:  # out of lock-step: "equal batches" says so
                continue
            costs = [[_row_cost(run.rule, row) for row in x] for x in rows]
            loads = [sum(c) for c in costs]
            flat = [c for x in costs for c in x]
            total, top_row = sum(flat), max(flat, default=0)
            if not total:
                continue
            bound, _capacity = deal_bounds(flat, len(rows[0]), ranks)
            ratios.append(max(loads) / bound)
            if ranks * max(loads) > total + ranks * top_row:  # exact: ints
                faults.append(
                    f"phase {p} step {step}: costliest rank {max(loads)} > mean "
                    f"{total / ranks:.1f} + costliest row {top_row} (rank costs {loads})"
                )
        if ratios:
            per_rank = len(run.rule.slots(run.of(first[0])["batches"][0]))
            parts.append(
                f"phase {p} ({_count(ranks, 'rank')} x {_count(per_rank, 'row')}): worst "
                f"{max(ratios):.3f}, mean {sum(ratios) / len(ratios):.3f}"
            )
    what = "costliest rank / max(mean, costliest row) per step: " + "; ".join(parts)
    if faults:
        more = f" and {len(faults) - 2} more" if len(faults) > 2 else ""
        return False, "; ".join(faults[:2]) + more + f" ({what})"
    return True, what


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
        # packed rows: each step's rows dealt to ranks by attention cost
        "costs_dealt": Check("costs dealt", _costs_dealt, extra=True, absent="not packed rows"),
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
    batching: BatchRule = BATCHES,
) -> tuple[SamplerResult, list[ScheduleBatch]]:
    """Check one sampler from every process's records of every phase; also return plot rows.

    Args:
        name: The sampler's name in the records.
        phases: Every process's record, phase by phase.
        extra: The :data:`EXTRA_CHECKS` to run too (its entry's ``checks``); the others of
            :data:`DEMO_CHECKS` run for every sampler.
        declared_padding: Whether the records' per-batch padding is the sampler's whole padding
            (its entry declares ``padding``), else its ``padded`` counter at the end says it.
        batching: How a recorded item is read (its entry's ``Reading.batching``); default:
            batches of sample indices, ``None`` for a padding slot.

    Raises:
        ValueError: If ``extra`` names a check that is not in :data:`EXTRA_CHECKS`.
    """
    unknown = sorted(set(extra) - set(EXTRA_CHECKS))
    if unknown:
        raise ValueError(f"extra must name checks among {', '.join(EXTRA_CHECKS)}; got {unknown}")
    run = SamplerRun(name, phases, declared_padding, batching)
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
        dataset_size=run.universe,
        unit=run.rule.unit,
        lost=run.missing - run.dropped,
        repeated=run.extra - run.padded,
        dropped=run.dropped,
        padded=run.padded,
        loss=(losses[0], losses[-1]) if losses else (math.nan, math.nan),
        notes=list(first.get("notes", [])),
    )
