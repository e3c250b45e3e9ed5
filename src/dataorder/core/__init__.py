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
``buckets``               the batching "runs of buckets", sequential or interleaved
``lockstep``              the batching "steps of buckets by counts": elastic on any layout
``state``                 the checkpoint format: flat, versioned, strict, fingerprinted
``cursor``                the loop contract: epochs, ``len()``, resume, ``batch_at``
``runcount``              where epochs start in a run-wide count (``consumed_samples``)
``topology``              where a process sits: a ``Topology`` value, detected at the edge
``batching``              what one step of one rank holds, and what its slots cover
``schema``                what a sampler declares: fields, layout, extras, compat modes
``assembly``              a sampler assembled from its declaration: state, ``from_state``
``readonly``              ``ReadOnly``: a sampler's configuration read back, one line each
========================  ====================================================================

Exported here: what a user of the order and a sampler author need. The pieces a sampler declares
itself with (``Field``, ``Given``, ``Mode`` ...) are in :mod:`dataorder.core.schema` (also
importable from :mod:`dataorder.core.assembly`), the rules in :mod:`dataorder.core.batching`
(NOTE [ Adding a sampler or a compat mode ]).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataorder._lazy import lazy_exports

#: Every public name of the package -> the module that defines it (one list: ``__all__`` and the
#: lazy import both read it; tests/test_static.py checks the typing block below against it).
_EXPORTS: dict[str, str] = {
    "Apportionment": "apportion",
    "AssembledSampler": "assembly",
    "CursorBatchSampler": "cursor",
    "CursorSampler": "cursor",
    "EpochBlocks": "partition",
    "EpochPlan": "cursor",
    "Permutation": "permutation",
    "Schema": "assembly",
    "SegmentPlan": "partition",
    "Topology": "topology",
    "data_parallel_dims": "topology",
    "data_parallel_topology": "topology",
    "derive_key": "keys",
    "permute_many": "permutation",
    "plan_epoch": "partition",
    "plan_segments": "partition",
    "quantize_weights": "apportion",
    "resolve_topology": "topology",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers only: what __getattr__ returns
    from dataorder.core.apportion import Apportionment as Apportionment
    from dataorder.core.apportion import quantize_weights as quantize_weights
    from dataorder.core.assembly import AssembledSampler as AssembledSampler
    from dataorder.core.assembly import Schema as Schema
    from dataorder.core.cursor import CursorBatchSampler as CursorBatchSampler
    from dataorder.core.cursor import CursorSampler as CursorSampler
    from dataorder.core.cursor import EpochPlan as EpochPlan
    from dataorder.core.keys import derive_key as derive_key
    from dataorder.core.partition import EpochBlocks as EpochBlocks
    from dataorder.core.partition import SegmentPlan as SegmentPlan
    from dataorder.core.partition import plan_epoch as plan_epoch
    from dataorder.core.partition import plan_segments as plan_segments
    from dataorder.core.permutation import Permutation as Permutation
    from dataorder.core.permutation import permute_many as permute_many
    from dataorder.core.topology import Topology as Topology
    from dataorder.core.topology import data_parallel_dims as data_parallel_dims
    from dataorder.core.topology import data_parallel_topology as data_parallel_topology
    from dataorder.core.topology import resolve_topology as resolve_topology


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
