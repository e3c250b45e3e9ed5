"""The package's layers (docs/design.md, "Architecture"): who may import whom, no cycles, no torch
in the core.

Every ``import`` of a dataorder module is read from the source with ``ast``, including imports
inside functions, so a lazy import cannot hide a dependency that goes the wrong way or close a
cycle. ``dataorder.diffusion`` is layered inside too: its subpackages form a DAG (NOTE [ diffusion
layers ] in :mod:`dataorder.diffusion`).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import dataorder

ROOT = Path(dataorder.__file__).resolve().parent

#: layer -> the layers its modules may import (besides itself, ``dataorder._validate`` and
#: ``dataorder._lazy``, the one kind of package ``__init__``)
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "llm": {"core"},
    "diffusion": {"core"},
    "parallel": {"core"},
    "testing": {"core"},
    # live elasticity works on any sampler through the core's cursor and batching seams
    "live": {"core"},
    # the top layer: the demo checkpoints through integrations.dcp, as a user's job does
    "tools": {"core", "llm", "diffusion", "parallel", "testing", "integrations", "live"},
    # the stacks' adapters sit above the samplers; only the tools import them
    "integrations": {"core", "llm", "diffusion", "parallel", "live"},
}


#: diffusion's subpackages, bottom first -> the subpackages their modules may import besides their
#: own, lazy imports included (NOTE [ diffusion layers ] in dataorder.diffusion).
DIFFUSION: dict[str, set[str]] = {
    "buckets": set(),
    "fit": {"buckets"},
    "calculators": {"buckets", "fit"},
    "scan": {"buckets", "calculators"},
    "sampler": {"buckets", "calculators", "scan"},
}

#: diffusion's modules that import torch (a torch Sampler and a torch Dataset); no other may.
DIFFUSION_WITH_TORCH = (
    "dataorder.diffusion.sampler.sampler",
    "dataorder.diffusion.sampler.dataset",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, bool]]:
    """``(imported dataorder module, at module level)`` for every import in ``path``, lazy ones
    included; ``from package import module`` names the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                for a in node.names
            ]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out += [(n, id(node) in top) for n in names if n.split(".")[0] == "dataorder"]
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """An import cycle of ``graph`` (module -> the modules it imports), or None."""
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> list[str] | None:
        if m in path:
            return [*path[path.index(m) :], m]
        if m in done:
            return None
        for n in sorted(graph.get(m, ())):
            found = visit(n, [*path, m])
            if found:
                return found
        done.add(m)
        return None

    for m in sorted(graph):
        found = visit(m, [])
        if found:
            return found
    return None


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
        if imported in ("dataorder", "dataorder._validate", "dataorder._lazy") or target == layer:
            continue
        assert target in ALLOWED[layer], f"{module} imports {imported}"


def test_no_import_cycles_lazy_imports_included() -> None:
    """No cycle between modules, through imports inside functions and typing blocks too (the
    diffusion calculator, fit and fitted rule once closed one that way)."""
    graph = {m: {i for i, _ in _imports(p) if i in MODULES and i != m} for m, p in MODULES.items()}
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_checks_see_a_lazy_import_and_a_cycle(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import dataorder.core.keys\n\ndef f():\n    from dataorder.diffusion import fit\n"
    )
    assert _imports(source) == [
        ("dataorder.core.keys", True),
        ("dataorder.diffusion.fit", False),
    ]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def _sublayer(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["dataorder", "diffusion"] else None


def test_the_diffusion_subpackages_form_a_dag_in_the_documented_order() -> None:
    import dataorder.diffusion

    order = list(DIFFUSION)
    for i, sub in enumerate(order):
        assert DIFFUSION[sub] <= set(order[:i]), f"{sub} may import a subpackage above it"
    found = {p.name for p in (ROOT / "diffusion").iterdir() if (p / "__init__.py").is_file()}
    assert found == set(DIFFUSION)
    assert " <- ".join(order) in " ".join((dataorder.diffusion.__doc__ or "").split())


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _sublayer(m)))
def test_a_diffusion_subpackage_imports_only_those_below_it(module: str) -> None:
    sub = _sublayer(module)
    assert sub is not None
    for imported, _ in _imports(MODULES[module]):
        if imported.split(".")[:2] != ["dataorder", "diffusion"]:
            continue  # the layers' own rule
        target = _sublayer(imported)  # None: the package's lazy __init__, the top of them all
        assert target == sub or target in DIFFUSION[sub], f"{module} imports {imported}"


def test_the_core_the_llm_samplers_and_the_contract_import_without_torch() -> None:
    lightweight = sorted(
        m
        for m in MODULES
        if _layer(m) in ("core", "llm")
        or (_sublayer(m) and m not in DIFFUSION_WITH_TORCH)
        or m in ("dataorder.diffusion", "dataorder.testing", "dataorder.testing.contract")
        # the pure partition checks and the command line (its bucket tables start fast)
        or m in ("dataorder.parallel", "dataorder.parallel.checks", "dataorder.tools.cli")
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


def test_the_bucket_batching_is_in_core_where_llm_and_diffusion_read_it() -> None:
    """The lock-step bucket planner is generic (a grouping of positions into buckets), so it lives
    in ``core``: the LLM variable-length sampler and the diffusion bucket samplers both import it
    from there, and neither imports the other."""
    assert _layer("dataorder.core.buckets") == "core"
    assert {i for i, _ in _imports(MODULES["dataorder.core.buckets"])} <= {
        m for m in MODULES if _layer(m) == "core"
    } | {"dataorder._validate"}
    for user in ("dataorder.llm.vsl", "dataorder.diffusion.sampler.sampler"):
        assert "dataorder.core.buckets" in {i for i, _ in _imports(MODULES[user])}, user
