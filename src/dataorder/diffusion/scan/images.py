"""Image sizes from headers, and their buckets, into a manifest.

:func:`scan_images` reads the size of every image in a folder (recursively) or in a list of
paths. Only headers are read: Pillow's format plugins parse the header and stop, no pixel is
decoded, so Pillow's decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``, which guards
decoding) does not apply (NOTE [ Headers only ]). Files are read by a thread pool, with a progress
bar (rich or tqdm, if installed) or your own callback (:mod:`dataorder.diffusion.scan.files`). A
file that cannot be read (missing, truncated, not an image, a header claiming a side outside
``[1, MAX_IMAGE_SIDE]``, or not a regular file: a FIFO, socket, device or broken link, never
opened, see NOTE [ Regular files only ] in :mod:`~dataorder.diffusion.scan.files`) is reported
in ``Manifest.errors`` with the reason and skipped; it never stops the scan. Sizes are as
displayed: with ``exif_orientation=True`` (the default) an EXIF orientation of 5 to 8 (a
90-degree turn) swaps width and height, as ``PIL.ImageOps.exif_transpose`` does when the image
is loaded.

The result is a :class:`~dataorder.diffusion.scan.manifest.Manifest`: per image its path, width,
height and bucket id, plus the bucket list and the calculator configuration that produced the
ids. Its file format is in :mod:`dataorder.diffusion.scan.manifest`; the manifest names are also
importable from here.

Example:
    >>> import tempfile, os
    >>> from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
    >>> from dataorder.diffusion.scan.images import build_manifest, read_manifest, write_manifest
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

import os
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

from dataorder._validate import check_bool, fail
from dataorder.diffusion.buckets.crop import require_pillow
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.scan.files import (
    Progress,
    check_regular_file,
    list_files,
    path_arg,
    read_files,
    scan_paths,
    split_results,
    workers_arg,
)
from dataorder.diffusion.scan.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    Manifest,
    build_manifest,
    read_manifest,
    write_manifest,
)

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


def list_images(
    directory: str | os.PathLike[str], extensions: Iterable[str] = IMAGE_EXTENSIONS
) -> list[str]:
    """Every file under ``directory`` (recursively) whose name ends in one of ``extensions``.

    Endings are compared case-insensitively. The result is sorted, so a dataset's image order
    (its sample indices) does not depend on the file system's listing order.
    """
    return list_files(directory, extensions)


# NOTE [ Headers only ]
# Image.open() refuses any image over twice PIL.Image.MAX_IMAGE_PIXELS (about 179 MP) after it
# has parsed the header, to protect the decoder. A scan decodes nothing, so that limit would only
# turn large, valid images into "unreadable" ones; and changing the global limit would race with
# other threads of the program that do decode. _open_header runs Image.open's own loop over the
# registered format plugins (Image.ID, Image.OPEN) without that check. A few multi-frame formats
# (MPO, animated GIF and WebP) check frame sizes themselves; those still land in Manifest.errors.
# Sides are then checked against MAX_IMAGE_SIDE here, so a header that claims an absurd size is
# that file's error, never the scan's.


def _open_header(image_module: Any, fp: Any, path: str) -> Any:
    """The image object Pillow's ``Image.open`` returns, minus its pixel limit (see NOTE [
    Headers only ])."""
    prefix = fp.read(16)
    for fmt in list(image_module.ID):
        factory, accept = image_module.OPEN[fmt]
        try:
            verdict = accept(prefix) if accept else True
            if isinstance(verdict, str) or not verdict:  # a str is Pillow's "almost" (a warning)
                continue
            fp.seek(0)
            return factory(fp, path)
        except (SyntaxError, IndexError, TypeError, struct.error):
            continue  # not this format after all: try the next, as Image.open does
    raise image_module.UnidentifiedImageError(f"cannot identify image file {path!r}")


def read_image_size(
    path: str | os.PathLike[str], *, exif_orientation: bool = True
) -> tuple[int, int]:
    """``(width, height)`` of one image from its header, without decoding pixels.

    Pillow's decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``) does not apply: nothing
    is decoded (NOTE [ Headers only ]).

    Raises:
        ImportError: If Pillow is not installed.
        OSError: If the file cannot be read or is not an image Pillow recognises;
            :class:`~dataorder.diffusion.scan.files.NotARegularFileError`, without opening it,
            if it is not a regular file (a FIFO, socket, device, directory, broken link).
        ValueError: If the header claims a side outside ``[1, MAX_IMAGE_SIDE]``; the message
            names the file.
    """
    image_module = require_pillow("read_image_size")
    image_module.init()  # every plugin registered (returns at once after the first call)
    source = path_arg("path", path)
    check_regular_file(source)  # never opens a FIFO (NOTE [ Regular files only ])
    with open(source, "rb") as fp:
        im = _open_header(image_module, fp, source)
        try:
            width, height = (int(v) for v in im.size)
            # PNG's getexif() decodes the image when the eXIf chunk is not in the header: skip it
            header_exif = not (im.format == "PNG" and "exif" not in im.info)
            if exif_orientation and header_exif and im.getexif().get(0x0112, 1) in (5, 6, 7, 8):
                width, height = height, width
        finally:
            im.close()
    if not (1 <= width <= MAX_IMAGE_SIDE and 1 <= height <= MAX_IMAGE_SIDE):
        raise ValueError(
            f"{source}: the header claims {width}x{height} pixels; each side must be an int in "
            f"[1, {MAX_IMAGE_SIDE}]"
        )
    return width, height


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
        progress: True for a progress bar on stderr (rich, else tqdm; none if neither is
            installed), False for silence, or a callable ``progress(done, total)`` called as
            files complete.
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
    n_workers = workers_arg(workers)
    paths = scan_paths(paths_or_dir, extensions)
    require_pillow("scan_images").init()  # register every plugin once, not racing in threads

    def read(path: str) -> tuple[int, int]:
        return read_image_size(path, exif_orientation=exif)

    results = read_files(
        paths,
        read,
        workers=n_workers,
        progress=progress,
        label="reading image headers",
        chunk_range=(16, 512),
    )
    good, sizes, errors = split_results(paths, results)
    widths = np.array([w for w, _ in sizes], dtype=np.int64)
    heights = np.array([h for _, h in sizes], dtype=np.int64)
    return build_manifest(good, widths, heights, calculator, errors=errors)
