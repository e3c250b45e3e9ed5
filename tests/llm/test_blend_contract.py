"""BlendedSampler's global stream against a reference that draws sample by sample.

The contract suite runs on its configurations in tests/test_contract_table.py (the rows
``blend of sample orders x fixed blocks``: constant, tiny (1e-6) and dominant (0.999) weights,
sources smaller than one global batch, schedules with ramps, a global batch size ramp-up, epochs
that do not divide by the global batch size, elastic resumes, the factory's ``mixture=`` and a
mixture log). The properties here rebuild the order from its definition (module docstring of
:mod:`dataorder.llm.blend_order`), one sample at a time, from the core pieces (apportionments,
permutations, keys), and check the exactness bound and the no-repeat rule on it.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataorder.core.apportion import MAX_TOTAL, Apportionment
from dataorder.core.keys import derive_key
from dataorder.core.permutation import Permutation
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.blend_order import member_key
from dataorder.llm.mixture import MixtureSchedule, Ramp
from dataorder.llm.schedule import BatchSizeSchedule

# -- a reference that draws sample by sample ----------------------------------------------------


class Reference:
    """The order of a BlendedSampler from its definition, one run position at a time.

    Counts come from the core apportionments directly (a ramp's split by Fractions); slots and
    source draws from scalar :class:`Permutation` lookups with the documented keys.
    """

    def __init__(
        self, sizes: list[int], schedule: MixtureSchedule, batches: BatchSizeSchedule, seed: int
    ) -> None:
        self.sizes = sizes
        self.offsets = [sum(sizes[:d]) for d in range(len(sizes))]
        self.segments = schedule.segments
        self.batches = batches
        key = derive_key(seed, epoch=0, stream="blend", purpose="apportionment")
        self.aps = {seg.start_units: Apportionment(seg.start_units, key) for seg in self.segments}
        self.aps.update({seg.end_units: Apportionment(seg.end_units, key) for seg in self.segments})
        self.slot_key = derive_key(seed, epoch=0, stream="blend", purpose="slot-order")
        self.source_key = derive_key(seed, epoch=0, stream="blend", purpose="source-order")

    def counts(self, t: int) -> list[int]:
        total = [0] * len(self.sizes)
        for seg in self.segments:
            if seg.start >= t:
                break
            tau = t - seg.start if seg.end is None else min(t, seg.end) - seg.start
            if seg.is_ramp:
                assert seg.end is not None
                length = seg.end - seg.start
                m = math.floor(Fraction(tau * tau, 2 * length) + Fraction(1, 2))
                part = self.aps[seg.start_units].counts(tau - m) + self.aps[seg.end_units].counts(m)
            else:
                part = self.aps[seg.start_units].counts(tau)
            total = [a + int(b) for a, b in zip(total, part, strict=True)]
        return total

    def stream(self, stop: int) -> tuple[list[int], list[int]]:
        """Flat indices of run positions ``0 .. stop - 1`` and the global-batch boundaries."""
        out: list[int] = []
        bounds = [0]
        step = 0
        while bounds[-1] < stop:
            a = bounds[-1]
            g = self.batches.global_batch_size(step)
            c0, c1 = self.counts(a), self.counts(a + g)
            slots = [(d, c0[d] + i) for d in range(len(self.sizes)) for i in range(c1[d] - c0[d])]
            sigma = Permutation(g, member_key(self.slot_key, step, 0))
            for x in range(g):
                d, j = slots[sigma.index(x)]
                epoch, i = divmod(j, self.sizes[d])
                pi = Permutation(self.sizes[d], member_key(self.source_key, d, epoch))
                out.append(self.offsets[d] + pi.index(i))
            bounds.append(a + g)
            step += 1
        return out[:stop], bounds


def _run_stream(samplers: list[BlendedSampler], epochs: int) -> list[int]:
    """Every rank's micro-batches of each step, in rank order, over ``epochs`` epochs."""
    out: list[int] = []
    for e in range(epochs):
        per_rank = []
        for s in samplers:
            s.set_epoch(e)
            per_rank.append(list(s))
        assert len({len(p) for p in per_rank}) == 1
        out += [x for step in zip(*per_rank, strict=True) for mb in step for x in mb]
    return out


_weight = st.one_of(
    st.sampled_from([0.0, 1e-6, 0.999, 1.0, 0.5]),
    st.floats(1e-3, 10.0),
    st.integers(0, 7),
)


@st.composite
def _weights(draw: st.DrawFn, k: int) -> list[Any]:
    ws = draw(st.lists(_weight, min_size=k, max_size=k))
    if not any(ws):
        ws[draw(st.integers(0, k - 1))] = 1.0
    return ws


@st.composite
def _configs(draw: st.DrawFn) -> dict[str, Any]:
    k = draw(st.integers(1, 5))
    sizes = draw(st.lists(st.integers(1, 12), min_size=k, max_size=k))
    mbs, dp = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    block = mbs * dp
    units = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    if len(units) == 1:
        batches = BatchSizeSchedule.constant(units[0] * block)
    else:
        starts = sorted(
            draw(st.sets(st.integers(1, 40), min_size=len(units) - 1, max_size=len(units) - 1))
        )
        batches = BatchSizeSchedule(
            list(zip([0, *starts], [u * block for u in units], strict=True))
        )
    entries: list[tuple[int, Any]] = [(0, draw(_weights(k)))]
    for start in sorted(draw(st.sets(st.integers(1, 60), max_size=3))):
        if draw(st.booleans()):
            entries.append((start, Ramp(draw(_weights(k)), draw(_weights(k)))))
        else:
            entries.append((start, draw(_weights(k))))
    if isinstance(entries[-1][1], Ramp):
        entries.append((entries[-1][0] + draw(st.integers(1, 20)), draw(_weights(k))))
    largest = max(g for _, g in batches.thresholds)
    total = largest * draw(st.integers(1, 3)) + draw(st.integers(0, largest))
    return {
        "sizes": sizes,
        "schedule": MixtureSchedule(entries),
        "mbs": mbs,
        "dp": dp,
        "batches": batches,
        "total": total,
        "seed": draw(st.integers(0, 2**63 - 1)),
    }


@settings(max_examples=40, deadline=None, database=None)
@given(config=_configs(), epochs=st.integers(1, 3))
def test_global_stream_is_the_reference_and_exact(config: dict[str, Any], epochs: int) -> None:
    sizes, schedule, batches = config["sizes"], config["schedule"], config["batches"]
    samplers = [
        BlendedSampler(
            sizes,
            schedule,
            config["mbs"],
            r,
            config["dp"],
            batches,
            seed=config["seed"],
            total_samples=config["total"],
        )
        for r in range(config["dp"])
    ]
    stream = _run_stream(samplers, epochs)
    ref = Reference(sizes, schedule, batches, config["seed"])
    expected, bounds = ref.stream(len(stream))
    assert stream == expected
    mixture = samplers[0]._mixture
    offsets = np.cumsum([0, *sizes])
    source = np.searchsorted(offsets, np.array(stream), side="right") - 1
    k = len(sizes)
    for t in (b for b in bounds if b <= len(stream)):
        # counts at every global-batch boundary: the reference's, never negative, summing to t
        counts = np.bincount(source[:t], minlength=k)
        assert counts.tolist() == ref.counts(t) == samplers[0].consumed_per_source(t).tolist()
        # the exactness bound of the segment t falls in (NOTE [ Mixture exactness ])
        seg_index = schedule.segment_at(t - 1) if t else 0
        seg = schedule.segments[seg_index]
        base = ref.counts(seg.start)
        tau = t - seg.start
        if seg.is_ramp:
            assert seg.end is not None
            length = seg.end - seg.start
            share = Fraction(tau * tau, 2 * length)
            target = [
                (Fraction(u, MAX_TOTAL) * (tau - share) + Fraction(v, MAX_TOTAL) * share)
                for u, v in zip(seg.start_units, seg.end_units, strict=True)
            ]
        else:
            target = [Fraction(u, MAX_TOTAL) * tau for u in seg.start_units]
        bound = mixture.deviation_bounds(seg_index)
        for d in range(k):
            dev = abs(counts[d] - base[d] - target[d])
            assert dev <= Fraction(bound[d]) + Fraction(1, 10**9)
            if not seg.is_ramp:
                assert dev < 2  # the asked "within 2 samples", proven < 1.75
        # no repeats until a source has read all its samples: multiplicities differ by <= 1
        for d in range(k):
            mine = Counter(x for x, s in zip(stream[:t], source[:t], strict=True) if s == d)
            low = counts[d] // sizes[d]
            seen = [mine.get(int(offsets[d]) + i, 0) for i in range(sizes[d])]
            assert all(low <= m <= low + 1 for m in seen)


@settings(max_examples=25, deadline=None, database=None)
@given(
    config=_configs(),
    new=st.tuples(st.integers(1, 3), st.integers(1, 4)),
    at=st.integers(0, 10**6),
)
def test_elastic_resume_keeps_the_global_stream(
    config: dict[str, Any], new: tuple[int, int], at: int
) -> None:
    """Stop at a boundary both layouts share, continue with another micro-batch and DP size:
    the two halves are exactly the uninterrupted stream."""
    mbs2, dp2 = new
    batches = config["batches"]
    if any(g % (mbs2 * dp2) for _, g in batches.thresholds):
        return  # this layout cannot train these global batches: refused, tested in test_blend
    kw = {"seed": config["seed"], "total_samples": config["total"]}
    sizes, schedule = config["sizes"], config["schedule"]
    old = [
        BlendedSampler(sizes, schedule, config["mbs"], r, config["dp"], batches, **kw)
        for r in range(config["dp"])
    ]
    whole = _run_stream(
        [
            BlendedSampler(sizes, schedule, config["mbs"], r, config["dp"], batches, **kw)
            for r in range(config["dp"])
        ],
        1,
    )
    block = config["mbs"] * config["dp"]
    both = math.lcm(block, mbs2 * dp2)
    stop = (at % (len(whole) + 1)) // both * both // block  # steps on the old layout
    iters = [iter(s) for s in old]
    head = [[next(it) for _ in range(stop)] for it in iters]
    before = [x for i in range(stop) for r in range(config["dp"]) for x in head[r][i]]
    new_ranks = [BlendedSampler(sizes, schedule, mbs2, r, dp2, batches, **kw) for r in range(dp2)]
    for s in new_ranks:
        s.load_state_dict(old[0].state_dict())
    per_rank = [list(s) for s in new_ranks]
    after = [x for step in zip(*per_rank, strict=True) for mb in step for x in mb]
    assert before + after == whole
