"""The partition checks, pure: what :func:`~dataorder.parallel.verify.verify_data_parallel`
runs on every rank after the gather, and :func:`check_items` runs on items already in one place.

Every check takes the items of each data-parallel rank (indices, ``None`` for a padding slot, or
batches of them) and returns its violations, one line each, so that every rank of a job reaches
the same verdict from the same gathered data.

Example:
    >>> check_items([[[0, 1], [4]], [[2, 3], [5]]], allowed_padding=0, full=True)
    []
    >>> problems = check_items([[[0, 1]], [[1, 2]]], allowed_padding=0)
    >>> problems[0].split(": ")[-1]
    'DP ranks 0 and 1 share 1 samples, e.g. [1]'
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from dataorder._validate import check_bool, check_int, fail

__all__ = ["check_items"]

NONE_SLOT = -1  # a None (padding) slot in the gathered arrays; real indices are >= 0
NO_PADDING_CHECK = -1  # allowed_padding=None in check_items: no declaration to compare
_MAX_EXAMPLES = 5


def as_slots(item: Any) -> list[int | None]:
    """The slots of one yielded item: an index, None, or a batch of them."""
    if item is None or isinstance(item, int | np.integer):
        return [None if item is None else int(item)]
    if isinstance(item, Sequence) and not isinstance(item, str | bytes):
        out: list[int | None] = []
        for x in item:
            if x is not None and not isinstance(x, int | np.integer):
                raise TypeError(
                    "items must be indices, None or batches of them; got an element "
                    f"{x!r} of type {type(x).__name__}"
                )
            out.append(None if x is None else int(x))
        return out
    raise TypeError(
        f"items must be indices, None or batches of them; got {type(item).__name__}: {item!r}"
    )


def slots_of(items: Iterable[Any]) -> dict[str, Any]:
    """``{"batched", "flat", "sizes"}`` of items (indices, None, or batches of them)."""
    slots: list[int | None] = []
    sizes: list[int] = []
    batched: bool | None = None
    for item in items:
        if hasattr(item, "tolist"):  # numpy arrays and scalars, torch tensors
            item = item.tolist()
        is_batch = not (item is None or isinstance(item, int | np.integer))
        if batched is None:
            batched = is_batch
        elif batched != is_batch:
            raise TypeError("items mix single indices and batches")
        got = as_slots(item)
        slots += got
        sizes.append(len(got))
    negative = [x for x in slots if x is not None and x < 0]
    if negative:
        raise ValueError(
            f"indices must be non-negative ints or None; got {negative[:_MAX_EXAMPLES]}"
        )
    return {
        "batched": bool(batched),
        "flat": np.array([NONE_SLOT if x is None else x for x in slots], dtype=np.int64),
        "sizes": np.array(sizes, dtype=np.int64),
    }


def digest(payload: Mapping[str, Any]) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(payload["sizes"].tobytes())
    h.update(payload["flat"].tobytes())
    return h.hexdigest()


def check_dp(payloads: Sequence[Mapping[str, Any]], allowed_override: int | None) -> list[str]:
    """Violations of lock-step and disjointness among the DP ranks (ordered by DP rank)."""
    out: list[str] = []
    size = len(payloads)
    for p in payloads:
        out += [f"DP rank {p['dp_rank']}: {e}" for e in p["errors"]]
    if out:
        return out
    declared = [p["declared"] for p in payloads]
    if all(d is not None for d in declared):
        sizes = sorted({d[1] for d in declared})
        ranks = sorted(d[0] for d in declared)
        if sizes != [size]:
            out.append(
                f"the samplers declare num_replicas {sizes} but the data-parallel group has "
                f"{size} ranks (with tensor or context parallelism, build the sampler with "
                "the data-parallel size, e.g. mesh=)"
            )
        elif ranks != list(range(size)):
            out.append(
                "the samplers declare ranks "
                f"{[d[0] for d in declared]} on DP ranks {list(range(size))}: each must "
                "take a different data-parallel rank"
            )
    kinds = {p["batched"] for p in payloads}
    if len(kinds) > 1:
        out.append("some DP ranks yield batches and others single indices")
    counts = [len(p["sizes"]) for p in payloads]
    if len(set(counts)) > 1:
        out.append(
            "DP ranks have different numbers of batches (a collective hangs at the end): "
            + ", ".join(f"rank {p['dp_rank']}: {c}" for p, c in zip(payloads, counts, strict=True))
        )
    common = min(counts) if counts else 0
    if common and size > 1:
        table = np.stack([p["sizes"][:common] for p in payloads])
        uneven = np.flatnonzero((table != table[0]).any(axis=0))
        if uneven.size:
            step = int(uneven[0])
            out.append(
                f"DP ranks' batch sizes differ at {uneven.size} steps, first at step {step}: "
                f"{table[:, step].tolist()}"
            )
    allowed_values = {p["allowed"] for p in payloads}
    if allowed_override == NO_PADDING_CHECK:
        return out
    if allowed_override is not None:
        allowed = allowed_override
    elif len(allowed_values) == 1:
        allowed = next(iter(allowed_values)) or 0
    else:
        out.append(f"DP ranks declare different samples_padded {sorted(allowed_values, key=str)}")
        return out
    flat = np.concatenate([p["flat"] for p in payloads])
    real = flat[flat != NONE_SLOT]
    distinct = np.unique(real)
    padding = int(flat.size - distinct.size)
    full = all(p["full"] for p in payloads)
    if padding > allowed or (full and padding != allowed):
        out.append(
            f"{padding} padding slots (repeated samples or None) over the DP ranks but the "
            f"sampler declares {allowed}"
            + (" for the whole epoch" if full else " at most")
            + _overlap_detail(payloads)
        )
    return out


def _overlap_detail(payloads: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    uniques = [np.unique(p["flat"][p["flat"] != NONE_SLOT]) for p in payloads]
    for p, u in zip(payloads, uniques, strict=True):
        real = int((p["flat"] != NONE_SLOT).sum())
        if real != u.size:
            parts.append(f"DP rank {p['dp_rank']} repeats {real - u.size} of its own samples")
    for a in range(len(payloads)):
        for b in range(a + 1, len(payloads)):
            common = np.intersect1d(uniques[a], uniques[b], assume_unique=True)
            if common.size:
                parts.append(
                    f"DP ranks {payloads[a]['dp_rank']} and {payloads[b]['dp_rank']} share "
                    f"{common.size} samples, e.g. {common[:_MAX_EXAMPLES].tolist()}"
                )
            if len(parts) >= 2 * _MAX_EXAMPLES:
                return ": " + "; ".join(parts) + "; ..."
    return (": " + "; ".join(parts)) if parts else ""


def check_replicas(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Violations among replicas (same DP rank): they must have read identical items."""
    if any(e["failed"] for e in entries):
        return []  # a rank that could not read its items is reported by its DP group
    versions: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        versions.setdefault(e["digest"], []).append(e)
    if len(versions) <= 1:
        return []
    detail = "; ".join(
        f"replica ranks {[e['replica_rank'] for e in group]} (DP ranks "
        f"{sorted({e['dp_rank'] for e in group})}) read {group[0]['count']} items starting "
        f"{group[0]['head']}"
        for group in versions.values()
    )
    return [
        f"ranks that must read identical data (tensor/context-parallel replicas) read "
        f"{len(versions)} different versions: {detail}"
    ]


def head(payload: Mapping[str, Any]) -> list[int | None] | list[list[int | None]]:
    flat = [None if x == NONE_SLOT else int(x) for x in payload["flat"][:16].tolist()]
    if not payload["batched"]:
        return flat[:4]
    first = int(payload["sizes"][0]) if len(payload["sizes"]) else 0
    return [flat[:first]]


def check_items(
    items_by_dp_rank: Sequence[Iterable[Any]],
    *,
    allowed_padding: int | None = None,
    full: bool = False,
    replicas: Sequence[Sequence[Iterable[Any]]] = (),
) -> list[str]:
    """The checks of :func:`verify_data_parallel`, on items already in one place.

    No collective: for a job's records gathered after the fact (the demo checks what every
    process trained on this way), or a test that simulates the ranks.

    Args:
        items_by_dp_rank: Each DP rank's items (indices, ``None``, or batches of them), in DP
            rank order. Empty to check only ``replicas``.
        allowed_padding: Padding slots (repeats or ``None``) the sampler declares; None skips
            the count (only the lock-step checks run).
        full: Whether the items are a whole epoch (then the padding must equal the declaration).
        replicas: Per DP rank, in DP rank order, the items of each process that must read
            identical data (its tensor/context-parallel replicas).

    Returns:
        The violations, one line each (empty if the partition is correct).
    """
    if isinstance(items_by_dp_rank, str | bytes) or not isinstance(items_by_dp_rank, Sequence):
        fail(
            "items_by_dp_rank",
            "a sequence of each DP rank's items",
            items_by_dp_rank,
            TypeError,
        )
    if allowed_padding is not None:
        allowed_padding = check_int("allowed_padding", allowed_padding, min_value=0)
    full = check_bool("full", full)
    payloads = []
    for r, items in enumerate(items_by_dp_rank):
        payload: dict[str, Any] = {"dp_rank": r, "declared": None, "allowed": None, "errors": []}
        payload.update(slots_of(items), full=full)
        payloads.append(payload)
    out = (
        check_dp(payloads, NO_PADDING_CHECK if allowed_padding is None else allowed_padding)
        if payloads
        else []
    )
    for dp_rank, group in enumerate(replicas):
        entries = []
        for i, items in enumerate(group):
            slots = {**slots_of(items), "errors": []}
            entries.append(
                {
                    "dp_rank": dp_rank,
                    "replica_rank": i,
                    "digest": digest(slots),
                    "count": len(slots["sizes"]),
                    "head": head(slots),
                    "failed": False,
                }
            )
        out += check_replicas(entries)
    return out
