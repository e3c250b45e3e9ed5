"""benchmarks/house_metrics.py measures a tree: lines, long modules and functions, lazy imports."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "house_metrics.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house_metrics", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["house_metrics"] = module
    spec.loader.exec_module(module)
    return module


def _write(root: Path, relative: str, text: str) -> None:
    path = root / "src" / "dataorder" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _long_function(name: str, body_lines: int, indent: str = "") -> str:
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines))
    return f"{indent}def {name}():\n{body}"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    _write(
        tmp_path,
        "core/big.py",
        "import os\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import json\n"
        + _long_function("short", 59)  # 60 lines: not over the limit
        + _long_function("long", 60)  # 61 lines
        + "class Sampler:\n"
        + _long_function("method", 70, indent="    ")
        + "    def lazy(self):\n"
        "        import numpy\n"
        "        from math import (\n            floor,\n            ceil,\n        )\n"
        "        def inner():\n            import json\n"
        "        if numpy:\n            import torch\n"
        "        return 0  # mixture is None\n" + "\n" * 600,
    )
    _write(tmp_path, "llm/megatron.py", "x = 1\nif mixture is None: pass\n")
    _write(tmp_path, "llm/sampler.py", "a = 1\nb = 2\nc = 3\n")
    _write(tmp_path, "llm/sources_packed.py", "a = 1")  # no final newline still counts
    return tmp_path


def test_measure_counts_each_figure_on_a_synthetic_tree(tree: Path) -> None:
    metrics = _load()
    figures = metrics.measure(tree, ("llm/megatron.py", "llm/sampler.py", "llm/sources*.py"), ())
    big = (tree / "src/dataorder/core/big.py").read_text().count("\n")
    assert big > 700
    assert figures["src_lines"] == big + 2 + 3 + 1
    assert figures["sampler_layer_lines"] == 2 + 3 + 1
    assert figures["sampler_layer_files"] == {
        "llm/megatron.py": 2,
        "llm/sampler.py": 3,
        "llm/sources_packed.py": 1,
    }
    assert figures["modules_over_limit"] == {"core/big.py": big}
    assert figures["functions_over_limit"] == 2
    assert figures["longest_functions"] == [
        {"name": "core.big:Sampler.method", "lines": 71},
        {"name": "core.big:long", "lines": 61},
    ]
    # numpy, math, the nested function's json, torch under an if; not the module-level or
    # TYPE_CHECKING imports.
    assert figures["lazy_imports"] == 4
    assert figures["mixture_is_none"] == 2


def test_source_modules_are_counted_apart_from_the_sampler_layer(tree: Path) -> None:
    metrics = _load()
    figures = metrics.measure(tree, ("llm/megatron.py", "llm/sampler.py"), ("llm/sources*.py",))
    assert figures["sampler_layer_lines"] == 2 + 3
    assert figures["source_modules_lines"] == 1
    assert figures["source_modules_files"] == {"llm/sources_packed.py": 1}
    # a file in both groups counts in the layer only
    figures = metrics.measure(tree, ("llm/*.py",), ("llm/sources*.py",))
    assert (figures["sampler_layer_lines"], figures["source_modules_lines"]) == (6, 0)


def test_a_file_matched_by_two_patterns_counts_once(tree: Path) -> None:
    metrics = _load()
    figures = metrics.measure(tree, ("llm/*.py", "llm/megatron.py"))
    assert figures["sampler_layer_lines"] == 2 + 3 + 1


def test_main_prints_text_and_json(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = _load()
    assert metrics.main(["--root", str(tree)]) == 0
    text = capsys.readouterr().out
    assert "| - core/big.py | " in text
    assert "| core.big:Sampler.method | 71 |" in text
    assert metrics.main(["--root", str(tree), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["lazy_imports"] == 4


def test_a_root_without_the_package_is_refused(tmp_path: Path) -> None:
    metrics = _load()
    with pytest.raises(ValueError, match="root must hold src/dataorder"):
        metrics.measure(tmp_path)
