"""Batching rules: what one step of one rank holds, and what each of its slots covers.

A sampler's *order* says which data each global position of an epoch holds; its *batching rule*
says what one rank's item at one step is made of, and what each slot of that item *covers*. The
rule is the seam between a sampler and everything that checks a partition without knowing the
sampler: the contract suite and its loop recipes (:mod:`dataorder.testing`),
:func:`~dataorder.parallel.verify.verify_data_parallel`, ``dataorder inspect`` and the demo's
checks all read items through ``sampler.batching``, never through ``int`` assumptions.

==================  ==============================  ==============  ===========================
rule                an item is                       a slot covers   padding
==================  ==============================  ==============  ===========================
:data:`INDICES`     one sample index (a per-index   that sample     a repeated sample
                    sampler: torch's DataLoader
                    batches it)
:data:`BATCHES`     a list of sample indices (a      that sample     ``None`` (1 sample), or a
                    micro-batch, a bucket's batch)                   repeated sample
packed rows         a list of rows, each a tuple    the tokens of   the tokens a row leaves
(:mod:`dataorder.   of ``(document, start, stop)``  its spans       empty
llm.packing`)       spans
==================  ==============================  ==============  ===========================

NOTE [ Coverage ]
    A slot covers zero or more *spans* ``(key, start, stop)``: the units ``[start, stop)`` of
    ``key``. A sample index ``i`` covers ``(i, 0, 1)``; a packed row covers its document spans;
    a padding slot covers nothing and counts as :meth:`BatchRule.padding` units instead. Over a
    whole epoch, all ranks together, every sampler promises::

        distinct units covered                          = universe - dropped
        units covered more than once + padding units    = padded

    where ``dropped`` and ``padded`` are the sampler's counters named by the rule
    (``samples_dropped``/``samples_padded``, or ``tokens_dropped``/``tokens_padded``) and the
    universe is every unit of the dataset (its samples, or every token of every document). A
    repeated sample is how a sampler pads when a slot must hold real data (torch's wrap-around,
    a bucket's repeats); a packed sampler never repeats a token. :func:`coverage` computes both
    sides from spans in one sort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "BATCHES",
    "INDICES",
    "BatchRule",
    "Coverage",
    "SampleBatches",
    "SampleIndices",
    "Spans",
    "SpansRead",
    "coverage",
    "read_spans",
    "rule_of",
]

IntArray = npt.NDArray[np.int64]

#: ``(keys, starts, stops)``: int64 arrays of one length, the spans some slots cover.
Spans = tuple[IntArray, IntArray, IntArray]


class BatchRule(Protocol):
    """What one rank's item at one step is, and what its slots cover (NOTE [ Coverage ])."""

    @property
    def name(self) -> str:
        """A short name: ``"indices"``, ``"batches"``, ``"packed-rows"``."""
        ...

    @property
    def unit(self) -> str:
        """What coverage counts: ``"sample"`` or ``"token"``."""
        ...

    @property
    def batched(self) -> bool:
        """Whether an item is a batch of slots (False: an item is one slot)."""
        ...

    @property
    def dropped_counter(self) -> str:
        """The sampler's counter of units no rank reads in an epoch, summed over ranks."""
        ...

    @property
    def padded_counter(self) -> str:
        """The sampler's counter of padding units in an epoch, summed over ranks."""
        ...

    def slots(self, item: Any) -> Sequence[Any]:
        """The slots of one yielded item (``[item]`` for a per-index sampler).

        Raises:
            TypeError: If ``item`` is not an item of this rule (the message shows it).
        """
        ...

    def spans(self, slots: Sequence[Any]) -> Spans:
        """What ``slots`` cover, in order; padding slots cover nothing."""
        ...

    def padding(self, slots: Sequence[Any]) -> int:
        """Padding units of ``slots`` (a ``None`` slot, the empty tokens of a row)."""
        ...


_SAMPLE_ITEMS = "items must be indices, None or batches of them"


def _sample_spans(values: Sequence[Any]) -> tuple[IntArray, int]:
    keys: list[int] = []
    pads = 0
    for x in values:
        if x is None:
            pads += 1
        elif isinstance(x, int | np.integer) and not isinstance(x, bool):
            keys.append(int(x))
        else:
            raise TypeError(f"{_SAMPLE_ITEMS}; got an element {x!r} of type {type(x).__name__}")
    return np.asarray(keys, dtype=np.int64), pads


class _SampleSlots:
    """Slots that are sample indices or ``None``: what the two sample rules share."""

    def spans(self, slots: Sequence[Any]) -> Spans:
        keys, _ = _sample_spans(slots)
        return keys, np.zeros_like(keys), np.ones_like(keys)

    def padding(self, slots: Sequence[Any]) -> int:
        return sum(1 for x in slots if x is None)


@dataclass(frozen=True)
class SampleBatches(_SampleSlots):
    """Items are batches (lists) of sample indices; ``None`` is a padding slot."""

    name: str = "batches"
    unit: str = "sample"
    batched: bool = True
    dropped_counter: str = "samples_dropped"
    padded_counter: str = "samples_padded"

    def slots(self, item: Any) -> Sequence[Any]:
        if hasattr(item, "tolist"):  # a numpy array or a tensor from a loader's collate
            item = item.tolist()
        if isinstance(item, str | bytes) or not isinstance(item, Sequence):
            raise TypeError(f"{_SAMPLE_ITEMS}; got {type(item).__name__}: {item!r}")
        return item


@dataclass(frozen=True)
class SampleIndices(_SampleSlots):
    """Items are single sample indices (a per-index sampler, batched by the loader)."""

    name: str = "indices"
    unit: str = "sample"
    batched: bool = False
    dropped_counter: str = "samples_dropped"
    padded_counter: str = "samples_padded"

    def slots(self, item: Any) -> Sequence[Any]:
        if hasattr(item, "tolist"):
            item = item.tolist()
        is_index = isinstance(item, int | np.integer) and not isinstance(item, bool)
        if item is not None and not is_index:
            raise TypeError(f"{_SAMPLE_ITEMS}; got {type(item).__name__}: {item!r}")
        return [item]


#: The rule of micro-batch and bucket samplers.
BATCHES = SampleBatches()
#: The rule of per-index samplers (torch's DistributedSampler).
INDICES = SampleIndices()


def rule_of(sampler: object, *, batched: bool | None = None) -> BatchRule:
    """The batching rule of ``sampler``: its ``batching`` attribute, else the sample rule that
    ``batched`` names (a sampler from elsewhere: batches of indices unless ``batched=False``)."""
    rule: BatchRule | None = getattr(sampler, "batching", None)
    if rule is not None:
        return rule
    return INDICES if batched is False else BATCHES


@dataclass(frozen=True)
class SpansRead:
    """What some items hold, read through their rule (:func:`read_spans`).

    Attributes:
        spans: The spans the items' slots cover, item after item (padding slots cover none).
        padding: Padding slots, summed over the items.
        sizes: Slots per item.
    """

    spans: Spans
    padding: int
    sizes: list[int]


def read_spans(rule: BatchRule, items: Sequence[Any]) -> SpansRead:
    """The spans, padding and sizes of ``items`` through ``rule``: how the contract suite and
    ``verify_data_parallel`` read what a sampler yielded, whatever an item holds.

    >>> read = read_spans(BATCHES, [[3, 1], [None, 2]])
    >>> read.spans[0].tolist(), read.padding, read.sizes
    ([3, 1, 2], 1, [2, 2])
    """
    # every rule reads slot by slot: the slots of all items end to end, read once (an array per
    # item would cost ten times as much on a per-index epoch)
    flat: list[Any] = []
    sizes = []
    for item in items:
        slots = rule.slots(item)
        flat.extend(slots)
        sizes.append(len(slots))
    return SpansRead(rule.spans(flat), rule.padding(flat), sizes)


@dataclass(frozen=True)
class Coverage:
    """What some spans cover together (NOTE [ Coverage ]).

    Attributes:
        units: Units covered, with multiplicity (the sum of the span lengths).
        distinct: Units covered at least once.
    """

    units: int
    distinct: int

    @property
    def repeated(self) -> int:
        """Units covered more than once, counted once per extra time."""
        return self.units - self.distinct


def coverage(spans: Spans) -> Coverage:
    """What ``spans`` cover together: total and distinct units, from one sort.

    Spans of different keys never overlap; spans of one key overlap where their unit ranges do.

    Raises:
        ValueError: If a span is empty or reversed (``stop <= start``) or has a negative key or
            start.

    >>> import numpy as np
    >>> c = coverage((np.array([3, 3, 5]), np.array([0, 4, 0]), np.array([6, 9, 1])))
    >>> (c.units, c.distinct, c.repeated)
    (12, 10, 2)
    """
    keys, starts, stops = (np.asarray(a, dtype=np.int64).reshape(-1) for a in spans)
    if not keys.size:
        return Coverage(0, 0)
    bad = (stops <= starts) | (starts < 0) | (keys < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            "spans must be (key >= 0, 0 <= start < stop); got span "
            f"({int(keys[i])}, {int(starts[i])}, {int(stops[i])})"
        )
    order = np.lexsort((starts, keys))
    keys, starts, stops = keys[order], starts[order], stops[order]
    total = int((stops - starts).sum(dtype=np.int64))
    # The furthest stop so far within each key: a span's units below it were covered before.
    new_key = np.ones(keys.size, dtype=bool)
    new_key[1:] = keys[1:] != keys[:-1]
    group = np.cumsum(new_key) - 1
    # Lay the keys end to end on one line so one running maximum serves every key: key g starts
    # at g x (longest stop + 1). Exact in int64: groups <= spans and stops <= 2**62 / spans.
    width = int(stops.max()) + 1
    if keys.size * width >= 2**62:
        return _coverage_slow(keys, starts, stops, total)
    lo, hi = group * width + starts, group * width + stops
    reach = np.maximum.accumulate(hi)
    before = np.empty_like(reach)
    before[0] = lo[0]
    before[1:] = reach[:-1]
    overlap = np.clip(np.minimum(hi, before) - lo, 0, None)
    return Coverage(total, total - int(overlap.sum(dtype=np.int64)))


def _coverage_slow(keys: IntArray, starts: IntArray, stops: IntArray, total: int) -> Coverage:
    """:func:`coverage` in Python ints, for spans too long to lay end to end in int64."""
    overlap, key, reach = 0, -1, 0
    for k, a, b in zip(keys.tolist(), starts.tolist(), stops.tolist(), strict=True):
        if k != key:
            key, reach = k, a
        overlap += max(0, min(b, reach) - a)
        reach = max(reach, b)
    return Coverage(total, total - overlap)
