"""A PNG of who read what: the per-rank schedule of one or more samplers across a restart.

:func:`plot_schedule` takes the batches a job really read (:class:`ScheduleBatch`, one per data-
parallel rank and step) and draws, for each sampler, two panels:

* **schedule**: one row per data-parallel rank of each phase (before and after a restart), one box
  per batch spanning the global positions of its block; boxes are coloured by bucket for a bucket
  sampler, so lock-step shows as columns of one colour, and hatched when the batch holds padding;
* **samples**: each sample read, at the global position of its block (x) and its index (y),
  coloured by data-parallel rank (circles before the restart, triangles after, in two palettes
  far apart): disjoint ranks and an epoch covered once show as a clean scatter with no point
  twice at one index;
* **each once** (samples only): one band per sample index, on the samples panel's axis: read
  once before the restart, once after, more than once, or never; its title counts them, so the
  demo's claim (each sample once across the restart) is read off the figure.

Buckets are coloured by bucket without a legend of bucket ids (a set has dozens; what the eye
needs is that a column is one colour, lock-step); the title says how many buckets.

matplotlib is imported only when a plot is drawn, and through its object API with the Agg canvas,
so the caller's pyplot backend is never changed. Install it with ``pip install 'dataorder[plots]'``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ScheduleBatch", "each_once", "plot_schedule", "require_matplotlib"]


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
        unit: What the epoch covers once: ``"sample"``, or ``"token"`` for packed rows (whose
            ``samples`` are the documents of the rows' spans: a split document is in several
            rows, so no "each once" band is drawn).
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
    unit: str = "sample"


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
    declared: Mapping[str, tuple[int, int, int]] | None = None,
) -> Path:
    """Draw the per-rank schedule of every sampler in ``batches`` into a PNG at ``path``.

    Args:
        batches: What each data-parallel rank read; samplers appear in first-seen order.
        path: Where to write the PNG (parent directories must exist).
        title: A title over the whole figure.
        declared: Per sampler, ``(size, dropped, padded)``: its samples, those its plan leaves
            out and the repeated reads it pads with, as the sampler reports them; the "each
            once" band then says whether what was read is each sample once but for exactly
            those (without it: every sample up to the largest read, nothing declared).

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
    fig = Figure(figsize=(15, 3.4 * len(names)), layout="constrained")
    axes = fig.subplots(len(names), 3, squeeze=False, width_ratios=(1.15, 1, 0.08))
    for row, name in enumerate(names):
        mine = [b for b in batches if b.sampler == name]
        gantt, scatter, band = axes[row]
        _draw_schedule(gantt, name, mine)
        _draw_samples(scatter, name, mine)
        _draw_each_once(band, scatter, mine, (declared or {}).get(name, (0, 0, 0)))
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
#: Rank colours of each phase, far apart within a phase and from the other phase's (phase 1's
#: two ranks were tab10's purple and brown, hard to tell apart).
_RANK_COLORS = (
    ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"),
    ("#111111", "#17becf", "#e377c2", "#bcbd22", "#8c564b", "#7f7f7f", "#9467bd", "#2ca02c"),
)
#: The "each once" band: read once in phase 0, once in phase 1 (the schedule's phase fills),
#: more than once, never.
_ONCE_COLORS = ("#6baed6", "#fd8d3c", "#d62728", "#e0e0e0")


def _rank_color(phase: int, dp_rank: int) -> str:
    palette = _RANK_COLORS[phase % len(_RANK_COLORS)]
    return palette[dp_rank % len(palette)]


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
    what = f"{name}: schedule"
    if has_buckets:
        count = len({b.bucket for b in mine if b.bucket is not None})
        what += f"\na colour per bucket ({count} buckets); one colour down a column: lock-step"
    ax.set_title(what, fontsize=10, loc="left")
    if any(b.padding for b in mine):
        pad = Patch(facecolor="white", edgecolor="#333333", hatch="////", label="padding")
        ax.legend(handles=[pad], fontsize=7, loc="upper right")


def _draw_samples(ax: Any, name: str, mine: Sequence[ScheduleBatch]) -> None:
    """The samples panel: each sample read, at its block's position, coloured by rank."""
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
            s=9,
            marker="o" if phase == 0 else "^",
            color=_rank_color(phase, dp_rank),
            label=f"phase {phase}: dp {dp_rank}/{dp_size}",
            linewidths=0,
        )
    ax.set_xlim(0, max(b.position + b.block for b in mine))
    ax.set_xlabel("global position of the block")
    unit = mine[0].unit
    ax.set_ylabel("sample index" if unit == "sample" else "document (of each row's spans)")
    ax.set_title(f"{name}: which samples went where", fontsize=10, loc="left")


def each_once(mine: Sequence[ScheduleBatch], size: int = 0) -> tuple[Any, Any, int]:
    """How often each sample of ``mine`` (one sampler's batches) was read, for the "each once"
    band: ``(state, counts, extra)``. ``state[i]`` is 0 if sample ``i`` was read once before
    the restart (phase 0), 1 once after it, 2 more than once, 3 never; ``counts`` is
    ``bincount(state)`` (4 entries); ``extra`` the reads beyond each sample's first. ``size``
    is the number of samples (at least one more than the largest index read).
    """
    size = max(size, 1 + max((s for b in mine for s in b.samples if s is not None), default=-1))
    reads = np.zeros((2, size), dtype=np.int64)
    for b in mine:
        np.add.at(reads[min(b.phase, 1)], [s for s in b.samples if s is not None], 1)
    total = reads.sum(axis=0)
    state = np.full(size, 3, dtype=np.int64)
    state[(total == 1) & (reads[0] == 1)] = 0
    state[(total == 1) & (reads[1] == 1)] = 1
    state[total > 1] = 2
    return state, np.bincount(state, minlength=4), int((total[total > 1] - 1).sum())


def _draw_each_once(
    band: Any, scatter: Any, mine: Sequence[ScheduleBatch], declared: tuple[int, int, int]
) -> None:
    """The "each once" band beside the samples panel, with the ranks' legend past it: every
    sample once, or once but for the ``declared`` ``(size, dropped, padded)``, or not."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    handles, labels = scatter.get_legend_handles_labels()
    band.set_xticks([])
    if mine[0].unit != "sample":
        band.set_axis_off()
        band.set_title("tokens:\neach once\nin the report", fontsize=7)
        band.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                    markerscale=2)  # fmt: skip
        return
    size, dropped, padded = declared
    state, counts, extra = each_once(mine, size)
    size = len(state)
    band.imshow(
        state[:, None],
        aspect="auto",
        origin="lower",
        cmap=ListedColormap(_ONCE_COLORS),
        vmin=0,
        vmax=3,
        interpolation="nearest",
        extent=(0, 1, -0.5, size - 0.5),
    )
    band.set_ylim(scatter.get_ylim())
    band.set_yticks([])
    if counts[2] == counts[3] == 0:
        verdict, ok = "each once", True
    elif (int(counts[3]), extra) == (dropped, padded):
        verdict, ok = "each once,\nbut what\nis declared", True
    else:
        verdict, ok = "NOT each\nonce", False
    band.set_title(verdict, fontsize=8, color="#006d2c" if ok else "#d62728")
    repeats = f"more than once: {counts[2]}"
    if extra and extra == padded:
        repeats += f" ({extra} extra reads: the padding declared)"
    never = f"never: {counts[3]}"
    if counts[3] and counts[3] == dropped:
        never += " (the samples declared dropped)"
    kinds = (f"once, before the restart: {counts[0]}", f"once, after it: {counts[1]}", repeats,
             never)  # fmt: skip
    for color, kind in zip(_ONCE_COLORS, kinds, strict=True):
        handles.append(Patch(color=color, label=kind))
    labels += [h.get_label() for h in handles[len(labels) :]]
    band.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                markerscale=2)  # fmt: skip
