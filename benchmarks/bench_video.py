"""Benchmarks of video bucketing: assignment speed, header-scan rate, waste, crop and trim loss.

Prints markdown tables; never asserts a timing. ``--smoke`` runs every section on tiny inputs
(what CI runs).

    python benchmarks/bench_video.py            # the figures quoted in the docs
    python benchmarks/bench_video.py --smoke    # seconds, for CI

Sections:

1. Assignment throughput of ``VideoBucketCalculator.assign`` (one core, numpy) on a synthetic
   camera population, against two per-clip Python loops run once on a subset: our exact
   one-clip reference, and a loop in the style of Open-Sora's bucket choice
   (``../shared/reference/video_peers.md`` B1; our own code): a fresh
   ``numpy.random.default_rng`` per clip, frame counts walked from long to short with a keep
   probability, the closest aspect ratio in floats, a minimum-area check.
2. Header-scan rate of ``scan_videos`` on small clips generated with PyAV (skipped without it),
   by thread count, and what FFmpeg's probing decode costs on a 720p H.264 clip with B-frames
   (``av.open`` without and with ``skip_frame=all``).
3. Waste, crop and trim on the synthetic population (``src/dataorder/data/generate_clips.py``:
   camera aspect ratios, log-normal durations) for the 8x2 and 64x1 layouts (ranks x per-rank
   batch at the full token budget): buckets used, clips too short or too small, crop loss in
   space, trim loss in time, and the samples a lock-step sampler drops (``drop_last=True``) or
   pads (``drop_last=False``), computed with the sampler's own partition
   (``dataorder.core.partition.plan_segments``), with a fixed batch and with cost-model batches.
4. Fitted sets (``VideoBucketCalculator.fit_to_data``) beside the preset on the same population
   (``generate_clips.clip_population``, frame counts at 16 fps) and layouts, with cost-model
   batches: crop, trim, samples dropped or padded by the sampler's own partition, steps, the
   spread of per-step cost, the share of the data's content an epoch trains, and the fit's
   time; the curve of loss against ``max_waste``; the fitted set on clips it was not fitted to;
   the time to fit 10^6 clips, of that population and of another (``device_population``:
   phone, camera and cinema aspect ratios alike, long sides 640-3840, log-normal durations at
   16 fps).

    python benchmarks/bench_video.py --fit-time   # section 4.5 only (10^6 clips, 64 x 1)
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import dataorder
from dataorder.core.partition import plan_segments
from dataorder.diffusion.buckets.cost import CostModel
from dataorder.diffusion.calculators.video import (
    TOO_SHORT,
    TOO_SMALL,
    VideoBucketCalculator,
    resample_frame_counts,
    trim_loss,
)
from dataorder.diffusion.sampler.stats import bucket_stats, crop_loss

Ints = npt.NDArray[np.int64]
CAMERA_RATIOS = ["1:1", "4:3", "3:2", "16:9", "2:1", "7:3"]


def _clip_population_module() -> Any:
    """``dataorder/data/generate_clips.py``: the one definition of the synthetic population."""
    path = Path(dataorder.__file__).resolve().parent / "data" / "generate_clips.py"
    spec = importlib.util.spec_from_file_location("generate_clips", path)
    if spec is None or spec.loader is None:  # pragma: no cover - the file ships with the package
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _clip_population_module()


def population(n: int, seed: int) -> tuple[Ints, Ints, Ints, npt.NDArray[np.float64]]:
    """``n`` synthetic clips: widths, heights, native frame counts, frame rates."""
    rng = np.random.Generator(np.random.PCG64(seed))
    w, h, f, rate_index = GEN.make_clip_sizes(rng, n)
    rates = np.array([float(r) for r, _ in GEN.FRAME_RATES])[rate_index]
    return w, h, f, rates


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """Smallest wall time of ``repeats`` calls, in seconds."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# -- 1. assignment throughput ---------------------------------------------------------------------


def open_sora_style_loop(
    calc: VideoBucketCalculator, w: list[int], h: list[int], f: list[int], keep_prob: float = 1.0
) -> list[int]:
    """Per clip: its own RNG, frame counts long to short kept with ``keep_prob``, the closest
    aspect ratio in floats, and the clip's area at least 0.8 of the bucket's (video_peers B1)."""
    by_frames: dict[int, list[tuple[float, int, int]]] = {}
    for b in calc.get_all_buckets():
        by_frames.setdefault(b["frames"], []).append((b["aspect_ratio"], b["pixels"], b["id"]))
    longest_first = sorted(by_frames, reverse=True)
    k = len(calc)
    out = []
    for i, (cw, ch, cf) in enumerate(zip(w, h, f, strict=True)):
        rng = np.random.default_rng(i * k)
        chosen = TOO_SHORT
        for g in longest_first:
            if cf >= g and rng.random() < keep_prob:
                ar = cw / ch
                _, pixels, bid = min(by_frames[g], key=lambda t: abs(t[0] - ar))
                chosen = bid if cw * ch >= 0.8 * pixels else TOO_SMALL
                break
        out.append(chosen)
    return out


def bench_assign(n: int, subset: int) -> str:
    w, h, f, _ = population(n, seed=1)
    wl, hl, fl = w[:subset].tolist(), h[:subset].tolist(), f[:subset].tolist()
    preset = VideoBucketCalculator.from_preset
    rows = []
    for label, calc in (
        ("wan2.1-480p", preset("wan2.1-480p")),
        ("wan2.1-480p, frames to 257 (tiers)", preset("wan2.1-480p", max_frames=257)),
        ("wan2.1-720p, max_upscale=None", preset("wan2.1-720p", max_upscale=None)),
        ("hunyuanvideo-720p", preset("hunyuanvideo-720p")),
        ("ltx-video", preset("ltx-video")),
    ):
        calc.assign(w[:1000], h[:1000], f[:1000])  # warm: first-touch page faults
        t_vec = best_of(5, lambda c=calc: c.assign(w, h, f))  # type: ignore[misc]
        ids = calc.assign(w[:subset], h[:subset], f[:subset])

        start = time.perf_counter()
        ref = [calc.get_bucket_id_for_video(a, b, g) for a, b, g in zip(wl, hl, fl, strict=True)]
        t_ref = time.perf_counter() - start
        if ids.tolist() != ref:  # the vectorised answers must be the reference's
            raise RuntimeError(f"{label}: assign() differs from get_bucket_id_for_video")
        t_os = best_of(1, lambda c=calc: open_sora_style_loop(c, wl, hl, fl))  # type: ignore[misc]
        rows.append(
            [
                label,
                f"{len(calc):,}",
                f"{n / t_vec / 1e6:.1f} M/s",
                f"{subset / t_ref / 1e3:.0f} k/s",
                f"{subset / t_os / 1e3:.0f} k/s ({t_os / subset * 1e6:.1f} us/clip)",
                f"{(n / t_vec) / (subset / t_os):,.0f}x",
            ]
        )
    note = (
        f"\n\n`assign()` on {n:,} clips (best of 5); the per-clip loops ran once on {subset:,} "
        "clips. The last column is the ratio of `assign()` to the Open-Sora-style loop."
    )
    return (
        table(
            [
                "calculator",
                "buckets",
                "assign()",
                "reference loop",
                "Open-Sora-style loop",
                "ratio",
            ],
            rows,
        )
        + note
    )


# -- 2. header scan ------------------------------------------------------------------------------


def _write_clip(
    path: str,
    codec: str,
    size: tuple[int, int],
    frames: int,
    fps: int,
    options: dict[str, str] | None = None,
) -> None:
    import av

    rng = np.random.default_rng(size[0] * 7 + frames)
    base = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    with av.open(path, "w") as c:
        stream = c.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        if options:
            stream.options = options
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.roll(base, 5 * i, axis=1), format="rgb24")
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)


def bench_scan(count: int, big_frames: int) -> str:
    try:
        import av
    except ImportError:
        return "PyAV is not installed (pip install 'dataorder[video]'): section skipped."
    from dataorder.diffusion.scan.videos import read_video_info, scan_videos

    av.logging.set_level(None)
    kinds = [("mpeg4", ".mp4"), ("libx264", ".mp4"), ("libvpx-vp9", ".webm"), ("ffv1", ".mkv")]
    sizes = [(64, 36), (96, 54), (90, 160), (120, 90), (128, 128), (160, 90), (210, 90)]
    calc = VideoBucketCalculator.from_preset("wan2.1-480p")
    rng = np.random.default_rng(3)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        for i in range(count):
            codec, ext = kinds[i % len(kinds)]
            size = sizes[int(rng.integers(len(sizes)))]
            frames = int(rng.integers(1, 49))
            path = os.path.join(tmp, f"clip_{i:05d}_{codec}{ext}")
            _write_clip(path, codec, size, frames, int(rng.choice([24, 25, 30, 60])))
        made = time.perf_counter() - start
        paths = sorted(str(p) for p in Path(tmp).iterdir())
        for workers in (1, 2, 4):
            scan_videos(paths, calc, workers=workers, progress=False)  # warm the page cache
            t = best_of(3, lambda k=workers: scan_videos(paths, calc, workers=k, progress=False))  # type: ignore[misc]
            scan = scan_videos(paths, calc, workers=workers, progress=False)
            rows.append(
                [
                    str(workers),
                    f"{len(paths):,}",
                    f"{len(scan):,}",
                    f"{len(scan.errors)}",
                    f"{len(paths) / t:,.0f} files/s",
                ]
            )
        big = os.path.join(tmp, "noise_720p_bframes.mp4")
        _write_clip(big, "libx264", (1280, 720), big_frames, 24, {"preset": "ultrafast", "bf": "3"})

        def plain_open() -> None:
            with av.open(big) as c:
                _ = c.streams.video[0].codec_context.width

        t_plain = best_of(5, plain_open)
        t_ours = best_of(5, lambda: read_video_info(big))
    note = (
        f"\n\n{count:,} clips (mpeg4 and H.264 in mp4, VP9 in WebM, FFV1 in Matroska; 36 to "
        f"210 px, 1 to 48 frames) written in {made:.1f} s to a temporary folder; page cache "
        f"warm; {os.cpu_count()} CPUs; best of 3 scans.\n\n"
        f"720p H.264 with B-frames, {big_frames} frames: `av.open()` {t_plain * 1e3:.1f} ms "
        f"(FFmpeg's probe decodes frames), `read_video_info` {t_ours * 1e3:.1f} ms "
        f"(`skip_frame=all`): {t_plain / t_ours:.1f}x."
    )
    return table(["workers", "files", "read", "errors", "rate"], rows) + note


# -- 3. waste, crop and trim ----------------------------------------------------------------------

LAYOUTS = ((8, 2), (64, 1))


def waste_row(
    label: str,
    calc: VideoBucketCalculator,
    w: Ints,
    h: Ints,
    f: Ints,
    cost: CostModel,
) -> list[str]:
    ids = calc.assign(w, h, f)
    ok = ids >= 0
    res = calc.resolutions[ids[ok]]
    crop = crop_loss(w[ok], h[ok], res[:, 0], res[:, 1])
    bucket_frames = calc.bucket_frames[ids[ok]]
    trim = trim_loss(f[ok], bucket_frames)
    longest = calc.frame_counts[-1]
    # the share cut by the frame-count rule alone (the cut above the longest count excluded)
    granular = trim_loss(np.minimum(f[ok], longest), bucket_frames)
    upscaled = np.maximum(res[:, 0] / w[ok], res[:, 1] / h[ok]) > 1
    counts = np.bincount(ids[ok], minlength=len(calc)).astype(np.int64)
    used = counts > 0
    n = int(counts.sum())
    cells = []
    for ranks, per_rank in LAYOUTS:
        # cost-model batches, clamped to 16x: a 1-frame bucket would otherwise ask for ~100
        with_cost = VideoBucketCalculator.from_config(
            {**calc.config(), "cost_model": cost.config(), "max_batch_size": 16 * per_rank}
        )
        drops = []
        for batch in (
            np.full(len(calc), per_rank, dtype=np.int64),
            with_cost.batch_sizes(per_rank),
        ):
            plan = plan_segments(counts[used], per_rank=batch[used], dp_size=ranks, tail="drop")
            drops.append(f"{plan.dropped / n:.1%}")
        # drop_last=False: one smaller last global batch per bucket, whatever the batch size
        shrink = plan_segments(counts[used], per_rank=per_rank, dp_size=ranks, tail="shrink")
        cells += [" / ".join(drops), f"{shrink.padded / n:.1%}"]
    return [
        label,
        f"{int(used.sum())} / {len(calc)}",
        f"{np.mean(ids == TOO_SHORT):.2%}",
        f"{np.mean(ids == TOO_SMALL):.1%}",
        f"{crop.mean():.2%} / {np.percentile(crop, 95):.1%}",
        f"{trim.mean():.1%} / {granular.mean():.1%}",
        f"{upscaled.mean():.1%}",
        *cells,
    ]


def bench_waste(sizes: tuple[int, ...]) -> str:
    cost = CostModel.for_transformer(5120, 13824)  # Wan 2.1 14B
    preset = VideoBucketCalculator.from_preset
    variants = (
        ("wan2.1-480p (image aspect grid, 4k+1 to 81)", preset("wan2.1-480p")),
        ("wan2.1-480p, camera ratios only", preset("wan2.1-480p", aspect_ratios=CAMERA_RATIOS)),
        (
            "wan2.1-480p, camera ratios, frames 16k+1",
            preset("wan2.1-480p", aspect_ratios=CAMERA_RATIOS, frame_step=16),
        ),
        ("wan2.1-480p, max_upscale=1", preset("wan2.1-480p", max_upscale=1)),
        ("wan2.1-720p", preset("wan2.1-720p")),
    )
    headers = [
        "bucket set",
        "used / buckets",
        "too short",
        "too small",
        "crop mean / p95",
        "trim mean / rule only",
        "upscaled",
    ]
    for r, b in LAYOUTS:
        headers += [f"{r}x{b} dropped, fixed / cost", f"{r}x{b} padded"]
    parts = []
    for n in sizes:
        w, h, native, rates = population(n, seed=2)
        for label, frames in (
            ("resampled to 16 fps (Wan's rate)", resample_frame_counts(native, rates, 16)),
            ("at native fps", native),
        ):
            rows = [waste_row(name, calc, w, h, frames, cost) for name, calc in variants]
            parts.append(f"### {n:,} clips, frame counts {label}\n\n" + table(headers, rows))
    note = (
        "\n\nLayouts are ranks x per-rank batch at the full budget. *dropped* "
        "(`drop_last=True`): samples outside whole global batches, with that batch in every "
        "bucket (*fixed*) or with `CostModel.for_transformer(5120, 13824)` (Wan 2.1 14B) batches "
        "from the calculator, clamped to 16x (*cost*). *padded* (`drop_last=False`): repeated "
        "samples in each bucket's last, smaller global batch (fewer than the number of ranks per "
        "bucket, whatever the batch size). Both are `plan_segments`, the sampler's partition, as "
        "a share of the clips that have a bucket. *trim rule only*: the cut the frame-count rule "
        "makes once clips longer than the longest bucket are cut to it."
    )
    return "\n\n".join(parts) + note


# -- 4. fitted sets ------------------------------------------------------------------------------

FIT_LAYOUTS = ((8, 2), (64, 1), (256, 1))
_LEAST = re.compile(r"\((\d+) of n=(\d+) clips")


def fit_base() -> VideoBucketCalculator:
    """wan2.1-480p with Wan 2.1 14B's cost model (default clamp: 4x the full-budget batch)."""
    return VideoBucketCalculator.from_preset(
        "wan2.1-480p", cost_model=CostModel.for_transformer(5120, 13824)
    )


def measure(
    calc: VideoBucketCalculator, w: Ints, h: Ints, f: Ints, ranks: int, per_rank: int, drop: bool
) -> dict[str, float]:
    """What the bucket sampler's own partition does with ``calc`` on these clips."""
    ids = calc.assign(w, h, f)
    ok = ids >= 0
    stats = bucket_stats(w[ok], h[ok], calc, frames=f[ok], num_replicas=ranks,
                         batch_size=calc.batch_sizes(per_rank), drop_last=drop)  # fmt: skip
    o = stats.overall
    n = o["images"]
    bw, bh = calc.resolutions[ids[ok]].T
    kept = (1 - crop_loss(w[ok], h[ok], bw, bh)) * (
        1 - trim_loss(f[ok], calc.bucket_frames[ids[ok]])
    )
    return {
        "used": float((stats.counts > 0).sum()),
        "crop": o["mean_crop_loss"],
        "trim": o["mean_trim_loss"],
        "dropped": o["dropped"] / n,
        "padded": o["padded"] / n,
        "steps": o["batches"],
        "spread": o["step_cost_max_over_mean"],
        "content": (1 - o["dropped"] / n) * float(kept.mean()),
    }


def fit_or_least(
    w: Ints, h: Ints, f: Ints, base: VideoBucketCalculator, g: Any, drop: bool, budget: float
) -> tuple[Any, float, str]:
    """The fit at ``budget``, or at the least waste it reaches when that is above; its time."""
    from dataorder.diffusion.fit.video import fit_video_to_data

    start = time.perf_counter()
    try:
        fit = fit_video_to_data(w, h, f, base, global_batch_size=g, max_waste=budget,
                                drop_last=drop)  # fmt: skip
        return fit, time.perf_counter() - start, ""
    except ValueError as exc:
        found = _LEAST.search(str(exc))
        if found is None:
            raise
        least = int(found.group(1)) / int(found.group(2))
        fit = fit_video_to_data(w, h, f, base, global_batch_size=g, max_waste=least,
                                drop_last=drop)  # fmt: skip
        note = f"{budget:.0%} impossible: at the least, {least:.2%}"
        return fit, time.perf_counter() - start, note


def _pct(x: float, digits: int = 2) -> str:
    return f"{100 * x:.{digits}f}"


def fitted_row(label: str, m: dict[str, float], extra: list[str]) -> list[str]:
    return [
        label,
        f"{int(m['used'])}",
        _pct(m["crop"]),
        _pct(m["trim"]),
        _pct(m["dropped"]),
        _pct(m["padded"]),
        f"{int(m['steps']):,}",
        f"{m['spread']:.2f}",
        _pct(m["content"], 1),
        *extra,
    ]


def bench_fitted(
    sizes: tuple[int, ...],
    curve: tuple[float, ...],
    timing_n: int,
    layouts: tuple[tuple[int, int], ...] = FIT_LAYOUTS,
) -> str:
    base = fit_base()
    parts = []
    headers = ["N", "R x b", "drop_last", "bucket set", "used", "crop %", "trim %", "dropped %",
               "padded %", "steps", "step cost max/mean", "content / epoch %", "fit s",
               "note"]  # fmt: skip
    rows = []
    for n in sizes:
        w, h, f = GEN.clip_population(n, seed=2)
        for ranks, per_rank in layouts:
            for drop in (True, False):
                # the sampler's own waste: drop_last drops n mod (b R) per bucket (b from the
                # cost model); without it the last batch shrinks and pads (-n) mod R
                g = base.global_batch_size(ranks, per_rank) if drop else ranks
                fit, seconds, note = fit_or_least(w, h, f, base, g, drop, 0.01)
                lead = [f"{n:,}", f"{ranks} x {per_rank}", str(drop)]
                preset = measure(base, w, h, f, ranks, per_rank, drop)
                rows.append([*lead, *fitted_row(f"wan2.1-480p ({len(base)})", preset, ["", ""])])
                mine = measure(fit.calculator(), w, h, f, ranks, per_rank, drop)
                label = f"**fitted ({fit.num_buckets})**"
                rows.append([*lead, *fitted_row(label, mine, [f"{seconds:.2f}", note])])
    parts.append(
        "### 4.1 Preset and fitted sets, max_waste = 1 %, cost-model batches\n\n"
        + table(headers, rows)
    )

    n = sizes[0]
    w, h, f = GEN.clip_population(n, seed=2)
    g = base.global_batch_size(64, 1)
    curve_rows = []
    for budget in curve:
        fit, seconds, note = fit_or_least(w, h, f, base, g, True, budget)
        m = measure(fit.calculator(), w, h, f, 64, 1, True)
        curve_rows.append([
            _pct(budget, 1), f"{fit.num_buckets}", _pct(fit.waste_share), _pct(m["crop"]),
            _pct(m["trim"]), _pct(m["crop"] + m["trim"]), _pct(m["content"], 1),
            f"{seconds:.2f}", note,
        ])  # fmt: skip
    preset = measure(base, w, h, f, 64, 1, True)
    curve_rows.append([
        "preset", f"{len(base)}", _pct(preset["dropped"]), _pct(preset["crop"]),
        _pct(preset["trim"]), _pct(preset["crop"] + preset["trim"]), _pct(preset["content"], 1),
        "", "",
    ])  # fmt: skip
    parts.append(
        f"### 4.2 Loss against max_waste, N = {n:,}, 64 x 1, drop_last\n\n"
        + table(
            [
                "max_waste %",
                "buckets",
                "dropped %",
                "crop %",
                "trim %",
                "crop + trim %",
                "content / epoch %",
                "fit s",
                "note",
            ],
            curve_rows,
        )
    )

    fit, _, note = fit_or_least(w, h, f, base, g, True, 0.01)
    calc = fit.calculator()
    held = []
    for seed in (3, 4)[: len(sizes) + 1]:
        for m_n in (n, 10 * n):
            hw, hh, hf = GEN.clip_population(m_n, seed=seed)
            for label, c in (
                ("wan2.1-480p", base),
                (f"fitted on seed 2 ({fit.num_buckets})", calc),
            ):
                m = measure(c, hw, hh, hf, 64, 1, True)
                held.append([str(seed), f"{m_n:,}", label, _pct(m["dropped"]), _pct(m["crop"]),
                             _pct(m["trim"]), _pct(m["content"], 1)])  # fmt: skip
    parts.append(
        f"### 4.3 The set fitted to N = {n:,} (seed 2, 64 x 1, drop_last) on clips it never saw\n\n"
        + table(
            ["seed", "clips", "bucket set", "dropped %", "crop %", "trim %", "content / epoch %"],
            held,
        )
    )

    w, h, f = GEN.clip_population(timing_n, seed=2)
    times = []
    for ranks, per_rank in layouts:
        g = base.global_batch_size(ranks, per_rank)
        t = best_of(2, lambda g=g: fit_or_least(w, h, f, base, g, True, 0.01))  # type: ignore[misc]
        times.append([f"{ranks} x {per_rank}", f"{t:.2f}"])
    parts.append(
        f"### 4.4 Time to fit N = {timing_n:,} clips (drop_last, cost-model batches, best of 2)\n\n"
        + table(["R x b", "fit s"], times)
    )
    note = (
        "\n\nPopulation: `generate_clips.clip_population(N, seed)` (phone, camera and cinema "
        "aspect ratios in both orientations, log-normal durations, 24 to 60 fps resampled to "
        "Wan's 16 fps). Base: `wan2.1-480p` with `CostModel.for_transformer(5120, 13824)` (Wan "
        "2.1 14B) and its default clamp (4x the full-budget batch), so a global batch is 1 to 4 "
        "clips per rank. *dropped* and *padded* are the sampler's own partition "
        "(`bucket_stats`): with `drop_last`, `n mod (b R)` per bucket; without, the last batch "
        "shrinks and pads `(-n) mod R`, which is what the set is fitted to (`global_batch_size=R`)."
        " *content / epoch*: the share of the clips' pixels x frames one epoch trains, "
        "`(1 - dropped) x mean((1 - crop) (1 - trim))` over the clips that have a bucket (trim "
        "includes cutting clips longer than 81 frames, the same for every set). *step cost "
        "max/mean*: a step's cost on one rank (batch x cost of its tokens) over an epoch. *fit s*: "
        "wall time of the fit (where 1 % is out of reach, of the failed fit and the fit at the "
        "least waste, which the note gives). A fitted set's frame counts are some of the preset's "
        "legal ones and no clip gets more frames than the preset gives it, so its trim is never "
        "below the preset's: the fit buys the waste with trim and crop."
    )
    return "\n\n".join(parts) + note


#: The second population of section 4.5: ``(w, h)`` ratios of phones (both orientations),
#: cameras and cinema, drawn alike.
DEVICE_RATIOS = ((9, 16), (9, 19.5), (9, 20), (3, 4), (4, 3), (3, 2), (16, 9), (1, 1), (1.85, 1),
                 (2.39, 1), (2.76, 1))  # fmt: skip


def device_population(n: int, seed: int) -> tuple[Ints, Ints, Ints]:
    """``n`` clips unlike ``generate_clips``: phone, camera and cinema aspect ratios alike, long
    sides uniform in 640-3840 (even), log-normal durations (median 4 s, sigma 1.2) at 16 fps."""
    rng = np.random.Generator(np.random.PCG64(seed))
    ratios = np.array([a / b for a, b in DEVICE_RATIOS])[rng.integers(0, len(DEVICE_RATIOS), n)]
    long_side = 2 * rng.integers(320, 1921, n)
    short = np.maximum(2, 2 * np.rint(long_side / np.maximum(ratios, 1 / ratios) / 2))
    w = np.where(ratios >= 1, long_side, short).astype(np.int64)
    h = np.where(ratios >= 1, short, long_side).astype(np.int64)
    f = np.maximum(1, np.rint(16 * rng.lognormal(np.log(4.0), 1.2, n))).astype(np.int64)
    return w, h, f


def bench_fit_time(n: int, layouts: tuple[tuple[int, int], ...], repeats: int) -> str:
    """Seconds to fit ``n`` clips of two populations (drop_last, cost-model batches, 1 %)."""
    base = fit_base()
    rows = []
    for label, (w, h, f) in (
        ("generate_clips.clip_population", GEN.clip_population(n, seed=2)),
        ("device_population", device_population(n, seed=2)),
    ):
        for ranks, per_rank in layouts:
            g = base.global_batch_size(ranks, per_rank)

            def run(w: Ints = w, h: Ints = h, f: Ints = f, g: Any = g) -> object:
                return fit_or_least(w, h, f, base, g, True, 0.01)

            t = best_of(repeats, run)
            fit, _, note = fit_or_least(w, h, f, base, g, True, 0.01)
            rows.append([label, f"{ranks} x {per_rank}", f"{fit.num_buckets}",
                         _pct(fit.waste_share), _pct(fit.mean_loss), f"{t:.2f}", note])  # fmt: skip
    return (
        f"### 4.5 Time to fit N = {n:,} clips of two populations (drop_last, cost-model batches, "
        f"max_waste 1 %, best of {repeats})\n\n"
        + table(
            ["population", "R x b", "buckets", "dropped %", "crop + trim %", "fit s", "note"], rows
        )
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="tiny inputs, for CI")
    parser.add_argument("--fit-time", action="store_true", help="only section 4.5")
    args = parser.parse_args(argv)
    if args.fit_time:
        print(bench_fit_time(1_000_000, ((64, 1),), 3))
        return
    n, subset, files, big_frames, waste = (
        (50_000, 500, 8, 6, (20_000,))
        if args.smoke
        else (4_000_000, 20_000, 400, 24, (1_000_000, 50_000))
    )
    fitted_sizes, curve, timing_n, layouts = (
        ((3_000,), (0.1,), 3_000, ((8, 2),))
        if args.smoke
        else ((50_000, 1_000_000), (0.005, 0.01, 0.02, 0.05, 0.1, 0.2), 1_000_000, FIT_LAYOUTS)
    )
    print(f"# bench_video{' (smoke)' if args.smoke else ''}\n")
    print(f"Python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs\n")
    print("## 1. Video bucket assignment (one core)\n")
    print(bench_assign(n, subset) + "\n")
    print("## 2. Header scan\n")
    print(bench_scan(files, big_frames) + "\n")
    print("## 3. Waste, crop and trim on a synthetic camera population\n")
    print(bench_waste(waste) + "\n")
    print("## 4. Bucket sets fitted to the clips and the job\n")
    print(bench_fitted(fitted_sizes, curve, timing_n, layouts) + "\n")
    print(bench_fit_time(*((3_000, ((8, 2),), 1) if args.smoke else (1_000_000, ((64, 1),), 3)))
          + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
