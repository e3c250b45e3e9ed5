"""The engine of the hostile-input sweep: values, domains, cases, probes and the judge.

Every constructor and function that ``dataorder`` exports is called with each value of
``VALUES`` in place of each of its scalar arguments (and of one element of its array arguments).
Each call must, within ``HANG_SECONDS`` (a hang detector, not a speed test), either

* refuse the value at once, with the library's template (``_validate``): ``TypeError`` for a
  value of the wrong type (``bool`` where an int is meant, a float, ``None`` where it is not
  allowed), ``ValueError`` for an int out of range, and a message that names the argument; or
* accept it where it is legal, and then keep working: the entry's probe (``len()``, the first
  and last batch, a JSON state of at most MAX_STATE_BYTES that loads back, ...) must pass. Accepted
  now and failing later is the defect the sweep exists to find.

A domain says what is legal. Where a bound is documented (a seed below 2**64, at most 2**62
samples) a value past it must be refused. Where none is (``Int(lo)`` without ``hi``), a huge int
may be refused with a ``ValueError`` naming the argument, or accepted; if accepted, it must work.

Each family's table of cases lives with the family's tests, in ``test_hostile_values.py`` of its
folder (tests/README.md); ``tests/test_hostile_input.py`` checks that the tables together classify
every export, and that each verdict of the judge can fire.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import signal
from collections.abc import Callable, Iterator, Mapping
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
import pytest

from dataorder import (
    BaseMultiresolutionDataset,
    BatchSizeSchedule,
    DistributedSampler,
    Manifest,
    MultiTierBucketCalculator,
    Permutation,
    Topology,
    VideoBucketCalculator,
    bucket_stats,
    build_manifest,
)
from dataorder.core import partition, topology
from dataorder.core.permutation import MAX_DOMAIN
from dataorder.core.state import MAX_STATE_BYTES  # NOTE [ State size ]
from dataorder.diffusion.calculators import image as buckets
from tests.helpers.hang import Hang, hang_guard

#: The hang guard needs POSIX timers; each family's sweep skips itself without them.
needs_setitimer = pytest.mark.skipif(
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
    extra: tuple[object, ...] = ()  # more values to try (numbers that once broke an entry)
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
def state_text(state: Mapping[str, object]) -> str:
    text = json.dumps(state, separators=(",", ":"))
    if len(text) > MAX_STATE_BYTES:
        raise AssertionError(f"state is {len(text)} bytes > {MAX_STATE_BYTES}: {text}")
    return text


def use_sampler(s: Any) -> None:
    n = len(s)
    if not isinstance(n, int) or n < 0:
        raise AssertionError(f"len() is {n!r}")
    state = s.state_dict()
    text = state_text(state)
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


# -- building a family's table ---------------------------------------------------------------
def sampler_methods(entry: str, make: Callable[[SimpleNamespace], Any], dp: int) -> list[Case]:
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


#: (argument, partner): a size or rank left to detection (None) may be refused for the other.
PARTNERS = {
    "data_parallel_rank": "data_parallel_size",
    "data_parallel_size": "data_parallel_rank",
    "num_replicas": "rank",
    "rank": "num_replicas",
    "world_size": "rank",
}
CALLER_PARTNERS = {("create_megatron_sampler", "rank"): "world_size"}


def with_partners(cases: list[Case]) -> list[Case]:
    return [
        dataclasses.replace(c, partner=CALLER_PARTNERS.get((c.entry, c.arg), PARTNERS[c.arg]))
        if c.arg in PARTNERS and isinstance(c.domain, Int) and c.domain.none == "either"
        else c
        for c in cases
    ]


def params(cases: list[Case]) -> Iterator[Any]:
    """One pytest parameter per (case, hostile value)."""
    for case in cases:
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


def make_ctx(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """What the cases name as ``ctx.<name>``: a calculator, a dataset, a manifest, files, ..."""
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
