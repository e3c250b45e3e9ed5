"""A mixture log compiled for one sampler: per-source counts at any sample.

:class:`LogMixture` (what :meth:`~dataorder.llm.mixlog.MixtureLog.compile` returns) is both a
sampler's mixture (``counts``, ``counts_at``) and its schedule (``trained_tag``,
``check_trained``): NOTE [ Mixture log exactness ] and NOTE [ Frozen steps ] in
:mod:`dataorder.llm.mixlog`.

NOTE [ Saved segment bases ]
    The counts at a sample are a segment's base (each source's count and scaled error at the
    start of the entry in effect) plus one walk of the tree. A base depends on every earlier
    segment (the clamp of NOTE [ Mixture log exactness ] makes the recursion sequential), so
    building them all at a resume after ``N`` entries is O(N K) work: about 1.6 s at
    ``N = 10**4``, ``K = 200``. Bases are therefore built only when a count needs them, from
    the nearest known base before, and the base of every :data:`BASE_SPACING`-th segment is
    saved with the log (:meth:`~dataorder.llm.mixlog.MixtureLog.to_bytes`, so also in
    :class:`~dataorder.integrations.dcp.OrderState`): a resume builds at most
    ``BASE_SPACING`` of them. Only the counts are saved (K int64 a saved segment, 250 kB at
    ``N = 10**4``, ``K = 200``), with every segment's start up to the last one saved.

    A saved base is never taken on trust:

    * its digest chains the log's digest over the entries it was saved with, the segment
      starts and the counts: the file's loader refuses a base edited without its digest, and a
      sampler takes only bases bound to entries of its own log, laid out by its own batch
      size schedule (the same segment starts), else it builds them as without;
    * its scaled errors are not saved but derived, exactly, from the counts and the log's
      entries (``E 2**40 = c 2**40 - sum of units times lengths``, modulo ``2**64``, vectorised
      over the entries); a base whose counts do not sum to its sample, or whose errors exceed
      the bound ``h (h + 1) / 4`` of NOTE [ Mixture log exactness ], or that differs from a
      base this sampler built, is refused (ValueError), not used.

    What this cannot catch is a forgery: a base changed within the bound whose digest was
    recomputed by hand (the log's own digest is as forgeable; the state's digest is what a
    resume checks the log against). Checking a base fully means rebuilding it, which is the
    cost this note avoids.

NOTE [ Naming the entry from the state ]
    A state records the trained part of the log as its length ``m`` and chained digest (the
    log itself is saved beside it). A log of ``m`` entries with another digest differs at one
    of entries ``0 .. m - 1``; one digest cannot say which, and equal lengths are the common
    case (a controller that decided differently at its last step or two). So the tag also
    holds the first 8 hex digits of the digests of the ``m - 1 .. m - 4`` first entries
    (:data:`TAG_BACK`; 33 more bytes: the worst packed mixture state at the caps is then 559
    of the 576 bytes of NOTE [ State size ]). Since the digests are chained, the longest of
    those prefixes whose digest agrees with the live log's ends just before the first entry
    that differs: a log that diverged in its last four entries is refused naming the entry,
    an earlier divergence still names the range ``0 .. m - 5``. The refusal itself rests on
    the full 64-bit digest; the shorter ones (32 bits) only name the entry, and a false match
    (odds ``2**-32`` each) would name a later one. A state written before these digests, a
    tag ``"<m>:<digest>"``, is read as it was, and names the range.
"""

from __future__ import annotations

import bisect

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.core.apportion import MAX_POSITION, MAX_TOTAL
from dataorder.llm.mixlog_corpus import CorpusLog
from dataorder.llm.mixlog_entries import DIGEST_BYTES, EntryLog, SegmentBases
from dataorder.llm.mixlog_tree import LevelWalk, source_tree
from dataorder.llm.schedule import BatchSizeSchedule

__all__ = ["BASE_SPACING", "TAG_BACK", "LogMixture"]

_I64 = np.int64
_Row = npt.NDArray[np.int64]
_U64 = np.uint64
_ERROR_LIMIT = 2**56  # a scaled error (E * 2**40) stays far below: |E| <= h (h + 1) / 4
_WAVE_LEAST = 16  # from this many segments to build, one wave of the tree per segment
#: The shorter prefixes of the trained entries whose digests a state's tag also holds, 8 hex
#: digits each (NOTE [ Naming the entry from the state ]).
TAG_BACK = 4
#: Every this many segments, a sampler's segment base is saved with the log (NOTE [ Saved
#: segment bases ]): a resume builds at most this many bases.
BASE_SPACING = 64
_WAVE_CHUNK = 4096  # segments a wave builds at once (bounds its memory: 2 int64 per node each)


class LogMixture:
    """A :class:`MixtureLog` compiled for one sampler: per-source counts at any sample
    (NOTE [ Mixture log exactness ]), and the trained part's digest for its state.

    It serves both as the sampler's mixture (``counts``, ``counts_at``) and as its schedule
    (``trained_tag``, ``check_trained``). Segment bases (each entry's starting counts and
    errors, two int64 rows of K) are computed once, as the log grows; a lookup bisects the
    entries and walks the tree once: O(log entries + K).

    Args:
        log: The log.
        key: Unused by the counts (kept for the interface of
            :class:`~dataorder.llm.mixture.Mixture`; the tree needs no tie-break).
        batches: The sampler's global batch size schedule: an entry at step ``k`` starts at
            sample ``batches.consumed_samples(k)``.
    """

    def __init__(self, log: CorpusLog, key: int, batches: BatchSizeSchedule) -> None:
        if not isinstance(log, EntryLog):
            fail("log", "a MixtureLog", log, TypeError)
        if not isinstance(batches, BatchSizeSchedule):
            fail("batches", "a BatchSizeSchedule", batches, TypeError)
        self._log = log
        self._key = key
        self._batches = batches
        self._nodes, self._depths = source_tree(log.num_sources)
        self._walk = LevelWalk(self._nodes, log.num_sources)
        # Per segment (entries at one start merged, the last one's weights holding):
        self._seg_pos: list[int] = []  # its first sample
        self._seg_entry: list[int] = []  # the log entry whose weights it uses
        self._seg_count: list[int] = []  # log entries that start at or before it
        self._base_c: list[_Row | None] = []  # per-source counts at its start (None: not built)
        self._base_e: list[_Row | None] = []  # per-source errors x 2**40 at its start
        self._adopted: SegmentBases | None = None  # the saved bases last taken from the log
        self._synced = 0
        self._params: dict[int, list[tuple[int, int, int, int, int, int]]] = {}
        log._users.add(self)

    @property
    def log(self) -> CorpusLog:
        """The log."""
        return self._log

    @property
    def num_sources(self) -> int:
        """The number of sources K."""
        return self._log.num_sources

    # -- segments -------------------------------------------------------------------------------
    def _sync(self) -> None:
        log = self._log
        n = len(log)
        if self._synced == n:
            return
        k = self.num_sources
        for i in range(self._synced, n):
            pos = self._batches.consumed_samples(int(log._steps[i]))
            if pos > MAX_POSITION:
                fail(f"log.entry({i}).step", "a step that starts within 2**62 samples", pos)
            if self._seg_pos and self._seg_pos[-1] == pos:
                self._seg_entry[-1] = i  # same start: the later entry's weights hold
                self._seg_count[-1] = i + 1
                self._params.pop(len(self._seg_pos) - 1, None)
                continue
            self._seg_pos.append(pos)
            self._seg_entry.append(i)
            self._seg_count.append(i + 1)
        self._synced = n
        if not self._base_c:
            self._base_c.append(np.zeros(k, dtype=_I64))
            self._base_e.append(np.zeros(k, dtype=_I64))
        missing = len(self._seg_pos) - len(self._base_c)
        self._base_c.extend([None] * missing)  # built when first needed (_base)
        self._base_e.extend([None] * missing)
        if self._log._bases is not self._adopted:
            self._adopt(self._log._bases)

    def _base(self, s: int) -> tuple[_Row, _Row]:
        """Segment ``s``'s base (counts and scaled errors at its start), built from the nearest
        base before it if it is not known yet."""
        counts, errors = self._base_c[s], self._base_e[s]
        if counts is None or errors is None:
            return self._build(s)
        return counts, errors

    def _build(self, last: int) -> tuple[_Row, _Row]:
        """Build the bases of the segments up to ``last`` from the nearest known one."""
        s = last
        while self._base_c[s] is None:
            s -= 1
        c = e = np.zeros(0, dtype=_I64)
        while s < last:
            m = min(last - s, _WAVE_CHUNK)
            if m < _WAVE_LEAST:  # a few new entries (a running job): one walk each
                c, e = self._advance(s, self._seg_pos[s + 1] - self._seg_pos[s])
                self._base_c[s + 1] = c
                self._base_e[s + 1] = e
                s += 1
                continue
            units = self._log._rows_at(np.array(self._seg_entry[s : s + m], dtype=np.intp))
            starts = np.array(self._seg_pos[s : s + m + 1], dtype=_I64)
            lengths: _Row = starts[1:] - starts[:-1]
            cs, es = self._walk.bases(units, *self._base(s), lengths)
            if int(np.abs(es).max()) >= _ERROR_LIMIT:  # pragma: no cover - as in _advance
                raise RuntimeError("mixture log error out of range")
            self._base_c[s + 1 : s + m + 1] = list(cs)
            self._base_e[s + 1 : s + m + 1] = list(es)
            c, e = cs[-1], es[-1]
            s += m
        return c, e

    # -- saved bases (NOTE [ Saved segment bases ]) ---------------------------------------------
    def saved_bases(self) -> SegmentBases | None:
        """The bases known at every :data:`BASE_SPACING`-th segment, to save beside the log
        (:meth:`~dataorder.llm.mixlog.MixtureLog.to_bytes` takes them from the samplers over
        it), or None when none is known yet."""
        self._sync()
        known = [
            j
            for j in range(BASE_SPACING, len(self._base_c), BASE_SPACING)
            if self._base_c[j] is not None
        ]
        if not known:
            return None
        log, entries = self._log, len(self._log)
        starts = np.array(self._seg_pos[: known[-1] + 1], dtype=_I64)
        segments = np.array(known, dtype=_I64)
        counts = np.stack([self._base(j)[0] for j in known])
        digest = SegmentBases.digest_of(log._chain[entries], entries, starts, segments, counts)
        return SegmentBases(entries, starts, segments, counts, digest)

    def _adopt(self, saved: SegmentBases | None) -> None:
        """Take the bases saved with the log when they are this sampler's (same entries, same
        segment starts), after checking each against the log (NOTE [ Saved segment bases ])."""
        self._adopted = saved
        log = self._log
        if saved is None or saved.entries > len(log) or len(saved.starts) > len(self._seg_pos):
            return
        entries = saved.entries
        again = SegmentBases.digest_of(
            log._chain[entries], entries, saved.starts, saved.segments, saved.counts
        )
        if again != saved.digest or saved.starts.tolist() != self._seg_pos[: len(saved.starts)]:
            return  # another log's or another batch schedule's: built as without them
        # the errors follow from the counts: E * 2**40 = c * 2**40 - (integral x 2**40), exact
        # modulo 2**64 as |E| < 2**56; the integral is the units times the segments' lengths
        last = int(saved.segments[-1])
        units = log._rows_at(np.array(self._seg_entry[:last], dtype=np.intp)).view(_U64)
        lengths = np.diff(saved.starts).view(_U64)
        bound = np.array([h * (h + 1) for h in self._depths], dtype=_I64) << 38  # h(h+1)/4
        integral = np.zeros(self.num_sources, dtype=_U64)
        done = 0
        for j, counts in zip(saved.segments.tolist(), saved.counts, strict=True):
            integral += lengths[done:j] @ units[done:j]
            done = j
            errors = ((counts.view(_U64) << _U64(40)) - integral).view(_I64)
            built = self._base_c[j]
            if (
                int(counts.min()) < 0
                or int(counts.sum()) != self._seg_pos[j]
                or bool((np.abs(errors) > bound).any())
                or (built is not None and built.tolist() != counts.tolist())
            ):
                at = self._seg_pos[j]
                fail(
                    "log",
                    f"segment bases that agree with its entries; the base saved for segment {j} "
                    f"(sample {at}) does not (an edited file: load one without its bases)",
                    f"<MixtureLog of {len(log)} entries>",
                )
            self._base_c[j] = counts.astype(_I64)
            self._base_e[j] = errors

    def _advance(self, s: int, length: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Counts and scaled errors at the end of segment ``s`` after ``length`` samples: the
        walk of :meth:`_local`, one level of the tree at a time in int64 (NOTE [ Segment bases
        in int64 ])."""
        units = self._log._row(self._seg_entry[s])
        base_c, base_e = self._base(s)
        local = self._walk.local(units, base_e, length)
        errors = (
            base_e.view(_U64) + (local.view(_U64) << _U64(40)) - units.view(_U64) * _U64(length)
        ).view(_I64)
        if int(np.abs(errors).max()) >= _ERROR_LIMIT:  # pragma: no cover - the bound: < 2**47
            raise RuntimeError(f"mixture log error out of range: {errors.tolist()}")
        counts: npt.NDArray[np.int64] = base_c + local
        return counts, errors

    def _segment_params(self, s: int) -> list[tuple[int, int, int, int, int, int]]:
        params = self._params.get(s)
        if params is not None:
            return params
        units = self._log._row(self._seg_entry[s]).tolist()
        errors = self._base(s)[1].tolist()
        pu = [0]
        pe = [0]
        for u, e in zip(units, errors, strict=True):
            pu.append(pu[-1] + u)
            pe.append(pe[-1] + e)
        d = MAX_TOTAL
        params = []
        for v, a, b, lo, mid, hi in self._nodes:
            ua, uv = pu[mid] - pu[lo], pu[hi] - pu[lo]
            ev, ea = pe[hi] - pe[lo], pe[mid] - pe[lo]
            if uv == 0:
                ua, uv = 1, 2  # no weight below v: any rho keeps the bound; split its debts
            params.append((v, a, b, 2 * ua * d, uv * d + 2 * ua * ev - 2 * uv * ea, 2 * uv * d))
        if len(self._params) > 64:
            self._params.clear()
        self._params[s] = params
        return params

    def _local(self, s: int, tau: int) -> list[int]:
        """Per-source counts ``tau`` samples into segment ``s`` (relative to its start)."""
        k = self.num_sources
        c = [0] * (2 * k - 1)
        c[-1 if k > 1 else 0] = tau
        for v, a, b, slope, num0, den in self._segment_params(s):
            n = c[v]
            if n == 0:
                continue
            x = (slope * n + num0) // den
            ca = n if x >= n else (x if x > 0 else 0)
            c[a] = ca
            c[b] = n - ca
        return c[:k]

    def _segment_of(self, t: int) -> int:
        return bisect.bisect_right(self._seg_pos, t) - 1

    def _note(self, t: int) -> None:
        """Counts at ``t`` were computed: freeze the steps they depend on."""
        b = self._batches
        step = b.step_at(t)
        self._log._freeze(step if b.consumed_samples(step) == t else step + 1)

    # -- the Mixture interface --------------------------------------------------------------------
    def counts(self, t: int) -> npt.NDArray[np.int64]:
        """``c_d(t)``: how many of samples ``0 .. t - 1`` each source supplies, with the log as
        it stands (a query: it freezes no step, unlike :meth:`counts_at`)."""
        t = check_int("t", t, min_value=0, max_value=MAX_POSITION)
        self._sync()
        s = self._segment_of(t)
        local = np.array(self._local(s, t - self._seg_pos[s]), dtype=_I64)
        out: npt.NDArray[np.int64] = self._base(s)[0] + local
        return out

    def counts_at(self, ts: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """``c_d(t)`` for many ``t``: an int64 array of shape ``(n, K)``.

        What the order calls to lay out global batches: the steps the counts depend on are
        frozen (NOTE [ Frozen steps ]).
        """
        arr = np.asarray(ts)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise TypeError(f"ts must be integers; got dtype {arr.dtype}")
        if arr.ndim != 1:
            raise ValueError(f"ts must be 1-D; got shape {arr.shape}")
        out = np.empty((arr.size, self.num_sources), dtype=_I64)
        if arr.size == 0:
            return out
        if int(arr.min()) < 0 or int(arr.max()) > MAX_POSITION:
            raise ValueError(
                f"ts must lie in [0, 2**62]; got min={int(arr.min())}, max={int(arr.max())}"
            )
        self._sync()
        self._note(int(arr.max()))
        self._base(self._segment_of(int(arr.max())))  # every base they need, built at once
        for i, t in enumerate(arr.tolist()):
            s = self._segment_of(t)
            out[i] = self._base(s)[0] + np.array(self._local(s, t - self._seg_pos[s]), dtype=_I64)
        return out

    # -- what the counts track (NOTE [ Mixture log exactness ]) ------------------------------------
    def shares(self, t: int) -> npt.NDArray[np.float64]:
        """``S_d(t)``: the integral of each source's logged (quantised) weight over samples
        ``[0, t)``, the target the counts track."""
        t = check_int("t", t, min_value=0, max_value=MAX_POSITION)
        self._sync()
        s = self._segment_of(t)
        units = self._log._row(self._seg_entry[s]).tolist()
        local = self._local(s, t - self._seg_pos[s])
        counts, errors = (row.tolist() for row in self._base(s))
        tau = t - self._seg_pos[s]
        # S = c - E exactly: (c * 2**40 - E * 2**40) / 2**40 with E at the segment start
        return np.array(
            [
                ((c + d) * MAX_TOTAL - (e + d * MAX_TOTAL - u * tau)) / MAX_TOTAL
                for c, d, e, u in zip(counts, local, errors, units, strict=True)
            ],
            dtype=np.float64,
        )

    def deviation_bounds(self) -> npt.NDArray[np.float64]:
        """Per-source bound on ``|c_d(t) - S_d(t)|`` at every sample, whatever the log:
        ``h (h + 1) / 4`` for a source at depth ``h`` of the tree (NOTE [ Mixture log
        exactness ])."""
        return np.array([h * (h + 1) / 4 for h in self._depths], dtype=np.float64)

    def share_bounds(self, t: int) -> npt.NDArray[np.float64]:
        """:meth:`deviation_bounds` (they do not grow with ``t`` or the entries)."""
        check_int("t", t, min_value=0, max_value=MAX_POSITION)
        return self.deviation_bounds()

    # -- the schedule interface (NOTE [ Trained part of a schedule ] in mixture_schedule.py) ---
    def __len__(self) -> int:
        return len(self._log)

    def trained_entries(self, samples: int) -> int:
        """How many log entries start before sample ``samples``."""
        samples = check_int("samples", samples, min_value=0, max_value=MAX_POSITION)
        self._sync()
        s = bisect.bisect_left(self._seg_pos, samples)
        return self._seg_count[s - 1] if s else 0

    def trained_tag(self, samples: int) -> str:
        """``"<entries>:<digest>[:<back>]"`` of the log entries that start before ``samples``
        (``"0"`` before any sample): the log's length and chained digest a state records, and
        the first 8 hex digits of the digests of its last :data:`TAG_BACK` shorter prefixes
        (NOTE [ Naming the entry from the state ])."""
        m = self.trained_entries(samples)
        if m == 0:
            return "0"
        digest = self._log.digest
        back = "".join(digest(m - i)[:8] for i in range(1, min(TAG_BACK, m - 1) + 1))
        return f"{m}:{digest(m)}" + (f":{back}" if back else "")

    def check_trained(
        self,
        tag: object,
        samples: int,
        *,
        name: str = "state['mixture']",
        saved_at: int | None = None,
        unit: str = "sample",
    ) -> None:
        """Refuse this log if its entries before ``samples`` are not the ones ``tag`` digests.

        A tag without the shorter prefixes' digests (written before they were added) is read
        the same way.

        Raises:
            ValueError: If ``tag`` is malformed, or the log's trained part differs: the message
                names the first entry that differs when the lengths differ or the divergence is
                among the last :data:`TAG_BACK` entries, else the range
                (NOTE [ Naming the entry from the state ]).
        """
        fields = tag.split(":") if isinstance(tag, str) else []
        valid = fields == ["0"] or (
            len(fields) in (2, 3)
            and fields[0].isdigit()
            and len(fields[1]) == 2 * DIGEST_BYTES
            and (len(fields) == 2 or 0 < len(fields[2]) <= 8 * TAG_BACK)
            and (len(fields) == 2 or len(fields[2]) % 8 == 0)
        )
        if not valid:
            fail(name, "a mixture-log tag such as '12:9f12ab34cd56ef78'", tag)
        theirs = int(fields[0])
        mine = self.trained_entries(samples)
        if theirs == mine and (mine == 0 or fields[1] == self._log.digest(mine)):
            self._note(samples)  # the entries before it are trained: none may be added there
            return
        at = f"before {unit} {samples}"
        if saved_at is not None and saved_at != samples:
            at += f" (the end of the global batch under way at the saved {unit} {saved_at})"
        if theirs != mine:
            prefix = theirs < mine and self._log.digest(theirs) == fields[1]
            what = (
                f"the state trained {theirs} log entries {at} and this log has {mine} there; "
                + (
                    f"the first {theirs} agree, so entry {theirs} is the first that differs"
                    if prefix
                    else f"entry {min(theirs, mine)} is the first that differs at the latest"
                )
            )
        else:
            what = (
                f"its first {mine} entries (the ones {at}) digest to {self._log.digest(mine)}, "
                f"the state's to {fields[1]}: {self._first_difference(mine, fields[2:])}"
            )
        raise ValueError(
            f"the mixture log cannot continue this state: {what}. Resume with the log saved "
            "beside the state (MixtureLog.load, or OrderState)"
        )

    def _first_difference(self, m: int, back: list[str]) -> str:
        """Which of the first ``m`` entries differs, from the state's digests of the shorter
        prefixes ``back`` (NOTE [ Naming the entry from the state ])."""
        digests = [back[0][i : i + 8] for i in range(0, len(back[0]), 8)] if back else []
        for i, theirs in enumerate(digests, start=1):
            if self._log.digest(m - i)[:8] == theirs:  # the first m - i entries agree
                return (
                    f"entry {m - i} is the first that differs (the state's digests of the first "
                    f"{m - i} and {m - i + 1} entries: the first agrees with this log's)"
                )
        last = m - 1 - len(digests)
        shown = "" if not digests else f" (the last {len(digests)} differ as well)"
        return (
            f"one of entries 0..{last} differs{shown} (compare the saved log with "
            "MixtureLog.first_difference to name it)"
        )

    def segment_at(self, samples: int) -> int:
        """The index of the log entry in effect at sample ``samples``."""
        samples = check_int("samples", samples, min_value=0, max_value=MAX_POSITION)
        self._sync()
        return self._seg_entry[self._segment_of(samples)]

    def entry_start(self, index: int) -> int:
        """The sample at which log entry ``index`` starts."""
        entry = self._log.entry(index)
        return self._batches.consumed_samples(entry.step)

    def weights_at(self, samples: int) -> tuple[float, ...]:
        """The normalised weights in effect at sample ``samples``."""
        return self._log.entry(self.segment_at(samples)).weights

    def describe(self, samples: int) -> str:
        """Which entry holds at ``samples``, and the counts against their integral, in words."""
        index = self.segment_at(samples)
        counts = self.counts(samples).tolist() if samples else [0] * self.num_sources
        shares = self.shares(samples).tolist()
        shown = "; ".join(
            f"source {d}: {c} vs {s:.2f}"
            for d, (c, s) in enumerate(zip(counts, shares, strict=True))
        )
        if self.num_sources > 8:
            shown = "; ".join(shown.split("; ")[:8]) + f"; ... {self.num_sources - 8} more"
        return (
            f"log entry {index} of {len(self._log)} (from step {self._log.entry(index).step}, "
            f"sample {self.entry_start(index)}); counts vs integral of the weights: {shown}"
        )
