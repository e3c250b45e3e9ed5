"""Hostile input against dataorder.diffusion (the engine: tests/helpers/hostile.py): the bucket
sampler, calculators, datasets, manifests, scans, crops, stats and plots; and corrupt manifests
and NeMo caches (the error names the file, and the line for JSON)."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dataorder import (
    BaseMultiresolutionDataset,
    Manifest,
    MultiTierBucketCalculator,
    SequentialBucketSampler,
    VideoBucketCalculator,
    bucket_stats,
    build_manifest,
    format_bucket_table,
    plot_bucket_stats,
    read_manifest,
    resize_and_crop,
    scan_images,
    write_manifest,
)
from dataorder.core.keys import MAX_SEED
from dataorder.diffusion.buckets.lookup import MAX_IMAGE_SIDE
from tests.helpers.hang import hang_guard
from tests.helpers.hostile import (
    HANG_SECONDS,
    MAX_BATCH_SIZE,
    MAX_DP_SIZE,
    MAX_PIXELS,
    Bool,
    Case,
    Int,
    Never,
    _resolve,
    kwargs_case,
    make_ctx,
    needs_setitimer,
    params,
    run_one,
    sampler_methods,
    use_calculator,
    use_ints,
    use_manifest,
    use_sampler,
    use_video_calculator,
    with_partners,
)

pytestmark = needs_setitimer


def build_cases() -> list[Case]:
    size = Int(1, MAX_IMAGE_SIDE, legal=512)
    size_el = dataclasses.replace(size, element=True)  # one element of an array
    cases: list[Case] = []
    bucket_base = {"dataset": "ctx.dataset", "base_batch_size": 2, "num_replicas": 2, "rank": 1}
    cases += kwargs_case(
        "SequentialBucketSampler",
        SequentialBucketSampler,
        bucket_base,
        {
            "dataset": Never(),
            "base_batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
            "drop_last": Bool(),
            "shuffle_buckets": Bool(),
            "shuffle_within_bucket": Bool(),
            "dynamic_batch_size": Bool(),
            "seed": Int(0, MAX_SEED),
            "num_replicas": Int(1, MAX_DP_SIZE, legal=2, none="either"),
            "rank": Int(0, 1, none="either"),
            "compat": Never(),
        },
        use_sampler,
    )
    cases.append(
        Case(
            "SequentialBucketSampler",
            "base_resolution[0]",
            Int(1, legal=512),
            lambda ctx, v: SequentialBucketSampler(
                ctx.dataset, base_batch_size=2, num_replicas=2, rank=1, base_resolution=(v, 512)
            ),
            use_sampler,
            names=("base_resolution[0]", "base_resolution"),
        )
    )

    def bucket_sampler(ctx: SimpleNamespace) -> SequentialBucketSampler:
        return SequentialBucketSampler(ctx.dataset, base_batch_size=2, num_replicas=2, rank=1)

    cases += sampler_methods("SequentialBucketSampler", bucket_sampler, 2)
    cases.append(
        Case(
            "SequentialBucketSampler.get_batch_info",
            "batch_idx",
            Int(0, 1),
            lambda ctx, v: bucket_sampler(ctx).get_batch_info(v),
        )
    )

    # buckets, datasets, manifests, scans, crops, stats
    cases += kwargs_case(
        "MultiTierBucketCalculator",
        MultiTierBucketCalculator,
        {},
        {
            "quantization": Int(1, legal=64),
            "max_pixels": Int(4096, MAX_PIXELS, legal=65536, none="accept"),  # and 1e30 below
            "debug_mode": Bool(),
            "max_batch_size": Int(1, none="accept"),
            "no_upscale": Bool(),
            "compat": Never(),
            "aspect_ratios": Never(none="accept"),
        },
        use_calculator,
    )
    cases.append(
        Case(
            "MultiTierBucketCalculator",
            "max_pixels",
            Int(4096, MAX_PIXELS, legal=65536),
            lambda ctx, v: MultiTierBucketCalculator(64, v),  # type: ignore[arg-type]
            use_calculator,
            values=(),
            extra=(1e30, np.float64(65536.0), 2**40, 2**40 + 1),  # 1e30 was once a MemoryError
        )
    )
    cases += kwargs_case(
        "MultiTierBucketCalculator.from_preset",
        MultiTierBucketCalculator.from_preset,
        {"preset": "512p"},
        {"preset": Never(), "quantization": Int(1, legal=64)},
        use_calculator,
    )
    cases += [
        Case("MultiTierBucketCalculator.assign", "widths[0]", size_el,
             lambda ctx, v: ctx.calc.assign([v, 512], [512, 512]), names=("widths[0]", "widths")),
        Case("MultiTierBucketCalculator.get_bucket_for_image", "image_width", size,
             lambda ctx, v: ctx.calc.get_bucket_for_image(v, 512)),
        Case("MultiTierBucketCalculator.get_bucket_by_id", "bucket_id", Int(0, 14),
             lambda ctx, v: ctx.calc.get_bucket_by_id(v)),
        Case("MultiTierBucketCalculator.get_dynamic_batch_size", "base_batch_size", Int(1, legal=4),
             lambda ctx, v: ctx.calc.get_dynamic_batch_size(
                 (512, 512), base_batch_size=v, base_resolution=(512, 512)),
             use_ints),
    ]  # fmt: skip
    cases += kwargs_case(
        "BaseMultiresolutionDataset",
        BaseMultiresolutionDataset,
        {"cache_dir": "ctx.cache_dir"},
        {"cache_dir": Never(), "quantization": Int(1, legal=64)},
        len,
    )
    cases += [
        Case("BaseMultiresolutionDataset.from_sizes", "widths[0]", size_el,
             lambda ctx, v: BaseMultiresolutionDataset.from_sizes(
                 [v, 512], [512, 512], calculator=ctx.calc),
             len, names=("widths[0]", "widths")),
        Case("BaseMultiresolutionDataset.from_bucket_ids", "bucket_ids[0]", Int(0, 1, element=True),
             lambda ctx, v: BaseMultiresolutionDataset.from_bucket_ids(
                 [v, 1], [(64, 64), (64, 128)]),
             len, names=("bucket_ids[0]", "bucket_ids")),
        Case("BaseMultiresolutionDataset.from_manifest", "manifest", Never(),
             lambda ctx, v: BaseMultiresolutionDataset.from_manifest(v)),  # type: ignore[arg-type]
    ]  # fmt: skip
    manifest_base = {
        "paths": ["a.jpg"],
        "widths": [512],
        "heights": [512],
        "bucket_ids": [7],
        "buckets": "ctx.all_buckets",
        "calculator": "ctx.calc_config",
    }
    cases += kwargs_case(
        "Manifest",
        Manifest,
        manifest_base,
        {"paths": Never(), "buckets": Never(), "calculator": Never(), "errors": Never()},
        use_manifest,
    )
    for column, dom in (
        ("widths", size_el),
        ("heights", size_el),
        ("bucket_ids", Int(0, 14, legal=7, element=True)),
    ):
        cases.append(
            Case(
                "Manifest",
                f"{column}[0]",
                dom,
                lambda ctx, v, column=column: Manifest(
                    **{**{k: _resolve(ctx, x) for k, x in manifest_base.items()}, column: [v]}
                ),
                use_manifest,
                names=(f"{column}[0]", column),
            )
        )
    cases += kwargs_case(
        "build_manifest",
        build_manifest,
        {"paths": ["a.jpg"], "widths": [512], "heights": [512], "calculator": "ctx.calc"},
        {"paths": Never(), "calculator": Never()},
        use_manifest,
    )
    cases.append(
        Case(
            "build_manifest",
            "widths[0]",
            size_el,
            lambda ctx, v: build_manifest(["a.jpg"], [v], [512], ctx.calc),
            use_manifest,
            names=("widths[0]", "widths"),
        )
    )
    cases += kwargs_case("read_manifest", read_manifest, {}, {"path": Never()})
    cases += kwargs_case(
        "write_manifest",
        write_manifest,
        {"manifest": "ctx.manifest", "path": "ctx.out_manifest"},
        {"manifest": Never(), "path": Never()},
    )
    cases += kwargs_case(
        "scan_images",
        scan_images,
        {"paths_or_dir": "ctx.image_dir", "calculator": "ctx.calc", "progress": False},
        {
            "paths_or_dir": Never(),
            "calculator": Never(),
            "workers": Int(1, none="accept"),
            "progress": Bool(),
            "exif_orientation": Bool(),
            "extensions": Never(),
        },
        use_manifest,
    )
    cases += kwargs_case(
        "resize_and_crop",
        resize_and_crop,
        {"image": "ctx.image", "target_width": 8, "target_height": 8},
        {
            "image": Never(),
            "target_width": Int(1, legal=8),
            "target_height": Int(1, legal=8),
            "crop_mode": Never(),
            "seed": Int(0, none="accept"),
        },
    )
    cases += kwargs_case(
        "bucket_stats",
        bucket_stats,
        {"source": "ctx.manifest", "num_replicas": 2, "batch_size": 2},
        {
            "source": Never(),
            "num_replicas": Int(1, MAX_DP_SIZE, legal=2),
            "batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
            "drop_last": Bool(),
        },
        format_bucket_table,
    )
    cases += kwargs_case("format_bucket_table", format_bucket_table, {}, {"stats": Never()})
    cases += kwargs_case(
        "plot_bucket_stats",
        plot_bucket_stats,
        {"stats": "ctx.stats", "path": "ctx.out_png"},
        {"stats": Never(), "path": Never(), "dpi": Int(1, legal=20)},
    )

    # video buckets
    cases += kwargs_case(
        "VideoBucketCalculator",
        VideoBucketCalculator,
        {"max_tokens": 4096, "max_frames": 17},
        {
            "max_tokens": Int(3, legal=4096),
            "max_frames": Int(1, legal=17, none="either"),
            "spatial_compression": Int(1, legal=8),
            "temporal_compression": Int(1, legal=4),
            "max_batch_size": Int(1, legal=4, none="accept"),
        },
        use_video_calculator,
    )
    return cases


CASES = with_partners(build_cases())


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return make_ctx(tmp_path_factory)


@pytest.mark.parametrize(("case", "value"), list(params(CASES)))
def test_hostile_value(case: Case, value: object, ctx: SimpleNamespace) -> None:
    run_one(case, value, ctx)


# -- corrupt files: manifests and NeMo caches ---------------------------------------------------
def _manifest_bytes(ctx: SimpleNamespace) -> tuple[dict[str, Any], list[str]]:
    write_manifest(ctx.manifest, ctx.out_manifest)
    header, *rows = ctx.out_manifest.read_text().split("\n")
    return json.loads(header), rows


FILE_CASES: list[tuple[str, Callable[[SimpleNamespace, Path], Path], str]] = []


def file_case(
    name: str, fragment: str
) -> Callable[[Callable[[SimpleNamespace, Path], Path]], None]:
    def register(write: Callable[[SimpleNamespace, Path], Path]) -> None:
        FILE_CASES.append((name, write, fragment))

    return register


def _manifest_with(ctx: SimpleNamespace, root: Path, **header: object) -> Path:
    h, rows = _manifest_bytes(ctx)
    path = root / "m.tsv"
    path.write_text("\n".join([json.dumps({**h, **header}), *rows]))
    return path


@file_case("manifest buckets null", ":1: buckets must be a list")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    return _manifest_with(ctx, root, buckets=None)


@file_case("manifest errors [1, 2]", ":1: errors[0] must be a [path, reason] pair")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    return _manifest_with(ctx, root, errors=[1, 2])


@file_case("manifest version true", ":1: manifest version must be 1; got version=True")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    return _manifest_with(ctx, root, version=True)


@file_case("manifest cut in its last row", ":41: the last row has no newline")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    path = _manifest_with(ctx, root)
    path.write_bytes(path.read_bytes()[:-3])
    return path


@file_case("manifest .gz cut short", ": corrupt or truncated gzip data (EOFError")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    path = root / "m.tsv.gz"
    write_manifest(ctx.manifest, path)
    path.write_bytes(path.read_bytes()[:-40])
    return path


@file_case("manifest .gz garbage", ":1: corrupt or truncated gzip data")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    path = root / "m.tsv.gz"
    path.write_bytes(gzip.compress(b"x")[:4] + bytes(range(200)))
    return path


@file_case("NeMo metadata.json not JSON", "metadata.json:1: ")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    (root / "metadata.json").write_text('{"shards": [')
    return root


@file_case("NeMo shard not JSON", "shard_000.json:2: ")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    (root / "metadata.json").write_text(json.dumps({"shards": ["shard_000.json"]}))
    (root / "shard_000.json").write_text('[{"crop_resolution": [64, 64],\n "cache_file": }]')
    return root


@file_case("NeMo shard not a list", "shard_000.json: shard 'shard_000.json' must be a JSON list")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    (root / "metadata.json").write_text(json.dumps({"shards": ["shard_000.json"]}))
    (root / "shard_000.json").write_text(json.dumps({"a": 1}))
    return root


@file_case("NeMo crop_resolution of text", "crop_resolution")
def _(ctx: SimpleNamespace, root: Path) -> Path:
    (root / "metadata.json").write_text(json.dumps({"shards": ["shard_000.json"]}))
    (root / "shard_000.json").write_text(json.dumps([{"crop_resolution": ["a", 64]}]))
    return root


@pytest.mark.parametrize(("name", "write", "fragment"), FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_hostile_files(
    ctx: SimpleNamespace,
    tmp_path: Path,
    name: str,
    write: Callable[[SimpleNamespace, Path], Path],
    fragment: str,
) -> None:
    """A corrupt manifest or NeMo cache: a ValueError naming the file (and line, for JSON)."""
    path = write(ctx, tmp_path)
    load = read_manifest if name.startswith("manifest") else BaseMultiresolutionDataset
    with hang_guard(HANG_SECONDS):
        try:
            load(path)  # type: ignore[operator]
        except ValueError as err:
            message = str(err)
        except BaseException as err:
            pytest.fail(f"{name}: {type(err).__name__} instead of a ValueError: {err}")
        else:
            pytest.fail(f"{name}: accepted")
    assert str(tmp_path) in message, f"the message does not name the file: {message}"
    assert fragment in message, message
