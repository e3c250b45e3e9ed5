"""Benchmarks of resolution bucketing: assignment speed, crop loss of bucket sets, scan speed.

Prints markdown tables; never asserts a timing. ``--smoke`` runs every section on tiny inputs
(what CI runs).

    python benchmarks/bench_buckets.py            # the figures quoted in the docs
    python benchmarks/bench_buckets.py --smoke    # seconds, for CI

Sections:

1. Assignment throughput for 10**7 image sizes: ``MultiTierBucketCalculator.assign`` (one core,
   numpy) against a per-image Python loop over ``get_bucket_for_image`` on a subset,
   extrapolated.
2. Crop loss on aspect ratios drawn log-uniformly from 1/3 to 3: our default presets, NeMo's
   presets (``compat="nemo"``, with NeMo's own assignment rule) and the ~40-entry SDXL table
   (nearest aspect ratio), with the pixel-budget adherence of each set.
3. Header scan throughput on a few thousand small JPEG and PNG files in a temporary directory,
   and manifest write/read throughput.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dataorder.diffusion.calculators.image import PRESETS, MultiTierBucketCalculator
from dataorder.diffusion.sampler.stats import crop_loss
from dataorder.diffusion.scan.images import (
    build_manifest,
    read_manifest,
    scan_images,
    write_manifest,
)

# SDXL's training resolutions (Podell et al. 2023, appendix I): width x height, landscape half;
# the portrait half is the transpose, plus 1024x1024. 41 buckets at a 1024**2 budget.
SDXL_LANDSCAPE = [
    (2048, 512), (1984, 512), (1920, 512), (1856, 512), (1792, 576), (1728, 576), (1664, 576),
    (1600, 640), (1536, 640), (1472, 704), (1408, 704), (1344, 704), (1344, 768), (1280, 768),
    (1216, 832), (1152, 832), (1152, 896), (1088, 896), (1088, 960), (1024, 960),
]  # fmt: skip
SDXL = sorted(
    [*SDXL_LANDSCAPE, (1024, 1024), *[(h, w) for w, h in SDXL_LANDSCAPE]],
    key=lambda wh: wh[0] / wh[1],
)


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """Smallest wall time of ``repeats`` calls, in seconds."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def log_uniform_sizes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` image sizes: aspect ratio log-uniform in [1/3, 3], height log-uniform 256..4096."""
    rng = np.random.default_rng(seed)
    h = np.exp(rng.uniform(math.log(256), math.log(4096), n)).astype(np.int64)
    ar = np.exp(rng.uniform(-math.log(3), math.log(3), n))
    w = np.maximum(1, np.rint(h * ar)).astype(np.int64)
    return w, h


def table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" ---: " for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def bench_assign(n: int, subset: int) -> str:
    w, h = log_uniform_sizes(n, seed=1)
    rows = []
    preset = MultiTierBucketCalculator.from_preset
    modes: list[tuple[str, MultiTierBucketCalculator]] = [
        ("default 1024p", preset("1024p")),
        ("default 1024p, no_upscale", preset("1024p", no_upscale=True)),
        ("nemo 1024p", preset("1024p", compat="nemo")),
    ]
    for name, calc in modes:
        calc.assign(w[:1000], h[:1000])  # warm the lazily built lookups
        vec = best_of(3, lambda c=calc: c.assign(w, h))  # type: ignore[misc]
        ws, hs = w[:subset].tolist(), h[:subset].tolist()

        def loop(
            c: MultiTierBucketCalculator = calc, ws: list[int] = ws, hs: list[int] = hs
        ) -> None:
            for a, b in zip(ws, hs, strict=True):
                c.get_bucket_for_image(a, b)

        per_image = best_of(1, loop) / subset
        upscaled = ""
        if calc.no_upscale:
            ids = calc.assign(w, h)
            res = calc.resolutions
            upscaled = f" ({np.mean((res[ids, 0] > w) | (res[ids, 1] > h)):.0%} upscaled)"
        rows.append(
            [
                name + upscaled,
                f"{vec:.3f}",
                f"{n / vec / 1e6:.1f}",
                f"{per_image * n:.1f}",
                f"{1 / per_image / 1e3:.1f}",
                f"{per_image * n / vec:.0f}x",
            ]
        )
    head = [
        "rule",
        f"assign {n:,} s",
        "M images/s",
        "per-image loop s (extrapolated)",
        "k images/s",
        "speed-up",
    ]
    return table(head, rows)


def crop_row(name: str, w: np.ndarray, h: np.ndarray, res: np.ndarray, ids: np.ndarray,
             budget: int) -> list[str]:  # fmt: skip
    loss = crop_loss(w, h, res[ids, 0], res[ids, 1])
    share = res[:, 0] * res[:, 1] / budget
    return [
        name,
        str(len(res)),
        f"{100 * loss.mean():.1f}",
        f"{100 * np.percentile(loss, 95):.1f}",
        f"{100 * np.mean(loss > 0.1):.1f}",
        f"{np.abs(share[ids] - 1).mean():.3f}",
        f"{share.min():.3f}",
        f"{max(0.0, share.max() - 1):.3f}",
    ]


def bench_crop(n: int) -> str:
    w, h = log_uniform_sizes(n, seed=2)
    rows = []
    for compat, q in (("default", 64), ("default", 16), ("nemo", 64)):
        for preset, budget in PRESETS.items():
            calc = MultiTierBucketCalculator.from_preset(preset, q, compat=compat)
            name = f"{'ours' if compat == 'default' else 'NeMo'} {preset} q={q}"
            rows.append(crop_row(name, w, h, calc.resolutions, calc.assign(w, h), budget))
    sdxl = np.array(SDXL, dtype=np.int64)
    la = np.log(sdxl[:, 0] / sdxl[:, 1])
    mids = (la[:-1] + la[1:]) / 2
    ids = np.searchsorted(mids, np.log(w / h))  # nearest aspect ratio in log space
    rows.append(crop_row("SDXL table (nearest log AR)", w, h, sdxl, ids, 1024 * 1024))
    head = [
        "bucket set",
        "buckets",
        "mean crop %",
        "p95 crop %",
        "% > 10 %",
        "mean abs(px/budget - 1)",
        "min px/budget",
        "max over budget",
    ]
    return table(head, rows)


def make_images(root: Path, count: int, seed: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(seed)
    for i in range(count):
        w, h = (int(v) for v in rng.integers(64, 512, 2))
        arr = rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
        img = Image.fromarray(arr).resize((w, h))
        sub = root / f"d{i % 16:02d}"
        sub.mkdir(exist_ok=True)
        if i % 2:
            img.save(sub / f"img {i:05d}.png", optimize=False, compress_level=1)
        else:
            img.save(sub / f"img {i:05d}.jpg", quality=85)


def bench_scan(count: int, rows_io: int) -> str:
    calc = MultiTierBucketCalculator.from_preset("512p")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "images"
        root.mkdir()
        make_images(root, count, seed=3)
        size_mb = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6
        scan_images(root, calc, progress=False)  # page cache warm, plugins registered
        for workers in (None, 2, 1):
            label = "default" if workers is None else str(workers)
            t = best_of(3, lambda k=workers: scan_images(root, calc, workers=k, progress=False))  # type: ignore[misc]
            rows.append([f"scan_images, workers={label}", f"{count:,}", f"{t:.3f}",
                         f"{count / t:,.0f}"])  # fmt: skip
        w, h = log_uniform_sizes(rows_io, seed=4)
        paths = [f"shard-{i // 10000:04d}/image, number {i:08d}.jpg" for i in range(rows_io)]
        manifest = build_manifest(paths, w, h, calc)
        for suffix in (".tsv", ".tsv.gz"):
            out = os.path.join(tmp, "manifest" + suffix)
            t_w = best_of(1, lambda o=out: write_manifest(manifest, o))  # type: ignore[misc]
            t_r = best_of(1, lambda o=out: read_manifest(o))  # type: ignore[misc]
            mb = os.path.getsize(out) / 1e6
            rows.append([f"write_manifest {suffix} ({mb:.0f} MB)", f"{rows_io:,}", f"{t_w:.3f}",
                         f"{rows_io / t_w:,.0f}"])  # fmt: skip
            rows.append([f"read_manifest {suffix}", f"{rows_io:,}", f"{t_r:.3f}",
                         f"{rows_io / t_r:,.0f}"])  # fmt: skip
    note = (
        f"\n\n{count:,} files ({size_mb:.1f} MB, half JPEG, half PNG, 64-511 px a side) on local "
        f"disk, page cache warm; {os.cpu_count()} CPUs."
    )
    return table(["operation", "items", "s (best of 3)", "items/s"], rows) + note


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="tiny inputs, for CI")
    args = parser.parse_args(argv)
    n, subset, crop_n, files, io_rows = (
        (100_000, 2_000, 20_000, 200, 10_000)
        if args.smoke
        else (10_000_000, 20_000, 200_000, 3_000, 1_000_000)
    )
    print(f"# bench_buckets{' (smoke)' if args.smoke else ''}\n")
    print(f"Python {sys.version.split()[0]}, numpy {np.__version__}\n")
    print("## 1. Bucket assignment (one core)\n")
    print(bench_assign(n, subset) + "\n")
    print("## 2. Crop loss, aspect ratio log-uniform in [1/3, 3]\n")
    print(bench_crop(crop_n) + "\n")
    print("## 3. Header scan and manifest I/O\n")
    print(bench_scan(files, io_rows) + "\n")


if __name__ == "__main__":
    main()
