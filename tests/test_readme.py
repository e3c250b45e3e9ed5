"""The README's claims: its test command is what CI runs, and its Python blocks execute."""

from __future__ import annotations

import re
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
