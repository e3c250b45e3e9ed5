"""BaseMultiresolutionDataset: NeMo's cache format and grouping, compact arrays, other sources."""

from __future__ import annotations

import importlib
import json
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.table import BucketTable, aspect_name, group_by_bucket
from tests.helpers import nemo_oracle


def write_cache(root: Path, shards: Sequence[Sequence[dict[str, Any]]]) -> Path:
    """Write NeMo's cache layout: metadata.json listing one JSON file per shard."""
    names = []
    for i, items in enumerate(shards):
        name = f"shard_{i:03d}.json"
        (root / name).write_text(json.dumps(list(items)))
        names.append(name)
    (root / "metadata.json").write_text(json.dumps({"shards": names, "version": 1}))
    return root


def item(w: int, h: int, ar: float | None = None, key: str = "crop_resolution") -> dict[str, Any]:
    out: dict[str, Any] = {key: [w, h], "cache_file": f"{w}x{h}.pt"}
    if ar is not None:
        out["aspect_ratio"] = ar
    return out


def reference_grouping(
    keys: Sequence[Any], pixels: Sequence[int]
) -> tuple[list[Any], dict[Any, list[int]]]:
    """NeMo's rule, written plainly: dict of lists in first-appearance order, stable pixel sort."""
    groups: dict[Any, list[int]] = {}
    pix: dict[Any, int] = {}
    for i, (k, p) in enumerate(zip(keys, pixels, strict=True)):
        groups.setdefault(k, []).append(i)
        pix[k] = p
    return sorted(groups, key=lambda k: pix[k]), groups


# -- NeMo's cache format ---------------------------------------------------------------------------
def test_cache_grouping_follows_nemo(tmp_path: Path) -> None:
    shards = [
        [item(256, 256, 1.0), item(320, 192, 1.667), item(256, 256, 0.7)],  # 0.7: tall 256x256
        [item(192, 320, 0.6), item(256, 256), item(320, 192, 1.667)],  # no aspect_ratio: 1.0
        [item(192, 320, 0.6), item(256, 256, 1.0)],
    ]
    ds = BaseMultiresolutionDataset(write_cache(tmp_path, shards))
    assert len(ds) == 8
    # 192x320 and 320x192 have 61,440 pixels: first appearance decides (320x192 at index 1)
    assert ds.sorted_bucket_keys == [
        ("wide", (320, 192)),
        ("tall", (192, 320)),
        ("square", (256, 256)),
        ("tall", (256, 256)),
    ]
    t = ds.bucket_table
    assert [t.bucket_indices(j).tolist() for j in range(4)] == [[1, 5], [3, 6], [0, 4, 7], [2]]
    assert ds.bucket_groups[("tall", (256, 256))]["aspect_ratio"] == 0.7
    assert ds.bucket_groups[("wide", (320, 192))]["pixels"] == 61440
    assert ds[4] == shards[1][1]  # a dataset index is the position in the shard concatenation
    assert ds.get_bucket_info() == {
        "total_buckets": 4,
        "buckets": {"wide/320x192": 2, "tall/192x320": 2, "square/256x256": 3, "tall/256x256": 1},
    }
    assert ds.cache_dir == tmp_path
    assert repr(ds) == "BaseMultiresolutionDataset(samples=8, buckets=4)"


def test_resolution_field_is_chosen_from_the_first_item(tmp_path: Path) -> None:
    both = {"bucket_resolution": [512, 512], "crop_resolution": [256, 256], "aspect_ratio": 1.0}
    ds = BaseMultiresolutionDataset(write_cache(tmp_path, [[both, dict(both)]]))
    assert ds.sorted_bucket_keys == [("square", (512, 512))]
    crop_first = {"crop_resolution": [256, 256]}
    (tmp_path / "x").mkdir()
    with pytest.raises(ValueError, match=r"item 1 must have 'crop_resolution'"):
        BaseMultiresolutionDataset(
            write_cache(tmp_path / "x", [[crop_first, {"bucket_resolution": [64, 64]}]])
        )


@pytest.mark.parametrize(
    ("ratio", "name"),
    [
        (0.5, "tall"),
        (0.8499, "tall"),
        (0.85, "square"),
        (1.0, "square"),
        (1.18, "square"),
        (1.1801, "wide"),
        (3.0, "wide"),
    ],
)
def test_aspect_name_thresholds(ratio: float, name: str) -> None:
    assert aspect_name(ratio) == name


def test_cache_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"No metadata\.json found in .*cache_dir="):
        BaseMultiresolutionDataset(tmp_path)
    (tmp_path / "metadata.json").write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match=r"Invalid metadata format in .*metadata\.json\. Expected"):
        BaseMultiresolutionDataset(tmp_path)
    write_cache(tmp_path, [[]])
    with pytest.raises(ValueError, match="dataset must hold at least one sample"):
        BaseMultiresolutionDataset(tmp_path)
    (tmp_path / "shard_000.json").write_text(json.dumps({"a": 1}))
    with pytest.raises(ValueError, match=r"shard 'shard_000\.json' must be a JSON list of items"):
        BaseMultiresolutionDataset(tmp_path)
    write_cache(tmp_path, [[item(0, 64)]])
    with pytest.raises(ValueError, match="crop_resolution must be positive"):
        BaseMultiresolutionDataset(tmp_path)
    # a bad resolution names its shard file and its place there, whatever the shard
    write_cache(tmp_path, [[item(64, 64)], [item(64, 64), {"crop_resolution": ["a", 64]}]])
    with pytest.raises(
        ValueError,
        match=rf"^{re.escape(str(tmp_path / 'shard_001.json'))}: item 1 must have "
        r"'crop_resolution' as a \(width, height\) pair .*; got \['a', 64\]$",
    ):
        BaseMultiresolutionDataset(tmp_path)
    for bad in (0, None, True, 1.5):
        with pytest.raises(
            TypeError,
            match=rf"^cache_dir must be a path \(a str or os\.PathLike\); got cache_dir={bad!r}$",
        ):
            BaseMultiresolutionDataset(bad)  # type: ignore[arg-type]
    for bad in (0, None, [1]):
        with pytest.raises(
            TypeError, match=r"^manifest must be a Manifest or a path to one; got manifest="
        ):
            BaseMultiresolutionDataset.from_manifest(bad)  # type: ignore[arg-type]
    write_cache(tmp_path, [[item(64, 64)]])
    with pytest.raises(ValueError, match="quantization must be a positive int; got quantization=0"):
        BaseMultiresolutionDataset(tmp_path, quantization=0)


def test_getitem_checks_the_index(tmp_path: Path) -> None:
    ds = BaseMultiresolutionDataset(write_cache(tmp_path, [[item(64, 64), item(64, 64)]]))
    assert ds[np.int64(1)] == item(64, 64)
    with pytest.raises(ValueError, match=r"idx must be an int in \[0, 1\]; got idx=2"):
        ds[2]
    with pytest.raises(TypeError, match="idx must be an int in"):
        ds[True]  # type: ignore[index]


def test_calculator_of_a_cache_uses_its_quantization(tmp_path: Path) -> None:
    ds = BaseMultiresolutionDataset(write_cache(tmp_path, [[item(64, 64)]]), quantization=8)
    assert ds.calculator == MultiTierBucketCalculator(quantization=8)


# -- compact arrays --------------------------------------------------------------------------------
def test_table_is_compact_and_nemo_views_are_lazy() -> None:
    ds = BaseMultiresolutionDataset.from_bucket_ids(
        np.arange(1000) % 7, resolutions=[(64 * (i + 1), 64) for i in range(7)]
    )
    t = ds.bucket_table
    assert t.indices.dtype == np.int64
    assert t.indices.shape == (1000,)
    assert t.offsets.dtype == np.int64
    assert t.offsets.shape == (8,)
    assert t.sizes.tolist() == [143, 143, 143, 143, 143, 143, 142]
    assert ds.nbytes == 8 * 1000 + 2 * 1000 + 8 * 8 + 16 * 7 + 8 * 7 + 8 * 7  # ids in 2 bytes
    assert "bucket_groups" not in ds.__dict__  # never built unless asked for
    assert ds.bucket_groups[ds.sorted_bucket_keys[0]]["indices"][:3] == [0, 7, 14]
    assert "bucket_groups" in ds.__dict__


@given(
    ids=st.lists(st.integers(0, 9), min_size=1, max_size=200),
    pixels=st.lists(st.integers(1, 4), min_size=10, max_size=10),
)
def test_group_by_bucket_matches_nemos_rule(ids: list[int], pixels: list[int]) -> None:
    order, offsets, indices = group_by_bucket(ids, pixels)
    keys, groups = reference_grouping(ids, [pixels[i] for i in ids])
    assert order.tolist() == keys
    assert [indices[offsets[j] : offsets[j + 1]].tolist() for j in range(len(keys))] == [
        groups[k] for k in keys
    ]
    assert sorted(indices.tolist()) == list(range(len(ids)))


def test_group_by_bucket_many_bucket_ids() -> None:
    # more ids than fit the 16-bit radix path: the int64 stable sort must give the same grouping
    ids = np.array([70_000, 3, 70_000, 65_536, 3, 0], dtype=np.int64)
    pixels = np.ones(70_001, dtype=np.int64)
    pixels[0] = 2
    order, offsets, indices = group_by_bucket(ids, pixels)
    assert order.tolist() == [70_000, 3, 65_536, 0]
    assert offsets.tolist() == [0, 2, 4, 5, 6]
    assert indices.tolist() == [0, 2, 1, 4, 3, 5]


def test_group_by_bucket_errors() -> None:
    with pytest.raises(ValueError, match=r"bucket_ids must lie in \[0, 1\]; got min=0, max=2"):
        group_by_bucket([0, 2], [1, 1])
    with pytest.raises(TypeError, match="bucket_ids must be an array of ints; got dtype float64"):
        group_by_bucket([0.0], [1])
    with pytest.raises(TypeError, match="bucket_ids must be an array of ints; got dtype bool"):
        group_by_bucket([True], [1])
    with pytest.raises(ValueError, match=r"bucket_ids must have 1 dimension\(s\)"):
        group_by_bucket([[0]], [1])


def test_from_bucket_ids_errors() -> None:
    with pytest.raises(ValueError, match="dataset must hold at least one sample"):
        BaseMultiresolutionDataset.from_bucket_ids([], resolutions=[(64, 64)])
    with pytest.raises(ValueError, match=r"resolutions must have shape \(K, 2\)"):
        BaseMultiresolutionDataset.from_bucket_ids([0], resolutions=[(64, 64, 1)])
    with pytest.raises(ValueError, match="resolutions must be positive; got min=0"):
        BaseMultiresolutionDataset.from_bucket_ids([0], resolutions=[(64, 0)])
    with pytest.raises(ValueError, match=r"aspect_ratios must have shape \(1,\)"):
        BaseMultiresolutionDataset.from_bucket_ids([0], resolutions=[(64, 64)], aspect_ratios=[])


def test_from_bucket_ids_items_and_aspect_ratios() -> None:
    ds = BaseMultiresolutionDataset.from_bucket_ids(
        [1, 0, 1], resolutions=[(64, 64), (128, 64)], aspect_ratios=[1.0, 1.1]
    )
    # the given ratio decides the name: 1.1 is "square" although 128x64 is wide
    assert ds.sorted_bucket_keys == [("square", (64, 64)), ("square", (128, 64))]
    assert ds[2] == {"index": 2, "bucket": 1, "bucket_resolution": (128, 64), "aspect_ratio": 1.1}
    assert ds.metadata is None


def test_fingerprint_covers_buckets_and_membership() -> None:
    res = [(64, 64), (128, 64)]
    a = BaseMultiresolutionDataset.from_bucket_ids([0, 1, 1], resolutions=res).bucket_table
    b = BaseMultiresolutionDataset.from_bucket_ids([1, 0, 1], resolutions=res).bucket_table
    c = BaseMultiresolutionDataset.from_bucket_ids([0, 0, 1], resolutions=res).bucket_table
    d = BaseMultiresolutionDataset.from_bucket_ids(
        [0, 1, 1], resolutions=[(64, 64), (64, 128)]
    ).bucket_table
    again = BaseMultiresolutionDataset.from_bucket_ids([0, 1, 1], resolutions=res).bucket_table
    # b has a's bucket sizes, but samples 0 and 1 swapped buckets (a rescan after renames)
    assert len({a.fingerprint, b.fingerprint, c.fingerprint, d.fingerprint}) == 4
    assert a.fingerprint == again.fingerprint
    assert len(a.fingerprint) == 16


def test_bucket_table_checks_its_arrays() -> None:
    i64 = np.int64
    ok: dict[str, Any] = {
        "resolutions": np.array([[64, 64]], i64),
        "aspect_names": ("square",),
        "aspect_ratios": np.array([1.0]),
        "offsets": np.array([0, 2], i64),
        "indices": np.array([0, 1], i64),
    }
    BucketTable(**ok)
    with pytest.raises(ValueError, match="offsets must increase strictly"):
        BucketTable(**{**ok, "offsets": np.array([0, 3], i64)})
    with pytest.raises(ValueError, match=r"resolutions must have shape \(1, 2\)"):
        BucketTable(**{**ok, "resolutions": np.array([64, 64], i64)})
    with pytest.raises(ValueError, match="dataset must hold at least one sample"):
        BucketTable(**{**ok, "indices": np.zeros(0, i64), "offsets": np.array([0, 0], i64)})


def test_from_nemo_groups_round_trip(tmp_path: Path) -> None:
    shards = [[item(256, 256, 1.0), item(320, 192, 1.667), item(256, 256, 1.0)]]
    ds = BaseMultiresolutionDataset(write_cache(tmp_path, shards))
    t = BucketTable.from_nemo_groups(ds.sorted_bucket_keys, ds.bucket_groups)
    assert t.fingerprint == ds.bucket_table.fingerprint
    assert np.array_equal(t.indices, ds.bucket_table.indices)
    with pytest.raises(ValueError, match="bucket_groups must not contain empty buckets"):
        BucketTable.from_nemo_groups(["k"], {"k": {"indices": [], "resolution": (1, 1)}})


# -- image sizes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("compat", ["default", "nemo"])
def test_from_sizes_groups_by_the_calculator(compat: str) -> None:
    rng = np.random.default_rng(5)
    w = rng.integers(100, 3000, 500)
    h = rng.integers(100, 3000, 500)
    calc = MultiTierBucketCalculator(64, 512 * 512, compat=compat)
    ds = BaseMultiresolutionDataset.from_sizes(w, h, calculator=calc)
    buckets = [calc.get_bucket_for_image(int(a), int(b)) for a, b in zip(w, h, strict=True)]
    keys = [(aspect_name(b["aspect_ratio"]), b["resolution"]) for b in buckets]
    ref_keys, groups = reference_grouping(keys, [b["pixels"] for b in buckets])
    assert ds.sorted_bucket_keys == ref_keys
    assert {k: v["indices"] for k, v in ds.bucket_groups.items()} == groups
    assert ds.calculator is calc
    assert ds[3]["width"] == int(w[3])
    assert ds[3]["bucket_resolution"] == buckets[3]["resolution"]


def test_from_sizes_errors() -> None:
    with pytest.raises(ValueError, match="widths and heights must have one shape"):
        BaseMultiresolutionDataset.from_sizes([1, 2], [1])
    with pytest.raises(ValueError, match=r"widths must be a non-empty array .*; got widths=\[\]"):
        BaseMultiresolutionDataset.from_sizes([], [])


# -- NeMo's own dataset as oracle (optional) -------------------------------------------------------
def nemo_diffusion_module(name: str) -> types.ModuleType:
    """Import ``nemo_automodel/components/datasets/diffusion/<name>.py`` without NeMo's package
    ``__init__`` (which pulls heavy extras): a bare parent package is registered first."""
    root = nemo_oracle.nemo_root()
    folder = None if root is None else root / "components" / "datasets" / "diffusion"
    if folder is None or not (folder / f"{name}.py").is_file():
        pytest.skip("nemo-automodel==0.7.0 is not installed (optional oracle)")
    package = "_dataorder_nemo_oracle_diffusion"
    if package not in sys.modules:
        module = types.ModuleType(package)
        module.__path__ = [str(folder)]
        sys.modules[package] = module
    return importlib.import_module(f"{package}.{name}")


def nemo_dataset(cache: Path, quantization: int = 64) -> Any:
    base = nemo_diffusion_module("base_dataset")

    class Cached(base.BaseMultiresolutionDataset):  # type: ignore[misc,name-defined]
        def __getitem__(self, idx: int) -> Any:
            return self.metadata[idx]

    return Cached(str(cache), quantization=quantization)


def test_grouping_equals_nemos_dataset(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    res = [(256, 256), (320, 192), (192, 320), (384, 160), (160, 384), (224, 288)]
    ratios = [1.0, 1.667, 0.6, 0.84, 0.85, 1.18, 1.19, 0.5]
    key = "bucket_resolution"
    shards = [
        [item(*res[rng.integers(6)], float(rng.choice(ratios)), key) for _ in range(40)]
        for _ in range(3)
    ]
    shards[1].append({key: [256, 256]})  # no aspect_ratio
    nemo = nemo_dataset(write_cache(tmp_path, shards))
    ours = BaseMultiresolutionDataset(tmp_path)
    assert ours.sorted_bucket_keys == nemo.sorted_bucket_keys
    assert ours.bucket_groups == nemo.bucket_groups
    assert ours.get_bucket_info() == nemo.get_bucket_info()
    assert [ours[i] for i in range(len(ours))] == nemo.metadata


# -- scan manifests -------------------------------------------------------------------------------
def test_from_manifest_path_and_object(tmp_path: Path) -> None:
    from dataorder.diffusion.scan.images import build_manifest, read_manifest, write_manifest

    rng = np.random.default_rng(3)
    w = rng.integers(100, 2000, 300)
    h = rng.integers(100, 2000, 300)
    calc = MultiTierBucketCalculator.from_preset("512p")
    paths = [f"img {i}.jpg" for i in range(300)]
    manifest = build_manifest(paths, w, h, calc, errors=[("bad.jpg", "truncated")])
    write_manifest(manifest, tmp_path / "m.tsv.gz")
    from_path = BaseMultiresolutionDataset.from_manifest(tmp_path / "m.tsv.gz")
    from_object = BaseMultiresolutionDataset.from_manifest(read_manifest(tmp_path / "m.tsv.gz"))
    from_sizes = BaseMultiresolutionDataset.from_sizes(w, h, calculator=calc)
    for ds in (from_path, from_object):
        assert len(ds) == 300
        assert ds.bucket_table.fingerprint == from_sizes.bucket_table.fingerprint
        assert np.array_equal(ds.bucket_table.indices, from_sizes.bucket_table.indices)
        assert ds.calculator == calc  # rebuilt from the manifest's configuration
        assert ds[7] == {**from_sizes[7], "path": "img 7.jpg"}
