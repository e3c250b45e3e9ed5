"""Benchmark the Megatron samplers: first micro-batch, resume, steady-state throughput.

Prints a markdown table. Every measurement runs in a fresh interpreter, so its peak memory is its
own: "extra memory" is the peak resident set size minus the resident size just before the
sampler is built (imports excluded), and the tracemalloc peak of Python allocations over the same
span (torch's tensor memory is outside tracemalloc, inside RSS).

The baseline is a torch.randperm-based "cyclic" sampler written from the description of NeMo
Automodel's (docs: nemo_behaviour.md section 5): a static per-rank shard of
``(N // M) * micro_batch_size`` samples, ``torch.randperm(shard)`` seeded ``seed + epoch``,
``.tolist()``, then a list of shifted indices, cut into micro-batches. Its shard at N on 8 ranks
has N/8 entries; ``--baseline-n`` sets its N (default 10**9; on a small machine use 10**8 and
say so).

    python benchmarks/bench_megatron.py            # N = 10**9
    python benchmarks/bench_megatron.py --smoke    # tiny sizes, a few seconds (CI)

Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

MBS, DP, RANK, SEED = 8, 8, 7, 1234


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes


class RandpermCyclicSampler:
    """The baseline: NeMo Automodel's cyclic sampler as nemo_behaviour.md describes it."""

    def __init__(self, n: int, mbs: int, rank: int, dp: int, seed: int, consumed: int) -> None:
        self.n, self.mbs, self.rank, self.dp, self.seed = n, mbs, rank, dp, seed
        self.consumed = consumed

    def __iter__(self) -> Iterator[list[int]]:
        import torch

        block = self.mbs * self.dp
        active = self.n - self.n % block
        epoch, offset = divmod(self.consumed, active)
        shard = self.n // block * self.mbs
        generator = torch.Generator()
        generator.manual_seed(self.seed + epoch)
        perm = torch.randperm(shard, generator=generator).tolist()
        start = self.rank * shard
        indices = [start + x for x in perm[offset // self.dp :]]
        del perm
        for i in range(0, len(indices) - self.mbs + 1, self.mbs):
            self.consumed += block
            yield indices[i : i + self.mbs]


def _build(kind: str, n: int, consumed: int) -> Any:
    from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler

    if kind == "baseline":
        return RandpermCyclicSampler(n, MBS, RANK, DP, SEED, consumed)
    if kind == "single":
        return MegatronPretrainingSampler(n, MBS, RANK, DP, consumed_samples=consumed)
    if kind == "nemo-compat":
        return MegatronPretrainingRandomSampler(
            n, MBS, RANK, DP, seed=SEED, compat="nemo", consumed_samples=consumed
        )
    return MegatronPretrainingRandomSampler(
        n, MBS, RANK, DP, seed=SEED, data_sharding=kind == "sharded", consumed_samples=consumed
    )


def child(kind: str, what: str, n: int, batches: int) -> dict[str, Any]:
    """One measurement, in this (fresh) process.

    ``what`` is ``"first"`` (time and peak RSS of the first micro-batch of epoch 0, then the
    steady-state rate over ``batches`` more), ``"resume"`` (the same for the first micro-batch
    after a resume at N/2) or ``"mem"`` (tracemalloc peak of the first micro-batch; tracing slows
    allocation, so nothing is timed in that run).
    """
    import torch  # noqa: F401  (imported before the baseline reading, whatever the kind)

    import dataorder.llm.megatron  # noqa: F401

    block = MBS * DP
    consumed = (n // 2) // block * block if what == "resume" else 0
    rss0 = _rss_bytes()
    if what == "mem":
        tracemalloc.start()
    t0 = time.perf_counter()
    it = iter(_build(kind, n, consumed))
    first = next(it)
    t1 = time.perf_counter()
    out: dict[str, Any] = {
        "first_s": t1 - t0,
        "first": first,
        "rss_extra": _peak_rss_bytes() - rss0,
    }
    if what == "mem":
        out["tracemalloc_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if what == "first":
        t2 = time.perf_counter()
        for _ in range(batches):
            next(it)
        out["indices_per_s"] = batches * MBS / (time.perf_counter() - t2)
    return out


def run(kind: str, what: str, n: int, batches: int, timeout: float) -> dict[str, Any] | None:
    args = [sys.executable, __file__, "--child", kind, what, str(n), str(batches)]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        return None
    return dict(json.loads(proc.stdout))


def _fmt_time(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.1f} s"


def _fmt_bytes(b: int) -> str:
    b = max(0, b)
    return f"{b / 2**20:.1f} MB" if b < 2**30 else f"{b / 2**30:.2f} GB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI)")
    parser.add_argument("--n", type=int, default=10**9, help="dataset size for dataorder")
    parser.add_argument("--baseline-n", type=int, default=None, help="dataset size, baseline")
    parser.add_argument("--batches", type=int, default=2**18, help="micro-batches timed")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, what, n, batches = args.child
        print(json.dumps(child(kind, what, int(n), int(batches))))
        return
    n = 10**5 if args.smoke else args.n
    baseline_n = 10**5 if args.smoke else (args.baseline_n or n)
    batches = 2**10 if args.smoke else args.batches
    rows = [
        ("global (default)", "random", n),
        ("data_sharding=True", "sharded", n),
        ("single (sequential)", "single", n),
        ("compat='nemo'", "nemo-compat", baseline_n),
        ("torch.randperm baseline", "baseline", baseline_n),
    ]
    print(
        f"micro_batch_size={MBS}, data_parallel_size={DP}, rank {RANK}; "
        f"steady state over {batches} micro-batches\n"
    )
    print(
        "| sampler | N | first micro-batch | extra RSS | tracemalloc peak "
        "| resume at N/2 | resume extra RSS | indices/s per rank |"
    )
    print("|---|---|---|---|---|---|---|---|")
    failed = []
    for i, (label, kind, size) in enumerate(rows):
        # tracing a list of N/8 Python ints would cost more than the list: baseline untraced;
        # a smoke run measures memory and resume once (each measurement is an interpreter), and
        # the other rows in this one (the figures of a smoke run are not read)
        extra = not args.smoke or i == 0
        first = (
            run(kind, "first", size, batches, args.timeout)
            if extra
            else dict(child(kind, "first", size, batches))
        )
        mem = run(kind, "mem", size, 0, args.timeout) if extra and kind != "baseline" else None
        resume = run(kind, "resume", size, 0, args.timeout) if extra else None
        failed += [label] * (int(first is None) + int(extra and resume is None))
        cells = [label, f"{size:.0e}".replace("e+0", "e")]
        if first is None:
            cells += ["timeout/failed"] * 2
        else:
            cells += [_fmt_time(first["first_s"]), _fmt_bytes(first["rss_extra"])]
        cells.append("-" if mem is None else _fmt_bytes(mem["tracemalloc_peak"]))
        if resume is None:
            cells += ["timeout/failed" if extra else "-"] * 2
        else:
            cells += [_fmt_time(resume["first_s"]), _fmt_bytes(resume["rss_extra"])]
        cells.append("-" if first is None else f"{first['indices_per_s'] / 1e6:.2f} M")
        print("| " + " | ".join(cells) + " |", flush=True)
    if args.smoke and failed:
        raise SystemExit(f"a measurement failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
