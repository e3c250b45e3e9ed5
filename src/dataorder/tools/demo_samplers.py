"""The demo's samplers: for each name in ``SAMPLERS``, the dataset, model and sampler a process
trains with, and what it records beyond the batches.

See :mod:`dataorder.tools.demo`; :mod:`dataorder.tools.demo_job` runs the processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder.tools.demo_config import (
    _LATENT_CHANNELS,
    _LATENT_DOWNSCALE,
    _VOCAB,
    MIXTURE_CHANGE_STEP,
    MIXTURE_SHARES,
    MIXTURE_WEIGHTS,
    SAMPLERS,
    VIDEO_CLIPS,
    VIDEO_FPS,
    DemoConfig,
    PhaseSpec,
    load_clip_sizes,
    load_image_sizes,
    load_tokens,
)

__all__ = ["Job", "build_job", "mixture_sources"]


def _model_seed(seed: int, name: str) -> int:
    from dataorder.core.keys import derive_key

    # torch.Generator.manual_seed takes 64-bit seeds; the top bit is dropped to stay signed-safe
    return derive_key(seed, epoch=0, stream=f"demo/{name}", purpose="model-init") >> 1


class _TokenDataset:
    """Token rows; a padding slot (``None``) gives zeros with a zero loss mask."""

    def __init__(self, tokens: npt.NDArray[np.uint8]) -> None:
        import torch

        self.tokens = torch.from_numpy(tokens.astype(np.int64))

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def __getitem__(self, idx: int | None) -> dict[str, Any]:
        import torch

        if idx is None:  # Megatron's padding slot: keep the shape, mask the loss
            seq = self.tokens.shape[1]
            return {
                "index": -1,
                "tokens": torch.zeros(seq, dtype=torch.long),
                "mask": torch.zeros(seq - 1),
            }
        return {
            "index": idx,
            "tokens": self.tokens[idx],
            "mask": torch.ones(self.tokens.shape[1] - 1),
        }


class _LatentDataset:
    """A synthetic latent per sample, shaped by its bucket and seeded by its index: an image's
    ``(channels, h / 8, w / 8)``, a clip's ``(channels, latent frames, h / 16, w / 16)``."""

    def __init__(self, multires: Any) -> None:
        self.multires = multires

    def __len__(self) -> int:
        return len(self.multires)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        import torch

        item = self.multires[idx]
        w, h = item["bucket_resolution"]
        g = torch.Generator().manual_seed(idx)
        if "bucket_frames" in item:  # a video bucket: a causal VAE's latent frames
            frames = (item["bucket_frames"] - 1) // 4 + 1
            shape: tuple[int, ...] = (_LATENT_CHANNELS, frames, h // 16, w // 16)
        else:
            shape = (_LATENT_CHANNELS, h // _LATENT_DOWNSCALE, w // _LATENT_DOWNSCALE)
        return {
            "index": idx,
            "bucket": int(item["bucket"]),
            "latent": torch.randn(shape, generator=g),
            "noise": torch.randn(shape, generator=g),
        }


def _init_parameters(model: Any, seed: int) -> None:
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def _token_model(seed: int) -> tuple[Any, Callable[[Any, dict[str, Any]], Any]]:
    import torch

    model = torch.nn.Sequential(torch.nn.Embedding(_VOCAB, 32), torch.nn.Linear(32, _VOCAB))
    _init_parameters(model, seed)

    def loss_fn(m: Any, batch: dict[str, Any]) -> Any:
        tokens, mask = batch["tokens"], batch["mask"]
        logits = m(tokens[:, :-1])
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, _VOCAB), tokens[:, 1:].reshape(-1), reduction="none"
        )
        # averaged over real tokens only, so a padding slot adds nothing to the loss
        return (ce * mask.reshape(-1)).sum() / mask.sum().clamp(min=1)

    return model, loss_fn


def _latent_model(
    seed: int, video: bool = False
) -> tuple[Any, Callable[[Any, dict[str, Any]], Any]]:
    import torch

    conv = torch.nn.Conv3d if video else torch.nn.Conv2d
    model = conv(_LATENT_CHANNELS, _LATENT_CHANNELS, 3, padding=1)
    _init_parameters(model, seed)

    def loss_fn(m: Any, batch: dict[str, Any]) -> Any:
        noisy = batch["latent"] + 0.5 * batch["noise"]
        return torch.nn.functional.mse_loss(m(noisy), batch["noise"])

    return model, loss_fn


@dataclass
class Job:
    """What one process trains with, for one sampler."""

    loader: Any
    sampler: Any
    model: Any
    loss_fn: Callable[[Any, dict[str, Any]], Any]
    dropped: Callable[[], int]
    padded: Callable[[], int]
    # slots of the batch that repeat a sample, given its epoch and its index in that epoch
    batch_padding: Callable[[int, int, dict[str, Any]], int]
    # index in the epoch of the next batch (where the next iter() starts)
    next_batch_index: Callable[[], int] = int  # int() == 0: batch index 0
    # what the phase shows beyond the checks, one line each (rank 0 records them)
    notes: Callable[[], list[str]] = list
    # what else the checks need, recorded at the end of the phase
    extra: Callable[[], dict[str, Any]] = dict
    # files beside the checkpoint that `dataorder inspect` needs (rank 0, at the checkpoint)
    save_files: Callable[[Path], None] | None = None


def build_job(name: str, spec: PhaseSpec, mesh: Any) -> Job:
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataorder.core.topology import data_parallel_topology

    cfg = spec.config
    topo = data_parallel_topology(mesh, ("dp",))
    # where the samplers think they are: the DP rank and size, unless the bug is injected
    rank, world = topo.dp_rank, topo.dp_size
    placement: dict[str, Any] = {"mesh": mesh, "dp_dims": ("dp",)}
    if cfg.inject_bug == "global-world":
        import torch.distributed as dist

        rank, world = dist.get_rank(), dist.get_world_size()
        placement = {"rank": rank, "num_replicas": world}
    seed = _model_seed(cfg.seed, name)
    if name in ("megatron-single", "megatron-cyclic"):
        from dataorder.llm.factory import create_megatron_sampler

        tokens = _TokenDataset(load_tokens())
        # "single" pads the last global batch with None slots (masked), "cyclic" drops the tail:
        # the report shows both kinds of accounting.
        single = name == "megatron-single"
        gbs = cfg.global_batch_size
        if gbs % (cfg.micro_batch_size * world):  # only with the injected bug: world too large
            gbs = cfg.micro_batch_size * world
        sampler: Any = create_megatron_sampler(
            len(tokens),
            micro_batch_size=cfg.micro_batch_size,
            global_batch_size=gbs,
            dataloader_type="single" if single else "cyclic",
            drop_last=not single,
            pad_samples_to_global_batch_size=single,
            rank=rank,
            world_size=world,
            seed=cfg.seed,
        )
        loader = StatefulDataLoader(tokens, batch_sampler=sampler)
        model, loss_fn = _token_model(seed)
        return Job(
            loader,
            sampler,
            model,
            loss_fn,
            lambda: int(sampler.samples_dropped),
            lambda: int(sampler.samples_padded),
            lambda _e, _i, batch: int((batch["index"] < 0).sum()),
        )
    if name == "mixture":
        return _mixture_job(spec, placement, seed)
    if name == "video":
        return _video_job(spec, placement, seed)
    if name == "distributed":
        from dataorder.parallel.distributed import DistributedSampler

        tokens = _TokenDataset(load_tokens())
        dist_sampler = DistributedSampler(
            tokens, shuffle=True, seed=cfg.seed, drop_last=False, **placement
        )
        loader = StatefulDataLoader(tokens, batch_size=cfg.micro_batch_size, sampler=dist_sampler)
        model, loss_fn = _token_model(seed)
        return Job(
            loader,
            dist_sampler,
            model,
            loss_fn,
            lambda: int(dist_sampler.samples_dropped),
            lambda: int(dist_sampler.samples_padded),
            lambda _e, _i, _batch: 0,  # wrap-around repeats are counted by samples_padded
        )
    if name == "buckets":
        from dataorder.diffusion.bucket_sampler import SequentialBucketSampler
        from dataorder.diffusion.buckets import MultiTierBucketCalculator
        from dataorder.diffusion.multires import BaseMultiresolutionDataset

        widths, heights = load_image_sizes()
        # Buckets fitted to these sizes and this job: the sampler pads each bucket's last global
        # batch with fewer than num_replicas repeats, and at most 1 % of the images may be.
        first_dp = cfg.first_mesh.dp
        preset = MultiTierBucketCalculator.from_preset("1024p")
        fitted = MultiTierBucketCalculator.fit_to_data(
            widths,
            heights,
            global_batch_size=first_dp,
            max_waste=0.01,
            max_pixels=preset.max_pixels,
            drop_last=False,
        )
        multires = BaseMultiresolutionDataset.from_sizes(widths, heights, calculator=fitted)
        # Interleaved: chunks of every bucket spread through the epoch; the unit is a multiple
        # of both phases' data-parallel sizes, so the restart on another size is elastic.
        unit = math.lcm(first_dp, cfg.mesh.dp)
        bucket_sampler = SequentialBucketSampler(
            multires,
            base_batch_size=cfg.micro_batch_size,
            drop_last=False,
            seed=cfg.seed,
            bucket_order="interleaved",
            interleave_unit=unit,
            **placement,
        )
        loader = StatefulDataLoader(_LatentDataset(multires), batch_sampler=bucket_sampler)
        model, loss_fn = _latent_model(seed)

        def padding_of(epoch: int, i: int, _batch: dict[str, Any]) -> int:
            # how many slots of this rank's batch repeat a sample, as the sampler declares it
            return int(bucket_sampler.get_batch_info(i, epoch=epoch)["padding"])

        return Job(
            loader,
            bucket_sampler,
            model,
            loss_fn,
            lambda: int(bucket_sampler.samples_dropped),
            lambda: int(bucket_sampler.samples_padded),
            padding_of,
            lambda: bucket_sampler.next_start()[1],
            lambda: _bucket_notes(widths, heights, preset, fitted, bucket_sampler, first_dp),
            save_files=lambda directory: _save_manifest(widths, heights, fitted, directory / name),
        )
    raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}; got sampler={name!r}")


def _save_manifest(widths: Any, heights: Any, fitted: Any, stem: Path) -> None:
    """Write the fitted buckets' manifest: the bucket state's dataset, for ``dataorder inspect``."""
    from dataorder.diffusion.manifest import build_manifest, write_manifest

    paths = [f"image_sizes.csv:{row + 2}" for row in range(len(widths))]  # the file line
    write_manifest(build_manifest(paths, widths, heights, fitted), f"{stem}.manifest.tsv")


def _steps(k: int) -> str:
    return f"{k} step" if k == 1 else f"{k} steps"


def _bucket_notes(
    widths: Any, heights: Any, preset: Any, fitted: Any, sampler: Any, dp: int
) -> list[str]:
    from dataorder.diffusion.stats import bucket_stats

    lines = []
    for label, calc in (("preset 1024p", preset), ("fitted", fitted)):
        st = bucket_stats(
            widths, heights, calc, num_replicas=dp, batch_size=sampler.base_batch_size,
            drop_last=False, bucket_order="interleaved", interleave_unit=sampler.interleave_unit,
            seed=sampler.seed,
        )  # fmt: skip
        o = st.overall
        lines.append(
            f"{label}: {int((st.counts > 0).sum())} buckets, mean crop loss "
            f"{o['mean_crop_loss']:.2%}, {int(o['padded'])} padding slots on {dp} ranks, "
            f"longest run of one shape {_steps(int(o['longest_run']))}"
        )
    seq = bucket_stats(widths, heights, fitted, num_replicas=dp, batch_size=sampler.base_batch_size,
                       drop_last=False)  # fmt: skip
    lines.append(
        f"interleaved order (unit {sampler.interleave_unit}): the same batches as sequential, "
        f"whose longest run of one shape is {_steps(int(seq.overall['longest_run']))}"
    )
    return lines


def mixture_sources(config: DemoConfig) -> tuple[list[int], Any]:
    """The mixture's source sizes (consecutive ranges of the token rows) and its
    :class:`~dataorder.llm.mixture.MixtureSchedule`: what ``dataorder inspect`` needs to rebuild
    its state (``--source-sizes``, ``--schedule``)."""
    from dataorder.llm.mixture import MixtureSchedule

    n = len(load_tokens())
    # three sources, consecutive ranges of the token rows: ConcatDataset order is row order
    sizes = [int(n * share) for share in MIXTURE_SHARES[:-1]]
    sizes.append(n - sum(sizes))
    change = MIXTURE_CHANGE_STEP * config.global_batch_size
    schedule = MixtureSchedule([(0, list(MIXTURE_WEIGHTS[0])), (change, list(MIXTURE_WEIGHTS[1]))])
    return sizes, schedule


def _mixture_job(spec: PhaseSpec, placement: dict[str, Any], seed: int) -> Job:
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataorder.llm.blend import BlendedSampler

    cfg = spec.config
    tokens = _TokenDataset(load_tokens())
    sizes, schedule = mixture_sources(cfg)
    gbs = cfg.global_batch_size
    change = MIXTURE_CHANGE_STEP * gbs
    where = (
        {"data_parallel_rank": placement["rank"], "data_parallel_size": placement["num_replicas"]}
        if "rank" in placement
        else {"mesh": placement["mesh"], "dp_dims": placement["dp_dims"]}
    )
    sampler = BlendedSampler(
        sizes, schedule, cfg.micro_batch_size, global_batch_size=gbs, seed=cfg.seed, **where
    )
    loader = StatefulDataLoader(tokens, batch_sampler=sampler)
    model, loss_fn = _token_model(seed)

    def notes() -> list[str]:
        a, b = ("/".join(f"{w:g}" for w in ws) for ws in MIXTURE_WEIGHTS)
        reads = "/".join(map(str, sampler.consumed_per_source().tolist()))
        return [
            f"3 sources of {'/'.join(map(str, sizes))} token rows; weights {a} until sample "
            f"{change}, then {b}",
            f"reads per source so far this epoch {reads}: the weights, not the sizes, set them, so "
            f"over the epoch {sampler.samples_dropped} rows are not reached and "
            f"{sampler.samples_padded} reads repeat a row (the drop/pad column)",
        ]

    def extra() -> dict[str, Any]:
        return {
            "source_sizes": sizes,
            "consumed_per_source": sampler.consumed_per_source().tolist(),
            "consumed_samples": sampler.consumed_samples,
        }

    return Job(
        loader,
        sampler,
        model,
        loss_fn,
        lambda: int(sampler.samples_dropped),
        lambda: int(sampler.samples_padded),
        lambda _e, _i, _batch: 0,
        notes=notes,
        extra=extra,
    )


def _video_job(spec: PhaseSpec, placement: dict[str, Any], seed: int) -> Job:
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataorder.diffusion.bucket_sampler import SequentialBucketSampler
    from dataorder.diffusion.multires import BaseMultiresolutionDataset
    from dataorder.diffusion.video import VideoBucketCalculator, resample_frame_counts

    cfg = spec.config
    widths, heights, frames, fps = load_clip_sizes()
    widths, heights, frames = widths[:VIDEO_CLIPS], heights[:VIDEO_CLIPS], frames[:VIDEO_CLIPS]
    rates = np.array([float(r) for r in fps[:VIDEO_CLIPS]])  # read back as the exact rate
    frames = resample_frame_counts(frames, rates, VIDEO_FPS)
    calc = VideoBucketCalculator.from_preset(
        "wan2.1-480p", aspect_ratios=["1:1", "4:3", "16:9"], frame_step=16
    )
    ids = calc.assign(widths, heights, frames)
    keep = ids >= 0  # clips too short or too small for every bucket are left out, and counted
    multires = BaseMultiresolutionDataset.from_video_sizes(
        widths[keep], heights[keep], frames[keep], calc
    )
    sampler = SequentialBucketSampler(
        multires,
        base_batch_size=2,
        drop_last=False,
        dynamic_batch_size=True,  # the cost model: shorter, smaller clips in bigger batches
        seed=cfg.seed,
        **placement,
    )
    loader = StatefulDataLoader(_LatentDataset(multires), batch_sampler=sampler)
    model, loss_fn = _latent_model(seed, video=True)

    def padding_of(epoch: int, i: int, _batch: dict[str, Any]) -> int:
        return int(sampler.get_batch_info(i, epoch=epoch)["padding"])

    def notes() -> list[str]:
        used = int((multires.bucket_table.sizes > 0).sum())
        return [
            f"{int(keep.sum())} of {keep.size} clips at {VIDEO_FPS} fps in {used} buckets of "
            f"wan2.1-480p (frames x height x width under {calc.max_tokens:,} tokens); "
            f"{int((~keep).sum())} too short or too small, left out; batch sizes "
            f"{int(sampler.batch_sizes.min())}-{int(sampler.batch_sizes.max())} per rank "
            "from the cost model"
        ]

    return Job(
        loader,
        sampler,
        model,
        loss_fn,
        lambda: int(sampler.samples_dropped),
        lambda: int(sampler.samples_padded),
        padding_of,
        lambda: sampler.next_start()[1],
        notes,
    )
