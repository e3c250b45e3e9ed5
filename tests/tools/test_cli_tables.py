"""No table the command line prints cuts a cell (NOTE [ Tables are never cut ]): in a pipe (a CI
log, ``| tee``) tables are plain text as wide as their widest cell; in a terminal, rich wraps and
folds a cell that does not fit its column, never ending it in "…"."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
from dataorder.diffusion.scan.images import build_manifest, write_manifest
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.tools.cli import main
from dataorder.tools.demo_checks import CHECKS
from dataorder.tools.demo_cli import print_report, report_table
from dataorder.tools.demo_config import SAMPLERS, DemoConfig, DemoReport, SamplerResult
from dataorder.tools.demo_data import load_image_sizes
from dataorder.tools.output import RICH_COLUMN_WIDTH, Output, column_groups

ELLIPSIS = "…"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _report(tmp_path: Path) -> DemoReport:
    """A report of every sampler, with long values, one check failed."""
    results = [
        SamplerResult(
            name=name,
            steps=(102, 1013),
            micro_batches=(102, 2026),
            checks={key: key != "exactly_once" or name != "video" for key in CHECKS},
            details={key: f"{key} of {name}" for key in CHECKS},
            dataset_size=410,
            lost=0,
            repeated=0,
            dropped=12345,
            padded=678,
            loss=(4.1634, 4.0312),
        )
        for name in SAMPLERS
    ]
    outputs = {"report": str(tmp_path / "report.json")}
    outputs.update({f"checkpoint:{n}": str(tmp_path / f"{n}.json") for n in SAMPLERS})
    seconds = {"total": 1.0, "phase0": 0.5, "phase1": 0.5}
    return DemoReport(DemoConfig(), results, seconds, outputs)


def _subsequence(cell: str, text: str) -> bool:
    """Whether the characters of ``cell`` appear in ``text`` in order (a folded cell's pieces
    are on successive lines)."""
    chars = iter(text)
    return all(c in chars for c in cell.replace(" ", ""))


def test_the_demo_table_is_not_cut_in_a_pipe(tmp_path: Path) -> None:
    stream = io.StringIO()  # not a terminal, as a pipe is: rich or not, plain text
    report = _report(tmp_path)
    print_report(Output(stream, plain=False), report)
    text = stream.getvalue()
    assert ELLIPSIS not in text
    title, columns, rows = report_table(report)
    lines = text.splitlines()
    assert lines[0] == title
    for column in columns:
        assert column in lines[1]
    for name, row in zip(SAMPLERS, rows, strict=True):
        (line,) = [x for x in lines[3:] if x.startswith(f"{name} ")]
        assert line.split() == row  # every cell whole, in its column
    assert "4.16>4.03" in text
    assert "FAILED video each once: exactly_once of video" in text


@pytest.mark.parametrize("count", [4, 12, 16])
def test_a_wide_table_keeps_every_cell_at_any_terminal_width(
    monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    # regression: a 12-column demo table in 40 terminal columns lost its first column (rich
    # squeezed it to its padding); too narrow for rich, the plain layout is used
    pytest.importorskip("rich")
    header = [f"column {i}" for i in range(count)]
    rows = [[f"r{r}c{i}-value" for i in range(count)] for r in range(3)]
    for width in range(20, 4 * RICH_COLUMN_WIDTH * count, 7):
        monkeypatch.setenv("COLUMNS", str(width))
        stream = _Terminal()
        Output(stream, plain=False).table("t", header, rows)
        text = stream.getvalue()
        assert ELLIPSIS not in text
        for cell in [*header, *(c for row in rows for c in row)]:
            assert _subsequence(cell, text), (width, cell)


@pytest.mark.parametrize("columns", [40, 80, 200])
def test_the_demo_table_is_not_cut_in_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    pytest.importorskip("rich")
    monkeypatch.setenv("COLUMNS", str(columns))
    stream = _Terminal()
    report = _report(tmp_path)
    out = Output(stream, plain=False)
    assert out.console is not None  # rich draws it
    out.table(*report_table(report))
    text = stream.getvalue()
    assert ELLIPSIS not in text
    _title, header, rows = report_table(report)
    for cell in [*header, *(c for row in rows for c in row)]:
        assert _subsequence(cell, text), cell
    if columns == 200:  # room for every cell on one line
        for name in SAMPLERS:
            assert f" {name} " in text


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert ELLIPSIS not in out
    return out


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped image sizes in a 1024p manifest, under a long path (a long title)."""
    widths, heights = load_image_sizes()
    calc = MultiTierBucketCalculator.from_preset("1024p")
    paths = [f"images/{i:05d}.jpg" for i in range(len(widths))]
    folder = tmp_path_factory.mktemp("manifest") / ("a-rather-long-folder-name-" * 4)
    folder.mkdir()
    path = folder / "sizes.tsv"
    write_manifest(build_manifest(paths, widths, heights, calc), path)
    return path


def test_plan_is_not_cut_when_captured(capsys: pytest.CaptureFixture[str], manifest: Path) -> None:
    argv = ["plan", str(manifest), "--num-replicas", "64", "--batch-size", "8", "--fit"]
    text = run(capsys, *argv)  # capsys's stdout is no terminal: what a pipe gets
    plan = json.loads(run(capsys, *argv, "--json"))
    assert str(manifest) in text
    for b in plan["buckets"]:
        w, h = b["resolution"]
        row = f"{b['id']} {w}x{h} {b['images']}"
        assert any(" ".join(line.split()).startswith(row) for line in text.splitlines()), row
    assert "bucket sets on this layout" in text
    assert f"fitted ({plan['fitted']['method']})" in text


def test_inspect_is_not_cut_when_captured(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sampler = MegatronPretrainingRandomSampler(10**6, 64, 0, 4, seed=9)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(sampler.state_dict()))
    text = run(capsys, "inspect", str(path))
    report = json.loads(run(capsys, "inspect", str(path), "--json"))
    for row in report["next"]:  # 64 indices a row: a wide cell
        assert str(row["items"]) in text


def test_buckets_through_a_real_pipe() -> None:
    argv = ["buckets", "--video", "--batch-size", "4"]
    proc = subprocess.run(
        [sys.executable, "-m", "dataorder", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert ELLIPSIS not in proc.stdout
    assert "batch (b=4 at the budget)" in proc.stdout
    data = json.loads(
        subprocess.run(
            [sys.executable, "-m", "dataorder", *argv, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    lines = [" ".join(line.split()) for line in proc.stdout.splitlines()]
    for b, size in zip(data["buckets"], data["batch_sizes"], strict=True):
        w, h = b["resolution"]
        assert any(
            line.startswith(f"{b['id']} {b['frames']} {w}x{h} ") and line.endswith(f" {size}")
            for line in lines
        ), b


# -- tables fold between columns (NOTE [ Tables fold between columns ]) ------------------------
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: A video plan's columns, and a cell with spaces in it: what 0.3.0 broke at 80 columns
#: (``768x134 / 4``, ``buck/et``, ``fram/es``).
_VIDEO_PLAN_HEAD = ["id", "bucket", "frames", "clips", "crop % mean", "crop % p95",
                    "trim % mean", "trim % p95", "upscaled", "batch", "steps", "dropped",
                    "padded"]  # fmt: skip


def _whole_on_a_line(text: str, cells: list[str]) -> list[str]:
    """The cells that no line of ``text`` holds whole (a cell broken across lines)."""
    lines = _ANSI.sub("", text).splitlines()
    return [c for c in cells if not any(c in line for line in lines)]


@pytest.mark.parametrize("width", [80, 60, 40])
def test_a_wide_table_folds_between_columns_never_inside_a_cell(width: int) -> None:
    pytest.importorskip("rich")
    from rich.console import Console

    rows = [[7, "768x134 / 4", 81, 1000, "12.3", "45.6", "1.0", "2.0", 3, 4, 5, 6, 7],
            [103, "1280x720", 1, 12, "0.0", "0.0", "0.0", "0.0", 0, 16, 1, 0, 4]]  # fmt: skip
    stream = _Terminal()
    out = Output(stream, plain=False)
    out.console = Console(file=stream, width=width, highlight=False)
    out.table("a video plan", _VIDEO_PLAN_HEAD, rows)
    text = _ANSI.sub("", stream.getvalue())
    assert _whole_on_a_line(text, [*_VIDEO_PLAN_HEAD, *(str(c) for r in rows for c in r)]) == []
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    # the key leads every group of columns: each row's id once per group
    groups = text.count("(continued)") + 1
    assert groups > 1
    assert len(re.findall(r"^ *768x134 / 4|^ *7 ", text, re.MULTILINE)) == groups


def test_plan_in_an_80_column_terminal_breaks_no_cell(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, manifest: Path
) -> None:
    pytest.importorskip("rich")
    monkeypatch.setenv("COLUMNS", "80")
    argv = ["plan", str(manifest), "--num-replicas", "64", "--batch-size", "8", "--fit"]
    plan = json.loads(run(capsys, *argv, "--json"))
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(argv) == 0
    text = terminal.getvalue()
    cells = ["id", "bucket", "images", "crop % mean", "crop % p95", "upscaled", "dropped"]
    cells.append(f"{manifest}: {int(plan['overall']['images'])} images")  # a long title
    for b in plan["buckets"]:
        w, h = b["resolution"]
        cells += [f"{w}x{h}", str(b["images"])]
    assert _whole_on_a_line(text, cells) == []


def test_column_groups_keep_the_key_and_fit_the_width() -> None:
    assert column_groups([2, 5, 5, 5], 80) == [[0, 1, 2, 3]]
    assert column_groups([2, 5, 5, 5], 16) == [[0, 1, 2], [0, 3]]
    assert column_groups([2, 50, 5], 20) == [[0, 1], [0, 2]]  # too wide alone: its own group
    assert column_groups([3], 1) == [[0]]
