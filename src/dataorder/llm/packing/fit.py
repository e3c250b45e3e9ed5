"""Best-fit decreasing of one window of documents into rows of ``seq_len`` tokens.

:func:`pack_window` is a pure function of (the window's documents and lengths, ``seq_len``, the
split rule, a tie-order key). A *row* is a list of spans ``(document, start, stop)`` (token
offsets inside the document, ``stop`` exclusive) holding at most ``seq_len`` tokens.

``split="overflow"`` (pretraining): every token exactly once.

1. A document longer than ``S = seq_len`` gives ``floor(L / S)`` full rows of one span each; its
   remainder, if any, is a *piece* like any shorter document.
2. The window has exactly ``K = ceil(T / S)`` rows (``T`` its tokens), full rows included: the
   row count is a formula, known without packing.
3. Pieces are placed by decreasing length (equal lengths in the keyed tie order), each whole into
   the open row with the least room that holds it; a piece that fits in no row is split: its
   head fills the row with the most room, and the rest is placed again. The rows' room adds up
   to at least the pieces' tokens, so every piece is placed; only split pieces span rows, and the
   window pads fewer than ``S`` tokens.

``split="never"`` (fine-tuning): a document longer than ``S`` is truncated to one row ``(d, 0,
S)`` (``long_documents="truncate"``) or dropped (``"drop"``); the rest are placed by the same
best fit, a new row opening when none has room. No document is split.

NOTE [ Fit is a function of the sorted lengths ]
    The placement loop sees only the sorted sequence of piece lengths; the documents are attached
    afterwards. Two orders of the same multiset of lengths (two epochs' tie orders) therefore give
    the same rows up to which equal-length document is where: the same row count, the same
    padding, the same number of split documents. That is why the row count of a ``"never"``
    window and the split counts are computed once for all epochs.

The loop keeps the distinct room values of the open rows in a sorted list (``bisect``) and the
rows of each value in a stack: O(log R) per piece plus a short ``memmove``, about 1 us per
document in pure Python (the benchmark reports the measured figure), for any ``seq_len``.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_choice, check_index_array, check_int, check_int_array, fail
from dataorder.core.permutation import Permutation

__all__ = [
    "LONG_DOCUMENTS",
    "SPLITS",
    "LongDocuments",
    "PackedWindow",
    "Split",
    "best_fit",
    "best_fit_rooms",
    "pack_window",
]

IntArray = npt.NDArray[np.int64]
#: Packing's split modes: ``"overflow"`` splits only what cannot fit across rows, ``"never"``
#: splits no document. Not :data:`dataorder.core.partition.Split` (how a block is cut between
#: ranks), which shares the name.
Split = Literal["overflow", "never"]
#: What packing does with a document longer than ``seq_len`` under ``split="never"``: keep its
#: first ``seq_len`` tokens (``"truncate"``) or leave it out (``"drop"``).
LongDocuments = Literal["truncate", "drop"]
#: The values of :data:`Split`, for checks and messages.
SPLITS: tuple[str, ...] = ("overflow", "never")
#: The values of :data:`LongDocuments`, for checks and messages.
LONG_DOCUMENTS: tuple[str, ...] = ("truncate", "drop")

Span = tuple[int, int, int]
# Up to this many rows are read one by one; more convert the window's spans to lists once.
_FEW_ROWS = 32


@dataclass(frozen=True)
class PackedWindow:
    """The rows of one window, in fit order: the *full rows* of long documents first, then the
    best-fit rows.

    NOTE [ Full rows are not stored ]
        A document of ``L > S`` tokens gives ``floor(L / S)`` full rows under ``"overflow"`` (one
        truncated row under ``"never"``): a window of documents of 2**31 tokens at ``S = 1``
        holds 2**31 such rows per document. They are stored as one entry per document (its id
        and where its run of full rows starts), and a full row's span is computed when asked, so
        a window's packing costs memory and time in its documents, never in its rows.

    Attributes:
        seq_len: Row capacity ``S``.
        full_doc: int64, one entry per document with full rows, in fit order.
        full_first: int64, ``len(full_doc) + 1`` entries: document ``k``'s full rows are rows
            ``full_first[k]:full_first[k + 1]``, its ``j``-th the span ``(full_doc[k], j S,
            (j + 1) S)``.
        row_offsets: int64, ``fit rows + 1`` entries: best-fit row ``i`` (row ``num_full + i``)
            is spans ``row_offsets[i]:row_offsets[i + 1]``.
        doc: int64, the document of every span of the best-fit rows.
        start: int64, the first token of every span inside its document.
        stop: int64, one past the last token.
        fit_costs: int64, one per best-fit row: the sum of its spans' lengths squared (attention
            cost), exact (each row's cost is at most ``seq_len**2 <= 2**62``).
        tokens: Tokens in the rows.
        padding: ``rows * seq_len - tokens``.
        split_short: Documents of at most ``seq_len`` tokens whose tokens are in more than one
            row.
        split_long: Documents longer than ``seq_len`` in more than one row (every one under
            ``"overflow"``, none under ``"never"``).
        cut: Tokens left out (``"never"``: past ``seq_len`` in a truncated document, or all of a
            dropped one).
        dropped: Documents left out (``long_documents="drop"``).
    """

    seq_len: int
    full_doc: IntArray
    full_first: IntArray
    row_offsets: IntArray
    doc: IntArray
    start: IntArray
    stop: IntArray
    fit_costs: IntArray
    tokens: int
    padding: int
    split_short: int
    split_long: int
    cut: int
    dropped: int

    @property
    def num_full(self) -> int:
        """Full rows (the first rows of the window)."""
        return int(self.full_first[-1])

    @property
    def num_rows(self) -> int:
        """Rows in the window."""
        return self.num_full + int(self.row_offsets.shape[0]) - 1

    @property
    def fit_row_tokens(self) -> IntArray:
        """Tokens in every best-fit row (fit order), int64; a full row holds ``seq_len``."""
        lengths = self.stop - self.start
        ends = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return ends[self.row_offsets[1:]] - ends[self.row_offsets[:-1]]

    def _indices(self, indices: npt.ArrayLike) -> IntArray:
        return check_index_array("indices", indices, self.num_rows, "rows of the window").reshape(
            -1
        )

    def row(self, i: int) -> tuple[Span, ...]:
        """Row ``i`` (fit order) as a tuple of ``(document, start, stop)`` spans."""
        return self.rows(np.array([i], dtype=np.int64))[0]

    def rows(self, indices: npt.ArrayLike) -> list[tuple[Span, ...]]:
        """Rows ``indices`` (fit order)."""
        idx = self._indices(indices)
        out: list[tuple[Span, ...]] = [()] * idx.shape[0]
        full = idx < self.num_full
        if full.any():
            at = np.flatnonzero(full)
            k = np.searchsorted(self.full_first, idx[at], side="right") - 1
            first = (idx[at] - self.full_first[k]) * self.seq_len
            spans = zip(self.full_doc[k].tolist(), first.tolist(), strict=True)
            for i, (d, a) in zip(at.tolist(), spans, strict=True):
                out[i] = ((d, a, a + self.seq_len),)
        fit = np.flatnonzero(~full)
        if fit.size:
            rows = idx[fit] - self.num_full
            off = self.row_offsets
            if rows.shape[0] <= _FEW_ROWS:
                doc, start, stop = self.doc, self.start, self.stop
                for i, r in zip(fit.tolist(), rows.tolist(), strict=True):
                    a, b = int(off[r]), int(off[r + 1])
                    out[i] = tuple(
                        zip(doc[a:b].tolist(), start[a:b].tolist(), stop[a:b].tolist(), strict=True)
                    )
            else:
                doc_l, start_l, stop_l = self.doc.tolist(), self.start.tolist(), self.stop.tolist()
                bounds = zip(off[rows].tolist(), off[rows + 1].tolist(), strict=True)
                for i, (a, b) in zip(fit.tolist(), bounds, strict=True):
                    out[i] = tuple(zip(doc_l[a:b], start_l[a:b], stop_l[a:b], strict=True))
        return out

    def costs_of(self, indices: npt.ArrayLike) -> IntArray:
        """The attention cost of rows ``indices`` (fit order), int64: ``seq_len**2`` for a full
        row."""
        idx = self._indices(indices)
        full = idx < self.num_full
        out = np.full(idx.shape[0], self.seq_len * self.seq_len, dtype=np.int64)
        out[~full] = self.fit_costs[idx[~full] - self.num_full]
        return out

    def tokens_of(self, indices: npt.ArrayLike) -> IntArray:
        """Tokens in rows ``indices`` (fit order), int64."""
        idx = self._indices(indices)
        full = idx < self.num_full
        out = np.full(idx.shape[0], self.seq_len, dtype=np.int64)
        out[~full] = self.fit_row_tokens[idx[~full] - self.num_full]
        return out


def best_fit(
    sizes: list[int], seq_len: int, rows: int | None
) -> tuple[list[int], list[int], list[int], int]:
    """Place pieces into rows of ``seq_len`` tokens by best fit, in the order given.

    Args:
        sizes: Piece lengths, each in ``[1, seq_len]`` (decreasing for best fit *decreasing*).
        seq_len: Row capacity.
        rows: A fixed number of rows, whose room must add up to at least ``sum(sizes)``: a piece
            that fits nowhere is split, head into the roomiest row ("overflow"). None: rows open
            as needed and no piece is split ("never").

    Returns:
        ``(piece, row, size, num_rows)``: one entry per span in placement order (a split piece's
        parts are consecutive, head first), and the number of rows.
    """
    caps: list[int] = []  # sorted distinct room values > 0 of open rows
    by_cap: dict[int, list[int]] = {}  # room -> its rows, a stack
    if rows:
        caps.append(seq_len)
        by_cap[seq_len] = list(range(rows - 1, -1, -1))  # row 0 is used first
    n_rows = rows or 0
    out_piece: list[int] = []
    out_row: list[int] = []
    out_size: list[int] = []
    for p, x in enumerate(sizes):
        while True:
            i = bisect_left(caps, x)
            if i < len(caps):  # the row with the least room that holds x
                c = caps[i]
                stack = by_cap[c]
                r = stack.pop()
                if not stack:
                    del caps[i], by_cap[c]
                take = x
            elif rows is None:  # "never": open a row
                c, r, take = seq_len, n_rows, x
                n_rows += 1
            elif caps:  # "overflow": the head fills the roomiest row
                c = caps[-1]
                stack = by_cap[c]
                r = stack.pop()
                if not stack:
                    caps.pop()
                    del by_cap[c]
                take = c
            else:
                raise RuntimeError(  # the caller's capacity check makes this unreachable
                    f"rows ({rows}) have less room than the pieces ({sum(sizes)} tokens)"
                )
            out_piece.append(p)
            out_row.append(r)
            out_size.append(take)
            room = c - take
            if room:
                if room in by_cap:
                    by_cap[room].append(r)
                else:
                    insort(caps, room)
                    by_cap[room] = [r]
            x -= take
            if not x:
                break
    return out_piece, out_row, out_size, n_rows


def best_fit_rooms(values: list[int], counts: list[int], seq_len: int) -> dict[int, int]:
    """The rows :func:`best_fit` opens under ``"never"`` (``rows=None``), counted by their room
    left, for pieces given as runs: ``counts[i]`` pieces of ``values[i]`` tokens, ``values``
    strictly decreasing in ``[1, seq_len]``. Row count = ``sum(result.values())``.

    Best fit depends only on the multiset of rooms, and a run of equal pieces fills rows in
    bulk: the row with the least room ``c >= x`` takes ``floor(c / x)`` pieces of ``x`` in a row
    (after each, its room is still the least that holds ``x``), then the next row of room ``c``
    does the same. So a run costs one step per distinct room it touches, not one per piece: the
    row counts of ``split="never"`` (which need every window's packing) cost about the number
    of distinct lengths of a window, not its documents.

    >>> best_fit_rooms([6, 3, 1], [2, 3, 4], 10)  # rows: 6+3+1, 6+3+1, 3+1+1
    {0: 2, 5: 1}
    """
    caps: list[int] = []  # sorted distinct rooms > 0 with rows
    rows: dict[int, int] = {}  # room -> rows with that room

    def add(room: int, k: int) -> None:
        if k:
            if room and room not in rows:
                insort(caps, room)
            rows[room] = rows.get(room, 0) + k

    for x, n in zip(values, counts, strict=True):
        while n:
            i = bisect_left(caps, x)
            if i == len(caps):  # no room anywhere: open rows of floor(S / x) pieces each
                per_row = seq_len // x
                opened = -(-n // per_row)
                add(seq_len - per_row * x, opened - 1)
                add(seq_len - (n - (opened - 1) * per_row) * x, 1)
                break
            c = caps[i]
            per_row = c // x
            taken = min(rows[c], -(-n // per_row))
            whole = taken if taken * per_row <= n else taken - 1  # rows that take per_row each
            rows[c] -= taken
            if not rows[c]:
                del rows[c], caps[i]
            add(c - per_row * x, whole)
            n -= whole * per_row
            if taken > whole:  # the last row takes what is left of the run
                add(c - n * x, 1)
                n = 0
    return rows


def pack_window(
    documents: IntArray,
    lengths: IntArray,
    seq_len: int,
    *,
    split: Split = "overflow",
    long_documents: LongDocuments = "truncate",
    tie_key: int | None = None,
) -> PackedWindow:
    """Pack one window (see the module docstring).

    Args:
        documents: int64 document ids of the window, in storage (grid) order.
        lengths: int64 lengths of those documents, each in ``[0, 2**31)``.
        seq_len: Row capacity ``S``.
        split: ``"overflow"`` or ``"never"``.
        long_documents: Under ``"never"``: ``"truncate"`` or ``"drop"`` documents longer than
            ``S``.
        tie_key: Key of the tie order (a keyed permutation of the window's documents applied
            before the stable sort by decreasing length); None keeps storage order.

    Returns:
        The :class:`PackedWindow`, rows in fit order: the full rows of long documents first (in
        tie order), then the best-fit rows.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If an argument is out of range, or ``documents`` and ``lengths`` differ in
            length.
    """
    seq_len = check_int("seq_len", seq_len, min_value=1, max_value=2**31)
    check_choice("split", split, SPLITS)
    check_choice("long_documents", long_documents, LONG_DOCUMENTS)
    if tie_key is not None:
        check_int("tie_key", tie_key, min_value=0, max_value=2**64 - 1)
    documents = check_int_array("documents", documents, min_value=0, max_value=2**62)
    lengths = check_int_array("lengths", lengths, min_value=0, max_value=2**31 - 1)
    if documents.shape != lengths.shape:
        fail("lengths", f"one length per document ({documents.shape[0]})", f"<{lengths.shape[0]}>")
    n = int(documents.shape[0])
    if tie_key is not None and n > 1:
        shuffle = Permutation(n, tie_key)(np.arange(n, dtype=np.int64))
        documents, lengths = documents[shuffle], lengths[shuffle]
    long = lengths > seq_len
    long_docs, long_lens = documents[long], lengths[long]
    cut = dropped = 0
    if split == "overflow":
        full = long_lens // seq_len  # full rows of each long document: one span each
        rest = long_lens - full * seq_len
        full_doc = long_docs
        has_rest = rest > 0
        piece_doc = np.concatenate([long_docs[has_rest], documents[~long]])
        piece_start = np.concatenate(
            [(full * seq_len)[has_rest], np.zeros((~long).sum(), np.int64)]
        )
        piece_len = np.concatenate([rest[has_rest], lengths[~long]])
        piece_is_long = np.concatenate(
            [np.ones(int(has_rest.sum()), bool), np.zeros(int((~long).sum()), bool)]
        )
        total = int(lengths.sum())
        open_rows: int | None = -(-total // seq_len) - int(full.sum())
    else:
        if long_documents == "truncate":
            full_doc = long_docs
            cut = int(long_lens.sum()) - seq_len * int(long_docs.shape[0])
        else:
            full_doc = long_docs[:0]
            cut, dropped = int(long_lens.sum()), int(long_docs.shape[0])
        full = np.ones(full_doc.shape[0], dtype=np.int64)
        piece_doc, piece_len = documents[~long], lengths[~long]
        piece_start = np.zeros(piece_doc.shape[0], dtype=np.int64)
        piece_is_long = np.zeros(piece_doc.shape[0], dtype=bool)
        open_rows = None
    full_first = np.concatenate([[0], np.cumsum(full)]).astype(np.int64)
    n_full = int(full_first[-1])
    # decreasing length; ties keep the (keyed) order above; empty documents place nothing
    order = np.argsort(-piece_len, kind="stable")
    order = order[piece_len[order] > 0]
    piece_doc, piece_start = piece_doc[order], piece_start[order]
    piece_len, piece_is_long = piece_len[order], piece_is_long[order]
    pieces, rows, sizes, n_open = best_fit(piece_len.tolist(), seq_len, open_rows)
    p = np.array(pieces, dtype=np.int64)
    size = np.array(sizes, dtype=np.int64)
    # offset of each part inside its piece: parts of a piece are consecutive, head first
    ends = np.cumsum(size)
    head = np.ones(p.shape[0], dtype=bool)
    head[1:] = p[1:] != p[:-1]
    run_start = np.maximum.accumulate(np.where(head, np.arange(p.shape[0]), 0))
    inside = ends - size - (ends - size)[run_start]
    span_row = np.array(rows, dtype=np.int64)
    by_row = np.argsort(span_row, kind="stable")
    counts = np.bincount(span_row, minlength=n_open).astype(np.int64)
    row_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    span_doc = piece_doc[p][by_row]
    span_start = (piece_start[p] + inside)[by_row]
    span_len = size[by_row]
    square = span_len * span_len
    costs = np.add.reduceat(square, row_offsets[:-1]) if n_open else np.zeros(0, dtype=np.int64)
    parts = np.bincount(p, minlength=piece_len.shape[0])
    split_pieces = parts > 1
    tokens = int(span_len.sum()) + n_full * seq_len
    return PackedWindow(
        seq_len=seq_len,
        full_doc=full_doc.astype(np.int64),
        full_first=full_first,
        row_offsets=row_offsets,
        doc=span_doc,
        start=span_start,
        stop=span_start + span_len,
        fit_costs=costs.astype(np.int64),
        tokens=tokens,
        padding=(n_full + n_open) * seq_len - tokens,
        split_short=int((split_pieces & ~piece_is_long).sum()),
        split_long=int(long_docs.shape[0]) if split == "overflow" else 0,
        cut=cut,
        dropped=dropped,
    )
