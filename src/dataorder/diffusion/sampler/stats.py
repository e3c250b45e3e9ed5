"""What a bucket set does to a dataset: crop loss, trim loss, budget, and lock-step waste.

:func:`bucket_stats` takes a :class:`~dataorder.diffusion.scan.manifest.Manifest` (of images or of
clips), or image sizes plus a
:class:`~dataorder.diffusion.calculators.image.MultiTierBucketCalculator`, or clip sizes and frame
counts plus a :class:`~dataorder.diffusion.calculators.video.VideoBucketCalculator`, and measures
per bucket:

* **images** in it;
* **crop loss**, the share of an image's area cut away when it is resized to cover its bucket and
  cropped: ``1 - min(r_img / r_bkt, r_bkt / r_img)`` with ``r = w / h``; mean, 95th percentile,
  and how many images lose more than 10 %;
* **trim loss** of clips (video only), its twin in time: the share of a clip's frames cut when
  it is trimmed to its bucket's frame count, ``(F - f) / F``
  (:func:`~dataorder.diffusion.calculators.video.trim_loss`); mean and 95th percentile;
* **upscaled** images, those smaller than their bucket on some side;
* **budget** adherence, the bucket's pixels over ``max_pixels`` (video: its latent tokens over
  ``max_tokens``), never above 1 for our buckets; a memory budget is only safe if it holds;
* **lock-step waste** for ``num_replicas`` data-parallel ranks and per-rank batch size ``b``.
  The bucket sampler fills whole global batches of ``b * num_replicas`` from one bucket, so a
  bucket of ``n`` images is one segment of :func:`~dataorder.core.partition.plan_segments`,
  the sampler's own partition, with ``tail="drop"``
  when ``drop_last`` (the remainder is **dropped**) and ``tail="shrink"`` otherwise (one smaller
  final batch, **padded** by fewer than ``num_replicas`` repeated samples);
* the **longest run** of steps that read one shape, for the sampler's ``bucket_order``
  (sequential: the largest bucket's steps; interleaved: NOTE [ Interleaved buckets ]);
* for clips, the **spread of per-step cost**: a step's cost on a rank is its batch times the
  calculator's cost model of the bucket's tokens (:mod:`dataorder.diffusion.buckets.cost`); with
  cost-model batch sizes every step should cost about the same, and ``step_cost_max_over_mean``
  (and ``..._min_...``) over an epoch's steps say how far it is from that.

:func:`format_bucket_table` renders the result as markdown, :func:`rich_bucket_table` as a rich
table, and :func:`plot_bucket_stats` as a PNG (matplotlib, imported only there, drawn on an Agg
canvas without touching pyplot's global state).

Example:
    >>> from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
    >>> from dataorder.diffusion.sampler.stats import bucket_stats
    >>> calc = MultiTierBucketCalculator(compat="nemo")
    >>> st = bucket_stats([256, 256, 256, 300], [256, 256, 256, 100], calc, num_replicas=2,
    ...                   batch_size=1)
    >>> st.counts.tolist(), st.dropped.tolist()
    ([0, 0, 3, 0, 1], [0, 0, 1, 0, 1])
    >>> round(st.overall["mean_crop_loss"], 4)  # the 3:1 image loses 44 % in a 5:3 bucket
    0.1111
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_choice, check_int, fail
from dataorder.core.buckets import (
    BUCKET_ORDERS,
    MAX_INTERLEAVE_UNIT,
    longest_shape_run,
    plan_sampler_epoch,
)
from dataorder.core.keys import MAX_SEED
from dataorder.core.partition import MAX_BATCH_SIZE, SegmentPlan
from dataorder.core.topology import MAX_DP_SIZE
from dataorder.diffusion.buckets.cost import CostModel
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import TOO_SHORT, VideoBucketCalculator, trim_loss
from dataorder.diffusion.sampler.plan import KeyedBucketOrder
from dataorder.diffusion.sampler.table import group_by_bucket, sort_key
from dataorder.diffusion.scan.files import path_arg
from dataorder.diffusion.scan.manifest import Manifest

__all__ = [
    "MAX_DPI",
    "BucketStats",
    "bucket_stats",
    "crop_loss",
    "format_bucket_table",
    "plot_bucket_stats",
    "rich_bucket_table",
]


#: Largest ``dpi`` of :func:`plot_bucket_stats` (matplotlib refuses images over 2**16 pixels).
MAX_DPI = 2400


def crop_loss(
    image_widths: npt.ArrayLike,
    image_heights: npt.ArrayLike,
    target_widths: npt.ArrayLike,
    target_heights: npt.ArrayLike,
) -> npt.NDArray[np.float64]:
    """Share of each image's area cut away by cover-resize-then-crop to its target.

    ``1 - min(W * h, H * w) / max(W * h, H * w)``, which equals
    ``1 - min(r_img / r_bkt, r_bkt / r_img)``. Arrays broadcast; the result is float64.

    Example:
        >>> crop_loss([1920], [1080], [1024], [1024]).round(4).tolist()
        [0.4375]
    """
    iw = np.asarray(image_widths, dtype=np.float64)
    ih = np.asarray(image_heights, dtype=np.float64)
    a = iw * np.asarray(target_heights, dtype=np.float64)
    b = ih * np.asarray(target_widths, dtype=np.float64)
    out: npt.NDArray[np.float64] = 1.0 - np.minimum(a, b) / np.maximum(a, b)
    return out


@dataclass(frozen=True)
class BucketStats:
    """Per-bucket statistics (arrays of shape ``(K,)``, indexed by bucket id) and totals.

    Attributes:
        buckets: The buckets (dicts ``id``, ``resolution``, ``aspect_ratio``, ``pixels``; video
            buckets also ``frames``, ``latent_frames``, ``tokens``).
        max_pixels: The calculator's pixel budget (a video calculator's per-frame cap, or None).
        num_replicas: Data-parallel ranks the waste was computed for.
        drop_last: Whether remainders are dropped (else the last batch shrinks and is padded).
        counts: Images (or clips) per bucket.
        mean_crop_loss: Mean crop loss of the bucket's images (NaN for an empty bucket).
        p95_crop_loss: 95th percentile of the same (NaN for an empty bucket).
        over_10: Images losing more than 10 % of their area.
        upscaled: Images smaller than their bucket on some side.
        budget_ratio: Bucket pixels over ``max_pixels`` (video: tokens over ``max_tokens``).
        batch_sizes: Per-rank batch size used for the bucket.
        batches: Steps the bucket gives every rank in an epoch.
        dropped: Images of the bucket no batch covers (``drop_last``).
        padded: Repeated samples that fill the bucket's last global batch (not ``drop_last``).
        overall: Totals over the dataset: ``images``, ``mean_crop_loss``, ``p95_crop_loss``,
            ``share_over_10``, ``upscaled``, ``budget_mean_abs_dev`` (mean over images of
            ``|budget_ratio - 1|``), ``budget_max_over`` (largest ``budget_ratio - 1`` over
            buckets, 0 if none is over), ``batches``, ``dropped``, ``padded``,
            ``empty_buckets``, ``buckets_below_one_global_batch``, ``longest_run`` (steps of one
            shape in a row, epoch 0); for clips also ``mean_trim_loss``, ``p95_trim_loss``,
            ``step_cost_max_over_mean`` and ``step_cost_min_over_mean`` (a step's cost on one
            rank, its batch times the cost model's cost of the bucket's tokens, largest and
            smallest over the epoch's steps, over their mean; NaN without a step).
        mean_trim_loss: Clips only: mean share of each bucket's clips' frames trimmed away
            (NaN for an empty bucket); None for images.
        p95_trim_loss: Clips only: 95th percentile of the same; None for images.
        max_tokens: Clips only: the calculator's token budget; None for images.
    """

    buckets: list[dict[str, Any]]
    max_pixels: int | None
    num_replicas: int
    drop_last: bool
    counts: npt.NDArray[np.int64]
    mean_crop_loss: npt.NDArray[np.float64]
    p95_crop_loss: npt.NDArray[np.float64]
    over_10: npt.NDArray[np.int64]
    upscaled: npt.NDArray[np.int64]
    budget_ratio: npt.NDArray[np.float64]
    batch_sizes: npt.NDArray[np.int64]
    batches: npt.NDArray[np.int64]
    dropped: npt.NDArray[np.int64]
    padded: npt.NDArray[np.int64]
    overall: dict[str, float]
    mean_trim_loss: npt.NDArray[np.float64] | None = None
    p95_trim_loss: npt.NDArray[np.float64] | None = None
    max_tokens: int | None = None

    @property
    def is_video(self) -> bool:
        """Whether these are the statistics of clips (with trim loss)."""
        return self.mean_trim_loss is not None


def _sizes(name: str, values: object) -> npt.NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer) or arr.ndim != 1:
        fail(name, "a 1-D array of ints", values, TypeError)
    return arr.astype(np.int64, copy=False)


class _Source:
    """What ``bucket_stats`` measures: sizes, ids, buckets and the budget, from either input."""

    def __init__(
        self,
        source: object,
        heights: npt.ArrayLike | None,
        calculator: object,
        frames: npt.ArrayLike | None,
    ) -> None:
        self.frames: npt.NDArray[np.int64] | None = None
        self.max_tokens: int | None = None
        self.cost: CostModel | None = None
        if isinstance(source, Manifest):
            if heights is not None or calculator is not None or frames is not None:
                raise TypeError("with a Manifest, pass neither heights nor calculator (nor frames)")
            self.widths, self.heights, self.ids = source.widths, source.heights, source.bucket_ids
            self.buckets: list[dict[str, Any]] = source.buckets
            self.frames = source.frames
            config = source.calculator
            self.max_pixels: int | None = config.get("max_pixels")
            if self.frames is not None:
                self.max_tokens = int(config["max_tokens"])
                self.cost = CostModel.from_config(config["cost_model"])
            return
        if isinstance(source, str | bytes) or np.ndim(source) == 0:  # type: ignore[arg-type]
            fail("source", "a Manifest or an array of widths", source, TypeError)
        if heights is None or not isinstance(
            calculator, VideoBucketCalculator | MultiTierBucketCalculator
        ):
            raise TypeError(
                "bucket_stats(widths, heights, calculator): pass heights and a "
                f"MultiTierBucketCalculator; got heights={heights!r}, calculator={calculator!r}"
            )
        video = isinstance(calculator, VideoBucketCalculator)
        if video != (frames is not None):
            what = "the clips' frame counts" if video else "None with an image calculator"
            fail("frames", what, frames, TypeError)
        self.widths, self.heights = _sizes("widths", source), _sizes("heights", heights)
        if isinstance(calculator, VideoBucketCalculator):
            self.frames = _sizes("frames", frames)
            self.ids = calculator.assign(self.widths, self.heights, self.frames)
            if self.ids.size and int(self.ids.min()) < 0:
                i = int(np.flatnonzero(self.ids < 0)[0])
                why = "too short" if int(self.ids[i]) == TOO_SHORT else "too small"
                raise ValueError(
                    f"clip {i} has no bucket ({why}); measure the clips of "
                    "build_video_scan(paths, widths, heights, frames, calculator).assigned()"
                )
            self.max_tokens = calculator.max_tokens
            self.cost = calculator.cost_model
        else:
            self.ids = calculator.assign(self.widths, self.heights)
        self.buckets = calculator.get_all_buckets()
        self.max_pixels = calculator.max_pixels

    def budget_ratio(self, bw: npt.NDArray[np.int64], bh: npt.NDArray[np.int64]) -> Any:
        """Each bucket's share of the budget: pixels, or tokens for video."""
        if self.max_tokens is not None:
            return np.array([b["tokens"] for b in self.buckets], dtype=np.int64) / self.max_tokens
        return (bw * bh) / int(self.max_pixels or 1)


def _per_bucket(
    loss: npt.NDArray[np.float64], ids: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Mean and 95th percentile of ``loss`` per bucket (NaN for an empty bucket)."""
    k = counts.size
    order = np.argsort(ids, kind="stable")
    starts = np.concatenate(([0], np.cumsum(counts)))
    mean = np.full(k, np.nan)
    p95 = np.full(k, np.nan)
    for j in np.flatnonzero(counts):
        part = loss[order[starts[j] : starts[j + 1]]]
        mean[j] = part.mean()
        p95[j] = np.percentile(part, 95)
    return mean, p95


def _batch_sizes(batch_size: object, k: int) -> npt.NDArray[np.int64]:
    if isinstance(batch_size, Sequence | np.ndarray):
        if len(batch_size) != k:
            fail("batch_size", f"an int or a sequence of {k} ints (one per bucket)", batch_size)
        return np.array(
            [
                check_int(f"batch_size[{i}]", b, min_value=1, max_value=MAX_BATCH_SIZE)
                for i, b in enumerate(batch_size)
            ],
            dtype=np.int64,
        )
    b = check_int("batch_size", batch_size, min_value=1, max_value=MAX_BATCH_SIZE)
    return np.full(k, b, dtype=np.int64)


def bucket_stats(
    source: Manifest | npt.ArrayLike,
    heights: npt.ArrayLike | None = None,
    calculator: MultiTierBucketCalculator | VideoBucketCalculator | None = None,
    *,
    frames: npt.ArrayLike | None = None,
    num_replicas: int = 1,
    batch_size: int | Sequence[int] | npt.NDArray[np.integer[Any]] = 1,
    drop_last: bool = True,
    bucket_order: str = "sequential",
    interleave_unit: int | None = None,
    seed: int = 42,
) -> BucketStats:
    """Measure a bucketing of a dataset (see the module docstring).

    Args:
        source: A :class:`~dataorder.diffusion.scan.manifest.Manifest` (its bucket ids and
            calculator are used; a video manifest's frames too), or widths, shape ``(N,)``.
        heights: Heights, shape ``(N,)``, when ``source`` is widths.
        calculator: Assigns the buckets of ``source`` widths and heights (required then): a
            ``MultiTierBucketCalculator``, or a ``VideoBucketCalculator`` with ``frames``. With
            a manifest it must be None.
        frames: Clip frame counts, shape ``(N,)``, with a video calculator (every clip must
            have a bucket: measure ``build_video_scan(...).assigned()``).
        num_replicas: Data-parallel ranks ``R``.
        batch_size: Per-rank batch size ``b``: one int, or one per bucket (e.g. from
            ``calculator.get_dynamic_batch_size``, or a video calculator's ``batch_sizes``).
        drop_last: The sampler's ``drop_last``.
        bucket_order: The sampler's ``bucket_order``: ``"sequential"`` or ``"interleaved"``;
            only the longest run depends on it (both orders read the same batches).
        interleave_unit: The sampler's ``interleave_unit`` (default ``num_replicas``).
        seed: The sampler's seed: it arranges the interleaved chunks (epoch 0 is reported).

    Returns:
        A :class:`BucketStats`.

    Raises:
        TypeError: For arguments of the wrong kind.
        ValueError: For bad sizes or counts.
    """
    src = _Source(source, heights, calculator, frames)
    dp_size = check_int("num_replicas", num_replicas, min_value=1, max_value=MAX_DP_SIZE)
    drop = check_bool("drop_last", drop_last)
    arrangement = check_choice("bucket_order", bucket_order, BUCKET_ORDERS)
    unit = (
        dp_size
        if interleave_unit is None
        else check_int(
            "interleave_unit", interleave_unit, min_value=1, max_value=MAX_INTERLEAVE_UNIT
        )
    )
    seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
    buckets, ids = src.buckets, src.ids
    k = len(buckets)
    sizes = _batch_sizes(batch_size, k)

    bw = np.array([b["resolution"][0] for b in buckets], dtype=np.int64)
    bh = np.array([b["resolution"][1] for b in buckets], dtype=np.int64)
    loss = crop_loss(src.widths, src.heights, bw[ids], bh[ids])
    counts = np.bincount(ids, minlength=k).astype(np.int64)
    mean, p95 = _per_bucket(loss, ids, counts)
    over = np.bincount(ids[loss > 0.1], minlength=k).astype(np.int64)
    up_mask = (bw[ids] > src.widths) | (bh[ids] > src.heights)
    upscaled = np.bincount(ids[up_mask], minlength=k).astype(np.int64)
    ratio = src.budget_ratio(bw, bh)
    bucket_frames = tokens = None
    if src.frames is not None:
        bucket_frames = np.array([b["frames"] for b in buckets], dtype=np.int64)
        tokens = np.array([b["tokens"] for b in buckets], dtype=np.int64)

    # the sampler's own plan of epoch 0 (core.buckets.plan_sampler_epoch), over the buckets it
    # would hold (the non-empty ones, in the dataset's bucket table order)
    res = np.stack([bw, bh], axis=1)
    rows, _, _ = group_by_bucket(ids, sort_key(res, bucket_frames, tokens))
    batches = np.zeros(k, dtype=np.int64)
    covered = np.zeros(k, dtype=np.int64)
    longest = 0
    runs: tuple[SegmentPlan, npt.NDArray[np.int64]] | None = None  # each run's bucket
    if rows.size:
        plan = plan_sampler_epoch(
            KeyedBucketOrder(seed),
            counts[rows],
            sizes[rows],
            epoch=0,
            dp_size=dp_size,
            drop_last=drop,
            shuffle_buckets=False,
            interleave_unit=unit if arrangement == "interleaved" else 0,
        )
        bucket = rows[plan.buckets]  # each run's bucket id
        np.add.at(batches, bucket, np.diff(plan.segments.offsets))
        np.add.at(covered, bucket, plan.segments.total_positions())
        longest = longest_shape_run(plan)
        runs = (plan.segments, bucket)
    dropped = np.maximum(counts - covered, 0)
    padded = np.maximum(covered - counts, 0)
    n = int(counts.sum())
    overall = {
        "images": float(n),
        "mean_crop_loss": float(loss.mean()) if n else float("nan"),
        "p95_crop_loss": float(np.percentile(loss, 95)) if n else float("nan"),
        "share_over_10": float((loss > 0.1).mean()) if n else float("nan"),
        "upscaled": float(upscaled.sum()),
        "budget_mean_abs_dev": float(np.abs(ratio[ids] - 1).mean()) if n else float("nan"),
        "budget_max_over": float(max(0.0, float((ratio - 1).max()))),
        "batches": float(batches.sum()),
        "dropped": float(dropped.sum()),
        "padded": float(padded.sum()),
        "empty_buckets": float((counts == 0).sum()),
        "buckets_below_one_global_batch": float(((counts > 0) & (counts < sizes * dp_size)).sum()),
        "longest_run": float(longest),
    }
    trim_mean = trim_p95 = None
    if src.frames is not None and bucket_frames is not None and tokens is not None:
        trim = trim_loss(src.frames, bucket_frames[ids])
        trim_mean, trim_p95 = _per_bucket(trim, ids, counts)
        overall["mean_trim_loss"] = float(trim.mean()) if n else float("nan")
        overall["p95_trim_loss"] = float(np.percentile(trim, 95)) if n else float("nan")
        spread = (float("nan"), float("nan"))
        if runs is not None:
            spread = _step_cost_spread(runs[0], tokens[runs[1]], src.cost or CostModel())
        overall["step_cost_max_over_mean"], overall["step_cost_min_over_mean"] = spread
    return BucketStats(
        buckets=[dict(b) for b in buckets],
        max_pixels=src.max_pixels,
        num_replicas=dp_size,
        drop_last=drop,
        counts=counts,
        mean_crop_loss=mean,
        p95_crop_loss=p95,
        over_10=over,
        upscaled=upscaled,
        budget_ratio=ratio,
        batch_sizes=sizes,
        batches=batches,
        dropped=dropped,
        padded=padded,
        overall=overall,
        mean_trim_loss=trim_mean,
        p95_trim_loss=trim_p95,
        max_tokens=src.max_tokens,
    )


def _step_cost_spread(
    segments: SegmentPlan, tokens: npt.NDArray[np.int64], cost: CostModel
) -> tuple[float, float]:
    """Largest and smallest per-step cost on one rank over the epoch's steps, over their mean.

    Run ``j`` of the sampler's plan gives ``full_blocks[j]`` steps of ``per_rank[j]`` samples
    and, with ``drop_last=False``, one more of ``tail_per_rank[j]``; a sample costs
    ``cost(tokens[j])``, ``tokens`` being each run's bucket's.
    """
    unit = np.array([float(cost.cost(int(t))) for t in tokens.tolist()])
    full, tail = segments.full_blocks, segments.tail_per_rank
    step_full = segments.per_rank * unit
    step_tail = tail * unit
    steps = int(full.sum() + (tail > 0).sum())
    if steps == 0:
        return float("nan"), float("nan")
    mean = float((full * step_full).sum() + step_tail.sum()) / steps
    costs = np.concatenate((step_full[full > 0], step_tail[tail > 0]))
    return float(costs.max()) / mean, float(costs.min()) / mean


_HEADERS = (
    "id",
    "resolution",
    "AR",
    "images",
    "mean crop %",
    "p95 crop %",
    "> 10 %",
    "upscaled",
    "pixels / budget",
    "batch",
    "steps",
    "dropped",
    "padded",
)
#: A video table: frames after the resolution, trim beside crop, tokens for the budget.
_VIDEO_HEADERS = (
    "id",
    "resolution",
    "frames",
    "AR",
    "clips",
    "mean crop %",
    "p95 crop %",
    "mean trim %",
    "p95 trim %",
    "> 10 %",
    "upscaled",
    "tokens / budget",
    "batch",
    "steps",
    "dropped",
    "padded",
)


def _checked(stats: object) -> BucketStats:
    if not isinstance(stats, BucketStats):
        fail("stats", "a BucketStats (from bucket_stats)", stats, TypeError)
    return stats


def _headers(stats: BucketStats) -> tuple[str, ...]:
    return _VIDEO_HEADERS if stats.is_video else _HEADERS


def _pct(value: float) -> str:
    return "-" if np.isnan(value) else f"{100 * value:.1f}"


def _rows(stats: BucketStats) -> list[list[str]]:
    rows = []
    for j, b in enumerate(stats.buckets):
        w, h = b["resolution"]
        crop = [_pct(float(stats.mean_crop_loss[j])), _pct(float(stats.p95_crop_loss[j]))]
        if stats.mean_trim_loss is not None and stats.p95_trim_loss is not None:
            crop += [_pct(float(stats.mean_trim_loss[j])), _pct(float(stats.p95_trim_loss[j]))]
        rows.append(
            [
                str(b["id"]),
                f"{w}x{h}",
                *([str(b["frames"])] if stats.is_video else []),
                f"{w / h:.3f}",
                str(int(stats.counts[j])),
                *crop,
                str(int(stats.over_10[j])),
                str(int(stats.upscaled[j])),
                f"{stats.budget_ratio[j]:.3f}",
                str(int(stats.batch_sizes[j])),
                str(int(stats.batches[j])),
                str(int(stats.dropped[j])),
                str(int(stats.padded[j])),
            ]
        )
    return rows


def _summary(stats: BucketStats) -> str:
    o = stats.overall
    n = int(o["images"])
    what = "clips" if stats.is_video else "images"
    waste = "dropped" if stats.drop_last else "padded"
    wasted = int(o["dropped"] if stats.drop_last else o["padded"])
    share = wasted / n if n else 0.0
    trim = ""
    if stats.is_video:
        trim = (
            f"trim loss mean {_pct(o['mean_trim_loss'])} %, p95 {_pct(o['p95_trim_loss'])} % "
            f"of frames; per-step cost max / mean {o['step_cost_max_over_mean']:.2f}; "
        )
    budget = "tokens" if stats.is_video else "pixels"
    return (
        f"{n} {what} in {len(stats.buckets)} buckets ({int(o['empty_buckets'])} empty); "
        f"crop loss mean {_pct(o['mean_crop_loss'])} %, p95 {_pct(o['p95_crop_loss'])} %, "
        f"{_pct(o['share_over_10'])} % of {what} lose > 10 %; {trim}"
        f"{int(o['upscaled'])} upscaled; "
        f"{budget} vs budget: mean |ratio - 1| {o['budget_mean_abs_dev']:.3f}, "
        f"max over {o['budget_max_over']:.3f}; with {stats.num_replicas} replicas: "
        f"{int(o['batches'])} steps, {wasted} samples {waste} ({100 * share:.2f} %), "
        f"{int(o['buckets_below_one_global_batch'])} buckets smaller than one global batch"
    )


def format_bucket_table(stats: BucketStats) -> str:
    """The statistics as a markdown table followed by a one-paragraph summary (clips: with
    ``frames`` and trim-loss columns).

    Raises:
        TypeError: If ``stats`` is not a :class:`BucketStats`.
    """
    stats = _checked(stats)
    headers = _headers(stats)
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(" --- " if i < 2 else " ---: " for i in range(len(headers))) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(stats)]
    return "\n".join(lines) + "\n\n" + _summary(stats) + "\n"


def rich_bucket_table(stats: BucketStats) -> Any:
    """The statistics as a ``rich.table.Table`` (caption: the summary).

    Raises:
        TypeError: If ``stats`` is not a :class:`BucketStats`.
        ImportError: If rich is not installed (``pip install 'dataorder[cli]'``).
    """
    stats = _checked(stats)
    try:
        from rich.table import Table
    except ImportError as exc:
        raise ImportError(
            "rich_bucket_table needs rich; install it with: pip install 'dataorder[cli]'"
        ) from exc
    table = Table(title="Buckets", caption=_summary(stats))
    for i, name in enumerate(_headers(stats)):
        table.add_column(name, justify="left" if i < 2 else "right")
    for row in _rows(stats):
        table.add_row(*row)
    return table


def plot_bucket_stats(stats: BucketStats, path: str | os.PathLike[str], *, dpi: int = 100) -> None:
    """Save a PNG with three panels over the buckets (clips: over the buckets in use).

    Images per bucket; mean and p95 crop loss (clips: and mean trim loss); samples dropped or
    padded under lock-step global batches. Titles carry the totals.

    Raises:
        TypeError: If ``stats`` is not a :class:`BucketStats` or ``path`` not a path.
        ValueError: If ``dpi`` is not in ``[1, MAX_DPI]``.
        ImportError: If matplotlib is not installed (``pip install 'dataorder[plots]'``).
    """
    stats = _checked(stats)
    target = path_arg("path", path)
    dpi = check_int("dpi", dpi, min_value=1, max_value=MAX_DPI)
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            "plot_bucket_stats needs matplotlib; install it with: pip install 'dataorder[plots]'"
        ) from exc
    # hundreds of video buckets: only those in use get a bar
    shown = np.flatnonzero(stats.counts) if stats.is_video else np.arange(len(stats.buckets))
    k = shown.size
    labels = []
    for j in shown.tolist():
        b = stats.buckets[j]
        frames = f"x{b['frames']}f" if stats.is_video else ""
        labels.append(f"{b['resolution'][0]}x{b['resolution'][1]}{frames}")
    x = np.arange(k)
    fig = Figure(figsize=(max(8.0, 0.32 * k + 3), 9.0), dpi=dpi)
    FigureCanvasAgg(fig)  # an Agg canvas of its own: no pyplot, no global backend switch
    ax1, ax2, ax3 = fig.subplots(3, 1, sharex=True)
    o = stats.overall
    what = "clips" if stats.is_video else "images"
    ax1.bar(x, stats.counts[shown], color="tab:blue")
    ax1.set_ylabel(what)
    unit = "tokens" if stats.is_video else "pixels"
    cap = f"max_tokens={stats.max_tokens}" if stats.is_video else f"max_pixels={stats.max_pixels}"
    of = f"{k} of {len(stats.buckets)}" if stats.is_video else f"{k}"
    ax1.set_title(
        f"{int(o['images'])} {what}, {of} buckets, {cap}; "
        f"mean |{unit}/budget - 1| = {o['budget_mean_abs_dev']:.3f}"
    )
    _loss_panel(ax2, stats, shown, what)
    waste = (stats.dropped if stats.drop_last else stats.padded)[shown]
    kind = "dropped (drop_last)" if stats.drop_last else "padded (last batch shrinks)"
    ax3.bar(x, waste, color="tab:red")
    ax3.set_ylabel(kind.split(" ")[0])
    ax3.set_title(
        f"{int(waste.sum())} samples {kind} with {stats.num_replicas} replicas, "
        f"batch {int(stats.batch_sizes.max()) if stats.batch_sizes.size else 0} per rank"
    )
    ax3.set_xticks(x)
    ax3.set_xticklabels(labels, rotation=90, fontsize=7)
    fig.tight_layout()
    fig.savefig(target, format="png")


def _loss_panel(ax2: Any, stats: BucketStats, shown: npt.NDArray[np.intp], what: str) -> None:
    """The plot's middle panel: crop loss (and a video's trim loss) per bucket shown."""
    o = stats.overall
    x = np.arange(shown.size)
    bars = [("mean crop", stats.mean_crop_loss), ("p95 crop", stats.p95_crop_loss)]
    title = (
        f"crop loss: mean {_pct(o['mean_crop_loss'])} %, p95 {_pct(o['p95_crop_loss'])} %, "
        f"{_pct(o['share_over_10'])} % of {what} lose > 10 %"
    )
    if stats.mean_trim_loss is not None:
        bars.append(("mean trim", stats.mean_trim_loss))
        title += f"; trim loss: mean {_pct(o['mean_trim_loss'])} % of frames"
    width = 0.8 / len(bars)
    for i, (label, values) in enumerate(bars):
        offset = (i - (len(bars) - 1) / 2) * width
        ax2.bar(x + offset, 100 * np.nan_to_num(values[shown]), width, label=label)
    ax2.axhline(10, color="grey", linewidth=0.8, linestyle="--")
    ax2.set_ylabel("loss (% of area or frames)" if stats.is_video else "crop loss (% of area)")
    ax2.set_title(title)
    ax2.legend(loc="upper right")
