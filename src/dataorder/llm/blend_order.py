"""The blended order: which flat ``ConcatDataset`` index the ``p``-th sample of a run reads.

:class:`BlendOrder` is the pure function behind :class:`~dataorder.llm.blend.BlendedSampler`:
run positions in, flat indices out (sample ``i`` of source ``d`` is ``sum(sizes[:d]) + i``),
vectorised, with no index arrays and no state. For run position ``p`` (the ``p``-th sample of
the whole run, all ranks together):

1. ``p`` falls in global batch ``k`` (the step of the global batch size schedule that holds it),
   the window ``[a_k, a_k + G_k)``.
2. Each source's share of the window is ``c_d(a_k + G_k) - c_d(a_k)``, from the exact counts of
   :class:`~dataorder.llm.mixture.Mixture` (NOTE [ Mixture exactness ] in
   :mod:`dataorder.llm.mixture`): at every global-batch boundary every source is within
   ``B_d < 1.75`` samples of its weight times the samples of the schedule's entry so far (a
   ramp within 4 of its integral), offsets carried from one entry to the next.
3. The window's slots are laid out source by source, then shuffled by a keyed permutation of the
   window: ``p`` takes slot ``sigma_k(p - a_k)``, so each rank's micro-batch is a random mix of
   sources, not a sorted run.
4. That slot is source ``d``'s ``j``-th draw of the run; the draw reads sample
   ``pi_{d, j // n_d}(j mod n_d)`` of the source (NOTE [ Source orders ]).

Which rank reads position ``p`` is the sampler's partition (contiguous slices of each
micro-block, as Megatron), not the order's: the order never depends on the layout, which is
what makes the sampler elastic.

NOTE [ Source orders ]
    Source ``d`` reads its samples in epochs of its own: its ``j``-th draw of the run is
    position ``j mod n_d`` of source pass ``E = j // n_d``, mapped by
    ``Permutation(n_d, member_key(source_key, d, E))``. So an upsampled source repeats a sample
    only after reading all of its samples, in a fresh order every source pass, and a
    downsampled one never repeats within the run's first ``n_d`` draws. No per-source index
    array exists: a draw is O(1) work. The global batch's slot order is the same construction,
    ``Permutation(G_k, member_key(slot_key, k, 0))``.

    ``member_key`` is a SplitMix64 hash of ``(base key, a, b)`` (injective in ``b`` for a fixed
    ``a``): a BLAKE2b :func:`~dataorder.core.keys.derive_key` per source and source pass would
    cost 10 us each, K of them per global batch. The core's
    :func:`~dataorder.core.permutation.permute_many` evaluates all of these permutations, with
    their different sizes and keys, in one vectorised pass of the core's own network.

    A global batch whose draws from ``d`` straddle a source pass boundary (``h`` draws that
    end epoch ``E - 1``, then ``t`` that start epoch ``E``) may read a sample twice: the first
    ``t`` samples of epoch ``E``'s fresh order can include some of the last ``h`` of epoch
    ``E - 1`` (``h t / n_d`` of them on average, at most ``min(h, t)``; ``BlendedSampler([5],
    [1], 2, r, 2, 4, seed=0, total_samples=12)`` gives rank 1 the micro-batch ``[2, 2]``). Any
    other global batch whose quota from ``d`` is at most ``n_d`` reads distinct samples of
    ``d``. This is not avoided, deliberately: the samples of epoch ``E`` that would replace the
    repeated ones must still be read in epoch ``E``, by later global batches (many batches
    later for a source of small weight), so epoch ``E``'s order would depend on which global
    batch straddled its start. Finding it is a search over the mixture's counts for every draw
    near the start of a source pass instead of O(1) work per draw, and counting distinct reads
    (:func:`distinct_draws`) would have to follow the same exchange. What it would save is
    small: a source read ``q = h + t`` times per global batch repeats at most ``q**2 / (4
    n_d)`` samples per source pass on average (0.0025 for ``q = 100`` and ``n_d = 10**6``),
    once per ``n_d / q`` global batches; a source with ``n_d < q`` repeats samples in every
    global batch whatever the order. A fixed order for every epoch (cyclic reading) would
    avoid the repeats for free but read each sample at the same point of every epoch, a
    correlation worse than a rare repeat.

NOTE [ Blended epochs ]
    The run is one stream of samples, and an epoch is a stretch of it: epoch ``e`` holds the
    global batches between the last global-batch boundary at or before ``e x total_samples``
    and the last one at or before ``(e + 1) x total_samples``. With a global batch size that
    divides ``total_samples`` every epoch has exactly ``total_samples`` samples; otherwise they
    alternate around it. ``total_samples`` defaults to ``sum(sizes)``, one dataset's worth of
    samples per epoch; Megatron runs pass their ``train_samples`` and read one epoch. Nothing
    is padded or dropped: the next epoch continues the stream, so ``set_epoch(e)`` reads the
    same samples whenever it is called, and every source continues across epochs exactly
    where it stopped. ``samples_dropped`` and ``samples_padded`` describe the cursor's epoch:
    the samples of the datasets it does not read, and the reads that repeat a sample.

Example: two sources of 6 and 4 samples (flat indices 0-5 and 6-9), weights 3:1, global
batches of 4: each window takes 3 samples of source 0 and 1 of source 1, in a shuffled order.

    >>> from dataorder.llm.mixture import Mixture, MixtureSchedule
    >>> from dataorder.llm.schedule import BatchSizeSchedule
    >>> mixture = Mixture(MixtureSchedule([(0, [3, 1])]), key=11)
    >>> order = BlendOrder([6, 4], mixture, BatchSizeSchedule.constant(4), 8, seed=0)
    >>> flat = order.samples(np.arange(8)).tolist()
    >>> [sum(x >= 6 for x in flat[:4]), sum(x >= 6 for x in flat[4:])]
    [1, 1]
    >>> order.epoch_bounds(1)
    (8, 16)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dataorder.core.keys import derive_key
from dataorder.core.permutation import Permutation, mix64, permute_many
from dataorder.llm.mixlog import SOURCE_STRIDE, LogMixture
from dataorder.llm.mixture import Mixture
from dataorder.llm.schedule import BatchSizeSchedule

__all__ = [
    "BLEND_STREAM",
    "BLEND_VERSION",
    "BlendOrder",
    "SourcePass",
    "distinct_draws",
    "member_key",
    "member_keys",
    "pass_documents",
    "source_passes",
]

#: Version of the blend's construction (slot layout, member keys, ramp rounding, epochs). Part of
#: the sampler's fingerprint: changing any of them changes every order.
BLEND_VERSION = 1

#: The ``stream`` of every key the blend derives (:func:`~dataorder.core.keys.derive_key`).
BLEND_STREAM = "blend"

_U64 = np.uint64
_I64 = np.int64
_MASK64 = (1 << 64) - 1
# The first coordinate of a member key is spread by the 64-bit golden ratio (SplitMix64's own
# increment), the second by another odd constant: any odd multiplier keeps b -> key injective.
_MEMBER_A = 0x9E3779B97F4A7C15
_MEMBER_B = 0xD6E8FEB86659FD93
# Slots of a chunk's windows laid out in one table when it is this small (or 4 x the positions).
_OWNER_TABLE = 2**16
# Positions of one source pass read per vectorised call when counting distinct samples.
_COVERAGE_CHUNK = 2**20


# -- keys (NOTE [ Source orders ]) -------------------------------------------------------------


def member_key(base: int, a: int, b: int) -> int:
    """The key of member ``(a, b)`` of a family of permutations keyed by ``base``.

    ``mix(mix(base + A (a + 1)) ^ B (b + 1))`` with SplitMix64's finaliser ``mix``
    (:func:`~dataorder.core.permutation.mix64`), all mod ``2**64``. The scalar specification of
    :func:`member_keys`.

    >>> member_key(7, 0, 0) == member_key(7, 0, 1), 0 <= member_key(7, 3, 2) < 2**64
    (False, True)
    """
    inner = mix64((base + _MEMBER_A * (a + 1)) & _MASK64)
    return mix64(inner ^ (((b + 1) * _MEMBER_B) & _MASK64))


def member_keys(base: int, a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """:func:`member_key` for arrays of ``a`` and ``b`` (non-negative ints, broadcast)."""
    ua = np.asarray(a, dtype=_I64).astype(_U64)
    ub = np.asarray(b, dtype=_I64).astype(_U64)
    inner: npt.NDArray[np.uint64] = _U64(base) + _U64(_MEMBER_A) * (ua + _U64(1))
    outer: npt.NDArray[np.uint64] = mix64(inner) ^ ((ub + _U64(1)) * _U64(_MEMBER_B))
    return mix64(outer)


# -- counting what the draws read --------------------------------------------------------------


def distinct_draws(size: int, start: int, stop: int, order: Callable[[int], Permutation]) -> int:
    """How many distinct samples draws ``start .. stop - 1`` of a source read.

    Draw ``j`` reads ``order(j // size)(j % size)`` (NOTE [ Source orders ]). Draws inside one
    source pass are distinct; a range that holds a whole source pass reads every sample; a
    range across one epoch boundary reads the end of one epoch's order and the start of the
    next, whose overlap is counted through the inverse permutation on the shorter side, in
    chunks: O(min(head, tail)) time, O(1) memory in the size.
    """
    if stop <= start:
        return 0
    first, last = start // size, (stop - 1) // size
    if first == last:
        return stop - start
    head_from = start - first * size  # the head is positions head_from .. size - 1 of `first`
    tail = stop - last * size  # the tail is positions 0 .. tail - 1 of `last`
    if last - first >= 2 or head_from == 0 or tail == size:
        return size
    before, after = order(first), order(last)
    overlap = 0
    if tail <= size - head_from:
        for lo in range(0, tail, _COVERAGE_CHUNK):
            values = after(np.arange(lo, min(tail, lo + _COVERAGE_CHUNK), dtype=_I64))
            overlap += int(np.count_nonzero(before.inverse(values) >= head_from))
    else:
        for lo in range(head_from, size, _COVERAGE_CHUNK):
            values = before(np.arange(lo, min(size, lo + _COVERAGE_CHUNK), dtype=_I64))
            overlap += int(np.count_nonzero(after.inverse(values) < tail))
    return (size - head_from) + tail - overlap


def _groups(
    k: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``np.unique(k, return_index=True, return_inverse=True)``, without a sort when ``k`` is
    already non-decreasing (a rank's positions always are)."""
    # np.unique is avoided: its first call imports numpy.ma, 30 ms of a first batch.
    order = None if k.size == 0 or bool(np.all(k[1:] >= k[:-1])) else np.argsort(k, kind="stable")
    sk = k if order is None else k[order]
    new = np.concatenate([[True], sk[1:] != sk[:-1]]) if sk.size else np.zeros(0, dtype=bool)
    starts = np.flatnonzero(new)
    inv = np.cumsum(new) - 1
    if order is None:
        return sk[starts], starts, inv
    out = np.empty_like(inv)
    out[order] = inv
    return sk[starts], order[starts], out


# -- corpus changes (NOTE [ Corpus changes ] in docs/design.md) ------------------------------------


@dataclass(frozen=True)
class SourcePass:
    """A source's passes from draw ``first`` on, after a corpus change (NOTE [ Corpus changes ]).

    The pass under way starts at draw ``start`` and has ``length`` draws, read as ``pieces``
    one after the other: ``(offset, count, first_document, key)`` reads documents
    ``first_document .. first_document + count - 1`` in the order
    ``Permutation(count, key)``, at draws ``start + offset ..``. Later passes read all ``size``
    documents, pass ``index + 1 + q`` in ``Permutation(size, member_key(source_key, d, index +
    1 + q))`` (the order of a source that never changed).
    """

    first: int
    start: int
    length: int
    pieces: tuple[tuple[int, int, int, int], ...]
    size: int
    index: int
    #: The pass was begun by a corpus change at its first draw (a growth at a pass boundary, an
    #: addition): until it reads, it is the pass under way, all of it unread.
    begun: bool = False

    def unread(self, j: int) -> int:
        """Documents of the pass holding draw ``j - 1`` (the last one read) not read after
        ``j`` draws; at ``j == 0``, or before a pass a corpus change began reads, the whole
        pass."""
        if j <= self.start:
            return self.length if j == 0 or (self.begun and j == self.start) else 0
        if j <= self.start + self.length:
            return self.start + self.length - j
        rem = (j - self.start - self.length) % self.size
        return 0 if rem == 0 else self.size - rem


def source_passes(
    size: int,
    changes: Sequence[tuple[int, int, int, int]],
    source_key: int,
    growth_key: int,
    source: int,
) -> list[SourcePass]:
    """A source's :class:`SourcePass` es: the first from draw 0, then one per corpus change.

    Args:
        size: The source's size at draw 0 (0: a source added later).
        changes: ``(draw, op, size, entry)`` in log order: the source's draw count at the start
            of the change's entry, ``op`` ``"grow"``/``"add"`` (1, 3) or ``"retire"`` (2), its
            size after (ignored for a retirement), and the entry's index in the log.
        source_key: The blend's source key (the passes of a source that never changes).
        growth_key: The key of the permutations of grown documents.
        source: The source's index.

    A growth inside a pass appends the new documents, in a keyed permutation of their own,
    after the pass's unread remainder (which keeps its order): the documents read keep their
    draws, every unread one, old or new, is read once before the pass ends. A growth at a
    pass boundary (nothing of the pass read) starts a fresh pass of the new size.

    Raises:
        RuntimeError: If an empty source is drawn from (the log refuses the weights that would).
    """
    n = size
    start, index = 0, 0
    pieces = ((0, n, 0, member_key(source_key, source, 0)),) if n else ()
    length = n
    out = [SourcePass(0, start, length, pieces, n, index)]
    begun = False
    for draw, op, new, entry in changes:
        if draw >= start + length:
            if n == 0:
                if draw != start + length:  # pragma: no cover - the log's weights prevent it
                    raise RuntimeError(f"source {source} drew from an empty source")
                start = draw
            else:
                q = (draw - start - length) // n
                start, index = start + length + q * n, index + 1 + q
                pieces = ((0, n, 0, member_key(source_key, source, index)),)
                length, begun = n, False
        if op != 2:
            if draw == start:  # nothing of this pass read: a fresh pass of the new size
                pieces = ((0, new, 0, member_key(source_key, source, index)),)
                length, begun = new, True
            else:
                key = member_key(growth_key, source, entry)
                pieces = (*pieces, (length, new - n, n, key))
                length += new - n
            n = new
        out.append(SourcePass(draw, start, length, pieces, n, index, begun))
    return out


def pass_documents(
    passes: Sequence[SourcePass], j: npt.NDArray[np.int64], source_key: int, source: int
) -> npt.NDArray[np.int64]:
    """The document each draw ``j`` of a source reads, given its :func:`source_passes`."""
    out = np.empty(j.shape, dtype=_I64)
    which = np.searchsorted(np.array([p.first for p in passes], dtype=_I64), j, "right") - 1
    for w in np.unique(which).tolist():
        sel = np.flatnonzero(which == w)
        p = passes[w]
        off = j[sel] - p.start
        inside = off < p.length
        for lo, count, first_doc, key in p.pieces:
            m = inside & (off >= lo) & (off < lo + count)
            if m.any():
                out[sel[m]] = first_doc + permute_many(count, _U64(key), off[m] - lo)
        if not inside.all():
            r = off[~inside] - p.length
            if p.size == 0:  # pragma: no cover - the log's weights prevent it
                raise RuntimeError(f"source {source} drew from an empty source")
            q = r // p.size
            keys = member_keys(source_key, np.full(q.shape, source, dtype=_I64), p.index + 1 + q)
            out[sel[~inside]] = permute_many(p.size, keys, r - q * p.size)
    return out


# -- the order ---------------------------------------------------------------------------------


class BlendOrder:
    """The blended order: which flat index run position ``p`` holds (see the module docstring).

    A pure function of the sizes, the mixture, the global batch size schedule and the seed;
    ``total_samples`` only cuts the run into epochs (NOTE [ Blended epochs ]). All methods take
    int64 arrays of run positions and are vectorised.

    Args:
        sizes: Samples in each source.
        mixture: The compiled mixture schedule.
        batches: The global batch size schedule.
        total_samples: Samples per epoch (nominal).
        seed: The seed of the slot and source orders.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        mixture: Mixture | LogMixture,
        batches: BatchSizeSchedule,
        total_samples: int,
        seed: int,
    ) -> None:
        self.sizes = np.array(sizes, dtype=_I64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(_I64)
        self.mixture = mixture
        self.batches = batches
        self.total_samples = total_samples
        segments = batches.segments
        self._seg_start = np.array([s.consumed_samples for s in segments], dtype=_I64)
        self._seg_first = np.array([s.first_step for s in segments], dtype=_I64)
        self._seg_size = np.array([s.global_batch_size for s in segments], dtype=_I64)
        self.slot_key = derive_key(seed, epoch=0, stream=BLEND_STREAM, purpose="slot-order")
        self.source_key = derive_key(seed, epoch=0, stream=BLEND_STREAM, purpose="source-order")
        # Corpus changes (NOTE [ Corpus changes ]): a log with sizes indexes document i of
        # source d as d * SOURCE_STRIDE + i, which no growth of another source moves.
        self.corpus = isinstance(mixture, LogMixture) and mixture.log.sizes is not None
        if self.corpus:
            self.offsets = np.arange(self.sizes.size, dtype=_I64) * SOURCE_STRIDE
        self.growth_key = derive_key(seed, epoch=0, stream=BLEND_STREAM, purpose="source-growth")
        self._passes: dict[int, list[SourcePass]] = {}
        self._passes_at = -1

    # -- corpus changes -------------------------------------------------------------------------
    def passes(self) -> dict[int, list[SourcePass]]:
        """Each changed source's :class:`SourcePass` es, as the log stands (recomputed when it
        grows: a pure function of the log and the counts)."""
        mixture = self.mixture
        if not isinstance(mixture, LogMixture) or not self.corpus:
            return {}
        log = mixture.log
        if self._passes_at != len(log):
            changes: dict[int, list[tuple[int, int, int, int]]] = {}
            for entry, op, source, size in log._events:
                draw = int(mixture.counts(mixture.entry_start(entry))[source])
                changes.setdefault(source, []).append((draw, op, size, entry))
            self._passes = {
                d: source_passes(int(self.sizes[d]), c, self.source_key, self.growth_key, d)
                for d, c in changes.items()
            }
            self._passes_at = len(log)
        return self._passes

    def sizes_at(self, samples: int) -> npt.NDArray[np.int64]:
        """The sources' sizes after the corpus changes that start before run position
        ``samples``."""
        out: npt.NDArray[np.int64] = self.sizes.copy()
        mixture = self.mixture
        if isinstance(mixture, LogMixture) and self.corpus:
            for entry, op, source, size in mixture.log._events:
                if op != 2 and mixture.entry_start(entry) < samples:
                    out[source] = size
        return out

    def unread(self, samples: int) -> npt.NDArray[np.int64]:
        """Per source, the documents of its pass under way (the one its last draw read) it has
        not read after run position ``samples`` (its whole first pass before its first draw)."""
        counts = self.mixture.counts(samples).tolist()
        passes = self.passes()
        out = np.zeros(len(counts), dtype=_I64)
        for d, j in enumerate(counts):
            plist = passes.get(d)
            if plist is None:
                n = int(self.sizes[d])
                out[d] = n if j == 0 else (-j) % n
            else:
                i = max(k for k, p in enumerate(plist) if p.first <= j)
                out[d] = plist[i].unread(j)
        return out

    # -- epochs ---------------------------------------------------------------------------------
    def epoch_bounds(self, epoch: int) -> tuple[int, int]:
        """``(first, end)`` run positions of ``epoch`` (NOTE [ Blended epochs ])."""
        b = self.batches
        first = b.consumed_samples(b.step_at(epoch * self.total_samples))
        end = b.consumed_samples(b.step_at((epoch + 1) * self.total_samples))
        return first, end

    def epoch_of(self, samples: int) -> tuple[int, int]:
        """``(epoch, position in it)`` at the run-wide count ``samples``; a count that ends an
        epoch is the start of the next one."""
        epoch = samples // self.total_samples
        if self.epoch_bounds(epoch + 1)[0] <= samples:
            epoch += 1
        return epoch, samples - self.epoch_bounds(epoch)[0]

    def quotas_fixed_through(self, samples: int) -> int:
        """The run position through which a cursor at ``samples`` has fixed the quotas.

        The end of the global batch under way (its quotas are ``c(a_k + G_k) - c(a_k)``: some
        ranks may have read part of it), or ``samples`` itself at a global-batch boundary,
        where the next global batch has not started. The mixture schedule must not change
        before it (NOTE [ Trained part of a schedule ] in :mod:`dataorder.llm.mixture_schedule`).

        >>> from dataorder.llm.mixture import Mixture, MixtureSchedule
        >>> order = BlendOrder([6, 4], Mixture(MixtureSchedule([(0, [3, 1])]), key=0),
        ...                    BatchSizeSchedule.from_step_schedule("0:4 8:8"), 8, seed=0)
        >>> [order.quotas_fixed_through(p) for p in (0, 2, 4, 8, 10, 16)]
        [0, 4, 4, 8, 16, 16]
        """
        step = self.batches.step_at(samples)
        start = self.batches.consumed_samples(step)
        return samples if start == samples else start + self.batches.global_batch_size(step)

    # -- positions to draws ---------------------------------------------------------------------
    def windows(
        self, p: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(k, a, g)`` for each run position: its global batch, where it starts, its size."""
        s = np.searchsorted(self._seg_start, p, side="right") - 1
        size = self._seg_size[s]
        done = (p - self._seg_start[s]) // size
        return self._seg_first[s] + done, self._seg_start[s] + done * size, size

    def draws(
        self, p: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(d, j)`` for a 1-D array of run positions: the source and its draw index."""
        k, a, g = self.windows(p)
        uk, first, inv = _groups(k)
        ua, ug = a[first], g[first]
        bounds, at = _groups(np.concatenate([ua, ua + ug]))[::2]
        counts = self.mixture.counts_at(bounds)
        w = uk.size
        start = counts[at[:w]]
        quota = counts[at[w:]] - start
        before = np.cumsum(quota, axis=1) - quota  # slots of the window before each source's
        # a window's positions are neighbours: permute_many mixes their key once per window
        slots = permute_many(g, member_keys(self.slot_key, uk, 0)[inv], p - a)
        num = quota.shape[1]
        if int(ug.sum()) <= max(4 * p.size, _OWNER_TABLE):
            # Each window's slots laid out source by source: one table for all windows.
            owner = np.repeat(np.tile(np.arange(num, dtype=_I64), w), quota.reshape(-1))
            d = owner[(np.cumsum(ug) - ug)[inv] + slots]
        else:
            # Few positions of huge windows: search each window's cumulative quotas, the rows
            # shifted apart so that one search serves every window.
            span = int(ug.max()) + 1
            shift = np.arange(w, dtype=_I64) * span
            cum = (before + quota + shift[:, None]).reshape(-1)
            d = np.searchsorted(cum, slots + shift[inv], side="right") - inv * num
        return d, start[inv, d] + (slots - before[inv, d])

    def source_samples(
        self, d: npt.NDArray[np.int64], j: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """The sample of source ``d`` that its ``j``-th draw reads (NOTE [ Source orders ])."""
        passes = self.passes()
        if not passes:
            n = self.sizes[d]
            epoch = j // n
            return permute_many(n, member_keys(self.source_key, d, epoch), j - epoch * n)
        d = np.asarray(d, dtype=_I64)
        j = np.asarray(j, dtype=_I64)
        out = np.empty(j.shape, dtype=_I64)
        changed = np.isin(d, list(passes))
        if not changed.all():
            plain = ~changed
            n = self.sizes[d[plain]]
            epoch = j[plain] // n
            keys = member_keys(self.source_key, d[plain], epoch)
            out[plain] = permute_many(n, keys, j[plain] - epoch * n)
        for src, plist in passes.items():
            m = d == src
            if m.any():
                out[m] = pass_documents(plist, j[m], self.source_key, src)
        return out

    def samples(self, p: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Flat ``ConcatDataset`` indices of run positions ``p`` (any shape)."""
        flat = np.asarray(p, dtype=_I64).reshape(-1)
        if flat.size == 0:
            return flat.reshape(np.shape(p))
        d, j = self.draws(flat)
        return (self.offsets[d] + self.source_samples(d, j)).reshape(np.shape(p))

    def source_order(self, source: int, epoch: int) -> Permutation:
        """The order of one source pass: what :meth:`source_samples` evaluates, as one
        :class:`~dataorder.core.permutation.Permutation`."""
        return Permutation(int(self.sizes[source]), member_key(self.source_key, source, epoch))

    def coverage(self, first: int, end: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(distinct, reads)`` per source over run positions ``first .. end - 1``."""
        lo, hi = self.mixture.counts(first), self.mixture.counts(end)
        distinct = np.zeros(lo.shape, dtype=_I64)
        passes = self.passes()
        for d in np.flatnonzero(hi > lo).tolist():
            if d in passes:  # a changed source: its documents marked one by one, in chunks
                seen = np.zeros(int(self.sizes_at(end)[d]), dtype=bool)
                for a in range(int(lo[d]), int(hi[d]), _COVERAGE_CHUNK):
                    j = np.arange(a, min(int(hi[d]), a + _COVERAGE_CHUNK), dtype=_I64)
                    seen[pass_documents(passes[d], j, self.source_key, d)] = True
                distinct[d] = np.count_nonzero(seen)
                continue
            distinct[d] = distinct_draws(
                int(self.sizes[d]), int(lo[d]), int(hi[d]), functools.partial(self.source_order, d)
            )
        return distinct, hi - lo
