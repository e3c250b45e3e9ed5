"""Live elasticity under a simulated torchft: nothing lost or repeated, whoever fails.

A small deterministic model of torchft's protocol drives :class:`dataorder.live.LiveBatches`:

* each step's quorum is the replica groups up at the *end of the previous step* (the quorum is
  known one step late): a group that fails during a step is still in its quorum, and the
  step's commit fails, so the same step runs again under the next quorum; a group that comes
  back joins the quorum of the next step;
* a group that comes back heals: it copies ``step`` and ``batches_committed`` from a peer (its
  own counters are gone), so it serves the same step as everyone;
* each group goes down or comes back with probability ``--flip`` (1 %) per step; while no group
  is up nothing is trained.

Three tables:

1. **Exactness**: at 2, 3, 8, 64 and 1,024 replica groups, ``--steps`` committed steps (10^5)
   on a Megatron sampler: every committed step's shares, all participants together, are the
   step's rows exactly once, so the committed units are exactly ``committed x G``; and for
   every sampler family (Megatron single/random and compat, DistributedSampler, blend,
   buckets, packed rows in tokens, packed mixture) at 2, 3 and 8 groups over ``--item-steps``
   steps, the items themselves, concatenated, equal the base order (lost, repeated: 0). A hot
   spare that takes rank ``r``'s place serves rank ``r``'s items.
2. **Re-plan and state**: the time to re-plan after a quorum change (the share of one
   participant, and its item positions) and to the first micro-batch, at a global batch of
   16,384 over 10^9 samples; the bytes of state.
3. **torchft's own DistributedSampler on the same failure trace**: it shards over the maximum
   number of groups, a down group's shard is not read, a failed commit's batches are lost, a
   restarted group re-reads its shard from the start: samples never read, read twice, and the
   global batch per step, beside ours.

    python benchmarks/bench_live.py            # the figures of BENCHMARKS.md
    python benchmarks/bench_live.py --smoke    # small sizes, a few seconds (CI)

Nothing here asserts a timing; an exactness failure exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dataorder.core.batching import read_spans
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.live import LiveBatches
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.llm.packing import PackedSampler
from dataorder.parallel.distributed import DistributedSampler


def trace(groups: int, steps: int, flip: float, seed: int) -> list[tuple[int, bool, Any]]:
    """The failure trace of ``steps`` protocol steps (step attempts): per attempt ``(step,
    committed, participants' group ids)`` (the protocol of the module docstring). At 1 % per
    group and step, 1,024 groups see a failure in almost every step: few attempts commit."""
    rng = np.random.default_rng(seed)
    up = np.ones(groups, dtype=bool)
    out: list[tuple[int, bool, Any]] = []
    step = 0
    for _ in range(steps):
        quorum = np.flatnonzero(up).astype(np.int16)  # known from the end of the last attempt
        flips = rng.random(groups) < flip
        up ^= flips
        if not quorum.size:
            continue
        failed = bool((flips[quorum]).any())  # a member went down during the step
        out.append((step, not failed, quorum))
        step += not failed
    return out


def check_shares(live: LiveBatches[Any], events: list[tuple[int, bool, list[int]]]) -> int:
    """Rows trained other than once in committed steps (0 if exact): every participant's share
    of each committed step, all together, must be the step's rows ``[0, rows)`` exactly once."""
    bad = 0
    rows = live.micro_steps * live.dp_size  # rows of inner size 1: the step's micro-batches
    for step, committed, quorum in events:
        if not committed:
            continue
        participants = len(quorum)
        covered = np.zeros(rows, dtype=np.int64)
        for p in range(participants):
            s = live.share(step, p, participants)
            covered[s.start : s.stop] += 1
        bad += int(np.abs(covered - 1).sum())
    return bad


def check_items(
    live: LiveBatches[Any], spare: LiveBatches[Any], events: list[tuple[int, bool, list[int]]]
) -> dict[str, int]:
    """The items trained in committed steps against the base order; a hot spare's items."""
    trained: list[Any] = []
    spare_mismatch = 0
    for step, committed, quorum in events:
        participants = len(quorum)
        got = [live.items(step, p, participants) for p in range(participants)]
        if participants > 1:  # a hot spare (its own process) takes the last rank's place
            spare_mismatch += got[-1] != spare.items(step, participants - 1, participants)
        if committed:
            trained += [x for share in got for x in share]
    s = live.sampler
    base: list[Any] = []
    e = 0
    while len(base) < len(trained):
        for a in range(s.epoch_plan(e).num_steps):
            base += [s.batch_at(a, rank=r, epoch=e) for r in range(live.dp_size)]
        e += 1
    base = base[: len(trained)]
    rule = live.batching
    units_trained = read_spans(rule, trained).spans
    units_base = read_spans(rule, base).spans
    n_t = int((units_trained[2] - units_trained[1]).sum())
    n_b = int((units_base[2] - units_base[1]).sum())
    return {
        "steps": sum(c for _, c, _ in events),
        "lost": max(0, n_b - n_t) if trained != base else 0,
        "repeated": max(0, n_t - n_b) if trained != base else 0,
        "mismatch": int(trained != base),
        "spare": spare_mismatch,
    }


def _bucket(dp: int) -> Any:
    ids = np.random.default_rng(5).integers(0, 3, 400)
    ds = BaseMultiresolutionDataset.from_bucket_ids(ids, [(256, 256), (320, 192), (192, 320)])
    return SequentialBucketSampler(ds, base_batch_size=2, seed=6, num_replicas=dp, rank=0)


LENGTHS = [int(x) for x in np.random.default_rng(1).integers(1, 90, 300)]

#: family -> (make(dp), LiveBatches keywords)
FAMILIES: dict[str, tuple[Callable[[int], Any], dict[str, Any]]] = {
    "megatron-single": (lambda dp: MegatronPretrainingSampler(400, 2, 0, dp), {}),
    "megatron-random": (
        lambda dp: MegatronPretrainingRandomSampler(
            400, 2, 0, dp, seed=1, global_batch_size=4 * dp
        ),
        {},
    ),
    "megatron-compat-nemo": (
        lambda dp: MegatronPretrainingRandomSampler(400, 1, 0, dp, seed=2, compat="nemo"),
        {},
    ),
    "distributed": (
        lambda dp: DistributedSampler(range(400), num_replicas=dp, rank=0, seed=3),
        {"micro_steps": 4},
    ),
    "blend": (lambda dp: BlendedSampler([250, 150], [0.6, 0.4], 1, 0, dp, 2 * dp, seed=4), {}),
    "buckets": (_bucket, {}),
    "packed (tokens)": (
        lambda dp: PackedSampler(LENGTHS, 64, 1, 0, dp, 2 * dp, seed=7, chunk=16, window=64),
        {},
    ),
    "packed mixture": (
        lambda dp: PackedSampler(
            None,
            64,
            1,
            0,
            dp,
            2 * dp,
            seed=8,
            mixture=([LENGTHS[:150], LENGTHS[150:]], [2, 1]),
            total_rows=60,
            chunk=16,
            window=64,
        ),
        {},
    ),
}


def torchft_sampler(
    groups: int, batch: int, events: list[tuple[int, bool, list[int]]], n: int
) -> dict[str, Any]:
    """torchft.data.DistributedSampler on the trace: group g reads its shard (positions g, g +
    G, ... of ``n``) sequentially; every attempt consumes a batch from each participant; a
    failed attempt's batches are lost; a group that comes back starts its shard again (no
    dataloader checkpoint)."""
    shard = n // groups
    pos = np.zeros(groups, dtype=np.int64)
    seen = np.zeros(n, dtype=np.uint16)
    prev = np.ones(groups, dtype=bool)
    sizes = []
    offsets = np.arange(batch, dtype=np.int64)
    for _, committed, quorum in events:
        q = np.asarray(quorum, dtype=np.int64)
        now = np.zeros(groups, dtype=bool)
        now[q] = True
        pos[now & ~prev] = 0  # restarted: re-reads its shard from the start
        prev = now
        if committed:
            ids = q[:, None] + groups * ((pos[q][:, None] + offsets) % shard)
            np.add.at(seen, ids.reshape(-1), 1)
            sizes.append(len(quorum) * batch)
        pos[q] += batch
    return {
        "never": int((seen == 0).sum()),
        "twice": int(np.clip(seen.astype(np.int64) - 1, 0, None).sum()),
        "min": min(sizes),
        "max": max(sizes),
    }


def replan(total: int, gbs: int, groups: int, repeat: int) -> dict[str, float]:
    sampler = MegatronPretrainingRandomSampler(total, 1, 0, 1024, seed=0, global_batch_size=gbs)
    live = LiveBatches(sampler)
    step = 123_456
    live.items(step, 0, groups)  # build the epoch's plan once (it is the same on every step)
    t0 = time.perf_counter()
    for k in range(repeat):
        live.share(step, k % (groups - 1), groups - 1 + k % 2)
    share_s = (time.perf_counter() - t0) / repeat
    t0 = time.perf_counter()
    for k in range(repeat):
        live.positions(step, k % (groups - 1), groups - 1 + k % 2)
    pos_s = (time.perf_counter() - t0) / repeat
    t0 = time.perf_counter()
    pos = live.positions(step, 3, groups - 1)
    e, a, r = pos[0]
    sampler.batch_at(a, rank=r, epoch=e)
    first_s = time.perf_counter() - t0
    state = live.state_dict()
    return {
        "share_us": share_s * 1e6,
        "positions_us": pos_s * 1e6,
        "first_ms": first_s * 1e3,
        "items": len(pos),
        "state_bytes": len(json.dumps(state, separators=(",", ":"))),
        "torchft_bytes": len(
            json.dumps({"step": step, "batches_committed": step * groups}, separators=(",", ":"))
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes (CI)")
    parser.add_argument("--steps", type=int, default=100_000, help="protocol steps per run")
    parser.add_argument("--item-steps", type=int, default=2_000, help="steps of the item check")
    parser.add_argument("--flip", type=float, default=0.01, help="leave/rejoin rate per step")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    steps = 300 if args.smoke else args.steps
    item_steps = 20 if args.smoke else args.item_steps
    group_counts = (2, 3, 8, 64) if args.smoke else (2, 3, 8, 64, 1024)
    failed = False

    print(f"# Live elasticity under a simulated torchft{' (smoke)' if args.smoke else ''}\n")
    print(f"## 1. Exactness ({steps:,} protocol steps, leave/rejoin {args.flip:.0%} per group)\n")
    print(
        "| groups | committed steps | failed commits | participants min/mean/max "
        "| rows lost or repeated | G per step |"
    )
    print("|---|---|---|---|---|---|")
    live = LiveBatches(
        MegatronPretrainingRandomSampler(10**9, 1, 0, 1024, seed=0, global_batch_size=16_384)
    )
    traces = {}
    ours_bad: dict[int, int] = {}
    for groups in group_counts:
        events = trace(groups, steps, args.flip, args.seed + groups)
        traces[groups] = events
        bad = check_shares(live, events)
        ours_bad[groups] = bad
        failed |= bad > 0
        sizes = [len(q) for _, c, q in events if c]
        print(
            f"| {groups} | {sum(c for _, c, _ in events):,} "
            f"| {sum(not c for _, c, _ in events):,} | "
            f"{min(sizes)}/{np.mean(sizes):.1f}/{max(sizes)} | {bad} | 16,384 (constant) |",
            flush=True,
        )
    print(f"\n### Items of every family ({item_steps:,} protocol steps, 2 / 3 / 8 groups)\n")
    print(
        "| family | unit | groups | committed steps | lost | repeated | base order "
        "| hot spare = rank r |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, (make, kw) in FAMILIES.items():
        for groups in (2, 3) if args.smoke else (2, 3, 8):
            family_live = LiveBatches(make(groups), **kw)
            events = trace(groups, item_steps, max(args.flip, 0.05), args.seed + 7 * groups)
            got = check_items(family_live, LiveBatches(make(groups), **kw), events)
            ok = not (got["mismatch"] or got["spare"])
            failed |= not ok
            print(
                f"| {name} | {family_live.batching.unit} | {groups} | {got['steps']} "
                f"| {got['lost']} | {got['repeated']} | "
                f"{'exact' if not got['mismatch'] else 'DIFFERS'} | "
                f"{'yes' if not got['spare'] else 'NO'} |",
                flush=True,
            )

    print("\n## 2. Re-plan after a quorum change, and state (global batch 16,384, 10^9 samples)\n")
    print(
        "| groups | share (re-plan) | item positions of one group | items per group "
        "| first micro-batch | state bytes (ours + torchft's) |"
    )
    print("|---|---|---|---|---|---|")
    for groups in (8, 64) if args.smoke else (8, 64, 1024):
        got_r = replan(10**9, 16_384, groups, 200 if args.smoke else 2_000)
        print(
            f"| {groups} -> {groups - 1} | {got_r['share_us']:.1f} µs "
            f"| {got_r['positions_us'] / 1e3:.2f} ms "
            f"| {got_r['items']} | {got_r['first_ms']:.2f} ms "
            f"| {got_r['state_bytes']} + {got_r['torchft_bytes']} |",
            flush=True,
        )

    batch, cap = 4, 10_000
    print(
        f"\n## 3. torchft's DistributedSampler on the same failure traces (the first {cap:,} "
        f"committed steps, {batch} samples per group, one epoch of committed x groups x {batch})\n"
    )
    print(
        "| groups | ours: rows lost or repeated, G per step | torchft: never read "
        "| torchft: read twice | torchft: global batch per step min/max |"
    )
    print("|---|---|---|---|---|")
    for groups, events in traces.items():
        prefix = []
        committed = 0
        for event in events:
            if committed == cap:
                break
            prefix.append(event)
            committed += event[1]
        t = torchft_sampler(groups, batch, prefix, committed * groups * batch)
        print(
            f"| {groups} | {ours_bad[groups]}, {groups * batch} (constant) | {t['never']:,} "
            f"| {t['twice']:,} | {t['min']}/{t['max']} |",
            flush=True,
        )
    if failed:
        print("\nEXACTNESS FAILED", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
