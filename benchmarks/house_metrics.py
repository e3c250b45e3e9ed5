"""The house metrics of a dataorder tree: how big it is and where it is hard to read.

Run from anywhere::

    python benchmarks/house_metrics.py               # the repository this script lives in
    python benchmarks/house_metrics.py --root PATH   # another checkout (e.g. a git worktree)
    python benchmarks/house_metrics.py --json        # the same figures as one JSON object

It reads the source with :mod:`ast` and imports nothing from it, so it measures any checkout,
old or new, without installing it. What each figure counts:

- ``src lines``: physical lines (``wc -l``) of every ``.py`` file under ``src/dataorder``.
- ``LLM sampler layer lines``: the same, over the files matched by :data:`SAMPLER_LAYER`
  (glob patterns relative to ``src/dataorder``; a file matched by two patterns counts once):
  the sampler modules, the files 0.3.0's figure counted (``placement.py`` then,
  ``sampler.py`` now).
- ``LLM source modules lines``: the same over :data:`SOURCE_MODULES`, the sources those samplers
  compose (which item a position holds), modules of their own since the source x batching
  redesign; and the sum of both, the figure to compare when code moves between them.
- ``modules over 700 lines``: each ``.py`` file under ``src/dataorder`` longer than
  :data:`MODULE_LIMIT` lines, as ``path: lines``.
- ``functions over 60 lines``: every ``def``/``async def`` (functions, methods, nested
  functions) whose span, from its ``def`` line (decorators excluded) to its last line
  (``end_lineno``, docstring and comments inside the body included), is longer than
  :data:`FUNCTION_LIMIT` lines; the count and the longest :data:`TOP` with qualified names
  (``module:Class.method``).
- ``lazy imports``: ``import``/``from ... import`` statements anywhere inside a function body
  (nested blocks and nested functions included; each statement counts once, however many
  names it imports). Imports at module or class level, including those under
  ``if TYPE_CHECKING:``, are not lazy.
- ``mixture is None``: occurrences of the text ``mixture is None`` in the source (comments
  and ``self._mixture is None`` included; ``mixture is not None`` is not counted).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import cast

#: The LLM sampler layer, as glob patterns relative to ``src/dataorder``. Globs, so a new
#: module (``llm/sampler.py``, ``llm/sources*.py``) is picked up by adding one pattern.
SAMPLER_LAYER: tuple[str, ...] = (
    "llm/megatron.py",
    "llm/blend.py",
    "llm/packing/sampler.py",
    "llm/placement.py",  # before the redesign (folded into llm/sampler.py)
    "llm/sampler.py",  # MicroBatchSampler: the one LLM micro-batch sampler
)
#: The LLM source modules, as glob patterns relative to ``src/dataorder``.
SOURCE_MODULES: tuple[str, ...] = ("llm/sources.py", "llm/packing/sources.py")
MODULE_LIMIT = 700
FUNCTION_LIMIT = 60
TOP = 15


@dataclass(frozen=True)
class Function:
    """One function or method: its qualified name and its span in lines."""

    name: str
    lines: int


def _source_files(root: Path) -> list[Path]:
    package = root / "src" / "dataorder"
    if not package.is_dir():
        raise ValueError(f"root must hold src/dataorder; got root={str(root)!r}")
    return sorted(path for path in package.rglob("*.py") if path.is_file())


def _line_count(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def _walk_functions(node: ast.AST, prefix: str, in_function: bool) -> tuple[list[Function], int]:
    """Return the functions under ``node`` and the import statements inside function bodies."""
    functions: list[Function] = []
    lazy = 0
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            end = child.end_lineno if child.end_lineno is not None else child.lineno
            functions.append(Function(name, end - child.lineno + 1))
            inner, inner_lazy = _walk_functions(child, f"{name}.", True)
            functions.extend(inner)
            lazy += inner_lazy
        elif isinstance(child, ast.ClassDef):
            inner, inner_lazy = _walk_functions(child, f"{prefix}{child.name}.", in_function)
            functions.extend(inner)
            lazy += inner_lazy
        else:
            if in_function and isinstance(child, ast.Import | ast.ImportFrom):
                lazy += 1
            inner, inner_lazy = _walk_functions(child, prefix, in_function)
            functions.extend(inner)
            lazy += inner_lazy
    return functions, lazy


def _matched(package: Path, patterns: tuple[str, ...]) -> set[str]:
    return {
        path.relative_to(package).as_posix()
        for pattern in patterns
        for path in package.glob(pattern)
        if path.is_file()
    }


def measure(
    root: Path,
    sampler_layer: tuple[str, ...] = SAMPLER_LAYER,
    source_modules: tuple[str, ...] = SOURCE_MODULES,
) -> dict[str, object]:
    """Measure the tree at ``root`` (a directory holding ``src/dataorder``).

    Returns a JSON-ready dict with the figures the module docstring defines.
    """
    package = root / "src" / "dataorder"
    files = _source_files(root)
    lines = {path.relative_to(package).as_posix(): _line_count(path) for path in files}
    layer = _matched(package, sampler_layer)
    sources = _matched(package, source_modules) - layer
    functions: list[Function] = []
    lazy = 0
    mixture_is_none = 0
    for path in files:
        relative = path.relative_to(package).as_posix()
        text = path.read_text(encoding="utf-8")
        mixture_is_none += text.count("mixture is None")
        found, found_lazy = _walk_functions(ast.parse(text, filename=str(path)), "", False)
        module = relative.removesuffix(".py").replace("/", ".")
        functions.extend(Function(f"{module}:{f.name}", f.lines) for f in found)
        lazy += found_lazy
    long_functions = sorted(
        (f for f in functions if f.lines > FUNCTION_LIMIT), key=lambda f: (-f.lines, f.name)
    )
    return {
        "root": str(root),
        "src_lines": sum(lines.values()),
        "sampler_layer_lines": sum(lines[name] for name in layer),
        "sampler_layer_files": {name: lines[name] for name in sorted(layer)},
        "source_modules_lines": sum(lines[name] for name in sources),
        "source_modules_files": {name: lines[name] for name in sorted(sources)},
        "modules_over_limit": {
            name: count
            for name, count in sorted(lines.items(), key=lambda item: (-item[1], item[0]))
            if count > MODULE_LIMIT
        },
        "functions_over_limit": len(long_functions),
        "longest_functions": [{"name": f.name, "lines": f.lines} for f in long_functions[:TOP]],
        "lazy_imports": lazy,
        "mixture_is_none": mixture_is_none,
    }


def render(figures: dict[str, object]) -> str:
    """Return the figures of :func:`measure` as markdown tables."""
    layer = cast("dict[str, int]", figures["sampler_layer_files"])
    sources = cast("dict[str, int]", figures["source_modules_files"])
    both = cast("int", figures["sampler_layer_lines"]) + cast(
        "int", figures["source_modules_lines"]
    )
    modules = cast("dict[str, int]", figures["modules_over_limit"])
    longest = cast("list[dict[str, object]]", figures["longest_functions"])
    out = [
        f"tree: `{figures['root']}`",
        "",
        "| figure | value |",
        "| --- | ---: |",
        f"| src lines (src/dataorder/**/*.py) | {figures['src_lines']} |",
        f"| LLM sampler layer lines | {figures['sampler_layer_lines']} |",
        *(f"| - {name} | {count} |" for name, count in layer.items()),
        f"| LLM source modules lines | {figures['source_modules_lines']} |",
        *(f"| - {name} | {count} |" for name, count in sources.items()),
        f"| LLM sampler layer and source modules lines | {both} |",
        f"| modules over {MODULE_LIMIT} lines | {len(modules)} |",
        *(f"| - {name} | {count} |" for name, count in modules.items()),
        f"| functions/methods over {FUNCTION_LIMIT} lines | {figures['functions_over_limit']} |",
        f"| lazy imports (imports inside function bodies) | {figures['lazy_imports']} |",
        f"| `mixture is None` occurrences | {figures['mixture_is_none']} |",
        "",
        f"| longest functions (top {TOP}) | lines |",
        "| --- | ---: |",
        *(f"| {row['name']} | {row['lines']} |" for row in longest),
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the tree to measure (a directory holding src/dataorder); default: this repository",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--smoke", action="store_true", help="accepted for the benchmark smoke run (same output)"
    )
    args = parser.parse_args(argv)
    try:
        figures = measure(args.root.resolve())
    except ValueError as error:
        parser.error(str(error))
    print(json.dumps(figures, indent=2) if args.json else render(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
