"""The exact programme of the bucket fit (:mod:`dataorder.diffusion.fit.images`).

Given the bins of :mod:`dataorder.diffusion.fit.bins` and the candidate buckets,
:class:`AspectProgramme` holds the crop loss of every bin against every candidate and searches
chains of buckets: the nearest-bucket rule, the dynamic programme (one global batch size, NOTE
[ waste telescopes ]; :meth:`AspectProgramme.frontier` gives its least crop for every number of
falls at once; its passes are :mod:`dataorder.diffusion.fit.chains`) or its relaxation (a batch
size per bucket, NOTE [ dynamic G ]).
:func:`choose_buckets` is the image fit's search: the nearest rule when it already fits, else the
programme or :func:`_lagrangian`. :func:`threshold_between` places a short exact fraction in each
chosen gap. The video fit (:mod:`dataorder.diffusion.fit.video`) runs one programme per group of
frame counts.

NOTE [ waste telescopes ]
    Let ``P_k`` be the number of images below threshold ``k`` (``P_0 = 0``, ``P_K = N``) and
    ``rho_k = P_k mod G``. Bucket ``k`` drops ``(rho_{k+1} - rho_k) mod G`` images, which is
    ``rho_{k+1} - rho_k`` plus ``G`` when the residue falls. Summed over buckets the differences
    telescope: the waste is ``N mod G + G * D``, where ``D`` counts the falls of the residue
    sequence. Padding is the same with ``rho = (-P) mod G``. So the whole waste constraint is a
    small integer budget ``D <= (W_max - rho_K) // G`` on falls, and the dynamic programme
    carries the falls so far instead of a waste total. With one bucket ``D = 0``: the least
    waste of any bucket set is ``N mod G`` (``(-N) mod G`` padded), and the fit raises a
    ValueError that says so when ``max_waste`` is below it.

NOTE [ dynamic G ]
    With a batch size per bucket (``global_batch_size`` a callable of the bucket's ``(w, h)``,
    e.g. ``R * calc.get_dynamic_batch_size((w, h), b, base)``) the waste no longer telescopes:
    each bucket wastes ``n_k mod G_k`` with its own modulus, so an exact programme would carry the
    waste itself. Instead the fit minimises crop + ``lam`` x waste, which the same per-candidate
    pass solves with each candidate's own modulus and one row of states, searches ``lam`` (doubling,
    then bisection) for the least value whose chain fits, and keeps the best fitting chain seen.
    Feasibility stays exact: a first pass that weighs waste above all crop finds the least
    achievable waste. Where the crop-versus-waste frontier is not convex the result can miss the
    optimum; :attr:`~dataorder.diffusion.fit.images.FitResult.exact` is then False.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dataorder._validate import check_int, fail
from dataorder.core.partition import MAX_BATCH_SIZE
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE
from dataorder.diffusion.fit.bins import (
    Bins,
    FloatArray,
    IntArray,
    bin_images,
    candidate_splits,
    gap_bounds,
)
from dataorder.diffusion.fit.chains import (
    Chain,
    backtrack,
    forward_pass,
    residues,
    solve_chain,
)

__all__ = [
    "RELAXATION_CAP",
    "AspectProgramme",
    "Chain",
    "ChainProgramme",
    "Chosen",
    "candidate_batch_sizes",
    "chain_cost",
    "check_global_batch_size",
    "check_least_waste",
    "choose_buckets",
    "threshold_between",
    "waste_budget",
]

_NUDGE = 2.0**-20  # how close (relative) a threshold is placed to the log-midpoint it stands for
#: The relaxation's multiplier goes up to a wasted sample weighing this many images' whole crop;
#: beyond it the least-waste chain is taken (NOTE [ dynamic G ]).
RELAXATION_CAP = 64


#: The tests turn it off to run the dynamic programme on every instance, the plain way (no
#: least-cost chain read off the bins, no segments in :func:`~dataorder.diffusion.fit.chains.
#: forward_pass`).
_SHORTCUT = True


# -- the programme ------------------------------------------------------------------------------


def check_least_waste(n: int, g: int, drop: bool, w_max: int, max_waste: float) -> None:
    """Refuse a waste budget below what any bucket set wastes (NOTE [ waste telescopes ]).

    With one global batch size ``g`` every bucket set of ``n`` images drops ``n mod g`` (pads
    ``(-n) mod g``) at least, one bucket; a budget of ``w_max`` samples below that is an error
    that names ``max_waste`` and the least share it could be.

    Raises:
        ValueError: If ``w_max`` is below the least waste.
    """
    least = n % g if drop else (-n) % g
    if least > w_max:
        what = "dropped: N mod G" if drop else "padded: (-N) mod G"
        fail(
            "max_waste",
            f">= {least / n:.6g}, the least waste of any bucket set "
            f"({least} of N={n} images {what} with G={g}, one bucket)",
            max_waste,
        )


def waste_budget(share: float, n: int) -> int:
    """The most samples ``w`` with ``w / n <= share`` as floats compare (``0.0272`` allows 272
    of 10,000 although the float is a hair below 272 / 10,000).

    In O(1) for any size: the correctly rounded ``w / n`` is at most ``share`` iff ``w / n`` is
    below the midpoint between ``share`` and the next float up (at the midpoint, ties to even).
    Stepping up from ``floor(share * n)`` instead takes ``share * n / 2**53`` steps, forever
    in effect for a share of ``1e300``.
    """
    mid = (Fraction(share) + Fraction(math.nextafter(share, math.inf))) / 2
    w = math.floor(mid * n)
    while w / n > share:  # at most once: the midpoint itself, rounded up to the next float
        w -= 1
    return w


def candidate_batch_sizes(
    global_batch_size: int | Callable[[int, int], int], cands: list[tuple[int, int]]
) -> IntArray:
    """The global batch size ``G`` of each candidate ``(w, h)``: the one given, or what the
    callable gives each (checked: :func:`check_global_batch_size`, the error naming the call).
    """
    if not callable(global_batch_size):
        return np.full(len(cands), global_batch_size, dtype=np.int64)
    out = []
    for w, h in cands:
        g = global_batch_size(w, h)
        out.append(check_global_batch_size(f"global_batch_size({w}, {h})", g))
    return np.array(out, dtype=np.int64)


def check_global_batch_size(name: str, value: object) -> int:
    """A global batch size of the fit: a positive int, at most ``2**31``.

    The fit plans each bucket's global batches as blocks of
    :func:`~dataorder.core.partition.plan_segments`, whose batches are at most
    :data:`~dataorder.core.partition.MAX_BATCH_SIZE`; checked here, the error names the argument.
    """
    g = check_int(name, value, min_value=1)
    if g > MAX_BATCH_SIZE:
        fail(name, f"at most 2**31 = {MAX_BATCH_SIZE} (the largest batch the fit plans)", value)
    return g


@dataclass
class Chosen:
    """What :func:`choose_buckets` chose, as ``FitResult`` reports it.

    Attributes:
        buckets: Candidate index of each bucket, ascending in aspect ratio.
        thresholds: ``K - 1`` exact ``(p, q)`` between them.
        counts: ``(K,)`` images per bucket.
        mean_crop_loss: Mean crop loss over the images (from the fixed-point objective).
        objective: The minimised crop, in fixed point (for exact comparisons).
        num_bins: Non-empty bins the thresholds were chosen from.
        method: ``"nearest"``, ``"dp"``, ``"lagrangian"`` or ``"nothing trainable"``.
        exact: Whether the chain is the proven optimum.
    """

    buckets: list[int]
    thresholds: tuple[tuple[int, int], ...]
    counts: IntArray
    mean_crop_loss: float
    objective: int
    num_bins: int
    method: str
    exact: bool


class ChainProgramme:
    """Chains of buckets over ordered bins, each bin's loss against each candidate given.

    A *chain* is a list of ``(candidate, end)``: candidates ascending, each bucket holding the
    bins from the previous end up to boundary ``end`` (the last ends at ``S``). Candidate ``c``
    may start at most at ``hi_start[c]`` and end at least at ``lo_end[c]``; and, when given, start
    at least at ``first_start[c]`` and end at most at ``last_end[c]``. The image fit's bins are
    aspect ratios (:class:`AspectProgramme`); the video fit also runs one over clip lengths,
    whose candidates are frame counts and whose loss is the trim.

    Args:
        loss: ``(M, S)`` loss of each bin against each candidate, in images (clips).
        counts: ``(S,)`` images per bin.
        gs: ``(M,)`` global batch size of each candidate.
        drop: Waste is dropping (``n mod G``), else padding (``(-n) mod G``).
        keep_all: With ``drop``, every bucket holds at least its ``G`` images.
        hi_start: ``(M,)`` the latest boundary a candidate's bucket may start at.
        lo_end: ``(M,)`` the earliest boundary it may end at.
        first_start: ``(M,)`` optional least start.
        last_end: ``(M,)`` optional greatest end.
        min_count: Every bucket holds at least this many images instead (``keep_all`` aside):
            the video fit's aspect classes, which need room for several batches.
    """

    def __init__(
        self,
        loss: FloatArray,
        counts: IntArray,
        gs: IntArray,
        drop: bool,
        keep_all: bool,
        hi_start: IntArray,
        lo_end: IntArray,
        *,
        first_start: IntArray | None = None,
        last_end: IntArray | None = None,
        min_count: int | None = None,
    ) -> None:
        m, s = (int(v) for v in loss.shape)
        self.loss, self.gs, self.drop = loss, gs, drop
        self.num_candidates: int = m
        self.num_bins: int = s
        self.below, self.above = hi_start, lo_end
        self.first_start = np.zeros(m, dtype=np.int64) if first_start is None else first_start
        self.last_end = np.full(m, s, dtype=np.int64) if last_end is None else last_end
        self.prefix = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        mods = {
            gc: residues(self.prefix, gc, drop, drop and keep_all, min_count)
            for gc in np.unique(gs).tolist()
        }
        self.per_cand = [mods[int(gc)] for gc in gs]
        self.uniform = bool((gs == gs[0]).all())
        self.keep_all, self.min_count = drop and keep_all, min_count

    @property
    def num_images(self) -> int:
        """Images binned."""
        return int(self.prefix[-1])

    def fixed(self, scale: float) -> FloatArray:
        """``(M, S + 1)`` prefix sums over bins of ``rint(loss * scale)``: exact integers."""
        out = np.zeros((self.num_candidates, self.num_bins + 1))
        np.cumsum(np.rint(self.loss * scale), axis=1, out=out[:, 1:])
        return out

    def bucket_waste(self, chain: Chain) -> tuple[IntArray, IntArray]:
        """Images per bucket of ``chain``, and the samples each drops (or pads)."""
        counts = np.diff(self.prefix[[0, *[e for _, e in chain]]])
        sizes = self.gs[[c for c, _ in chain]]
        return counts, (counts % sizes if self.drop else (-counts) % sizes)

    def allowed(self, chain: Chain, keep_all: bool) -> bool:
        """Whether ``chain`` keeps within every candidate's bins (and, with ``keep_all``, every
        bucket fills a global batch)."""
        begin = 0
        for c, e in chain:
            if begin < self.first_start[c] or e > self.last_end[c]:
                return False
            begin = e
        if keep_all and self.drop:
            counts, _ = self.bucket_waste(chain)
            return not bool((counts < self.gs[[c for c, _ in chain]]).any())
        return True

    def least_cost_chain(self, cost: FloatArray) -> tuple[Chain, int] | None:
        """The chain of least cost whatever it wastes, and its falls of the residue, without the
        dynamic programme where it is plain: when every bin's cheapest candidate is cheaper than
        every other that may hold it, and those choices make a chain the rules allow. It is
        then the only chain of that cost (any other puts some bin on a dearer candidate), so
        :meth:`solve` with ``lam=0.0`` finds the same. None where that does not hold (or the
        shortcut is off)."""
        if not _SHORTCUT or self.num_bins == 0:
            return None
        s = self.num_bins
        step = np.diff(cost, axis=1)
        pos = np.arange(s)
        holds = (pos[None, :] >= self.first_start[:, None]) & (
            pos[None, :] < self.last_end[:, None]
        )
        step = np.where(holds, step, np.inf)
        best = np.argmin(step, axis=0)
        low = step[best, pos]
        step[best, pos] = np.inf
        if not bool(np.isfinite(low).all()) or bool((step.min(axis=0) <= low).any()):
            return None
        if bool((np.diff(best) < 0).any()):  # candidates ascend along a chain
            return None
        cut = np.flatnonzero(np.diff(best)) + 1
        begins, ends = np.concatenate(([0], cut)), np.concatenate((cut, [s]))
        cands = best[begins]
        if (
            bool((begins > self.below[cands]).any())
            or bool((ends < self.above[cands]).any())
            or bool((begins < self.first_start[cands]).any())
            or bool((ends > self.last_end[cands]).any())
        ):
            return None
        counts = self.prefix[ends] - self.prefix[begins]
        least = self.gs[cands] if self.keep_all else np.ones(cands.size, dtype=np.int64)
        if self.min_count is not None:
            least = np.full(cands.size, self.min_count, dtype=np.int64)
        if bool((counts < least).any()):
            return None
        falls = 0
        if self.uniform:
            sigma = self.per_cand[0].sigma
            falls = int((sigma[ends] < sigma[begins]).sum())
        return [(int(c), int(e)) for c, e in zip(cands.tolist(), ends.tolist(), strict=True)], falls

    def solve(
        self, cost: FloatArray, rows: int, w_max: int, lam: float | None = None
    ) -> Chain | None:
        """The least-cost chain (:func:`solve_chain`): exact with ``lam=None`` (one ``G``, at most
        ``rows - 1`` falls), else the relaxation with ``lam`` per wasted sample."""
        return solve_chain(
            cost,
            self.per_cand,
            self.above,
            self.below,
            rows,
            w_max,
            lam,
            self.first_start,
            self.last_end,
            _SHORTCUT,
        )

    def relaxed(self, cost: FloatArray, lams: FloatArray) -> list[Chain | None]:
        """The relaxation's chain for each multiplier of ``lams`` (fixed point per wasted
        sample), in one pass: each multiplier is a row of its own (NOTE [ dynamic G ])."""
        rows = int(lams.size)
        forward = forward_pass(
            cost,
            self.per_cand,
            self.above,
            self.below,
            rows,
            self.waste_bound(),
            lams,
            self.first_start,
            self.last_end,
            _SHORTCUT,
        )
        best_end, stored = forward
        out: list[Chain | None] = []
        for d in range(rows):
            value = float(best_end[d])
            if not np.isfinite(value):
                out.append(None)
                continue
            out.append(
                backtrack(
                    cost,
                    self.per_cand,
                    self.below,
                    stored,
                    d,
                    value,
                    False,
                    float(lams[d]),
                    self.first_start,
                )
            )
        return out

    def frontier(self, cost: FloatArray, rows: int, w_max: int) -> list[tuple[int, float, Chain]]:
        """One ``G`` for all candidates: for each number of falls ``d < rows`` with a chain, the
        least cost, as ``(d, cost, chain)`` (waste ``rho_S + G * d``, NOTE [ waste telescopes ])."""
        forward = forward_pass(
            cost,
            self.per_cand,
            self.above,
            self.below,
            rows,
            w_max,
            None,
            self.first_start,
            self.last_end,
            _SHORTCUT,
        )
        best_end, stored = forward
        out = []
        for d in range(rows):
            value = float(best_end[d])
            if np.isfinite(value):
                chain = backtrack(
                    cost, self.per_cand, self.below, stored, d, value, True, 0.0, self.first_start
                )
                out.append((d, value, chain))
        return out

    def waste_bound(self) -> int:
        """More than any chain wastes: ``N + M * max(G)``."""
        return self.num_images + self.num_candidates * int(self.gs.max())

    def least_waste_chain(self, w_max: int) -> Chain | None:
        """The chain of least waste, exactly (waste weighs more than all crop; a coarse crop
        breaks ties); None if no chain exists (``keep_all`` and no bucket fills a batch)."""
        n = self.num_images
        heavy = 2.0 ** (52 - (self.waste_bound() + 1).bit_length())
        coarse = 2.0 ** math.floor(math.log2(heavy / (n + 1)))
        return self.solve(self.fixed(coarse), 1, w_max, lam=heavy)

    def relaxed_scale(self, n_total: int) -> float:
        """A fixed-point scale at which crop of ``n_total`` images plus ``lam * waste`` with
        ``lam`` up to :data:`RELAXATION_CAP` per image stays an exact integer in float64."""
        bound = n_total + self.num_candidates * int(self.gs.max())
        return 2.0 ** (52 - (n_total + RELAXATION_CAP * bound).bit_length())


class AspectProgramme(ChainProgramme):
    """The crop loss of binned images against candidate buckets of ascending aspect ratio.

    The image fit (:mod:`dataorder.diffusion.fit.images`) searches one; the video fit
    (:mod:`dataorder.diffusion.fit.video`) one over every clip, for its aspect classes.

    Args:
        bins: The images' bins (:func:`~dataorder.diffusion.fit.bins.bin_images`), cut by the
            splits of ``cands`` (``where`` indexes them).
        where: The split keys of :func:`~dataorder.diffusion.fit.bins.candidate_splits`.
        cands: Candidate ``(w, h)``, ascending in aspect ratio.
        gs: ``(M,)`` global batch size of each candidate.
        drop: Waste is dropping (``n mod G``), else padding (``(-n) mod G``).
        keep_all: With ``drop``, every bucket holds at least its ``G`` images.
        first_start: ``(M,)`` optional least boundary a candidate's bucket may start at.
        last_end: ``(M,)`` optional greatest boundary it may end at; the two say which bins a
            candidate may hold (the video fit's upscale limit). A candidate whose own ratio's
            bins are outside them is never chosen.
    """

    def __init__(
        self,
        bins: Bins,
        where: dict[tuple[int, ...], int],
        cands: list[tuple[int, int]],
        gs: IntArray,
        drop: bool,
        keep_all: bool,
        *,
        first_start: IntArray | None = None,
        last_end: IntArray | None = None,
        min_count: int | None = None,
    ) -> None:
        m = len(cands)
        s = int(bins.counts.size)
        self.bins, self.cands = bins, cands
        self.ratio = np.array([a / b for a, b in cands])
        below = np.array([bins.split_pos[where[(0, i, 0)]] for i in range(m)], dtype=np.int64)
        above = np.array([bins.split_pos[where[(0, i, 1)]] for i in range(m)], dtype=np.int64)
        self.mids = [int(bins.split_pos[where[(1, i, i + 1, 1)]]) for i in range(m - 1)]
        # Crop loss of every bin against every candidate: bins below s lose 1 - r / s, bins
        # above lose 1 - s / r, bins of exactly s lose nothing.
        pos = np.arange(s)
        n = bins.counts.astype(np.float64)
        loss_below = n[None, :] - bins.sum_r[None, :] / self.ratio[:, None]
        loss_above = n[None, :] - self.ratio[:, None] * bins.sum_inv[None, :]
        loss = np.where(
            pos[None, :] < below[:, None],
            loss_below,
            np.where(pos[None, :] >= above[:, None], loss_above, 0.0),
        )
        np.maximum(loss, 0.0, out=loss)
        super().__init__(
            loss,
            bins.counts,
            gs,
            drop,
            keep_all,
            below,
            above,
            first_start=first_start,
            last_end=last_end,
            min_count=min_count,
        )

    def nearest(self) -> Chain:
        """The nearest-bucket rule over all candidates (non-empty buckets): the least crop."""
        starts = [0, *self.mids]
        return [
            (c, e)
            for c, e in enumerate([*self.mids, self.num_bins])
            if self.prefix[e] > self.prefix[starts[c]]
        ]

    def thresholds(self, w: IntArray, h: IntArray, chain: Chain) -> tuple[tuple[int, int], ...]:
        """A short fraction between the data either side of each boundary of ``chain``, inside
        the two buckets' ratios, near their log-midpoint (``w`` and ``h``: the binned images)."""
        chosen = [c for c, _ in chain]
        ends = [e for _, e in chain]
        out: list[tuple[int, int]] = []
        if len(chain) > 1:
            for k, (lo, hi) in enumerate(gap_bounds(self.bins, w, h, ends[:-1])):
                (wa, ha), (wb, hb) = self.cands[chosen[k]], self.cands[chosen[k + 1]]
                lo, hi = max(lo, Fraction(wa, ha)), min(hi, Fraction(wb, hb))
                mid = math.sqrt(self.ratio[chosen[k]] * self.ratio[chosen[k + 1]])
                out.append(threshold_between(lo, hi, mid))
        return tuple(out)


def choose_buckets(
    w: IntArray,
    h: IntArray,
    cands: list[tuple[int, int]],
    gs: IntArray,
    drop: bool,
    w_max: int,
    max_waste: float,
    x_lo: float,
    x_hi: float,
    keep_all: bool,
) -> Chosen:
    """The image fit's search over the candidates ``cands`` (``(w, h)``, ascending in aspect
    ratio, ``gs`` their global batch sizes): the nearest-bucket rule when it meets the waste
    budget ``w_max``, else the dynamic programme (one ``G``, NOTE [ waste telescopes ]) or its
    relaxation (a ``G`` per candidate, NOTE [ dynamic G ]).

    Args:
        w: Image widths, flat int64.
        h: Image heights, the same length.
        cands: The candidate buckets.
        gs: ``(M,)`` global batch size of each candidate.
        drop: Drop remainders (else pad whole global batches).
        w_max: The waste budget in samples (:func:`waste_budget`).
        max_waste: The budget as given, for the error message.
        x_lo: Least float ``W / H`` of the images.
        x_hi: Greatest float ``W / H`` of the images.
        keep_all: With ``drop``, every bucket fills a global batch.

    Raises:
        ValueError: If no chain meets the budget (the message gives the least waste).
    """
    n_img = int(w.size)
    g = int(gs[0])
    splits, where = candidate_splits(cands)
    bins = bin_images(w, h, splits, x_lo, x_hi).select(0, 1)
    prog = AspectProgramme(bins, where, cands, gs, drop, keep_all)
    s = prog.num_bins
    if prog.uniform:  # a callable that gives every candidate one G: the exact programme
        check_least_waste(n_img, g, drop, w_max, max_waste)

    fine_scale = 2.0 ** (52 - n_img.bit_length())
    fine = prog.fixed(fine_scale)
    chain, method, exact = _search(prog, fine, n_img, w_max, max_waste, keep_all)
    counts, _ = prog.bucket_waste(chain)
    objective = int(chain_cost(fine, chain))
    return Chosen(
        buckets=[c for c, _ in chain],
        thresholds=prog.thresholds(w, h, chain),
        counts=counts.astype(np.int64),
        mean_crop_loss=objective / fine_scale / n_img,
        objective=objective,
        num_bins=s,
        method=method,
        exact=exact,
    )


def _search(
    prog: AspectProgramme,
    fine: FloatArray,
    n_img: int,
    w_max: int,
    max_waste: float,
    keep_all: bool,
) -> tuple[Chain, str, bool]:
    """The chain :func:`choose_buckets` picks, how it was found and whether exactly."""
    s = prog.num_bins
    # The nearest-bucket rule over all candidates crops least of all; if it fits, it is the fit.
    nearest = prog.nearest()
    _, waste = prog.bucket_waste(nearest)
    exact, method = True, "nearest"
    chain: Chain | None
    if int(waste.sum()) <= w_max and prog.allowed(nearest, keep_all) and _SHORTCUT:
        chain = nearest
    elif prog.uniform:
        method = "dp"
        g, m = int(prog.gs[0]), len(prog.cands)
        rows = min((w_max - int(prog.per_cand[0].sigma[s])) // g, m - 1) + 1
        chain = prog.solve(fine, rows, w_max)
    else:
        method, exact = "lagrangian", False
        chain = _lagrangian(prog, n_img, w_max, max_waste)
    if chain is None:  # keep_every_image and no bucket can fill a global batch: all dropped
        chain = [(int(np.argmin(prog.loss.sum(axis=1))), s)]
        method = "nothing trainable"
    return chain, method, exact


def _lagrangian(prog: AspectProgramme, n_img: int, w_max: int, max_waste: float) -> Chain | None:
    """Per-bucket batch sizes: least crop + lam * waste, lam searched; see NOTE [ dynamic G ].

    Raises:
        ValueError: If even the least-waste chain exceeds ``w_max``.
    """
    # 1. The least waste, exactly: waste weighs more than all crop (coarse crop breaks ties).
    lex = prog.least_waste_chain(w_max)
    least = n_img if lex is None else int(prog.bucket_waste(lex)[1].sum())  # None: all dropped
    if least > w_max:
        fail(
            "max_waste",
            f">= {least / n_img:.6g}, the least waste of any bucket set with these per-bucket "
            f"batch sizes ({least} of N={n_img} images)",
            max_waste,
        )
    if lex is None:
        return None
    # 2. The multiplier: the least lam whose chain fits (doubling, then bisection to 1/256).
    scale = prog.relaxed_scale(n_img)
    cost = prog.fixed(scale)

    def run(lam: float) -> tuple[Chain, int, float]:
        chain = prog.solve(cost, 1, w_max, lam=lam)
        if chain is None:  # not reachable: the least-waste chain exists, so chains do
            raise RuntimeError("the relaxation found no chain")
        return chain, int(prog.bucket_waste(chain)[1].sum()), chain_cost(cost, chain)

    found = [(chain_cost(cost, lex), lex)]
    chain, waste, crop = run(0.0)
    if waste <= w_max:
        return chain
    lo, hi = 0.0, scale * 2.0**-20
    while True:
        chain, waste, crop = run(hi)
        if waste <= w_max:
            found.append((crop, chain))
            break
        lo, hi = hi, hi * 2
        if hi > RELAXATION_CAP * scale:
            hi = math.inf
            break
    while math.isfinite(hi) and hi - lo > max(1.0, lo / 256):
        mid = math.floor((lo + hi) / 2)
        chain, waste, crop = run(float(mid))
        if waste <= w_max:
            hi = float(mid)
            found.append((crop, chain))
        else:
            lo = float(mid)
    return min(found, key=lambda item: item[0])[1]


def chain_cost(cost: FloatArray, chain: Chain) -> float:
    """The cost of ``chain`` read from prefix sums ``cost`` (:meth:`AspectProgramme.fixed`)."""
    begins = [0, *[e for _, e in chain[:-1]]]
    return float(sum(cost[c, e] - cost[c, b] for (c, e), b in zip(chain, begins, strict=True)))


# -- thresholds ---------------------------------------------------------------------------------


def _simplest(lo: Fraction, hi: Fraction | None, lo_closed: bool, hi_closed: bool) -> Fraction:
    """The fraction with the least denominator in the interval (``hi=None``: unbounded)."""
    n = math.floor(lo)
    first = n if (lo_closed and n == lo) else n + 1
    if hi is None or first < hi or (hi_closed and first == hi):
        return Fraction(first)
    # lo and hi in (n, n + 1]: x = n + 1 / y with y in (1 / (hi - n), 1 / (lo - n)).
    upper = None if lo == n else 1 / (lo - n)
    y = _simplest(1 / (hi - n), upper, hi_closed, lo_closed)
    return n + 1 / y


def threshold_between(lo: Fraction, hi: Fraction, target: float) -> tuple[int, int]:
    """A short fraction in ``[lo, hi)``: within ``2**-20`` of ``target`` if the gap holds it,
    else the shortest. Every fraction in the gap assigns the fitted images alike; near the
    log-midpoint of the two buckets, unseen images in the gap get their nearest bucket. Terms
    stay within those of ``lo`` (the simplest fraction of an interval has the least terms)."""
    t = Fraction(target)
    if lo <= t < hi:
        near = _simplest(
            max(lo, t * Fraction(1 - _NUDGE)), min(hi, t * Fraction(1 + _NUDGE)), True, False
        )
        if near.numerator <= MAX_IMAGE_SIDE and near.denominator <= MAX_IMAGE_SIDE:
            return near.numerator, near.denominator
    f = _simplest(lo, hi, True, False)
    return f.numerator, f.denominator
