"""The `dataorder` command line: each subcommand's output, and one clean line for each user error.

Everything runs in-process through ``main(argv)`` (fast, and an escaped exception fails the test),
plus one subprocess run of ``python -m dataorder`` to check the real entry point and that a user
error prints no traceback. `dataorder demo` itself is tested in test_demo.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataorder.core.state import find_sampler_states
from dataorder.diffusion.bucket_sampler import SequentialBucketSampler
from dataorder.diffusion.buckets import MultiTierBucketCalculator
from dataorder.diffusion.multires import BaseMultiresolutionDataset
from dataorder.diffusion.scan import build_manifest, read_manifest, write_manifest
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
        (["demo", "--micro-batch-size", "0"], "micro_batch_size must be a positive int"),
        (["demo", "--samplers", "megatron,typo"], "samplers must be distinct names"),
        (["buckets", "--preset", "9000p"], "preset must be one of"),
        (["buckets", "--quantization", "0"], "quantization must be a positive int"),
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
    assert_user_error(err, "num_replicas must be a positive int; got num_replicas=0")
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
    assert "elastic" in report["fields"]["shown on"]


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
