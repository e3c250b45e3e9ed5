"""The batching rule of packed rows: an item is a micro-batch of rows, a row covers tokens.

:class:`PackedRows` is what :class:`~dataorder.llm.packing.sampler.PackedSampler` declares as
its batching rule (:mod:`dataorder.core.batching`): an item is one rank's micro-batch, a list of
rows; a row is a tuple of ``(document, start, stop)`` spans and covers those tokens (NOTE
[ Coverage ] in :mod:`dataorder.core.batching`); its padding is the ``seq_len`` tokens it leaves
empty (a padding row, ``()``, is all padding). Through it the contract suite, the loop recipes,
``verify_data_parallel`` and ``dataorder inspect`` check a packed sampler in tokens: every token
of every document read once per epoch, the rest counted as ``tokens_dropped`` and
``tokens_padded``.

Example:
    >>> rule = PackedRows(seq_len=8)
    >>> rows = rule.slots([((3, 0, 5), (9, 2, 4)), ()])
    >>> [a.tolist() for a in rule.spans(rows)], rule.padding(rows)
    ([[3, 9], [0, 2], [5, 4]], 9)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataorder.core.batching import Spans

__all__ = ["PackedRows"]

_ROWS = "a micro-batch of packed rows (a list of tuples of (document, start, stop) spans)"


def _span(span: Any) -> tuple[int, int, int]:
    if (
        not isinstance(span, Sequence)
        or isinstance(span, str | bytes)
        or len(span) != 3
        or not all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in span)
    ):
        raise TypeError(f"items must be {_ROWS}; got a span {span!r}")
    d, a, b = (int(x) for x in span)
    return d, a, b


@dataclass(frozen=True)
class PackedRows:
    """Items are micro-batches of packed rows of ``seq_len`` tokens (see the module docstring).

    Attributes:
        seq_len: Tokens a row holds.
    """

    seq_len: int
    name: str = "packed-rows"
    unit: str = "token"
    batched: bool = True
    dropped_counter: str = "tokens_dropped"
    padded_counter: str = "tokens_padded"

    def slots(self, item: Any) -> Sequence[Any]:
        if isinstance(item, str | bytes) or not isinstance(item, Sequence):
            raise TypeError(f"items must be {_ROWS}; got {type(item).__name__}: {item!r}")
        for row in item:
            if isinstance(row, str | bytes) or not isinstance(row, Sequence):
                raise TypeError(f"items must be {_ROWS}; got a row {row!r}")
        return item

    def spans(self, slots: Sequence[Any]) -> Spans:
        flat = [_span(span) for row in slots for span in row]
        if not flat:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        table = np.array(flat, dtype=np.int64)
        return table[:, 0], table[:, 1], table[:, 2]

    def padding(self, slots: Sequence[Any]) -> int:
        tokens = sum(b - a for row in slots for _, a, b in (_span(s) for s in row))
        return self.seq_len * len(slots) - tokens
