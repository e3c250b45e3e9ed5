"""What a first run of the command line meets: the demo on the core install, progress on a
terminal (and nowhere else), every default in ``--help``, ``pack`` on a ``save_to_disk`` folder
and on weighted corpora with its length percentiles, ``scan --json``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dataorder.llm.packing import PackedSampler
from dataorder.llm.packing.plan import PackingPlan
from dataorder.tools.cli import build_parser, main
from dataorder.tools.output import EXIT_USAGE
from dataorder.tools.pack import PERCENTILES

_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- the demo on the core install --
def _demo_without(module: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``dataorder demo`` in a process where ``module`` does not import (as if not installed)."""
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from dataorder.tools.cli import main\n"
        f"raise SystemExit(main(['demo', '--out', {str(out)!r}]))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=_ENV)  # fmt: skip


def test_the_demo_without_torchdata_is_one_line_before_any_process(tmp_path: Path) -> None:
    proc = _demo_without("torchdata", tmp_path / "demo")
    assert proc.returncode == EXIT_USAGE
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "pip install 'dataorder[torchdata]'" in proc.stderr
    assert not (tmp_path / "demo").exists()  # nothing started, nothing written


def test_the_demo_skips_its_png_by_name_without_matplotlib(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dataorder.tools import demo

    assert demo.demo_can_plot()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert not demo.demo_can_plot()
    monkeypatch.setitem(sys.modules, "torchdata", None)
    monkeypatch.delitem(sys.modules, "torchdata.stateful_dataloader", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'dataorder\[torchdata\]'"):
        demo.require_demo_extras()


# -- progress on a terminal's stderr, and nowhere else --
@pytest.fixture(scope="module")
def lengths_npy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("first") / "lengths.npy"
    np.save(path, rng.integers(1, 3000, 20_000))
    return path


def _read_all(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the terminal's other end closed
            break
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_pack_shows_progress_on_a_terminal_stderr_only(lengths_npy: Path) -> None:
    pytest.importorskip("rich")
    argv = [sys.executable, "-m", "dataorder", "pack", str(lengths_npy), "--seq-len", "4096"]
    master, slave = os.openpty()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=slave, timeout=120, env=_ENV)
    os.close(slave)
    terminal = _read_all(master).decode("utf-8", "replace")
    os.close(master)
    assert proc.returncode == 0
    assert "packing lengths.npy into rows of 4,096 tokens" in terminal
    assert b"into rows of 4,096 tokens" not in proc.stdout  # the answer only
    piped = subprocess.run(argv, capture_output=True, timeout=120, env=_ENV)
    assert piped.returncode == 0
    assert piped.stderr == b""  # a pipe gets no progress
    untimed = [line for line in piped.stdout.splitlines() if b" s for these figures" not in line]
    assert untimed == [line for line in proc.stdout.splitlines() if b" s for these " not in line]


# -- every default in --help --
def test_every_option_of_every_command_says_its_default_in_help() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    flags = (argparse._StoreTrueAction, argparse._HelpAction, argparse._VersionAction)
    missing = [
        f"{name} {action.option_strings[0]}"
        for name, command in sub.choices.items()
        for action in command._actions
        if action.option_strings and not action.required and not isinstance(action, flags)
        if "default" not in (action.help or "")
    ]
    assert missing == []


# -- pack: save_to_disk, weighted corpora, percentiles --
def test_pack_prints_the_length_percentiles(
    capsys: pytest.CaptureFixture[str], lengths_npy: Path
) -> None:
    code, out, err = run(capsys, "pack", str(lengths_npy), "--seq-len", "4096", "--json")
    assert code == 0, err
    lengths = np.load(lengths_npy)
    expected = np.percentile(lengths, PERCENTILES, method="inverted_cdf")
    assert json.loads(out)["length_percentiles"] == {
        f"p{q}": int(v) for q, v in zip(PERCENTILES, expected, strict=True)
    }
    code, out, _ = run(capsys, "pack", str(lengths_npy), "--seq-len", "4096", "--plain")
    assert f"p50 {int(expected[2]):,}" in out


def test_pack_reads_a_save_to_disk_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 70, 300)
    rows = [list(range(int(n))) for n in lengths]
    ds = datasets.Dataset.from_dict({"input_ids": rows, "i": list(range(300))})
    ds.select(range(0, 300, 3)).save_to_disk(str(tmp_path / "saved"))  # a selection, flattened
    np.save(tmp_path / "same.npy", lengths[::3])
    capsys.readouterr()
    code, out, err = run(capsys, "pack", str(tmp_path / "saved"), "--seq-len", "64", "--json")
    assert code == 0, err
    code, same, _ = run(capsys, "pack", str(tmp_path / "same.npy"), "--seq-len", "64", "--json")
    figures, expected = json.loads(out), json.loads(same)
    for key in ("documents", "tokens", "rows", "tokens_padded", "split_shorter", "split_longer"):
        assert figures[key] == expected[key], key
    code, _, err = run(capsys, "pack", str(tmp_path), "--seq-len", "64")
    assert code == EXIT_USAGE
    assert "without state.json" in err


def test_pack_weighted_corpora_are_the_samplers_mixture(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rng = np.random.default_rng(2)
    a, b = rng.integers(1, 500, 3000), rng.integers(1, 3000, 800)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    argv = ["pack", "0.3", str(tmp_path / "a.npy"), "0.7", str(tmp_path / "b.npy"),
            "--seq-len", "1024", "--num-replicas", "2", "--batch-size", "4"]  # fmt: skip
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    report = json.loads(out)
    sampler = PackedSampler(None, 1024, 4, 0, 2, seed=0, global_batch_size=8,
                            mixture=([a, b], [0.3, 0.7]))  # fmt: skip
    steps = sampler.total_rows // 8
    per_source = sampler.consumed_per_source(steps * 8).tolist()
    mix = report["mixture"]
    assert (mix["steps"], mix["rows_per_epoch"]) == (steps, steps * 8)
    assert [c["rows_per_epoch"] for c in mix["corpora"]] == per_source
    assert [c["rows_per_pass"] for c in mix["corpora"]] == [p.rows_per_epoch for p in sampler.plans]
    assert [c["weight"] for c in mix["corpora"]] == [0.3, 0.7]
    # each corpus packed as the mixture packs it (its own seed), not as one corpus alone
    assert report["corpora"][0]["rows"] == sampler.plans[0].rows_per_epoch
    alone = PackingPlan(a, 1024).stats()
    assert report["corpora"][0]["tokens"] == alone.tokens
    code, out, _ = run(capsys, *argv, "--plain")
    assert code == 0
    assert f"an epoch of the mixture: {steps * 8:,} rows" in out


@pytest.mark.parametrize(
    ("lengths", "message"),
    [
        (["0.3", "a.npy", "0.7"], "got 3 values"),
        (["x", "a.npy", "1", "b.npy"], "got the weight 'x'"),
        (["-1", "a.npy", "1", "b.npy"], "finite number >= 0; got '-1'"),
        (["nan", "a.npy", "1", "b.npy"], "finite number >= 0; got 'nan'"),
        (["0", "a.npy", "0", "b.npy"], "must not all be 0"),
    ],
)
def test_pack_weighted_corpora_refuse_bad_weights_in_one_line(
    capsys: pytest.CaptureFixture[str], lengths: list[str], message: str
) -> None:
    code, out, err = run(capsys, "pack", *lengths, "--seq-len", "64")
    assert (code, out) == (EXIT_USAGE, "")
    assert message in err
    assert err.count("\n") == 1


# -- scan --json --
def test_scan_json_gives_counts_as_numbers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pil = pytest.importorskip("PIL.Image")
    (tmp_path / "imgs").mkdir()
    for i in range(3):
        pil.new("RGB", (640 + 64 * i, 480)).save(tmp_path / "imgs" / f"{i}.png")
    (tmp_path / "imgs" / "broken.png").write_bytes(b"not a png")
    manifest = tmp_path / "m.tsv"
    code, out, err = run(capsys, "scan", str(tmp_path / "imgs"), "-o", str(manifest), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["manifest"] == str(manifest)
    assert (report["scanned"], report["unreadable"], report["kind"]) == (3, 1, "images")
    assert 1 <= report["buckets_used"] <= 3 < report["buckets"]
    assert report["errors"][0][0].endswith("broken.png")
    assert manifest.is_file()


# -- the demo's plot: each sample once, read off the figure --
def test_each_once_counts_what_the_plot_bands_show() -> None:
    from dataorder.tools.plots import ScheduleBatch, each_once

    rows = [
        ScheduleBatch("s", 0, 0, 2, 0, 4, (0, 1)),
        ScheduleBatch("s", 0, 1, 2, 0, 4, (2, None), padding=1),
        ScheduleBatch("s", 1, 0, 1, 4, 2, (3, 3)),  # 3 twice
        ScheduleBatch("s", 1, 0, 1, 6, 2, (1, 4)),  # 1 again, after the restart
    ]
    state, counts, extra = each_once(rows, size=7)  # 5 and 6 never read
    assert state.tolist() == [0, 2, 0, 2, 1, 3, 3]
    assert counts.tolist() == [2, 1, 2, 2]
    assert extra == 2


def test_the_schedule_png_shows_each_once_beside_the_samples(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from dataorder.tools.plots import ScheduleBatch, plot_schedule

    rows = [ScheduleBatch("a", 0, r, 2, 4 * s, 4, (4 * s + r, 4 * s + r + 2)) for s in range(3)
            for r in range(2)]  # fmt: skip
    path = plot_schedule(rows, tmp_path / "s.png", declared={"a": (12, 0, 0)})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
