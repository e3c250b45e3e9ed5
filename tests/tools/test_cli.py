"""The `dataorder` command line: each subcommand's output, and one clean line for each user error.

Everything runs in-process through ``main(argv)`` (fast, and an escaped exception fails the test),
plus one subprocess run of ``python -m dataorder`` to check the real entry point and that a user
error prints no traceback. `dataorder demo` itself is tested in test_demo.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataorder.core.state import find_sampler_states
from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.calculators.video import PRESETS, VideoBucketCalculator
from dataorder.diffusion.fit.images import fit_to_data
from dataorder.diffusion.sampler.dataset import BaseMultiresolutionDataset
from dataorder.diffusion.sampler.sampler import SequentialBucketSampler
from dataorder.diffusion.scan.images import build_manifest, read_manifest, write_manifest
from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.parallel.distributed import DistributedSampler
from dataorder.testing import run_epoch
from dataorder.tools.cli import EXIT_USAGE, main
from dataorder.tools.demo import load_image_sizes

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_user_error(err: str, *fragments: str) -> None:
    """One line, ``dataorder: error: ...``, containing every fragment."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dataorder: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def manifest_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped image sizes as a 1024p manifest (no image files needed)."""
    widths, heights = load_image_sizes()
    calc = MultiTierBucketCalculator.from_preset("1024p")
    paths = [f"images/{i:05d}.jpg" for i in range(len(widths))]
    path = tmp_path_factory.mktemp("manifest") / "sizes.tsv"
    write_manifest(build_manifest(paths, widths, heights, calc), path)
    return path


# -- general --------------------------------------------------------------------------------------
def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in ("demo", "buckets", "scan", "plan", "inspect"):
        assert command in out
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.startswith("dataorder ")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["buckets", "--bogus"], "unrecognized arguments: --bogus"),
        (["demo", "--mesh", "2,2"], "mesh must be three positive ints"),
        (["plan", "m.tsv", "--batch-size", "8"], "required: --num-replicas"),
    ],
)
def test_usage_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert_user_error(err, fragment)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["demo", "--micro-batch-size", "0"], "--micro-batch-size: must be a positive int"),
        (["demo", "--samplers", "megatron,typo"], "samplers must be distinct names"),
        (["buckets", "--preset", "9000p"], "preset must be one of"),
        (["buckets", "--quantization", "0"], "argument --quantization: must be a positive int"),
        (["scan", "/no/such/dir", "-o", "m.tsv"], "DIR must be an existing directory"),
        (["plan", "/no/such/manifest.tsv", "--num-replicas", "8", "--batch-size", "4"], "No such"),
        (["inspect", "/no/such/state.json"], "No such file or directory"),
    ],
)
def test_each_subcommand_reports_a_user_error_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert_user_error(err, fragment)


def test_the_real_entry_point_prints_no_traceback() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "dataorder", "buckets", "--preset", "256p", "--plain"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "256x256" in ok.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "dataorder",
            "plan",
            "missing.tsv",
            "--num-replicas",
            "0",
            "--batch-size",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == EXIT_USAGE
    assert "Traceback" not in bad.stderr
    assert_user_error(bad.stderr)


def test_traceback_flag_shows_the_exception(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="preset must be one of"):
        main(["buckets", "--preset", "nope", "--traceback"])


# -- buckets --------------------------------------------------------------------------------------
def test_buckets_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "buckets", "--preset", "1024p", "--plain")
    assert code == 0
    calc = MultiTierBucketCalculator.from_preset("1024p")
    assert f"{len(calc)} buckets: 1024p, quantization 64" in out
    for b in calc.get_all_buckets():
        w, h = b["resolution"]
        assert f"{w}x{h}" in out
    code, out, _ = run(capsys, "buckets", "--preset", "1024p", "--compat", "nemo", "--plain")
    assert code == 0
    assert "10 buckets" in out
    assert "1472x640" in out  # NeMo's widest 1024p bucket


def test_buckets_json_and_rich(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "buckets", "--max-pixels", "262144", "--quantization", "32", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["calculator"]["max_pixels"] == 262144
    assert data["calculator"]["quantization"] == 32
    assert all(b["pixels"] <= 262144 for b in data["buckets"])
    code, out, _ = run(capsys, "buckets", "--preset", "512p")  # rich, if installed
    assert code == 0
    assert "512x512" in out


# -- scan -----------------------------------------------------------------------------------------
def test_scan_writes_a_manifest_and_reports_bad_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from PIL import Image

    sizes = [(640, 480), (480, 640), (1024, 1024), (1920, 1080), (300, 900)]
    images = tmp_path / "images"
    (images / "sub").mkdir(parents=True)
    for i, (w, h) in enumerate(sizes):
        Image.new("RGB", (w, h)).save(images / ("sub" if i % 2 else "") / f"img{i}.png")
    (images / "broken.jpg").write_bytes(b"not an image")
    manifest = tmp_path / "m.tsv"
    code, out, err = run(
        capsys,
        "scan",
        str(images),
        "-o",
        str(manifest),
        "--preset",
        "512p",
        "--no-progress",
        "--plain",
    )
    assert code == 0, err
    assert "scanned 5 images" in out
    assert "1 files could not be read" in out
    assert "broken.jpg" in out
    m = read_manifest(manifest)
    assert sorted(zip(m.widths.tolist(), m.heights.tolist(), strict=True)) == sorted(sizes)
    assert m.calculator["max_pixels"] == 512 * 512
    assert [Path(p).name for p, _ in m.errors] == ["broken.jpg"]


def test_scan_progress_in_plain_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import Image

    for i in range(3):
        Image.new("RGB", (64 + i, 64)).save(tmp_path / f"{i}.png")
    monkeypatch.setitem(sys.modules, "rich", None)  # as if rich were not installed
    # stderr is no terminal here (captured, as in a pipe or a CI log): no progress at all
    code, out, err = run(capsys, "scan", str(tmp_path), "-o", str(tmp_path / "m.tsv"), "--plain")
    assert (code, err) == (0, "")
    assert "scanned 3 images" in out
    from dataorder.tools import scan

    monkeypatch.setattr(scan, "stderr_is_terminal", lambda: True)  # a terminal's stderr
    code, out, err = run(capsys, "scan", str(tmp_path), "-o", str(tmp_path / "m.tsv"), "--plain")
    assert code == 0
    assert "scanned 3/3 images (100%)" in err
    assert "scanned 3 images" in out


def test_scan_of_a_folder_without_images_is_a_user_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "scan", str(tmp_path), "-o", str(tmp_path / "m.tsv"))
    assert code == EXIT_USAGE
    assert_user_error(err, "no readable image under")
    assert not (tmp_path / "m.tsv").exists()


# -- plan -----------------------------------------------------------------------------------------
def test_plan_matches_the_sampler(
    capsys: pytest.CaptureFixture[str], manifest_path: Path, tmp_path: Path
) -> None:
    png = tmp_path / "plan.png"
    code, out, err = run(
        capsys,
        "plan",
        str(manifest_path),
        "--num-replicas",
        "64",
        "--batch-size",
        "8",
        "--png",
        str(png),
        "--plain",
    )
    assert code == 0, err
    sampler = SequentialBucketSampler(
        BaseMultiresolutionDataset.from_manifest(manifest_path),
        base_batch_size=8,
        drop_last=False,
        num_replicas=64,
        rank=0,
    )
    assert (
        f"on 64 replicas x batch 8 per rank: {len(sampler)} steps per epoch; 0 samples dropped, "
        f"{sampler.samples_padded} padding slots"
    ) in out
    assert "crop loss: mean" in out
    assert "3000 images in" in out
    assert "warning" not in out  # bucket_stats and the sampler agree
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_plan_json_with_drop_last_and_dynamic_batches(
    capsys: pytest.CaptureFixture[str], manifest_path: Path
) -> None:
    code, out, _ = run(
        capsys,
        "plan",
        str(manifest_path),
        "--num-replicas",
        "8",
        "--batch-size",
        "4",
        "--drop-last",
        "--dynamic-batch-size",
        "--json",
    )
    assert code == 0
    plan = json.loads(out)
    with pytest.warns(UserWarning, match="drop_last=True removes 2 of 31 buckets entirely"):
        sampler = SequentialBucketSampler(
            BaseMultiresolutionDataset.from_manifest(manifest_path),
            base_batch_size=4,
            drop_last=True,
            dynamic_batch_size=True,
            num_replicas=8,
            rank=0,
        )
    assert plan["steps_per_epoch"] == len(sampler)
    assert plan["samples_dropped"] == sampler.samples_dropped > 0
    assert plan["samples_padded"] == 0
    assert sum(b["images"] for b in plan["buckets"]) == 3000
    assert sum(b["steps"] for b in plan["buckets"]) == len(sampler)


def test_plan_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], manifest_path: Path, tmp_path: Path
) -> None:
    code, _, err = run(
        capsys, "plan", str(manifest_path), "--num-replicas", "0", "--batch-size", "8"
    )
    assert code == EXIT_USAGE
    assert_user_error(err, "argument --num-replicas: must be a positive int; got '0'")
    big = ["--num-replicas", "4096", "--batch-size", "64", "--drop-last"]
    code, _, err = run(capsys, "plan", str(manifest_path), *big)
    assert code == EXIT_USAGE
    assert_user_error(err, "drop_last=True leaves nothing to train on")
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    code, _, err = run(capsys, "plan", str(notes), "--num-replicas", "2", "--batch-size", "2")
    assert code == EXIT_USAGE
    assert_user_error(err, "not a dataorder manifest")


# -- inspect --------------------------------------------------------------------------------------
def save(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value))
    return path


def megatron_state(consumed_batches: int) -> dict[str, Any]:
    s = MegatronPretrainingRandomSampler(100, 2, 0, 4, seed=9)
    it = iter(s)
    for _ in range(consumed_batches):
        next(it)
    return s.state_dict()


def test_inspect_megatron_state_shows_position_and_next_batches(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = megatron_state(3)
    code, out, err = run(capsys, "inspect", str(save(tmp_path / "s.json", state)), "--plain")
    assert code == 0, err
    assert "megatron_random" in out
    assert "24 of 96 global positions of epoch 0" in out
    assert "3 of 12 done; 9 left on every rank" in out
    assert "(matches the config)" in out
    for rank in range(4):
        expected = MegatronPretrainingRandomSampler(100, 2, rank, 4, seed=9)
        expected.load_state_dict(state)
        assert str(next(iter(expected))) in out
    # the same state on 2 ranks (elastic), as JSON
    code, out, _ = run(capsys, "inspect", str(tmp_path / "s.json"), "--num-replicas", "2", "--json")
    assert code == 0
    report = json.loads(out)
    assert [r["rank"] for r in report["next"]] == [0, 1]
    two = MegatronPretrainingRandomSampler(100, 2, 1, 2, seed=9)
    two.load_state_dict(state)
    assert report["next"][1]["items"] == next(iter(two))
    assert report["cursor"]["elastic_resume"] is True
    assert report["cursor"]["data_parallel_size"] == 2


def test_inspect_finds_the_state_inside_a_loader_state(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    sampler = DistributedSampler(range(50), num_replicas=2, rank=0, seed=3)
    loader = StatefulDataLoader(list(range(50)), batch_size=5, sampler=sampler)
    it = iter(loader)
    next(it)
    next(it)
    loader_state = loader.state_dict()
    ((where, found),) = find_sampler_states(loader_state)
    assert where == "_sampler_iter_state.sampler_state"
    assert found["consumed"] == 20
    path = save(tmp_path / "loader.json", {"step": 2, "dataloader": loader_state})
    code, out, err = run(capsys, "inspect", str(path), "--count", "5", "--rank", "1", "--plain")
    assert code == 0, err
    assert "dataloader._sampler_iter_state.sampler_state" in out
    assert "20 of 50 global positions" in out
    other = DistributedSampler(range(50), num_replicas=2, rank=1, seed=3)
    other.load_state_dict(found)
    assert str(list(other)[:5]) in out
    assert "next 5 indices" in out


def test_inspect_single_sampler_at_the_end_of_an_epoch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    s = MegatronPretrainingSampler(10, 2, 0, 1)
    run_epoch(s, limit=len(s))  # saved after the last batch, before the pass ran out
    at_end = s.state_dict()
    assert (at_end["epoch"], at_end["consumed"]) == (0, 10)
    t = MegatronPretrainingSampler(10, 2, 0, 1)
    list(t)  # saved after the pass ran out: the cursor is at the start of epoch 1
    for state in (at_end, t.state_dict()):
        code, out, _ = run(capsys, "inspect", str(save(tmp_path / "e.json", state)), "--json")
        assert code == 0
        report = json.loads(out)
        # the resumed job reads epoch 1 next (after an empty pass of epoch 0 for at_end)
        assert report["next"] == [{"rank": 0, "epoch": 1, "items": [0, 1]}]


def test_inspect_bucket_state_needs_its_dataset(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, manifest_path: Path
) -> None:
    dataset = BaseMultiresolutionDataset.from_manifest(manifest_path)
    s = SequentialBucketSampler(
        dataset, base_batch_size=4, num_replicas=4, rank=0, drop_last=False, seed=5
    )
    it = iter(s)
    for _ in range(7):
        next(it)
    path = save(tmp_path / "b.json", s.state_dict())
    code, out, _ = run(capsys, "inspect", str(path), "--plain")
    assert code == 0
    assert "sequential_bucket" in out
    assert "pass --manifest MANIFEST or --sizes CSV" in out
    code, out, err = run(
        capsys, "inspect", str(path), "--manifest", str(manifest_path), "--rank", "2", "--plain"
    )
    assert code == 0, err
    rank2 = SequentialBucketSampler(
        dataset, base_batch_size=4, num_replicas=4, rank=2, drop_last=False, seed=5
    )
    rank2.load_state_dict(s.state_dict())
    assert f"{rank2.remaining} left on every rank" in out
    assert str(next(iter(rank2))) in out


def test_inspect_packed_state_needs_its_lengths(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from dataorder.llm.packing import PackedSampler

    lengths = np.array([5, 40, 3, 9, 17, 2, 30, 8] * 8, dtype=np.int64)
    kwargs: dict[str, Any] = {"global_batch_size": 8, "seed": 3, "chunk": 4, "window": 16}
    s = PackedSampler(lengths, 16, 2, 0, 4, **kwargs)
    run_epoch(s, limit=3)
    path = save(tmp_path / "p.json", s.state_dict())
    code, out, _ = run(capsys, "inspect", str(path), "--plain")
    assert code == 0
    assert "pass --lengths FILE" in out
    np.save(tmp_path / "lengths.npy", lengths)
    code, out, err = run(
        capsys, "inspect", str(path), "--lengths", str(tmp_path / "lengths.npy"), "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    # the next micro-batch of every rank: rows of (document, start, stop) spans, as the sampler
    # of each rank yields them (a JSON list per tuple)
    expected = [PackedSampler(lengths, 16, 2, r, 4, **kwargs).batch_at(3) for r in range(4)]
    assert [r["items"] for r in report["next"]] == json.loads(json.dumps(expected))
    # another corpus's lengths: refused, naming the field
    np.save(tmp_path / "other.npy", lengths[::-1].copy())
    code, _, err = run(capsys, "inspect", str(path), "--lengths", str(tmp_path / "other.npy"))
    assert code == EXIT_USAGE
    assert_user_error(err, "lengths")
    # a file that is not lengths: one line naming the option and the file
    (tmp_path / "lengths.txt").write_text("5\n40\n")
    code, _, err = run(capsys, "inspect", str(path), "--lengths", str(tmp_path / "lengths.txt"))
    assert code == EXIT_USAGE
    assert_user_error(err, "--lengths", "lengths.txt")
    code, _, err = run(capsys, "inspect", str(path), "--lengths", str(tmp_path / "none.npy"))
    assert code == EXIT_USAGE
    assert_user_error(err, "none.npy")


def test_inspect_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, manifest_path: Path
) -> None:
    code, _, err = run(capsys, "inspect", str(save(tmp_path / "x.json", {"a": [1, 2]})))
    assert code == EXIT_USAGE
    assert_user_error(err, "holds no dataorder sampler state")
    (tmp_path / "bad.json").write_text("{not json")
    code, _, err = run(capsys, "inspect", str(tmp_path / "bad.json"))
    assert code == EXIT_USAGE
    assert_user_error(err, "is not JSON")
    # an edited state: explained, flagged, and refused
    state = megatron_state(1)
    state["config.seed"] = 10
    code, out, err = run(capsys, "inspect", str(save(tmp_path / "e.json", state)), "--plain")
    assert code == EXIT_USAGE
    assert "DOES NOT match the config" in out
    assert_user_error(err, "cannot rebuild the megatron_random sampler")
    # a layout that cannot continue from the saved position
    code, out, err = run(
        capsys, "inspect", str(save(tmp_path / "m.json", megatron_state(1))), "--num-replicas", "3"
    )
    assert code == EXIT_USAGE
    assert_user_error(err, "consumed=8")
    # a rank outside the layout
    code, _, err = run(capsys, "inspect", str(tmp_path / "m.json"), "--rank", "9")
    assert code == EXIT_USAGE
    assert_user_error(err, "--rank must be an int in [0, 3]; got --rank=9")
    # a bucket state with another dataset
    sizes = tmp_path / "sizes.csv"
    sizes.write_text("width,height\n" + "".join(f"{64 * (i % 5 + 1)},256\n" for i in range(40)))
    ds = BaseMultiresolutionDataset.from_manifest(manifest_path)
    s = SequentialBucketSampler(ds, base_batch_size=2, num_replicas=1, rank=0)
    next(iter(s))
    code, _, err = run(
        capsys, "inspect", str(save(tmp_path / "b.json", s.state_dict())), "--sizes", str(sizes)
    )
    assert code == EXIT_USAGE
    assert_user_error(err, "state is from another configuration")


def test_plain_and_rich_tables_hold_the_same_cells(capsys: pytest.CaptureFixture[str]) -> None:
    code, plain, _ = run(capsys, "buckets", "--preset", "768p", "--plain")
    assert code == 0
    code, rich, _ = run(capsys, "buckets", "--preset", "768p")
    assert code == 0
    cells = {c for line in plain.splitlines()[3:] for c in line.split()}
    assert cells
    assert all(c in rich for c in cells)
    assert np.all([c in plain for c in ("id", "resolution", "pixels")])


# -- hostile input ---------------------------------------------------------------------------------
POSITIVE = "must be a positive int; got"
NON_NEGATIVE = "must be a non-negative int; got"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["inspect", "{state}", "--num-replicas", "-3"], f"--num-replicas: {POSITIVE} '-3'"),
        (["inspect", "{state}", "--num-replicas", "0"], f"--num-replicas: {POSITIVE} '0'"),
        (["inspect", "{state}", "--micro-batch-size", "0"], f"--micro-batch-size: {POSITIVE} '0'"),
        (["inspect", "{state}", "--count", "-1"], f"--count: {POSITIVE} '-1'"),
        (["inspect", "{state}", "--count", "0"], f"--count: {POSITIVE} '0'"),
        (["inspect", "{state}", "--rank", "-1"], f"--rank: {NON_NEGATIVE} '-1'"),
        (["inspect", "{state}", "--rank", "1.5"], f"--rank: {NON_NEGATIVE} '1.5'"),
        (["plan", "{manifest}", "--num-replicas", "0", "--batch-size", "4"], "--num-replicas: "),
        (["plan", "{manifest}", "--num-replicas", "8", "--batch-size", "-4"], "--batch-size: "),
        (["scan", ".", "-o", "m.tsv", "--workers", "0"], f"--workers: {POSITIVE} '0'"),
        (["buckets", "--max-pixels", "1e30"], f"--max-pixels: {POSITIVE} '1e30'"),
        (["buckets", "--max-pixels", "-5"], f"--max-pixels: {POSITIVE} '-5'"),
        (
            ["buckets", "--max-pixels", str(10**30)],
            "--max-pixels: must be a positive int of at most",
        ),
    ],
)
def test_hostile_numbers_are_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    manifest_path: Path,
    argv: list[str],
    fragment: str,
) -> None:
    """Regression: ``--num-replicas 0``, ``--micro-batch-size 0`` and ``--count -1`` were silently
    ignored, ``--num-replicas -3`` and ``--max-pixels 10**30`` gave tracebacks."""
    state = save(tmp_path / "s.json", megatron_state(1))
    argv = [a.format(state=state, manifest=manifest_path) for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert out == ""
    assert_user_error(err, fragment)


def _layout_error(key: str, value: object) -> str:
    return f"layout.{key} must be a positive int; got layout.{key}={value!r}"


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        ({"layout.data_parallel_size": 0}, _layout_error("data_parallel_size", 0)),
        ({"layout.micro_batch_size": -2}, _layout_error("micro_batch_size", -2)),
        ({"layout.data_parallel_size": True}, _layout_error("data_parallel_size", True)),
        ({"layout.data_parallel_size": "4"}, _layout_error("data_parallel_size", "4")),
        ({"version": True}, "state version True is not supported"),
        (
            {"config.total_samples": 10**30},
            "total_samples must be an int in [1, 4611686018427387904]",
        ),
    ],
)
def test_inspect_an_edited_state_names_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, edit: dict[str, Any], fragment: str
) -> None:
    """Regression: a state with ``layout.data_parallel_size=0`` ended in a traceback."""
    path = save(tmp_path / "s.json", {**megatron_state(1), **edit})
    code, out, err = run(capsys, "inspect", str(path), "--plain")
    assert code == EXIT_USAGE
    assert "megatron_random" in out  # what can be read is still explained
    assert_user_error(err, f"{path}: cannot rebuild the megatron_random sampler", fragment)


@pytest.mark.parametrize("cut", ["gzip", "row"])
def test_plan_on_a_cut_manifest_names_the_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, manifest_path: Path, cut: str
) -> None:
    """Regression: ``plan`` on a truncated ``.gz`` manifest ended in an EOFError traceback."""
    if cut == "gzip":
        bad = tmp_path / "cut.tsv.gz"
        write_manifest(read_manifest(manifest_path), bad)
        bad.write_bytes(bad.read_bytes()[:-100])
        fragment = "corrupt or truncated gzip data (EOFError"
    else:
        bad = tmp_path / "cut.tsv"
        bad.write_bytes(manifest_path.read_bytes()[:-3])
        fragment = "the last row has no newline (truncated file)"
    code, out, err = run(capsys, "plan", str(bad), "--num-replicas", "8", "--batch-size", "4")
    assert code == EXIT_USAGE
    assert out == ""
    assert_user_error(err, f"{bad}:", fragment)


def test_inspect_names_a_bad_sizes_csv(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, manifest_path: Path
) -> None:
    ds = BaseMultiresolutionDataset.from_manifest(manifest_path)
    state = save(
        tmp_path / "b.json",
        SequentialBucketSampler(ds, base_batch_size=2, num_replicas=1, rank=0).state_dict(),
    )
    sizes = tmp_path / "sizes.csv"
    sizes.write_text("width,height\n512,x\n")
    code, _, err = run(capsys, "inspect", str(state), "--sizes", str(sizes), "--plain")
    assert code == EXIT_USAGE
    assert_user_error(err, f"{sizes}: not a CSV of width,height rows", "row 0")


# -- video ----------------------------------------------------------------------------------------
def test_video_buckets_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    calc = VideoBucketCalculator.from_preset("cogvideox-5b")
    code, out, _ = run(capsys, "buckets", "--video", "--preset", "cogvideox-5b", "--plain")
    assert code == 0
    assert (
        f"{len(calc)} buckets: cogvideox-5b, 7 frame counts 1..49, max_tokens 17,550, "
        "quantization 16, max_upscale 3/2"
    ) in out
    assert PRESETS["cogvideox-5b"].description in out
    assert f"source: {PRESETS['cogvideox-5b'].source}" in out
    full = calc.get_bucket_by_shape(720, 480, 49)
    assert full is not None
    assert re.search(rf"\n\s*{full['id']}\s+49\s+720x480\s+1\.500\s+wide\s+17,550\s+100\.0%", out)
    code, out, _ = run(capsys, "buckets", "--video", "--max-frames", "33", "--max-upscale", "none",
                       "--batch-size", "2", "--json")  # fmt: skip
    assert code == 0
    data = json.loads(out)
    narrow = VideoBucketCalculator.from_preset("wan2.1-480p", max_frames=33, max_upscale=None)
    assert data["calculator"] == narrow.config()
    assert len(data["buckets"]) == len(narrow)
    assert data["batch_sizes"] == narrow.batch_sizes(2).tolist()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["buckets", "--video", "--compat", "nemo"], "--compat applies to image buckets"),
        (["buckets", "--video", "--max-pixels", "4096"], "--max-pixels applies to image buckets"),
        (["buckets", "--max-frames", "33"], "--max-frames applies to video buckets: add --video"),
        (["buckets", "--max-upscale", "2"], "--max-upscale applies to video buckets"),
        (["buckets", "--batch-size", "2"], "--batch-size applies with --video"),
        (["buckets", "--video", "--preset", "1024p"], "name must be one of 'wan2.1-480p'"),
        (["buckets", "--video", "--max-upscale", "1/2"], "argument --max-upscale: must be a"),
        (["buckets", "--video", "--quantization", "12"], "quantization must be a multiple of"),
        (["plan", "m.tsv", "--num-replicas", "2", "--batch-size", "2", "--max-waste", "2"],
         "argument --max-waste: must be a number in [0, 1]"),
    ],
)  # fmt: skip
def test_video_and_fit_options_are_checked(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == EXIT_USAGE
    assert_user_error(err, fragment)


def _write_clip(path: Path, size: tuple[int, int], frames: int) -> None:
    av = pytest.importorskip("av")
    w, h = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=16)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        image = np.zeros((h, w, 3), dtype=np.uint8)
        for i in range(frames):
            image[:, : 4 * (i + 1)] = 200
            packets = stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24"))
            for packet in packets:
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("clips")
    _write_clip(root / "a.mp4", (640, 360), 20)  # 832x480 at 1.3x, trimmed to 17 frames
    _write_clip(root / "b.mp4", (360, 640), 40)  # 480x832, 37 frames
    _write_clip(root / "c.mp4", (96, 64), 5)  # every bucket needs > 3/2 upscaling
    (root / "d.mp4").write_text("not a video")
    return root


def test_scan_plan_and_inspect_a_video_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, clip_dir: Path
) -> None:
    manifest = tmp_path / "clips.tsv"
    code, out, err = run(capsys, "scan", str(clip_dir), "-o", str(manifest), "--video",
                         "--no-progress", "--plain")  # fmt: skip
    assert code == 0, err
    assert f"scanned 2 clips into 2 of 693 buckets; wrote {manifest}" in out
    assert "0 clips too short and 1 too small for every bucket were left out" in out
    assert "1 files could not be read and were skipped:" in out
    assert "d.mp4: InvalidDataError" in out
    m = read_manifest(manifest)
    assert m.frames is not None
    assert m.frames.tolist() == [20, 40]
    assert [m.buckets[i]["frames"] for i in m.bucket_ids] == [17, 37]
    assert any(p.endswith("c.mp4") and r.startswith("too small: 96x64") for p, r in m.errors)
    # plan: frames and trim beside crop, from the sampler's own plan
    code, out, err = run(capsys, "plan", str(manifest), "--num-replicas", "2", "--batch-size",
                         "1", "--plain")  # fmt: skip
    assert code == 0, err
    assert "2 clips in 2 of 693 buckets" in out
    assert "frames" in out
    assert "trim % mean" in out
    trims = [(20 - 17) / 20, (40 - 37) / 40]
    assert f"trim loss: mean {100 * np.mean(trims):.1f} %" in out
    code, out, _ = run(capsys, "plan", str(manifest), "--num-replicas", "2", "--batch-size", "1",
                       "--dynamic-batch-size", "--json")  # fmt: skip
    assert code == 0
    plan = json.loads(out)
    assert [b["frames"] for b in plan["buckets"]] == [17, 37]
    assert plan["overall"]["mean_trim_loss"] == pytest.approx(np.mean(trims))
    sizes = VideoBucketCalculator.from_preset("wan2.1-480p").batch_sizes(1)
    assert [b["batch_size"] for b in plan["buckets"]] == [int(sizes[i]) for i in m.bucket_ids]
    # inspect a state of the video sampler over that manifest
    dataset = BaseMultiresolutionDataset.from_manifest(manifest)
    s = SequentialBucketSampler(dataset, base_batch_size=1, num_replicas=2, rank=0,
                                drop_last=False, shuffle_buckets=False)  # fmt: skip
    next(iter(s))
    state = save(tmp_path / "video.json", s.state_dict())
    code, out, err = run(capsys, "inspect", str(state), "--manifest", str(manifest), "--plain")
    assert code == 0, err
    assert "480x832x37f" in out  # the bucket being read, frames included
    # --fit: two clips of two shapes cannot share a global batch (tests/diffusion/fit/test_video.py
    # fits real populations)
    code, _, err = run(capsys, "plan", str(manifest), "--num-replicas", "2", "--batch-size",
                       "1", "--video", "--fit", "--max-waste", "0.5", "--plain")  # fmt: skip
    assert code == EXIT_USAGE
    assert_user_error(err, "global_batch_size must be small enough for the clips")


def test_scan_video_without_pyav_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "av", None)  # makes "import av" fail, installed or not
    code, _, err = run(capsys, "scan", str(tmp_path), "-o", str(tmp_path / "m.tsv"), "--video")
    assert code == EXIT_USAGE
    assert_user_error(err, "scan_videos needs PyAV", "pip install 'dataorder[video]'")


# -- plan --fit -----------------------------------------------------------------------------------
def test_plan_fit_shows_the_fitted_set_beside_the_manifests(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, manifest_path: Path
) -> None:
    widths, heights = load_image_sizes()
    fit = fit_to_data(widths, heights, global_batch_size=32, max_waste=0.05, max_pixels=1024**2)
    args = ["plan", str(manifest_path), "--num-replicas", "8", "--batch-size", "4", "--drop-last",
            "--fit", "--max-waste", "0.05"]  # fmt: skip
    written = tmp_path / "fitted.tsv"
    code, out, err = run(capsys, *args, "--write-manifest", str(written), "--plain")
    assert code == 0, err
    assert "bucket sets on this layout" in out
    manifest = read_manifest(manifest_path)
    with pytest.warns(UserWarning, match="drop_last=True removes 23 of 31 buckets"):
        preset = SequentialBucketSampler(
            BaseMultiresolutionDataset.from_manifest(manifest), 4, drop_last=True, num_replicas=8,
            rank=0,
        )  # fmt: skip
    mine = re.search(r"manifest's \((\d+) buckets\)\s+(\d+)\s+\S+\s+\S+\s+\S+\s+(\d+)\s+(\d+)", out)
    assert mine is not None
    assert int(mine.group(3)) == len(preset)
    assert int(mine.group(4)) == preset.samples_dropped
    theirs = re.search(rf"fitted \({fit.num_buckets} buckets\)\s+(\d+)\s+([\d.]+)", out)
    assert theirs is not None
    assert float(theirs.group(2)) == pytest.approx(100 * fit.mean_crop_loss, abs=0.006)
    verdict = (
        f"fitted ({fit.method}): {fit.waste} samples dropped ({100 * fit.waste_share:.2f} % "
        f"<= 5.00 %)"
    )
    assert verdict in out
    assert fit.waste < preset.samples_dropped
    assert f"wrote {written}: the manifest re-bucketed by the fitted set" in out
    # the written manifest trains with exactly that waste, and carries the fitted set
    refit = read_manifest(written)
    assert refit.calculator["compat"] == "fitted"
    assert refit.paths == manifest.paths
    sampler = SequentialBucketSampler(
        BaseMultiresolutionDataset.from_manifest(refit), 4, drop_last=True, num_replicas=8, rank=0
    )
    assert sampler.samples_dropped == fit.waste
    code, out, _ = run(capsys, *args, "--json")
    assert code == 0
    data = json.loads(out)["fitted"]
    assert data["config"] == refit.calculator
    assert (data["samples_dropped"], data["steps_per_epoch"]) == (fit.waste, len(sampler))
    assert data["method"] == fit.method
    code, _, err = run(capsys, "plan", str(manifest_path), "--num-replicas", "8", "--batch-size",
                       "4", "--write-manifest", str(written))  # fmt: skip
    assert code == EXIT_USAGE
    assert_user_error(err, "--write-manifest writes the fitted set's manifest: add --fit")


def test_inspect_a_blended_state_needs_and_checks_its_sources(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from dataorder import BlendedSampler

    s = BlendedSampler([100, 50, 25], [0.5, 0.3, 0.2], 2, 0, 2, 8, seed=1)
    run_epoch(s, limit=3)
    path = save(tmp_path / "blend.json", s.state_dict())
    code, out, _ = run(capsys, "inspect", str(path), "--plain")
    assert code == 0
    assert "the sources' sizes the state was written over" in out
    assert "pass --source-sizes N,N,..." in out
    assert "pass --weights W,W,..." in out
    args = ["--source-sizes", "100,50,25", "--weights", "0.5,0.3,0.2", "--json"]
    code, out, _ = run(capsys, "inspect", str(path), *args)
    assert code == 0
    report = json.loads(out)
    t = BlendedSampler([100, 50, 25], [0.5, 0.3, 0.2], 2, 1, 2, 8, seed=1)
    t.load_state_dict(s.state_dict())
    assert report["next"][1] == {"rank": 1, "epoch": 0, "items": next(iter(t))}
    code, _, err = run(capsys, "inspect", str(path), "--source-sizes", "100,50,26", "--weights",
                       "0.5,0.3,0.2", "--plain")  # fmt: skip
    assert code != 0
    assert "cannot rebuild the blended sampler from this state: state is from another " in err
    assert "sizes is '99dabab79e5140a1' in the state" in err
