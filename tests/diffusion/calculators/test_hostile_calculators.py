"""Hostile bucket calculators: two families of cases (budgets up to the caps, fits of absurd
lattices), as tables, each case under a hang guard.

Family (a), ``LIMIT_CASES``: custom image and video calculators at the largest budgets they
accept (2**40 pixels a frame, 2**62 tokens, quantization 2**20), with upscale limits that are
floats (1.01 is a fraction over 2**52), huge ints and huge rationals. On clips at every bucket's
upscale border, at and around every threshold between neighbouring buckets, and at random sizes
up to 2**31 - 1, the vectorised ``assign`` must equal the one-clip reference
(``get_bucket_id_for_video``, ``get_bucket_for_image``), and no clip may go to a bucket that
upscales it past ``max_upscale`` (for images with ``no_upscale``: past 1 when a bucket fits).

Family (b), ``QUANTIZATION_CASES``: quantizations above 256 and at the cap (2**20), with and
without ``max_pixels``, for the image constructor, ``from_preset``, ``fit_to_data`` and the video
constructor. Each call must, within ``HANG_SECONDS`` (a hang detector, not a speed test), either
work (a calculator whose buckets are on the lattice and within the budget, and whose ``assign``
answers) or be refused with a ``TypeError``/``ValueError`` whose message names the arguments
responsible. A verdict of "either" accepts both, as long as the refusal names its argument.

``test_the_judges_can_fail`` shows that every verdict fires on a case that deserves it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import signal
import zlib
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import pytest

from dataorder import MultiTierBucketCalculator, VideoBucketCalculator
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE
from tests.helpers.hang import Hang, hang_guard

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="the hang guard needs signal.setitimer (POSIX)"
)

#: Seconds a case may take before it counts as a hang (generous: the machine may be busy).
HANG_SECONDS = 20.0
TOP = MAX_IMAGE_SIDE  # 2**31 - 1, the largest side of an image or a clip


# -- family (a): the vectorised rule against the reference, at the largest budgets ---------------
Calculator = MultiTierBucketCalculator | VideoBucketCalculator

LIMIT_CASES: dict[str, Callable[[], Calculator]] = {
    # video: a reported example, then budgets up to the caps with every kind of limit
    "video 1.01 at 1080p (reported)": lambda: VideoBucketCalculator(
        100_000, max_frames=5, max_pixels=1920 * 1080, max_upscale=1.01
    ),
    "video float 1.01 at 2**40": lambda: _video(1.01),
    "video float 1 + 2**-50 at 2**40": lambda: _video(1 + 2**-50),
    "video float 1.5 at 2**40": lambda: _video(1.5),
    "video float 1e300": lambda: _video(1e300),
    "video int 10**20": lambda: _video(10**20),
    "video int 2**63": lambda: _video(2**63),
    "video int 1 (no upscale at all)": lambda: _video(1),
    "video rational (10**30 + 1) / 10**30": lambda: _video(Fraction(10**30 + 1, 10**30)),
    "video rational (10**40 + 7) / (10**40 - 3)": lambda: _video(Fraction(10**40 + 7, 10**40 - 3)),
    "video rational string 7/4": lambda: _video("7/4"),
    "video no limit": lambda: _video(None),
    "video 2**62 tokens, quantization 2**20": lambda: VideoBucketCalculator(
        2**62, frame_counts=[1, 5], max_pixels=2**40, quantization=2**20, max_upscale=1.01
    ),
    "video 10000:1 at 2**40, float limit": lambda: _video(
        1.01, aspect_ratios=[10_000, 1.0, (16, 9)]
    ),
    "video many tiers, float limit": lambda: VideoBucketCalculator(
        30_000, max_frames=81, quantization=16, max_upscale=1.1
    ),
    "video many tiers at 2**36 px, huge rational": lambda: VideoBucketCalculator(
        2**40, max_frames=33, max_pixels=2**36, max_upscale=Fraction(3 * 10**30 + 1, 2 * 10**30)
    ),
    # images: the largest budgets and finest lattices, with and without no_upscale
    "image q=1 at 2**40": lambda: MultiTierBucketCalculator(1, 2**40),
    "image q=1 at 2**40, no_upscale": lambda: MultiTierBucketCalculator(1, 2**40, no_upscale=True),
    "image q=2**20 at 2**40": lambda: MultiTierBucketCalculator(2**20, 2**40),
    "image 10000:1 on q=1 at 2**40, no_upscale": lambda: MultiTierBucketCalculator(
        1, 2**40, aspect_ratios=[10_000, 1.0], no_upscale=True
    ),
    "image not a staircase at 2**40, no_upscale": lambda: MultiTierBucketCalculator(
        16, 2**40, aspect_ratios=[(7, 1), (15, 2), (13, 2)], no_upscale=True
    ),
    "image nemo at 2**40": lambda: MultiTierBucketCalculator(64, 2**40, compat="nemo"),
    "image fitted on q=2**14 at 2**40": lambda: MultiTierBucketCalculator.fit_to_data(
        [100, 300, 3000, 7, 2**31 - 1],
        [100, 100, 1000, 3000, 5],
        global_batch_size=1,
        max_pixels=2**40,
        quantization=2**14,
        max_waste=1.0,
    ),
}


def _video(limit: object, **kw: Any) -> VideoBucketCalculator:
    """Two tiers at the largest frame (2**40 pixels, 2**22 tokens a frame) on a 16-px lattice."""
    return VideoBucketCalculator(
        2**62, frame_counts=[1, 9], max_pixels=2**40, max_upscale=limit, **kw
    )  # type: ignore[arg-type]


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _random_sides(rng: np.random.Generator, n: int) -> list[int]:
    """Sides log-uniform in [1, 2**31 - 1]."""
    return [min(TOP, max(1, int(2 ** rng.uniform(0, 31)))) for _ in range(n)]


def _near(value: int, spread: int = 1) -> list[int]:
    return [min(TOP, max(1, value + d)) for d in range(-spread, spread + 1)]


def _video_clips(calc: VideoBucketCalculator, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Each bucket at its upscale border on either side, at its own aspect and its neighbours';
    and random clips of every size, some of them far longer than any bucket."""
    u = calc.max_upscale or Fraction(1)
    clips: set[tuple[int, ...]] = set()
    buckets = calc.get_all_buckets()
    by_frames: dict[int, list[tuple[int, int]]] = {}
    for b in buckets:
        by_frames.setdefault(b["frames"], []).append(b["resolution"])
    for f, res in by_frames.items():
        for i, (bw, bh) in enumerate(res):
            w0, h0 = math.ceil(bw / u), math.ceil(bh / u)  # exact: u is a Fraction
            for nw, nh in res[max(0, i - 1) : i + 2]:
                for w in _near(w0):
                    clips.add((w, min(TOP, max(1, w * nh // nw)), f))
                for h in _near(h0):
                    clips.add((min(TOP, max(1, h * nw // nh)), h, f))
    n = 200
    frames = [*calc.frame_counts, 2, 10**6, TOP]
    for w, h in zip(_random_sides(rng, n), _random_sides(rng, n), strict=True):
        clips.add((w, h, int(rng.choice(frames))))
    return sorted(clips)


def _image_sizes(
    calc: MultiTierBucketCalculator, rng: np.random.Generator
) -> list[tuple[int, ...]]:
    """Each bucket's own size and one pixel less (the no-upscale border), the log-midpoint of each
    pair of neighbours (exact ties and their neighbours), and random sizes."""
    res = [tuple(r) for r in calc.resolutions.tolist()]
    sizes: set[tuple[int, ...]] = set()
    for bw, bh in res:
        for w in _near(bw):
            for h in _near(bh):
                sizes.add((w, h))
    for (w1, h1), (w2, h2) in itertools.pairwise(res):
        for t in (1, 2, 3):
            root = math.isqrt(w1 * w2 * h1 * h2)
            w, h = t * root, t * h1 * h2
            scale = max(1, -(-max(w, h) // TOP))  # keep both sides legal, the ratio about the same
            for d in (-1, 0, 1):
                sizes.add((max(1, w // scale + d), max(1, h // scale)))
    n = 300
    sizes.update(zip(_random_sides(rng, n), _random_sides(rng, n), strict=True))
    return sorted(sizes)


def judge_limits(name: str, calc: Any, clips: list[tuple[int, ...]]) -> None:
    """``pytest.fail`` unless the vectorised answers equal the reference and respect the limit."""
    video = len(clips[0]) == 3
    columns = [np.array(c, dtype=np.int64) for c in zip(*clips, strict=True)]
    got = calc.assign(*columns).tolist()
    if video:
        want = [calc.get_bucket_id_for_video(*c) for c in clips]
    else:
        want = [calc.get_bucket_for_image(*c)["id"] for c in clips]
    bad = [(c, g, r) for c, g, r in zip(clips, got, want, strict=True) if g != r]
    if bad:
        c, g, r = bad[0]
        pytest.fail(f"{name}: assign{c} = {g} but the reference says {r} ({len(bad)} of "
                    f"{len(clips)} disagree)")  # fmt: skip
    res = calc.resolutions.tolist()
    if video:
        u = calc.max_upscale
        for (w, h, f), k in zip(clips, got, strict=True):
            if k < 0:
                continue
            bw, bh = res[k]
            frames = calc.get_bucket_by_id(k)["frames"]
            if (u is not None and (bw > u * w or bh > u * h)) or frames > f:
                pytest.fail(f"{name}: clip {w}x{h}x{f} goes to {bw}x{bh}x{frames}, past "
                            f"max_upscale={u} or stretched in time")  # fmt: skip
    elif calc.no_upscale:
        for (w, h), k in zip(clips, got, strict=True):
            bw, bh = res[k]
            fits = any(a <= w and b <= h for a, b in res)
            if fits and (bw > w or bh > h):
                pytest.fail(f"{name}: image {w}x{h} is upscaled to {bw}x{bh} although a bucket "
                            "fits inside it")  # fmt: skip


@pytest.mark.parametrize("name", sorted(LIMIT_CASES))
def test_assign_equals_the_reference_at_the_largest_budgets(name: str) -> None:
    try:
        with hang_guard(HANG_SECONDS):
            calc = LIMIT_CASES[name]()
            rng = _rng(name)
            if isinstance(calc, VideoBucketCalculator):
                clips = _video_clips(calc, rng)
            else:
                clips = _image_sizes(calc, rng)
            judge_limits(name, calc, clips)
    except Hang:
        pytest.fail(f"{name} hangs: no answer within {HANG_SECONDS} s")


# -- family (b): quantizations a budget can barely hold, or cannot ------------------------------
Expect = Literal["accept", "reject", "either"]


@dataclasses.dataclass(frozen=True)
class Case:
    """A call, what it must do, and the argument names a refusal must contain (all of them)."""

    call: Callable[[], Any]
    expect: Expect
    names: tuple[str, ...] = ()


_SIZES = ([100, 200, 300, 50, 640], [100, 100, 100, 300, 480])


def _fit(**kw: Any) -> MultiTierBucketCalculator:
    return MultiTierBucketCalculator.fit_to_data(*_SIZES, global_batch_size=1, max_waste=1.0, **kw)


M = MultiTierBucketCalculator
V = VideoBucketCalculator
QUANTIZATION_CASES: dict[str, Case] = {
    # the image constructor
    "M(256)": Case(lambda: M(256), "accept"),
    "M(257)": Case(lambda: M(257), "reject", ("quantization", "max_pixels")),
    "M(257, compat='nemo')": Case(lambda: M(257, compat="nemo"), "reject", ("quantization",)),
    "M(257, 257**2)": Case(lambda: M(257, 257**2), "accept"),
    "M(257, 257**2 - 1)": Case(lambda: M(257, 257**2 - 1), "reject", ("max_pixels",)),
    "M(1000, 2**40, 10000:1)": Case(lambda: M(1000, 2**40, aspect_ratios=[10_000]), "accept"),
    "M(2**20)": Case(lambda: M(2**20), "reject", ("quantization", "max_pixels")),
    "M(2**20, 2**40)": Case(lambda: M(2**20, 2**40), "accept"),
    "M(2**20, 2**40, nemo)": Case(lambda: M(2**20, 2**40, compat="nemo"), "accept"),
    "M(2**20, 2**40, no_upscale)": Case(lambda: M(2**20, 2**40, no_upscale=True), "accept"),
    "M(2**20 + 1, 2**40)": Case(lambda: M(2**20 + 1, 2**40), "reject", ("quantization",)),
    "M(2**20, 2**40 + 1)": Case(lambda: M(2**20, 2**40 + 1), "reject", ("max_pixels",)),
    # from_preset: its budget is the preset's
    "from_preset('256p', 256)": Case(lambda: M.from_preset("256p", 256), "accept"),
    "from_preset('256p', 257)": Case(
        lambda: M.from_preset("256p", 257), "reject", ("quantization",)
    ),
    "from_preset('1536p', 1536)": Case(lambda: M.from_preset("1536p", 1536), "accept"),
    "from_preset('1536p', 1537)": Case(
        lambda: M.from_preset("1536p", 1537), "reject", ("quantization",)
    ),
    "from_preset('1024p', 2**20)": Case(
        lambda: M.from_preset("1024p", 2**20), "reject", ("quantization",)
    ),
    "from_preset('1024p', 2**20 + 1)": Case(
        lambda: M.from_preset("1024p", 2**20 + 1), "reject", ("quantization",)
    ),
    # fit_to_data: the budget, then the lattice it lists
    "fit(q=257)": Case(lambda: _fit(quantization=257), "reject", ("quantization", "max_pixels")),
    "fit(q=257, max_pixels=4 * 257**2)": Case(
        lambda: _fit(quantization=257, max_pixels=4 * 257**2), "accept"
    ),
    "fit(q=257, candidates, no max_pixels)": Case(
        lambda: _fit(quantization=257, candidates=[[257, 257]]),
        "reject",
        ("quantization", "max_pixels"),
    ),
    "fit(q=300, max_pixels=2**40)": Case(
        lambda: _fit(quantization=300, max_pixels=2**40), "reject", ("quantization",)
    ),
    "fit(q=4096, max_pixels=2**40)": Case(
        lambda: _fit(quantization=4096, max_pixels=2**40), "accept"
    ),
    "fit(q=2**20)": Case(
        lambda: _fit(quantization=2**20), "reject", ("quantization", "max_pixels")
    ),
    "fit(q=2**20, max_pixels=2**40)": Case(
        lambda: _fit(quantization=2**20, max_pixels=2**40), "accept"
    ),
    "fit(q=1, max_pixels=2**31 - 1) (reported)": Case(
        lambda: _fit(quantization=1, max_pixels=2**31 - 1), "reject", ("quantization",)
    ),
    "fit(q=1, max_pixels=2**40)": Case(
        lambda: _fit(quantization=1, max_pixels=2**40), "reject", ("max_pixels", "quantization")
    ),
    # the video constructor: the quantum is a multiple of the latent cell (16 here)
    "V(q=272)": Case(lambda: V(10**6, max_frames=5, quantization=272), "accept"),
    "V(q=272, 256 tokens)": Case(
        lambda: V(256, max_frames=5, quantization=272), "reject", ("max_tokens",)
    ),
    "V(q=257)": Case(lambda: V(10**6, max_frames=5, quantization=257), "reject", ("quantization",)),
    "V(q=2**20, max_pixels=2**40)": Case(
        lambda: V(2**62, frame_counts=[1], max_pixels=2**40, quantization=2**20), "accept"
    ),
    "V(q=2**20, max_pixels=2**40 - 1)": Case(
        lambda: V(2**62, frame_counts=[1], max_pixels=2**40 - 1, quantization=2**20),
        "reject",
        ("max_pixels",),
    ),
    "V(q=2**20, no max_pixels)": Case(
        lambda: V(2**62, frame_counts=[1], quantization=2**20),
        "reject",
        ("max_tokens", "max_pixels"),
    ),
    "V(q=2**20 + 16, max_pixels=2**40)": Case(
        lambda: V(2**62, frame_counts=[1], max_pixels=2**40, quantization=2**20 + 16),
        "reject",
        ("quantization",),
    ),
}


def _probe(result: Any) -> None:
    """What an accepted calculator must do: buckets on its lattice, within its budget, and an
    ``assign`` that answers as its reference does."""
    res = result.resolutions.tolist()
    q = result.quantization
    budget = result.max_pixels or math.inf  # a video calculator's may be None: tokens bind
    if not res:
        raise AssertionError("no bucket")
    for w, h in res:
        if w % q or h % q or w * h > budget:
            raise AssertionError(f"bucket {w}x{h} is off the {q}-lattice or over {budget}")
    sizes = [(640, 480), (TOP, 1), (1, TOP)]
    if isinstance(result, VideoBucketCalculator):
        ids = result.assign(*zip(*sizes, strict=True), [5, 5, 5]).tolist()
        want = [result.get_bucket_id_for_video(w, h, 5) for w, h in sizes]
    else:
        ids = result.assign(*zip(*sizes, strict=True)).tolist()
        want = [result.get_bucket_for_image(w, h)["id"] for w, h in sizes]
    if ids != want:
        raise AssertionError(f"assign gives {ids}, the reference {want}")


def judge_call(name: str, case: Case, seconds: float = HANG_SECONDS) -> None:
    """``pytest.fail`` with the story unless ``case.call`` does what ``case.expect`` says."""
    try:
        with hang_guard(seconds):
            result = case.call()
            if case.expect != "reject":
                _probe(result)
    except Hang:
        pytest.fail(f"{name} hangs: no answer within {seconds} s")
    except (TypeError, ValueError) as err:
        if case.expect == "accept":
            pytest.fail(f"{name} refused a legal call: {type(err).__name__}: {err}")
        missing = [n for n in case.names if not re.search(rf"(?<![\w.]){n}(?!\w)", str(err))]
        if missing or " must be " not in str(err):
            pytest.fail(f"{name}: the refusal does not name {' and '.join(missing)}: {err}")
        return
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # an escape: neither the library's refusal nor a working result
        pytest.fail(f"{name} raised {type(err).__name__}: {err}")
    if case.expect == "reject":
        pytest.fail(f"{name} was accepted; expected a refusal naming {' and '.join(case.names)}")


@pytest.mark.parametrize("name", sorted(QUANTIZATION_CASES))
def test_quantization_works_or_is_refused_by_name(name: str) -> None:
    judge_call(name, QUANTIZATION_CASES[name])


# -- the judges can fail ------------------------------------------------------------------------
class _Wrong:
    """A calculator whose answers are changed by ``edit(clip, answer) -> answer``, in assign or
    in both assign and the reference."""

    def __init__(self, calc: Any, edit: Callable[[tuple[int, ...], int], int], both: bool) -> None:
        self._calc, self._edit, self._both = calc, edit, both

    def __getattr__(self, name: str) -> Any:
        return getattr(self._calc, name)

    def assign(self, *columns: Any) -> np.ndarray:
        got = self._calc.assign(*columns).tolist()
        clips = list(zip(*(c.tolist() for c in columns), strict=True))
        return np.array([self._edit(c, k) for c, k in zip(clips, got, strict=True)])

    def get_bucket_id_for_video(self, *clip: int) -> int:
        k = self._calc.get_bucket_id_for_video(*clip)
        return self._edit(clip, k) if self._both else k

    def get_bucket_for_image(self, *size: int) -> dict[str, Any]:
        b = self._calc.get_bucket_for_image(*size)
        return self._calc.get_bucket_by_id(self._edit(size, b["id"]) if self._both else b["id"])


def test_the_judges_can_fail() -> None:
    """Each verdict fires on a case that deserves it."""
    video = VideoBucketCalculator(4096, frame_counts=[1, 5], max_upscale=1.01)
    clips = _video_clips(video, _rng("judge"))
    largest = int(np.argmax(video.resolutions.prod(axis=1)))
    image = MultiTierBucketCalculator(64, 512**2, no_upscale=True)
    sizes = _image_sizes(image, _rng("judge"))
    widest = int(np.argmax(image.resolutions[:, 0]))
    verdicts: list[tuple[Callable[[], None], str]] = [
        # family (a): a vectorised answer off by one; an upscale past the limit that the
        # reference shares (as a wrong limit would give both); an image upscaled needlessly
        (lambda: judge_limits("x", _Wrong(video, lambda c, k: k + 1 if c == clips[-1] else k,
                                          both=False), clips), "the reference says"),
        (lambda: judge_limits("x", _Wrong(video, lambda c, k: largest, both=True), clips),
         "past max_upscale=4548635623644201/4503599627370496"),  # 1.01, exactly
        (lambda: judge_limits("x", _Wrong(image, lambda c, k: widest, both=True), sizes),
         "although a bucket fits inside it"),
        # family (b): each way a call can go wrong
        (lambda: judge_call("x", Case(lambda: M(64), "reject", ("quantization",))),
         "was accepted; expected a refusal naming quantization"),
        (lambda: judge_call("x", Case(lambda: _raise(_NAMED), "accept")), "refused a legal call"),
        (lambda: judge_call("x", Case(lambda: _raise(_NAMED), "reject", ("min_share",))),
         "does not name min_share"),
        (lambda: judge_call("x", Case(lambda: _raise(ValueError("bad")), "reject", ())),
         "the refusal does not name"),
        (lambda: judge_call("x", Case(lambda: _raise(OverflowError("C long")), "either", ())),
         "raised OverflowError"),
        (lambda: judge_call("x", Case(lambda: _Broken(), "accept")), "off the 64-lattice"),
        (lambda: judge_call("x", Case(_spin, "either"), seconds=0.2), "hangs"),
    ]  # fmt: skip
    for verdict, message in verdicts:
        with pytest.raises(pytest.fail.Exception, match=re.escape(message)):
            verdict()


_NAMED = ValueError("quantization must be at most 256; got quantization=257")


def _raise(error: Exception) -> None:
    raise error


def _spin() -> None:
    while True:
        pass


class _Broken:
    """Accepted, but its bucket is off its lattice."""

    quantization = 64
    max_pixels = 4096
    resolutions = np.array([[60, 64]])
