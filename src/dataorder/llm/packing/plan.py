"""Packed rows of an epoch as a pure function of (lengths, seq_len, seed, epoch, parameters).

:class:`PackingPlan` holds the configuration and what every epoch shares (the windows, their
token totals and row counts); :meth:`PackingPlan.epoch` gives an :class:`EpochRows`, which maps
row positions of that epoch to rows. Nothing is built ahead: a row position costs a search over
the windows' row counts and the packing of its window (cached for the last few windows).

An epoch's row stream::

    windows in a keyed order (a permutation of nW, new every epoch)
      -> each window packed by best fit decreasing (:mod:`dataorder.llm.packing.fit`)
      -> its rows in a keyed order (a permutation of its rows, new every epoch and window)

Row position ``p`` of epoch ``e`` falls in the window whose run of rows holds it (a search over
the prefix sums of the row counts in that epoch's window order, ``O(nW)`` once per epoch), at
row ``p - start`` of that window's shuffled rows.

Row counts. Under ``split="overflow"`` window ``w`` has ``ceil(T_w / seq_len)`` rows (``T_w`` its
tokens), so every count is known from the block totals of the lengths alone: no packing before
the first row. Under ``split="never"`` a window's count needs its best fit; it is the same in
every epoch (NOTE [ Fit is a function of the sorted lengths ] in :mod:`dataorder.llm.packing.fit`),
so every window's count is computed once, when a count is first asked for, and kept. It is
counted run by run of equal lengths (:func:`~dataorder.llm.packing.fit.best_fit_rooms`), not
packed: the cost is reading the lengths and one step per distinct length of a window (the
benchmark reports the measured figure).

NOTE [ Packing keys ]
    Keys enter in three places only, each from :func:`~dataorder.core.keys.derive_key` with
    ``stream="packed"`` and the epoch ``e``:

    * ``purpose="window-order"``: the order in which epoch ``e`` visits the windows
      (a :class:`~dataorder.core.permutation.Permutation` of ``nW``);
    * ``purpose="tie-order", extra=(w,)``: the order of window ``w``'s documents before the
      stable sort by decreasing length, so equal lengths trade places between epochs;
    * ``purpose="row-order", extra=(w,)``: the order of window ``w``'s rows.

    (The grid offsets of :mod:`dataorder.llm.packing.windows` use ``purpose="window-offsets"``
    at epoch 0: they fix the windows for all epochs.) So every epoch has the same windows, the
    same row count and the same statistics, and a different order.

Example:
    >>> import numpy as np
    >>> from dataorder.llm.packing.lengths import DocumentLengths
    >>> plan = PackingPlan(DocumentLengths([5, 3, 9, 2, 7]), seq_len=8, chunk=1, window=2)
    >>> plan.num_windows, plan.rows_per_window.tolist(), plan.rows_per_epoch
    (3, [1, 2, 1], 4)
    >>> rows = plan.epoch(0).rows(np.arange(4))
    >>> sorted(span for row in rows for span in row)
    [(0, 0, 5), (1, 0, 3), (2, 0, 8), (2, 8, 9), (3, 0, 2), (4, 0, 7)]
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_choice, check_index_array, check_int, fail
from dataorder.core.batching import coverage
from dataorder.core.keys import KEY_DERIVATION_VERSION, MAX_SEED, derive_key
from dataorder.core.permutation import PERMUTATION_VERSION, Permutation
from dataorder.core.state import Scalar
from dataorder.llm.packing.fit import (
    LONG_DOCUMENTS,
    SPLITS,
    LongDocuments,
    PackedWindow,
    Split,
    best_fit_rooms,
    pack_window,
)
from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.windows import WindowGrid, window_grid

__all__ = [
    "CACHED_EPOCHS",
    "CACHED_WINDOWS",
    "DEFAULT_CHUNK",
    "DEFAULT_WINDOW",
    "FILL_BINS",
    "MAX_CHUNK",
    "MAX_PASS",
    "MAX_SEQ_LEN",
    "MAX_WINDOW",
    "PACKING_VERSION",
    "EpochRows",
    "PackingPlan",
    "PackingStats",
    "default_window",
]

IntArray = npt.NDArray[np.int64]
Span = tuple[int, int, int]
Row = tuple[Span, ...]

#: Version of the packing construction (grid, fit, keys). Part of :meth:`PackingPlan.config`:
#: changing any rule changes every row.
PACKING_VERSION = 1
#: Largest ``seq_len``: a span squared then fits int64 (row costs are exact).
MAX_SEQ_LEN = 2**31
#: Largest ``chunk`` (documents per contiguous read).
MAX_CHUNK = 2**20
#: Largest ``window``: a window's packing is what a resume and a first batch cost (about 1 us a
#: document: 1.2 s at 2**20), and its token total stays below 2**55 (NOTE [ Length bounds ]).
MAX_WINDOW = 2**20
#: Largest epoch of a plan: 2**62 (``MAX_POSITIONS``), past a sampler's ``MAX_EPOCH``. A sampler's
#: epochs stop at ``MAX_EPOCH``, the bound of its state; a blend reads its ``j``-th row of a
#: source from that source's pass ``j // rows_per_epoch``, and ``j`` reaches 2**62 in a long run
#: over a small source. Nothing in a plan depends on the bound: epochs only enter keys.
MAX_PASS = 2**62
#: Default documents per chunk: 128 consecutive documents, one contiguous read.
DEFAULT_CHUNK = 128
#: Default documents per window, from benchmarks/bench_pack.py's curve on 2 x 10^5 lognormal(6.0,
#: 1.1) lengths: at seq_len 8192 padding 0.048 % (target 0.1 %; 0.14 % at 4096 documents) and no
#: document shorter than seq_len split (target 1 %); at seq_len 2048 "never" 0.021 % (target
#: 0.2 %). One window packs in 11-27 ms here (about 1 us per document), the most a resume costs.
DEFAULT_WINDOW = 16384
#: Bins of :meth:`PackingPlan.fill_histogram` (half a percent of ``seq_len`` each).
FILL_BINS = 200
#: Packed windows an :class:`EpochRows` keeps (a global batch rarely spans more than two).
CACHED_WINDOWS = 4
#: Epochs whose :class:`EpochRows` a plan keeps: building one is a permutation of every window
#: and a cumulative sum (2-3 ms at 62,500 windows), and a blend asks each source for one or two
#: passes on every batch.
CACHED_EPOCHS = 4


def default_window(chunk: int) -> int:
    """The window used when none is given: :data:`DEFAULT_WINDOW` documents rounded down to
    whole chunks, and at least one chunk (``16384`` at the default ``chunk=128``; ``16300`` at
    ``chunk=100``). A window given explicitly must be a multiple of ``chunk``; this is the one
    place the default is fitted to it (:class:`PackingPlan` calls it for ``window=None``, so the
    packed sampler and ``dataorder pack`` agree, and a sampler's state records the result).

    Raises:
        TypeError: If ``chunk`` is not an int.
        ValueError: If ``chunk`` is outside ``[1, 2**20]``.
    """
    chunk = check_int("chunk", chunk, min_value=1, max_value=MAX_CHUNK)
    return max(chunk, DEFAULT_WINDOW // chunk * chunk)


@dataclass(frozen=True)
class PackingStats:
    """What one epoch of a plan reads (the same for every epoch).

    Attributes:
        documents: Documents in the corpus.
        documents_empty: Documents with no tokens (they pack into nothing).
        tokens: Tokens in the corpus.
        rows: Rows per epoch.
        tokens_padded: ``rows * seq_len`` minus the tokens in rows.
        tokens_cut: Tokens left out (``split="never"``: truncated or dropped).
        documents_dropped: Documents left out (``long_documents="drop"``).
        documents_longer: Documents longer than ``seq_len``.
        split_shorter: Documents of at most ``seq_len`` tokens split across rows.
        split_longer: Documents longer than ``seq_len`` split across rows (all of them under
            ``"overflow"``).
    """

    documents: int
    documents_empty: int
    tokens: int
    rows: int
    tokens_padded: int
    tokens_cut: int
    documents_dropped: int
    documents_longer: int
    split_shorter: int
    split_longer: int


def _frozen(array: IntArray) -> IntArray:
    """``array``, read-only: what a plan hands out is shared by every later answer."""
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class _EveryWindow:
    """What packing every window once tells (the same in every epoch)."""

    rows: IntArray
    split_shorter: int
    fill: IntArray
    tokens: IntArray  # tokens read per window (window_tokens less what "never" cuts)


class PackingPlan:
    """The packing configuration of a corpus and what every epoch shares.

    Args:
        lengths: The documents' token counts (:class:`DocumentLengths`, or an integer array it
            wraps).
        seq_len: Row capacity in tokens, an int in ``[1, 2**31]``.
        split: ``"overflow"`` (pretraining: every token once, only what cannot fit is split
            across rows) or ``"never"`` (fine-tuning: no document is split).
        window: Documents packed together, a positive multiple of ``chunk``, at most ``2**20``;
            None: :func:`default_window` of ``chunk``. Larger windows pad and split less; a
            window's packing is what a resume costs.
        chunk: Documents per chunk (consecutive documents, one read), in ``[1, 2**20]``.
        long_documents: Under ``split="never"``, what happens to a document longer than
            ``seq_len``: ``"truncate"`` (one row of its first ``seq_len`` tokens) or ``"drop"``.
            ``"drop"`` is refused under ``"overflow"``, which never drops a token.
        seed: A non-negative int (at most ``2**63 - 1``).

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If an argument is out of range, naming it.
    """

    def __init__(
        self,
        lengths: DocumentLengths | npt.ArrayLike,
        seq_len: int,
        *,
        split: Split = "overflow",
        window: int | None = None,
        chunk: int = DEFAULT_CHUNK,
        long_documents: LongDocuments = "truncate",
        seed: int = 0,
    ) -> None:
        self.lengths = lengths if isinstance(lengths, DocumentLengths) else DocumentLengths(lengths)
        self.seq_len = check_int("seq_len", seq_len, min_value=1, max_value=MAX_SEQ_LEN)
        self.split: Split = check_choice("split", split, SPLITS)  # type: ignore[assignment]
        self.chunk = check_int("chunk", chunk, min_value=1, max_value=MAX_CHUNK)
        if window is None:
            window = default_window(self.chunk)
        self.window = check_int("window", window, min_value=1, max_value=MAX_WINDOW)
        if self.window % self.chunk:
            fail("window", f"a multiple of chunk={self.chunk}", window)
        self.long_documents: LongDocuments = check_choice(  # type: ignore[assignment]
            "long_documents", long_documents, LONG_DOCUMENTS
        )
        if self.split == "overflow" and self.long_documents == "drop":
            fail("long_documents", "'truncate' under split='overflow' (it drops nothing)", "drop")
        self.seed = check_int("seed", seed, min_value=0, max_value=MAX_SEED)
        self.grid: WindowGrid = window_grid(len(self.lengths), self.chunk, self.window, self.seed)
        self._window_tokens: IntArray | None = None
        self._rows: IntArray | None = None
        self._all: _EveryWindow | None = None
        self._cache: OrderedDict[tuple[int, int], tuple[PackedWindow, Permutation]] = OrderedDict()
        self._epochs: OrderedDict[int, EpochRows] = OrderedDict()

    def __repr__(self) -> str:
        return (
            f"PackingPlan({len(self.lengths)} documents, seq_len={self.seq_len}, "
            f"split={self.split!r}, window={self.window}, chunk={self.chunk}, seed={self.seed})"
        )

    def config(self) -> dict[str, Scalar]:
        """Every field the rows depend on, as plain scalars (for a sampler's state and its
        fingerprint); the lengths enter through :meth:`DocumentLengths.fingerprint`."""
        return {
            "packing_version": PACKING_VERSION,
            "permutation_version": PERMUTATION_VERSION,
            "key_derivation_version": KEY_DERIVATION_VERSION,
            "documents": len(self.lengths),
            "lengths": self.lengths.fingerprint(),
            "seq_len": self.seq_len,
            "split": self.split,
            "window": self.window,
            "chunk": self.chunk,
            "long_documents": self.long_documents,
            "seed": self.seed,
        }

    # -- what every epoch shares ----------------------------------------------------------------
    @property
    def num_windows(self) -> int:
        """Windows per epoch."""
        return self.grid.num_windows

    @property
    def window_tokens(self) -> IntArray:
        """Tokens of every window (from the block totals of the lengths at ``chunk``)."""
        if self._window_tokens is None:
            self._window_tokens = _frozen(self.grid.totals(self.lengths.block_totals(self.chunk)))
        return self._window_tokens

    @property
    def rows_per_window(self) -> IntArray:
        """Rows of every window, int64: ``ceil(T_w / seq_len)`` under ``"overflow"``; under
        ``"never"`` from packing every window once (cached)."""
        if self._rows is None:
            if self.split == "overflow":
                self._rows = _frozen(-(-self.window_tokens // self.seq_len))
            else:
                self._rows = self._every_window().rows
        return self._rows

    @property
    def tokens_per_window(self) -> IntArray:
        """Tokens every window's rows hold, int64: its tokens under ``"overflow"``; under
        ``"never"`` less what truncation or dropping cuts (counted once, cached)."""
        if self.split == "overflow":
            return self.window_tokens
        return self._every_window().tokens

    @property
    def tokens_per_epoch(self) -> int:
        """Tokens in the rows of an epoch: the corpus less what ``"never"`` cuts."""
        return int(self.lengths.total_tokens) - self.tokens_cut_per_epoch

    def pass_tokens(self, first: int, j0: int, j1: int) -> tuple[int, int]:
        """``(tokens read, distinct tokens read)`` by rows ``[j0, j1)`` of passes in order, row
        ``j`` in epoch ``first + j // P`` (``P`` rows per epoch): a run of whole passes, at most
        a tail of one pass and a head of the next, counted from window totals."""
        per_pass, tokens = self.rows_per_epoch, self.tokens_per_epoch
        (p0, a), (p1, b) = divmod(j0, per_pass), divmod(j1, per_pass)
        p0, p1 = p0 + first, p1 + first
        if p0 == p1:
            stream = self.epoch(p0)
            part = stream.tokens_from(a) - stream.tokens_from(b)
            return part, part
        head = self.epoch(p0).tokens_from(a)
        tail = tokens - self.epoch(p1).tokens_from(b) if b else 0
        units = head + (p1 - p0 - 1) * tokens + tail
        if p1 - p0 > 1 or a == 0:  # a whole pass read: every token it holds
            return units, tokens
        return units, self.tokens_covered([(p0, a, per_pass), (p1, 0, b)])

    def tokens_covered(self, parts: list[tuple[int, int, int]]) -> int:
        """Distinct tokens the rows of ``parts`` hold together: each part ``(epoch, start,
        stop)`` is the rows at positions ``[start, stop)`` of that epoch; parts of one epoch do
        not overlap.

        Every epoch has the same windows (NOTE [ Packing keys ]), so a window whose rows a part
        takes whole holds the same tokens in any epoch: the cost is a step per window, plus the
        packing of the at most two windows each part takes in part; only a window that parts of
        two epochs both take in part (their rows differ) is counted span by span, in its rows.
        """
        whole = np.zeros(self.num_windows, dtype=bool)
        partial: dict[int, list[tuple[int, int, int]]] = {}
        for epoch, start, stop in parts:
            if stop <= start:
                continue
            rows = self.epoch(epoch)
            k0 = int(np.searchsorted(rows.row_starts, start, side="right")) - 1
            k1 = int(np.searchsorted(rows.row_starts, stop - 1, side="right")) - 1
            for k in {k0, k1}:
                w, first = int(rows.window_order[k]), int(rows.row_starts[k])
                lo, hi = max(start, first) - first, min(stop, int(rows.row_starts[k + 1])) - first
                if hi - lo == int(self.rows_per_window[w]):
                    whole[w] = True
                else:
                    partial.setdefault(w, []).append((epoch, lo, hi))
            whole[rows.window_order[k0 + 1 : k1]] = True
        total = int(self.tokens_per_window[whole].sum())
        for w, pieces in partial.items():
            if whole[w]:
                continue
            if len({e for e, _, _ in pieces}) == 1:  # rows of one epoch: disjoint
                total += sum(self._window_tokens_between(e, w, lo, hi) for e, lo, hi in pieces)
                continue
            spans = []
            for e, lo, hi in pieces:
                packed, order = self.packed_window(e, w)
                spans += [x for row in packed.rows(order(np.arange(lo, hi))) for x in row]
            table = np.array(spans, dtype=np.int64).reshape(-1, 3)
            total += coverage((table[:, 0], table[:, 1], table[:, 2])).distinct
        return total

    def _window_tokens_between(self, epoch: int, window: int, lo: int, hi: int) -> int:
        """Tokens in the rows at positions ``[lo, hi)`` of ``window``'s keyed row order: rows
        are full but for the best-fit rows' room (NOTE [ Full rows are not stored ]), so this
        inverts the order once per best-fit row, never once per row."""
        packed, order = self.packed_window(epoch, window)
        fit = packed.fit_row_tokens
        placed = order.inverse(packed.num_full + np.arange(fit.shape[0], dtype=np.int64))
        inside = (placed >= lo) & (placed < hi)
        return (hi - lo) * self.seq_len - int((self.seq_len - fit[inside]).sum())

    @property
    def rows_per_epoch(self) -> int:
        """Rows in an epoch."""
        return int(self.rows_per_window.sum())

    @property
    def tokens_cut_per_epoch(self) -> int:
        """Tokens left out per epoch: past ``seq_len`` in truncated documents, all of dropped
        ones (``"never"``); 0 under ``"overflow"``."""
        if self.split == "overflow":
            return 0
        beyond = self.lengths.tokens_beyond(self.seq_len)
        if self.long_documents == "truncate":
            return beyond
        return beyond + self.seq_len * self.lengths.count_longer_than(self.seq_len)

    @property
    def documents_dropped(self) -> int:
        """Documents left out per epoch (``long_documents="drop"``), else 0."""
        if self.split == "never" and self.long_documents == "drop":
            return self.lengths.count_longer_than(self.seq_len)
        return 0

    @property
    def tokens_padded_per_epoch(self) -> int:
        """Padding tokens per epoch: ``rows * seq_len`` minus the tokens read."""
        rows = self.rows_per_epoch  # first: its block totals also give the total tokens
        return rows * self.seq_len - (self.lengths.total_tokens - self.tokens_cut_per_epoch)

    def documents_split(self) -> tuple[int, int]:
        """``(shorter, longer)``: documents of at most ``seq_len`` tokens, and longer ones, whose
        tokens are in more than one row, per epoch (the same in every epoch). Under
        ``"overflow"`` this packs every window once (cached); under ``"never"`` it is
        ``(0, 0)``."""
        if self.split == "never":
            return 0, 0
        shorter = self._every_window().split_shorter
        return shorter, self.lengths.count_longer_than(self.seq_len)

    def stats(self) -> PackingStats:
        """Every count of an epoch (packs every window once under ``"overflow"``)."""
        shorter, longer = self.documents_split()
        n = len(self.lengths)
        return PackingStats(
            documents=n,
            documents_empty=n - self.lengths.count_longer_than(0),
            tokens=self.lengths.total_tokens,
            rows=self.rows_per_epoch,
            tokens_padded=self.tokens_padded_per_epoch,
            tokens_cut=self.tokens_cut_per_epoch,
            documents_dropped=self.documents_dropped,
            documents_longer=self.lengths.count_longer_than(self.seq_len),
            split_shorter=shorter,
            split_longer=longer,
        )

    def fill_histogram(self) -> IntArray:
        """Rows per epoch by fill: int64, :data:`FILL_BINS` entries; bin ``i`` counts the rows
        holding ``t`` tokens with ``floor(FILL_BINS * t / seq_len) = i`` (full rows in the last
        bin). The same in every epoch; packs every window once (cached)."""
        return self._every_window().fill

    def _every_window(self) -> _EveryWindow:
        """Every window's row count, split count and fill, the same in every epoch (NOTE [ Fit
        is a function of the sorted lengths ]), cached. Under ``"overflow"`` each window is
        packed; under ``"never"`` only its rooms are counted, run by run
        (:func:`~dataorder.llm.packing.fit.best_fit_rooms`)."""
        if self._all is not None:
            return self._all
        rows = np.zeros(self.num_windows, dtype=np.int64)
        read = np.zeros(self.num_windows, dtype=np.int64)
        fill = np.zeros(FILL_BINS, dtype=np.int64)
        shorter = 0
        for w in range(self.num_windows):
            if self.split == "never":
                tokens, full = self._never_row_tokens(w), 0
            else:
                packed = self._pack(w, None)
                shorter += packed.split_short
                tokens, full = packed.fit_row_tokens, packed.num_full
            rows[w] = tokens.shape[0] + full
            read[w] = int(tokens.sum()) + full * self.seq_len
            bins = np.minimum(tokens * FILL_BINS // self.seq_len, FILL_BINS - 1)
            fill += np.bincount(bins, minlength=FILL_BINS)
            fill[FILL_BINS - 1] += full  # NOTE [ Full rows are not stored ]
        if self._rows is not None and not np.array_equal(rows, self._rows):
            raise RuntimeError("packing every window disagrees with the row-count formula")
        self._all = _EveryWindow(_frozen(rows), shorter, _frozen(fill), _frozen(read))
        return self._all

    def _never_row_tokens(self, window: int) -> IntArray:
        """Tokens of every row of a ``"never"`` window (in no particular order), without
        packing it: truncated documents fill a row each, the rest by best-fit rooms."""
        s = self.seq_len
        lens = self.lengths.take(self.grid.documents(window))
        longer = int((lens > s).sum()) if self.long_documents == "truncate" else 0
        values, counts = np.unique(lens[(lens > 0) & (lens <= s)], return_counts=True)
        rooms = best_fit_rooms(values[::-1].tolist(), counts[::-1].tolist(), s)
        tokens = np.repeat(s - np.array(list(rooms), dtype=np.int64), list(rooms.values()))
        return np.concatenate([np.full(longer, s, dtype=np.int64), tokens])

    def _pack(self, window: int, tie_key: int | None) -> PackedWindow:
        docs = self.grid.documents(window)
        lens = self.lengths.take(docs)
        # where the source stores cumulative counts (a Megatron index's pointers), they and the
        # lengths are two records of one thing: a window's two totals must agree before any of
        # its rows is handed out (the counts give the row count, the lengths the rows)
        if self.lengths.has_cumulative and int(lens.sum()) != int(self.window_tokens[window]):
            raise ValueError(
                f"lengths ({self.lengths.source}) disagree with its cumulative counts in window "
                f"{window}: {int(lens.sum())} tokens by length, "
                f"{int(self.window_tokens[window])} by count"
            )
        return pack_window(
            docs,
            lens,
            self.seq_len,
            split=self.split,
            long_documents=self.long_documents,
            tie_key=tie_key,
        )

    def packed_window(self, epoch: int, window: int) -> tuple[PackedWindow, Permutation]:
        """Window ``window`` packed for ``epoch`` and the keyed order of its rows (position
        ``r`` of the window's run is fit row ``order(r)``); the last :data:`CACHED_WINDOWS`
        are kept."""
        epoch = check_int("epoch", epoch, min_value=0, max_value=MAX_PASS)
        window = check_int("window", window, min_value=0, max_value=self.num_windows - 1)
        key = (epoch, window)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        tie = derive_key(
            self.seed, epoch=epoch, stream="packed", purpose="tie-order", extra=(window,)
        )
        packed = self._pack(window, tie)
        row_key = derive_key(
            self.seed, epoch=epoch, stream="packed", purpose="row-order", extra=(window,)
        )
        hit = (packed, Permutation(max(1, packed.num_rows), row_key))
        self._cache[key] = hit
        while len(self._cache) > CACHED_WINDOWS:
            self._cache.popitem(last=False)
        return hit

    def epoch(self, epoch: int) -> EpochRows:
        """The rows of ``epoch``, an int in ``[0, 2**62]`` (:data:`MAX_PASS`); the last
        :data:`CACHED_EPOCHS` are kept (an :class:`EpochRows` is immutable)."""
        epoch = check_int("epoch", epoch, min_value=0, max_value=MAX_PASS)
        rows = self._epochs.get(epoch)
        if rows is not None:
            self._epochs.move_to_end(epoch)
            return rows
        rows = EpochRows(self, epoch)
        self._epochs[epoch] = rows
        while len(self._epochs) > CACHED_EPOCHS:
            self._epochs.popitem(last=False)
        return rows


class EpochRows:
    """The row stream of one epoch of a :class:`PackingPlan`. Build with
    :meth:`PackingPlan.epoch`.

    Attributes:
        plan: The plan.
        epoch: The epoch.
        window_order: int64, the windows in the order this epoch visits them.
        row_starts: int64, ``nW + 1`` entries: the first row position of each window's run, in
            visit order (the last entry is :attr:`num_rows`).
    """

    def __init__(self, plan: PackingPlan, epoch: int) -> None:
        self.plan = plan
        self.epoch = epoch
        n_w = plan.num_windows
        key = derive_key(plan.seed, epoch=epoch, stream="packed", purpose="window-order")
        self.window_order: IntArray = _frozen(Permutation(n_w, key)(np.arange(n_w, dtype=np.int64)))
        counts = plan.rows_per_window[self.window_order]
        self.row_starts: IntArray = _frozen(
            np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        )

    @property
    def num_rows(self) -> int:
        """Rows in the epoch."""
        return int(self.row_starts[-1])

    def __repr__(self) -> str:
        return f"EpochRows(epoch={self.epoch}, rows={self.num_rows}, plan={self.plan!r})"

    def _positions(self, positions: Any) -> IntArray:
        return check_index_array("positions", positions, self.num_rows, "row positions").ravel()

    def locate(self, positions: npt.ArrayLike) -> tuple[IntArray, IntArray]:
        """``(ordinal, row)`` of each row position: the window's place in this epoch's visit
        order (the window is ``window_order[ordinal]``) and the position in its shuffled rows.

        Raises:
            TypeError: If ``positions`` is not integers.
            ValueError: If a position is outside ``[0, num_rows)``.
        """
        pos = self._positions(positions)
        ordinal = np.searchsorted(self.row_starts, pos, side="right") - 1
        return ordinal.astype(np.int64), pos - self.row_starts[ordinal]

    def _each_window(self, positions: npt.ArrayLike) -> Any:
        """``(indices into positions, packed window, fit rows)`` for every window touched."""
        ordinal, row = self.locate(positions)
        if not ordinal.size:
            return
        order = np.argsort(ordinal, kind="stable")
        sorted_ord = ordinal[order]
        cuts = np.flatnonzero(sorted_ord[1:] != sorted_ord[:-1]) + 1
        for sel in np.split(order, cuts):
            window = int(self.window_order[ordinal[sel[0]]])
            packed, row_order = self.plan.packed_window(self.epoch, window)
            yield sel, packed, row_order(row[sel])

    def rows(self, positions: npt.ArrayLike) -> list[Row]:
        """The rows at ``positions`` (an int array, any order, repeats allowed), each a tuple of
        ``(document, start, stop)`` spans. Each window touched is packed once.

        Raises:
            TypeError: If ``positions`` is not integers.
            ValueError: If a position is outside ``[0, num_rows)``.
        """
        out: list[Row] = [()] * int(np.size(positions))
        for sel, packed, fit_rows in self._each_window(positions):
            for i, r in zip(sel.tolist(), packed.rows(fit_rows), strict=True):
                out[i] = r
        return out

    def tokens_from(self, position: int) -> int:
        """Tokens in the rows at positions ``[position, num_rows)``, from window totals: the cost
        is the packing of one window plus one step per window after it, never one per row (a
        sampler's dropped tail may hold 2**40 rows of one token).

        A row is full but for its padding, and only best-fit rows have any (NOTE [ Full rows
        are not stored ]): the straddled window's tokens are its rows times ``seq_len`` less the
        padding of the best-fit rows at or past ``position`` (one inverse of its row order per
        best-fit row); each later window adds its tokens read.
        """
        position = check_int("position", position, min_value=0, max_value=self.num_rows)
        if position == self.num_rows:
            return 0
        plan = self.plan
        k = int(np.searchsorted(self.row_starts, position, side="right")) - 1
        window = int(self.window_order[k])
        off, count = position - int(self.row_starts[k]), int(plan.rows_per_window[window])
        tokens = plan._window_tokens_between(self.epoch, window, off, count)
        return tokens + int(plan.tokens_per_window[self.window_order[k + 1 :]].sum())

    def costs(self, positions: npt.ArrayLike) -> IntArray:
        """The attention cost (sum of span lengths squared) of the rows at ``positions``."""
        out = np.zeros(int(np.size(positions)), dtype=np.int64)
        for sel, packed, fit_rows in self._each_window(positions):
            out[sel] = packed.costs_of(fit_rows)
        return out
