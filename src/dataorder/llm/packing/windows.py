"""Packing windows: which documents are packed together, fixed for a corpus and a seed.

Documents are grouped in *chunks* of ``chunk`` consecutive documents (storage order, so a chunk
is one contiguous read): chunk ``k`` is documents ``[k C, min(N, (k + 1) C))``, ``M = ceil(N / C)``
chunks. A *window* is ``c = window // chunk`` chunks (at most ``M``) packed together; there are
``nW = ceil(M / c)`` windows.

The chunks are laid out on a grid of ``c`` rows and ``nW`` columns, row by row: cell ``(j, k)``
holds chunk ``j nW + k`` (empty past ``M``). Window ``w`` takes one cell of every row,
``(j, (w + o_j) mod nW)``, where the cyclic offsets ``o_j`` come from the seed. So:

* every window is a cross-section of the whole corpus (its chunks are about ``N / c`` documents
  apart), not a run of neighbouring documents, so a corpus stored sorted by source or length
  still gives windows of the same make-up and the same packing quality;
* windows differ by at most one chunk (the empty cells are a suffix of the grid, so at most one
  row is partly empty);
* the token total of each window is one vectorised pass over the chunk totals (each grid row
  rolled by its offset, then summed), which is what makes the row count of every window
  (``ceil(T_w / seq_len)`` under ``split="overflow"``) free.

Nothing here depends on the epoch: every epoch packs the same windows (NOTE [ Packing keys ] in
:mod:`dataorder.llm.packing.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dataorder.core.keys import derive_key
from dataorder.core.permutation import mix64

__all__ = ["WindowGrid", "window_grid"]

IntArray = npt.NDArray[np.int64]
_GOLDEN = 0x9E3779B97F4A7C15


@dataclass(frozen=True)
class WindowGrid:
    """The chunks of every window. Build with :func:`window_grid`.

    Attributes:
        num_documents: ``N``.
        chunk: Documents per chunk ``C``.
        chunks_per_window: ``c``, at most the number of chunks.
        offsets: The cyclic offset ``o_j`` of every grid row, int64 in ``[0, nW)``.
    """

    num_documents: int
    chunk: int
    chunks_per_window: int
    offsets: IntArray

    @property
    def num_chunks(self) -> int:
        """``M = ceil(N / C)``."""
        return -(-self.num_documents // self.chunk)

    @property
    def num_windows(self) -> int:
        """``nW = ceil(M / c)``."""
        return -(-self.num_chunks // self.chunks_per_window)

    def chunks(self, window: int) -> IntArray:
        """The chunks of ``window``, in grid-row order."""
        n_w = self.num_windows
        rows = np.arange(self.chunks_per_window, dtype=np.int64)
        ids = rows * n_w + (window + self.offsets) % n_w
        return ids[ids < self.num_chunks]

    def documents(self, window: int) -> IntArray:
        """The documents of ``window``: its chunks in grid-row order, each chunk's documents in
        storage order."""
        starts = self.chunks(window) * self.chunk
        docs = (starts[:, None] + np.arange(self.chunk, dtype=np.int64)[None, :]).ravel()
        return docs[docs < self.num_documents]

    def totals(self, chunk_totals: IntArray) -> IntArray:
        """Tokens of every window, from the tokens of every chunk (``M`` entries): int64,
        ``nW`` entries. Exact: a window holds at most ``2**20`` documents (``MAX_WINDOW``) of
        ``< 2**31`` tokens (NOTE [ Length bounds ] in :mod:`dataorder.llm.packing.lengths`)."""
        n_w, m = self.num_windows, chunk_totals.shape[0]
        out = np.zeros(n_w, dtype=np.int64)
        for j, o in enumerate(self.offsets.tolist()):
            row = chunk_totals[j * n_w : min(m, (j + 1) * n_w)]  # grid row j (a short last one)
            # out[w] += row[(w + o) mod nW], in two slices instead of a rolled copy
            head = row[o:]
            out[: head.shape[0]] += head
            tail = row[: max(0, min(o, row.shape[0]))]
            out[n_w - o : n_w - o + tail.shape[0]] += tail
        return out


def window_grid(num_documents: int, chunk: int, window: int, seed: int) -> WindowGrid:
    """The grid of :class:`WindowGrid` for ``num_documents`` documents (arguments validated by
    the caller: ``window`` a positive multiple of ``chunk``).

    The offsets are ``mix64(key + GOLDEN (j + 1)) mod nW`` with ``key = derive_key(seed, epoch=0,
    stream="packed", purpose="window-offsets")`` (:func:`~dataorder.core.permutation.mix64`;
    the modulo bias is below ``nW / 2**64``).
    """
    num_chunks = -(-num_documents // chunk)
    c = max(1, min(window // chunk, num_chunks))
    n_w = -(-num_chunks // c)
    key = derive_key(seed, epoch=0, stream="packed", purpose="window-offsets")
    j = np.arange(c, dtype=np.uint64)
    base = np.uint64(key) + np.uint64(_GOLDEN) * (j + np.uint64(1))
    offsets = (mix64(base) % np.uint64(n_w)).astype(np.int64)
    return WindowGrid(num_documents, chunk, c, offsets)
