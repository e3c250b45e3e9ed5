"""Multi-resolution datasets: which samples share a bucket, held as compact arrays.

A bucket is one training shape: a ``(width, height)`` resolution and an aspect name. Every sample
belongs to exactly one bucket, and the bucket sampler (:mod:`dataorder.bucket_sampler`) only
needs, per bucket, its size, its resolution and the dataset indices it holds. Those live in a
:class:`BucketTable`, a CSR layout of two int64 arrays whatever the dataset size:

* ``indices`` (shape ``(N,)``): every dataset index, grouped by bucket, in dataset order inside a
  bucket;
* ``offsets`` (shape ``(B + 1,)``): bucket ``j`` holds ``indices[offsets[j]:offsets[j + 1]]``.

Buckets are sorted by pixel count ascending, ties in order of first appearance in the dataset
(NeMo Automodel's ``sorted_bucket_keys``). Ten million samples cost 80 MB here; NeMo's dict of
Python lists of indices costs about 360 MB (a pointer and an int object per sample).

:class:`BaseMultiresolutionDataset` reads NeMo Automodel's preprocessed cache (``metadata.json``
listing JSON shards of per-sample items) with NeMo's grouping rules, or is built from arrays of
image sizes, from bucket ids, or from a scan manifest (:mod:`dataorder.scan`).

Example:
    >>> from dataorder.multires import BaseMultiresolutionDataset
    >>> ds = BaseMultiresolutionDataset.from_bucket_ids(
    ...     [1, 1, 0, 1, 0], resolutions=[(256, 256), (320, 192)])
    >>> ds.sorted_bucket_keys  # 320x192 has fewer pixels, so it comes first
    [('wide', (320, 192)), ('square', (256, 256))]
    >>> ds.bucket_table.bucket_indices(0).tolist(), ds.bucket_table.bucket_indices(1).tolist()
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
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from torch.utils.data import Dataset

from dataorder._validate import check_int, fail

if TYPE_CHECKING:
    from dataorder.scan import Manifest

__all__ = [
    "ASPECT_SQUARE_MAX",
    "ASPECT_TALL_BELOW",
    "BaseMultiresolutionDataset",
    "BucketTable",
    "aspect_name",
    "group_by_bucket",
    "load_nemo_cache",
]

#: Aspect ratios (w / h) below this are "tall" (NeMo Automodel's threshold).
ASPECT_TALL_BELOW = 0.85
#: Aspect ratios above this are "wide"; in between is "square".
ASPECT_SQUARE_MAX = 1.18

IntArray = npt.NDArray[np.int64]


def aspect_name(aspect_ratio: float) -> str:
    """Return ``"tall"``, ``"square"`` or ``"wide"`` for a width / height ratio (NeMo's rule)."""
    if aspect_ratio < ASPECT_TALL_BELOW:
        return "tall"
    if aspect_ratio > ASPECT_SQUARE_MAX:
        return "wide"
    return "square"


def _as_int_array(name: str, values: object, ndim: int) -> IntArray:
    arr = np.asarray(values)
    if arr.size == 0 and arr.dtype == np.float64:  # np.asarray([]) is float
        arr = arr.astype(np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be an array of ints; got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s); got shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


def group_by_bucket(
    bucket_ids: npt.ArrayLike, pixels: npt.ArrayLike
) -> tuple[IntArray, IntArray, IntArray]:
    """Group dataset indices by bucket, buckets sorted by pixels then first appearance.

    Args:
        bucket_ids: Shape ``(N,)``, the bucket of every sample, ints in ``[0, K)``.
        pixels: Shape ``(K,)``, the pixel count of every possible bucket.

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
    ids = _as_int_array("bucket_ids", bucket_ids, 1)
    pix = _as_int_array("pixels", pixels, 1)
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
    """

    resolutions: IntArray
    aspect_names: tuple[str, ...]
    aspect_ratios: npt.NDArray[np.float64]
    offsets: IntArray
    indices: IntArray

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

    @classmethod
    def from_nemo_groups(
        cls, sorted_bucket_keys: Sequence[Any], bucket_groups: Mapping[Any, Mapping[str, Any]]
    ) -> BucketTable:
        """Build a table from NeMo Automodel's ``sorted_bucket_keys`` and ``bucket_groups``.

        This accepts any NeMo-style dataset (O(N) conversion, done once): each group needs
        ``indices``, ``resolution`` and ``aspect_name``; ``aspect_ratio`` defaults to the
        resolution's.
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
        return cls(res, tuple(str(g["aspect_name"]) for g in groups), ratios, offsets, indices)

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

    def key(self, bucket: int) -> tuple[str, tuple[int, int]]:
        """NeMo's bucket key ``(aspect_name, (width, height))``."""
        w, h = self.resolutions[bucket].tolist()
        return self.aspect_names[bucket], (w, h)

    @cached_property
    def fingerprint(self) -> str:
        """16 hex digits over the buckets and which samples they hold (computed once).

        Two datasets with the same fingerprint have the same buckets, resolutions and aspect
        names, and the same dataset indices in each bucket in the same order, so a sampler state
        moves between them. Membership is hashed too: a rescan that moves samples between buckets
        (same bucket sizes) changes the order of every bucket it touches, and a state from before
        it must be refused. Hashing 10 M indices takes a few tens of milliseconds.
        """
        h = hashlib.blake2b(digest_size=8, person=b"dataorder.bktab")
        h.update(np.ascontiguousarray(self.sizes, dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(self.resolutions, dtype="<i8").tobytes())
        h.update(",".join(self.aspect_names).encode())
        narrow = "<u4" if self.num_samples and int(self.indices.max()) < 2**32 else "<i8"
        h.update(np.ascontiguousarray(self.indices, dtype=narrow).data)
        return h.hexdigest()


def _table_from_ids(
    bucket_ids: npt.ArrayLike,
    resolutions: npt.ArrayLike,
    aspect_ratios: npt.ArrayLike | None,
) -> tuple[BucketTable, IntArray]:
    res = _as_int_array("resolutions", resolutions, 2)
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
    order, offsets, indices = group_by_bucket(bucket_ids, res[:, 0] * res[:, 1])
    table = BucketTable(
        res[order],
        tuple(aspect_name(float(r)) for r in ratios[order]),
        ratios[order],
        offsets,
        indices,
    )
    # bucket id -> row of the table (-1 for ids no sample uses)
    id_to_row = np.full(res.shape[0], -1, dtype=np.int64)
    id_to_row[order] = np.arange(order.size, dtype=np.int64)
    return table, id_to_row


def load_nemo_cache(cache_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read NeMo Automodel's cache: ``metadata.json`` with a ``"shards"`` list of JSON files.

    Returns the items of all shards, concatenated in the listed order (a dataset index is the
    position in that concatenation).

    Raises:
        FileNotFoundError: If ``metadata.json`` or a shard is missing.
        ValueError: If the files do not have the expected shape.
    """
    root = Path(cache_dir)
    meta_file = root / "metadata.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"no metadata.json in cache_dir={str(root)!r}")
    with meta_file.open() as f:
        meta = json.load(f)
    if not isinstance(meta, dict) or not isinstance(meta.get("shards"), list):
        raise ValueError(
            f"{meta_file} must be a JSON object with a 'shards' list; got "
            f"{type(meta).__name__} with keys {sorted(meta) if isinstance(meta, dict) else []}"
        )
    items: list[dict[str, Any]] = []
    for shard in meta["shards"]:
        with (root / shard).open() as f:
            data = json.load(f)
        if not isinstance(data, list):
            raise ValueError(f"shard {shard!r} must be a JSON list of items; got {type(data)}")
        items.extend(data)
    return items


def _table_from_items(items: Sequence[Mapping[str, Any]]) -> BucketTable:
    """NeMo's grouping: key ``(aspect name, resolution)``; the resolution field is chosen from
    the first item (``bucket_resolution`` if present, else ``crop_resolution``)."""
    if not items:
        raise ValueError("dataset must hold at least one sample; got an empty cache")
    field = "bucket_resolution" if "bucket_resolution" in items[0] else "crop_resolution"
    codes: dict[tuple[str, int, int], int] = {}
    first_ratio: list[float] = []
    item_codes: list[int] = []
    for i, item in enumerate(items):
        ratio = float(item.get("aspect_ratio", 1.0))
        try:
            w, h = (int(v) for v in item[field])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(
                f"item {i} must have {field!r} as a (width, height) pair (the field is chosen "
                f"from item 0); got {item.get(field)!r}"
            ) from err
        key = (aspect_name(ratio), w, h)
        code = codes.get(key)
        if code is None:
            code = codes[key] = len(codes)
            first_ratio.append(ratio)
        item_codes.append(code)
    res = np.array([[w, h] for _, w, h in codes], dtype=np.int64)
    if int(res.min()) <= 0:
        raise ValueError(f"{field} must be positive; got {res[res.min(axis=1) <= 0][0].tolist()}")
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


class BaseMultiresolutionDataset(Dataset[dict[str, Any]]):
    """A dataset of samples grouped into resolution buckets, read by the bucket sampler.

    ``BaseMultiresolutionDataset(cache_dir, quantization=64)`` reads NeMo Automodel's
    preprocessed cache and groups it exactly as NeMo does (key ``(aspect name, resolution)``,
    buckets sorted by pixels, stable). ``__getitem__`` returns the sample's metadata dict;
    subclasses load tensors from it. Other sources: :meth:`from_sizes`, :meth:`from_bucket_ids`
    and :meth:`from_manifest`.

    Args:
        cache_dir: Directory with ``metadata.json`` (``{"shards": [...]}``) and the shards.
        quantization: Quantization of the :attr:`calculator` used for dynamic batch sizes.

    Attributes:
        bucket_table: The :class:`BucketTable` (what the sampler reads).
        calculator: A ``dataorder.buckets.MultiTierBucketCalculator`` for dynamic batch sizes.
        metadata: The cache's items (``None`` for array-built datasets).
        widths: Shape ``(N,)``, image widths (``from_sizes``, ``from_manifest``), else ``None``.
        heights: Shape ``(N,)``, image heights, likewise.
        paths: Image paths (``from_manifest``), else ``None``.
        cache_dir: The cache directory, or ``None``.

    Raises:
        FileNotFoundError: If the cache is missing.
        ValueError: If it is malformed or empty.
    """

    def __init__(self, cache_dir: str | os.PathLike[str], quantization: int = 64) -> None:
        from dataorder.buckets import MultiTierBucketCalculator

        quantization = check_int("quantization", quantization, min_value=1)
        items = load_nemo_cache(cache_dir)
        self._setup(
            _table_from_items(items),
            MultiTierBucketCalculator(quantization=quantization),
            cache_dir=Path(cache_dir),
            metadata=items,
        )

    def _setup(
        self,
        table: BucketTable,
        calculator: Any,
        *,
        cache_dir: Path | None = None,
        metadata: list[dict[str, Any]] | None = None,
        item_ids: IntArray | None = None,
        id_to_row: IntArray | None = None,
        widths: IntArray | None = None,
        heights: IntArray | None = None,
        paths: list[str] | None = None,
    ) -> None:
        self.bucket_table = table
        self.calculator = calculator
        self.cache_dir = cache_dir
        self.metadata = metadata
        # Per-sample arrays in the narrowest dtype that holds them: bucket ids are 2 bytes for up
        # to 65,536 buckets, image sides 4 bytes, so 10 M samples cost 20 + 80 MB here.
        self._item_ids = None if item_ids is None else _narrow(item_ids)
        self._id_to_row = id_to_row
        self.widths = None if widths is None else _narrow(widths)
        self.heights = None if heights is None else _narrow(heights)
        self.paths = paths

    # -- alternative constructors -----------------------------------------------------------
    @classmethod
    def from_bucket_ids(
        cls,
        bucket_ids: npt.ArrayLike,
        resolutions: npt.ArrayLike,
        *,
        aspect_ratios: npt.ArrayLike | None = None,
        calculator: Any = None,
    ) -> BaseMultiresolutionDataset:
        """Build from samples already assigned to buckets.

        Args:
            bucket_ids: Shape ``(N,)``, ints in ``[0, K)``: the bucket of each sample.
            resolutions: Shape ``(K, 2)``, ``(width, height)`` of each bucket id.
            aspect_ratios: Shape ``(K,)``; default ``width / height``. Decides the aspect name.
            calculator: For dynamic batch sizes; default ``MultiTierBucketCalculator()``.
        """
        from dataorder.buckets import MultiTierBucketCalculator

        ids = _as_int_array("bucket_ids", bucket_ids, 1)
        table, id_to_row = _table_from_ids(ids, resolutions, aspect_ratios)
        obj = cls.__new__(cls)
        obj._setup(
            table,
            calculator if calculator is not None else MultiTierBucketCalculator(),
            item_ids=ids,
            id_to_row=id_to_row,
        )
        return obj

    @classmethod
    def from_sizes(
        cls, widths: npt.ArrayLike, heights: npt.ArrayLike, calculator: Any = None
    ) -> BaseMultiresolutionDataset:
        """Build from image sizes: each sample goes to ``calculator.assign(widths, heights)``.

        Args:
            widths: Shape ``(N,)``, positive ints.
            heights: Shape ``(N,)``, positive ints.
            calculator: A ``MultiTierBucketCalculator``; default ``MultiTierBucketCalculator()``.
        """
        from dataorder.buckets import MultiTierBucketCalculator

        w = _as_int_array("widths", widths, 1)
        h = _as_int_array("heights", heights, 1)
        if w.shape != h.shape:
            raise ValueError(f"widths and heights must have one shape; got {w.shape}, {h.shape}")
        if w.size == 0:
            fail("widths", "a non-empty array (the dataset must hold a sample)", w.tolist())
        calc = calculator if calculator is not None else MultiTierBucketCalculator()
        ids = np.asarray(calc.assign(w, h), dtype=np.int64)
        buckets = calc.get_all_buckets()
        res, ratios = _bucket_arrays(buckets)
        table, id_to_row = _table_from_ids(ids, res, ratios)
        obj = cls.__new__(cls)
        obj._setup(table, calc, item_ids=ids, id_to_row=id_to_row, widths=w, heights=h)
        return obj

    @classmethod
    def from_manifest(
        cls, manifest: str | os.PathLike[str] | Manifest
    ) -> BaseMultiresolutionDataset:
        """Build from a scan manifest (a path, or a ``dataorder.scan.Manifest``).

        The dataset index is the position in ``manifest.paths``; the calculator is rebuilt from
        the manifest's recorded configuration, so dynamic batch sizes match the scan.
        """
        from dataorder.buckets import MultiTierBucketCalculator
        from dataorder.scan import Manifest, read_manifest

        m = manifest if isinstance(manifest, Manifest) else read_manifest(manifest)
        res, ratios = _bucket_arrays(m.buckets)
        ids = _as_int_array("manifest.bucket_ids", m.bucket_ids, 1)
        table, id_to_row = _table_from_ids(ids, res, ratios)
        obj = cls.__new__(cls)
        obj._setup(
            table,
            MultiTierBucketCalculator.from_config(m.calculator),
            item_ids=ids,
            id_to_row=id_to_row,
            widths=np.asarray(m.widths, dtype=np.int64),
            heights=np.asarray(m.heights, dtype=np.int64),
            paths=list(m.paths),
        )
        return obj

    # -- the torch Dataset protocol -----------------------------------------------------------
    def __len__(self) -> int:
        return self.bucket_table.num_samples

    def __getitem__(self, idx: int) -> dict[str, Any]:
        """Return sample ``idx``'s metadata: the cache item, or a dict built from the arrays.

        Array-built datasets give ``{"index", "bucket", "bucket_resolution", "aspect_ratio"}``
        (``bucket`` is the row of :attr:`bucket_table`), plus ``width``/``height`` and ``path``
        when known.
        """
        idx = check_int("idx", idx, min_value=0, max_value=len(self) - 1)
        if self.metadata is not None:
            return self.metadata[idx]
        ids, id_to_row = self._item_ids, self._id_to_row
        if ids is None or id_to_row is None:  # pragma: no cover - _setup sets one or the other
            raise RuntimeError("dataset built without metadata or bucket ids")
        row = int(id_to_row[ids[idx]])
        w, h = self.bucket_table.resolutions[row].tolist()
        item: dict[str, Any] = {
            "index": idx,
            "bucket": row,
            "bucket_resolution": (w, h),
            "aspect_ratio": float(self.bucket_table.aspect_ratios[row]),
        }
        if self.widths is not None and self.heights is not None:
            item["width"], item["height"] = int(self.widths[idx]), int(self.heights[idx])
        if self.paths is not None:
            item["path"] = self.paths[idx]
        return item

    @property
    def nbytes(self) -> int:
        """Bytes held in the dataset's numpy arrays (the bucket table and per-sample arrays)."""
        t = self.bucket_table
        arrays: list[npt.NDArray[Any] | None] = [t.indices, t.offsets, t.resolutions]
        arrays += [t.aspect_ratios, self._item_ids, self._id_to_row, self.widths, self.heights]
        return sum(a.nbytes for a in arrays if a is not None)

    # -- NeMo Automodel's attribute names -------------------------------------------------------
    @property
    def sorted_bucket_keys(self) -> list[tuple[str, tuple[int, int]]]:
        """Bucket keys ``(aspect_name, (width, height))`` in sorted order (NeMo's name)."""
        t = self.bucket_table
        return [t.key(j) for j in range(t.num_buckets)]

    @cached_property
    def bucket_groups(self) -> dict[tuple[str, tuple[int, int]], dict[str, Any]]:
        """NeMo's dict of buckets with Python lists of indices, built on first access.

        For code written against NeMo only: it costs O(N) Python objects. The sampler reads
        :attr:`bucket_table` instead.
        """
        t = self.bucket_table
        out: dict[tuple[str, tuple[int, int]], dict[str, Any]] = {}
        for j in range(t.num_buckets):
            name, res = t.key(j)
            out[(name, res)] = {
                "indices": t.bucket_indices(j).tolist(),
                "aspect_name": name,
                "aspect_ratio": float(t.aspect_ratios[j]),
                "resolution": res,
                "pixels": res[0] * res[1],
            }
        return out

    def get_bucket_info(self) -> dict[str, Any]:
        """``{"total_buckets": B, "buckets": {"wide/320x192": size, ...}}`` (NeMo's summary)."""
        t = self.bucket_table
        return {
            "total_buckets": t.num_buckets,
            "buckets": {
                f"{t.aspect_names[j]}/{w}x{h}": int(t.sizes[j])
                for j, (w, h) in enumerate(t.resolutions.tolist())
            },
        }

    def __repr__(self) -> str:
        t = self.bucket_table
        return f"{type(self).__name__}(samples={t.num_samples}, buckets={t.num_buckets})"


def _narrow(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``values`` (non-negative ints) as uint16 or uint32 if they fit, else int64."""
    if values.size and int(values.min()) >= 0:
        top = int(values.max())
        for dtype in (np.uint16, np.uint32):
            if top <= np.iinfo(dtype).max:
                return values.astype(dtype)
    return values.astype(np.int64, copy=False)


def _bucket_arrays(
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
