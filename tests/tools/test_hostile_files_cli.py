"""Hostile files and command lines, as tables of families, plus the regressions they found.

Each family is a table; every row runs under a hang guard (a hang detector, not a speed test):

(a) special files named like media in a scanned folder (a FIFO, a unix socket, devices through
    symbolic links, broken and looping links, a link to a directory, a directory named ``x.jpg``,
    an unreadable file, a zero-byte file, a truncated header), in :func:`scan_images`,
    :func:`scan_videos`, ``dataorder scan`` and ``dataorder scan --video``: nothing hangs, what is
    not a regular file is skipped without being opened, with the reason, and the scan goes on;
(b) absurd header values written into real files (an .avi's frame count, a raw .avi's frame size,
    an .mkv's Duration element, a PNG's IHDR): the file is in ``errors`` (or read with sane
    values where the header can be read so), the good file is still read;
(c) every numeric option of every subcommand with a value past int64, ``1e400``, NaN, infinities
    and negatives: exit status 2 and one line naming the option, never a traceback;
(d) deeply nested JSON and huge JSON numbers for ``inspect`` (the state and ``--schedule``) and
    for manifest headers: one line naming the file, never a traceback.

A FIFO a regression would open blocks inside ``open()``, possibly in FFmpeg's C code where a
Python signal handler cannot run: the guard then also opens the FIFO's other end after the
deadline (:func:`guard`), which releases the reader, and the row fails as a hang.
``test_the_judge_can_fail`` proves each verdict fires.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import signal
import socket
import stat
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dataorder.core.state import find_sampler_states
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import VideoBucketCalculator
from dataorder.diffusion.scan.images import build_manifest, read_manifest, write_manifest
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.tools import cli
from tests.helpers.hang import Hang

monkeypatch_context = pytest.MonkeyPatch.context

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer") or not hasattr(os, "mkfifo"),
    reason="the hang guard needs signal.setitimer and FIFOs (POSIX)",
)

#: Seconds a row may take before it counts as a hang.
HANG_SECONDS = 20.0
INT64_PAST = "99999999999999999999"  # 10**20 - 1 > 2**63


# -- the guard and the judges ---------------------------------------------------------------------
@contextlib.contextmanager
def guard(seconds: float = HANG_SECONDS, fifos: tuple[Path, ...] = ()) -> Iterator[list[str]]:
    """Raise :class:`Hang` after ``seconds``; and then open the write end of each of ``fifos``,
    so a reader blocked in C code returns. Yields a list that names what the guard had to do."""
    fired: list[str] = []
    done = threading.Event()

    def alarm(signum: int, frame: FrameType | None) -> None:
        fired.append("alarm")
        raise Hang(f"no answer within {seconds} s")

    def release() -> None:
        if done.wait(seconds):
            return
        fired.append("fifo")
        while not done.is_set():
            for fifo in fifos:
                with contextlib.suppress(OSError):  # ENXIO: no reader (yet)
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            done.wait(0.05)

    watchdog = threading.Thread(target=release, daemon=True)
    if fifos:
        watchdog.start()
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        done.set()
        if fifos:
            watchdog.join()


@dataclasses.dataclass
class Run:
    """What one command line did."""

    code: int
    out: str
    err: str


def run_cli(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    *,
    main: Callable[[list[str]], int] = cli.main,
    seconds: float = HANG_SECONDS,
    fifos: tuple[Path, ...] = (),
) -> Run:
    """``main(argv)`` in this process under :func:`guard`; ``pytest.fail`` on a hang or on an
    exception escaping ``main`` (which the real entry point prints as a traceback)."""
    what = "dataorder " + shlex.join(argv)
    try:
        with guard(seconds, fifos) as fired:
            code = main(argv)
    except Hang:
        pytest.fail(f"{what} hangs: no answer within {seconds} s")
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # SystemExit included: main returns its status
        pytest.fail(f"{what} prints a traceback: {type(err).__name__}: {err}")
    captured = capsys.readouterr()
    if fired:
        pytest.fail(f"{what} hangs: it opened a FIFO, released after {seconds} s")
    return Run(code, captured.out, captured.err)


def expect_usage_error(run: Run, what: str, *fragments: str) -> None:
    """Exit status 2 and one line ``dataorder: error: ...`` holding every fragment."""
    if run.code != cli.EXIT_USAGE:
        pytest.fail(f"{what}: exit status {run.code}, expected {cli.EXIT_USAGE}: {run.err}")
    lines = run.err.strip().splitlines()
    if len(lines) != 1 or not lines[0].startswith("dataorder: error: "):
        pytest.fail(f"{what}: expected one line 'dataorder: error: ...'; got {run.err!r}")
    for fragment in fragments:
        if fragment not in lines[0]:
            pytest.fail(f"{what}: the error does not name {fragment!r}: {lines[0]}")


# -- files ----------------------------------------------------------------------------------------
def _png(width: int, height: int) -> bytes:
    """A PNG whose IHDR says ``width`` x ``height`` (CRC right), with one pixel row of data."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" + b"\x00" * 3 * max(1, min(width, 4)))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _clip(path: Path, codec: str, size: tuple[int, int], frames: int, pix_fmt: str) -> None:
    av = pytest.importorskip("av")
    fmt = {".avi": "avi", ".mkv": "matroska"}[path.suffix]
    width, height = size
    with av.open(str(path), "w", format=fmt) as c:
        stream = c.add_stream(codec, rate=24)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        image = np.zeros((height, width, 3), np.uint8)
        image[:, : width // 2] = 200
        for _ in range(frames):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Good files, as bytes: an image, a clip that has a wan2.1-480p bucket, a raw .avi and an
    .mkv (both to patch)."""
    root = tmp_path_factory.mktemp("media")
    pil = pytest.importorskip("PIL.Image")
    pil.new("RGB", (64, 48), (90, 20, 20)).save(root / "good.png")
    out = {"png": (root / "good.png").read_bytes()}
    try:
        import av  # noqa: F401
    except ImportError:
        return out
    _clip(root / "good.avi", "mjpeg", (640, 480), 5, "yuvj420p")
    _clip(root / "raw.avi", "rawvideo", (16, 8), 2, "bgr24")
    _clip(root / "good.mkv", "ffv1", (64, 48), 3, "yuv420p")
    for name in ("good.avi", "raw.avi", "good.mkv"):
        out[name.replace("good.", "").replace(".avi", "")] = (root / name).read_bytes()
    return out


def _need_av(media: dict[str, bytes]) -> None:
    if "avi" not in media:
        pytest.skip("PyAV is not installed")


IMAGE_CALC = MultiTierBucketCalculator.from_preset("512p")
VIDEO_CALC = VideoBucketCalculator.from_preset("wan2.1-480p")


def _scan(
    runner: str, folder: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[set[str], dict[str, str]]:
    """Scan ``folder`` with ``runner``; return the paths read and ``{path: reason}`` of the rest.

    One reader thread: a read that blocks, blocks the guarded thread (a blocked worker thread
    could not be abandoned).
    """
    fifos = tuple(p for p in folder.rglob("*") if stat.S_ISFIFO(p.lstat().st_mode))
    if runner in ("scan_images", "scan_videos"):
        from dataorder.diffusion.scan.images import scan_images
        from dataorder.diffusion.scan.videos import scan_videos

        try:
            with guard(fifos=fifos) as fired:
                if runner == "scan_images":
                    result: Any = scan_images(folder, IMAGE_CALC, workers=1, progress=False)
                else:
                    result = scan_videos(folder, VIDEO_CALC, workers=1, progress=False)
        except Hang:
            pytest.fail(f"{runner} hangs on {sorted(os.listdir(folder))}")
        if fired:
            pytest.fail(f"{runner} hangs: it opened a FIFO, released after {HANG_SECONDS} s")
        return set(result.paths), dict(result.errors)
    out = folder.parent / f"{folder.name}.tsv"
    argv = ["scan", str(folder), "-o", str(out), "--workers", "1", "--no-progress", "--plain"]
    run = run_cli(capsys, argv + (["--video"] if runner == "cli scan --video" else []), fifos=fifos)
    if run.code != 0:
        pytest.fail(f"{runner}: exit status {run.code}: {run.err}")
    manifest = read_manifest(out)
    return set(manifest.paths), dict(manifest.errors)


RUNNERS = ("scan_images", "scan_videos", "cli scan", "cli scan --video")


def _good(runner: str, media: dict[str, bytes]) -> tuple[str, bytes]:
    if "video" in runner:
        _need_av(media)
        return ".avi", media["avi"]
    return ".png", media["png"]


# -- (a) special files ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Special:
    """A folder entry named like media; ``make(folder, ext, good)`` creates it and returns its
    path. ``expect``: ``"skipped"`` (reported, never opened; the reason names ``word``),
    ``"error"``, ``"read"``, ``"readable"`` (read if this user can read it, else an error) or
    ``"walked"`` (a directory: its files are read, it is not reported)."""

    name: str
    make: Callable[[Path, str, bytes], Path]
    expect: str
    word: str = ""


def _fifo(folder: Path, ext: str, good: bytes) -> Path:
    os.mkfifo(folder / f"pipe{ext}")
    return folder / f"pipe{ext}"


def _socket(folder: Path, ext: str, good: bytes) -> Path:
    here = os.getcwd()
    os.chdir(folder)  # a relative name: a unix socket's path is limited to about 100 bytes
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(f"sock{ext}")
        sock.close()  # the file stays; nobody listens
    finally:
        os.chdir(here)
    return folder / f"sock{ext}"


def _link(target: str, name: str) -> Callable[[Path, str, bytes], Path]:
    def make(folder: Path, ext: str, good: bytes) -> Path:
        path = folder / f"{name}{ext}"
        os.symlink(target.format(folder=folder, ext=ext), path)
        return path

    return make


def _write(
    name: str, content: Callable[[bytes], bytes], mode: int | None = None
) -> Callable[[Path, str, bytes], Path]:
    def make(folder: Path, ext: str, good: bytes) -> Path:
        path = folder / f"{name}{ext}"
        path.write_bytes(content(good))
        if mode is not None:
            path.chmod(mode)
        return path

    return make


def _link_to_fifo(folder: Path, ext: str, good: bytes) -> Path:
    _fifo(folder, ".x", good)  # not named like media: only the link is scanned
    return _link("{folder}/pipe.x", "tofifo")(folder, ext, good)


def _link_to_file(folder: Path, ext: str, good: bytes) -> Path:
    (folder / "target.x").write_bytes(good)
    return _link("{folder}/target.x", "tofile")(folder, ext, good)


def _directory(folder: Path, ext: str, good: bytes) -> Path:
    path = folder / f"dir{ext}"
    path.mkdir()
    (path / f"inner{ext}").write_bytes(good)
    return path


def _linked_directory(folder: Path, ext: str, good: bytes) -> Path:
    (folder / "real_dir").mkdir()
    (folder / "real_dir" / f"inner{ext}").write_bytes(good)
    os.symlink(folder / "real_dir", folder / f"linkdir{ext}")
    return folder / f"linkdir{ext}"


SPECIALS = [
    Special("FIFO", _fifo, "skipped", "FIFO"),
    Special("unix socket", _socket, "skipped", "socket"),
    Special("link to /dev/null", _link("/dev/null", "null"), "skipped", "character device"),
    Special("link to /dev/zero", _link("/dev/zero", "zero"), "skipped", "character device"),
    Special("broken link", _link("{folder}/nowhere{ext}", "broken"), "skipped", "broken"),
    Special("link to a FIFO", _link_to_fifo, "skipped", "FIFO"),
    Special("link loop", _link("{folder}/loop{ext}", "loop"), "error"),
    Special("link to a good file", _link_to_file, "read"),
    Special("link to a directory", _linked_directory, "skipped", "directory"),
    Special("directory named like media", _directory, "walked"),
    Special("unreadable (chmod 000)", _write("locked", lambda b: b, 0), "readable"),
    Special("zero bytes", _write("empty", lambda b: b""), "error"),
    Special("truncated header", _write("cut", lambda b: b[:20]), "error"),
    Special("garbage", _write("junk", lambda b: bytes(range(256)) * 4), "error"),
]


def check_special(
    case: Special,
    runner: str,
    folder: Path,
    good: bytes,
    ext: str,
    scan: Callable[[Path], tuple[set[str], dict[str, str]]],
) -> None:
    """Build the folder (a good file + the case's entry), scan it, judge what became of each."""
    (folder / f"good{ext}").write_bytes(good)
    path = case.make(folder, ext, good)
    read, errors = scan(folder)
    what = f"{runner} on {case.name}"
    if str(folder / f"good{ext}") not in read:
        pytest.fail(f"{what}: the good file was not read (the scan stopped?): {errors}")
    key = str(path)
    expect = case.expect
    if expect == "readable":
        expect = "read" if os.access(path, os.R_OK) else "error"  # root reads a chmod 000 file
    if expect == "walked":
        if str(path / f"inner{ext}") not in read or key in errors:
            pytest.fail(f"{what}: the directory was not walked into: {read}, {errors}")
        return
    if expect == "read":
        if key not in read:
            pytest.fail(f"{what}: not read: {errors.get(key)}")
        return
    if key not in errors:
        pytest.fail(f"{what}: not reported in errors (read: {key in read})")
    if expect == "skipped" and not (
        "NotARegularFileError" in errors[key] and case.word in errors[key]
    ):
        pytest.fail(
            f"{what}: the reason does not say it was skipped as {case.word!r}: {errors[key]}"
        )


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("case", SPECIALS, ids=[c.name for c in SPECIALS])
def test_special_files(
    case: Special,
    runner: str,
    media: dict[str, bytes],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ext, good = _good(runner, media)
    folder = tmp_path / "data"
    folder.mkdir()
    check_special(case, runner, folder, good, ext, lambda f: _scan(runner, f, capsys))


# -- (b) absurd header values ---------------------------------------------------------------------
def _patch(data: bytes, edits: list[tuple[bytes, int, str, float]]) -> bytes:
    """``data`` with each ``(tag, offset after the tag, struct format, value)`` written."""
    out = bytearray(data)
    for tag, offset, fmt, value in edits:
        at = out.find(tag)
        assert at >= 0, tag
        struct.pack_into(fmt, out, at + offset, value)
    return bytes(out)


def _avi_frames(n: int) -> Callable[[dict[str, bytes]], bytes]:
    # avih's dwTotalFrames (after tag, size and 4 fields) and the stream's strh dwLength
    return lambda m: _patch(m["avi"], [(b"avih", 8 + 16, "<I", n), (b"strh", 8 + 32, "<I", n)])


def _raw_size(width: int, height: int) -> Callable[[dict[str, bytes]], bytes]:
    # a raw .avi's frame size is its strf BITMAPINFOHEADER's biWidth, biHeight (signed)
    return lambda m: _patch(m["raw"], [(b"strf", 12, "<i", width), (b"strf", 16, "<i", height)])


def _mkv_duration(seconds_ms: float) -> Callable[[dict[str, bytes]], bytes]:
    # Segment Info's Duration element: ID 0x4489, size 8, a big-endian float64 in ms
    return lambda m: _patch(m["mkv"], [(b"\x44\x89\x88", 3, ">d", seconds_ms)])


def _png_size(width: int, height: int) -> Callable[[dict[str, bytes]], bytes]:
    return lambda m: _png(width, height)


#: (name, file ending, the bytes, expect): "error", or "either" (an error, or read with values in
#: range: a header can be absurd in a way the reader may ignore).
ABSURD: list[tuple[str, str, Callable[[dict[str, bytes]], bytes], str]] = [
    ("avi frames 0", ".avi", _avi_frames(0), "either"),
    ("avi frames 2**31", ".avi", _avi_frames(2**31), "error"),
    ("avi frames 4294967280", ".avi", _avi_frames(4_294_967_280), "error"),
    ("avi frames 2**32-1", ".avi", _avi_frames(2**32 - 1), "error"),
    ("avi rate 0", ".avi", lambda m: _patch(m["avi"], [(b"strh", 8 + 24, "<I", 0)]), "either"),
    ("avi scale 0", ".avi", lambda m: _patch(m["avi"], [(b"strh", 8 + 20, "<I", 0)]), "either"),
    ("raw avi width 0", ".avi", _raw_size(0, 8), "error"),
    ("raw avi width -16", ".avi", _raw_size(-16, 8), "error"),
    ("raw avi width 2**31-1", ".avi", _raw_size(2**31 - 1, 8), "error"),
    ("raw avi height -2**31", ".avi", _raw_size(16, -(2**31)), "error"),
    ("mkv duration 1e15", ".mkv", _mkv_duration(1e15), "error"),
    ("mkv duration 9.2e15", ".mkv", _mkv_duration(9.2e15), "error"),
    ("mkv duration 2**63", ".mkv", _mkv_duration(2.0**63), "error"),
    ("mkv duration 1e300", ".mkv", _mkv_duration(1e300), "error"),
    ("mkv duration 0", ".mkv", _mkv_duration(0.0), "error"),
    ("mkv duration -5", ".mkv", _mkv_duration(-5.0), "error"),
    ("mkv duration nan", ".mkv", _mkv_duration(float("nan")), "error"),
    ("mkv duration inf", ".mkv", _mkv_duration(float("inf")), "error"),
    ("png 0x48", ".png", _png_size(0, 48), "error"),
    ("png 2**31 wide", ".png", _png_size(2**31, 48), "error"),
    ("png 2**32-1 high", ".png", _png_size(64, 2**32 - 1), "error"),
]


def _check_absurd(name: str, path: Path, expect: str, result: Any) -> None:
    errors = dict(result.errors)
    if str(path) in errors:
        return
    if expect == "error":
        pytest.fail(f"{name}: read, expected in errors")
    i = result.paths.index(str(path))
    sides = [int(result.widths[i]), int(result.heights[i])]
    if hasattr(result, "frames"):
        sides.append(int(result.frames[i]))
    if not all(1 <= v <= 2**31 - 1 for v in sides):
        pytest.fail(f"{name}: read with values out of range: {sides}")


@pytest.mark.parametrize(("name", "ext", "content", "expect"), ABSURD, ids=[c[0] for c in ABSURD])
def test_absurd_headers(
    name: str,
    ext: str,
    content: Callable[[dict[str, bytes]], bytes],
    expect: str,
    media: dict[str, bytes],
    tmp_path: Path,
) -> None:
    """The file is that file's error (or read with sane values); the good file is still read."""
    from dataorder.diffusion.scan.images import scan_images

    if ext != ".png":
        _need_av(media)
    good_ext, good = (".png", media["png"]) if ext == ".png" else (".avi", media["avi"])
    (tmp_path / f"good{good_ext}").write_bytes(good)
    path = tmp_path / f"absurd{ext}"
    path.write_bytes(content(media))
    with guard():
        if ext == ".png":
            result: Any = scan_images(tmp_path, IMAGE_CALC, workers=1, progress=False)
        else:
            from dataorder.diffusion.scan.videos import scan_videos

            result = scan_videos(tmp_path, VIDEO_CALC, workers=1, progress=False)
    assert str(tmp_path / f"good{good_ext}") in result.paths, result.errors
    _check_absurd(name, path, expect, result)


def test_absurd_headers_together_in_the_cli(
    media: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every absurd clip in one folder: ``dataorder scan --video`` writes the good clip's manifest
    and lists each absurd one with its reason."""
    _need_av(media)
    folder = tmp_path / "clips"
    folder.mkdir()
    (folder / "good.avi").write_bytes(media["avi"])
    expected = []
    for i, (_name, ext, content, expect) in enumerate(ABSURD):
        if ext != ".png" and expect == "error":
            (folder / f"absurd{i:02d}{ext}").write_bytes(content(media))
            expected.append(str(folder / f"absurd{i:02d}{ext}"))
    out = tmp_path / "m.tsv"
    run = run_cli(
        capsys, ["scan", str(folder), "-o", str(out), "--video", "--workers", "1", "--no-progress"]
    )
    assert run.code == 0, run.err
    manifest = read_manifest(out)
    assert manifest.paths == [str(folder / "good.avi")]
    assert sorted(dict(manifest.errors)) == sorted(expected)


# -- (c) numeric options of every subcommand ------------------------------------------------------
#: Values no numeric option takes: past int64, past float, not a number, negative.
HOSTILE_NUMBERS = {
    "past int64": INT64_PAST,
    "2**63": str(2**63),
    "1e400": "1e400",
    "nan": "nan",
    "inf": "inf",
    "-inf": "-inf",
    "-1": "-1",
    "a 5000-digit int": "9" * 5000,
}


@dataclasses.dataclass(frozen=True)
class Option:
    """A numeric option: ``argv`` around it (``{v}`` is the value, ``{state}``, ``{manifest}``,
    ``{dir}`` files), and the values it may legally take from :data:`HOSTILE_NUMBERS` (then
    accepted, or refused in one line: never a traceback)."""

    argv: tuple[str, ...]
    flag: str
    legal: tuple[str, ...] = ()


def _options() -> list[Option]:
    demo = ("demo", "--out", "{dir}/demo", "--no-plot")
    buckets = ("buckets", "--plain")
    video = ("buckets", "--video", "--plain")
    scan = ("scan", "{dir}", "-o", "{dir}/m.tsv", "--no-progress")
    plan = ("plan", "{manifest}", "--num-replicas", "2", "--batch-size", "2")
    inspect = ("inspect", "{state}", "--plain")
    pack = ("pack", "{lengths}", "--plain")
    rows = [
        Option((*demo, "--seed", "{v}"), "--seed"),
        Option((*demo, "--micro-batch-size", "{v}"), "--micro-batch-size"),
        Option((*demo, "--timeout", "{v}"), "--timeout"),
        Option((*demo, "--mesh", "{v},1,1"), "--mesh"),
        Option((*demo, "--mesh", "1,1,{v}"), "--mesh"),
        Option((*demo, "--first-mesh", "{v},1,1"), "--first-mesh"),
        Option((*buckets, "--max-pixels", "{v}"), "--max-pixels"),
        Option((*buckets, "--quantization", "{v}"), "--quantization"),
        Option((*video, "--quantization", "{v}"), "--quantization"),
        Option((*video, "--max-frames", "{v}"), "--max-frames"),
        Option((*video, "--max-upscale", "{v}"), "--max-upscale"),
        Option((*video, "--batch-size", "{v}"), "--batch-size"),
        Option((*scan, "--workers", "{v}"), "--workers"),
        Option((*scan, "--max-pixels", "{v}"), "--max-pixels"),
        Option((*scan, "--quantization", "{v}"), "--quantization"),
        Option((*scan, "--video", "--max-frames", "{v}"), "--max-frames"),
        Option((*scan, "--video", "--max-upscale", "{v}"), "--max-upscale"),
        Option(
            ("plan", "{manifest}", "--num-replicas", "{v}", "--batch-size", "2"), "--num-replicas"
        ),
        Option(
            ("plan", "{manifest}", "--num-replicas", "2", "--batch-size", "{v}"), "--batch-size"
        ),
        Option(
            (*plan, "--dynamic-batch-size", "--base-resolution", "{v}x512"), "--base-resolution"
        ),
        Option(
            (*plan, "--dynamic-batch-size", "--base-resolution", "512x{v}"), "--base-resolution"
        ),
        Option((*plan, "--fit", "--max-waste", "{v}"), "--max-waste"),
        Option((*inspect, "--rank", "{v}"), "--rank"),
        Option((*inspect, "--num-replicas", "{v}"), "--num-replicas"),
        Option((*inspect, "--micro-batch-size", "{v}"), "--micro-batch-size"),
        Option((*inspect, "--count", "{v}"), "--count"),
        Option((*inspect, "--source-sizes", "10,{v}"), "--source-sizes"),
        # a weight of 1e20 is a finite weight; an unused --weights may be accepted
        Option((*inspect, "--weights", "1,{v}"), "--weights", ("past int64", "2**63")),
        Option((*inspect, "--base-resolution", "{v}x512"), "--base-resolution"),
        Option((*inspect, "--max-pixels", "{v}"), "--max-pixels"),
        Option((*inspect, "--quantization", "{v}"), "--quantization"),
        Option((*pack, "--seq-len", "{v}"), "--seq-len"),
        Option((*pack, "--seq-len", "64", "--window", "{v}"), "--window"),
        Option((*pack, "--seq-len", "64", "--chunk", "{v}"), "--chunk"),
        Option((*pack, "--seq-len", "64", "--seed", "{v}"), "--seed"),
        Option(
            (*pack, "--seq-len", "64", "--batch-size", "1", "--num-replicas", "{v}"),
            "--num-replicas",
        ),
        Option(
            (*pack, "--seq-len", "64", "--num-replicas", "1", "--batch-size", "{v}"), "--batch-size"
        ),
        Option((*pack, "--seq-len", "64", "--vsl", "--min-seq-len", "{v}"), "--min-seq-len"),
    ]
    return rows


OPTIONS = _options()


def test_every_numeric_option_is_in_the_table() -> None:
    """A new numeric option (an argparse ``type`` that is not ``str``) must join the table."""
    parser = cli.build_parser()
    swept = {(o.argv[0], o.flag) for o in OPTIONS}
    found = set()
    for name, sub in parser._subparsers._group_actions[0].choices.items():  # type: ignore[union-attr]
        for action in sub._actions:
            if action.type is not None and action.option_strings:
                found.add((name, action.option_strings[-1]))
    assert found - swept == set(), "add these options to OPTIONS"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli")
    state = root / "state.json"
    sampler = MegatronPretrainingRandomSampler(64, 2, 0, 2, seed=3)
    state.write_text(json.dumps(sampler.state_dict()))
    manifest = root / "m.tsv"
    widths, heights = np.array([512] * 8 + [768] * 8), np.array([512] * 8 + [384] * 8)
    paths = [f"{i}.jpg" for i in range(16)]
    write_manifest(build_manifest(paths, widths, heights, IMAGE_CALC), manifest)
    (root / "empty").mkdir()
    lengths = root / "lengths.npy"
    np.save(lengths, np.arange(1, 200, dtype=np.int32))
    return {
        "state": str(state),
        "manifest": str(manifest),
        "dir": str(root / "empty"),
        "lengths": str(lengths),
    }


def _option_params() -> Iterator[Any]:
    for option in OPTIONS:
        for label, value in HOSTILE_NUMBERS.items():
            yield pytest.param(
                option, label, value, id=f"{' '.join(option.argv[:1])} {option.flag}={label}"
            )


@pytest.mark.parametrize(("option", "label", "value"), list(_option_params()))
def test_hostile_numbers_in_every_option(
    option: Option,
    label: str,
    value: str,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_processes(monkeypatch)
    argv = [a.replace("{v}", value).format(**files) for a in option.argv]
    run = run_cli(capsys, argv)
    what = f"dataorder {option.argv[0]} {option.flag} {label}"
    if label in option.legal and run.code == 0:
        return
    expect_usage_error(run, what, option.flag)


def _no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo must refuse before any process starts: starting one fails the test."""
    import dataorder.tools.demo as demo

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the demo started processes for arguments it should have refused")

    monkeypatch.setattr(demo, "run_phase", started)


# -- (d) deeply nested JSON and huge numbers ------------------------------------------------------
def _state_with(**edits: object) -> Callable[[], str]:
    def text() -> str:
        state: dict[str, Any] = dict(
            MegatronPretrainingRandomSampler(64, 2, 0, 2, seed=3).state_dict()
        )
        state.update(edits)
        return json.dumps(state)

    return text


def _raw(text: str) -> Callable[[], str]:
    return lambda: text


DEEP = 100_000  # far past Python's recursion limit
JSON_CASES: list[tuple[str, Callable[[], str]]] = [
    ("deep list", _raw("[" * DEEP + "]" * DEEP)),
    ("deep dict", _raw('{"a":' * DEEP + "1" + "}" * DEEP)),
    ("deep inside a loader state", _raw('{"x":' * 900 + _state_with()() + "}" * 900)),
    (
        "a state value nested 900 deep",
        lambda: _state_with()().replace(
            '"consumed": ', '"consumed": ' + "[" * 900 + "]" * 900 + ', "x": '
        ),
    ),
    ("a 5000-digit int", _raw('{"format": "dataorder.state", "epoch": ' + "9" * 5000 + "}")),
    ("epoch 1e400", _state_with(epoch=float("inf"))),
    ("consumed 10**30", _state_with(consumed=10**30)),
    ("consumed 2**63", _state_with(consumed=2**63)),
    ("consumed -2**63", _state_with(consumed=-(2**63))),
    ("layout 10**30", _state_with(**{"layout.data_parallel_size": 10**30})),
    ("total_samples 10**30", _state_with(**{"config.total_samples": 10**30})),
    ("seed 2**64", _state_with(**{"config.seed": 2**64})),
    ("version 1e400", _state_with(version=float("inf"))),
    ("nan consumed", _raw(_state_with()().replace('"consumed": ', '"consumed": NaN, "x": '))),
]


@pytest.mark.parametrize(("name", "text"), JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_hostile_json_for_inspect(
    name: str, text: Callable[[], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dataorder inspect FILE``: exit status 2 and one line naming the file (a state found
    900 levels deep is explained)."""
    path = tmp_path / "s.json"
    path.write_text(text())
    run = run_cli(capsys, ["inspect", str(path), "--plain"])
    if name == "deep inside a loader state":  # legal, if odd: found and explained
        assert run.code == 0, run.err
        assert "megatron_random" in run.out
        return
    expect_usage_error(run, f"inspect {name}", str(path))


SCHEDULE_CASES: list[tuple[str, Callable[[], str]]] = [
    *JSON_CASES[:2],
    ("a 5000-digit weight", _raw("[[0, [1, " + "9" * 5000 + "]]]")),
    ("a weight 1e400", _raw("[[0, [1, 1e400]]]")),
    ("a weight NaN", _raw("[[0, [1, NaN]]]")),
    ("a start 2**63", _raw(f"[[0, [1, 1]], [{2**63}, [1, 2]]]")),
    ("a start -1", _raw("[[0, [1, 1]], [-1, [1, 2]]]")),
    ("a ramp of 1e400", _raw('[[0, {"ramp": [[1, 1], [1, 1e400]]}], [8, [1, 1]]]')),
]


@pytest.mark.parametrize(("name", "text"), SCHEDULE_CASES, ids=[c[0] for c in SCHEDULE_CASES])
def test_hostile_json_for_inspect_schedule(
    name: str,
    text: Callable[[], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
) -> None:
    """``dataorder inspect STATE --schedule FILE``: exit status 2, one line naming the file."""
    path = tmp_path / "schedule.json"
    path.write_text(text())
    run = run_cli(
        capsys, ["inspect", files["state"], "--source-sizes", "10,10", "--schedule", str(path)]
    )
    expect_usage_error(run, f"inspect --schedule {name}", str(path))


def _manifest_header(**edits: object) -> Callable[[str], str]:
    def text(original: str) -> str:
        header, rest = original.split("\n", 1)
        return json.dumps({**json.loads(header), **edits}) + "\n" + rest

    return text


def _manifest_line(line: str) -> Callable[[str], str]:
    return lambda original: line + "\n" + original.split("\n", 1)[1]


MANIFEST_CASES: list[tuple[str, Callable[[str], str]]] = [
    ("header a deep list", _manifest_line("[" * DEEP + "]" * DEEP)),
    ("header a deep dict", _manifest_line('{"a":' * DEEP + "1" + "}" * DEEP)),
    (
        "header a 5000-digit int",
        _manifest_line('{"format": "dataorder.manifest", "count": ' + "9" * 5000 + "}"),
    ),
    ("count 10**30", _manifest_header(count=10**30)),
    ("count 1e400", _manifest_header(count=float("inf"))),
    ("a bucket 10**30 wide", _manifest_header(buckets=[{"id": 0, "resolution": [10**30, 1]}])),
    ("a bucket 1e400 wide", _manifest_header(buckets=[{"id": 0, "resolution": [float("inf"), 1]}])),
    ("max_pixels 10**30", None),  # filled below: the calculator's own field
    (
        "errors nested 900 deep",
        lambda text: text.replace('"errors": [', '"errors": [' + "[" * 900 + "]" * 900 + ", ", 1),
    ),
]


def _calculator_edit(original: str) -> str:
    header, rest = original.split("\n", 1)
    data = json.loads(header)
    data["calculator"]["max_pixels"] = 10**30
    return json.dumps(data) + "\n" + rest


MANIFEST_CASES[7] = ("max_pixels 10**30", _calculator_edit)


@pytest.mark.parametrize(("name", "edit"), MANIFEST_CASES, ids=[c[0] for c in MANIFEST_CASES])
def test_hostile_json_in_manifest_headers(
    name: str,
    edit: Callable[[str], str],
    files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``read_manifest``: a ValueError naming the file; ``dataorder plan``: one line naming it."""
    path = tmp_path / "m.tsv"
    path.write_text(edit(Path(files["manifest"]).read_text()))
    try:
        with guard():
            read_manifest(path)
    except ValueError as err:
        message = str(err)
    except Hang:
        pytest.fail(f"read_manifest hangs on {name}")
    except BaseException as err:
        pytest.fail(f"read_manifest on {name}: {type(err).__name__} instead of a ValueError: {err}")
    else:
        pytest.fail(f"read_manifest accepted {name}")
    assert str(path) in message, message
    run = run_cli(
        capsys, ["plan", str(path), "--num-replicas", "2", "--batch-size", "2", "--plain"]
    )
    expect_usage_error(run, f"plan on {name}", str(path))


# -- regressions: the reported examples ------------------------------------------------------------
@pytest.mark.parametrize("runner", RUNNERS)
def test_a_fifo_named_like_media_does_not_hang_the_scans(
    runner: str, media: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``pipe.mp4`` and ``pipe.jpg`` hung every scan."""
    ext, good = _good(runner, media)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / f"good{ext}").write_bytes(good)
    for name in ("pipe.mp4", "pipe.jpg"):
        os.mkfifo(folder / name)
    read, errors = _scan(runner, folder, capsys)
    assert read == {str(folder / f"good{ext}")}
    mine = "pipe.mp4" if "video" in runner else "pipe.jpg"
    assert errors[str(folder / mine)] == (
        "NotARegularFileError: a FIFO (named pipe), not a regular file; skipped without opening it"
    )


def test_absurd_frame_counts_are_the_files_errors(
    media: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: an .avi saying 4,294,967,280 frames, an .mkv with a Duration of 1e15:
    ``ValueError: frames[3] must be ...`` lost the whole folder, and the CLI wrote nothing."""
    from dataorder.diffusion.scan.videos import scan_videos

    _need_av(media)
    folder = tmp_path / "clips"
    folder.mkdir()
    for name in ("a.avi", "b.avi", "c.avi"):
        (folder / name).write_bytes(media["avi"])
    (folder / "d.avi").write_bytes(_avi_frames(4_294_967_280)(media))
    (folder / "e.mkv").write_bytes(_mkv_duration(1e15)(media))
    scan = scan_videos(folder, VIDEO_CALC, workers=1, progress=False)
    assert [Path(p).name for p in scan.paths] == ["a.avi", "b.avi", "c.avi"]
    errors = {Path(p).name: reason for p, reason in scan.errors}
    assert errors["d.avi"] == (
        "VideoHeaderError: the headers claim 4294967280 frames; a frame count must be an int in "
        "[1, 2147483647]"
    )
    assert errors["e.mkv"].startswith("VideoHeaderError: the headers claim a duration of 1e+12 s")
    out = tmp_path / "m.tsv"
    run = run_cli(capsys, ["scan", str(folder), "-o", str(out), "--video", "--no-progress"])
    assert run.code == 0, run.err
    assert len(read_manifest(out)) == 3


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["buckets", "--video", "--max-upscale", "1e400"],
         "argument --max-upscale: must be a number in [1, "),
        (["buckets", "--video", "--batch-size", "99999999999999999999"],
         "argument --batch-size: must be a positive int of at most 2147483648"),
    ],
)  # fmt: skip
def test_cli_numbers_past_the_range_are_usage_errors(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: both printed an OverflowError traceback."""
    expect_usage_error(run_cli(capsys, argv), " ".join(argv), fragment)


def test_demo_refuses_a_huge_seed_or_mesh_in_the_parent(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Regression: ``--seed 99999999999999999999999 --mesh 1,1,1`` started the job and
    exited 1 with a child's traceback; ``--mesh 1000,1,1`` started about 2,000 processes."""
    from dataorder.tools.demo import DemoConfig, MeshShape, run_demo
    from dataorder.tools.demo_config import max_demo_processes

    _no_processes(monkeypatch)
    out = str(tmp_path / "demo")
    run = run_cli(
        capsys, ["demo", "--seed", "99999999999999999999999", "--mesh", "1,1,1", "--out", out]
    )
    expect_usage_error(
        run,
        "demo --seed",
        "argument --seed: must be a non-negative int of at most 9223372036854775807",
    )
    run = run_cli(capsys, ["demo", "--mesh", "1000,1,1", "--out", out])
    cap = max_demo_processes()
    expect_usage_error(
        run, "demo --mesh", f"--mesh must be a mesh of at most {cap} processes", "1000,1,1"
    )
    run = run_cli(
        capsys, ["demo", "--mesh", f"{cap},1,1", "--out", out]
    )  # its first phase doubles dp
    expect_usage_error(run, "demo --mesh", "--mesh must be", "so --first-mesh defaults to")
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 9223372036854775807\]"):
        DemoConfig(seed=99999999999999999999999)
    with pytest.raises(ValueError, match=f"mesh must be a mesh of at most {cap} processes"):
        run_demo(DemoConfig(first_mesh=MeshShape(1, 1, cap + 1), mesh=MeshShape(1, 1, 1)), out)


def test_inspect_deeply_nested_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: ``dataorder inspect deep.json`` printed a RecursionError traceback; and
    find_sampler_states recursed."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * DEEP + "]" * DEEP)
    run = run_cli(capsys, ["inspect", str(deep)])
    expect_usage_error(run, "inspect deep.json", f"{deep}: its JSON is nested too deeply to read")
    nested: Any = {"format": "dataorder.state", "kind": "x"}
    for i in range(DEEP):
        nested = {"k": nested} if i % 2 else [nested]
    ((where, found),) = find_sampler_states(nested)
    assert found["kind"] == "x"
    assert where.startswith("k[0].k[0]")
    assert where.count("[0]") == DEEP // 2
    assert where.count(".k") == DEEP // 2 - 1


def test_scan_video_says_the_clips_were_read_but_too_small(
    media: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: readable clips too small for every bucket gave "no readable clip (3
    unusable)"."""
    _need_av(media)
    folder = tmp_path / "small"
    folder.mkdir()
    for name in ("a.mkv", "b.mkv", "c.mkv"):
        (folder / name).write_bytes(media["mkv"])  # 64x48: too small for wan2.1-480p
    (folder / "d.mp4").write_bytes(b"not a clip")
    run = run_cli(
        capsys, ["scan", str(folder), "-o", str(tmp_path / "m.tsv"), "--video", "--no-progress"]
    )
    expect_usage_error(
        run,
        "scan --video",
        f"3 clips read under {folder}, none has a bucket: 3 too small, 0 too short; 1 files "
        "could not be read; nothing written",
    )


def test_the_demo_inspect_command_rebuilds_its_mixture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: the demo's mixture.json could not be rebuilt (``--weights`` takes only
    a constant vector). The mixture's sampler as the demo's first phase builds it, its state at
    the demo's checkpoint (half the epoch), and the command line the demo prints."""
    from dataorder.llm.blend import BlendedSampler
    from dataorder.tools.demo import DemoConfig, inspect_commands, write_inspect_files
    from dataorder.tools.demo_samplers import mixture_sources

    config = DemoConfig()
    sizes, log = mixture_sources(config)
    ckpt = tmp_path / "check point"  # a space: the printed command must quote it
    ckpt.mkdir()
    sampler = BlendedSampler(
        list(log.sizes), log, config.micro_batch_size, global_batch_size=config.global_batch_size,
        seed=config.seed, total_samples=sum(sizes), data_parallel_rank=0,
        data_parallel_size=config.first_mesh.dp,
    )  # fmt: skip
    steps = len(sampler)
    it = iter(sampler)
    for _ in range(steps // 2):
        next(it)
    change = log.entry(1).step * config.global_batch_size
    assert sampler.consumed_samples > change, "the state must be past the first change"
    (ckpt / "mixture.json").write_text(json.dumps({"_index_sampler_state": sampler.state_dict()}))
    write_inspect_files(config, ckpt)
    command = inspect_commands(config, ckpt)["mixture"]
    argv = shlex.split(command)
    assert argv[:2] == ["dataorder", "inspect"]
    run = run_cli(capsys, [*argv[1:], "--json"])
    assert run.code == 0, run.err
    report = json.loads(run.out)
    assert report["next"][0]["items"] == sampler.batch_at(steps // 2)
    # without its log (the sizes after every change and the first entry's constant weights),
    # the state is refused, named: it was written over the log's corpus changes
    weights = ",".join(map(str, log.entry(0).weights))
    sizes_arg = ",".join(map(str, sizes))
    run = run_cli(capsys, [*argv[1:3], "--source-sizes", sizes_arg, "--weights", weights])
    assert run.code == 2
    assert "cannot rebuild the blended sampler from this state" in run.err


def test_mixture_schedule_json_round_trip() -> None:
    from dataorder.llm.mixture import MixtureSchedule, Ramp

    schedule = MixtureSchedule([(0, [0.6, Fraction(1, 3), 2]), (8, Ramp([1, 1, 1], [0.5, 0, 1])),
                                (40, [10**30, 1, 0])])  # fmt: skip
    text = json.dumps(schedule.to_json())
    again = MixtureSchedule.from_json(json.loads(text))
    assert again == schedule
    assert again.to_json() == schedule.to_json()


# -- the judges can fail --------------------------------------------------------------------------
# -- (e) corpora for packing: special files and absurd indexes ---------------------------------
# dataorder pack and DocumentLengths.from_file take one corpus file, an argument: what is not a
# regular file is refused unopened (a ValueError naming it; one line and status 2 in the CLI),
# what cannot be read is named, and nothing hangs.
PACK_NAMES = ("x.idx", "x.bin", "x.npy", "x.arrow", "x.parquet")
PACK_RUNNERS = ("DocumentLengths.from_file", "PackedDataset.from_megatron", "cli pack")


def _pack_special(kind: str) -> Callable[[Path, str], Path]:
    """A corpus path ``name`` in ``folder`` made into ``kind`` (a good ``x.idx``/``x.bin``
    pair is written first, so a special ``x.bin`` sits beside a good index)."""

    def make(folder: Path, name: str) -> Path:
        from dataorder.llm.packing import write_megatron

        write_megatron(folder / "x", [[1, 2, 3], [4, 5]])
        path = folder / name
        path.unlink(missing_ok=True)
        if kind == "FIFO":
            os.mkfifo(path)
        elif kind == "socket":
            _socket(folder, Path(name).suffix, b"")
            os.rename(folder / f"sock{Path(name).suffix}", path)
        elif kind == "directory":
            path.mkdir()
        elif kind.startswith("link to /dev/"):
            os.symlink(kind.removeprefix("link to "), path)
        elif kind == "link to a FIFO":
            os.mkfifo(folder / "pipe.x")
            os.symlink(folder / "pipe.x", path)
        elif kind == "broken link":
            os.symlink(folder / "nowhere", path)
        elif kind == "link loop":
            os.symlink(path, path)
        else:  # file contents
            good = {"zero bytes": b"", "garbage": bytes(range(256)) * 4}
            path.write_bytes(good.get(kind, b"\x93NUMPY\x01\x00"))
        return path

    return make


PACK_SPECIALS = {
    "FIFO": "is a FIFO (named pipe), not a regular file",
    "socket": "is a socket, not a regular file",
    "directory": "is a directory, not a regular file",
    "link to /dev/zero": "is a character device, not a regular file",
    "link to /dev/null": "is a character device, not a regular file",
    "link to a FIFO": "is a FIFO (named pipe), not a regular file",
    "broken link": "No such file or directory",
    "link loop": "Too many levels of symbolic links",
    "zero bytes": "",
    "garbage": "",
    "cut header": "",
}


def _pack_load(
    runner: str,
    path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    options: tuple[str, ...] = (),
    seconds: float = HANG_SECONDS,
) -> str:
    """Load ``path`` with ``runner``; return the one-line refusal (``pytest.fail`` on a hang,
    an acceptance, or a refusal that is not a ValueError / OSError one-liner)."""
    from dataorder.llm.packing import DocumentLengths, PackedDataset

    if runner == "cli pack":
        argv = ["pack", str(path), "--seq-len", "4", "--plain", *options]
        run = run_cli(capsys, argv, fifos=(path,), seconds=seconds)
        expect_usage_error(run, f"dataorder pack {path.name}")
        return run.err
    load = (
        DocumentLengths.from_file
        if runner == "DocumentLengths.from_file"
        else (lambda p: PackedDataset.from_megatron(p, 4).arrays(((0, 0, 3),)))
    )
    try:
        with guard(seconds, fifos=(path,)) as fired:
            load(path)
    except Hang:
        pytest.fail(f"{runner}({path.name}) hangs")
    except (ValueError, OSError) as err:
        if fired:
            pytest.fail(f"{runner}({path.name}) opened the FIFO")
        return f"{type(err).__name__}: {err}"
    except BaseException as err:
        pytest.fail(f"{runner}({path.name}): {type(err).__name__} instead of a ValueError: {err}")
    pytest.fail(f"{runner}({path.name}) was accepted")


def _pack_cases() -> Iterator[Any]:
    for runner in PACK_RUNNERS:
        names = ("x.idx", "x.bin") if runner == "PackedDataset.from_megatron" else PACK_NAMES
        for name in names:
            for kind in PACK_SPECIALS:
                yield pytest.param(runner, name, kind, id=f"{runner}-{name}-{kind}")


@pytest.mark.parametrize(("runner", "name", "kind"), list(_pack_cases()))
def test_special_and_broken_corpus_files_for_packing(
    runner: str, name: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if name in (".arrow", ".parquet") or name.endswith((".arrow", ".parquet")):
        pytest.importorskip("pyarrow")
    path = _pack_special(kind)(tmp_path, name)
    message = _pack_load(runner, path, capsys)
    assert PACK_SPECIALS[kind] in message, message
    if kind not in ("broken link", "link loop") or runner != "PackedDataset.from_megatron":
        assert path.name in message, f"the refusal does not name the file: {message}"


def _index_edit(at: int, fmt: str, value: int) -> Callable[[bytearray], None]:
    return lambda raw: struct.pack_into(fmt, raw, at, value)


_HEAD = 34  # magic 9, version 8, dtype 1, sequences 8, documents 8
#: Absurd values written into a good index of four sequences (lengths 3, 2, 4, 1 as int32):
#: (name, edit, what the refusal says). Pointers follow the lengths (4 int32), 8 bytes each.
ABSURD_INDEXES = [
    ("version 2**64 - 1", _index_edit(9, "<Q", 2**64 - 1), "unknown version"),
    ("dtype code 255", _index_edit(17, "<B", 255), "unknown dtype code 255"),
    ("2**64 - 1 sequences", _index_edit(18, "<Q", 2**64 - 1), "sequences and"),
    ("2**63 document indices", _index_edit(26, "<Q", 2**63), "document indices, which need"),
    ("a negative length", _index_edit(_HEAD + 4, "<i", -5), "lengths[1] must be an int in"),
    ("a length of 2**31 - 1", _index_edit(_HEAD, "<i", 2**31 - 1), "disagree with its"),
    ("the first pointer 4", _index_edit(_HEAD + 16, "<q", 4), "first sequence pointer is 4"),
    ("a pointer going back", _index_edit(_HEAD + 16 + 16, "<q", 4), "decrease"),
    ("a pointer past the .bin", _index_edit(_HEAD + 16 + 8, "<q", 2**62), "decrease"),
    ("the last pointer past the .bin", _index_edit(_HEAD + 16 + 24, "<q", 2**40), "holds 40"),
]


@pytest.mark.parametrize("runner", ["DocumentLengths.from_file", "cli pack"])
@pytest.mark.parametrize(
    ("name", "edit", "fragment"), ABSURD_INDEXES, ids=[c[0] for c in ABSURD_INDEXES]
)
def test_absurd_values_in_a_megatron_index(
    runner: str,
    name: str,
    edit: Callable[[bytearray], None],
    fragment: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused naming the file, at once or when the packing first reads what is wrong (the
    CLI reads everything); never a numpy error, a hang, or rows from a corrupt index."""
    from dataorder.llm.packing import PackingPlan, write_megatron

    write_megatron(tmp_path / "x", [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]])
    raw = bytearray((tmp_path / "x.idx").read_bytes())
    edit(raw)
    (tmp_path / "x.idx").write_bytes(bytes(raw))
    path = tmp_path / "x.idx"
    if runner == "cli pack":  # chunks of one document: every pointer is a chunk's edge
        message = _pack_load(runner, path, capsys, options=("--chunk", "1", "--window", "2"))
    else:

        def load_and_pack(p: Path) -> None:
            from dataorder.llm.packing import DocumentLengths

            PackingPlan(DocumentLengths.from_file(p), 4, chunk=1, window=2).stats()

        try:
            with guard():
                load_and_pack(path)
        except ValueError as err:
            message = str(err)
        except BaseException as err:
            pytest.fail(f"{name}: {type(err).__name__} instead of a ValueError: {err}")
        else:
            pytest.fail(f"{name}: accepted")
    assert fragment in message, message
    assert "x.idx" in message or "x.bin" in message, message


def test_the_judge_can_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], media: dict[str, bytes]
) -> None:
    """Each verdict fires on a command or a scan that deserves it."""

    def hangs(argv: list[str]) -> int:
        while True:
            pass

    def blocks_on_a_fifo(argv: list[str]) -> int:
        with open(fifo, "rb"):  # what scans did before the fix
            return 0

    def escapes(argv: list[str]) -> int:
        raise OverflowError("Python int too large to convert to C long")

    def two_lines(argv: list[str]) -> int:
        print("dataorder: error: --x must be\nmore", file=__import__("sys").stderr)
        return 2

    def checks_failed(argv: list[str]) -> int:
        print("dataorder: error: --x must be a positive int", file=__import__("sys").stderr)
        return 1

    def unnamed(argv: list[str]) -> int:
        print("dataorder: error: bad value", file=__import__("sys").stderr)
        return 2

    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)
    with pytest.raises(pytest.fail.Exception, match="hangs: no answer"):
        run_cli(capsys, ["x"], main=hangs, seconds=0.2)
    with pytest.raises(pytest.fail.Exception, match="hangs"):
        run_cli(capsys, ["x"], main=blocks_on_a_fifo, seconds=0.2, fifos=(fifo,))
    with pytest.raises(pytest.fail.Exception, match="prints a traceback: OverflowError"):
        run_cli(capsys, ["x"], main=escapes)
    for main, verdict in ((two_lines, "expected one line"), (checks_failed, "exit status 1"),
                          (unnamed, "does not name '--x'")):  # fmt: skip
        with pytest.raises(pytest.fail.Exception, match=verdict):
            expect_usage_error(run_cli(capsys, ["x"], main=main), "x", "--x")

    # the scan judge: a file silently dropped, a FIFO read as a file, an absurd file accepted
    def drops(folder: Path) -> tuple[set[str], dict[str, str]]:
        return {str(folder / "good.png")}, {}

    def reads_everything(folder: Path) -> tuple[set[str], dict[str, str]]:
        return {str(p) for p in folder.iterdir()}, {}

    def generic_error(folder: Path) -> tuple[set[str], dict[str, str]]:
        return {str(folder / "good.png")}, {str(folder / "pipe.png"): "OSError: no"}

    def loses_the_good_file(folder: Path) -> tuple[set[str], dict[str, str]]:
        return set(), {str(p): "NotARegularFileError: a FIFO" for p in folder.iterdir()}

    fifo_case = SPECIALS[0]
    for scan, verdict in ((drops, "not reported in errors"), (reads_everything, "not reported"),
                          (generic_error, "does not say it was skipped"),
                          (loses_the_good_file, "the good file was not read")):  # fmt: skip
        folder = tmp_path / scan.__name__
        folder.mkdir()
        with pytest.raises(pytest.fail.Exception, match=verdict):
            check_special(fifo_case, "judge", folder, media["png"], ".png", scan)

    scanned = SimpleNamespace(
        paths=["/x/absurd.avi"],
        widths=np.array([64]),
        heights=np.array([48]),
        frames=np.array([2**32]),
        errors=[],
    )

    with pytest.raises(pytest.fail.Exception, match="read, expected in errors"):
        _check_absurd("x", Path("/x/absurd.avi"), "error", scanned)

    # the packing judge: a loader that blocks on a FIFO, one that accepts a directory
    from dataorder.llm.packing import lengths as lengths_module

    pack_fifo = tmp_path / "x.npy"
    os.mkfifo(pack_fifo)
    with monkeypatch_context() as m:
        m.setattr(lengths_module, "require_regular_file", lambda p: 0)
        with pytest.raises(pytest.fail.Exception, match=r"hangs|opened the FIFO"):
            _pack_load("DocumentLengths.from_file", pack_fifo, capsys, seconds=0.2)
    with pytest.raises(pytest.fail.Exception, match="read with values out of range"):
        _check_absurd("x", Path("/x/absurd.avi"), "either", scanned)
