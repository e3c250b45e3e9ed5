"""Benchmark of fitted bucket sets: crop loss and lock-step waste beside the fixed sets.

Prints markdown tables; never asserts a timing. ``--smoke`` runs every section on tiny inputs
(what CI runs).

    python benchmarks/bench_fit.py            # the figures of the report (a few minutes)
    python benchmarks/bench_fit.py --smoke    # seconds, for CI

Data: the shipped 3,000 sizes (``dataorder/data/image_sizes.csv``) resampled with replacement to
``N`` with ``numpy.random.default_rng(SEED)``; and, as a stress set, ``N`` sizes whose aspect
ratio is log-uniform in [1/3, 3] (``bench_buckets.log_uniform_sizes(N, SEED)``). Budget
``1024**2`` pixels, quantization 64. Layouts ``R x b`` (ranks x per-rank batch) 8 x 4, 64 x 8,
256 x 4, so ``G = R * b``.

Bucket sets, each with its own rule: NeMo's 1024p preset (``compat="nemo"``: NeMo's buckets and its
nearest-linear-ratio rule), our 1024p preset (31 buckets, nearest log ratio), SDXL's 40-entry table
(``baselines.SDXL_BUCKETS``, nearest log ratio, ``baselines.assign_log_nearest``) and the fitted set
(:func:`dataorder.diffusion.fit.images.fit_to_data`), fitted once to drop and once to pad at most
``max_waste = 1 %``.

Waste is the library's partition of each bucket into whole global batches
(:func:`dataorder.core.partition.plan_segments`, tails ``"drop"`` and ``"pad"``): ``n mod G``
dropped, ``(-n) mod G`` padded, over ``N``. When no bucket set can waste 1 % (``N mod G`` alone
is more), the fit runs at that least waste and its row says so. Crop loss is exact per image
(:func:`dataorder.diffusion.sampler.stats.crop_loss`).

Sections:

1. Crop loss and waste, N = 10^4, 10^5, 10^6, every layout, both data sets; the target check.
2. The fit at each fixed set's own waste (N = 10^5, 64 x 8): never worse.
3. Crop loss against the waste budget (shipped sizes, N = 10^5, 64 x 8).
4. Fitting time for 10^7 images: best of 3, and the first call in a fresh process.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from baselines import SDXL_BUCKETS, assign_log_nearest
from bench_buckets import log_uniform_sizes

from dataorder.core.partition import plan_segments
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.fit.images import FitResult, fit_to_data
from dataorder.diffusion.sampler.stats import crop_loss
from dataorder.tools.demo import load_image_sizes

SEED = 20260601
BUDGET = 1024 * 1024
Q = 64
LAYOUTS = ((8, 4), (64, 8), (256, 4))
MAX_WASTE = 0.01
TARGET = {"n": 100_000, "layout": (64, 8), "waste": 0.01, "crop": 0.03}

Sizes = tuple[np.ndarray, np.ndarray]
Assign = Callable[[np.ndarray, np.ndarray], np.ndarray]


def shipped(n: int) -> Sizes:
    w, h = load_image_sizes()
    pick = np.random.default_rng(SEED).integers(0, w.size, n)
    return w[pick], h[pick]


def log_uniform(n: int) -> Sizes:
    return log_uniform_sizes(n, SEED)


DATA: dict[str, Callable[[int], Sizes]] = {
    "shipped, resampled": shipped,
    "log-uniform": log_uniform,
}


def fixed_sets() -> list[tuple[str, np.ndarray, Assign]]:
    nemo = MultiTierBucketCalculator.from_preset("1024p", compat="nemo")
    ours = MultiTierBucketCalculator.from_preset("1024p")
    sdxl = np.array(SDXL_BUCKETS, dtype=np.int64)
    return [
        (f"NeMo 1024p ({len(nemo)})", nemo.resolutions, nemo.assign),
        (f"ours 1024p ({len(ours)})", ours.resolutions, ours.assign),
        (f"SDXL table ({len(sdxl)})", sdxl, lambda w, h: assign_log_nearest(w, h, SDXL_BUCKETS)),
    ]


def pct(v: float) -> str:
    return f"{100 * v:.2f}"


def waste(counts: np.ndarray, g: int, drop: bool) -> int:
    """Samples dropped (or padded) when every bucket is cut into whole global batches of ``g``."""
    plan = plan_segments(counts, per_rank=g, dp_size=1, tail="drop" if drop else "pad")
    return plan.dropped if drop else plan.padded


def crop(w: np.ndarray, h: np.ndarray, res: np.ndarray, ids: np.ndarray) -> list[str]:
    loss = crop_loss(w, h, res[ids, 0], res[ids, 1])
    return [pct(loss.mean()), pct(float(np.percentile(loss, 95))), pct(float((loss > 0.1).mean()))]


def row(
    name: str,
    w: np.ndarray,
    h: np.ndarray,
    res: np.ndarray,
    ids: np.ndarray,
    g: int,
    note: str = "",
) -> list[str]:
    counts = np.bincount(ids, minlength=len(res))
    n = w.size
    return [
        name,
        str(int((counts > 0).sum())),
        *crop(w, h, res, ids),
        pct(waste(counts, g, True) / n),
        pct(waste(counts, g, False) / n),
        note,
    ]


def least_waste(n: int, g: int, drop: bool) -> float:
    """The least waste of any bucket set (one bucket), as a share of ``n``."""
    return (n % g if drop else (-n) % g) / n


def fit(w: np.ndarray, h: np.ndarray, g: int, drop: bool, budget: float) -> tuple[FitResult, float]:
    start = time.perf_counter()
    result = fit_to_data(
        w,
        h,
        global_batch_size=g,
        max_waste=budget,
        max_pixels=BUDGET,
        quantization=Q,
        drop_last=drop,
    )
    return result, time.perf_counter() - start


def table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


HEAD = [
    "N",
    "R x b",
    "bucket set",
    "used",
    "mean crop %",
    "p95 %",
    "% > 10 %",
    "dropped %",
    "padded %",
    "note",
]


def side_by_side(sizes: tuple[int, ...]) -> tuple[str, list[str]]:
    """Section 1: every data set, N and layout; and the target lines."""
    parts, verdicts = [], []
    sets = fixed_sets()
    for label, make in DATA.items():
        rows = []
        for n in sizes:
            w, h = make(n)
            assigned = [(name, res, assign(w, h)) for name, res, assign in sets]
            for r, b in LAYOUTS:
                g = r * b
                lead = [f"{n:,}", f"{r} x {b}"]
                rows += [lead + row(name, w, h, res, ids, g) for name, res, ids in assigned]
                for drop in (True, False):
                    least = least_waste(n, g, drop)
                    budget = max(MAX_WASTE, least)
                    result, took = fit(w, h, g, drop, budget)
                    note = f"{result.method}, fit {took:.2f} s"
                    if least > MAX_WASTE:
                        note = f"1 % impossible (N mod G alone is {pct(least)} %): at the least"
                    kind = "drop" if drop else "pad"
                    ids = result.assign(w, h)
                    name = f"**fitted, {kind} <= {pct(budget)} %**"
                    rows.append(lead + row(name, w, h, result.resolutions, ids, g, note))
                    if (n, (r, b), drop) == (TARGET["n"], TARGET["layout"], True):
                        ok = (
                            result.waste_share <= TARGET["waste"]
                            and result.mean_crop_loss <= TARGET["crop"]
                        )
                        verdicts.append(
                            f"Target ({label}, N = {n:,}, R x b = {r} x {b}): fitted set drops "
                            f"{pct(result.waste_share)} % (<= 1 %) with mean crop loss "
                            f"{pct(result.mean_crop_loss)} % (<= 3 %): "
                            + ("met" if ok else "NOT met")
                        )
        parts.append(f"### {label}\n\n" + table(HEAD, rows) + "\n")
    return "\n".join(parts), verdicts


def at_own_waste(n: int, r: int, b: int) -> str:
    """Section 2: the fit with each fixed set's own waste as its budget."""
    g = r * b
    rows = []
    for label, make in DATA.items():
        w, h = make(n)
        for name, res, assign in fixed_sets():
            ids = assign(w, h)
            counts = np.bincount(ids, minlength=len(res))
            base = crop_loss(w, h, res[ids, 0], res[ids, 1]).mean()
            for drop in (True, False):
                own = waste(counts, g, drop)
                result, _ = fit(w, h, g, drop, own / n)
                rows.append(
                    [
                        label,
                        name,
                        "drop" if drop else "pad",
                        pct(own / n),
                        pct(base),
                        pct(result.mean_crop_loss),
                        str(result.num_buckets),
                        pct(result.waste_share),
                    ]
                )
    head = [
        "data",
        "fixed set",
        "waste kind",
        "its waste %",
        "its crop %",
        "fit's crop %",
        "fit's K",
        "fit's waste %",
    ]
    return table(head, rows)


def against_budget(n: int, r: int, b: int) -> str:
    """Section 3: crop loss of the fit as the waste budget grows (shipped sizes)."""
    g = r * b
    w, h = shipped(n)
    rows = []
    for drop in (True, False):
        least = least_waste(n, g, drop)
        for budget in sorted({least, 0.005, 0.01, 0.02, 0.05}):
            if budget < least:
                continue
            result, _ = fit(w, h, g, drop, budget)
            ids = result.assign(w, h)
            rows.append(
                [
                    "drop" if drop else "pad",
                    pct(budget),
                    str(result.num_buckets),
                    pct(result.waste_share),
                    *crop(w, h, result.resolutions, ids),
                    result.method,
                ]
            )
    head = [
        "waste kind",
        "max_waste %",
        "K",
        "waste %",
        "mean crop %",
        "p95 %",
        "% > 10 %",
        "method",
    ]
    return table(head, rows)


def timing(n: int, repeats: int) -> str:
    """Section 4: fitting time, best of ``repeats``, drop_last, every layout."""
    rows = []
    for label, make in DATA.items():
        w, h = make(n)
        fit_to_data(w[:4096], h[:4096], global_batch_size=8, max_pixels=BUDGET)  # warm caches
        for r, b in LAYOUTS:
            g = r * b
            for budget in sorted(
                {max(MAX_WASTE, least_waste(n, g, True)), max(0.001, least_waste(n, g, True))}
            ):
                result, best = fit(w, h, g, True, budget)
                for _ in range(repeats - 1):
                    best = min(best, fit(w, h, g, True, budget)[1])
                rows.append(
                    [
                        label,
                        f"{r} x {b}",
                        pct(budget),
                        f"{best:.3f}",
                        str(result.num_bins),
                        str(result.num_candidates),
                        str(result.num_buckets),
                        pct(result.waste_share),
                        pct(result.mean_crop_loss),
                        result.method,
                    ]
                )
    head = [
        "data",
        "R x b",
        "max_waste %",
        "fit s (best)",
        "bins",
        "candidates",
        "K",
        "waste %",
        "mean crop %",
        "method",
    ]
    return table(head, rows)


def cold(n: int) -> str:
    """Seconds of the first fit in a fresh interpreter (imports done, memory cold)."""
    code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "import bench_fit as B\n"
        "from dataorder.diffusion.fit.images import fit_to_data\n"
        f"w, h = B.log_uniform({n})\n"
        "t = time.perf_counter()\n"
        "fit_to_data(w, h, global_batch_size=512, max_pixels=B.BUDGET)\n"
        "print(f'{time.perf_counter() - t:.3f}')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="tiny inputs, a few seconds")
    args = parser.parse_args(argv)
    sizes = (2_000, 20_000) if args.smoke else (10_000, 100_000, 1_000_000)
    mid = sizes[1]
    big = 200_000 if args.smoke else 10_000_000
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# bench_fit.py{' --smoke' if args.smoke else ''}\n")
    print(
        f"numpy {np.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load {load:.2f}, seed {SEED}, budget 1024^2, quantization {Q}\n"
    )
    print("## 1. Crop loss and lock-step waste, max_waste = 1 %\n")
    text, verdicts = side_by_side(sizes)
    print(text)
    for line in verdicts:
        print(line + "\n")
    print(f"## 2. The fit at each fixed set's own waste, N = {mid:,}, R x b = 64 x 8\n")
    print(at_own_waste(mid, 64, 8) + "\n")
    print(f"## 3. Crop loss against the waste budget, shipped sizes, N = {mid:,}, 64 x 8\n")
    print(against_budget(mid, 64, 8) + "\n")
    print(f"## 4. Fitting time, N = {big:,} (drop_last)\n")
    print(timing(big, 1 if args.smoke else 3) + "\n")
    print(f"First fit in a fresh process, N = {big:,} log-uniform, G = 512: {cold(big)} s\n")


if __name__ == "__main__":
    main()
