"""The package's layers (docs/design.md, "Architecture"): who may import whom, no cycles, no torch
in the core.

Every ``import`` of a dataorder module is read from the source with ``ast``, including imports
inside functions, so a lazy import cannot hide a dependency that goes the wrong way.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import dataorder

ROOT = Path(dataorder.__file__).resolve().parent

#: layer -> the layers its modules may import (besides itself and ``dataorder._validate``)
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "llm": {"core"},
    "diffusion": {"core"},
    "parallel": {"core"},
    "testing": {"core"},
    # the top layer: the demo checkpoints through integrations.dcp, as a user's job does
    "tools": {"core", "llm", "diffusion", "parallel", "testing", "integrations"},
    # the stacks' adapters sit above the samplers; only the tools import them
    "integrations": {"core", "llm", "diffusion", "parallel"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, bool]]:
    """``(imported dataorder module, at module level)`` for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out += [(n, id(node) in top) for n in names if n.split(".")[0] == "dataorder"]
    return out


MODULES = {
    _module_name(p): p
    for p in sorted(ROOT.rglob("*.py"))
    if "data" not in p.relative_to(ROOT).parts[:1]
}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m)))
def test_a_layer_imports_only_the_layers_below_it(module: str) -> None:
    layer = _layer(module)
    assert layer is not None
    for imported, _ in _imports(MODULES[module]):
        target = _layer(imported)
        if imported in ("dataorder", "dataorder._validate") or target == layer:
            continue
        assert target in ALLOWED[layer], f"{module} imports {imported}"


def test_no_import_cycles_at_module_level() -> None:
    graph = {
        m: {i for i, top in _imports(p) if top and i in MODULES and i != m}
        for m, p in MODULES.items()
    }
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(m) :], m]))
        if m in done:
            return
        for n in sorted(graph[m]):
            visit(n, [*path, m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])


def test_the_core_the_llm_samplers_and_the_contract_import_without_torch() -> None:
    lightweight = sorted(
        m
        for m in MODULES
        if _layer(m) in ("core", "llm")
        or m
        in (
            "dataorder.diffusion.calculators.image",
            "dataorder.diffusion.buckets.rules",
            "dataorder.diffusion.sampler.table",
            "dataorder.diffusion.sampler.plan",
            "dataorder.diffusion.sampler.stats",
            "dataorder.diffusion.buckets.cost",
            "dataorder.diffusion.fit.images",
            "dataorder.diffusion.buckets.fitted_rule",
            "dataorder.diffusion.scan.manifest",
            "dataorder.diffusion.scan.files",
            "dataorder.diffusion.calculators.video",
            "dataorder.diffusion.buckets.video_assign",
            "dataorder.diffusion.fit.video",
            "dataorder.diffusion.fit.video_bands",
            "dataorder.diffusion.fit.video_classes",
            "dataorder.diffusion.buckets.video_set",
            "dataorder.diffusion.fit.video_time",
            "dataorder.diffusion.buckets.video_frames",
            "dataorder.diffusion.buckets.video_presets",
            "dataorder.diffusion.scan.videos",
            "dataorder.testing",
            "dataorder.testing.contract",
        )
    )
    code = (
        "import importlib, sys\n"
        f"for m in {lightweight!r}:\n"
        "    importlib.import_module(m)\n"
        "print(sorted(k for k in sys.modules if k == 'torch' or k.startswith('torch.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
