"""The bands of the video bucket fit (:mod:`dataorder.diffusion.fit.video`): how the legal frame
counts split into bands, and how each band is fitted and shares the waste budget.

NOTE [ video fit bands ]
    A *band* is a run of legal frame counts whose buckets take one global batch size (with a
    fixed batch, one band for all of them; with cost-model batches, short clips take larger
    batches than long ones). Each band has aspect classes of its own, so the few short clips
    that must fill batches of hundreds get coarse classes while the many long ones get fine
    ones. The bands are fitted from the longest clips down (:func:`descend`): a band takes its
    own clips (keys from its first frame count on) and those the band above hands down, lists
    its class structures (:meth:`~dataorder.diffusion.fit.video_classes.ClassSpace.structures`),
    and for each class the choices in time of its remaining clips
    (:func:`~dataorder.diffusion.fit.video_classes.chain_options`) after it hands its shortest
    clips, its total's remainder modulo the band's global batch, to the band below
    (:meth:`Band.hand_down`; the first band cannot). A structure's front is the exact Pareto
    merge of its classes' choices; the band's front, the best of its structures'. Which entry a
    band takes is decided by :func:`fit_bands`: a first descent shares the budget in proportion
    to the clips; a second shares what is left, band by band, exactly between the band's front
    and the first descent's fronts of the bands below; the better fitting one wins, else a
    descent that wastes least everywhere gives the least waste the fit can reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dataorder.diffusion.buckets.video_set import at_least
from dataorder.diffusion.fit.bins import IntArray, ratio_range
from dataorder.diffusion.fit.programme import AspectProgramme, Chain
from dataorder.diffusion.fit.video_classes import ClassSpace, Front, Option, chain_options
from dataorder.diffusion.fit.video_time import TimeAxis, TimeProgramme, time_programme

__all__ = [
    "BAND_BATCHES",
    "Band",
    "BandPick",
    "BandSpec",
    "ClassChoice",
    "FitSettings",
    "band_layouts",
    "band_spans",
    "descend",
    "fit_bands",
    "picks_loss",
]


#: A band with fewer global batches of clips than this is also tried merged into a neighbour.
BAND_BATCHES = 16


def band_spans(f: IntArray, legal: tuple[int, ...], typical: list[int]) -> list[tuple[int, int]]:
    """The bands, as ranges ``[lo, hi)`` of the legal frame counts up to the longest clip: runs
    of counts whose buckets take one global batch size (NOTE [ video fit ])."""
    hi = int(np.searchsorted(np.array(legal), int(f.max()), side="right"))
    cuts = [i for i in range(1, hi) if typical[i] != typical[i - 1]]
    return list(zip([0, *cuts], [*cuts, hi], strict=True))


def band_layouts(
    spans: list[tuple[int, int]], f: IntArray, legal: tuple[int, ...], typical: list[int]
) -> list[list[tuple[int, int]]]:
    """The band layouts :func:`~dataorder.diffusion.fit.video.fit_video_to_data` tries, distinct:
    one band per batch size (``spans``); the same with every band of fewer than
    :data:`BAND_BATCHES` global batches of clips merged into its neighbour below (the first band
    into the one above)."""
    counts = np.bincount(
        np.searchsorted(np.array(legal), np.minimum(f, legal[-1]), side="right") - 1,
        minlength=len(legal),
    )
    merged = [list(span) for span in spans]
    i = len(merged) - 1
    while len(merged) > 1 and i >= 0:
        lo, top = merged[i]
        if int(counts[lo:top].sum()) >= BAND_BATCHES * typical[top - 1]:
            i -= 1
            continue
        if i > 0:  # into the band below
            merged[i - 1][1] = top
        else:  # the first band: into the one above
            merged[1][0] = lo
        del merged[i]
        i = min(i, len(merged) - 1)
    out: list[list[tuple[int, int]]] = [spans]
    if [(a, b) for a, b in merged] != spans:
        out.append([(a, b) for a, b in merged])
    return out


@dataclass
class BandSpec:
    """The clips and how the legal frame counts split into bands."""

    legal: tuple[int, ...]
    spans: list[tuple[int, int]]
    starts: list[tuple[int, int, int]]
    own_clips: list[IntArray]
    w: IntArray
    h: IntArray
    f: IntArray
    typical: list[int]
    fitted: dict[tuple[int, int, bytes], Band] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        spans: list[tuple[int, int]],
        legal: tuple[int, ...],
        key: tuple[IntArray, IntArray, IntArray],
        typical: list[int],
        fitted: dict[tuple[int, int, bytes], Band] | None = None,
    ) -> BandSpec:
        """The bands ``spans`` of the clips ``key = (frames, widths, heights)``: each band's own
        clips are the keys from its first frame count to the next band's. ``fitted``: bands
        already fitted (by another layout), shared."""
        f, w, h = key
        starts = [(legal[lo], 1, 1) for lo, _ in spans[1:]]
        own = []
        for b in range(len(spans)):
            inside = np.ones(f.size, dtype=bool) if b == 0 else at_least(key, starts[b - 1])
            if b + 1 < len(spans):
                inside &= ~at_least(key, starts[b])
            own.append(np.flatnonzero(inside))
        return cls(legal, spans, starts, own, w, h, f, typical, {} if fitted is None else fitted)

    def band(self, b: int, idx: IntArray, args: FitSettings) -> Band:
        """Band ``b`` over the clips ``idx`` (cached: a descent, or a layout, that gives a band of
        the same frame counts the same clips finds it fitted)."""
        lo, hi = self.spans[b]
        key = (lo, hi, idx.tobytes())
        if key not in self.fitted:
            self.fitted[key] = Band(
                self.legal[lo:hi],
                self.starts[b - 1] if b else None,
                self.typical[hi - 1],
                idx,
                (self.w[idx], self.h[idx], self.f[idx]),
                b > 0,
                args,
            )
        return self.fitted[key]


@dataclass
class FitSettings:
    """The settings every band is fitted with."""

    budget: int
    quantization: int
    own: list[tuple[int, int]]
    batch: Any
    max_upscale: Fraction | None
    min_share: float
    max_candidates: int
    drop: bool
    keep_all: bool
    fine: float
    w_max: int
    n_total: int
    typical: dict[int, int]


@dataclass
class BandPick:
    """One band as fitted: its structure and each class's choice in time, the entry of its
    front they are, and the whole front."""

    band: Band
    chain: Chain
    prog: AspectProgramme
    classes: list[ClassChoice]
    options: list[Option]
    entry: tuple[int, int, int, int]
    entries: list[tuple[int, int, int, int]] = field(default_factory=list)


def fit_bands(spec: BandSpec, args: FitSettings) -> tuple[list[BandPick], int] | None:
    """The bands' choices (NOTE [ video fit ]). A band's clips depend on what the bands above
    hand down, so the bands are fitted from the longest down, twice: the first descent shares
    the budget in proportion to the clips and gives every band's front; the second shares it,
    band by band, exactly between the band's own front and the first descent's fronts of the
    bands below it (the least total loss). The better fitting of the two; if neither fits, the
    least waste of those two and a descent that takes the least waste everywhere."""
    first = descend(spec, args, None)
    if first is None:
        return None
    below = [[(e[0], e[1]) for e in p.entries] for p in first[0]]  # bottom band first
    second = descend(spec, args, below)
    fitting = [t for t in (first, second) if t is not None and t[1] <= args.w_max]
    if fitting:
        return min(fitting, key=lambda t: (picks_loss(t[0]), t[1]))
    least = descend(spec, args, [])
    tried = [t for t in (first, second, least) if t is not None]
    return min(tried, key=lambda t: (t[1], picks_loss(t[0])))


def picks_loss(picks: list[BandPick]) -> int:
    """The fixed-point crop plus trim of the picked bands."""
    return sum(p.entry[1] for p in picks)


def descend(
    spec: BandSpec, args: FitSettings, plan: list[list[tuple[int, int]]] | None
) -> tuple[list[BandPick], int] | None:
    """Fit the bands from the longest clips down (NOTE [ video fit ]): each band takes its own
    clips and those the band above hands down, and picks the entry of its front of least loss
    within its share of the budget left. ``plan`` (the fronts of a previous descent, bottom
    band first): the share is the exact best split of what is left between this band's front
    and the planned fronts below; None: in proportion to the clips; empty: no share (the
    least waste). None if a band has no structure at all."""
    remaining = args.w_max
    received = np.zeros(0, dtype=np.int64)
    picks: list[BandPick] = []
    left = sum(c.size for c in spec.own_clips)
    fitted = 0
    for b in range(len(spec.spans) - 1, -1, -1):
        _lo, _hi = spec.spans[b]
        idx = np.concatenate((spec.own_clips[b], received))
        left -= spec.own_clips[b].size
        if idx.size == 0:
            continue
        band = spec.band(b, idx, args)
        entries = band.front()
        if not entries:
            return None
        own = [(e[0], e[1]) for e in entries]
        share = 0
        if plan is None:
            share = remaining * idx.size // (idx.size + left)
        elif plan:
            rest = plan[: len(plan) - fitted - 1]  # the planned bands below this one
            split = Front.of([own, *reversed(rest)], remaining)
            if split is not None:
                share = own[split.choices(split.best())[0]][0]
        fits = [e for e in entries if e[0] <= share]
        entry = min(fits, key=lambda e: (e[1], e[0])) if fits else entries[0]
        pick = band.pick(entry)
        pick.entries = entries
        remaining -= entry[0]
        received = idx[band.shed(pick)]
        left += received.size
        picks.append(pick)
        fitted += 1
    picks.reverse()
    return picks, args.w_max - remaining


@dataclass
class ClassChoice:
    """One aspect class of a structure: its candidate, bins and choices in time."""

    cand: int
    begin: int
    end: int
    crop: int
    time: TimeProgramme
    options: list[Option]
    whole: bool
    shed: IntArray  # the band's clips it hands to the band below (indices into the band)
    first: tuple[int, int, int] | None  # its least key when it hands some down


class Band:
    """The frame counts of one global batch size, their clips, and their class structures."""

    def __init__(
        self,
        frame_counts: tuple[int, ...],
        start: tuple[int, int, int] | None,
        g: int,
        idx: IntArray,
        clips: tuple[IntArray, IntArray, IntArray],
        hand_down: bool,
        args: FitSettings,
    ) -> None:
        self.frame_counts, self.start, self.g, self.idx = frame_counts, start, g, idx
        self.w, self.h, self.f = clips
        self.hand_down, self.args = hand_down, args
        self.axis = TimeAxis.build(self.w, self.h, self.f, frame_counts, args.fine)
        self.space = ClassSpace.build(
            args.budget,
            args.quantization,
            frame_counts,
            args.own,
            args.batch,
            (self.w, self.h),
            ratio_range(self.w, self.h),
            args.max_upscale,
            args.min_share,
            args.max_candidates,
            {f: args.typical[f] for f in frame_counts},
        )
        self.column = self.space.column[self.axis.order]  # each clip's bin, in key order
        self.classes: dict[tuple[int, int, int], ClassChoice] = {}
        self.structures: list[tuple[Chain, AspectProgramme, list[ClassChoice], Front]] = []
        self.entries: list[tuple[int, int, int, int]] | None = None

    def one(self, cand: int, begin: int, end: int, crop: int) -> ClassChoice:
        """The class of candidate ``cand`` over bins ``[begin, end)``, whose clips crop ``crop``
        (fixed point; cached)."""
        key = (cand, begin, end)
        if key not in self.classes:
            a = self.args
            members = (self.column >= begin) & (self.column < end)
            shed, first = self._hand_down(members)
            members[shed] = False
            # its crop: of the clips it keeps (those it hands down crop in the band below)
            gone = self.axis.order[shed]
            bw, bh = self.space.cands[cand]
            x, y = self.w[gone] * bh, self.h[gone] * bw
            crop -= int(np.rint((1.0 - np.minimum(x, y) / np.maximum(x, y)) * a.fine).sum())
            sizes = {g: int(self.space.gs[g][cand]) for g in self.frame_counts}
            time = time_programme(self.axis, members, sizes, a.drop, a.keep_all)
            opts = chain_options(time.prog, a.fine, a.w_max, a.n_total)
            whole = True
            if not opts and a.keep_all:  # no frame count fills a batch: its clips drop
                time = time_programme(self.axis, members, sizes, a.drop, False)
                opts = chain_options(time.prog, a.fine, a.w_max, a.n_total)
                whole = False
            self.classes[key] = ClassChoice(
                cand, begin, end, crop, time, opts, whole, self.axis.order[shed], first
            )
        return self.classes[key]

    def _hand_down(self, members: Any) -> tuple[IntArray, tuple[int, int, int] | None]:
        """The class's shortest clips (positions in key order) it hands to the band below, so
        the rest is whole global batches: its remainder ``n mod G``, or the fewest fewer that a
        run of equal keys allows; and its least key after them."""
        pos = np.flatnonzero(members)
        if not self.hand_down or pos.size == 0:
            return pos[:0], None
        a, g = self.axis, self.g
        length, width, height = a.length[pos], a.width[pos], a.height[pos]
        edge = np.ones(pos.size, dtype=bool)  # a run of equal keys starts here
        edge[1:] = (np.diff(length) != 0) | (np.diff(width) != 0) | (np.diff(height) != 0)
        t = int(np.flatnonzero(edge[: pos.size % g + 1])[-1])
        if t == 0:
            return pos[:0], None
        if length[t] > length[t - 1]:  # between two lengths: from the next length on
            first = (int(length[t - 1]) + 1, 1, 1)
        else:  # within one length: from this size on
            first = (int(length[t]), int(width[t]), int(height[t]))
        return pos[:t], first

    def front(self) -> list[tuple[int, int, int, int]]:
        """The band's Pareto front of ``(waste, crop + trim, structure, entry)`` over its
        structures and their choices in time, ascending in waste (computed once)."""
        if self.entries is not None:
            return self.entries
        a = self.args
        single = len(self.frame_counts) == 1
        entries: list[tuple[int, int, int, int]] = []
        for chain, prog in self.space.structures(self.g, a.drop, a.fine, single):
            begins = [0, *[e for _, e in chain[:-1]]]
            cost = prog.fixed(a.fine)
            classes = [
                self.one(c, b, e, int(cost[c, e] - cost[c, b]))
                for (c, e), b in zip(chain, begins, strict=True)
            ]
            if any(not k.options for k in classes):
                continue
            front = Front.of([[(o.waste, o.trim) for o in k.options] for k in classes], a.n_total)
            if front is None:
                continue
            crop = sum(k.crop for k in classes)
            index = len(self.structures)
            self.structures.append((chain, prog, classes, front))
            for i, (w, v) in enumerate(
                zip(front.waste.tolist(), front.value.tolist(), strict=True)
            ):
                entries.append((w, v + crop, index, i))
        if a.keep_all:  # every clip trained: no class that cannot fill a batch, if avoidable
            whole = [e for e in entries if all(k.whole for k in self.structures[e[2]][2])]
            entries = whole or entries
        entries.sort()
        kept: list[tuple[int, int, int, int]] = []
        for e in entries:
            if not kept or e[1] < kept[-1][1]:
                kept.append(e)
        self.entries = kept
        return kept

    def pick(self, entry: tuple[int, int, int, int]) -> BandPick:
        """An entry of the front: the structure and each class's option."""
        _, _, s, e = entry
        chain, prog, classes, front = self.structures[s]
        choices = front.choices(e)
        options = [k.options[c] for k, c in zip(classes, choices, strict=True)]
        return BandPick(self, chain, prog, classes, options, entry)

    def shed(self, pick: BandPick) -> IntArray:
        """The band's clips the picked structure hands down (indices into the band)."""
        if not pick.classes:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([k.shed for k in pick.classes]).astype(np.int64)
