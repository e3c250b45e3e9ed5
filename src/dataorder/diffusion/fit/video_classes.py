"""The aspect classes of the video bucket fit (:mod:`dataorder.diffusion.fit.video`), each one's
choices in time, and exact Pareto fronts.

:class:`ClassSpace` holds, for one band, the candidate shapes (the image fit's
:func:`~dataorder.diffusion.fit.candidates.lattice_candidates` of the per-frame pixel budget,
the calculator's own buckets among them; with cost-model batches, only those whose global batch
size is the band's at every frame count of it, so every chain telescopes), every clip binned once
against them (:func:`~dataorder.diffusion.fit.bins.bin_images`), and which bins each candidate may
hold: none with a clip it would upscale beyond ``max_upscale``. :meth:`ClassSpace.structures`
lists the class structures searched: the image fit's programme
(:class:`~dataorder.diffusion.fit.programme.AspectProgramme`) over the band's clips, with classes
of at least ``kappa`` global batches (:data:`CLASS_LADDER`) whose totals leave at most
:data:`CLASS_FALLS` falls of the residue. Fewer, larger classes crop more and trim less: a class
needs whole batches at each of its frame counts.

:func:`chain_options` lists a class's choices in time as ``(waste, trim, chain)``
(:func:`~dataorder.diffusion.fit.video_time.time_programme`): the least trim, the least waste,
and with one global batch size over its frame counts the exact least trim for each number of
falls (NOTE [ waste telescopes ] in :mod:`dataorder.diffusion.fit.programme`), else the
relaxation's chains at a ladder of multipliers (NOTE [ dynamic G ]). :class:`Front` merges
choices exactly into the Pareto front of total waste against total value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dataorder.diffusion.fit.bins import (
    IntArray,
    LabelledBins,
    bin_images,
    candidate_splits,
)
from dataorder.diffusion.fit.candidates import (
    lattice_candidates,
    prune_candidates,
    thin_candidates,
)
from dataorder.diffusion.fit.programme import (
    AspectProgramme,
    Chain,
    ChainProgramme,
    chain_cost,
    check_global_batch_size,
)

__all__ = [
    "CLASS_FALLS",
    "CLASS_LADDER",
    "MAX_FALLS",
    "RELAXATION_LADDER",
    "ClassSpace",
    "Front",
    "Option",
    "chain_options",
    "checked_batch",
]

#: Falls of the residue per class the exact frontier looks at (each costs one global batch of
#: waste).
MAX_FALLS = 5

#: Multipliers of the relaxation (per wasted sample, in units of one clip's whole loss) whose
#: chains a class with several batch sizes offers, besides its least-waste chain: one pass.
RELAXATION_LADDER = tuple(2.0**e for e in range(-14, 3, 2))

#: The class structures searched: each class holds at least ``kappa`` global batches of its
#: band (NOTE [ video fit ]).
CLASS_LADDER = (1, 4, 16, 64)

#: Falls of the classes' residues a structure may have (each leaves up to one global batch of
#: remainder in some class that its choices in time must absorb or waste).
CLASS_FALLS = 1

_BEYOND = 4  # candidates beyond each end of the data's aspect range that pruning may keep


@dataclass
class Option:
    """One way to cut a class in time: its waste, its fixed-point trim, its chain."""

    waste: int
    trim: int
    chain: Chain


@dataclass
class ClassSpace:
    """The candidate shapes of one pixel budget and every clip's bins against them.

    Attributes:
        cands: Candidate ``(w, h)``, ascending in aspect ratio.
        gs: ``{frame count: (M,) global batch size of each candidate}``.
        where: The split keys of the candidates.
        bins: Every clip's bins.
        column: ``(N,)`` each clip's bin among the ``U`` non-empty ones.
        first_start: ``(M,)`` the first bin each candidate may hold (upscale limit).
        last_end: ``(M,)`` the boundary after its last.
    """

    cands: list[tuple[int, int]]
    gs: dict[int, IntArray]
    where: dict[tuple[int, ...], int]
    bins: LabelledBins
    column: IntArray
    first_start: IntArray | None
    last_end: IntArray | None
    cache: dict[tuple[int, ...], list[Option]] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        budget: int,
        quantization: int,
        frame_counts: tuple[int, ...],
        own: list[tuple[int, int]],
        batch: Callable[[int, int, int], int],
        clips: tuple[IntArray, IntArray],
        ratio_range: tuple[float, float],
        u: Fraction | None,
        min_share: float,
        max_candidates: int,
        typical: dict[int, int] | None = None,
    ) -> ClassSpace:
        """Candidates, their batch sizes, and the clips' bins.

        Args:
            budget: Pixels per frame.
            quantization: The lattice step.
            frame_counts: The legal frame counts.
            own: The calculator's buckets: always candidates.
            batch: ``(frames, w, h) -> G``, checked.
            clips: ``(widths, heights)`` of every clip.
            ratio_range: Least and greatest ``W / H`` of the clips.
            u: The upscale limit.
            min_share: Least share of the budget a generated candidate uses.
            max_candidates: Generated candidates kept at most (besides ``own`` and the ends).
            typical: Keep only the candidates whose global batch size at every frame count is
                the one given for it here, if some are within the clips' range: then every
                chain over one frame count's buckets telescopes (NOTE [ waste telescopes ]).
        """
        w, h = clips
        x_lo, x_hi = ratio_range
        pool, table, own = _batched_pool(
            budget, quantization, frame_counts, own, batch, ratio_range, min_share, typical
        )
        # one class per batch-size profile over the frame counts: the image fit's pruning
        # argument (a farther candidate beyond an end is worse for every image) holds within one
        _, profile = np.unique(table.T, axis=0, return_inverse=True)
        kept, at_ends = prune_candidates(pool, profile.astype(np.int64).ravel(), x_lo, x_hi)
        mine = set(own)
        required = at_ends | np.array([(int(a), int(b)) in mine for a, b in pool[kept].tolist()])
        kept = kept[thin_candidates(pool[kept], required, max_candidates)]
        cands = [(int(a), int(b)) for a, b in pool[kept].tolist()]
        gs = {f: table[i, kept] for i, f in enumerate(frame_counts)}
        splits, where = candidate_splits(cands)
        bins = bin_images(w, h, splits, x_lo, x_hi)
        u_bins = bins.keep.size
        lut = np.full(bins.total, -1, dtype=np.int64)
        lut[bins.keep] = np.arange(u_bins)
        col = lut[bins.sub]
        first = last = None
        if u is not None:
            first, last = _upscale_limits(cands, (w, h), u, bins, col, where)
        return cls(cands, gs, where, bins, col, first, last)

    def aspect(self, g: int, drop: bool, min_count: int | None) -> AspectProgramme:
        """The programme over every clip's bins, residues modulo ``g``, every class at least
        ``min_count`` clips (None: any non-empty class)."""
        return AspectProgramme(
            self.bins.select(0, 1),
            self.where,
            self.cands,
            np.full(len(self.cands), g, dtype=np.int64),
            drop,
            False,
            first_start=self.first_start,
            last_end=self.last_end,
            min_count=min_count,
        )

    def structures(
        self, g: int, drop: bool, fine: float, single: bool
    ) -> list[tuple[Chain, AspectProgramme]]:
        """The class structures searched (module docstring), distinct, with their programmes:
        for each ``kappa``, the least crop of classes of at least ``kappa * g`` clips whose
        totals leave at most :data:`CLASS_FALLS` falls of the residue modulo ``g`` (the band's
        global batch), each number of falls a structure. A band of one frame count
        (``single``): its classes are its buckets, so its least crop, and ``kappa = 1`` (with
        ``drop``: a whole global batch each) with up to :data:`MAX_FALLS` falls."""
        out: list[tuple[Chain, AspectProgramme]] = []

        def add(chain: Chain | None, prog: AspectProgramme) -> None:
            if chain is not None and all(chain != c for c, _ in out):
                out.append((chain, prog))

        if single:  # its least crop, whatever the waste
            prog = self.aspect(g, drop, None)
            nearest = prog.nearest()
            if prog.allowed(nearest, keep_all=False):
                add(nearest, prog)
        falls = MAX_FALLS if single else CLASS_FALLS
        for kappa in (1,) if single else CLASS_LADDER:
            prog = self.aspect(g, drop, kappa * g if drop else max(1, (kappa - 1) * g))
            cost = prog.fixed(fine)
            rho = int(prog.per_cand[0].sigma[-1])
            for _, _, chain in prog.frontier(cost, falls + 1, rho + g * (falls + 2)):
                add(chain, prog)
        if not out:  # too few clips for a class of a whole batch: the least crop
            prog = self.aspect(g, drop, None)
            add(prog.solve(prog.fixed(fine), 1, prog.waste_bound(), lam=0.0), prog)
        return out


def _limits(
    min_w: IntArray,
    min_h: IntArray,
    wmin: IntArray,
    hmin: IntArray,
    split_pos: IntArray,
    where: dict[tuple[int, ...], int],
    m: int,
) -> tuple[IntArray, IntArray]:
    """Per candidate, the first bin its bucket may start at and the boundary after its last: no
    bin holding a clip it would upscale too much (a bin of its own ratio that does: never)."""
    s = min_w.size
    first = np.zeros(m, dtype=np.int64)
    last = np.full(m, s, dtype=np.int64)
    for c in range(m):
        bad = np.flatnonzero((min_w < wmin[c]) | (min_h < hmin[c]))
        if bad.size == 0:
            continue
        below = int(split_pos[where[(0, c, 0)]])
        above = int(split_pos[where[(0, c, 1)]])
        lower, upper = bad[bad < below], bad[bad >= above]
        if bad.size > lower.size + upper.size:  # a clip of exactly its ratio it cannot take
            first[c], last[c] = s + 1, -1
            continue
        if lower.size:
            first[c] = int(lower[-1]) + 1
        if upper.size:
            last[c] = int(upper[0])
    return first, last


def chain_options(
    prog: ChainProgramme, fine: float, w_max: int, n_total: int, *, least: bool = False
) -> list[Option]:
    """A class's ways to cut its clips in time, Pareto-optimal in ``(waste, trim)`` (module
    docstring); trim in the fixed point ``fine``. Empty if no chain exists. With ``least``,
    only the least trim (one cheap pass)."""
    cost = prog.fixed(fine)
    found: list[Option] = []

    def add(chain: Chain | None) -> None:
        if chain is not None:
            _, waste = prog.bucket_waste(chain)
            found.append(Option(int(waste.sum()), int(chain_cost(cost, chain)), chain))

    big = prog.waste_bound()
    plain = prog.least_cost_chain(cost)  # the least trim without the programme, if plain
    add(prog.solve(cost, 1, big, lam=0.0) if plain is None else plain[0])  # the least trim
    if least:
        return found
    if prog.uniform:
        g = int(prog.gs[0])
        rho = int(prog.per_cand[0].sigma[-1])
        rows = min(max(0, (w_max - rho) // g), MAX_FALLS) + 1
        # rows from the least trim's falls on hold nothing better than the least trim: their
        # waste is no less and their trim more (it is the only chain of least trim)
        falls = rows if plain is None else min(rows, plain[1])
        frontier = prog.frontier(cost, falls, rho + g * (rows + 1)) if falls else []
        for _, _, chain in frontier:
            add(chain)
        first = frontier[0][0] if frontier else (falls if falls < rows else None)
        if first is None or first > 0:  # no chain without a fall: the least, exactly
            add(prog.least_waste_chain(big))
    else:
        add(prog.least_waste_chain(big))  # whatever the budget, so the least is reachable
        scale = prog.relaxed_scale(n_total)
        lams = np.floor(np.array(RELAXATION_LADDER) * scale)
        for relaxed in prog.relaxed(prog.fixed(scale), lams):
            add(relaxed)
    return _pareto(found)


def _pareto(options: list[Option]) -> list[Option]:
    """The options no other beats in both waste and trim, by ascending waste."""
    out: list[Option] = []
    for o in sorted(options, key=lambda o: (o.waste, o.trim)):
        if not out or o.trim < out[-1].trim:
            out.append(o)
    return out


@dataclass
class Front:
    """The Pareto front of sums of one option per stage: for each total waste at most a budget,
    the least total value (``waste``, ``value`` ascending in waste, descending in value), and
    how to read each entry's choices back (:meth:`choices`). Exact, in int64 arrays."""

    waste: IntArray
    value: IntArray
    parents: list[tuple[IntArray, IntArray]]

    @classmethod
    def of(cls, stages: list[list[tuple[int, int]]], w_max: int) -> Front | None:
        """The front of ``stages`` (each a list of ``(waste, value)``), or None if no sum
        fits ``w_max``."""
        waste = np.zeros(1, dtype=np.int64)
        value = np.zeros(1, dtype=np.int64)
        parents: list[tuple[IntArray, IntArray]] = []
        for opts in stages:
            if not opts:
                return None
            ow = np.array([o[0] for o in opts], dtype=np.int64)
            ov = np.array([o[1] for o in opts], dtype=np.int64)
            w = (waste[:, None] + ow[None, :]).ravel()
            v = (value[:, None] + ov[None, :]).ravel()
            parent = np.repeat(np.arange(waste.size), ow.size)
            choice = np.tile(np.arange(ow.size), waste.size)
            ok = np.flatnonzero(w <= w_max)
            if ok.size == 0:
                return None
            order = ok[np.lexsort((choice[ok], parent[ok], v[ok], w[ok]))]
            vs = v[order]
            keep = np.ones(order.size, dtype=bool)
            keep[1:] = vs[1:] < np.minimum.accumulate(vs)[:-1]
            order = order[keep]
            waste, value = w[order], v[order]
            parents.append((parent[order], choice[order]))
        return cls(waste, value, parents)

    def best(self) -> int:
        """The entry of least value (ties: the least waste)."""
        return int(np.lexsort((self.waste, self.value))[0])

    def choices(self, entry: int) -> list[int]:
        """The option of each stage that makes ``entry``."""
        out = []
        for parent, choice in reversed(self.parents):
            out.append(int(choice[entry]))
            entry = int(parent[entry])
        return list(reversed(out))


def checked_batch(global_batch_size: Any, shape_info: Callable[[int, int, int], Any]) -> Any:
    """``(frames, w, h) -> G`` from ``global_batch_size`` (an int, or a callable of the bucket
    dict ``shape_info(w, h, frames)``), each value checked to be a positive int of at most
    ``2**31``, the largest batch the fit plans
    (:func:`~dataorder.diffusion.fit.programme.check_global_batch_size`), before any work. A
    callable is asked about each bucket once."""
    if not callable(global_batch_size):
        g = check_global_batch_size("global_batch_size", global_batch_size)
        return lambda f, w, h: g

    asked: dict[tuple[int, int, int], int] = {}  # each bucket once per fit (the bands share)

    def one(f: int, w: int, h: int) -> int:
        if (f, w, h) not in asked:
            value = global_batch_size(shape_info(w, h, f))
            asked[(f, w, h)] = check_global_batch_size(f"global_batch_size({w}x{h}x{f}f)", value)
        return asked[(f, w, h)]

    return one


def _upscale_limits(
    cands: list[tuple[int, int]],
    clips: tuple[IntArray, IntArray],
    u: Fraction,
    bins: LabelledBins,
    col: IntArray,
    where: dict[tuple[int, ...], int],
) -> tuple[IntArray | None, IntArray | None]:
    """The bins each candidate may start at and end at under the upscale limit ``u`` (the
    ``first_start`` and ``last_end`` of the programme), or ``(None, None)`` when every
    candidate can take every clip."""
    w, h = clips
    u_bins = bins.keep.size
    cw = np.array([a for a, _ in cands], dtype=np.int64)
    ch = np.array([b for _, b in cands], dtype=np.int64)
    wmin = -(-(cw * u.denominator) // u.numerator)  # bw <= u * W <=> W >= ceil(bw / u)
    hmin = -(-(ch * u.denominator) // u.numerator)
    limited = np.flatnonzero((w < wmin.max()) | (h < hmin.max()))
    if limited.size:  # only clips some candidate cannot take restrict a bin
        big = np.iinfo(np.int64).max
        min_w = np.full(u_bins, big, dtype=np.int64)
        min_h = np.full(u_bins, big, dtype=np.int64)
        np.minimum.at(min_w, col[limited], w[limited])
        np.minimum.at(min_h, col[limited], h[limited])
        split_pos = bins.select(0, 1).split_pos
        return _limits(min_w, min_h, wmin, hmin, split_pos, where, len(cands))
    return None, None


def _batched_pool(
    budget: int,
    quantization: int,
    frame_counts: tuple[int, ...],
    own: list[tuple[int, int]],
    batch: Callable[[int, int, int], int],
    ratio_range: tuple[float, float],
    min_share: float,
    typical: dict[int, int] | None,
) -> tuple[IntArray, IntArray, list[tuple[int, int]]]:
    """``(pool, table, own)``: the lattice candidates near the clips' aspect range, their
    global batch size at each frame count (``table[frame index, candidate]``), and ``own``,
    all cut to the ``typical`` batch sizes when some candidates in range have them."""
    x_lo, x_hi = ratio_range
    pool = lattice_candidates(budget, quantization, min_share=min_share, extra=own)
    # batch sizes of the candidates within the data's range and the few nearest beyond it
    # (what pruning can keep): a callable is asked about each once per frame count
    ratio = pool[:, 0] / pool[:, 1]
    inside = np.flatnonzero((ratio > x_lo * (1 - 1e-9)) & (ratio < x_hi * (1 + 1e-9)))
    lo = int(inside[0]) if inside.size else int(np.searchsorted(ratio, x_lo))
    hi = int(inside[-1]) + 1 if inside.size else lo
    pool = pool[max(0, lo - _BEYOND) : hi + _BEYOND]
    table = np.array(
        [[batch(f, int(a), int(b)) for a, b in pool.tolist()] for f in frame_counts],
        dtype=np.int64,
    ).reshape(len(frame_counts), -1)
    if typical is not None:
        want = np.array([typical[f] for f in frame_counts], dtype=np.int64)
        same = (table == want[:, None]).all(axis=0)
        r = pool[:, 0] / pool[:, 1]
        if bool((same & (r > x_lo * (1 - 1e-9)) & (r < x_hi * (1 + 1e-9))).any()):
            pool, table = pool[same], table[:, same]
            own = [p for p in own if p in {(int(a), int(b)) for a, b in pool.tolist()}]
    return pool, table, own
