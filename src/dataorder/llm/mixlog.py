"""Mixture logs: source weights a running job decides, replayed exactly from an append-only log.

A :class:`MixtureLog` is the schedule an online data-mixing method writes while it trains (an
EXP3 bandit on the training loss, DoReMi-style reweighting): ``log.set_weights(step, weights)``
says that global batch ``step`` and every later one draw with ``weights``, until the next entry.
A sampler takes the log wherever it takes a :class:`~dataorder.llm.mixture.MixtureSchedule`
(:class:`~dataorder.llm.blend.BlendedSampler`'s ``weights=``,
:class:`~dataorder.llm.packing.sampler.PackedSampler`'s ``mixture=``); its order is then a pure
function of (configuration, seed, log, position): every rank that appends the same entries reads
the same order, on any data-parallel size, and a resume replays nothing.

* An entry takes effect at the start of global batch ``step`` (a global-batch boundary), never
  inside a global batch: an entry for a step a sampler sharing the log has already begun (it
  computed the quotas of that batch) is refused, naming the step (NOTE [ Frozen steps ]).
* Appending costs O(K) (the weights quantised once, a digest chained) and nothing per step
  afterwards; the counts at a position cost a bisection over the entries plus O(K) work.
* A log built with ``sizes=`` also records corpus changes: :meth:`MixtureLog.grow`,
  :meth:`MixtureLog.retire`, :meth:`MixtureLog.add_source`; every source's pass still reads each
  of its documents once (NOTE [ Corpus changes ] in ``docs/design.md``).
* :func:`broadcast_weights` is how a job appends: rank 0 decides, one broadcast of ``K + 1``
  float64 values (the step and the weights) reaches every rank, and each appends the same entry.
* The log is saved beside the sampler's state (:meth:`MixtureLog.save`, and in
  :class:`~dataorder.integrations.dcp.OrderState`); the state holds only the number of entries
  trained and their chained digest, so it stays a few hundred bytes however long the log.

The log is built in layers, one module each (this module is the one to import from):
:mod:`~dataorder.llm.mixlog_entries` (the entries and their chained digest),
:mod:`~dataorder.llm.mixlog_corpus` (corpus changes and their flat indices),
:mod:`~dataorder.llm.mixlog_tree` (the tree the counts come from, walked in int64),
:mod:`~dataorder.llm.mixlog_counts` (:class:`LogMixture`, the log compiled for one sampler),
and here :class:`MixtureLog` (appending, files, restoring) and :func:`broadcast_weights`.

NOTE [ Mixture log exactness ]
    A :class:`~dataorder.llm.mixture.MixtureSchedule` apportions each of its entries on its own
    and carries the offset an entry ends with into the next (NOTE [ Mixture exactness ] in
    :mod:`dataorder.llm.mixture`), so its bound grows with the entries trained. A log written by
    a controller may hold 10**4 entries, so its counts track the *integral* instead:
    ``S_d(t)``, the sum over entries of ``w_d`` (quantised) times the samples of the entry
    before ``t``. ``c_d(t)`` is built by a fixed binary tree over the sources (balanced by
    index). Node ``v`` covers a range of sources; its count ``c_v`` and target ``S_v`` are the
    sums over the range, its error ``E_v = c_v - S_v``; the root's count is ``t`` (exact). In
    an entry that starts at sample ``s`` with node ``v``'s first child ``a`` holding the
    fraction ``rho`` of ``v``'s weight, ``a`` receives, of the ``n = c_v(t) - c_v(s)`` samples
    ``v`` received since ``s``::

        clamp(floor(rho * n + phi), 0, n),   phi = 1/2 + rho * E_v(s) - E_a(s)

    and the second child the rest. ``floor(rho n + phi)`` rises by 0 or 1 with ``n``, and so
    does ``n`` minus it, so both children are monotone (every global batch's quota is
    non-negative) and sum to ``v``. Unclamped, ``E_a = 1/2 + rho E_v - theta`` with
    ``theta`` in ``[0, 1)``: the error ``a`` entered the entry with is cancelled at once, so
    nothing accumulates from entry to entry. A clamp holds only at the start of an entry, while
    an over-served child waits (its error only falls) or an under-served one takes every sample
    of ``v`` (its error only rises). By induction over time and depth, with ``U_v`` and ``L_v``
    the largest positive and negative errors of node ``v`` (``0`` at the root):
    ``U_a <= 1/2 + U_v`` and ``L_a <= L_v + U_v + 1/2``, so a source at depth ``h`` stays
    within ``h (h + 1) / 4`` samples of its integral (above it by at most ``h / 2``), at every
    sample, whatever the number of entries: 1.5 for 3 sources, 18 for 200 (depth 8);
    :meth:`LogMixture.deviation_bounds` gives them. Measured on random logs they are far
    smaller (``tests/llm/test_mixlog.py``). A weight of 0 draws nothing new: a source whose
    weight drops to 0 is given at most the samples it is owed (its error, within the bound) and
    then none; a source of weight ``1e-6`` gets its first sample within ``bound / 1e-6``
    samples. All arithmetic is exact Python integers (weights quantised to ``2**40`` units,
    :func:`~dataorder.core.apportion.quantize_weights`).

NOTE [ Frozen steps ]
    The counts of global batch ``k`` (and so its layout of slots) may be computed by a rank the
    moment its first micro-batch is asked for. An entry appended for a step ``<= k`` after that
    would change a batch that some rank has begun, so ranks (or a resumed run) would disagree.
    Every :class:`LogMixture` tells its log the first step it has not begun; the log refuses an
    entry before it, naming both. A sampler over a log computes one micro-batch at a time, so
    an entry for the next step is accepted until the next step's first micro-batch is asked
    for. Decide the weights of step ``k + 1`` after step ``k`` (as
    ``examples/online_mixing.py`` does), or for ``k + 2`` when a loader prefetches a step.

Example:
    >>> from dataorder.llm.schedule import BatchSizeSchedule
    >>> log = MixtureLog([1, 1, 2])
    >>> log.set_weights(3, [0, 1, 1])
    >>> mix = log.compile(key=0, batches=BatchSizeSchedule.constant(4))
    >>> [mix.counts(t).tolist() for t in (4, 12, 20)]
    [[1, 1, 2], [3, 3, 6], [3, 7, 10]]
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.core.apportion import MAX_TOTAL
from dataorder.llm.mixlog_corpus import CorpusLog, SourceDatasets, split_index
from dataorder.llm.mixlog_counts import LogMixture
from dataorder.llm.mixlog_entries import (
    MAX_STEP,
    MIXLOG_FORMAT,
    OP_WEIGHTS,
    OPS,
    SOURCE_STRIDE,
    LogEntry,
    SegmentBases,
)
from dataorder.llm.schedule import BatchSizeSchedule

__all__ = [
    "MAX_STEP",
    "MIXLOG_FORMAT",
    "SOURCE_STRIDE",
    "LogEntry",
    "LogMixture",
    "MixtureLog",
    "SourceDatasets",
    "broadcast_weights",
    "split_index",
]


_I64 = np.int64
_UNIT_BYTES = 6  # a quantised weight is at most 2**40: six bytes in a saved log


class MixtureLog(CorpusLog):
    """An append-only, step-keyed log of source weights (see the module docstring).

    Args:
        weights: The weights from step 0 (non-negative finite reals, at least one positive,
            normalised): the log's first entry. Their number is the number of sources K.
        sizes: The sources' sizes (documents) at step 0, for a log that records corpus changes
            (:meth:`grow`, :meth:`retire`, :meth:`add_source`; NOTE [ Corpus changes ] in
            ``docs/design.md``): a source to be added later is declared with size 0 and weight
            0, so the tree over the sources stays fixed. A blend over such a log indexes
            document ``i`` of source ``d`` as ``d * SOURCE_STRIDE + i`` (read it with
            :class:`SourceDatasets`). None: no corpus changes, ``ConcatDataset`` indices.

    Raises:
        TypeError, ValueError: If a weight is not a finite non-negative real, or all are 0, or
            a size is not a non-negative int, or a source of size 0 has a positive weight.

    Example:
        >>> log = MixtureLog([0.5, 0.5])
        >>> log.set_weights(10, [0.75, 0.25])
        >>> len(log), log.entry(1).step, log.entry(1).weights
        (2, 10, (0.75, 0.25))

        A corpus that changes: source 2 is added at step 5, source 0 grows at step 8, source 1
        is retired at step 9.

        >>> log = MixtureLog([1, 1, 0], sizes=[100, 50, 0])
        >>> log.add_source(5, 2, 30, [1, 1, 1])
        >>> log.grow(8, 0, 160)
        >>> log.retire(9, 1)
        >>> log.current_sizes, sorted(log.retired), [e.op for e in log.corpus_changes()]
        ((160, 50, 30), [1], ['add', 'grow', 'retire'])
    """

    __slots__ = ()

    def __init__(self, weights: Sequence[Any], *, sizes: Sequence[int] | None = None) -> None:
        units = self._quantise("weights", weights, None)
        self._init(len(units), sizes)
        self._check_empty("weights", units)
        self._append(0, units)

    def set_weights(self, step: int, weights: Sequence[Any]) -> None:
        """Draw with ``weights`` from global batch ``step`` on (until the next entry).

        Steps never decrease; an entry at the step of the last one replaces its weights from
        that step (both stay in the log). O(K): the weights are quantised and a digest chained.

        Args:
            step: A global batch (a training step), at least the last entry's and at least the
                first step no sampler over this log has begun (NOTE [ Frozen steps ]).
            weights: K non-negative finite reals, at least one positive; 0 for a source not
                added yet or retired (a log with ``sizes``).

        Raises:
            TypeError, ValueError: If the step is before the last entry's or inside a global
                batch a sampler has begun, or the weights are malformed (named).
        """
        step = self._check_step(step)
        units = self._quantise("weights", weights, self._k)
        self._check_empty("weights", units)
        self._append(step, units)

    # -- restoring --------------------------------------------------------------------------------
    def extend_to(self, saved: MixtureLog) -> None:
        """Append the entries of ``saved`` this log lacks (a resume: the live log, often just its
        first entry, catches up with the one saved in the checkpoint).

        Raises:
            ValueError: If this log is not a prefix of ``saved``, naming the first entry that
                differs.
        """
        first = self.first_difference(saved)
        if first is None or first == saved._n:  # equal, or the saved log is a prefix of this
            return
        if first < self._n or saved._k != self._k:
            fail(
                "saved",
                f"a log that continues this one; its entry {first} differs from this log's "
                f"({self._describe(first)} here, {saved._describe(first)} saved)",
                f"<MixtureLog of {saved._n} entries>",
            )
        events = {e[0]: e[1:] for e in saved._events}
        for i in range(first, saved._n):
            step = int(saved._steps[i])
            if step < self._frozen:
                fail("saved", f"entries from step {self._frozen} on (NOTE [ Frozen steps ])", step)
            self._append(step, saved._row(i), *events.get(i, (OP_WEIGHTS, 0, 0)))
        if saved._bases is not None:  # checked against this log when a sampler takes them
            self._bases = saved._bases

    # -- files ----------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The log as an ``.npz`` file's bytes (see :meth:`save`).

        The entries' bytes are the same in every process that appended the same entries. The
        segment bases are those of the samplers alive over this log in this process, so two
        processes whose samplers built different bases write different ``bases_*`` arrays;
        either file restores the same order (a sampler checks the bases it takes: NOTE [ Saved
        segment bases ])."""
        buf = io.BytesIO()
        units = self._rows().astype("<u8").view(np.uint8)
        packed = units.reshape(self._n, self._k, 8)[:, :, :_UNIT_BYTES]
        arrays: dict[str, npt.NDArray[Any]] = {
            "format": np.array(MIXLOG_FORMAT),
            "steps": self._steps[: self._n].astype("<i8"),
            "units": np.ascontiguousarray(packed),
            "digest": np.array(self.digest()),
        }
        if self._sizes0 is not None:  # corpus changes: the first sizes and every change
            arrays["sizes"] = np.array(self._sizes0, dtype="<i8")
            arrays["events"] = np.array(self._events, dtype="<i8").reshape(-1, 4)
        bases = self._bases_to_save()
        if bases is not None:  # NOTE [ Saved segment bases ]
            arrays["bases_entries"] = np.array(bases.entries, dtype="<i8")
            arrays["bases_starts"] = bases.starts.astype("<i8")
            arrays["bases_segments"] = bases.segments.astype("<i8")
            arrays["bases_counts"] = bases.counts.astype("<i8")
            arrays["bases_digest"] = np.array(bases.digest)
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        return buf.getvalue()

    def _bases_to_save(self) -> SegmentBases | None:
        """The saved bases of the sampler over this log that knows the most, else the ones
        this log was loaded with (NOTE [ Saved segment bases ])."""
        best = self._bases
        for user in list(self._users):
            bases = user.saved_bases()
            if bases is not None and (best is None or len(bases.segments) > len(best.segments)):
                best = bases
        return best

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the log to ``path``: an uncompressed ``.npz`` of ``format``, ``steps`` (int64),
        ``units`` (each quantised weight, at most 2**40, in 6 little-endian bytes: 1200 bytes
        per entry at K = 200, 12 MB for 10**4 entries) and ``digest`` (the chained digest of
        all entries, checked on load); and, once a sampler over the log has built them, the
        segment bases a resume starts from (``bases_*``: 0.3 MB at 10**4 entries, K = 200;
        NOTE [ Saved segment bases ]). Written to a temporary file and renamed into place."""
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "wb") as f:
            f.write(self.to_bytes())
        os.replace(tmp, path)

    @classmethod
    def from_bytes(cls, data: bytes, *, name: str = "log") -> MixtureLog:
        """The log :meth:`to_bytes` wrote.

        Raises:
            ValueError: If ``data`` is not a saved log, or its digest disagrees with its
                entries (an edited or truncated file), naming ``name``.
        """
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                fmt = str(z["format"])
                steps = z["steps"].astype(_I64)
                packed = z["units"]
                recorded = str(z["digest"])
                sizes = z["sizes"].tolist() if "sizes" in z.files else None
                events = z["events"].tolist() if "events" in z.files else []
                saved = {
                    key: z[key] for key in z.files if key.startswith("bases_")
                }  # NOTE [ Saved segment bases ]
        except Exception as err:  # any unreadable file is the same refusal
            fail(name, f"a saved MixtureLog ({MIXLOG_FORMAT} .npz)", f"<unreadable: {err}>")
        if fmt != MIXLOG_FORMAT:
            fail(f"{name}.format", repr(MIXLOG_FORMAT), fmt)
        if packed.ndim != 3 or packed.shape[0] != steps.size or packed.shape[2] != _UNIT_BYTES:
            fail(f"{name}.units", f"shape (entries, K, {_UNIT_BYTES})", packed.shape)
        if steps.size == 0 or steps[0] != 0:
            fail(f"{name}.steps", "a log whose first entry is at step 0", steps[:1].tolist())
        full = np.zeros((*packed.shape[:2], 8), dtype=np.uint8)
        full[:, :, :_UNIT_BYTES] = packed
        units = full.view("<u8").reshape(packed.shape[:2]).astype(_I64)
        log = cls.__new__(cls)
        log._init(units.shape[1], sizes)
        log._steps = np.zeros(max(16, steps.size), dtype=_I64)
        by_entry: dict[int, tuple[int, int, int]] = {}
        for row in events:
            if len(row) != 4 or row[1] not in OPS or not 0 <= row[2] < log._k:
                fail(f"{name}.events", "rows (entry, op, source, size)", row)
            by_entry[int(row[0])] = (int(row[1]), int(row[2]), int(row[3]))
        for i in range(steps.size):
            row = units[i]
            if int(row.sum()) != MAX_TOTAL or int(row.min()) < 0:
                fail(f"{name}.units[{i}]", "quantised weights summing to 2**40", row.tolist())
            if i and steps[i] < steps[i - 1]:
                fail(f"{name}.steps[{i}]", f"at least steps[{i - 1}]={steps[i - 1]}", steps[i])
            log._append(int(steps[i]), row, *by_entry.get(i, (OP_WEIGHTS, 0, 0)))
        if log.digest() != recorded:
            fail(
                f"{name}.digest",
                f"the digest of its entries, {log.digest()} (the file was edited or truncated)",
                recorded,
            )
        if saved:
            log._bases = cls._bases_from(saved, log, name)
        return log

    @staticmethod
    def _bases_from(saved: dict[str, npt.NDArray[Any]], log: MixtureLog, name: str) -> SegmentBases:
        """The segment bases of a saved log, refused unless their digest is the one of the
        log's entries and the bases (NOTE [ Saved segment bases ])."""
        keys = {"bases_entries", "bases_starts", "bases_segments", "bases_counts"}
        if set(saved) != keys | {"bases_digest"}:
            fail(f"{name}.bases_*", f"the arrays {sorted(keys | {'bases_digest'})}", sorted(saved))
        try:
            entries = int(saved["bases_entries"])
            starts = saved["bases_starts"].astype(_I64)
            segments = saved["bases_segments"].astype(_I64)
            counts = saved["bases_counts"].astype(_I64)
        except (TypeError, ValueError) as err:
            fail(f"{name}.bases_*", "int64 arrays", f"<unreadable: {err}>")
        if not 0 < entries <= len(log):
            fail(f"{name}.bases_entries", f"a number of entries in [1, {len(log)}]", entries)
        fine = (
            starts.ndim == segments.ndim == 1
            and counts.shape == (segments.size, log.num_sources)
            and segments.size > 0
            and bool((np.diff(segments) > 0).all())
            and int(segments[0]) > 0
            and int(segments[-1]) == starts.size - 1
        )
        if not fine:
            fail(
                f"{name}.bases_segments",
                "increasing positive segments, the last one ending the starts, with counts each",
                segments.shape,
            )
        digest = SegmentBases.digest_of(log._chain[entries], entries, starts, segments, counts)
        if str(saved["bases_digest"]) != digest:
            fail(
                f"{name}.bases_digest",
                f"the digest of its segment bases and entries, {digest} (the file was edited)",
                str(saved["bases_digest"]),
            )
        return SegmentBases(entries, starts, segments, counts, digest)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MixtureLog:
        """The log :meth:`save` wrote to ``path``."""
        with open(path, "rb") as f:
            return cls.from_bytes(f.read(), name=os.fspath(path))

    # -- compiling ------------------------------------------------------------------------------
    def compile(self, key: int, batches: BatchSizeSchedule) -> LogMixture:
        """The counts of this log for a sampler with ``batches`` (steps to samples)."""
        return LogMixture(self, key, batches)


def broadcast_weights(
    log: MixtureLog,
    step: int,
    weights: Sequence[float] | None,
    *,
    src: int = 0,
    group: Any = None,
) -> tuple[float, ...]:
    """Append rank ``src``'s decision to ``log`` on every rank of a ``torch.distributed`` job.

    One broadcast of ``K + 1`` float64 values (the step, then the weights) from ``src``; every
    rank then appends the same entry, so every rank's order stays the same. Call it on every
    rank with the same ``step`` (checked: a rank whose ``step`` differs from ``src``'s raises
    instead of appending).

    Args:
        log: This rank's log.
        step: The global batch from which the weights hold.
        weights: The weights on rank ``src``; ignored (may be None) on the others.
        src: The deciding rank.
        group: The process group (default: the world).

    Returns:
        The weights appended, as floats.

    Raises:
        ValueError: If this rank's ``step`` differs from ``src``'s, or the log refuses the entry.
    """
    import torch
    import torch.distributed as dist

    step = check_int("step", step, min_value=0, max_value=2**53)
    buf = torch.zeros(log.num_sources + 1, dtype=torch.float64)
    if dist.get_rank(group) == src if group is not None else dist.get_rank() == src:
        if weights is None:
            fail("weights", f"the weights on the deciding rank {src}", None, TypeError)
        values = np.asarray(weights, dtype=np.float64)
        if values.shape != (log.num_sources,):
            fail("len(weights)", f"the number of sources, {log.num_sources}", values.size)
        buf[0] = float(step)
        buf[1:] = torch.from_numpy(values.copy())
    dist.broadcast(buf, src=src, group=group)
    got = buf.tolist()
    if int(got[0]) != step:
        fail("step", f"rank {src}'s step, {int(got[0])} (every rank appends the same entry)", step)
    decided = tuple(got[1:])
    log.set_weights(step, decided)
    return decided
