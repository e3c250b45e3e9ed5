"""Live elasticity: the items each replica group trains at a committed step of a fault-tolerant
run (torchft), whoever takes part, from any sampler's order (NOTE [ Live shares ] in
:mod:`dataorder.live.batches`).

Lazy, as :mod:`dataorder.parallel`: ``import dataorder.live`` imports no module until a name
below is first used. No torch: the loader over torchft is :mod:`dataorder.integrations.torchft`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataorder._lazy import lazy_exports

#: Every public name of the package -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "LiveBatches": "batches",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers only: what __getattr__ returns
    from dataorder.live.batches import LiveBatches as LiveBatches


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
