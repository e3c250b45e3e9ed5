"""Lint, format and strict typing run as part of the test command, so CI cannot skip them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_static(command: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_version_is_the_package_metadata_version() -> None:
    import re

    import dataorder

    found = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found is not None
    assert dataorder.__version__ == found.group(1)


def test_public_names_are_sorted_and_importable() -> None:
    import dataorder

    assert dataorder.__all__ == sorted(dataorder.__all__)
    assert set(dataorder.__all__) == set(dataorder._EXPORTS) | {"__version__"}
    for name in dataorder.__all__:
        assert getattr(dataorder, name) is not None
        if name != "__version__":
            assert getattr(dataorder, name).__doc__, f"{name} has no docstring"
