"""scan_images and the manifest file: header-only, parallel, robust to bad files and odd paths."""

from __future__ import annotations

import doctest
import gzip
import json
import os
import re
import struct
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PIL")
from PIL import Image, ImageFile

import dataorder.diffusion.scan.images as scan_module
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.scan.images import (
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


def _tiff_header(path: Path, width: int, height: int) -> None:
    """A grey 8-bit TIFF that is all header: its IFD claims ``width x height``, no strip data."""
    tags = [(256, 4, width), (257, 4, height), (258, 3, 8), (259, 3, 1), (262, 3, 1),
            (273, 4, 8), (278, 4, height), (279, 4, 1)]  # fmt: skip
    ifd = struct.pack("<H", len(tags)) + b"".join(
        struct.pack("<HHII", t, k, 1, v) for t, k, v in tags
    )
    path.write_bytes(b"II*\x00" + struct.pack("<I", 8) + ifd + b"\x00" * 4)


def _png_header(path: Path, width: int, height: int) -> None:
    """A small real PNG whose IHDR (CRC fixed up) claims ``width x height``."""
    Image.new("L", (4, 4)).save(path)
    data = bytearray(path.read_bytes())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("pixel_limit", ["default", None])
def test_huge_and_absurd_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pixel_limit: str | None
) -> None:
    """Regression: with ``MAX_IMAGE_PIXELS=None`` one TIFF claiming width 2**32-1 aborted the scan
    (naming a row, not the file); with the default limit valid images over ~179 MP were listed as
    unreadable. Only headers are read, so Pillow's pixel limit does not apply; an absurd side is
    that file's error, naming it."""
    if pixel_limit is None:
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    limit_before = Image.MAX_IMAGE_PIXELS
    absurd = tmp_path / "absurd.tif"
    _tiff_header(absurd, 2**32 - 1, 1)
    _tiff_header(tmp_path / "big.tif", 20_000, 10_000)  # 200 MP: over twice Pillow's limit
    _png_header(tmp_path / "big.png", 30_000, 10_000)
    _png_header(tmp_path / "wide.png", 2**31 - 1, 1)  # the largest side there is
    _save(tmp_path / "small.png", (10, 20))
    m = scan_images(tmp_path, CALC, progress=False, workers=2)
    sizes = dict(
        zip(
            [Path(p).name for p in m.paths],
            zip(m.widths.tolist(), m.heights.tolist(), strict=True),
            strict=True,
        )
    )
    assert sizes == {
        "big.png": (30_000, 10_000),
        "big.tif": (20_000, 10_000),
        "small.png": (10, 20),
        "wide.png": (2**31 - 1, 1),
    }
    message = (
        f"{absurd}: the header claims 4294967295x1 pixels; each side must be an int in "
        "[1, 2147483647]"
    )
    assert m.errors == [(str(absurd), f"ValueError: {message}")]
    with pytest.raises(ValueError, match=re.escape(message)):
        read_image_size(absurd)
    assert limit_before == Image.MAX_IMAGE_PIXELS  # the global limit is left alone
    _png_header(tmp_path / "warned.png", 10_000, 10_000)  # between the limit and twice it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Image.open would warn: DecompressionBombWarning
        assert read_image_size(tmp_path / "warned.png") == (10_000, 10_000)


def test_build_manifest_names_the_image_of_a_bad_size() -> None:
    with pytest.raises(ValueError) as info:
        build_manifest(["a.jpg", "huge.tif"], [5, 2**32 - 1], [5, 1], CALC)
    assert str(info.value) == (
        "widths[1] must be an int in [1, 2147483647]; got widths[1]=4294967295 (image 'huge.tif')"
    )


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


def test_without_rich_the_bar_is_tqdms(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both scans report progress the same way (dataorder.diffusion.scan.files)."""
    pytest.importorskip("tqdm")
    monkeypatch.setitem(sys.modules, "rich.progress", None)  # makes "import rich.progress" fail
    m = scan_images(tree, CALC, workers=2)
    assert len(m) == 5
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "reading image headers" in captured.err


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
    cases = [  # (lines, the message after the file name)
        ([header, rows[0]], ":3: header says count=2 rows; found 1"),
        (["not json", *rows], ":1: not a dataorder manifest header"),
        ([json.dumps({**h, "format": "x"}), *rows], ":1: not a dataorder manifest (format"),
        ([json.dumps({**h, "version": 9}), *rows], ":1: manifest version must be 1; got version=9"),
        ([json.dumps({**h, "columns": ["path"]}), *rows], ":1: columns must be"),
        ([header, rows[0], "1\t2\tb.jpg"], ":3: expected 4 tab-separated columns"),
        ([header, rows[0], "1\tx\t2\tb.jpg"], ":3: width, height, bucket_id must be ints"),
        ([header, rows[0], "1\t2\t3\tb\\q.jpg"], ":3: bad escape '\\\\q' in path"),
        ([header, rows[0], "1\t2\t99\tb.jpg"], ":3: bucket_id must be an int in [0, 14]; got "
         "bucket_id=99"),
        ([header, rows[0], "0\t2\t1\tb.jpg"], ":3: width must be an int in [1, 2147483647]; got "
         "width=0"),
        ([header, rows[0], f"1\t{10**30}\t1\tb.jpg"], ":3: height must be an int in [1, "
         "2147483647]; got height=1000000000000000000000000000000"),
        ([json.dumps({**h, "calculator": {**h["calculator"], "quantization": 32}}), *rows],
         ":1: the stored buckets differ from those its calculator config builds"),
        ([json.dumps({**h, "version": True}), *rows], ":1: manifest version must be 1; got "
         "version=True"),
        ([json.dumps({**h, "count": True}), *rows], ":1: count must be a non-negative int; got "
         "count=True"),
        ([json.dumps({**h, "buckets": None}), *rows], ":1: buckets must be a list of bucket "
         "dicts; got buckets=None"),
        ([json.dumps({**h, "buckets": [{"id": 0, "resolution": "ab"}]}), *rows],
         ":1: buckets[0]['resolution'] must be a (width, height) pair; got "
         "buckets[0]['resolution']='ab'"),
        ([json.dumps({**h, "errors": [1, 2]}), *rows], ":1: errors[0] must be a [path, reason] "
         "pair of str; got errors[0]=1"),
        ([json.dumps({**h, "errors": None}), *rows], ":1: errors must be a list of [path, "
         "reason] pairs; got errors=None"),
        ([json.dumps({**h, "calculator": None}), *rows], ":1: calculator must be a dict"),
        ([json.dumps({**h, "calculator": {"x": 1}}), *rows], ":1: calculator is not a valid "
         "calculator config: config must have exactly the keys"),
    ]  # fmt: skip
    for lines, message in cases:
        _write_lines(bad, lines)
        with pytest.raises(ValueError, match=re.escape(f"{bad}{message}")):
            read_manifest(bad)
    with gzip.open(tmp_path / "g.tsv.gz", "wt") as f:
        f.write("garbage\n")
    with pytest.raises(ValueError, match="not a dataorder manifest header"):
        read_manifest(tmp_path / "g.tsv.gz")
    assert read_manifest(good).paths == ["a.jpg", "b.jpg"]


@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_read_manifest_refuses_a_file_cut_anywhere(tmp_path: Path, suffix: str) -> None:
    """Regression: a file cut inside its last row was read with the last path cut short, and a cut
    .gz raised a bare EOFError. Every cut of the file is refused with its name and a line."""
    m = build_manifest(["a.jpg", "b.jpg", "long name.jpg"], [640, 300, 50], [480, 900, 60], CALC)
    good = tmp_path / f"good{suffix}"
    write_manifest(m, good)
    data = good.read_bytes()
    cut = tmp_path / f"cut{suffix}"
    rows = len(data) - 80 if suffix == ".tsv" else 0  # every cut near the rows, some before
    for size in sorted({*range(1, len(data), 23), *range(max(1, rows), len(data))}):
        cut.write_bytes(data[:size])
        with pytest.raises(ValueError) as info:
            read_manifest(cut)
        assert re.match(re.escape(str(cut)) + r":\d+: ", str(info.value)), (size, info.value)
    assert read_manifest(good).paths == m.paths


def test_read_manifest_refuses_garbage_gzip(tmp_path: Path) -> None:
    bad = tmp_path / "m.tsv.gz"
    bad.write_bytes(b"\x1f\x8b" + bytes(range(7, 107)))
    with pytest.raises(ValueError, match=re.escape(f"{bad}:1: corrupt or truncated gzip data")):
        read_manifest(bad)


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
        ({"widths": [0], "heights": [1], "bucket_ids": [0]}, ValueError,
         "widths[0] must be an int in [1, 2147483647]; got widths[0]=0"),
        ({"widths": [1], "heights": [1], "bucket_ids": [0], "errors": [1, 2]}, TypeError,
         "errors[0] must be a (path, reason) pair; got errors[0]=1"),
        ({"widths": [1], "heights": [1], "bucket_ids": [0], "errors": None}, TypeError,
         "errors must be a list of (path, reason) pairs; got errors=None"),
    ]  # fmt: skip
    for kw, exc, message in cases:
        with pytest.raises(exc, match=re.escape(message)):
            Manifest(**base, **kw)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("paths[0] must be a str; got paths[0]=7")):
        Manifest([7], [1], [1], [0], CALC.get_all_buckets(), {})  # type: ignore[list-item]
    with pytest.raises(TypeError, match=re.escape("buckets must be a list of bucket dicts")):
        Manifest([], [], [], [], None, {})  # type: ignore[arg-type]
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
