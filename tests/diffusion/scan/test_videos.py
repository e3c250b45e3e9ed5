"""scan_videos on real files written with PyAV: codecs and containers, odd sizes, single frames,
rotation, and files a scan must report rather than crash on. Skipped without PyAV."""

from __future__ import annotations

import doctest
import io
import os
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

av = pytest.importorskip("av")

import dataorder.diffusion.scan.videos as scan_module  # noqa: E402
from dataorder.diffusion.calculators.video import TOO_SMALL, VideoBucketCalculator  # noqa: E402
from dataorder.diffusion.scan.videos import (  # noqa: E402
    OPEN_OPTIONS,
    VideoScan,
    build_video_scan,
    list_videos,
    mp4_rotation,
    read_video_info,
    scan_videos,
)

#: (codec, file ending, pixel format, pixel format at odd sizes or None if the codec refuses them).
#: Not libx265: in the PyAV 18.1 wheel it corrupts the heap at these tiny sizes (the process
#: aborts with "free(): invalid next size"); HEVC adds nothing a header scan reads differently.
CODECS: tuple[tuple[str, str, str, str | None], ...] = (
    ("mpeg4", ".mp4", "yuv420p", "yuv420p"),
    ("libx264", ".mp4", "yuv420p", "yuv444p"),  # x264 needs even sides at 4:2:0
    ("libvpx-vp9", ".webm", "yuv420p", "yuv420p"),
    ("mjpeg", ".avi", "yuvj420p", "yuvj444p"),
    ("ffv1", ".mkv", "yuv420p", "yuv420p"),
    ("mpeg2video", ".ts", "yuv420p", None),
    ("prores_ks", ".mov", "yuv422p10le", None),
)
_FORMATS = {".mp4": "mp4", ".webm": "webm", ".avi": "avi", ".mkv": "matroska", ".ts": "mpegts"}
_FORMATS[".mov"] = "mov"
#: Containers whose headers hold a frame count; the others' counts are estimated.
_EXACT_COUNT = (".mp4", ".mov", ".avi")


@dataclass(frozen=True)
class Expected:
    """What a header scan must report for one file: its facts, or a word of its error."""

    path: str
    width: int = 0
    height: int = 0
    frames: int = 0
    fps: Fraction = Fraction(0)
    estimated: bool = False
    error: str | None = None
    rotation: int = 0


def write_clip(
    target: str | io.BytesIO,
    codec: str,
    size: tuple[int, int],
    frames: int,
    fps: Fraction | int = 24,
    *,
    pix_fmt: str = "yuv420p",
    container_format: str | None = None,
    container_options: dict[str, str] | None = None,
    rotation: int | None = None,
) -> None:
    """Encode ``frames`` frames of noise at ``size`` and ``fps``."""
    width, height = size
    rng = np.random.default_rng(width * 1000 + height)
    base = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    with av.open(target, "w", format=container_format, options=container_options or {}) as c:
        stream = c.add_stream(codec, rate=Fraction(fps))
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        if rotation is not None:
            stream.set_display_rotation(rotation)
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.roll(base, 3 * i, axis=1), format="rgb24")
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)


def _encodes(codec: str, ext: str, pix_fmt: str | None, size: tuple[int, int]) -> bool:
    """Whether this PyAV build really encodes ``codec`` at ``size`` (listed is not enough)."""
    if pix_fmt is None:
        return False
    try:
        write_clip(io.BytesIO(), codec, size, 2, pix_fmt=pix_fmt, container_format=_FORMATS[ext])
    except Exception:  # any refusal means: not usable here
        return False
    return True


def _audio(path: str, *, cover_art: bool) -> None:
    """An audio-only file: AAC in .m4a, or MP3 with a PNG cover picture (a "video" stream)."""
    codec, rate = ("libmp3lame", 44100) if cover_art else ("aac", 16000)
    with av.open(path, "w") as c:
        stream = c.add_stream(codec, rate=rate)
        stream.layout = "mono"
        if cover_art:
            pic = c.add_stream("png")
            pic.width, pic.height, pic.pix_fmt = 32, 32, "rgb24"
            pic.disposition = av.stream.Disposition.attached_pic
            image = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
            for packet in [*pic.encode(image), *pic.encode()]:
                c.mux(packet)
        ctx = stream.codec_context
        size = ctx.frame_size or 1024
        frame = av.AudioFrame(format=ctx.format.name, layout="mono", samples=size)
        frame.sample_rate = rate
        for plane in frame.planes:
            plane.update(bytes(plane.buffer_size))
        for i in range(10):
            frame.pts = i * size
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)


def _truncate(path: str) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)


def make_test_videos(folder: Path) -> list[Expected]:
    """Write the test files into ``folder``; return what a scan must say about each."""
    av.logging.set_level(None)
    out: list[Expected] = []

    def clip(name: str, codec: str, ext: str, size: tuple[int, int], n: int, fps: Any,
             pix: str, **kw: Any) -> None:  # fmt: skip
        path = str(folder / (name + ext))
        write_clip(path, codec, size, n, fps, pix_fmt=pix, **kw)
        rotation = int(kw.get("rotation") or 0)
        w, h = (size[1], size[0]) if rotation % 180 else size
        estimated = ext not in _EXACT_COUNT
        out.append(Expected(path, w, h, n, Fraction(fps), estimated, None, rotation))

    for codec, ext, pix, odd_pix in CODECS:
        if not _encodes(codec, ext, pix, (64, 48)):
            continue
        tag = codec.replace("-", "_") + "_" + ext[1:]
        clip(f"{tag}_64x48_12f", codec, ext, (64, 48), 12, 24, pix)
        if ext == ".ts":  # a TS duration is a PTS span: one frame has none, nor a count
            write_clip(str(folder / f"{tag}_1f.ts"), codec, (48, 64), 1, 30, pix_fmt=pix)
            out.append(Expected(str(folder / f"{tag}_1f.ts"), error="frame count"))
        else:
            clip(f"{tag}_48x64_1f", codec, ext, (48, 64), 1, 30, pix)
        if odd_pix is not None and _encodes(codec, ext, odd_pix, (33, 17)):
            clip(f"{tag}_33x17_7f", codec, ext, (33, 17), 7, 25, odd_pix)
            clip(f"{tag}_17x33_5f", codec, ext, (17, 33), 5, 60, odd_pix)
    clip("rotated_90", "mpeg4", ".mp4", (64, 32), 3, 24, "yuv420p", rotation=90)
    clip("rotated_270", "mpeg4", ".mp4", (64, 32), 3, 24, "yuv420p", rotation=-90)
    clip("ntsc", "mpeg4", ".mp4", (32, 32), 30, Fraction(30000, 1001), "yuv420p")
    clip("long_1000f", "mpeg4", ".mp4", (16, 16), 1000, 25, "yuv420p")
    # The index at the end, cut in half: the file does not open.
    moov_last = str(folder / "truncated_moov_at_end.mp4")
    write_clip(moov_last, "mpeg4", (64, 48), 48)
    _truncate(moov_last)
    out.append(Expected(moov_last, error="Invalid"))
    # The index first ("faststart"), cut in half: it opens and claims all 48 frames.
    faststart = str(folder / "truncated_faststart.mp4")
    write_clip(faststart, "mpeg4", (64, 48), 48, container_options={"movflags": "+faststart"})
    _truncate(faststart)
    out.append(Expected(faststart, 64, 48, 48, Fraction(24)))
    if _encodes("ffv1", ".mkv", "yuv420p", (64, 48)):
        mkv = str(folder / "truncated.mkv")
        write_clip(mkv, "ffv1", (64, 48), 48)
        _truncate(mkv)
        out.append(Expected(mkv, 64, 48, 48, Fraction(24), estimated=True))
    if _encodes("libx264", ".mp4", "yuv420p", (64, 48)):
        raw = str(folder / "raw_stream.h264")  # no duration, an invented rate: an error
        write_clip(raw, "libx264", (64, 48), 10, container_format="h264")
        out.append(Expected(raw, error="frame count"))
    _audio(str(folder / "audio_only.m4a"), cover_art=False)
    out.append(Expected(str(folder / "audio_only.m4a"), error="no video stream"))
    try:
        _audio(str(folder / "song_with_cover.mp3"), cover_art=True)
        out.append(Expected(str(folder / "song_with_cover.mp3"), error="attached picture"))
    except Exception:  # this build lacks an mp3 or png encoder: the case is skipped
        pass
    (folder / "not_a_video.mp4").write_text("a text file with a video name\n" * 20)
    out.append(Expected(str(folder / "not_a_video.mp4"), error="Invalid"))
    (folder / "empty.webm").write_bytes(b"")
    out.append(Expected(str(folder / "empty.webm"), error="Invalid"))
    (folder / "notes.txt").write_text("not scanned from a directory")
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> list[Expected]:
    return make_test_videos(tmp_path_factory.mktemp("videos"))


FREE = VideoBucketCalculator.from_preset("wan2.1-480p", max_upscale=None)


def test_doctests() -> None:
    result = doctest.testmod(scan_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted >= 8


def test_the_generated_set_covers_the_cases(made: list[Expected]) -> None:
    names = {Path(e.path).suffix for e in made if e.error is None}
    assert {".mp4", ".webm", ".avi", ".mkv"} <= names  # several containers
    assert len({Path(e.path).name.split("_")[0] for e in made}) >= 6  # several codecs
    assert any(e.frames == 1 for e in made)
    assert any(e.width % 2 for e in made)
    assert sum(e.error is not None for e in made) >= 5


def test_scan_reports_every_file(made: list[Expected]) -> None:
    scan = scan_videos([e.path for e in made], FREE, progress=False)
    rows = {p: i for i, p in enumerate(scan.paths)}
    errors = dict(scan.errors)
    assert len(scan) + len(errors) == len(made)
    for e in made:
        if e.error is not None:
            assert e.path in errors, e
            assert e.error in errors[e.path], (e, errors[e.path])
            continue
        i = rows[e.path]
        got = (int(scan.widths[i]), int(scan.heights[i]), int(scan.frames[i]))
        # An estimated count is a tenth low (NOTE [ estimated frame counts ]): these clips
        # have a constant rate, so their headers give duration * fps = the real count.
        frames = max(1, e.frames * 9 // 10) if e.estimated else e.frames
        assert got == (e.width, e.height, frames), e
        assert scan.fps[i] == pytest.approx(float(e.fps), rel=1e-12)
        assert scan.durations[i] == pytest.approx(e.frames / float(e.fps), abs=0.05)
        assert bool(scan.frames_estimated[i]) == e.estimated
    assert scan.bucket_ids.tolist() == FREE.assign(scan.widths, scan.heights, scan.frames).tolist()
    assert scan.calculator == FREE.config()
    assert scan.calculator_object() == FREE
    assert scan.unassigned() == {"too_short": 0, "too_small": 0}  # f = 1 legal, no limit


def test_read_video_info(made: list[Expected]) -> None:
    ntsc = next(e for e in made if "ntsc" in e.path)
    info = read_video_info(ntsc.path)
    assert info.fps == Fraction(30000, 1001)  # exact
    assert info.frames == 30
    assert not info.frames_estimated
    assert info.codec == "mpeg4"
    assert "mp4" in info.container
    long = read_video_info(next(e.path for e in made if "long_1000f" in e.path))
    assert (long.frames, long.duration) == (1000, 40.0)
    mkv = next(e for e in made if e.path.endswith(".mkv") and "64x48" in e.path)
    assert read_video_info(mkv.path).frames_estimated


def test_workers_callback_directory_and_progress_bars(
    made: list[Expected], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calc = VideoBucketCalculator.from_preset("ltx-video")
    folder = os.path.dirname(made[0].path)
    calls: list[tuple[int, int]] = []
    one = scan_videos(folder, calc, workers=1, progress=False)
    many = scan_videos(folder, calc, workers=4, progress=lambda d, t: calls.append((d, t)))
    assert one.paths == many.paths == sorted(one.paths)
    assert one.frames.tolist() == many.frames.tolist()
    assert one.bucket_ids.tolist() == many.bucket_ids.tolist()
    assert one.errors == many.errors
    assert calls[-1] == (len(one) + len(one.errors),) * 2
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    # A directory scan picks video endings only: not the audio, raw stream or text files.
    assert not any(p.endswith((".m4a", ".mp3", ".h264", ".txt")) for p in one.paths)
    assert not any(p.endswith((".m4a", ".mp3", ".h264", ".txt")) for p, _ in one.errors)
    assert list_videos(folder) == sorted(one.paths + [p for p, _ in one.errors])
    # Progress bars: rich if installed, else tqdm, else none; the result is the same.
    with_bar = scan_videos(folder, calc, workers=2, progress=True)
    assert with_bar.paths == one.paths
    monkeypatch.setitem(sys.modules, "rich.progress", None)  # makes "import rich.progress" fail
    pytest.importorskip("tqdm")
    capsys.readouterr()
    with_tqdm = scan_videos(folder, calc, workers=2, progress=True)
    assert with_tqdm.paths == one.paths
    assert "reading video headers" in capsys.readouterr().err


def test_rotation_from_headers_matches_decoded_frames(made: list[Expected]) -> None:
    checked = 0
    for e in made:
        if e.error is None and e.path.endswith((".mp4", ".mov")):
            with av.open(e.path) as c:
                decoded = next(c.decode(video=0)).rotation
            assert mp4_rotation(e.path) == decoded == e.rotation, e
            checked += 1
    assert checked >= 5
    turned = next(e for e in made if e.rotation == 90)
    info = read_video_info(turned.path, apply_rotation=False)
    assert (info.width, info.height, info.rotation) == (turned.height, turned.width, 90)
    assert (read_video_info(turned.path).width, read_video_info(turned.path).height) == (32, 64)
    mkv = next(e.path for e in made if e.path.endswith(".mkv"))
    assert mp4_rotation(mkv) == 0  # not an ISO-BMFF file: no moov box


class _NoDecode:
    """A container proxy: any Python-side decode or demux fails the test."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("decode", "demux"):
            raise AssertionError(f"header scan called container.{name}")
        return getattr(self._inner, name)

    def __enter__(self) -> _NoDecode:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()


def test_no_frame_is_decoded(made: list[Expected], monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = av.open
    seen: list[object] = []

    def spy(*args: Any, **kwargs: Any) -> _NoDecode:
        seen.append(kwargs.get("options"))
        return _NoDecode(real_open(*args, **kwargs))

    monkeypatch.setattr(av, "open", spy)
    scan = scan_videos([e.path for e in made], FREE, workers=1, progress=False)
    assert len(scan) > 10
    assert len(seen) == len(made)
    assert all(options == OPEN_OPTIONS == {"skip_frame": "all"} for options in seen)


def test_assigned_moves_unusable_clips_to_errors(made: list[Expected]) -> None:
    strict = VideoBucketCalculator(48, frame_counts=[5, 9, 13], max_upscale=2)  # ~64x48 px
    scan = scan_videos([e.path for e in made], strict, progress=False)
    counts = scan.unassigned()
    assert counts["too_short"] == int((scan.frames < 5).sum()) > 0
    assert counts["too_small"] == int(((scan.frames >= 5) & (scan.bucket_ids == TOO_SMALL)).sum())
    assert counts["too_small"] > 0  # 16x16 to 64x48 clips, buckets of about 64x48, at most 2x
    kept = scan.assigned()
    assert len(kept) == len(scan) - counts["too_short"] - counts["too_small"] > 0
    assert (kept.bucket_ids >= 0).all()
    assert kept.errors[: len(scan.errors)] == scan.errors
    reasons = [r for _, r in kept.errors[len(scan.errors) :]]
    assert sum(r.startswith("too short: ") for r in reasons) == counts["too_short"]
    assert sum(r.startswith("too small: ") for r in reasons) == counts["too_small"]
    assert kept.bucket_counts().sum() == len(kept)
    rows = list(kept.rows())
    assert [r.path for r in rows] == kept.paths
    assert [r.bucket_id for r in rows] == kept.bucket_ids.tolist()
    assert rows[0].frames == int(kept.frames[0])


def test_scan_arguments_and_results_are_checked(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="calculator must be a VideoBucketCalculator"):
        scan_videos(str(tmp_path), object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="paths_or_dir must be a directory or an iterable"):
        scan_videos(str(tmp_path / "missing"), FREE)
    with pytest.raises(ValueError, match="workers must be a positive int; got workers=0"):
        scan_videos([], FREE, workers=0)
    with pytest.raises(TypeError, match="progress must be a bool; got progress='yes'"):
        scan_videos([str(tmp_path / "x.mp4")], FREE, progress="yes")  # type: ignore[arg-type]
    empty = scan_videos(str(tmp_path), FREE, progress=False)
    assert (len(empty), empty.errors) == (0, [])
    missing = scan_videos([tmp_path / "nope.mp4"], FREE, progress=False)
    assert missing.errors[0][1].startswith("FileNotFoundError")
    with pytest.raises(ValueError, match=r"fps must have one entry per path \(2\)"):
        build_video_scan(["a", "b"], [64, 64], [64, 64], [5, 5], FREE, fps=[24.0])
    with pytest.raises(ValueError, match="widths, heights and frames must have one entry per path"):
        build_video_scan(["a"], [64, 64], [64, 64], [5, 5], FREE)
    scan = build_video_scan(["a"], [64], [64], [5], FREE)
    with pytest.raises(ValueError, match=r"bucket_ids\[0\] must be an int in \[-2, 692\]"):
        VideoScan(**{**scan.__dict__, "bucket_ids": np.array([693])})
