"""The core: the order as a pure function, and the rules every sampler shares. No torch here.

========================  ====================================================================
module                    what it is
========================  ====================================================================
``permutation``           a random-access keyed bijection of ``range(n)`` (O(1) memory)
``keys``                  64-bit keys from ``(seed, epoch, stream, purpose)``, never seed+epoch
``apportion``             exact, monotone, random-access shares of a stream among parties
``partition``             global blocks of ``per_rank x dp_size``, tails dropped or padded
``blockplan``             the batching "fixed global blocks": an epoch filled by an order
``dealing``               the batching "blocks dealt by cost", over any per-item cost
``state``                 the checkpoint format: flat, versioned, strict, fingerprinted
``cursor``                the loop contract: epochs, ``len()``, resume, ``batch_at``
``runcount``              where epochs start in a run-wide count (``consumed_samples``)
``topology``              where a process sits: a ``Topology`` value, detected at the edge
``batching``              what one step of one rank holds, and what its slots cover
``assembly``              a sampler declared from parts: order, partition, batching, state
========================  ====================================================================

Exported here: what a user of the order and a sampler author need. The pieces a sampler declares
itself with (``Field``, ``Given``, ``Mode`` ...) are in :mod:`dataorder.core.assembly`, the rules
in :mod:`dataorder.core.batching` (NOTE [ Adding a sampler or a compat mode ]).
"""

from dataorder.core.apportion import Apportionment, quantize_weights
from dataorder.core.assembly import AssembledSampler, Schema
from dataorder.core.cursor import CursorBatchSampler, CursorSampler, EpochPlan
from dataorder.core.keys import derive_key
from dataorder.core.partition import EpochBlocks, SegmentPlan, plan_epoch, plan_segments
from dataorder.core.permutation import Permutation, permute_many
from dataorder.core.topology import (
    Topology,
    data_parallel_dims,
    data_parallel_topology,
    resolve_topology,
)

__all__ = [
    "Apportionment",
    "AssembledSampler",
    "CursorBatchSampler",
    "CursorSampler",
    "EpochBlocks",
    "EpochPlan",
    "Permutation",
    "Schema",
    "SegmentPlan",
    "Topology",
    "data_parallel_dims",
    "data_parallel_topology",
    "derive_key",
    "permute_many",
    "plan_epoch",
    "plan_segments",
    "quantize_weights",
    "resolve_topology",
]
