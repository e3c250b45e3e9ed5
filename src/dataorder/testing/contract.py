"""The sampler contract: checks every dataorder sampler passes, usable on your own samplers too.

A :class:`SamplerCase` says how to build one configuration of a sampler on any rank of any
data-parallel size; :func:`check_contract` runs every check on it and raises
:class:`ContractViolation` with a precise message on the first violation. Checks raise
explicitly (never a bare ``assert``), so they hold under ``python -O``. Nothing here depends on
pytest. The loop recipes (DataLoader, StatefulDataLoader, Accelerate, Lightning, a peek) are in
:mod:`dataorder.testing.recipes`; :func:`check_contract` runs them too.

What a sampler must offer: ``__iter__``, ``__len__`` (a whole epoch on this rank),
``set_epoch``, ``state_dict``, ``load_state_dict`` and two counters for the current layout,
summed over ranks per epoch, of units no rank reads and of padding. What an item is and what its
slots cover is the sampler's batching rule (``sampler.batching``, :mod:`dataorder.core.batching`,
NOTE [ Coverage ]): batches (lists) of sample indices by default, or single indices for a
per-index sampler (``SamplerCase(batched=False)``), with ``None`` as a padding slot and the
counters ``samples_dropped`` and ``samples_padded`` (a repeated sample counts as padding); a
packed sampler's rows cover tokens of documents (``SamplerCase(extents=...)``) and its counters
are ``tokens_dropped`` and ``tokens_padded``. dataorder's samplers also offer ``remaining`` and
``batch_at``, which the checks use when present.

Example:
    >>> from dataorder import MegatronPretrainingRandomSampler
    >>> from dataorder.testing import SamplerCase, check_epoch_partition
    >>> case = SamplerCase(
    ...     name="megatron-random",
    ...     dataset_size=50,
    ...     dp_size=2,
    ...     make=lambda rank, size: MegatronPretrainingRandomSampler(
    ...         50, micro_batch_size=2, data_parallel_rank=rank, data_parallel_size=size, seed=3),
    ...     elastic_dp_sizes=(1,),
    ... )
    >>> check_epoch_partition(case)  # one check; check_contract runs them all
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dataorder.core.batching import BatchRule, Coverage, coverage, read_spans, rule_of
from dataorder.core.state import MAX_STATE_BYTES

__all__ = [
    "MAX_STATE_BYTES",
    "ContractViolation",
    "SamplerCase",
    "check_batch_at",
    "check_determinism_across_processes",
    "check_elastic_resume",
    "check_epoch_partition",
    "check_forgotten_set_epoch",
    "check_passes_and_placement",
    "check_peek",
    "check_repeated_resume",
    "check_resume_at_every_step",
    "check_state_round_trip",
    "flatten",
    "run_epoch",
]


class ContractViolation(AssertionError):
    """A sampler broke the contract; the message says which check, rank and step."""


def _require(condition: bool, message: str) -> None:
    """Raise :class:`ContractViolation` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ContractViolation(message)


@dataclass(frozen=True)
class SamplerCase:
    """One sampler configuration, buildable on any rank.

    Attributes:
        name: Shown in failure messages.
        make: ``make(rank, dp_size) -> sampler``; must be deterministic.
        dataset_size: Number of samples in the dataset (indices ``0..dataset_size-1``), or of
            documents when ``extents`` is given.
        dp_size: The data-parallel size the main checks use.
        elastic_dp_sizes: Other data-parallel sizes a state saved at ``dp_size`` may be loaded
            into.
        batched: True if items are batches (lists), False for a per-index sampler (a sampler
            without a ``batching`` rule; one with a rule is read through it).
        loader_batch_size: For a per-index sampler, the batch size the loop recipes use.
        extents: For a sampler whose slots cover tokens (packed rows), each document's tokens;
            None when a slot covers one sample.
        extra: Free-form notes for the caller.
    """

    name: str
    make: Callable[[int, int], Any]
    dataset_size: int
    dp_size: int
    elastic_dp_sizes: tuple[int, ...] = ()
    batched: bool = True
    loader_batch_size: int = 2
    extents: Sequence[int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def rule(self, sampler: Any) -> BatchRule:
        """How ``sampler``'s items are read (its ``batching`` rule, else by :attr:`batched`)."""
        return rule_of(sampler, batched=self.batched)

    @property
    def universe(self) -> int:
        """Units of the dataset: its samples, or every token of every document."""
        return self.dataset_size if self.extents is None else int(sum(self.extents))


@dataclass(frozen=True)
class _Read:
    """What some items cover, through their sampler's batching rule (NOTE [ Coverage ])."""

    coverage: Coverage
    padding: int
    outside: list[tuple[int, int, int]]


def _read(case: SamplerCase, rule: BatchRule, items: Sequence[Any]) -> _Read:
    read = read_spans(rule, items)
    (k, a, b), padding = read.spans, read.padding
    if case.extents is None:
        limit = np.ones(k.shape, dtype=np.int64)
        inside = (k >= 0) & (k < case.dataset_size)
    else:
        extents = np.asarray(case.extents, dtype=np.int64)
        inside = (k >= 0) & (k < extents.size)
        limit = np.where(inside, extents[np.clip(k, 0, max(0, extents.size - 1))], 0)
    inside &= (a >= 0) & (b > a) & (b <= limit)
    bad = np.flatnonzero(~inside)[:5]
    outside = [(int(k[i]), int(a[i]), int(b[i])) for i in bad]
    return _Read(coverage((k[inside], a[inside], b[inside])), padding, outside)


def flatten(items: Sequence[Any], batched: bool) -> list[Any]:
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


def _all_ranks(case: SamplerCase, dp_size: int) -> list[Any]:
    return [case.make(r, dp_size) for r in range(dp_size)]


def _epochs(case: SamplerCase, rank: int, count: int) -> list[list[Any]]:
    """Epochs ``0 .. count - 1`` of ``rank``, each read after ``set_epoch``."""
    out = []
    for e in range(count):
        s = case.make(rank, case.dp_size)
        s.set_epoch(e)
        out.append(run_epoch(s))
    return out


def check_epoch_partition(case: SamplerCase, epoch: int = 0) -> None:
    """Equal batch counts, ``len()`` exact, no empty batch, disjoint ranks and full coverage
    (NOTE [ Coverage ] in :mod:`dataorder.core.batching`)."""
    samplers = _all_ranks(case, case.dp_size)
    rule = case.rule(samplers[0])
    per_rank = []
    for r, s in enumerate(samplers):
        s.set_epoch(epoch)
        expected_len = len(s)
        got = run_epoch(s)
        _require(
            len(got) == expected_len,
            f"{case.name}: rank {r} len()={expected_len} but yielded {len(got)}",
        )
        if rule.batched:
            _require(
                all(len(rule.slots(b)) > 0 for b in got),
                f"{case.name}: rank {r} yielded an empty batch",
            )
        per_rank.append(got)
    counts = [len(x) for x in per_rank]
    _require(len(set(counts)) == 1, f"{case.name}: unequal batch counts across ranks {counts}")
    if rule.batched:
        for step in range(counts[0]):
            sizes = {len(rule.slots(per_rank[r][step])) for r in range(case.dp_size)}
            _require(len(sizes) == 1, f"{case.name}: step {step} batch sizes differ {sizes}")
    read = _read(case, rule, [item for got in per_rank for item in got])
    _require(not read.outside, f"{case.name}: spans outside the dataset: {read.outside}")
    dropped = getattr(samplers[0], rule.dropped_counter)
    padded = getattr(samplers[0], rule.padded_counter)
    unit = f"{rule.unit}s"
    _require(
        read.coverage.distinct == case.universe - dropped,
        (
            f"{case.name}: {read.coverage.distinct} distinct {unit} read, expected "
            f"{case.universe} - {dropped} dropped"
        ),
    )
    _require(
        read.coverage.repeated + read.padding == padded,
        (
            f"{case.name}: {read.coverage.repeated} repeated + {read.padding} padding {unit}, but "
            f"{rule.padded_counter}={padded}"
        ),
    )


def check_state_round_trip(case: SamplerCase) -> None:
    """The state is small (``MAX_STATE_BYTES``, or the sampler's own ``max_state_bytes``: a
    :class:`~dataorder.llm.vsl.VariableLengthSampler`'s grows with its chunk lengths), JSON- and
    pickle-safe, and loading it never mutates it."""
    s = case.make(0, case.dp_size)
    run_epoch(s, limit=max(1, len(s) // 2))
    state = s.state_dict()
    text = json.dumps(state, separators=(",", ":"))
    limit = getattr(s, "max_state_bytes", MAX_STATE_BYTES)
    _require(len(text) <= limit, f"{case.name}: state is {len(text)} bytes > {limit}: {text}")
    _require(json.loads(text) == state, f"{case.name}: state does not survive JSON")
    _require(
        pickle.loads(pickle.dumps(state)) == state,
        f"{case.name}: state does not survive pickle",
    )
    frozen = copy.deepcopy(state)
    t = case.make(0, case.dp_size)
    t.load_state_dict(state)
    _require(state == frozen, f"{case.name}: load_state_dict mutated its argument")
    _require(t.state_dict() == state, f"{case.name}: state differs after a load")


def _resume_points(total: int, budget: int) -> list[int]:
    if total + 1 <= budget:
        return list(range(total + 1))
    step = max(1, total // max(1, budget - 2))
    return sorted({0, 1, total - 1, total, *range(0, total, step)})


def _remaining(sampler: Any) -> int | None:
    value = getattr(sampler, "remaining", None)
    return value if isinstance(value, int) else None


def check_resume_at_every_step(case: SamplerCase, budget: int = 40) -> None:
    """Stop after ``k`` items, restore into a fresh sampler: the rest is identical (per rank).

    ``len()`` stays a whole epoch after the restore, and ``remaining`` is what is left. A state
    saved after the epoch's last batch (by a pass that ran to its end or not) describes that
    epoch: the restored sampler yields an empty pass, then epoch 1, and the usual resumed loop
    (``set_epoch(saved epoch)``, then the next) gets the same. Also across the epoch boundary:
    epoch 0 entirely, ``k`` items of epoch 1, then restore.
    """
    for r in range(case.dp_size):
        full0, full1 = _epochs(case, r, 2)
        for k in _resume_points(len(full0), budget):
            a = case.make(r, case.dp_size)
            head = run_epoch(a, limit=k)
            b = case.make(r, case.dp_size)
            b.load_state_dict(json.loads(json.dumps(a.state_dict())))
            _require(
                len(b) == len(full0),
                (
                    f"{case.name}: rank {r} after resume at {k}: len()={len(b)}, expected a "
                    f"whole epoch {len(full0)}"
                ),
            )
            rem = _remaining(b)
            _require(
                rem is None or rem == len(full0) - k,
                (
                    f"{case.name}: rank {r} after resume at {k}: remaining={rem}, "
                    f"expected {len(full0) - k}"
                ),
            )
            tail = run_epoch(b)
            _require(head + tail == full0, f"{case.name}: rank {r} resume at item {k} diverges")
            if k == len(full0):
                _require(
                    run_epoch(b) == full1,
                    (f"{case.name}: rank {r} the pass after an end-of-epoch resume is not epoch 1"),
                )
        # states saved after the last batch, by a pass that ran out or not: the resumed loop's
        # set_epoch(saved epoch) gives an empty pass, set_epoch(1) epoch 1
        for limit in (len(full0), None):
            a = case.make(r, case.dp_size)
            run_epoch(a, limit=limit)
            state = a.state_dict()
            _require(
                state.get("epoch", 0) == 0,
                (
                    f"{case.name}: rank {r} a state saved at the end of epoch 0 says "
                    f"epoch {state.get('epoch')}"
                ),
            )
            b = case.make(r, case.dp_size)
            b.load_state_dict(state)
            b.set_epoch(0)
            _require(
                len(b) == len(full0),
                (
                    f"{case.name}: rank {r} len()={len(b)} for a finished epoch; expected "
                    f"a whole epoch {len(full0)}"
                ),
            )
            rem = _remaining(b)
            _require(rem in (None, 0), f"{case.name}: rank {r} remaining={rem} at an epoch's end")
            _require(
                run_epoch(b) == [],
                f"{case.name}: rank {r} a finished epoch yielded batches",
            )
            b.set_epoch(1)
            _require(
                run_epoch(b) == full1,
                f"{case.name}: rank {r} epoch 1 after an end-of-epoch resume",
            )
        for k in _resume_points(len(full1), budget // 4 + 2):
            a = case.make(r, case.dp_size)
            a.set_epoch(1)
            run_epoch(a, limit=k)
            b = case.make(r, case.dp_size)
            b.load_state_dict(a.state_dict())
            rem = _remaining(b)
            _require(
                rem is None or rem == len(full1) - k,
                f"{case.name}: rank {r} epoch-1 remaining={rem} at {k}",
            )
            _require(
                run_epoch(b) == full1[k:],
                f"{case.name}: rank {r} epoch-1 resume at {k} diverges",
            )


def check_repeated_resume(case: SamplerCase, segments: Sequence[int] = (1, 2, 3, 1)) -> None:
    """Several successive resumes reproduce the uninterrupted epoch (NeMo's is exact only once)."""
    for r in range(case.dp_size):
        full = run_epoch(case.make(r, case.dp_size))
        got: list[Any] = []
        state = None
        for seg in [*segments, len(full)]:
            s = case.make(r, case.dp_size)
            if state is not None:
                s.load_state_dict(state)
            got += run_epoch(s, limit=seg)
            state = s.state_dict()
            if len(got) >= len(full):
                break
        _require(got == full, f"{case.name}: rank {r} repeated resume diverges")


def check_peek(case: SamplerCase) -> None:
    """A peek (one batch of an abandoned pass) costs nothing, with or without ``set_epoch``.

    With ``set_epoch(0)`` after the peek the next pass is the whole epoch; without it, too, as
    long as the peek did not reach the epoch's end (a pass that hands out an epoch's last batch
    completes it). Also after a resume: the peeked pass restarts at the resumed position.
    """
    for r in range(case.dp_size):
        (full,) = _epochs(case, r, 1)
        for call_set_epoch in (True, False):
            if not call_set_epoch and len(full) < 2:
                continue
            s = case.make(r, case.dp_size)
            run_epoch(s, limit=1)  # the peek
            if call_set_epoch:
                s.set_epoch(0)
            got = run_epoch(s)
            _require(
                got == full,
                (
                    f"{case.name}: rank {r} a peek (set_epoch={call_set_epoch}) changed the "
                    f"epoch: {len(got)} batches against {len(full)}"
                ),
            )
        k = len(full) // 2
        if 0 < k < len(full) - 1:
            a = case.make(r, case.dp_size)
            run_epoch(a, limit=k)
            b = case.make(r, case.dp_size)
            b.load_state_dict(a.state_dict())
            run_epoch(b, limit=1)
            _require(
                run_epoch(b) == full[k:],
                f"{case.name}: rank {r} a peek after a resume at {k} lost data",
            )


def check_forgotten_set_epoch(case: SamplerCase, passes: int = 3) -> None:
    """Passes without ``set_epoch`` read epochs 0, 1, 2, ...: never the same epoch twice."""
    for r in range(case.dp_size):
        expected = _epochs(case, r, passes)
        s = case.make(r, case.dp_size)
        for e in range(passes):
            got = run_epoch(s)
            _require(
                got == expected[e],
                f"{case.name}: rank {r} pass {e} without set_epoch is not epoch {e}",
            )


def check_passes_and_placement(case: SamplerCase) -> None:
    """Which events end a running pass (NOTE [ The loop contract ]); ``len()`` never moves.

    A second pass (a peek inside the loop) and ``set_epoch`` of the current epoch (Lightning and
    Accelerate start the loader before they call it) leave a running pass alone; ``set_epoch``
    of another epoch and ``load_state_dict`` end it. A loaded epoch the loop owns, once a pass
    has run it out, gives empty passes (a loader replaying its restore); a state of an earlier
    epoch loaded after the loop said ``set_epoch(e)`` keeps ``e``'s start.
    """
    full0, full1 = _epochs(case, 0, 2)
    if len(full0) < 2:
        return  # nothing to interrupt
    s = case.make(0, case.dp_size)
    it = iter(s)
    head = [next(it)]
    _require(len(s) == len(full0), f"{case.name}: len() changed during a pass")
    peek = next(iter(s))
    _require(peek == full0[0], f"{case.name}: a second pass did not start at the origin")
    s.set_epoch(0)
    _require(
        head + list(it) == full0,
        f"{case.name}: a running pass did not go on after a peek and set_epoch of its own epoch",
    )
    s = case.make(0, case.dp_size)
    it = iter(s)
    next(it)
    s.set_epoch(1)
    rest = list(itertools.islice(it, 1))
    _require(rest == [], f"{case.name}: a pass went on after set_epoch placed the cursor")
    _require(run_epoch(s) == full1, f"{case.name}: set_epoch(1) did not read epoch 1")
    # a loaded epoch the loop owns: after a pass ran it out, further passes are empty
    saved = case.make(0, case.dp_size)
    run_epoch(saved, limit=1)
    t = case.make(0, case.dp_size)
    t.set_epoch(0)
    t.load_state_dict(saved.state_dict())
    _require(run_epoch(t) == full0[1:], f"{case.name}: a loaded epoch did not resume")
    again = run_epoch(t)
    _require(again == [], f"{case.name}: a run-out loaded epoch gave {len(again)} more batches")
    # the loop said epoch 1 before it loaded the end of epoch 0: epoch 1 is read
    done = case.make(0, case.dp_size)
    run_epoch(done)
    u = case.make(0, case.dp_size)
    u.set_epoch(1)
    u.load_state_dict(done.state_dict())
    _require(
        run_epoch(u) == full1,
        f"{case.name}: the end of epoch 0 loaded after set_epoch(1) did not read epoch 1",
    )


def check_batch_at(case: SamplerCase, epoch: int = 0) -> None:
    """``batch_at(step, rank=, epoch=)`` is exactly what iteration yields, and moves nothing."""
    probe = case.make(0, case.dp_size)
    if not hasattr(probe, "batch_at"):
        return
    for r in range(case.dp_size):
        (got,) = _epochs(case, r, 1) if epoch == 0 else [[]]
        if epoch:
            s = case.make(r, case.dp_size)
            s.set_epoch(epoch)
            got = run_epoch(s)
        before = probe.state_dict()
        asked = [probe.batch_at(k, rank=r, epoch=epoch) for k in range(len(got))]
        asked = [list(x) if isinstance(x, list) else x for x in asked]
        _require(asked == got, f"{case.name}: batch_at(rank={r}) differs from iteration")
        _require(probe.state_dict() == before, f"{case.name}: batch_at moved the cursor")


def check_elastic_resume(case: SamplerCase, new_dp_size: int) -> None:
    """Save on ``case.dp_size`` ranks, continue on ``new_dp_size``: nothing repeated or skipped.

    Exact when neither layout drops or pads (every sample read exactly once); otherwise repeats
    and skips are bounded by what the two layouts declare.
    """
    old = _all_ranks(case, case.dp_size)
    rule = case.rule(old[0])
    epoch_len = len(old[0])
    stop = epoch_len // 2
    seen: list[Any] = []
    for s in old:
        seen += run_epoch(s, limit=stop)
    state = old[0].state_dict()
    for s in old[1:]:
        _require(s.state_dict() == state, f"{case.name}: ranks disagree on the global state")
    new = _all_ranks(case, new_dp_size)
    for s in new:
        s.load_state_dict(state)
    lens = {_remaining(s) for s in new}
    _require(len(lens) == 1, f"{case.name}: unequal remaining after elastic resume {lens}")
    for s in new:
        seen += run_epoch(s)
    read = _read(case, rule, seen)
    _require(not read.outside, f"{case.name}: spans outside the dataset: {read.outside}")
    repeats = read.coverage.repeated
    missing = case.universe - read.coverage.distinct
    padded = getattr(old[0], rule.padded_counter) + getattr(new[0], rule.padded_counter)
    dropped = getattr(old[0], rule.dropped_counter) + getattr(new[0], rule.dropped_counter)
    unit = f"{rule.unit}s"
    if padded == 0 and dropped == 0:
        _require(
            repeats == 0 and missing == 0 and read.padding == 0,
            (
                f"{case.name}: {repeats} {unit} repeated, {missing} skipped across the "
                f"{case.dp_size}->{new_dp_size} restart (both layouts read every one once)"
            ),
        )
    _require(
        repeats <= padded,
        f"{case.name}: {repeats} {unit} repeated across the {case.dp_size}->{new_dp_size} restart",
    )
    _require(
        missing <= dropped,
        f"{case.name}: {missing} {unit} skipped across the {case.dp_size}->{new_dp_size} restart",
    )


_CHILD = """
import pickle, sys
s = pickle.loads(sys.stdin.buffer.read())
out = [list(b) if isinstance(b, list) else b for b in s]
sys.stdout.buffer.write(pickle.dumps(out))
"""


def check_determinism_across_processes(case: SamplerCase) -> None:
    """A pickled sampler yields the same order in a fresh interpreter with another hash seed."""
    s = case.make(case.dp_size - 1, case.dp_size)
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
    _require(
        proc.returncode == 0,
        f"{case.name}: child failed: {proc.stderr.decode()[-2000:]}",
    )
    _require(
        pickle.loads(proc.stdout) == expected,
        f"{case.name}: order differs across processes",
    )
