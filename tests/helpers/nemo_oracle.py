"""Optional oracle: NeMo Automodel's own sampler files, loaded by path when the wheel is installed.

NeMo is never a dependency and none of its code is in this repository. A developer who wants the
oracle tests runs ``pip install --no-deps nemo-automodel==0.7.0``; the package ``__init__`` (which
pulls heavy extras) is never imported: only the requested files are loaded, and they need torch.
Tests that use :func:`load` skip when the wheel is absent.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

_CACHE: dict[str, ModuleType] = {}


def nemo_root() -> Path | None:
    """Directory of the installed ``nemo_automodel`` package, without importing it."""
    spec = importlib.util.find_spec("nemo_automodel")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def load(relative: str) -> ModuleType:
    """Load ``nemo_automodel/<relative>`` as a standalone module, or skip the calling test."""
    root = nemo_root()
    if root is None or not (root / relative).is_file():
        pytest.skip("nemo-automodel==0.7.0 is not installed (optional oracle)")
    if relative not in _CACHE:
        name = "nemo_oracle_" + relative.replace("/", "_").removesuffix(".py")
        spec = importlib.util.spec_from_file_location(name, root / relative)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _CACHE[relative] = module
    return _CACHE[relative]
