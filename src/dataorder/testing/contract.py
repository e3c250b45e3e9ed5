"""The sampler contract: checks every dataorder sampler passes, usable on your own samplers too.

A :class:`SamplerCase` says how to build one configuration of a sampler on any rank of any
data-parallel size; :func:`check_contract` runs every check on it and raises ``AssertionError``
with a precise message on the first violation. The project's test suite runs it over a table of
cases (``tests/test_contract.py``); nothing here depends on pytest.

What a sampler must offer: ``__iter__`` (yielding batches as lists of ints, or single ints for a
per-index sampler; a padding slot may be ``None``), ``__len__``, ``set_epoch``, ``state_dict``,
``load_state_dict`` and two counters for the current layout, summed over ranks per epoch:
``samples_dropped`` (real samples no rank reads) and ``samples_padded`` (slots that hold padding:
``None`` or a repeated sample).

Example:
    >>> from dataorder import MegatronPretrainingRandomSampler
    >>> from dataorder.testing import SamplerCase, check_contract
    >>> case = SamplerCase(
    ...     name="megatron-random",
    ...     dataset_size=50,
    ...     world=2,
    ...     make=lambda rank, world: MegatronPretrainingRandomSampler(
    ...         50, micro_batch_size=2, data_parallel_rank=rank, data_parallel_size=world, seed=3),
    ...     elastic_worlds=(1,),
    ... )
    >>> check_contract(case, resume_points=3)
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import pickle
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SamplerCase",
    "check_contract",
    "check_determinism_across_processes",
    "check_elastic_resume",
    "check_epoch_partition",
    "check_repeated_resume",
    "check_resume_at_every_step",
    "check_state_round_trip",
    "flatten",
    "run_epoch",
]

#: Largest state, in bytes of compact JSON, that any sampler may write.
MAX_STATE_BYTES = 512


@dataclass(frozen=True)
class SamplerCase:
    """One sampler configuration, buildable on any rank.

    Attributes:
        name: Shown in failure messages.
        make: ``make(rank, world) -> sampler``; must be deterministic.
        dataset_size: Number of samples in the dataset (indices ``0..dataset_size-1``).
        world: The data-parallel size the main checks use.
        elastic_worlds: Other data-parallel sizes a state saved at ``world`` may be loaded into.
        batched: True if items are batches (lists), False for a per-index sampler.
    """

    name: str
    make: Callable[[int, int], Any]
    dataset_size: int
    world: int
    elastic_worlds: tuple[int, ...] = ()
    batched: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def flatten(items: Sequence[Any], batched: bool) -> list[int | None]:
    """All slots of a list of yielded items, in order."""
    if not batched:
        return list(items)
    return [x for batch in items for x in batch]


def run_epoch(sampler: Any, limit: int | None = None) -> list[Any]:
    """Iterate ``sampler`` once (at most ``limit`` items) and return what it yielded."""
    # islice pulls exactly ``limit`` items: pulling one more would advance the cursor past what
    # the caller consumed, since samplers advance before they yield.
    items = iter(sampler) if limit is None else itertools.islice(sampler, limit)
    return [list(item) if isinstance(item, list) else item for item in items]


def _all_ranks(case: SamplerCase, world: int) -> list[Any]:
    return [case.make(r, world) for r in range(world)]


def check_epoch_partition(case: SamplerCase, epoch: int = 0) -> None:
    """Equal batch counts, ``len()`` exact, no empty batch, disjoint ranks and full coverage."""
    samplers = _all_ranks(case, case.world)
    per_rank = []
    for r, s in enumerate(samplers):
        s.set_epoch(epoch)
        expected_len = len(s)
        got = run_epoch(s)
        assert len(got) == expected_len, (
            f"{case.name}: rank {r} len()={expected_len} but yielded {len(got)}"
        )
        if case.batched:
            assert all(len(b) > 0 for b in got), f"{case.name}: rank {r} yielded an empty batch"
        per_rank.append(got)
    counts = [len(x) for x in per_rank]
    assert len(set(counts)) == 1, f"{case.name}: unequal batch counts across ranks {counts}"
    if case.batched:
        for step in range(counts[0]):
            sizes = {len(per_rank[r][step]) for r in range(case.world)}
            assert len(sizes) == 1, f"{case.name}: step {step} batch sizes differ {sizes}"
    slots = [x for got in per_rank for x in flatten(got, case.batched)]
    reals = [x for x in slots if x is not None]
    nones = len(slots) - len(reals)
    bad = [x for x in reals if not (0 <= x < case.dataset_size)]
    assert not bad, f"{case.name}: indices outside the dataset: {bad[:5]}"
    distinct = set(reals)
    dropped, padded = samplers[0].samples_dropped, samplers[0].samples_padded
    assert len(distinct) == case.dataset_size - dropped, (
        f"{case.name}: {len(distinct)} distinct samples read, expected "
        f"{case.dataset_size} - {dropped} dropped"
    )
    duplicates = len(reals) - len(distinct)
    assert duplicates + nones == padded, (
        f"{case.name}: {duplicates} repeated + {nones} None slots, but samples_padded={padded}"
    )


def check_state_round_trip(case: SamplerCase) -> None:
    """The state is small, JSON- and pickle-safe, and loading it never mutates it."""
    s = case.make(0, case.world)
    run_epoch(s, limit=max(1, len(s) // 2))
    state = s.state_dict()
    text = json.dumps(state, separators=(",", ":"))
    assert len(text) <= MAX_STATE_BYTES, f"{case.name}: state is {len(text)} bytes: {text}"
    assert json.loads(text) == state, f"{case.name}: state does not survive JSON"
    assert pickle.loads(pickle.dumps(state)) == state, f"{case.name}: state does not survive pickle"
    frozen = copy.deepcopy(state)
    t = case.make(0, case.world)
    t.load_state_dict(state)
    assert state == frozen, f"{case.name}: load_state_dict mutated its argument"
    assert t.state_dict() == state, f"{case.name}: state differs after a load"


def _resume_points(total: int, budget: int) -> list[int]:
    if total + 1 <= budget:
        return list(range(total + 1))
    step = max(1, total // max(1, budget - 2))
    return sorted({0, 1, total - 1, total, *range(0, total, step)})


def check_resume_at_every_step(case: SamplerCase, budget: int = 40) -> None:
    """Stop after ``k`` items, restore into a fresh sampler: the rest is identical (per rank).

    At ``k == len(epoch)`` (a checkpoint after the last batch, before the iterator noticed the
    end) the restored sampler yields an empty pass, and the pass after it is epoch 1; the usual
    resumed loop calling ``set_epoch(saved_epoch)`` gets the same. A state saved after a pass ran
    to its end resumes at epoch 1. Also across the epoch boundary: epoch 0 entirely, ``k`` items
    of epoch 1, then restore.
    """
    for r in range(case.world):
        ref = case.make(r, case.world)
        full0 = run_epoch(ref)
        full1 = run_epoch(ref)  # the exhausted pass moved the cursor to epoch 1
        for k in _resume_points(len(full0), budget):
            a = case.make(r, case.world)
            head = run_epoch(a, limit=k)
            b = case.make(r, case.world)
            b.load_state_dict(json.loads(json.dumps(a.state_dict())))
            assert len(b) == len(full0) - k, (
                f"{case.name}: rank {r} after resume at {k}: len()={len(b)}, "
                f"expected {len(full0) - k}"
            )
            tail = run_epoch(b)
            assert head + tail == full0, f"{case.name}: rank {r} resume at item {k} diverges"
            if k in (0, len(full0)):
                assert run_epoch(b) == full1, (
                    f"{case.name}: rank {r} the pass after a resume at {k} is not epoch 1"
                )
        # the resumed loop's set_epoch(saved epoch) on a state saved after the last batch
        a = case.make(r, case.world)
        run_epoch(a, limit=len(full0))
        b = case.make(r, case.world)
        b.load_state_dict(a.state_dict())
        b.set_epoch(0)
        assert len(b) == 0, f"{case.name}: rank {r} len()={len(b)} for a finished epoch"
        assert run_epoch(b) == [], f"{case.name}: rank {r} a finished epoch yielded batches"
        b.set_epoch(1)
        assert run_epoch(b) == full1, f"{case.name}: rank {r} epoch 1 after an end-of-epoch resume"
        # a state saved after the pass ran out resumes at epoch 1
        a = case.make(r, case.world)
        run_epoch(a)
        b = case.make(r, case.world)
        b.load_state_dict(a.state_dict())
        assert run_epoch(b) == full1, f"{case.name}: rank {r} state after a full pass"
        for k in _resume_points(len(full1), budget // 4 + 2):
            a = case.make(r, case.world)
            run_epoch(a)
            a.set_epoch(1)
            run_epoch(a, limit=k)
            b = case.make(r, case.world)
            b.load_state_dict(a.state_dict())
            assert len(b) == len(full1) - k, f"{case.name}: rank {r} epoch-1 len() at {k}"
            assert run_epoch(b) == full1[k:], (
                f"{case.name}: rank {r} epoch-1 resume at {k} diverges"
            )


def check_repeated_resume(case: SamplerCase, segments: Sequence[int] = (1, 2, 3, 1)) -> None:
    """Several successive resumes reproduce the uninterrupted epoch (NeMo's is exact only once)."""
    for r in range(case.world):
        full = run_epoch(case.make(r, case.world))
        got: list[Any] = []
        state = None
        for seg in [*segments, len(full)]:
            s = case.make(r, case.world)
            if state is not None:
                s.load_state_dict(state)
            got += run_epoch(s, limit=seg)
            state = s.state_dict()
            if len(got) >= len(full):
                break
        assert got == full, f"{case.name}: rank {r} repeated resume diverges"


def check_elastic_resume(case: SamplerCase, new_world: int) -> None:
    """Save on ``case.world`` ranks, continue on ``new_world``: nothing repeated or skipped."""
    old = _all_ranks(case, case.world)
    epoch_len = len(old[0])
    stop = epoch_len // 2
    seen: list[int | None] = []
    for s in old:
        seen += flatten(run_epoch(s, limit=stop), case.batched)
    state = old[0].state_dict()
    for s in old[1:]:
        assert s.state_dict() == state, f"{case.name}: ranks disagree on the global state"
    new = _all_ranks(case, new_world)
    for s in new:
        s.load_state_dict(state)
    lens = {len(s) for s in new}
    assert len(lens) == 1, f"{case.name}: unequal len() after elastic resume {lens}"
    for s in new:
        seen += flatten(run_epoch(s), case.batched)
    reals = [x for x in seen if x is not None]
    counts = Counter(reals)
    repeats = sum(c - 1 for c in counts.values())
    padded = old[0].samples_padded + new[0].samples_padded
    assert repeats <= padded, (
        f"{case.name}: {repeats} samples repeated across the {case.world}->{new_world} restart"
    )
    missing = case.dataset_size - len(counts)
    dropped = old[0].samples_dropped + new[0].samples_dropped
    assert missing <= dropped, (
        f"{case.name}: {missing} samples skipped across the {case.world}->{new_world} restart"
    )


_CHILD = """
import pickle, sys
s = pickle.loads(sys.stdin.buffer.read())
out = [list(b) if isinstance(b, list) else b for b in s]
sys.stdout.buffer.write(pickle.dumps(out))
"""


def check_determinism_across_processes(case: SamplerCase) -> None:
    """A pickled sampler yields the same order in a fresh interpreter with another hash seed."""
    s = case.make(case.world - 1, case.world)
    s.set_epoch(1)
    expected = run_epoch(copy.deepcopy(s))
    # the child must import whatever module defines the sampler's class, as the parent does
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=pickle.dumps(s),
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"{case.name}: child failed: {proc.stderr.decode()[-2000:]}"
    assert pickle.loads(proc.stdout) == expected, f"{case.name}: order differs across processes"


def check_contract(case: SamplerCase, *, resume_points: int = 40, processes: bool = False) -> None:
    """Run every check on ``case``; raise ``AssertionError`` on the first violation."""
    check_epoch_partition(case, epoch=0)
    check_epoch_partition(case, epoch=3)
    check_state_round_trip(case)
    check_resume_at_every_step(case, budget=resume_points)
    check_repeated_resume(case)
    for w in case.elastic_worlds:
        check_elastic_resume(case, w)
    if processes:
        check_determinism_across_processes(case)
