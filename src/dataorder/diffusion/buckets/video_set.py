"""A fitted video bucket set: bands of clip lengths, each with aspect classes and their frame
counts.

What a :class:`~dataorder.diffusion.calculators.video.VideoBucketCalculator` over a fitted set runs
(``bucket_set=``), and all that its ``config()`` records so ``from_config`` and a manifest
rebuild it without the data. Fitting one is :mod:`dataorder.diffusion.fit.video`.

**The set.** A clip's *key* is ``(F, W, H)``: its length, then its size, compared
lexicographically (NOTE [ thresholds in time ] in :mod:`dataorder.diffusion.fit.video_time`).

* *Bands* ``b = 0 .. B-1`` of keys, split by ``B - 1`` increasing keys (:attr:`FittedVideoSet.
  band_starts`); a band's frame counts are all below the next band's.
* In each band (a :class:`VideoBand`), *classes* in ascending aspect ratio split by exact aspect
  thresholds ``(p, q)``, as an image fit's (:class:`~dataorder.diffusion.buckets.fitted_rule.
  FittedBucketRule`).
* Each class (a :class:`VideoClass`) has its shape ``(w, h)`` and its frame counts ``f_0 < f_1
  < ...`` (legal counts of the calculator's frame rule), each with the least key it takes,
  ``s_j = (T_j, W_j, H_j)``, ``T_j >= f_j``, strictly increasing.

The buckets are every class's ``(f_j, w, h)``; ids are frame-major as in a generated set (every
bucket of the smallest frame count first, in ascending aspect ratio).

**A clip ``(W, H, F)``.**

1. *The calculator's own rules first.* A clip its generated buckets call too short or too small
   (:data:`~dataorder.diffusion.buckets.video_assign.TOO_SHORT`, :data:`~dataorder.diffusion.
   buckets.video_assign.TOO_SMALL`) is so here too: a fitted set keeps those ids and counts.
2. *Band:* the last whose start its key reaches (band 0 otherwise).
3. *Class:* the number of the band's aspect thresholds it is above (``W * q > H * p``).
4. *Frame count:* its class's last ``f_j`` with ``s_j <= (F, W, H)``: trimmed, never stretched.
   A key below ``s_0`` goes to the band below, from step 3 (that is how a class hands its
   shortest clips down, so its total is whole batches); in band 0 it is too short.
5. *Upscale:* if the class's shape needs a cover-resize scale above ``max_upscale`` the clip is
   too small. On the clips a set was fitted to, steps 4 and 5 never say so (the fit only puts a
   clip where it fits), so the counts the fit planned are the counts the calculator makes.

Example:
    >>> portrait = VideoClass((480, 832), (17, 81), ((17, 1, 1), (90, 1080, 1)))
    >>> long = VideoBand([portrait, VideoClass((832, 480), (81,), ((81, 1, 1),))], [(1, 1)])
    >>> short = VideoBand([VideoClass((624, 624), (5,), ((5, 1, 1),))], [])
    >>> rule = FittedVideoSet([short, long], [(17, 1, 1)])
    >>> rule.frame_counts, rule.buckets()
    ((5, 17, 81), [(5, 624, 624), (17, 480, 832), (81, 480, 832), (81, 832, 480)])
    >>> clips = [(720, 1280, 90), (1080, 1920, 90), (1280, 720, 80), (1280, 720, 9), (9, 9, 3)]
    >>> [rule.choose(w, h, f) for w, h, f in clips]  # 80 frames, landscape: to the band below
    [1, 2, 0, 0, -1]
    >>> FittedVideoSet.from_config(rule.config()) == rule
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.diffusion.buckets.fitted_rule import ThresholdAssigner
from dataorder.diffusion.buckets.points import check_pairs, check_points
from dataorder.diffusion.buckets.video_assign import TOO_SHORT, TOO_SMALL
from dataorder.diffusion.buckets.video_frames import MAX_VIDEO_SIZE

__all__ = [
    "VIDEO_FIT_VERSION",
    "FittedVideoAssigner",
    "FittedVideoSet",
    "VideoBand",
    "VideoClass",
    "at_least",
]

#: Bumped whenever the meaning of a fitted video configuration changes.
VIDEO_FIT_VERSION = 1

IntArray = npt.NDArray[np.int64]

_CLASS_KEYS = ("resolution", "frames", "starts")
_CHUNK = 1 << 15


@dataclass(frozen=True)
class VideoClass:
    """One aspect class of a fitted set (module docstring).

    Attributes:
        resolution: Its shape ``(w, h)``.
        frames: Its frame counts, strictly increasing.
        starts: The least clip key ``(F, W, H)`` each takes, strictly increasing
            lexicographically, ``starts[j][0] >= frames[j]``.
    """

    resolution: tuple[int, int]
    frames: tuple[int, ...]
    starts: tuple[tuple[int, int, int], ...]

    def config(self) -> dict[str, Any]:
        """The class as plain JSON values."""
        return {
            "resolution": list(self.resolution),
            "frames": list(self.frames),
            "starts": [list(t) for t in self.starts],
        }


def at_least(
    key: tuple[IntArray, IntArray, IntArray], start: tuple[int, int, int]
) -> npt.NDArray[np.bool_]:
    """Whether each clip's key ``(F, W, H)`` is at least ``start``, lexicographically.

    How a clip is compared with a band's start (:class:`FittedVideoSet`'s ``band_starts``), by
    the assigner and by the fit, which must agree.

    Args:
        key: Three int arrays of one shape: the clips' frame counts, widths and heights.
        start: A key ``(F, W, H)``.

    Returns:
        A bool array of the arrays' shape.

    Example:
        >>> f, w, h = np.array([17, 17, 17, 33]), np.array([832, 640, 832, 1]), np.full(4, 480)
        >>> at_least((f, w, h - [0, 0, 1, 0]), (17, 832, 480)).tolist()
        [True, False, False, True]
    """
    f, w, h = key
    t, ws, hs = start
    out: npt.NDArray[np.bool_] = (f > t) | ((f == t) & ((w > ws) | ((w == ws) & (h >= hs))))
    return out


def _ints(name: str, values: object) -> tuple[int, ...]:
    # a 1-d int array is as good as a list (what the fit, or a caller, may hold)
    if (
        isinstance(values, str | bytes)
        or not isinstance(values, Sequence | np.ndarray)
        or (isinstance(values, np.ndarray) and values.ndim != 1)
    ):
        fail(name, "a sequence of ints", values, TypeError)
    if len(values) == 0:
        fail(name, "a non-empty sequence", values)
    out = tuple(
        check_int(f"{name}[{i}]", v, min_value=1, max_value=MAX_VIDEO_SIZE)
        for i, v in enumerate(values)
    )
    for i in range(1, len(out)):
        if out[i] <= out[i - 1]:
            fail(name, "strictly increasing", values)
    return out


def _class(name: str, item: object) -> VideoClass:
    """A :class:`VideoClass`, or its :meth:`~VideoClass.config`, checked."""
    if isinstance(item, Mapping):
        if set(item) != set(_CLASS_KEYS):
            fail(name, f"a mapping with exactly the keys {list(_CLASS_KEYS)}", dict(item))
        resolution, frames, starts = item["resolution"], item["frames"], item["starts"]
    elif isinstance(item, VideoClass):
        resolution, frames, starts = item.resolution, item.frames, item.starts
    else:
        fail(name, "a VideoClass or a mapping", item, TypeError)
    (res,) = check_points(f"{name}.resolution", [resolution], None, None)
    f = _ints(f"{name}.frames", frames)
    if isinstance(starts, str | bytes) or not isinstance(starts, Sequence):
        fail(f"{name}.starts", "a sequence of (F, W, H) keys", starts, TypeError)
    if len(starts) != len(f):
        fail(f"{name}.starts", f"{len(f)} keys (F, W, H), one per frame count", starts)
    t: list[tuple[int, int, int]] = []
    for j, key in enumerate(starts):
        fj, wj, hj = _key(f"{name}.starts[{j}]", key)
        if fj < f[j]:
            what = f"a key (F, W, H) with F >= its frame count {f[j]} (clips are never stretched)"
            fail(f"{name}.starts[{j}]", what, tuple(key))
        if t and (fj, wj, hj) <= t[-1]:
            fail(f"{name}.starts", "strictly increasing (F, W, H) keys", starts)
        t.append((fj, wj, hj))
    return VideoClass(res, f, tuple(t))


def _key(name: str, key: object) -> tuple[int, int, int]:
    if isinstance(key, str | bytes) or not isinstance(key, Sequence) or len(key) != 3:
        fail(name, "a key (F, W, H) of three ints", key, TypeError)
    a, b, c = (
        check_int(f"{name}[{i}]", v, min_value=1, max_value=MAX_VIDEO_SIZE)
        for i, v in enumerate(key)
    )
    return a, b, c


class VideoBand:
    """One band of a fitted set: aspect classes and the thresholds between them.

    Args:
        classes: The :class:`VideoClass` es (or their configs), strictly ascending in the aspect
            ratio of their shapes.
        thresholds: ``K - 1`` exact ``(p, q)``; threshold ``k`` in ``[w_k / h_k, w_{k+1} /
            h_{k+1})``.
        name: How errors name it (``"bands[0]"``).

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If a class is invalid, the classes are not ascending, or a threshold is
            outside its bracket.
    """

    def __init__(
        self,
        classes: Sequence[VideoClass | Mapping[str, Any]],
        thresholds: Sequence[tuple[int, int]],
        name: str = "band",
    ) -> None:
        if isinstance(classes, str | bytes | Mapping) or not isinstance(classes, Sequence):
            fail(f"{name}.classes", "a sequence of VideoClass", classes, TypeError)
        if not classes:
            fail(f"{name}.classes", "a non-empty sequence", classes)
        checked = [_class(f"{name}.classes[{i}]", c) for i, c in enumerate(classes)]
        res = [c.resolution for c in checked]
        for k in range(1, len(res)):
            if res[k][0] * res[k - 1][1] <= res[k - 1][0] * res[k][1]:
                fail(f"{name}.classes", "strictly ascending in aspect ratio w / h", res)
        pairs = check_pairs(f"{name}.thresholds", thresholds)
        if len(pairs) != len(res) - 1:
            what = f"{len(res) - 1} pairs, one between each two classes"
            fail(f"{name}.thresholds", what, thresholds)
        for k, (p, q) in enumerate(pairs):
            (w1, h1), (w2, h2) = res[k], res[k + 1]
            if not (w1 * q <= h1 * p and p * h2 < q * w2):
                fail(
                    f"{name}.thresholds[{k}]",
                    f"a fraction in [{w1}/{h1}, {w2}/{h2}), between classes {k} and {k + 1}",
                    (p, q),
                )
        self.classes = tuple(checked)
        self.assigner = ThresholdAssigner(pairs)

    @property
    def thresholds(self) -> tuple[tuple[int, int], ...]:
        """The ``K - 1`` aspect thresholds ``(p, q)``."""
        return self.assigner.pairs

    @property
    def frame_counts(self) -> tuple[int, ...]:
        """Every frame count of some class, ascending."""
        return tuple(sorted({f for c in self.classes for f in c.frames}))

    def config(self) -> dict[str, Any]:
        """``{"classes", "thresholds"}`` as plain JSON values."""
        return {
            "classes": [c.config() for c in self.classes],
            "thresholds": [[p, q] for p, q in self.thresholds],
        }


class FittedVideoSet:
    """A fitted video bucket set (module docstring), given to a calculator as ``bucket_set=``.

    Args:
        bands: The :class:`VideoBand` s (or their configs), ascending in clip length: every
            frame count of a band below every frame count of the next.
        band_starts: ``B - 1`` keys ``(F, W, H)``, strictly increasing: band ``b`` holds the
            keys from ``band_starts[b - 1]`` on (and those the bands above hand down).
        fit: What the set was fitted to (``VideoFitResult.summary``), recorded by
            :meth:`config`; None for a set made by hand. It must survive ``json.dumps``.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If a band or class is invalid, the bands are not ascending, or ``fit`` is
            not JSON-serialisable.
    """

    def __init__(
        self,
        bands: Sequence[VideoBand | Mapping[str, Any]],
        band_starts: Sequence[Sequence[int]],
        fit: Any = None,
    ) -> None:
        if isinstance(bands, str | bytes | Mapping) or not isinstance(bands, Sequence):
            fail("bands", "a sequence of VideoBand", bands, TypeError)
        if not bands:
            fail("bands", "a non-empty sequence", bands)
        checked = []
        for i, band in enumerate(bands):
            if isinstance(band, VideoBand):
                checked.append(band)
            elif isinstance(band, Mapping):
                if sorted(band) != ["classes", "thresholds"]:
                    fail(f"bands[{i}]", "a mapping with exactly the keys classes, thresholds", band)
                checked.append(VideoBand(band["classes"], band["thresholds"], f"bands[{i}]"))
            else:
                fail(f"bands[{i}]", "a VideoBand or a mapping", band, TypeError)
        given: object = band_starts
        if isinstance(given, str | bytes) or not isinstance(given, Sequence):
            fail("band_starts", "a sequence of (F, W, H) keys", band_starts, TypeError)
        if len(band_starts) != len(checked) - 1:
            fail("band_starts", f"{len(checked) - 1} keys, one between each two bands", band_starts)
        starts = [_key(f"band_starts[{i}]", k) for i, k in enumerate(band_starts)]
        for i in range(1, len(checked)):
            if i > 1 and starts[i - 1] <= starts[i - 2]:
                fail("band_starts", "strictly increasing (F, W, H) keys", band_starts)
            low, high = checked[i - 1].frame_counts, checked[i].frame_counts
            if max(low) >= min(high):
                fail(
                    f"bands[{i}]",
                    f"a band whose frame counts all exceed band {i - 1}'s {list(low)}",
                    list(high),
                )
        if fit is not None and not isinstance(fit, Mapping):
            fail("fit", "a mapping or None", fit, TypeError)
        try:
            recorded = None if fit is None else json.loads(json.dumps(dict(fit)))
        except (TypeError, ValueError):
            fail("fit", "a JSON-serialisable mapping", fit)
        self._bands = tuple(checked)
        self._starts = tuple(starts)
        self._fit: dict[str, Any] | None = recorded
        self._frames = tuple(f for band in checked for f in band.frame_counts)
        # bucket ids: frame-major, then ascending aspect ratio (a frame count is in one band)
        self._ids: dict[tuple[int, int, int], int] = {}
        for b, band in enumerate(checked):
            for f in band.frame_counts:
                for k, c in enumerate(band.classes):
                    if f in c.frames:
                        self._ids[(b, k, f)] = len(self._ids)

    @property
    def bands(self) -> tuple[VideoBand, ...]:
        """The bands, ascending in clip length."""
        return self._bands

    @property
    def band_starts(self) -> tuple[tuple[int, int, int], ...]:
        """The least key of each band but the first."""
        return self._starts

    @property
    def frame_counts(self) -> tuple[int, ...]:
        """Every frame count of some class, ascending."""
        return self._frames

    @property
    def fit(self) -> dict[str, Any] | None:
        """What the set was fitted to (a copy), or None."""
        return None if self._fit is None else json.loads(json.dumps(self._fit))

    def buckets(self) -> list[tuple[int, int, int]]:
        """``(frames, w, h)`` of every bucket, by id."""
        out = [(0, 0, 0)] * len(self._ids)
        for (b, k, f), i in self._ids.items():
            w, h = self._bands[b].classes[k].resolution
            out[i] = (f, w, h)
        return out

    def bucket_id(self, band: int, k: int, frames: int) -> int:
        """The id of band ``band``'s class ``k``'s bucket of ``frames`` frames."""
        return self._ids[(band, k, frames)]

    def choose(self, w: int, h: int, f: int, u: Fraction | None = None) -> int:
        """Steps 2 to 5 of the rule (module docstring) for one clip, in exact integers: a bucket
        id, :data:`TOO_SHORT` or :data:`TOO_SMALL` (``u``: the upscale limit)."""
        key = (f, w, h)
        b = sum(s <= key for s in self._starts)
        while True:
            band = self._bands[b]
            k = band.assigner.choose(w, h)
            c = band.classes[k]
            j = sum(t <= key for t in c.starts) - 1
            if j >= 0:
                break
            if b == 0:
                return TOO_SHORT
            b -= 1  # below its class's first start: the band below takes it
        bw, bh = c.resolution
        if u is not None and (
            bw * u.denominator > u.numerator * w or bh * u.denominator > u.numerator * h
        ):
            return TOO_SMALL
        return self._ids[(b, k, c.frames[j])]

    def config(self) -> dict[str, Any]:
        """``{"version", "bands", "band_starts", "fit"}``, what :meth:`from_config` reads."""
        return {
            "version": VIDEO_FIT_VERSION,
            "bands": [band.config() for band in self._bands],
            "band_starts": [list(s) for s in self._starts],
            "fit": self.fit,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> FittedVideoSet:
        """Rebuild a set from :meth:`config`.

        Raises:
            TypeError: If ``config`` is not a mapping.
            ValueError: If the keys are not ``version``, ``bands``, ``band_starts`` and
                ``fit``, the version differs, or the set is invalid.
        """
        if not isinstance(config, Mapping):
            fail("config", "a mapping", config, TypeError)
        keys = ["band_starts", "bands", "fit", "version"]
        if sorted(config) != keys:
            fail("config", f"a mapping with exactly the keys {keys}", dict(config))
        if config["version"] != VIDEO_FIT_VERSION:
            fail("config['version']", f"{VIDEO_FIT_VERSION}", config["version"])
        return cls(config["bands"], config["band_starts"], config["fit"])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FittedVideoSet):
            return NotImplemented
        return self.config() == other.config()

    def __hash__(self) -> int:
        return hash(json.dumps(self.config(), sort_keys=True))

    def __repr__(self) -> str:
        classes = sum(len(b.classes) for b in self._bands)
        return (
            f"FittedVideoSet({len(self._bands)} bands, {classes} classes, "
            f"frames={list(self._frames)}, {len(self._ids)} buckets)"
        )


class FittedVideoAssigner:
    """Steps 2 to 5 of the rule over arrays (equal to :meth:`FittedVideoSet.choose` per clip).

    The band is a few lexicographic comparisons; the class each band's threshold table lookup
    (exact near a threshold); the frame count a ``searchsorted`` over every class's starts laid
    end to end by ``g * 2**31 + T`` (``g`` the class over all bands; ``T`` below ``2**31``), with
    the clips whose length equals a start's compared on ``(W, H)`` as well; the upscale limit
    two comparisons in int64.

    Args:
        rule: The set.
        u: The upscale limit (None: no limit).
    """

    def __init__(self, rule: FittedVideoSet, u: Fraction | None) -> None:
        self._rule = rule
        span = MAX_VIDEO_SIZE + 1
        primary: list[int] = []
        sizes: list[int] = []
        first: list[int] = []
        ids: list[int] = []
        offset: list[int] = []
        res: list[tuple[int, int]] = []
        g = 0
        for b, band in enumerate(rule.bands):
            offset.append(g)
            for k, c in enumerate(band.classes):
                first.append(len(primary))
                primary += [g * span + t for t, _, _ in c.starts]
                sizes += [w * span + h for _, w, h in c.starts]
                ids += [rule.bucket_id(b, k, f) for f in c.frames]
                res.append(c.resolution)
                g += 1
        self._span = span
        self._offset = np.array(offset, dtype=np.int64)
        self._primary = np.array(primary, dtype=np.int64)
        self._sizes = np.array(sizes, dtype=np.int64)
        self._first = np.array(first, dtype=np.int64)
        self._ids = np.array(ids, dtype=np.int64)
        # at most this many starts share one class and length
        _, same = np.unique(self._primary, return_counts=True)
        self._ties = int(same.max())
        shapes = np.array(res, dtype=np.int64).reshape(-1, 2)
        if u is None:
            self._wmin = np.ones(len(shapes), dtype=np.int64)
            self._hmin = np.ones(len(shapes), dtype=np.int64)
        else:  # bw <= u * W  <=>  W >= ceil(bw / u)
            self._wmin = -(-(shapes[:, 0] * u.denominator) // u.numerator)
            self._hmin = -(-(shapes[:, 1] * u.denominator) // u.numerator)

    def _slots(self, g: IntArray, w: IntArray, h: IntArray, f: IntArray) -> IntArray:
        """Index of the last start of class ``g`` at or below each key (below its class's first
        start: not a start of its class)."""
        key = g * self._span + f
        # starts below the clip's length, then those of its length at or below its size
        slot = np.searchsorted(self._primary, key, side="left")
        size = w * self._span + h
        for _ in range(self._ties):
            at = np.minimum(slot, self._primary.size - 1)
            inside = slot < self._primary.size
            slot = slot + (inside & (self._primary[at] == key) & (self._sizes[at] <= size))
        out: IntArray = slot - 1
        return out

    def assign(self, w: IntArray, h: IntArray, f: IntArray) -> IntArray:
        """Ids of flat arrays of valid sizes (checked by the caller), in chunks."""
        out = np.empty(w.size, dtype=np.int64)
        for s in range(0, w.size, _CHUNK):
            e = min(w.size, s + _CHUNK)
            wc, hc, fc = w[s:e], h[s:e], f[s:e]
            band = np.zeros(wc.size, dtype=np.int64)
            for start in self._rule.band_starts:
                band += at_least((fc, wc, hc), start)
            g = np.empty(wc.size, dtype=np.int64)
            slot = np.empty(wc.size, dtype=np.int64)
            for b in range(len(self._rule.bands) - 1, -1, -1):  # a clip may fall to the band below
                rows = np.flatnonzero(band == b)
                if rows.size == 0:
                    continue
                item = self._rule.bands[b]
                gb = self._offset[b] + item.assigner.assign(wc[rows], hc[rows])
                sb = self._slots(gb, wc[rows], hc[rows], fc[rows])
                g[rows], slot[rows] = gb, sb
                if b > 0:
                    band[rows[sb < self._first[gb]]] = b - 1
            short = slot < self._first[g]
            ids = self._ids[np.maximum(slot, 0)]
            small = (wc < self._wmin[g]) | (hc < self._hmin[g])
            out[s:e] = np.where(short, TOO_SHORT, np.where(small, TOO_SMALL, ids))
        return out
