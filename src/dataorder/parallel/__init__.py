"""Data parallelism over a device mesh: torch's DistributedSampler, and a collective check of a
job's partition (``verify_data_parallel``) with its pure checks (``check_items``).

Lazy, as :mod:`dataorder.diffusion`: ``import dataorder.parallel`` imports no module until a
name below is first used, so the pure checks (:mod:`dataorder.parallel.checks`, which the demo's
report and the command line use) never import torch; the sampler and the collective check do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataorder._lazy import lazy_exports

#: Every public name of the package -> the module that defines it (one list: ``__all__`` and the
#: lazy import both read it; tests/test_static.py checks the typing block below against it).
_EXPORTS: dict[str, str] = {
    "DataParallelError": "verify",
    "DataParallelReport": "verify",
    "DistributedSampler": "distributed",
    "check_items": "checks",
    "verify_data_parallel": "verify",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers only: what __getattr__ returns
    from dataorder.parallel.checks import check_items as check_items
    from dataorder.parallel.distributed import DistributedSampler as DistributedSampler
    from dataorder.parallel.verify import DataParallelError as DataParallelError
    from dataorder.parallel.verify import DataParallelReport as DataParallelReport
    from dataorder.parallel.verify import verify_data_parallel as verify_data_parallel


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
