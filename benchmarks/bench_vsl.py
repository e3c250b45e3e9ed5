"""Benchmark of variable sequence length batching beside concatenate-and-split and best-fit
packing: tokens dropped, padded and steps per epoch on the same lengths and the same tokens per
step; then the time to the first batch at 10^9 documents.

Prints markdown tables; never asserts a timing. ``--smoke`` runs every section on tiny inputs
(what CI runs).

    python benchmarks/bench_vsl.py             # the report's figures (a few minutes)
    python benchmarks/bench_vsl.py --smoke     # seconds, for CI

Lengths: ``N = 2 x 10^5`` documents, ``max(1, floor(lognormal(mu=6.0, sigma=1.1)))`` from
``numpy.random.default_rng(SEED)`` (mean about 740 tokens), as in ``bench_pack.py``. Every
batching reads ``R x B x seq_len`` tokens per step (R = 8 ranks, B = 1): concatenate-and-split
(Megatron's GPT dataset: the corpus back to back, cut every ``seq_len``, the last partial row
and the rows short of a step dropped), best-fit packing (``PackedSampler``, ``split="overflow"``)
and variable sequence length chunks (``VariableLengthSampler``, chunks of ``--min-seq-len`` to
``seq_len`` tokens); the figures are :func:`dataorder.tools.pack.compare_batchings`', what
``dataorder pack --vsl`` prints.

Section 2 reads ``--big`` (default ``/tmp/len1e9.i32``, 10^9 int32 lognormal lengths, written
here in slabs when absent: 4 GB) as a memory map, and for each curriculum, in a fresh process,
builds the sampler and reads its first batch, then one at mid-epoch, then the first batch of a
state saved there (its first state computes the lengths' fingerprint: one pass of block
totals) continued on 7 ranks (an elastic resume, from the same chunk index), with
tracemalloc's peak (allocations beyond the memory map) and the wall time. The build is one
vectorised pass over the lengths that counts the chunks of each length per block of 8,192
documents (NOTE [ Lazy chunk index ] in ``dataorder.llm.vsl``); no chunk is listed, and no step
either: the length of a step is a pure function of the chunks of each length read (NOTE
[ Counted positions ] in ``dataorder.core.lockstep``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.plan import PackingPlan
from dataorder.tools.pack import compare_batchings

SEED = 20261125
NAMES = {
    "concat_split": "concatenate and split",
    "best_fit": "best-fit packing",
    "vsl": "variable sequence length",
}


def lognormal(n: int, seed: int = SEED) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.maximum(1, rng.lognormal(6.0, 1.1, n)).astype(np.int32)


def section_batchings(n: int, seq_lens: list[int], min_seq_lens: list[int], ranks: int) -> None:
    lengths = DocumentLengths(lognormal(n))
    total = lengths.total_tokens
    print(f"\n## 1. Three batchings of {n:,} documents ({total:,} tokens), {ranks} ranks x 1 row\n")
    print("| seq_len | batching | steps per epoch | tokens dropped | tokens padded | first batch |")
    print("|---:|---|---:|---:|---:|---:|")
    for seq_len in seq_lens:
        plan = PackingPlan(lengths, seq_len)
        for i, low in enumerate(min_seq_lens):
            rows = compare_batchings(plan, num_replicas=ranks, batch_size=1, min_seq_len=low)
            for key, r in rows.items():
                if i and key != "vsl":
                    continue  # the same figures as with the first min_seq_len
                name = NAMES[key] + (f", chunks >= {low:,}" if key == "vsl" else "")
                first = "-" if key == "concat_split" else f"{r['seconds']:.2f} s"
                print(
                    f"| {seq_len:,} | {name} | {r['steps']:,} | {r['tokens_dropped']:,} "
                    f"({100 * r['tokens_dropped'] / total:.2f} %) | {r['tokens_padded']:,} | "
                    f"{first} |"
                )


_CHILD = """
import json, sys, time, tracemalloc
import numpy as np
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.vsl import VariableLengthSampler
path, n, seq_len, min_seq_len, ranks = sys.argv[1], *map(int, sys.argv[2:6])
curriculum = sys.argv[6]
tracemalloc.start()
t0 = time.perf_counter()
lengths = DocumentLengths(np.memmap(path, dtype=np.int32, mode="r", shape=(n,)))
s = VariableLengthSampler(
    lengths, seq_len, seq_len, 0, ranks, seed=0, min_seq_len=min_seq_len, curriculum=curriculum
)
first = s.batch_at(0)
t1 = time.perf_counter()
steps = len(s)
t2 = time.perf_counter()
mid = s.batch_at(steps // 2)
t3 = time.perf_counter()
saved = s.state_at(0, steps // 2)
t4 = time.perf_counter()
plan = s.epoch_plan(0, layout={"data_parallel_size": 7})
progress = {k: saved[k] for k in s.progress_keys}
on7 = plan.anchored(progress)
at = on7.step_of(progress)
elastic = on7.batches(0, at, at + 1)
t5 = time.perf_counter()
peak = tracemalloc.get_traced_memory()[1]
index = s._index.cumulative.nbytes
print(json.dumps({"first": t1 - t0, "len": t2 - t1, "mid": t3 - t2, "state": t4 - t3,
                  "elastic": t5 - t4, "peak": peak, "index": index, "steps": steps,
                  "chunks": sum(s.chunk_counts),
                  "batch": len(first) + len(mid) + len(elastic)}))
"""


def write_big(path: Path, n: int) -> None:
    slab = 10**7
    with path.open("wb") as f:
        for start in range(0, n, slab):
            f.write(lognormal(min(slab, n - start), seed=SEED + start // slab).tobytes())


def section_big(path: Path, n: int, seq_len: int, min_seq_len: int, ranks: int) -> None:
    if not path.exists() or path.stat().st_size != 4 * n:
        t0 = time.perf_counter()
        write_big(path, n)
        print(f"\n(wrote {path}: {n:,} int32 lengths in {time.perf_counter() - t0:.0f} s)")
    print(f"\n## 2. First batch at {n:,} documents (memory-mapped int32 lengths)\n")
    print(f"{seq_len:,} tokens per rank, chunks of {min_seq_len:,} to {seq_len:,}, {ranks} ranks")
    print("\n| curriculum | documents | chunks | steps per epoch | first batch | len() | "
          "a mid-epoch batch | its state | its first batch on 7 ranks | chunk index | "
          "tracemalloc peak |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for curriculum in ("natural", "grow"):
        argv = [str(path), str(n), str(seq_len), str(min_seq_len), str(ranks), curriculum]
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, check=True
        )
        r = json.loads(done.stdout)
        print(
            f"| {curriculum} | {n:,} | {r['chunks']:,} | {r['steps']:,} | {r['first']:.1f} s | "
            f"{r['len']:.3f} s | {1000 * r['mid']:.1f} ms | {r['state']:.1f} s | "
            f"{1000 * r['elastic']:.1f} ms | "
            f"{r['index'] / 2**20:.1f} MiB | {r['peak'] / 2**20:.0f} MiB |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny inputs, for CI")
    parser.add_argument("--big", default="/tmp/len1e9.i32", help="10^9 int32 lengths (section 2)")
    parser.add_argument("--min-seq-len", type=int, default=256, help="shortest chunk")
    args = parser.parse_args()
    if args.smoke:
        section_batchings(5_000, [1024], [64], 4)
        with tempfile.TemporaryDirectory() as tmp:
            section_big(Path(tmp) / "lengths.i32", 10**5, 1024, 64, 4)
        return
    section_batchings(200_000, [2048, 8192], [args.min_seq_len, 64], 8)
    section_big(Path(args.big), 10**9, 8192, args.min_seq_len, 8)


if __name__ == "__main__":
    main()
