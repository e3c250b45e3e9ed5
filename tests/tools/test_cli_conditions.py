"""Every command of the command line crossed with the conditions a user's shell puts it in, as
tables (the hostile-input sweep's CLI family):

(a) its stdout a pipe whose reader stops early (``| head -1``): exit 0, nothing on stderr
    (NOTE [ A closed pipe is no error ]); run in this process with ``sys.stdout`` a real pipe
    whose read end is closed (a write then fails with EPIPE, as it does after ``head`` exits),
    and once through a real shell pipe into ``head -1``;
(b) every output option given a path it cannot write (a missing folder, a folder, a path under a
    regular file): one line naming the path as given, exit 2, before the work (the work itself
    is replaced by a function that fails the row if it is reached);
(c) a file whose list column is not the default ``input_ids`` (parquet, Arrow IPC file, Arrow
    stream, a ``save_to_disk`` folder) for every command that reads one (``pack``, ``inspect
    --lengths``): without ``--column``, one line naming the columns it could be and
    ``--column``; with it, the same figures as the lengths given as a ``.npy``.

``demo`` is in (b) only: into a closed pipe it would still run its two 8-process phases before
its first write fails (its first line is buffered), which is correct but a minute of CI.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.scan.images import build_manifest, write_manifest
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.llm.packing import PackedSampler
from dataorder.tools import cli
from dataorder.tools.output import EXIT_USAGE


# -- the files the commands read --------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A folder of images, a manifest, lengths (``.npy``), a packed state over them, a Megatron
    state."""
    root = tmp_path_factory.mktemp("conditions")
    images = root / "images"
    images.mkdir()
    pil = pytest.importorskip("PIL.Image")
    for i in range(4):
        pil.new("RGB", (640 + 64 * i, 480)).save(images / f"{i}.png")
    rng = np.random.default_rng(0)
    widths, heights = rng.integers(256, 2048, 400), rng.integers(256, 2048, 400)
    calc = MultiTierBucketCalculator.from_preset("1024p")
    paths = [f"images/{i:05d}.jpg" for i in range(400)]
    write_manifest(build_manifest(paths, widths, heights, calc), root / "m.tsv")
    lengths = rng.integers(1, 300, 600)
    np.save(root / "lengths.npy", lengths)
    np.save(root / "other.npy", rng.integers(1, 900, 300))
    packed = PackedSampler(lengths, 256, 1, 0, 2, seed=0)
    next(iter(packed))
    (root / "packed.json").write_text(json.dumps(packed.state_dict()))
    megatron = MegatronPretrainingRandomSampler(1000, 4, 0, 4, seed=9)
    next(iter(megatron))
    (root / "megatron.json").write_text(json.dumps(megatron.state_dict()))
    return {
        "images": images,
        "manifest": root / "m.tsv",
        "lengths": root / "lengths.npy",
        "other": root / "other.npy",
        "packed": root / "packed.json",
        "megatron": root / "megatron.json",
        "root": root,
    }


# -- (a) a reader that stops early ---------------------------------------------------------------
#: Every command that prints, in its text and JSON forms: ``(row, argv from the files)``.
PRINTING: list[tuple[str, Callable[[dict[str, Path]], list[str]]]] = [
    ("--help", lambda f: ["--help"]),
    ("buckets", lambda f: ["buckets"]),
    ("buckets --video", lambda f: ["buckets", "--video", "--batch-size", "4"]),
    ("buckets --json", lambda f: ["buckets", "--json"]),
    ("scan", lambda f: ["scan", str(f["images"]), "-o", str(f["root"] / "scanned.tsv")]),
    (
        "scan --json",
        lambda f: ["scan", str(f["images"]), "-o", str(f["root"] / "s2.tsv"), "--json"],
    ),
    ("plan", lambda f: ["plan", str(f["manifest"]), "--num-replicas", "4", "--batch-size", "2"]),
    (
        "plan --fit",
        lambda f: [
            "plan",
            str(f["manifest"]),
            "--num-replicas",
            "4",
            "--batch-size",
            "2",
            "--fit",
            "--max-waste",
            "0.5",
        ],
    ),
    (
        "plan --json",
        lambda f: [
            "plan",
            str(f["manifest"]),
            "--num-replicas",
            "4",
            "--batch-size",
            "2",
            "--json",
        ],
    ),
    ("pack", lambda f: ["pack", str(f["lengths"]), "--seq-len", "256"]),
    ("pack --json", lambda f: ["pack", str(f["lengths"]), "--seq-len", "256", "--json"]),
    (
        "pack mixture",
        lambda f: ["pack", "0.3", str(f["lengths"]), "0.7", str(f["other"]), "--seq-len", "256"],
    ),
    ("inspect", lambda f: ["inspect", str(f["megatron"])]),
    ("inspect --json", lambda f: ["inspect", str(f["megatron"]), "--json"]),
    ("inspect packed", lambda f: ["inspect", str(f["packed"]), "--lengths", str(f["lengths"])]),
]


@contextlib.contextmanager
def closed_pipe(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.TextIOWrapper]:
    """``sys.stdout`` a real pipe whose reader has gone: the next write to it fails with EPIPE
    (Python ignores SIGPIPE, so as BrokenPipeError). Entered in the test's body: pytest sets
    its own capture of stdout again between a fixture's setup and the test."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = io.TextIOWrapper(io.FileIO(write_end, "w"), encoding="utf-8")
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", stream)
        yield stream
    with contextlib.suppress(OSError):  # a regression leaves bytes buffered for the gone reader
        stream.close()


@pytest.mark.parametrize(("row", "argv"), PRINTING, ids=[row for row, _ in PRINTING])
def test_every_command_into_a_pipe_whose_reader_stopped(
    row: str,
    argv: Callable[[dict[str, Path]], list[str]],
    files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with closed_pipe(monkeypatch) as stdout:
        code = cli.main(argv(files))
        assert (code, capsys.readouterr().err) == (0, ""), row
        stdout.flush()  # what the interpreter does at exit: nothing is left for the gone reader


def test_a_real_pipe_into_head_exits_0_silently() -> None:
    # the JSON of the video buckets is ~125 kB, more than a pipe holds (64 kB): the command is
    # still writing when head exits, whatever the scheduling
    command = f"{sys.executable} -m dataorder buckets --video --json | head -1"
    proc = subprocess.run(
        ["bash", "-c", f"{command}; exit ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "{\n", "")


# -- (b) an output it cannot write ---------------------------------------------------------------
#: Every output option: ``(row, argv with {out} for the path, the work it must not reach)``.
OUTPUTS: list[tuple[str, Callable[[dict[str, Path], str], list[str]], str]] = [
    ("scan -o", lambda f, o: ["scan", str(f["images"]), "-o", o],
     "dataorder.diffusion.scan.images.scan_images"),
    ("plan --png", lambda f, o: ["plan", str(f["manifest"]), "--num-replicas", "4",
                                 "--batch-size", "2", "--png", o],
     "dataorder.diffusion.sampler.stats.bucket_stats"),
    ("plan --write-manifest", lambda f, o: ["plan", str(f["manifest"]), "--num-replicas", "4",
                                            "--batch-size", "2", "--fit", "--write-manifest", o],
     "dataorder.diffusion.sampler.stats.bucket_stats"),
    ("pack --png", lambda f, o: ["pack", str(f["lengths"]), "--seq-len", "256", "--png", o],
     "dataorder.llm.packing.lengths.DocumentLengths.from_file"),
    ("pack mixture --png", lambda f, o: ["pack", "1", str(f["lengths"]), "1", str(f["other"]),
                                         "--seq-len", "256", "--png", o],
     "dataorder.llm.packing.lengths.DocumentLengths.from_file"),
    ("demo --out", lambda f, o: ["demo", "--out", o], "dataorder.tools.demo.run_phase"),
]  # fmt: skip

#: Paths no user can write, relative to a scratch folder that holds a regular file ``a-file``:
#: ``(form, path)``. A file option is refused each of the first three; ``demo --out`` (a folder,
#: created when missing) the last two.
UNWRITABLE_FILES = [
    ("missing folder", "no-such-folder/out.x"),
    ("a folder", "."),
    ("under a regular file", "a-file/out.x"),
]
UNWRITABLE_FOLDERS = [
    ("under a regular file", "a-file/out.x"),
    ("a regular file as the folder", "a-file"),
]
#: The table: every output option crossed with every path it must refuse.
OUTPUT_ROWS = [
    pytest.param(row, argv, work, form, path, id=f"{row}-{form}")
    for row, argv, work in OUTPUTS
    for form, path in (UNWRITABLE_FOLDERS if row.startswith("demo") else UNWRITABLE_FILES)
]


def _forbid(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    module, _, name = target.rpartition(".")
    owner: Any
    if module.endswith("DocumentLengths"):
        from dataorder.llm.packing.lengths import DocumentLengths

        owner = DocumentLengths
    else:
        owner = __import__(module, fromlist=[name])

    def reached(*_args: object, **_kwargs: object) -> None:
        raise AssertionError(f"{target} ran before the output path was checked")

    monkeypatch.setattr(owner, name, reached)


@pytest.mark.parametrize(("row", "argv", "work", "form", "path"), OUTPUT_ROWS)
def test_every_output_option_refuses_an_unwritable_path_before_the_work(
    row: str,
    argv: Callable[[dict[str, Path], str], list[str]],
    work: str,
    form: str,
    path: str,
    files: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "a-file").write_text("x")
    monkeypatch.chdir(tmp_path)
    _forbid(monkeypatch, work)
    code = cli.main(argv(files, path))
    captured = capsys.readouterr()
    assert code == EXIT_USAGE, (row, form, captured.err)
    assert captured.err.count("\n") == 1, captured.err
    assert repr(path) in captured.err, captured.err  # named as given
    assert ".tmp" not in captured.err


# -- (c) a file whose list column is not the default ------------------------------------------
def _write_table(kind: str, lengths: np.ndarray, folder: Path) -> Path:
    pa = pytest.importorskip("pyarrow")
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.arange(offsets[-1]) % 97))
    table = pa.table({"id": np.arange(len(lengths)), "tokens": tokens})
    if kind == "parquet":
        import pyarrow.parquet as pq

        path = folder / "c.parquet"
        pq.write_table(table, path)
    elif kind == "arrow file":
        path = folder / "c.arrow"
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table)
    elif kind == "arrow stream":
        path = folder / "s.arrow"
        with pa.ipc.new_stream(str(path), table.schema) as writer:
            writer.write_table(table)
    else:  # a datasets.Dataset.save_to_disk folder
        datasets = pytest.importorskip("datasets")
        path = folder / "saved"
        datasets.Dataset(table).save_to_disk(str(path))
    return path


COLUMN_FILES = ["parquet", "arrow file", "arrow stream", "save_to_disk folder"]

#: Every command that reads a list column: ``(row, argv with {data} and the --column flag's
#: place, the figure to compare with the .npy's)``.
READERS: list[tuple[str, Callable[[dict[str, Path], str], list[str]]]] = [
    ("pack", lambda f, d: ["pack", d, "--seq-len", "256", "--json"]),
    (
        "pack mixture",
        lambda f, d: ["pack", "1", d, "1", str(f["other"]), "--seq-len", "256", "--json"],
    ),
    ("inspect --lengths", lambda f, d: ["inspect", str(f["packed"]), "--lengths", d, "--json"]),
]


def _figures(row: str, text: str) -> Any:
    data = json.loads(text)
    if row.startswith("inspect"):
        return data["next"]
    if row == "pack mixture":
        data = data["corpora"][0]
    return {k: v for k, v in data.items() if k not in ("lengths",) and not k.startswith("second")}


@pytest.mark.parametrize("kind", COLUMN_FILES)
@pytest.mark.parametrize(("row", "argv"), READERS, ids=[r for r, _ in READERS])
def test_a_file_whose_column_is_not_the_default(
    row: str,
    argv: Callable[[dict[str, Path], str], list[str]],
    kind: str,
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = _write_table(kind, np.load(files["lengths"]), tmp_path)
    capsys.readouterr()  # datasets' progress bar
    code = cli.main(argv(files, str(data)))
    captured = capsys.readouterr()
    assert (code, captured.out) == (EXIT_USAGE, ""), captured.err
    assert captured.err.count("\n") == 1, captured.err
    assert "tokens" in captured.err
    assert "--column tokens" in captured.err
    assert "Traceback" not in captured.err
    code = cli.main([*argv(files, str(data)), "--column", "tokens"])
    with_column = capsys.readouterr()
    assert code == 0, with_column.err
    code = cli.main(argv(files, str(files["lengths"])))
    from_npy = capsys.readouterr()
    assert code == 0, from_npy.err
    assert _figures(row, with_column.out) == _figures(row, from_npy.out)
