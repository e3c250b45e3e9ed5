"""Benchmark of the order core: permutation throughput and the cost of an epoch's first index.

Prints a markdown table. ``--smoke`` runs tiny sizes (CI uses it so the script never rots); no
figure here is ever asserted. Run from the repository root:

    python benchmarks/bench_core.py
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import tracemalloc

import numpy as np

from dataorder.core.keys import derive_key
from dataorder.core.permutation import Permutation


def _best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args()
    batch = 10_000 if args.smoke else 1_000_000
    sizes = [10**6] if args.smoke else [10**6, 10**8, 10**9, 10**12]
    repeat = 1 if args.smoke else 5
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # numpy ufuncs are single-threaded anyway

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )
    print()
    print(
        f"| n | vectorised positions/s (batch of {batch}) | scalar index | first index of an "
        "epoch (key + permutation + pi(0)) | peak traced memory for the first index |"
    )
    print("|---|---|---|---|---|")
    for n in sizes:
        perm = Permutation(n, derive_key(0, epoch=0, stream="bench", purpose="core"))
        start = max(0, n // 2 - batch // 2)
        positions = np.arange(start, start + batch, dtype=np.int64)
        t_vec = _best(lambda: perm(positions), repeat)  # noqa: B023
        t_one = _best(lambda: perm.index(n // 3), repeat * 20)  # noqa: B023

        def first_index(n: int = n) -> int:
            key = derive_key(0, epoch=7, stream="bench", purpose="first")
            return Permutation(n, key).index(0)

        t_first = _best(first_index, repeat * 20)
        tracemalloc.start()
        first_index()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(
            f"| {n:.0e} | {batch / t_vec / 1e6:.1f} M | {t_one * 1e6:.1f} us | "
            f"{t_first * 1e6:.1f} us | {peak / 1024:.1f} KiB |"
        )


if __name__ == "__main__":
    main()
