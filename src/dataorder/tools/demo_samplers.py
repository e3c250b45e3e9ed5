"""The demo's samplers: one declarative :class:`DemoSampler` entry each, in :data:`DEMO_SAMPLERS`.

An entry says everything the demo needs to know about a sampler: its dataset and what it trains
on, how one process builds it (for its data-parallel rank and size and the demo's configuration),
the checks it needs beyond those every sampler gets, and how ``dataorder inspect`` explains its
checkpoint. The processes (:func:`dataorder.tools.demo_job.build_job`), the checks
(:func:`dataorder.tools.demo_checks.check_sampler`), the report and the command line all read
this registry.

NOTE [ Adding a sampler to the demo ]
    Write a builder ``build(data, where, config) -> sampler`` (``where`` is the rank's
    :class:`Placement`; pass ``**where.keywords(SamplerClass)``), and add one :class:`DemoSampler`
    to :data:`DEMO_SAMPLERS`, in report order. Its name becomes a ``dataorder demo --samplers``
    choice and a row of the report. A sampler whose items are not batches of sample indices
    (packed rows) also says how its loader batches them and how a trained batch is read back
    (a :class:`Reading`, e.g. :data:`PACKED_READING`). A new kind of check is one entry of
    :data:`dataorder.tools.demo_checks.DEMO_CHECKS` (``extra=True`` if only some samplers
    need it, which then name it in ``checks``).

See :mod:`dataorder.tools.demo` for what the demo does. ``dataorder --help`` imports this
registry (for the ``--samplers`` choices), so each builder imports the sampler it builds
(NOTE [ What a subcommand module imports ] in :mod:`dataorder.tools.cli`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import VideoBucketCalculator, resample_frame_counts
from dataorder.tools.demo_data import (
    DOCUMENT_LENGTHS,
    PACKED_SEQ_LEN,
    Documents,
    LatentDataset,
    PackedTokens,
    TokenDataset,
    latent_model,
    load_clip_sizes,
    load_documents,
    load_image_sizes,
    load_tokens,
    packed_model,
    token_model,
    video_model,
)
from dataorder.tools.demo_entries import (
    PACKED_READING,
    SAMPLE_READING,
    DemoData,
    DemoSampler,
    DemoShape,
    Inspect,
    Placement,
    Reading,
    declared_padding,
    steps_text,
)

__all__ = [
    "DEMO_SAMPLERS",
    "MIXTURE_GROWN_FROM",
    "MIXTURE_SHARES",
    "MIXTURE_WEIGHTS",
    "PACKED_CHUNK",
    "PACKED_READING",
    "PACKED_WINDOW",
    "SAMPLE_READING",
    "VIDEO_CLIPS",
    "VIDEO_FPS",
    "DemoData",
    "DemoSampler",
    "DemoShape",
    "Inspect",
    "MixtureRows",
    "Placement",
    "Reading",
    "SourceRows",
    "mixture_sources",
]

#: The mixture: the token rows cut into four sources (consecutive ranges, shares of the rows, as
#: they are after every corpus change), over a MixtureLog that changes the corpus mid-run:
#: source 3 is added an eighth of the epoch in (weights before, after), and source 1, which
#: starts with the first ``MIXTURE_GROWN_FROM`` of its rows, grows to all of them three quarters
#: in (after the restart, inside its first pass).
MIXTURE_SHARES = (0.4, 0.35, 0.1, 0.15)
MIXTURE_WEIGHTS = ((0.45, 0.25, 0.3, 0.0), (0.35, 0.25, 0.2, 0.2))
MIXTURE_GROWN_FROM = 0.7
#: The video sampler: the first clips of the shipped clip sizes, resampled to the model's rate.
VIDEO_CLIPS = 800
VIDEO_FPS = 16
#: The packed sampler's windows: documents read together (``chunk``) and packed together
#: (``window``), small enough that the shipped documents span several windows.
PACKED_CHUNK = 8
PACKED_WINDOW = 64


# -- the token rows: Megatron, the mixture, torch's DistributedSampler ----------------------------
@dataclass(frozen=True)
class TokenRows:
    """The shipped token rows (``tokens.npy``)."""

    dataset: TokenDataset

    @classmethod
    def load(cls, _config: DemoShape) -> TokenRows:
        return cls(TokenDataset(load_tokens()))


def _megatron(dataloader_type: str) -> Callable[[TokenRows, Placement, DemoShape], Any]:
    # "single" pads the last global batch with None slots (masked), "cyclic" drops the tail:
    # the report shows both kinds of accounting.
    single = dataloader_type == "single"

    def build(data: TokenRows, where: Placement, config: DemoShape) -> Any:
        from dataorder.llm.factory import create_megatron_sampler

        return create_megatron_sampler(
            len(data.dataset),
            micro_batch_size=config.micro_batch_size,
            global_batch_size=where.global_batch_size(config),
            dataloader_type="single" if single else "cyclic",
            drop_last=not single,
            pad_samples_to_global_batch_size=single,
            rank=where.rank,
            world_size=where.size,
            seed=config.seed,
        )

    return build


def mixture_sources(config: DemoShape) -> tuple[list[int], Any]:
    """The mixture's source sizes after every change (consecutive ranges of the token rows) and
    its :class:`~dataorder.llm.mixlog.MixtureLog`, built ahead by every process alike: what
    ``dataorder inspect`` needs to rebuild its state (``--log``; the log knows the sizes)."""
    from dataorder.llm.mixlog import MixtureLog

    n = len(load_tokens())
    sizes = [int(n * share) for share in MIXTURE_SHARES[:-1]]
    sizes.append(n - sum(sizes))
    steps = n // config.global_batch_size
    first = [sizes[0], int(sizes[1] * MIXTURE_GROWN_FROM), sizes[2], 0]  # source 3: not yet
    log = MixtureLog(list(MIXTURE_WEIGHTS[0]), sizes=first)
    log.add_source(max(1, steps // 8), 3, sizes[3], list(MIXTURE_WEIGHTS[1]))
    log.grow(3 * steps // 4, 1, sizes[1])
    return sizes, log


@dataclass(frozen=True)
class SourceRows:
    """The token rows as the mixture's sources: flat index ``d * SOURCE_STRIDE + i`` (a blend
    over a log with corpus changes, :func:`~dataorder.llm.mixlog.split_index`) is row
    ``offsets[d] + i``; the item's ``index`` stays the flat index, as the sampler yielded it."""

    rows: TokenDataset
    offsets: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, flat: int) -> dict[str, Any]:
        from dataorder.llm.mixlog import split_index

        source, i = split_index(flat)
        return {**self.rows[self.offsets[source] + i], "index": flat}


@dataclass(frozen=True)
class MixtureRows:
    """The token rows read through :class:`SourceRows`."""

    dataset: SourceRows

    @classmethod
    def load(cls, config: DemoShape) -> MixtureRows:
        sizes, _log = mixture_sources(config)
        offsets = tuple(sum(sizes[:d]) for d in range(len(sizes)))
        return cls(SourceRows(TokenDataset(load_tokens()), offsets))


def _mixture_sampler(sizes: list[int], log: Any, config: DemoShape, **where: Any) -> Any:
    from dataorder.llm.blend import BlendedSampler

    return BlendedSampler(
        list(log.sizes),
        log,
        config.micro_batch_size,
        seed=config.seed,
        total_samples=sum(sizes),
        **where,
    )


def _mixture(_data: MixtureRows, where: Placement, config: DemoShape) -> Any:
    from dataorder.llm.blend import BlendedSampler

    sizes, log = mixture_sources(config)
    return _mixture_sampler(
        sizes,
        log,
        config,
        global_batch_size=where.global_batch_size(config),
        **where.keywords(BlendedSampler),
    )


def _mixture_notes(_data: MixtureRows, sampler: Any, config: DemoShape) -> list[str]:
    log = sampler.schedule.log
    added, grown = log.corpus_changes()
    reads = "/".join(map(str, sampler.consumed_per_source().tolist()))
    first = "/".join(map(str, log.sizes))
    return [
        f"4 sources of {first} token rows over a MixtureLog: source 3 ({added.size} rows) added "
        f"at step {added.step}, source 1 grown to {grown.size} rows at step {grown.step} (inside "
        "its first pass: the rest of the pass reads its unread rows, old and new, once)",
        f"reads per source so far this epoch {reads}; over the epoch {sampler.samples_dropped} "
        f"rows are not reached and {sampler.samples_padded} reads repeat a row (the drop/pad "
        "column): the weights, not the sizes, set the reads",
    ]


def _mixture_args(config: DemoShape, file: Callable[[str], str]) -> str:
    return f" --log {file('.mixlog.npz')}"


def _mixture_log(config: DemoShape, stem: Path) -> list[Path]:
    """The mixture's state holds only the trained part's length and digest of its log: the log
    goes beside it (:meth:`~dataorder.llm.mixlog.MixtureLog.save`), for ``--log``."""
    _sizes, log = mixture_sources(config)
    path = Path(f"{stem}.mixlog.npz")
    log.save(path)
    return [path]


def _distributed(data: TokenRows, where: Placement, config: DemoShape) -> Any:
    from dataorder.parallel.distributed import DistributedSampler

    return DistributedSampler(
        data.dataset,
        shuffle=True,
        seed=config.seed,
        drop_last=False,
        **where.keywords(DistributedSampler),
    )


# -- image buckets fitted to the shipped image sizes ----------------------------------------------
@dataclass(frozen=True)
class FittedImages:
    """The shipped image sizes in buckets fitted to them and to the job's layout, and the 1024p
    preset they are compared with."""

    widths: Any
    heights: Any
    preset: Any
    fitted: Any
    multires: Any
    dataset: LatentDataset

    @classmethod
    def load(cls, config: DemoShape) -> FittedImages:
        from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset

        widths, heights = load_image_sizes()
        # Buckets fitted to these sizes and this job: the sampler pads each bucket's last global
        # batch with fewer than num_replicas repeats, and at most 1 % of the images may be.
        preset = MultiTierBucketCalculator.from_preset("1024p")
        fitted = MultiTierBucketCalculator.fit_to_data(
            widths,
            heights,
            global_batch_size=config.dp_sizes[0],
            max_waste=0.01,
            max_pixels=preset.max_pixels,
            drop_last=False,
        )
        multires = BaseMultiresolutionDataset.from_sizes(widths, heights, calculator=fitted)
        return cls(widths, heights, preset, fitted, multires, LatentDataset(multires))


def _buckets(data: FittedImages, where: Placement, config: DemoShape) -> Any:
    from dataorder.diffusion.sampler.sampler import SequentialBucketSampler

    # Interleaved: chunks of every bucket spread through the epoch; the unit is a multiple of
    # every data-parallel size the job has, so the restart on another size is elastic.
    return SequentialBucketSampler(
        data.multires,
        base_batch_size=config.micro_batch_size,
        drop_last=False,
        seed=config.seed,
        bucket_order="interleaved",
        interleave_unit=math.lcm(*config.dp_sizes, where.size),
        **where.keywords(SequentialBucketSampler),
    )


def _bucket_notes(data: FittedImages, sampler: Any, config: DemoShape) -> list[str]:
    from dataorder.diffusion.sampler.stats import bucket_stats

    dp = config.dp_sizes[0]
    lines = []
    for label, calc in (("preset 1024p", data.preset), ("fitted", data.fitted)):
        st = bucket_stats(
            data.widths, data.heights, calc, num_replicas=dp, batch_size=sampler.base_batch_size,
            drop_last=False, bucket_order="interleaved", interleave_unit=sampler.interleave_unit,
            seed=sampler.seed,
        )  # fmt: skip
        o = st.overall
        lines.append(
            f"{label}: {int((st.counts > 0).sum())} buckets, mean crop loss "
            f"{o['mean_crop_loss']:.2%}, {int(o['padded'])} padding slots on {dp} ranks, "
            f"longest run of one shape {steps_text(int(o['longest_run']))}"
        )
    seq = bucket_stats(data.widths, data.heights, data.fitted, num_replicas=dp,
                       batch_size=sampler.base_batch_size, drop_last=False)  # fmt: skip
    lines.append(
        f"interleaved order (unit {sampler.interleave_unit}): the same batches as sequential, "
        f"whose longest run of one shape is {steps_text(int(seq.overall['longest_run']))}"
    )
    return lines


def _bucket_manifest(data: FittedImages, stem: Path) -> None:
    """The fitted buckets' manifest: the bucket state's dataset, for ``dataorder inspect``."""
    from dataorder.diffusion.scan.manifest import build_manifest, write_manifest

    paths = [f"image_sizes.csv:{row + 2}" for row in range(len(data.widths))]  # the file line
    manifest = build_manifest(paths, data.widths, data.heights, data.fitted)
    write_manifest(manifest, f"{stem}.manifest.tsv")


# -- video buckets of the shipped clip sizes ------------------------------------------------------
#: The preset the demo's video buckets start from, and the settings its fitted set keeps.
VIDEO_PRESET = "wan2.1-480p"
VIDEO_SETTINGS: dict[str, Any] = {"aspect_ratios": ["1:1", "4:3", "16:9"], "frame_step": 16}
#: Clips per rank at the full token budget; the cost model gives shorter, smaller clips more.
VIDEO_BATCH = 2


@dataclass(frozen=True)
class VideoClips:
    """The first :data:`VIDEO_CLIPS` shipped clips at :data:`VIDEO_FPS`, in video buckets fitted
    to them and to the job's first layout (``fitted``), beside the preset they start from;
    ``keep`` marks the clips that have a bucket (the same in both: a fitted set keeps the
    preset's too-short and too-small ids)."""

    widths: Any
    heights: Any
    frames: Any
    preset: Any
    fitted: Any
    keep: Any
    multires: Any
    dataset: LatentDataset

    @classmethod
    def load(cls, config: DemoShape) -> VideoClips:
        from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset

        widths, heights, frames, fps = load_clip_sizes()
        widths, heights, frames = widths[:VIDEO_CLIPS], heights[:VIDEO_CLIPS], frames[:VIDEO_CLIPS]
        rates = np.array([float(r) for r in fps[:VIDEO_CLIPS]])  # read back as the exact rate
        frames = resample_frame_counts(frames, rates, VIDEO_FPS)
        preset = VideoBucketCalculator.from_preset(VIDEO_PRESET, **VIDEO_SETTINGS)
        # Fitted to these clips and the first layout's cost-model global batches: at most 1 %
        # of the clips padded (the sampler pads each bucket's last global batch).
        fitted = VideoBucketCalculator.fit_to_data(
            widths,
            heights,
            frames,
            global_batch_size=preset.global_batch_size(config.dp_sizes[0], VIDEO_BATCH),
            max_waste=0.01,
            drop_last=False,
            preset=VIDEO_PRESET,
            **VIDEO_SETTINGS,
        )
        keep = fitted.assign(widths, heights, frames) >= 0  # the others are left out, counted
        multires = BaseMultiresolutionDataset.from_video_sizes(
            widths[keep], heights[keep], frames[keep], fitted
        )
        return cls(widths, heights, frames, preset, fitted, keep, multires, LatentDataset(multires))


def _video(data: VideoClips, where: Placement, config: DemoShape) -> Any:
    from dataorder.diffusion.sampler.sampler import SequentialBucketSampler

    return SequentialBucketSampler(
        data.multires,
        base_batch_size=VIDEO_BATCH,
        drop_last=False,
        dynamic_batch_size=True,  # the cost model: shorter, smaller clips in bigger batches
        seed=config.seed,
        **where.keywords(SequentialBucketSampler),
    )


def _video_notes(data: VideoClips, sampler: Any, config: DemoShape) -> list[str]:
    from dataorder.diffusion.sampler.stats import bucket_stats

    keep, dp = data.keep, config.dp_sizes[0]
    lines = [
        f"{int(keep.sum())} of {keep.size} clips at {VIDEO_FPS} fps (frames x height x width "
        f"under {data.fitted.max_tokens:,} tokens); {int((~keep).sum())} too short or too "
        f"small, left out; batch sizes {int(sampler.batch_sizes.min())}-"
        f"{int(sampler.batch_sizes.max())} per rank from the cost model"
    ]
    for label, calc in ((f"preset {VIDEO_PRESET}", data.preset), ("fitted", data.fitted)):
        st = bucket_stats(
            data.widths[keep], data.heights[keep], calc, frames=data.frames[keep],
            num_replicas=dp, batch_size=calc.batch_sizes(VIDEO_BATCH), drop_last=False,
        )  # fmt: skip
        o = st.overall
        lines.append(
            f"{label}: {int((st.counts > 0).sum())} buckets, crop {o['mean_crop_loss']:.2%}, "
            f"trim {o['mean_trim_loss']:.2%}, {int(o['padded'])} padding slots on {dp} ranks, "
            f"step cost max/mean {o['step_cost_max_over_mean']:.2f}"
        )
    return lines


# -- packed rows of the token rows cut into documents ---------------------------------------------
@dataclass(frozen=True)
class PackedDocuments:
    """The shipped tokens as documents (:func:`~dataorder.tools.demo_data.load_documents`),
    read as packed rows of :data:`~dataorder.tools.demo_data.PACKED_SEQ_LEN` tokens."""

    documents: Documents
    dataset: PackedTokens

    @classmethod
    def load(cls, _config: DemoShape) -> PackedDocuments:
        documents = load_documents()
        return cls(documents, PackedTokens(documents, PACKED_SEQ_LEN))


def _packed(data: PackedDocuments, where: Placement, config: DemoShape) -> Any:
    from dataorder.llm.packing import PackedSampler

    # Pretraining's mode: every token once, only what cannot fit split across rows; the rows of
    # the tail that do not fill a global batch are dropped, and counted (tokens_dropped).
    return PackedSampler(
        data.documents.lengths,
        PACKED_SEQ_LEN,
        config.micro_batch_size,
        global_batch_size=where.global_batch_size(config),
        seed=config.seed,
        split="overflow",
        window=PACKED_WINDOW,
        chunk=PACKED_CHUNK,
        **where.keywords(PackedSampler),
    )


def _packed_notes(data: PackedDocuments, sampler: Any, _config: DemoShape) -> list[str]:
    docs = data.documents
    plan = sampler.plans[0]
    low, high = DOCUMENT_LENGTHS
    return [
        f"{len(docs)} documents of {low}-{high} tokens (the token rows end to end) in "
        f"{plan.num_windows} windows of {PACKED_WINDOW}, packed into {plan.rows_per_epoch} rows "
        f"of {PACKED_SEQ_LEN} tokens: {sampler.documents_split} documents split across rows, "
        f"{sampler.tokens_padded} tokens of padding, {sampler.tokens_dropped} tokens in the "
        "dropped tail (the drop/pad column, in tokens)",
        "a tiny causal LM: positions from position_ids (reset per document), attention "
        "block-diagonal over document_ids, the loss on labels",
    ]


def _packed_lengths(_config: DemoShape, stem: Path) -> list[Path]:
    """The documents' lengths, which the packed state holds only a fingerprint of: beside it
    as a ``.npy``, for ``dataorder inspect --lengths``."""
    path = Path(f"{stem}.lengths.npy")
    np.save(path, load_documents().lengths)
    return [path]


# -- the registry ---------------------------------------------------------------------------------
_MEGATRON = ("dataorder.llm.factory", "dataorder.llm.megatron")
_BUCKETS = (
    "dataorder.diffusion.sampler.sampler",
    "dataorder.diffusion.calculators.image",
    "dataorder.diffusion.sampler.dataset",
)


def _registry(*entries: DemoSampler[Any]) -> Mapping[str, DemoSampler[Any]]:
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise TypeError(f"two demo samplers share a name: {names}")
    return MappingProxyType({e.name: e for e in entries})


#: Every sampler of the demo, by name, in report order.
DEMO_SAMPLERS: Mapping[str, DemoSampler[Any]] = _registry(
    DemoSampler(
        "megatron-single",
        data=TokenRows.load,
        build=_megatron("single"),
        model=token_model,
        imports=_MEGATRON,
    ),
    DemoSampler(
        "megatron-cyclic",
        data=TokenRows.load,
        build=_megatron("cyclic"),
        model=token_model,
        imports=_MEGATRON,
    ),
    DemoSampler(
        "mixture",
        data=MixtureRows.load,
        build=_mixture,
        model=token_model,
        checks=("per_source",),
        notes=_mixture_notes,
        inspect=Inspect(_mixture_args, _mixture_log),
        imports=("dataorder.llm.blend", "dataorder.llm.mixlog"),
    ),
    DemoSampler(
        "buckets",
        data=FittedImages.load,
        build=_buckets,
        model=latent_model,
        checks=("lock_step",),
        padding=declared_padding,
        notes=_bucket_notes,
        files=_bucket_manifest,
        inspect=Inspect(lambda _config, file: f" --manifest {file('.manifest.tsv')}"),
        imports=(*_BUCKETS, "dataorder.diffusion.fit.images", "dataorder.diffusion.sampler.stats"),
    ),
    DemoSampler(
        "video",
        data=VideoClips.load,
        build=_video,
        model=video_model,
        checks=("lock_step",),
        padding=declared_padding,
        notes=_video_notes,
        inspect=None,  # its dataset is the shipped clip table, cut and resampled: no file to pass
        imports=(
            *_BUCKETS,
            "dataorder.diffusion.calculators.video",
            "dataorder.diffusion.fit.video",
            "dataorder.diffusion.sampler.stats",
        ),
    ),
    DemoSampler(
        "distributed",
        data=TokenRows.load,
        build=_distributed,
        model=token_model,
        imports=("dataorder.parallel.distributed",),
    ),
    DemoSampler(
        "packed",
        data=PackedDocuments.load,
        build=_packed,
        model=packed_model,
        checks=("costs_dealt",),
        notes=_packed_notes,
        inspect=Inspect(
            lambda _config, file: f" --lengths {file('.lengths.npy')}", _packed_lengths
        ),
        imports=("dataorder.llm.packing", "dataorder.llm.packing.sampler"),
        reading=PACKED_READING,
    ),
)
