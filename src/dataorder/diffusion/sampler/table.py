"""Which samples share a bucket, held as compact arrays. No torch here.

A bucket is one training shape: a ``(width, height)`` resolution and an aspect name, and for
video a frame count too. Every sample belongs to exactly one bucket, and the bucket sampler
(:mod:`dataorder.diffusion.sampler.sampler`) only needs, per bucket, its size, its shape and the
dataset indices it holds. Those live in a :class:`BucketTable`, a CSR layout of two int64 arrays
whatever the dataset size:

* ``indices`` (shape ``(N,)``): every dataset index, grouped by bucket, in dataset order inside a
  bucket;
* ``offsets`` (shape ``(B + 1,)``): bucket ``j`` holds ``indices[offsets[j]:offsets[j + 1]]``.

Buckets are sorted by pixel count ascending (video buckets: by latent tokens), ties in order of
first appearance in the dataset (NeMo Automodel's ``sorted_bucket_keys``). Ten million samples cost
80 MB here; NeMo's dict of Python lists of indices costs about 360 MB (a pointer and an int object
per sample). The multi-resolution dataset (:mod:`dataorder.diffusion.sampler.dataset`) builds its
table with the functions here.

Example:
    >>> from dataorder.diffusion.sampler.table import table_from_ids
    >>> table, _ = table_from_ids([1, 1, 0, 1, 0], [(256, 256), (320, 192)])
    >>> [table.key(j) for j in range(table.num_buckets)]  # 320x192 has fewer pixels: first
    [('wide', (320, 192)), ('square', (256, 256))]
    >>> table.bucket_indices(0).tolist(), table.bucket_indices(1).tolist()
    ([0, 1, 3], [2, 4])
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int
from dataorder.diffusion.scan.files import path_arg

__all__ = [
    "ASPECT_SQUARE_MAX",
    "ASPECT_TALL_BELOW",
    "BucketKey",
    "BucketTable",
    "IntArray",
    "as_int_array",
    "aspect_name",
    "bucket_arrays",
    "group_by_bucket",
    "load_nemo_cache",
    "narrow",
    "sort_key",
    "table_from_buckets",
    "table_from_ids",
    "table_from_items",
]

#: Aspect ratios (w / h) below this are "tall" (NeMo Automodel's threshold).
ASPECT_TALL_BELOW = 0.85
#: Aspect ratios above this are "wide"; in between is "square".
ASPECT_SQUARE_MAX = 1.18

IntArray = npt.NDArray[np.int64]
#: NeMo's bucket key ``(aspect_name, (width, height))``; a video bucket adds its frame count.
BucketKey = tuple[str, tuple[int, int]] | tuple[str, tuple[int, int], int]


def aspect_name(aspect_ratio: float) -> str:
    """Return ``"tall"``, ``"square"`` or ``"wide"`` for a width / height ratio (NeMo's rule)."""
    if aspect_ratio < ASPECT_TALL_BELOW:
        return "tall"
    if aspect_ratio > ASPECT_SQUARE_MAX:
        return "wide"
    return "square"


def as_int_array(name: str, values: object, ndim: int) -> IntArray:
    arr = np.asarray(values)
    if arr.size == 0 and arr.dtype == np.float64:  # np.asarray([]) is float
        arr = arr.astype(np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be an array of ints; got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s); got shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


def sort_key(
    resolutions: npt.NDArray[np.int64],
    frames: npt.NDArray[np.int64] | None = None,
    tokens: npt.NDArray[np.int64] | None = None,
) -> IntArray:
    """What buckets are sorted by (ascending, ties by first appearance): latent tokens if
    known, else the volume ``pixels x frames`` of a video bucket, else pixels."""
    if tokens is not None:
        return np.asarray(tokens, dtype=np.int64)
    key: IntArray = resolutions[:, 0] * resolutions[:, 1]
    return key if frames is None else key * frames


def group_by_bucket(
    bucket_ids: npt.ArrayLike, pixels: npt.ArrayLike
) -> tuple[IntArray, IntArray, IntArray]:
    """Group dataset indices by bucket, buckets sorted by pixels then first appearance.

    Args:
        bucket_ids: Shape ``(N,)``, the bucket of every sample, ints in ``[0, K)``.
        pixels: Shape ``(K,)``, the sort key of every possible bucket: its pixel count, or
            :func:`sort_key` (tokens) for video buckets.

    Returns:
        ``(order, offsets, indices)``: ``order`` (shape ``(B,)``) lists the ``B`` buckets that
        hold samples, fewest pixels first and, among equal pixel counts, the one whose first
        sample comes first; ``offsets`` (shape ``(B + 1,)``) and ``indices`` (shape ``(N,)``)
        are the CSR grouping: the samples of ``order[j]`` are
        ``indices[offsets[j]:offsets[j + 1]]``, in dataset order.

    Raises:
        TypeError: If an argument is not an int array.
        ValueError: If a bucket id is outside ``[0, K)``.
    """
    ids = as_int_array("bucket_ids", bucket_ids, 1)
    pix = as_int_array("pixels", pixels, 1)
    k = pix.size
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= k):
        raise ValueError(
            f"bucket_ids must lie in [0, {k - 1}]; got min={int(ids.min())}, max={int(ids.max())}"
        )
    counts = np.bincount(ids, minlength=k).astype(np.int64)
    # A stable sort keeps dataset order inside each bucket; numpy radix-sorts 16-bit keys, which
    # makes grouping 10 M samples a linear pass rather than an N log N merge sort.
    keys = ids.astype(np.uint16) if k <= 1 << 16 else ids
    by_id = np.argsort(keys, kind="stable").astype(np.int64, copy=False)
    starts = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    present = np.flatnonzero(counts)
    first = by_id[starts[present]]
    order = present[np.lexsort((first, pix[present]))].astype(np.int64)
    offsets = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(counts[order], out=offsets[1:])
    if np.array_equal(order, present):
        return order, offsets, by_id
    indices = np.concatenate([by_id[starts[b] : starts[b + 1]] for b in order.tolist()])
    return order, offsets, indices.astype(np.int64, copy=False)


@dataclass(frozen=True, eq=False)
class BucketTable:
    """The buckets of a dataset in sorted order, with their samples in CSR form.

    Build it with :func:`group_by_bucket` through a :class:`BaseMultiresolutionDataset`
    constructor, or with :meth:`from_nemo_groups`.

    Attributes:
        resolutions: Shape ``(B, 2)``, ``(width, height)`` of each bucket.
        aspect_names: ``B`` names, ``"tall"``, ``"square"`` or ``"wide"``.
        aspect_ratios: Shape ``(B,)``, the bucket's aspect ratio (for a NeMo cache: the one
            recorded on its first sample).
        offsets: Shape ``(B + 1,)``: bucket ``j`` holds ``indices[offsets[j]:offsets[j + 1]]``.
        indices: Shape ``(N,)``, dataset indices grouped by bucket, dataset order inside each.
        frames: Shape ``(B,)``, each video bucket's frame count; None for image buckets.
        tokens: Shape ``(B,)``, each video bucket's latent tokens (what its batch size is
            computed from), or None.
    """

    resolutions: IntArray
    aspect_names: tuple[str, ...]
    aspect_ratios: npt.NDArray[np.float64]
    offsets: IntArray
    indices: IntArray
    frames: IntArray | None = None
    tokens: IntArray | None = None

    def __post_init__(self) -> None:
        b = len(self.aspect_names)
        if b == 0 or self.indices.size == 0:
            raise ValueError(
                f"dataset must hold at least one sample; got {self.indices.size} samples in "
                f"{b} buckets"
            )
        if self.resolutions.shape != (b, 2) or self.aspect_ratios.shape != (b,):
            raise ValueError(
                f"resolutions must have shape ({b}, 2) and aspect_ratios ({b},); got "
                f"{self.resolutions.shape} and {self.aspect_ratios.shape}"
            )
        if self.offsets.shape != (b + 1,) or self.offsets[0] != 0:
            raise ValueError(f"offsets must have shape ({b + 1},) and start at 0")
        if int(self.offsets[-1]) != self.indices.size or np.any(np.diff(self.offsets) <= 0):
            raise ValueError("offsets must increase strictly and end at len(indices)")
        if int(self.resolutions.min()) <= 0:
            raise ValueError(f"resolutions must be positive; got {self.resolutions.tolist()}")
        for name in ("frames", "tokens"):
            column = getattr(self, name)
            if column is None:
                continue
            if column.shape != (b,) or int(column.min()) <= 0:
                raise ValueError(
                    f"{name} must have shape ({b},) and be positive; got {column.tolist()}"
                )
        if self.tokens is not None and self.frames is None:
            raise ValueError("tokens are a video table's: pass frames too")

    @classmethod
    def from_nemo_groups(
        cls, sorted_bucket_keys: Sequence[Any], bucket_groups: Mapping[Any, Mapping[str, Any]]
    ) -> BucketTable:
        """Build a table from NeMo Automodel's ``sorted_bucket_keys`` and ``bucket_groups``.

        This accepts any NeMo-style dataset (O(N) conversion, done once): each group needs
        ``indices``, ``resolution`` and ``aspect_name``; ``aspect_ratio`` defaults to the
        resolution's. Video groups also have ``frames`` (and ``tokens``), all or none.
        """
        keys = list(sorted_bucket_keys)
        if not keys:
            raise ValueError("dataset must hold at least one sample; got 0 samples in 0 buckets")
        groups = [bucket_groups[k] for k in keys]
        sizes = [len(g["indices"]) for g in groups]
        if any(s == 0 for s in sizes):
            raise ValueError("bucket_groups must not contain empty buckets")
        res = np.array([[int(x) for x in g["resolution"]] for g in groups], dtype=np.int64)
        if res.shape != (len(keys), 2):
            raise ValueError(f"bucket resolutions must be (width, height) pairs; got {res.shape}")
        ratios = np.array(
            [float(g.get("aspect_ratio", w / h)) for g, (w, h) in zip(groups, res, strict=True)]
        )
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        indices = np.concatenate([np.asarray(g["indices"], dtype=np.int64) for g in groups])
        if indices.size and int(indices.min()) < 0:
            raise ValueError("bucket_groups indices must be non-negative")
        video = {name: _group_column(groups, name) for name in ("frames", "tokens")}
        names = tuple(str(g["aspect_name"]) for g in groups)
        return cls(res, names, ratios, offsets, indices, video["frames"], video["tokens"])

    @property
    def num_buckets(self) -> int:
        """Number of buckets ``B``."""
        return len(self.aspect_names)

    @property
    def num_samples(self) -> int:
        """Number of samples ``N``."""
        return int(self.indices.size)

    @cached_property
    def sizes(self) -> IntArray:
        """Shape ``(B,)``: samples per bucket."""
        return np.diff(self.offsets)

    @cached_property
    def pixels(self) -> IntArray:
        """Shape ``(B,)``: width x height of each bucket."""
        return self.resolutions[:, 0] * self.resolutions[:, 1]

    def bucket_indices(self, bucket: int) -> IntArray:
        """The dataset indices of bucket ``bucket`` (a view, dataset order)."""
        bucket = check_int("bucket", bucket, min_value=0, max_value=self.num_buckets - 1)
        return self.indices[self.offsets[bucket] : self.offsets[bucket + 1]]

    @property
    def is_video(self) -> bool:
        """Whether the buckets are video shapes (they have frame counts)."""
        return self.frames is not None

    def key(self, bucket: int) -> BucketKey:
        """NeMo's bucket key ``(aspect_name, (width, height))``; a video bucket's is
        ``(aspect_name, (width, height), frames)``, so frame counts of one size stay apart."""
        w, h = self.resolutions[bucket].tolist()
        if self.frames is None:
            return self.aspect_names[bucket], (w, h)
        return self.aspect_names[bucket], (w, h), int(self.frames[bucket])

    def take(self, bucket: int, places: IntArray) -> list[list[int]]:
        """The dataset indices at ``places`` (shape ``(batches, per_rank)``) of bucket
        ``bucket``, one list per row: the :class:`~dataorder.core.buckets.Grouping` a bucket
        sampler's epoch reads."""
        batches: list[list[int]] = self.indices[int(self.offsets[bucket]) + places].tolist()
        return batches

    def shape_name(self, bucket: int) -> str:
        """``"832x480"``, or ``"832x480x81f"`` for a video bucket of 81 frames."""
        w, h = self.resolutions[bucket].tolist()
        return f"{w}x{h}" if self.frames is None else f"{w}x{h}x{int(self.frames[bucket])}f"

    @cached_property
    def fingerprint(self) -> str:
        """16 hex digits over the buckets and which samples they hold (computed once).

        Two datasets with the same fingerprint have the same buckets, resolutions and aspect
        names, and the same dataset indices in each bucket in the same order, so a sampler state
        moves between them. Membership is hashed too: a rescan that moves samples between buckets
        (same bucket sizes) changes the order of every bucket it touches, and a state from before
        it must be refused. Hashing 10 M indices takes a few tens of milliseconds. A video
        table's frame counts are hashed too; an image table hashes exactly what it did before
        video existed, so saved image states stay valid.
        """
        h = hashlib.blake2b(digest_size=8, person=b"dataorder.bktab")
        h.update(np.ascontiguousarray(self.sizes, dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(self.resolutions, dtype="<i8").tobytes())
        h.update(",".join(self.aspect_names).encode())
        if self.frames is not None:
            h.update(b"frames")
            h.update(np.ascontiguousarray(self.frames, dtype="<i8").tobytes())
        narrow = "<u4" if self.num_samples and int(self.indices.max()) < 2**32 else "<i8"
        h.update(np.ascontiguousarray(self.indices, dtype=narrow).data)
        return h.hexdigest()


def _group_column(groups: Sequence[Mapping[str, Any]], name: str) -> IntArray | None:
    """``name`` of every NeMo-style group as an array, or None if no group has it."""
    have = [name in g for g in groups]
    if not any(have):
        return None
    if not all(have):
        raise ValueError(f"bucket_groups must give {name!r} for every bucket or for none")
    return np.array([check_int(name, g[name], min_value=1) for g in groups], dtype=np.int64)


def _per_bucket(name: str, values: npt.ArrayLike | None, k: int) -> IntArray | None:
    if values is None:
        return None
    arr = as_int_array(name, values, 1)
    if arr.shape != (k,):
        raise ValueError(f"{name} must have shape ({k},) (one per bucket id); got {arr.shape}")
    if arr.size and int(arr.min()) <= 0:
        raise ValueError(f"{name} must be positive; got min={int(arr.min())}")
    return arr


def table_from_ids(
    bucket_ids: npt.ArrayLike,
    resolutions: npt.ArrayLike,
    aspect_ratios: npt.ArrayLike | None,
    *,
    frames: npt.ArrayLike | None = None,
    tokens: npt.ArrayLike | None = None,
) -> tuple[BucketTable, IntArray]:
    """The table of samples with these bucket ids, and each id's row (-1: no sample).

    ``resolutions`` (``(K, 2)``), ``aspect_ratios``, ``frames`` and ``tokens`` (``(K,)``) are
    per bucket id; ``frames`` makes it a video table, sorted by :func:`sort_key`.
    """
    res = as_int_array("resolutions", resolutions, 2)
    if res.shape[1:] != (2,):
        raise ValueError(f"resolutions must have shape (K, 2); got {res.shape}")
    if res.size and int(res.min()) <= 0:
        raise ValueError(f"resolutions must be positive; got min={int(res.min())}")
    if aspect_ratios is None:
        ratios = res[:, 0] / res[:, 1]
    else:
        ratios = np.asarray(aspect_ratios, dtype=np.float64)
        if ratios.shape != (res.shape[0],):
            raise ValueError(f"aspect_ratios must have shape ({res.shape[0]},); got {ratios.shape}")
    k = res.shape[0]
    f = _per_bucket("frames", frames, k)
    t = _per_bucket("tokens", tokens, k)
    if t is not None and f is None:
        raise ValueError("tokens are a video table's: pass frames too")
    order, offsets, indices = group_by_bucket(bucket_ids, sort_key(res, f, t))
    table = BucketTable(
        res[order],
        tuple(aspect_name(float(r)) for r in ratios[order]),
        ratios[order],
        offsets,
        indices,
        None if f is None else f[order],
        None if t is None else t[order],
    )
    # bucket id -> row of the table (-1 for ids no sample uses)
    id_to_row = np.full(res.shape[0], -1, dtype=np.int64)
    id_to_row[order] = np.arange(order.size, dtype=np.int64)
    return table, id_to_row


def _read_json(path: Path, what: str) -> Any:
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: {what} is not valid JSON ({err.msg})") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: {what} is not UTF-8 text ({err.reason})") from None


def load_nemo_cache(cache_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read NeMo Automodel's cache: ``metadata.json`` with a ``"shards"`` list of JSON files.

    Returns the items of all shards, concatenated in the listed order (a dataset index is the
    position in that concatenation). Errors start with NeMo's own wording ("No metadata.json
    found in", "Invalid metadata format in"), which code written for NeMo may match on.

    Raises:
        TypeError: If ``cache_dir`` is not a path.
        FileNotFoundError: If ``metadata.json`` or a shard is missing (the message names it).
        ValueError: If a file is not valid JSON (naming the file and line) or does not have the
            expected shape (naming the file and the field), an item's resolution included.
    """
    root = Path(path_arg("cache_dir", cache_dir))
    meta_file = root / "metadata.json"
    if not meta_file.is_file():
        raise FileNotFoundError(
            f"No metadata.json found in {root} (cache_dir must hold NeMo's metadata.json; got "
            f"cache_dir={str(root)!r})"
        )
    meta = _read_json(meta_file, "metadata.json")
    shards = meta.get("shards") if isinstance(meta, dict) else None
    if not isinstance(shards, list) or not all(isinstance(x, str) for x in shards):
        got = (
            f"shards={shards!r}"[:200]
            if isinstance(meta, dict) and "shards" in meta
            else f"{type(meta).__name__} with keys {sorted(meta) if isinstance(meta, dict) else []}"
        )
        raise ValueError(
            f"Invalid metadata format in {meta_file}. Expected dict with 'shards' key (a list of "
            f"shard file names); got {got}"
        )
    items: list[dict[str, Any]] = []
    field = ""  # chosen from the first item of the cache, as table_from_items does
    for shard in shards:
        path = root / shard
        if not path.is_file():
            raise FileNotFoundError(f"{meta_file}: shard {shard!r} does not exist ({path})")
        data = _read_json(path, f"shard {shard!r}")
        if not isinstance(data, list):
            raise ValueError(
                f"{path}: shard {shard!r} must be a JSON list of items; got {type(data).__name__}"
            )
        bad = next((i for i, item in enumerate(data) if not isinstance(item, dict)), None)
        if bad is not None:
            raise ValueError(
                f"{path}: item {bad} must be a JSON object; got {type(data[bad]).__name__}"
            )
        if data:
            field = field or _resolution_field(data[0])
            for i, item in enumerate(data):
                try:
                    _item_resolution(i, item, field)
                except ValueError as err:
                    raise ValueError(f"{path}: {err}") from None
        items.extend(data)
    return items


def _resolution_field(first: Mapping[str, Any]) -> str:
    """NeMo's choice: ``bucket_resolution`` if the first item has it, else ``crop_resolution``."""
    return "bucket_resolution" if "bucket_resolution" in first else "crop_resolution"


def _item_resolution(i: int, item: Mapping[str, Any], field: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in item[field])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(
            f"item {i} must have {field!r} as a (width, height) pair (the field is chosen "
            f"from item 0); got {item.get(field)!r}"
        ) from err
    if w <= 0 or h <= 0:
        raise ValueError(f"item {i}: {field} must be positive; got {[w, h]}")
    return w, h


def table_from_items(items: Sequence[Mapping[str, Any]]) -> BucketTable:
    """NeMo's grouping: key ``(aspect name, resolution)``; the resolution field is chosen from
    the first item (``bucket_resolution`` if present, else ``crop_resolution``)."""
    if not items:
        raise ValueError("dataset must hold at least one sample; got an empty cache")
    field = _resolution_field(items[0])
    codes: dict[tuple[str, int, int], int] = {}
    first_ratio: list[float] = []
    item_codes: list[int] = []
    for i, item in enumerate(items):
        ratio = float(item.get("aspect_ratio", 1.0))
        w, h = _item_resolution(i, item, field)
        key = (aspect_name(ratio), w, h)
        code = codes.get(key)
        if code is None:
            code = codes[key] = len(codes)
            first_ratio.append(ratio)
        item_codes.append(code)
    res = np.array([[w, h] for _, w, h in codes], dtype=np.int64)
    # Codes are numbered in order of first appearance, so group_by_bucket's tie-break by first
    # sample is NeMo's stable sort of the keys by pixels.
    order, offsets, indices = group_by_bucket(np.array(item_codes, dtype=np.int64), res.prod(1))
    names = [k[0] for k in codes]
    return BucketTable(
        res[order],
        tuple(names[j] for j in order.tolist()),
        np.array(first_ratio)[order],
        offsets,
        indices,
    )


def narrow(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``values`` (non-negative ints) as uint16 or uint32 if they fit, else int64."""
    if values.size and int(values.min()) >= 0:
        top = int(values.max())
        for dtype in (np.uint16, np.uint32):
            if top <= np.iinfo(dtype).max:
                return values.astype(dtype)
    return values.astype(np.int64, copy=False)


def bucket_arrays(
    buckets: Sequence[Mapping[str, Any]],
) -> tuple[IntArray, npt.NDArray[np.float64]]:
    """Resolutions ``(K, 2)`` and aspect ratios ``(K,)`` of calculator bucket dicts, by id."""
    k = len(buckets)
    res = np.zeros((k, 2), dtype=np.int64)
    ratios = np.zeros(k, dtype=np.float64)
    seen = np.zeros(k, dtype=bool)
    for b in buckets:
        i = check_int("bucket id", b["id"], min_value=0, max_value=k - 1)
        w, h = (int(v) for v in b["resolution"])
        res[i] = (w, h)
        ratios[i] = float(b.get("aspect_ratio", w / h))
        seen[i] = True
    if not seen.all():
        raise ValueError(f"bucket ids must be 0..{k - 1} exactly once")
    return res, ratios


def table_from_buckets(
    bucket_ids: npt.ArrayLike, buckets: Sequence[Mapping[str, Any]]
) -> tuple[BucketTable, IntArray]:
    """:func:`table_from_ids` over a calculator's bucket dicts (``get_all_buckets()`` of an
    image or a video calculator, or a manifest's ``buckets``); video buckets keep their
    ``frames`` and ``tokens``."""
    res, ratios = bucket_arrays(buckets)
    video = bool(buckets) and all("frames" in b for b in buckets)
    frames = tokens = None
    if video:
        frames = np.array([b["frames"] for b in buckets], dtype=np.int64)
        tokens = np.array([b["tokens"] for b in buckets], dtype=np.int64)
    return table_from_ids(bucket_ids, res, ratios, frames=frames, tokens=tokens)
