"""Hostile input against every public entry point (issue 12), as one table.

Every constructor and function that ``dataorder`` exports is called with each value of
``VALUES`` in place of each of its scalar arguments (and of one element of its array arguments).
Each call must, within ``HANG_SECONDS`` (a hang detector, not a speed test), either

* refuse the value at once, with the library's template (``_validate``): ``TypeError`` for a
  value of the wrong type (``bool`` where an int is meant, a float, ``None`` where it is not
  allowed), ``ValueError`` for an int out of range, and a message that names the argument; or
* accept it where it is legal, and then keep working: the entry's probe (``len()``, the first
  and last batch, a JSON state of at most MAX_STATE_BYTES that loads back, ...) must pass. Accepted
  now and failing later is the defect this file exists to find.

A domain says what is legal. Where a bound is documented (a seed below 2**64, at most 2**62
samples) a value past it must be refused. Where none is (``Int(lo)`` without ``hi``), a huge int
may be refused with a ``ValueError`` naming the argument, or accepted; if accepted, it must work.

``test_every_export_is_classified`` keeps the table complete: a new public name is either swept
here or listed in ``NOT_SWEPT`` with the reason. Beyond scalars, ``test_hostile_files`` feeds
corrupt manifests and NeMo caches (the error names the file, and the line for JSON),
``test_hostile_states`` edited checkpoints, and ``test_states_fit_512_bytes_at_the_extremes``
every sampler at the largest values it accepts.
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import math
import re
import signal
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
import pytest

import dataorder
from dataorder import (
    Apportionment,
    BaseMultiresolutionDataset,
    BatchSizeSchedule,
    BlendedSampler,
    DistributedSampler,
    Manifest,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    MultiTierBucketCalculator,
    Permutation,
    SequentialBucketSampler,
    Topology,
    VideoBucketCalculator,
    bucket_stats,
    build_manifest,
    check_items,
    create_megatron_sampler,
    data_parallel_dims,
    data_parallel_topology,
    derive_key,
    format_bucket_table,
    plan_bucket_epoch,
    plan_epoch,
    plan_segments,
    plot_bucket_stats,
    quantize_weights,
    read_manifest,
    resize_and_crop,
    resolve_topology,
    scan_images,
    verify_data_parallel,
    write_manifest,
)
from dataorder.core import partition, topology
from dataorder.core.apportion import MAX_TOTAL
from dataorder.core.dealing import MAX_COST
from dataorder.core.keys import MAX_SEED
from dataorder.core.permutation import MAX_DOMAIN
from dataorder.core.state import MAX_STATE_BYTES  # NOTE [ State size ]
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE
from dataorder.diffusion.calculators import image as buckets
from dataorder.diffusion.sampler.plan import MAX_INTERLEAVE_UNIT
from dataorder.live import LiveBatches
from dataorder.llm import MixtureLog, packing, split_documents
from dataorder.llm.mixlog import MAX_STEP as MIX_MAX_STEP
from dataorder.llm.packing import (
    DocumentLengths,
    DocumentRange,
    MegatronStyle,
    PackedDataset,
    PackedSampler,
    PackingPlan,
    deal,
    deal_bounds,
    pack_window,
)
from dataorder.llm.packing.dataset import SequenceTokens
from dataorder.llm.packing.plan import MAX_CHUNK, MAX_PASS, MAX_SEQ_LEN, MAX_WINDOW
from dataorder.llm.schedule import MAX_SAMPLES
from hang import Hang, hang_guard

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="the hang guard needs signal.setitimer (POSIX)"
)

#: Seconds a call or a probe may take before it counts as a hang.
HANG_SECONDS = 5.0

# Caps that other modules declare; a module without its cap leaves the bound undocumented here
# (then a huge value may be refused or accepted, but must work if accepted).
MAX_DP_SIZE: int | None = getattr(topology, "MAX_DP_SIZE", None)
MAX_BATCH_SIZE: int | None = getattr(partition, "MAX_BATCH_SIZE", None)
MAX_POSITIONS: int = getattr(partition, "MAX_POSITIONS", MAX_DOMAIN)
MAX_PIXELS: int | None = getattr(buckets, "MAX_PIXELS", None)


class _Numpy:
    """Marker: the argument's legal baseline as a numpy int (which must be accepted)."""

    def __repr__(self) -> str:
        return "np.int64(<legal>)"


NUMPY = _Numpy()

VALUES: dict[str, object] = {
    "0": 0,
    "-1": -1,
    "True": True,
    "1.5": 1.5,
    "np.int64": NUMPY,
    "None": None,
    "2**62": 2**62,
    "10**30": 10**30,
    "nan": float("nan"),
}

Expect = Literal["accept", "reject", "either"]


# -- domains: what is legal ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Int:
    """An int in ``[lo, hi]``; ``hi=None``: no documented bound; ``math.inf``: any size.

    ``none`` says what ``None`` is: refused (with ``none_error``), legal, or either (detected
    from the environment, like a rank). ``element``: one element of an array argument, where
    numpy turns ``[True, 2]`` into ints and an int past int64 into an object array (a
    ``TypeError`` then is as good as a ``ValueError``).
    """

    lo: int
    hi: float | None = None
    legal: int | None = None  # the numpy variant's value (default lo)
    none: Expect = "reject"
    none_error: type[Exception] | None = TypeError
    element: bool = False

    def expect(self, value: object) -> Expect:
        if value is None:
            return self.none
        if isinstance(value, _Numpy):
            return "accept"
        if value is True and self.element:
            return "either"
        if isinstance(value, np.integer):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            return "reject"
        if value < self.lo:
            return "reject"
        if self.hi is None:
            return "either" if value > 2**31 else "accept"
        return "accept" if value <= self.hi else "reject"

    def error(self, value: object) -> type[Exception] | None:
        """The exception a refusal must raise (None: either)."""
        if value is None:
            return self.none_error if self.none == "reject" else None
        if isinstance(value, np.integer):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            return TypeError
        if self.element and value >= 2**63:
            return None
        return ValueError

    def numpy(self) -> object:
        return np.int64(self.lo if self.legal is None else self.legal)


@dataclasses.dataclass(frozen=True)
class Bool:
    """A bool (``True`` legal); ``None`` legal only if ``optional``."""

    optional: bool = False

    def expect(self, value: object) -> Expect:
        if value is None:
            return "accept" if self.optional else "reject"
        return "accept" if value is True else "reject"

    def error(self, value: object) -> type[Exception] | None:
        return TypeError

    def numpy(self) -> object:
        return np.int64(1)  # an int is not a bool


@dataclasses.dataclass(frozen=True)
class Real:
    """A finite non-negative real number (int or float, not bool)."""

    def expect(self, value: object) -> Expect:
        if isinstance(value, _Numpy):
            return "accept"
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return "reject"
        return "accept" if math.isfinite(value) and value >= 0 else "reject"

    def error(self, value: object) -> type[Exception] | None:
        return None

    def numpy(self) -> object:
        return np.int64(1)


@dataclasses.dataclass(frozen=True)
class Never:
    """No value of ``VALUES`` is legal (an object, a str choice, a path); ``None`` may be."""

    none: Expect = "reject"

    def expect(self, value: object) -> Expect:
        return self.none if value is None else "reject"

    def error(self, value: object) -> type[Exception] | None:
        return None

    def numpy(self) -> object:
        return np.int64(1)


Domain = Int | Bool | Real | Never


@dataclasses.dataclass(frozen=True)
class Case:
    """One argument of one entry point.

    ``call(ctx, value)`` calls the entry with ``value`` in place of the argument; ``use(result)``
    probes an accepted result. ``names``: words of which the refusal must contain one (the
    argument as the caller spelled it).
    """

    entry: str
    arg: str
    domain: Domain
    call: Callable[[SimpleNamespace, object], Any]
    use: Callable[[Any], object] | None = None
    names: tuple[str, ...] = ()
    values: tuple[str, ...] = tuple(VALUES)
    extra: tuple[object, ...] = ()  # more values to try (issue 12's own numbers)
    partner: str = ""  # None here may be refused for the partner (a rank outside the size)

    def words(self, value: object) -> tuple[str, ...]:
        words = self.names or (self.arg,)
        return (*words, self.partner) if value is None and self.partner else words


def kwargs_case(
    entry: str,
    fn: Callable[..., Any],
    base: Mapping[str, object],
    domains: Mapping[str, Domain],
    use: Callable[[Any], object] | None = None,
    **options: Any,
) -> list[Case]:
    """One case per argument of ``fn(**base)``: that argument replaced, the others as in
    ``base`` (``ctx.<name>`` strings are looked up in the fixture)."""

    def caller(arg: str) -> Callable[[SimpleNamespace, object], Any]:
        def call(ctx: SimpleNamespace, value: object) -> Any:
            kw = {k: _resolve(ctx, v) for k, v in base.items()}
            kw[arg] = value
            return fn(**kw)

        return call

    return [Case(entry, arg, dom, caller(arg), use, **options) for arg, dom in domains.items()]


def _resolve(ctx: SimpleNamespace, value: object) -> object:
    if isinstance(value, str) and value.startswith("ctx."):
        return getattr(ctx, value[4:])
    return value


# -- probes: an accepted result must work ------------------------------------------------------
def _state_text(state: Mapping[str, object]) -> str:
    text = json.dumps(state, separators=(",", ":"))
    if len(text) > MAX_STATE_BYTES:
        raise AssertionError(f"state is {len(text)} bytes > {MAX_STATE_BYTES}: {text}")
    return text


def use_sampler(s: Any) -> None:
    n = len(s)
    if not isinstance(n, int) or n < 0:
        raise AssertionError(f"len() is {n!r}")
    state = s.state_dict()
    text = _state_text(state)
    s.load_state_dict(json.loads(text))
    if n:
        s.batch_at(0)
        s.batch_at(n - 1)
    if s.state_dict() != state:
        raise AssertionError("the state did not load back, or batch_at moved the cursor")
    if n:
        next(iter(s))


def use_ints(result: object) -> None:
    values = result if isinstance(result, tuple | list) else [result]
    for v in values:
        if type(v) is not int:
            raise AssertionError(f"{v!r} is a {type(v).__name__}, not a Python int (not JSON)")


def use_schedule(s: BatchSizeSchedule) -> None:
    use_ints([s.global_batch_size(0), s.consumed_samples(3), s.step_at(100)])
    json.dumps(vars(s.at_step(3, micro_batch_size=1, data_parallel_size=1)))


def use_calculator(calc: MultiTierBucketCalculator) -> None:
    calc.get_all_buckets()
    calc.assign(np.array([512]), np.array([512]))
    json.dumps(calc.config())


def use_video_calculator(calc: VideoBucketCalculator) -> None:
    calc.get_all_buckets()
    calc.assign(np.array([512]), np.array([512]), np.array([17]))
    json.dumps(calc.config())


def use_topology(t: Topology) -> None:
    use_ints([t.dp_rank, t.dp_size, t.replica_rank, t.replica_size])


def use_permutation(p: Permutation) -> None:
    last = p.index(p.n - 1)
    if p.position(last) != p.n - 1 or not 0 <= p.index(0) < p.n:
        raise AssertionError("index and position disagree")


def use_layout(lay: Any) -> None:
    use_ints([lay.num_batches, lay.total_positions, lay.dropped, lay.padded])
    if lay.num_batches:
        lay.batch_positions(lay.num_batches - 1, rank=0, split="contiguous")


def use_manifest(m: Manifest) -> None:
    m.bucket_counts()
    m.calculator_object()


# -- the table ------------------------------------------------------------------------------------
def _sampler_methods(entry: str, make: Callable[[SimpleNamespace], Any], dp: int) -> list[Case]:
    """The cursor methods every sampler shares (``CursorSampler``)."""

    def set_epoch(ctx: SimpleNamespace, v: object) -> Any:
        s = make(ctx)
        s.set_epoch(v)
        return s

    def at_step(ctx: SimpleNamespace, v: object) -> Any:
        return make(ctx).batch_at(v)

    def at_rank(ctx: SimpleNamespace, v: object) -> Any:
        return make(ctx).batch_at(0, rank=v)

    def at_epoch(ctx: SimpleNamespace, v: object) -> Any:
        return make(ctx).batch_at(0, epoch=v)

    return [
        Case(f"{entry}.set_epoch", "epoch", Int(0), set_epoch, use_sampler),
        Case(f"{entry}.batch_at", "step", Int(0, 1), at_step),
        Case(f"{entry}.batch_at", "rank", Int(0, dp - 1, none="accept"), at_rank),
        Case(f"{entry}.batch_at", "epoch", Int(0, none="accept"), at_epoch),
    ]


def _megatron(cls: type[Any], **more: object) -> Callable[[SimpleNamespace], Any]:
    return lambda ctx: cls(64, 2, 1, 2, **more)


def build_cases() -> list[Case]:
    size = Int(1, MAX_IMAGE_SIDE, legal=512)
    size_el = dataclasses.replace(size, element=True)  # one element of an array
    megatron_base = {
        "total_samples": 64,
        "micro_batch_size": 2,
        "data_parallel_rank": 1,
        "data_parallel_size": 2,
    }
    megatron_domains: dict[str, Domain] = {
        "total_samples": Int(4, MAX_DOMAIN, legal=64),
        "micro_batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
        "data_parallel_rank": Int(0, 1, none="either"),
        "data_parallel_size": Int(2, MAX_DP_SIZE, legal=2, none="either"),
        "drop_last": Bool(),
        "global_batch_size": Int(4, legal=8, none="accept"),
        "consumed_samples": Int(0),
    }
    cases: list[Case] = []
    for cls, extra_domains in (
        (MegatronPretrainingSampler, {}),
        (
            MegatronPretrainingRandomSampler,
            {"seed": Int(0, MAX_SEED), "data_sharding": Bool(), "compat": Never(none="accept")},
        ),
    ):
        name = cls.__name__
        cases += kwargs_case(
            name, cls, megatron_base, {**megatron_domains, **extra_domains}, use_sampler
        )
        cases += kwargs_case(
            name,
            cls,
            {**megatron_base, "drop_last": False, "global_batch_size": 8},
            {"pad_samples_to_global_batch_size": Bool(optional=True)},
            use_sampler,
        )
        cases += _sampler_methods(name, _megatron(cls), dp=2)

    cases += kwargs_case(
        "create_megatron_sampler",
        create_megatron_sampler,
        {
            "dataset_len": 64,
            "micro_batch_size": 2,
            "global_batch_size": None,
            "rank": 1,
            "world_size": 2,
        },
        {
            "dataset_len": Int(4, MAX_DOMAIN, legal=64),
            "micro_batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
            "global_batch_size": Int(4, legal=8, none="accept"),
            "dataloader_type": Never(),
            "drop_last": Bool(),
            "rank": Int(0, 1, none="either"),
            "world_size": Int(2, MAX_DP_SIZE, legal=2, none="either"),
            "seed": Int(0, MAX_SEED),
        },
        use_sampler,
    )

    # DistributedSampler: the dataset's length through range(n), which has a len() for any int
    def distributed_len(ctx: SimpleNamespace, v: object) -> Any:
        return DistributedSampler(range(v), num_replicas=2, rank=1)  # type: ignore[call-overload]

    cases.append(
        Case(
            "DistributedSampler",
            "len(dataset)",
            Int(0, MAX_DOMAIN, legal=10),
            distributed_len,
            use_sampler,
            names=("dataset", "len(dataset)"),
            values=("0", "np.int64", "2**62", "10**30"),
            extra=(2**62 + 1, 2**63),
        )
    )
    cases += kwargs_case(
        "DistributedSampler",
        DistributedSampler,
        {"dataset": range(10), "num_replicas": 2, "rank": 1},
        {
            "num_replicas": Int(2, MAX_DP_SIZE, legal=2, none="either"),
            "rank": Int(0, 1, none="either"),
            "shuffle": Bool(),
            "seed": Int(0, MAX_SEED),
            "drop_last": Bool(),
            "compat": Never(),
        },
        use_sampler,
        extra=(2**63,),
    )
    cases += _sampler_methods(
        "DistributedSampler", lambda ctx: DistributedSampler(range(10), num_replicas=2, rank=1), 2
    )

    bucket_base = {"dataset": "ctx.dataset", "base_batch_size": 2, "num_replicas": 2, "rank": 1}
    cases += kwargs_case(
        "SequentialBucketSampler",
        SequentialBucketSampler,
        bucket_base,
        {
            "dataset": Never(),
            "base_batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
            "drop_last": Bool(),
            "shuffle_buckets": Bool(),
            "shuffle_within_bucket": Bool(),
            "dynamic_batch_size": Bool(),
            "seed": Int(0, MAX_SEED),
            "num_replicas": Int(1, MAX_DP_SIZE, legal=2, none="either"),
            "rank": Int(0, 1, none="either"),
            "compat": Never(),
        },
        use_sampler,
    )
    cases.append(
        Case(
            "SequentialBucketSampler",
            "base_resolution[0]",
            Int(1, legal=512),
            lambda ctx, v: SequentialBucketSampler(
                ctx.dataset, base_batch_size=2, num_replicas=2, rank=1, base_resolution=(v, 512)
            ),
            use_sampler,
            names=("base_resolution[0]", "base_resolution"),
        )
    )

    def bucket_sampler(ctx: SimpleNamespace) -> SequentialBucketSampler:
        return SequentialBucketSampler(ctx.dataset, base_batch_size=2, num_replicas=2, rank=1)

    cases += _sampler_methods("SequentialBucketSampler", bucket_sampler, 2)
    cases.append(
        Case(
            "SequentialBucketSampler.get_batch_info",
            "batch_idx",
            Int(0, 1),
            lambda ctx, v: bucket_sampler(ctx).get_batch_info(v),
        )
    )

    # permutations, keys, apportionment, partition
    cases += kwargs_case(
        "Permutation",
        Permutation,
        {"n": 10, "key": 0},
        {"n": Int(1, MAX_DOMAIN), "key": Int(0, 2**64 - 1)},
        use_permutation,
    )
    cases += [
        Case(
            "Permutation.index", "position", Int(0, 9), lambda ctx, v: Permutation(10, 0).index(v)
        ),
        Case(
            "Permutation.position",
            "value",
            Int(0, 9),
            lambda ctx, v: Permutation(10, 0).position(v),
        ),
    ]
    cases += kwargs_case(
        "derive_key",
        derive_key,
        {"seed": 0, "epoch": 0, "stream": "s", "purpose": "p"},
        {
            "seed": Int(0, math.inf),
            "epoch": Int(0, math.inf),
            "stream": Never(),
            "purpose": Never(),
        },
        use_ints,
    )
    cases.append(
        Case(
            "derive_key",
            "extra",
            Int(0, math.inf),
            lambda ctx, v: derive_key(0, epoch=0, stream="s", purpose="p", extra=(v,)),  # type: ignore[arg-type]
            use_ints,
        )
    )
    cases += kwargs_case(
        "Apportionment",
        Apportionment,
        {"weights": [1, 2], "key": 0},
        {"key": Int(0, 2**64 - 1)},
        lambda a: a.counts_at([10]),
    )
    cases.append(
        Case(
            "Apportionment",
            "weights[1]",
            Int(0, legal=2),
            lambda ctx, v: Apportionment([1, v]),  # type: ignore[list-item]
            lambda a: a.counts_at([10]),
            names=("weights[1]", "weights"),  # a sum too large names sum(weights)
        )
    )
    cases += kwargs_case(
        "quantize_weights",
        quantize_weights,
        {"weights": [0.5, 0.5]},
        {"total": Int(2, MAX_TOTAL, legal=2**20)},
        use_ints,
    )
    cases.append(
        Case(
            "quantize_weights",
            "weights[1]",
            Real(),
            lambda ctx, v: quantize_weights([0.5, v]),  # type: ignore[list-item]
            use_ints,
        )
    )
    cases += kwargs_case(
        "plan_epoch",
        plan_epoch,
        {"n": 10, "per_rank": 2, "dp_size": 2, "tail": "drop"},
        {
            "n": Int(0, MAX_POSITIONS),
            "per_rank": Int(1, MAX_BATCH_SIZE),
            "dp_size": Int(1, MAX_DP_SIZE),
            "tail": Never(),
            "unit": Int(4, legal=4, none="accept"),
            "round_to": Int(1),
        },
        use_layout,
    )
    segments = {"n": [4, 4], "per_rank": [2, 2], "dp_size": 2, "tail": "drop"}
    cases += kwargs_case(
        "plan_segments",
        plan_segments,
        segments,
        {"dp_size": Int(1, MAX_DP_SIZE), "round_to": Int(1), "tail": Never()},
    )
    cases += [
        Case(
            "plan_segments",
            "n[0]",
            Int(0, MAX_POSITIONS, element=True),
            lambda ctx, v: plan_segments([v, 4], per_rank=[2, 2], dp_size=2, tail="drop"),
            names=("n[0]", "n"),
        ),
        Case(
            "plan_segments",
            "per_rank[0]",
            Int(1, MAX_BATCH_SIZE, element=True),
            lambda ctx, v: plan_segments([4, 4], per_rank=[v, 2], dp_size=2, tail="drop"),
            names=("per_rank[0]", "per_rank"),
        ),
    ]
    epoch = {
        "order": [0, 1],
        "sizes": [4, 4],
        "batch_sizes": [2, 2],
        "dp_size": 2,
        "drop_last": True,
    }
    cases += kwargs_case(
        "plan_bucket_epoch",
        plan_bucket_epoch,
        epoch,
        {"dp_size": Int(1, MAX_DP_SIZE), "drop_last": Bool(), "round_to": Int(1)},
    )
    cases.append(
        Case(
            "plan_bucket_epoch",
            "batch_sizes[0]",
            Int(1, MAX_BATCH_SIZE, element=True),
            lambda ctx, v: plan_bucket_epoch([0, 1], [4, 4], [v, 2], dp_size=2, drop_last=True),
            names=("batch_sizes[0]", "batch_sizes"),
        )
    )

    # topology
    cases += kwargs_case(
        "Topology",
        Topology,
        {"dp_rank": 1, "dp_size": 2},
        {
            "dp_rank": Int(0, 1),
            "dp_size": Int(2, MAX_DP_SIZE, legal=2),
            "replica_rank": Int(0, 0),
            "replica_size": Int(1),
        },
        use_topology,
    )
    cases += kwargs_case(
        "resolve_topology",
        resolve_topology,
        {"num_replicas": 2, "rank": 1},
        {
            "num_replicas": Int(2, MAX_DP_SIZE, legal=2, none="either"),
            "rank": Int(0, 1, none="either"),
        },
        use_topology,
    )
    cases += kwargs_case("data_parallel_dims", data_parallel_dims, {}, {"mesh": Never()})
    cases += kwargs_case("data_parallel_topology", data_parallel_topology, {}, {"mesh": Never()})

    # schedules
    cases += kwargs_case(
        "BatchSizeSchedule.constant",
        BatchSizeSchedule.constant,
        {},
        {"global_batch_size": Int(1, MAX_SAMPLES)},
        use_schedule,
    )
    cases += kwargs_case(
        "BatchSizeSchedule.rampup",
        BatchSizeSchedule.rampup,
        {
            "start_batch_size": 16,
            "batch_size_increment": 8,
            "rampup_samples": 1000,
            "global_batch_size": 64,
        },
        {
            "start_batch_size": Int(1, 63, legal=16),
            "batch_size_increment": Int(1, 48, legal=8),
            "rampup_samples": Int(1, MAX_SAMPLES),
            "global_batch_size": Int(24, legal=64),
        },
        use_schedule,
    )
    cases += kwargs_case(
        "BatchSizeSchedule.from_step_schedule",
        BatchSizeSchedule.from_step_schedule,
        {"schedule": "0:8 100:16"},
        {"schedule": Never(), "seq_length": Int(1, none="accept")},
        use_schedule,
    )
    cases += kwargs_case(
        "BatchSizeSchedule.from_megatron_args",
        BatchSizeSchedule.from_megatron_args,
        {"global_batch_size": 64},
        {
            "global_batch_size": Int(1, MAX_SAMPLES, none_error=ValueError),  # None: missing
            "rampup_batch_size": Never(none="accept"),
        },
        use_schedule,
    )
    cases.append(
        Case(
            "BatchSizeSchedule",
            "thresholds[1][1]",
            Int(1, MAX_SAMPLES),
            lambda ctx, v: BatchSizeSchedule([(0, 8), (100, v)]),  # type: ignore[list-item]
            use_schedule,
            names=("global_batch_size", "thresholds"),
        )
    )
    schedule = BatchSizeSchedule.rampup(16, 8, 1000, global_batch_size=64)
    cases += [
        Case("BatchSizeSchedule.global_batch_size", "step", Int(0, math.inf),
             lambda ctx, v: schedule.global_batch_size(v), use_ints),  # type: ignore[arg-type]
        Case("BatchSizeSchedule.consumed_samples", "step", Int(0, math.inf),
             lambda ctx, v: schedule.consumed_samples(v), use_ints,  # type: ignore[arg-type]
             extra=(np.int64(2**60),)),  # wrapped to 0 in int64
        Case("BatchSizeSchedule.step_at", "consumed_samples", Int(0, math.inf),
             lambda ctx, v: schedule.step_at(v), use_ints),  # type: ignore[arg-type]
        Case("BatchSizeSchedule.at_step", "step", Int(0, math.inf),
             lambda ctx, v: schedule.at_step(v, micro_batch_size=1, data_parallel_size=1),  # type: ignore[arg-type]
             lambda info: use_ints(list(vars(info).values()))),
        Case("BatchSizeSchedule.at_step", "micro_batch_size", Int(1, 16, legal=1),
             lambda ctx, v: schedule.at_step(0, micro_batch_size=v, data_parallel_size=1),  # type: ignore[arg-type]
             lambda info: use_ints(list(vars(info).values()))),
        Case("BatchSizeSchedule.check_layout", "from_step", Int(0, math.inf),
             lambda ctx, v: schedule.check_layout(
                 micro_batch_size=1, data_parallel_size=1, from_step=v)),  # type: ignore[arg-type]
    ]  # fmt: skip

    # buckets, datasets, manifests, scans, crops, stats
    cases += kwargs_case(
        "MultiTierBucketCalculator",
        MultiTierBucketCalculator,
        {},
        {
            "quantization": Int(1, legal=64),
            "max_pixels": Int(4096, MAX_PIXELS, legal=65536, none="accept"),  # and 1e30 below
            "debug_mode": Bool(),
            "max_batch_size": Int(1, none="accept"),
            "no_upscale": Bool(),
            "compat": Never(),
            "aspect_ratios": Never(none="accept"),
        },
        use_calculator,
    )
    cases.append(
        Case(
            "MultiTierBucketCalculator",
            "max_pixels",
            Int(4096, MAX_PIXELS, legal=65536),
            lambda ctx, v: MultiTierBucketCalculator(64, v),  # type: ignore[arg-type]
            use_calculator,
            values=(),
            extra=(1e30, np.float64(65536.0), 2**40, 2**40 + 1),  # issue 12: 1e30 was a MemoryError
        )
    )
    cases += kwargs_case(
        "MultiTierBucketCalculator.from_preset",
        MultiTierBucketCalculator.from_preset,
        {"preset": "512p"},
        {"preset": Never(), "quantization": Int(1, legal=64)},
        use_calculator,
    )
    cases += [
        Case("MultiTierBucketCalculator.assign", "widths[0]", size_el,
             lambda ctx, v: ctx.calc.assign([v, 512], [512, 512]), names=("widths[0]", "widths")),
        Case("MultiTierBucketCalculator.get_bucket_for_image", "image_width", size,
             lambda ctx, v: ctx.calc.get_bucket_for_image(v, 512)),
        Case("MultiTierBucketCalculator.get_bucket_by_id", "bucket_id", Int(0, 14),
             lambda ctx, v: ctx.calc.get_bucket_by_id(v)),
        Case("MultiTierBucketCalculator.get_dynamic_batch_size", "base_batch_size", Int(1, legal=4),
             lambda ctx, v: ctx.calc.get_dynamic_batch_size(
                 (512, 512), base_batch_size=v, base_resolution=(512, 512)),
             use_ints),
    ]  # fmt: skip
    cases += kwargs_case(
        "BaseMultiresolutionDataset",
        BaseMultiresolutionDataset,
        {"cache_dir": "ctx.cache_dir"},
        {"cache_dir": Never(), "quantization": Int(1, legal=64)},
        len,
    )
    cases += [
        Case("BaseMultiresolutionDataset.from_sizes", "widths[0]", size_el,
             lambda ctx, v: BaseMultiresolutionDataset.from_sizes(
                 [v, 512], [512, 512], calculator=ctx.calc),
             len, names=("widths[0]", "widths")),
        Case("BaseMultiresolutionDataset.from_bucket_ids", "bucket_ids[0]", Int(0, 1, element=True),
             lambda ctx, v: BaseMultiresolutionDataset.from_bucket_ids(
                 [v, 1], [(64, 64), (64, 128)]),
             len, names=("bucket_ids[0]", "bucket_ids")),
        Case("BaseMultiresolutionDataset.from_manifest", "manifest", Never(),
             lambda ctx, v: BaseMultiresolutionDataset.from_manifest(v)),  # type: ignore[arg-type]
    ]  # fmt: skip
    manifest_base = {
        "paths": ["a.jpg"],
        "widths": [512],
        "heights": [512],
        "bucket_ids": [7],
        "buckets": "ctx.all_buckets",
        "calculator": "ctx.calc_config",
    }
    cases += kwargs_case(
        "Manifest",
        Manifest,
        manifest_base,
        {"paths": Never(), "buckets": Never(), "calculator": Never(), "errors": Never()},
        use_manifest,
    )
    for column, dom in (
        ("widths", size_el),
        ("heights", size_el),
        ("bucket_ids", Int(0, 14, legal=7, element=True)),
    ):
        cases.append(
            Case(
                "Manifest",
                f"{column}[0]",
                dom,
                lambda ctx, v, column=column: Manifest(
                    **{**{k: _resolve(ctx, x) for k, x in manifest_base.items()}, column: [v]}
                ),
                use_manifest,
                names=(f"{column}[0]", column),
            )
        )
    cases += kwargs_case(
        "build_manifest",
        build_manifest,
        {"paths": ["a.jpg"], "widths": [512], "heights": [512], "calculator": "ctx.calc"},
        {"paths": Never(), "calculator": Never()},
        use_manifest,
    )
    cases.append(
        Case(
            "build_manifest",
            "widths[0]",
            size_el,
            lambda ctx, v: build_manifest(["a.jpg"], [v], [512], ctx.calc),
            use_manifest,
            names=("widths[0]", "widths"),
        )
    )
    cases += kwargs_case("read_manifest", read_manifest, {}, {"path": Never()})
    cases += kwargs_case(
        "write_manifest",
        write_manifest,
        {"manifest": "ctx.manifest", "path": "ctx.out_manifest"},
        {"manifest": Never(), "path": Never()},
    )
    cases += kwargs_case(
        "scan_images",
        scan_images,
        {"paths_or_dir": "ctx.image_dir", "calculator": "ctx.calc", "progress": False},
        {
            "paths_or_dir": Never(),
            "calculator": Never(),
            "workers": Int(1, none="accept"),
            "progress": Bool(),
            "exif_orientation": Bool(),
            "extensions": Never(),
        },
        use_manifest,
    )
    cases += kwargs_case(
        "resize_and_crop",
        resize_and_crop,
        {"image": "ctx.image", "target_width": 8, "target_height": 8},
        {
            "image": Never(),
            "target_width": Int(1, legal=8),
            "target_height": Int(1, legal=8),
            "crop_mode": Never(),
            "seed": Int(0, none="accept"),
        },
    )
    cases += kwargs_case(
        "bucket_stats",
        bucket_stats,
        {"source": "ctx.manifest", "num_replicas": 2, "batch_size": 2},
        {
            "source": Never(),
            "num_replicas": Int(1, MAX_DP_SIZE, legal=2),
            "batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
            "drop_last": Bool(),
        },
        format_bucket_table,
    )
    cases += kwargs_case("format_bucket_table", format_bucket_table, {}, {"stats": Never()})
    cases += kwargs_case(
        "plot_bucket_stats",
        plot_bucket_stats,
        {"stats": "ctx.stats", "path": "ctx.out_png"},
        {"stats": Never(), "path": Never(), "dpi": Int(1, legal=20)},
    )

    # checks
    cases += kwargs_case(
        "check_items",
        check_items,
        {"items_by_dp_rank": [[0, 1], [2, 3]]},
        {"items_by_dp_rank": Never(), "allowed_padding": Int(0, none="accept"), "full": Bool()},
    )
    cases += kwargs_case(
        "verify_data_parallel",
        verify_data_parallel,
        {"source": "ctx.one_rank_sampler", "raise_on_error": False},
        {
            "source": Never(),
            "num_batches": Int(1, none="accept"),
            "epoch": Int(0, none="accept"),
            "allowed_padding": Int(0, none="accept"),
            "raise_on_error": Bool(),
        },
    )

    # the mixture sampler
    blend_base = {
        "sizes": [20, 30, 50],
        "weights": [0.2, 0.3, 0.5],
        "micro_batch_size": 2,
        "data_parallel_rank": 1,
        "data_parallel_size": 2,
        "global_batch_size": 8,
        "seed": 3,
    }
    cases += kwargs_case(
        "BlendedSampler",
        BlendedSampler,
        blend_base,
        {
            "micro_batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
            "data_parallel_rank": Int(0, 1, none="either"),
            "data_parallel_size": Int(2, MAX_DP_SIZE, legal=2, none="either"),
            "seed": Int(0, MAX_SEED),
            "consumed_samples": Int(0, legal=8),
        },
        use_sampler,
    )
    cases += _sampler_methods(
        "BlendedSampler",
        lambda ctx: BlendedSampler(**blend_base),
        dp=2,  # type: ignore[arg-type]
    )

    # video buckets
    cases += kwargs_case(
        "VideoBucketCalculator",
        VideoBucketCalculator,
        {"max_tokens": 4096, "max_frames": 17},
        {
            "max_tokens": Int(3, legal=4096),
            "max_frames": Int(1, legal=17, none="either"),
            "spatial_compression": Int(1, legal=8),
            "temporal_compression": Int(1, legal=4),
            "max_batch_size": Int(1, legal=4, none="accept"),
        },
        use_video_calculator,
    )
    cases += _packing_cases()
    return cases


# -- the packing entries (dataorder.llm.packing) -----------------------------------------------
WEB = [5, 3, 9, 2, 7, 100, 1, 40] * 4
CODE = [50, 30, 9, 20] * 4


def use_plan(plan: PackingPlan) -> None:
    stats = plan.stats()
    use_ints([stats.rows, stats.tokens_padded, int(plan.fill_histogram().sum())])
    for epoch in (plan.epoch(0), plan.epoch(MAX_PASS)):
        rows = epoch.rows([0, epoch.num_rows - 1])
        if sum(b - a for row in rows for _, a, b in row) > 2 * plan.seq_len:
            raise AssertionError(f"rows past seq_len: {rows}")
        use_ints([int(c) for c in epoch.costs([0])] + [epoch.tokens_from(0)])


def use_packed(s: PackedSampler) -> None:
    use_sampler(s)
    use_ints([s.tokens_dropped, s.tokens_padded, s.documents_split])


def _packing_cases() -> list[Case]:
    """PackedSampler (one corpus and a mixture) and the packing functions it is built of."""
    one_base = {
        "lengths": WEB, "seq_len": 16, "micro_batch_size": 2, "data_parallel_rank": 1,
        "data_parallel_size": 2, "seed": 0, "chunk": 4, "window": 8,
    }  # fmt: skip
    shared: dict[str, Domain] = {
        "seq_len": Int(1, MAX_SEQ_LEN, legal=16),
        "micro_batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
        "data_parallel_rank": Int(0, 1, none="either"),
        "data_parallel_size": Int(2, MAX_DP_SIZE, legal=2, none="either"),
        "seed": Int(0, MAX_SEED),
        "window": Int(1, MAX_WINDOW, legal=8, none="accept"),  # None: default_window(chunk)
        "chunk": Int(1, MAX_CHUNK, legal=4),
        "split": Never(),
        "long_documents": Never(),
        "drop_last": Bool(),
    }
    cases = kwargs_case(
        "PackedSampler",
        PackedSampler,
        one_base,
        {
            **shared,
            "lengths": Never(),
            # up to 2**62, but one global batch must fit the corpus (refused naming it)
            "global_batch_size": Int(4, legal=8, none="accept"),
            "consumed_samples": Int(0),
            "total_rows": Never(none="accept"),
        },
        use_packed,
    )
    cases += kwargs_case(
        "PackedSampler",
        PackedSampler,
        {**one_base, "drop_last": False, "global_batch_size": 8},
        {"pad_samples_to_global_batch_size": Bool()},
        use_packed,
    )
    cases.append(
        Case(
            "PackedSampler",
            "lengths[0]",
            Int(0, 2**31 - 1, legal=5, element=True),
            lambda ctx, v: PackedSampler([v, *WEB[1:]], 16, 2, 1, 2, seed=0, chunk=4, window=8),
            use_packed,
            names=("lengths[0]", "lengths"),
            extra=(2**31 - 1, 2**31),  # NOTE [ Length bounds ]: the largest length, and past it
        )
    )
    mix_base = {
        **one_base, "lengths": None, "global_batch_size": 4, "mixture": ([WEB, CODE], [2, 1]),
    }  # fmt: skip
    cases += kwargs_case(
        "PackedSampler(mixture=)",
        PackedSampler,
        mix_base,
        {
            **shared,
            # up to 2**62, but at most total_rows (refused naming global_batch_size)
            "global_batch_size": Int(4, legal=8),
            "consumed_samples": Int(0, legal=8),
            "total_rows": Int(4, MAX_POSITIONS, legal=40, none="accept"),
            "mixture": Never(),
        },
        use_packed,
    )
    cases.append(
        Case(
            "PackedSampler(mixture=)",
            "mixture[1][0]",
            Real(),
            lambda ctx, v: PackedSampler(**{**mix_base, "mixture": ([WEB, CODE], [v, 1])}),
            use_packed,
        )
    )

    def one(ctx: SimpleNamespace) -> PackedSampler:
        return PackedSampler(**one_base)  # type: ignore[arg-type]

    def mix(ctx: SimpleNamespace) -> PackedSampler:
        return PackedSampler(**mix_base)  # type: ignore[arg-type]

    cases += _sampler_methods("PackedSampler", one, 2)
    cases += _sampler_methods("PackedSampler(mixture=)", mix, 2)
    cases += kwargs_case(
        "PackingPlan",
        PackingPlan,
        {"lengths": WEB, "seq_len": 16, "chunk": 4, "window": 8},
        {
            "lengths": Never(),
            "seq_len": Int(1, MAX_SEQ_LEN, legal=16),
            "window": Int(1, MAX_WINDOW, legal=8, none="accept"),  # None: default_window(chunk)
            "chunk": Int(1, MAX_CHUNK, legal=4),
            "split": Never(),
            "long_documents": Never(),
            "seed": Int(0, MAX_SEED),
        },
        use_plan,
    )
    plan = PackingPlan(WEB, 16, chunk=4, window=8)
    rows = plan.rows_per_epoch
    cases += [
        Case("PackingPlan.epoch", "epoch", Int(0, MAX_PASS), lambda ctx, v: plan.epoch(v)),
        Case(
            "PackingPlan.packed_window",
            "window",
            Int(0, plan.num_windows - 1),
            lambda ctx, v: plan.packed_window(0, v),
        ),
        Case(
            "PackingPlan.epoch.tokens_from",
            "position",
            Int(0, rows),
            lambda ctx, v: plan.epoch(1).tokens_from(v),
            use_ints,
        ),
        Case(
            "PackingPlan.epoch.rows",
            "positions[0]",
            Int(0, rows - 1, element=True),
            lambda ctx, v: plan.epoch(1).rows([v, 0]),
            names=("positions",),
        ),
    ]
    cases.append(
        Case(
            "DocumentLengths",
            "lengths[0]",
            Int(0, 2**31 - 1, legal=5, element=True),
            # values are checked when first read (NOTE [ Length bounds ]): build, then read
            lambda ctx, v: DocumentLengths([v, 3, 9]).total_tokens,
            use_ints,
            names=("lengths[0]", "lengths"),
        )
    )
    lengths = DocumentLengths(WEB)
    cases += [
        Case(
            "DocumentLengths.block_totals", "block", Int(1), lambda ctx, v: lengths.block_totals(v)
        ),
        Case(
            "DocumentLengths.count_longer_than",
            "seq_len",
            Int(0),
            lambda ctx, v: lengths.count_longer_than(v),
            use_ints,
        ),
        Case(
            "DocumentLengths.take",
            "indices[0]",
            Int(0, len(WEB) - 1, element=True),
            lambda ctx, v: lengths.take([v]),
            names=("indices",),
        ),
        Case("DocumentLengths.slice", "stop", Int(0, len(WEB)), lambda ctx, v: lengths.slice(0, v)),
    ]
    cases += kwargs_case(
        "MegatronStyle",
        MegatronStyle,
        {"attention": "thd", "reset_position_ids": True, "eod_mask_loss": False, "eod": 2},
        {
            "attention": Never(),
            "reset_position_ids": Bool(),
            "eod_mask_loss": Bool(),
            "eod": Int(0, 2**63 - 1, none="accept"),
        },
    )
    cases += kwargs_case(
        "DocumentRange",
        DocumentRange,
        {"source": SequenceTokens([[1], [2, 3], [4, 5, 6]]), "start": 0, "stop": 3},
        {"source": Never(), "start": Int(0, 3), "stop": Int(0, 3)},
    )
    cases += kwargs_case(
        "split_documents",
        split_documents,
        {"split": "8,1,1", "num_documents": 100},
        {"split": Never(), "num_documents": Int(0, math.inf)},
    )
    cases.append(
        Case(
            "MixtureLog.set_weights",
            "step",
            Int(0, MIX_MAX_STEP),
            lambda ctx, v: MixtureLog([1, 1]).set_weights(v, [1, 3]),
        )
    )
    live = LiveBatches(MegatronPretrainingSampler(64, 2, 0, 2, global_batch_size=8))
    cases += kwargs_case(
        "LiveBatches.items",
        live.items,
        {"step": 3, "participant": 0, "participants": 3},
        {"step": Int(0), "participant": Int(0, 2), "participants": Int(1)},
    )
    for entry, fn in (("deal", deal), ("deal_bounds", deal_bounds)):
        cases += kwargs_case(
            entry,
            fn,
            {"costs": [9, 1, 5, 5], "per_rank": 2, "dp_size": 2},
            {"costs": Never(), "per_rank": Int(2, 2, legal=2), "dp_size": Int(2, 2, legal=2)},
        )
        cases.append(
            Case(
                entry,
                "costs[0]",
                Int(0, MAX_COST, element=True),
                lambda ctx, v, fn=fn: fn([v, 1, 5, 5], 2, 2),
                names=("costs[0]", "costs"),
            )
        )
    cases += kwargs_case(
        "pack_window",
        pack_window,
        {"documents": [0, 1, 2], "lengths": [5, 40, 3], "seq_len": 16},
        {
            "seq_len": Int(1, MAX_SEQ_LEN, legal=16),
            "split": Never(),
            "long_documents": Never(),
            "tie_key": Int(0, 2**64 - 1, none="accept"),
        },
    )
    cases.append(
        Case(
            "pack_window",
            "lengths[0]",
            Int(0, 2**31 - 1, legal=5, element=True),
            lambda ctx, v: pack_window([0, 1], [v, 3], 16),
            names=("lengths[0]", "lengths"),
            extra=(2**31 - 1,),  # 2**27 full rows: NOTE [ Full rows are not stored ]
        )
    )
    cases += kwargs_case(
        "PackedDataset",
        PackedDataset,
        {"token_source": [[1, 2, 3], [4, 5]], "seq_len": 8},
        {
            "token_source": Never(),
            "seq_len": Int(1, MAX_SEQ_LEN, legal=8),
            "pad_id": Int(-(2**63), 2**63 - 1),
        },
        lambda d: d.arrays(((1, 0, 2), (0, 0, 3))),
        extra=(2**63,),
    )
    return cases


#: (argument, partner): a size or rank left to detection (None) may be refused for the other.
PARTNERS = {
    "data_parallel_rank": "data_parallel_size",
    "data_parallel_size": "data_parallel_rank",
    "num_replicas": "rank",
    "rank": "num_replicas",
    "world_size": "rank",
}
CALLER_PARTNERS = {("create_megatron_sampler", "rank"): "world_size"}


def _with_partners(cases: list[Case]) -> list[Case]:
    return [
        dataclasses.replace(c, partner=CALLER_PARTNERS.get((c.entry, c.arg), PARTNERS[c.arg]))
        if c.arg in PARTNERS and isinstance(c.domain, Int) and c.domain.none == "either"
        else c
        for c in cases
    ]


CASES = _with_partners(build_cases())

#: Exported names not in the sweep, and why.
NOT_SWEPT = {
    "__version__": "a string",
    "BaseMegatronSampler": "the base of the two Megatron samplers, swept through both",
    "held_out": "a sampler of the train's class (swept) over documents: tests/test_splits.py",
    "broadcast_weights": "a torch.distributed collective: tests/test_mixlog.py (2-process gloo)",
    "SourceDatasets": "a sequence of datasets, indexed: tests/test_mixlog_corpus.py",
    "CursorSampler": "abstract base; its methods are swept on every sampler",
    "CursorBatchSampler": "abstract base; its methods are swept on every sampler",
    "EpochPlan": "returned by epoch_plan(); built by the samplers",
    "EpochBlocks": "returned by plan_epoch (swept), never built by hand",
    "SegmentPlan": "returned by plan_segments (swept)",
    "BucketEpochPlan": "returned by plan_bucket_epoch (swept)",
    "BucketTable": "built by BaseMultiresolutionDataset (swept) from checked input",
    "BucketStats": "returned by bucket_stats (swept)",
    "StepInfo": "returned by BatchSizeSchedule.at_step (swept, its fields probed)",
    "CropResult": "returned by resize_and_crop (swept)",
    "DataParallelReport": "returned by verify_data_parallel (swept)",
    "DataParallelError": "an exception raised by verify_data_parallel",
    "MixtureSchedule": "a list of (start, weights) segments, not a scalar: tests/test_blend.py",
    "Ramp": "two weight vectors, not scalars: tests/test_blend.py checks its errors",
    "CostModel": "exact rationals only (floats refused): tests/test_video.py checks its errors",
    "VideoScan": "returned by scan_videos",
    "scan_videos": "takes paths; tests/test_video_scan.py feeds it broken files",
    "manifest_from_scan": "takes a VideoScan: tests/test_video_integration.py",
    "FitResult": "returned by fit_to_data (MultiTierBucketCalculator.fit_to_data)",
    "permute_many": "arrays of sizes, keys and positions: tests/test_permutation.py",
    "AssembledSampler": "abstract: a sampler's base class (every concrete sampler is swept)",
    "Schema": "a declaration read by the assembly; tests/test_assembly.py checks it",
    "BucketSampler": "the class SequentialBucketSampler names for NeMo (swept under that name)",
    "samplers": "takes no argument",
    "ConcatTokens": "a sequence of token sources: tests/test_pack_regressions.py",
}


#: Exported by dataorder.llm.packing, not in the sweep, and why.
NOT_SWEPT_PACKING = {
    "ConcatTokens": "a sequence of token sources: tests/test_pack_regressions.py",
    "EpochRows": "returned by PackingPlan.epoch (swept)",
    "PackedRows": "the batching rule PackedSampler declares; built from its checked seq_len",
    "PackedWindow": "returned by pack_window (swept)",
    "PackingStats": "returned by PackingPlan.stats (swept, probed)",
    "read_index": "takes paths: tests/test_hostile_files_cli.py feeds it corrupt and special files",
    "write_megatron": "writes files: tests/test_pack_regressions.py checks its errors",
}


def test_every_export_is_classified() -> None:
    swept = {c.entry.split(".")[0].split("(")[0] for c in CASES}
    assert set(packing.__all__) - swept == set(NOT_SWEPT_PACKING)
    assert set(NOT_SWEPT_PACKING) <= set(packing.__all__)
    swept -= set(packing.__all__) - set(dataorder.__all__)
    exported = set(dataorder.__all__)
    assert exported - swept - set(NOT_SWEPT) == set(), "add these to the sweep or to NOT_SWEPT"
    assert swept & set(NOT_SWEPT) == set()
    assert swept | set(NOT_SWEPT) <= exported


def _params() -> Iterator[Any]:
    for case in CASES:
        values = [(label, VALUES[label]) for label in case.values]
        values += [(repr(v), v) for v in case.extra]
        for label, value in values:
            yield pytest.param(case, value, id=f"{case.entry}-{case.arg}={label}")


# -- running one call -----------------------------------------------------------------------------


def _names(message: str, words: tuple[str, ...]) -> bool:
    return any(re.search(rf"(?<![\w.]){re.escape(w)}(?!\w)", message) for w in words)


def run_one(case: Case, value: object, ctx: SimpleNamespace, seconds: float = HANG_SECONDS) -> None:
    """Call, then check the outcome against the domain; ``pytest.fail`` with the story."""
    if isinstance(value, _Numpy):
        value = case.domain.numpy()
        expected: Expect = "reject" if isinstance(case.domain, Bool | Never) else "accept"
    else:
        expected = case.domain.expect(value)
    what = f"{case.entry}({case.arg}={value!r})"
    try:
        with hang_guard(seconds):
            result = case.call(ctx, value)
    except Hang:
        pytest.fail(f"{what} hangs: no answer within {seconds} s")
    except (TypeError, ValueError) as err:
        if expected == "accept":
            pytest.fail(f"{what} refused a legal value: {type(err).__name__}: {err}")
        wanted = case.domain.error(value)
        if wanted is not None and not isinstance(err, wanted):
            pytest.fail(f"{what} raised {type(err).__name__}, expected {wanted.__name__}: {err}")
        if not _names(str(err), case.words(value)):
            words = " or ".join(case.words(value))
            pytest.fail(f"{what}: the message does not name {words}: {err}")
        return
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # an escape: not the library's refusal
        pytest.fail(f"{what} raised {type(err).__name__} (expected a TypeError or ValueError "
                    f"naming {case.arg}, or acceptance): {err}")  # fmt: skip
    if expected == "reject":
        pytest.fail(f"{what} was accepted; expected a refusal naming {case.arg}")
    if case.use is None:
        return
    try:
        with hang_guard(seconds):
            case.use(result)
    except Hang:
        pytest.fail(f"{what} was accepted, then hangs when used")
    except KeyboardInterrupt:
        raise
    except BaseException as err:
        pytest.fail(f"{what} was accepted, then failed when used: {type(err).__name__}: {err}")


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("hostile")
    calc = MultiTierBucketCalculator.from_preset("512p")
    widths = np.array([512] * 20 + [768] * 20)
    heights = np.array([512] * 20 + [384] * 20)
    manifest = build_manifest([f"{i}.jpg" for i in range(40)], widths, heights, calc)
    cache = root / "cache"
    cache.mkdir()
    items = [{"crop_resolution": [w, h], "cache_file": f"{i}.pt"} for i, (w, h) in
             enumerate([(512, 512)] * 4 + [(640, 384)] * 4)]  # fmt: skip
    (cache / "shard_000.json").write_text(json.dumps(items))
    (cache / "metadata.json").write_text(json.dumps({"shards": ["shard_000.json"]}))
    image_dir = root / "images"
    image_dir.mkdir()
    pil = pytest.importorskip("PIL.Image")
    pil.new("RGB", (64, 48)).save(image_dir / "a.png")
    pil.new("RGB", (30, 90)).save(image_dir / "b.png")
    return SimpleNamespace(
        calc=calc,
        calc_config=calc.config(),
        all_buckets=calc.get_all_buckets(),
        dataset=BaseMultiresolutionDataset.from_sizes(widths, heights, calculator=calc),
        manifest=manifest,
        stats=bucket_stats(manifest, num_replicas=2, batch_size=2),
        cache_dir=cache,
        image_dir=image_dir,
        image=pil.new("RGB", (64, 48)),
        out_manifest=root / "out.tsv",
        out_png=root / "plot.png",
        one_rank_sampler=DistributedSampler(range(8), num_replicas=1, rank=0),
    )


@pytest.mark.parametrize(("case", "value"), list(_params()))
def test_hostile_value(case: Case, value: object, ctx: SimpleNamespace) -> None:
    run_one(case, value, ctx)


def test_the_judge_can_fail(ctx: SimpleNamespace) -> None:
    """Each verdict of ``run_one`` fires on an entry that deserves it."""

    def accepts_anything(ctx: SimpleNamespace, v: object) -> object:
        return v

    def raises_unnamed(ctx: SimpleNamespace, v: object) -> object:
        raise ValueError("bad value")

    def escapes(ctx: SimpleNamespace, v: object) -> object:
        raise OverflowError("int too big to convert")

    def hangs(ctx: SimpleNamespace, v: object) -> object:
        while True:
            pass

    def works_later_not(result: object) -> None:
        raise OverflowError("later")

    def names_n(ctx: SimpleNamespace, v: object) -> object:
        raise ValueError(f"n must be a positive int; got n={v!r}")

    verdicts = [
        (Case("x", "n", Int(1), accepts_anything), 0, "was accepted; expected a refusal"),
        (Case("x", "n", Int(1), raises_unnamed), 0, "does not name n"),
        (Case("x", "n", Int(1), raises_unnamed), 5, "refused a legal value"),
        (Case("x", "n", Int(1), escapes), 0, "raised OverflowError"),
        (Case("x", "n", Int(1), accepts_anything, works_later_not), 10**30, "then failed"),
        (Case("x", "n", Int(1), names_n), True, "raised ValueError, expected TypeError"),
    ]  # fmt: skip
    for case, value, verdict in verdicts:
        with pytest.raises(pytest.fail.Exception, match=re.escape(verdict)):
            run_one(case, value, ctx)
    with pytest.raises(pytest.fail.Exception, match="hangs"):
        run_one(Case("x", "n", Int(1), hangs), 1, ctx, seconds=0.2)


# -- files, states, extremes ----------------------------------------------------------------------
def _manifest_bytes(ctx: SimpleNamespace) -> tuple[dict[str, Any], list[str]]:
    write_manifest(ctx.manifest, ctx.out_manifest)
    header, *rows = ctx.out_manifest.read_text().split("\n")
    return json.loads(header), rows


FILE_CASES: list[tuple[str, Callable[[SimpleNamespace, Path], Path], str]] = []


def file_case(
    name: str, fragment: str
) -> Callable[[Callable[[SimpleNamespace, Path], Path]], None]:
    def register(write: Callable[[SimpleNamespace, Path], Path]) -> None:
        FILE_CASES.append((name, write, fragment))

    return register


def _manifest_with(ctx: SimpleNamespace, root: Path, **header: object) -> Path:
    h, rows = _manifest_bytes(ctx)
    path = root / "m.tsv"
    path.write_text("\n".join([json.dumps({**h, **header}), *rows]))
    return path


@file_case("manifest buckets null", ":1: buckets must be a list")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    return _manifest_with(ctx, root, buckets=None)


@file_case("manifest errors [1, 2]", ":1: errors[0] must be a [path, reason] pair")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    return _manifest_with(ctx, root, errors=[1, 2])


@file_case("manifest version true", ":1: manifest version must be 1; got version=True")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    return _manifest_with(ctx, root, version=True)


@file_case("manifest cut in its last row", ":41: the last row has no newline")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    path = _manifest_with(ctx, root)
    path.write_bytes(path.read_bytes()[:-3])
    return path


@file_case("manifest .gz cut short", ": corrupt or truncated gzip data (EOFError")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    path = root / "m.tsv.gz"
    write_manifest(ctx.manifest, path)
    path.write_bytes(path.read_bytes()[:-40])
    return path


@file_case("manifest .gz garbage", ":1: corrupt or truncated gzip data")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    path = root / "m.tsv.gz"
    path.write_bytes(gzip.compress(b"x")[:4] + bytes(range(200)))
    return path


@file_case("NeMo metadata.json not JSON", "metadata.json:1: ")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    (root / "metadata.json").write_text('{"shards": [')
    return root


@file_case("NeMo shard not JSON", "shard_000.json:2: ")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    (root / "metadata.json").write_text(json.dumps({"shards": ["shard_000.json"]}))
    (root / "shard_000.json").write_text('[{"crop_resolution": [64, 64],\n "cache_file": }]')
    return root


@file_case("NeMo shard not a list", "shard_000.json: shard 'shard_000.json' must be a JSON list")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    (root / "metadata.json").write_text(json.dumps({"shards": ["shard_000.json"]}))
    (root / "shard_000.json").write_text(json.dumps({"a": 1}))
    return root


@file_case("NeMo crop_resolution of text", "crop_resolution")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    (root / "metadata.json").write_text(json.dumps({"shards": ["shard_000.json"]}))
    (root / "shard_000.json").write_text(json.dumps([{"crop_resolution": ["a", 64]}]))
    return root


@pytest.mark.parametrize(("name", "write", "fragment"), FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_hostile_files(
    ctx: SimpleNamespace,
    tmp_path: Path,
    name: str,
    write: Callable[[SimpleNamespace, Path], Path],
    fragment: str,
) -> None:
    """A corrupt manifest or NeMo cache: a ValueError naming the file (and line, for JSON)."""
    path = write(ctx, tmp_path)
    load = read_manifest if name.startswith("manifest") else BaseMultiresolutionDataset
    with hang_guard(HANG_SECONDS):
        try:
            load(path)  # type: ignore[operator]
        except ValueError as err:
            message = str(err)
        except BaseException as err:
            pytest.fail(f"{name}: {type(err).__name__} instead of a ValueError: {err}")
        else:
            pytest.fail(f"{name}: accepted")
    assert str(tmp_path) in message, f"the message does not name the file: {message}"
    assert fragment in message, message


def _samplers(ctx: SimpleNamespace) -> dict[str, Any]:
    return {
        "megatron_single": MegatronPretrainingSampler(64, 2, 1, 2),
        "megatron_random": MegatronPretrainingRandomSampler(64, 2, 1, 2, seed=3),
        "distributed": DistributedSampler(range(10), num_replicas=2, rank=1),
        "sequential_bucket": SequentialBucketSampler(
            ctx.dataset, base_batch_size=2, num_replicas=2, rank=1
        ),
    }


STATE_EDITS: dict[str, tuple[Callable[[dict[Any, Any]], None], str]] = {
    "version True": (lambda s: s.update(version=True), "state version True is not supported"),
    "version 1.0": (lambda s: s.update(version=1.0), "state version 1.0 is not supported"),
    "mixed-type extra keys": (lambda s: s.update({1: 0, "zz": 0}), "unknown keys ['zz', 1]"),
    "negative epoch": (
        lambda s: s.update(epoch=-1),
        "state['epoch'] must be an int in [0, 4294967295]",
    ),
    "epoch True": (lambda s: s.update(epoch=True), "got epoch=True"),
    "consumed -1": (lambda s: s.update(consumed=-1), "state['consumed'] must be a non-negative"),
    "a layout of 0": (lambda s: s.update({k: 0 for k in s if str(k).startswith("layout.")}),
                      "must be a positive int; got layout."),
    "a config float": (lambda s: s.update({min(k for k in s if str(k).startswith("config.")): 1.5}),
                       "state is from another configuration"),
}  # fmt: skip


@pytest.mark.parametrize(
    "kind", ["megatron_single", "megatron_random", "distributed", "sequential_bucket"]
)
@pytest.mark.parametrize("edit", list(STATE_EDITS))
def test_hostile_states(ctx: SimpleNamespace, kind: str, edit: str) -> None:
    """An edited checkpoint is refused naming the key, and is not mutated (issue 12: mixed-type
    keys raised ``'<' not supported``, ``version: True`` was accepted)."""
    sampler = _samplers(ctx)[kind]
    state: dict[Any, Any] = dict(sampler.state_dict())
    mutate, fragment = STATE_EDITS[edit]
    mutate(state)
    before = copy.deepcopy(state)
    with hang_guard(HANG_SECONDS), pytest.raises(ValueError) as info:
        sampler.load_state_dict(state)
    assert fragment in str(info.value)
    assert state == before


def _largest_epoch(s: Any) -> int:
    """Set the largest epoch the sampler says it takes, after checking it refuses the next."""
    top = int(s.max_epoch)
    assert top <= 2**32 - 1
    for beyond in (top + 1, 2**63 - 1, 2**64 - 1):
        with pytest.raises(ValueError, match="epoch must be an int in"):
            s.set_epoch(beyond)
    s.set_epoch(top)
    return top


def _extremes(ctx: SimpleNamespace) -> dict[str, Callable[[], Any]]:
    dp = MAX_DP_SIZE or 2**31
    mbs = min(MAX_BATCH_SIZE or 2**31, MAX_DOMAIN // dp)
    gbs = mbs * dp
    big = {"drop_last": False, "global_batch_size": gbs, "pad_samples_to_global_batch_size": True}
    return {
        "megatron_single": lambda: MegatronPretrainingSampler(
            MAX_DOMAIN, mbs, dp - 1, dp, **big, consumed_samples=gbs
        ),
        "megatron_random": lambda: MegatronPretrainingRandomSampler(
            MAX_DOMAIN, mbs, dp - 1, dp, **big, seed=MAX_SEED, consumed_samples=gbs
        ),
        "megatron_random sharded": lambda: MegatronPretrainingRandomSampler(
            MAX_DOMAIN, mbs, dp - 1, dp, **big, seed=MAX_SEED, data_sharding=True,
            consumed_samples=gbs,
        ),
        "megatron_random nemo": lambda: MegatronPretrainingRandomSampler(
            MAX_DOMAIN, mbs, dp - 1, dp, global_batch_size=gbs, seed=2**63 - 1, compat="nemo",
            consumed_samples=gbs,
        ),
        "distributed": lambda: DistributedSampler(
            range(MAX_DOMAIN), num_replicas=dp, rank=dp - 1, seed=MAX_SEED
        ),
        "distributed torch": lambda: DistributedSampler(
            range(MAX_DOMAIN), num_replicas=dp, rank=dp - 1, seed=2**63 - 1, compat="torch"
        ),
        "sequential_bucket": lambda: SequentialBucketSampler(
            ctx.dataset, base_batch_size=MAX_BATCH_SIZE or 2**31, num_replicas=dp, rank=dp - 1,
            seed=MAX_SEED, drop_last=False, dynamic_batch_size=True,
        ),
        "sequential_bucket nemo": lambda: SequentialBucketSampler(
            ctx.dataset, base_batch_size=MAX_BATCH_SIZE or 2**31, num_replicas=dp, rank=dp - 1,
            seed=2**63 - 1, drop_last=False, dynamic_batch_size=True, compat="nemo",
        ),
        "blended": lambda: BlendedSampler(
            [MAX_DOMAIN - 1, 1], [1 / 3, 2 / 3], mbs, dp - 1, dp, gbs, seed=MAX_SEED,
            total_samples=MAX_DOMAIN,
        ),
        # epochs of 2**31 samples: the run-wide count, not MAX_EPOCH, limits the epoch
        "blended long run": lambda: BlendedSampler(
            [MAX_DOMAIN - 1, 1], [1 / 3, 2 / 3], 1, 0, 1, 1, seed=MAX_SEED, total_samples=2**31
        ),
        "sequential_bucket interleaved": lambda: SequentialBucketSampler(
            ctx.dataset, base_batch_size=MAX_BATCH_SIZE or 2**31, num_replicas=MAX_INTERLEAVE_UNIT,
            rank=MAX_INTERLEAVE_UNIT - 1, seed=MAX_SEED, drop_last=False, dynamic_batch_size=True,
            bucket_order="interleaved", interleave_unit=MAX_INTERLEAVE_UNIT,
        ),
    }  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [
        "megatron_single",
        "megatron_random",
        "megatron_random sharded",
        "megatron_random nemo",
        "distributed",
        "distributed torch",
        "sequential_bucket",
        "sequential_bucket nemo",
        "sequential_bucket interleaved",
        "blended",
        "blended long run",
    ],
)
def test_states_fit_512_bytes_at_the_extremes(ctx: SimpleNamespace, name: str) -> None:
    """Issue 12: states exceeded the promised bound at in-range extremes. Every sampler built
    with the largest values it accepts, at the largest epoch ``set_epoch`` accepts."""
    with hang_guard(HANG_SECONDS):
        s = _extremes(ctx)[name]()
        _largest_epoch(s)
        _state_text(s.state_dict())
