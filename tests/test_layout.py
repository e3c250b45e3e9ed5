"""The test tree mirrors the source (tests/README.md): folders, packages, names.

A folder of ``tests/`` is a package of ``src/dataorder`` (or ``helpers/``), every folder is a
package, only the cross-cutting files stay at the top, and no test names the issue that asked
for it.
"""

from __future__ import annotations

import re
from pathlib import Path

import dataorder

TESTS = Path(__file__).resolve().parent
SRC = Path(dataorder.__file__).resolve().parent

#: The files that cross every family, kept at the top of tests/ (tests/README.md says why).
CROSS_CUTTING = {
    "test_benchmarks_smoke.py",
    "test_contract_table.py",
    "test_house_metrics.py",
    "test_deprecated_names.py",
    "test_drop_in.py",
    "test_examples.py",
    "test_hostile_input.py",
    "test_hostile_states.py",
    "test_layers.py",
    "test_layout.py",
    "test_limits.py",
    "test_readme.py",
    "test_resume_sweep.py",
    "test_static.py",
}
#: Folders of tests/ that mirror no package: shared code.
NOT_MIRRORED = {"helpers"}

_ISSUE = re.compile(r"\b[Ii]ssues?\s+#?\d+")
_ISSUE_NAME = re.compile(r"def (test_\w*(?:issue|_item\d|item\d_)\w*)")


def layout_problems(tests: Path, src: Path) -> list[str]:
    """What in the tree ``tests`` breaks the layout against the package at ``src``."""
    problems = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        rel = folder.relative_to(tests)
        if not (folder / "__init__.py").is_file():
            problems.append(f"{rel}/ has no __init__.py")
        if rel.parts[0] not in NOT_MIRRORED and not (src / rel / "__init__.py").is_file():
            problems.append(f"{rel}/ mirrors no package of {src.name}")
    for path in sorted(tests.glob("*.py")):
        if path.name not in CROSS_CUTTING | {"__init__.py", "conftest.py"}:
            problems.append(f"{path.name} belongs in the folder of what it tests")
    for path in sorted(tests.rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(tests)
        problems += [f"{rel}: {name} names an issue" for name in _ISSUE_NAME.findall(text)]
        problems += [f"{rel}: {m.group(0)!r}" for m in _ISSUE.finditer(text)]
    return problems


def test_the_tests_mirror_the_source() -> None:
    assert layout_problems(TESTS, SRC) == []


def test_each_layout_rule_can_fail(tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    (src / "core").mkdir(parents=True)
    (src / "core" / "__init__.py").write_text("")
    tests = tmp_path / "tests"
    for folder in ("core", "ghost", "helpers"):
        (tests / folder).mkdir(parents=True)
    (tests / "core" / "__init__.py").write_text("")
    (tests / "helpers" / "__init__.py").write_text("")
    (tests / "test_flat.py").write_text("")
    # written in pieces, so that this file does not break the rules it shows
    name, story = "test_" + "item5_works", "Iss" + "ue 20, item 5: it hung."
    (tests / "core" / "test_x.py").write_text(f'def {name}() -> None:\n    """{story}"""\n')
    assert layout_problems(tests, src) == [
        "ghost/ has no __init__.py",
        "ghost/ mirrors no package of pkg",
        "test_flat.py belongs in the folder of what it tests",
        f"core/test_x.py: {name} names an issue",
        f"core/test_x.py: {story[:8]!r}",
    ]
