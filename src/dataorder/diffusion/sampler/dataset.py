"""Multi-resolution datasets: samples grouped into resolution buckets, read by the bucket sampler.

:class:`BaseMultiresolutionDataset` reads NeMo Automodel's preprocessed cache (``metadata.json``
listing JSON shards of per-sample items) with NeMo's grouping rules, or is built from arrays of
image sizes, of clip sizes and frame counts, from bucket ids, or from a scan manifest (image or
video: :mod:`dataorder.diffusion.scan.manifest`). Its buckets are a
:class:`~dataorder.diffusion.sampler.table.BucketTable` (compact arrays). A video bucket is a shape
like any other (``(w, h, frames)``), so the bucket sampler reads video datasets unchanged.

Example:
    >>> from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
    >>> ds = BaseMultiresolutionDataset.from_bucket_ids(
    ...     [1, 1, 0, 1, 0], resolutions=[(256, 256), (320, 192)])
    >>> ds.sorted_bucket_keys  # 320x192 has fewer pixels, so it comes first
    [('wide', (320, 192)), ('square', (256, 256))]
    >>> ds.bucket_table.bucket_indices(0).tolist(), ds.bucket_table.bucket_indices(1).tolist()
    ([0, 1, 3], [2, 4])
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from torch.utils.data import Dataset

from dataorder._validate import check_int, fail
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import TOO_SHORT, VideoBucketCalculator
from dataorder.diffusion.sampler.table import (
    BucketTable,
    IntArray,
    as_int_array,
    aspect_name,
    load_nemo_cache,
    narrow,
    table_from_buckets,
    table_from_ids,
    table_from_items,
)
from dataorder.diffusion.scan.files import path_arg
from dataorder.diffusion.scan.manifest import Manifest, read_manifest

__all__ = ["BaseMultiresolutionDataset"]


class BaseMultiresolutionDataset(Dataset[dict[str, Any]]):
    """A dataset of samples grouped into resolution buckets, read by the bucket sampler.

    ``BaseMultiresolutionDataset(cache_dir, quantization=64)`` reads NeMo Automodel's
    preprocessed cache and groups it exactly as NeMo does (key ``(aspect name, resolution)``,
    buckets sorted by pixels, stable). ``__getitem__`` returns the sample's metadata dict;
    subclasses load tensors from it. Other sources: :meth:`from_sizes`, :meth:`from_video_sizes`,
    :meth:`from_bucket_ids` and :meth:`from_manifest`.

    Subclasses written for NeMo work unchanged (NOTE [ NeMo's subclass protocol ]): the
    constructor sets ``cache_dir``, then calls ``self._load_metadata()`` and, if the subclass
    overrides it, ``self._group_by_bucket()``, which fills ``bucket_groups`` and assigns
    ``sorted_bucket_keys`` as NeMo's does; the sampler then reads the buckets in that order.
    ``_aspect_ratio_to_name`` is there for them too.

    Args:
        cache_dir: Directory with ``metadata.json`` (``{"shards": [...]}``) and the shards.
        quantization: Quantization of the :attr:`calculator` used for dynamic batch sizes.

    Attributes:
        bucket_table: The :class:`BucketTable` (what the sampler reads).
        calculator: For dynamic batch sizes: a ``MultiTierBucketCalculator``
            (:mod:`dataorder.diffusion.calculators.image`), or a ``VideoBucketCalculator``
            (:mod:`dataorder.diffusion.calculators.video`) whose cost model sizes video batches.
        metadata: The cache's items (``None`` for array-built datasets).
        widths: Shape ``(N,)``, sample widths (``from_sizes``, ``from_video_sizes``,
            ``from_manifest``), else ``None``.
        heights: Shape ``(N,)``, sample heights, likewise.
        frames: Shape ``(N,)``, clip frame counts (video datasets from sizes or a manifest),
            else ``None``.
        paths: Sample paths (``from_manifest``), else ``None``.
        cache_dir: The cache directory, or ``None``.

    Raises:
        TypeError: If ``cache_dir`` is not a path.
        FileNotFoundError: If the cache is missing.
        ValueError: If it is malformed or empty.
    """

    cache_dir: Path | None
    metadata: list[dict[str, Any]] | None

    # NOTE [ NeMo's subclass protocol ]
    #     NeMo's base class reads its cache through two overridable methods, and subclasses
    #     (NeMo's own ImageEditDataset, for one) replace them: ``_load_metadata()`` returns the
    #     items, ``_group_by_bucket()`` fills ``self.bucket_groups`` (key -> {"indices",
    #     "aspect_name", "aspect_ratio", "resolution", "pixels", ...}) and assigns
    #     ``self.sorted_bucket_keys``. A subclass's grouping is converted once into the
    #     BucketTable the sampler reads, in the subclass's key order; without an override the
    #     items are grouped by NeMo's rule straight into arrays, and the two NeMo attributes are
    #     derived from the table when someone reads them.

    def __init__(self, cache_dir: str | os.PathLike[str], quantization: int = 64) -> None:
        self.cache_dir = Path(path_arg("cache_dir", cache_dir))
        self.quantization = check_int("quantization", quantization, min_value=1)
        self._keys: list[Any] | None = None
        items = self._load_metadata()
        if not isinstance(items, list):
            raise TypeError(f"_load_metadata() must return a list of items; got {type(items)}")
        if not items:
            raise ValueError(
                f"dataset must hold at least one sample; got an empty cache in {self.cache_dir}"
            )
        self.metadata = items
        if type(self)._group_by_bucket is not BaseMultiresolutionDataset._group_by_bucket:
            self._group_by_bucket()
            table = BucketTable.from_nemo_groups(self.sorted_bucket_keys, self.bucket_groups)
        else:
            table = table_from_items(items)
        self._setup(
            table,
            MultiTierBucketCalculator(quantization=self.quantization),
            cache_dir=self.cache_dir,
            metadata=items,
        )

    def _load_metadata(self) -> list[dict[str, Any]]:
        """The cache's items (NOTE [ NeMo's subclass protocol ]); NeMo's format by default."""
        if self.cache_dir is None:
            raise ValueError(
                "_load_metadata() needs a cache_dir; this dataset was built from arrays"
            )
        return load_nemo_cache(self.cache_dir)

    def _group_by_bucket(self) -> None:
        """Group :attr:`metadata` by NeMo's rule into ``bucket_groups`` and
        ``sorted_bucket_keys`` (NOTE [ NeMo's subclass protocol ]); subclasses may override."""
        table = table_from_items(self.metadata or [])
        self.bucket_groups = _groups_of(table)
        self.sorted_bucket_keys = [table.key(j) for j in range(table.num_buckets)]

    def _aspect_ratio_to_name(self, aspect_ratio: float) -> str:
        """``"tall"``, ``"square"`` or ``"wide"`` by NeMo's thresholds (its method name)."""
        return aspect_name(aspect_ratio)

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
        frames: IntArray | None = None,
        paths: list[str] | None = None,
    ) -> None:
        self.bucket_table = table
        self.calculator = calculator
        self.cache_dir = cache_dir
        if not hasattr(self, "_keys"):
            self._keys = None
        self.metadata = metadata
        # Per-sample arrays in the narrowest dtype that holds them: bucket ids are 2 bytes for up
        # to 65,536 buckets, image sides 4 bytes, so 10 M samples cost 20 + 80 MB here.
        self._item_ids = None if item_ids is None else narrow(item_ids)
        self._id_to_row = id_to_row
        self.widths = None if widths is None else narrow(widths)
        self.heights = None if heights is None else narrow(heights)
        self.frames = None if frames is None else narrow(frames)
        self.paths = paths

    # -- alternative constructors -----------------------------------------------------------
    @classmethod
    def from_bucket_ids(
        cls,
        bucket_ids: npt.ArrayLike,
        resolutions: npt.ArrayLike,
        *,
        aspect_ratios: npt.ArrayLike | None = None,
        frames: npt.ArrayLike | None = None,
        tokens: npt.ArrayLike | None = None,
        calculator: Any = None,
    ) -> BaseMultiresolutionDataset:
        """Build from samples already assigned to buckets.

        Args:
            bucket_ids: Shape ``(N,)``, ints in ``[0, K)``: the bucket of each sample.
            resolutions: Shape ``(K, 2)``, ``(width, height)`` of each bucket id.
            aspect_ratios: Shape ``(K,)``; default ``width / height``. Decides the aspect name.
            frames: Shape ``(K,)``, the frame count of each bucket id: video buckets (sorted by
                ``tokens``, else by ``pixels x frames``).
            tokens: Shape ``(K,)``, the latent tokens of each video bucket id: what dynamic
                batch sizes are computed from (with a ``VideoBucketCalculator`` as calculator).
            calculator: For dynamic batch sizes; default ``MultiTierBucketCalculator()``.
        """
        ids = as_int_array("bucket_ids", bucket_ids, 1)
        table, id_to_row = table_from_ids(
            ids, resolutions, aspect_ratios, frames=frames, tokens=tokens
        )
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
                For clips use :meth:`from_video_sizes`.
        """
        w, h = _sizes(widths=widths, heights=heights)
        calc = calculator if calculator is not None else MultiTierBucketCalculator()
        if not isinstance(calc, MultiTierBucketCalculator):
            what = "a MultiTierBucketCalculator (for clips: from_video_sizes)"
            fail("calculator", what, calculator, TypeError)
        ids = np.asarray(calc.assign(w, h), dtype=np.int64)
        table, id_to_row = table_from_buckets(ids, calc.get_all_buckets())
        obj = cls.__new__(cls)
        obj._setup(table, calc, item_ids=ids, id_to_row=id_to_row, widths=w, heights=h)
        return obj

    @classmethod
    def from_video_sizes(
        cls,
        widths: npt.ArrayLike,
        heights: npt.ArrayLike,
        frames: npt.ArrayLike,
        calculator: Any,
    ) -> BaseMultiresolutionDataset:
        """Build from clip sizes and frame counts: each clip goes to ``calculator.assign``.

        Every clip must have a bucket, as the dataset index is the row: a clip too short or too
        small for every bucket is refused, naming it. Drop such clips first with
        ``build_video_scan(paths, widths, heights, frames, calculator).assigned()``
        (:mod:`dataorder.diffusion.scan.videos`), which gives each one's reason.

        Args:
            widths: Shape ``(N,)``, positive ints (as displayed).
            heights: Shape ``(N,)``, positive ints.
            frames: Shape ``(N,)``, positive ints.
            calculator: A ``VideoBucketCalculator``; its cost model gives dynamic batch sizes.

        Raises:
            TypeError: If ``calculator`` is not a ``VideoBucketCalculator``.
            ValueError: If the shapes differ, a value is out of range, or a clip has no bucket.
        """
        if not isinstance(calculator, VideoBucketCalculator):
            fail("calculator", "a VideoBucketCalculator", calculator, TypeError)
        w, h, f = _sizes(widths=widths, heights=heights, frames=frames)
        ids = calculator.assign(w, h, f)
        if int(ids.min()) < 0:
            i = int(np.flatnonzero(ids < 0)[0])
            why = "too short" if int(ids[i]) == TOO_SHORT else "too small"
            raise ValueError(
                f"clip {i} ({int(w[i])}x{int(h[i])}, {int(f[i])} frames) has no bucket ({why}); "
                "a dataset row is a training sample: keep the clips of "
                "build_video_scan(paths, widths, heights, frames, calculator).assigned()"
            )
        table, id_to_row = table_from_buckets(ids, calculator.get_all_buckets())
        obj = cls.__new__(cls)
        obj._setup(
            table, calculator, item_ids=ids, id_to_row=id_to_row, widths=w, heights=h, frames=f
        )
        return obj

    @classmethod
    def from_manifest(
        cls, manifest: str | os.PathLike[str] | Manifest
    ) -> BaseMultiresolutionDataset:
        """Build from a scan manifest (a path, or a ``dataorder.diffusion.scan.manifest.Manifest``),
        of images or of clips.

        The dataset index is the position in ``manifest.paths``; the calculator is rebuilt from
        the manifest's recorded configuration, so dynamic batch sizes match the scan.

        Raises:
            TypeError: If ``manifest`` is neither a Manifest nor a path.
            ValueError: If the file is not a valid manifest (naming the file and line).
        """
        if not isinstance(manifest, Manifest | str | os.PathLike):
            fail("manifest", "a Manifest or a path to one", manifest, TypeError)
        m = manifest if isinstance(manifest, Manifest) else read_manifest(manifest)
        ids = as_int_array("manifest.bucket_ids", m.bucket_ids, 1)
        table, id_to_row = table_from_buckets(ids, m.buckets)
        obj = cls.__new__(cls)
        obj._setup(
            table,
            m.calculator_object(),
            item_ids=ids,
            id_to_row=id_to_row,
            widths=np.asarray(m.widths, dtype=np.int64),
            heights=np.asarray(m.heights, dtype=np.int64),
            frames=None if m.frames is None else np.asarray(m.frames, dtype=np.int64),
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
        when known. Video datasets add ``bucket_frames`` (the frames to decode and trim to) and
        the clip's own ``frames`` when known.
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
        if self.bucket_table.frames is not None:
            item["bucket_frames"] = int(self.bucket_table.frames[row])
        if self.widths is not None and self.heights is not None:
            item["width"], item["height"] = int(self.widths[idx]), int(self.heights[idx])
        if self.frames is not None:
            item["frames"] = int(self.frames[idx])
        if self.paths is not None:
            item["path"] = self.paths[idx]
        return item

    @property
    def nbytes(self) -> int:
        """Bytes held in the dataset's numpy arrays (the bucket table and per-sample arrays)."""
        t = self.bucket_table
        arrays: list[npt.NDArray[Any] | None] = [t.indices, t.offsets, t.resolutions]
        arrays += [t.aspect_ratios, t.frames, t.tokens, self._item_ids, self._id_to_row]
        arrays += [self.widths, self.heights, self.frames]
        return sum(a.nbytes for a in arrays if a is not None)

    # -- NeMo Automodel's attribute names -------------------------------------------------------
    @property
    def sorted_bucket_keys(self) -> list[Any]:
        """Bucket keys in the order the sampler reads them (NeMo's name): ``(aspect_name,
        (width, height))`` (video: ``(aspect_name, (width, height), frames)``), or a subclass's
        own keys.

        Assigning a reordering of the keys reorders :attr:`bucket_table` to match, as NeMo's
        sampler follows this list.
        """
        if self._keys is not None:
            return list(self._keys)
        t = self.bucket_table
        return [t.key(j) for j in range(t.num_buckets)]

    @sorted_bucket_keys.setter
    def sorted_bucket_keys(self, keys: Any) -> None:
        self._keys = list(keys)
        if getattr(self, "bucket_table", None) is not None:  # after construction: reorder
            self.bucket_table = BucketTable.from_nemo_groups(self._keys, self.bucket_groups)

    @cached_property
    def bucket_groups(self) -> dict[Any, dict[str, Any]]:
        """NeMo's dict of buckets with Python lists of indices, built on first access (or
        filled by a subclass's ``_group_by_bucket``).

        For code written against NeMo only: it costs O(N) Python objects. The sampler reads
        :attr:`bucket_table` instead.
        """
        return _groups_of(self.bucket_table)

    def get_bucket_info(self) -> dict[str, Any]:
        """``{"total_buckets": B, "buckets": {"wide/320x192": size, ...}}`` (NeMo's summary;
        a video bucket is named like ``"wide/832x480x81f"``)."""
        t = self.bucket_table
        return {
            "total_buckets": t.num_buckets,
            "buckets": {
                f"{t.aspect_names[j]}/{t.shape_name(j)}": int(t.sizes[j])
                for j in range(t.num_buckets)
            },
        }

    def __repr__(self) -> str:
        t = self.bucket_table
        return f"{type(self).__name__}(samples={t.num_samples}, buckets={t.num_buckets})"


def _groups_of(table: BucketTable) -> dict[Any, dict[str, Any]]:
    """NeMo's ``bucket_groups`` of a table, in its bucket order."""
    out: dict[Any, dict[str, Any]] = {}
    for j in range(table.num_buckets):
        key = table.key(j)
        w, h = key[1]
        group: dict[str, Any] = {
            "indices": table.bucket_indices(j).tolist(),
            "aspect_name": key[0],
            "aspect_ratio": float(table.aspect_ratios[j]),
            "resolution": (w, h),
            "pixels": w * h,
        }
        if table.frames is not None:
            group["frames"] = int(table.frames[j])
        if table.tokens is not None:
            group["tokens"] = int(table.tokens[j])
        out[key] = group
    return out


def _sizes(**columns: npt.ArrayLike) -> tuple[IntArray, ...]:
    """Equal-length, non-empty 1-D int arrays, each named by its keyword."""
    arrays = [as_int_array(name, v, 1) for name, v in columns.items()]
    if len({a.shape for a in arrays}) > 1:
        shapes = ", ".join(str(a.shape) for a in arrays)
        names = [*columns]
        joined = ", ".join(names[:-1]) + f" and {names[-1]}"
        raise ValueError(f"{joined} must have one shape; got {shapes}")
    if arrays[0].size == 0:
        first = next(iter(columns))
        fail(first, "a non-empty array (the dataset must hold a sample)", arrays[0].tolist())
    return tuple(arrays)
