"""Rank program for tests/integrations/test_common.py (run under torchrun, gloo on loopback).

Every sampler family reads two batches through a ``StatefulDataLoader`` on every rank; the
consumed state must then be identical on all ranks (``check_same_on_all_ranks``, an
``all_gather``). A per-rank state (what torch's ``DistributedSampler`` position is) must be
refused on every rank, so no rank goes on alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch.distributed as dist

# run as a script: the repository root on the path, for the tests package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dataorder.integrations.common import check_same_on_all_ranks, consumed_state
from tests.helpers.stack_samplers import FAMILIES
from tests.integrations.test_common import loader


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for name, make in FAMILIES.items():
        dl = loader(make(rank, world))
        batches = iter(dl)
        next(batches), next(batches)
        check_same_on_all_ranks(consumed_state(dl))
        if rank == 0:
            print(f"{name}: state identical on {world} ranks", flush=True)
    try:
        check_same_on_all_ranks({"yielded": 4 * rank})
    except ValueError as err:
        refused = "rank 1 differs from rank 0 at ['yielded']" in str(err)
    else:
        refused = False
    flags = [False] * world
    dist.all_gather_object(flags, refused)
    if rank == 0 and all(flags):
        print("a per-rank state is refused on every rank", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
