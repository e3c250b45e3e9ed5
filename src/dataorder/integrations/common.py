"""What every stack integration needs: the sampler inside a loader, its consumed state, a restore.

A training stack checkpoints one of three things: the sampler, a torchdata
``StatefulDataLoader`` (whose state embeds the sampler's, taken when each batch was dispatched),
or nothing at all (Megatron-LM's ``consumed_train_samples``, HF Trainer's step count). What must
go into a checkpoint is the sampler's state *as training consumed it*, which is the sampler's own
``state_dict()`` only in a loader without workers; a loader with workers runs the sampler ahead,
and torchdata's snapshot of the last batch handed out is the consumed state
(NOTE [ The consumed state ]).

The state is global (:mod:`dataorder.core.state`): every data-parallel rank holds the same dict, so
one rank's copy restores every rank, at any data-parallel size where the sampler is elastic.
:func:`check_same_on_all_ranks` proves that on a live job.

Nothing here assumes what a batch holds: a batch may be a list of ints, a micro-batch of
structured rows (document spans), or padding slots. Everything goes through the samplers' public
API (``state_dict``, ``load_state_dict``, ``set_epoch``, ``epoch``) and
:func:`dataorder.core.state.find_sampler_states`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from dataorder._validate import fail
from dataorder.core.state import find_sampler_states

__all__ = [
    "check_same_on_all_ranks",
    "consumed_state",
    "find_sampler",
    "import_peer",
    "is_batch_sampler",
    "restore",
    "sampler_state_from_loader_state",
]

# NOTE [ The consumed state ]
#     torchdata's StatefulDataLoader records the sampler's state when it dispatches each batch
#     and hands out, with ``state_dict()``, the record of the last batch it returned: the state
#     training consumed, whatever the workers prefetched. With ``num_workers=0`` it sits at the
#     top level (``_index_sampler_state`` for a ``batch_sampler``,
#     ``_sampler_iter_state.sampler_state`` for a ``sampler`` batched by torchdata's
#     ``BatchSampler``); with workers it is the snapshot ``_snapshot._main_snapshot`` plus
#     ``_steps_since_snapshot`` batches handed out after it (``snapshot_every_n_steps > 1``).
#     Those steps are not in the snapshot: a restore from it alone replays them. So the helper
#     refuses such a state unless it is given the sampler to count them with, and counts them
#     from the snapshot's own state (``sampler.state_after(snapshot, steps)``, a pure function
#     of the state: the live sampler, whose loop may have moved to another epoch since, and its
#     dataset, which may hold a lock or an open file, are never copied or touched).
#     Stacks that checkpoint on snapshot steps (torchtitan passes ``snapshot_every_n_steps``
#     equal to its checkpoint interval) never meet the refusal.


def import_peer(module: str, install: str, *, needed_by: str) -> ModuleType:
    """Import a training stack that dataorder does not depend on, or say how to install it.

    Args:
        module: The module to import, e.g. ``"transformers"``.
        install: The pip line that installs it, e.g. ``"pip install transformers"``.
        needed_by: What needs it, for the message, e.g. ``"dataorder.integrations.hf_trainer"``.

    Raises:
        ImportError: Naming ``module``, what needs it, the original error and ``install``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{needed_by} needs {module}, which is not importable here ({err}); "
            f"install it with: {install}"
        ) from err


def is_batch_sampler(sampler: object) -> bool:
    """Whether ``sampler`` yields whole batches (``batch_sampler=`` in a loader).

    A dataorder batch sampler (Megatron, blended, bucket, packed) is its own ``sampler``
    attribute, where torch's ``BatchSampler`` holds the index sampler it batches.
    """
    return getattr(sampler, "sampler", None) is sampler


def _has_state(obj: object) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


def _is_dataorder_sampler(obj: object) -> bool:
    if not _has_state(obj) or not callable(getattr(obj, "set_epoch", None)):
        return False
    found = find_sampler_states(obj.state_dict())  # type: ignore[attr-defined]
    return [path for path, _ in found] == ["(top level)"]


def _is_loader(obj: object) -> bool:
    import torch.utils.data

    return isinstance(obj, torch.utils.data.DataLoader)


def find_sampler(loader_or_sampler: object) -> Any:
    """The dataorder sampler a loader reads (or the sampler itself).

    Looked for, in order: the object itself, ``loader.batch_sampler`` (a dataorder batch
    sampler), ``loader.batch_sampler.sampler`` (an index sampler batched by torch's or
    torchdata's ``BatchSampler``), ``loader.sampler``.

    Raises:
        TypeError: If none of them is a dataorder sampler.
    """
    obj = loader_or_sampler
    batch_sampler = getattr(obj, "batch_sampler", None)
    # a loader's own state_dict() would start an iterator: it is never asked
    candidates = [
        None if _is_loader(obj) else obj,
        batch_sampler,
        getattr(batch_sampler, "sampler", None),
        getattr(obj, "sampler", None),
    ]
    for candidate in candidates:
        if candidate is not None and _is_dataorder_sampler(candidate):
            return candidate
    fail(
        "loader_or_sampler",
        "a dataorder sampler or a DataLoader whose sampler or batch_sampler is one",
        obj,
        TypeError,
    )


def sampler_state_from_loader_state(
    loader_state: Mapping[str, Any],
    *,
    sampler: Any = None,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """The sampler's consumed state inside a torchdata ``StatefulDataLoader`` state.

    Reads both layouts (no workers; workers: the snapshot), see NOTE [ The consumed state ].
    The result is a new dict; ``loader_state`` is not modified.

    Args:
        loader_state: ``StatefulDataLoader.state_dict()``.
        sampler: The loader's dataorder sampler. Needed only for a state taken
            ``_steps_since_snapshot > 0`` batches after its snapshot: it counts those batches
            from the snapshot's state (``state_after``; the sampler is not copied or moved).
        batch_size: With ``sampler`` a per-index sampler: the loader's batch size (a step is
            that many items of the sampler; the last batch of an epoch may be shorter).

    Raises:
        TypeError: If ``loader_state`` is not a mapping.
        ValueError: If it holds no dataorder sampler state, or more than one, or steps were
            taken since its snapshot and ``sampler`` is None.
    """
    if not isinstance(loader_state, Mapping):
        fail("loader_state", "a StatefulDataLoader state dict", loader_state, TypeError)
    snapshot = loader_state.get("_snapshot")
    source: Any = loader_state
    steps = 0
    if isinstance(snapshot, Mapping):  # a loader with workers
        source = snapshot.get("_main_snapshot", {})
        steps = loader_state.get("_steps_since_snapshot", 0)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            fail("loader_state['_steps_since_snapshot']", "a non-negative int", steps)
    found = find_sampler_states(dict(source))
    if len(found) != 1:
        where = ", ".join(path for path, _ in found) or "nowhere"
        raise ValueError(
            "loader_state must hold exactly one dataorder sampler state; found it at "
            f"{where} (is the loader's sampler or batch_sampler a dataorder sampler?)"
        )
    state = dict(found[0][1])
    if steps == 0:
        return state
    if sampler is None:
        raise ValueError(
            f"loader_state was taken {steps} batches after its last worker snapshot "
            "(snapshot_every_n_steps > 1), and the snapshot alone would replay them: pass "
            "sampler= to count them, or checkpoint on snapshot steps; got "
            f"loader_state['_steps_since_snapshot']={steps!r}"
        )
    return _advance(sampler, state, steps, batch_size)


def _advance(
    sampler: Any, state: dict[str, Any], steps: int, batch_size: int | None
) -> dict[str, Any]:
    """The state ``steps`` loader batches after ``state``, counted from ``state`` itself."""
    per_step = 1 if is_batch_sampler(sampler) else batch_size
    if per_step is None:
        fail("batch_size", "the loader's batch size for a per-index sampler", batch_size)
    return dict(sampler.state_after(state, steps, batch=per_step))


def consumed_state(loader_or_sampler: object) -> dict[str, Any]:
    """The dataorder state of what training has consumed from a loader or sampler.

    For a torchdata ``StatefulDataLoader``: the sampler state inside ``loader.state_dict()``
    (NOTE [ The consumed state ]; a state taken between worker snapshots is counted forward
    from the snapshot's state). For anything else (a sampler, or a plain ``DataLoader``, exact
    only without workers): the sampler's own ``state_dict()``.

    The result is identical on every data-parallel rank.
    """
    sampler = find_sampler(loader_or_sampler)
    obj = loader_or_sampler
    if obj is not sampler and _has_state(obj) and _is_loader(obj):
        return sampler_state_from_loader_state(
            obj.state_dict(),  # type: ignore[attr-defined]
            sampler=sampler,
            batch_size=getattr(obj, "batch_size", None)
            or getattr(getattr(obj, "batch_sampler", None), "batch_size", None),
        )
    return dict(sampler.state_dict())


def restore(loader_or_sampler: object, state: Mapping[str, Any]) -> None:
    """Place the loader's sampler at ``state`` and drop what the loader would resume instead.

    A ``StatefulDataLoader`` whose ``state_dict()`` was called without a live iterator (DCP
    does, to build its load template) has started one, and with workers that iterator
    prefetches from the old position; it is dropped here, so the next ``iter(loader)`` starts
    at ``state``. So is a loader state loaded before (``loader.load_state_dict(A)``), which the
    loader's next ``iter()`` would otherwise apply over ``state``. Loading is absolute: two
    loads in a row, of either kind, leave the second.

    Raises:
        ValueError: As the sampler's ``load_state_dict`` (another configuration, a corrupted
            state), naming the field; nothing changes then.
    """
    sampler = find_sampler(loader_or_sampler)
    sampler.state_position(dict(state))  # refused here, before the loader is touched
    obj = loader_or_sampler
    if obj is not sampler and _has_state(obj) and _is_loader(obj):
        _drop_pending_loader_state(obj)
    sampler.load_state_dict(dict(state))


def _drop_pending_loader_state(loader: Any) -> None:
    """Drop a ``StatefulDataLoader``'s running iterator and the state it would load next."""
    loader.load_state_dict({})  # drops the iterator (a template's, with prefetching workers)
    # torchdata 0.11's load_state_dict({}) returns before it clears ``next_iter_state``, the
    # state a previous load_state_dict(A) left for the next iter() to apply: A would then win
    # over the sampler state placed after it. Clearing it is what load_state_dict(B) itself
    # does to A (it replaces it); a loader without the attribute has nothing pending.
    if getattr(loader, "next_iter_state", None) is not None:
        loader.next_iter_state = None


def check_same_on_all_ranks(state: Mapping[str, Any], group: Any = None) -> None:
    """Raise on every rank unless ``state`` is the same dict on all ranks of ``group``.

    A global state is what lets one rank's copy (DCP's de-duplication, NeMo's rank-0
    ``sampler.pt``, Accelerate's single ``dl_state_dict.bin``) restore every rank. A collective:
    every rank of ``group`` must call it. Without a process group it returns at once.

    Raises:
        ValueError: On every rank, naming the ranks and keys that differ from rank 0's.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, dict(state), group=group)
    first = gathered[0]
    differs = []
    for rank, other in enumerate(gathered):
        keys = sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))
        if keys:
            differs.append(f"rank {rank} differs from rank 0 at {keys}")
    if differs:
        raise ValueError(
            "the sampler state must be identical on every rank (a global state); "
            + "; ".join(differs)
        )


def lazy_classes(module: str, build: Mapping[str, Callable[[], Any]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that makes each class of ``build`` on first use (once): the
    classes subclass a stack's own, so the module imports without the stack."""
    made: dict[str, Any] = {}

    def getattr_(name: str) -> Any:
        if name not in build:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if name not in made:
            made[name] = build[name]()
        return made[name]

    return getattr_
