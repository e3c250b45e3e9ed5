"""Shared test configuration: hypothesis profiles for the CI budget, mypy in the background."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from hypothesis import HealthCheck, settings

# "ci": enough examples across the suite for thousands of configurations, inside the 10-minute
# budget on 2 cores. "dev": a deeper sweep (HYPOTHESIS_PROFILE=dev).
settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# NOTE [ mypy in the background ]
# mypy --strict on a fresh checkout (no cache, as in CI) costs about a minute and a half of one
# core, and the suite runs on one core. So when the collection finishes with
# test_static_mypy_strict selected, mypy starts in its own process, beside the rest of the suite,
# and that test waits for its exit: the same command in the same folder, so the same verdict, in
# a fraction of the wall time on CI's two cores. Nothing starts on --collect-only, and a mypy
# still running when pytest exits is killed.
_ROOT = Path(__file__).resolve().parents[1]
_MYPY: dict[str, tuple[subprocess.Popen[str], IO[str]]] = {}


def _start_mypy() -> tuple[subprocess.Popen[str], IO[str]]:
    out = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed when the test has read it)
    # `python -m mypy` at the lowest priority: it takes only the cycles the tests leave idle, so
    # it cannot slow a test that runs processes under a deadline (test_benchmarks_smoke's burst)
    nice = "os.nice(19)" if hasattr(os, "nice") else "None"
    run = f"import os, runpy; {nice}; runpy.run_module('mypy', run_name='__main__', alter_sys=True)"
    command = [sys.executable, "-c", run]
    proc = subprocess.Popen(command, cwd=_ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
    return proc, out


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(item.name == "test_static_mypy_strict" for item in session.items):
        _MYPY["mypy"] = _start_mypy()


def pytest_unconfigure(config: pytest.Config) -> None:
    for proc, out in _MYPY.values():
        proc.kill()
        proc.wait()
        out.close()
    _MYPY.clear()


@pytest.fixture
def mypy_in_the_background() -> Iterator[tuple[int, str]]:
    """mypy's exit code and output; started at the end of the collection (or now)."""
    proc, out = _MYPY.pop("mypy", None) or _start_mypy()
    try:
        returncode = proc.wait()
        out.seek(0)
        yield returncode, out.read()
    finally:
        out.close()
