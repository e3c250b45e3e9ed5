"""Benchmark of the packing engine beside the packers people use: padding, split documents, time
to the first row, memory; the window curve; balanced dealing; Megatron-Core's index build; 10^9.

Prints markdown tables; never asserts a timing. ``--smoke`` runs every section on tiny inputs
(what CI runs).

    python benchmarks/bench_pack.py                    # the report's figures (a few minutes)
    python benchmarks/bench_pack.py --smoke            # seconds, for CI
    python benchmarks/bench_pack.py --peer-python /venv/bin/python   # an interpreter with the
        # optional peers (megatron-core==0.16.1, trl) for sections 1 and 5

Lengths: ``N = 2 x 10^5`` documents, ``max(1, floor(lognormal(mu=6.0, sigma=1.1)))`` from
``numpy.random.default_rng(SEED)`` (mean about 740 tokens), the same for every method.

Every method packs the same *pieces*, so padding compares rules, not length handling: a document
of at most ``seq_len`` tokens is one piece; a longer one gives ``floor(L / seq_len)`` full rows
and its remainder is a piece (what ``split="overflow"`` does) in the overflow tables; under
``split="never"`` (seq_len 2048) a longer document is truncated to one full row. The peers'
rules, written in our own code from their descriptions (shared/reference/packing_peers.md):

* concat-and-split (Megatron-LM ``GPTDataset``): the pieces back to back, cut every ``seq_len``;
  "time to first row" is the vectorised sample index over the corpus (Megatron builds it whole
  before the first sample; section 5 times Megatron-Core's own build);
* next-fit in stream order (NeMo Automodel ``packed_sequence``): one open row, closed (padded)
  when the next piece does not fit;
* first-fit with N open bins (Grain ``FirstFitPackIterDataset``, torchtitan's default N = 8):
  a piece goes to the first open bin with room; when none has room, all N bins are emitted and N
  empty bins opened;
* global best-fit decreasing (the bound of rules that never split a piece): every piece of the
  corpus at once, our fit loop with rows opened as needed;
* TRL ``pack_dataset(strategy="bfd")`` (optional peer): its own code, run on an Arrow dataset of
  the pieces (token values are zeros), in ``--peer-python``.

"Split %" counts the documents of at most ``seq_len`` tokens whose tokens land in more than one
row. "First row" is the time until the first row exists, in this process, best of 3; "memory" is
tracemalloc's peak over the same span (numpy's buffers included), from a separate run. Ours
builds the plan and packs the first window; under ``split="never"`` that includes every window's
row count (counted run by run of equal lengths, not packed), which the epoch's row positions
need. The online peers (next-fit, first-fit) emit their first row after a few documents, but
per rank and with buffer state; concat-and-split and the global fit build their whole index.

Section 4.2 times ``deal()`` alone per block at ``ranks x rows`` layouts from 16 x 4 to the
largest block a sampler accepts (2 x 131,072 and 131,072 x 2 rows), on packed rows of seq_len 128
(enough rows for those blocks): the median over a few blocks, per row, and tracemalloc's peak.

Section 5 (Megatron-Core ``GPTDataset``, optional) writes a real ``.idx`` of lognormal lengths
(vectorised: the header and arrays of megatron_files' format) beside a sparse ``.bin`` (no token
is read by the index build), then times ``GPTDataset`` construction with its index cache in a
temporary directory, in a fresh ``--peer-python`` process, and reports its peak RSS increase.
Section 6 reads ``--big`` (default ``/tmp/len1e9.i32``, 10^9 int32 lognormal lengths) when it
exists: the first global batch and one at mid-epoch, in fresh processes, with tracemalloc's peak
(allocations beyond the memory map) and the wall time, page cache warm.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dataorder.core.dealing import deal, deal_bounds
from dataorder.llm.packing.fit import best_fit
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.plan import PackingPlan

SEED = 20261125
N_DOCS = 200_000
HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def lognormal_lengths(n: int, seed: int = SEED) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.maximum(1, rng.lognormal(6.0, 1.1, n)).astype(np.int64)


def pieces(lengths: np.ndarray, seq_len: int, split: str) -> tuple[int, np.ndarray, np.ndarray]:
    """``(full rows, piece lengths in stream order, piece is a whole short document)``."""
    long = lengths > seq_len
    if split == "never":
        return int(long.sum()), lengths[~long], np.ones(int((~long).sum()), dtype=bool)
    full = int((lengths[long] // seq_len).sum())
    rest = np.where(long, lengths % seq_len, lengths)
    keep = rest > 0
    return full, rest[keep], ~long[keep]


# -- the peers' rules (our code) -------------------------------------------------------------------


def concat_split(p: np.ndarray, short: np.ndarray, s: int) -> tuple[int, int]:
    """``(rows, short pieces split)`` of concat-and-split."""
    end = np.cumsum(p)
    start = end - p
    split = (start // s) != ((end - 1) // s)
    return int(-(-int(end[-1]) // s)), int((split & short).sum())


def next_fit(p: list[int], s: int, first_only: bool = False) -> int:
    rows, room = 0, 0
    for x in p:
        if x > room:
            rows += 1
            if first_only and rows == 2:
                return rows
            room = s
        room -= x
    return rows


def first_fit(p: list[int], s: int, bins: int, first_only: bool = False) -> int:
    rows = 0
    room = [s] * bins
    for x in p:
        for i in range(bins):
            if room[i] >= x:
                room[i] -= x
                break
        else:
            rows += bins  # every bin holds something: an empty one would have had room
            if first_only:
                return rows
            room = [s] * bins
            room[0] -= x
    return rows + sum(1 for r in room if r < s)


def global_bfd(p: np.ndarray, s: int) -> int:
    return best_fit(np.sort(p)[::-1].tolist(), s, None)[3]


# -- measuring -----------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, int]:
    """``(best wall time of repeats, tracemalloc peak of one more run)``."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak


def fmt_time(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def fmt_mem(b: int) -> str:
    return f"{b / 2**20:.1f} MB" if b >= 2**20 else f"{b / 2**10:.0f} KB"


def table(head: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:.3f} %" if b else "-"


# -- sections 1-2: ours beside the peers -----------------------------------------------------------


def ours_row(lengths: np.ndarray, s: int, split: str, window: int, repeats: int) -> list[Any]:
    window = min(window, -(-len(lengths) // 128) * 128)

    def first() -> Any:
        plan = PackingPlan(DocumentLengths(lengths), s, split=split, window=window)
        return plan.epoch(0).rows(np.zeros(1, dtype=np.int64))

    t, peak = timed(first, repeats)
    stats = PackingPlan(DocumentLengths(lengths), s, split=split, window=window).stats()
    short = stats.documents - stats.documents_longer
    return [
        f"ours, {split}, window {window:,}",
        pct(stats.tokens_padded, stats.rows * s),
        pct(stats.split_shorter, short),
        fmt_time(t),
        fmt_mem(peak),
    ]


def peer_rows(lengths: np.ndarray, s: int, split: str, repeats: int, trl: Any) -> list[list[Any]]:
    full, p, short = pieces(lengths, s, split)
    plist = p.tolist()
    tokens = int(p.sum())
    n_short = int((lengths <= s).sum())
    out = []

    def add(name: str, rows: int, split_docs: int, fn: Callable[[], Any]) -> None:
        t, peak = timed(fn, repeats)
        padded = (rows + full) * s - tokens - full * s
        out.append([name, pct(padded, (rows + full) * s), pct(split_docs, n_short), fmt_time(t),
                    fmt_mem(peak)])  # fmt: skip

    rows, split_docs = concat_split(p, short, s)
    add("concat-and-split (Megatron)", rows, split_docs, lambda: concat_split(p, short, s))
    add("next-fit, stream order (NeMo Automodel)", next_fit(plist, s), 0,
        lambda: next_fit(plist, s, first_only=True))  # fmt: skip
    for bins in (8, 64):
        add(f"first-fit, {bins} open bins (torchtitan/Grain)", first_fit(plist, s, bins), 0,
            lambda b=bins: first_fit(plist, s, b, first_only=True))  # fmt: skip
    add("global best-fit decreasing (bound)", global_bfd(p, s), 0, lambda: global_bfd(p, s))
    if trl is not None:
        got = trl(p, s)
        if got is not None:
            rows, seconds, peak, version = got
            padded = rows * s - tokens
            out.append([f"TRL {version} pack_dataset(strategy='bfd')",
                        pct(padded, (rows + full) * s), pct(0, n_short), fmt_time(seconds),
                        f"{fmt_mem(peak)} (RSS)"])  # fmt: skip
    return out


# Peak RSS of a span: the kernel's high-water mark, reset through /proc/self/clear_refs at its
# start, minus the RSS then (as benchmarks/README.md describes for the suite).
_RSS = """
def rss(field):
    if field == "VmRSS":
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
"""

_TRL_CHILD = """
import json, sys, time
import numpy as np, pyarrow as pa
from datasets import Dataset
import trl
from trl import pack_dataset
p = np.load(sys.argv[1]); s = int(sys.argv[2])
offsets = np.concatenate([[0], np.cumsum(p)]).astype(np.int64)
values = pa.array(np.zeros(int(offsets[-1]), np.int32))
column = pa.LargeListArray.from_arrays(pa.array(offsets), values)
ds = Dataset(pa.table({"input_ids": column}))
_RSS_
rss0 = rss("VmRSS")
t = time.perf_counter()
packed = pack_dataset(ds, seq_length=s, strategy="bfd")
seconds = time.perf_counter() - t
peak = rss("VmHWM") - rss0
print(json.dumps([len(packed), seconds, peak, trl.__version__]))
"""


_TRL_CHILD = _TRL_CHILD.replace("_RSS_", _RSS)


def trl_runner(python: str | None) -> Callable[[np.ndarray, int], Any] | None:
    if python is None:
        return None

    def run(p: np.ndarray, s: int) -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            np.save(Path(tmp) / "p.npy", p)
            argv = [python, "-c", _TRL_CHILD, str(Path(tmp) / "p.npy"), str(s)]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
        if proc.returncode != 0:
            print(f"(TRL skipped: {proc.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
            return None
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run


def section_peers(lengths: np.ndarray, s: int, split: str, windows: list[int], repeats: int,
                  trl: Any) -> str:  # fmt: skip
    rows = [ours_row(lengths, s, split, w, repeats) for w in windows]
    rows += peer_rows(lengths, s, split, repeats, trl)
    head = ["method", "padding (% of row tokens)", "split (% of docs <= seq_len)",
            "first row", "memory (tracemalloc peak)"]  # fmt: skip
    return table(head, rows)


# -- section 3: the window curve -----------------------------------------------------------------


def section_windows(lengths: np.ndarray, cases: list[tuple[int, str]], windows: list[int]) -> str:
    rows = []
    for s, split in cases:
        for w in windows:
            w = min(w, -(-len(lengths) // 128) * 128)
            plan = PackingPlan(DocumentLengths(lengths), s, split=split, window=w)
            stats = plan.stats()
            times = []
            for k in range(min(3, plan.num_windows)):
                t = time.perf_counter()
                plan.packed_window(1, k)
                times.append(time.perf_counter() - t)
            per_window = float(np.median(times))
            docs = len(plan.grid.documents(0))
            rows.append([
                f"{split}, seq_len {s:,}", f"{w:,}", pct(stats.tokens_padded, stats.rows * s),
                pct(stats.split_shorter, stats.documents - stats.documents_longer),
                fmt_time(per_window), f"{1e6 * per_window / docs:.2f} us",
            ])  # fmt: skip
    head = ["mode", "window (documents)", "padding", "split (% of docs <= seq_len)",
            "pack one window (a resume)", "per document"]  # fmt: skip
    return table(head, rows)


# -- section 4: dealing --------------------------------------------------------------------------


def local_search(c: np.ndarray, dealt: np.ndarray, steps: int, seed: int) -> int:
    """The costliest rank after ``steps`` random swaps from ``dealt``, each kept when it does not
    raise the larger of the two loads (ties: lower sum of squares), plus 1 % random walks; the
    best costliest rank seen. A search for a better dealing than ours, for the comparison."""
    rng = np.random.default_rng(seed)
    dp, per_rank = dealt.shape
    owner = np.empty(dp * per_rank, dtype=np.int64)
    for r in range(dp):
        owner[dealt[r]] = r
    cost = c.tolist()
    own = owner.tolist()
    loads = [0] * dp
    for i, r in enumerate(own):
        loads[r] += cost[i]
    best = max(loads)
    pairs = rng.integers(0, len(cost), size=(steps, 2)).tolist()
    walks = (rng.random(steps) < 0.01).tolist()
    for (i, j), walk in zip(pairs, walks, strict=True):
        a, b = own[i], own[j]
        if a == b:
            continue
        la, lb = loads[a] - cost[i] + cost[j], loads[b] - cost[j] + cost[i]
        old, new = max(loads[a], loads[b]), max(la, lb)
        if new < old or (new == old and la * la + lb * lb < loads[a] ** 2 + loads[b] ** 2) or walk:
            loads[a], loads[b] = la, lb
            own[i], own[j] = b, a
            best = min(best, max(loads))
    return best


def section_deal(
    lengths: np.ndarray, layouts: list[tuple[int, int]], seqs: list[int], steps: int
) -> str:
    rows = []
    for s in seqs:
        plan = PackingPlan(DocumentLengths(lengths), s)
        epoch = plan.epoch(0)
        costs = epoch.costs(np.arange(epoch.num_rows))
        for dp, per_rank in layouts:
            block = dp * per_rank
            loose, tight, found, secs = [], [], [], []
            for b in range(epoch.num_rows // block):
                c = costs[b * block : (b + 1) * block]
                t = time.perf_counter()
                dealt = deal(c, per_rank, dp)
                secs.append(time.perf_counter() - t)
                worst = int(c[dealt].sum(axis=1).max())
                b1, b2 = deal_bounds(c, per_rank, dp)
                loose.append(worst / b1)
                tight.append(worst / b2)
                found.append(worst / local_search(c, dealt, steps, b))
            naive = []  # ranks take contiguous slices, no dealing
            for b in range(epoch.num_rows // block):
                c = costs[b * block : (b + 1) * block]
                naive.append(int(c.reshape(dp, per_rank).sum(axis=1).max()) / deal_bounds(
                    c, per_rank, dp)[0])  # fmt: skip
            la, ta, na, fa = np.array(loose), np.array(tight), np.array(naive), np.array(found)
            rows.append([
                f"{s:,}", f"{dp} x {per_rank}", len(loose),
                f"{la.mean():.3f} / {np.quantile(la, 0.99):.3f} / {la.max():.3f}",
                f"{ta.mean():.3f} / {np.quantile(ta, 0.99):.3f} / {ta.max():.3f}",
                f"{fa.mean():.3f} / {fa.max():.3f}",
                f"{na.mean():.3f} / {np.quantile(na, 0.99):.3f} / {na.max():.3f}",
                f"{1e3 * float(np.median(secs)):.2f} ms",
            ])  # fmt: skip
    head = ["seq_len", "ranks x rows", "blocks",
            "costliest / max(mean, costliest row): mean / p99 / max",
            "costliest / best lower bound: mean / p99 / max",
            f"costliest / best of a {steps:,}-step local search: mean / max",
            "no dealing (contiguous slices): mean / p99 / max", "deal() time"]  # fmt: skip
    return table(head, rows)


def section_deal_time(
    lengths: np.ndarray, layouts: list[tuple[int, int]], seq_len: int, blocks: int
) -> str:
    """deal() per block at each ``ranks x rows`` layout, on the epoch's first ``blocks`` blocks of
    packed rows at ``seq_len``: median wall time, per row, tracemalloc peak, and the costliest
    rank over ``max(mean, costliest row)``."""
    epoch = PackingPlan(DocumentLengths(lengths), seq_len).epoch(0)
    rows = []
    for dp, per_rank in layouts:
        block = dp * per_rank
        count = min(blocks, epoch.num_rows // block)
        if count == 0:
            rows.append([f"{dp} x {per_rank}", f"{block:,}", "-", "-", "-", "-"])
            continue
        secs, ratio, peak = [], [], 0
        for b in range(count):
            c = epoch.costs(np.arange(b * block, (b + 1) * block))
            t = time.perf_counter()
            dealt = deal(c, per_rank, dp)
            secs.append(time.perf_counter() - t)
            worst = int(c[dealt].sum(axis=1).max())
            ratio.append(worst / max(-(-int(c.sum()) // dp), int(c.max())))
        c = epoch.costs(np.arange(block))
        tracemalloc.start()
        deal(c, per_rank, dp)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        median = float(np.median(secs))
        rows.append([
            f"{dp} x {per_rank}", f"{block:,} ({count} blocks)", f"{1e3 * median:.2f} ms",
            f"{1e6 * median / block:.2f} us", fmt_mem(peak), f"{float(np.mean(ratio)):.4f}",
        ])  # fmt: skip
    head = ["ranks x rows", "block (rows)", "deal() per block (median)", "per row",
            "tracemalloc peak", "costliest / max(mean, costliest row), mean"]  # fmt: skip
    return table(head, rows)


# -- section 5: Megatron-Core GPTDataset ---------------------------------------------------------


def write_index(prefix: Path, lengths: np.ndarray) -> None:
    """A Megatron ``.idx`` (uint16 tokens) for ``lengths`` and a sparse ``.bin`` of the right
    size (megatron_files' format, written in one vectorised pass)."""
    import struct

    n = lengths.shape[0]
    pointers = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1] * 2, out=pointers[1:])
    with open(f"{prefix}.idx", "wb") as f:
        f.write(struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, 8, n, n + 1))
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(np.arange(n + 1, dtype="<i8").tobytes())
    with open(f"{prefix}.bin", "wb") as f:
        f.truncate(int(lengths.sum()) * 2)


_MEGATRON_CHILD = """
import json, sys, time, logging
import numpy as np
logging.disable(logging.WARNING)
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.indexed_dataset import IndexedDataset
from megatron.core.datasets.utils import Split
import megatron.core
class Tok:
    vocab_size = 50000; eod = 0; pad = 1; bos = None
    unique_identifiers = {"class": "Tok"}
    def tokenize(self, t): return []
prefix, seq_len, cache = sys.argv[1], int(sys.argv[2]), sys.argv[3]
_RSS_
rss0 = rss("VmRSS")
t = time.perf_counter()
ds = IndexedDataset(prefix)
n = len(ds)
config = GPTDatasetConfig(random_seed=1234, sequence_length=seq_len, blend=([prefix], None),
    split="100,0,0", tokenizer=Tok(), reset_position_ids=False, reset_attention_mask=False,
    eod_mask_loss=False, path_to_cache=cache, mmap_bin_files=True)
gpt = GPTDataset(ds, prefix, np.arange(n, dtype=np.int32), None, Split.train, config)
seconds = time.perf_counter() - t
peak = rss("VmHWM") - rss0
print(json.dumps([seconds, peak, len(gpt), megatron.core.__version__]))
"""


_MEGATRON_CHILD = _MEGATRON_CHILD.replace("_RSS_", _RSS)


def section_megatron(python: str | None, sizes: list[int], seq_len: int) -> str:
    if python is None:
        return "Skipped: no --peer-python with megatron-core==0.16.1.\n"
    check = subprocess.run([python, "-c", "import megatron.core"], capture_output=True, check=False)
    if check.returncode != 0:
        return f"Skipped: {python} has no megatron-core.\n"
    rows = []
    version = "?"
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            prefix = Path(tmp) / "corpus"
            write_index(prefix, lognormal_lengths(n).astype(np.int32))
            cache = Path(tmp) / "cache"
            cache.mkdir()
            ours_t, ours_peak = timed(
                lambda p=prefix: PackingPlan(DocumentLengths.from_megatron(p), seq_len)
                .epoch(0).rows(np.arange(64)),
                1,
            )  # fmt: skip
            proc = subprocess.run([python, "-c", _MEGATRON_CHILD, str(prefix), str(seq_len),
                                   str(cache)], capture_output=True, text=True, timeout=3600,
                                  check=False)  # fmt: skip
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                rows.append([f"{n:,}", "failed: " + proc.stderr.strip().splitlines()[-1][:120],
                             "", "", fmt_time(ours_t), fmt_mem(ours_peak)])  # fmt: skip
                continue
            seconds, peak, samples, version = json.loads(proc.stdout.strip().splitlines()[-1])
            cached = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
            rows.append([f"{n:,}", f"{seconds:.2f} s", f"{peak / 2**20:.0f} MB",
                         f"{fmt_mem(cached)}, {samples:,} samples", fmt_time(ours_t),
                         fmt_mem(ours_peak)])  # fmt: skip
    head = [f"documents (megatron-core {version})", "GPTDataset build",
            "peak RSS increase", "index cache on disk", "ours: first global batch (64 rows)",
            "ours: tracemalloc peak"]  # fmt: skip
    return table(head, rows)


# -- section 6: 10^9 documents -------------------------------------------------------------------

_BIG_CHILD = """
import json, sys, time, tracemalloc
import numpy as np
sys.path.insert(0, sys.argv[3])
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.plan import PackingPlan
from dataorder.core.dealing import deal
path, where = sys.argv[1], sys.argv[2]
traced = where.endswith("-traced")
if traced:
    tracemalloc.start()
t = time.perf_counter()
lengths = DocumentLengths(np.memmap(path, dtype=np.int32, mode="r"))
plan = PackingPlan(lengths, 8192)
epoch = plan.epoch(0)
start = 0 if where.startswith("first") else epoch.num_rows // 2 // 64 * 64
positions = np.arange(start, start + 64)
rows = epoch.rows(positions)
dealt = deal(epoch.costs(positions), 4, 16)
seconds = time.perf_counter() - t
peak = tracemalloc.get_traced_memory()[1] if traced else 0
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
anon = int(status["RssAnon"].split()[0]) * 1024
print(json.dumps([seconds, peak, epoch.num_rows, plan.num_windows, anon]))
"""


def section_big(path: Path) -> str:
    # warm the page cache (section 5 may have evicted the file): the figures are of a warm cache
    mm = np.memmap(path, dtype=np.int32, mode="r")
    for start in range(0, mm.shape[0], 2**26):
        int(mm[start : start + 2**26].max())
    del mm
    rows = []
    for where in ("first", "middle"):
        timed_run = _big(path, where)
        traced_run = _big(path, where + "-traced")
        if timed_run is None or traced_run is None:
            return "Failed: the child process did not finish.\n"
        seconds, _, num_rows, n_w, anon = timed_run
        rows.append([
            "first global batch" if where == "first" else "a global batch at mid-epoch",
            f"{seconds:.2f} s", fmt_mem(traced_run[1]), fmt_mem(anon), f"{num_rows:,}", f"{n_w:,}",
        ])  # fmt: skip
    head = ["16 ranks x 4 rows of 8,192 tokens", "wall time (fresh process)",
            "tracemalloc peak (beyond the map)", "anonymous RSS at the end", "rows per epoch",
            "windows"]  # fmt: skip
    return table(head, rows)


def _big(path: Path, where: str) -> Any:
    proc = subprocess.run([sys.executable, "-c", _BIG_CHILD, str(path), where, str(SRC)],
                          capture_output=True, text=True, timeout=1800, check=False)  # fmt: skip
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="tiny inputs, a few seconds")
    parser.add_argument(
        "--peer-python",
        default=None,
        help="an interpreter with megatron-core==0.16.1 and trl (optional peers)",
    )
    parser.add_argument(
        "--megatron-sizes",
        default="1e6,1e7,1e8",
        help="documents of section 5 (default 1e6,1e7,1e8)",
    )
    parser.add_argument("--big", default="/tmp/len1e9.i32", help="10^9 int32 lengths (section 6)")
    args = parser.parse_args(argv)  # fmt: skip
    smoke = args.smoke
    n = 5_000 if smoke else N_DOCS
    repeats = 1 if smoke else 3
    windows = [1024, 4096] if smoke else [4096, 16384, 65536]
    lengths = lognormal_lengths(n)
    trl = None if smoke else trl_runner(args.peer_python)
    print(f"# bench_pack.py{' --smoke' if smoke else ''}\n")
    median, top = int(np.median(lengths)), int(lengths.max())
    print(f"{n:,} documents, lognormal(6.0, 1.1) lengths, mean {lengths.mean():.1f}, median "
          f"{median}, max {top:,} tokens; seed {SEED}.\n")  # fmt: skip
    for i, s in enumerate((8192, 4096)):
        print(f"## 1.{i + 1} split='overflow', seq_len {s:,}\n")
        print(section_peers(lengths, s, "overflow", windows, repeats, trl) + "\n")
    print("## 2. split='never', seq_len 2,048 (longer documents truncated)\n")
    print(section_peers(lengths, 2048, "never", windows, repeats, trl) + "\n")
    print("## 3. The window curve (ours)\n")
    curve = [1024, 4096] if smoke else [1024, 4096, 16384, 65536, 262144]
    print(section_windows(lengths, [(8192, "overflow"), (2048, "never")], curve) + "\n")
    print("## 4. Dealing rows to ranks by attention cost (sum of span lengths squared)\n")
    layouts = [(16, 4)] if smoke else [(16, 4), (64, 2), (8, 8)]
    steps = 200 if smoke else 20_000
    print(section_deal(lengths, layouts, [8192] if smoke else [8192, 4096], steps) + "\n")
    print("### 4.2 deal() time by layout (seq_len 128: enough rows for the largest block)\n")
    timing = (
        [(16, 4), (64, 2), (2, 256), (1, 4096)]
        if smoke
        else [(16, 4), (64, 2), (2, 2048), (1, 131072), (2, 131072), (131072, 2), (4096, 4)]
    )
    print(section_deal_time(lengths, timing, 128, 3 if smoke else 5) + "\n")
    print("## 5. Megatron-Core GPTDataset index build beside ours\n")
    sizes = [int(float(x)) for x in args.megatron_sizes.split(",")] if not smoke else []
    print(section_megatron(None if smoke else args.peer_python, sizes, 8192) + "\n")
    print("## 6. 10^9 documents, memory-mapped int32 lengths, seq_len 8,192\n")
    big = Path(args.big)
    if smoke or not big.exists():
        print(f"Skipped ({'smoke run' if smoke else f'{big} does not exist'}).\n")
    else:
        print(section_big(big) + "\n")
    print(
        textwrap.dedent(f"""\
        Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python
        {platform.python_version()}, numpy {np.__version__}; load average
        {os.getloadavg()[0]:.2f}. Command: python benchmarks/bench_pack.py {" ".join(sys.argv[1:])}
        """)
    )


if __name__ == "__main__":
    main()
