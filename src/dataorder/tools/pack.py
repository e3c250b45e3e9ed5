"""``dataorder pack LENGTHS --seq-len 8192``: what packing a corpus into rows looks like.

LENGTHS is a Megatron ``.idx``/``.bin`` or prefix, a ``.npy`` of lengths, or a ``.parquet`` /
``.arrow`` file with a list column of token ids (``--column``, default ``input_ids``). The command
prints the corpus, the rows of an epoch, the padding, the documents split across rows (shorter
than ``seq_len``, and longer), the tokens cut (``--split never``), and with ``--num-replicas R
--batch-size B`` the steps of an epoch at ``R x B`` rows per step and the rows left over; with
``--png`` a histogram of row fill. Every figure comes from
:class:`~dataorder.llm.packing.plan.PackingPlan`, the engine the sampler reads.

The module exposes :func:`add_parser` (registers the subcommand) and :func:`run`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from dataorder.core.keys import MAX_SEED
from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.core.topology import MAX_DP_SIZE
from dataorder.llm.packing.fit import LONG_DOCUMENTS, SPLITS
from dataorder.llm.packing.plan import MAX_CHUNK, MAX_SEQ_LEN, MAX_WINDOW, PackingPlan
from dataorder.tools.output import Output, int_arg

__all__ = ["add_parser", "plot_fill", "run"]


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``dataorder pack`` to ``subparsers`` (``parents``: the shared options)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "pack",
        parents=parents,
        help="pack a corpus into rows of seq_len tokens: padding, split documents, steps",
        description=(
            "Pack documents into rows of --seq-len tokens by best fit in windows, as the packed "
            "sampler does, and print rows, padding, documents split across rows and steps per "
            "epoch. LENGTHS: a Megatron .idx/.bin or prefix, a .npy of lengths, or a "
            ".parquet/.arrow file with a list column of token ids."
        ),
    )
    p.add_argument("lengths", metavar="LENGTHS")
    p.add_argument("--seq-len", type=int_arg(1, MAX_SEQ_LEN), required=True, help="tokens per row")
    p.add_argument(
        "--split",
        default="overflow",
        choices=SPLITS,
        help="overflow: every token once, split what cannot fit (pretraining); never: no "
        "document split, longer ones truncated or dropped (fine-tuning). Default: overflow",
    )
    p.add_argument(
        "--long-documents",
        default="truncate",
        choices=LONG_DOCUMENTS,
        help="with --split never: what happens to a document longer than --seq-len",
    )
    p.add_argument(
        "--window", type=int_arg(1, MAX_WINDOW), default=None, help="documents per window"
    )
    p.add_argument("--chunk", type=int_arg(1, MAX_CHUNK), default=None, help="documents per chunk")
    p.add_argument("--seed", type=int_arg(0, MAX_SEED), default=0, help="seed (default: 0)")
    p.add_argument(
        "--column", default="input_ids", help="Arrow/parquet list column (default: input_ids)"
    )
    p.add_argument(
        "--num-replicas", type=int_arg(1, MAX_DP_SIZE), default=None, help="data-parallel size R"
    )
    p.add_argument(
        "--batch-size",
        type=int_arg(1, MAX_BATCH_SIZE),
        default=None,
        help="rows per rank per step B",
    )
    p.add_argument("--png", default=None, help="write a histogram of row fill to this PNG")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    return p


def run(args: argparse.Namespace, out: Output) -> int:
    """Run ``dataorder pack``; return the exit status (a ValueError is a user error)."""
    if (args.num_replicas is None) != (args.batch_size is None):
        raise ValueError("--num-replicas and --batch-size go together (R x B rows per step)")
    if args.split == "overflow" and args.long_documents != "truncate":
        raise ValueError("--long-documents applies with --split never (overflow drops nothing)")
    plan = _plan(args)
    figures = _figures(plan, args)
    if args.json:
        out.json(figures)
    else:
        stats = plan.stats()
        shorter = stats.documents - stats.documents_longer - stats.documents_empty
        _print(out, figures, shorter, stats.documents)
    if args.png:
        path = plot_fill(plan.fill_histogram(), args.png, title=_title(figures))
        if not args.json:
            out.line(f"wrote {path}")
    return 0


def _plan(args: argparse.Namespace) -> PackingPlan:
    """The packing plan of the command line's lengths and options."""
    from dataorder.llm.packing.lengths import DocumentLengths
    from dataorder.llm.packing.plan import DEFAULT_CHUNK

    lengths = DocumentLengths.from_file(args.lengths, column=args.column)
    return PackingPlan(
        lengths,
        args.seq_len,
        split=args.split,
        window=args.window,  # None: the default window, in whole chunks
        chunk=args.chunk if args.chunk is not None else DEFAULT_CHUNK,
        long_documents=args.long_documents,
        seed=args.seed,
    )


def _figures(plan: PackingPlan, args: argparse.Namespace) -> dict[str, Any]:
    """What ``dataorder pack`` reports (the ``--json`` object), with the time of the statistics
    and of one window's packing."""
    t0 = time.perf_counter()
    stats = plan.stats()
    packing_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan.packed_window(0, 0)
    window_s = time.perf_counter() - t0
    figures: dict[str, Any] = {
        "lengths": str(args.lengths),
        "documents": stats.documents,
        "tokens": stats.tokens,
        "documents_empty": stats.documents_empty,
        "documents_longer_than_seq_len": stats.documents_longer,
        "longest": plan.lengths.max_length,
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
    if args.num_replicas is not None:
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


def plot_fill(counts: Any, path: str | Path, *, title: str | None = None) -> Path:
    """A bar chart of rows by fill (``counts`` from
    :meth:`~dataorder.llm.packing.plan.PackingPlan.fill_histogram`) into a PNG at ``path``.

    Raises:
        ImportError: If matplotlib is not installed.
    """
    from dataorder.tools.plots import require_matplotlib

    require_matplotlib()
    import numpy as np
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
