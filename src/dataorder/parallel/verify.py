"""Prove a job's data-parallel partition: a collective check every rank calls once.

:func:`verify_data_parallel` gathers what each process will read and checks the three properties
that silently go wrong in 3-D parallel training:

1. **Disjoint data-parallel ranks.** No sample is read twice across (or within) the DP ranks,
   except in the padding slots the sampler declares (``samples_padded``: a repeated sample or a
   ``None`` slot). For a whole epoch read from its start the count must match exactly.
2. **Identical replicas.** All ranks of a tensor/context-parallel group (same DP rank) read
   exactly the same batches: a sampler built with the global world size instead of the DP size
   breaks this, and the model then trains on mismatched shards of different samples.
3. **Lock-step.** Every rank has the same number of batches, and at each step the DP ranks'
   batches have the same size: otherwise a collective hangs at the end of the epoch.

It also checks that the samplers on the DP ranks declare that DP size and distinct ranks. Every
rank reaches the same verdict (violations are exchanged before anything is raised), so a
violation raises :class:`DataParallelError` on all ranks instead of hanging some of them.

Groups. With ``mesh=`` the DP ranks are gathered over the mesh's data-parallel dims (one dim
after the other, e.g. ``dp_replicate`` then ``dp_shard``) and the replicas over the others, with
``mesh.get_group(dim)``; with ``dp_group=`` (and ``replica_group=``) over those groups; otherwise
over the default process group, taken as all data-parallel; without ``torch.distributed`` (or
before it is initialised) the process is alone, and the checks still run on its own data.

Cost: each DP rank's indices travel to every DP rank (``all_gather_object`` of int64 arrays),
replicas exchange only a digest. Check the first ``num_batches`` batches of a large epoch. With
NCCL, ``all_gather_object`` needs ``torch.cuda.set_device(local_rank)`` to have been called.

Example (one process):
    >>> from dataorder.parallel.distributed import DistributedSampler
    >>> report = verify_data_parallel(DistributedSampler(range(10), 1, 0))
    >>> report.num_batches, report.full_epoch, report.padding_slots
    (10, True, 0)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_bool, check_int, check_optional_int
from dataorder.core.batching import BATCHES, BatchRule, coverage, rule_of
from dataorder.core.cursor import CursorSampler
from dataorder.core.topology import data_parallel_dims, data_parallel_topology
from dataorder.parallel.checks import (
    check_dp,
    check_replicas,
    digest,
    head,
    read_items,
    spans_of,
)

__all__ = ["DataParallelError", "DataParallelReport", "verify_data_parallel"]

IntArray = npt.NDArray[np.int64]


class DataParallelError(RuntimeError):
    """The data-parallel partition is wrong; raised on every rank by :func:`verify_data_parallel`.

    Attributes:
        violations: One line per violation, identical on every rank.
    """

    def __init__(self, violations: Sequence[str]) -> None:
        self.violations: tuple[str, ...] = tuple(violations)
        count = len(self.violations)
        lines = "\n".join(f"  - {v}" for v in self.violations)
        plural = "" if count == 1 else "s"
        super().__init__(f"data-parallel check failed ({count} violation{plural}):\n{lines}")


@dataclass(frozen=True)
class DataParallelReport:
    """What :func:`verify_data_parallel` checked, as seen from the calling process.

    Attributes:
        dp_rank: This process's position in the data-parallel group.
        dp_size: Size of the data-parallel group.
        replica_rank: This process's position among the ranks that must read identical data.
        replica_size: Size of that replica group (1 if none).
        epoch: The sampler's epoch that was read, or None if the source has no epoch.
        num_batches: Items read on every rank (batches, or indices for a per-index sampler).
        batched: Whether the items are batches.
        slots: Units read over all DP ranks, padding included: slots of samples, or the
            tokens of packed rows (:attr:`unit`; NOTE [ Coverage ] in
            :mod:`dataorder.core.batching`).
        distinct_samples: Distinct units among them (samples, or tokens).
        padding_slots: Units that are padding: repeats of a sample already read, ``None``
            slots, the empty tokens of rows.
        allowed_padding: Padding the sampler declares (``samples_padded``), or the caller's.
        full_epoch: True if a whole epoch was read from its start; then ``padding_slots`` must
            equal ``allowed_padding``, otherwise it must not exceed it.
        violations: What is wrong, one line each, identical on every rank; empty if the
            partition is correct (only seen with ``raise_on_error=False``).
        unit: What the counts count: ``"sample"`` or ``"token"``.
    """

    dp_rank: int
    dp_size: int
    replica_rank: int
    replica_size: int
    epoch: int | None
    num_batches: int
    batched: bool
    slots: int
    distinct_samples: int
    padding_slots: int
    allowed_padding: int
    full_epoch: bool
    violations: tuple[str, ...] = ()
    unit: str = "sample"

    @property
    def ok(self) -> bool:
        """True if no rank found a violation."""
        return not self.violations

    def __str__(self) -> str:
        if self.violations:
            return str(DataParallelError(self.violations))
        what = "batches" if self.batched else "indices"
        span = "the whole epoch" if self.full_epoch else f"the first {self.num_batches} {what}"
        return (
            f"data-parallel partition OK over {span}"
            + (f" of epoch {self.epoch}" if self.epoch is not None else "")
            + f": {self.dp_size} DP ranks x {self.replica_size} replicas, {self.num_batches} "
            f"{what} each, {self.distinct_samples} distinct {self.unit}s in {self.slots} "
            f"{'slots' if self.unit == 'sample' else self.unit + 's'} "
            f"({self.padding_slots} padding, {self.allowed_padding} declared)"
        )


# -- local collection ---------------------------------------------------------------------------


def _declaring(source: object) -> Any:
    """The sampler behind ``source`` (itself, or a DataLoader's batch sampler or sampler)."""
    candidates = [source]
    batch_sampler = getattr(source, "batch_sampler", None)
    if batch_sampler is not None:
        candidates += [batch_sampler, getattr(batch_sampler, "sampler", None)]
    candidates.append(getattr(source, "sampler", None))
    for c in candidates:
        if c is not None and hasattr(c, "samples_padded"):
            return c
    for c in candidates:
        if c is not None and hasattr(c, "set_epoch"):
            return c
    return None


def _declared_topology(sampler: Any) -> tuple[int, int] | None:
    topo = getattr(sampler, "topology", None)
    if topo is not None and hasattr(topo, "dp_rank"):
        return int(topo.dp_rank), int(topo.dp_size)
    for rank_name, size_name in (
        ("data_parallel_rank", "data_parallel_size"),
        ("rank", "num_replicas"),
    ):
        rank, size = getattr(sampler, rank_name, None), getattr(sampler, size_name, None)
        if isinstance(rank, int) and isinstance(size, int):
            return rank, size
    return None


def _ordered(source: object) -> tuple[CursorSampler[Any], int, bool] | None:
    """``(sampler, batch_size, drop_last)`` if ``source`` reads a dataorder sampler's order.

    ``source`` is the sampler itself (batch size 1: its items as they are), a DataLoader whose
    batch sampler is one (its items are the loader's batches), or a DataLoader that batches a
    per-index one (``batch_size`` items per batch, the loader's ``drop_last``).
    """
    if isinstance(source, CursorSampler):
        return source, 1, False
    batch_sampler = getattr(source, "batch_sampler", None)
    if isinstance(batch_sampler, CursorSampler):
        return batch_sampler, 1, False
    inner = getattr(batch_sampler, "sampler", None)
    size = getattr(batch_sampler, "batch_size", None)
    if isinstance(inner, CursorSampler) and isinstance(size, int) and size >= 1:
        return inner, size, bool(getattr(batch_sampler, "drop_last", False))
    return None


def _read_order(
    sampler: Any, batch_size: int, drop_last: bool, *, num_batches: int | None, epoch: int | None
) -> tuple[list[Any], int, bool]:
    """Items of the pass ``epoch`` (default: the next ``iter()``'s), asked of ``batch_at``.

    Returns ``(items, epoch, full)``: ``full`` is True for a whole epoch read from its start.
    """
    if epoch is None:
        epoch, start = sampler.upcoming()
    else:
        start = 0
    steps = sampler.epoch_plan(epoch).num_steps
    stop = steps
    if num_batches is not None:
        stop = min(steps, start + num_batches * batch_size)
    items = [sampler.batch_at(k, epoch=epoch) for k in range(start, stop)]
    if batch_size > 1:
        cut = len(items) - len(items) % batch_size if drop_last else len(items)
        items = [items[i : i + batch_size] for i in range(0, cut, batch_size)]
        if num_batches is not None:
            items = items[:num_batches]
    return items, epoch, start == 0 and stop == steps


def _collect(
    source: Iterable[Any], *, num_batches: int | None, epoch: int | None
) -> dict[str, Any]:
    """Read this rank's items; a dataorder sampler's order is read without moving its cursor."""
    sampler = _declaring(source)
    # the sampler's own rule, if it declares one (else the items tell: indices or batches)
    declared_rule: BatchRule | None = getattr(sampler, "batching", None)
    payload: dict[str, Any] = {
        "declared": _declared_topology(sampler) if sampler is not None else None,
        "allowed": getattr(sampler, rule_of(sampler).padded_counter, None),
        "epoch": None,
        "full": False,
        **read_items([], declared_rule or BATCHES),
        "errors": [],
    }
    saved_epoch = None
    ordered = _ordered(source)
    if ordered is None and sampler is not None and isinstance(getattr(sampler, "epoch", None), int):
        saved_epoch = sampler.epoch
    epoch_read: int | None
    try:
        rule: BatchRule | None = None
        if ordered is not None:
            items, epoch_read, full = _read_order(*ordered, num_batches=num_batches, epoch=epoch)
            # as the sampler yields them, or batched by the loader (then batches of its slots)
            rule = rule_of(ordered[0]) if ordered[1] == 1 else BATCHES
        else:
            if epoch is not None and sampler is not None:
                sampler.set_epoch(epoch)
            epoch_read = epoch if epoch is not None else getattr(sampler, "epoch", None)
            items = []
            full = True
            for i, item in enumerate(source):
                if num_batches is not None and i >= num_batches:
                    full = False
                    break
                items.append(item)
            full = full and sampler is not None
        if rule is None and source is sampler and declared_rule is not None:
            rule = declared_rule  # a sampler iterated as it is: its items are its own
        payload.update(
            read_items(items, rule),
            epoch=epoch_read if isinstance(epoch_read, int) else None,
            full=bool(full),
        )
    except Exception as err:  # reported through the collective verdict, never raised alone
        payload["errors"] = [f"reading the items failed: {type(err).__name__}: {err}"]
    finally:
        if saved_epoch is not None:
            sampler.set_epoch(saved_epoch)
    return payload


# -- collectives --------------------------------------------------------------------------------

Gather = Callable[[Any], list[Any]]


def _group_gather(group: Any) -> Gather:
    import torch.distributed as dist

    def gather(obj: Any) -> list[Any]:
        out: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(out, obj, group=group)
        return out

    return gather


def _nested(obj: Any, gathers: Sequence[Gather]) -> list[Any]:
    """Gather over several groups in turn (a grid's dims); return the flat list of leaves."""
    leaves: list[Any] = [obj]
    for gather in gathers:
        leaves = [leaf for chunk in gather(leaves) for leaf in chunk]
    return leaves


def _groups(
    mesh: Any, dp_dims: Sequence[str] | str | None, dp_group: Any, replica_group: Any
) -> tuple[tuple[int, int, int, int], list[Gather], list[Gather]]:
    """``((dp_rank, dp_size, replica_rank, replica_size), dp gathers, replica gathers)``."""
    if mesh is not None:
        if dp_group is not None or replica_group is not None:
            raise ValueError(
                "mesh and dp_group/replica_group are exclusive; got mesh and "
                f"dp_group={dp_group!r}, replica_group={replica_group!r}"
            )
        topo = data_parallel_topology(mesh, dp_dims)
        dp, replicas = data_parallel_dims(mesh, dp_dims)
        where = (topo.dp_rank, topo.dp_size, topo.replica_rank, topo.replica_size)
        return (
            where,
            [_group_gather(mesh.get_group(d)) for d in dp],
            [_group_gather(mesh.get_group(d)) for d in replicas],
        )
    if dp_dims is not None:
        raise ValueError(f"dp_dims needs a mesh; got dp_dims={dp_dims!r} and mesh=None")
    import torch.distributed as dist

    if dp_group is None and replica_group is not None:
        raise ValueError(
            "replica_group needs dp_group; got replica_group and dp_group=None (pass both, or "
            "mesh=)"
        )
    if not (dist.is_available() and dist.is_initialized()):
        if dp_group is not None:
            raise ValueError(
                "dp_group needs an initialised torch.distributed; got dp_group and no process group"
            )
        return (0, 1, 0, 1), [], []
    rep = (0, 1)
    rep_gathers: list[Gather] = []
    if replica_group is not None:
        rep = (dist.get_rank(replica_group), dist.get_world_size(replica_group))
        rep_gathers = [_group_gather(replica_group)]
    return (
        (dist.get_rank(dp_group), dist.get_world_size(dp_group), *rep),
        [_group_gather(dp_group)],
        rep_gathers,
    )


def _verify(
    payload: dict[str, Any],
    where: tuple[int, int, int, int],
    dp_gathers: Sequence[Gather],
    replica_gathers: Sequence[Gather],
    allowed_padding: int | None,
    raise_on_error: bool = True,
) -> DataParallelReport:
    """The collective part of :func:`verify_data_parallel`, with the gathers injected."""
    dp_rank, dp_size, replica_rank, replica_size = where
    payload = {**payload, "dp_rank": dp_rank}
    dp_payloads = sorted(_nested(payload, dp_gathers), key=lambda p: p["dp_rank"])
    violations = check_dp(dp_payloads, allowed_padding)
    if len(dp_payloads) != dp_size:
        violations.append(
            f"gathered {len(dp_payloads)} DP ranks but this process's DP size is {dp_size}"
        )
    entry = {
        "dp_rank": dp_rank,
        "replica_rank": replica_rank,
        "digest": digest(payload),
        "count": len(payload["sizes"]),
        "head": head(payload),
        "failed": bool(payload["errors"]),
    }
    replicas = sorted(_nested(entry, replica_gathers), key=lambda e: e["replica_rank"])
    violations += check_replicas(replicas)
    # Share every verdict along the DP dims, then the replica dims: the grid is connected that
    # way, so every rank raises (or returns) together and none waits in a later collective.
    shared = _nested(violations, [*dp_gathers, *replica_gathers])
    merged = list(dict.fromkeys(v for vs in shared for v in vs))
    if merged and raise_on_error:
        raise DataParallelError(merged)
    covered = coverage(spans_of(dp_payloads))
    padded = sum(int(p["padding"]) for p in dp_payloads)
    allowed = allowed_padding if allowed_padding is not None else (payload["allowed"] or 0)
    return DataParallelReport(
        dp_rank=dp_rank,
        dp_size=dp_size,
        replica_rank=replica_rank,
        replica_size=replica_size,
        epoch=payload["epoch"],
        num_batches=len(payload["sizes"]),
        batched=payload["batched"],
        slots=covered.units + padded,
        distinct_samples=covered.distinct,
        padding_slots=covered.repeated + padded,  # what padding_units gives, one coverage less
        allowed_padding=int(allowed),
        full_epoch=all(p["full"] for p in dp_payloads),
        violations=tuple(merged),
        unit=payload["unit"],
    )


def _checked_epoch(source: object, epoch: object) -> int | None:
    """``epoch`` checked, and refused for a source that cannot set an epoch."""
    if epoch is None:
        return None
    checked = check_int("epoch", epoch, min_value=0)
    if not hasattr(_declaring(source), "set_epoch"):
        raise ValueError(
            f"epoch needs a source with set_epoch (a sampler, or a DataLoader over one); "
            f"got epoch={checked} and a {type(source).__name__}"
        )
    return checked


def verify_data_parallel(
    source: Iterable[Any],
    *,
    mesh: Any = None,
    dp_dims: Sequence[str] | str | None = None,
    dp_group: Any = None,
    replica_group: Any = None,
    num_batches: int | None = None,
    epoch: int | None = None,
    allowed_padding: int | None = None,
    raise_on_error: bool = True,
) -> DataParallelReport:
    """Check, collectively, that the data-parallel ranks read a correct partition.

    Every process of the groups involved must call it (it runs ``all_gather_object``), with the
    same ``num_batches`` and ``epoch``. See the module docstring for what is checked.

    Args:
        source: A dataorder sampler (per-index or batched), any sampler or iterable of indices or
            of batches of indices (``None`` marks a padding slot), or a ``DataLoader`` whose
            batches are index tensors. A dataorder sampler (also behind a DataLoader) is read
            and then put back exactly: its cursor does not move. Another sampler with an
            ``epoch`` gets that epoch set back; other iterables are consumed.
        mesh: A ``DeviceMesh``: DP ranks along ``dp_dims``, replicas along the other dims.
        dp_dims: The mesh's data-parallel dims (default: dims named ``dp``, ``dp_replicate``,
            ``dp_shard``, ``data_parallel``).
        dp_group: Without a mesh, the data-parallel process group (default: the whole world).
        replica_group: Without a mesh, the group of ranks that must read identical data.
        num_batches: Read only the first ``num_batches`` items (batches, or indices for a
            per-index sampler). Default: to the end of the epoch.
        epoch: Read this epoch from its beginning (the sampler's ``set_epoch``). Default: what
            the sampler's next ``iter()`` yields.
        allowed_padding: Padding slots allowed over all DP ranks. Default: the sampler's
            ``samples_padded`` (for a DataLoader, its sampler's), else 0.
        raise_on_error: Raise :class:`DataParallelError` on a violation (default), or return
            a report whose ``ok`` is False and whose ``violations`` say why.

    Returns:
        The :class:`DataParallelReport` of this process.

    Raises:
        DataParallelError: On every rank, if any rank finds a violation and
            ``raise_on_error`` is True.
        TypeError, ValueError: If an argument is invalid (before any collective).
    """
    num_batches = check_optional_int("num_batches", num_batches, min_value=1)
    epoch = _checked_epoch(source, epoch)
    if allowed_padding is not None:
        allowed_padding = check_int("allowed_padding", allowed_padding, min_value=0)
    raise_on_error = check_bool("raise_on_error", raise_on_error)
    if not isinstance(source, Iterable):
        raise TypeError(
            f"source must be a sampler or an iterable of indices or batches; got source={source!r}"
        )
    where, dp_gathers, replica_gathers = _groups(mesh, dp_dims, dp_group, replica_group)
    payload = _collect(source, num_batches=num_batches, epoch=epoch)
    return _verify(payload, where, dp_gathers, replica_gathers, allowed_padding, raise_on_error)
