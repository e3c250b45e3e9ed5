"""The manifest: each sample's path, size and bucket id, and the calculator behind them.

A :class:`Manifest` is what a scan produces (:func:`~dataorder.diffusion.scan.images.scan_images`
for images, :func:`manifest_from_scan` of a :func:`~dataorder.diffusion.scan.videos.scan_videos`
result for videos) and what the bucket dataset reads
(:meth:`~dataorder.diffusion.sampler.dataset.BaseMultiresolutionDataset.from_manifest`). A video
manifest has one more column, ``frames``; an image manifest has none (``Manifest.frames`` is None),
and image manifests written before video existed read unchanged.

**File format** (:func:`write_manifest`, :func:`read_manifest`): UTF-8 text, gzip-compressed if
the file name ends in ``.gz``. Line 1 is one JSON object (ASCII only)::

    {"format": "dataorder.manifest", "version": 1, "count": 3,
     "columns": ["width", "height", "bucket_id", "path"],
     "calculator": {"version": 1, "compat": "default", "quantization": 64, ...},
     "buckets": [{"id": 0, "resolution": [576, 1728], "aspect_ratio": 0.333, "pixels": 995328},
                 ...],
     "errors": [["broken.jpg", "UnidentifiedImageError: cannot identify image file ..."]]}

followed by exactly ``count`` rows of tab-separated ``width  height  bucket_id  path``. A video
manifest's columns are ``["width", "height", "frames", "bucket_id", "path"]``, its calculator a
:meth:`~dataorder.diffusion.calculators.video.VideoBucketCalculator.config` (``"kind": "video"``)
and its buckets carry ``frames``, ``latent_frames`` and ``tokens``; a reader that predates it
refuses the file at its columns. The path is the last column, so it may hold spaces, commas, quotes
and any Unicode; backslash, tab, newline and carriage return are escaped as ``\\\\``, ``\\t``,
``\\n``, ``\\r``, and bytes that are not UTF-8 (possible in POSIX file names) are kept as they are
(``surrogateescape``). Rows are plain text, so ``cut``, ``awk`` and ``pandas.read_csv(sep="\\t",
skiprows=1, quoting=3)`` can read them. Writing goes to a temporary file that replaces the target at
the end, so a crash never leaves a half-written manifest under the final name.

Example:
    >>> import tempfile, os
    >>> from dataorder.diffusion.calculators.video import VideoBucketCalculator
    >>> calc = VideoBucketCalculator.from_preset("wan2.1-480p")
    >>> m = build_manifest(["a.mp4", "b c.mp4"], [1920, 720], [1080, 1280], calc,
    ...                    frames=[250, 33])
    >>> [(m.buckets[i]["frames"], m.buckets[i]["resolution"]) for i in m.bucket_ids]
    [(81, (832, 480)), (33, (480, 832))]
    >>> path = os.path.join(tempfile.mkdtemp(), "clips.tsv")
    >>> write_manifest(m, path)
    >>> read_manifest(path).frames.tolist()
    [250, 33]
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, cast

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import VideoBucketCalculator
from dataorder.diffusion.scan.files import path_arg
from dataorder.diffusion.scan.videos import VideoScan, build_video_scan

__all__ = [
    "COLUMNS",
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "VIDEO_COLUMNS",
    "Calculator",
    "Manifest",
    "build_manifest",
    "calculator_from_config",
    "manifest_from_scan",
    "read_manifest",
    "write_manifest",
]

MANIFEST_FORMAT = "dataorder.manifest"
MANIFEST_VERSION = 1
#: The columns of an image manifest.
COLUMNS = ["width", "height", "bucket_id", "path"]
#: The columns of a video manifest.
VIDEO_COLUMNS = ["width", "height", "frames", "bucket_id", "path"]

#: The calculators a manifest can record.
Calculator = MultiTierBucketCalculator | VideoBucketCalculator

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {v[1]: k for k, v in _ESCAPES.items()}
_NEEDS_ESCAPE = re.compile(r"[\\\t\n\r]")
_ESCAPED = re.compile(r"\\(.?)")
_VIDEO_INTS = ("frames", "latent_frames", "tokens")


def calculator_from_config(config: dict[str, Any]) -> Calculator:
    """The calculator a manifest's ``calculator`` field describes: a video one when its
    ``kind`` is ``"video"``, else an image one (presets, NeMo's and fitted sets included)."""
    if config.get("kind") == "video":
        return VideoBucketCalculator.from_config(config)
    return MultiTierBucketCalculator.from_config(config)


def _int_column(name: str, values: object) -> npt.NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer) or arr.ndim != 1:
        fail(name, "a 1-D array of ints", values, TypeError)
    out = arr.astype(np.int64)  # always a copy: the manifest owns its arrays
    out.flags.writeable = False
    return out


def _first_outside(values: npt.NDArray[np.int64], lo: int, hi: int) -> int | None:
    """Index of the first value outside ``[lo, hi]``, or None."""
    if values.size == 0 or (int(values.min()) >= lo and int(values.max()) <= hi):
        return None
    return int(np.flatnonzero((values < lo) | (values > hi))[0])


def _clean_bucket(i: int, bucket: object, video: bool) -> dict[str, Any]:
    what = "a dict with id, resolution, aspect_ratio, pixels"
    keys = {"id", "resolution", *(_VIDEO_INTS if video else ())}
    if not isinstance(bucket, dict) or not keys <= set(bucket):
        fail(f"buckets[{i}]", what + (", frames, latent_frames, tokens" if video else ""), bucket,
             TypeError)  # fmt: skip
    res = bucket["resolution"]
    if not isinstance(res, tuple | list) or len(res) != 2:
        fail(f"buckets[{i}]['resolution']", "a (width, height) pair", res, TypeError)
    w = check_int(f"buckets[{i}]['resolution'][0]", res[0], min_value=1, max_value=MAX_IMAGE_SIDE)
    h = check_int(f"buckets[{i}]['resolution'][1]", res[1], min_value=1, max_value=MAX_IMAGE_SIDE)
    if check_int(f"buckets[{i}]['id']", bucket["id"]) != i:
        fail(f"buckets[{i}]['id']", f"{i} (ids are positions)", bucket["id"])
    out: dict[str, Any] = {"id": i, "resolution": (w, h), "aspect_ratio": w / h, "pixels": w * h}
    for key in _VIDEO_INTS if video else ():
        out[key] = check_int(f"buckets[{i}][{key!r}]", bucket[key], min_value=1)
    return out


def _clean_error(i: int, entry: object) -> tuple[str, str]:
    if isinstance(entry, str | bytes) or not isinstance(entry, Sequence) or len(entry) != 2:
        fail(f"errors[{i}]", "a (path, reason) pair", entry, TypeError)
    return str(entry[0]), str(entry[1])


@dataclass(frozen=True, eq=False)
class Manifest:
    """Sizes and bucket ids of a dataset, with the buckets and calculator behind them.

    Row ``i`` is sample ``i`` of the dataset (its index in a sampler). Arrays are read-only int64
    copies of shape ``(len(paths),)``; construction checks that lengths agree, that every id
    names a bucket, and that ``frames`` is given exactly when the calculator is a video one.

    Attributes:
        paths: Sample paths, as passed to the scan or joined to its directory.
        widths: Widths (as displayed: EXIF orientation or a video's rotation applied).
        heights: Heights.
        bucket_ids: Bucket of each sample, an index into ``buckets``.
        buckets: The calculator's buckets: dicts ``id``, ``resolution`` ``(w, h)``,
            ``aspect_ratio``, ``pixels`` (and ``frames``, ``latent_frames``, ``tokens`` for
            video), in id order.
        calculator: The calculator configuration (``config()`` of a
            :class:`~dataorder.diffusion.calculators.image.MultiTierBucketCalculator` or a
            :class:`~dataorder.diffusion.calculators.video.VideoBucketCalculator`); rebuild it with
            :meth:`calculator_object`.
        errors: ``(path, reason)`` of every file that could not be read or bucketed.
        frames: Frame counts of a video manifest; None for images.
    """

    paths: list[str]
    widths: npt.NDArray[np.int64]
    heights: npt.NDArray[np.int64]
    bucket_ids: npt.NDArray[np.int64]
    buckets: list[dict[str, Any]]
    calculator: dict[str, Any]
    errors: list[tuple[str, str]] = field(default_factory=list)
    frames: npt.NDArray[np.int64] | None = None

    def __post_init__(self) -> None:
        given: dict[str, object] = {"paths": self.paths, "errors": self.errors}  # as passed
        for name, what in (
            ("paths", "a list of str"),
            ("errors", "a list of (path, reason) pairs"),
        ):
            if isinstance(given[name], str | bytes) or not isinstance(given[name], Sequence):
                fail(name, what, given[name], TypeError)
        paths = []
        for i, p in enumerate(self.paths):
            if not isinstance(p, str | os.PathLike) or not isinstance(os.fspath(p), str):
                fail(f"paths[{i}]", "a str", p, TypeError)
            paths.append(os.fspath(p))
        if not isinstance(self.calculator, dict):
            fail("calculator", "a dict (the calculator's config())", self.calculator, TypeError)
        video = self.calculator.get("kind") == "video"
        if video != (self.frames is not None):
            what = "frame counts (the calculator is a video one)" if video else "None for images"
            fail("frames", what, self.frames, TypeError if video else ValueError)
        n = len(paths)
        names = ("widths", "heights", "bucket_ids", *(("frames",) if video else ()))
        columns = {}
        for name in names:
            col = _int_column(name, getattr(self, name))
            if col.shape != (n,):
                raise ValueError(
                    f"{name} must have one entry per path ({n}); got {col.shape[0]} entries"
                )
            columns[name] = col
        if not isinstance(self.buckets, list | tuple):
            fail("buckets", "a list of bucket dicts", self.buckets, TypeError)
        buckets = [_clean_bucket(i, b, video) for i, b in enumerate(self.buckets)]
        limits = {
            "widths": (1, MAX_IMAGE_SIDE),
            "heights": (1, MAX_IMAGE_SIDE),
            "bucket_ids": (0, len(buckets) - 1),
            "frames": (1, MAX_IMAGE_SIDE),
        }
        for name in names:
            lo, hi = limits[name]
            bad = _first_outside(columns[name], lo, hi)
            if bad is not None:
                fail(f"{name}[{bad}]", f"an int in [{lo}, {hi}]", int(columns[name][bad]))
        errors = [_clean_error(i, e) for i, e in enumerate(self.errors)]
        object.__setattr__(self, "paths", paths)
        for name, col in columns.items():
            object.__setattr__(self, name, col)
        object.__setattr__(self, "buckets", buckets)
        object.__setattr__(self, "calculator", dict(self.calculator))
        object.__setattr__(self, "errors", errors)

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def is_video(self) -> bool:
        """Whether this is a video manifest (it has a ``frames`` column)."""
        return self.frames is not None

    @property
    def columns(self) -> list[str]:
        """The file's columns: :data:`COLUMNS` or :data:`VIDEO_COLUMNS`."""
        return list(VIDEO_COLUMNS if self.is_video else COLUMNS)

    def calculator_object(self) -> Calculator:
        """Rebuild the calculator from :attr:`calculator` (:func:`calculator_from_config`)."""
        return calculator_from_config(self.calculator)

    def bucket_counts(self) -> npt.NDArray[np.int64]:
        """Samples per bucket: int64 array of shape ``(len(buckets),)``."""
        return np.bincount(self.bucket_ids, minlength=len(self.buckets)).astype(np.int64)


def _size_columns(
    paths: Sequence[Any], given: dict[str, Any], what: str
) -> dict[str, npt.NDArray[np.int64]]:
    """The size columns ``given`` (name: array-like) as int64 arrays, each 1-D, as long as
    ``paths`` and within ``[1, MAX_IMAGE_SIDE]`` (an error names the ``what`` and its path)."""
    shapes = {name: np.shape(v) for name, v in given.items()}
    if any(len(s) != 1 or s[0] != len(paths) for s in shapes.values()):
        names = ", ".join(["paths", *given][:-1]) + f" and {[*given][-1]}"
        raise ValueError(
            f"{names} must be 1-D and of one length; got {len(paths)}, "
            + ", ".join(str(s) for s in shapes.values())
        )
    cols = {name: _int_column(name, v) for name, v in given.items()}
    for name, col in cols.items():
        bad = _first_outside(col, 1, MAX_IMAGE_SIDE)
        if bad is not None:
            raise ValueError(
                f"{name}[{bad}] must be an int in [1, {MAX_IMAGE_SIDE}]; got "
                f"{name}[{bad}]={int(col[bad])} ({what} {str(paths[bad])!r})"
            )
    return cols


def build_manifest(
    paths: Sequence[str | os.PathLike[str]],
    widths: npt.ArrayLike,
    heights: npt.ArrayLike,
    calculator: Calculator,
    *,
    errors: Iterable[tuple[str, str]] = (),
    frames: npt.ArrayLike | None = None,
) -> Manifest:
    """A manifest from sizes you already have (e.g. a metadata table), bucketed by ``calculator``.

    With a :class:`~dataorder.diffusion.calculators.video.VideoBucketCalculator`, pass ``frames``
    too; every clip must have a bucket (a row is a training sample): a clip too short or too small
    for every bucket is refused, naming it. ``build_video_scan(...).assigned()`` instead lists such
    clips as errors, and :func:`manifest_from_scan` turns that into a manifest.

    Raises:
        TypeError: If ``calculator`` is not a calculator, or ``frames`` is missing for a video
            one (or given for an image one).
        ValueError: If the lengths differ, a size is not a positive int, or a clip has no
            bucket.
    """
    video = isinstance(calculator, VideoBucketCalculator)
    if not video and not isinstance(calculator, MultiTierBucketCalculator):
        what = "a MultiTierBucketCalculator or a VideoBucketCalculator"
        fail("calculator", what, calculator, TypeError)
    if video != (frames is not None):
        what = "frame counts (a video calculator)" if video else "None (an image calculator)"
        fail("frames", what, frames, TypeError)
    if isinstance(paths, str | bytes) or not isinstance(paths, Sequence):
        fail("paths", "a list of paths", paths, TypeError)
    given: dict[str, Any] = {"widths": widths, "heights": heights}
    if video:
        given["frames"] = frames
    cols = _size_columns(paths, given, "clip" if video else "image")
    w, h = cols["widths"], cols["heights"]
    if isinstance(calculator, VideoBucketCalculator):
        f = cols["frames"]
        ids = calculator.assign(w, h, f) if w.size else w
        if ids.size and int(ids.min()) < 0:
            i = int(np.flatnonzero(ids < 0)[0])
            one = build_video_scan([paths[i]], w[i : i + 1], h[i : i + 1], f[i : i + 1], calculator)
            path, reason = one.assigned().errors[0]
            raise ValueError(
                f"clip {path!r} has no bucket ({reason}); build_manifest needs every clip to "
                "have one: manifest_from_scan(build_video_scan(...)) lists such clips as errors"
            )
    else:
        ids = calculator.assign(w, h) if w.size else w
    return Manifest(
        paths=cast(list[str], list(paths)),  # Manifest converts path-likes, checks each
        widths=w,
        heights=h,
        bucket_ids=ids,
        buckets=calculator.get_all_buckets(),
        calculator=calculator.config(),
        errors=list(errors),
        frames=cols.get("frames"),
    )


def manifest_from_scan(scan: VideoScan) -> Manifest:
    """The manifest of a video scan: its clips that have a bucket; the others (too short, too
    small) join its errors with the reason (:meth:`~dataorder.diffusion.scan.videos.VideoScan.
    assigned`).

    Raises:
        TypeError: If ``scan`` is not a :class:`~dataorder.diffusion.scan.videos.VideoScan`.
    """
    if not isinstance(scan, VideoScan):
        fail("scan", "a VideoScan (from scan_videos or build_video_scan)", scan, TypeError)
    s = scan.assigned()
    return Manifest(
        paths=s.paths,
        widths=s.widths,
        heights=s.heights,
        bucket_ids=s.bucket_ids,
        buckets=s.buckets,
        calculator=s.calculator,
        errors=s.errors,
        frames=s.frames,
    )


def _escape(path: str) -> str:
    return _NEEDS_ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], path)


def _unescape(text: str, where: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in _UNESCAPES:
            raise ValueError(f"{where}: bad escape {m.group(0)!r} in path")
        return _UNESCAPES[m.group(1)]

    return _ESCAPED.sub(one, text) if "\\" in text else text


def _open_text(path: str, mode: str) -> TextIO:
    enc, err, nl = "utf-8", "surrogateescape", "\n"
    if mode == "w":
        if path.endswith(".gz"):
            # Level 6 (zlib's default) writes about 4x faster than gzip's 9 for 1-2 % more bytes.
            return gzip.open(path, "wt", 6, encoding=enc, errors=err, newline=nl)
        return open(path, "w", encoding=enc, errors=err, newline=nl)
    with open(path, "rb") as probe:
        gz = probe.read(2) == b"\x1f\x8b"
    if gz:
        return gzip.open(path, "rt", encoding=enc, errors=err, newline=nl)
    return open(path, encoding=enc, errors=err, newline=nl)


def write_manifest(manifest: Manifest, path: str | os.PathLike[str]) -> None:
    """Write ``manifest`` to ``path`` in the format of the module docstring (gzip if ``.gz``)."""
    if not isinstance(manifest, Manifest):
        fail("manifest", "a Manifest", manifest, TypeError)
    target = path_arg("path", path)
    header = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "count": len(manifest),
        "columns": manifest.columns,
        "calculator": manifest.calculator,
        "buckets": [{**b, "resolution": list(b["resolution"])} for b in manifest.buckets],
        "errors": [list(e) for e in manifest.errors],
    }
    numbers = [manifest.widths, manifest.heights]
    numbers += [] if manifest.frames is None else [manifest.frames]
    numbers += [manifest.bucket_ids]
    tmp = f"{target}.tmp-{os.getpid()}"
    if target.endswith(".gz"):
        tmp += ".gz"
    try:
        with _open_text(tmp, "w") as f:
            f.write(json.dumps(header, ensure_ascii=True) + "\n")
            rows = zip(*(c.tolist() for c in numbers), manifest.paths, strict=True)
            batch: list[str] = []
            for *ints, p in rows:
                batch.append("\t".join(map(str, ints)) + f"\t{_escape(p)}\n")
                if len(batch) >= 65536:
                    f.write("".join(batch))
                    batch.clear()
            f.write("".join(batch))
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _header_error(source: str, name: str, what: str, value: object) -> ValueError:
    """A header field's error in the library's template, prefixed with where it is."""
    return ValueError(f"{source}:1: {name} must be {what}; got {name}={value!r}")


def _read_header(f: TextIO, source: str) -> dict[str, Any]:
    """Line 1, parsed and checked field by field (the rows are checked by the caller)."""
    first = f.readline()
    try:
        header = json.loads(first)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}:1: not a dataorder manifest header ({exc})") from None
    except RecursionError:  # json's decoder recurses per level: a hostile line, not a header
        raise ValueError(
            f"{source}:1: not a dataorder manifest header (nested too deeply)"
        ) from None
    except ValueError as exc:  # an int of more digits than Python converts
        raise ValueError(f"{source}:1: not a dataorder manifest header ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != MANIFEST_FORMAT:
        raise ValueError(
            f"{source}:1: not a dataorder manifest (format is not {MANIFEST_FORMAT!r})"
        )
    version = header.get("version")
    if type(version) is not int or version != MANIFEST_VERSION:  # not True, not 1.0
        raise ValueError(
            f"{source}:1: manifest version must be {MANIFEST_VERSION}; got version={version!r}"
        )
    if header.get("columns") not in (COLUMNS, VIDEO_COLUMNS):
        raise ValueError(
            f"{source}:1: columns must be {COLUMNS} (images) or {VIDEO_COLUMNS} (videos); got "
            f"{header.get('columns')!r}"
        )
    if not first.endswith("\n"):
        raise ValueError(f"{source}:1: the header line has no newline (truncated file)")
    count = header.get("count")
    if type(count) is not int or count < 0:
        raise _header_error(source, "count", "a non-negative int", count)
    if not isinstance(header.get("calculator"), dict):
        what = "a dict (the calculator's config())"
        raise _header_error(source, "calculator", what, header.get("calculator"))
    video = header["columns"] == VIDEO_COLUMNS
    if (header["calculator"].get("kind") == "video") != video:
        kind = header["calculator"].get("kind", "image")
        raise ValueError(
            f"{source}:1: the columns are a{' video' if video else 'n image'} manifest's but the "
            f"calculator's kind is {kind!r}"
        )
    if not isinstance(header.get("buckets"), list):
        raise _header_error(source, "buckets", "a list of bucket dicts", header.get("buckets"))
    errors = header.get("errors", [])
    if not isinstance(errors, list):
        raise _header_error(source, "errors", "a list of [path, reason] pairs", errors)
    for i, entry in enumerate(errors):
        if not (
            isinstance(entry, list) and len(entry) == 2 and all(isinstance(v, str) for v in entry)
        ):
            raise _header_error(source, f"errors[{i}]", "a [path, reason] pair of str", entry)
    return header


def _read_rows(
    f: TextIO, source: str, columns: list[str], where: list[int]
) -> tuple[dict[str, list[int]], list[str]]:
    """The tab-separated rows; ``where[0]`` follows the line being read (for gzip errors)."""
    names = columns[:-1]
    ints: dict[str, list[int]] = {name: [] for name in names}
    lists = list(ints.values())
    paths: list[str] = []
    n = len(columns)
    for lineno, line in enumerate(f, start=2):
        where[0] = lineno
        if not line.endswith("\n"):  # write_manifest ends every row with one
            raise ValueError(
                f"{source}:{lineno}: the last row has no newline (truncated file); got {line!r}"
            )
        parts = line[:-1].split("\t", n - 1)
        if len(parts) != n:
            raise ValueError(f"{source}:{lineno}: expected {n} tab-separated columns")
        try:
            for values, text in zip(lists, parts, strict=False):
                values.append(int(text))
        except ValueError:
            raise ValueError(f"{source}:{lineno}: {', '.join(names)} must be ints") from None
        paths.append(_unescape(parts[-1], f"{source}:{lineno}"))
    where[0] = len(paths) + 2
    return ints, paths


def _row_column(
    source: str, name: str, values: list[int], lo: int, hi: int
) -> npt.NDArray[np.int64]:
    """``values`` as int64, or a ValueError naming the first row outside ``[lo, hi]``."""
    if values and (min(values) < lo or max(values) > hi):  # before int64: 10**30 would overflow
        bad = next(i for i, v in enumerate(values) if not lo <= v <= hi)
        raise ValueError(
            f"{source}:{bad + 2}: {name} must be an int in [{lo}, {hi}]; got {name}={values[bad]}"
        )
    return np.array(values, dtype=np.int64)


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read a manifest written by :func:`write_manifest` (gzip detected from the content).

    Checks the format, version, every header field, the row count and columns, that every row
    ends in a newline (a file cut inside its last row is refused, not read short), and that the
    stored buckets are the ones the stored calculator configuration builds (so a manifest from
    another bucket algorithm is refused rather than silently misread).

    Raises:
        ValueError: If the file is not a valid manifest, or its gzip stream is corrupt or
            truncated; the message is ``"<path>:<line>: <what is wrong>"`` and names the field.
        OSError: If the file cannot be opened.
    """
    source = path_arg("path", path)
    where = [1]  # the line being read
    try:
        with _open_text(source, "r") as f:
            header = _read_header(f, source)
            ints, paths = _read_rows(f, source, header["columns"], where)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(
            f"{source}:{where[0]}: corrupt or truncated gzip data ({type(exc).__name__}: {exc})"
        ) from None
    if len(paths) != header["count"]:
        raise ValueError(
            f"{source}:{len(paths) + 2}: header says count={header['count']} rows; found "
            f"{len(paths)} (truncated or edited file)"
        )
    video = "frames" in ints
    try:
        buckets = [_clean_bucket(i, b, video) for i, b in enumerate(header["buckets"])]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}:1: {exc}") from None
    top = {"bucket_id": len(buckets) - 1}
    lowest = {"bucket_id": 0}
    col = {
        name: _row_column(source, name, v, lowest.get(name, 1), top.get(name, MAX_IMAGE_SIDE))
        for name, v in ints.items()
    }
    manifest = Manifest(
        paths=paths,
        widths=col["width"],
        heights=col["height"],
        bucket_ids=col["bucket_id"],
        buckets=buckets,
        calculator=header["calculator"],
        errors=[(p, r) for p, r in header.get("errors", [])],
        frames=col.get("frames"),
    )
    _check_rebuilt(source, manifest)
    return manifest


def _check_rebuilt(source: str, manifest: Manifest) -> None:
    """Refuse a manifest whose stored buckets are not the ones its calculator config builds."""
    try:
        rebuilt = manifest.calculator_object().get_all_buckets()
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{source}:1: calculator is not a valid calculator config: {exc}"
        ) from None
    if rebuilt != manifest.buckets:
        raise ValueError(
            f"{source}:1: the stored buckets differ from those its calculator config builds "
            "(written by another bucket algorithm?); rescan or rebuild the manifest"
        )
