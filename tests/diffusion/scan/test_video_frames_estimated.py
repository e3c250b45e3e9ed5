"""Estimated frame counts are taken low (NOTE [ estimated frame counts ]), on real Matroska and
WebM files with a variable frame rate written with PyAV. Skipped without PyAV."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from dataorder.diffusion.buckets.video_frames import estimated_frame_count  # noqa: E402
from dataorder.diffusion.calculators.video import VideoBucketCalculator  # noqa: E402
from dataorder.diffusion.scan.videos import read_video_info, scan_videos  # noqa: E402

#: Timestamps in milliseconds at a nominal 30 fps.
TIME_BASE = Fraction(1, 1000)


def _write(path: Path, pts: list[int], codec: str = "ffv1") -> None:
    """Frames at the given timestamps, in a stream whose nominal rate is 30 fps."""
    rng = np.random.default_rng(len(pts))
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.codec_context.time_base = TIME_BASE
        for t in pts:
            pixels = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = t, TIME_BASE
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _real_frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for packet in container.demux(video=0) if packet.size)


def _bucket_frames(calc: VideoBucketCalculator, frames: int) -> int:
    return max(f for f in calc.frame_counts if f <= frames)


@pytest.mark.parametrize(("ext", "codec"), [(".mkv", "ffv1"), (".webm", "libvpx-vp9")])
def test_a_variable_rate_clip_is_counted_low(tmp_path: Path, ext: str, codec: str) -> None:
    """Regression: 40 frames over 2.03 s at a nominal 30 fps were counted as
    round(2.03 * 30) = 61 and bucketed at 61 frames, more than the clip has."""
    calc = VideoBucketCalculator.from_preset("wan2.1-480p", max_upscale=None)  # 4k + 1 frames
    sparse = [round(i * 1000 / 30) for i in range(20)] + [667 + 70 * k for k in range(20)]
    mild = [round(i * 1000 / 30) for i in range(55)] + [1997]  # one gap of 0.2 s at the end
    written = {}
    for name, pts in [("sparse", sparse), ("mild", mild)]:
        path = tmp_path / (name + ext)
        try:
            _write(path, pts, codec)
        except Exception:  # this PyAV build lacks the encoder: nothing to test here
            pytest.skip(f"no {codec} encoder")
        written[name] = path
    for name, real in [("sparse", 40), ("mild", 56)]:
        path = written[name]
        assert _real_frames(path) == real
        info = read_video_info(path)
        assert info.frames_estimated
        assert info.fps == 30
        assert info.duration == pytest.approx(2.03, abs=0.001)  # the last frame's end
        assert float(info.duration) * 30 > 60.5  # what the headers say: 61 frames
        assert info.frames == 54 == estimated_frame_count(Fraction(203, 100), 30)
    # Within the margin (a real average rate 92 % of the nominal): no longer stretched.
    assert _bucket_frames(calc, 54) == 53 <= 56 < 61
    # Beyond it (67 %) no header tells: still too long, but flagged for a count by demuxing.
    scan = scan_videos([str(written["sparse"]), str(written["mild"])], calc, progress=False)
    assert scan.frames.tolist() == [54, 54]
    assert scan.frames_estimated.tolist() == [True, True]
    assert [calc.get_bucket_by_id(int(k))["frames"] for k in scan.bucket_ids] == [53, 53]


def test_a_constant_rate_clip_loses_at_most_a_tenth(tmp_path: Path) -> None:
    path = tmp_path / "cfr.mkv"
    try:
        _write(path, [round(i * 1000 / 30) for i in range(81)])
    except Exception:
        pytest.skip("no ffv1 encoder")
    info = read_video_info(path)
    assert info.frames_estimated
    assert info.frames == 72 == 81 * 9 // 10  # duration * fps = 81 exactly, a tenth off
