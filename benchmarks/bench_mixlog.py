"""Mixture logs: the cost of appending, of a lookup after many entries, of a resume, and the bytes.

What an online mixing controller pays (``dataorder.llm.mixlog``): ``set_weights`` at K sources
(quantise and chain a digest), the counts at a position after ``N`` entries (a bisection and a
walk of the tree; the segment bases are built once, as the log grows), the first batch of a
``BlendedSampler`` resumed at ``N`` entries (from the segment bases saved with the log: NOTE [ Saved
segment bases ]; and from a file without them, which builds every base: O(N K)), the file
(``MixtureLog.save``) and the state, in CPU time (the machine may be shared). Prints a markdown
table; no figure is asserted anywhere.

    python benchmarks/bench_mixlog.py            # K = 200, N = 10**4
    python benchmarks/bench_mixlog.py --smoke    # K = 20, N = 200 (CI)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from dataorder.llm.blend import BlendedSampler
from dataorder.llm.mixlog import MixtureLog
from dataorder.llm.schedule import BatchSizeSchedule


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI)")
    parser.add_argument("--sources", type=int, default=200)
    parser.add_argument("--entries", type=int, default=10_000)
    args = parser.parse_args()
    k = 20 if args.smoke else args.sources
    n = 200 if args.smoke else args.entries
    gbs = 64
    rng = np.random.default_rng(0)
    rows = (rng.random((n, k)) ** 3).tolist()

    log = MixtureLog(rows[0])
    append = []
    for step in range(1, n):
        t0 = time.process_time()
        log.set_weights(step, rows[step])
        append.append(time.process_time() - t0)

    plain = log.to_bytes()  # saved before any sampler built a base: no bases in the file
    mix = log.compile(0, BatchSizeSchedule.constant(gbs))
    t0 = time.process_time()
    mix.counts(n * gbs)  # builds every segment base once
    build = time.process_time() - t0
    lookups = []
    for t in rng.integers(0, n * gbs, 200).tolist():
        t0 = time.process_time()
        mix.counts(int(t) - int(t) % gbs)
        lookups.append(time.process_time() - t0)

    data = log.to_bytes()
    t0 = time.process_time()
    back = MixtureLog.from_bytes(data)
    load = time.process_time() - t0
    sizes = [10_000 + d for d in range(k)]

    def resume(saved: MixtureLog) -> tuple[float, BlendedSampler]:
        t0 = time.process_time()
        sampler = BlendedSampler(
            sizes, saved, 4, 0, 8, gbs, seed=1, total_samples=2 * n * gbs,
            consumed_samples=(n - 1) * gbs,
        )  # fmt: skip
        next(iter(sampler))  # a fresh compiled log: the bases it needs are built here
        return time.process_time() - t0, sampler

    first, sampler = resume(back)
    rebuilt, _ = resume(MixtureLog.from_bytes(plain))
    state = json.dumps(sampler.state_dict(), separators=(",", ":"))

    print(f"K = {k} sources, N = {n} entries, global batch {gbs}\n")
    print("| what | figure |")
    print("|---|---|")
    print(
        f"| set_weights, median / max | {_median_us(append):.0f} us / {max(append) * 1e6:.0f} us |"
    )
    print(f"| segment bases for N entries, built once | {build * 1e3:.0f} ms |")
    print(f"| counts at a position after N entries, median | {_median_us(lookups):.0f} us |")
    print(f"| log file (MixtureLog.save) | {len(data) / 1e6:.2f} MB |")
    print(f"| load + verify the file | {load * 1e3:.0f} ms |")
    print(f"| first micro-batch after a resume at N entries | {first * 1e3:.0f} ms |")
    print(f"| the same from a file without segment bases | {rebuilt * 1e3:.0f} ms |")
    print(f"| sampler state | {len(state)} bytes |")


if __name__ == "__main__":
    main()
