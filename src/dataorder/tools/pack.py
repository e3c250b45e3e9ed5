"""``dataorder pack LENGTHS --seq-len 8192``: what packing a corpus into rows looks like.

LENGTHS is a Megatron ``.idx``/``.bin`` or prefix, a ``.npy`` of lengths, a ``.parquet`` /
``.arrow`` file with a list column of token ids (``--column``, default ``input_ids``), or a
folder written by ``datasets.Dataset.save_to_disk`` (its Arrow files, memory-mapped, without
importing ``datasets``). Several weighted corpora are given as Megatron's ``--data-path`` gives
them, ``W1 LENGTHS1 W2 LENGTHS2 ...``: they are packed as ``PackedSampler(mixture=...)`` packs
them, each on its own, and the command prints each corpus and the rows an epoch of the mixture
reads from each. The command prints the corpus, its document lengths' percentiles, the rows of
an epoch, the padding, the documents split across rows (shorter than ``seq_len``, and longer),
the tokens cut (``--split never``), and with ``--num-replicas R --batch-size B`` the steps of an
epoch at ``R x B`` rows per step and the rows left over; with ``--png`` a histogram of row fill.
With ``--vsl`` it sets three batchings of the same corpus side by side at the same ``R x B x
seq_len`` tokens per step (:func:`compare_batchings`): concatenate-and-split, best-fit packing
(the packed sampler) and variable sequence length chunks (the VSL sampler, ``--seq-len`` its
longest chunk, ``--min-seq-len`` its shortest): tokens dropped, padded and steps per epoch.
Every figure comes from :class:`~dataorder.llm.packing.plan.PackingPlan`, the engine the sampler
reads. While it packs, a terminal's stderr shows that it works (never stdout, never a pipe).

The module exposes :func:`add_parser` (registers the subcommand) and :func:`run`.

Imports inside functions: NOTE [ What a subcommand module imports ] in :mod:`dataorder.tools.cli`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from dataorder.core.keys import MAX_SEED
from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.core.topology import MAX_DP_SIZE
from dataorder.llm.packing.arrow_columns import require_pyarrow
from dataorder.llm.packing.fit import LONG_DOCUMENTS, SPLITS
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.plan import (
    DEFAULT_CHUNK,
    DEFAULT_WINDOW,
    MAX_CHUNK,
    MAX_SEQ_LEN,
    MAX_WINDOW,
    PackingPlan,
)
from dataorder.tools.output import Output, check_output_file, cut_value, int_arg, working
from dataorder.tools.plots import require_matplotlib

__all__ = [
    "PERCENTILES",
    "add_parser",
    "compare_batchings",
    "length_percentiles",
    "plot_fill",
    "read_lengths",
    "run",
]


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``dataorder pack`` to ``subparsers`` (``parents``: the shared options)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "pack",
        parents=parents,
        help="pack a corpus into rows of seq_len tokens: padding, split documents, steps",
        description=(
            "Pack documents into rows of --seq-len tokens by best fit in windows, as the packed "
            "sampler does, and print rows, padding, documents split across rows and steps per "
            "epoch. LENGTHS: a Megatron .idx/.bin or prefix, a .npy of lengths, a "
            ".parquet/.arrow file with a list column of token ids, or a datasets save_to_disk "
            "folder; several weighted corpora as Megatron's --data-path writes them: "
            "W1 LENGTHS1 W2 LENGTHS2 ..."
        ),
    )
    p.add_argument(
        "lengths",
        metavar="LENGTHS",
        nargs="+",
        help="one corpus, or weighted corpora: W1 LENGTHS1 W2 LENGTHS2 ... (a mixture)",
    )
    p.add_argument("--seq-len", type=int_arg(1, MAX_SEQ_LEN), required=True, help="tokens per row")
    p.add_argument(
        "--split",
        default="overflow",
        choices=SPLITS,
        help="overflow: every token once, split what cannot fit (pretraining); never: no "
        "document split, longer ones truncated or dropped (fine-tuning) (default: overflow)",
    )
    p.add_argument(
        "--long-documents",
        default="truncate",
        choices=LONG_DOCUMENTS,
        help="with --split never: what happens to a document longer than --seq-len "
        "(default: truncate)",
    )
    p.add_argument(
        "--window",
        type=int_arg(1, MAX_WINDOW),
        default=None,
        help=f"documents per window (default: {DEFAULT_WINDOW:,}, rounded down to whole chunks)",
    )
    p.add_argument(
        "--chunk",
        type=int_arg(1, MAX_CHUNK),
        default=None,
        help=f"documents per chunk (default: {DEFAULT_CHUNK})",
    )
    p.add_argument("--seed", type=int_arg(0, MAX_SEED), default=0, help="seed (default: 0)")
    p.add_argument(
        "--column",
        default="input_ids",
        help="Arrow/parquet list column of token ids (default: input_ids)",
    )
    p.add_argument(
        "--num-replicas",
        type=int_arg(1, MAX_DP_SIZE),
        default=None,
        help="data-parallel size R (default: no steps shown)",
    )
    p.add_argument(
        "--batch-size",
        type=int_arg(1, MAX_BATCH_SIZE),
        default=None,
        help="rows per rank per step B (a mixture: R x B is its global batch; default 1)",
    )
    p.add_argument(
        "--png", default=None, help="write a histogram of row fill to this PNG (default: none)"
    )
    p.add_argument(
        "--vsl",
        action="store_true",
        help="also compare concatenate-and-split, best-fit packing and variable sequence length "
        "chunks of --min-seq-len to --seq-len tokens (a power of two) at R x B x seq_len tokens "
        "per step: tokens dropped, padded, steps per epoch (default: off)",
    )
    p.add_argument(
        "--min-seq-len",
        type=int_arg(1, MAX_SEQ_LEN),
        default=256,
        help="with --vsl: the shortest chunk, a power of two (default: 256)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    return p


def run(args: argparse.Namespace, out: Output) -> int:
    """Run ``dataorder pack``; return the exit status (a ValueError is a user error)."""
    corpora = _corpora(args.lengths)
    if (args.num_replicas is None) != (args.batch_size is None):
        raise ValueError("--num-replicas and --batch-size go together (R x B rows per step)")
    if args.split == "overflow" and args.long_documents != "truncate":
        raise ValueError("--long-documents applies with --split never (overflow drops nothing)")
    if args.png:
        check_output_file(args.png, "--png")  # before the packing, not after it
    for flag, value in (("--seq-len", args.seq_len), ("--min-seq-len", args.min_seq_len)):
        if args.vsl and value & (value - 1):
            raise ValueError(f"{flag} must be a power of two with --vsl; got {flag} {value}")
    if len(corpora) > 1:
        if args.vsl:
            raise ValueError("--vsl compares batchings of one corpus; got a mixture")
        return _run_mixture(args, out, corpora)
    with working(f"packing {Path(corpora[0][1]).name} into rows of {args.seq_len:,} tokens"):
        plan = _plan(args, corpora[0][1])
        figures = _figures(plan, args, corpora[0][1])
        fill = plan.fill_histogram() if args.png else None
        if args.vsl:
            figures["batchings"] = compare_batchings(
                plan,
                num_replicas=args.num_replicas or 1,
                batch_size=args.batch_size or 1,
                min_seq_len=args.min_seq_len,
            )
    if args.json:
        out.json(figures)
    else:
        stats = plan.stats()
        shorter = stats.documents - stats.documents_longer - stats.documents_empty
        _print(out, figures, shorter, stats.documents)
        if args.vsl:
            _print_batchings(out, figures["batchings"], figures["tokens"])
    if args.png:
        path = plot_fill(fill, args.png, title=_title(figures))
        if not args.json:
            out.line(f"wrote {path}")
    return 0


#: NOTE [ Weighted corpora on the command line ]
#:     Several corpora are given as Megatron-LM's ``--data-path`` gives them, weight then path
#:     (``dataorder pack 0.3 web 0.7 code --seq-len 8192``), so that a run's own argument can be
#:     pasted; one path alone needs no weight. Each corpus is packed on its own, as
#:     ``PackedSampler(mixture=...)`` packs it (its own seed, windows and rows), and the rows an
#:     epoch of the mixture reads from each are the sampler's own ``consumed_per_source``.
def _corpora(values: list[str]) -> list[tuple[float | None, str]]:
    """LENGTHS: one path, or weight and path pairs (NOTE [ Weighted corpora on the command
    line ])."""
    if len(values) == 1:
        return [(None, values[0])]
    form = "one corpus, or pairs of a weight and a corpus: W1 LENGTHS1 W2 LENGTHS2 ..."
    if len(values) % 2:
        raise ValueError(f"LENGTHS must be {form}; got {len(values)} values")
    pairs: list[tuple[float | None, str]] = []
    for weight, path in zip(values[::2], values[1::2], strict=True):
        try:
            w = float(weight)
        except ValueError:
            raise ValueError(
                f"LENGTHS must be {form}; got the weight {cut_value(weight)}"
            ) from None
        if not (math.isfinite(w) and w >= 0):
            raise ValueError(
                f"each weight of LENGTHS must be a finite number >= 0; got {cut_value(weight)}"
            )
        pairs.append((w, path))
    if not any(w for w, _ in pairs):
        raise ValueError(f"LENGTHS weights must not all be 0; got {' '.join(values[::2])}")
    return pairs


def read_lengths(path: str, column: str = "input_ids") -> Any:
    """The documents' lengths in ``path`` as ``dataorder pack`` reads them: a file
    :meth:`~dataorder.llm.packing.lengths.DocumentLengths.from_file` reads, or a folder written by
    ``datasets.Dataset.save_to_disk``. An Arrow or parquet file without ``column`` is refused
    naming its list columns of token ids and ``--column``.

    Raises:
        ValueError: If the file or folder cannot be read, or has no such column.
    """
    p = Path(path)
    known = (".idx", ".bin", ".npy", ".parquet", ".arrow", ".feather", ".ipc")
    # a folder named like a file is refused by from_file, as any special file is
    if p.is_dir() and ((p / "state.json").is_file() or p.suffix.lower() not in known):
        table = _saved_dataset(p)
        _check_column(table.schema, column, path)
        return DocumentLengths.from_arrow(table, column)
    if p.suffix.lower() in (".parquet", ".arrow", ".feather", ".ipc") and p.is_file():
        schema = _schema(p)
        if schema is not None:
            _check_column(schema, column, path)
    return DocumentLengths.from_file(path, column=column)


def _schema(path: Path) -> Any:
    """The Arrow schema of a parquet or Arrow file, read from its footer or header only (None if
    it cannot be read: ``from_file`` then says why)."""
    pa = require_pyarrow()
    try:
        if path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_schema(path)
        try:
            return pa.ipc.open_file(pa.memory_map(str(path))).schema
        except pa.ArrowInvalid:
            return pa.ipc.open_stream(pa.memory_map(str(path))).schema
    except (pa.ArrowException, OSError):
        return None


def _check_column(schema: Any, column: str, where: str) -> None:
    """Refuse ``--column`` when the table has no such column, naming the columns it could be."""
    import pyarrow as pa

    if column in schema.names:
        return
    lists = [
        f.name
        for f in schema
        if (pa.types.is_list(f.type) or pa.types.is_large_list(f.type))
        and pa.types.is_integer(f.type.value_type)
    ]
    if lists:
        hint = f"its list columns of token ids: {', '.join(lists)}; pass --column {lists[0]}"
    else:
        hint = f"it has no list column of token ids; its columns: {', '.join(schema.names)}"
    raise ValueError(f"{where} has no column {column!r} (--column, default input_ids): {hint}")


def _saved_dataset(folder: Path) -> Any:
    """The Arrow table of a ``datasets.Dataset.save_to_disk`` folder: its ``state.json``'s
    Arrow stream files, memory-mapped (``save_to_disk`` writes the selected rows, so there is no
    indices mapping to apply); ``datasets`` is not imported."""
    state = folder / "state.json"
    if not state.is_file():
        raise ValueError(
            f"LENGTHS {str(folder)!r} is a folder without state.json: give a file, or a folder "
            "written by datasets' save_to_disk"
        )
    try:
        files = [folder / f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{state} is not a datasets state.json: {err!r}") from None
    pa = require_pyarrow()
    tables = []
    for f in files:
        try:
            tables.append(pa.ipc.open_stream(pa.memory_map(str(f))).read_all())
        except (pa.ArrowException, OSError) as err:
            raise ValueError(f"{f} is not a readable Arrow file: {err}") from None
    if not tables:
        raise ValueError(f"{state} lists no data file")
    return pa.concat_tables(tables)


def _plan(args: argparse.Namespace, path: str) -> PackingPlan:
    """The packing plan of one corpus with the command line's options."""
    return PackingPlan(
        read_lengths(path, args.column),
        args.seq_len,
        split=args.split,
        window=args.window,  # None: the default window, in whole chunks
        chunk=args.chunk if args.chunk is not None else DEFAULT_CHUNK,
        long_documents=args.long_documents,
        seed=args.seed,
    )


def _run_mixture(
    args: argparse.Namespace, out: Output, corpora: list[tuple[float | None, str]]
) -> int:
    """Several weighted corpora, packed as ``PackedSampler(mixture=...)`` packs them."""
    from dataorder.llm.packing.sampler import PackedSampler

    r, b = args.num_replicas or 1, args.batch_size or 1
    weights = [float(w or 0) for w, _ in corpora]
    with working(f"packing {len(corpora)} corpora into rows of {args.seq_len:,} tokens"):
        sources = [read_lengths(path, args.column) for _, path in corpora]
        sampler = PackedSampler(
            None,
            args.seq_len,
            micro_batch_size=b,
            data_parallel_rank=0,
            data_parallel_size=r,
            seed=args.seed,
            split=args.split,
            long_documents=args.long_documents,
            window=args.window,
            chunk=args.chunk if args.chunk is not None else DEFAULT_CHUNK,
            global_batch_size=r * b,
            mixture=(sources, weights),
        )
        steps = sampler.total_rows // (r * b)  # an epoch of a mixture is whole global batches
        per_source = sampler.consumed_per_source(steps * r * b).tolist()
        figures = [
            _figures(plan, args, path, steps=False)
            for plan, (_, path) in zip(sampler.plans, corpora, strict=True)
        ]
        fill = (
            np.sum([plan.fill_histogram() for plan in sampler.plans], axis=0) if args.png else None
        )
    total = steps * r * b
    mixture: dict[str, Any] = {
        "rows_per_epoch": total,
        "global_batch_size": r * b,
        "steps": steps,
        "corpora": [
            {
                "lengths": f["lengths"],
                "weight": w,
                "rows_per_pass": f["rows"],
                "rows_per_epoch": k,
                "passes_per_epoch": k / f["rows"] if f["rows"] else 0.0,
            }
            for f, w, k in zip(figures, weights, per_source, strict=True)
        ],
    }
    if args.json:
        out.json({"mixture": mixture, "corpora": figures})
    else:
        for f, plan in zip(figures, sampler.plans, strict=True):
            stats = plan.stats()
            shorter = stats.documents - stats.documents_longer - stats.documents_empty
            _print(out, f, shorter, stats.documents)
        out.table(
            f"an epoch of the mixture: {total:,} rows, {mixture['steps']:,} steps of "
            f"{r * b:,} rows (R x B)",
            ["corpus", "weight", "rows per pass", "rows per epoch", "passes"],
            [
                [
                    c["lengths"],
                    f"{c['weight']:g}",
                    f"{c['rows_per_pass']:,}",
                    f"{c['rows_per_epoch']:,}",
                    f"{c['passes_per_epoch']:.3f}",
                ]
                for c in mixture["corpora"]
            ],
        )
    if args.png:
        path = plot_fill(fill, args.png, title=f"{len(corpora)} corpora, seq_len {args.seq_len:,}")
        if not args.json:
            out.line(f"wrote {path}")
    return 0


#: The percentiles of document lengths ``dataorder pack`` prints.
PERCENTILES = (1, 10, 50, 90, 99)


def length_percentiles(lengths: Any) -> dict[str, int]:
    """The document lengths' percentiles (:data:`PERCENTILES`, each a length a document has:
    numpy's ``inverted_cdf``), read in slices of the source."""
    n = len(lengths)
    values = np.concatenate(
        [lengths.slice(i, min(n, i + 2**22)) for i in range(0, n, 2**22)] or [np.zeros(0)]
    )
    if not n:
        return {}
    at = np.percentile(values, PERCENTILES, method="inverted_cdf")
    return {f"p{q}": int(v) for q, v in zip(PERCENTILES, at, strict=True)}


def _figures(
    plan: PackingPlan, args: argparse.Namespace, path: str, *, steps: bool = True
) -> dict[str, Any]:
    """What ``dataorder pack`` reports (the ``--json`` object), with the time of the statistics
    and of one window's packing; with ``steps``, the steps of an epoch of this corpus alone on
    ``R x B`` rows per step."""
    t0 = time.perf_counter()
    stats = plan.stats()
    packing_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan.packed_window(0, 0)
    window_s = time.perf_counter() - t0
    figures: dict[str, Any] = {
        "lengths": str(path),
        "documents": stats.documents,
        "tokens": stats.tokens,
        "documents_empty": stats.documents_empty,
        "documents_longer_than_seq_len": stats.documents_longer,
        "longest": plan.lengths.max_length,
        "length_percentiles": length_percentiles(plan.lengths),
        "seq_len": args.seq_len,
        "split": args.split,
        "window": plan.window,
        "chunk": plan.chunk,
        "windows": plan.num_windows,
        "rows": stats.rows,
        "tokens_padded": stats.tokens_padded,
        "tokens_cut": stats.tokens_cut,
        "documents_dropped": stats.documents_dropped,
        "split_shorter": stats.split_shorter,
        "split_longer": stats.split_longer,
        "seconds_for_statistics": packing_s,
        "seconds_per_window": window_s,
    }
    if steps and args.num_replicas is not None:
        per_step = args.num_replicas * args.batch_size
        figures.update(
            rows_per_step=per_step,
            steps=stats.rows // per_step,
            rows_left_over=stats.rows % per_step,
        )
    return figures


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.3f} %" if whole else "-"


def _title(f: dict[str, Any]) -> str:
    padding = _pct(f["tokens_padded"], f["rows"] * f["seq_len"])
    return (
        f"{Path(f['lengths']).name}: {f['rows']:,} rows of {f['seq_len']:,} tokens "
        f"(split={f['split']}, window {f['window']:,}), padding {padding}"
    )


def _print(out: Output, f: dict[str, Any], shorter: int, n: int) -> None:
    slots = f["rows"] * f["seq_len"]
    longer = f["documents_longer_than_seq_len"]
    rows: list[tuple[str, object]] = [
        ("documents", f"{n:,} ({f['documents_empty']:,} empty, longest {f['longest']:,} tokens)"),
        ("tokens", f"{f['tokens']:,} (mean {f['tokens'] / n:,.1f} per document)"),
        (
            "document lengths",
            ", ".join(f"{k} {v:,}" for k, v in f["length_percentiles"].items())
            + f", max {f['longest']:,} tokens",
        ),
        ("longer than seq_len", f"{longer:,} ({_pct(longer, n)})"),
        (
            "packing",
            f"split={f['split']}, seq_len {f['seq_len']:,}, {f['windows']:,} windows of "
            f"{f['window']:,} documents (chunks of {f['chunk']:,})",
        ),
        ("rows per epoch", f"{f['rows']:,}"),
        ("padding", f"{f['tokens_padded']:,} tokens ({_pct(f['tokens_padded'], slots)} of rows)"),
        (
            "split shorter documents",
            f"{f['split_shorter']:,} ({_pct(f['split_shorter'], shorter)} of the documents "
            "shorter than seq_len)",
        ),
        ("split longer documents", f"{f['split_longer']:,}"),
        (
            "tokens cut",
            f"{f['tokens_cut']:,} ({_pct(f['tokens_cut'], f['tokens'])}); "
            f"documents dropped {f['documents_dropped']:,}",
        ),
        (
            "time",
            f"{f['seconds_for_statistics']:.2f} s for these figures (every window once), "
            f"{1000 * f['seconds_per_window']:.1f} ms to pack one window (what a resume costs)",
        ),
    ]
    if "steps" in f:
        rows.append(
            (
                "steps per epoch",
                f"{f['steps']:,} of {f['rows_per_step']:,} rows (R x B); "
                f"{f['rows_left_over']:,} rows left over (the tail)",
            )
        )
    out.fields(f"{f['lengths']}", rows)


def compare_batchings(
    plan: PackingPlan, *, num_replicas: int, batch_size: int, min_seq_len: int
) -> dict[str, dict[str, Any]]:
    """Three batchings of ``plan``'s corpus at ``R x B x seq_len`` tokens per step, each as its
    sampler reads an epoch (every count summed over ranks):

    * ``concat_split``: the documents concatenated and cut into rows of ``seq_len`` (Megatron's
      GPT dataset); the last partial row and the rows short of a step are dropped;
    * ``best_fit``: :class:`~dataorder.llm.packing.sampler.PackedSampler` on the plan's options;
    * ``vsl``: :class:`~dataorder.llm.vsl.VariableLengthSampler`, chunks of ``min_seq_len`` to
      ``seq_len`` (a power of two) tokens, ``B x seq_len`` tokens per rank.

    Returns:
        ``{batching: {"steps", "tokens_dropped", "tokens_padded", "seconds"}}``; ``seconds``
        is the time to build the sampler and read its first batch.

    Raises:
        ValueError: If ``seq_len`` or ``min_seq_len`` is not a power of two (the VSL sampler's
            message names it).
    """
    from dataorder.llm.packing.sampler import PackedSampler
    from dataorder.llm.vsl import VariableLengthSampler

    per_step = num_replicas * batch_size
    rows, tail = divmod(plan.lengths.total_tokens, plan.seq_len)
    out: dict[str, dict[str, Any]] = {
        "concat_split": {
            "steps": rows // per_step,
            "tokens_dropped": tail + rows % per_step * plan.seq_len,
            "tokens_padded": 0,
            "seconds": 0,
        }
    }
    for name, build in (
        (
            "best_fit",
            lambda: PackedSampler(
                plan.lengths,
                plan.seq_len,
                batch_size,
                0,
                num_replicas,
                seed=plan.seed,
                split=plan.split,
                window=plan.window,
                chunk=plan.chunk,
                long_documents=plan.long_documents,
            ),
        ),
        (
            "vsl",
            lambda: VariableLengthSampler(
                plan.lengths,
                plan.seq_len,
                plan.seq_len * batch_size,
                0,
                num_replicas,
                seed=plan.seed,
                min_seq_len=min_seq_len,
            ),
        ),
    ):
        t0 = time.perf_counter()
        sampler: Any = build()
        sampler.batch_at(0)
        seconds = time.perf_counter() - t0
        out[name] = {
            "steps": len(sampler),
            "tokens_dropped": sampler.tokens_dropped,
            "tokens_padded": sampler.tokens_padded,
            "seconds": seconds,
        }
    return out


def _print_batchings(out: Output, batchings: dict[str, dict[str, Any]], tokens: int) -> None:
    names = {
        "concat_split": "concatenate and split",
        "best_fit": "best-fit packing",
        "vsl": "variable sequence length",
    }
    out.table(
        "the same tokens per step, three batchings",
        ["batching", "steps per epoch", "tokens dropped", "tokens padded", "first batch"],
        [
            [
                names[k],
                f"{v['steps']:,}",
                f"{v['tokens_dropped']:,} ({_pct(v['tokens_dropped'], tokens)})",
                f"{v['tokens_padded']:,}",
                f"{v['seconds']:.2f} s" if k != "concat_split" else "-",
            ]
            for k, v in batchings.items()
        ],
    )


def plot_fill(counts: Any, path: str | Path, *, title: str | None = None) -> Path:
    """A bar chart of rows by fill (``counts`` from
    :meth:`~dataorder.llm.packing.plan.PackingPlan.fill_histogram`) into a PNG at ``path``.

    Raises:
        ImportError: If matplotlib is not installed.
    """
    require_matplotlib()
    from matplotlib.figure import Figure

    bins = len(counts)
    edges = 100 * np.arange(bins) / bins
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.subplots()
    ax.bar(edges, counts, width=100 / bins, align="edge", color="#3182bd")
    ax.set_yscale("log")
    ax.set_xlabel("row fill (% of seq_len)")
    ax.set_ylabel("rows (log scale)")
    if title:
        ax.set_title(title, fontsize=10)
    path = Path(path)
    fig.savefig(path, dpi=100)
    return path
