"""`dataorder pack`: the figures it prints equal the engine's, the PNG, JSON, and one clean line
for each user error. The module is registered in a parser built here (the lead registers it in
tools/cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dataorder.llm.packing.lengths import DocumentLengths
from dataorder.llm.packing.megatron_files import write_megatron
from dataorder.llm.packing.plan import PackingPlan
from dataorder.tools import pack
from dataorder.tools.cli import build_parser, main
from dataorder.tools.output import EXIT_USAGE

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def lengths_npy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    lengths = np.maximum(1, rng.lognormal(6.0, 1.1, 20_000)).astype(np.int32)
    path = tmp_path_factory.mktemp("pack") / "lengths.npy"
    np.save(path, lengths)
    return path


def test_the_figures_are_the_engines(capsys: pytest.CaptureFixture[str], lengths_npy: Path) -> None:
    code, out, err = run(
        capsys, "pack", str(lengths_npy), "--seq-len", "4096", "--window", "4096",
        "--num-replicas", "8", "--batch-size", "2", "--json",
    )  # fmt: skip
    assert code == 0, err
    got = json.loads(out)
    plan = PackingPlan(DocumentLengths.from_file(lengths_npy), 4096, window=4096)
    stats = plan.stats()
    assert got["rows"] == stats.rows == plan.rows_per_epoch
    assert got["tokens_padded"] == stats.tokens_padded
    assert (got["split_shorter"], got["split_longer"]) == plan.documents_split()
    assert got["steps"] == stats.rows // 16
    assert got["rows_left_over"] == stats.rows % 16
    assert got["windows"] == plan.num_windows == 5


def test_the_table_and_the_png(
    capsys: pytest.CaptureFixture[str], lengths_npy: Path, tmp_path: Path
) -> None:
    png = tmp_path / "fill.png"
    code, out, _ = run(
        capsys, "pack", str(lengths_npy), "--seq-len", "2048", "--split", "never",
        "--long-documents", "drop", "--png", str(png), "--plain",
    )  # fmt: skip
    assert code == 0
    assert "rows per epoch" in out
    assert "split=never" in out
    assert f"wrote {png}" in out
    assert png.read_bytes().startswith(PNG_MAGIC)
    stats = PackingPlan(
        DocumentLengths.from_file(lengths_npy), 2048, split="never", long_documents="drop"
    ).stats()
    assert f"documents dropped {stats.documents_dropped:,}" in out


def test_a_megatron_prefix(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write_megatron(tmp_path / "corpus", [np.arange(n) for n in (5, 17, 3, 40)])
    code, out, _ = run(capsys, "pack", str(tmp_path / "corpus"), "--seq-len", "16", "--json")
    assert code == 0
    got = json.loads(out)
    assert (got["documents"], got["tokens"], got["rows"]) == (4, 65, 5)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--num-replicas", "2"], "--num-replicas and --batch-size go together"),
        (["--long-documents", "drop"], "--long-documents applies with --split never"),
        (["--window", "100", "--chunk", "64"], "window must be a multiple of chunk=64"),
    ],
)
def test_user_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], lengths_npy: Path, argv: list[str], fragment: str
) -> None:
    code, _, err = run(capsys, "pack", str(lengths_npy), "--seq-len", "64", *argv)
    assert code == EXIT_USAGE
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("dataorder: error: ")
    assert fragment in lines[0]


def test_vsl_sets_three_batchings_side_by_side(
    capsys: pytest.CaptureFixture[str], lengths_npy: Path
) -> None:
    from dataorder.llm.packing.sampler import PackedSampler
    from dataorder.llm.vsl import VariableLengthSampler

    argv = ["pack", str(lengths_npy), "--seq-len", "1024", "--num-replicas", "4"]
    argv += ["--batch-size", "2", "--min-seq-len", "128", "--vsl"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    got = json.loads(out)["batchings"]
    lengths = np.load(lengths_npy)
    rows, tail = divmod(int(lengths.sum()), 1024)
    assert got["concat_split"]["steps"] == rows // 8
    assert got["concat_split"]["tokens_dropped"] == tail + rows % 8 * 1024
    packed = PackedSampler(lengths, 1024, 2, 0, 4, seed=0)
    assert got["best_fit"]["steps"] == len(packed)
    assert got["best_fit"]["tokens_dropped"] == packed.tokens_dropped
    assert got["best_fit"]["tokens_padded"] == packed.tokens_padded
    vsl = VariableLengthSampler(lengths, 1024, 2048, 0, 4, seed=0, min_seq_len=128)
    assert got["vsl"]["steps"] == len(vsl)
    assert got["vsl"]["tokens_dropped"] == vsl.tokens_dropped
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    table = out[out.index("three batchings") :]
    for name in ("concatenate and split", "best-fit packing", "variable sequence length"):
        assert name in table
    assert f"{vsl.tokens_dropped:,}" in table


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--seq-len", "1000"], "--seq-len must be a power of two with --vsl; got --seq-len 1000"),
        (["--min-seq-len", "100"], "--min-seq-len must be a power of two with --vsl"),
        (["--min-seq-len", "2048"], "min_seq_len must be at most max_seq_len=1024"),
    ],
)
def test_vsl_user_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], lengths_npy: Path, argv: list[str], fragment: str
) -> None:
    code, _, err = run(capsys, "pack", str(lengths_npy), "--seq-len", "1024", "--vsl", *argv)
    assert code == EXIT_USAGE
    assert len(err.strip().splitlines()) == 1
    assert fragment in err


def test_missing_and_unknown_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "pack", str(tmp_path / "none.npy"), "--seq-len", "8")
    assert code == EXIT_USAGE
    assert "No such file or directory" in err
    (tmp_path / "x.csv").write_text("1\n")
    code, _, err = run(capsys, "pack", str(tmp_path / "x.csv"), "--seq-len", "8")
    assert code == EXIT_USAGE
    assert "path must be a Megatron" in err


def test_traceback_on_request(lengths_npy: Path) -> None:
    argv = ["pack", str(lengths_npy), "--seq-len", "8", "--chunk", "3", "--window", "4"]
    with pytest.raises(ValueError, match="window must be a multiple of chunk=3"):
        main([*argv, "--traceback"])


def test_registered_as_every_command() -> None:
    args = build_parser().parse_args(["pack", "x.npy", "--seq-len", "8", "--plain"])
    assert args.plain
    assert args.func is pack.run
