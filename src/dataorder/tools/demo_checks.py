"""The demo's checks, from what every process of every phase recorded it trained on.

The lock-step and replica checks are :func:`dataorder.parallel.checks.check_items`, the same code
``verify_data_parallel`` runs; the demo adds what only a whole run shows: one checkpoint for the
job, lock-step buckets, and every sample of the epoch read exactly once across the restart.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from dataorder.parallel.checks import check_items
from dataorder.tools.demo_config import SamplerResult

__all__ = ["check_sampler", "mine"]


def mine(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    """One process's record of sampler ``name``."""
    sampler: dict[str, Any] = record["samplers"][name]
    return sampler


def _phase_items(
    records: Sequence[Mapping[str, Any]], name: str
) -> tuple[list[list[Any]], list[list[list[Any]]]]:
    """``(batches of each DP rank's first replica, batches of every replica by DP rank)``."""
    by_dp: dict[int, list[list[Any]]] = {}
    for r in sorted(records, key=lambda r: (r["dp_rank"], r["replica_rank"])):
        batches = [[None if i < 0 else i for i in b] for b in mine(r, name)["batches"]]
        by_dp.setdefault(r["dp_rank"], []).append(batches)
    dp_ranks = sorted(by_dp)
    return [by_dp[d][0] for d in dp_ranks], [by_dp[d] for d in dp_ranks]


def check_sampler(
    name: str, phases: Sequence[list[dict[str, Any]]]
) -> tuple[SamplerResult, list[Any]]:
    """Check one sampler from every process's records of every phase; also return plot rows."""
    from dataorder.tools.plots import ScheduleBatch

    checks: dict[str, bool] = {}
    details: dict[str, str] = {}

    # verify_data_parallel ran in every process of every phase, each time over what the phase
    # was about to read; every process reaches the same verdict, so one line per phase says it.
    bad = {
        p: mine(r, name)["verify"]["summary"]
        for p, records in enumerate(phases)
        for r in records
        if not mine(r, name)["verify"]["ok"]
    }
    checks["dp_disjoint"] = not bad
    details["dp_disjoint"] = (
        " | ".join(f"phase {p}: {' '.join(v.split())}" for p, v in sorted(bad.items()))
        if bad
        else "; ".join(
            f"phase {p}: {mine(records[0], name)['verify']['summary']}"
            for p, records in enumerate(phases)
        )
    )

    # what was trained, checked as verify_data_parallel checks what is about to be read:
    # equal counts and sizes at every step over the DP ranks, identical TP/CP replicas
    replica_faults: list[str] = []
    lockstep_faults: list[str] = []
    for p, records in enumerate(phases):
        firsts, replicas = _phase_items(records, name)
        structure = check_items(firsts, allowed_padding=None)
        counts = sorted({len(mine(r, name)["batches"]) for r in records})
        if not structure and len(counts) > 1:  # a replica ran longer than its DP rank's first
            structure = [f"batch counts {counts} over the {len(records)} processes"]
        lockstep_faults += [f"phase {p}: {v}" for v in structure]
        replica_faults += [
            f"phase {p}: {v}" for v in check_items([], allowed_padding=None, replicas=replicas)
        ]
    checks["replicas_identical"] = not replica_faults
    details["replicas_identical"] = (
        "; ".join(replica_faults)
        if replica_faults
        else "every replica read exactly the batches of the other replicas of its DP rank"
    )
    checks["equal_batches"] = not lockstep_faults
    details["equal_batches"] = (
        "; ".join(lockstep_faults)
        if lockstep_faults
        else "same count, and same size at every step, everywhere"
    )

    # lock-step buckets: at every step every process's batch comes from one and the same bucket
    bucketed = any(b is not None for r in phases[0] for b in mine(r, name)["buckets"])
    if bucketed:
        off = []
        for p, records in enumerate(phases):
            steps = min(len(mine(r, name)["buckets"]) for r in records)
            for step in range(steps):
                seen = {mine(r, name)["buckets"][step] for r in records}
                if len(seen) > 1 or -1 in seen:
                    off.append(f"phase {p} step {step}: buckets {sorted(seen)}")
        checks["lock_step"] = not off
        details["lock_step"] = (
            f"{len(off)} steps out of lock-step, first {off[0]}"
            if off
            else "every step drew all processes from one bucket"
        )
    else:
        details["lock_step"] = "not a bucket sampler"

    # one checkpoint for the job: progress is global, so every process saved the same state
    states = {json.dumps(mine(r, name)["loader_state"], sort_keys=True) for r in phases[0]}
    checks["one_checkpoint"] = len(states) == 1
    details["one_checkpoint"] = (
        f"all {len(phases[0])} processes saved the same loader state"
        if len(states) == 1
        else f"the {len(phases[0])} processes saved {len(states)} different loader states"
    )

    # every sample exactly once over the epoch, apart from what the sampler declares
    reads: Counter[int] = Counter()
    none_slots = declared_padding = position = 0
    schedule: list[ScheduleBatch] = []
    for p, records in enumerate(phases):
        # one process per DP rank speaks for its replicas (checked identical above)
        leaders = sorted((r for r in records if r["replica_rank"] == 0), key=lambda r: r["dp_rank"])
        for step in range(min(len(mine(r, name)["batches"]) for r in leaders)):
            block = sum(len(mine(r, name)["batches"][step]) for r in leaders)
            for r in leaders:
                own = mine(r, name)
                batch = own["batches"][step]
                real = [i for i in batch if i >= 0]
                reads.update(real)
                none_slots += len(batch) - len(real)
                declared_padding += own["padding"][step]
                schedule.append(
                    ScheduleBatch(
                        sampler=name,
                        phase=p,
                        dp_rank=r["dp_rank"],
                        dp_size=r["dp_size"],
                        position=position,
                        block=block,
                        samples=tuple(i if i >= 0 else None for i in batch),
                        padding=own["padding"][step],
                        bucket=own["buckets"][step],
                    )
                )
            position += block
    last = mine(phases[-1][0], name)
    n = last["dataset_size"]
    # The end of the epoch is read by the last phase, so its layout decides what is dropped or
    # padded there. A bucket sampler pads the last global batch of every bucket, before or after
    # the restart: what it padded is what get_batch_info declared, batch by batch.
    dropped = last["dropped"]
    padded = declared_padding if bucketed else last["padded"]
    missing = n - len(reads)
    extra = sum(c - 1 for c in reads.values()) + none_slots
    lost, repeated = missing - dropped, extra - padded
    checks["exactly_once"] = lost == 0 and repeated == 0
    details["exactly_once"] = (
        f"{len(reads)} of {n} samples read; {missing} never ({dropped} declared dropped), "
        f"{extra} extra reads ({padded} declared padding)"
    )
    if "source_sizes" in last:
        checks["per_source"], details["per_source"] = _per_source(reads, last)
    first = mine(phases[0][0], name)
    losses = [x for records in phases for x in mine(records[0], name)["losses"]]
    result = SamplerResult(
        name=name,
        steps=(len(first["losses"]), len(last["losses"])),
        micro_batches=(len(first["batches"]), len(last["batches"])),
        checks=checks,
        details=details,
        dataset_size=n,
        lost=lost,
        repeated=repeated,
        dropped=dropped,
        padded=padded,
        loss=(losses[0], losses[-1]) if losses else (math.nan, math.nan),
        notes=list(first.get("notes", [])),
    )
    return result, schedule


def _per_source(reads: Counter[int], last: Mapping[str, Any]) -> tuple[bool, str]:
    """A mixture's reads per source against its own accounting (``consumed_per_source`` after
    the run), and no source sample read twice before every sample of its source was read."""
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
    ok = got == expected and max(spread) <= 1
    return ok, (
        f"reads per source {got}, consumed_per_source says {expected} after "
        f"{last['consumed_samples']} samples; reads of one source differ by at most "
        f"{max(spread)} between its samples"
    )
