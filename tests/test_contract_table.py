"""The sampler contract over every source x batching, in one table.

A sampler is a source times a batching (docs/design.md): the source says which item a global
position of an epoch holds, the batching how an epoch's positions become each rank's steps. Each
row of :data:`ROWS` names the two and one configuration (``variant``) of the public sampler that
composes them: ``make(rank, dp_size)`` builds it on any rank, ``dp`` is the layout the checks
run on and ``elastic`` the other layouts a state saved on ``dp`` must continue on.

:func:`test_contract` runs the whole contract suite (:func:`dataorder.testing.check_contract`:
partition, ``len()``, state round trips, resume at every step, repeated resumes, peeks, passes,
``batch_at``, the elastic resumes, and in a fresh interpreter where ``processes`` is set) on
every row, with the loop recipes the row runs by default; :func:`test_the_slow_loop_recipes`
runs the rest of the loop matrix in the slow suite. Which loops run when is each row's
:class:`~tests.helpers.loop_recipes.Loops` (the split and its policy are written once, in
tests/helpers/loop_recipes.py).

The sources and batchings:

========================================  ==========================================================
source                                    the public sampler (its ``src`` parts)
========================================  ==========================================================
sample order (identity, shuffled,         ``MegatronPretrainingSampler``, ``...RandomSampler``
sharded, nemo or megatron compat)         (``llm.sources.SampleOrder``)
blend of sample orders (weights or a      ``BlendedSampler`` (``llm.sources.Blend`` over
mixture log)                              ``SampleDraws``)
packed corpus                             ``PackedSampler(lengths)`` (``llm.packing.sources.
                                          PackedCorpus``)
blend of packed corpora                   ``PackedSampler(mixture=...)`` (``Blend`` over
                                          ``RowDraws``)
chunk lengths                             ``VariableLengthSampler`` (``llm.vsl``)
image or video buckets (nemo compat)      ``SequentialBucketSampler`` (``diffusion.sampler``)
index order (shuffled, sequential,        ``DistributedSampler`` (``parallel.distributed``)
torch compat)
========================================  ==========================================================

Batchings: fixed blocks (``core.blockplan.FixedBlocks``, ``core.partition.plan_epoch``), dealt
by cost (``core.dealing.DealtByCost``), buckets sequential and buckets interleaved
(``core.buckets``). The family files keep what is not the contract: properties of each family's
global stream against a reference, refusals and family-specific promises.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from dataorder.diffusion.calculators.video import VideoBucketCalculator
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.llm import VariableLengthSampler
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.factory import create_megatron_sampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.llm.mixlog import MixtureLog
from dataorder.llm.mixture import MixtureSchedule, Ramp
from dataorder.llm.packing import PackedSampler
from dataorder.llm.schedule import BatchSizeSchedule
from dataorder.parallel.distributed import DistributedSampler
from dataorder.testing import (
    RECIPES,
    WORKER_RECIPES,
    SamplerCase,
    check_contract,
    check_loop_recipes,
)
from tests.helpers.loop_recipes import (
    EVERY_LOOP,
    LIGHT_LOOPS,
    NO_LOOP,
    PLAIN,
    SLOW_EVERY_LOOP,
    SLOW_PLAIN_LOOPS,
    Loops,
    by_default,
    policy_problems,
)
from tests.llm.packing.test_sampler_contract import CODE, WEB
from tests.llm.test_vsl_contract import DOCS

Make = Callable[[int, int], Any]

# -- the batchings (dataorder.core) ---------------------------------------------------------------
FIXED = "fixed blocks"
DEALT = "dealt by cost"
SEQUENTIAL = "buckets sequential"
INTERLEAVED = "buckets interleaved"
BATCHINGS = (FIXED, DEALT, SEQUENTIAL, INTERLEAVED)


@dataclass(frozen=True)
class Row:
    """One configuration of a public sampler: the source and the batching it composes.

    Attributes:
        source: Which item a global position holds (the table in the module docstring).
        batching: How positions become each rank's steps (:data:`BATCHINGS`).
        variant: What sets this configuration apart from the row's others.
        make: ``make(rank, dp_size)``: the sampler.
        size: Samples of the dataset, or documents when ``extents`` is given.
        dp: The data-parallel size the checks run on.
        elastic: Other data-parallel sizes a state saved on ``dp`` must continue on.
        extents: Each document's tokens, for a sampler whose items cover tokens.
        batched: False for a per-index sampler.
        processes: Also check the order in a fresh interpreter.
        resume_points: Resume positions per epoch the suite tries.
        loops: The loop recipes, by default and slow.
    """

    source: str
    batching: str
    variant: str
    make: Make
    size: int
    dp: int
    elastic: tuple[int, ...] = ()
    extents: Sequence[int] | None = field(default=None, repr=False)
    batched: bool = True
    processes: bool = False
    resume_points: int = 40
    loops: Loops = NO_LOOP

    @property
    def name(self) -> str:
        return f"{self.source} x {self.batching}: {self.variant}"

    @property
    def id(self) -> str:
        """The test id: ``source/batching/variant``, each part a slug."""
        return "/".join(
            re.sub(r"[^a-z0-9]+", "-", part.lower()).strip("-")
            for part in (self.source, self.batching, self.variant)
        )

    def case(self) -> SamplerCase:
        return SamplerCase(
            name=self.name,
            make=self.make,
            dataset_size=self.size,
            dp_size=self.dp,
            elastic_dp_sizes=self.elastic,
            batched=self.batched,
            extents=self.extents,
        )


# -- sample order x fixed blocks: the Megatron samplers --------------------------------------------
IDENTITY = "sample order (identity)"
SHUFFLED = "sample order (shuffled)"
SHARDED = "sample order (sharded)"
NEMO_ORDER = "sample order (nemo compat)"
MEGATRON_ORDER = "sample order (megatron compat)"
PAD = {"drop_last": False, "pad_samples_to_global_batch_size": True}


def _single(n: int, mbs: int, **kw: Any) -> Make:
    return lambda rank, world: MegatronPretrainingSampler(n, mbs, rank, world, **kw)


def _random(n: int, mbs: int, **kw: Any) -> Make:
    return lambda rank, world: MegatronPretrainingRandomSampler(n, mbs, rank, world, **kw)


# fmt: off
def _megatron(source: str, batching: str, variant: str, make: Make, n: int, dp: int,
              elastic: tuple[int, ...], **kw: Any) -> Row:
    return Row(source, batching, variant, make, n, dp, elastic, resume_points=24, **kw)
# fmt: on


# fmt: off
SAMPLE_ORDER_ROWS = [
    _megatron(IDENTITY, FIXED, "drop",
              _single(23, 2), 23, 2, (1,)),
    _megatron(IDENTITY, FIXED, "keep",
              _single(23, 2, drop_last=False), 23, 3, (1,), loops=SLOW_PLAIN_LOOPS),
    _megatron(IDENTITY, FIXED, "gbs-drop",
              _single(50, 1, global_batch_size=12), 50, 4, (2, 6, 3)),
    _megatron(IDENTITY, FIXED, "gbs-keep",
              _single(50, 1, drop_last=False, global_batch_size=12), 50, 4, (2,)),
    _megatron(IDENTITY, FIXED, "gbs-pad",
              _single(60, 1, global_batch_size=8, **PAD), 60, 2, (4, 8, 1)),
    _megatron(SHUFFLED, FIXED, "drop",
              _random(37, 2, seed=5), 37, 2, (1,), processes=True),
    # with the EVERY_LOOP case below, the one that runs the costly plain loops by default
    _megatron(SHUFFLED, FIXED, "keep",
              _random(37, 3, seed=6, drop_last=False), 37, 2, (1,), loops=Loops(PLAIN)),
    _megatron(SHUFFLED, FIXED, "gbs-drop",
              _random(100, 1, seed=7, global_batch_size=24), 100, 8, (4, 6)),
    _megatron(SHUFFLED, FIXED, "gbs-pad",
              _random(45, 2, seed=8, global_batch_size=12, **PAD), 45, 3, (6, 2),
              loops=SLOW_EVERY_LOOP),
    _megatron(SHUFFLED, FIXED, "one-rank",
              _random(9, 4, seed=9, drop_last=False), 9, 1, ()),
    _megatron(SHARDED, FIXED, "drop",
              _random(41, 2, seed=1, data_sharding=True), 41, 3, (), loops=SLOW_PLAIN_LOOPS),
    _megatron(SHARDED, FIXED, "gbs-pad",
              _random(30, 1, seed=2, data_sharding=True, global_batch_size=8, **PAD), 30, 4, ()),
    _megatron(SHARDED, FIXED, "keep-tiny",
              _random(3, 1, seed=3, data_sharding=True, drop_last=False), 3, 4, ()),
    _megatron(NEMO_ORDER, FIXED, "drop",
              _random(22, 2, seed=4, compat="nemo"), 22, 2, (), processes=True,
              loops=SLOW_PLAIN_LOOPS),
    _megatron(NEMO_ORDER, FIXED, "gbs",
              _random(33, 1, seed=0, compat="nemo", global_batch_size=8), 33, 4, ()),
    _megatron(NEMO_ORDER, FIXED, "keep-m1",
              _random(7, 1, seed=11, compat="nemo", drop_last=False), 7, 1, ()),
    # Megatron-LM's own orders (llm.compat_megatron): a state pins its layout, not elastic
    Row(MEGATRON_ORDER, FIXED, "sharded",
        _random(26, 2, compat="megatron", data_sharding=True), 26, 3, resume_points=12,
        loops=by_default("stateful-0", "peek")),
    Row(MEGATRON_ORDER, FIXED, "strided",
        _random(24, 2, compat="megatron", data_sharding=False), 24, 3, resume_points=12,
        loops=SLOW_PLAIN_LOOPS),
]
# fmt: on


# -- blend of sample orders x fixed blocks: BlendedSampler ----------------------------------------
BLEND = "blend of sample orders"
BLEND_LOG = "blend of sample orders (mixture log)"


def _blend(sizes: list[int], weights: Any, mbs: int, gbs: Any, **kw: Any) -> Make:
    return lambda rank, world: BlendedSampler(sizes, weights, mbs, rank, world, gbs, **kw)


RAMPED = MixtureSchedule(
    [
        (0, [0.6, 0.4, 1e-6]),
        (4, Ramp([0.6, 0.4, 0.0], [0.1, 0.2, 0.7])),
        (12, [0.1, 0.2, 0.7]),
    ]
)
TINY = [0.999, 1e-6, 1e-6, 0.001 - 2e-6]
STEPPED = MixtureSchedule(
    [(0, [1, 1, 1]), (20, [5, 0, 1]), (44, Ramp([5, 0, 1], [0, 1, 1])), (68, [0, 1, 1])]
)
RAMPUP = BatchSizeSchedule.from_step_schedule("0:2 6:4 14:8")
LOG = MixtureLog([0.6, 0.4, 1e-6])
for _step, _w in [(2, [0.1, 0.2, 0.7]), (3, [1, 0, 0]), (5, [0.3, 0.3, 0.4]), (9, [0, 1, 1])]:
    LOG.set_weights(_step, _w)


# fmt: off
def _mixed(source: str, batching: str, variant: str, make: Make, n: int, dp: int,
           elastic: tuple[int, ...], **kw: Any) -> Row:
    return Row(source, batching, variant, make, n, dp, elastic, **{"resume_points": 16} | kw)
# fmt: on


def _factory(rank: int, world: int) -> Any:
    return create_megatron_sampler(
        24, 2, 8, "cyclic", rank=rank, world_size=world, seed=6, mixture=([4, 7], [1, 2])
    )


# fmt: off
BLEND_ROWS = [
    _mixed(BLEND, FIXED, "two-sources",
           _blend([6, 4], [3, 1], 2, 4, seed=0, total_samples=8), 10, 2, (1,), processes=True),
    # two-step epochs: the one case of the table that runs every loop, workers included, by default
    _mixed(BLEND, FIXED, "ramp-short-epochs",
           _blend([3, 2, 1], RAMPED, 1, 2, seed=3, total_samples=4), 6, 2, (1,),
           loops=EVERY_LOOP),
    _mixed(BLEND, FIXED, "tiny-weights",
           _blend([7, 1, 2, 30], TINY, 2, 12, seed=5, total_samples=48), 40, 3, (1, 6)),
    _mixed(BLEND, FIXED, "default-total",
           _blend([13, 5, 9], [0.2, 0.5, 0.3], 3, 6, seed=7), 27, 2, (1,)),
    _mixed(BLEND, FIXED, "stepped-uneven-epochs",
           _blend([4, 9, 2], STEPPED, 2, 8, seed=9, total_samples=36), 15, 2, (4, 1)),
    _mixed(BLEND, FIXED, "batch-rampup",
           _blend([5, 8], [0.3, 0.7], 1, RAMPUP, seed=2, total_samples=32), 13, 2, (1,),
           loops=Loops(slow=("dataloader", "stateful-0", "read-ahead", "no-set-epoch", "peek"))),
    _mixed(BLEND, FIXED, "factory",
           _factory, 11, 2, (1,)),
    _mixed(BLEND, FIXED, "one-rank",
           _blend([2] * 5, [1, 2, 3, 4, 5], 4, 4, seed=11, total_samples=12), 10, 1, ()),
    _mixed(BLEND_LOG, FIXED, "weights-set-at-steps",
           _blend([5, 3, 4], LOG, 2, 4, seed=1, total_samples=12), 12, 2, (1,), resume_points=8,
           loops=by_default("dataloader", "stateful-0")),
]
# fmt: on


# -- packed corpus / blend of packed corpora x dealt by cost: PackedSampler ------------------------
PACKED = "packed corpus"
PACKED_BLEND = "blend of packed corpora"


def _packed(lengths: list[int], mbs: int, **kw: Any) -> Make:
    kw = {"seed": 3, "chunk": 4, "window": 16} | kw
    return lambda rank, world: PackedSampler(lengths, 64, mbs, rank, world, **kw)


def _packed_blend(weights: Any, mbs: int, gbs: Any, **kw: Any) -> Make:
    kw = {"chunk": 4, "window": 16} | kw
    return lambda rank, world: PackedSampler(
        None, 64, mbs, rank, world, gbs, seed=5, mixture=([WEB, CODE], weights), **kw
    )


# fmt: off
def _tokens(source: str, batching: str, variant: str, make: Make, extents: list[int], dp: int,
            elastic: tuple[int, ...] = (1,), **kw: Any) -> Row:
    """A row whose items cover tokens of documents (``extents``)."""
    return Row(source, batching, variant, make, len(extents), dp, elastic, extents=extents, **kw)
# fmt: on


# fmt: off
PACKED_ROWS = [
    _tokens(PACKED, DEALT, "overflow-drop",
            _packed(WEB, 2), WEB, 2, loops=LIGHT_LOOPS),
    _tokens(PACKED, DEALT, "overflow-keep",
            _packed(WEB, 2, drop_last=False), WEB, 2, loops=SLOW_PLAIN_LOOPS),
    _tokens(PACKED, DEALT, "overflow-gbs-pad",
            _packed(WEB, 1, global_batch_size=6, **PAD), WEB, 3, loops=SLOW_PLAIN_LOOPS),
    _tokens(PACKED, DEALT, "never-truncate",
            _packed(CODE, 1, split="never"), CODE, 2, loops=SLOW_PLAIN_LOOPS),
    _tokens(PACKED, DEALT, "never-drop",
            _packed(CODE, 1, split="never", long_documents="drop"), CODE, 2,
            loops=SLOW_PLAIN_LOOPS),
    _tokens(PACKED_BLEND, DEALT, "weights",
            _packed_blend([2, 1], 1, 4, total_rows=16), WEB + CODE, 2, loops=SLOW_PLAIN_LOOPS),
    _tokens(PACKED_BLEND, DEALT, "schedule",
            _packed_blend(MixtureSchedule([(0, [1, 1]), (8, [1, 3])]), 1, 4, total_rows=16),
            WEB + CODE, 2, loops=SLOW_PLAIN_LOOPS),
]
# fmt: on


# -- chunk lengths x buckets: VariableLengthSampler (built from its constructor alone) -------------
CHUNKS = "chunk lengths"


def _vsl(lengths: list[int], **kw: Any) -> Make:
    kw = {"seed": 3, "min_seq_len": 32} | kw
    return lambda rank, world: VariableLengthSampler(lengths, 256, 512, rank, world, **kw)


# fmt: off
CHUNK_ROWS = [
    # interleaved in runs of 4 global steps of 4 ranks: resumes on 1, 2 and 4 ranks
    _tokens(CHUNKS, INTERLEAVED, "natural",
            _vsl(DOCS, interleave_unit=4), DOCS, 2, (1, 4), loops=LIGHT_LOOPS),
    _tokens(CHUNKS, SEQUENTIAL, "grow",
            _vsl(DOCS, curriculum="grow"), DOCS, 2, (1, 4), loops=SLOW_PLAIN_LOOPS),
]
# fmt: on


# -- image / video buckets x buckets: SequentialBucketSampler -------------------------------------
IMAGES = "image buckets"
IMAGES_NEMO = "image buckets (nemo compat)"
VIDEOS = "video buckets"


def _images(sizes: list[int], seed: int) -> BaseMultiresolutionDataset:
    ids = np.repeat(np.arange(len(sizes)), sizes)
    np.random.default_rng(seed).shuffle(ids)
    res = [(64 * (j % 4 + 1), 64 * (j // 4 + 1)) for j in range(len(sizes))]
    return BaseMultiresolutionDataset.from_bucket_ids(ids, res)


SKEWED = _images([1, 2, 5, 9, 17, 60, 3], seed=1)  # 97 samples, one big bucket, tiny ones
EVEN = _images([24, 24, 24], seed=2)
MANY = _images([4, 7, 1, 12, 6, 3, 9, 2, 5, 11], seed=3)  # 60 samples in 10 small buckets
SMALL = _images([5, 9, 3, 14], seed=4)  # 31 samples: short epochs for the loop recipes


def _clips(n: int, seed: int, shapes: list[tuple[int, int]]) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(seed)
    w, h = np.array(shapes)[rng.integers(0, len(shapes), n)].T
    return w, h, rng.integers(1, 120, n)


def video_dataset(n: int, seed: int) -> BaseMultiresolutionDataset:
    """Clips of camera shapes and lengths in 18 video buckets (frames 1, 17, ..., 81)."""
    calc = VideoBucketCalculator.from_preset(
        "wan2.1-480p", aspect_ratios=["1:1", "16:9"], frame_step=16
    )
    w, h, frames = _clips(n, seed, [(1280, 720), (720, 1280), (960, 960), (1920, 1080), (640, 360)])
    return BaseMultiresolutionDataset.from_video_sizes(w, h, frames, calc)


def fitted_video_dataset(n: int, seed: int) -> BaseMultiresolutionDataset:
    """Camera clips in a bucket set fitted to them for 2 ranks x 1 clip (fit_to_data)."""
    w, h, frames = _clips(
        n, seed, [(1280, 720), (720, 1280), (960, 960), (1920, 1080), (1920, 800)]
    )
    calc = VideoBucketCalculator.fit_to_data(
        w, h, frames, global_batch_size=2, max_waste=0.05, preset="wan2.1-480p"
    )
    return BaseMultiresolutionDataset.from_video_sizes(w, h, frames, calc)


VIDEO = video_dataset(150, seed=5)
FITTED_VIDEO = fitted_video_dataset(16, seed=6)  # short epochs: the loop recipes run on it


def buckets(ds: BaseMultiresolutionDataset, **kw: Any) -> Make:
    def build(rank: int, world: int) -> SequentialBucketSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # buckets that drop_last removes entirely
            return SequentialBucketSampler(ds, num_replicas=world, rank=rank, **kw)

    return build


# fmt: off
def _buckets(source: str, batching: str, variant: str, ds: BaseMultiresolutionDataset,
             kw: dict[str, Any], dp: int, elastic: tuple[int, ...], **extra: Any) -> Row:
    if batching == INTERLEAVED:  # kw gives its interleave_unit
        kw = {"bucket_order": "interleaved"} | kw
    return Row(source, batching, variant, buckets(ds, **kw), len(ds), dp, elastic,
               resume_points=30, **extra)
# fmt: on


KEEP = {"drop_last": False}
DYNAMIC = {"dynamic_batch_size": True}
SORTED = {"shuffle_buckets": False, "shuffle_within_bucket": False}
NEMO = {"compat": "nemo"}


# fmt: off
BUCKET_ROWS = [
    _buckets(IMAGES, SEQUENTIAL, "small-keep-shuffled",
             SMALL, {"base_batch_size": 2, **KEEP}, 2, (1,), loops=LIGHT_LOOPS),
    _buckets(IMAGES, SEQUENTIAL, "skewed-keep-shuffled",
             SKEWED, {"base_batch_size": 2, **KEEP}, 4, (2, 1), processes=True),
    _buckets(IMAGES, SEQUENTIAL, "skewed-drop-shuffled",
             SKEWED, {"base_batch_size": 2}, 4, (2,)),
    _buckets(IMAGES, SEQUENTIAL, "skewed-keep-sorted",
             SKEWED, {"base_batch_size": 3, **KEEP, **SORTED}, 3, (1,)),
    _buckets(IMAGES, SEQUENTIAL, "even-drop-one-rank",
             EVEN, {"base_batch_size": 5, "seed": 9}, 1, ()),
    _buckets(IMAGES, SEQUENTIAL, "many-keep-dynamic",
             MANY, {"base_batch_size": 2, **KEEP, **DYNAMIC, "base_resolution": (128, 64)}, 8,
             (4, 2)),
    _buckets(IMAGES, SEQUENTIAL, "many-drop-buckets-only",
             MANY, {"base_batch_size": 1, "shuffle_within_bucket": False, "seed": 5}, 4, (2,)),
    _buckets(IMAGES, SEQUENTIAL, "skewed-keep-within-only",
             SKEWED, {"base_batch_size": 4, **KEEP, "shuffle_buckets": False}, 2, (1,)),
    _buckets(IMAGES, INTERLEAVED, "small-keep",
             SMALL, {"base_batch_size": 2, **KEEP, "interleave_unit": 2}, 2, (1,),
             loops=SLOW_PLAIN_LOOPS),
    _buckets(IMAGES, INTERLEAVED, "skewed-drop-unit4",
             SKEWED, {"base_batch_size": 2, "interleave_unit": 4}, 2, (4, 1), processes=True),
    _buckets(IMAGES, INTERLEAVED, "many-dynamic-fixed",
             MANY, {"base_batch_size": 2, **KEEP, **DYNAMIC, "base_resolution": (128, 64),
                    "interleave_unit": 8, "shuffle_buckets": False}, 4, (8, 2, 1)),
    # compat="nemo" pins num_replicas (its padding and drop rule depend on it): not elastic
    _buckets(IMAGES_NEMO, SEQUENTIAL, "small-keep",
             SMALL, {"base_batch_size": 2, **KEEP, **NEMO, "seed": 3}, 2, (),
             loops=SLOW_PLAIN_LOOPS),
    _buckets(IMAGES_NEMO, SEQUENTIAL, "skewed-keep",
             SKEWED, {"base_batch_size": 2, **KEEP, **NEMO}, 4, ()),
    _buckets(IMAGES_NEMO, SEQUENTIAL, "many-drop",
             MANY, {"base_batch_size": 2, **NEMO, "seed": 1}, 2, (), processes=True),
    _buckets(IMAGES_NEMO, SEQUENTIAL, "many-keep-dynamic-sorted",
             MANY, {"base_batch_size": 2, **KEEP, **NEMO, **DYNAMIC,
                    "base_resolution": (128, 128), "shuffle_buckets": False}, 3, ()),
    _buckets(VIDEOS, SEQUENTIAL, "drop",
             VIDEO, {"base_batch_size": 1, "seed": 3}, 2, (1,)),
    _buckets(VIDEOS, INTERLEAVED, "keep-dynamic",
             VIDEO, {"base_batch_size": 2, **KEEP, **DYNAMIC, "interleave_unit": 4}, 4, (2, 1)),
    _buckets(VIDEOS, SEQUENTIAL, "fitted-drop",
             FITTED_VIDEO, {"base_batch_size": 1, "seed": 4}, 2, (1,), loops=SLOW_PLAIN_LOOPS),
    _buckets(VIDEOS, INTERLEAVED, "fitted-drop",
             FITTED_VIDEO, {"base_batch_size": 1, "seed": 4, "interleave_unit": 2}, 2, (1,),
             loops=SLOW_PLAIN_LOOPS),
]
# fmt: on


# -- index order x fixed blocks: DistributedSampler ------------------------------------------------
INDEX = "index order (shuffled)"
INDEX_SEQUENTIAL = "index order (sequential)"
INDEX_TORCH = "index order (torch compat)"


def _indices(n: int, **kw: Any) -> Make:
    return lambda rank, world: DistributedSampler(range(n), world, rank, **kw)


# fmt: off
def _index(source: str, batching: str, variant: str, n: int, kw: dict[str, Any], dp: int,
           elastic: tuple[int, ...], **extra: Any) -> Row:
    return Row(source, batching, variant, _indices(n, **kw), n, dp, elastic, batched=False,
               resume_points=30, **extra)
# fmt: on


# An elastic size must divide the count the contract saves at: (num_samples // 2) x dp.
# fmt: off
INDEX_ROWS = [
    _index(INDEX, FIXED, "pad",
           23, {"seed": 3}, 4, (1, 2, 3, 6, 12), loops=LIGHT_LOOPS),
    _index(INDEX, FIXED, "drop",
           23, {"seed": 4, "drop_last": True}, 4, (1, 2, 8)),
    _index(INDEX, FIXED, "divisible",
           24, {"seed": 5}, 4, (2, 3, 6)),
    _index(INDEX, FIXED, "divisible-drop",
           24, {"seed": 6, "drop_last": True}, 6, (3, 4, 12)),
    _index(INDEX, FIXED, "smaller-than-world",
           3, {"seed": 7}, 8, (1, 5)),
    _index(INDEX, FIXED, "smaller-than-world-drop",
           3, {"seed": 8, "drop_last": True}, 8, (2,)),
    _index(INDEX, FIXED, "one-rank",
           9, {"seed": 9}, 1, (2, 4)),
    _index(INDEX, FIXED, "empty",
           0, {"seed": 1}, 2, (3,)),
    _index(INDEX_SEQUENTIAL, FIXED, "pad",
           23, {"shuffle": False}, 3, (2, 4, 6)),
    _index(INDEX_SEQUENTIAL, FIXED, "drop",
           23, {"shuffle": False, "drop_last": True}, 3, (1, 9), loops=SLOW_PLAIN_LOOPS),
    _index(INDEX_TORCH, FIXED, "shuffle-pad",
           23, {"seed": 3, "compat": "torch"}, 4, (1, 2, 3, 6, 12), processes=True,
           loops=SLOW_PLAIN_LOOPS),
    _index(INDEX_TORCH, FIXED, "drop",
           10, {"seed": 2, "drop_last": True, "compat": "torch"}, 3, (1, 3)),
    _index(INDEX_TORCH, FIXED, "sequential",
           11, {"shuffle": False, "compat": "torch"}, 2, (3, 6)),
    _index(INDEX_TORCH, FIXED, "smaller-than-world",
           5, {"seed": 1, "compat": "torch"}, 7, (1,)),
]
# fmt: on


ROWS: list[Row] = [
    *SAMPLE_ORDER_ROWS,
    *BLEND_ROWS,
    *PACKED_ROWS,
    *CHUNK_ROWS,
    *BUCKET_ROWS,
    *INDEX_ROWS,
]
#: A row by its test id.
ROW: dict[str, Row] = {row.id: row for row in ROWS}


def row(source: str, batching: str, variant: str) -> Row:
    """The row of ``source x batching`` named ``variant``."""
    return next(r for r in ROWS if (r.source, r.batching, r.variant) == (source, batching, variant))


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_contract(row: Row) -> None:
    recipes = row.loops.default
    ran = check_contract(
        row.case(), resume_points=row.resume_points, processes=row.processes, recipes=recipes
    )
    assert ran == list(recipes), ran  # the test extra installs every framework


SLOW_ROWS = [r for r in ROWS if r.loops.slow]


@pytest.mark.slow
@pytest.mark.parametrize("row", SLOW_ROWS, ids=[r.id for r in SLOW_ROWS])
def test_the_slow_loop_recipes(row: Row) -> None:
    """The loop recipes test_contract leaves to the slow suite: the worker recipes (seconds
    each) and the other cases of the matrix."""
    ran = check_loop_recipes(row.case(), row.loops.slow)
    assert ran == list(row.loops.slow), ran


def test_every_row_names_a_known_batching_and_a_unique_id() -> None:
    assert {r.batching for r in ROWS} == set(BATCHINGS)
    assert len(ROW) == len(ROWS), "two rows share a source, a batching and a variant"


def test_the_table_holds_every_public_sampler() -> None:
    built = {type(r.make(0, r.dp)).__name__ for r in ROWS}
    assert built == {
        "MegatronPretrainingSampler",
        "MegatronPretrainingRandomSampler",
        "BlendedSampler",
        "PackedSampler",
        "VariableLengthSampler",
        "SequentialBucketSampler",
        "DistributedSampler",
    }


def test_nemo_buckets_are_not_elastic() -> None:
    """Why the nemo bucket rows list no elastic size: compat="nemo" records num_replicas (its
    padding and drop rule depend on it), and the elastic check is refused, naming it."""
    case = SamplerCase(
        name="nemo",
        make=buckets(EVEN, base_batch_size=2, compat="nemo"),
        dataset_size=len(EVEN),
        dp_size=4,
        elastic_dp_sizes=(2,),
    )
    with pytest.raises(ValueError, match="num_replicas is 4 in the state but 2 in this sampler"):
        check_contract(case, resume_points=4)


def test_the_loop_recipes_follow_the_split() -> None:
    assert policy_problems([(f"{r.source} x {r.batching}", r.loops) for r in ROWS]) == []
    assert set(WORKER_RECIPES) <= set(RECIPES)


def test_each_rule_of_the_split_can_fail() -> None:
    every, plain = Loops(RECIPES), Loops(PLAIN)
    assert policy_problems([("a x b", every), ("c x d", plain)]) == []
    assert policy_problems([("a x b", every), ("a x b", plain)]) == [
        "a x b: more than one case runs loop recipes by default"
    ]
    assert policy_problems([("a x b", every), ("c x d", by_default("peek", then=()))]) == [
        f"c x d: no case runs the loops {[r for r in PLAIN if r != 'peek']}"
    ]
    assert policy_problems([("a x b", plain)]) == [
        "0 cases run the worker recipes by default, not one",
        f"no case runs the loops {list(WORKER_RECIPES)} by default",
    ]
    with pytest.raises(ValueError, match="got unknown"):
        Loops(("dataloader", "no-such-loop"))
    with pytest.raises(ValueError, match="not both"):
        Loops(("peek",), ("peek",))
