"""Every script in ``benchmarks/`` runs in its smoke mode, exits 0 and prints a markdown table.

The scripts are found by a glob, so a benchmark added later is covered without touching this
file. They are started together, each in its own interpreter, and each gets a hard timeout. No
figure they print is checked: CI machines are shared, and a benchmark that asserts a timing is a
flaky test. (``benchmarks/baselines.py`` is a script too: its smoke run checks that the baselines
reproduce their documented behaviour and exits 1 if one does not.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

# one worker runs this module (tests/conftest.py: NOTE [ xdist ]): its tests share a
# module-scoped run that each worker would otherwise start again
pytestmark = pytest.mark.xdist_group("benchmarks_smoke")

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
# per script, from the moment all of them are started: ~20 s alone on 2 cores, but the other
# xdist worker may run a multi-process job (the demo's 8 processes) beside the burst; below
# pytest-timeout's 300 s
TIMEOUT_S = 240.0

_SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")


def has_markdown_table(text: str) -> bool:
    """A header row ``| a | b |`` directly followed by a separator row ``|---|---|``."""
    lines = [line.strip() for line in text.splitlines()]
    return any(
        head.startswith("|") and head.endswith("|") and _SEPARATOR.match(sep)
        for head, sep in pairwise(lines)
    )


@pytest.fixture(scope="module")
def launched() -> Iterator[dict[str, tuple[subprocess.Popen[str], float]]]:
    """Start every script at once (they are mostly interpreter start-up and imports)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    procs = {}
    for script in SCRIPTS:
        proc = subprocess.Popen(
            [sys.executable, str(script), "--smoke"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs[script.name] = (proc, time.monotonic())
    yield procs
    for proc, _ in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_scripts_are_found() -> None:
    assert (BENCHMARKS / "suite.py") in SCRIPTS
    assert (BENCHMARKS / "baselines.py") in SCRIPTS


@pytest.mark.parametrize("script", [p.name for p in SCRIPTS])
def test_smoke(script: str, launched: dict[str, tuple[subprocess.Popen[str], float]]) -> None:
    proc, started = launched[script]
    left = max(1.0, TIMEOUT_S - (time.monotonic() - started))
    try:
        out, err = proc.communicate(timeout=left)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{script} --smoke ran past {TIMEOUT_S:.0f} s\n{err[-2000:]}")
    assert proc.returncode == 0, f"{script} --smoke exited {proc.returncode}\n{err[-4000:]}"
    assert has_markdown_table(out), f"{script} --smoke printed no markdown table:\n{out[-2000:]}"


def test_table_detection() -> None:
    assert has_markdown_table("intro\n\n| a | b |\n|---|---:|\n| 1 | 2 |\n")
    assert not has_markdown_table("| a | b |\nno separator\n")
    assert not has_markdown_table("plain text only\n")
