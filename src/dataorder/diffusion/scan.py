"""Image sizes from headers, their buckets, and the manifest file that stores them.

:func:`scan_images` reads the size of every image in a folder (recursively) or in a list of
paths. Only headers are read: Pillow's ``Image.open`` parses the header and stops, no pixel is
decoded. Files are read by a thread pool, with a progress bar (rich, if installed) or your own
callback. A file that cannot be read (missing, truncated, not an image) is reported in
``Manifest.errors`` with the reason and skipped; it never stops the scan. Sizes are as displayed:
with ``exif_orientation=True`` (the default) an EXIF orientation of 5 to 8 (a 90-degree turn)
swaps width and height, as ``PIL.ImageOps.exif_transpose`` does when the image is loaded.

The result is a :class:`Manifest`: per image its path, width, height and bucket id, plus the
bucket list and the calculator configuration that produced the ids. The bucket samplers read it.

**File format** (:func:`write_manifest`, :func:`read_manifest`): UTF-8 text, gzip-compressed if
the file name ends in ``.gz``. Line 1 is one JSON object (ASCII only)::

    {"format": "dataorder.manifest", "version": 1, "count": 3,
     "columns": ["width", "height", "bucket_id", "path"],
     "calculator": {"version": 1, "compat": "default", "quantization": 64, ...},
     "buckets": [{"id": 0, "resolution": [576, 1728], "aspect_ratio": 0.333, "pixels": 995328},
                 ...],
     "errors": [["broken.jpg", "UnidentifiedImageError: cannot identify image file ..."]]}

followed by exactly ``count`` rows of tab-separated ``width  height  bucket_id  path``. The path
is the last column, so it may hold spaces, commas, quotes and any Unicode; backslash, tab,
newline and carriage return are escaped as ``\\\\``, ``\\t``, ``\\n``, ``\\r``, and bytes that are
not UTF-8 (possible in POSIX file names) are kept as they are (``surrogateescape``). Rows are
plain text, so ``cut``, ``awk`` and ``pandas.read_csv(sep="\\t", skiprows=1, quoting=3)`` can read
them. Writing goes to a temporary file that replaces the target at the end, so a crash never
leaves a half-written manifest under the final name.

Example:
    >>> import tempfile, os
    >>> from dataorder.diffusion.buckets import MultiTierBucketCalculator
    >>> from dataorder.diffusion.scan import build_manifest, read_manifest, write_manifest
    >>> calc = MultiTierBucketCalculator.from_preset("512p")
    >>> m = build_manifest(["a b.jpg", "ü,2.png"], [640, 300], [480, 900], calc)
    >>> [m.buckets[i]["resolution"] for i in m.bucket_ids]
    [(576, 448), (256, 768)]
    >>> path = os.path.join(tempfile.mkdtemp(), "manifest.tsv")
    >>> write_manifest(m, path)
    >>> read_manifest(path).paths
    ['a b.jpg', 'ü,2.png']
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_int, fail
from dataorder.diffusion.buckets import MultiTierBucketCalculator
from dataorder.diffusion.crop import require_pillow

__all__ = [
    "IMAGE_EXTENSIONS",
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "Manifest",
    "build_manifest",
    "list_images",
    "read_image_size",
    "read_manifest",
    "scan_images",
    "write_manifest",
]

MANIFEST_FORMAT = "dataorder.manifest"
MANIFEST_VERSION = 1
_COLUMNS = ["width", "height", "bucket_id", "path"]

#: File name endings :func:`list_images` picks up (compared case-insensitively).
IMAGE_EXTENSIONS: tuple[str, ...] = (
    ".avif",
    ".bmp",
    ".gif",
    ".jpeg",
    ".jpg",
    ".png",
    ".tif",
    ".tiff",
    ".webp",
)

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {v[1]: k for k, v in _ESCAPES.items()}
_NEEDS_ESCAPE = re.compile(r"[\\\t\n\r]")
_ESCAPED = re.compile(r"\\(.?)")

Progress = bool | Callable[[int, int], None]


def _int_column(name: str, values: object) -> npt.NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer) or arr.ndim != 1:
        fail(name, "a 1-D array of ints", values, TypeError)
    out = arr.astype(np.int64)  # always a copy: the manifest owns its arrays
    out.flags.writeable = False
    return out


def _clean_bucket(i: int, bucket: object) -> dict[str, Any]:
    if not isinstance(bucket, dict) or not {"id", "resolution"} <= set(bucket):
        fail(f"buckets[{i}]", "a dict with id, resolution, aspect_ratio, pixels", bucket, TypeError)
    w, h = (int(v) for v in bucket["resolution"])
    if int(bucket["id"]) != i:
        fail(f"buckets[{i}]['id']", f"{i} (ids are positions)", bucket["id"])
    return {"id": i, "resolution": (w, h), "aspect_ratio": w / h, "pixels": w * h}


@dataclass(frozen=True, eq=False)
class Manifest:
    """Image sizes and bucket ids of a dataset, with the buckets and calculator behind them.

    Row ``i`` is image ``i`` of the dataset (its index in a sampler). Arrays are read-only int64
    copies of shape ``(len(paths),)``; construction checks that lengths agree and that every id
    names a bucket.

    Attributes:
        paths: Image paths, as passed to :func:`scan_images` or joined to its directory.
        widths: Image widths (as displayed, see the module docstring).
        heights: Image heights.
        bucket_ids: Bucket of each image, an index into ``buckets``.
        buckets: The calculator's buckets: dicts ``id``, ``resolution`` ``(w, h)``,
            ``aspect_ratio``, ``pixels``, in id order.
        calculator: The calculator configuration
            (:meth:`~dataorder.diffusion.buckets.MultiTierBucketCalculator.config`); rebuild it with
            :meth:`calculator_object`.
        errors: ``(path, reason)`` of every file that could not be read.
    """

    paths: list[str]
    widths: npt.NDArray[np.int64]
    heights: npt.NDArray[np.int64]
    bucket_ids: npt.NDArray[np.int64]
    buckets: list[dict[str, Any]]
    calculator: dict[str, Any]
    errors: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        paths = [os.fspath(p) for p in self.paths]
        for i, p in enumerate(paths):
            if not isinstance(p, str):
                fail(f"paths[{i}]", "a str", p, TypeError)
        n = len(paths)
        columns = {}
        for name in ("widths", "heights", "bucket_ids"):
            col = _int_column(name, getattr(self, name))
            if col.shape != (n,):
                raise ValueError(
                    f"{name} must have one entry per path ({n}); got {col.shape[0]} entries"
                )
            columns[name] = col
        buckets = [_clean_bucket(i, b) for i, b in enumerate(self.buckets)]
        if n:
            if min(columns["widths"].min(), columns["heights"].min()) < 1:
                raise ValueError("widths and heights must be positive ints")
            ids = columns["bucket_ids"]
            if ids.min() < 0 or ids.max() >= len(buckets):
                bad = int(np.flatnonzero((ids < 0) | (ids >= len(buckets)))[0])
                fail(f"bucket_ids[{bad}]", f"an int in [0, {len(buckets) - 1}]", int(ids[bad]))
        if not isinstance(self.calculator, dict):
            fail(
                "calculator",
                "a dict (MultiTierBucketCalculator.config())",
                self.calculator,
                TypeError,
            )
        errors = [(str(p), str(r)) for p, r in self.errors]
        object.__setattr__(self, "paths", paths)
        for name, col in columns.items():
            object.__setattr__(self, name, col)
        object.__setattr__(self, "buckets", buckets)
        object.__setattr__(self, "calculator", dict(self.calculator))
        object.__setattr__(self, "errors", errors)

    def __len__(self) -> int:
        return len(self.paths)

    def calculator_object(self) -> MultiTierBucketCalculator:
        """Rebuild the calculator from :attr:`calculator`."""
        return MultiTierBucketCalculator.from_config(self.calculator)

    def bucket_counts(self) -> npt.NDArray[np.int64]:
        """Images per bucket: int64 array of shape ``(len(buckets),)``."""
        return np.bincount(self.bucket_ids, minlength=len(self.buckets)).astype(np.int64)


def build_manifest(
    paths: Sequence[str | os.PathLike[str]],
    widths: npt.ArrayLike,
    heights: npt.ArrayLike,
    calculator: MultiTierBucketCalculator,
    *,
    errors: Iterable[tuple[str, str]] = (),
) -> Manifest:
    """A manifest from sizes you already have (e.g. a metadata table), bucketed by ``calculator``.

    Raises:
        TypeError: If ``calculator`` is not a :class:`MultiTierBucketCalculator`.
        ValueError: If the lengths differ or a size is not a positive int.
    """
    if not isinstance(calculator, MultiTierBucketCalculator):
        fail("calculator", "a MultiTierBucketCalculator", calculator, TypeError)
    w = np.asarray(widths)
    h = np.asarray(heights)
    if w.ndim != 1 or w.shape != h.shape or w.shape[0] != len(paths):
        raise ValueError(
            "paths, widths and heights must be 1-D and of one length; got "
            f"{len(paths)}, {w.shape}, {h.shape}"
        )
    ids = calculator.assign(w.astype(np.int64), h.astype(np.int64)) if w.size else w
    return Manifest(
        paths=[os.fspath(p) for p in paths],
        widths=w,
        heights=h,
        bucket_ids=ids,
        buckets=calculator.get_all_buckets(),
        calculator=calculator.config(),
        errors=list(errors),
    )


def list_images(
    directory: str | os.PathLike[str], extensions: Iterable[str] = IMAGE_EXTENSIONS
) -> list[str]:
    """Every file under ``directory`` (recursively) whose name ends in one of ``extensions``.

    Endings are compared case-insensitively. The result is sorted, so a dataset's image order
    (its sample indices) does not depend on the file system's listing order.
    """
    root = os.fspath(directory)
    if not os.path.isdir(root):
        fail("directory", "an existing directory", root)
    ends = tuple(e.lower() for e in extensions)
    found: list[str] = []
    for dirpath, _dirnames, filenames in os.walk(root):
        found.extend(os.path.join(dirpath, f) for f in filenames if f.lower().endswith(ends))
    found.sort()
    return found


def read_image_size(
    path: str | os.PathLike[str], *, exif_orientation: bool = True
) -> tuple[int, int]:
    """``(width, height)`` of one image from its header, without decoding pixels.

    Raises:
        ImportError: If Pillow is not installed.
        OSError: If the file cannot be read or is not an image Pillow recognises.
    """
    image_module = require_pillow("read_image_size")
    with image_module.open(path) as im:
        width, height = im.size
        # PNG's getexif() decodes the image when the eXIf chunk is not in the header; skip it.
        header_exif = not (im.format == "PNG" and "exif" not in im.info)
        if exif_orientation and header_exif and im.getexif().get(0x0112, 1) in (5, 6, 7, 8):
            width, height = height, width
    return int(width), int(height)


def _read_chunk(paths: Sequence[str], exif: bool) -> list[tuple[int, int] | str]:
    out: list[tuple[int, int] | str] = []
    for p in paths:
        try:
            out.append(read_image_size(p, exif_orientation=exif))
        except Exception as exc:  # any failure of one file is that file's error, not the scan's
            out.append(f"{type(exc).__name__}: {exc}")
    return out


class _Reporter:
    """Progress through a rich bar (if rich is installed), a callback, or not at all."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.total = total
        self.done = 0
        self.callback: Callable[[int, int], None] | None = None
        self.bar: Any = None
        if callable(progress):
            self.callback = progress
        elif check_bool("progress", progress) and total:
            try:
                from rich.console import Console
                from rich.progress import Progress as RichProgress
            except ImportError:
                return
            self.bar = RichProgress(console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("reading image headers", total=total)
            self.bar.start()

    def advance(self, n: int) -> None:
        self.done += n
        if self.callback is not None:
            self.callback(self.done, self.total)
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def scan_images(
    paths_or_dir: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    calculator: MultiTierBucketCalculator,
    *,
    workers: int | None = None,
    progress: Progress = True,
    exif_orientation: bool = True,
    extensions: Iterable[str] = IMAGE_EXTENSIONS,
) -> Manifest:
    """Read image sizes from headers in parallel and bucket them.

    Args:
        paths_or_dir: A directory (scanned recursively for ``extensions``, in sorted order) or
            an iterable of image paths (kept in the given order).
        calculator: Assigns the buckets; its configuration goes into the manifest.
        workers: Reader threads; None means ``min(32, 4 * os.cpu_count())``, more threads than
            cores because on network file systems each header read mostly waits. On a local disk
            with a warm cache, parsing holds the GIL and ``os.cpu_count()`` threads are as fast.
            1 reads in the calling thread.
        progress: True for a rich progress bar on stderr (none if rich is not installed), False
            for silence, or a callable ``progress(done, total)`` called as files complete.
        exif_orientation: Report sizes as displayed (see the module docstring).
        extensions: File endings picked up when scanning a directory.

    Returns:
        A :class:`Manifest` of the readable images, in input order, with ``errors`` listing
        ``(path, reason)`` for the others.

    Raises:
        ImportError: If Pillow is not installed.
        TypeError: For a bad argument type.
        ValueError: If ``paths_or_dir`` is a string that is not a directory.
    """
    if not isinstance(calculator, MultiTierBucketCalculator):
        fail("calculator", "a MultiTierBucketCalculator", calculator, TypeError)
    exif = check_bool("exif_orientation", exif_orientation)
    n_workers = check_int(
        "workers", min(32, 4 * (os.cpu_count() or 1)) if workers is None else workers, min_value=1
    )
    if isinstance(paths_or_dir, str | os.PathLike):
        root = os.fspath(paths_or_dir)
        if not os.path.isdir(root):
            fail("paths_or_dir", "a directory or an iterable of paths", root)
        paths = list_images(root, extensions)
    else:
        paths = [os.fspath(p) for p in paths_or_dir]
    require_pillow("scan_images").init()  # register every plugin once, not racing in threads

    # Chunks of 16 to 512 files: about 8 per thread, so threads finish together.
    size = max(16, min(512, len(paths) // (n_workers * 8)))
    chunks = [paths[i : i + size] for i in range(0, len(paths), size)]
    results: list[list[tuple[int, int] | str]] = [[] for _ in chunks]
    reporter = _Reporter(progress, len(paths))
    try:
        if n_workers == 1:
            for i, chunk in enumerate(chunks):
                results[i] = _read_chunk(chunk, exif)
                reporter.advance(len(chunk))
        else:
            with ThreadPoolExecutor(max_workers=n_workers) as pool:
                futures = {pool.submit(_read_chunk, c, exif): i for i, c in enumerate(chunks)}
                for future in as_completed(futures):
                    i = futures[future]
                    results[i] = future.result()
                    reporter.advance(len(chunks[i]))
    finally:
        reporter.close()

    good: list[str] = []
    widths: list[int] = []
    heights: list[int] = []
    errors: list[tuple[str, str]] = []
    for chunk, result in zip(chunks, results, strict=True):
        for p, r in zip(chunk, result, strict=True):
            if isinstance(r, str):
                errors.append((p, r))
            else:
                good.append(p)
                widths.append(r[0])
                heights.append(r[1])
    return build_manifest(
        good,
        np.array(widths, dtype=np.int64),
        np.array(heights, dtype=np.int64),
        calculator,
        errors=errors,
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
    target = os.fspath(path)
    header = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "count": len(manifest),
        "columns": _COLUMNS,
        "calculator": manifest.calculator,
        "buckets": [{**b, "resolution": list(b["resolution"])} for b in manifest.buckets],
        "errors": [list(e) for e in manifest.errors],
    }
    tmp = f"{target}.tmp-{os.getpid()}"
    if target.endswith(".gz"):
        tmp += ".gz"
    try:
        with _open_text(tmp, "w") as f:
            f.write(json.dumps(header, ensure_ascii=True) + "\n")
            rows = zip(
                manifest.widths.tolist(),
                manifest.heights.tolist(),
                manifest.bucket_ids.tolist(),
                manifest.paths,
                strict=True,
            )
            batch: list[str] = []
            for w, h, b, p in rows:
                batch.append(f"{w}\t{h}\t{b}\t{_escape(p)}\n")
                if len(batch) >= 65536:
                    f.write("".join(batch))
                    batch.clear()
            f.write("".join(batch))
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read a manifest written by :func:`write_manifest` (gzip detected from the content).

    Checks the format, version, row count and columns, and that the stored buckets are the ones
    the stored calculator configuration builds (so a manifest from another bucket algorithm is
    refused rather than silently misread).

    Raises:
        ValueError: If the file is not a valid manifest; the message names the line.
    """
    source = os.fspath(path)
    with _open_text(source, "r") as f:
        first = f.readline()
        try:
            header = json.loads(first)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}:1: not a dataorder manifest header ({exc})") from None
        if not isinstance(header, dict) or header.get("format") != MANIFEST_FORMAT:
            raise ValueError(
                f"{source}:1: not a dataorder manifest (format is not {MANIFEST_FORMAT!r})"
            )
        if header.get("version") != MANIFEST_VERSION:
            raise ValueError(
                f"{source}:1: manifest version must be {MANIFEST_VERSION}; "
                f"got version={header.get('version')!r}"
            )
        if header.get("columns") != _COLUMNS:
            raise ValueError(
                f"{source}:1: columns must be {_COLUMNS}; got {header.get('columns')!r}"
            )
        widths: list[int] = []
        heights: list[int] = []
        ids: list[int] = []
        paths: list[str] = []
        for lineno, line in enumerate(f, start=2):
            parts = line.removesuffix("\n").split("\t", 3)
            if len(parts) != 4:
                raise ValueError(f"{source}:{lineno}: expected 4 tab-separated columns")
            try:
                widths.append(int(parts[0]))
                heights.append(int(parts[1]))
                ids.append(int(parts[2]))
            except ValueError:
                raise ValueError(
                    f"{source}:{lineno}: width, height, bucket_id must be ints"
                ) from None
            paths.append(_unescape(parts[3], f"{source}:{lineno}"))
    if len(paths) != header.get("count"):
        raise ValueError(
            f"{source}: header says count={header.get('count')!r} rows; found {len(paths)} "
            "(truncated or edited file)"
        )
    manifest = Manifest(
        paths=paths,
        widths=np.array(widths, dtype=np.int64),
        heights=np.array(heights, dtype=np.int64),
        bucket_ids=np.array(ids, dtype=np.int64),
        buckets=header["buckets"],
        calculator=header["calculator"],
        errors=[(str(p), str(r)) for p, r in header.get("errors", [])],
    )
    rebuilt = manifest.calculator_object().get_all_buckets()
    if rebuilt != manifest.buckets:
        raise ValueError(
            f"{source}: the stored buckets differ from those its calculator config builds "
            "(written by another bucket algorithm?); rescan or rebuild the manifest"
        )
    return manifest
