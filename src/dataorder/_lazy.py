"""The one kind of package ``__init__``: each public name imported from its module when first used.

A package lists its names in ``_EXPORTS`` (name -> module, relative to the package, or a full
``dataorder.`` path for a name another package defines) and ends with::

    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

so ``import dataorder.llm`` imports none of its modules (nor numpy) until a name is asked for
(docs/design.md, "One kind of package __init__"; tests/test_static.py checks every package).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module ``__getattr__`` and ``__dir__`` (PEP 562) over its ``_EXPORTS``.

    Args:
        package: The package's ``__name__``.
        exports: Public name -> the module that defines it.
        namespace: The package's ``globals()``: a name, once imported, is kept there.

    Example:
        >>> import dataorder.core as core
        >>> "Permutation" in dir(core), core.Permutation.__module__
        (True, 'dataorder.core.permutation')
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        path = module if module.startswith("dataorder.") else f"{package}.{module}"
        value = getattr(importlib.import_module(path), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
