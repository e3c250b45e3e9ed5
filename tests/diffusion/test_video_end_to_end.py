"""Video buckets end to end: the manifest's frames column, the dataset, the sampler, bucket_stats.

A video bucket is a shape ``(w, h, frames)``; everything the image path does (lock-step batches,
resume, elastic resume, both bucket orders) must hold unchanged, and image manifests, tables and
states must read exactly as before.
"""

from __future__ import annotations

import csv
import doctest
import gzip
import json
import re
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dataorder
import dataorder.diffusion.scan.manifest as manifest_module
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import (
    TOO_SMALL,
    VideoBucketCalculator,
    resample_frame_counts,
    trim_loss,
)
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.diffusion.sampler.stats import bucket_stats, format_bucket_table, plot_bucket_stats
from dataorder.diffusion.sampler.table import table_from_ids
from dataorder.diffusion.scan.manifest import (
    COLUMNS,
    VIDEO_COLUMNS,
    Manifest,
    build_manifest,
    manifest_from_scan,
    read_manifest,
    write_manifest,
)
from dataorder.diffusion.scan.videos import build_video_scan

#: 18 buckets: frame counts 1, 17, ..., 81 at 1:1, 16:9 and 9:16 (Wan 2.1's 480p budget).
CALC = VideoBucketCalculator.from_preset(
    "wan2.1-480p", aspect_ratios=["1:1", "16:9"], frame_step=16
)


def _shipped_clips() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shipped clip population, frame counts resampled to Wan's 16 fps, assigned clips."""
    path = Path(dataorder.__file__).resolve().parent / "data" / "clip_sizes.csv"
    with path.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    w = np.array([int(r["width"]) for r in rows])
    h = np.array([int(r["height"]) for r in rows])
    fps = np.array([float(Fraction(r["fps"])) for r in rows])
    f = resample_frame_counts(np.array([int(r["frames"]) for r in rows]), fps, 16)
    keep = CALC.assign(w, h, f) >= 0
    return w[keep], h[keep], f[keep]


W, H, F = (a[:400] for a in _shipped_clips())
PATHS = [f"clip {i}.mp4" for i in range(W.size)]


def test_manifest_doctests() -> None:
    result = doctest.testmod(manifest_module)
    assert result.failed == 0
    assert result.attempted >= 5


# -- the manifest ----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_video_manifest_round_trip(tmp_path: Path, suffix: str) -> None:
    m = build_manifest(PATHS, W, H, CALC, frames=F, errors=[("bad.mp4", "no video stream")])
    assert m.is_video
    assert m.columns == VIDEO_COLUMNS
    assert m.bucket_ids.tolist() == CALC.assign(W, H, F).tolist()
    path = tmp_path / f"clips{suffix}"
    write_manifest(m, path)
    raw = gzip.decompress(path.read_bytes()) if suffix.endswith(".gz") else path.read_bytes()
    lines = raw.decode().splitlines()
    header = json.loads(lines[0])
    assert header["columns"] == ["width", "height", "frames", "bucket_id", "path"]
    assert header["calculator"]["kind"] == "video"
    assert lines[1] == f"{W[0]}\t{H[0]}\t{F[0]}\t{m.bucket_ids[0]}\tclip 0.mp4"
    back = read_manifest(path)
    assert back.frames is not None
    assert back.frames.tolist() == F.tolist()
    assert back.paths == PATHS
    assert back.errors == m.errors
    assert back.buckets == CALC.get_all_buckets()
    assert back.calculator_object() == CALC


def test_image_manifests_are_written_and_read_as_before(tmp_path: Path) -> None:
    calc = MultiTierBucketCalculator.from_preset("512p")
    m = build_manifest(["a b.jpg", "ü\t2.png"], [640, 300], [480, 900], calc)
    assert m.frames is None
    assert not m.is_video
    path = tmp_path / "images.tsv"
    write_manifest(m, path)
    lines = path.read_text(encoding="utf-8").split("\n")
    header = json.loads(lines[0])
    assert list(header) == ["format", "version", "count", "columns", "calculator", "buckets",
                            "errors"]  # fmt: skip
    assert header["columns"] == COLUMNS == ["width", "height", "bucket_id", "path"]
    assert all(set(b) == {"id", "resolution", "aspect_ratio", "pixels"} for b in header["buckets"])
    a, b = m.bucket_ids.tolist()
    assert lines[1:] == [f"640\t480\t{a}\ta b.jpg", f"300\t900\t{b}\tü\\t2.png", ""]
    assert read_manifest(path).frames is None


def _edit(path: Path, edit: Any) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    edit(lines)
    path.write_text("\n".join(lines), encoding="utf-8")


def test_manifest_refusals(tmp_path: Path) -> None:
    video = build_manifest(PATHS[:3], W[:3], H[:3], CALC, frames=F[:3])
    image = build_manifest(["a.jpg"], [512], [512], MultiTierBucketCalculator())
    cases: list[tuple[str, Manifest, Any, str]] = [
        ("frame0", video,
         lambda ls: ls.__setitem__(1, re.sub(r"^(\d+\t\d+\t)\d+", r"\g<1>0", ls[1])),
         ":2: frames must be an int in [1, 2147483647]; got frames=0"),
        ("image-columns", video, lambda ls: ls.__setitem__(0, ls[0].replace('"frames", ', "")),
         ":1: the columns are an image manifest's but the calculator's kind is 'video'"),
        ("video-columns", image, lambda ls: ls.__setitem__(
            0, ls[0].replace('"height", "bucket_id"', '"height", "frames", "bucket_id"')),
         ":1: the columns are a video manifest's but the calculator's kind is 'image'"),
        ("columns", image, lambda ls: ls.__setitem__(0, ls[0].replace('"width", ', "")),
         ":1: columns must be ['width', 'height', 'bucket_id', 'path'] (images) or "
         "['width', 'height', 'frames', 'bucket_id', 'path'] (videos)"),
        ("short-row", video, lambda ls: ls.__setitem__(2, "1\t2\t3\tx.mp4"),
         ":3: expected 5 tab-separated columns"),
    ]  # fmt: skip
    for name, m, edit, message in cases:
        path = tmp_path / f"{name}.tsv"
        write_manifest(m, path)
        _edit(path, edit)
        with pytest.raises(ValueError, match=re.escape(f"{path}{message}")):
            read_manifest(path)
    fields = {k: getattr(video, k) for k in ("paths", "widths", "heights", "bucket_ids")}
    with pytest.raises(TypeError, match=r"frames must be frame counts \(the calculator is a video"):
        Manifest(**fields, buckets=video.buckets, calculator=video.calculator)
    with pytest.raises(ValueError, match="frames must be None for images; got frames="):
        Manifest(["a.jpg"], [1], [1], [0], image.buckets, image.calculator, frames=[1])
    with pytest.raises(ValueError, match=r"frames\[1\] must be an int in \[1, 2147483647\]"):
        Manifest(**fields, buckets=video.buckets, calculator=video.calculator, frames=[1, 0, 1])
    with pytest.raises(TypeError, match=r"frames must be frame counts \(a video calculator\)"):
        build_manifest(["a.mp4"], [640], [360], CALC)
    with pytest.raises(TypeError, match=r"frames must be None \(an image calculator\)"):
        build_manifest(["a.jpg"], [640], [360], MultiTierBucketCalculator(), frames=[3])
    with pytest.raises(ValueError, match="paths, widths, heights and frames must be 1-D"):
        build_manifest(["a.mp4"], [640], [360], CALC, frames=[3, 4])


def test_clips_without_a_bucket_are_errors_with_their_reason() -> None:
    paths, w, h, f = ["big.mp4", "tiny.mp4"], [1280, 160], [720, 90], [40, 40]
    with pytest.raises(
        ValueError,
        match=r"clip 'tiny\.mp4' has no bucket \(too small: 160x90 needs more than 3/2 upscaling",
    ):
        build_manifest(paths, w, h, CALC, frames=f)
    scan = build_video_scan(paths, w, h, f, CALC, errors=[("gone.mp4", "FileNotFoundError")])
    assert scan.bucket_ids.tolist()[1] == TOO_SMALL
    m = manifest_from_scan(scan)
    assert m.paths == ["big.mp4"]
    assert m.frames is not None
    assert m.frames.tolist() == [40]
    assert [p for p, _ in m.errors] == ["gone.mp4", "tiny.mp4"]
    assert m.errors[1][1].startswith("too small: 160x90")
    with pytest.raises(TypeError, match="scan must be a VideoScan"):
        manifest_from_scan(m)  # type: ignore[arg-type]


# -- the dataset and its bucket table --------------------------------------------------------------


def test_video_dataset_from_sizes_and_from_manifest(tmp_path: Path) -> None:
    ds = BaseMultiresolutionDataset.from_video_sizes(W, H, F, CALC)
    t = ds.bucket_table
    assert t.frames is not None
    assert t.tokens is not None
    assert t.is_video
    buckets = CALC.get_all_buckets()
    ids = CALC.assign(W, H, F)
    used = np.unique(ids)
    assert t.num_buckets == used.size
    assert t.num_samples == W.size
    # rows sorted by latent tokens (ties: first appearance), each row one (w, h, frames) shape
    assert np.all(np.diff(t.tokens) >= 0)
    for j in range(t.num_buckets):
        members = t.bucket_indices(j)
        b = buckets[int(ids[members[0]])]
        assert np.all(ids[members] == b["id"])
        assert t.key(j) == (t.aspect_names[j], b["resolution"], b["frames"])
        assert (int(t.frames[j]), int(t.tokens[j])) == (b["frames"], b["tokens"])
    info = ds.get_bucket_info()
    assert info["total_buckets"] == t.num_buckets
    assert "wide/832x480x81f" in info["buckets"]
    item = ds[5]
    bucket = buckets[int(ids[5])]
    assert item["bucket_frames"] == bucket["frames"] <= item["frames"] == int(F[5])
    assert item["bucket_resolution"] == bucket["resolution"]
    assert (item["width"], item["height"]) == (int(W[5]), int(H[5]))
    # a manifest gives the same dataset: same table, same fingerprint, same calculator
    path = tmp_path / "clips.tsv"
    write_manifest(build_manifest(PATHS, W, H, CALC, frames=F), path)
    from_file = BaseMultiresolutionDataset.from_manifest(path)
    assert from_file.bucket_table.fingerprint == t.fingerprint
    assert from_file.calculator == CALC
    assert from_file[5]["path"] == "clip 5.mp4"
    assert from_file[5]["frames"] == int(F[5])
    # NeMo's attribute names keep frames apart, and the table rebuilt from them is the same
    groups = ds.bucket_groups
    assert all(len(key) == 3 and groups[key]["frames"] == key[2] for key in groups)
    ds.sorted_bucket_keys = list(reversed(ds.sorted_bucket_keys))
    assert ds.bucket_table.frames is not None
    assert ds.bucket_table.frames.tolist() == t.frames[::-1].tolist()


def test_video_dataset_refusals() -> None:
    with pytest.raises(
        ValueError, match=r"clip 1 \(160x90, 40 frames\) has no bucket \(too small\)"
    ):
        BaseMultiresolutionDataset.from_video_sizes([1280, 160], [720, 90], [40, 40], CALC)
    with pytest.raises(TypeError, match="calculator must be a VideoBucketCalculator"):
        BaseMultiresolutionDataset.from_video_sizes(
            [1280], [720], [40], MultiTierBucketCalculator()
        )
    with pytest.raises(
        TypeError, match=r"calculator must be a MultiTierBucketCalculator \(for clips"
    ):
        BaseMultiresolutionDataset.from_sizes([1280], [720], CALC)
    with pytest.raises(ValueError, match=r"widths, heights and frames must have one shape"):
        BaseMultiresolutionDataset.from_video_sizes([1280], [720], [40, 41], CALC)
    with pytest.raises(ValueError, match=r"frames must have shape \(2,\) \(one per bucket id\)"):
        BaseMultiresolutionDataset.from_bucket_ids([0, 1], [(64, 64), (64, 128)], frames=[5])
    with pytest.raises(ValueError, match="tokens are a video table's: pass frames too"):
        BaseMultiresolutionDataset.from_bucket_ids([0, 1], [(64, 64), (64, 128)], tokens=[1, 2])


def test_image_fingerprints_are_unchanged_and_frames_are_hashed() -> None:
    ids, res = [2, 0, 1, 1, 2, 0, 0, 2, 1], [(256, 256), (320, 192), (192, 320)]
    image, _ = table_from_ids(ids, res, None)
    assert image.fingerprint == "4f4b77df0cac0734"  # pinned before video existed
    assert image.frames is None
    assert image.key(0) == ("tall", (192, 320))
    # frames that keep the pixel order: the same rows, the same membership, another fingerprint
    video, _ = table_from_ids(ids, res, None, frames=[1, 1, 1])
    other, _ = table_from_ids(ids, res, None, frames=[1, 1, 5])
    assert video.indices.tolist() == image.indices.tolist()
    assert len({image.fingerprint, video.fingerprint, other.fingerprint}) == 3
    assert video.key(0) == ("tall", (192, 320), 1)


# -- the sampler -------------------------------------------------------------------------------


@pytest.mark.parametrize("bucket_order", ["sequential", "interleaved"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_sampler_reads_video_buckets_in_lock_step(bucket_order: str, dynamic: bool) -> None:
    ds = BaseMultiresolutionDataset.from_video_sizes(W, H, F, CALC)
    table = ds.bucket_table
    world = 4

    def make(rank: int, num_replicas: int = world) -> SequentialBucketSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return SequentialBucketSampler(
                ds, base_batch_size=2, drop_last=False, dynamic_batch_size=dynamic, seed=7,
                num_replicas=num_replicas, rank=rank, bucket_order=bucket_order,
            )  # fmt: skip

    samplers = [make(r) for r in range(world)]
    if dynamic:  # the cost model: tokens, relative to the full budget
        by_id = CALC.batch_sizes(2)
        row_ids = [CALC.get_bucket_by_shape(*table.key(j)[1], table.key(j)[2])["id"]
                   for j in range(table.num_buckets)]  # fmt: skip
        assert samplers[0].batch_sizes.tolist() == by_id[row_ids].tolist()
        assert len(set(samplers[0].batch_sizes.tolist())) > 1
    else:
        assert set(samplers[0].batch_sizes.tolist()) == {2}
    epochs = [list(s) for s in samplers]
    steps = len(samplers[0])
    assert all(len(e) == steps for e in epochs)
    row_of = np.empty(len(ds), dtype=np.int64)
    for j in range(table.num_buckets):
        row_of[table.bucket_indices(j)] = j
    seen = []
    for k in range(steps):
        rows = {int(row_of[i]) for e in epochs for i in e[k]}
        assert len(rows) == 1  # one shape, frames included, on every rank at step k
        info = samplers[1].get_batch_info(k, epoch=0)
        assert info["bucket"] == rows.pop()
        assert info["frames"] == int(table.frames[info["bucket"]])  # type: ignore[index]
        assert info["bucket_key"] == table.key(info["bucket"])
        seen += [i for e in epochs for i in e[k]]
    assert set(seen) == set(range(len(ds)))  # drop_last=False: every clip each epoch
    # resume after step 9 of epoch 0 (elastic resumes: the contract suite's video case)
    live = make(0)
    it = iter(live)
    for _ in range(9):
        next(it)
    state = json.loads(json.dumps(live.state_dict()))
    for r in range(world):
        resumed = make(r)
        resumed.load_state_dict(state)
        assert list(resumed) == epochs[r][9:]
    assert re.search(r"\d+x\d+x\d+f, ", dict(live.describe_progress())["position"])


def test_video_dynamic_batches_refuse_a_base_resolution_and_nemo() -> None:
    ds = BaseMultiresolutionDataset.from_video_sizes(W, H, F, CALC)
    with pytest.raises(ValueError, match=r"base_resolution must be \(512, 512\) \(unused\) for"):
        SequentialBucketSampler(ds, 2, (1024, 1024), dynamic_batch_size=True, num_replicas=1,
                                rank=0)  # fmt: skip
    with pytest.raises(ValueError, match="compat='nemo' is NeMo's pixel formula"):
        SequentialBucketSampler(ds, 2, dynamic_batch_size=True, num_replicas=1, rank=0,
                                compat="nemo")  # fmt: skip
    plain = BaseMultiresolutionDataset.from_bucket_ids([0, 1], [(64, 64), (64, 128)], frames=[1, 5])
    with pytest.raises(TypeError, match=r"needs their tokens and dataset\.calculator\.cost_model"):
        SequentialBucketSampler(plain, 2, dynamic_batch_size=True, num_replicas=1, rank=0)


# -- bucket_stats ----------------------------------------------------------------------------------


def test_bucket_stats_reports_trim_beside_crop(tmp_path: Path) -> None:
    sizes = CALC.batch_sizes(2)
    st = bucket_stats(W, H, CALC, frames=F, num_replicas=4, batch_size=sizes, drop_last=False)
    ids = CALC.assign(W, H, F)
    frames = CALC.bucket_frames
    trim = trim_loss(F, frames[ids])
    assert st.is_video
    assert st.max_tokens == CALC.max_tokens
    assert st.mean_trim_loss is not None
    assert st.p95_trim_loss is not None
    for j in np.unique(ids).tolist():
        assert st.mean_trim_loss[j] == pytest.approx(trim[ids == j].mean())
        assert st.p95_trim_loss[j] == pytest.approx(np.percentile(trim[ids == j], 95))
    empty = np.flatnonzero(st.counts == 0)
    assert np.isnan(st.mean_trim_loss[empty]).all()
    assert st.overall["mean_trim_loss"] == pytest.approx(trim.mean())
    assert st.overall["p95_trim_loss"] == pytest.approx(np.percentile(trim, 95))
    assert st.overall["mean_trim_loss"] > 0.05  # the 81-frame cap trims long clips
    assert st.budget_ratio.tolist() == pytest.approx((CALC.tokens / CALC.max_tokens).tolist())
    assert st.overall["budget_max_over"] == 0.0
    # the manifest says the same, and so does the sampler about steps and padding
    manifest = build_manifest(PATHS, W, H, CALC, frames=F)
    again = bucket_stats(manifest, num_replicas=4, batch_size=sizes, drop_last=False)
    assert again.overall == pytest.approx(st.overall, nan_ok=True)
    sampler = SequentialBucketSampler(
        BaseMultiresolutionDataset.from_manifest(manifest), 2, drop_last=False,
        dynamic_batch_size=True, num_replicas=4, rank=0,
    )  # fmt: skip
    assert st.overall["batches"] == len(sampler)
    assert st.overall["padded"] == sampler.samples_padded
    text = format_bucket_table(st)
    head = text.splitlines()[0]
    assert "| frames |" in head
    assert "| mean trim % |" in head
    assert "tokens / budget" in head
    assert f"{int(W.size)} clips in 18 buckets" in text
    assert "trim loss mean" in text
    image = bucket_stats([512], [512], MultiTierBucketCalculator())
    assert image.mean_trim_loss is None
    assert "mean_trim_loss" not in image.overall
    assert "trim" not in format_bucket_table(image)
    assert "frames" not in format_bucket_table(image)
    pytest.importorskip("matplotlib")
    plot_bucket_stats(st, tmp_path / "clips.png", dpi=30)
    assert (tmp_path / "clips.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bucket_stats_refusals_for_clips() -> None:
    with pytest.raises(ValueError, match=r"clip 1 has no bucket \(too small\); measure the clips"):
        bucket_stats([1280, 160], [720, 90], CALC, frames=[40, 40])
    with pytest.raises(TypeError, match="frames must be the clips' frame counts; got frames=None"):
        bucket_stats([1280], [720], CALC)
    manifest = build_manifest(PATHS[:2], W[:2], H[:2], CALC, frames=F[:2])
    with pytest.raises(TypeError, match=r"pass neither heights nor calculator \(nor frames\)"):
        bucket_stats(manifest, frames=[1, 2])
