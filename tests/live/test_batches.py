"""LiveBatches: the items each replica group trains at a committed step, whoever takes part.

Every sampler family (the stack integrations' table, plus the compat modes, a global batch of
several micro-steps and a packed mixture) is driven through random quorums: the participants'
items, in participant and row order, are the step's nominal global batch; the global batches of
the run's steps, end to end, are the nominal job's micro-batches (``batch_at`` of every
micro-step and rank, epoch after epoch); and no answer depends on the quorums asked before.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dataorder
from dataorder.core.batching import read_spans
from dataorder.live import LiveBatches
from dataorder.live.batches import share_of
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.llm.packing import PackedSampler
from dataorder.llm.schedule import BatchSizeSchedule
from dataorder.parallel.distributed import DistributedSampler
from tests.helpers.stack_samplers import DOCUMENT_LENGTHS, FAMILIES, N

D = 4  # the nominal data-parallel size of every case

#: name -> (sampler at the nominal layout, LiveBatches keywords)
CASES: dict[str, tuple[Callable[[], Any], dict[str, Any]]] = {
    **{name: (lambda make=make: make(0, D), {}) for name, make in FAMILIES.items()},
    "megatron-gbs": (
        lambda: MegatronPretrainingRandomSampler(N, 2, 0, D, seed=1, global_batch_size=24),
        {},
    ),
    "megatron-gbs-keep": (
        lambda: MegatronPretrainingSampler(50, 1, 0, D, drop_last=False, global_batch_size=12),
        {},
    ),
    "megatron-compat-megatron": (
        lambda: MegatronPretrainingRandomSampler(N, 2, 0, D, seed=0, compat="megatron"),
        {},
    ),
    "megatron-compat-nemo": (
        lambda: MegatronPretrainingRandomSampler(N, 2, 0, D, seed=2, compat="nemo"),
        {},
    ),
    "megatron-sharded": (
        lambda: MegatronPretrainingRandomSampler(N, 1, 0, D, seed=3, data_sharding=True),
        {},
    ),
    "distributed-batched": (
        lambda: DistributedSampler(range(N), num_replicas=D, rank=0, seed=5),
        {"micro_steps": 3},
    ),
    "distributed-torch": (
        lambda: DistributedSampler(range(N), num_replicas=D, rank=0, seed=5, compat="torch"),
        {"micro_steps": 2},
    ),
    "blend-gbs": (
        lambda: BlendedSampler([30, 18], [0.6, 0.4], 1, 0, D, 3 * D, seed=4, total_samples=36),
        {},
    ),
    "packed-mixture": (
        lambda: PackedSampler(
            None,
            32,
            1,
            0,
            D,
            2 * D,
            seed=5,
            mixture=([DOCUMENT_LENGTHS[:30], DOCUMENT_LENGTHS[30:]], [2, 1]),
            total_rows=16,
            chunk=4,
            window=16,
        ),
        {},
    ),
}


def _live(name: str, mode: str = "constant") -> LiveBatches[Any]:
    make, kw = CASES[name]
    return LiveBatches(make(), mode=mode, **kw)


def _base(live: LiveBatches[Any], epochs: int) -> list[Any]:
    """The nominal job's micro-batches: every micro-step, every rank, epoch after epoch."""
    s = live.sampler
    return [
        s.batch_at(a, rank=r, epoch=e)
        for e in range(epochs)
        for a in range(s.epoch_plan(e).num_steps)
        for r in range(live.dp_size)
    ]


def _steps(live: LiveBatches[Any], epochs: int) -> int:
    return sum(live.global_steps(e) for e in range(epochs))


def _split(live: LiveBatches[Any], step: int, participants: int, inner: int) -> list[Any]:
    """The step's items as the quorum trains them, re-assembled in participant and row order."""
    out: list[Any] = []
    for p in range(participants):
        ranks = [live.items(step, p, participants, i, inner) for i in range(inner)]
        assert len({len(r) for r in ranks}) == 1, "inner ranks must train as many items"
        for row in zip(*ranks, strict=True):
            out += row
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_quorum_trains_exactly_the_base_order_of_every_family(name: str) -> None:
    live = _live(name)
    epochs = 2
    rng = random.Random(name)
    trained: list[Any] = []
    for step in range(_steps(live, epochs)):
        inner = rng.choice([1, 2, 4])
        participants = rng.randint(1, 9)
        got = _split(live, step, participants, inner)
        assert got == live.global_batch(step), (step, participants, inner)
        trained += got
    assert trained == _base(live, epochs)


@pytest.mark.parametrize("name", ["megatron-gbs", "packed", "bucket", "distributed-batched"])
def test_a_committed_step_trains_the_nominal_units_whoever_takes_part(name: str) -> None:
    live = _live(name)
    for step in range(live.global_steps(0)):
        units = live.units(step)
        read = read_spans(live.batching, live.global_batch(step))
        assert units == int((read.spans[2] - read.spans[1]).sum())
        per = [read_spans(live.batching, live.items(step, p, 3)).spans for p in range(3)]
        assert sum(int((s[2] - s[1]).sum()) for s in per) == units
    if name == "megatron-gbs":
        assert {live.units(s) for s in range(live.global_steps(0))} == {24}
    if name == "packed":  # tokens: 2 rows of 32 per micro-batch, less what rows leave empty
        assert all(0 < live.units(s) <= 32 * 2 * D for s in range(live.global_steps(0)))


def test_the_answer_does_not_depend_on_the_quorums_asked_before() -> None:
    fresh = _live("megatron-random")
    churned = _live("megatron-random")
    rng = random.Random(0)
    for _ in range(200):  # many quorum changes, steps asked out of order
        churned.items(rng.randrange(40), *sorted(rng.sample(range(1, 12), 1) * 2)[:1], 12)
    for step in (0, 7, 39):
        for participants in (1, 3, 5):
            for p in range(participants):
                assert churned.items(step, p, participants) == fresh.items(step, p, participants)


def test_shares_are_contiguous_and_differ_by_at_most_one_row() -> None:
    for rows in range(40):
        for participants in range(1, 50):
            shares = [share_of(rows, p, participants) for p in range(participants)]
            sizes = [s.stop - s.start for s in shares]
            assert shares[0].start == 0
            assert shares[-1].stop == rows
            assert all(a.stop == b.start for a, b in itertools.pairwise(shares))
            assert max(sizes) - min(sizes) <= 1
            assert sizes == sorted(sizes, reverse=True)


def test_more_participants_than_micro_batches_leaves_some_with_none() -> None:
    live = _live("megatron-random")  # 4 micro-batches a step
    sizes = [len(live.items(0, p, 6)) for p in range(6)]
    assert sizes == [1, 1, 1, 1, 0, 0]


def test_inner_ranks_of_a_bucket_sampler_keep_lock_step_shapes() -> None:
    live = _live("bucket")
    bucket = {i: k for k, g in live.sampler.dataset.bucket_groups.items() for i in g["indices"]}
    for step in range(live.global_steps(0)):
        for participants in (1, 3):
            for p in range(participants):
                rows = [live.items(step, p, participants, i, 2) for i in range(2)]
                for a, b in zip(*rows, strict=True):
                    ids = {bucket[x] for x in [*a, *b]}
                    assert len(ids) == 1, (step, p, a, b)


def test_per_participant_mode_trains_the_stream_in_committed_batches() -> None:
    live = _live("megatron-gbs", mode="per_participant")
    stream = _base(live, 3)
    rng = random.Random(1)
    committed, trained = 0, []
    while committed * live.micro_steps * 2 < len(stream) - 200:
        participants = rng.randint(1, 5)
        step_items = [
            live.items(committed, p, participants, i, 2)
            for p in range(participants)
            for i in range(2)
        ]
        if rng.random() < 0.2:  # a failed commit: the step runs again, maybe on another quorum
            continue
        for p in range(participants):
            ranks = step_items[2 * p : 2 * p + 2]
            for row in zip(*ranks, strict=True):
                trained += row
        units = live.units(committed, participants, 2)
        assert units == sum(len(x) for x in functools.reduce(operator.iadd, step_items, []))
        committed += participants
    assert trained == stream[: len(trained)]
    assert len(trained) == committed * live.micro_steps * 2


def test_epoch_of_counts_global_steps_epoch_after_epoch() -> None:
    live = _live("megatron-gbs-keep")  # 50 samples, 12 a global step, the last one short
    assert live.micro_steps == 3
    assert live.global_steps(0) == 5
    assert [live.epoch_of(s) for s in (0, 4, 5, 9, 10)] == [0, 0, 1, 1, 2]
    assert live.units(4) == 2


def _blend_live() -> LiveBatches[Any]:
    return LiveBatches(BlendedSampler([30, 20], [0.6, 0.4], 2, 0, 2, 4, seed=1))


def test_a_fresh_object_answers_a_far_step_as_one_that_stepped_there() -> None:
    sampler = MegatronPretrainingRandomSampler(1000, 8, 0, 4, seed=3, global_batch_size=256)
    warm = LiveBatches(sampler)  # 3 global steps an epoch: a replica that ran through
    for step in range(0, 200_001, 150_000):
        warm.items(step, 0, 3)
    fresh = LiveBatches(sampler)  # a replica restarted or healed at step 200,000
    assert fresh.items(200_000, 0, 3) == warm.items(200_000, 0, 3)
    assert fresh.epoch_of(200_000) == 200_000 // 3 == warm.epoch_of(200_000)
    assert fresh.global_steps(66_666) == 3


def test_counted_epochs_answer_whatever_was_asked_before() -> None:
    warm, fresh = _blend_live(), _blend_live()
    epochs = [warm.global_steps(e) for e in range(40)]
    assert len(set(epochs)) > 1  # a blend's epochs differ in length: they are counted
    far = sum(epochs) - 1
    assert fresh.items(far, 1, 2) == warm.items(far, 1, 2)
    with pytest.raises(ValueError, match="got step=") as first:
        _blend_live().items(2**40, 0, 1)
    with pytest.raises(ValueError, match="got step=") as again:
        warm.items(2**40, 0, 1)  # the refusal does not depend on what was counted before
    assert str(first.value) == str(again.value)


def test_the_state_is_the_configuration_and_refuses_another() -> None:
    live = _live("megatron-random")
    state = live.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert set(state) >= {"format", "version", "fingerprint", "kind", "mode", "micro_steps"}
    assert len(json.dumps(state, separators=(",", ":"))) < 600
    _live("megatron-random").load_state_dict(state)  # the same job: accepted
    other = LiveBatches(MegatronPretrainingRandomSampler(N, 2, 0, D, seed=4))
    with pytest.raises(ValueError, match=r"state\['config.seed'\] is 3 in the job but 4 here"):
        other.load_state_dict(state)
    wider = LiveBatches(MegatronPretrainingRandomSampler(N, 2, 0, 2 * D, seed=3))
    with pytest.raises(ValueError, match=r"layout.data_parallel_size"):
        wider.load_state_dict(state)
    with pytest.raises(ValueError, match=r"state\['mode'\]"):
        _live("megatron-random", mode="per_participant").load_state_dict(state)
    with pytest.raises(ValueError, match=r"must be a 'dataorder\.live' state"):
        live.load_state_dict({"format": "dataorder.state"})
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        live.load_state_dict([])  # type: ignore[arg-type]
    assert live.fingerprint != other.fingerprint


def test_the_rank_and_cursor_of_the_sampler_do_not_matter() -> None:
    a = LiveBatches(MegatronPretrainingRandomSampler(N, 2, 0, D, seed=3))
    moved = MegatronPretrainingRandomSampler(N, 2, 3, D, seed=3)
    next(iter(moved))
    moved.set_epoch(5)
    b = LiveBatches(moved)
    assert a.fingerprint == b.fingerprint
    assert [a.items(s, 1, 3) for s in range(30)] == [b.items(s, 1, 3) for s in range(30)]


def test_top_level_exports_live_batches() -> None:
    assert dataorder.LiveBatches is LiveBatches
    assert "LiveBatches" in dataorder.public_names()


BAD: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("not a sampler", lambda: LiveBatches([1, 2, 3]), TypeError, "sampler must be a dataorder"),
    ("a torch sampler", lambda: LiveBatches(range(4)), TypeError, "got sampler='range'"),
    (
        "unknown mode",
        lambda: _live_of(mode="dynamic"),
        ValueError,
        "mode must be one of 'constant', 'per_participant'; got mode='dynamic'",
    ),
    (
        "participant past the quorum",
        lambda: _live_of().items(0, 3, 3),
        ValueError,
        r"participant must be an int in \[0, participants - 1\]; got participant=3 with "
        "participants=3",
    ),
    ("no participants", lambda: _live_of().items(0, 0, 0), ValueError, "participants=0"),
    ("negative step", lambda: _live_of().items(-1, 0, 1), ValueError, "got step=-1"),
    ("negative step (units)", lambda: _live_of().units(-1), ValueError, "got step=-1"),
    ("negative step (epoch)", lambda: _live_of().epoch_of(-2), ValueError, "got step=-2"),
    ("bool step", lambda: _live_of().items(True, 0, 1), TypeError, "got step=True"),
    (
        "step past any run",
        lambda: _live_of().items(2**62, 0, 1),
        ValueError,
        r"step must fall within the sampler's last epoch \(4294967295\).*"
        "got step=4611686018427387904",
    ),
    (
        "step past int64",
        lambda: _live_of().epoch_of(2**70),
        ValueError,
        "got step=1180591620717411303424",
    ),
    (
        "step past the counted bound of unequal epochs",
        lambda: _blend_live().items(2**40, 0, 1),
        ValueError,
        r"step must be below \d+ \(65536 times the first epoch's \d+ global steps.*"
        "got step=1099511627776",
    ),
    (
        "inner size not dividing",
        lambda: _live_of().items(0, 0, 1, 0, 3),
        ValueError,
        "inner_size must be a divisor of the nominal data-parallel size 4",
    ),
    ("inner rank past", lambda: _live_of().items(0, 0, 1, 2, 2), ValueError, "inner_rank=2"),
    (
        "micro_steps against the global batch",
        lambda: LiveBatches(
            MegatronPretrainingRandomSampler(N, 2, 0, D, seed=1, global_batch_size=24),
            micro_steps=2,
        ),
        ValueError,
        r"micro_steps must be None or 3 .*got micro_steps=2",
    ),
    (
        "batch-size schedule",
        lambda: LiveBatches(
            BlendedSampler(
                [30, 18], [1, 1], 1, 0, 2, BatchSizeSchedule.from_step_schedule("0:2 4:4"), seed=1
            )
        ),
        ValueError,
        "a batch-size schedule is not supported",
    ),
    (
        "per-participant units without participants",
        lambda: _live_of(mode="per_participant").units(0),
        ValueError,
        'participants must be an int with mode="per_participant"',
    ),
]


def _live_of(**kw: Any) -> LiveBatches[Any]:
    return LiveBatches(MegatronPretrainingRandomSampler(N, 2, 0, D, seed=3), **kw)


@pytest.mark.parametrize(("name", "call", "exc", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_naming_it(
    name: str, call: Callable[[], Any], exc: type[Exception], message: str
) -> None:
    with pytest.raises(exc, match=message):
        call()


def test_positions_name_where_a_worker_fetches_each_item() -> None:
    live = _live("packed")
    s = live.sampler
    for step in range(live.global_steps(0) + 2):
        for p in range(3):
            pos = live.positions(step, p, 3)
            assert [s.batch_at(a, rank=r, epoch=e) for e, a, r in pos] == live.items(step, p, 3)
    assert np.all(np.diff([a for _, a, _ in live.positions(0, 0, 1)]) >= 0)
