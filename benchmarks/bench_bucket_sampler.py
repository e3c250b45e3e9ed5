"""Benchmark of the diffusion bucket sampler at scale: first batch, memory and per-step cost.

A dataset of 10 million samples in 1,000 buckets of skewed (log-normal) sizes, samples of all
buckets interleaved at random, per-rank batch size 32, buckets and samples shuffled. Prints
markdown tables of:

* building the dataset's arrays (grouping 10 M bucket ids into the CSR table) and their size;
* time to the first batch of a fresh sampler at 64 ranks, from the start of an epoch and after
  loading a mid-epoch state (the dataset already built);
* memory the sampler allocates beyond the dataset's arrays (tracemalloc peak over construction,
  the first batch, 1,000 steps, ``get_batch_info`` and ``state_dict``), per sample;
* the cost of one step (one rank's batch) at 8, 64 and 1,024 ranks.

``--smoke`` runs 100,000 samples in 100 buckets (CI uses it so the script never rots); no figure
here is ever asserted. Run from the repository root:

    python benchmarks/bench_bucket_sampler.py
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import tracemalloc
import warnings
from typing import Any

import numpy as np

from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler

BATCH = 32


def build(n: int, buckets: int) -> tuple[BaseMultiresolutionDataset, float, int]:
    """The dataset, the seconds to group it, and the bytes of its own arrays."""
    rng = np.random.default_rng(0)
    weights = rng.lognormal(0.0, 1.0, buckets)
    sizes = np.maximum(1, np.floor(weights / weights.sum() * n)).astype(np.int64)
    sizes[np.argmax(sizes)] += n - int(sizes.sum())
    ids = np.repeat(np.arange(buckets, dtype=np.int64), sizes)
    rng.shuffle(ids)
    side = int(np.ceil(np.sqrt(buckets)))
    res = [(64 * (1 + i % side), 64 * (1 + i // side)) for i in range(buckets)]
    t = time.perf_counter()
    ds = BaseMultiresolutionDataset.from_bucket_ids(ids, res)
    seconds = time.perf_counter() - t
    return ds, seconds, ds.nbytes


def sampler(ds: BaseMultiresolutionDataset, world: int, **kw: Any) -> SequentialBucketSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # buckets smaller than a global batch, at large worlds
        return SequentialBucketSampler(
            ds, base_batch_size=BATCH, num_replicas=world, rank=world // 3, seed=7, **kw
        )


def first_batch(ds: BaseMultiresolutionDataset, world: int, state: Any = None, **kw: Any) -> float:
    t = time.perf_counter()
    s = sampler(ds, world, **kw)
    if state is not None:
        s.load_state_dict(state)
    next(iter(s))
    return time.perf_counter() - t


def per_step(
    ds: BaseMultiresolutionDataset, world: int, steps: int, **kw: Any
) -> tuple[float, float, float, float]:
    """Over the first ``steps`` steps of an epoch (after the first batch): mean seconds per step,
    mean seconds of the steps that start a bucket and of the others, and mean steps per bucket.

    ``drop_last=True``, so every step is a full batch of ``BATCH`` at every ``R`` and the steps
    compare equal work.
    """
    s = sampler(ds, world, **kw)
    it = iter(s)
    next(it)  # the plan and the first chunk are the first batch's cost, reported apart
    starts: list[float] = []
    others: list[float] = []
    t0 = time.perf_counter()
    t = t0
    for _ in range(steps):
        before = s.progress["bucket"], s.progress["consumed"]
        if next(it, None) is None:
            break
        now = time.perf_counter()
        (others if before[1] else starts).append(now - t)  # consumed 0: a bucket's first step
        t = now
    total = t - t0
    n = len(starts) + len(others)
    return (
        total / n,
        float(np.mean(starts)) if starts else float("nan"),
        float(np.mean(others)) if others else float("nan"),
        n / max(1, len(starts)),
    )


def per_step_equal_buckets(world: int, compat: str, buckets: int, per_bucket: int) -> float:
    """Mean seconds per step over an epoch whose buckets each hold ``per_bucket`` global batches
    at this ``R`` (``buckets`` buckets of ``per_bucket x BATCH x R`` samples): the bucket starts
    are then equally frequent at every ``R``, and only a cost in ``R`` could tell them apart."""
    n_bucket = per_bucket * BATCH * world
    ids = np.repeat(np.arange(buckets, dtype=np.int64), n_bucket)
    np.random.default_rng(1).shuffle(ids)
    ds = BaseMultiresolutionDataset.from_bucket_ids(
        ids, [(64 * (j + 1), 64) for j in range(buckets)]
    )
    s = sampler(ds, world, compat=compat)
    t = time.perf_counter()
    steps = sum(1 for _ in s)
    return (time.perf_counter() - t) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args()
    n, buckets = (100_000, 100) if args.smoke else (10_000_000, 1_000)
    steps = 200 if args.smoke else 3_000
    worlds = (2, 8, 32) if args.smoke else (8, 64, 1024)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )
    ds, build_s, own = build(n, buckets)
    sizes = ds.bucket_table.sizes
    print(
        f"\ndataset: {n:,} samples in {buckets:,} buckets (sizes {int(sizes.min()):,} to "
        f"{int(sizes.max()):,}, median {int(np.median(sizes)):,}), per-rank batch {BATCH}\n"
    )
    print("| what | figure |")
    print("|---|---|")
    print(f"| build the dataset arrays (group {n:,} bucket ids) | {build_s:.2f} s |")
    print(f"| the dataset's own arrays | {own / 2**20:.0f} MiB ({own / n:.1f} B/sample) |")
    for compat in ("default", "nemo"):
        cold = min(first_batch(ds, 64, compat=compat) for _ in range(3))
        half = sampler(ds, 64, compat=compat)
        for _ in zip(range(len(half) // 2), half, strict=False):
            pass
        state = half.state_dict()
        resumed = min(first_batch(ds, 64, state, compat=compat) for _ in range(3))
        print(f"| first batch, R=64, compat={compat!r}, epoch start | {cold * 1e3:.1f} ms |")
        print(
            f"| first batch, R=64, compat={compat!r}, after loading a mid-epoch state "
            f"(bucket {state['bucket']} of {buckets}) | {resumed * 1e3:.1f} ms |"
        )
    for compat in ("default", "nemo"):
        tracemalloc.start()
        s = sampler(ds, 64, compat=compat)
        for _ in zip(range(1000), s, strict=False):
            pass
        for i in range(0, len(s), max(1, len(s) // 100)):
            s.get_batch_info(i)
        s.state_dict()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        note = ""
        if compat == "nemo":
            # torch's allocator is invisible to tracemalloc: add the current bucket's randperm
            torch_bytes = 8 * int(sizes.max())
            peak += torch_bytes
            note = f", incl. {torch_bytes / 2**20:.1f} MiB: one randperm of the largest bucket"
        print(
            f"| sampler memory beyond the dataset, R=64, compat={compat!r} (peak{note}) | "
            f"{peak / 2**10:.0f} KiB ({peak / n:.3f} B/sample) |"
        )

    print(
        f"\nper step (one rank's batch of {BATCH}, drop_last=True, so every step is a full "
        f"batch), over the first {steps:,} steps of an epoch:\n"
    )
    print(
        "| compat | R | us/step (mean) | us/step starting a bucket | us/step inside a bucket "
        "| steps per bucket |"
    )
    print("|---|---|---|---|---|---|")
    for compat in ("default", "nemo"):
        for world in worlds:
            mean, start, inside, per_bucket = per_step(ds, world, steps, compat=compat)
            print(
                f"| {compat} | {world} | {mean * 1e6:.1f} | {start * 1e6:.0f} | "
                f"{inside * 1e6:.1f} | {per_bucket:.1f} |"
            )
    eq_buckets, eq_per = (10, 2) if args.smoke else (50, 4)
    print(
        f"\nper step, {eq_buckets} buckets of exactly {eq_per} global batches each at every R "
        f"({eq_per} x {BATCH} x R samples per bucket), mean over the whole epoch:\n"
    )
    print("| R | default: us/step | compat='nemo': us/step |")
    print("|---|---|---|")
    equal = {}
    for world in worlds:
        equal[world] = per_step_equal_buckets(world, "default", eq_buckets, eq_per)
        nemo = per_step_equal_buckets(world, "nemo", eq_buckets, eq_per)
        print(f"| {world} | {equal[world] * 1e6:.0f} | {nemo * 1e6:.0f} |")
    ratio = equal[worlds[-1]] / equal[worlds[0]]
    print(f"\nR={worlds[-1]} / R={worlds[0]} (default, equal steps per bucket): {ratio:.2f}x")


if __name__ == "__main__":
    main()
