"""A PNG of who read what: the per-rank schedule of one or more samplers across a restart.

:func:`plot_schedule` takes the batches a job really read (:class:`ScheduleBatch`, one per data-
parallel rank and step) and draws, for each sampler, two panels:

* **schedule**: one row per data-parallel rank of each phase (before and after a restart), one box
  per batch spanning the global positions of its block; boxes are coloured by bucket for a bucket
  sampler, so lock-step shows as columns of one colour, and hatched when the batch holds padding;
* **samples**: each sample read, at the global position of its block (x) and its index (y),
  coloured by data-parallel rank: disjoint ranks and an epoch covered once show as a clean
  scatter with no point twice at one index.

matplotlib is imported only when a plot is drawn, and through its object API with the Agg canvas,
so the caller's pyplot backend is never changed. Install it with ``pip install 'dataorder[plots]'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ScheduleBatch", "plot_schedule", "require_matplotlib"]


@dataclass(frozen=True)
class ScheduleBatch:
    """One batch that one data-parallel rank read.

    Attributes:
        sampler: Which sampler (one row of panels per sampler).
        phase: 0 before the restart, 1 after it, and so on.
        dp_rank: Data-parallel rank in that phase.
        dp_size: Data-parallel size in that phase.
        position: Global position in the epoch where the batch's block starts (samples consumed
            by the whole job before it); it continues across a restart.
        block: Global positions in the block (all ranks' slots, padding included).
        samples: The rank's slots: a sample index, or ``None`` for a padding slot (for packed
            rows: the document of each span).
        padding: How many slots are padding (``None`` or a repeated sample).
        bucket: The bucket the batch came from, for a bucket sampler.
    """

    sampler: str
    phase: int
    dp_rank: int
    dp_size: int
    position: int
    block: int
    samples: tuple[int | None, ...]
    padding: int = 0
    bucket: int | None = None


def require_matplotlib() -> Any:
    """Import and return ``matplotlib``, or raise ImportError saying how to install it."""
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError(
            "plotting needs matplotlib, which is not installed; "
            "install it with: pip install 'dataorder[plots]'"
        ) from err
    return matplotlib


def _row_labels(batches: Sequence[ScheduleBatch]) -> list[tuple[int, int, int]]:
    """Rows ``(phase, dp_rank, dp_size)`` top to bottom: phase 0's ranks first."""
    rows = {(b.phase, b.dp_rank, b.dp_size) for b in batches}
    return sorted(rows)


def plot_schedule(
    batches: Sequence[ScheduleBatch],
    path: str | Path,
    *,
    title: str | None = None,
) -> Path:
    """Draw the per-rank schedule of every sampler in ``batches`` into a PNG at ``path``.

    Args:
        batches: What each data-parallel rank read; samplers appear in first-seen order.
        path: Where to write the PNG (parent directories must exist).
        title: A title over the whole figure.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: If ``batches`` is empty.
        ImportError: If matplotlib is not installed.
    """
    if not batches:
        raise ValueError("batches must hold at least one batch; got batches=[]")
    require_matplotlib()
    from matplotlib.figure import Figure

    names = list(dict.fromkeys(b.sampler for b in batches))
    fig = Figure(figsize=(14, 3.2 * len(names)), layout="constrained")
    axes = fig.subplots(len(names), 2, squeeze=False, width_ratios=(1.15, 1))
    for row, name in enumerate(names):
        mine = [b for b in batches if b.sampler == name]
        gantt, scatter = axes[row][0], axes[row][1]
        _draw_schedule(gantt, name, mine)
        _draw_samples(scatter, name, mine)
        # a dashed line where each later phase (a restart) starts
        for phase in sorted({b.phase for b in mine} - {0}):
            start = min(b.position for b in mine if b.phase == phase)
            gantt.axvline(start, color="black", linestyle="--", linewidth=1)
            scatter.axvline(start, color="black", linestyle="--", linewidth=1)
    if title:
        fig.suptitle(title, fontsize=12)
    out = Path(path)
    fig.savefig(out, dpi=90)
    return out


_PHASE_FILL = ("#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc")


def _draw_schedule(ax: Any, name: str, mine: Sequence[ScheduleBatch]) -> None:
    """The schedule panel: a box per batch on its rank's row, coloured by bucket or phase."""
    from matplotlib import colormaps
    from matplotlib.patches import Patch, Rectangle

    bucket_colors = colormaps["tab20"]
    rows = _row_labels(mine)
    where = {key: i for i, key in enumerate(rows)}
    has_buckets = any(b.bucket is not None for b in mine)
    for b in mine:
        color: Any = _PHASE_FILL[b.phase % len(_PHASE_FILL)]
        if has_buckets and b.bucket is not None:
            color = bucket_colors(b.bucket % 20)
        ax.add_patch(
            Rectangle(
                (b.position, where[(b.phase, b.dp_rank, b.dp_size)] - 0.4),
                b.block,
                0.8,
                facecolor=color,
                edgecolor="#333333",
                linewidth=0.3,
                hatch="////" if b.padding else None,
            )
        )
    ax.set_xlim(0, max(b.position + b.block for b in mine))
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"phase {p}: dp {r}/{s}" for p, r, s in rows], fontsize=8)
    ax.set_xlabel("global position in the epoch (samples)")
    ax.set_title(f"{name}: schedule", fontsize=10, loc="left")
    legend: list[Any] = []
    if has_buckets:
        buckets = sorted({b.bucket for b in mine if b.bucket is not None})
        legend = [Patch(color=bucket_colors(k % 20), label=f"bucket {k}") for k in buckets[:12]]
    if any(b.padding for b in mine):
        legend.append(Patch(facecolor="white", edgecolor="#333333", hatch="////", label="padding"))
    if legend:
        ax.legend(handles=legend, fontsize=7, loc="upper right", ncols=2)


def _draw_samples(ax: Any, name: str, mine: Sequence[ScheduleBatch]) -> None:
    """The samples panel: each sample read, at its block's position, coloured by rank."""
    from matplotlib import colormaps

    rank_colors = colormaps["tab10"]
    for key in _row_labels(mine):
        phase, dp_rank, dp_size = key
        xs: list[int] = []
        ys: list[int] = []
        for b in mine:
            if (b.phase, b.dp_rank, b.dp_size) == key:
                real = [s for s in b.samples if s is not None]
                xs += [b.position] * len(real)
                ys += real
        ax.scatter(
            xs,
            ys,
            s=6,
            marker="o" if phase == 0 else "^",
            color=rank_colors((dp_rank + 4 * phase) % 10),
            label=f"phase {phase}: dp {dp_rank}/{dp_size}",
            linewidths=0,
        )
    ax.set_xlim(0, max(b.position + b.block for b in mine))
    ax.set_xlabel("global position of the block")
    ax.set_ylabel("sample index")
    ax.set_title(f"{name}: which samples went where", fontsize=10, loc="left")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), markerscale=2)
