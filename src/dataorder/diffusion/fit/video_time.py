"""The time axis of the video bucket fit (:mod:`dataorder.diffusion.fit.video`): where an aspect
class's thresholds between frame counts may go, and what trimming costs.

NOTE [ thresholds in time ]
    Within one aspect class the clips are ordered by their *key* ``(F, W, H)``: length, then
    width, then height. The class's frame counts hold consecutive runs of that order: a
    threshold ``(T, W_t, H_t)`` sends a clip to the longer frame count iff its key is at least
    the threshold, lexicographically. Most thresholds fall between two lengths, ``(T, 1, 1)``:
    every clip of at least ``T`` frames. Splitting one length by size is what makes the counts
    fine enough to fill whole global batches: a length holds hundreds of clips of a large
    class, a length and a size a few. The fit splits each length into at most
    :data:`SIZE_RUNS` runs of sizes of about equal numbers of clips. A frame count ``f`` only
    takes keys of length ``>= f``
    (clips are trimmed, never stretched). Between two lengths of the data the threshold is the
    least length that reaches the frame count, ``max(v_before + 1, f)``, so an unseen clip in
    between is trimmed less. The fit places thresholds at lengths up to
    :data:`LENGTH_CAP_FACTOR` x the longest legal frame count; longer clips (a few per cent)
    are one position to it, all above every threshold.

:class:`TimeAxis` sorts every clip by key once; :func:`time_programme` reads one class's clips
out of that order as *positions* (its distinct keys) and builds the image fit's chain programme
over them (:class:`~dataorder.diffusion.fit.programme.ChainProgramme`), with the legal frame
counts for candidates and trim for the loss.

Trim is exact in fixed point: a clip of ``F`` frames trimmed to ``f`` loses ``1 - f / F`` of its
frames, and ``sum(1 - f / F) = n - f * sum(1 / F)`` over a position's clips, with ``scale / F``
rounded per clip and summed as integers, so the fit depends only on the multiset of clips.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dataorder.diffusion.fit.programme import Chain, ChainProgramme

__all__ = ["LENGTH_CAP_FACTOR", "SIZE_RUNS", "TimeAxis", "TimeProgramme", "time_programme"]

#: A class's clips of one length are split by size into at most this many runs, the places a
#: threshold may fall within that length (NOTE [ thresholds in time ]).
SIZE_RUNS = 6

#: Thresholds in time go up to this many times the longest legal frame count (NOTE [ thresholds
#: in time ]): clips longer than that are trimmed by at most half to any frame count, and keeping
#: them apart would multiply the positions for little.
LENGTH_CAP_FACTOR = 2

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass
class TimeAxis:
    """Every clip, sorted by key (NOTE [ thresholds in time ]).

    Clips longer than the cap ``C`` all have the key ``(C + 1, 0, 0)``.

    Attributes:
        order: ``(N,)`` the clips in key order (indices into the arrays the axis was built on).
        length: ``(N,)`` lengths in key order (``C + 1`` beyond the cap).
        width: ``(N,)`` widths in key order (0 beyond the cap).
        height: ``(N,)`` heights in key order (0 beyond the cap).
        weight: ``(N,)`` ``rint(scale / F)`` in key order (exact integers in float64).
        legal: The legal frame counts, ascending.
        scale: The fixed point of losses (one clip's whole loss is ``scale``).
    """

    order: IntArray
    length: IntArray
    width: IntArray
    height: IntArray
    weight: FloatArray
    legal: tuple[int, ...]
    scale: float

    @classmethod
    def build(
        cls, w: IntArray, h: IntArray, frames: IntArray, legal: tuple[int, ...], scale: float
    ) -> TimeAxis:
        """The axis of clips ``w x h`` of ``frames`` frames, each at least ``legal[0]``."""
        cap = LENGTH_CAP_FACTOR * legal[-1]
        beyond = frames > cap
        length = np.where(beyond, cap + 1, frames)
        width = np.where(beyond, 0, w)
        height = np.where(beyond, 0, h)
        order = np.lexsort((height, width, length)).astype(np.int64)
        return cls(
            order,
            length[order],
            width[order],
            height[order],
            np.rint(scale / frames[order]),
            legal,
            scale,
        )


@dataclass
class TimeProgramme:
    """One aspect class's programme over its keys (:func:`time_programme`).

    Attributes:
        prog: The chain programme: candidate ``k`` is frame count ``frames[k]``, bin ``t`` the
            class's clips from the ``t``-th key to the next.
        frames: The frame count of each candidate.
        keys: ``(S, 3)`` the first key of each position, ascending.
        counts: Clips per position.
        inverse: Their fixed-point ``sum(scale / F)`` per position.
        scale: The fixed point.
    """

    prog: ChainProgramme
    frames: tuple[int, ...]
    keys: IntArray
    counts: IntArray
    inverse: FloatArray
    scale: float

    def groups(self, chain: Chain) -> list[tuple[int, tuple[int, int, int], int, int]]:
        """``(frames, start, first bin, end bin)`` of each bucket of ``chain``: its frame count,
        its threshold (NOTE [ thresholds in time ]) and the keys it holds."""
        out = []
        begin = 0
        for k, end in chain:
            f = self.frames[k]
            if begin == 0:
                start = (f, 1, 1)
            else:
                v0, v1 = int(self.keys[begin - 1, 0]), int(self.keys[begin, 0])
                if v1 > v0:  # between two lengths: the least length that reaches f
                    start = (max(v0 + 1, f), 1, 1)
                else:  # within one length: from this size on
                    start = (v1, int(self.keys[begin, 1]), int(self.keys[begin, 2]))
            out.append((f, start, begin, end))
            begin = end
        return out

    def trim(self, chain: Chain) -> int:
        """The exact fixed-point trim of ``chain``: ``sum(scale - f * rint(scale / F))``."""
        total = 0
        for f, _, a, b in self.groups(chain):
            n = int(self.counts[a:b].sum())
            total += round(n * self.scale) - f * round(float(self.inverse[a:b].sum()))
        return total


def time_programme(
    axis: TimeAxis,
    members: BoolArray,
    batch: dict[int, int],
    drop: bool,
    keep_all: bool,
) -> TimeProgramme:
    """The programme of one aspect class: ``members`` (in key order) says which clips are its,
    ``batch[f]`` is the global batch size of its bucket of ``f`` frames for each legal ``f``."""
    idx = np.flatnonzero(members)
    length, width, height = axis.length[idx], axis.width[idx], axis.height[idx]
    # positions: every length, split by size into at most SIZE_RUNS runs
    fresh = np.ones(idx.size, dtype=bool)
    fresh[1:] = np.diff(length) != 0
    run = np.cumsum(fresh) - 1
    run_first = np.flatnonzero(fresh)
    run_size = np.diff(np.append(run_first, idx.size))
    before = np.arange(idx.size) - run_first[run]  # clips of its length before it
    part = before * SIZE_RUNS // run_size[run]
    same_size = np.zeros(idx.size, dtype=bool)
    same_size[1:] = (np.diff(width) == 0) & (np.diff(height) == 0)
    split = np.zeros(idx.size, dtype=bool)
    split[1:] = (part[1:] != part[:-1]) & ~same_size[1:] & ~fresh[1:]
    first_of = np.flatnonzero(fresh | split)
    keys = np.stack((length[first_of], width[first_of], height[first_of]), axis=1)
    n = np.diff(np.append(first_of, idx.size)).astype(np.int64)
    inv = np.add.reduceat(axis.weight[idx], first_of)
    values = keys[:, 0]
    frames = tuple(f for f in axis.legal if f <= int(values[-1]))
    fa = np.array(frames, dtype=np.int64)
    first = np.searchsorted(values, fa, side="left").astype(np.int64)
    # a clip of length v >= f keeps f of its frames: it loses 1 - f / F, n - f * sum(1 / F)
    reach = values[None, :] >= fa[:, None]
    loss = np.where(reach, n[None, :] - fa[:, None] * (inv[None, :] / axis.scale), 0.0)
    np.maximum(loss, 0.0, out=loss)
    prog = ChainProgramme(
        loss,
        n,
        np.array([batch[f] for f in frames], dtype=np.int64),
        drop,
        keep_all,
        np.full(len(frames), values.size - 1, dtype=np.int64),
        first + 1,
        first_start=first,
    )
    return TimeProgramme(prog, frames, keys, n, inv, axis.scale)
