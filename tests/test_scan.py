"""scan_images and the manifest file: header-only, parallel, robust to bad files and odd paths."""

from __future__ import annotations

import doctest
import gzip
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PIL")
from PIL import Image, ImageFile

import dataorder.diffusion.scan as scan_module
from dataorder.diffusion.buckets import MultiTierBucketCalculator
from dataorder.diffusion.scan import (
    Manifest,
    build_manifest,
    list_images,
    read_image_size,
    read_manifest,
    scan_images,
    write_manifest,
)

CALC = MultiTierBucketCalculator.from_preset("512p")
ODD_NAMES = [
    "plain.jpg",
    "with space, and comma.png",
    "quote\"'s.jpg",
    "tab\there.png",
    "new\nline.jpg",
    "back\\slash.png",
    "ünïcødé 画像.jpg",
    "emoji 🖼.png",
    "semi;colon#hash.JPG",
]


def _save(path: Path, size: tuple[int, int], fmt: str | None = None, **kw: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(size[0] * 7 + size[1])
    arr = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(arr).save(path, format=fmt, **kw)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    _save(root / "a.jpg", (64, 48))
    _save(root / "B.PNG", (30, 90))
    _save(root / "sub" / "deep" / "c.webp", (100, 40))
    _save(root / "sub" / "d.jpeg", (40, 40))
    _save(root / "sub" / "e.bmp", (10, 30))
    (root / "notes.txt").write_text("not an image")
    (root / "sub" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    (root / "sub" / "empty.png").write_bytes(b"")
    return root


def test_docstring_examples() -> None:
    result = doctest.testmod(scan_module)
    assert result.attempted > 5
    assert result.failed == 0


def test_scan_a_folder_recursively(tree: Path) -> None:
    m = scan_images(tree, CALC, progress=False)
    rel = [os.path.relpath(p, tree) for p in m.paths]
    assert rel == sorted(rel)
    assert rel == ["B.PNG", "a.jpg", "sub/d.jpeg", "sub/deep/c.webp", "sub/e.bmp"]
    assert m.widths.tolist() == [30, 64, 40, 100, 10]
    assert m.heights.tolist() == [90, 48, 40, 40, 30]
    assert m.bucket_ids.tolist() == CALC.assign(m.widths, m.heights).tolist()
    assert m.buckets == CALC.get_all_buckets()
    assert m.calculator == CALC.config()
    assert m.calculator_object() == CALC
    errors = dict(m.errors)
    assert sorted(os.path.relpath(p, tree) for p in errors) == ["sub/broken.jpg", "sub/empty.png"]
    reasons = sorted(errors.values())
    assert re.fullmatch(r"(OSError|SyntaxError|UnidentifiedImageError): .+", reasons[0])
    assert reasons[1].startswith("UnidentifiedImageError: cannot identify image file")
    assert m.bucket_counts().sum() == 5


def test_scan_a_list_keeps_its_order_and_reports_missing_files(tree: Path) -> None:
    paths = [tree / "sub" / "e.bmp", str(tree / "missing.jpg"), tree / "a.jpg", tree / "a.jpg"]
    m = scan_images(paths, CALC, workers=2, progress=False)
    assert m.paths == [str(tree / "sub" / "e.bmp"), str(tree / "a.jpg"), str(tree / "a.jpg")]
    assert m.widths.tolist() == [10, 64, 64]
    assert len(m.errors) == 1
    assert m.errors[0][0] == str(tree / "missing.jpg")
    assert m.errors[0][1].startswith("FileNotFoundError: ")


def test_scan_reads_headers_only(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(self: object) -> None:
        raise AssertionError("pixels were decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    m = scan_images(tree, CALC, progress=False, workers=1)
    assert len(m) == 5
    assert len(m.errors) == 2


def test_exif_orientation(tmp_path: Path) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees when displayed
    _save(tmp_path / "turned.jpg", (300, 100), exif=exif)
    exif[0x0112] = 3  # 180 degrees: no swap
    _save(tmp_path / "upside.jpg", (300, 100), exif=exif)
    _save(tmp_path / "plain.png", (300, 100))
    assert read_image_size(tmp_path / "turned.jpg") == (100, 300)
    assert read_image_size(tmp_path / "turned.jpg", exif_orientation=False) == (300, 100)
    m = scan_images(tmp_path, CALC, progress=False)
    shapes = zip(m.widths.tolist(), m.heights.tolist(), strict=True)
    sizes = dict(zip([Path(p).name for p in m.paths], shapes, strict=True))
    assert sizes == {"plain.png": (300, 100), "turned.jpg": (100, 300), "upside.jpg": (300, 100)}
    flat = scan_images(tmp_path, CALC, progress=False, exif_orientation=False)
    assert flat.widths.tolist() == [300, 300, 300]


def test_progress_callback_and_worker_counts_agree(tree: Path) -> None:
    seen: list[tuple[int, int]] = []
    one = scan_images(tree, CALC, workers=1, progress=lambda d, t: seen.append((d, t)))
    many = scan_images(tree, CALC, workers=8, progress=False)
    assert seen[-1] == (7, 7)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    for name in ("paths", "errors", "buckets"):
        assert getattr(one, name) == getattr(many, name)
    for name in ("widths", "heights", "bucket_ids"):
        assert np.array_equal(getattr(one, name), getattr(many, name))


def test_progress_bar_goes_to_stderr(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("rich")
    m = scan_images(tree, CALC)  # progress=True: a transient rich bar
    assert len(m) == 5
    assert capsys.readouterr().out == ""


def test_many_files_in_parallel(tmp_path: Path) -> None:
    sizes = [(8 + i % 37, 8 + (i * 7) % 29) for i in range(300)]
    for i, (w, h) in enumerate(sizes):
        Image.new("L", (w, h)).save(tmp_path / f"{i:04d}.png")
    m = scan_images(tmp_path, CALC, workers=4, progress=False)
    assert [(w, h) for w, h in zip(m.widths.tolist(), m.heights.tolist(), strict=True)] == sizes


@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_manifest_round_trip_with_odd_paths(tmp_path: Path, suffix: str) -> None:
    for i, name in enumerate(ODD_NAMES):
        _save(tmp_path / "imgs" / name, (40 + i, 60 - i), fmt="PNG")
    m = scan_images(tmp_path / "imgs", CALC, progress=False)
    assert sorted(Path(p).name for p in m.paths) == sorted(ODD_NAMES)
    out = tmp_path / f"manifest{suffix}"
    write_manifest(m, out)
    back = read_manifest(out)
    assert back.paths == m.paths
    for name in ("widths", "heights", "bucket_ids"):
        assert np.array_equal(getattr(back, name), getattr(m, name))
    assert back.buckets == m.buckets
    assert back.calculator == m.calculator
    assert back.errors == m.errors
    with open(out, "rb") as f:
        assert (f.read(2) == b"\x1f\x8b") == suffix.endswith(".gz")
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_manifest_file_layout(tmp_path: Path) -> None:
    calc = MultiTierBucketCalculator(compat="nemo")
    m = build_manifest(
        ["x.jpg", "a\tb\\c\nd.jpg"],
        [256, 300],
        [256, 100],
        calc,
        errors=[("bad,one.jpg", "OSError: truncated")],
    )
    path = tmp_path / "m.tsv"
    write_manifest(m, path)
    lines = path.read_text(encoding="utf-8").split("\n")
    header = json.loads(lines[0])
    assert header["format"] == "dataorder.manifest"
    assert header["version"] == 1
    assert header["count"] == 2
    assert header["columns"] == ["width", "height", "bucket_id", "path"]
    assert header["calculator"] == calc.config()
    assert header["buckets"][0] == {
        "id": 0,
        "resolution": [192, 320],
        "aspect_ratio": 0.6,
        "pixels": 61440,
    }
    assert header["errors"] == [["bad,one.jpg", "OSError: truncated"]]
    assert lines[1:] == ["256\t256\t2\tx.jpg", "300\t100\t4\ta\\tb\\\\c\\nd.jpg", ""]


def test_non_utf8_file_names_survive(tmp_path: Path) -> None:
    if sys.platform == "win32":
        pytest.skip("POSIX byte file names")
    raw = os.fsdecode(b"caf\xe9.png")  # Latin-1 bytes: not UTF-8, kept via surrogateescape
    m = build_manifest([raw], [10], [10], CALC)
    write_manifest(m, tmp_path / "m.tsv")
    assert read_manifest(tmp_path / "m.tsv").paths == [raw]


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_read_manifest_refuses_bad_files(tmp_path: Path) -> None:
    m = build_manifest(["a.jpg", "b.jpg"], [640, 300], [480, 900], CALC)
    good = tmp_path / "good.tsv"
    write_manifest(m, good)
    header, *rows = good.read_text(encoding="utf-8").rstrip("\n").split("\n")
    h = json.loads(header)
    bad = tmp_path / "bad.tsv"
    cases = [
        ([header, rows[0]], "header says count=2 rows; found 1"),
        (["not json", *rows], ":1: not a dataorder manifest header"),
        ([json.dumps({**h, "format": "x"}), *rows], "not a dataorder manifest (format"),
        ([json.dumps({**h, "version": 9}), *rows], "manifest version must be 1; got version=9"),
        ([json.dumps({**h, "columns": ["path"]}), *rows], "columns must be"),
        ([header, rows[0], "1\t2\tb.jpg"], ":3: expected 4 tab-separated columns"),
        ([header, rows[0], "1\tx\t2\tb.jpg"], ":3: width, height, bucket_id must be ints"),
        ([header, rows[0], "1\t2\t3\tb\\q.jpg"], ":3: bad escape '\\\\q' in path"),
        ([header, rows[0], "1\t2\t99\tb.jpg"], "bucket_ids[1] must be an int in [0, 14]"),
        ([header, rows[0], "0\t2\t1\tb.jpg"], "widths and heights must be positive ints"),
        (
            [json.dumps({**h, "calculator": {**h["calculator"], "quantization": 32}}), *rows],
            "the stored buckets differ from those its calculator config builds",
        ),
    ]
    for lines, message in cases:
        _write_lines(bad, lines)
        with pytest.raises(ValueError, match=re.escape(message)):
            read_manifest(bad)
    with gzip.open(tmp_path / "g.tsv.gz", "wt") as f:
        f.write("garbage\n")
    with pytest.raises(ValueError, match="not a dataorder manifest header"):
        read_manifest(tmp_path / "g.tsv.gz")
    assert read_manifest(good).paths == ["a.jpg", "b.jpg"]


def test_manifest_validates_and_owns_its_arrays() -> None:
    w = np.array([640, 300])
    m = build_manifest(["a", "b"], w, [480, 900], CALC)
    w[0] = 1
    assert m.widths[0] == 640
    assert not m.widths.flags.writeable
    base = {"paths": ["a"], "buckets": CALC.get_all_buckets(), "calculator": CALC.config()}
    cases = [
        ({"widths": [1, 2], "heights": [1], "bucket_ids": [0]}, ValueError,
         "widths must have one entry per path (1); got 2 entries"),
        ({"widths": [1.5], "heights": [1], "bucket_ids": [0]}, TypeError,
         "widths must be a 1-D array of ints"),
        ({"widths": [1], "heights": [1], "bucket_ids": [-1]}, ValueError,
         "bucket_ids[0] must be an int in [0, 14]; got bucket_ids[0]=-1"),
    ]  # fmt: skip
    for kw, exc, message in cases:
        with pytest.raises(exc, match=re.escape(message)):
            Manifest(**base, **kw)  # type: ignore[arg-type]
    skipped = [CALC.get_bucket_by_id(0), CALC.get_bucket_by_id(2)]
    with pytest.raises(
        ValueError, match=re.escape("buckets[1]['id'] must be 1 (ids are positions)")
    ):
        Manifest([], [], [], [], skipped, {})  # type: ignore[arg-type]
    empty = build_manifest([], [], [], CALC)
    assert len(empty) == 0
    assert empty.bucket_counts().tolist() == [0] * len(CALC)


def test_argument_errors(tree: Path) -> None:
    cases = [
        (lambda: scan_images(tree / "a.jpg", CALC), ValueError,
         "paths_or_dir must be a directory or an iterable of paths; got paths_or_dir="),
        (lambda: scan_images(tree, "512p"), TypeError,  # type: ignore[arg-type]
         "calculator must be a MultiTierBucketCalculator; got calculator='512p'"),
        (lambda: scan_images(tree, CALC, workers=0), ValueError,
         "workers must be a positive int; got workers=0"),
        (lambda: scan_images(tree, CALC, progress="yes"), TypeError,  # type: ignore[arg-type]
         "progress must be a bool; got progress='yes'"),
        (lambda: list_images(tree / "nope"), ValueError, "directory must be an existing directory"),
        (lambda: build_manifest(["a"], [1, 2], [1, 2], CALC), ValueError,
         "paths, widths and heights must be 1-D and of one length"),
        (lambda: write_manifest({"paths": []}, tree / "m.tsv"), TypeError,  # type: ignore[arg-type]
         "manifest must be a Manifest"),
    ]  # fmt: skip
    for call, exc, message in cases:
        with pytest.raises(exc, match=re.escape(message)):
            call()


def test_missing_pillow_names_the_extra(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'dataorder[images]'")):
        scan_images(tree, CALC, progress=False)
    # Manifests themselves need no Pillow.
    m = build_manifest(["a"], [5], [5], CALC)
    write_manifest(m, tree / "m.tsv")
    assert read_manifest(tree / "m.tsv").paths == ["a"]
