"""Every way back into a run, crossed with every sampler family, checkpoint and layout.

The sweep crosses

* the ways back in: ``load_state_dict``, ``from_state``, a run-wide count (``consumed_samples=``,
  read by :meth:`~dataorder.core.cursor.CursorSampler.count_position` as every constructor reads
  it), :class:`~dataorder.integrations.dcp.OrderState` through ``dcp.save``/``dcp.load`` (one
  process), a torchdata ``StatefulDataLoader`` state (``snapshot_every_n_steps`` 1, 2, 3, 5;
  0, 1 or 2 workers), and two loads in a row (an earlier state, then the one saved);
* the sampler families of the contract table (Megatron single, random, sharded, NeMo and
  Megatron-LM orders; blends with constant weights and with a mixture schedule; buckets
  sequential, interleaved, dynamic, NeMo's, image and video fitted; torch's per-index order;
  packed rows under ``overflow`` and ``never``, and a packed mixture; variable sequence length
  chunks, ``natural`` and ``grow``);
* the checkpoint: at step 0, mid-epoch, after the last step of epoch 0, and after
  ``set_epoch(1)`` before its first batch;
* the layout it resumes on: the same data-parallel size, a smaller and a larger one.

The resumed loop is ``for e in range(sampler.epoch, 2): set_epoch(e); read the epoch``. The
verdict: on the same layout, exactly what an uninterrupted run reads; on another, epoch 0
repeats no more than the two layouts pad and skips no more than they drop, and epoch 1 is
exactly the new layout's; or a ``ValueError`` that says why (another layout of an order that
pins it, a position inside a step of the new layout, a run-wide count the layout makes
ambiguous). A bare count records no layout, so an order that pins the layout (a state from
another layout is refused) cannot tell a count from another layout: that one cell is not judged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import BatchSampler

from dataorder.core.batching import coverage, read_spans
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.integrations.common import consumed_state
from dataorder.integrations.dcp import OrderState
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.testing import SamplerCase
from dataorder.testing.contract import run_epoch
from tests import test_contract_table as table
from tests.helpers.stack_samplers import Items, collate_list


@dataclass(frozen=True)
class Family:
    """A sampler case of a contract table, with what ``from_state`` must be given."""

    case: SamplerCase
    given: dict[str, Any] = field(default_factory=dict)
    smaller: int = 1
    larger: int = 4


def _from(name: str, row_id: str, given: dict[str, Any] | None = None, **layouts: int) -> Family:
    """The contract table's row ``row_id``, named ``name`` here."""
    return Family(dataclasses.replace(table.ROW[row_id].case(), name=name), given or {}, **layouts)


def _image_fitted() -> Family:
    """Images in a bucket set fitted to them for global batches of 2 (``fit_to_data``)."""
    rng = np.random.default_rng(7)
    sizes = np.array([(1024, 768), (768, 1024), (1024, 1024), (1920, 1080), (640, 480)])
    w, h = sizes[rng.integers(0, len(sizes), 24)].T
    calc = MultiTierBucketCalculator.fit_to_data(w, h, global_batch_size=2, max_waste=0.1)
    ds = BaseMultiresolutionDataset.from_sizes(w, h, calc)
    make = table.buckets(ds, base_batch_size=1, seed=2)
    return Family(
        SamplerCase(name="image-fitted-drop", make=make, dataset_size=24, dp_size=2),
        {"dataset": ds},
    )


def _megatron_lm(rank: int, world: int) -> Any:
    return MegatronPretrainingRandomSampler(
        24, 2, rank, world, compat="megatron", data_sharding=False
    )


WEB, CODE, SMALL = table.WEB, table.CODE, table.SMALL
FAMILIES: dict[str, Family] = {
    f.case.name: f
    for f in [
        _from("single-drop", "sample-order-identity/fixed-blocks/drop"),
        _from("single-gbs-pad", "sample-order-identity/fixed-blocks/gbs-pad"),
        _from("random-keep", "sample-order-shuffled/fixed-blocks/keep"),
        _from("sharded-drop", "sample-order-sharded/fixed-blocks/drop"),
        _from("nemo", "sample-order-nemo-compat/fixed-blocks/drop"),
        Family(SamplerCase(name="megatron-lm", make=_megatron_lm, dataset_size=24, dp_size=2)),
        _from(
            "two-sources",
            "blend-of-sample-orders/fixed-blocks/two-sources",
            {"sizes": [6, 4], "weights": [3, 1]},
        ),
        _from(
            "ramp-short-epochs",
            "blend-of-sample-orders/fixed-blocks/ramp-short-epochs",
            {"sizes": [3, 2, 1], "weights": table.RAMPED},
        ),
        _from(
            "small-keep-shuffled",
            "image-buckets/buckets-sequential/small-keep-shuffled",
            {"dataset": SMALL},
        ),
        _from(
            "small-interleaved-keep",
            "image-buckets/buckets-interleaved/small-keep",
            {"dataset": SMALL},
        ),
        _from(  # its table world is 8: resume on 4, 2 and 8
            "many-keep-dynamic",
            "image-buckets/buckets-sequential/many-keep-dynamic",
            {"dataset": table.MANY, "base_resolution": (128, 64)},
            smaller=2,
            larger=8,
        ),
        _from(
            "small-nemo-keep",
            "image-buckets-nemo-compat/buckets-sequential/small-keep",
            {"dataset": SMALL},
        ),
        _from(
            "video-fitted-drop",
            "video-buckets/buckets-sequential/fitted-drop",
            {"dataset": table.FITTED_VIDEO},
        ),
        _image_fitted(),
        _from(
            "torch-shuffle-pad",
            "index-order-torch-compat/fixed-blocks/shuffle-pad",
            smaller=2,
            larger=6,
        ),
        _from("overflow-keep", "packed-corpus/dealt-by-cost/overflow-keep", {"lengths": WEB}),
        _from("never-truncate", "packed-corpus/dealt-by-cost/never-truncate", {"lengths": CODE}),
        _from(
            "mixture",
            "blend-of-packed-corpora/dealt-by-cost/weights",
            {"mixture": ([WEB, CODE], [2, 1])},
        ),
        _from("vsl-natural", "chunk-lengths/buckets-interleaved/natural", {"lengths": table.DOCS}),
        _from("vsl-grow", "chunk-lengths/buckets-sequential/grow", {"lengths": table.DOCS}),
    ]
}

POINTS = ("step-0", "mid-epoch", "last-step", "next-epoch-set")
#: What a refusal must say: the field or rule that makes the layout unable to continue.
REASON = re.compile(
    r"data_parallel_size|micro_batch_size|num_replicas|inside the first epoch|step boundary|"
    r"cannot resume|not a position|another configuration|cannot resume on another layout"
)


def _sizes(family: Family) -> list[int]:
    world = family.case.dp_size
    return sorted(
        {
            world,
            max(1, family.smaller if family.smaller < world else world // 2),
            family.larger if family.larger > world else 2 * world,
        }
    )


def _unit(case: SamplerCase) -> int:
    return 1 if case.batched else case.loader_batch_size


@dataclass
class Saved:
    """A run on the saving layout stopped at a checkpoint."""

    old: list[Any]
    before: list[list[Any]]  # what each rank read of epoch 0
    steps: int  # loader batches each rank read
    next_epoch: bool  # the loop said set_epoch(1) after epoch 0


def _run(case: SamplerCase, point: str) -> Saved:
    world = case.dp_size
    old = [case.make(r, world) for r in range(world)]
    unit = _unit(case)
    batches = -(-len(old[0]) // unit)
    steps = {"step-0": 0, "mid-epoch": batches // 2}.get(point, batches)
    for s in old:
        s.set_epoch(0)
    before = [run_epoch(s, limit=min(steps * unit, len(s))) for s in old]
    if point == "next-epoch-set":
        for s in old:
            s.set_epoch(1)
    return Saved(old, before, steps, point == "next-epoch-set")


def _reads(case: SamplerCase, sampler: Any, items: list[Any]) -> tuple[int, int, int]:
    """(units read, distinct units, padding slots) of ``items``."""
    read = read_spans(case.rule(sampler), items)
    k, a, b = read.spans
    if k.size == 0:
        return 0, 0, read.padding
    c = coverage((k, a, b))
    return c.units, c.distinct, read.padding


def _epoch(case: SamplerCase, world: int, epoch: int) -> list[list[Any]]:
    out = []
    for r in range(world):
        s = case.make(r, world)
        s.set_epoch(epoch)
        out.append(run_epoch(s))
    return out


def _counter(sampler: Any, case: SamplerCase, which: str) -> int:
    rule = case.rule(sampler)
    return int(getattr(sampler, rule.padded_counter if which == "padded" else rule.dropped_counter))


def _judge(family: Family, saved: Saved, world: int, restore: Callable[[list[Any]], None]) -> str:
    """Resume on ``world`` ranks through ``restore``; return "ok" or "refused", or fail."""
    case = family.case
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            new = [case.make(r, world) for r in range(world)]
    except ValueError:
        return "no such layout"  # the configuration itself cannot be built on it
    try:
        restore(new)
    except ValueError as err:
        refusal = str(err)
    else:
        refusal = ""
    if refusal:
        assert REASON.search(refusal), f"{case.name}: a refusal that names no reason: {refusal}"
        return "refused"
    after: dict[int, list[list[Any]]] = {}
    start = new[0].epoch
    assert {s.epoch for s in new} == {start}, f"{case.name}: ranks disagree on the epoch"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for e in range(start, 2):
            for s in new:
                s.set_epoch(e)
            after[e] = [run_epoch(s) for s in new]
    assert start <= 1, f"{case.name}: resumed at epoch {start}"
    fresh1 = _epoch(case, world, 1)
    assert after[1] == fresh1, f"{case.name}: epoch 1 on {world} ranks is not the layout's own"
    mine0 = [x for rank in saved.before for x in rank] + [
        x for rank in after.get(0, []) for x in rank
    ]
    if world == case.dp_size:
        whole = _epoch(case, world, 0)
        got = [saved.before[r] + (after[0][r] if 0 in after else []) for r in range(world)]
        assert got == whole, f"{case.name}: epoch 0 resumed on the same layout is not the run's"
        return "ok"
    units, distinct, _ = _reads(case, new[0], mine0)
    repeated = units - distinct
    padded = _counter(saved.old[0], case, "padded") + _counter(new[0], case, "padded")
    dropped = _counter(saved.old[0], case, "dropped") + _counter(new[0], case, "dropped")
    assert repeated <= padded, f"{case.name}: {repeated} repeated on {world} ranks (pads {padded})"
    assert case.universe - distinct <= dropped, (
        f"{case.name}: {case.universe - distinct} skipped on {world} ranks (drops {dropped})"
    )
    return "ok"


# -- the ways back in ------------------------------------------------------------------------------
def _load_each(state: dict[str, Any]) -> Callable[[list[Any]], None]:
    def restore(new: list[Any]) -> None:
        for s in new:
            s.load_state_dict(state)

    return restore


def way_load_state_dict(family: Family, saved: Saved, tmp: Path) -> Callable[[list[Any]], None]:
    return _load_each(saved.old[0].state_dict())


def way_two_loads(family: Family, saved: Saved, tmp: Path) -> Callable[[list[Any]], None]:
    early = family.case.make(0, family.case.dp_size)
    next(iter(early), None)
    first, last = early.state_dict(), saved.old[0].state_dict()

    def restore(new: list[Any]) -> None:
        for s in new:
            with contextlib.suppress(ValueError):  # refused on this layout: the second wins
                s.load_state_dict(first)
            s.load_state_dict(last)

    return restore


def way_from_state(family: Family, saved: Saved, tmp: Path) -> Callable[[list[Any]], None]:
    state = saved.old[0].state_dict()
    cls = type(saved.old[0])

    def restore(new: list[Any]) -> None:
        world = len(new)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            new[:] = [
                cls.from_state(state, rank=r, dp_size=world, **family.given) for r in range(world)
            ]

    return restore


def way_count(family: Family, saved: Saved, tmp: Path) -> Callable[[list[Any]], None]:
    count = saved.old[0].consumed_samples

    def restore(new: list[Any]) -> None:
        for s in new:
            # what consumed_samples= does in every constructor that takes it
            s._place(*s.count_position(count), loaded=True)

    return restore


def way_dcp(family: Family, saved: Saved, tmp: Path) -> Callable[[list[Any]], None]:
    import torch.distributed.checkpoint as dcp

    path = tmp / f"dcp-{family.case.name}-{len(list(tmp.iterdir()))}"
    dcp.save({"data": OrderState(saved.old[0])}, checkpoint_id=str(path), no_dist=True)

    def restore(new: list[Any]) -> None:
        for s in new:  # every rank loads the one saved copy
            dcp.load({"data": OrderState(s)}, checkpoint_id=str(path), no_dist=True)

    return restore


def _loader(case: SamplerCase, sampler: Any, workers: int, every: int) -> StatefulDataLoader:
    kw: dict[str, Any] = {"num_workers": workers, "snapshot_every_n_steps": every}
    if case.batched:
        return StatefulDataLoader(
            Items(10**6), batch_sampler=sampler, collate_fn=collate_list, **kw
        )
    sampler_of_batches = BatchSampler(sampler, case.loader_batch_size, False)
    return StatefulDataLoader(
        Items(), batch_sampler=sampler_of_batches, collate_fn=collate_list, **kw
    )


def way_loader(workers: int, every: int) -> Callable[[Family, Saved, Path], Any]:
    def way(family: Family, saved: Saved, tmp: Path) -> Callable[[list[Any]], None]:
        case = family.case
        live = case.make(0, case.dp_size)  # rank 0's loader, run as the saving job ran it
        loader = _loader(case, live, workers, every)
        live.set_epoch(0)
        batches = iter(loader)
        for _ in range(saved.steps):
            next(batches)
        if saved.next_epoch:
            assert next(batches, None) is None  # the loop ran the loader out
            live.set_epoch(1)
        state = consumed_state(loader)
        del batches
        return _load_each(state)

    return way


WAYS: dict[str, Callable[[Family, Saved, Path], Any]] = {
    "load_state_dict": way_load_state_dict,
    "from_state": way_from_state,
    "consumed_samples": way_count,
    "dcp": way_dcp,
    "two-loads": way_two_loads,
    **{
        f"loader-w{w}-every{n}": way_loader(w, n)
        for w in (0, 1, 2)
        for n in ((1,) if w == 0 else (1, 2, 3, 5))
    },
}

# The default run: every family through every way without worker processes, and the worker
# ways on one family each (a loader with workers costs about a second to start); the rest is
# marked slow.
DEFAULT_WORKER_FAMILY = "random-keep"


def _params() -> list[Any]:
    out = []
    for way in WAYS:
        for name in FAMILIES:
            if way == "consumed_samples" and not _counts(FAMILIES[name]):
                continue  # a sampler that takes no run-wide count
            slow = way.startswith(("loader-w1", "loader-w2")) and name != DEFAULT_WORKER_FAMILY
            marks = [pytest.mark.slow] if slow else []
            out.append(pytest.param(way, name, marks=marks, id=f"{way}-{name}"))
    return out


def _counts(family: Family) -> bool:
    """Whether the family's sampler takes a run-wide count (``consumed_samples=``)."""
    return hasattr(family.case.make(0, family.case.dp_size), "consumed_samples")


def _pins_layout(family: Family, world: int) -> bool:
    """Whether the family's order refuses a state from ``world`` ranks (it pins the layout)."""
    case = family.case
    state = case.make(0, case.dp_size).state_dict()
    try:
        case.make(0, world).load_state_dict(state)
    except ValueError:
        return True
    return False


@pytest.mark.parametrize(("way", "name"), _params())
def test_every_way_back_in_loses_and_repeats_nothing_or_says_why(
    way: str, name: str, tmp_path: Path
) -> None:
    family = FAMILIES[name]
    verdicts = []
    for point in POINTS:
        saved = _run(family.case, point)
        restore = WAYS[way](family, saved, tmp_path)
        for world in _sizes(family):
            other = world != family.case.dp_size
            if way == "consumed_samples" and other and _pins_layout(family, world):
                continue  # a bare count cannot tell this layout's order from another's
            verdict = _judge(family, saved, world, restore)
            if world == family.case.dp_size and way != "consumed_samples":
                assert verdict == "ok", f"{name}: refused on its own layout at {point}"
            verdicts.append(verdict)
    assert "ok" in verdicts
