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
    ],
    ids=["ruff-check", "ruff-format"],
)
def test_static(command: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(900)
def test_static_mypy_strict(mypy_in_the_background: tuple[int, str]) -> None:
    """``mypy`` (strict, configured in pyproject), started when the suite's collection finished:
    NOTE [ mypy in the background ] in conftest.py."""
    returncode, output = mypy_in_the_background
    assert returncode == 0, output


def test_the_version_is_the_package_metadata_version() -> None:
    import re

    import dataorder

    found = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found is not None
    assert dataorder.__version__ == found.group(1)


def test_public_names_are_sorted_and_importable() -> None:
    import importlib

    import dataorder

    # each subpackage lists its own names once; the top level is their union, with no name
    # claimed by two subpackages
    seen: dict[str, str] = {}
    for package in dataorder.PACKAGES:
        module = importlib.import_module(f"dataorder.{package}")
        names = list(module.__all__)
        assert names == sorted(names), package
        for name in names:
            assert name not in seen, f"{name} in both {seen.get(name)} and {package}"
            seen[name] = package
            assert getattr(module, name).__doc__, f"dataorder.{package}.{name} has no docstring"
    assert dataorder.__all__ == sorted(dataorder.__all__)
    assert set(dataorder.__all__) == set(seen) | {"__version__", "samplers"}
    for name in dataorder.__all__:
        assert getattr(dataorder, name) is not None
    assert dataorder.PackedSampler is importlib.import_module("dataorder.llm").PackedSampler


def test_every_sampler_is_registered_whatever_was_imported_before() -> None:
    """dataorder inspect rebuilds a state through dataorder.samplers(): it must know every
    sampler even in a fresh interpreter where the lazy diffusion package imported nothing."""
    code = "import dataorder; print(sorted(dataorder.samplers()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [
        "['blended',",
        "'distributed',",
        "'megatron_random',",
        "'megatron_single',",
        "'packed',",
        "'sequential_bucket',",
        "'variable_length']",
    ]


#: Every package that exports names (the others have a docstring only); its ``__init__`` is the
#: one kind docs/design.md ("One kind of package __init__") describes.
LAZY_PACKAGES = ["core", "diffusion", "live", "llm", "llm.packing", "parallel", "testing"]


def test_every_package_init_is_the_one_kind() -> None:
    """A package's ``__init__`` is its docstring, then either nothing or the lazy table
    (``_EXPORTS``, ``__all__ = sorted(_EXPORTS)``, the typing block, and ``__getattr__`` and
    ``__dir__`` from :func:`dataorder._lazy.lazy_exports`): it imports none of its modules, so
    ``import dataorder.llm`` costs nothing."""
    import ast

    lazy, bare = [], []
    for path in sorted((ROOT / "src/dataorder").rglob("__init__.py")):
        package = ".".join(path.relative_to(ROOT / "src/dataorder").parent.parts)
        if not package:
            continue  # the top level: the subpackages' tables, lazily (its own test below)
        body = ast.parse(path.read_text()).body
        assert body, f"{package} is empty"
        assert isinstance(body[0], ast.Expr), f"{package} has no docstring"
        rest = [ast.unparse(node).split("\n")[0] for node in body[1:]]
        if not rest:
            bare.append(package)
            continue
        assert rest == [
            "from __future__ import annotations",
            "from typing import TYPE_CHECKING",
            "from dataorder._lazy import lazy_exports",
            "_EXPORTS: dict[str, str] = {" + rest[3].removeprefix("_EXPORTS: dict[str, str] = {"),
            "__all__ = sorted(_EXPORTS)",
            "if TYPE_CHECKING:",
            "__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())",
        ], package
        lazy.append(package)
    assert lazy == LAZY_PACKAGES
    assert bare  # the diffusion subpackages, integrations, tools


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_the_lazy_package_types_what_it_exports(package: str) -> None:
    """A package imports its names lazily (no torch for the bucket tables and the pure checks,
    nothing at all for ``import dataorder.core``); the typing block, for type checkers, must
    name exactly what the package exports, from the module that has it."""
    import ast
    import importlib

    exports = importlib.import_module(f"dataorder.{package}")._EXPORTS
    path = ROOT / "src/dataorder" / package.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom)
                for alias in stmt.names:
                    typed[alias.name] = str(stmt.module).removeprefix(f"dataorder.{package}.")
    assert typed == exports


def test_importing_the_packages_imports_none_of_their_modules() -> None:
    """``import dataorder.llm`` (or any package) loads its ``__init__`` only: no module of
    the package, no numpy, no optional dependency, until a name is asked for."""
    code = (
        "import importlib, sys\n"
        f"for p in {LAZY_PACKAGES!r}:\n"
        "    importlib.import_module('dataorder.' + p)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dataorder', 'numpy')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == [
        "['dataorder',",
        "'dataorder._lazy',",
        "'dataorder.core',",
        "'dataorder.diffusion',",
        "'dataorder.live',",
        "'dataorder.llm',",
        "'dataorder.llm.packing',",
        "'dataorder.parallel',",
        "'dataorder.testing']",
    ]
