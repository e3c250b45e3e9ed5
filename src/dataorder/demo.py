"""``dataorder demo``: a real multi-process training job that checkpoints, shrinks, and proves it.

On one machine without a GPU, the demo runs a ``torch.distributed`` job (gloo, loopback) in two
phases, one process group each:

1. **before**: ``first_mesh`` (default ``(dp, tp, cp) = (4, 2, 1)``, 8 processes). Every process
   trains a tiny model with each sampler of the library, through torchdata's
   ``StatefulDataLoader``, up to the middle of the epoch, then saves the loader state (one JSON
   file for the whole job) and the model, and the job stops;
2. **after**: ``mesh`` (default ``(2, 2, 2)``, 8 processes): a different data-parallel size. Every
   process loads the same checkpoint and trains to the end of the epoch.

The samplers: Megatron "single" and "cyclic" over the token dataset shipped in
``dataorder/data/tokens.npy``, the bucket sampler over the image sizes in
``dataorder/data/image_sizes.csv`` (both synthetic and deterministic, see
``dataorder/data/README.md``), and the ``DistributedSampler`` over the token dataset. The global
batch size stays the same across the restart (gradient accumulation makes up for the smaller
data-parallel size), as a real elastic job would keep it.

Every process records what its loader really yielded (the ``index`` carried by each sample of the
batch the model trained on). The parent process then checks, per sampler:

* **DP disjoint / TP-CP identical**: :func:`dataorder.verify.verify_data_parallel`, a collective
  over the job's own process groups, in both phases; and, from the records, that every TP/CP
  replica of a data-parallel rank trained on exactly the same batches;
* **equal batches**: every rank took the same number of batches, of the same size at every step;
* **lock-step buckets**: at every step all ranks drew from one bucket (so shapes match);
* **one checkpoint**: all processes saved an identical loader state (progress is global);
* **nothing lost or repeated**: over the epoch, before and after the restart together, every
  sample was read exactly once, apart from what the sampler itself reports as dropped or padded.

It writes ``report.json``, ``schedule.png`` (see :mod:`dataorder.plots`) and the checkpoints
under ``out``. :func:`run_demo` is the entry point; ``dataorder demo`` prints its report and exits
with status 1 if a check fails. ``DemoConfig(inject_bug=...)`` (``dataorder demo --inject-bug``)
makes a classic mistake on purpose, to see the checks catch it.

How it runs: each phase is one process group of ``dp * tp * cp`` processes, started by
``torch.multiprocessing`` from a forkserver that has imported torch once (8 processes start in
about a second on 2 cores), meeting at a TCP store the parent hosts on a port the OS picks. Every
phase has a deadline: past it, its processes are killed and :class:`DemoError` says so.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail

__all__ = [
    "BUGS",
    "CHECKS",
    "SAMPLERS",
    "DemoConfig",
    "DemoError",
    "DemoReport",
    "MeshShape",
    "SamplerResult",
    "load_image_sizes",
    "load_tokens",
    "run_demo",
]

#: The samplers the demo trains with, in report order.
SAMPLERS: tuple[str, ...] = ("megatron-single", "megatron-cyclic", "buckets", "distributed")
#: Mistakes :class:`DemoConfig` can make on purpose (``inject_bug``), to show the checks fail.
BUGS: tuple[str, ...] = ("global-world", "no-resume")

_MESH_DIMS = ("dp", "tp", "cp")
_VOCAB = 64  # tokens.npy holds ids below this (see data/generate.py)
_LATENT_CHANNELS = 4
_LATENT_DOWNSCALE = 64  # a bucket of w x h pixels gives a latent of (w / 64) x (h / 64)
_LEARNING_RATE = 0.5
# Imported once by the forkserver, so that no worker process imports them again (a missing one is
# skipped by multiprocessing and imported by the worker that needs it).
_PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.distributed.device_mesh",
    "torchdata.stateful_dataloader",
    "dataorder.demo",
    "dataorder.megatron",
    "dataorder.distributed",
    "dataorder.bucket_sampler",
    "dataorder.buckets",
    "dataorder.multires",
    "dataorder.verify",
)


class DemoError(RuntimeError):
    """The demo could not run to the end (a process failed or timed out)."""


@dataclass(frozen=True)
class MeshShape:
    """A ``(dp, tp, cp)`` device mesh shape; the job has ``dp * tp * cp`` processes."""

    dp: int
    tp: int
    cp: int

    def __post_init__(self) -> None:
        for name in _MESH_DIMS:
            check_int(name, getattr(self, name), min_value=1)

    @classmethod
    def parse(cls, text: str, *, name: str = "mesh") -> MeshShape:
        """Parse ``"2,2,2"`` (dp, tp, cp).

        Raises:
            ValueError: If ``text`` is not three positive ints separated by commas.
        """
        parts = text.replace("x", ",").split(",")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            values = []
        if len(values) != 3 or min(values) < 1:
            fail(name, "three positive ints dp,tp,cp such as 2,2,2", text)
        return cls(*values)

    @property
    def world(self) -> int:
        """Number of processes."""
        return self.dp * self.tp * self.cp

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(dp, tp, cp)``."""
        return (self.dp, self.tp, self.cp)

    def __str__(self) -> str:
        return f"dp={self.dp} tp={self.tp} cp={self.cp}"


@dataclass(frozen=True)
class DemoConfig:
    """What the demo runs.

    Attributes:
        first_mesh: Mesh of the phase before the restart.
        mesh: Mesh of the phase after it (another data-parallel size, to show an elastic resume).
        micro_batch_size: Samples per rank and micro-batch, for every sampler.
        seed: The seed of every sampler and of the model initialisation.
        timeout: Seconds each phase may take before its processes are killed.
        samplers: Which samplers to train with (a subset of :data:`SAMPLERS`).
        inject_bug: None, or a classic mistake to make on purpose, to see the checks fail
            (:data:`BUGS`): ``"global-world"`` builds every sampler with the global rank and
            world size instead of the data-parallel ones (TP/CP peers then read different
            data); ``"no-resume"`` restarts without loading the checkpoint (the first half of
            the epoch is read twice).
    """

    first_mesh: MeshShape = field(default_factory=lambda: MeshShape(4, 2, 1))
    mesh: MeshShape = field(default_factory=lambda: MeshShape(2, 2, 2))
    micro_batch_size: int = 4
    seed: int = 1234
    timeout: float = 120.0
    samplers: tuple[str, ...] = SAMPLERS
    inject_bug: str | None = None

    def __post_init__(self) -> None:
        for name in ("first_mesh", "mesh"):
            if not isinstance(getattr(self, name), MeshShape):
                fail(name, "a MeshShape", getattr(self, name), TypeError)
        check_int("micro_batch_size", self.micro_batch_size, min_value=1)
        check_int("seed", self.seed, min_value=0)
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float):
            fail("timeout", "a positive number of seconds", self.timeout, TypeError)
        if not self.timeout > 0:
            fail("timeout", "a positive number of seconds", self.timeout)
        unknown = [s for s in self.samplers if s not in SAMPLERS]
        if unknown or not self.samplers or len(set(self.samplers)) != len(self.samplers):
            fail("samplers", "distinct names among " + ", ".join(SAMPLERS), self.samplers)
        if self.inject_bug is not None and self.inject_bug not in BUGS:
            fail("inject_bug", "None or one of " + ", ".join(BUGS), self.inject_bug)

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step in both phases: ``micro_batch_size x lcm(dp before, after)``.

        The phase with fewer data-parallel ranks accumulates gradients over more micro-batches.
        """
        return self.micro_batch_size * math.lcm(self.first_mesh.dp, self.mesh.dp)

    def accumulation(self, mesh: MeshShape) -> int:
        """Micro-batches per optimizer step on ``mesh``."""
        return self.global_batch_size // (self.micro_batch_size * mesh.dp)


# -- the shipped data -----------------------------------------------------------------------------
def _data_file(name: str) -> Any:
    return resources.files("dataorder").joinpath("data").joinpath(name)


def load_tokens() -> npt.NDArray[np.uint8]:
    """The shipped token dataset: ``uint8`` array ``(samples, sequence length)``."""
    with _data_file("tokens.npy").open("rb") as f:
        tokens: npt.NDArray[np.uint8] = np.load(f, allow_pickle=False)
    return tokens


def load_image_sizes() -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The shipped image sizes: ``(widths, heights)``, each int64 of shape ``(N,)``."""
    text = _data_file("image_sizes.csv").read_text(encoding="ascii")
    rows = np.array(
        [[int(v) for v in line.split(",")] for line in text.splitlines()[1:] if line],
        dtype=np.int64,
    )
    return rows[:, 0].copy(), rows[:, 1].copy()


# -- results --------------------------------------------------------------------------------------
@dataclass
class SamplerResult:
    """What one sampler did over both phases, and the verdict of every check.

    Attributes:
        name: One of :data:`SAMPLERS`.
        steps: Optimizer steps before and after the restart.
        micro_batches: Micro-batches per rank before and after the restart.
        checks: Check name -> passed.
        details: Check name -> one line saying what was found.
        dataset_size: Samples in the dataset.
        lost: Samples never read beyond what the sampler reports as dropped.
        repeated: Extra reads beyond what the sampler reports as padding.
        dropped: Samples the sampler reports as dropped in the epoch.
        padded: Padding slots the sampler reports in the epoch.
        loss: Mean training loss of the first and of the last step.
    """

    name: str
    steps: tuple[int, int]
    micro_batches: tuple[int, int]
    checks: dict[str, bool]
    details: dict[str, str]
    dataset_size: int
    lost: int
    repeated: int
    dropped: int
    padded: int
    loss: tuple[float, float]

    @property
    def ok(self) -> bool:
        """True if every check passed."""
        return all(self.checks.values())


@dataclass
class DemoReport:
    """The outcome of :func:`run_demo`.

    Attributes:
        config: What ran.
        results: One per sampler.
        seconds: Wall time of each phase and in total.
        outputs: Name -> path of what was written (report, plot, checkpoints).
    """

    config: DemoConfig
    results: list[SamplerResult]
    seconds: dict[str, float]
    outputs: dict[str, str]

    @property
    def ok(self) -> bool:
        """True if every check of every sampler passed."""
        return all(r.ok for r in self.results)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict of the report."""
        out = asdict(self)
        out["ok"] = self.ok
        out["config"]["global_batch_size"] = self.config.global_batch_size
        return out


#: Check names, in report order, with the column title the CLI shows.
CHECKS: dict[str, str] = {
    "dp_disjoint": "DP disjoint",
    "replicas_identical": "TP/CP same",
    "equal_batches": "equal batches",
    "lock_step": "lock-step",
    "one_checkpoint": "one ckpt",
    "exactly_once": "each once",
}


# -- what runs inside each process ----------------------------------------------------------------
@dataclass(frozen=True)
class _PhaseSpec:
    config: DemoConfig
    phase: int
    mesh: MeshShape
    port: int
    workdir: str


def _model_seed(seed: int, name: str) -> int:
    from dataorder.keys import derive_key

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
    """A synthetic latent per image, shaped by the image's bucket, seeded by its index."""

    def __init__(self, multires: Any) -> None:
        self.multires = multires

    def __len__(self) -> int:
        return len(self.multires)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        import torch

        item = self.multires[idx]
        w, h = item["bucket_resolution"]
        g = torch.Generator().manual_seed(idx)
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


def _latent_model(seed: int) -> tuple[Any, Callable[[Any, dict[str, Any]], Any]]:
    import torch

    model = torch.nn.Conv2d(_LATENT_CHANNELS, _LATENT_CHANNELS, 3, padding=1)
    _init_parameters(model, seed)

    def loss_fn(m: Any, batch: dict[str, Any]) -> Any:
        noisy = batch["latent"] + 0.5 * batch["noise"]
        return torch.nn.functional.mse_loss(m(noisy), batch["noise"])

    return model, loss_fn


@dataclass
class _Job:
    loader: Any
    sampler: Any
    model: Any
    loss_fn: Callable[[Any, dict[str, Any]], Any]
    dropped: Callable[[], int]
    padded: Callable[[], int]
    # slots of the batch that repeat a sample, given its epoch and its index in that epoch
    batch_padding: Callable[[int, int, dict[str, Any]], int]
    # index in the epoch of the next batch (where the next iter() starts)
    next_batch_index: Callable[[], int] = lambda: 0


def _build_job(name: str, spec: _PhaseSpec, mesh: Any) -> _Job:
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataorder.topology import data_parallel_topology

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
        from dataorder.megatron import create_megatron_sampler

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
        return _Job(
            loader,
            sampler,
            model,
            loss_fn,
            lambda: int(sampler.samples_dropped),
            lambda: int(sampler.samples_padded),
            lambda _e, _i, batch: int((batch["index"] < 0).sum()),
        )
    if name == "distributed":
        from dataorder.distributed import DistributedSampler

        tokens = _TokenDataset(load_tokens())
        dist_sampler = DistributedSampler(
            tokens, shuffle=True, seed=cfg.seed, drop_last=False, **placement
        )
        loader = StatefulDataLoader(tokens, batch_size=cfg.micro_batch_size, sampler=dist_sampler)
        model, loss_fn = _token_model(seed)
        return _Job(
            loader,
            dist_sampler,
            model,
            loss_fn,
            lambda: int(dist_sampler.samples_dropped),
            lambda: int(dist_sampler.samples_padded),
            lambda _e, _i, _batch: 0,  # wrap-around repeats are counted by samples_padded
        )
    if name == "buckets":
        from dataorder.bucket_sampler import SequentialBucketSampler
        from dataorder.buckets import MultiTierBucketCalculator
        from dataorder.multires import BaseMultiresolutionDataset

        widths, heights = load_image_sizes()
        multires = BaseMultiresolutionDataset.from_sizes(
            widths, heights, calculator=MultiTierBucketCalculator.from_preset("1024p")
        )
        bucket_sampler = SequentialBucketSampler(
            multires,
            base_batch_size=cfg.micro_batch_size,
            drop_last=False,
            seed=cfg.seed,
            **placement,
        )
        loader = StatefulDataLoader(_LatentDataset(multires), batch_sampler=bucket_sampler)
        model, loss_fn = _latent_model(seed)

        def padding_of(epoch: int, i: int, _batch: dict[str, Any]) -> int:
            # how many slots of this rank's batch repeat a sample, as the sampler declares it
            return int(bucket_sampler.get_batch_info(i, epoch=epoch)["padding"])

        return _Job(
            loader,
            bucket_sampler,
            model,
            loss_fn,
            lambda: int(bucket_sampler.samples_dropped),
            lambda: int(bucket_sampler.samples_padded),
            padding_of,
            lambda: bucket_sampler.next_start()[1],
        )
    raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}; got sampler={name!r}")


def _grad_all_reduce(model: Any, group: Any, size: int) -> None:
    import torch
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)  # one collective per step: DDP's job, done by hand
    flat /= size
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def _sgd_step(model: Any, lr: float) -> None:
    # Plain SGD by hand: constructing a torch.optim optimizer imports torch._dynamo, which costs
    # seconds in every process of a small machine, and plain SGD has no state to checkpoint.
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad


def _batch_bucket(batch: dict[str, Any]) -> int | None:
    """The bucket of a batch of latents, -1 if its samples come from several, None if no buckets."""
    bucket = batch.get("bucket")
    if bucket is None:
        return None
    ids = set(bucket.tolist())
    return ids.pop() if len(ids) == 1 else -1


def _train(name: str, spec: _PhaseSpec, mesh: Any, rank: int) -> dict[str, Any]:
    """Train with one sampler for this phase; return what this process read, and its checks."""
    import torch

    from dataorder.cli import find_sampler_states
    from dataorder.topology import data_parallel_topology
    from dataorder.verify import verify_data_parallel

    cfg = spec.config
    t_start = time.perf_counter()
    topo = data_parallel_topology(mesh, ("dp",))
    dp_group = mesh["dp"].get_group()
    job = _build_job(name, spec, mesh)
    ckpt = Path(spec.workdir) / "checkpoint"
    if spec.phase > 0 and cfg.inject_bug != "no-resume":
        loader_state = json.loads((ckpt / f"{name}.json").read_text())
        job.loader.load_state_dict(loader_state)  # applied by the next iter(loader)
        # The sampler's own state, inside the loader's, is set now too, so that the check below
        # covers what this phase will read: the rest of the epoch, on the new layout.
        ((_where, sampler_state),) = find_sampler_states(loader_state)
        job.sampler.load_state_dict(sampler_state)
        job.model.load_state_dict(torch.load(ckpt / f"{name}.model.pt", weights_only=True))
    # The collective check, over the mesh's groups, of every batch this phase is about to read.
    # It runs before iter(loader): it reads the sampler and then restores its cursor, which must
    # not happen under a live iterator.
    report = verify_data_parallel(job.sampler, mesh=mesh, dp_dims=("dp",), raise_on_error=False)
    t_verified = time.perf_counter()

    accumulation = cfg.accumulation(spec.mesh)
    epoch_micro_batches = len(job.loader)
    # phase 0 stops at the middle of the epoch, on an optimizer-step boundary
    stop = max(1, epoch_micro_batches // accumulation // 2) if spec.phase == 0 else None
    batches: list[list[int]] = []
    buckets: list[int | None] = []
    padding: list[int] = []
    losses: list[float] = []
    it: Iterator[dict[str, Any]] = iter(job.loader)
    # The epoch this phase reads (it never crosses into the next one), taken before the first
    # batch: the pass that runs out moves the sampler's cursor on to the next epoch, possibly
    # before the last micro-batches of a step are accounted for.
    epoch = int(job.sampler.epoch)
    first_index = job.next_batch_index()
    while stop is None or len(losses) < stop:
        micro = [b for b in (next(it, None) for _ in range(accumulation)) if b is not None]
        if not micro:
            break
        job.model.zero_grad()
        shown: list[float] = []  # the loss of micro-batches that hold a real sample
        for batch in micro:
            loss = job.loss_fn(job.model, batch)
            (loss / len(micro)).backward()
            if int((batch["index"] >= 0).sum()):
                shown.append(loss.item())
            padding.append(job.batch_padding(epoch, first_index + len(batches), batch))
            batches.append(batch["index"].tolist())  # what the model really trained on
            buckets.append(_batch_bucket(batch))
        _grad_all_reduce(job.model, dp_group, topo.dp_size)
        _sgd_step(job.model, _LEARNING_RATE)
        losses.append(sum(shown) / max(1, len(shown)))
    out: dict[str, Any] = {
        "batches": batches,
        "buckets": buckets,
        "padding": padding,
        "losses": losses,
        "verify": {"ok": report.ok, "summary": str(report)},
        "dropped": job.dropped(),
        "padded": job.padded(),
        "dataset_size": len(job.loader.dataset),
        "seconds": {"setup": t_verified - t_start, "train": time.perf_counter() - t_verified},
    }
    if spec.phase == 0:
        out["loader_state"] = job.loader.state_dict()
        if rank == 0:  # every replica holds the same model: one copy is the checkpoint
            torch.save(job.model.state_dict(), ckpt / f"{name}.model.pt")
    return out


def _phase_main(rank: int, spec: _PhaseSpec) -> None:
    """One process of one phase: join the group, build the mesh, train with every sampler."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from dataorder.topology import data_parallel_topology

    # Eight processes share a few cores: intra-op threads would only contend with each other.
    torch.set_num_threads(1)
    # torchdata 0.11 calls a torch API that torch deprecates; the warning is noise in a demo
    warnings.filterwarnings("ignore", message=".*set_vital.* is deprecated")
    t0 = time.perf_counter()
    timeout = timedelta(seconds=spec.config.timeout)
    # TCPStore is public torch API, re-exported without __all__ (hence the ignore)
    store = dist.TCPStore("127.0.0.1", spec.port, None, False, timeout)  # type: ignore[attr-defined]
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=spec.mesh.world, timeout=timeout
    )
    try:
        mesh = init_device_mesh("cpu", spec.mesh.shape, mesh_dim_names=_MESH_DIMS)
        topo = data_parallel_topology(mesh, ("dp",))
        t_mesh = time.perf_counter() - t0
        result: dict[str, Any] = {
            "seconds_init": t_mesh,
            "rank": rank,
            "dp_rank": topo.dp_rank,
            "dp_size": topo.dp_size,
            "replica_rank": topo.replica_rank,
            "samplers": {name: _train(name, spec, mesh, rank) for name in spec.config.samplers},
        }
        path = Path(spec.workdir) / "ranks" / f"phase{spec.phase}" / f"rank{rank}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(path)
        dist.barrier()
    finally:
        dist.destroy_process_group()


# -- the parent: launch, wait, check --------------------------------------------------------------
def _run_phase(spec_args: dict[str, Any], phase: int, mesh: MeshShape, timeout: float) -> None:
    import multiprocessing

    import torch.distributed as dist

    # public torch API that torch does not re-export explicitly (hence the ignores)
    from torch.multiprocessing import (  # type: ignore[attr-defined]
        ProcessExitedException,
        ProcessRaisedException,
        start_processes,
    )

    # forkserver: each process is forked from a server that has imported torch once, which
    # starts 8 processes in about a second where "spawn" re-imports torch 8 times; and unlike
    # "fork" it never copies the caller's threads or state.
    multiprocessing.set_forkserver_preload(list(_PRELOAD))
    # The parent hosts the rendezvous store on a port the OS picks: no free-port race.
    store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", 0, None, True, timedelta(seconds=timeout), False
    )
    spec = _PhaseSpec(phase=phase, mesh=mesh, port=store.port, **spec_args)
    (Path(spec.workdir) / "ranks" / f"phase{phase}").mkdir(parents=True, exist_ok=True)
    context = start_processes(  # type: ignore[no-untyped-call]
        _phase_main, args=(spec,), nprocs=mesh.world, join=False, start_method="forkserver"
    )
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=max(0.05, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise DemoError(
                    f"phase {phase} ({mesh}) did not finish within {timeout:g} s; "
                    "its processes were killed"
                )
    except ProcessRaisedException as err:
        raise DemoError(f"phase {phase} ({mesh}): a process failed:\n{err}") from None
    except ProcessExitedException as err:
        raise DemoError(f"phase {phase} ({mesh}): {err}") from None
    finally:
        for proc in context.processes:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
        del store


def _load_phase(workdir: Path, phase: int, world: int) -> list[dict[str, Any]]:
    records = []
    for rank in range(world):
        path = workdir / f"phase{phase}" / f"rank{rank}.json"
        if not path.is_file():
            raise DemoError(f"phase {phase}: rank {rank} wrote no result ({path} is missing)")
        records.append(json.loads(path.read_text()))
    return records


def _mine(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    sampler: dict[str, Any] = record["samplers"][name]
    return sampler


def _check_sampler(
    name: str, phases: Sequence[list[dict[str, Any]]]
) -> tuple[SamplerResult, list[Any]]:
    """Check one sampler from every process's records of every phase; also return plot rows."""
    from dataorder.plots import ScheduleBatch

    checks: dict[str, bool] = {}
    details: dict[str, str] = {}

    # verify_data_parallel ran in every process of every phase, each time over what the phase
    # was about to read; every process reaches the same verdict, so one line per phase says it.
    bad = {
        p: _mine(r, name)["verify"]["summary"]
        for p, records in enumerate(phases)
        for r in records
        if not _mine(r, name)["verify"]["ok"]
    }
    checks["dp_disjoint"] = not bad
    details["dp_disjoint"] = (
        " | ".join(f"phase {p}: {' '.join(v.split())}" for p, v in sorted(bad.items()))
        if bad
        else "; ".join(
            f"phase {p}: {_mine(records[0], name)['verify']['summary']}"
            for p, records in enumerate(phases)
        )
    )

    # every TP/CP replica of a DP rank trained on the same batches as the others
    mismatched = []
    for p, records in enumerate(phases):
        by_dp: dict[int, list[Any]] = {}
        for r in records:
            by_dp.setdefault(r["dp_rank"], []).append(_mine(r, name)["batches"])
        mismatched += [
            f"phase {p} DP rank {d}"
            for d, lists in by_dp.items()
            if lists.count(lists[0]) != len(lists)
        ]
    checks["replicas_identical"] = not mismatched
    details["replicas_identical"] = (
        "replicas read different batches: " + ", ".join(mismatched)
        if mismatched
        else "every replica read exactly the batches of the other replicas of its DP rank"
    )

    # the same number of batches on every process, of the same size at every step
    unequal = []
    for p, records in enumerate(phases):
        counts = sorted({len(_mine(r, name)["batches"]) for r in records})
        if len(counts) > 1:
            unequal.append(f"phase {p}: batch counts {counts}")
            continue
        for step in range(counts[0]):
            sizes = sorted({len(_mine(r, name)["batches"][step]) for r in records})
            if len(sizes) > 1:
                unequal.append(f"phase {p} step {step}: batch sizes {sizes}")
                break
    checks["equal_batches"] = not unequal
    details["equal_batches"] = (
        "; ".join(unequal) if unequal else "same count, and same size at every step, everywhere"
    )

    # lock-step buckets: at every step every process's batch comes from one and the same bucket
    bucketed = any(b is not None for r in phases[0] for b in _mine(r, name)["buckets"])
    if bucketed:
        off = []
        for p, records in enumerate(phases):
            steps = min(len(_mine(r, name)["buckets"]) for r in records)
            for step in range(steps):
                seen = {_mine(r, name)["buckets"][step] for r in records}
                if len(seen) > 1 or -1 in seen:
                    off.append(f"phase {p} step {step}: buckets {sorted(seen)}")
        checks["lock_step"] = not off
        details["lock_step"] = (
            f"{len(off)} steps out of lock-step, first {off[0]}"
            if off
            else "every step drew all processes from one bucket"
        )
    else:
        details["lock_step"] = "not a bucket sampler"

    # one checkpoint for the job: progress is global, so every process saved the same state
    states = {json.dumps(_mine(r, name)["loader_state"], sort_keys=True) for r in phases[0]}
    checks["one_checkpoint"] = len(states) == 1
    details["one_checkpoint"] = (
        f"all {len(phases[0])} processes saved the same loader state"
        if len(states) == 1
        else f"the {len(phases[0])} processes saved {len(states)} different loader states"
    )

    # every sample exactly once over the epoch, apart from what the sampler declares
    reads: Counter[int] = Counter()
    none_slots = declared_padding = position = 0
    schedule: list[ScheduleBatch] = []
    for p, records in enumerate(phases):
        # one process per DP rank speaks for its replicas (checked identical above)
        leaders = sorted((r for r in records if r["replica_rank"] == 0), key=lambda r: r["dp_rank"])
        for step in range(min(len(_mine(r, name)["batches"]) for r in leaders)):
            block = sum(len(_mine(r, name)["batches"][step]) for r in leaders)
            for r in leaders:
                mine = _mine(r, name)
                batch = mine["batches"][step]
                real = [i for i in batch if i >= 0]
                reads.update(real)
                none_slots += len(batch) - len(real)
                declared_padding += mine["padding"][step]
                schedule.append(
                    ScheduleBatch(
                        sampler=name,
                        phase=p,
                        dp_rank=r["dp_rank"],
                        dp_size=r["dp_size"],
                        position=position,
                        block=block,
                        samples=tuple(i if i >= 0 else None for i in batch),
                        padding=mine["padding"][step],
                        bucket=mine["buckets"][step],
                    )
                )
            position += block
    last = _mine(phases[-1][0], name)
    n = last["dataset_size"]
    # The end of the epoch is read by the last phase, so its layout decides what is dropped or
    # padded there. A bucket sampler pads the last global batch of every bucket, before or after
    # the restart: what it padded is what get_batch_info declared, batch by batch.
    dropped = last["dropped"]
    padded = declared_padding if bucketed else last["padded"]
    missing = n - len(reads)
    extra = sum(c - 1 for c in reads.values()) + none_slots
    lost, repeated = missing - dropped, extra - padded
    checks["exactly_once"] = lost == 0 and repeated == 0
    details["exactly_once"] = (
        f"{len(reads)} of {n} samples read; {missing} never ({dropped} declared dropped), "
        f"{extra} extra reads ({padded} declared padding)"
    )
    first = _mine(phases[0][0], name)
    losses = [x for records in phases for x in _mine(records[0], name)["losses"]]
    result = SamplerResult(
        name=name,
        steps=(len(first["losses"]), len(last["losses"])),
        micro_batches=(len(first["batches"]), len(last["batches"])),
        checks=checks,
        details=details,
        dataset_size=n,
        lost=lost,
        repeated=repeated,
        dropped=dropped,
        padded=padded,
        loss=(losses[0], losses[-1]) if losses else (math.nan, math.nan),
    )
    return result, schedule


def run_demo(
    config: DemoConfig | None = None,
    out: str | os.PathLike[str] = "out/demo",
    *,
    log: Callable[[str], None] | None = None,
    plot: bool = True,
) -> DemoReport:
    """Run the two-phase job, check it, and write its report, plot and checkpoint under ``out``.

    Writes ``out/report.json`` (:meth:`DemoReport.to_json`), ``out/schedule.png``,
    ``out/checkpoint/<sampler>.json`` (the loader state every process loads on restart; try
    ``dataorder inspect`` on it) and ``<sampler>.model.pt``, and each process's records under
    ``out/ranks/``.

    Args:
        config: What to run; default ``DemoConfig()``.
        out: Output directory (created; earlier results in it are replaced).
        log: Called with one line per stage (e.g. ``print``); default: silent.
        plot: Write ``schedule.png`` (needs matplotlib).

    Returns:
        The :class:`DemoReport`; ``report.ok`` says whether every check passed.

    Raises:
        DemoError: If a process failed or a phase timed out.
        ValueError: If ``out`` exists and is not a directory.
    """
    config = config or DemoConfig()
    say = log or (lambda _line: None)
    root = Path(out)
    if root.exists() and not root.is_dir():
        fail("out", "a directory", str(root))
    ranks = root / "ranks"
    ckpt = root / "checkpoint"
    for stale in [*ranks.glob("phase*/rank*.json"), *ckpt.glob("*.json"), *ckpt.glob("*.pt")]:
        stale.unlink()
    ckpt.mkdir(parents=True, exist_ok=True)
    spec_args = {"config": config, "workdir": str(root)}
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    phases: list[list[dict[str, Any]]] = []
    for phase, mesh in enumerate((config.first_mesh, config.mesh)):
        t0 = time.perf_counter()
        what = "train to mid-epoch, checkpoint, stop" if phase == 0 else "resume, train to the end"
        say(f"phase {phase}: {mesh.world} processes on mesh ({mesh}): {what}")
        _run_phase(spec_args, phase, mesh, config.timeout)
        records = _load_phase(ranks, phase, mesh.world)
        phases.append(records)
        if phase == 0:
            # The job's checkpoint: one loader state per sampler (every process saved the same;
            # _check_sampler verifies it), written once, loaded by every process of phase 1.
            for name in config.samplers:
                state = _mine(records[0], name)["loader_state"]
                (ckpt / f"{name}.json").write_text(json.dumps(state, indent=1, sort_keys=True))
        seconds[f"phase{phase}"] = round(time.perf_counter() - t0, 2)
    results = []
    schedule = []
    for name in config.samplers:
        result, rows = _check_sampler(name, phases)
        results.append(result)
        schedule += rows
    outputs = {"report": str(root / "report.json")}
    outputs.update({f"checkpoint:{name}": str(ckpt / f"{name}.json") for name in config.samplers})
    if plot:
        from dataorder.plots import plot_schedule

        png = root / "schedule.png"
        title = (
            f"dataorder demo: ({config.first_mesh}) -> ({config.mesh}), "
            f"global batch {config.global_batch_size}"
        )
        plot_schedule(schedule, png, title=title)
        outputs["plot"] = str(png)
    seconds["total"] = round(time.perf_counter() - start, 2)
    report = DemoReport(config=config, results=results, seconds=seconds, outputs=outputs)
    (root / "report.json").write_text(json.dumps(report.to_json(), indent=1, default=str))
    return report
