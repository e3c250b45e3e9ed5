"""The README's claims: its test command is what CI runs, and its Python blocks execute."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    commands = [b.strip() for b in _blocks("bash")]
    test_command = next(c for c in commands if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci


def test_exactly_two_setup_commands() -> None:
    setup = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"```bash\n", setup)) == 2


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_python_blocks_run(index: int) -> None:
    exec(compile(_blocks("python")[index], f"README.md[python {index}]", "exec"), {})


def _setuptools_for_editables() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 64


@pytest.mark.skipif(not _setuptools_for_editables(), reason="needs setuptools>=64 installed")
def test_installing_into_an_existing_environment_leaves_torch_alone(tmp_path: Path) -> None:
    """The README's command for an existing environment, resolved by pip against what is
    installed only (``--no-index --dry-run``): it installs dataorder and nothing else."""
    command = "python -m pip install -e ."
    assert f"`{command}`" in README
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    report = tmp_path / "report.json"
    dry = ["--dry-run", "--no-index", "--no-build-isolation", "--quiet", "--report", str(report)]
    subprocess.run(
        [sys.executable, *command.split()[1:], *dry],
        cwd=tmp_path,
        check=True,
        timeout=240,
        capture_output=True,
    )
    installed = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert installed == ["dataorder"]
