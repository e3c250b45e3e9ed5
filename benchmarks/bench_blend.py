"""Benchmark BlendedSampler against Megatron-LM's blend index, side by side in one run.

Three tables:

1. **First batch at 10**9 samples** for K = 10, 100, 1,000 sources: dataorder's construction
   plus first micro-batch (and the first micro-batch of a resume half-way), its extra peak
   RSS and tracemalloc peak, each in a fresh interpreter; beside it Megatron-LM's
   ``build_blending_indices`` (the C++ loop ``BlendedDataset`` runs before its first sample),
   measured at ``--megatron-n`` samples and extrapolated linearly to 10**9 (the loop is
   O(samples x K) and its arrays are 10 bytes per sample: int16 source, int64 draw).
2. **Per global batch**: steady-state cost of one whole global batch (every rank's samples,
   computed in one process) and of one rank's micro-batch, ``global_batch_size=1024``.
3. **Exactness**: the worst deviation ``c_d(t) - w_d t`` (samples) over every global-batch
   boundary ``t`` and over every prefix, for ours and for Megatron's greedy on the same
   weights over ``--exact-n`` samples. Ours is exact at batch boundaries by construction (NOTE
   [ Mixture exactness ] in dataorder.llm.mixture) and shuffles the slots inside each global
   batch, so its every-prefix figure is larger by design.

Megatron's greedy is our own re-implementation of the loop as Megatron-LM documents it in
``megatron/core/datasets/helpers.cpp`` (``error_d = w_d * max(i, 1) - count_d``, first maximum
wins); when a compiled megatron-core ``helpers_cpp`` for this interpreter is found in
``--megatron-helpers`` (a directory) it is timed and cross-checked bit for bit against ours.
Without it the pure-Python loop is timed instead (far slower; the table says which).

    python benchmarks/bench_blend.py --megatron-helpers /path/to/mcore-build
    python benchmarks/bench_blend.py --smoke    # tiny sizes, a few seconds (CI)

Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

MBS, DP, RANK, GBS, SEED = 4, 8, 7, 1024, 1234
TOTAL = 10**9


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes


# -- weight sets --------------------------------------------------------------------------------


def weight_set(name: str) -> list[float]:
    """The named weight sets (fixed seeds), as plain floats."""
    kind, _, arg = name.partition("-")
    if kind == "dirichlet":
        k = int(arg)
        return [float(x) for x in np.random.default_rng(k).dirichlet(np.ones(k))]
    if name == "geometric-30":
        return [(2 / 3) ** i for i in range(30)]
    if name == "0.999+999x1e-6":
        return [0.999] + [1e-6] * 999
    if name == "0.5/0.3/0.2+10x1e-6":
        return [0.5, 0.3, 0.2] + [1e-6] * 10
    if name == "0.001/0.999":
        return [0.001, 0.999]
    raise ValueError(f"unknown weight set {name!r}")


def source_sizes(k: int) -> list[int]:
    """Source sizes between 10**5 and 10**8 (they only set the permutations' word widths)."""
    rng = np.random.default_rng(k + 1)
    return [int(x) for x in rng.integers(10**5, 10**8, size=k)]


# -- Megatron's greedy --------------------------------------------------------------------------


def load_helpers(folder: str | None) -> ModuleType | None:
    """A compiled ``helpers_cpp`` for this interpreter in ``folder``, loaded by path (its package's
    ``__init__`` imports torch and needs megatron-core installed), or None."""
    if not folder:
        return None
    suffix = f".cpython-{sys.version_info.major}{sys.version_info.minor}"
    for path in sorted(Path(folder).glob(f"helpers_cpp{suffix}*.so")):
        spec = importlib.util.spec_from_file_location("helpers_cpp", path)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return None


def greedy_python(weights: list[float], size: int) -> npt.NDArray[np.int16]:
    """Megatron's greedy blend, sample by sample: ``argmax_d(w_d * max(i, 1) - count_d)``, the
    first maximum winning, in float64 (weights normalised as ``w / w.sum()``)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    counts = np.zeros(w.size, dtype=np.float64)
    out = np.empty(size, dtype=np.int16)
    for i in range(size):
        best = int(np.argmax(w * float(max(i, 1)) - counts))
        out[i] = best
        counts[best] += 1.0
    return out


def greedy_cpp(helpers: ModuleType, weights: list[float], size: int) -> npt.NDArray[np.int16]:
    """The compiled loop, called the way ``BlendedDataset`` calls it."""
    w = np.asarray(weights, dtype=np.float64)
    w = np.ascontiguousarray(w / w.sum())
    index = np.zeros(size, dtype=np.int16)
    sample = np.zeros(size, dtype=np.int64)
    helpers.build_blending_indices(index, sample, w, len(w), size, False)
    return index


# -- deviations ---------------------------------------------------------------------------------


def prefix_extremes(
    source: npt.NDArray[Any], weights: npt.NDArray[np.float64]
) -> tuple[float, float]:
    """Largest and smallest ``c_d(t) - w_d t`` over every prefix ``t`` and source ``d``.

    Between two reads of ``d`` the deviation falls linearly, so the extremes sit right after a
    read (``t = p + 1``), right before one (``t = p``), or at the end.
    """
    n, k = source.size, weights.size
    order = np.argsort(source, kind="stable")
    per = np.bincount(source, minlength=k)
    rank = np.arange(n) - np.repeat(np.cumsum(per) - per, per)
    d = source[order]
    after = (rank + 1) - weights[d] * (order + 1)
    before = rank - weights[d] * order
    end = per - weights * n
    return float(max(after.max(), end.max())), float(min(before.min(), end.min()))


def boundary_extremes(
    counts: npt.NDArray[np.int64], ts: npt.NDArray[np.int64], weights: npt.NDArray[np.float64]
) -> tuple[float, float]:
    dev = counts - ts[:, None] * weights[None, :]
    return float(dev.max()), float(dev.min())


def batch_counts(
    source: npt.NDArray[Any], k: int, g: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Counts per source at every global-batch boundary ``g, 2g, ...`` of a source sequence."""
    rows = source.size // g
    cells = np.repeat(np.arange(rows) * k, g) + source[: rows * g]
    per_batch = np.bincount(cells, minlength=rows * k).reshape(rows, k)
    return np.cumsum(per_batch, axis=0), np.arange(1, rows + 1, dtype=np.int64) * g


def exactness(name: str, n: int, helpers: ModuleType | None) -> dict[str, Any]:
    from dataorder.llm.blend import BlendedSampler

    weights = weight_set(name)
    k = len(weights)
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    sampler = BlendedSampler([10**6] * k, weights, GBS, 0, 1, GBS, seed=SEED, total_samples=n)
    ts = np.arange(0, n + 1, GBS, dtype=np.int64)
    ours_counts = sampler.order.mixture.counts_at(ts)
    out: dict[str, Any] = {"K": k, "bound": float(sampler.order.mixture.deviation_bounds(0).max())}
    out["ours_batch"] = boundary_extremes(ours_counts, ts, w)
    chunk = 2**20
    source = np.concatenate(
        [
            sampler.order.draws(np.arange(a, min(n, a + chunk), dtype=np.int64))[0]
            for a in range(0, n, chunk)
        ]
    )
    out["ours_every"] = prefix_extremes(source, w)
    if helpers is not None:
        greedy = greedy_cpp(helpers, weights, n).astype(np.int64)
        probe = min(n, 20_000)
        out["cpp_checked"] = bool(np.array_equal(greedy_python(weights, probe), greedy[:probe]))
    else:
        greedy = greedy_python(weights, n).astype(np.int64)
    counts, gts = batch_counts(greedy, k, GBS)
    out["greedy_batch"] = boundary_extremes(counts, gts, w)
    out["greedy_every"] = prefix_extremes(greedy, w)
    return out


# -- measurements in a fresh interpreter --------------------------------------------------------


def child(what: str, k: int, n: int, helpers_dir: str | None) -> dict[str, Any]:
    """One measurement in this (fresh) process; see the module docstring."""
    import dataorder.llm.blend  # noqa: F401  (imports before the RSS baseline)

    if what in ("first", "resume", "mem"):
        return _child_first(what, k)
    if what == "steady":
        return _child_steady(k, n)
    if what == "megatron":
        return _child_megatron(k, n, helpers_dir)
    raise ValueError(what)


def _child_first(what: str, k: int) -> dict[str, Any]:
    from dataorder.llm.blend import BlendedSampler

    weights, sizes = weight_set(f"dirichlet-{k}"), source_sizes(k)
    consumed = (TOTAL // 2) // GBS * GBS if what == "resume" else 0
    rss0 = _rss_bytes()
    if what == "mem":
        tracemalloc.start()
    t0 = time.perf_counter()
    sampler = BlendedSampler(
        sizes,
        weights,
        MBS,
        RANK,
        DP,
        GBS,
        seed=SEED,
        total_samples=TOTAL,
        consumed_samples=consumed,
    )
    t1 = time.perf_counter()
    first = next(iter(sampler))
    t2 = time.perf_counter()
    out: dict[str, Any] = {
        "build_s": t1 - t0,
        "first_s": t2 - t1,
        "total_s": t2 - t0,
        "first": first,
    }
    out["rss_extra"] = _peak_rss_bytes() - rss0
    if what == "mem":
        out["tracemalloc_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    out["state_bytes"] = len(json.dumps(sampler.state_dict(), separators=(",", ":")))
    return out


def _child_steady(k: int, batches: int) -> dict[str, Any]:
    """Seconds per global batch, amortised over whole chunks (a pass evaluates its steps in
    chunks that double up to ``_chunk_steps()``; the timing starts at a full-size chunk)."""
    from dataorder.llm.blend import BlendedSampler

    weights, sizes = weight_set(f"dirichlet-{k}"), source_sizes(k)
    start = (TOTAL // 2) // GBS * GBS
    out: dict[str, Any] = {}
    for label, mbs, dp in (("whole", GBS, 1), ("rank", GBS // DP, DP)):
        sampler = BlendedSampler(
            sizes,
            weights,
            mbs,
            dp - 1,
            dp,
            GBS,
            seed=SEED,
            total_samples=TOTAL,
            consumed_samples=start,
        )
        chunk = sampler._chunk_steps()
        warm, size = 0, 1
        while size < chunk:  # the doubling chunks before the first full-size one
            warm, size = warm + size, size * 2
        timed = max(1, -(-batches // chunk)) * chunk
        it = iter(sampler)
        for _ in range(warm):
            next(it)
        t0 = time.perf_counter()
        for _ in range(timed):
            next(it)
        out[label] = (time.perf_counter() - t0) / timed
    return out


def _child_megatron(k: int, n: int, helpers_dir: str | None) -> dict[str, Any]:
    helpers = load_helpers(helpers_dir)
    weights = weight_set(f"dirichlet-{k}")
    rss0 = _rss_bytes()
    t0 = time.perf_counter()
    if helpers is not None:
        greedy_cpp(helpers, weights, n)
    else:
        greedy_python(weights, n)
    elapsed = time.perf_counter() - t0
    return {"s": elapsed, "rss_extra": _peak_rss_bytes() - rss0, "cpp": helpers is not None}


def run(args: list[str], timeout: float) -> dict[str, Any] | None:
    cmd = [sys.executable, __file__, "--child", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        return None
    return dict(json.loads(proc.stdout))


# -- formatting ---------------------------------------------------------------------------------


def _t(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    return f"{s * 1e3:.2f} ms" if s < 1 else (f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min")


def _b(b: float) -> str:
    b = max(0.0, b)
    return f"{b / 2**20:.1f} MB" if b < 2**30 else f"{b / 2**30:.2f} GB"


def _dev(pair: tuple[float, float]) -> str:
    return f"+{pair[0]:.3f} / {pair[1]:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, in process (CI)")
    parser.add_argument(
        "--megatron-helpers",
        default=os.environ.get("MEGATRON_HELPERS_DIR"),
        help="folder holding a compiled megatron-core helpers_cpp for this Python",
    )
    parser.add_argument(
        "--megatron-n",
        type=int,
        default=None,
        help="samples of the timed greedy build (default 10**8 for K <= 100, 10**7 for K = 1000)",
    )
    parser.add_argument("--exact-n", type=int, default=10**7, help="samples of the exactness table")
    parser.add_argument("--batches", type=int, default=512, help="global batches timed in table 2")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, k, n, helpers_dir = args.child
        print(json.dumps(child(what, int(k), int(n), helpers_dir if helpers_dir != "-" else None)))
        return
    helpers = load_helpers(args.megatron_helpers)
    ks = (10, 100) if args.smoke else (10, 100, 1000)
    exact_n = 20_000 if args.smoke else args.exact_n
    batches = 16 if args.smoke else args.batches
    helpers_arg = args.megatron_helpers or "-"

    def measure(what: str, k: int, n: int) -> dict[str, Any] | None:
        if args.smoke:  # in process: a few seconds in all, memory figures not meaningful
            return child(what, k, n, args.megatron_helpers)
        return run([what, str(k), str(n), helpers_arg], args.timeout)

    print(f"# BlendedSampler vs Megatron-LM's blend index{' (smoke)' if args.smoke else ''}\n")
    print(
        f"micro_batch_size={MBS}, data_parallel_size={DP}, rank {RANK}, global_batch_size={GBS}, "
        f"total_samples={TOTAL:.0e}; Dirichlet(1) weights; Megatron: "
        f"{'compiled helpers_cpp' if helpers else 'pure-Python greedy (no helpers_cpp found)'}\n"
    )
    print("## 1. First batch at 10^9 samples\n")
    print(
        "| K | ours: construct | ours: first micro-batch | ours: total | ours: resume at 5e8 "
        "| ours: extra RSS | ours: tracemalloc peak | state | Megatron build (measured) "
        "| Megatron at 10^9 (extrapolated) | Megatron index at 10^9 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for k in ks:
        first, resume = measure("first", k, 0), measure("resume", k, 0)
        mem = None if args.smoke else measure("mem", k, 0)
        if args.smoke:
            mega_n = 2_000
        elif args.megatron_n:
            mega_n = args.megatron_n
        elif helpers is None:
            mega_n = 10**5
        else:
            mega_n = 10**8 if k <= 100 else 10**7
        mega = measure("megatron", k, mega_n)
        cells = [str(k)]
        if first is None:
            cells += ["failed"] * 3
        else:
            cells += [_t(first["build_s"]), _t(first["first_s"]), _t(first["total_s"])]
        cells.append("failed" if resume is None else _t(resume["total_s"]))
        cells.append("-" if args.smoke or first is None else _b(first["rss_extra"]))
        cells.append("-" if mem is None else _b(mem["tracemalloc_peak"]))
        cells.append("-" if first is None else f"{first['state_bytes']} B")
        if mega is None:
            cells += ["failed"] * 2
        else:
            cells.append(f"{_t(mega['s'])} for {mega_n:.0e}, {_b(mega['rss_extra'])}")
            cells.append(_t(mega["s"] * TOTAL / mega_n))
        cells.append(_b(10 * TOTAL))
        print("| " + " | ".join(cells) + " |", flush=True)

    print(f"\n## 2. Per global batch (global_batch_size={GBS}, steady state, at 5e8)\n")
    print(
        f"| K | whole global batch (all {DP} ranks' samples, one process) "
        f"| one rank's micro-batch of {GBS // DP} |"
    )
    print("|---|---|---|")
    for k in ks:
        steady = measure("steady", k, batches)
        if steady is None:
            print(f"| {k} | failed | failed |")
        else:
            print(f"| {k} | {_t(steady['whole'])} | {_t(steady['rank'])} |", flush=True)

    print(f"\n## 3. Exactness over {exact_n:.0e} samples (deviation in samples, + / -)\n")
    print(
        "| weights | K | ours: proven bound | ours: at batch boundaries "
        "| Megatron greedy: at batch boundaries | ours: every prefix (slots shuffled) "
        "| Megatron greedy: every prefix |"
    )
    print("|---|---|---|---|---|---|---|")
    names = (
        ("dirichlet-10", "0.001/0.999")
        if args.smoke
        else (
            "dirichlet-10",
            "dirichlet-100",
            "dirichlet-1000",
            "geometric-30",
            "0.999+999x1e-6",
            "0.5/0.3/0.2+10x1e-6",
            "0.001/0.999",
        )
    )
    checked = []
    for name in names:
        row = exactness(name, exact_n, helpers)
        checked.append(row.get("cpp_checked"))
        print(
            f"| {name} | {row['K']} | {row['bound']:.3f} | {_dev(row['ours_batch'])} "
            f"| {_dev(row['greedy_batch'])} | {_dev(row['ours_every'])} "
            f"| {_dev(row['greedy_every'])} |",
            flush=True,
        )
    if helpers is not None:
        print(
            "\nGreedy re-implementation == compiled helpers_cpp on the first 2e4 samples: "
            f"{all(checked)}"
        )
    print(
        f"\n{platform.platform()}, Python {platform.python_version()}, "
        f"numpy {np.__version__}, {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
