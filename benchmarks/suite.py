"""dataorder beside the samplers people use today: one command, markdown tables, BENCHMARKS.md.

    python benchmarks/suite.py            # full run (about 10-20 minutes), writes BENCHMARKS.md
    python benchmarks/suite.py --smoke    # tiny sizes, a few seconds, writes nothing (CI)

Five comparisons, each measured side by side in one run (ratios are what to compare), then the
output of the feature scripts (sections 6-9: ``bench_blend.py``, ``bench_fit.py``,
``bench_video.py``, ``bench_pack.py``, each side by side in its own run):

1. The first batch of an epoch and its peak memory at N = 10^6, 10^8, 10^9: dataorder's
   ``MegatronPretrainingRandomSampler`` and ``DistributedSampler`` beside the torch.randperm-based
   Megatron "cyclic" sampler (``baselines.RandpermCyclicSampler``) and
   ``torch.utils.data.DistributedSampler``.
2. Resume at position N/2: dataorder's state (``load_state_dict``, ``consumed_samples=``) beside
   Megatron-LM's resume and replay-by-skipping (``islice`` over a fresh sampler's iterator, as
   torchdata's ``StatefulDataLoader`` fallback and Accelerate's ``skip_first_batches`` do).
3. Steady-state indices per second per rank and the cost per batch.
4. Bucket assignment of 10^7 image sizes (vectorised beside NeMo's per-image loop, which is
   timed on a subset and extrapolated), and the bucket sampler's first batch and per-step cost at
   R = 8, 64, 1024 data-parallel ranks.
5. Crop loss and drop/pad waste of dataorder's bucket sets beside NeMo's presets and the
   SDXL-style 40-bucket table.

How memory is measured. Every measurement of sections 1-4 runs in a fresh interpreter that has
already imported what it needs. Peak RSS is the kernel's high-water mark ``VmHWM`` after it is
reset (``/proc/self/clear_refs``) just before the sampler is built, minus the RSS at that moment:
``getrusage(...).ru_maxrss`` alone would carry the parent's peak across ``fork``/``exec``, and
the import of torch. torch's tensors are in RSS but outside tracemalloc, so the tracemalloc peak
of Python allocations is reported too, from a second run (tracing slows allocation; nothing is
timed there). The parent polls each worker's RSS and kills it past ``--mem-limit-gb``; a size
whose projection from the previous size would pass the guard or the timeout is skipped with a
note. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
import tracemalloc
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[1]
MBS, DP, RANK, SEED = 8, 8, 0, 1234
IntArray = npt.NDArray[np.int64]


# -- memory and time, inside one process ----------------------------------------------------------
def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _reset_peak() -> bool:
    """Reset the kernel's RSS high-water mark (Linux >= 4.0). False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


class PeakMemory:
    """RSS high-water mark above the RSS at ``start()`` (bytes); optionally tracemalloc's peak."""

    def __init__(self, traced: bool) -> None:
        self.traced = traced
        self.exact = False
        self.base = 0

    def start(self) -> None:
        self.exact = _reset_peak()
        try:
            self.base = _status_kib("VmRSS") * 1024
        except (OSError, KeyError):  # not Linux: fall back to getrusage (may carry older peaks)
            self.base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if self.traced:
            tracemalloc.start()

    def stop(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.traced:
            out["traced_peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        try:
            peak = _status_kib("VmHWM") * 1024
        except (OSError, KeyError):
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out["rss_peak"] = max(0, peak - self.base)
        out["rss_exact"] = self.exact
        return out


def _best(run: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - t0)
    return best, result


# -- the samplers under test ----------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """One sampler under test."""

    label: str
    family: str  # "megatron" or "distributed": rows compared with each other
    reference: bool  # dataorder's default of its family: the denominator of the ratios
    materialises: str  # "no", "list" (Python ints) or "array" (int64): what scales with N
    per_rank_shard: bool  # what it materialises is N / DP long (else N)


KINDS: dict[str, Kind] = {
    "do-megatron": Kind(
        "dataorder MegatronPretrainingRandomSampler", "megatron", True, "no", False
    ),
    "do-megatron-nemo": Kind(
        "dataorder MegatronPretrainingRandomSampler(compat='nemo')",
        "megatron",
        False,
        "array",
        True,
    ),
    "cyclic": Kind("baseline: torch.randperm cyclic (NeMo)", "megatron", False, "list", True),
    "do-ds": Kind("dataorder DistributedSampler", "distributed", True, "no", False),
    "do-ds-torch": Kind(
        "dataorder DistributedSampler(compat='torch')", "distributed", False, "array", False
    ),
    "torch-ds": Kind("torch.utils.data.DistributedSampler", "distributed", False, "list", False),
}


def _units(kind: str, n: int) -> int:
    """How many entries the sampler materialises (what memory and time scale with)."""
    k = KINDS[kind]
    if k.materialises == "no":
        return 1
    return n // (MBS * DP) * MBS if k.per_rank_shard else n


def make_batches(kind: str, n: int, mbs: int, *, consumed: int = 0) -> Iterable[list[int]]:
    """A fresh sampler of ``kind`` for rank RANK of DP ranks, as an iterable of batches.

    DistributedSamplers are read through torch's ``BatchSampler(batch_size=mbs)``, as a
    ``DataLoader`` does. ``consumed`` (global positions, a multiple of ``mbs * DP``) starts the
    sampler there by each sampler's own resume mechanism: dataorder's state, Megatron-LM's
    ``consumed_samples``. torch's sampler has none.
    """
    from torch.utils.data import BatchSampler

    if kind in ("do-megatron", "do-megatron-nemo"):
        from dataorder.llm.megatron import MegatronPretrainingRandomSampler

        compat = "nemo" if kind == "do-megatron-nemo" else None
        return MegatronPretrainingRandomSampler(
            n, mbs, RANK, DP, seed=SEED, compat=compat, consumed_samples=consumed
        )
    if kind == "cyclic":
        from baselines import RandpermCyclicSampler

        s = RandpermCyclicSampler(n, mbs, RANK, DP, seed=SEED)
        s.consumed_samples = consumed  # Megatron-LM's resume
        return s
    if kind in ("do-ds", "do-ds-torch"):
        from dataorder.parallel.distributed import DistributedSampler

        compat = "torch" if kind == "do-ds-torch" else "default"
        ds = DistributedSampler(range(n), DP, RANK, seed=SEED, compat=compat)
        if consumed:
            ds.load_state_dict(_distributed_state(ds, consumed))
        return BatchSampler(ds, mbs, drop_last=False)
    if kind == "torch-ds":
        from torch.utils.data import DistributedSampler as TorchDistributedSampler

        if consumed:
            raise ValueError("torch's DistributedSampler cannot resume; use replay")
        tds = TorchDistributedSampler(range(n), DP, RANK, seed=SEED)
        return BatchSampler(tds, mbs, drop_last=False)
    raise ValueError(f"unknown kind {kind!r}")


def _distributed_state(ds: Any, consumed: int) -> dict[str, Any]:
    """The checkpoint a run writes after ``consumed`` global positions: a fresh sampler's state
    with ``consumed`` set (every other field, the fingerprint included, is the same)."""
    state = dict(ds.state_dict())
    state["consumed"] = consumed
    return state


def _resume_state(kind: str, n: int, mbs: int, consumed: int) -> dict[str, Any]:
    if kind == "do-megatron":
        from dataorder.llm.megatron import MegatronPretrainingRandomSampler

        return MegatronPretrainingRandomSampler(
            n, mbs, RANK, DP, seed=SEED, consumed_samples=consumed
        ).state_dict()
    from dataorder.parallel.distributed import DistributedSampler

    return _distributed_state(DistributedSampler(range(n), DP, RANK, seed=SEED), consumed)


def _load_state(kind: str, n: int, state: dict[str, Any]) -> Iterable[list[int]]:
    """A fresh dataorder sampler with ``state`` loaded (its own resume)."""
    from torch.utils.data import BatchSampler

    if kind == "do-megatron":
        from dataorder.llm.megatron import MegatronPretrainingRandomSampler

        s = MegatronPretrainingRandomSampler(n, MBS, RANK, DP, seed=SEED)
        s.load_state_dict(state)
        return s
    from dataorder.parallel.distributed import DistributedSampler

    ds = DistributedSampler(range(n), DP, RANK, seed=SEED)
    ds.load_state_dict(state)
    return BatchSampler(ds, MBS, drop_last=False)


def _first_batch(batches: Iterable[list[int]]) -> list[int]:
    return next(iter(batches))


# -- worker cases: each returns the measurements of one spec --------------------------------------
def case_first(spec: dict[str, Any]) -> dict[str, Any]:
    """Construct a sampler, start the epoch, take its first batch."""
    kind, n, repeat = spec["kind"], spec["n"], spec["repeat"]
    _first_batch(make_batches(kind, 64, 1))  # warm the imports and code paths before measuring
    mem = PeakMemory(spec["traced"])
    mem.start()
    seconds, batch = _best(lambda: _first_batch(make_batches(kind, n, MBS)), repeat)
    return {"seconds": seconds, "batch": batch, **mem.stop()}


def resume_step(n: int, mbs: int) -> int:
    """Global steps (blocks of ``mbs * DP``) before position N/2."""
    return (n // 2) // (mbs * DP)


def case_resume(spec: dict[str, Any]) -> dict[str, Any]:
    """Resume at position N/2 by ``how`` and take the first batch."""
    kind, n, how, repeat = spec["kind"], spec["n"], spec["how"], spec["repeat"]
    step = resume_step(n, MBS)
    consumed = step * MBS * DP
    if how not in ("state", "ctor", "replay"):
        raise ValueError(f"unknown resume {how!r}")
    # the checkpoint a run wrote, read before the clock starts
    state = _resume_state(kind, n, MBS, consumed) if how == "state" else {}

    def run() -> list[int]:
        if how == "state":
            return _first_batch(_load_state(kind, n, state))
        if how == "ctor":  # consumed_samples= (dataorder) or Megatron-LM's attribute (baseline)
            return _first_batch(make_batches(kind, n, MBS, consumed=consumed))
        from baselines import replay_skip

        return next(replay_skip(lambda: make_batches(kind, n, MBS), step))

    _first_batch(make_batches(kind, 64, 1))  # warm the imports and code paths
    mem = PeakMemory(spec["traced"])
    mem.start()
    seconds, batch = _best(run, repeat)
    return {"seconds": seconds, "batch": batch, "step": step, **mem.stop()}


def case_steady(spec: dict[str, Any]) -> dict[str, Any]:
    """After the first batch: ``batches`` consecutive batches, timed as one run.

    The run is long enough to cross many of the vectorised chunks dataorder's samplers refill
    (16,384 or 65,536 positions per rank), so their refill cost is averaged in.
    """
    kind, n, mbs, batches = spec["kind"], spec["n"], spec["mbs"], spec["batches"]
    it = iter(make_batches(kind, n, mbs))
    next(it)
    t0 = time.perf_counter()
    for _ in islice(it, batches):
        pass
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "batches": batches, "indices": batches * mbs}


def shipped_sizes() -> tuple[IntArray, IntArray]:
    """The shipped size set, ``dataorder/data/image_sizes.csv`` (see its ``generate.py``)."""
    text = resources.files("dataorder").joinpath("data/image_sizes.csv").read_text("ascii")
    arr = np.loadtxt(text.splitlines()[1:], delimiter=",", dtype=np.int64).reshape(-1, 2)
    return arr[:, 0].copy(), arr[:, 1].copy()


def size_set(name: str, n: int | None, seed: int = SEED) -> tuple[IntArray, IntArray]:
    """``"shipped"`` (resampled with replacement to ``n``; all of it if ``n`` is None) or
    ``"stress"``: aspect ratio log-uniform in [1/3, 3], long side log-uniform in [512, 4096]."""
    rng = np.random.default_rng(seed)
    if name == "shipped":
        w, h = shipped_sizes()
        if n is None:
            return w, h
        pick = rng.integers(0, w.size, size=n)
        return w[pick], h[pick]
    if name == "stress":
        size = 10_000 if n is None else n
        ratio = np.exp(rng.uniform(np.log(1 / 3), np.log(3), size=size))
        long_side = np.exp(rng.uniform(np.log(512), np.log(4096), size=size))
        w = np.where(ratio >= 1, long_side, long_side * ratio)
        h = np.where(ratio >= 1, long_side / ratio, long_side)
        return (
            np.maximum(1, np.rint(w)).astype(np.int64),
            np.maximum(1, np.rint(h)).astype(np.int64),
        )
    raise ValueError(f"unknown size set {name!r}")


def case_assign(spec: dict[str, Any]) -> dict[str, Any]:
    """Bucket assignment of ``n`` sizes: vectorised (timed on all), per-image (on subsets)."""
    from baselines import SDXL_BUCKETS, assign_log_nearest, nemo_assign_loop

    from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
    from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset

    n, loop_n, ref_n = spec["n"], spec["loop_n"], spec["ref_n"]
    w, h = size_set(spec["sizes"], n)
    ours = MultiTierBucketCalculator.from_preset("1024p")
    nemo = MultiTierBucketCalculator.from_preset("1024p", compat="nemo")
    rows: dict[str, Any] = {}

    def timed(name: str, images: int, run: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = run()
        rows[name] = {"seconds": time.perf_counter() - t0, "images": images}
        return out

    ids_ours = timed("assign-default", n, lambda: ours.assign(w, h))
    ids_nemo = timed("assign-nemo", n, lambda: nemo.assign(w, h))
    timed("sdxl-searchsorted", n, lambda: assign_log_nearest(w, h, SDXL_BUCKETS))
    timed("from-sizes", n, lambda: BaseMultiresolutionDataset.from_sizes(w, h, ours))
    wl, hl = w[:loop_n].tolist(), h[:loop_n].tolist()  # NeMo reads sizes as Python ints
    buckets = nemo.get_all_buckets()
    loop_ids = timed("nemo-loop", loop_n, lambda: nemo_assign_loop(wl, hl, buckets))
    rows["nemo-loop"]["identical"] = loop_ids == ids_nemo[:loop_n].tolist()
    wr, hr = w[:ref_n].tolist(), h[:ref_n].tolist()
    ref_ids = timed(
        "reference-loop",
        ref_n,
        lambda: [ours.get_bucket_for_image(a, b)["id"] for a, b in zip(wr, hr, strict=True)],
    )
    rows["reference-loop"]["identical"] = ref_ids == ids_ours[:ref_n].tolist()
    return {"rows": rows, "buckets_default": len(ours), "buckets_nemo": len(nemo)}


def case_bucket_sampler(spec: dict[str, Any]) -> dict[str, Any]:
    """The bucket sampler on ``n`` shipped sizes (1024p buckets): first batch, per-step cost."""
    from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
    from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
    from dataorder.diffusion.sampler.sampler import SequentialBucketSampler

    n, world, compat, steps = spec["n"], spec["world"], spec["compat"], spec["steps"]
    w, h = size_set("shipped", n)
    ds = BaseMultiresolutionDataset.from_sizes(w, h, MultiTierBucketCalculator.from_preset("1024p"))

    def build() -> SequentialBucketSampler:
        return SequentialBucketSampler(
            ds, base_batch_size=spec["batch"], drop_last=False, num_replicas=world, rank=0,
            seed=SEED, compat=compat,
        )  # fmt: skip

    epoch_steps = len(build())  # also warms the imports and the dataset's cached properties
    mem = PeakMemory(False)
    mem.start()
    t0 = time.perf_counter()
    sampler = build()
    it = iter(sampler)
    next(it)
    first = time.perf_counter() - t0
    todo = min(steps, epoch_steps - 1)
    t1 = time.perf_counter()
    for _ in islice(it, todo):
        pass
    per_step = (time.perf_counter() - t1) / max(1, todo)
    return {
        "first": first,
        "per_step": per_step,
        "steps_timed": todo,
        "epoch_steps": epoch_steps,
        "buckets": ds.bucket_table.num_buckets,
        **mem.stop(),
    }


CASES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "first": case_first,
    "resume": case_resume,
    "steady": case_steady,
    "assign": case_assign,
    "bucket_sampler": case_bucket_sampler,
}


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one spec in this process (the isolated path runs it in a fresh interpreter)."""
    import torch  # noqa: F401  (imported before any baseline reading, for every case alike)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. buckets smaller than one global batch
        return CASES[spec["case"]](spec)


# -- running workers ------------------------------------------------------------------------------
@dataclass
class Runner:
    """Runs specs in fresh interpreters under a memory guard and a timeout (or in-process)."""

    isolated: bool
    timeout: float
    mem_limit: int
    log: Callable[[str], None]
    max_rss_seen: dict[str, int] = field(default_factory=dict)

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        label = json.dumps(spec, sort_keys=True)
        self.log(f"  running {label}")
        if not self.isolated:
            return {"ok": True, "isolated": False, **worker(spec)}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        start, peak = time.monotonic(), 0
        reason = ""
        while proc.poll() is None:
            rss = _pid_rss(proc.pid)
            peak = max(peak, rss)
            if rss > self.mem_limit:
                reason = f"killed: RSS passed the {_fmt_bytes(self.mem_limit)} guard"
            elif time.monotonic() - start > self.timeout:
                reason = f"killed: still running after the {self.timeout:.0f} s timeout"
            if reason:
                proc.kill()  # only the worker this runner started, by its own handle
                proc.communicate()
                return {"ok": False, "reason": reason}
            time.sleep(0.02)
        out, err = proc.communicate()
        if proc.returncode != 0:
            tail = err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
            return {"ok": False, "reason": f"failed: {tail}"}
        return {"ok": True, "isolated": True, "worker_rss_max": peak, **json.loads(out)}


def _pid_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# -- formatting -----------------------------------------------------------------------------------
def _fmt_time(s: float) -> str:
    if s < 1e-5:
        return f"{s * 1e6:.2f} µs"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def _fmt_bytes(b: float) -> str:
    if b < 2**20:
        return f"{b / 2**10:.0f} KiB"
    if b < 2**30:
        return f"{b / 2**20:.0f} MiB"
    return f"{b / 2**30:.2f} GiB"


def _fmt_ratio(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}x"
    return f"{x:.1f}x" if x >= 1 else f"{x:.2f}x"


def _fmt_n(n: int) -> str:
    exp = len(str(n)) - 1
    return f"10^{exp}" if n == 10**exp else f"{n:,}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# -- sections -------------------------------------------------------------------------------------
@dataclass
class Config:
    smoke: bool
    sizes: list[int]
    steady_n: int
    steady_batches: int
    assign_n: int
    loop_n: int
    ref_n: int
    bucket_n: int
    bucket_worlds: list[int]
    bucket_steps: int
    waste_ns: list[int]


def _project(prev: dict[str, Any] | None, kind: str, n: int, runner: Runner) -> str | None:
    """A reason to skip ``kind`` at ``n``, from its result at the previous size, or None."""
    if prev is None or not prev.get("ok"):
        return None if prev is None else "skipped: the previous size did not complete"
    units, prev_units = _units(kind, n), _units(kind, prev["n"])
    if units == prev_units:
        return None
    scale = units / prev_units
    # the worker's RSS without the measured part (interpreter, torch), plus that part scaled
    base = max(0, prev.get("worker_rss_max", 0) - prev["rss_peak"])
    mem = base + prev["rss_peak"] * scale
    if mem > runner.mem_limit:
        return (
            f"skipped: {_fmt_bytes(mem)} projected from {_fmt_n(prev['n'])} > "
            f"{_fmt_bytes(runner.mem_limit)} guard"
        )
    secs = prev["seconds"] * scale
    if secs > runner.timeout:
        return f"skipped: {secs:.0f} s projected from {_fmt_n(prev['n'])} > {runner.timeout:.0f} s"
    return None


def _measure(runner: Runner, spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    res = runner.run(spec)
    res["wall"] = time.monotonic() - t0
    res["n"] = spec["n"]
    return res


def _repeat(kind: str, n: int) -> int:
    return 5 if KINDS[kind].materialises == "no" or n <= 10**6 else 1


def _traceable(kind: str, n: int) -> bool:
    # tracemalloc keeps a record per live Python object: tracing N ints would cost more than the
    # list being measured. torch's tensors (the compat= modes' arrays) are invisible to it anyway.
    return KINDS[kind].materialises == "no" or n <= 10**6


def _skip_cells(reason: str, width: int) -> list[str]:
    return [reason] + ["—"] * (width - 1)


def section_first(cfg: Config, runner: Runner) -> tuple[str, dict[tuple[str, int], Any]]:
    kinds = ["do-megatron", "do-megatron-nemo", "cyclic", "do-ds", "do-ds-torch", "torch-ds"]
    results: dict[tuple[str, int], Any] = {}
    prev: dict[str, Any] = {}
    for n in cfg.sizes:  # sizes outside, samplers inside: rows compared are measured together
        for kind in kinds:
            skip = _project(prev.get(kind), kind, n, runner)
            if skip:
                results[kind, n] = prev[kind] = {"ok": False, "reason": skip, "n": n}
                continue
            spec = {"case": "first", "kind": kind, "n": n, "repeat": _repeat(kind, n)}
            res = _measure(runner, {**spec, "traced": False})
            if res.get("ok") and _traceable(kind, n):
                traced = runner.run({**spec, "repeat": 1, "traced": True})
                res["traced_peak"] = traced.get("traced_peak", traced.get("reason"))
            results[kind, n] = prev[kind] = res
    rows = []
    for n in cfg.sizes:
        for kind in kinds:
            k = KINDS[kind]
            res = results[kind, n]
            ref = results[
                next(x for x in kinds if KINDS[x].family == k.family and KINDS[x].reference), n
            ]
            if not res.get("ok"):
                rows.append([_fmt_n(n), k.label, *_skip_cells(res["reason"], 4)])
                continue
            ratio = res["seconds"] / ref["seconds"] if ref.get("ok") else float("nan")
            traced = res.get("traced_peak")
            rows.append(
                [
                    _fmt_n(n),
                    k.label,
                    _fmt_time(res["seconds"]),
                    "1 (reference)" if k.reference else _fmt_ratio(ratio),
                    _fmt_bytes(res["rss_peak"]),
                    "not traced"
                    if traced is None
                    else traced
                    if isinstance(traced, str)
                    else _fmt_bytes(traced),
                ]
            )
    text = _table(
        ["N", "sampler", "first batch", "time ÷ dataorder", "peak RSS", "peak traced"], rows
    )
    return text, results


def section_resume(cfg: Config, runner: Runner) -> str:
    plans = [
        ("do-megatron", "state", "load_state_dict, then the first batch"),
        ("do-megatron", "ctor", "consumed_samples= in the constructor"),
        ("do-megatron", "replay", "replay: islice over a fresh iterator"),
        ("cyclic", "ctor", "Megatron-LM: consumed_samples set, randperm rebuilt"),
        ("cyclic", "replay", "replay: islice (StatefulDataLoader's fallback for NeMo)"),
        ("do-ds", "state", "load_state_dict, then the first batch"),
        ("do-ds", "replay", "replay: islice over a fresh iterator"),
        ("torch-ds", "replay", "replay: islice (StatefulDataLoader / skip_first_batches)"),
    ]
    results: dict[tuple[str, str, int], Any] = {}
    prevs: dict[tuple[str, str], Any] = {}
    for n in cfg.sizes:
        for kind, how, _ in plans:
            prev = prevs.get((kind, how))
            skip = _project(prev, kind, n, runner)
            if skip is None and how == "replay" and prev is not None and prev.get("ok"):
                # replay costs O(N / 2) even when the order is O(1): project its time too
                secs = prev["seconds"] * n / prev["n"]
                if secs > runner.timeout:
                    skip = f"skipped: {secs:.0f} s projected from {_fmt_n(prev['n'])}"
            if skip:
                res = {"ok": False, "reason": skip, "n": n}
            else:
                repeat = 5 if how != "replay" and KINDS[kind].materialises == "no" else 1
                spec = {"case": "resume", "kind": kind, "n": n, "how": how, "repeat": repeat}
                res = _measure(runner, {**spec, "traced": False})
            results[kind, how, n] = prevs[kind, how] = res
    rows = []
    for n in cfg.sizes:
        for kind, how, desc in plans:
            k = KINDS[kind]
            res = results[kind, how, n]
            ref_kind = "do-megatron" if k.family == "megatron" else "do-ds"
            ref = results[ref_kind, "state", n]
            replay = results[kind, "replay", n]
            if not res.get("ok"):
                rows.append([_fmt_n(n), k.label, desc, *_skip_cells(res["reason"], 4)])
                continue
            ratio = res["seconds"] / ref["seconds"] if ref.get("ok") else float("nan")
            if how == "replay":
                same = "is the reference order"
            elif replay.get("ok"):
                same = "yes" if res["batch"] == replay["batch"] else "**NO**"
            else:
                same = "n/a (replay skipped)"
            rows.append(
                [
                    _fmt_n(n),
                    k.label,
                    desc,
                    _fmt_time(res["seconds"]),
                    "1 (reference)" if (kind == ref_kind and how == "state") else _fmt_ratio(ratio),
                    _fmt_bytes(res["rss_peak"]),
                    same,
                ]
            )
    return _table(
        [
            "N",
            "sampler",
            "resume by",
            "first batch after resume",
            "time ÷ dataorder",
            "peak RSS",
            "same batch as replay",
        ],
        rows,
    )


def section_steady(cfg: Config, runner: Runner) -> str:
    kinds = ["do-megatron", "cyclic", "do-ds", "torch-ds"]
    rows = []
    for mbs in (8, 64):
        res = {}
        for kind in kinds:
            batches = max(1, cfg.steady_batches // mbs)
            spec = {
                "case": "steady", "kind": kind, "n": cfg.steady_n, "mbs": mbs, "batches": batches,
            }  # fmt: skip
            res[kind] = runner.run(spec)
        for kind in kinds:
            k, r = KINDS[kind], res[kind]
            ref = res["do-megatron" if k.family == "megatron" else "do-ds"]
            if not r.get("ok"):
                rows.append([k.label, str(mbs), *_skip_cells(r["reason"], 3)])
                continue
            per_batch = r["seconds"] / r["batches"]
            ref_per_batch = ref["seconds"] / ref["batches"] if ref.get("ok") else float("nan")
            rows.append(
                [
                    k.label,
                    str(mbs),
                    f"{r['indices'] / r['seconds'] / 1e6:.2f} M",
                    _fmt_time(per_batch),
                    "1 (reference)" if k.reference else _fmt_ratio(per_batch / ref_per_batch),
                ]
            )
    return _table(
        ["sampler", "batch per rank", "indices/s per rank", "per batch", "time ÷ dataorder"], rows
    )


def section_assign(cfg: Config, runner: Runner) -> str:
    names = {
        "assign-default": "dataorder `assign`, default 1024p buckets (vectorised)",
        "assign-nemo": "dataorder `assign`, compat='nemo' 1024p (vectorised)",
        "sdxl-searchsorted": "SDXL 40 table, plain `searchsorted` on log AR (vectorised)",
        "from-sizes": "dataorder `BaseMultiresolutionDataset.from_sizes` (assign + group)",
        "nemo-loop": "baseline: NeMo per-image loop, min over buckets of abs(AR diff)",
        "reference-loop": "dataorder `get_bucket_for_image` per image (exact reference rule)",
    }
    rows = []
    for sizes in ("shipped", "stress"):
        spec = {
            "case": "assign", "sizes": sizes, "n": cfg.assign_n, "loop_n": cfg.loop_n,
            "ref_n": cfg.ref_n,
        }  # fmt: skip
        res = runner.run(spec)
        label = "shipped (resampled)" if sizes == "shipped" else "log-uniform AR stress"
        if not res.get("ok"):
            rows.append([label, "all", *_skip_cells(res["reason"], 5)])
            continue
        base = res["rows"]["assign-default"]
        base_rate = base["images"] / base["seconds"]
        for key, desc in names.items():
            r = res["rows"][key]
            rate = r["images"] / r["seconds"]
            extrapolated = r["images"] < cfg.assign_n
            total = cfg.assign_n / rate
            shown_total = _fmt_time(total) + (
                f" (extrapolated from {_fmt_n(r['images'])})" if extrapolated else ""
            )
            same = r.get("identical")
            rows.append(
                [
                    label,
                    desc,
                    shown_total,
                    f"{rate / 1e6:.2f} M/s" if rate >= 1e5 else f"{rate / 1e3:.1f} k/s",
                    "1 (reference)" if key == "assign-default" else _fmt_ratio(base_rate / rate),
                    "—" if same is None else ("yes" if same else "**NO**"),
                ]
            )
    return _table(
        [
            "size set",
            "method",
            f"time for {_fmt_n(cfg.assign_n)} images",
            "images/s",
            "time ÷ dataorder assign",
            "same ids as vectorised",
        ],
        rows,
    )


def section_bucket_sampler(cfg: Config, runner: Runner) -> str:
    rows = []
    for world in cfg.bucket_worlds:
        res = {}
        for compat in ("default", "nemo"):
            spec = {
                "case": "bucket_sampler", "n": cfg.bucket_n, "world": world, "compat": compat,
                "batch": 8, "steps": cfg.bucket_steps,
            }  # fmt: skip
            res[compat] = runner.run(spec)
        for compat in ("default", "nemo"):
            r = res[compat]
            label = (
                "dataorder SequentialBucketSampler"
                if compat == "default"
                else "dataorder compat='nemo' (NeMo's randperm per bucket)"
            )
            if not r.get("ok"):
                rows.append([str(world), label, *_skip_cells(r["reason"], 5)])
                continue
            ref = res["default"]
            ratio = r["first"] / ref["first"] if ref.get("ok") else float("nan")
            rows.append(
                [
                    str(world),
                    label,
                    str(r["epoch_steps"]),
                    _fmt_time(r["first"]),
                    "1 (reference)" if compat == "default" else _fmt_ratio(ratio),
                    f"{_fmt_time(r['per_step'])} (over {r['steps_timed']})",
                    _fmt_bytes(r["rss_peak"]),
                ]
            )
    return _table(
        [
            "R (ranks)",
            "sampler",
            "steps per epoch",
            "first batch",
            "first ÷ dataorder",
            "per step",
            "peak RSS",
        ],
        rows,
    )


@dataclass(frozen=True)
class BucketSet:
    label: str
    resolutions: list[tuple[int, int]]
    assign: Callable[[IntArray, IntArray], IntArray]


def bucket_sets() -> list[BucketSet]:
    from baselines import SDXL_BUCKETS, assign_log_nearest

    from dataorder.diffusion.calculators.image import MultiTierBucketCalculator

    out = []
    for compat in ("default", "nemo"):
        for preset in ("256p", "512p", "1024p"):
            calc = MultiTierBucketCalculator.from_preset(preset, compat=compat)
            name = "dataorder default" if compat == "default" else "NeMo (compat='nemo')"
            res = [tuple(b["resolution"]) for b in calc.get_all_buckets()]
            out.append(BucketSet(f"{name} {preset}", res, calc.assign))
    sdxl = list(SDXL_BUCKETS)
    out.append(
        BucketSet(
            "SDXL-style 40 table (log-nearest)",
            sdxl,
            lambda w, h: assign_log_nearest(w, h, sdxl),
        )
    )
    return out


def section_crop(cfg: Config) -> str:
    from dataorder.diffusion.sampler.stats import crop_loss

    sets = bucket_sets()
    rows = []
    for sizes in ("shipped", "stress"):
        w, h = size_set(sizes, None if sizes == "shipped" else max(cfg.waste_ns))
        label = (
            f"shipped ({w.size:,} images)"
            if sizes == "shipped"
            else f"log-uniform AR stress ({w.size:,})"
        )
        for bs in sets:
            ids = bs.assign(w, h)
            res = np.array(bs.resolutions, dtype=np.int64)
            loss = crop_loss(w, h, res[ids, 0], res[ids, 1])
            up = (res[ids, 0] > w) | (res[ids, 1] > h)
            rows.append(
                [
                    label,
                    bs.label,
                    str(len(bs.resolutions)),
                    f"{100 * loss.mean():.1f}",
                    f"{100 * np.percentile(loss, 95):.1f}",
                    f"{100 * (loss > 0.1).mean():.1f}",
                    f"{100 * up.mean():.1f}",
                ]
            )
    return _table(
        [
            "size set",
            "bucket set",
            "buckets",
            "mean crop loss %",
            "p95 %",
            "% images losing > 10 %",
            "% upscaled",
        ],
        rows,
    )


WASTE_LAYOUTS = ((8, 4), (64, 8))


def section_waste(cfg: Config) -> str:
    from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
    from dataorder.diffusion.sampler.sampler import SequentialBucketSampler

    sets = bucket_sets()
    cols = [(n, r, b) for n in cfg.waste_ns for r, b in WASTE_LAYOUTS]
    rows = []
    for sizes in ("shipped", "stress"):
        label = "shipped (resampled)" if sizes == "shipped" else "log-uniform AR stress"
        data = {n: size_set(sizes, n) for n in cfg.waste_ns}
        for bs in sets:
            cells = [label, bs.label]
            for n, world, batch in cols:
                w, h = data[n]
                ds = BaseMultiresolutionDataset.from_bucket_ids(
                    bs.assign(w, h), resolutions=bs.resolutions
                )
                waste = []
                for drop_last in (True, False):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # buckets below one global batch
                        try:
                            s = SequentialBucketSampler(
                                ds, base_batch_size=batch, drop_last=drop_last,
                                num_replicas=world, rank=0, seed=SEED,
                            )  # fmt: skip
                        except ValueError:  # drop_last leaves nothing: all of it is dropped
                            waste.append(100.0)
                            continue
                    waste.append(100 * (s.samples_dropped if drop_last else s.samples_padded) / n)
                cells.append(f"{waste[0]:.1f} / {waste[1]:.1f}")
            rows.append(cells)
    header = ["size set", "bucket set"] + [f"N={_fmt_n(n)}, R={r}, b={b}" for n, r, b in cols]
    return _table(header, rows)


# -- the document ---------------------------------------------------------------------------------
def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 2**20:.1f} GiB"
                break
    cores = os.cpu_count() or 0
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores

    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    commit = "unknown"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        # the suite's own output does not make the measured code dirty
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", ".", ":(exclude)BENCHMARKS.md"], cwd=ROOT,
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        commit = head + (" (working tree has uncommitted changes)" if dirty else "")
    return {
        "CPU": f"{cpu}, {cores} logical cores ({usable} usable)",
        "RAM": ram,
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "numpy": np.__version__,
        "torch": version("torch"),
        "dataorder": f"{version('dataorder')} at commit {commit}",
    }


def _mem_available() -> int:
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 8 * 2**30


def build_config(smoke: bool) -> Config:
    if smoke:
        return Config(
            smoke=True, sizes=[10**4], steady_n=10**5, steady_batches=2**12, assign_n=20_000,
            loop_n=1_000, ref_n=200, bucket_n=20_000, bucket_worlds=[8, 64, 1024],
            bucket_steps=50, waste_ns=[10**4],
        )  # fmt: skip
    return Config(
        smoke=False, sizes=[10**6, 10**8, 10**9], steady_n=10**7, steady_batches=2**20,
        assign_n=10**7, loop_n=10**5, ref_n=10**4, bucket_n=10**6, bucket_worlds=[8, 64, 1024],
        bucket_steps=2_000, waste_ns=[10**5, 10**6],
    )  # fmt: skip


def _feature_scripts(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """The per-feature benchmark scripts the suite embeds: (script, section title, options)."""
    helpers = ["--megatron-helpers", str(args.megatron_helpers)] if args.megatron_helpers else []
    peers = ["--peer-python", str(args.peer_python)] if args.peer_python else []
    return [
        ("bench_blend.py", "Data mixtures: BlendedSampler beside Megatron's blend index", helpers),
        ("bench_fit.py", "Buckets fitted to the data and the job layout", []),
        ("bench_video.py", "Video buckets: assignment, header scans, waste, fitted sets", []),
        (
            "bench_pack.py",
            "Packed sequences beside the packers in use: padding, splits, first rows, dealing",
            peers,
        ),
    ]


def _run_feature_script(script: str, options: list[str], timeout: float) -> str:
    """Run ``benchmarks/<script>`` and return its markdown, headings moved one level down."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *options],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{script} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    lines = proc.stdout.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]  # its title: the section heading replaces it
    return "\n".join("#" + line if line.startswith("#") else line for line in lines).strip()


def run_suite(args: argparse.Namespace) -> str:
    cfg = build_config(args.smoke)
    if args.sizes:
        cfg.sizes = sorted(int(float(x)) for x in args.sizes.split(","))
    load_before = os.getloadavg()
    started = time.time()
    mem_limit = int(args.mem_limit_gb * 2**30) if args.mem_limit_gb else int(0.6 * _mem_available())
    log: Callable[[str], None] = (
        (lambda s: print(s, file=sys.stderr, flush=True)) if (args.verbose) else (lambda s: None)
    )
    runner = Runner(
        isolated=not args.smoke or args.isolated, timeout=args.timeout, mem_limit=mem_limit, log=log
    )
    parts: list[str] = []

    def emit(text: str) -> None:
        parts.append(text)
        print(text + "\n", flush=True)

    emit(
        "# dataorder benchmarks"
        + (" (smoke run: tiny sizes, figures not meaningful)" if cfg.smoke else "")
    )
    emit(
        "Every comparison below was measured side by side in one run of one command; compare "
        "ratios, not absolute times. Generated by `benchmarks/suite.py` (see "
        "`benchmarks/README.md` for what each figure means and how memory is measured)."
    )
    if cfg.smoke and not runner.isolated:
        # The isolated path must not rot either: one worker in a fresh interpreter.
        check = Runner(True, 120.0, mem_limit, log).run(
            {"case": "first", "kind": "do-megatron", "n": 1000, "repeat": 1, "traced": True}
        )
        if not check.get("ok"):
            raise RuntimeError(f"the isolated worker failed: {check.get('reason')}")

    emit("## 1. First batch of an epoch, and its peak memory")
    emit(
        f"micro_batch_size={MBS}, data_parallel_size={DP}, rank {RANK}, seed {SEED}. "
        f"DistributedSamplers are read through torch's `BatchSampler(batch_size={MBS})`, as a "
        "DataLoader does. Time: build the sampler, `iter()`, first batch (best of 5 for "
        "samplers that materialise nothing and at N <= 10^6, else one run). Peak RSS: high-water "
        "mark above the RSS before the sampler is built, in a fresh interpreter. Peak traced: "
        "tracemalloc, in a second run. The materialising samplers hold, per rank, N entries "
        "(torch) or a shard of N / 8 (Megatron cyclic); `compat=` modes hold them as int64 "
        "arrays; every rank pays this, so a node running 8 ranks holds 8 times the peak RSS "
        "shown. 'time ÷ dataorder' divides by dataorder's default sampler of the same family "
        "at the same N."
    )
    text, _ = section_first(cfg, runner)
    emit(text)

    emit("## 2. Resume at position N/2")
    emit(
        f"The sampler resumes after the global step at position N/2 (rounded down to a whole "
        f"global step of {MBS} x {DP}) and yields its next batch; the time covers building a "
        "fresh sampler, loading the position and that batch (the checkpoint dict is read before "
        "the clock). 'replay' is `itertools.islice` over a fresh sampler's batches: what "
        "torchdata's StatefulDataLoader does for a sampler without state, and what Accelerate's "
        "`skip_first_batches` does for map-style data. 'same batch as replay' checks that "
        "each resume gives the batch an uninterrupted run gives."
    )
    emit(section_resume(cfg, runner))

    emit("## 3. Steady state")
    emit(
        f"N={_fmt_n(cfg.steady_n)}, data_parallel_size={DP}, rank {RANK}. After the first "
        f"batch, {cfg.steady_batches:,} consecutive indices (whole batches) timed as one run, "
        "which crosses many of the chunks dataorder refills (16,384 positions per rank for the "
        "Megatron sampler, 65,536 for DistributedSampler). 'per batch' is the sampler's "
        "overhead per training step on one rank."
    )
    emit(section_steady(cfg, runner))

    emit("## 4. Buckets: assignment and the bucket sampler")
    emit(
        f"Assignment of {_fmt_n(cfg.assign_n)} image sizes to 1024p buckets (quantization 64), "
        "each method in the same fresh interpreter on the same arrays. Per-image loops are timed "
        f"on the first {cfg.loop_n:,} (NeMo's loop) or {cfg.ref_n:,} (our reference rule) "
        f"images and extrapolated linearly to {_fmt_n(cfg.assign_n)}. Size sets: the shipped "
        "size set (`dataorder/data/image_sizes.csv`, 3,000 photo-like sizes) resampled with "
        "replacement, and a stress set with aspect ratio log-uniform in [1/3, 3] and the long "
        "side log-uniform in [512, 4096]."
    )
    emit(section_assign(cfg, runner))
    emit(
        f"The bucket sampler over {_fmt_n(cfg.bucket_n)} shipped sizes (resampled) in 1024p "
        "buckets, base_batch_size=8 per rank, drop_last=False, rank 0 of R. 'first batch' "
        "builds the sampler and yields its first batch (the dataset is built before); "
        f"'per step' is the mean over the next steps (up to {cfg.bucket_steps:,}, or to the end "
        "of the epoch)."
    )
    emit(section_bucket_sampler(cfg, runner))

    emit("## 5. Crop loss and lock-step waste of bucket sets")
    emit(
        "Crop loss is the share of an image's area cut away when it is resized to cover its "
        "bucket and cropped, `1 - min(r_img / r_bkt, r_bkt / r_img)` with r = width / height "
        "(`dataorder.diffusion.sampler.stats.crop_loss`). Each set uses its own assignment "
        "rule: dataorder default (nearest in log aspect ratio, the least crop loss), NeMo's "
        "(nearest in linear aspect ratio), the SDXL-style table with nearest in log aspect ratio. "
        "'upscaled': the bucket is larger than the image on some side. The stress set here has "
        f"{max(cfg.waste_ns):,} sizes."
    )
    emit(section_crop(cfg))
    emit(
        "Waste under lock-step: every global batch of R x b comes from one bucket, so each "
        "bucket's remainder is either dropped (`drop_last=True`) or padded with repeats of the "
        "bucket's own samples (`drop_last=False`). Cells: % of the epoch dropped / % padded, "
        "from `SequentialBucketSampler.samples_dropped` / `samples_padded` (the same sampler "
        "rule for every bucket set), base_batch_size b per rank, R ranks."
    )
    emit(section_waste(cfg))

    # Sections 6-9: the feature scripts, each side by side in its own run, embedded verbatim.
    # A smoke run embeds the cheapest one only: each script's own smoke test runs the others.
    for number, (script, title, extra) in enumerate(_feature_scripts(args), start=6):
        options = [*extra, *(["--smoke"] if cfg.smoke else [])]
        emit(f"## {number}. {title}")
        command = " ".join(["python", f"benchmarks/{script}", *options])
        if cfg.smoke and number > 6:
            emit(f"Not run by a smoke run of the suite: `{command}` is its own smoke test.")
            continue
        emit(f"Output of `{command}`, run by the suite:")
        emit(_run_feature_script(script, options, args.timeout))

    load_after = os.getloadavg()
    elapsed = time.time() - started
    info = machine()
    command = "python " + " ".join(
        shlex.quote(a) for a in [os.path.relpath(Path(__file__).resolve(), ROOT), *sys.argv[1:]]
    )
    shared = load_before[0] > 0.5 or load_after[0] > 1.5
    lines = [f"- {k}: {v}" for k, v in info.items()]
    lines += [
        f"- memory guard per measurement: {_fmt_bytes(mem_limit)} RSS; timeout "
        f"{runner.timeout:.0f} s",
        f"- load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in load_after)}"
        + (
            " (the suite itself keeps about one core busy) — other jobs shared the machine "
            "during this run, so absolute times are noisy; the ratios are measured side by side "
            "and hold better"
            if shared
            else ""
        ),
        f"- wall time of the run: {elapsed / 60:.1f} min",
        f"- command (from the repository root): `{command}`",
    ]
    emit("## Machine and command\n\n" + "\n".join(lines))
    return "\n\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, in-process (CI)")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="write the markdown here (default: BENCHMARKS.md for a full run; nothing in smoke)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement")
    parser.add_argument(
        "--mem-limit-gb",
        type=float,
        default=None,
        help="RSS guard per measurement (default: 60 %% of MemAvailable at start)",
    )
    parser.add_argument(
        "--isolated", action="store_true", help="with --smoke: still one process per measurement"
    )
    parser.add_argument(
        "--sizes",
        default=None,
        help="N for sections 1-2, comma-separated, e.g. 1e6,1e8 (default: 1e6,1e8,1e9)",
    )
    parser.add_argument(
        "--megatron-helpers",
        type=Path,
        default=None,
        help="a folder with a compiled megatron-core helpers_cpp, for section 6 (bench_blend.py)",
    )
    parser.add_argument(
        "--peer-python",
        type=Path,
        default=None,
        help="an interpreter with megatron-core==0.16.1 and trl, for section 9 (bench_pack.py)",
    )
    parser.add_argument("--verbose", action="store_true", help="log each measurement to stderr")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    doc = run_suite(args)
    output = (
        args.output if args.output is not None else (None if args.smoke else ROOT / "BENCHMARKS.md")
    )
    if output is not None:
        output.write_text(doc, encoding="utf-8")
        print(f"wrote {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
