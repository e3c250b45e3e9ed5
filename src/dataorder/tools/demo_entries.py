"""What a demo entry is made of: its data, its place in the job, its checks and what it reads.

:mod:`dataorder.tools.demo_samplers` registers the demo's entries (``DEMO_SAMPLERS``) from these
parts; the job (:mod:`dataorder.tools.demo_job`) and the checks read them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from dataorder.core.batching import BATCHES, BatchRule
from dataorder.llm.packing.dataset import PackedDataset
from dataorder.llm.packing.rule import PackedRows
from dataorder.tools.demo_data import (
    PACKED_SEQ_LEN,
    Model,
)

__all__ = [
    "PACKED_READING",
    "SAMPLE_READING",
    "DemoData",
    "DemoSampler",
    "DemoShape",
    "Inspect",
    "Placement",
    "Reading",
    "declared_padding",
    "packed_item",
    "sample_item",
    "steps_text",
]


class DemoShape(Protocol):
    """What an entry reads of the demo's configuration (:class:`~dataorder.tools.demo_config.
    DemoConfig` is one)."""

    @property
    def micro_batch_size(self) -> int:
        """Samples per rank and micro-batch."""
        ...

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step, the same in both phases."""
        ...

    @property
    def seed(self) -> int:
        """The seed of every sampler."""
        ...

    @property
    def dp_sizes(self) -> tuple[int, int]:
        """The data-parallel sizes before and after the restart."""
        ...


class DemoData(Protocol):
    """An entry's data: at least the map-style dataset its loader reads."""

    @property
    def dataset(self) -> Any:
        """What the loader reads: each item a dict with the sample's ``index``."""
        ...


D = TypeVar("D", bound=DemoData)


@dataclass(frozen=True)
class Placement:
    """Where one process's sampler thinks it is: a data-parallel rank and size.

    Attributes:
        rank: The data-parallel rank.
        size: The data-parallel size.
        mesh: The job's ``DeviceMesh`` (its ``"dp"`` dim is data-parallel), which a sampler then
            reads rank and size from; None to pass them explicitly (the injected bug passes the
            global rank and world size).
    """

    rank: int
    size: int
    mesh: Any = None

    def keywords(self, sampler_class: Any) -> dict[str, Any]:
        """The placement as ``sampler_class``'s constructor keywords: the mesh, or the rank and
        size under the names its schema declares (:class:`~dataorder.core.assembly.Layout`)."""
        if self.mesh is not None:
            return {"mesh": self.mesh, "dp_dims": ("dp",)}
        layout = sampler_class.schema.layout
        return {layout.rank: self.rank, layout.size: self.size}

    def global_batch_size(self, config: DemoShape) -> int:
        """The configuration's global batch, or one micro-batch per rank when this placement has
        more ranks than it holds micro-batches (only the injected bug's global world does)."""
        per_step = config.micro_batch_size * self.size
        return config.global_batch_size if config.global_batch_size % per_step == 0 else per_step


@dataclass(frozen=True)
class Inspect:
    """How ``dataorder inspect`` explains a sampler's checkpoint ``<name>.json``.

    Attributes:
        args: ``args(config, file)``: the options the command needs beyond the state, where
            ``file(suffix)`` is the quoted path of ``<name><suffix>`` beside the checkpoint;
            None if it needs none.
        write: ``write(config, stem)``: files the parent writes beside the checkpoint for it,
            each ``<stem><suffix>``; returns their paths.
    """

    args: Callable[[DemoShape, Callable[[str], str]], str] | None = None
    write: Callable[[DemoShape, Path], list[Path]] | None = None


@dataclass(frozen=True)
class Reading:
    """How an entry's loader makes batches, and how a process reads back what it trained on.

    A process records, for every micro-batch its model trained on, the item it came from, as the
    sampler yields it; the checks read those items through ``batching`` (NOTE [ Coverage ] in
    :mod:`dataorder.core.batching`), never through int assumptions.

    Attributes:
        batching: The rule of a recorded item: the sampler's own rule for a batch sampler
            (checked when a process builds it), :data:`~dataorder.core.batching.BATCHES` for a
            per-index sampler, whose items the loader batches.
        item: ``item(batch)``: the recorded item of a collated batch (JSON-able).
        universe: ``universe(data)``: the units of the dataset in the rule's unit (samples,
            tokens), which an epoch reads once apart from what the sampler declares.
        collate: The loader's ``collate_fn``; None for torch's default.
    """

    batching: BatchRule
    item: Callable[[dict[str, Any]], list[Any]]
    universe: Callable[[Any], int]
    collate: Callable[[Any], dict[str, Any]] | None = None


def sample_item(batch: dict[str, Any]) -> list[int | None]:
    # the index carried by each sample; a padding slot carries -1 (TokenDataset)
    return [None if i < 0 else i for i in batch["index"].tolist()]


def packed_item(batch: dict[str, Any]) -> list[list[tuple[int, int, int]]]:
    # each row's (document, start, stop) spans, the -1 rows after them left out
    return [[(d, a, b) for d, a, b in row if d >= 0] for row in batch["spans"].tolist()]


#: Batches of sample indices (every sampler but the packed one).
SAMPLE_READING = Reading(BATCHES, sample_item, lambda data: len(data.dataset))
#: Micro-batches of packed rows, read in tokens.
PACKED_READING = Reading(
    PackedRows(PACKED_SEQ_LEN),
    packed_item,
    lambda data: int(data.documents.lengths.sum()),
    collate=PackedDataset.collate,
)


@dataclass(frozen=True)
class DemoSampler(Generic[D]):
    """One sampler of the demo (NOTE [ Adding a sampler to the demo ]).

    Attributes:
        name: Its name in the report and in ``dataorder demo --samplers``.
        data: ``data(config)``: its dataset, and whatever its builder and notes need of it.
        build: ``build(data, where, config)``: the sampler of one process.
        model: ``model(seed)``: what it trains, and the loss (:mod:`dataorder.tools.demo_data`).
        checks: Checks beyond those every sampler gets, by name
            (:data:`dataorder.tools.demo_checks.EXTRA_CHECKS`).
        padding: ``padding(sampler, epoch, index)``: the slots of a batch that repeat a sample,
            as the sampler declares them batch by batch, for a sampler that pads in the middle
            of an epoch (a bucket sampler pads each bucket's last batch); None when its padding
            counter says it all at the epoch's end.
        notes: ``notes(data, sampler, config)``: what the phase shows beyond the checks, one
            line each (rank 0's go in the report).
        files: ``files(data, stem)``: files beside the checkpoint that ``dataorder inspect``
            needs, each ``<stem><suffix>`` (rank 0 writes them when it checkpoints).
        inspect: How ``dataorder inspect`` explains its checkpoint; None when it cannot be
            rebuilt from files (the demo prints no command for it).
        imports: Modules its builder imports, which the process launcher imports once for all
            the processes.
        reading: How its loader batches and how what it trained on is read back.
    """

    name: str
    data: Callable[[DemoShape], D]
    build: Callable[[D, Placement, DemoShape], Any]
    model: Callable[[int], Model]
    checks: tuple[str, ...] = ()
    padding: Callable[[Any, int, int], int] | None = None
    notes: Callable[[D, Any, DemoShape], list[str]] | None = None
    files: Callable[[D, Path], None] | None = None
    inspect: Inspect | None = Inspect()
    imports: tuple[str, ...] = ()
    reading: Reading = SAMPLE_READING


def declared_padding(sampler: Any, epoch: int, index: int) -> int:
    # how many slots of this rank's batch repeat a sample, as a bucket sampler declares it
    return int(sampler.get_batch_info(index, epoch=epoch)["padding"])


def steps_text(k: int) -> str:
    return f"{k} step" if k == 1 else f"{k} steps"
