"""Video sizes, frame counts, rates and durations from container headers, and their buckets.

:func:`scan_videos` reads every video in a folder (recursively) or in a list of paths with PyAV, an
optional dependency (``pip install 'dataorder[video]'``), in a thread pool, with a progress bar
(rich or tqdm, if installed) or your own callback. A file that cannot be read is reported in
:attr:`VideoScan.errors` with its path and the reason, and skipped; it never stops the scan. The
result is a :class:`VideoScan`: per readable clip its path, width, height, frame count, frame rate,
duration and bucket id (from a
:class:`~dataorder.diffusion.calculators.video.VideoBucketCalculator`), plus the buckets and the
calculator configuration behind the ids.

Each file is read by :func:`~dataorder.diffusion.scan.probe.read_video_info`, from its
headers only: no frame is decoded (see :mod:`dataorder.diffusion.scan.probe` for what is read
and what headers cannot show). A file with no frame count and no duration or rate to estimate
one is an error, not a guess.

Example:
    >>> import os, tempfile
    >>> from dataorder.diffusion.calculators.video import VideoBucketCalculator
    >>> from dataorder.diffusion.scan.videos import scan_videos
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "broken.mp4"), "w") as f:
    ...     _ = f.write("not a video")
    >>> scan = scan_videos(folder, VideoBucketCalculator.from_preset("wan2.1-480p"),
    ...                    progress=False)
    >>> len(scan), [(os.path.basename(p), reason[:40]) for p, reason in scan.errors]
    (0, [('broken.mp4', 'InvalidDataError: [Errno 1094995529] Inv')])
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, fail
from dataorder.diffusion.calculators.video import TOO_SHORT, TOO_SMALL, VideoBucketCalculator
from dataorder.diffusion.scan.files import (
    Progress,
    list_files,
    read_files,
    scan_paths,
    split_results,
    workers_arg,
)
from dataorder.diffusion.scan.probe import (
    MIN_AV_VERSION,
    OPEN_OPTIONS,
    VideoHeaderError,
    VideoInfo,
    mp4_rotation,
    read_video_info,
    require_av,
)

__all__ = [
    "MIN_AV_VERSION",
    "OPEN_OPTIONS",
    "VIDEO_EXTENSIONS",
    "VideoHeaderError",
    "VideoInfo",
    "VideoRow",
    "VideoScan",
    "build_video_scan",
    "list_videos",
    "mp4_rotation",
    "read_video_info",
    "require_av",
    "scan_videos",
]

#: File name endings :func:`list_videos` picks up (compared case-insensitively).
VIDEO_EXTENSIONS: tuple[str, ...] = (
    ".avi",
    ".flv",
    ".m2ts",
    ".m4v",
    ".mkv",
    ".mov",
    ".mp4",
    ".mpeg",
    ".mpg",
    ".mts",
    ".ogv",
    ".ts",
    ".webm",
    ".wmv",
)


class VideoRow(NamedTuple):
    """One readable clip of a :class:`VideoScan`."""

    path: str
    width: int
    height: int
    frames: int
    fps: float
    duration: float
    bucket_id: int


def _column(name: str, values: object, n: int, dtype: type[np.generic]) -> npt.NDArray[Any]:
    arr = np.array(values, dtype=dtype)  # a copy: the scan owns its arrays
    if arr.shape != (n,):
        raise ValueError(f"{name} must have one entry per path ({n}); got shape {arr.shape}")
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, eq=False)
class VideoScan:
    """Header facts and bucket ids of a video dataset, with the buckets and calculator behind them.

    Row ``i`` is readable clip ``i``, in input order. Arrays are read-only copies of shape
    ``(len(paths),)``. A clip that no bucket takes keeps its row, with id
    :data:`~dataorder.diffusion.calculators.video.TOO_SHORT` (-1) or
    :data:`~dataorder.diffusion.calculators.video.TOO_SMALL` (-2); :meth:`assigned` moves such clips
    to ``errors``, which is what a manifest (one row per training sample) needs.

    Attributes:
        paths: Clip paths, as given or joined to the scanned directory.
        widths: Widths as displayed (int64).
        heights: Heights as displayed (int64).
        frames: Frame counts (int64).
        fps: Frame rates (float64; NaN if unknown).
        durations: Durations in seconds (float64; NaN if unknown).
        frames_estimated: Whether each count is estimated from ``duration * fps``, a tenth below it
            (bool; NOTE [ estimated frame counts ] in
            :mod:`dataorder.diffusion.buckets.video_frames`).
        bucket_ids: Bucket ids, or -1 / -2 (int64).
        buckets: The calculator's buckets, in id order.
        calculator: The calculator configuration
            (:meth:`~dataorder.diffusion.calculators.video.VideoBucketCalculator.config`).
        errors: ``(path, reason)`` of every file that could not be used.
    """

    paths: list[str]
    widths: npt.NDArray[np.int64]
    heights: npt.NDArray[np.int64]
    frames: npt.NDArray[np.int64]
    fps: npt.NDArray[np.float64]
    durations: npt.NDArray[np.float64]
    frames_estimated: npt.NDArray[np.bool_]
    bucket_ids: npt.NDArray[np.int64]
    buckets: list[dict[str, Any]]
    calculator: dict[str, Any]
    errors: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        paths = [os.fspath(p) for p in self.paths]
        n = len(paths)
        for name, dtype in (
            ("widths", np.int64),
            ("heights", np.int64),
            ("frames", np.int64),
            ("fps", np.float64),
            ("durations", np.float64),
            ("frames_estimated", np.bool_),
            ("bucket_ids", np.int64),
        ):
            object.__setattr__(self, name, _column(name, getattr(self, name), n, dtype))
        ids = self.bucket_ids
        if n and (int(ids.min()) < TOO_SMALL or int(ids.max()) >= len(self.buckets)):
            bad = int(np.flatnonzero((ids < TOO_SMALL) | (ids >= len(self.buckets)))[0])
            fail(f"bucket_ids[{bad}]", f"an int in [-2, {len(self.buckets) - 1}]", int(ids[bad]))
        object.__setattr__(self, "paths", paths)
        object.__setattr__(self, "buckets", [dict(b) for b in self.buckets])
        object.__setattr__(self, "calculator", dict(self.calculator))
        object.__setattr__(self, "errors", [(str(p), str(r)) for p, r in self.errors])

    def __len__(self) -> int:
        return len(self.paths)

    def rows(self) -> Iterator[VideoRow]:
        """The readable clips, one :class:`VideoRow` each, in order."""
        columns = (
            self.widths.tolist(),
            self.heights.tolist(),
            self.frames.tolist(),
            self.fps.tolist(),
            self.durations.tolist(),
            self.bucket_ids.tolist(),
        )
        for p, *rest in zip(self.paths, *columns, strict=True):
            yield VideoRow(p, *rest)

    def calculator_object(self) -> VideoBucketCalculator:
        """Rebuild the calculator from :attr:`calculator`."""
        return VideoBucketCalculator.from_config(self.calculator)

    def unassigned(self) -> dict[str, int]:
        """How many readable clips no bucket takes, by reason: ``too_short``, ``too_small``."""
        return {
            "too_short": int((self.bucket_ids == TOO_SHORT).sum()),
            "too_small": int((self.bucket_ids == TOO_SMALL).sum()),
        }

    def assigned(self) -> VideoScan:
        """The clips that have a bucket; the others join :attr:`errors` with the reason.

        Example:
            >>> from dataorder.diffusion.calculators.video import VideoBucketCalculator
            >>> calc = VideoBucketCalculator(4096, frame_counts=[5, 9])
            >>> scan = build_video_scan(["a.mp4", "b.mp4", "c.mp4"], [512, 512, 64], [512, 512,
            ...                         64], [12, 3, 9], calc)
            >>> scan.bucket_ids.tolist(), scan.assigned().paths
            ([55, -1, -2], ['a.mp4'])
            >>> scan.buckets[55]["frames"], scan.buckets[55]["resolution"]
            (9, (576, 576))
            >>> for path, reason in scan.assigned().errors:
            ...     print(path, reason)
            b.mp4 too short: 3 frames, the shortest bucket has 5
            c.mp4 too small: 64x64 needs more than 3/2 upscaling for every bucket of 9 frames
        """
        keep = self.bucket_ids >= 0
        calc = self.calculator_object()
        reasons = list(self.errors)
        for i in np.flatnonzero(~keep).tolist():
            w, h, f = int(self.widths[i]), int(self.heights[i]), int(self.frames[i])
            if int(self.bucket_ids[i]) == TOO_SHORT:
                why = f"too short: {f} frames, the shortest bucket has {calc.frame_counts[0]}"
            else:
                used = max(g for g in calc.frame_counts if g <= f)
                why = (
                    f"too small: {w}x{h} needs more than {calc.max_upscale} upscaling for every "
                    f"bucket of {used} frames"
                )
            reasons.append((self.paths[i], why))
        rows = np.flatnonzero(keep)
        return VideoScan(
            paths=[self.paths[i] for i in rows.tolist()],
            widths=self.widths[rows],
            heights=self.heights[rows],
            frames=self.frames[rows],
            fps=self.fps[rows],
            durations=self.durations[rows],
            frames_estimated=self.frames_estimated[rows],
            bucket_ids=self.bucket_ids[rows],
            buckets=self.buckets,
            calculator=self.calculator,
            errors=reasons,
        )

    def bucket_counts(self) -> npt.NDArray[np.int64]:
        """Clips per bucket (unassigned clips not counted): int64 of shape ``(len(buckets),)``."""
        ids = self.bucket_ids[self.bucket_ids >= 0]
        return np.bincount(ids, minlength=len(self.buckets)).astype(np.int64)


def build_video_scan(
    paths: Sequence[str | os.PathLike[str]],
    widths: npt.ArrayLike,
    heights: npt.ArrayLike,
    frames: npt.ArrayLike,
    calculator: VideoBucketCalculator,
    *,
    fps: npt.ArrayLike | None = None,
    durations: npt.ArrayLike | None = None,
    frames_estimated: npt.ArrayLike | None = None,
    errors: Iterable[tuple[str, str]] = (),
) -> VideoScan:
    """A :class:`VideoScan` from facts you already have (e.g. a metadata table), bucketed.

    Args:
        paths: Clip paths.
        widths: Widths as displayed, shape ``(len(paths),)``.
        heights: Heights, likewise.
        frames: Frame counts, likewise.
        calculator: Assigns the buckets.
        fps: Frame rates (None: unknown, NaN).
        durations: Durations in seconds (None: unknown, NaN).
        frames_estimated: Whether each frame count is an estimate (None: none is).
        errors: ``(path, reason)`` pairs to carry along.

    Raises:
        TypeError: If ``calculator`` is not a VideoBucketCalculator or an array is not of ints.
        ValueError: If the lengths differ or a value is not a positive int.
    """
    if not isinstance(calculator, VideoBucketCalculator):
        fail("calculator", "a VideoBucketCalculator", calculator, TypeError)
    n = len(paths)
    nan = np.full(n, np.nan)
    ids = calculator.assign(widths, heights, frames)
    if ids.shape != (n,):
        raise ValueError(
            f"widths, heights and frames must have one entry per path ({n}); got shape {ids.shape}"
        )
    return VideoScan(
        paths=[os.fspath(p) for p in paths],
        widths=np.asarray(widths),
        heights=np.asarray(heights),
        frames=np.asarray(frames),
        fps=nan if fps is None else np.asarray(fps, dtype=np.float64),
        durations=nan if durations is None else np.asarray(durations, dtype=np.float64),
        frames_estimated=(
            np.zeros(n, dtype=bool) if frames_estimated is None else np.asarray(frames_estimated)
        ),
        bucket_ids=ids,
        buckets=calculator.get_all_buckets(),
        calculator=calculator.config(),
        errors=list(errors),
    )


def list_videos(
    directory: str | os.PathLike[str], extensions: Iterable[str] = VIDEO_EXTENSIONS
) -> list[str]:
    """Every file under ``directory`` (recursively) whose name ends in one of ``extensions``.

    Endings are compared case-insensitively; the result is sorted, so the clip order (the
    sample indices) does not depend on the file system's listing order.

    Raises:
        ValueError: If ``directory`` is not an existing directory.
    """
    return list_files(directory, extensions)


def scan_videos(
    paths_or_dir: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    calculator: VideoBucketCalculator,
    *,
    workers: int | None = None,
    progress: Progress = True,
    apply_rotation: bool = True,
    extensions: Iterable[str] = VIDEO_EXTENSIONS,
) -> VideoScan:
    """Read video headers in parallel and bucket the clips.

    Args:
        paths_or_dir: A directory (scanned recursively for ``extensions``, in sorted order) or
            an iterable of paths (kept in the given order, any ending).
        calculator: Assigns the buckets; its configuration goes into the result.
        workers: Reader threads; None means ``min(32, 4 * os.cpu_count())``: FFmpeg releases
            the GIL while it opens and probes a file, and on network file systems each open
            mostly waits. 1 reads in the calling thread.
        progress: True for a progress bar on stderr (rich, else tqdm; none if neither is
            installed), False for silence, or a callable ``progress(done, total)`` called as
            files complete.
        apply_rotation: Report sizes as displayed (a 90-degree mp4/mov rotation swaps them).
        extensions: Endings picked up when scanning a directory.

    Returns:
        A :class:`VideoScan` of the readable clips in input order, ``errors`` listing
        ``(path, reason)`` for the others: unreadable, not a regular file (a FIFO, socket,
        device or broken link, never opened), or headers claiming a size or frame count outside
        ``[1, MAX_VIDEO_SIZE]`` (one absurd header never stops the scan). Clips no bucket takes
        keep their row with id -1 or -2; :meth:`VideoScan.assigned` moves them to the errors.

    Raises:
        ImportError: If PyAV is not installed (``pip install 'dataorder[video]'``).
        TypeError: For a bad argument type.
        ValueError: If ``paths_or_dir`` is a string that is not a directory.
    """
    if not isinstance(calculator, VideoBucketCalculator):
        fail("calculator", "a VideoBucketCalculator", calculator, TypeError)
    rotate = check_bool("apply_rotation", apply_rotation)
    n_workers = workers_arg(workers)
    paths = scan_paths(paths_or_dir, extensions)
    require_av("scan_videos")

    def read(path: str) -> VideoInfo:
        return read_video_info(path, apply_rotation=rotate)

    results = read_files(
        paths,
        read,
        workers=n_workers,
        progress=progress,
        label="reading video headers",
        chunk_range=(4, 256),
        fatal=(ImportError,),  # PyAV missing: the scan's error, not each file's
    )
    good, infos, errors = split_results(paths, results)
    return _scan_of(good, infos, calculator, errors)


def _scan_of(
    paths: list[str],
    infos: list[VideoInfo],
    calculator: VideoBucketCalculator,
    errors: list[tuple[str, str]],
) -> VideoScan:
    """The scan of the clips whose headers were read (``infos``, one per path)."""
    return build_video_scan(
        paths,
        np.array([i.width for i in infos], dtype=np.int64),
        np.array([i.height for i in infos], dtype=np.int64),
        np.array([i.frames for i in infos], dtype=np.int64),
        calculator,
        fps=[math.nan if i.fps is None else float(i.fps) for i in infos],
        durations=[math.nan if i.duration is None else i.duration for i in infos],
        frames_estimated=[i.frames_estimated for i in infos],
        errors=errors,
    )
