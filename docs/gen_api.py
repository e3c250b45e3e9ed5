"""Generate ``docs/api.md`` from the docstrings of dataorder's public modules and names.

    python docs/gen_api.py           # rewrite docs/api.md
    python docs/gen_api.py --check   # exit 1 if docs/api.md is not current (tests run this)

Public means: every module of the package whose name does not start with ``_``, and in each,
the names of its ``__all__``, in that order; plus a table of the top-level names of
``import dataorder``. Docstrings are copied verbatim into ``text`` blocks, so what the page shows
is exactly what ``help()`` shows. The output depends only on the source: no addresses, no dates.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import dataorder

OUT = Path(__file__).resolve().parent / "api.md"

#: The subpackages in layer order (tests/test_layers.py): the page follows it, each subpackage
#: first, then its modules alphabetically; a subpackage's docstring is its reading guide.
LAYERS = ("core", "llm", "parallel", "diffusion", "integrations", "testing", "tools")


def public_modules() -> list[str]:
    """Dotted names below ``dataorder`` of every public module and subpackage, by layer."""
    found = {
        m.name.removeprefix("dataorder.")
        for m in pkgutil.walk_packages(dataorder.__path__, prefix="dataorder.")
        if not any(part.startswith("_") for part in m.name.split("."))
        and not m.name.startswith("dataorder.data")
    }

    def key(name: str) -> tuple[int, str]:
        top = name.split(".")[0]
        return (LAYERS.index(top) if top in LAYERS else len(LAYERS), name)

    return sorted(found, key=key)


def _annotation(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    return value if isinstance(value, str) else inspect.formatannotation(value)


def _default(value: Any) -> str:
    """A default as source would show it: a function by its name, not its address."""
    if inspect.isfunction(value) or inspect.isclass(value):
        return str(value.__qualname__)
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))  # nested functions: no address


def signature(obj: Any) -> str:
    """``(a: int, b: str = 'x') -> None`` with annotations as written in the source."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parts = []
    seen_kw_only = False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not seen_kw_only:
            parts.append("*")
            seen_kw_only = True
        if p.kind is p.VAR_POSITIONAL:
            seen_kw_only = True
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        text = prefix + p.name
        note = _annotation(p.annotation)
        if note:
            text += f": {note}"
        if p.default is not p.empty:
            default = _default(p.default)
            text += f" = {default}" if note else f"={default}"
        parts.append(text)
    result = f"({', '.join(parts)})"
    ret = _annotation(sig.return_annotation)
    return f"{result} -> {ret}" if ret else result


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj)
    return f"```text\n{doc}\n```\n" if doc else "*(no docstring)*\n"


def _members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties defined by ``cls`` itself (not inherited), source order."""
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property | staticmethod | classmethod) or inspect.isfunction(value):
            out.append((name, value))
    return out


def _render_class(name: str, cls: type) -> list[str]:
    lines = [f"### class `{name}{signature(cls)}`\n", _doc(cls)]
    bases = [b for b in cls.__mro__[1:] if b.__module__.startswith("dataorder")]
    if bases:
        lines.append(
            "Inherits from "
            + ", ".join(f"`{b.__module__}.{b.__qualname__}`" for b in bases)
            + ".\n"
        )
    for member, value in _members(cls):
        if isinstance(value, property):
            lines += [f"#### `{name}.{member}` (property)\n", _doc(value)]
        else:
            func = value.__func__ if isinstance(value, staticmethod | classmethod) else value
            kind = " (classmethod)" if isinstance(value, classmethod) else ""
            lines += [f"#### `{name}.{member}{signature(func)}`{kind}\n", _doc(func)]
    return lines


def _render_name(module: ModuleType, name: str) -> list[str]:
    obj = getattr(module, name)
    home = getattr(obj, "__module__", None)
    if (inspect.isclass(obj) or inspect.isfunction(obj)) and home != module.__name__:
        return [f"### `{name}`\n", f"Re-exported from `{home}`.\n"]
    if inspect.isclass(obj):
        return _render_class(name, obj)
    if inspect.isfunction(obj):
        return [f"### `{name}{signature(obj)}`\n", _doc(obj)]
    text = repr(obj)
    if len(text) > 200 or " at 0x" in text:
        text = f"<{type(obj).__name__}>"
    return [f"### `{name}`\n", f"```text\n{name} = {text}\n```\n"]


def render() -> str:
    dataorder.samplers()  # every sampler registered, whatever the lazy packages imported so far
    lines = [
        "# API reference\n",
        "Generated from the docstrings by `python docs/gen_api.py`; do not edit by hand "
        "(`tests/test_examples.py` checks that this page is current). Each module lists the "
        "names of its `__all__`.\n",
        "## `import dataorder`\n",
        "Every subpackage exports its names; `import dataorder` re-exports those of "
        + ", ".join(f"`dataorder.{p}`" for p in dataorder.PACKAGES)
        + ", plus `__version__`, `samplers` and `public_names` (below). The training stacks are "
        "`dataorder.integrations`, the contract suite `dataorder.testing`.\n",
        *_render_name(dataorder, "samplers"),
        *_render_name(dataorder, "public_names"),
        "| subpackage | names |",
        "| --- | --- |",
    ]
    for package in dataorder.PACKAGES:
        names = importlib.import_module(f"dataorder.{package}").__all__
        anchor = f"dataorder{package}"
        lines.append(
            f"| [`dataorder.{package}`](#{anchor}) | " + ", ".join(f"`{n}`" for n in names) + " |"
        )
    lines.append("")
    modules = public_modules()
    lines.append(
        "Modules: " + ", ".join(f"[`{m}`](#dataorder{m.replace('.', '')})" for m in modules) + ".\n"
    )
    for short in modules:
        module = importlib.import_module(f"dataorder.{short}")
        lines += [f"## dataorder.{short}\n", _doc(module)]
        for name in getattr(module, "__all__", []):
            lines += _render_name(module, name)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/api.md from the docstrings.")
    parser.add_argument("--check", action="store_true", help="exit 1 if api.md is not current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run python docs/gen_api.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
