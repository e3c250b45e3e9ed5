"""One video's size, frame count, rate and duration from its container headers (PyAV).

PyAV is an optional dependency (``pip install 'dataorder[video]'``), imported only when a file
is read (:func:`require_av`). :mod:`dataorder.diffusion.scan.videos` reads a whole folder with
:func:`read_video_info`.

**What is read** (:func:`read_video_info`), per file; no frame is decoded:

* ``av.open(path, options={"skip_frame": "all"})``. Opening runs FFmpeg's
  ``avformat_find_stream_info``, which *decodes frames* to fill in codec parameters unless the
  decoders it opens are told to skip them: on a 12-frame 4K H.264 mp4 with B-frames, 176 ms
  without the option against 9 ms with it (``benchmarks/bench_video.py`` times a 720p clip).
  No Python-side ``decode`` or ``demux`` is called.
* The first video stream that is not an attached picture (the cover art of an mp3 or m4a is a
  one-picture "video" stream with the ``attached_pic`` disposition).
* ``width``, ``height``: the stream's codec parameters, as displayed: a 90 or 270 degree display
  rotation swaps them (``apply_rotation=True``, the default), as the image scan applies EXIF
  orientation. PyAV exposes a stream's display matrix only on decoded frames, so for mp4/mov it
  is read from the ``tkhd`` box (:func:`mp4_rotation`, which reads box headers and the ``moov``
  box only); other containers report 0.
* ``frames``: the stream's frame count (the sample table of mp4/mov, the avi header). Matroska, WebM
  and MPEG-TS store none: the count is then estimated from the duration and the rate, low rather
  than high (NOTE [ estimated frame counts ] in :mod:`dataorder.diffusion.buckets.video_frames`:
  ``floor(duration * fps * 9 / 10)``), and marked in :attr:`VideoScan.frames_estimated`.
* ``fps``: the average frame rate, else FFmpeg's guess; exact (a ``Fraction``, 30000/1001).
* ``duration`` (seconds): the stream's duration, else the container's.

A file with no frame count and no duration or rate to estimate one (a raw ``.h264`` stream, a
1-frame MPEG-TS) is an error, not a guess. So is a file whose headers claim a size or a frame
count outside ``[1, MAX_VIDEO_SIZE]`` (an .avi saying 4,294,967,280 frames, a .mkv whose
Duration gives 10^13 frames): :func:`read_video_info` raises :class:`VideoHeaderError` for that
file, so a scan lists it in its errors and the batch assignment never sees the value. A rate
or a duration that is not positive counts as unknown. Only regular files are opened (NOTE [
Regular files only ] in :mod:`dataorder.diffusion.scan.files`): a FIFO named ``x.mp4`` is
reported, not opened. What headers cannot show: a truncated Matroska, WebM
or "faststart" mp4 opens and reports its full length (an mp4 whose index is at the end fails to
open, and is reported).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, BinaryIO

from dataorder.diffusion.buckets.video_frames import MAX_VIDEO_SIZE, estimated_frame_count
from dataorder.diffusion.scan.files import check_regular_file

__all__ = [
    "MIN_AV_VERSION",
    "OPEN_OPTIONS",
    "VideoHeaderError",
    "VideoInfo",
    "mp4_rotation",
    "read_video_info",
    "require_av",
]

#: Oldest PyAV major version :func:`require_av` accepts.
MIN_AV_VERSION = 17

#: Options of ``av.open``: the decoders ``avformat_find_stream_info`` opens skip every frame.
OPEN_OPTIONS: dict[str, str] = {"skip_frame": "all"}

_MOV_FORMATS = ("mov", "mp4", "m4a", "3gp", "3g2", "mj2")
_MAX_MOOV = 64 << 20  # a moov box larger than this is not read for its rotation
_ATTACHED_PIC = 0x400  # AV_DISPOSITION_ATTACHED_PIC


def require_av(feature: str) -> Any:
    """Import PyAV, or raise an ImportError that says how to install it.

    Raises:
        ImportError: If PyAV is not installed, or older than :data:`MIN_AV_VERSION` (PyAV 14
            has no ``Stream.disposition``; 17.1 and 18.1 are tested).
    """
    try:
        import av
    except ImportError:
        raise ImportError(
            f"{feature} needs PyAV (FFmpeg bindings): pip install 'dataorder[video]'"
        ) from None
    version = str(getattr(av, "__version__", "0"))
    major = version.split(".")[0]
    if not major.isdigit() or int(major) < MIN_AV_VERSION:
        raise ImportError(
            f"{feature} needs PyAV >= {MIN_AV_VERSION}; got av {version}: "
            "pip install -U 'dataorder[video]'"
        )
    return av


@dataclass(frozen=True)
class VideoInfo:
    """What the headers of one video say.

    Attributes:
        width: Width as displayed (rotation applied if asked).
        height: Height as displayed.
        frames: Frame count, exact or estimated (``frames_estimated``).
        fps: Average frame rate, exact, or None if the headers give none.
        duration: Seconds, or None.
        frames_estimated: True if ``frames`` is estimated from ``duration * fps``, a tenth
            below it (NOTE [ estimated frame counts ] in
            :mod:`dataorder.diffusion.buckets.video_frames`).
        rotation: Display rotation in degrees counter-clockwise (PyAV's sign); 0 if none or the
            container is not mp4/mov.
        codec: Codec name.
        container: Container format name.
    """

    width: int
    height: int
    frames: int
    fps: Fraction | None
    duration: float | None
    frames_estimated: bool
    rotation: int
    codec: str
    container: str


class VideoHeaderError(ValueError):
    """A readable media file whose headers do not describe a usable video."""


def _boxes(fh: BinaryIO, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """``(type, payload_start, box_end)`` of the ISO-BMFF boxes in ``[start, end)`` of ``fh``."""
    off = start
    while off + 8 <= end:
        fh.seek(off)
        head = fh.read(16)
        if len(head) < 8:
            return
        size, typ = struct.unpack(">I4s", head[:8])
        header = 8
        if size == 1:  # a 64-bit size follows the type
            if len(head) < 16:
                return
            size, header = struct.unpack(">Q", head[8:16])[0], 16
        elif size == 0:  # the box runs to the end of its parent
            size = end - off
        if size < header:
            return
        yield typ, off + header, min(off + size, end)
        off += size


def _track_rotation(fh: BinaryIO, start: int, end: int) -> int | None:
    """Rotation of a ``trak`` box in ``[start, end)`` if it is a video track, else None."""
    matrix = None
    video = False
    for typ, s, e in _boxes(fh, start, end):
        if typ == b"tkhd":
            fh.seek(s)
            body = fh.read(e - s)
            # version/flags, then times and ids (32 bytes in version 1, 20 in 0), 16 reserved
            skip = 4 + (32 if body[:1] == b"\x01" else 20) + 16
            if len(body) >= skip + 36:
                matrix = struct.unpack(">9i", body[skip : skip + 36])
        elif typ == b"mdia":
            for t4, s4, _ in _boxes(fh, s, e):
                if t4 == b"hdlr":
                    fh.seek(s4 + 8)
                    video = fh.read(4) == b"vide"
    if not video or matrix is None:
        return None
    a, c = matrix[0], matrix[3]
    degrees = round(math.degrees(math.atan2(c, a)))
    return 180 if degrees == -180 else degrees


def mp4_rotation(path: str | os.PathLike[str]) -> int:
    """Display rotation of the first video track of an mp4/mov file, from its ``tkhd`` matrix.

    Reads only box headers and the ``moov`` box (``mdat`` is skipped by seeking). Returns
    degrees counter-clockwise in ``(-180, 180]``, the sign of PyAV's ``VideoFrame.rotation``;
    0 if the file has no video track or no ``moov`` box.

    Raises:
        OSError: If the file cannot be read.
    """
    with open(path, "rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        for typ, s, e in _boxes(fh, 0, end):
            if typ != b"moov" or e - s > _MAX_MOOV:
                continue
            for t2, s2, e2 in _boxes(fh, s, e):
                if t2 == b"trak":
                    rotation = _track_rotation(fh, s2, e2)
                    if rotation is not None:
                        return rotation
            return 0
    return 0


def read_video_info(path: str | os.PathLike[str], *, apply_rotation: bool = True) -> VideoInfo:
    """Size, frame count, rate and duration of one video from its headers (module docstring).

    Raises:
        ImportError: If PyAV is not installed.
        OSError: If the file cannot be opened or FFmpeg does not recognise it (PyAV's errors
            derive from OSError or ValueError);
            :class:`~dataorder.diffusion.scan.files.NotARegularFileError`, without opening it,
            if it is not a regular file (a FIFO, socket, device, directory, broken link).
        VideoHeaderError: If it has no video stream, no frame size, neither a frame count nor
            a duration and a rate to estimate one, or a side or a frame count outside
            ``[1, MAX_VIDEO_SIZE]``.
    """
    av = require_av("read_video_info")
    check_regular_file(os.fspath(path))  # never opens a FIFO (NOTE [ Regular files only ])
    with av.open(os.fspath(path), options=OPEN_OPTIONS, metadata_errors="ignore") as container:
        videos = list(container.streams.video)
        stream = next((s for s in videos if not int(s.disposition) & _ATTACHED_PIC), None)
        if stream is None:
            kinds = ", ".join(s.type for s in container.streams) or "none"
            if videos:
                raise VideoHeaderError(f"only an attached picture (cover art); streams: {kinds}")
            raise VideoHeaderError(f"no video stream; streams: {kinds}")
        ctx = stream.codec_context
        width, height = int(ctx.width), int(ctx.height)
        if width <= 0 or height <= 0:
            raise VideoHeaderError(f"no frame size in the headers ({width}x{height})")
        if width > MAX_VIDEO_SIZE or height > MAX_VIDEO_SIZE:
            raise VideoHeaderError(
                f"the headers claim {width}x{height} pixels; each side must be an int in "
                f"[1, {MAX_VIDEO_SIZE}]"
            )
        fps, duration = _rate_and_duration(stream, container)
        frames, estimated = _frame_count(stream, duration, fps)
        fmt = str(container.format.name)
        codec = str(ctx.name)
    rotation = mp4_rotation(path) if set(fmt.split(",")) & set(_MOV_FORMATS) else 0
    if apply_rotation and rotation % 180:
        width, height = height, width
    return VideoInfo(
        width=width,
        height=height,
        frames=frames,
        fps=fps,
        duration=None if duration is None else float(duration),
        frames_estimated=estimated,
        rotation=rotation,
        codec=codec,
        container=fmt,
    )


def _rate_and_duration(stream: Any, container: Any) -> tuple[Fraction | None, Fraction | None]:
    """A video stream's frame rate and duration from the headers, each None if not there."""
    rate = stream.average_rate or stream.guessed_rate
    fps = Fraction(rate) if rate and rate > 0 else None
    duration: Fraction | None = None
    if stream.duration and stream.time_base:
        duration = stream.duration * Fraction(stream.time_base)
    elif container.duration:
        duration = Fraction(container.duration, 1_000_000)  # AV_TIME_BASE
    if duration is not None and duration <= 0:
        duration = None
    return fps, duration


def _frame_count(stream: Any, duration: Fraction | None, fps: Fraction | None) -> tuple[int, bool]:
    """``(frames, estimated)``: the headers' frame count, or the one the duration and the rate
    estimate, checked to lie in ``[1, MAX_VIDEO_SIZE]``."""
    frames = int(stream.frames or 0)
    estimated = False
    if frames <= 0:
        if duration is None or fps is None:
            raise VideoHeaderError(
                "no frame count in the headers, and no duration and frame rate to estimate it"
            )
        frames = estimated_frame_count(duration, fps)  # NOTE [ estimated frame counts ]
        estimated = True
    if frames > MAX_VIDEO_SIZE:  # per file, so one absurd header never stops a scan
        claim = (
            f"a duration of {float(duration or 0):g} s at {float(fps or 0):g} fps, that is "
            if estimated
            else ""
        )
        raise VideoHeaderError(
            f"the headers claim {claim}{frames} frames; a frame count must be an int in "
            f"[1, {MAX_VIDEO_SIZE}]"
        )
    return frames, estimated
