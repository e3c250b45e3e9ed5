"""Hostile states: checkpoints taken anywhere, loaded into an edited run, and the
largest state each sampler can write.

Two families, each a table, each call under a hang guard (a hang detector, not a speed test):

* **States saved at every micro-step crossed with schedule edits.** A ``BlendedSampler`` run is
  saved after every micro-step of its first epoch; each state is loaded into samplers whose
  ``MixtureSchedule`` is edited from a sample ``X`` on: before the global batch under way, at
  its start, at the saved position, inside it, at its end, after it (and, for a run with a ramp,
  inside the ramp). The load must either refuse, naming the entry and the first sample an edit
  may start at, or continue so that the run reads exactly what an uninterrupted run with the
  edited schedule reads: nothing repeated, nothing lost. Which it must do is decided here, from
  the edit, without the library's digest: an edit must be refused iff it starts before ``E``,
  the end of the global batch under way (the saved position itself at a global-batch
  boundary), or reshapes a ramp that started before ``E``.
* **Packed states saved at every micro-step crossed with layouts and edits.** A
  ``PackedSampler`` job (one corpus under both splits, padded global batches, a mixture, a
  mixture over a log that grows one corpus and retires the other) is saved
  after every micro-step and loaded on other layouts: a layout whose block divides the rows
  consumed continues with exactly the rows an uninterrupted run on it reads, any other is
  refused naming the block (or, past the epoch's real rows, reads nothing). Its states are then
  edited in every field (cut, another value with the fingerprint forged to match, the wrong type,
  past int64, extra keys): a ValueError naming the key, the state unmutated, or a legal state
  that reads what ``batch_at`` says is there. The schedule-edit family above runs over packed
  mixtures too (rows instead of samples, compared per global batch: rows are dealt by cost).
* **The worst-case state of every sampler and mode.** Each is built with every field at its
  documented cap at once (seed, epoch, sizes, batch and data-parallel sizes), placed after the
  last step of its largest epoch, and its compact JSON must fit ``MAX_STATE_BYTES`` (NOTE
  [ State size ] in :mod:`dataorder.core.state`). A bucket dataset of ``2**62`` samples cannot
  be built, so the bucket samplers' position fields are widened to the caps the partition
  enforces; every other state is one the sampler itself writes.

``test_the_judges_can_fail`` proves each verdict fires on a sampler that deserves it (the 0.2.0
trained-part check, an oversized state, a call that does not return).
"""

from __future__ import annotations

import copy
import functools
import json
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from dataorder import (
    BaseMultiresolutionDataset,
    BatchSizeSchedule,
    BlendedSampler,
    DistributedSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    SequentialBucketSampler,
)
from dataorder.core.keys import MAX_SEED
from dataorder.core.partition import MAX_BATCH_SIZE, MAX_POSITIONS
from dataorder.core.state import MAX_EPOCH, MAX_STATE_BYTES, config_fingerprint
from dataorder.core.topology import MAX_DP_SIZE
from dataorder.diffusion.sampler.plan import MAX_INTERLEAVE_UNIT
from dataorder.llm.blend_order import BlendOrder
from dataorder.llm.mixlog import MixtureLog
from dataorder.llm.mixture import MixtureSchedule, Ramp
from dataorder.llm.packing import DocumentLengths, PackedSampler
from dataorder.llm.packing.lengths import MAX_DOCUMENTS, MAX_LENGTH
from dataorder.llm.packing.plan import MAX_CHUNK, MAX_SEQ_LEN, MAX_WINDOW
from dataorder.llm.packing.sampler import MAX_BLOCK_ROWS
from dataorder.llm.vsl import (
    CURRICULA,
    LENGTHS_WITHIN_BOUND,
    STATE_BYTES_PER_LENGTH,
    VariableLengthSampler,
)
from tests.helpers.hang import Hang, hang_guard

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="the hang guard needs signal.setitimer (POSIX)"
)

#: Seconds one case may take before it counts as a hang.
HANG_SECONDS = 10.0


# -- family 1: states saved at every micro-step x schedule edits ----------------------------------

Entries = Sequence[tuple[int, Any]]


@dataclass(frozen=True, eq=False)  # hashed by identity: a cache key
class Run:
    """A blended run: what the checkpoint was written by, and the layout it is loaded on."""

    name: str
    sizes: tuple[int, ...]
    entries: tuple[tuple[int, Any], ...]
    batches: Any  # an int or a BatchSizeSchedule
    seed: int
    total: int
    save: tuple[int, int]  # micro_batch_size, data_parallel_size
    load: tuple[int, int]
    #: "blended": samples of sources of ``sizes``; "packed": a PackedSampler mixture whose
    #: sources hold ``sizes[d]`` documents of lengths from PACKED_LENGTHS, its positions rows
    kind: str = "blended"

    def samplers(self, entries: Entries, layout: tuple[int, int]) -> list[Any]:
        mbs, dp = layout
        schedule = MixtureSchedule(list(entries))
        if self.kind == "packed":
            sources = [PACKED_LENGTHS[: self.sizes[d]] for d in range(len(self.sizes))]
            return [
                PackedSampler(
                    None, 16, mbs, r, dp, self.batches, seed=self.seed, chunk=2, window=6,
                    mixture=(sources, schedule), total_rows=self.total,
                )
                for r in range(dp)
            ]  # fmt: skip
        return [
            BlendedSampler(
                list(self.sizes), schedule, mbs, r, dp, self.batches, seed=self.seed,
                total_samples=self.total,
            )
            for r in range(dp)
        ]  # fmt: skip

    def batch_sizes(self) -> BatchSizeSchedule:
        b = self.batches
        return b if isinstance(b, BatchSizeSchedule) else BatchSizeSchedule.constant(b)


#: Document lengths of the packed runs' sources (source d: the first sizes[d] of them).
PACKED_LENGTHS = [int(x) for x in np.random.default_rng(7).integers(0, 40, 40)]

RUNS = [
    # the reported run: two ranks, global batches of 16, one constant entry
    Run("reported", (50, 30, 20), ((0, [1, 1, 1]),), 16, 3, 100, (2, 2), (2, 2)),
    # a batch-size ramp-up (4, then 8, then 12) under a ramp entry; loaded on 4 ranks of 1
    Run(
        "rampup",
        (9, 14, 5),
        ((0, [3, 1, 0]), (10, Ramp([3, 1, 0], [1, 3, 2])), (30, [1, 3, 2])),
        BatchSizeSchedule.from_step_schedule("0:4 8:8 24:12"),
        7,
        60,
        (2, 2),
        (1, 4),
    ),
    # three ranks of one, a tiny weight, entries at and inside global batches; loaded on 1 rank
    Run(
        "tiny weight",
        (5, 6, 7, 40),
        ((0, [1, 1, 1, 1e-3]), (9, [0, 2, 1, 5]), (20, [1, 0, 0, 1])),
        6,
        11,
        36,
        (1, 3),
        (3, 1),
    ),
    # the same families over packed rows (PackedSampler(mixture=...)): rows, not samples, are
    # apportioned, and a global batch's rows are dealt to ranks by cost
    Run("packed", (30, 20, 12), ((0, [1, 1, 1]),), 8, 3, 48, (2, 2), (1, 4), kind="packed"),
    Run(
        "packed rampup",
        (18, 30),
        ((0, [3, 1]), (8, Ramp([3, 1], [1, 3])), (24, [1, 3])),
        BatchSizeSchedule.from_step_schedule("0:4 4:8"),
        5,
        40,
        (2, 2),
        (1, 2),
        kind="packed",
    ),
]


def batch_of(run: Run, position: int) -> tuple[int, int]:
    """The global batch ``[a, b)`` that holds run position ``position``, walked step by step."""
    batches, start, step = run.batch_sizes(), 0, 0
    while start + batches.global_batch_size(step) <= position:
        start += batches.global_batch_size(step)
        step += 1
    return start, start + batches.global_batch_size(step)


def batch_end(run: Run, saved: int) -> tuple[int, int]:
    """``(a, E)``: where the global batch under way at ``saved`` starts and ends; ``a == E ==
    saved`` at a global-batch boundary (the next batch has not started)."""
    a, b = batch_of(run, saved)
    return (saved, saved) if a == saved else (a, b)


def edit_points(run: Run, saved: int) -> dict[str, int]:
    """Where an edit may start, by name, relative to the global batch under way."""
    a, e = batch_end(run, saved)
    points = {
        "from scratch": 0,
        "before the batch": a - 1,
        "at the batch's start": a,
        "at the saved position": saved,
        "inside the batch": (saved + e) // 2 if e > saved else saved + 1,
        "at the batch's end": e,
        "after the batch": e + 1,
    }
    for start, value in run.entries:  # a ramp reshaped from inside
        if isinstance(value, Ramp):
            points["inside a ramp"] = start + 3
    out: dict[str, int] = {}
    for name, x in points.items():
        if x >= 0 and x not in out.values():
            out[name] = x
    return out


def edited(run: Run, x: int) -> list[tuple[int, Any]]:
    """The run's entries before sample ``x``, then new weights from ``x`` on: the reported
    ``[10, 0, 1]`` (``[10, 0, ..., 0, 1]``), which no entry of ``RUNS`` has."""
    kept = [(s, v) for s, v in run.entries if s < x]
    k = len(run.sizes)
    return [*kept, (x, [10, *[0] * (k - 2), 1])]


def must_refuse(run: Run, saved: int, x: int) -> bool:
    """The rule, from the edit alone: an edit starting before ``E`` changes the quotas of a
    global batch some ranks have read (or finished); one inside a ramp that started before
    ``E`` moves that ramp's end, which shapes its counts from its start."""
    _, e = batch_end(run, saved)
    starts = [s for s, _ in run.entries]
    for i, (s, value) in enumerate(run.entries):
        end = starts[i + 1] if i + 1 < len(starts) else None
        if isinstance(value, Ramp) and s < e and s < x and (end is None or x < end):
            return True
    return x < e


@functools.cache
def _stream(run: Run, entries: tuple[tuple[int, Any], ...], layout: tuple[int, int]) -> list[int]:
    """Every rank's reads of epoch 0, in run-position order (micro-step by micro-step, ranks
    in order): what an uninterrupted run reads."""
    job = run.samplers(entries, layout)
    return [x for step in zip(*[list(s) for s in job], strict=True) for mb in step for x in mb]


def _canonical(run: Run, reads: list[Any]) -> list[Any]:
    """A packed run deals each global batch's rows to ranks by cost, so two layouts read one
    global batch in different orders: compare its rows as a multiset (sorted within it)."""
    if run.kind != "packed":
        return reads
    out: list[Any] = []
    while len(out) < len(reads):
        _, b = batch_of(run, len(out))
        out += sorted(reads[len(out) : b], key=repr)
    return out


def _hashable(entries: Entries) -> tuple[tuple[int, Any], ...]:
    return tuple((s, v if isinstance(v, Ramp) else tuple(v)) for s, v in entries)


def judge_edit(run: Run, step: int, x: int) -> str | None:
    """Save ``run`` after ``step`` micro-steps, load the state with the schedule edited from
    ``x`` on; return what went wrong, or None."""
    job = run.samplers(run.entries, run.save)
    its = [iter(s) for s in job]
    before = [v for _ in range(step) for it in its for v in next(it)]
    state = json.loads(json.dumps(job[0].state_dict()))
    saved = state["consumed"]
    _, e = batch_end(run, saved)
    mbs2, dp2 = run.load if saved % (run.load[0] * run.load[1]) == 0 else run.save
    new = edited(run, x)
    rest = run.samplers(new, (mbs2, dp2))
    refused = None
    try:
        for s in rest:
            s.load_state_dict(state)
    except ValueError as err:
        refused = str(err)
    what = f"state at sample {saved} (batch under way ends at {e}), edit from sample {x}"
    if refused is not None:
        if not must_refuse(run, saved, x):
            return f"{what}: refused an edit the rule allows: {refused}"
        unit = rest[0].position_unit  # "row" for packed rows
        wanted = ("the mixture schedule cannot continue this state", "segment", f"{unit} {e}")
        missing = [w for w in wanted if w not in refused]
        return f"{what}: the refusal does not say {missing}: {refused}" if missing else None
    after = [v for step in zip(*[list(s) for s in rest], strict=True) for mb in step for v in mb]
    reference = _stream(run, _hashable(new), (mbs2, dp2))
    if _canonical(run, before + after) != _canonical(run, reference):
        got = before + after
        first = next(i for i, (g, w) in enumerate(zip(got, reference, strict=False)) if g != w)
        a, b = batch_of(run, first)
        twice = sorted({v for v in got[a:b] if got[a:b].count(v) > reference[a:b].count(v)})
        lost = sorted({v for v in reference[a:b] if reference[a:b].count(v) > got[a:b].count(v)})
        return (
            f"{what}: accepted, and the run reads other samples than an uninterrupted run with "
            f"the edited schedule (global batch [{a}, {b}): {twice} read more often, {lost} "
            "less)" + ("; the rule says refuse" if must_refuse(run, saved, x) else "")
        )
    if must_refuse(run, saved, x):  # harmless this time, but the check is not the rule
        return f"{what}: accepted an edit the rule refuses (the reads happen to agree)"
    return None


def _edit_cases() -> Iterator[Any]:
    for run in RUNS:
        mbs, dp = run.save
        steps = len(run.samplers(run.entries, run.save)[0])
        for step in range(steps + 1):
            for name, x in edit_points(run, step * mbs * dp).items():
                yield pytest.param(
                    run, step, x, id=f"{run.name}-step{step}-{name.replace(' ', '_')}"
                )


@pytest.mark.parametrize(("run", "step", "x"), list(_edit_cases()))
def test_a_state_saved_at_any_micro_step_refuses_or_continues_an_edit(
    run: Run, step: int, x: int
) -> None:
    with hang_guard(HANG_SECONDS):
        problem = judge_edit(run, step, x)
    assert problem is None, problem


def test_the_reported_edit_inside_a_global_batch_is_in_the_table() -> None:
    """One micro-batch on each of two ranks, an edit from sample 8."""
    run = RUNS[0]
    assert edit_points(run, 4)["inside the batch"] == 10
    assert must_refuse(run, 4, 8)
    assert not must_refuse(run, 4, 16)
    with hang_guard(HANG_SECONDS):
        assert judge_edit(run, 1, 8) is None


# -- family 1b: packed states saved at every micro-step x layouts x edits -------------------------
PACKED_WEB = [int(x) for x in np.random.default_rng(11).integers(0, 100, 30)]
# shared, so each sampler built reuses their fingerprints and block totals (the family's cost)
_WEB_LENGTHS = DocumentLengths(PACKED_WEB)
_SOURCES = (DocumentLengths(PACKED_WEB[:20]), DocumentLengths(PACKED_WEB[20:]))


def _corpus_log() -> MixtureLog:
    """Source 0 starts with 12 of its 20 documents and grows inside its first pass at global
    batch 1; source 1 is retired at global batch 2 (NOTE [ Packed corpus changes ])."""
    log = MixtureLog([2, 1], sizes=[12, 10])
    log.grow(1, 0, 20)
    log.retire(2, 1)
    return log


@dataclass(frozen=True, eq=False)
class Packed:
    """A PackedSampler job: its keywords (besides the layout), the layout its states are saved
    on, and the layouts they are loaded on."""

    name: str
    kwargs: tuple[tuple[str, Any], ...]
    save: tuple[int, int]
    loads: tuple[tuple[int, int], ...]

    def job(self, layout: tuple[int, int]) -> list[PackedSampler]:
        return [self.rank(layout, r) for r in range(layout[1])]

    def rank(self, layout: tuple[int, int], rank: int = 0) -> PackedSampler:
        mbs, dp = layout
        kw = dict(self.kwargs)
        lengths = None if "mixture" in kw else _WEB_LENGTHS
        return PackedSampler(lengths, 16, mbs, rank, dp, **kw)


_GRID = ((1, 1), (2, 1), (3, 1), (2, 3), (1, 4))
PACKED = [
    Packed("overflow", (("seed", 3), ("chunk", 2), ("window", 8)), (2, 2), _GRID),
    Packed(
        "never, kept tail",
        (("seed", 4), ("chunk", 3), ("window", 9), ("split", "never"), ("drop_last", False)),
        (3, 1),
        _GRID,
    ),
    Packed(
        "padded global batches",
        (
            ("seed", 5),
            ("global_batch_size", 12),
            ("drop_last", False),
            ("pad_samples_to_global_batch_size", True),
        ),
        (2, 3),
        _GRID,
    ),
    Packed(
        "mixture",
        (
            ("seed", 6),
            ("chunk", 2),
            ("window", 4),
            ("global_batch_size", 12),
            ("mixture", (_SOURCES, (2, 1))),
            ("total_rows", 48),
        ),
        (1, 3),
        _GRID,
    ),
    Packed(
        "mixture over corpus changes",
        (
            ("seed", 7),
            ("chunk", 2),
            ("window", 4),
            ("global_batch_size", 12),
            ("mixture", (_SOURCES, _corpus_log())),
            ("total_rows", 36),
        ),
        (2, 3),
        _GRID,
    ),
]


@functools.cache
def _packed_reads(case: Packed, layout: tuple[int, int]) -> list[Any]:
    """Every rank's rows of epoch 0, step by step, ranks in order."""
    return [row for step in zip(*case.job(layout), strict=True) for batch in step for row in batch]


def _saved_states(case: Packed) -> list[tuple[dict[str, Any], list[Any]]]:
    """``(state, rows read so far)`` after every micro-step of epoch 0 on the saving layout."""
    job = case.job(case.save)
    its = [iter(s) for s in job]
    out, before = [], []
    for _ in range(len(job[0]) + 1):
        state = json.loads(json.dumps(job[0].state_dict()))
        assert all(s.state_dict() == state for s in job[1:])  # one state for the whole job
        out.append((state, list(before)))
        for it in its:
            before += next(it, [])
    return out


def judge_packed_layout(case: Packed, step: int, layout: tuple[int, int]) -> str | None:
    """The rule of the module docstring: a state at ``c`` rows loads on a layout whose block
    divides ``c`` (and the global batch size), then the job reads exactly what that layout
    reads from position ``c`` on; a layout whose block does not divide it is refused, naming
    the block, unless ``c`` is past the epoch's real rows (nothing real is left to read)."""
    state, before = _saved_states(case)[step]
    consumed = state["consumed"]
    mbs, dp = layout
    kw = dict(case.kwargs)
    block = mbs * dp
    if kw.get("global_batch_size", block) % block:
        return None  # the constructor refuses the layout: the input table's business
    reference = _packed_reads(case, layout)
    real = sum(1 for row in _packed_reads(case, (1, 1)) if row)  # real rows of the epoch
    job = case.job(layout)
    try:
        for s in job:
            s.load_state_dict(dict(state))
    except ValueError as err:
        if consumed % block == 0 and consumed <= len(reference):
            return f"{layout} refused a state at {consumed} rows its block divides: {err}"
        if "block" not in str(err):
            return f"{layout} refused a state at {consumed} rows without naming the block: {err}"
        return None
    after = [row for st in zip(*job, strict=True) for batch in st for row in batch]
    if consumed % block:
        if consumed < real or any(after):
            return f"{layout} accepted {consumed} rows its block does not divide: {len(after)} read"
        return None
    want = reference[consumed:]
    if sorted(after, key=repr) != sorted(want, key=repr):
        return f"{layout} continued from {consumed} rows with other rows than an uninterrupted run"
    # the global stream of rows is the same on every layout, dealt in its own order within a
    # block (padding rows aside)
    if sorted(filter(None, before), key=repr) != sorted(
        filter(None, reference[:consumed]), key=repr
    ):
        return f"{layout}: the rows read before the state differ from the layout's own"
    return None


def _layout_cases() -> Iterator[Any]:
    for case in PACKED:
        for step in range(len(_saved_states(case))):
            for layout in case.loads:
                yield pytest.param(case, step, layout, id=f"{case.name}-step{step}-{layout}")


@pytest.mark.parametrize(("case", "step", "layout"), list(_layout_cases()))
def test_a_packed_state_saved_at_any_micro_step_continues_or_is_refused_on_any_layout(
    case: Packed, step: int, layout: tuple[int, int]
) -> None:
    with hang_guard(HANG_SECONDS):
        problem = judge_packed_layout(case, step, layout)
    assert problem is None, f"{case.name}, step {step}: {problem}"


Edit = tuple[Any, Callable[[dict[Any, Any]], None]]  # (the key it edits, the edit)


def _edits(state: Mapping[str, Any]) -> dict[str, Edit]:
    """Every edit a user may make to a packed state, by name: each field cut, changed to another
    value (with the fingerprint forged to match, for a configuration field) and to values of
    the wrong type; keys added."""
    out: dict[str, Edit] = {}
    for key, value in state.items():

        def put(v: Any, key: str = key) -> Edit:
            return key, lambda s: s.__setitem__(key, v)

        out[f"{key} cut"] = key, lambda s, key=key: s.pop(key)
        out[f"{key}=1.5"] = put(1.5)
        out[f"{key}='x'"] = put("x")
        if isinstance(value, int):
            out[f"{key}+1"] = put(value + 1)
            out[f"{key}=-1"] = put(-1)
            out[f"{key}=2**63"] = put(2**63)
        if key.startswith("config."):  # the user forges the fingerprint too

            def forged(s: dict[str, Any], key: str = key, value: Any = value) -> None:
                s[key] = value + 1 if isinstance(value, int) else f"{value}x"
                config = {k[7:]: v for k, v in s.items() if k.startswith("config.")}
                s["fingerprint"] = config_fingerprint(config)

            out[f"{key} changed, fingerprint forged"] = key, forged
    out["an extra key"] = "config.extra", lambda s: s.__setitem__("config.extra", 1)
    out["a non-str key"] = 1, lambda s: s.__setitem__(1, 0)
    return out


def judge_packed_edit(case: Packed, step: int, edit: str) -> str | None:
    """Load the state saved after ``step`` micro-steps with ``edit`` applied: a ValueError (a
    TypeError for a state that is not a dict) that names the key, the state unmutated; or, for
    an edit that keeps the state legal, the same reads as the untouched state."""
    state, _ = _saved_states(case)[step]
    changed: dict[Any, Any] = dict(state)
    key, change = _edits(state)[edit]
    change(changed)
    kept = copy.deepcopy(changed)
    sampler = case.rank(case.save)
    try:
        sampler.load_state_dict(changed)
    except ValueError as err:
        if changed != kept:
            return f"{edit}: the state was mutated"
        names = {repr(key), str(key).removeprefix("config.").removeprefix("layout.")}
        if key == "mixture":
            names.add("mixture schedule")
        if key in ("version", "format", "kind"):
            names |= {f"state {key}", "sampler"}
        if not any(n in str(err) for n in names):
            return f"{edit}: the refusal does not name {key!r}: {err}"
        return None
    except Exception as err:  # anything else escaped (a Hang is not caught here)
        return f"{edit}: {type(err).__name__} instead of a ValueError: {err}"
    if changed != kept:
        return f"{edit}: the state was mutated"
    # accepted: a legal state (another epoch, another reachable position, another informational
    # layout); the pass must read what the order holds from there, asked with batch_at
    oracle = case.rank(case.save)
    epoch = changed["epoch"]
    plan = oracle.epoch_plan(epoch)
    start = plan.step_of({"consumed": changed["consumed"]})
    want = [oracle.batch_at(k, epoch=epoch) for k in range(start, plan.num_steps)]
    if list(sampler) != want:
        return f"{edit}: accepted, and the sampler reads other rows than the order holds there"
    return None


def _edit_params() -> Iterator[Any]:
    # one corpus, a mixture, a mixture over corpus changes (layouts: the family above)
    for case in (PACKED[0], PACKED[3], PACKED[4]):
        states = _saved_states(case)
        for step in sorted({1, len(states) - 1}):  # inside the epoch, at its end
            # the corpus-change log at the epoch's end: the slow suite (its inside state and
            # the other cases' ends run by default)
            slow = case is PACKED[4] and step > 1
            for edit in _edits(states[step][0]):
                yield pytest.param(
                    case,
                    step,
                    edit,
                    id=f"{case.name}-step{step}-{edit}",
                    marks=[pytest.mark.slow] if slow else [],
                )


@pytest.mark.parametrize(("case", "step", "edit"), list(_edit_params()))
def test_an_edited_packed_state_is_refused_naming_the_key_or_reads_the_same(
    case: Packed, step: int, edit: str
) -> None:
    with hang_guard(HANG_SECONDS):
        problem = judge_packed_edit(case, step, edit)
    assert problem is None, f"{case.name}, step {step}: {problem}"


def test_packed_states_of_other_configurations_are_refused_naming_the_field() -> None:
    """A state from other lengths, other packing parameters, a mixture vs one corpus."""
    one = _saved_states(PACKED[0])[2][0]
    mix = _saved_states(PACKED[3])[2][0]
    base: dict[str, Any] = {"seed": 3, "chunk": 2, "window": 8}
    others = {
        "lengths": ({**base}, PACKED_WEB[1:]),
        "seq_len": ({**base, "split": "overflow"}, None),
        "split": ({**base, "split": "never"}, None),
        "window": ({**base, "window": 4}, None),
        "chunk": ({**base, "chunk": 4}, None),
        "seed": ({**base, "seed": 4}, None),
        "drop_last": ({**base, "drop_last": False}, None),
        "global_batch_size": ({**base, "global_batch_size": 8}, None),
    }
    with hang_guard(HANG_SECONDS):
        for name, (kw, lengths) in others.items():
            seq_len = 32 if name == "seq_len" else 16
            s = PackedSampler(lengths or PACKED_WEB, seq_len, 2, 0, 2, **kw)
            with pytest.raises(ValueError, match=rf"{name}\b.* in the state but"):
                s.load_state_dict(one)
        with pytest.raises(ValueError, match="lengths is 'sources:"):
            PACKED[0].rank((2, 2)).load_state_dict(mix)
        with pytest.raises(ValueError, match="in the state but 'sources:"):
            PACKED[3].rank((1, 3)).load_state_dict(one)


# -- family 2: the worst-case state of every sampler ---------------------------------------------


def judge_size(state: Mapping[str, object]) -> str | None:
    text = json.dumps(state, separators=(",", ":"))
    if len(text) > MAX_STATE_BYTES:
        return f"state is {len(text)} bytes > MAX_STATE_BYTES = {MAX_STATE_BYTES}: {text}"
    if json.loads(text) != state:
        return f"state does not survive JSON: {text}"
    return None


def at_the_end_of_the_largest_epoch(
    sampler: Any, *, extra: Callable[..., None] | None = None
) -> Any:
    """Place ``sampler`` after the last step of its largest epoch (the largest epoch and the
    largest progress at once) through a state it accepts, and return the state it then writes."""
    top = sampler.max_epoch
    sampler.set_epoch(top)
    plan = sampler.epoch_plan(top)
    state = dict(sampler.state_dict())
    state.update(plan.progress_at(plan.num_steps), epoch=top)
    if extra is not None:
        extra(sampler, state, plan)
    sampler.load_state_dict(state)
    return sampler.state_dict()


def widened(sampler: Any, **caps: int) -> dict[str, Any]:
    """A bucket sampler's state at its largest epoch with its position fields at their caps:
    the bound of every state a dataset of up to ``2**62`` samples makes it write."""
    sampler.set_epoch(sampler.max_epoch)
    state = dict(sampler.state_dict())
    assert set(caps) <= set(state), (set(caps), set(state))
    state.update(caps)
    return state


def _bucket_dataset() -> BaseMultiresolutionDataset:
    ids = np.array([0] * 20 + [1] * 20)
    return BaseMultiresolutionDataset.from_bucket_ids(ids, [[512, 512], [640, 384]])


def _bucket(**kw: Any) -> SequentialBucketSampler:
    dp = kw.pop("num_replicas", MAX_DP_SIZE)
    return SequentialBucketSampler(
        _bucket_dataset(), num_replicas=dp, rank=dp - 1, seed=MAX_SEED, drop_last=False,
        dynamic_batch_size=True, **kw,
    )  # fmt: skip


def _torch_yielded(sampler: Any, state: dict[str, Any], plan: Any) -> None:
    state["yielded"] = state["consumed"] // sampler.num_replicas


def _blend_tag(sampler: Any, state: dict[str, Any], plan: Any) -> None:
    first = sampler.order.epoch_bounds(state["epoch"])[0]
    run = first + state["consumed"]
    state["mixture"] = sampler.schedule.trained_tag(sampler.order.quotas_fixed_through(run))


MBS = min(MAX_BATCH_SIZE, MAX_POSITIONS // MAX_DP_SIZE)  # 2**31 ranks of 2**31: 2**62 a step
GBS = MBS * MAX_DP_SIZE
BIG = {"drop_last": False, "global_batch_size": GBS, "pad_samples_to_global_batch_size": True}
#: Twenty entries, every one trained by the end of the epoch (a 2-digit entry count in the tag).
LONG_SCHEDULE = MixtureSchedule([(i, [1 + i % 3, 2]) for i in range(20)])
#: A batch-size schedule: the state records its digest, 27 characters, not an int.
GBS_SCHEDULE = BatchSizeSchedule([(0, GBS), (MAX_POSITIONS, GBS)])
GBS_SCHEDULE_SMALL = BatchSizeSchedule([(0, 2**31), (2**40, 2**31)])


def _megatron(cls: type[Any], **kw: Any) -> Callable[[], Any]:
    return lambda: at_the_end_of_the_largest_epoch(
        cls(MAX_POSITIONS, MBS, MAX_DP_SIZE - 1, MAX_DP_SIZE, **kw)
    )


WORST: dict[str, Callable[[], Mapping[str, Any]]] = {
    "megatron single, padded": _megatron(MegatronPretrainingSampler, **BIG),
    "megatron single, drop_last": _megatron(MegatronPretrainingSampler, global_batch_size=GBS),
    "megatron random": _megatron(MegatronPretrainingRandomSampler, **BIG, seed=MAX_SEED),
    "megatron random, data_sharding": _megatron(
        MegatronPretrainingRandomSampler, **BIG, seed=MAX_SEED, data_sharding=True
    ),
    "megatron random, compat nemo": _megatron(
        MegatronPretrainingRandomSampler, global_batch_size=GBS, seed=MAX_SEED, compat="nemo"
    ),
    "megatron random, compat megatron sharded": _megatron(
        MegatronPretrainingRandomSampler, global_batch_size=GBS, compat="megatron",
        data_sharding=True,
    ),
    "megatron random, compat megatron strided": _megatron(
        MegatronPretrainingRandomSampler, global_batch_size=GBS, compat="megatron"
    ),
    "distributed": lambda: at_the_end_of_the_largest_epoch(
        DistributedSampler(
            range(MAX_POSITIONS), num_replicas=MAX_DP_SIZE, rank=MAX_DP_SIZE - 1, seed=MAX_SEED,
            drop_last=False,
        )
    ),
    "distributed, compat torch": lambda: at_the_end_of_the_largest_epoch(
        DistributedSampler(
            range(MAX_POSITIONS), num_replicas=MAX_DP_SIZE, rank=MAX_DP_SIZE - 1, seed=MAX_SEED,
            drop_last=False, compat="torch",
        ),
        extra=_torch_yielded,
    ),
    "blended": lambda: at_the_end_of_the_largest_epoch(
        BlendedSampler(
            [MAX_POSITIONS - 1, 1], LONG_SCHEDULE, MBS, MAX_DP_SIZE - 1, MAX_DP_SIZE, GBS,
            seed=MAX_SEED, total_samples=MAX_POSITIONS,
        ),
        extra=_blend_tag,
    ),
    "blended, batch-size schedule": lambda: at_the_end_of_the_largest_epoch(
        BlendedSampler(
            [MAX_POSITIONS - 1, 1], LONG_SCHEDULE, MBS, MAX_DP_SIZE - 1, MAX_DP_SIZE,
            GBS_SCHEDULE, seed=MAX_SEED, total_samples=MAX_POSITIONS,
        ),
        extra=_blend_tag,
    ),
    # many epochs of fewer samples: the epoch, not the count, grows
    "blended, many epochs": lambda: at_the_end_of_the_largest_epoch(
        BlendedSampler(
            [2**31, 1], LONG_SCHEDULE, 2**15, 2**15 - 1, 2**16, GBS_SCHEDULE_SMALL,
            seed=MAX_SEED, total_samples=2**31,
        ),
        extra=_blend_tag,
    ),
    "bucket sequential": lambda: widened(
        _bucket(base_batch_size=MAX_BATCH_SIZE), bucket=MAX_POSITIONS - 1, consumed=MAX_POSITIONS
    ),
    "bucket, compat nemo": lambda: widened(
        _bucket(base_batch_size=MAX_BATCH_SIZE, compat="nemo"), bucket=MAX_POSITIONS - 1,
        consumed=MAX_POSITIONS, batches_yielded=MAX_POSITIONS,
    ),
    "bucket interleaved": lambda: widened(
        _bucket(
            base_batch_size=MAX_BATCH_SIZE, num_replicas=MAX_INTERLEAVE_UNIT,
            bucket_order="interleaved", interleave_unit=MAX_INTERLEAVE_UNIT,
        ),
        bucket=MAX_POSITIONS - 1, consumed=MAX_BATCH_SIZE * MAX_INTERLEAVE_UNIT,
    ),
    # 513 bytes, over the 512 once promised (a dataset that fits in memory)
    "bucket interleaved, 513 bytes": lambda: widened(
        _bucket(
            base_batch_size=2**20, num_replicas=8, bucket_order="interleaved",
            interleave_unit=MAX_INTERLEAVE_UNIT,
        ),
        bucket=120_000, consumed=16_800_000,
    ),
}  # fmt: skip


# PackedSampler at every cap at once: seq_len 2**31 (MAX_SEQ_LEN), window 2**20, chunk 2**20, the
# largest seed, a block of MAX_BLOCK_ROWS rows (one row on each of 2**18 ranks: the most digits a
# legal layout writes), a global batch of 2**62 rows, a document of 2**31 - 1 tokens (2**31 - 1
# rows at seq_len 1 would do as well: NOTE [ Full rows are not stored ]); the mixture: 20
# schedule entries, a batch-size schedule, 2**62 rows an epoch.
_CAPS = {"seed": MAX_SEED, "window": MAX_WINDOW, "chunk": MAX_CHUNK}
_LONG_DOCS = [2**31 - 1, 5, 7]
_PACKED_LAYOUT = (1, MAX_BLOCK_ROWS - 1, MAX_BLOCK_ROWS)  # micro-batch, rank, ranks
_PACKED_GBS = MAX_POSITIONS  # a multiple of every block: 2**62 rows
_PACKED_GBS_SCHEDULE = BatchSizeSchedule([(0, _PACKED_GBS), (MAX_POSITIONS, _PACKED_GBS)])


def _packed_one(split: str, **kw: Any) -> Callable[[], Mapping[str, Any]]:
    big = {**BIG, "global_batch_size": _PACKED_GBS}
    return lambda: at_the_end_of_the_largest_epoch(
        PackedSampler(_LONG_DOCS, MAX_SEQ_LEN, *_PACKED_LAYOUT, **big, **_CAPS, split=split, **kw)
    )


def _packed_mixture(split: str, batches: Any, **kw: Any) -> Callable[[], Mapping[str, Any]]:
    return lambda: at_the_end_of_the_largest_epoch(
        PackedSampler(
            None, MAX_SEQ_LEN, *_PACKED_LAYOUT, batches, **_CAPS, split=split, **kw,
            mixture=([_LONG_DOCS, _LONG_DOCS], LONG_SCHEDULE), total_rows=MAX_POSITIONS,
        ),
        extra=_blend_tag,
    )  # fmt: skip


WORST["packed, overflow"] = _packed_one("overflow")
WORST["packed, never-drop"] = _packed_one("never", long_documents="drop")
WORST["packed mixture, overflow"] = _packed_mixture("overflow", _PACKED_GBS)
WORST["packed mixture, never-drop, batch-size schedule"] = _packed_mixture(
    "never", _PACKED_GBS_SCHEDULE, long_documents="drop"
)


def test_a_packed_state_at_the_caps_is_within_512_bytes() -> None:
    """A packed state stays below 512 bytes: one corpus at every cap at once is; a
    mixture adds the blend's fields (the schedule's tag, total_rows) and stays within
    MAX_STATE_BYTES (the packing's four arguments share ``config.packing``: NOTE [ Packed state
    fields ])."""
    with hang_guard(60):
        for name in ("packed, overflow", "packed, never-drop"):
            state = WORST[name]()
            assert len(json.dumps(state, separators=(",", ":"))) < 512, name


@pytest.mark.parametrize("name", list(WORST))
def test_the_worst_case_state_of_every_sampler_fits_the_bound(name: str) -> None:
    with hang_guard(HANG_SECONDS):
        state = WORST[name]()
    problem = judge_size(state)
    assert problem is None, f"{name}: {problem}"


def test_the_worst_cases_are_at_the_caps() -> None:
    """The table reaches what NOTE [ State size ] says: the largest epoch and the largest
    progress together, and the bound is tight to within the margin it states."""
    sizes = {}
    with hang_guard(60):
        for name, build in WORST.items():
            state = build()
            assert state["epoch"] >= 0
            sizes[name] = len(json.dumps(state, separators=(",", ":")))
            if not name.startswith(("blended", "packed mixture")):  # epochs of 2**62 samples
                assert state["epoch"] == MAX_EPOCH, name
    assert sizes["bucket, compat nemo"] == max(sizes.values()) == 555
    assert sizes["megatron random, data_sharding"] == 530
    assert sizes["bucket interleaved, 513 bytes"] == 513
    assert MAX_STATE_BYTES - max(sizes.values()) < 32


def _vsl_worst_state(base: Mapping[str, Any], low: int, high: int) -> dict[str, Any]:
    """``base`` (a VariableLengthSampler's state over lengths ``1 .. 2**30``) narrowed to chunk
    lengths ``2**low .. 2**high``, every field widened to its cap (the counts to the chunks of
    that length ``MAX_DOCUMENTS`` documents of ``MAX_LENGTH`` tokens would hold)."""
    state = {k: v for k, v in base.items() if not k.startswith("chunks.")}
    state["epoch"] = MAX_EPOCH
    state["config.seed"] = MAX_SEED
    state["config.min_seq_len"], state["config.max_seq_len"] = 1 << low, 1 << high
    state["config.tokens_per_rank"] = (1 << low) * MAX_BATCH_SIZE
    state["config.curriculum"] = max(CURRICULA, key=len)
    state["config.interleave_unit"] = MAX_INTERLEAVE_UNIT
    state["layout.data_parallel_size"] = MAX_DP_SIZE
    for k in range(low, high + 1):
        state[f"chunks.{1 << k}"] = MAX_DOCUMENTS * MAX_LENGTH >> k
    return state


def test_a_vsl_state_at_every_cap_fits_its_bound_for_every_range_of_lengths() -> None:
    """NOTE [ VSL state size ]: one count per chunk length, so the bound grows with the lengths;
    every ``[min_seq_len, max_seq_len]`` (496 ranges) at every cap is within the
    ``max_state_bytes`` its configuration reports, up to four lengths within
    ``MAX_STATE_BYTES``, and the per-length allowance is tight."""

    def sampler(low: int, high: int) -> VariableLengthSampler:
        longest = 1 << high
        return VariableLengthSampler(
            [longest], longest, longest, 0, 1, seed=0, min_seq_len=1 << low
        )

    base = sampler(0, 30).state_dict()
    assert sorted(k for k in base if k.startswith("chunks.")) == sorted(
        f"chunks.{1 << k}" for k in range(31)
    )
    bounds = {n: MAX_STATE_BYTES + 32 * max(0, n - LENGTHS_WITHIN_BOUND) for n in range(1, 32)}
    for low, high in ((0, 30), (8, 13), (8, 11), (8, 8), (20, 30)):  # what the sampler reports
        assert sampler(low, high).max_state_bytes == bounds[high - low + 1]
    worst: dict[int, int] = {}
    for low in range(31):
        for high in range(low, 31):
            state = _vsl_worst_state(base, low, high)
            size = len(json.dumps(state, separators=(",", ":")))
            n = high - low + 1
            assert size <= bounds[n], (low, high, size, state)
            worst[n] = max(worst.get(n, 0), size)
    assert max(worst[n] for n in range(1, LENGTHS_WITHIN_BOUND + 1)) <= MAX_STATE_BYTES
    assert worst[LENGTHS_WITHIN_BOUND + 1] > MAX_STATE_BYTES  # the allowance is needed
    steps = [worst[n + 1] - worst[n] for n in range(1, 31)]
    assert max(steps) <= STATE_BYTES_PER_LENGTH
    assert max(steps) >= STATE_BYTES_PER_LENGTH - 2  # and tight


# -- the judges ----------------------------------------------------------------------------------


def test_the_judges_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each verdict fires on a sampler that deserves it."""
    run = RUNS[0]
    # the 0.2.0 trained-part check: the schedule compared only before the saved position
    with monkeypatch.context() as m:
        m.setattr(BlendOrder, "quotas_fixed_through", lambda self, samples: samples)
        problem = judge_edit(run, 1, 8)
    assert problem is not None
    # the reported samples: 81 read twice (65 in 17's place), 17 and 88 never
    assert "[65, 81] read more often, [17, 88] less" in problem, problem
    # a check that refuses what the rule allows
    with monkeypatch.context() as m:
        m.setattr(BlendOrder, "quotas_fixed_through", lambda self, samples: samples + 10**6)
        problem = judge_edit(run, 1, 16)
    assert problem is not None
    assert "refused an edit the rule allows" in problem, problem
    # the same over packed rows: a packed run saved inside a global batch, edited inside it
    packed = next(r for r in RUNS if r.kind == "packed")
    with monkeypatch.context() as m:
        m.setattr(BlendOrder, "quotas_fixed_through", lambda self, samples: samples)
        assert judge_edit(packed, 1, 6) is not None
    assert judge_edit(packed, 1, 6) is None
    # a packed layout that accepts a position its block does not divide
    from dataorder.llm.packing.sampler import DealtBlocks

    with monkeypatch.context() as m:
        m.setattr(
            DealtBlocks,
            "step_of",
            lambda self, progress, strict=False: progress["consumed"] // self.blocks.block_size,
        )
        problem = judge_packed_layout(PACKED[0], 1, (3, 1))  # 4 rows on blocks of 3
    assert problem is not None
    assert "does not divide" in problem, problem
    # an edited packed state refused without naming the key
    with monkeypatch.context() as m:
        m.setattr(PackedSampler, "_checked_state", lambda self, state: 1 / 0 and None)
        problem = judge_packed_edit(PACKED[0], 1, "config.seed+1")
    assert problem is not None
    assert "ZeroDivisionError instead of a ValueError" in problem, problem
    # a state past the bound
    assert judge_size({"k": "x" * MAX_STATE_BYTES}) is not None
    assert judge_size({"k": "x"}) is None
    # a case that does not return
    with pytest.raises(Hang), hang_guard(0.2):
        time.sleep(5)
